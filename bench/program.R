# Programs (keops_program()) against the same algorithms as R loops of rkeops calls and against
# their R peers, in one run on this machine (the options in force: BACKEND=GPU for the GPU).
#   K-means (Lloyd) N = 1e6, D = 2, K = 50, 10 iterations at most, stopped when no label changes:
#     the program, the R loop of bench/iterative.R, stats::kmeans(algorithm = "Lloyd"), same start;
#   Sinkhorn with eps-annealing, 10 iterations, N = M = 1e4: the program with a schedule, the R loop;
#   EM for a diagonal Gaussian mixture, 10 iterations (N = 1e5, K = 10, D = 5 by default): the program,
#     the R loop of LazyTensor reductions of bench/iterative.R, mclust::emVVI, same start;
#   a program of one step and one iteration against the plain call (its overhead).
# Medians of REPS runs after a warm-up. Usage: R_LIBS=lib Rscript bench/program.R
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
backend <- Sys.getenv("BACKEND", "CPU")
if (backend == "GPU") rkeops_use_gpu() else rkeops_use_cpu()
set_rkeops_options(precision = "float32")
reps <- as.integer(Sys.getenv("REPS", "5"))
N_KM <- as.numeric(Sys.getenv("KMEANS_N", "1e6"))
N_SK <- as.numeric(Sys.getenv("SINKHORN_N", "1e4"))
GMM <- as.numeric(strsplit(Sys.getenv("GMM", "1e5,10,5"), ",")[[1]])

# (the R loop keeps x on the GPU, as bench/iterative.R does)
keep <- function(x) if (backend == "GPU") keops_device(x) else x

# The median of `reps` measurements after a warm-up, each of enough runs to last 50 ms.
timed <- function(f) {
  value <- f()
  once <- system.time(f())[["elapsed"]]
  inner <- max(1L, ceiling(0.05 / max(once, 1e-4)))
  times <- vapply(seq_len(reps), function(r) system.time(for (k in seq_len(inner)) f())[["elapsed"]] / inner, 1)
  list(value = value, median = median(times))
}
line <- function(...) cat(sprintf(...), "\n", sep = "")

# ---- K-means ---------------------------------------------------------------------------------
set.seed(1)
K <- 50; D <- 2
centres <- matrix(runif(K * D, 0, 10), K, D)
x <- centres[sample(K, N_KM, replace = TRUE), ] + matrix(rnorm(N_KM * D, sd = 0.4), N_KM, D)
init <- x[sample(N_KM, K), ]
# Lloyd's passes two at a time (as keops_kmeans() runs them): the labels of the first pass in la, of
# the second in lb, each pass's changes counted against the other's, so that no step copies the
# labels (a copy of 1e6 labels was a third of a pass on the CPU); the sums and counts per cluster
# are grouped sums, O(N) on the CPU. 5 iterations: 10 passes at most.
km_labels <- keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c("x = Vi(2)", "c = Vj(2)"))
km_differ <- keops_kernel("Sum_Reduction(Abs(la - lb), 1)", c("la = Vi(1)", "lb = Vi(1)"))
km_sums <- function(l) keops_kernel(sprintf("Sum_Reduction(Equal(%s, j) * Concat(x, IntCst(1)), 1)", l),
                                    c(sprintf("%s = Vi(1)", l), "x = Vi(2)", "j = Vj(1)"))
km_centres <- keops_map("IfElse(Elem(sc, 2) - 0.5, Extract(sc, 0, 2) / Elem(sc, 2), c)", c("sc = Vj(3)", "c = Vj(2)"))
kmeans_program <- keops_program(list(
  la = km_labels, ca = km_differ, sc = km_sums("la"), c = km_centres,
  lb = km_labels, changed = km_differ, sc = km_sums("lb"), c = km_centres
), iterations = 5, until = "changed", tol = 0.5, output = c("lb", "c"))
kmeans_loop <- function(x, init, niter = 10) {
  cent <- init
  x_i <- Vi(keep(x))
  cl <- integer(nrow(x))
  for (it in seq_len(niter)) {
    new_cl <- as.vector(argmin(sqdist(x_i, Vj(cent)), index = "j"))
    if (identical(new_cl, cl)) break
    cl <- new_cl
    s <- rowsum(x, cl)
    k <- as.integer(rownames(s))
    cent[k, ] <- s / tabulate(cl, nrow(init))[k]
  }
  list(cluster = cl, centers = cent, iter = it)
}
prog <- timed(function() kmeans_program(list(x = x, c = init, j = seq_len(K), lb = matrix(0, N_KM))))
last <- rkeops:::last_run()
loop <- timed(function() kmeans_loop(x, init))
peer <- timed(function() suppressWarnings(stats::kmeans(x, init, iter.max = 10, algorithm = "Lloyd")))
agree <- mean(prog$value$lb[, 1] == peer$value$cluster)
line("K-means N=%g D=%d K=%d (%s, float32): program %.3f s (%d iterations of 2 passes; %s), R loop %.3f s, stats::kmeans %.3f s (%d iterations): %.1f x stats::kmeans, %.1f x the R loop; labels equal to stats' for %.4f of the points",
     N_KM, D, K, last$backend, prog$median, attr(prog$value, "iterations"),
     paste(sprintf("%s %.3f", names(last$timings), last$timings), collapse = ", "),
     loop$median, peer$median, peer$value$iter, peer$median / prog$median, loop$median / prog$median, agree)

# ---- Sinkhorn with eps-annealing --------------------------------------------------------------
n <- N_SK
xs <- matrix(runif(2 * n), n, 2); ys <- matrix(runif(2 * n) + 0.2, n, 2)
lmu <- matrix(-log(n), n); lnu <- matrix(-log(n), n)
eps <- 0.1 * 0.7^(0:9)
f_op <- keops_kernel("LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
                     c("x = Vi(2)", "y = Vj(2)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"))
g_op <- keops_kernel("LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
                     c("x = Vi(2)", "y = Vj(2)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"))
sinkhorn <- keops_program(list(g = g_op, f = f_op), iterations = 10)
input <- list(x = xs, y = ys, lmu = lmu, lnu = lnu, f = matrix(0, n), g = matrix(0, n), s = 1)
sk_prog <- timed(function() sinkhorn(input, schedule = list(s = 1 / eps)))
sk_loop <- timed(function() {
  f <- matrix(0, n); g <- matrix(0, n)
  for (t in 1:10) {
    g <- g_op(list(xs, ys, lmu, f, 1 / eps[t]))
    f <- f_op(list(xs, ys, lnu, g, 1 / eps[t]))
  }
  list(f = f, g = g)
})
# the kernels' share: one reduction's kernel time (GPU events of a plain call), times 20
kernel <- median(vapply(1:9, function(r) {
  g_op(list(xs, ys, lmu, matrix(0, n), 10))
  t <- rkeops:::last_run()$timings
  if ("kernel" %in% names(t)) t[["kernel"]] else NA_real_
}, 1))
line("Sinkhorn eps-annealing N=M=%g, 10 iterations: program %.2f ms, R loop %.2f ms (%.1f x); 20 kernels of a plain call %.2f ms; max |f difference| %.1e",
     n, 1e3 * sk_prog$median, 1e3 * sk_loop$median, sk_loop$median / sk_prog$median, 20e3 * kernel,
     max(abs(sk_prog$value$f - sk_loop$value$f)))

# ---- EM for a diagonal Gaussian mixture ---------------------------------------------------------
# (keops_gmm()'s operators, R/gmm.R, without its stopping rule)
gmm_program <- function(D, iterations) {
  ops <- rkeops:::gmm_operators(D)
  keops_program(ops[c("lse", "stats", "ll", "mu", "is2", "cst")], iterations = iterations, trace = "ll",
                output = c("mu", "is2", "cst"))
}
N <- GMM[1]; K <- GMM[2]; D <- GMM[3]
set.seed(N + K + D)
centres <- matrix(runif(K * D, 0, 10), K, D)
xg <- centres[sample(K, N, replace = TRUE), , drop = FALSE] + matrix(rnorm(N * D, sd = 0.3), N, D)
start <- list(w = rep(1 / K, K), mu = xg[sample(N, K), , drop = FALSE], s = matrix(apply(xg, 2, sd), K, D, byrow = TRUE))
em <- gmm_program(D, 10)
em_input <- list(x = xg, n = N, c0 = D / 2 * log(2 * pi), mu = start$mu, is2 = 1 / start$s^2,
                 cst = matrix(log(start$w) - rowSums(log(start$s)) - D / 2 * log(2 * pi)))
gmm_prog <- timed(function() em(em_input))
em_loop <- function() {   # bench/iterative.R's em_run()
  p <- start
  x <- keep(xg); x_aug <- keep(cbind(1, xg, xg^2))
  loglik <- numeric(10)
  for (it in 1:10) {
    const <- log(p$w) - rowSums(log(p$s)) - D / 2 * log(2 * pi)
    l <- Vj(matrix(const)) - 0.5 * weightedsqdist(Vi(x), Vj(p$mu), Vj(1 / p$s^2))
    lse <- logsumexp(l, index = "j")
    sums <- sum(exp(l - Vi(lse)) * Vi(x_aug), index = "i")
    P <- sums[, 1]
    mu <- sums[, 1 + seq_len(D), drop = FALSE] / P
    v <- sums[, 1 + D + seq_len(D), drop = FALSE] / P - mu^2
    loglik[it] <- sum(lse)
    p <- list(w = P / nrow(xg), mu = mu, s = sqrt(v))
  }
  loglik
}
gmm_loop <- timed(em_loop)
peer <- NULL
if (requireNamespace("mclust", quietly = TRUE)) {
  v <- start$s^2
  scale <- exp(rowMeans(log(v)))
  params <- list(pro = start$w, mean = t(start$mu),
                 variance = list(modelName = "VVI", d = D, G = K, scale = scale, shape = t(v / scale)))
  peer <- timed(function() mclust::emVVI(xg, parameters = params, warn = FALSE,
                                          control = mclust::emControl(itmax = 10, tol = c(0, sqrt(.Machine$double.eps)))))
}
ll <- attr(gmm_prog$value, "trace")$ll
line("GMM EM diagonal N=%g K=%g D=%g, 10 iterations: program %.1f ms, R loop %.1f ms (%.1f x), mclust::emVVI %s; log-likelihood of the 10th E-step: program %.7g, R loop %.7g",
     N, K, D, 1e3 * gmm_prog$median, 1e3 * gmm_loop$median, gmm_loop$median / gmm_prog$median,
     if (is.null(peer)) "not installed" else sprintf("%.1f ms (%.1f x)", 1e3 * peer$median, peer$median / gmm_prog$median),
     ll[10], gmm_loop$value[10])

# ---- one step, one iteration: the program's overhead ------------------------------------------
y <- matrix(runif(3e4), 1e4, 3); xb <- matrix(runif(3e4), 1e4, 3); b <- matrix(runif(1e4))
gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
one <- keops_program(list(s = gauss))
reps <- max(reps, 21L)
plain <- timed(function() gauss(list(xb, y, b)))
as_program <- timed(function() one(list(x = xb, y = y, b = b)))
line("One step, one iteration (Gaussian sum N=M=1e4, D=3): plain call %.3f ms, program %.3f ms: %.2f x",
     1e3 * plain$median, 1e3 * as_program$median, plain$median / as_program$median)

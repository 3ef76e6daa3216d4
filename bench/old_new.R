# The algorithm functions and programs timed with one installed rkeops, to compare two revisions of
# the engine in one call on the GPU host (issue 53: "old and new alternated", bench/old_new.sh runs
# this script with each library in turn, twice). Each case: the median of REPS runs after a warm-up,
# in ms, and a value of its result (equal across revisions up to float32 summation order).
# Usage: R_LIBS=<library> BACKEND=GPU|CPU [REPS=3] [LABEL=new] [ONLY=regex of case names] Rscript bench/old_new.R
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
source(file.path(local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(f)) dirname(f) else "bench"
}), "common.R"))
backend <- use_backend("GPU")
reps <- env_num("REPS", 3)
label <- env_str("LABEL", "?")
only <- env_str("ONLY", "")
gpu <- backend == "GPU"
# Every run starts from the same seed, so that functions that draw (keops_gmm()'s starts, kriging's
# landmarks) do the same work in every run; a run under 100 ms is timed as the mean of enough calls
# to fill 100 ms (R's timer counts whole milliseconds).
case <- function(name, f, value) {
  if (nzchar(only) && !grepl(only, name)) return(invisible())
  seeded <- function() { set.seed(99); f() }
  v <- seeded()                                          # warm-up (kernels compiled)
  optimised_kernels()
  calls <- max(1, ceiling(0.1 / max(system.time(seeded())[["elapsed"]], 1e-3)))
  ms <- vapply(seq_len(reps), function(r) 1000 * system.time(for (k in seq_len(calls)) seeded())[["elapsed"]] / calls, 0)
  emit(sprintf("%s | %s | %.2f | %s | %.8g", label, name, median(ms), paste(sprintf("%.1f", ms), collapse = " "), value(v)))
}

set.seed(1)
n <- if (gpu) 1e6 else 1e5
x <- matrix(runif(100, 0, 10), 50, 2)[sample(50, n, replace = TRUE), ] + matrix(rnorm(2 * n, sd = 0.4), n, 2)
init <- x[sample(n, 50), ]
case(sprintf("keops_kmeans N=%g D=2 K=50 10 it.", n), function() suppressWarnings(keops_kmeans(x, init, iter.max = 10)),
     function(v) v$tot.withinss)

set.seed(2)
n <- if (gpu) 5e5 else 5e4; G <- if (gpu) 1000 else 50
x <- matrix(runif(G * 5, 0, 10), G, 5)[sample(G, n, replace = TRUE), ] + matrix(rnorm(5 * n, sd = 0.3), n, 5)
case(sprintf("keops_gmm N=%g D=5 G=%g 10 it.", n, G), function() suppressWarnings(keops_gmm(x, G, iter.max = 10, tol = 0)),
     function(v) v$loglik)

torus <- function(n) {
  u <- runif(n, 0, 2 * pi); v <- runif(n, 0, 2 * pi)
  cbind((1 + 0.4 * cos(v)) * cos(u), (1 + 0.4 * cos(v)) * sin(u), 0.4 * sin(v))
}
for (ns in if (gpu) c(1e4, 1e5) else 2e3) {
  for (multiscale in c(FALSE, TRUE)) {
    set.seed(ns)
    xs <- torus(ns); ys <- torus(ns) %*% diag(c(1.2, 0.9, 1)) + 0.2
    case(sprintf("keops_sinkhorn tori N=M=%g tol=NULL multiscale=%s", ns, multiscale),
         function() suppressWarnings(keops_sinkhorn(xs, ys, blur = 0.05, multiscale = multiscale, tol = NULL)),
         function(v) as.numeric(v))
  }
  if (ns <= 1e4) case(sprintf("keops_sinkhorn tori N=M=%g tol=1e-3 dense", ns),
       function() suppressWarnings(keops_sinkhorn(xs, ys, blur = 0.05, multiscale = FALSE, tol = 1e-3)),
       function(v) as.numeric(v))
}

set.seed(4)
n <- if (gpu) 5e4 else 5e3
xk <- matrix(runif(2 * n), n, 2); zk <- sin(6 * xk[, 1]) + cos(4 * xk[, 2]) + rnorm(n, sd = 0.1)
yk <- matrix(runif(2e4), 1e4, 2)
case(sprintf("keops_krige N=%g fit + predict 1e4", n),
     function() predict(keops_krige(xk, zk, "gaussian", range = 0.1, nugget = 0.25, eps = 1e-4), yk),
     function(v) sum(v))

# log-domain Sinkhorn through keops_iterate() (a program in the engine), n = 1000 points on a line
n <- 1000
xs <- matrix(seq(0, 1, length.out = n)); ys <- matrix(seq(0, 1, length.out = n)^2)
lmu <- matrix(log(rep(1 / n, n))); lnu <- lmu
f_op <- keops_kernel("LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
                     c("x = Vi(1)", "y = Vj(1)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"))
g_op <- keops_kernel("LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
                     c("x = Vi(1)", "y = Vj(1)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"))
case("keops_iterate Sinkhorn n=1000 200 it.", function() {
  keops_iterate(list(g = g_op, f = f_op), list(x = xs, y = ys, lmu = lmu, lnu = lnu, s = 1 / 0.01,
                                              f = matrix(0, n), g = matrix(0, n)), 200)
}, function(v) sum(v$f))

# a batch of 256 such problems (n = 100 bins, as bench/batch.R's seed 001 case) in one call
B <- 256; nb <- 100
set.seed(7)
hist <- function() { h <- dnorm(seq(0, 1, length.out = nb), runif(1), runif(1, 0.05, 0.3)); matrix(log(h / sum(h))) }
xb <- matrix(seq(0, 1, length.out = nb))
batch_input <- list(x = xb, y = xb, lmu = lapply(seq_len(B), function(b) hist()),
                    lnu = lapply(seq_len(B), function(b) hist()), s = 1 / 0.01,
                    f = matrix(0, nb), g = matrix(0, nb))
case(sprintf("keops_iterate batched Sinkhorn B=%d n=%d 200 it.", B, nb),
     function() keops_iterate(list(g = g_op, f = f_op), batch_input, 200),
     function(v) sum(unlist(v$f)))

bench_dir <- dirname(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)))
# the definitions of bench/iterative.R that these cases use (its data and the vignettes' functions)
from_iterative <- function(names) {
  for (e in parse(file.path(bench_dir, "iterative.R"))) {
    if (is.call(e) && identical(e[[1]], as.name("<-")) && as.character(e[[2]])[1] %in% names) eval(e, globalenv())
  }
}
if (requireNamespace("knitr", quietly = TRUE)) {
  # the programs of the vignettes (bench/iterative.R's program rows), made once as a user keeps them
  from_iterative(c("gmm_data", "sinkhorn_data", "kmeans_data"))
  vig <- list(gmm = vignette_functions("gmm", c("lazy", "program"), root = dirname(bench_dir)),
              sinkhorn = vignette_functions("sinkhorn", c("solver", "dense", "program"), root = dirname(bench_dir)),
              kmeans = vignette_functions("kmeans", c("kmeans-function", "program"), root = dirname(bench_dir)))
  for (N in if (gpu) c(1e4, 1e5) else 2e3) {
    d <- sinkhorn_data(N)
    program <- vig$sinkhorn$sinkhorn_program(ncol(d$x), tol = 0, max_iter = 10)
    case(sprintf("Sinkhorn vignette program N=M=%g 10 it.", N),
         function() vig$sinkhorn$run_program(d$x, d$a, d$y, d$b, 0.05, n_anneal = 9, program = program),
         function(v) sum(v$f))
  }
  d <- if (gpu) gmm_data(5e5, 1000, 5) else gmm_data(5e4, 50, 5)
  program <- vig$gmm$em_program(10, 5)
  input <- vig$gmm$em_program_input(d$x, d$start)
  case(sprintf("GMM vignette program N=%g K=%g D=5 10 it.", nrow(d$x), length(d$start$w)), function() program(input),
       function(v) sum(attr(v, "trace")$ll))
  d <- if (gpu) kmeans_data(1e6, 2, 50) else kmeans_data(1e5, 2, 50)
  program <- vig$kmeans$make_kmeans_program(2, 10)
  case(sprintf("K-means vignette program N=%g D=2 K=50 10 it.", nrow(d$x)),
       function() vig$kmeans$kmeans_keops_program(d$x, d$init, 10, program), function(v) sum(v$centers))
}

if (gpu) {
  from_iterative("landmark_data")
  d <- landmark_data()
  case("keops_landmarks seed 003 1847 pts nt=40 400 it.",
       function() keops_landmarks(d$q0, d$target, sigma = 1.5, nt = 40, lambda = 5e5, iter.max = 400),
       function(v) v$value)
}

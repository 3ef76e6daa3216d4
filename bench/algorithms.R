# The algorithm functions (issue 38) against their R peers, in one run on this machine (the options
# in force: BACKEND=GPU for the GPU), float32, medians of REPS runs after a warm-up:
#   keops_kmeans()    N = 1e6, D = 2, K = 50, 10 iterations  vs stats::kmeans(algorithm = "Lloyd"), same start
#   keops_gmm() VVI   N = 1e5, D = 5, G = 10, 10 iterations  vs mclust::emVVI, same parameters
#                     (and N = 5e5, G = 1e3 on the GPU, the KeOps paper's Table 1)
#   keops_krige()     N = 5e4 (KRIGE_N), D = 2, Gaussian kernel, fit + predict at 1e4 points
#   keops_sinkhorn()  N = M = 500 in float64 against log-domain Sinkhorn to convergence in dense R
#                     and, where python3 has POT, against POT (bench/pot_sinkhorn.py) and its ot.emd2;
#                     N = M = 1e4 (SINKHORN_N) timed, blur 0.05
#   keops_landmarks() seed 003's setup (1847 landmarks, nt = 40, 400 iterations) on the GPU only
# Usage: make bench-algorithms [BACKEND=GPU] [REPS=3] [CASES=sinkhorn,krige], or R_LIBS=lib Rscript bench/algorithms.R
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
bench_dir <- local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(f)) dirname(f) else "bench"
})
source(file.path(bench_dir, "common.R"))
backend <- use_backend("CPU")
reps <- env_num("REPS", 3)
has_pkg <- function(p) requireNamespace(p, quietly = TRUE)
# CASES=kmeans,gmm,krige,sinkhorn,landmarks (default: all) runs some of them
cases <- strsplit(env_str("CASES", "kmeans,gmm,krige,sinkhorn,landmarks"), ",")[[1]]
want <- function(case) case %in% cases
median_time <- function(f) {
  f()
  optimised_kernels()
  median(vapply(seq_len(reps), function(r) system.time(f())[["elapsed"]], 0))
}
emit("# rkeops: algorithm functions against their peers (bench/algorithms.R)")
emit(sprintf("Backend %s, float32, REPS=%d; git %s; %s UTC", backend, reps, git_version(),
             format(Sys.time(), tz = "UTC")))

# ---- keops_kmeans ---------------------------------------------------------------------------
if (want("kmeans")) {
  set.seed(1)
  centres <- matrix(runif(100, 0, 10), 50, 2)
  x <- centres[sample(50, 1e6, replace = TRUE), ] + matrix(rnorm(2e6, sd = 0.4), 1e6, 2)
  init <- x[sample(1e6, 50), ]
  t_ours <- median_time(function() suppressWarnings(keops_kmeans(x, init, iter.max = 10)))
  t_peer <- median_time(function() suppressWarnings(kmeans(x, init, iter.max = 10, algorithm = "Lloyd")))
  same <- mean(suppressWarnings(keops_kmeans(x, init, iter.max = 10))$cluster ==
                 suppressWarnings(kmeans(x, init, iter.max = 10, algorithm = "Lloyd"))$cluster)
  emit(sprintf("keops_kmeans N=1e6 D=2 K=50 10 it.: %.4f s; stats::kmeans (Lloyd) %.3f s: %.1f x; same labels %.5f",
               t_ours, t_peer, t_peer / t_ours, same))
}

# ---- keops_gmm -----------------------------------------------------------------------------
if (want("gmm")) {
  gmm_case <- function(N, G, D, peer) {
    set.seed(N + G + D)
    centres <- matrix(runif(G * D, 0, 10), G, D)
    x <- centres[sample(G, N, replace = TRUE), , drop = FALSE] + matrix(rnorm(N * D, sd = 0.3), N, D)
    v <- matrix(apply(x, 2, var), G, D, byrow = TRUE)
    scale <- exp(rowMeans(log(v)))
    params <- list(pro = rep(1 / G, G), mean = t(x[sample(N, G), , drop = FALSE]),
                   variance = list(modelName = "VVI", d = D, G = G, scale = scale, shape = t(v / scale)))
    t_ours <- median_time(function() keops_gmm(x, G, iter.max = 10, tol = 0, init = params))
    text <- sprintf("keops_gmm VVI N=%g D=%d G=%g 10 it.: %.4f s", N, D, G, t_ours)
    if (peer && has_pkg("mclust")) {
      control <- mclust::emControl(itmax = 10, tol = c(0, sqrt(.Machine$double.eps)))
      t_peer <- median_time(function() mclust::emVVI(x, parameters = params, control = control, warn = FALSE))
      ll <- c(keops_gmm(x, G, iter.max = 10, tol = 0, init = params)$loglik,
              mclust::emVVI(x, parameters = params, control = control, warn = FALSE)$loglik)
      text <- sprintf("%s; mclust::emVVI %.3f s: %.1f x; log-likelihoods %.7g and %.7g", text, t_peer, t_peer / t_ours,
                      ll[1], ll[2])
    }
    emit(text)
  }
  gmm_case(1e5, 10, 5, peer = TRUE)
  if (backend == "GPU") gmm_case(5e5, 1e3, 5, peer = FALSE)
}

# ---- keops_krige ---------------------------------------------------------------------------
if (want("krige")) {
  krige_case <- function(n) {
    set.seed(2)
    xk <- matrix(runif(2 * n), n, 2)
    zk <- sin(6 * xk[, 1]) + cos(4 * xk[, 2]) + rnorm(n, sd = 0.1)
    yk <- matrix(runif(2e4), 1e4, 2)
    t_ours <- median_time(function() predict(keops_krige(xk, zk, "gaussian", range = 0.1, nugget = 0.25, eps = 1e-4), yk))
    fit <- keops_krige(xk, zk, "gaussian", range = 0.1, nugget = 0.25, eps = 1e-4)
    rmse <- sqrt(mean((predict(fit, yk) - sin(6 * yk[, 1]) - cos(4 * yk[, 2]))^2))
    emit(sprintf("keops_krige N=%g D=2 gaussian, fit + predict at 1e4: %.2f s (%d iterations, rank %d; RMSE to the truth %.4f)",
                 n, t_ours, fit$iterations, fit$rank, rmse))
  }
  krige_case(env_num("KRIGE_N", 5e4))
  if (backend == "GPU") krige_case(1e6)
}

# ---- keops_sinkhorn ------------------------------------------------------------------------
if (want("sinkhorn")) {
  dense_ot <- function(x, y, a, b, eps, iterations) {
    C <- pmax(outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y), 0) / 2
    lse <- function(M) { m <- apply(M, 1, max); m + log(rowSums(exp(M - m))) }
    f <- numeric(nrow(x)); g <- numeric(nrow(y))
    for (k in seq_len(iterations)) {
      f <- -eps * lse(sweep((matrix(g, nrow(x), nrow(y), byrow = TRUE) - C) / eps, 2, log(b), "+"))
      g <- -eps * lse(sweep((matrix(f, nrow(y), nrow(x), byrow = TRUE) - t(C)) / eps, 2, log(a), "+"))
    }
    sum(a * f) + sum(b * g)
  }
  rkeops_use_float64()
  set.seed(3)
  xs <- matrix(rnorm(1000), 500, 2); ys <- matrix(rnorm(1000, 0.5), 500, 2); w <- rep(1 / 500, 500)
  ref <- dense_ot(xs, ys, w, w, 0.1^2, 1000) - dense_ot(xs, xs, w, w, 0.1^2, 1000) / 2 -
    dense_ot(ys, ys, w, w, 0.1^2, 1000) / 2
  ours <- keops_sinkhorn(xs, ys, blur = 0.1, tol = 1e-6, max_iter = 1e4)
  emit(sprintf("keops_sinkhorn N=M=500 float64 blur 0.1: %.8g against dense R %.8g (relative %.1e)", ours, ref,
               abs(ours - ref) / abs(ref)))
  # The same problem against POT (Python Optimal Transport) where python3 has it: bench/pot_sinkhorn.py
  # prints OT_eps in GeomLoss's convention (<a, f> + <b, g>), the divergence and ot.emd2's W2^2 / 2
  # (NULL without python3, POT or a result). R's LD_LIBRARY_PATH is cleared for python3: it can hand a
  # pyenv python3 the system's libpython, and with it the system's module paths.
  pot_reference <- function(x, y, a, b, eps) {
    python <- Sys.which("python3")
    run <- function(args, ...) suppressWarnings(system2(python, args, env = "LD_LIBRARY_PATH=", ...))
    if (!nzchar(python) || run(c("-c", shQuote("import ot")), stdout = FALSE, stderr = FALSE) != 0L) return(NULL)
    csv <- function(m) {        # 17 digits: POT reads our points to the last bit
      f <- tempfile(fileext = ".csv")
      writeLines(apply(as.matrix(m), 1, function(r) paste(sprintf("%.17g", r), collapse = ",")), f)
      f
    }
    files <- c(csv(x), csv(y), csv(a), csv(b))
    on.exit(unlink(files))
    out <- run(c(shQuote(file.path(bench_dir, "pot_sinkhorn.py")), shQuote(files), sprintf("%.17g", eps)), stdout = TRUE)
    out <- setNames(sub("^[^=]*=", "", out), sub("=.*", "", out))
    if ("divergence" %in% names(out)) as.list(out) else NULL
  }
  pot <- pot_reference(xs, ys, w, w, 0.1^2)
  if (!is.null(pot)) {
    num <- function(k) as.numeric(pot[[k]])
    rel <- function(u, v) abs(u - v) / abs(v)
    emit(sprintf(paste("POT %s float64 eps 0.01 (L-BFGS then sinkhorn_log; marginals' L1 error %.1e): OT_eps %.10g",
                       "(from the plan %.10g), divergence %.10g; emd2 %.10g (%s)"),
                 pot$pot_version, num("marginal_error_xy"), num("ot_xy"), num("ot_xy_plan"), num("divergence"),
                 num("emd2"), pot$emd2_status))
    emit(sprintf("keops_sinkhorn N=M=500 float64 blur 0.1 debiased: %.10g against POT %.10g (relative %.1e)", ours,
                 num("divergence"), rel(ours, num("divergence"))))
    biased <- suppressWarnings(keops_sinkhorn(xs, ys, blur = 0.1, debias = FALSE, tol = 1e-6, max_iter = 1e4))
    emit(sprintf("keops_sinkhorn N=M=500 float64 blur 0.1 debias = FALSE: %.10g against POT %.10g (relative %.1e)",
                 biased, num("ot_xy"), rel(biased, num("ot_xy"))))
    # for information: the divergence tends to W2^2 / 2 as blur -> 0, but Sinkhorn needs of the order
    # of (diameter / blur)^2 iterations there: max_iter is reached (minutes on the CPU)
    small <- suppressWarnings(keops_sinkhorn(xs, ys, blur = 0.01, tol = 1e-5, max_iter = 1e5))
    emit(sprintf("keops_sinkhorn N=M=500 float64 blur 0.01 (%d iterations): %.8g; POT emd2 (W2^2 / 2) %.8g (rel. %.1e)",
                 attr(small, "iterations"), small, num("emd2"), rel(small, num("emd2"))))
  } else {
    emit("keops_sinkhorn against POT: skipped (no python3 with POT, pip install pot, or bench/pot_sinkhorn.py failed)")
  }
  rkeops_use_float32()
  # Timings on the KeOps paper's benchmark (its Table 6): two samples of a surface, the second
  # deformed by an affine map, D = 3, blur 0.05; GeomLoss's schedule alone (tol = NULL) and with
  # iterations until the marginals' error is below 1e-3; the solver keops_sinkhorn() chooses
  # (multiscale = "auto"), and the dense one where it is not too slow.
  torus <- function(n) {
    u <- runif(n, 0, 2 * pi); v <- runif(n, 0, 2 * pi)
    cbind((1 + 0.4 * cos(v)) * cos(u), (1 + 0.4 * cos(v)) * sin(u), 0.4 * sin(v))
  }
  sinkhorn_case <- function(n, multiscale, tol) {
    set.seed(n)
    xs <- torus(n); ys <- torus(n) %*% diag(c(1.2, 0.9, 1)) + 0.2
    run <- function() suppressWarnings(keops_sinkhorn(xs, ys, blur = 0.05, multiscale = multiscale, tol = tol))
    t_ours <- median_time(run)
    s <- run()
    emit(sprintf("keops_sinkhorn tori N=M=%g D=3 blur 0.05 tol %s multiscale %s: %.4f s (%d iterations, divergence %.6g%s)",
                 n, format(tol), multiscale, t_ours, attr(s, "iterations"), s,
                 if (is.null(attr(s, "kept"))) "" else
                 sprintf(", two scales: %s %% of the pairs kept", paste(sprintf("%.1f", 100 * attr(s, "kept")), collapse = " then "))))
  }
  for (ns in unique(c(env_num("SINKHORN_N", 1e4), if (backend == "GPU") 1e6))) {
    for (tol in list(NULL, 1e-3)) {
      sinkhorn_case(ns, "auto", tol)
      if (ns <= 1e5) sinkhorn_case(ns, FALSE, tol)
      if (ns <= 1e5) sinkhorn_case(ns, TRUE, tol)
    }
  }
}

# ---- keops_landmarks (GPU) -----------------------------------------------------------------
if (backend == "GPU" && want("landmarks")) {
  for (e in parse(file.path(bench_dir, "iterative.R"))) {   # its landmark_data()
    if (is.call(e) && identical(e[[1]], as.name("<-")) && identical(as.character(e[[2]])[1], "landmark_data")) eval(e)
  }
  d <- landmark_data()
  invisible(keops_landmarks(d$q0[1:100, ], d$target[1:100, ], sigma = 1.5, nt = 40, lambda = 5e5, iter.max = 2))
  t_ours <- median_time(function() keops_landmarks(d$q0, d$target, sigma = 1.5, nt = 40, lambda = 5e5, iter.max = 400))
  emit(sprintf("keops_landmarks seed 003 (1847 landmarks, nt = 40, 400 it.): %.2f s", t_ours))
}
if (nzchar(env_str("BENCH_OUT", ""))) writeLines(report, env_str("BENCH_OUT", ""))

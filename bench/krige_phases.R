# keops_krige() on one or several GPUs, the fit's phases: the time sample of an iteration, the Nystrom
# preconditioner, the conjugate gradients (their iterations, the preconditioner's rank), then the
# predictions at 1e4 new points. Usage, from the repository, on a GPU host (no make target: one run
# at 1e7 takes minutes):
#   KR_SIZES=1e6,1e7 COUNTS=1,2 R_LIBS=lib Rscript bench/krige_phases.R
# The data of bench/several_gpus.R's krige case (D = 2, range 0.1, nugget 0.01, eps 1e-6); a warm-up on
# 3000 points (spread, so that every GPU's kernels are loaded) before each timed fit.
suppressPackageStartupMessages(library(rkeops))
# (each phase timed by wrapping its function in the namespace)
ns <- asNamespace("rkeops")
times <- new.env()
wrap <- function(name) {
  orig <- get(name, ns)
  unlockBinding(name, ns)
  assign(name, function(...) {
    t <- proc.time()[[3]]
    on.exit(times[[name]] <- (if (is.null(times[[name]])) 0 else times[[name]]) + proc.time()[[3]] - t)
    orig(...)
  }, ns)
}
for (f in c("iteration_time", "nystrom_preconditioner", "conjugate_gradients")) wrap(f)
sizes <- as.numeric(strsplit(Sys.getenv("KR_SIZES", "1e6"), ",")[[1]])
counts <- as.integer(strsplit(Sys.getenv("COUNTS", "1,2"), ",")[[1]])
set.seed(1)
new <- matrix(runif(2e4), 1e4)
for (n in sizes) {
  x <- matrix(runif(2 * n), n); z <- sin(6 * x[, 1]) + cos(4 * x[, 2]) + rnorm(n, sd = 0.1)
  for (k in counts) {
    set_rkeops_options(device = seq_len(k) - 1L)
    Sys.setenv(RKEOPS_SPREAD_ROWS = "500")
    invisible(predict(keops_krige(x[1:3000, ], z[1:3000], range = 0.1, nugget = 0.01), new))
    Sys.unsetenv("RKEOPS_SPREAD_ROWS")
    rm(list = ls(times), envir = times)
    t0 <- proc.time()[[3]]
    fit <- keops_krige(x, z, range = 0.1, nugget = 0.01)
    t1 <- proc.time()[[3]]
    p <- predict(fit, new)
    t2 <- proc.time()[[3]]
    truth <- sin(6 * new[, 1]) + cos(4 * new[, 2])
    cat(sprintf("N %g, %d GPU(s): fit %.2f s (time sample %.2f, Nystrom %.2f, CG %.2f: %d it., rank %d, residual %.2g), predict %.2f s, total %.2f s, RMSE to truth %.4f\n",
                n, k, t1 - t0, times$iteration_time, times$nystrom_preconditioner, times$conjugate_gradients,
                fit$iterations, fit$rank, fit$residual, t2 - t1, t2 - t0, sqrt(mean((p - truth)^2))))
  }
}

# keops_landmarks() with the L-BFGS driver in the engine (optimizer = "engine", one engine call,
# keops_program_optim()) against stats::optim() in R (optimizer = "optim", one engine call and one
# reduction per evaluation), in the same run: medians of REPS timed runs (alternating) after one warm-up, the
# ratio optim / engine, and the final losses (they must agree to 1e-4 relative).
# Run from the repository root:
#   R_LIBS=lib Rscript bench/program_optim.R
#   N       landmarks (default 200), on a circle matched to a shifted ellipse
#   NT      Euler steps (default 10)
#   ITER    L-BFGS iterations (default 100)
#   REPS    timed runs per median (default 3)
#   PRECISION  float32 (default) or float64
#   BACKEND CPU (default) or GPU
library(rkeops)
env_num <- function(name, default) as.numeric(Sys.getenv(name, as.character(default)))
n <- env_num("N", 200)
nt <- env_num("NT", 10)
iter <- env_num("ITER", 100)
reps <- env_num("REPS", 3)
precision <- Sys.getenv("PRECISION", "float32")
if (toupper(Sys.getenv("BACKEND", "CPU")) == "GPU") rkeops_use_gpu() else rkeops_use_cpu()
set_rkeops_options(precision = precision)
options(rkeops.progress = FALSE)

theta <- 2 * pi * (seq_len(n) - 1) / n
q0 <- cbind(cos(theta), sin(theta))
target <- cbind(0.2 + 1.3 * cos(theta), 0.7 * sin(theta))
fit <- function(optimizer) {
  keops_landmarks(q0, target, sigma = 0.5, nt = nt, lambda = 10, iter.max = iter, optimizer = optimizer)
}
# (runs alternate between the two, so that a change in the load of a shared machine hits both)
eng <- list(fit = fit("engine"), times = numeric())  # warm-ups
opt <- list(fit = fit("optim"), times = numeric())
for (r in seq_len(reps)) {
  eng$times[r] <- system.time(eng$fit <- fit("engine"))[["elapsed"]]
  opt$times[r] <- system.time(opt$fit <- fit("optim"))[["elapsed"]]
}
eng$median <- stats::median(eng$times)
opt$median <- stats::median(opt$times)
cat(sprintf("keops_landmarks(), N = %d, nt = %d, iter.max = %d, %s, %s, %s, medians of %d after a warm-up\n",
            n, nt, iter, precision, rkeops:::last_run()$backend, format(Sys.time(), "%Y-%m-%d %H:%M"), reps))
row <- function(label, x) {
  cat(sprintf("  %-8s %8.3f s  %4d evaluations (%.2f ms each)  E = %.8g  convergence %d  (runs: %s)\n", label,
              x$median, x$fit$counts[[1L]], 1000 * x$median / x$fit$counts[[1L]], x$fit$value, x$fit$convergence,
              paste(format(x$times, digits = 3), collapse = " ")))
}
row("engine", eng)
row("optim", opt)
cat(sprintf("  ratio optim / engine: %.2f; E relative difference %.2e\n", opt$median / eng$median,
            abs(eng$fit$value - opt$fit$value) / abs(opt$fit$value)))

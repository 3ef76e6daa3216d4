# Tensor-core dot products (issue 19) from R, float32, on the GPU: the goals' cases with the
# tensor-core kernel and with the FP32 kernel (RKEOPS_GPU_TENSOR=off), medians after a warm-up,
# and how far their results are apart. Run bench/tensor_cores_peers.py in the same call for torch.
#   REPS=3 (tensor cores), FP32_REPS=1 (the FP32 kernel, slow at D = 100), BENCH_OUT=file,
#   CASES=knn100,mnist,gauss64 (a subset), SCALE=1 (divides N for a quick run).
local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
suppressMessages(library(rkeops))
rkeops_disable_verbosity()
set_rkeops_options(backend = "GPU", precision = "float32")
reps <- env_num("REPS", 3); fp32_reps <- env_num("FP32_REPS", 1); scale <- env_num("SCALE", 1)
cases <- strsplit(env_str("CASES", "knn100,mnist,gauss64"), ",")[[1]]

# Median seconds of `reps` calls after a warm-up (the compilation), with the kernel's own time,
# the kernel chosen by RKEOPS_GPU_TENSOR (`tensor`).
timed <- function(op, inputs, reps, tensor) {
  Sys.setenv(RKEOPS_GPU_TENSOR = if (tensor) "on" else "off")
  result <- op(inputs)
  t <- k <- numeric()
  for (r in seq_len(reps)) {
    t <- c(t, system.time(result <- op(inputs))[["elapsed"]])
    k <- c(k, rkeops:::last_run()$timings[["kernel"]])
  }
  list(result = result, total = median(t), kernel = median(k))
}

emit(sprintf("# Tensor cores, float32, on %s (%s, rkeops %s, load %s)", rkeops:::gpu_status()$message,
             format(Sys.time(), "%Y-%m-%d %H:%M UTC", tz = "UTC"), git_version(), load_avg()))
emit(sprintf("| case | tensor cores: from R (kernel) | FP32 kernel: from R (kernel) | ratio | results apart |"))
emit("|---|---|---|---|---|")
row <- function(name, a, b, apart, per_second = NULL) {
  rate <- if (is.null(per_second)) "" else sprintf(", %.2e queries/s", per_second / a$total)
  emit(sprintf("| %s | %.3f s (%.3f s)%s | %.3f s (%.3f s) | %.2f x | %s |", name, a$total, a$kernel, rate,
               b$total, b$kernel, b$total / a$total, apart))
}
set.seed(1)
knn <- function(n, d) {
  x <- matrix(runif(n * d), n)
  op <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 10, 0)", c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d)))
  a <- timed(op, list(x, x), reps, TRUE)
  b <- timed(op, list(x, x), fp32_reps, FALSE)
  list(a = a, b = b, apart = sprintf("%.1e of the indices differ", mean(a$result != b$result)))
}
if ("knn100" %in% cases) {
  n <- 1e6 / scale
  r <- knn(n, 100)
  row(sprintf("10-NN, N = %g, D = 100, uniform", n), r$a, r$b, r$apart, n)
}
if ("mnist" %in% cases) {
  n <- 6e4 / scale
  r <- knn(n, 784)
  row(sprintf("10-NN, N = %g, D = 784, uniform", n), r$a, r$b, r$apart, n)
}
if ("gauss64" %in% cases) {
  n <- 1e5 / scale
  x <- matrix(runif(n * 64), n); y <- matrix(runif(n * 64), n); b <- matrix(runif(n), n)
  op <- keops_kernel("Sum_Reduction(Exp(-g * SqDist(x, y)) * b, 0)", c("x = Vi(64)", "y = Vj(64)", "b = Vj(1)", "g = Pm(1)"))
  a <- timed(op, list(x, y, b, 0.1), reps, TRUE)
  f <- timed(op, list(x, y, b, 0.1), max(fp32_reps, reps), FALSE)
  row(sprintf("Gaussian sum, N = M = %g, D = 64", n), a, f,
      sprintf("largest relative difference %.1e", max(abs(a$result - f$result) / abs(f$result))))
}
Sys.unsetenv("RKEOPS_GPU_TENSOR")
out <- env_str("BENCH_OUT", "")
if (nzchar(out)) writeLines(report, out)

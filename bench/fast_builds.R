# Fast builds (RKEOPS_GPU_FAST_COMPILE=1, issue 55) on big reductions: for each formula, its first
# call (compiled in the fast build and run), a second call (the fast build still, unless the
# optimised one was swapped in meanwhile), and two calls after the optimised build is in, with
# whether their results are bit-identical. A fresh kernel cache and HOME (NVRTC's own cache).
# GPU only. Usage: [N=2e5] [RKEOPS_GPU_FAST_OPTIONS=...] [RKEOPS_GPU_NVRTC_OPTIONS=...]
#   R_LIBS=lib Rscript bench/fast_builds.R   (make bench-fast-builds)
Sys.setenv(HOME = tempfile("home-"), RKEOPS_CACHE_DIR = tempfile("cache-"), RKEOPS_GPU_FAST_COMPILE = "1")
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
if (!isTRUE(suppressWarnings(rkeops_use_gpu()))) {
  cat("no GPU here: nothing is compiled on the CPU, nothing to time\n")
  quit(status = 0)
}
rkeops_use_float32()
n <- as.numeric(Sys.getenv("N", "2e5"))
set.seed(1)
cases <- list(gaussian3 = c("Sum_Reduction(Exp(-SqDist(x, y) * 0.731) * b, 0)", 3),
              lse3 = c("LogSumExp_Reduction(b - SqDist(x, y) * 0.731, 0)", 3),
              knn3 = c("KMin_ArgKMin_Reduction(SqDist(x, y) * 0.731, 10, 0)", 3),
              softmax16 = c("SumSoftMaxWeight_Reduction(b - SqDist(x, y) * 0.731, y, 0)", 16),
              gaussian64 = c("Sum_Reduction(Exp(-SqDist(x, y) * 0.731) * b, 0)", 64))
cat(sprintf("# N = M = %g, float32, fast build options '%s', added options '%s'\n", n,
            Sys.getenv("RKEOPS_GPU_FAST_OPTIONS", "-Ofc=max"), Sys.getenv("RKEOPS_GPU_NVRTC_OPTIONS")))
cat("formula | first call s (compile s) | second call ms | optimised calls ms | bit-identical\n")
for (name in names(cases)) {
  d <- as.integer(cases[[name]][2])
  op <- keops_kernel(cases[[name]][1], c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), "b = Vj(1)"))
  x <- matrix(rnorm(n * d), n) / sqrt(d)
  y <- matrix(rnorm(n * d), n) / sqrt(d)
  b <- matrix(rnorm(n), n)
  first <- system.time(r1 <- op(list(x, y, b)))[["elapsed"]]
  compile <- rkeops:::last_run()$timings[["compile or load"]]
  second <- system.time(op(list(x, y, b)))[["elapsed"]]
  rkeops:::wait_for_kernel_builds()
  t3 <- system.time(r3 <- op(list(x, y, b)))[["elapsed"]]
  t4 <- system.time(op(list(x, y, b)))[["elapsed"]]
  cat(sprintf("%s | %.3f (%.3f) | %.1f | %.1f / %.1f | %s\n", name, first, compile, 1000 * second, 1000 * t3,
              1000 * t4, identical(r1, r3)))
}

# The Gaussian kernel sum called from R with R matrices (conversion, transfers and finalisation
# included), N = M = 10^6, D = 3, float32, on the GPU: medians of 3 runs after a warm-up.
# Run on the GPU host next to the engine benchmark (bench/gpu.sh) to read the ratio to the kernel.
library(rkeops)
set_rkeops_options(backend = "GPU", precision = "float32")
set.seed(1)
n <- 1e6
x <- matrix(runif(3 * n), n, 3); y <- matrix(runif(3 * n), n, 3); b <- matrix(runif(n), n, 1)
op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
invisible(op(list(x, y, b)))
t <- median(replicate(3, system.time(op(list(x, y, b)))[["elapsed"]]))
cat(sprintf("rkeops from R  gauss_f32 N=M=%d D=3: %.1f ms (median of 3)\n", n, t * 1e3))
run <- rkeops:::last_run()
cat("  on", run$backend, "; phases (ms):", paste(names(run$timings), round(run$timings * 1e3, 1), collapse = ", "), "\n")
t0 <- proc.time()[["elapsed"]]; invisible(op(list(x, y, b))); t1 <- proc.time()[["elapsed"]]
cat(sprintf("  one more call: %.1f ms, of which the engine's phases: %.1f ms\n", (t1 - t0) * 1e3, sum(rkeops:::last_run()$timings) * 1e3))

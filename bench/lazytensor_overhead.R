# R-side overhead of a reduction at N = M = 1000 on the CPU: the mean time of a call (200 calls timed
# together, after a warm-up) minus the mean of the engine's own phases (rkeops:::last_run()).
library(rkeops)
rkeops_use_cpu()
set.seed(1)
n <- 1000
x <- matrix(runif(3 * n), n, 3); y <- matrix(runif(3 * n), n, 3); b <- matrix(runif(n), n, 1)
overhead <- function(label, call, reps = 200) {
  invisible(call())
  engine <- numeric(reps)
  total <- system.time(for (k in seq_len(reps)) {
    invisible(call())
    engine[k] <- sum(rkeops:::last_run()$timings)
  })[["elapsed"]] / reps
  cat(sprintf("%-40s call %.3f ms, engine %.3f ms, R overhead %.3f ms (means of %d)\n",
              label, 1e3 * total, 1e3 * mean(engine), 1e3 * (total - mean(engine)), reps))
}
overhead("LazyTensor Gaussian sum, N = M = 1000:", function() sum(exp(-sqdist(Vi(x), Vj(y))) * Vj(b), index = "j"))
op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
overhead("keops_kernel operator, same data:", function() op(list(x, y, b)))

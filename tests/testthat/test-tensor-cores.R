# Formulas whose pairs read a squared distance or a dot product of vectors of dimension >= 16: on a GPU
# of compute capability >= 8.0 they run on the tensor cores (3xTF32, see the README), elsewhere on the
# FP32 kernel or the CPU. Everywhere: float32 results against plain R in float64, on uniform,
# clustered and far-from-origin points; where a GPU is found, the same with the tensor cores off
# (RKEOPS_GPU_TENSOR=off).

gpu <- rkeops:::gpu_status(0L)

# Points in float32 (what the engine computes with), n x d: uniform, 5 clusters of radius ~0.05 in
# [0, 10)^d, or uniform shifted by 1000.
points <- function(kind, n, d) {
  x <- matrix(runif(n * d), n)
  centres <- matrix(10 * runif(5 * d), 5)
  x <- switch(kind, uniform = x, clustered = centres[(seq_len(n) %% 5) + 1, ] + 0.05 * x, far = 1000 + x)
  as_f32(x)
}

# The float64 squared distances, computed term by term (no cancellation).
exact_sq_dists <- function(x, y) {
  d <- matrix(0, nrow(x), nrow(y))
  for (k in seq_len(ncol(x))) d <- d + outer(x[, k], y[, k], "-")^2
  d
}

check_large_dimension <- function(where) {
  set.seed(19)
  for (kind in c("uniform", "clustered", "far")) {
    d <- if (kind == "far") 37 else 24
    x <- points(kind, 1003, d); y <- points(kind, 517, d); b <- matrix(runif(517), 517)
    args <- c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), "b = Vj(1)", "g = Pm(1)")
    info <- sprintf("%s, %s, D = %d", where, kind, d)
    exact <- exact_sq_dists(x, y)
    # 7 nearest neighbours: each returned index at the rank's float64 distance, up to 2e-5 (near-ties).
    knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 7, 0)", args[1:2])(list(x, y))
    ranked <- t(apply(exact, 1, sort))[, 1:7]
    found <- matrix(exact[cbind(rep(seq_len(1003), 7), as.vector(knn))], 1003)
    expect_true(all(abs(found - ranked) <= 2e-5 * ranked + 1e-30), info = info)
    # Gaussian sum: within 2e-5 of float64 plus its sensitivity to the distances' rounding.
    g <- 1 / mean(ranked[, 1])
    gauss <- keops_kernel("Sum_Reduction(Exp(-g * SqDist(x, y)) * b, 0)", args)(list(x, y, b, g))
    terms <- exp(-g * exact)
    want <- terms %*% b
    expect_true(all(abs(gauss - want) <= 2e-5 * (want + (g * exact * terms) %*% b) + 1e-30), info = info)
    # Dot products reduced over i: within 1e-5 of sum_i |x_i| |y_j|.
    dots <- keops_kernel("Sum_Reduction((x | y), 1)", args[1:2])(list(x, y))
    scale <- colSums(sqrt(rowSums(x^2)) %o% sqrt(rowSums(y^2)))
    expect_true(all(abs(dots - colSums(x %*% t(y))) <= 1e-5 * scale), info = info)
  }
}

test_that("squared distances and dot products of large vectors equal float64 R (float32)", {
  old <- get_rkeops_options()
  on.exit(do.call(set_rkeops_options, old))
  set_rkeops_options(precision = "float32")
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): large dimensions checked on the CPU only, no tensor cores")
    rkeops_use_cpu()
    check_large_dimension("CPU")
    return(invisible())
  }
  rkeops_use_gpu()
  check_large_dimension("GPU, tensor cores where there are")
  Sys.setenv(RKEOPS_GPU_TENSOR = "off")
  on.exit(Sys.unsetenv("RKEOPS_GPU_TENSOR"), add = TRUE)
  check_large_dimension("GPU, FP32 kernel")
})

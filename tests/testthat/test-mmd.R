test_that("keops_mmd() equals the dense kernel norms of plain R", {
  local_precision("float64")
  set.seed(5)
  x <- matrix(rnorm(3 * 41), 41, 3)
  y <- matrix(rnorm(3 * 53, 0.5), 53, 3)
  a <- runif(41)
  a <- a / sum(a)
  b <- rep(1 / 53, 53)
  dist <- function(p, q) sqrt(Reduce(`+`, lapply(seq_len(ncol(p)), function(k) outer(p[, k], q[, k], "-")^2)))
  kernels <- list(energy = function(d) -d, gaussian = function(d) exp(-d^2 / (2 * 0.7^2)),
                  laplacian = function(d) exp(-d / 0.7))
  for (kernel in names(kernels)) {
    k <- kernels[[kernel]]
    ref <- sum(a * k(dist(x, x)) %*% a) / 2 + sum(b * k(dist(y, y)) %*% b) / 2 - sum(a * k(dist(x, y)) %*% b)
    expect_equal(keops_mmd(x, y, a, b, kernel, blur = 0.7), ref, tolerance = 1e-10, info = kernel)
  }
  expect_equal(keops_mmd(x, x, kernel = "gaussian"), 0, tolerance = 1e-12)
  expect_error(keops_mmd(x, y[, 1:2]), "'y' must be", class = "rkeops_error_input")
  expect_error(keops_mmd(x, y, blur = -1), "'blur'", class = "rkeops_error_input")
})

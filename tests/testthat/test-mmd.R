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

test_that("keops_mmd() takes the weights as given, as GeomLoss: masses 1 and 1.5 are not normalised", {
  local_precision("float64")
  set.seed(6)
  x <- matrix(rnorm(2 * 43), 43, 2)
  y <- matrix(rnorm(2 * 35, 0.3), 35, 2)
  a <- runif(43)
  a <- a / sum(a)
  b <- runif(35)
  b <- 1.5 * b / sum(b)
  dist <- function(p, q) sqrt(pmax(outer(rowSums(p^2), rowSums(q^2), "+") - 2 * tcrossprod(p, q), 0))
  kernels <- list(energy = function(d) -d, gaussian = function(d) exp(-d^2 / (2 * 0.5^2)),
                  laplacian = function(d) exp(-d / 0.5))
  for (kernel in names(kernels)) {
    k <- kernels[[kernel]]
    ref <- sum(a * k(dist(x, x)) %*% a) / 2 + sum(b * k(dist(y, y)) %*% b) / 2 - sum(a * k(dist(x, y)) %*% b)
    normalised <- ref - sum(b * k(dist(y, y)) %*% b) / 2 + sum(b * k(dist(y, y)) %*% b) / 1.5^2 / 2 -
      sum(a * k(dist(x, y)) %*% b) * (1 / 1.5 - 1)
    # (float64 sums in the GPU's order: 1.3e-9 relative on an H200)
    expect_equal(keops_mmd(x, y, a, b, kernel, blur = 0.5), ref, tolerance = 1e-8, info = kernel)
    expect_gt(abs(ref - normalised), 0.05 * abs(ref))       # the two conventions differ here
  }
  # the uniform default is 1/N: the same as weights summing to 1
  expect_equal(keops_mmd(x, y), keops_mmd(x, y, rep(1 / 43, 43), rep(1 / 35, 35)), tolerance = 1e-12)
})

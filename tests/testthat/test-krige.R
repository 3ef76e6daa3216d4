# keops_krige() against the dense kriging system solved by solve() in plain R, float64.

krige_test_data <- function(n = 403, seed = 1) {
  set.seed(seed)
  x <- matrix(runif(2 * n), n, 2)
  list(x = x, z = sin(6 * x[, 1]) + cos(4 * x[, 2]) + rnorm(n, sd = 0.1), y = matrix(runif(2 * 37), 37, 2))
}

test_that("keops_krige() equals the dense kriging predictor and variances, for each kernel", {
  local_precision("float64")
  d <- krige_test_data()
  n <- nrow(d$x)
  dist <- function(a, b) sqrt(pmax(outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b), 0)) / 0.2
  cov <- list(gaussian = function(r) exp(-r^2 / 2), laplacian = function(r) exp(-r),
              matern32 = function(r) (1 + sqrt(3) * r) * exp(-sqrt(3) * r),
              matern52 = function(r) (1 + sqrt(5) * r + 5 * r^2 / 3) * exp(-sqrt(5) * r))
  for (kernel in names(cov)) {
    K <- cov[[kernel]](dist(d$x, d$x))
    Ky <- cov[[kernel]](dist(d$y, d$x))
    A <- K + 0.01 * diag(n)
    w <- solve(A, d$z)
    fit <- keops_krige(d$x, d$z, kernel, range = 0.2, nugget = 0.01, eps = 1e-9)
    expect_s3_class(fit, "keops_krige")
    expect_equal(fit$coefficients, w, tolerance = 1e-6, info = kernel)
    expect_equal(fit$fitted.values, as.vector(K %*% w), tolerance = 1e-6, info = kernel)
    expect_equal(fit$residuals, d$z - as.vector(K %*% w), tolerance = 1e-5, info = kernel)
    p <- predict(fit, d$y, se = TRUE)
    expect_equal(p$fit, as.vector(Ky %*% w), tolerance = 1e-6, info = kernel)
    expect_equal(p$se, sqrt(1 - rowSums(Ky * t(solve(A, t(Ky))))), tolerance = 1e-6, info = kernel)
    expect_equal(predict(fit, d$y), p$fit)
  }
})

test_that("keops_krige() takes several series and observation weights (a zero weight drops a point)", {
  local_precision("float64")
  d <- krige_test_data(n = 211, seed = 2)
  n <- nrow(d$x)
  Z <- cbind(d$z, cos(3 * d$x[, 1]))
  two <- keops_krige(d$x, Z, "matern32", range = 0.3, nugget = 0.05, eps = 1e-9)
  one <- keops_krige(d$x, Z[, 2], "matern32", range = 0.3, nugget = 0.05, eps = 1e-9)
  expect_equal(dim(two$coefficients), c(n, 2L))
  expect_equal(two$coefficients[, 2], one$coefficients, tolerance = 1e-6)
  expect_equal(dim(predict(two, d$y)), c(37L, 2L))
  set.seed(3)
  wt <- runif(n)
  wt[c(2, 50)] <- 0
  keep <- wt > 0
  fit <- keops_krige(d$x, d$z, "gaussian", range = 0.3, nugget = 0.05, weights = wt, eps = 1e-10)
  r <- sqrt(pmax(outer(rowSums(d$x^2), rowSums(d$x^2), "+") - 2 * tcrossprod(d$x), 0)) / 0.3
  K <- exp(-r^2 / 2)
  w <- numeric(n)
  w[keep] <- solve(K[keep, keep] + 0.05 * diag(1 / wt[keep]), d$z[keep])
  expect_equal(fit$coefficients, w, tolerance = 1e-6)
  expect_equal(fit$fitted.values, as.vector(K %*% w), tolerance = 1e-6)
})

test_that("keops_krige() refuses bad input, naming the argument", {
  d <- krige_test_data(n = 50)
  expect_error(keops_krige(d$x, d$z[-1], range = 1, nugget = 1), "'z' must be", class = "rkeops_error_input")
  e <- expect_error(keops_krige(d$x, d$z, "cubic", range = 1, nugget = 1), "matern52", class = "rkeops_error_input")
  expect_identical(e$arg, "kernel")
  expect_error(keops_krige(d$x, d$z, range = 0, nugget = 1), "'range'", class = "rkeops_error_input")
  expect_error(keops_krige(d$x, d$z, range = 1, nugget = -1), "'nugget'", class = "rkeops_error_input")
  expect_error(keops_krige(d$x, d$z, range = 1, nugget = 1, weights = rep(-1, 50)), "'weights'",
               class = "rkeops_error_input")
  expect_error(keops_krige(d$x, d$z, range = 1, nugget = 1, weights = rep(0, 50)), "positive sum",
               class = "rkeops_error_input")
  bad <- d$x
  bad[1, 1] <- Inf
  expect_error(keops_krige(bad, d$z, range = 1, nugget = 1), "'x' must be", class = "rkeops_error_input")
  fit <- keops_krige(d$x, d$z, range = 1, nugget = 1)
  expect_error(predict(fit, matrix(0, 2, 3)), "'newdata' must be", class = "rkeops_error_input")
})

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
  expect_error(predict(fit, se = NA), "'se'", class = "rkeops_error_input")
  expect_error(plot(fit, "qq"), "residuals", class = "rkeops_error_input")
})

# The dense float64 kriging of `d` (gaussian, range 0.2, nugget 0.01) in plain R: predictions and
# standard errors at d$y, fitted values.
krige_dense_reference <- function(d, range = 0.2, nugget = 0.01) {
  dist2 <- function(a, b) outer(a[, 1], b[, 1], "-")^2 + outer(a[, 2], b[, 2], "-")^2
  K <- exp(-dist2(d$x, d$x) / (2 * range^2))
  Ky <- exp(-dist2(d$y, d$x) / (2 * range^2))
  A <- K + nugget * diag(nrow(d$x))
  w <- solve(A, d$z)
  list(fit = as.vector(Ky %*% w), se = sqrt(1 - rowSums(Ky * t(solve(A, t(Ky))))), fitted = as.vector(K %*% w))
}

test_that("keops_krige() in float32 is as accurate far from the origin (1e4, 5e6) as near it", {
  local_precision("float32")
  d <- krige_test_data(n = 347, seed = 4)
  ref <- krige_dense_reference(d)
  for (offset in c(1e4, 5e6)) {
    shift <- function(p) p + rep(offset * c(1, -0.5), each = nrow(p))
    fit <- keops_krige(shift(d$x), d$z, "gaussian", range = 0.2, nugget = 0.01)
    p <- predict(fit, shift(d$y), se = TRUE)
    # before the points were centred: 3e-3 and 0.06 (1e4), 1.5 and 0.09 (5e6)
    expect_lt(max(abs(p$fit - ref$fit)), 1e-4)
    expect_lt(max(abs(p$se - ref$se)), 1e-5)
    expect_lt(max(abs(fit$fitted.values - ref$fitted)), 1e-4)
    expect_equal(fit$center, c(0.5, 0.5) + offset * c(1, -0.5), tolerance = 0.01)
  }
})

test_that("print(), summary(), fitted(), residuals() and predict() without newdata", {
  local_precision("float64")
  d <- krige_test_data(n = 181, seed = 5)
  Z <- cbind(a = d$z, b = cos(3 * d$x[, 1]))
  wt <- rep(1, 181)
  wt[7] <- 0
  fit <- keops_krige(d$x, Z, "matern32", range = 0.3, nugget = 0.05, weights = wt, eps = 1e-10)
  printed <- utils::capture.output(out <- withVisible(print(fit)))
  expect_lte(length(printed), 25L)
  expect_match(printed, "Matern 3/2 covariance, range 0.3, nugget 0.05", all = FALSE)
  expect_match(printed, "181 observations \\(1 of weight 0\\) in 2 dimensions, 2 series", all = FALSE)
  expect_match(printed, sprintf("%d iterations.*rank %d", fit$iterations, fit$rank), all = FALSE)
  expect_false(out$visible)
  expect_identical(out$value, fit)
  s <- summary(fit)
  expect_s3_class(s, "summary.keops_krige")
  r <- (Z - fit$fitted.values)[-7, ]
  expect_equal(unname(s$residuals[, "Median"]), unname(apply(r, 2, median)))
  expect_equal(unname(s$residuals[, "RMS"]), unname(sqrt(colMeans(r^2))))
  expect_identical(rownames(s$residuals), c("a", "b"))
  expect_lte(length(utils::capture.output(print(s))), 25L)
  expect_identical(fitted(fit), fit$fitted.values)
  expect_identical(residuals(fit), fit$residuals)
  expect_identical(colnames(fit$coefficients), c("a", "b"))
  # without newdata: the fitted values, and the standard errors at the observed points (those of
  # the dense system, float64)
  expect_identical(predict(fit), fit$fitted.values)
  p <- predict(fit, se = TRUE)
  expect_identical(p$fit, fit$fitted.values)
  expect_equal(predict(fit, d$x), fit$fitted.values, tolerance = 1e-8)
  r <- sqrt(outer(d$x[, 1], d$x[, 1], "-")^2 + outer(d$x[, 2], d$x[, 2], "-")^2) / 0.3
  K <- (1 + sqrt(3) * r) * exp(-sqrt(3) * r)
  keep <- wt > 0
  A <- K[keep, keep] + 0.05 * diag(sum(keep))
  expect_equal(p$se, sqrt(1 - rowSums(K[, keep] * t(solve(A, t(K[, keep]))))), tolerance = 1e-6)
})

test_that("plot() draws observed or residuals against fitted values into a device, returns them", {
  d <- krige_test_data(n = 97, seed = 6)
  fit <- keops_krige(d$x, d$z, "gaussian", range = 0.3, nugget = 0.05)
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  out <- withVisible(plot(fit))
  expect_false(out$visible)
  expect_identical(out$value$fitted, fit$fitted.values)
  expect_equal(out$value$observed, d$z, tolerance = 1e-12)
  expect_identical(out$value$residual, fit$residuals)
  res <- plot(fit, "residuals", main = "residuals", legend = NULL)
  expect_identical(nrow(res), 97L)
})

test_that("a nugget too small for the precision warns, naming 'nugget' (not solve()'s 'alpha')", {
  local_precision("float32")
  d <- krige_test_data()
  w <- expect_warning(keops_krige(d$x, d$z, "gaussian", range = 0.2, nugget = 1e-8),
                      class = "rkeops_warning_not_positive_definite")
  expect_match(conditionMessage(w), "^keops_krige\\(\\): .*increase 'nugget'")
  expect_no_match(conditionMessage(w), "alpha")
  w <- expect_warning(keops_krige(d$x, d$z, "laplacian", range = 0.2, nugget = 0.01, maxiter = 2),
                      "did not converge in 2 iterations", class = "rkeops_warning_convergence")
})

# keops_sinkhorn() against log-domain Sinkhorn iterations run to convergence in dense R (float64).

dense_ot <- function(x, y, a, b, eps, iterations = 3000) {
  C <- pmax(outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y), 0) / 2
  lse <- function(M) { m <- apply(M, 1, max); m + log(rowSums(exp(M - m))) }
  f <- numeric(nrow(x))
  g <- numeric(nrow(y))
  for (k in seq_len(iterations)) {
    f <- -eps * lse(sweep((matrix(g, nrow(x), nrow(y), byrow = TRUE) - C) / eps, 2, log(b), "+"))
    g <- -eps * lse(sweep((matrix(f, nrow(y), nrow(x), byrow = TRUE) - t(C)) / eps, 2, log(a), "+"))
  }
  sum(a * f) + sum(b * g)
}

sinkhorn_test_data <- function() {
  set.seed(1)
  a <- runif(67)
  list(x = matrix(rnorm(2 * 67), 67, 2), y = matrix(rnorm(2 * 71, 0.7), 71, 2), a = a / sum(a), b = rep(1 / 71, 71))
}

test_that("keops_sinkhorn() gives the Sinkhorn divergence and the entropic cost of dense R", {
  rkeops_use_float64()
  on.exit(rkeops_use_float32())
  d <- sinkhorn_test_data()
  eps <- 0.1^2
  ot_xy <- dense_ot(d$x, d$y, d$a, d$b, eps)
  ref <- ot_xy - dense_ot(d$x, d$x, d$a, d$a, eps) / 2 - dense_ot(d$y, d$y, d$b, d$b, eps) / 2
  s <- keops_sinkhorn(d$x, d$y, d$a, d$b, blur = 0.1, tol = 1e-6, max_iter = 1e4, potentials = TRUE)
  expect_equal(as.vector(s), ref, tolerance = 1e-5)
  expect_length(attr(s, "f"), 67L)
  expect_length(attr(s, "g_bb"), 71L)
  plain <- keops_sinkhorn(d$x, d$y, d$a, d$b, blur = 0.1, tol = 1e-6, max_iter = 1e4, debias = FALSE)
  expect_equal(as.vector(plain), ot_xy, tolerance = 1e-5)
  # a cloud's divergence to itself is zero; uniform weights by default
  expect_lt(abs(keops_sinkhorn(d$x, d$x, d$a, d$a, blur = 0.1)), 1e-5)
  expect_equal(keops_sinkhorn(d$x, d$y, NULL, NULL, blur = 0.1),
               keops_sinkhorn(d$x, d$y, rep(1, 67), rep(2, 71), blur = 0.1))
  # a reach much longer than the clouds: the balanced divergence
  far <- keops_sinkhorn(d$x, d$y, d$a, d$b, blur = 0.1, reach = 1e3, tol = NULL)
  near <- keops_sinkhorn(d$x, d$y, d$a, d$b, blur = 0.1, tol = NULL)
  expect_equal(as.vector(far), as.vector(near), tolerance = 1e-3)
  expect_warning(keops_sinkhorn(d$x, d$y, blur = 0.01, tol = 1e-12, max_iter = 2), "max_iter = 2")
})

test_that("keops_sinkhorn() refuses bad input, naming the argument", {
  d <- sinkhorn_test_data()
  expect_error(keops_sinkhorn(d$x, d$y[, 1]), "'y' must be", class = "rkeops_error_input")
  expect_error(keops_sinkhorn(d$x, d$y, a = rep(-1, 67)), "'a' must be", class = "rkeops_error_input")
  expect_error(keops_sinkhorn(d$x, d$y, b = rep(0, 71)), "'b' must be", class = "rkeops_error_input")
  expect_error(keops_sinkhorn(d$x, d$y, blur = 0), "'blur'", class = "rkeops_error_input")
  expect_error(keops_sinkhorn(d$x, d$y, p = 3), "'p' must be 1 or 2", class = "rkeops_error_input")
  expect_error(keops_sinkhorn(d$x, d$y, scaling = 1), "'scaling' must be below 1", class = "rkeops_error_input")
  expect_error(keops_sinkhorn(d$x, d$y, reach = -1), "'reach'", class = "rkeops_error_input")
})

test_that("keops_sinkhorn(gradient = TRUE) gives the loss's gradient in x (finite differences)", {
  rkeops_use_float64()
  on.exit(rkeops_use_float32())
  set.seed(2)
  x <- matrix(rnorm(2 * 23), 23, 2)
  y <- matrix(rnorm(2 * 19, 0.5), 19, 2)
  a <- runif(23)
  b <- runif(19)
  for (case in list(list(p = 2, debias = TRUE), list(p = 1, debias = FALSE))) {
    loss <- function(xx) {
      as.vector(keops_sinkhorn(xx, y, a, b, blur = 0.5, p = case$p, debias = case$debias, tol = 1e-12, max_iter = 1e5))
    }
    s <- keops_sinkhorn(x, y, a, b, blur = 0.5, p = case$p, debias = case$debias, tol = 1e-12, max_iter = 1e5,
                        gradient = TRUE)
    fd <- vapply(seq_along(x), function(k) {
      h <- 1e-5
      xp <- x; xp[k] <- xp[k] + h; xm <- x; xm[k] <- xm[k] - h
      (loss(xp) - loss(xm)) / (2 * h)
    }, 0)
    expect_equal(as.vector(attr(s, "gradient")), fd, tolerance = 1e-7, info = paste("p =", case$p))
  }
  expect_error(keops_sinkhorn(x, y, reach = 1, gradient = TRUE), "balanced", class = "rkeops_error_input")
})

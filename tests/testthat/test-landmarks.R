# keops_landmarks() (issue 38) against a dense plain-R implementation of the same model, in
# float64, on sizes that are not multiples of any tile.

# Dense R: the Gaussian kernel matrix exp(-|q_i - q_j|^2 / (2 sigma^2)).
lm_kernel <- function(q, sigma) exp(-as.matrix(dist(q))^2 / (2 * sigma^2))

# Dense R: nt forward Euler steps of the Hamiltonian flow from (q0, p0); the list of the states q.
lm_shoot <- function(q0, p0, sigma, nt) {
  q <- q0; p <- p0
  path <- list(q)
  for (t in seq_len(nt)) {
    K <- lm_kernel(q, sigma)
    B <- K * tcrossprod(p)                                   # k_ij <p_i, p_j>
    dq <- K %*% p                                            #  dH/dp
    dp <- (rowSums(B) * q - B %*% q) / sigma^2               # -dH/dq
    q <- q + dq / nt
    p <- p + dp / nt
    path[[t + 1L]] <- unname(q)
  }
  path
}

# Dense R: E(p0) = H(q0, p0) + lambda |q(1) - target|^2.
lm_energy <- function(q0, p0, target, sigma, nt, lambda) {
  q1 <- lm_shoot(q0, p0, sigma, nt)[[nt + 1L]]
  0.5 * sum(lm_kernel(q0, sigma) * tcrossprod(p0)) + lambda * sum((q1 - target)^2)
}

lm_fd <- function(f, x, h = 1e-6) {
  vapply(seq_along(x), function(k) {
    xp <- x; xp[k] <- xp[k] + h; xm <- x; xm[k] <- xm[k] - h
    (f(xp) - f(xm)) / (2 * h)
  }, 0)
}

test_that("the energy and gradient of keops_landmarks() equal dense R and its finite differences", {
  local_precision("float64")
  set.seed(38)
  n <- 13
  nt <- 5
  sigma <- 0.4
  lambda <- 3
  for (d in 2:3) {
    q0 <- matrix(runif(n * d), n, d)
    target <- q0 + matrix(rnorm(n * d, sd = 0.1), n, d)
    p0 <- matrix(rnorm(n * d, sd = 0.3), n, d)
    problem <- rkeops:::landmarks_problem(q0, target, sigma, nt, lambda)
    x <- as.vector(p0)
    dense <- function(v) lm_energy(q0, matrix(v, n, d), target, sigma, nt, lambda)
    expect_equal(problem$fn(x), dense(x), tolerance = 1e-12)
    expect_equal(problem$gr(x), lm_fd(dense, x), tolerance = 1e-7)
    # evaluated once per point: the final landmarks of that evaluation are the dense ones
    expect_equal(problem$evaluate(x)$q1, lm_shoot(q0, p0, sigma, nt)[[nt + 1L]], tolerance = 1e-12)
    # the trajectory program
    path <- problem$trajectory(p0)
    expect_equal(dim(path), c(nt + 1L, n, d))
    for (t in seq_len(nt + 1L)) {
      expect_equal(path[t, , ], lm_shoot(q0, p0, sigma, nt)[[t]], tolerance = 1e-12)
    }
  }
})

test_that("keops_landmarks() matches a circle to an ellipse and returns the documented shapes", {
  local_precision("float64")
  n <- 17
  nt <- 4
  theta <- 2 * pi * (seq_len(n) - 1) / n
  q0 <- cbind(cos(theta), sin(theta))
  target <- cbind(0.1 + 1.2 * cos(theta), 0.8 * sin(theta))
  fit <- keops_landmarks(q0, target, sigma = 0.6, nt = nt, lambda = 5, iter.max = 15)
  expect_s3_class(fit, "keops_landmarks")
  expect_named(fit, c("p0", "q", "target", "loss", "distance", "value", "sigma", "lambda", "nt", "counts", "convergence",
                      "message", "optimizer", "call"), ignore.order = TRUE)
  expect_equal(dim(fit$p0), c(n, 2L))
  expect_equal(dim(fit$q), c(nt + 1L, n, 2L))
  expect_identical(fit$q[1, , ], unname(q0))
  q1 <- lm_shoot(q0, fit$p0, 0.6, nt)[[nt + 1L]]
  expect_equal(fit$q[nt + 1L, , ], q1, tolerance = 1e-12)
  # the loss trace: one E per evaluation, from p0 = 0 (no motion: E = lambda |q0 - target|^2)
  expect_length(fit$loss, fit$counts[["function"]])
  expect_equal(fit$loss[1], 5 * sum((q0 - target)^2))
  e_final <- lm_energy(q0, fit$p0, target, 0.6, nt, 5)
  expect_equal(fit$value, e_final, tolerance = 1e-10)
  expect_lt(min(abs(fit$loss - e_final)), 1e-10 * e_final)   # p0 is one of the points evaluated
  expect_lt(e_final, fit$loss[1] / 10)
  # distances before and after
  expect_equal(dim(fit$distance), c(2L, 2L))
  expect_equal(dimnames(fit$distance), list(c("before", "after"), c("mean", "max")))
  d_after <- sqrt(rowSums((q1 - target)^2))
  expect_equal(fit$distance["after", ], c(mean = mean(d_after), max = max(d_after)), tolerance = 1e-10)
  expect_equal(fit$distance["before", "mean"], mean(sqrt(rowSums((q0 - target)^2))))
  expect_lt(fit$distance["after", "mean"], fit$distance["before", "mean"] / 3)
  expect_true(fit$convergence %in% c(0L, 1L))
  expect_true(is.call(fit$call))
  out <- capture.output(print(fit))
  expect_match(out, "N = 17 landmarks in D = 2, nt = 4", all = FALSE, fixed = TRUE)
  expect_match(out, "mean 0.", all = FALSE, fixed = TRUE)
  # one dimension, one step, one iteration: the shapes hold
  fit1 <- keops_landmarks(matrix(c(0, 1, 2), 3), matrix(c(0.1, 1.2, 2.1), 3), sigma = 1, nt = 1, lambda = 1,
                          iter.max = 1)
  expect_equal(dim(fit1$q), c(2L, 3L, 1L))
  expect_equal(dim(fit1$p0), c(3L, 1L))
  expect_equal(as.vector(fit1$q[2, , ]), as.vector(lm_shoot(matrix(c(0, 1, 2), 3), fit1$p0, 1, 1)[[2]]))
})

test_that("keops_landmarks() rejects bad inputs with input errors naming the argument", {
  q0 <- matrix(runif(10), 5, 2)
  target <- q0 + 0.1
  bad <- function(arg, ...) {
    args <- utils::modifyList(list(q0 = q0, target = target, sigma = 1, nt = 2, lambda = 1, iter.max = 2),
                              list(...))
    e <- expect_error(do.call(keops_landmarks, args), class = "rkeops_error_input")
    expect_identical(e$arg, arg)
    expect_match(conditionMessage(e), paste0("'", arg, "'"), fixed = TRUE)
  }
  bad("q0", q0 = as.vector(q0))
  bad("q0", q0 = matrix("a", 5, 2))
  bad("q0", q0 = q0[1, , drop = FALSE], target = target[1, , drop = FALSE])
  bad("q0", q0 = replace(q0, 3, NA))
  bad("target", target = replace(target, 2, Inf))
  bad("target", target = target[, 1, drop = FALSE])
  bad("target", target = target[-1, ])
  bad("target", target = as.data.frame(target))
  bad("sigma", sigma = 0)
  bad("sigma", sigma = -1)
  bad("sigma", sigma = c(1, 2))
  bad("sigma", sigma = "1")
  bad("nt", nt = 0)
  bad("nt", nt = 1.5)
  bad("lambda", lambda = 0)
  bad("lambda", lambda = NA_real_)
  bad("iter.max", iter.max = 0)
  bad("iter.max", iter.max = 2.5)
})

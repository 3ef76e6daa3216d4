# keops_gmm() against EM for diagonal Gaussian mixtures written in plain R, dense, in float64.

gmm_test_data <- function(N = 517, G = 4, D = 3, seed = 3) {
  set.seed(seed)
  centres <- matrix(runif(G * D, 0, 6), G, D)
  x <- centres[sample(G, N, TRUE), , drop = FALSE] + matrix(rnorm(N * D, sd = 0.5), N, D)
  var <- matrix(apply(x, 2, var), G, D, byrow = TRUE)
  sigma <- array(0, c(D, D, G))
  for (g in seq_len(G)) sigma[, , g] <- diag(var[g, ], D)
  list(x = x, init = list(pro = rep(1 / G, G), mean = t(x[sample(N, G), , drop = FALSE]),
                          variance = list(sigma = sigma)))
}

# log of each component's term at each point (N x G), from weights, means G x D, variances G x D
dense_terms <- function(x, pro, mu, var) {
  vapply(seq_along(pro), function(g) {
    log(pro[g]) - 0.5 * sum(log(2 * pi * var[g, ])) - 0.5 * colSums((t(x) - mu[g, ])^2 / var[g, ])
  }, numeric(nrow(x)))
}
dense_lse <- function(l) { m <- apply(l, 1, max); m + log(rowSums(exp(l - m))) }
dense_em <- function(x, pro, mu, var, iterations) {
  for (t in seq_len(iterations)) {
    l <- matrix(dense_terms(x, pro, mu, var), nrow(x))
    z <- exp(l - dense_lse(l))
    P <- colSums(z)
    mu <- crossprod(z, x) / P
    var <- crossprod(z, x^2) / P - mu^2
    pro <- P / nrow(x)
  }
  l <- matrix(dense_terms(x, pro, mu, var), nrow(x))
  list(pro = pro, mu = mu, var = var, loglik = sum(dense_lse(l)), classification = max.col(l, "first"))
}

test_that("keops_gmm() runs the EM iterations of dense R from the same parameters", {
  local_precision("float64")
  for (D in c(1, 3)) {
    d <- gmm_test_data(D = D)
    fit <- keops_gmm(d$x, 4, iter.max = 7, tol = 0, init = d$init)
    var0 <- t(apply(d$init$variance$sigma, 3, function(s) diag(as.matrix(s))))
    if (D == 1) var0 <- t(var0)
    ref <- dense_em(d$x, d$init$pro, t(d$init$mean), var0, 7)
    expect_equal(fit$iterations, 7L)
    expect_equal(fit$loglik, ref$loglik, tolerance = 1e-10)
    expect_equal(fit$parameters$pro, ref$pro, tolerance = 1e-10)
    expect_equal(fit$parameters$mean, t(ref$mu), tolerance = 1e-10)
    expect_equal(sigma_diag <- t(apply(fit$parameters$variance$sigma, 3, function(s) diag(as.matrix(s)))),
                 if (D == 1) t(ref$var) else ref$var, tolerance = 1e-10)
    expect_identical(fit$classification, ref$classification)
    expect_equal(fit$bic, 2 * ref$loglik - (3 + 2 * 4 * D) * log(nrow(d$x)), tolerance = 1e-10)
    expect_length(fit$loglik_trace, 8L)
    expect_true(all(diff(fit$loglik_trace) > -1e-8))      # EM never decreases the likelihood
  }
})

test_that("keops_gmm() stops on the tolerance, starts from keops_kmeans(), and predicts", {
  local_precision("float64")
  d <- gmm_test_data(N = 400, G = 3, D = 2, seed = 8)
  set.seed(1)
  fit <- keops_gmm(d$x, 3, tol = 1e-8)
  expect_lt(fit$iterations, 100L)
  n <- length(fit$loglik_trace)
  expect_lt(abs(fit$loglik_trace[n - 1] - fit$loglik_trace[n - 2]) / (1 + abs(fit$loglik_trace[n - 1])), 1e-8)
  expect_output(print(fit), "3 components in D = 2, N = 400")
  new <- d$x[1:23, ] + 0.1
  p <- predict(fit, new, z = TRUE)
  mu <- t(fit$parameters$mean)
  var <- t(apply(fit$parameters$variance$sigma, 3, diag))
  l <- matrix(dense_terms(new, fit$parameters$pro, mu, var), 23)
  expect_equal(p$logdensity, dense_lse(l), tolerance = 1e-10)
  expect_identical(p$classification, max.col(l, "first"))
  expect_equal(p$z, exp(l - dense_lse(l)), tolerance = 1e-10)
  expect_equal(rowSums(p$z), rep(1, 23), tolerance = 1e-12)
})

test_that("keops_gmm() refuses bad input, naming the argument", {
  d <- gmm_test_data()
  expect_error(keops_gmm(d$x[1, , drop = FALSE], 1), "'x' must be", class = "rkeops_error_input")
  expect_error(keops_gmm(d$x, 0), "'G' must be a whole number >= 1", class = "rkeops_error_input")
  expect_error(keops_gmm(d$x, 2, model = "EEE"), "'model' must be", class = "rkeops_error_input")
  expect_error(keops_gmm(d$x, 2, tol = -1), "'tol'", class = "rkeops_error_input")
  expect_error(keops_gmm(d$x, 4, init = list(pro = 1)), "'init'", class = "rkeops_error_input")
  bad <- d$init
  bad$pro[1] <- -1
  expect_error(keops_gmm(d$x, 4, init = bad), "positive weights", class = "rkeops_error_input")
  fit <- keops_gmm(d$x, 4, iter.max = 2, init = d$init)
  expect_error(predict(fit, matrix(0, 2, 5)), "'newdata' must be", class = "rkeops_error_input")
})

test_that("keops_gmm(model = \"VVV\") runs the EM iterations of dense R with full covariances", {
  local_precision("float64")
  set.seed(9)
  N <- 431; G <- 3; D <- 3
  centres <- matrix(runif(G * D, 0, 6), G, D)
  mix <- matrix(c(1, 0.5, 0, 0, 1, 0.3, 0, 0, 1), 3)
  x <- (centres[sample(G, N, TRUE), ] + matrix(rnorm(N * D, sd = 0.5), N, D)) %*% mix
  sigma <- array(diag(apply(x, 2, var)), c(D, D, G))
  init <- list(pro = c(0.2, 0.3, 0.5), mean = t(x[c(1, 2, 3), ]), variance = list(sigma = sigma))
  dense_terms_full <- function(x, pro, mu, sigma) {
    vapply(seq_along(pro), function(g) {
      r <- t(x) - mu[g, ]
      log(pro[g]) - 0.5 * determinant(2 * pi * sigma[, , g])$modulus - 0.5 * colSums(r * solve(sigma[, , g], r))
    }, numeric(nrow(x)))
  }
  pro <- init$pro; mu <- t(init$mean)
  for (t in 1:5) {
    l <- dense_terms_full(x, pro, mu, sigma)
    z <- exp(l - dense_lse(l))
    P <- colSums(z)
    mu <- crossprod(z, x) / P
    for (g in 1:G) sigma[, , g] <- crossprod(x * sqrt(z[, g])) / P[g] - tcrossprod(mu[g, ])
    pro <- P / N
  }
  l <- dense_terms_full(x, pro, mu, sigma)
  fit <- keops_gmm(x, G, model = "VVV", iter.max = 5, tol = 0, init = init)
  expect_equal(fit$loglik, sum(dense_lse(l)), tolerance = 1e-10)
  expect_equal(fit$parameters$pro, pro, tolerance = 1e-10)
  expect_equal(fit$parameters$mean, t(mu), tolerance = 1e-10)
  expect_equal(fit$parameters$variance$sigma, sigma, tolerance = 1e-10)
  expect_identical(fit$classification, max.col(l, "first"))
  expect_equal(fit$bic, 2 * fit$loglik - (2 + 3 * 3 + 3 * 6) * log(N), tolerance = 1e-12)
  p <- predict(fit, x[1:17, ], z = TRUE)
  expect_equal(p$logdensity, dense_lse(l[1:17, ]), tolerance = 1e-10)
  expect_equal(p$z, exp(l[1:17, ] - dense_lse(l[1:17, ])), tolerance = 1e-10)
  # from keops_kmeans(): the likelihood does not decrease
  set.seed(1)
  auto <- keops_gmm(x, G, model = "VVV", tol = 1e-9)
  expect_true(all(diff(auto$loglik_trace) > -1e-8))
  expect_error(keops_gmm(x[1:4, ], 2, model = "VVV", init = list(pro = c(1, 1), mean = t(x[1:2, ]),
                 variance = list(sigma = array(1, c(3, 3, 2))))), "singular", class = "rkeops_error_input")
})

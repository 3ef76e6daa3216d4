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

# mclust::Mclust() with the default settings (it calls mclustBIC() in its caller's frame: mclust
# need not be attached).
mclust_fit <- function(x, G, model) {
  mclustBIC <- mclust::mclustBIC
  mclust::Mclust(x, G = G, modelNames = model, verbose = FALSE)
}

# Two elongated clusters in the plane (sd 1 and 2 along the axes, or correlated for VVV), far
# from the origin by `offset`: the fit must not depend on where the data are.
two_clusters <- function(offset = 0, N = 347, seed = 4) {
  set.seed(seed)
  n1 <- N %/% 2
  x <- rbind(cbind(rnorm(n1, 0, 1), rnorm(n1, 0, 2)), cbind(rnorm(N - n1, 6, 0.5), rnorm(N - n1, 3, 1)))
  x[, 2] <- x[, 2] + 0.4 * x[, 1]
  x + offset
}

test_that("keops_gmm() in float32 fits data far from the origin as float64 and mclust do (issue 52)", {
  skip_if_not_installed("mclust")
  base <- two_clusters()
  for (model in c("VVI", "VVV")) {
    ref <- local({
      local_precision("float64")
      set.seed(1)
      keops_gmm(base, 2, model = model, tol = 1e-9)
    })
    mc <- mclust_fit(base, 2, model)
    expect_equal(ref$loglik, mc$loglik, tolerance = 1e-6)
    for (offset in c(1e3, 1e5, 1e7)) {
      x <- base + offset
      set.seed(1)
      fit <- keops_gmm(x, 2, model = model, tol = 1e-9)        # float32, the default
      # the log-likelihood does not change with a translation; the means move with it
      expect_equal(fit$loglik, ref$loglik, tolerance = 1e-4)
      expect_equal(fit$loglik, mclust_fit(x, 2, model)$loglik,
                   tolerance = 1e-3)
      expect_equal(fit$parameters$mean - offset, ref$parameters$mean, tolerance = 1e-3)
      expect_equal(fit$parameters$variance$sigma, ref$parameters$variance$sigma, tolerance = 1e-3)
      expect_equal(fit$parameters$pro, ref$parameters$pro, tolerance = 1e-3)
      expect_identical(fit$classification, ref$classification)
      # predict() on new points far away: the mixture's density computed in float64 in R
      new <- x[c(1, 77, 200, 301), ] + 0.3
      p <- predict(fit, new)
      dens <- vapply(1:2, function(g) {
        s <- fit$parameters$variance$sigma[, , g]
        r <- t(new) - fit$parameters$mean[, g]
        log(fit$parameters$pro[g]) - 0.5 * determinant(2 * pi * s)$modulus - 0.5 * colSums(r * solve(s, r))
      }, numeric(4))
      expect_equal(p$logdensity, dense_lse(dens), tolerance = 1e-4)
    }
  }
  # a change of scale: the log-likelihood moves by the Jacobian, N D log(c)
  set.seed(1)
  small <- keops_gmm(base * 1e-4, 2, tol = 1e-9)
  set.seed(1)
  expect_equal(small$loglik + nrow(base) * 2 * log(1e-4), keops_gmm(base, 2, tol = 1e-9)$loglik, tolerance = 1e-4)
})

test_that("keops_gmm() on GPS coordinates in float32 gives mclust's log-likelihood (issue 52)", {
  skip_if_not_installed("mclust")
  set.seed(3)
  gps <- rbind(cbind(rnorm(500, -122.42, .01), rnorm(500, 37.77, .01)),
               cbind(rnorm(500, -122.40, .01), rnorm(500, 37.80, .01)))
  for (model in c("VVI", "VVV")) {
    set.seed(1)
    fit <- keops_gmm(gps, 2, model = model)
    mc <- mclust_fit(gps, 2, model)
    expect_equal(fit$loglik, mc$loglik, tolerance = 1e-3)
    # the means to a hundredth of the components' sd (0.01), against float64 run to convergence
    # (mclust stops earlier: its means differ by 1e-4)
    ref <- local({
      local_precision("float64")
      set.seed(1)
      keops_gmm(gps, 2, model = model, tol = 1e-12)
    })
    # (float32 sums in the GPU's order: 1.2e-6 on an H200)
    expect_equal(fit$loglik, ref$loglik, tolerance = 1e-5)
    expect_lt(max(abs(fit$parameters$mean[, order(fit$parameters$mean[1, ])] -
                        ref$parameters$mean[, order(ref$parameters$mean[1, ])])), 1e-4)
  }
})

test_that("keops_gmm() in float32 takes the variances of tight components from deviations", {
  # components 1e4 standard deviations apart: E[x^2] - E[x]^2 would cancel to nothing in float32
  set.seed(5)
  x <- cbind(c(rnorm(123, 0, 0.1), rnorm(141, 1000, 0.2)), c(rnorm(123, 5, 0.3), rnorm(141, -7, 0.1)))
  truth <- rep(1:2, c(123, 141))
  for (model in c("VVI", "VVV")) {
    fit <- keops_gmm(x, 2, model = model, init = list(pro = c(0.5, 0.5), mean = cbind(c(0, 5), c(1000, -7)),
                                                      variance = list(sigma = array(diag(2), c(2, 2, 2)))))
    for (g in 1:2) {
      xg <- x[truth == g, ]
      # (float32 holds points near 1000 to 6e-5: the means to that, a thousandth of the sd)
      expect_lt(max(abs(fit$parameters$mean[, g] - colMeans(xg))), 1e-4)
      v <- crossprod(sweep(xg, 2, colMeans(xg))) / nrow(xg)
      if (model == "VVI") v <- diag(diag(v))
      expect_equal(fit$parameters$variance$sigma[, , g], v, tolerance = 1e-4)
    }
  }
})

test_that("keops_gmm() on degenerate data warns and returns a finite fit, never NaN (issue 52)", {
  set.seed(6)
  u <- c(rnorm(40), rnorm(47, 9))
  y <- rbind(cbind(rnorm(53), rnorm(53)), matrix(c(3, 3), 31, 2, byrow = TRUE))     # 31 identical points
  finite <- function(fit) {
    p <- fit$parameters
    all(is.finite(c(fit$loglik, fit$bic, p$pro, p$mean, p$variance$sigma, fit$loglik_trace))) &&
      !anyNA(fit$classification)
  }
  for (model in c("VVI", "VVV")) {
    # a constant column: its variances at the floor, the other column's clusters found
    expect_warning(fit <- keops_gmm(cbind(u, 1), 2, model = model), "degenerate", class = "rkeops_warning_degenerate")
    expect_true(finite(fit))
    expect_true(fit$degenerate)
    expect_equal(fit$parameters$variance$sigma[2, 2, ], c(1, 1) * exp(-23), tolerance = 1e-5)
    expect_equal(sort(as.vector(table(fit$classification))), c(40, 47))
    expect_equal(sort(fit$parameters$mean[1, ]), sort(c(mean(u[1:40]), mean(u[41:87]))), tolerance = 1e-5)
    # a cluster of identical points: that component at the floor, the other the normal points'
    expect_warning(fit <- keops_gmm(y, 2, model = model), "component", class = "rkeops_warning_degenerate")
    expect_true(finite(fit))
    at <- which.max(fit$parameters$mean[1, ])                   # the component of the identical points
    expect_equal(fit$parameters$mean[, at], c(3, 3), tolerance = 1e-6)
    expect_equal(fit$parameters$variance$sigma[, , at], diag(apply(y, 2, var)) * exp(-23), tolerance = 1e-3)
    expect_equal(fit$parameters$pro[at], 31 / 84, tolerance = 1e-5)
    expect_equal(fit$parameters$mean[, 3 - at], colMeans(y[1:53, ]), tolerance = 1e-5)
    # one component per point
    expect_warning(fit <- keops_gmm(y[1:9, ], 9, model = model), class = "rkeops_warning_degenerate")
    expect_true(finite(fit))
    expect_setequal(fit$classification, 1:9)
    # more components than distinct points: an error naming G
    expect_error(keops_gmm(y, 60, model = model), "distinct points", class = "rkeops_error_input")
    # a good fit does not warn
    expect_no_warning(keops_gmm(y[1:53, ], 2, model = model))
  }
})

test_that("keops_gmm(G = 1:5) keeps the G of best BIC, as mclust does", {
  skip_if_not_installed("mclust")
  local_precision("float64")
  set.seed(10)
  x <- rbind(matrix(rnorm(240, 0, 0.5), 120), matrix(rnorm(220, c(4, 0), 0.7), 110, byrow = TRUE),
             matrix(rnorm(266, c(2, 4), 0.6), 133, byrow = TRUE))
  for (model in c("VVI", "VVV")) {
    set.seed(1)
    fit <- keops_gmm(x, 1:5, model = model, tol = 1e-8)
    mc <- mclust_fit(x, 1:5, model)
    expect_identical(fit$G, mc$G)
    expect_identical(fit$G, 3L)
    expect_named(fit$BIC, as.character(1:5))
    expect_identical(fit$bic, max(fit$BIC))
    # the same optimum for G = 1 to 3 (clear clusters): the same BIC
    expect_equal(unname(fit$BIC[1:3]), unname(mc$BIC[1:3, model]), tolerance = 1e-5)
    expect_output(print(fit), "the best of G = 1:5")
  }
  expect_error(keops_gmm(x, c(2, 2)), "'G'", class = "rkeops_error_input")
  expect_error(keops_gmm(x, c(1, 2), init = list()), "'init' must be NULL", class = "rkeops_error_input")
})

test_that("keops_gmm()'s logLik, BIC, AIC, nobs and summary agree with mclust's counts", {
  skip_if_not_installed("mclust")
  local_precision("float64")
  x <- two_clusters(N = 213)
  for (model in c("VVI", "VVV")) {
    set.seed(2)
    fit <- keops_gmm(x, 3, model = model)
    ll <- logLik(fit)
    expect_s3_class(ll, "logLik")
    expect_equal(as.numeric(ll), fit$loglik)
    expect_identical(attr(ll, "df"), mclust::nMclustParams(model, 2, 3))
    expect_identical(nobs(fit), 213L)
    # stats::BIC is -2 loglik + df log N: minus mclust's (and fit$bic)
    expect_equal(BIC(fit), -fit$bic)
    expect_equal(BIC(fit), -2 * fit$loglik + mclust::nMclustParams(model, 2, 3) * log(213))
    expect_equal(AIC(fit), -2 * fit$loglik + 2 * mclust::nMclustParams(model, 2, 3))
    expect_equal(fit$bic, mclust::bic(model, fit$loglik, 213, 2, 3))
    s <- summary(fit)
    out <- capture.output(print(s))
    expect_lte(length(out), 25L)
    expect_match(out[1], sprintf("model %s, 3 components, N = 213 points in D = 2", model), fixed = TRUE)
    expect_equal(sum(s$table), 213)
  }
  # the summary of a choice among several G, in 25 lines at most
  set.seed(2)
  out <- capture.output(print(summary(keops_gmm(x, 1:9))))
  expect_lte(length(out), 25L)
  expect_true(any(grepl("BIC by G", out)))
})

test_that("keops_gmm() and predict() check their points with check_points()", {
  local_precision("float64")
  x <- two_clusters(N = 101)
  set.seed(3)
  fit <- keops_gmm(as.data.frame(x), 2)
  set.seed(3)
  expect_equal(fit$loglik, keops_gmm(x, 2)$loglik)
  expect_error(keops_gmm(x[1, , drop = FALSE], 1), "at least 2 rows", class = "rkeops_error_input")
  expect_error(keops_gmm(rbind(x, NA), 2), "without NA", class = "rkeops_error_input")
  expect_error(keops_gmm(x, 2, nstart = 0), "'nstart'", class = "rkeops_error_input")
  expect_error(predict(fit, x[, 1]), "with 2 columns, not 1", class = "rkeops_error_input")
  expect_identical(predict(fit, as.data.frame(x[1:5, ]))$classification, fit$classification[1:5])
  # a vector is one column
  set.seed(3)
  one <- keops_gmm(x[, 1], 2)
  expect_identical(one$d, 1L)
})

test_that("keops_gmm()'s default start (10 K-means starts) reaches mclust's optimum on a mixture of 6", {
  skip_if_not_installed("mclust")
  set.seed(11)
  G <- 6; D <- 3; N <- 1999
  mu <- matrix(runif(G * D, 0, 6), G, D)
  sd <- matrix(runif(G * D, 0.3, 0.7), G, D)
  labels <- sample(G, N, replace = TRUE)
  x <- mu[labels, ] + sd[labels, ] * matrix(rnorm(N * D), N, D)
  set.seed(1)
  fit <- keops_gmm(x, G)
  mc <- mclust_fit(x, G, "VVI")
  expect_gt(fit$loglik, mc$loglik - 1e-4 * abs(mc$loglik))
  # (components 4 and 5 overlap: neither fit tells them apart well)
  expect_gt(mclust::adjustedRandIndex(fit$classification, labels),
            mclust::adjustedRandIndex(mc$classification, labels) - 0.01)
})

# The object keops_gmm() returns, and its methods: print, summary, logLik (hence AIC and BIC),
# nobs, predict. plot() is in plot.R.

# The "keops_gmm" object of an EM fit `fit` in the standardised coordinates of `scaling` (pro, mu G x
# D, var G x D or sigma D x D x G, loglik of the data as given, ...): the parameters mapped back to
# the data as given, the number of free parameters and the BIC.
new_keops_gmm <- function(fit, scaling, model) {
  G <- length(fit$pro)
  d <- ncol(fit$mu)
  s <- scaling$scale
  mean <- t(fit$mu) * s + scaling$center                    # D x G
  parameters <- if (model == "VVV") {
    list(pro = fit$pro, mean = mean,
         variance = list(modelName = "VVV", d = d, G = G, sigma = fit$sigma * as.vector(outer(s, s))))
  } else {
    gmm_parameters(fit$pro, t(mean), fit$var * rep(s^2, each = G))
  }
  df <- gmm_npar(model, d, G)
  bic <- 2 * fit$loglik - df * log(fit$n)
  degenerate <- length(gmm_degenerate_components(fit, model)) > 0L
  structure(list(parameters = parameters, loglik = fit$loglik, loglik_trace = fit$loglik_trace, df = df,
                 bic = bic, BIC = stats::setNames(if (degenerate) NA_real_ else bic, G),
                 classification = fit$classification, iterations = fit$iterations, n = fit$n, d = d, G = G,
                 modelName = model, degenerate = degenerate, scaling = scaling),
            class = "keops_gmm")
}

# The parameters of a VVI fit as mclust lays them out: pro, mean D x G, variance (sigma D x D x G,
# scale and shape), from weights, means G x D and variances G x D.
gmm_parameters <- function(pro, mu, var) {
  G <- nrow(mu)
  d <- ncol(mu)
  scale <- exp(rowMeans(log(var)))
  sigma <- array(0, c(d, d, G))
  for (g in seq_len(G)) sigma[, , g] <- diag(var[g, ], d)
  list(pro = pro, mean = t(mu),
       variance = list(modelName = "VVI", d = d, G = G, sigma = sigma, scale = scale, shape = t(var / scale)))
}

# The number of free parameters, as mclust::nMclustParams() counts them: G - 1 weights, G D means,
# and G D variances (VVI) or G D (D + 1) / 2 covariances (VVV).
gmm_npar <- function(model, d, G) {
  (G - 1) + G * d + if (model == "VVV") G * d * (d + 1) / 2 else G * d
}

# The components of standardised fit `fit` whose weight is 0 or a variance (an eigenvalue, VVV) at
# the floor (within float32's rounding of its inverse).
gmm_degenerate_components <- function(fit, model) {
  low <- gmm_variance_floor * (1 + 1e-3)
  at_floor <- if (model == "VVV") {
    vapply(seq_along(fit$pro), function(g) {
      min(eigen(fit$sigma[, , g], symmetric = TRUE, only.values = TRUE)$values) <= low
    }, logical(1))
  } else {
    apply(fit$var <= low, 1, any)
  }
  which(at_floor | !(fit$pro > 0))
}

# The warning of a fit at the variance floor: which components, and what it means.
gmm_warn_degenerate <- function(fit) {
  p <- gmm_standard_parameters(fit)
  comps <- gmm_degenerate_components(list(pro = p$pro, var = p$var, sigma = p$sigma), fit$modelName)
  rkeops_warn("keops_gmm(): degenerate fit (G = ", fit$G, "): component", if (length(comps) > 1L) "s", " ",
              paste(comps, collapse = ", "), " ha", if (length(comps) > 1L) "ve" else "s",
              " no point or a variance at the floor (1e-10 times its column's variance): a constant column, ",
              "identical points or a component per point. The fit is finite; its log-likelihood and BIC are ",
              "bounded by the floor only", kind = "degenerate")
}

# The parameters of `object` in its standardised coordinates: pro, mu G x D, var G x D (VVI) or
# sigma D x D x G (VVV).
gmm_standard_parameters <- function(object) {
  p <- object$parameters
  var <- if (object$modelName == "VVI") sigma_diagonals(p$variance$sigma, object$d, object$G)
  std <- list(pro = p$pro, mu = t(p$mean), var = var, sigma = if (object$modelName == "VVV") p$variance$sigma)
  gmm_standardise_parameters(std, object$scaling)
}

#' @export
print.keops_gmm <- function(x, ...) {
  cat(sprintf("Gaussian mixture (keops_gmm, model %s): %d components in D = %d, N = %d\n", x$modelName, x$G,
              x$d, x$n))
  cat(sprintf("  EM: %d iterations; log-likelihood %.6g, BIC %.6g (mclust's sign)%s\n", x$iterations, x$loglik,
              x$bic, if (length(x$BIC) > 1L) sprintf(", the best of G = %s", gmm_format_g(names(x$BIC))) else ""))
  cat("  weights:", format(x$parameters$pro, digits = 3), "\n")
  if (isTRUE(x$degenerate)) cat("  degenerate: variances at the floor (see ?keops_gmm)\n")
  invisible(x)
}

# "1:9" for consecutive values of G, else "2, 4, 7".
gmm_format_g <- function(g) {
  g <- as.integer(g)
  if (length(g) > 2L && all(diff(g) == 1L)) paste0(g[1L], ":", g[length(g)]) else paste(g, collapse = ", ")
}

#' Summary of a Gaussian mixture
#'
#' @param object A mixture fitted by [keops_gmm()].
#' @param x A summary made by `summary()`.
#' @param ... Not used.
#' @return `summary()`: an object of class `"summary.keops_gmm"`: `modelName`, `G`, `n`, `d`,
#'   `loglik`, `df`, `bic` (mclust's sign), `aic` (`stats::AIC()`), `BIC` (by G), `iterations`,
#'   `pro`, `mean` (D x G), `table` (the points of each component), `degenerate`. Its `print()` shows
#'   them in at most 25 lines (the means when D <= 6 and G <= 8).
#' @export
summary.keops_gmm <- function(object, ...) {
  structure(list(modelName = object$modelName, G = object$G, n = object$n, d = object$d, loglik = object$loglik,
                 df = object$df, bic = object$bic, aic = -2 * object$loglik + 2 * object$df, BIC = object$BIC,
                 iterations = object$iterations, pro = object$parameters$pro, mean = object$parameters$mean,
                 table = table(factor(object$classification, seq_len(object$G))), degenerate = object$degenerate),
            class = "summary.keops_gmm")
}

#' @rdname summary.keops_gmm
#' @export
print.summary.keops_gmm <- function(x, ...) {
  cat(sprintf("Gaussian mixture by EM (keops_gmm): model %s, %d components, N = %d points in D = %d\n",
              x$modelName, x$G, x$n, x$d))
  cat(sprintf("log-likelihood %.8g, df %d, BIC %.8g (2 loglik - df log N), AIC %.8g; %d EM iterations\n",
              x$loglik, as.integer(x$df), x$bic, x$aic, x$iterations))
  if (length(x$BIC) > 1L && length(x$BIC) <= 10L) {
    cat("BIC by G (larger is better):\n")
    print(signif(x$BIC, 8))
  } else if (length(x$BIC) > 10L) {
    cat(sprintf("BIC by G = %s: in $BIC\n", gmm_format_g(names(x$BIC))))
  }
  cat("Points per component:\n")
  print(c(x$table))
  if (x$d <= 6L && x$G <= 8L) {
    cat("Weights and means (one row per component):\n")
    m <- cbind(x$pro, t(x$mean))
    dimnames(m) <- list(seq_len(x$G), c("weight", paste0("mean ", seq_len(x$d))))
    print(signif(m, 5))
  } else {
    cat("Weights:", format(x$pro, digits = 3), "(means: $parameters$mean)\n")
  }
  if (isTRUE(x$degenerate)) cat("Degenerate: variances at the floor (see ?keops_gmm)\n")
  invisible(x)
}

#' Log-likelihood, AIC, BIC and number of points of a Gaussian mixture
#'
#' `logLik()` of a [keops_gmm()] fit is its log-likelihood with attributes `df` (the number of free
#' parameters, as `mclust::nMclustParams()` counts them: `G - 1 + G D + G D` for `"VVI"`,
#' `G - 1 + G D + G D (D + 1) / 2` for `"VVV"`) and `nobs` (N), so [stats::AIC()] and
#' [stats::BIC()] apply. Mind the sign: `stats::BIC(fit)` is `-2 loglik + df log N` (smaller is
#' better), mclust's and `fit$bic` are `2 loglik - df log N` (larger is better):
#' `stats::BIC(fit) == -fit$bic`.
#'
#' @param object A mixture fitted by [keops_gmm()].
#' @param ... Not used.
#' @return `logLik()`: an object of class `"logLik"`; `nobs()`: N.
#' @importFrom stats logLik nobs
#' @export
logLik.keops_gmm <- function(object, ...) {
  structure(object$loglik, df = object$df, nobs = object$n, class = "logLik")
}

#' @rdname logLik.keops_gmm
#' @export
nobs.keops_gmm <- function(object, ...) object$n

#' Classification and density of new points by a Gaussian mixture
#'
#' The points are standardised as the data were (see [keops_gmm()]), so that float32 computes the
#' densities of points far from the origin as well as of points around it.
#'
#' @param object A mixture fitted by [keops_gmm()].
#' @param newdata A numeric matrix (or data frame, or vector for one column) of points, with the
#'   columns of the data.
#' @param z Whether to return the N x G matrix of the components' responsibilities.
#' @param ... Not used.
#' @return A list: `classification` (the most likely component of each row), `logdensity` (the
#'   mixture's log-density at each row) and, with `z = TRUE`, `z`.
#' @export
predict.keops_gmm <- function(object, newdata, z = FALSE, ...) {
  d <- object$d
  newdata <- check_points(newdata, "newdata", "predict", d = d)
  zn <- gmm_standardise(newdata, object$scaling)
  shift <- sum(log(object$scaling$scale))
  p <- gmm_standard_parameters(object)
  if (object$modelName == "VVV") {
    ops <- gmm_vvv_operators(d)
    inputs <- gmm_vvv_inputs(zn, p, shift)
  } else {
    ops <- gmm_operators(d)
    inputs <- list(matrix(gmm_vvi_constant(p$pro, p$var, shift)), 1 / p$var, zn, p$mu)
  }
  logdensity <- as.vector(ops$lse(inputs))
  out <- list(classification = labels_as_integers(ops$best(inputs)), logdensity = logdensity)
  if (isTRUE(z)) {
    # each component's log-term, dense (the N x G matrix asked for): from the constant and precision
    cst <- inputs[[1L]]
    terms <- vapply(seq_len(object$G), function(g) {
      r <- t(zn) - p$mu[g, ]
      prec <- if (object$modelName == "VVV") matrix(inputs[[2L]][g, ], d, d) else diag(inputs[[2L]][g, ], d)
      cst[g] - 0.5 * colSums(r * (prec %*% r))
    }, numeric(nrow(zn)))
    out$z <- exp(matrix(terms, nrow(zn)) - logdensity)
  }
  out
}

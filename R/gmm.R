#' Gaussian mixtures by EM in one engine call
#'
#' `keops_gmm()` fits a mixture of `G` Gaussians to the rows of `x` by the EM algorithm, with
#' diagonal covariances (mclust's model `"VVI"`: each component its own volume and shape, axes along
#' the coordinates) or full ones (`"VVV"`). Each iteration is an E-step (a log-sum-exp over the N x G
#' pairs) and an M-step (one sum over the same pairs gives each component's weight, mean and
#' (co)variances). For `"VVI"` the whole loop is in the engine (one program, [keops_program()]; on a
#' GPU the data and the parameters stay on the device); for `"VVV"` each iteration is two reductions
#' and the inversion of the G covariance matrices in R (D x D each).
#'
#' The iterations stop after `iter.max`, or when the relative change of the log-likelihood from one
#' iteration to the next, `|L_t - L_{t-1}| / (1 + |L_t|)`, is below `tol` (tested one iteration
#' after mclust tests it: a fit may run one more iteration than `mclust::em()`). With `tol = 0`,
#' `iter.max = n` runs n EM iterations from `init`, as `mclust::em(..., control = emControl(itmax =
#' n))` counts them, to the same parameters and log-likelihood.
#'
#' Costs: two reductions over N x G pairs of dimension D per iteration (for `"VVV"`, formulas of D^2
#' terms), two more for the returned log-likelihood and classification; memory O(N + G D^2) beyond `x`
#' (the N x G responsibilities are never stored).
#'
#' @param x A numeric matrix (or data frame) of N points, one per row.
#' @param G The number of components.
#' @param model `"VVI"` (diagonal covariances) or `"VVV"` (full covariances).
#' @param iter.max The most EM iterations.
#' @param tol The tolerance on the relative change of the log-likelihood (0: run `iter.max`).
#' @param init `NULL` (start from [keops_kmeans()]'s clusters, seeded by k-means++ with R's random
#'   numbers: each component's weight, mean and (co)variances those of a cluster), or parameters laid
#'   out as mclust's: a list of `pro` (G weights), `mean` (D x G) and `variance`, with `sigma` (D x D
#'   x G covariance matrices, of which the diagonals are used) or mclust's VVI `scale` and `shape`.
#' @return An object of class `"keops_gmm"`: `parameters` (`pro`, `mean` D x G, `variance` with
#'   `modelName`, `d`, `G`, `sigma` D x D x G, and for `"VVI"` `scale` and `shape`, as mclust lays
#'   them out), `loglik`
#'   (of the returned parameters), `loglik_trace` (of the parameters before each iteration, then of
#'   the returned ones), `bic` (`2 loglik - npar log N`, mclust's sign), `classification` (the most
#'   likely component of each point), `iterations`, `n`, `d`, `G`, `modelName`.
#' @seealso `vignette("gmm")`, which builds the program.
#' @export
#' @examples
#' set.seed(1)
#' x <- rbind(matrix(rnorm(600, 0, 1), 300), matrix(rnorm(600, 4, 0.5), 300))
#' fit <- keops_gmm(x, 2)
#' fit$parameters$pro
#' table(fit$classification)
#' predict(fit, rbind(c(0, 0), c(4, 4)))$classification
keops_gmm <- function(x, G, model = "VVI", iter.max = 100, tol = 1e-6, init = NULL) {
  fun <- "keops_gmm"
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.matrix(x) || !is.numeric(x) || nrow(x) < 2L || ncol(x) < 1L ||
      (!is.finite(sum(x)) && !all(is.finite(x)))) {
    rkeops_abort(arg_label("x", fun), " must be a numeric matrix of finite values with at least 2 rows, one point ",
                 "per row", kind = "input", arg = "x")
  }
  storage.mode(x) <- "double"
  G <- check_whole(G, "G", fun, min = 1, max = nrow(x))
  if (!is.character(model) || length(model) != 1L || !model %in% c("VVI", "VVV")) {
    rkeops_abort(arg_label("model", fun), " must be \"VVI\" (diagonal covariances) or \"VVV\" (full ones)",
                 kind = "input", arg = "model")
  }
  iter.max <- check_whole(iter.max, "iter.max", fun, min = 1)
  check_number(tol, "tol", fun, sign = "non-negative")
  full <- model == "VVV"
  start <- if (is.null(init)) gmm_from_kmeans(x, G, full) else gmm_init(init, ncol(x), G, full)
  if (full) return(gmm_vvv(x, start, iter.max, tol))
  d <- ncol(x)
  c0 <- d / 2 * log(2 * pi)
  # On a GPU the points go there once for the program and the last E-step's two reductions.
  points <- if (gpu_in_use()) keops_device(x) else x
  if (inherits(points, "keops_device_matrix")) on.exit(keops_device_free(points), add = TRUE)   # not left to gc
  input <- list(x = points, n = nrow(x), c0 = c0, mu = start$mu, is2 = 1 / start$var,
                cst = matrix(gmm_vvi_constant(start$pro, start$var)), ll = 0)
  res <- gmm_program(d, iter.max, tol)(input)
  final <- gmm_estep(points, res$mu, res$is2, res$cst)
  pro <- exp(as.vector(res$cst) + 0.5 * rowSums(log(1 / res$is2)) + c0)
  var <- 1 / res$is2
  npar <- (G - 1) + 2 * G * d
  structure(list(parameters = gmm_parameters(pro, res$mu, var), loglik = final$loglik,
                 loglik_trace = c(attr(res, "trace")$ll[, 1], final$loglik),
                 bic = 2 * final$loglik - npar * log(nrow(x)), classification = final$classification,
                 iterations = attr(res, "iterations"), n = nrow(x), d = d, G = G, modelName = "VVI"),
            class = "keops_gmm")
}

# Each component's log-density constant for weights `pro` and variances `var` (G x D):
# log(pro) - log(det(2 pi diag(var))) / 2 (the program's `cst` map computes it in the engine).
gmm_vvi_constant <- function(pro, var) log(pro) - 0.5 * rowSums(log(var)) - ncol(var) / 2 * log(2 * pi)

# The component parameters as mclust lays them out (VVI): pro, mean D x G, variance.
gmm_parameters <- function(pro, mu, var) {
  G <- nrow(mu)
  d <- ncol(mu)
  scale <- exp(rowMeans(log(var)))
  sigma <- array(0, c(d, d, G))
  for (g in seq_len(G)) sigma[, , g] <- diag(var[g, ], d)
  list(pro = pro, mean = t(mu),
       variance = list(modelName = "VVI", d = d, G = G, sigma = sigma, scale = scale, shape = t(var / scale)))
}

# The diagonals of the G covariance matrices of `sigma` (D x D x G), as a G x D matrix.
sigma_diagonals <- function(sigma, d, G) {
  sigma <- array(sigma, c(d, d, G))
  matrix(vapply(seq_len(G), function(g) diag(matrix(sigma[, , g], d, d)), numeric(d)), G, d, byrow = TRUE)
}

# Starting parameters (pro, mu G x D, var G x D, and with `full` sigma D x D x G) from mclust-like
# `init`.
gmm_init <- function(init, d, G, full = FALSE) {
  bad <- function(what) {
    rkeops_abort("keops_gmm(): 'init' ", what, kind = "input", arg = "init")
  }
  if (!is.list(init) || is.null(init$pro) || is.null(init$mean) || is.null(init$variance)) {
    bad("must be a list of pro, mean (D x G) and variance (sigma, or scale and shape), as mclust's parameters")
  }
  pro <- as.numeric(init$pro)
  mean <- as.matrix(init$mean)
  v <- init$variance
  var <- if (!is.null(v$sigma) && length(v$sigma) == d * d * G) {
    sigma_diagonals(v$sigma, d, G)
  } else if (!is.null(v$scale) && !is.null(v$shape)) {
    t(as.matrix(v$shape)) * as.numeric(v$scale)
  } else {
    bad("$variance must hold sigma (D x D x G) or scale and shape")
  }
  var <- matrix(var, G, d)
  if (length(pro) != G || any(!is.finite(pro)) || any(pro <= 0) || !identical(dim(mean), c(d, G)) ||
      any(!is.finite(mean)) || any(!is.finite(var)) || any(var <= 0)) {
    bad(sprintf("must hold %d positive weights, a %d x %d matrix of means and positive variances", G, d, G))
  }
  start <- list(pro = pro / sum(pro), mu = t(mean), var = var)
  if (full) {
    if (is.null(v$sigma) || length(v$sigma) != d * d * G) bad("$variance must hold sigma (D x D x G) for \"VVV\"")
    start$sigma <- array(as.numeric(v$sigma), c(d, d, G))
  }
  start
}

# Starting parameters from keops_kmeans()'s clusters: each component a cluster's share, mean and
# variances (at least a thousandth of the data's, so that a cluster of one point has a density).
gmm_from_kmeans <- function(x, G, full = FALSE) {
  km <- suppressWarnings(keops_kmeans(x, G))
  floor <- pmax(apply(x, 2, stats::var) / 1000, .Machine$double.eps)
  sums <- rowsum(x^2, factor(km$cluster, seq_len(G)))
  size <- pmax(km$size, 1)
  var <- sweep(pmax(sums / size - km$centers^2, 0), 2, floor, pmax)
  start <- list(pro = size / sum(size), mu = unname(km$centers), var = unname(var))
  if (full) {
    d <- ncol(x)
    start$sigma <- array(0, c(d, d, G))
    for (g in seq_len(G)) {
      r <- sweep(x[km$cluster == g, , drop = FALSE], 2, km$centers[g, ])
      start$sigma[, , g] <- crossprod(r) / size[g] + diag(floor, d)
    }
  }
  start
}

# The log-likelihood of the parameters and the most likely component of each point.
gmm_estep <- function(x, mu, is2, cst) {
  ops <- gmm_operators(ncol(mu))
  inputs <- list(cst, is2, x, mu)
  list(loglik = sum(ops$lse(inputs)), classification = as.integer(ops$best(inputs)))
}

# The operators of EM in dimension `d` (made once per dimension).
gmm_operators <- function(d) {
  key <- as.character(d)
  if (is.null(gmm_cache$operators[[key]])) {
    terms <- "cst - 0.5 * WeightedSqDist(is2, x, mu)"            # log of component j's term at x_i
    vars <- c("cst = Vj(1)", sprintf(c("is2 = Vj(%d)", "x = Vi(%d)", "mu = Vj(%d)"), d))
    stats <- sprintf("stats = Vj(%d)", 1 + 2 * d)
    gmm_cache$operators[[key]] <- list(
      llold = keops_map("ll", "ll = Vi(1)"),
      lse = keops_kernel(sprintf("LogSumExp_Reduction(%s, 0)", terms), vars),
      ll = keops_kernel("Sum_Reduction(lse, 1)", "lse = Vi(1)"),
      delta = keops_map("Abs(ll - llold) / (IntCst(1) + Abs(ll))", c("ll = Vi(1)", "llold = Vi(1)")),
      # each component's total responsibility, sums of x and of x^2 in one reduction over i
      stats = keops_kernel(sprintf("Sum_Reduction(Exp(%s - lse) * Concat(IntCst(1), Concat(x, Square(x))), 1)",
                                   terms), c(vars, "lse = Vi(1)")),
      mu = keops_map(sprintf("Extract(stats, 1, %d) / Elem(stats, 0)", d), stats),
      is2 = keops_map(sprintf("Inv(Extract(stats, %d, %d) / Elem(stats, 0) - Square(mu))", d + 1, d),
                      c(stats, sprintf("mu = Vj(%d)", d))),
      cst = keops_map("Log(Elem(stats, 0) / n) + 0.5 * Sum(Log(is2)) - c0",
                      c(stats, sprintf("is2 = Vj(%d)", d), "n = Pm(1)", "c0 = Pm(1)")),
      best = keops_kernel(sprintf("ArgMax_Reduction(%s, 0)", terms), vars))
  }
  gmm_cache$operators[[key]]
}

# The program of EM in dimension `d`: E-step (log-sum-exp, log-likelihood, its relative change:
# the stopping rule), M-step (the sums, then the means, inverse variances and constants).
gmm_program <- function(d, iter.max, tol) {
  key <- paste(d, iter.max, tol)
  if (is.null(gmm_cache$programs[[key]])) {
    ops <- gmm_operators(d)
    gmm_cache$programs[[key]] <- keops_program(ops[c("llold", "lse", "ll", "delta", "stats", "mu", "is2", "cst")],
                                               iterations = iter.max, until = "delta", tol = tol, trace = "ll",
                                               output = c("mu", "is2", "cst"))
  }
  gmm_cache$programs[[key]]
}

gmm_cache <- new.env(parent = emptyenv())

#' @export
print.keops_gmm <- function(x, ...) {
  cat(sprintf("Gaussian mixture (keops_gmm, model %s): %d components in D = %d, N = %d\n", x$modelName, x$G,
              x$d, x$n))
  cat(sprintf("  EM: %d iterations; log-likelihood %.6g, BIC %.6g\n", x$iterations, x$loglik, x$bic))
  cat("  weights:", format(x$parameters$pro, digits = 3), "\n")
  invisible(x)
}

#' Classification and density of new points by a Gaussian mixture
#'
#' @param object A mixture fitted by [keops_gmm()].
#' @param newdata A numeric matrix (or data frame) of points, with the columns of the data.
#' @param z Whether to return the N x G matrix of the components' responsibilities.
#' @param ... Not used.
#' @return A list: `classification` (the most likely component of each row), `logdensity` (the
#'   mixture's log-density at each row) and, with `z = TRUE`, `z`.
#' @export
predict.keops_gmm <- function(object, newdata, z = FALSE, ...) {
  if (is.data.frame(newdata)) newdata <- as.matrix(newdata)
  d <- object$d
  if (!is.matrix(newdata) || !is.numeric(newdata) || ncol(newdata) != d || !all(is.finite(newdata))) {
    rkeops_abort("predict(): 'newdata' must be a numeric matrix of finite values with ", d, " columns",
                 kind = "input", arg = "newdata")
  }
  storage.mode(newdata) <- "double"
  p <- object$parameters
  mu <- t(p$mean)
  if (object$modelName == "VVV") {
    ops <- gmm_vvv_operators(d)
    inputs <- gmm_vvv_inputs(newdata, list(pro = p$pro, mu = mu, sigma = p$variance$sigma))
  } else {
    var <- sigma_diagonals(p$variance$sigma, d, object$G)
    ops <- gmm_operators(d)
    inputs <- list(matrix(gmm_vvi_constant(p$pro, var)), 1 / var, newdata, mu)
  }
  logdensity <- as.vector(ops$lse(inputs))
  out <- list(classification = as.integer(ops$best(inputs)), logdensity = logdensity)
  if (isTRUE(z)) {
    # each component's log-term, dense (the N x G matrix asked for): from the constant and precision
    cst <- inputs[[1L]]
    terms <- vapply(seq_len(object$G), function(g) {
      r <- t(newdata) - mu[g, ]
      prec <- if (object$modelName == "VVV") matrix(inputs[[2L]][g, ], d, d) else diag(inputs[[2L]][g, ], d)
      cst[g] - 0.5 * colSums(r * (prec %*% r))
    }, numeric(nrow(newdata)))
    out$z <- exp(matrix(terms, nrow(newdata)) - logdensity)
  }
  out
}

# EM with full covariances (model VVV) from `start` (pro, mu G x D, sigma D x D x G): per iteration,
# the E-step's log-sum-exp and the M-step's sums (weights, sums of x and of x x^T) as two reductions,
# the covariances inverted in R. The same counts and stopping rule as the VVI program.
gmm_vvv <- function(x, start, iter.max, tol) {
  d <- ncol(x)
  G <- length(start$pro)
  ops <- gmm_vvv_operators(d)
  theta <- list(pro = start$pro, mu = start$mu, sigma = start$sigma)
  trace <- numeric(0)
  for (t in seq_len(iter.max)) {
    inputs <- gmm_vvv_inputs(x, theta)
    lse <- ops$lse(inputs)
    trace[t] <- sum(lse)
    stats <- ops$stats(c(inputs, list(lse)))
    size <- stats[, 1L]
    mu <- stats[, 1L + seq_len(d), drop = FALSE] / size
    sigma <- array(0, c(d, d, G))
    for (g in seq_len(G)) {
      sigma[, , g] <- matrix(stats[g, 1L + d + seq_len(d * d)], d, d) / size[g] - tcrossprod(mu[g, ])
    }
    theta <- list(pro = size / nrow(x), mu = mu, sigma = sigma)
    if (t > 1L && abs(trace[t] - trace[t - 1L]) / (1 + abs(trace[t])) < tol) break
  }
  inputs <- gmm_vvv_inputs(x, theta)
  loglik <- sum(ops$lse(inputs))
  npar <- (G - 1) + G * d + G * d * (d + 1) / 2
  structure(list(parameters = list(pro = theta$pro, mean = t(theta$mu),
                                   variance = list(modelName = "VVV", d = d, G = G, sigma = theta$sigma)),
                 loglik = loglik, loglik_trace = c(trace, loglik), bic = 2 * loglik - npar * log(nrow(x)),
                 classification = as.integer(ops$best(inputs)), iterations = length(trace), n = nrow(x), d = d,
                 G = G, modelName = "VVV"),
            class = "keops_gmm")
}

# The inputs of the VVV operators for parameters `theta`: each component's constant (log weight,
# log-determinant), its precision matrix (a row of D^2 values), the points, the means.
gmm_vvv_inputs <- function(x, theta) {
  d <- ncol(x)
  G <- length(theta$pro)
  precision <- matrix(0, G, d * d)
  cst <- numeric(G)
  for (g in seq_len(G)) {
    u <- tryCatch(chol(theta$sigma[, , g]), error = function(e) NULL)
    if (is.null(u)) {
      rkeops_abort("keops_gmm(): the covariance of component ", g, " is singular (fewer distinct points than ",
                   "dimensions in it): try fewer components or another 'init'", kind = "input", arg = "G")
    }
    precision[g, ] <- chol2inv(u)
    cst[g] <- log(theta$pro[g]) - sum(log(diag(u))) - d / 2 * log(2 * pi)
  }
  list(matrix(cst), precision, x, theta$mu)
}

# The VVV operators in dimension `d` (made once per dimension).
gmm_vvv_operators <- function(d) {
  key <- paste0("VVV", d)
  if (is.null(gmm_cache$operators[[key]])) {
    terms <- "cst - 0.5 * SymSqNorm(prec, x - mu)"            # log of component j's term at x_i
    vars <- c("cst = Vj(1)", sprintf("prec = Vj(%d)", d * d), sprintf(c("x = Vi(%d)", "mu = Vj(%d)"), d))
    gmm_cache$operators[[key]] <- list(
      lse = keops_kernel(sprintf("LogSumExp_Reduction(%s, 0)", terms), vars),
      # each component's total responsibility, sums of x and of x x^T in one reduction over i
      stats = keops_kernel(sprintf("Sum_Reduction(Exp(%s - lse) * Concat(IntCst(1), Concat(x, TensorProd(x, x))), 1)",
                                   terms), c(vars, "lse = Vi(1)")),
      best = keops_kernel(sprintf("ArgMax_Reduction(%s, 0)", terms), vars))
  }
  gmm_cache$operators[[key]]
}

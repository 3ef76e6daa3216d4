# The fits of keops_krige(): the object, its printing, summary, plot and predictions.

# The object keops_krige() returns, of class "keops_krige": a list of its arguments (stats'
# fitted(), residuals() and coef() read `fitted.values`, `residuals` and `coefficients`).
# `coefficients`: w (N x E, or a vector for one series); `fitted.values`, `residuals`: K w at the
# observations and the observed values minus them, shaped like `coefficients`; `iterations`,
# `residual`, `rank`: the conjugate gradients' (solve()); `x`: the N x D points as given; `center`:
# the D coordinates subtracted from the points (and new points) before the engine sees them;
# `kernel`, `range`, `nugget`, `weights` as given to keops_krige(); `precision`: the engine's.
new_keops_krige <- function(coefficients, fitted.values, residuals, iterations, residual, rank, x, center,
                            kernel, range, nugget, weights = NULL, precision = "float32", call = NULL) {
  structure(list(coefficients = coefficients, fitted.values = fitted.values, residuals = residuals,
                 iterations = iterations, residual = residual, rank = rank, x = x, center = center,
                 kernel = kernel, range = range, nugget = nugget, weights = weights, precision = precision,
                 call = call),
            class = "keops_krige")
}

# The residuals as an N x E matrix, one column per series (named).
krige_residual_matrix <- function(object) {
  r <- as.matrix(object$residuals)
  if (is.null(colnames(r))) colnames(r) <- if (ncol(r) == 1L) "z" else paste0("z", seq_len(ncol(r)))
  r
}

# The observations that the fit uses (a weight of 0 drops one).
krige_used <- function(object) if (is.null(object$weights)) rep(TRUE, nrow(object$x)) else object$weights > 0

# One line on the kernel and its parameters, one on the conjugate gradients.
krige_model_line <- function(object) {
  sprintf("%s covariance, range %.4g, nugget %.4g", switch(object$kernel, gaussian = "Gaussian",
          laplacian = "Laplacian (exponential)", matern32 = "Matern 3/2", matern52 = "Matern 5/2"),
          object$range, object$nugget)
}
krige_solver_line <- function(object) {
  sprintf("conjugate gradients (%s): %d iterations, relative residual %.2g, %s", object$precision,
          object$iterations, object$residual,
          if (object$rank > 0L) sprintf("Nystrom preconditioner of rank %d", object$rank) else "no preconditioner")
}

#' @export
print.keops_krige <- function(x, ...) {
  r <- krige_residual_matrix(x)
  used <- krige_used(x)
  if (!is.null(x$call)) cat("Call: ", krige_call_text(x$call), "\n", sep = "")
  cat("Simple kriging: ", krige_model_line(x), "\n", sep = "")
  cat(sprintf("%d observations%s in %d dimension%s, %d series; residual RMS %s\n", nrow(x$x),
              if (all(used)) "" else sprintf(" (%d of weight 0)", sum(!used)), ncol(x$x),
              if (ncol(x$x) > 1L) "s" else "", ncol(r),
              format_some(sqrt(colMeans(r[used, , drop = FALSE]^2)))))
  cat(krige_solver_line(x), "\n", sep = "")
  invisible(x)
}

# The call in at most 3 lines (do.call() puts the data themselves in it).
krige_call_text <- function(call) {
  text <- deparse(call)
  paste(if (length(text) > 3L) c(text[1:3], "    ...") else text, collapse = "\n")
}

# The first values of v (at most 3, with the number of the others), for one line of print().
format_some <- function(v, n = 3L) {
  s <- paste(formatC(v[seq_len(min(n, length(v)))], digits = 3, format = "g"), collapse = ", ")
  if (length(v) > n) paste0(s, sprintf(", ... (%d more)", length(v) - n)) else s
}

#' @export
summary.keops_krige <- function(object, ...) {
  r <- krige_residual_matrix(object)
  used <- krige_used(object)
  r <- r[used, , drop = FALSE]
  table <- t(apply(r, 2L, stats::quantile, names = FALSE))
  table <- cbind(table, sqrt(colMeans(r^2)))
  dimnames(table) <- list(colnames(r), c("Min", "1Q", "Median", "3Q", "Max", "RMS"))
  structure(list(call = object$call, model = krige_model_line(object), solver = krige_solver_line(object),
                 n = nrow(object$x), used = sum(used), dimension = ncol(object$x), residuals = table),
            class = "summary.keops_krige")
}

#' @export
print.summary.keops_krige <- function(x, digits = max(3L, getOption("digits") - 3L), ...) {
  if (!is.null(x$call)) cat("Call:\n", krige_call_text(x$call), "\n\n", sep = "")
  cat("Simple kriging: ", x$model, "\n", sep = "")
  cat(sprintf("%d observations%s in %d dimension%s\n\n", x$n,
              if (x$used == x$n) "" else sprintf(" (%d used, %d of weight 0)", x$used, x$n - x$used),
              x$dimension, if (x$dimension > 1L) "s" else ""))
  cat("Residuals (observations of positive weight):\n")
  print(signif(x$residuals, digits), ...)
  cat("\n", x$solver, "\n", sep = "")
  invisible(x)
}

#' Plot a kriging fit
#'
#' Draws, for each observation (each series in its colour), the observed value against the fitted
#' value with the line `observed = fitted` (`which = "observed"`), or the residual against the
#' fitted value with the line `residual = 0` (`which = "residuals"`), in base graphics, with a
#' legend. Observations of weight 0 (not fitted, predicted) are drawn as crosses.
#'
#' @param x A fit made by [keops_krige()].
#' @param which `"observed"` or `"residuals"`.
#' @param col `NULL` (a default palette) or the colours of the series.
#' @param legend Where the legend goes (a keyword of [graphics::legend()]), or `NULL` for none.
#' @param ... Arguments of [graphics::plot.default()] (title, labels, limits).
#' @return Invisibly, the data frame of the points drawn: `series`, `fitted`, `observed`,
#'   `residual` and `dropped` (weight 0), one row per observation and series.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(400), 200, 2)
#' z <- sin(6 * x[, 1]) + rnorm(200, sd = 0.2)
#' fit <- keops_krige(x, z, "matern32", range = 0.3, nugget = 0.04)
#' plot(fit)
#' plot(fit, "residuals")
plot.keops_krige <- function(x, which = c("observed", "residuals"), col = NULL, legend = "topleft", ...) {
  which <- check_choice(which, c("observed", "residuals"), "which")
  r <- krige_residual_matrix(x)
  fitted <- as.matrix(x$fitted.values)
  E <- ncol(r)
  if (is.null(col)) col <- if (E == 1L) "grey20" else grDevices::hcl.colors(E, "Dark 3")
  col <- rep_len(col, E)
  dropped <- !krige_used(x)
  drawn <- data.frame(series = rep(colnames(r), each = nrow(r)), fitted = as.vector(fitted),
                      observed = as.vector(fitted + r), residual = as.vector(r), dropped = rep(dropped, E))
  vertical <- if (which == "observed") drawn$observed else drawn$residual
  graphics::plot(drawn$fitted, vertical, col = rep(col, each = nrow(r)), pch = ifelse(drawn$dropped, 4, 1),
                 xlab = "fitted", ylab = which, ...)
  if (which == "observed") graphics::abline(0, 1, lty = 2) else graphics::abline(h = 0, lty = 2)
  if (!is.null(legend)) {
    labels <- c(if (E == 1L) "observations" else colnames(r), if (any(dropped)) "weight 0",
                if (which == "observed") "observed = fitted" else "residual = 0")
    k <- length(labels)
    graphics::legend(legend, legend = labels, col = c(col, if (any(dropped)) "grey40", "black"),
                     pch = c(rep(1, E), if (any(dropped)) 4, NA), lty = c(rep(NA, k - 1L), 2), bty = "n")
  }
  invisible(drawn)
}

#' Kriging predictions at new points
#'
#' The kriging predictor `k(newdata, x) w` (one reduction over the new points times the data
#' points), and with `se = TRUE` its standard errors `sqrt(1 - k_y^T (K + nugget W^-1)^-1 k_y)`
#' (the noise-free process's kriging variance): they take the conjugate gradients of [solve()] with
#' the new points' covariances with the data as right-hand sides, in blocks of 256 new points (an
#' N x 256 dense block at a time), so they are meant for up to a few thousand new points. Without
#' `newdata`, the fitted values (as `predict.lm()`), and with `se = TRUE` the standard errors at the
#' observed points.
#'
#' @param object A fit made by [keops_krige()].
#' @param newdata A numeric matrix (or data frame, or a vector for one-dimensional data) of new
#'   points, with the columns of `x`; missing or `NULL`: the observed points.
#' @param se Whether to return the standard errors too.
#' @param ... Not used.
#' @return The predictions (a vector, or a matrix for several series); with `se = TRUE`, a list of
#'   `fit` and `se` (one per point: it does not depend on the series).
#' @export
predict.keops_krige <- function(object, newdata, se = FALSE, ...) {
  check_flag(se, "se", "predict")
  if (missing(newdata) || is.null(newdata)) {
    fit <- object$fitted.values
    u <- NULL
  } else {
    y <- check_points(newdata, "newdata", "predict", d = ncol(object$x))
    u <- krige_coordinates(y, object$center, object$range)
    ux <- krige_coordinates(object$x, object$center, object$range)
    fit <- krige_kernel(Vi(u), Vj(ux), object$kernel) %*% as.matrix(object$coefficients)
    fit <- if (is.null(dim(object$coefficients))) as.vector(fit) else {
      fit <- unclass(fit)
      colnames(fit) <- colnames(object$coefficients)
      fit
    }
  }
  if (!se) return(fit)
  if (is.null(u)) u <- krige_coordinates(object$x, object$center, object$range)
  list(fit = fit, se = sqrt(pmax(krige_variance(object, u), 0)))
}

# The kriging variances 1 - k_u^T (K + nugget W^-1)^-1 k_u at the coordinates u (centred, scaled),
# by blocks of 256 right-hand sides. (One preconditioner shared by the blocks saved nothing
# measurable: N = 1201, 601 points, 69 s shared vs 66 s; applying it to 256 columns costs more than
# building it.)
krige_variance <- function(object, u) {
  ux <- krige_coordinates(object$x, object$center, object$range)
  root <- if (is.null(object$weights)) NULL else sqrt(object$weights)
  K <- krige_system(ux, object$kernel, root)
  blocks <- split(seq_len(nrow(u)), (seq_len(nrow(u)) - 1L) %/% 256L)
  unlist(use.names = FALSE, lapply(blocks, function(rows) {
    k <- krige_dense(ux, u[rows, , drop = FALSE], object$kernel)
    if (!is.null(root)) k <- k * root
    v <- lazy_solve(K, k, alpha = object$nugget, eps = 1e-8, maxiter = 10 * nrow(ux), what = "predict()",
                    alpha_arg = "nugget")
    1 - colSums(k * v)
  }))
}

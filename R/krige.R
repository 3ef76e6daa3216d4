#' Kriging (Gaussian-process regression) with a known covariance
#'
#' `keops_krige()` fits the simple kriging predictor of the values `z` observed at the points `x`,
#' for a stationary covariance of unit variance `k(d)` at distance `d` (the `kernel`, with its
#' `range`) plus a nugget (white noise of variance `nugget / weights`): its coefficients solve
#' `(K + nugget W^-1) w = z`, with `K` the `N x N` matrix of `k(|x_i - x_j|)`, never stored: the
#' conjugate gradients of [solve()] (preconditioned by a Nystrom approximation of `K`), each
#' iteration one reduction by the engine. `predict()` then costs one reduction over the new points
#' times the N data points.
#'
#' Kernels, with r the distance divided by `range`: `"gaussian"` `exp(-r^2 / 2)`, `"laplacian"` `exp(-r)`,
#' `"matern32"` `(1 + sqrt(3) r) exp(-sqrt(3) r)`, `"matern52"` `(1 + sqrt(5) r + 5 r^2 / 3)
#' exp(-sqrt(5) r)`. Observation weights scale the system symmetrically, `(W^1/2 K W^1/2 + nugget
#' I) v = W^1/2 z`, `w = W^1/2 v` (a zero weight drops the observation).
#'
#' @param x A numeric matrix (or data frame) of N points, one per row (a vector: one column).
#' @param z The N observed values (a vector), or an `N x E` matrix of E series observed at the same
#'   points.
#' @param kernel The covariance function: `"gaussian"`, `"laplacian"`, `"matern32"` or `"matern52"`.
#' @param range Its length scale (positive).
#' @param nugget The variance of the observation noise (positive: it keeps the system well posed).
#' @param weights `NULL` or N non-negative observation weights (the noise of observation i has
#'   variance `nugget / weights[i]`), of positive sum.
#' @param eps,maxiter The conjugate gradients' tolerance and most iterations, as for [solve()].
#' @return An object of class `"keops_krige"`: `coefficients` (N x E, or a vector), `fitted.values`
#'   and `residuals` (of the observations), `iterations` and `residual` (the relative residual of the
#'   system, from [solve()]), `rank` (of its preconditioner), and what `predict()` needs (`x`,
#'   `kernel`, `range`, `nugget`, `weights`).
#' @seealso `vignette("kriging")`, [solve()].
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(1000), 500, 2)
#' z <- sin(6 * x[, 1]) + cos(4 * x[, 2]) + rnorm(500, sd = 0.1)
#' fit <- keops_krige(x, z, "matern52", range = 0.2, nugget = 0.01)
#' fit$iterations
#' new <- matrix(runif(10), 5, 2)
#' cbind(predict(fit, new), truth = sin(6 * new[, 1]) + cos(4 * new[, 2]))
#' predict(fit, new, se = TRUE)$se
keops_krige <- function(x, z, kernel = c("gaussian", "laplacian", "matern32", "matern52"), range, nugget,
                        weights = NULL, eps = 1e-6, maxiter = 1000) {
  fun <- "keops_krige"
  x <- check_points(x, "x", fun)
  n <- nrow(x)
  vector_z <- is.null(dim(z))
  if (is.data.frame(z)) z <- as.matrix(z)
  if (!is.numeric(z) || NROW(z) != n || !all(is.finite(z)) || length(dim(z)) > 2L) {
    rkeops_abort(arg_label("z", fun), " must be ", n, " finite values (one per row of 'x'), or a matrix of ", n,
                 " rows", kind = "input", arg = "z")
  }
  zm <- matrix(as.double(z), n)
  kernel <- check_choice(kernel, c("gaussian", "laplacian", "matern32", "matern52"), "kernel")
  check_number(range, "range", fun, sign = "positive")
  check_number(nugget, "nugget", fun, sign = "positive")
  if (!is.null(weights)) weights <- check_point_weights(weights, n, "weights", fun)
  root <- if (is.null(weights)) NULL else sqrt(weights)
  K <- krige_kernel(Vi(x), Vj(x), kernel, range)
  if (!is.null(root)) K <- Vi(matrix(root)) * K * Vj(matrix(root))
  sol <- solve(K, if (is.null(root)) zm else zm * root, alpha = nugget, eps = eps, maxiter = maxiter, info = TRUE)
  v <- matrix(as.vector(sol), n)
  w <- if (is.null(root)) v else v * root
  # K w, from the system: z - nugget W^-1 w (an observation of weight 0: computed)
  fitted <- zm - nugget * (if (is.null(root)) v else v / ifelse(root > 0, root, 1))
  dropped <- if (is.null(root)) integer(0) else which(root == 0)
  if (length(dropped)) {
    fitted[dropped, ] <- unclass(krige_kernel(Vi(x[dropped, , drop = FALSE]), Vj(x), kernel, range) %*% w)
  }
  shape <- function(m) if (vector_z) as.vector(m) else m
  structure(list(coefficients = shape(w), fitted.values = shape(fitted), residuals = shape(zm - fitted),
                 iterations = attr(sol, "iterations"), residual = attr(sol, "residual"), rank = attr(sol, "rank"),
                 x = x, kernel = kernel, range = range, nugget = nugget, weights = weights),
            class = "keops_krige")
}

# The covariance k(|a_i - b_j|) as a LazyTensor, for the LazyTensors of points `a` (i) and `b` (j).
krige_kernel <- function(a, b, kernel, range) krige_covariance(sqdist(a, b) / range^2, kernel)

# The same covariance as a dense matrix of R (for the kriging variances of a few points).
krige_dense <- function(a, b, kernel, range) {
  krige_covariance(pmax(outer(rowSums(a^2), rowSums(b^2), "+") - 2 * tcrossprod(a, b), 0) / range^2, kernel)
}

# The covariance of the squared scaled distances `r2` (a LazyTensor or a matrix: the same arithmetic).
krige_covariance <- function(r2, kernel) {
  switch(kernel,
         gaussian = exp(-r2 / 2),
         laplacian = exp(-sqrt(r2)),
         matern32 = (1 + sqrt(3 * r2)) * exp(-sqrt(3 * r2)),
         matern52 = (1 + sqrt(5 * r2) + 5 / 3 * r2) * exp(-sqrt(5 * r2)))
}

#' Kriging predictions at new points
#'
#' The kriging predictor `k(newdata, x) w` (one reduction over the new points times the data
#' points), and with `se = TRUE` its standard errors `sqrt(1 - k_y^T (K + nugget W^-1)^-1 k_y)`
#' (the noise-free process's kriging variance): they take one more [solve()] with the new points'
#' covariances with the data as right-hand sides, in blocks of 256 new points (an N x 256 dense
#' block at a time), so they are meant for up to a few thousand new points.
#'
#' @param object A fit made by [keops_krige()].
#' @param newdata A numeric matrix (or data frame, or a vector for one-dimensional data) of new
#'   points, with the columns of `x`.
#' @param se Whether to return the standard errors too.
#' @param ... Not used.
#' @return The predictions (a vector, or a matrix for several series); with `se = TRUE`, a list of
#'   `fit` and `se`.
#' @export
predict.keops_krige <- function(object, newdata, se = FALSE, ...) {
  y <- check_points(newdata, "newdata", "predict", d = ncol(object$x))
  w <- as.matrix(object$coefficients)
  fit <- krige_kernel(Vi(y), Vj(object$x), object$kernel, object$range) %*% w
  fit <- if (is.null(dim(object$coefficients))) as.vector(fit) else unclass(fit)
  if (!isTRUE(se)) return(fit)
  root <- if (is.null(object$weights)) NULL else sqrt(object$weights)
  K <- krige_kernel(Vi(object$x), Vj(object$x), object$kernel, object$range)
  if (!is.null(root)) K <- Vi(matrix(root)) * K * Vj(matrix(root))
  blocks <- split(seq_len(nrow(y)), (seq_len(nrow(y)) - 1L) %/% 256L)
  var <- unlist(use.names = FALSE, lapply(blocks, function(rows) {
    k <- krige_dense(object$x, y[rows, , drop = FALSE], object$kernel, object$range)
    if (!is.null(root)) k <- k * root
    v <- solve(K, k, alpha = object$nugget, eps = 1e-8, maxiter = 10 * nrow(k))
    1 - colSums(k * v)
  }))
  list(fit = fit, se = sqrt(pmax(var, 0)))
}

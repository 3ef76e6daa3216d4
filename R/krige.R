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
#' The kernels are stationary, so the engine is given the points centred (on the middle of their
#' bounding box) and divided by `range`, once, in float64: coordinates as large as the data's
#' extent in ranges, whatever its origin (UTM northings of 5e6 m lose no digits in float32), and
#' one formula per kernel whatever the range. `predict()` moves the new points the same way. What
#' float32 then bounds is the cancellation in the sums `sum_j k(y, x_j) w_j`: errors of about
#' `2e-8 sum_j |k(y, x_j) w_j|`, and the coefficients grow as the nugget shrinks (400 points on the
#' unit square, Gaussian, range 0.2: 1e-5 with nugget 0.01, 1e-3 with nugget 1e-4, whatever
#' `eps`); `set_rkeops_options(precision = "float64")` when a small nugget needs more digits.
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
#' @return An object of class `"keops_krige"` (`print()`, `summary()`,
#'   `plot()`, `predict()`, `fitted()` and `residuals()` methods): `coefficients` (N x E, or a
#'   vector), `fitted.values` and `residuals` (of the observations), `iterations` and `residual`
#'   (the relative residual of the system, from [solve()]), `rank` (of its preconditioner), and what
#'   `predict()` needs (`x`, `center`, `kernel`, `range`, `nugget`, `weights`).
#' @seealso `vignette("kriging")`, [solve()], [predict.keops_krige()], [plot.keops_krige()].
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
#' fit
#' summary(fit)
#' plot(fit)
keops_krige <- function(x, z, kernel = c("gaussian", "laplacian", "matern32", "matern52"), range, nugget,
                        weights = NULL, eps = 1e-6, maxiter = 1000) {
  fun <- "keops_krige"
  call <- match.call()
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
  center <- (apply(x, 2L, min) + apply(x, 2L, max)) / 2
  u <- krige_coordinates(x, center, range)
  root <- if (is.null(weights)) NULL else sqrt(weights)
  K <- krige_system(u, kernel, root)
  sol <- lazy_solve(K, if (is.null(root)) zm else zm * root, alpha = nugget, eps = eps, maxiter = maxiter,
                    info = TRUE, what = "keops_krige()", alpha_arg = "nugget")
  v <- matrix(as.vector(sol), n)
  w <- if (is.null(root)) v else v * root
  # K w, from the system: z - nugget W^-1 w (an observation of weight 0: computed)
  fitted <- zm - nugget * (if (is.null(root)) v else v / ifelse(root > 0, root, 1))
  dropped <- if (is.null(root)) integer(0) else which(root == 0)
  if (length(dropped)) {
    fitted[dropped, ] <- unclass(krige_kernel(Vi(u[dropped, , drop = FALSE]), Vj(u), kernel) %*% w)
  }
  shape <- function(m) {
    if (vector_z) return(as.vector(m))
    colnames(m) <- colnames(z)
    m
  }
  new_keops_krige(coefficients = shape(w), fitted.values = shape(fitted), residuals = shape(zm - fitted),
                  iterations = attr(sol, "iterations"), residual = attr(sol, "residual"), rank = attr(sol, "rank"),
                  x = x, center = center, kernel = kernel, range = range, nugget = nugget, weights = weights,
                  precision = get_rkeops_options("precision"), call = call)
}

# The points as the engine sees them: centred on `center` and divided by `range`, in float64.
krige_coordinates <- function(x, center, range) (x - rep(center, each = nrow(x))) / range

# The matrix of the system, W^1/2 K W^1/2 (K without weights: root = NULL), for the coordinates u.
krige_system <- function(u, kernel, root = NULL) {
  K <- krige_kernel(Vi(u), Vj(u), kernel)
  if (is.null(root)) K else Vi(matrix(root)) * K * Vj(matrix(root))
}

# The covariance k(|a_i - b_j|) as a LazyTensor, for the LazyTensors of coordinates `a` (i) and `b`
# (j), already divided by the range.
krige_kernel <- function(a, b, kernel) krige_covariance(sqdist(a, b), kernel)

# The same covariance as a dense matrix of R, from the coordinates' differences (for the kriging
# variances of a few points).
krige_dense <- function(a, b, kernel) {
  r2 <- 0
  for (k in seq_len(ncol(a))) r2 <- r2 + outer(a[, k], b[, k], "-")^2
  krige_covariance(r2, kernel)
}

# The covariance of the squared scaled distances `r2` (a LazyTensor or a matrix: the same arithmetic).
krige_covariance <- function(r2, kernel) {
  switch(kernel,
         gaussian = exp(-r2 / 2),
         laplacian = exp(-sqrt(r2)),
         matern32 = (1 + sqrt(3 * r2)) * exp(-sqrt(3 * r2)),
         matern52 = (1 + sqrt(5 * r2) + 5 / 3 * r2) * exp(-sqrt(5 * r2)))
}

#' Kernel losses between point clouds: energy distance and maximum mean discrepancies
#'
#' `keops_mmd()` computes, as GeomLoss's `SamplesLoss("energy" | "gaussian" | "laplacian")`, the
#' kernel norm of the difference of two weighted point clouds,
#' `(1/2) <a, K_xx a> + (1/2) <b, K_yy b> - <a, K_xy b>`, with the kernel `k(x, y) = -|x - y|`
#' (`"energy"`: half the energy distance), `exp(-|x - y|^2 / (2 blur^2))` (`"gaussian"`) or
#' `exp(-|x - y| / blur)` (`"laplacian"`): three kernel sums (N x N, M x M and N x M pairs), never
#' the matrices.
#'
#' @param x,y Numeric matrices of points, one per row, with the same number of columns.
#' @param a,b `NULL` (uniform: `1/N`, `1/M`) or the non-negative weights of the points, used as
#'   given, as GeomLoss does: masses other than 1 are measures of those masses (the loss of clouds of
#'   masses 1 and 1.5 is not that of their normalised weights). Unlike [keops_sinkhorn()], whose
#'   balanced transport normalises them.
#' @param kernel `"energy"`, `"gaussian"` or `"laplacian"`.
#' @param blur The kernel's length scale (not used by `"energy"`).
#' @return The loss, a number.
#' @seealso [keops_sinkhorn()].
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(400), 200, 2)
#' y <- matrix(rnorm(600, 1), 300, 2)
#' keops_mmd(x, y)                                  # energy
#' keops_mmd(x, y, kernel = "gaussian", blur = 0.5)
keops_mmd <- function(x, y, a = NULL, b = NULL, kernel = c("energy", "gaussian", "laplacian"), blur = 0.05) {
  fun <- "keops_mmd"
  x <- check_points(x, "x", fun)
  y <- check_points(y, "y", fun, d = ncol(x))
  a <- check_point_weights(a, nrow(x), "a", fun)
  b <- check_point_weights(b, nrow(y), "b", fun)
  kernel <- check_choice(kernel, c("energy", "gaussian", "laplacian"), "kernel")
  check_number(blur, "blur", fun, sign = "positive")
  # <u, K v> over the pairs of p (i) and q (j)
  pair_sum <- function(p, u, q, v) {
    k <- switch(kernel,
                energy = -sqrt(sqdist(Vi(p), Vj(q))),
                gaussian = exp(-sqdist(Vi(p), Vj(q)) / (2 * blur^2)),
                laplacian = exp(-sqrt(sqdist(Vi(p), Vj(q))) / blur))
    sum(u * as.vector(k %*% matrix(v)))
  }
  pair_sum(x, a, x, a) / 2 + pair_sum(y, b, y, b) / 2 - pair_sum(x, a, y, b)
}

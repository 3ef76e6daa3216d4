# solve() for LazyTensors: conjugate gradients with the engine's products.

#' Solve a linear system with a symbolic matrix
#'
#' Solves \eqn{(\alpha I + K) x = b}{(alpha I + K) x = b} by conjugate gradients, where `K` is a
#' LazyTensor of dimension 1 standing for a symmetric positive semi-definite
#' `N x N` matrix (such as `exp(-sqdist(Vi(x), Vj(x)))`) and
#' \eqn{\alpha I + K}{alpha I + K} is positive definite. Each product by `K` is computed by
#' the engine (`K %*% p`, in the precision of [get_rkeops_options()]); the
#' iterations run in R in double precision, on all the columns of `b` at once.
#' @param a The LazyTensor `K`, with as many rows (`i`) as columns (`j`).
#' @param b An `N x E` numeric matrix (or a vector of length `N`).
#' @param alpha A non-negative number added to the diagonal (a ridge or
#'   nugget).
#' @param eps The tolerance: the iterations stop when the residual of each
#'   column is below `eps` times the norm of that column of `b`.
#' @param maxiter The maximum number of iterations; a warning is given when
#'   they do not suffice.
#' @param ranges Optional: a block-sparse `K` (see [keops_ranges]): every
#'   product by `K` reduces only the blocks that `ranges` keeps, e.g. a kernel
#'   truncated beyond a cut-off radius. The truncated matrix must stay
#'   symmetric (the same clusters for `i` and `j`, a symmetric `keep` in
#'   [from_matrix()]) and \eqn{\alpha I + K}{alpha I + K} positive definite:
#'   truncation moves each eigenvalue by at most the largest row sum of the
#'   absolute values left out, so a nugget `alpha` above that bound is enough.
#' @param ... Unused.
#' @return The `N x E` matrix \eqn{x}.
#' @seealso `%*%`
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(60), 20, 3)
#' K <- exp(-sqdist(Vi(x), Vj(x)))
#' b <- matrix(rnorm(20), 20, 1)
#' sol <- solve(K, b, alpha = 0.1)     # 20 x 1
#' # the same with the dense 20 x 20 matrix in plain R
#' D2 <- outer(rowSums(x^2), rowSums(x^2), "+") - 2 * x %*% t(x)
#' all.equal(sol, solve(exp(-D2) + 0.1 * diag(20), b), tolerance = 1e-4)
solve.LazyTensor <- function(a, b, alpha = 0, eps = 1e-6, maxiter = 10 * NROW(b), ranges = NULL, ...) {
  matvec <- lazy_matvec(a, "solve")
  if (is.null(dim(b))) b <- matrix(b, ncol = 1L)
  if (!is.numeric(alpha) || length(alpha) != 1L || !is.finite(alpha)) {
    stop("solve(): 'alpha' must be a single number", call. = FALSE)
  }
  storage.mode(b) <- "double"
  op <- function(v) matvec(v, ranges) + alpha * v
  x <- matrix(0, nrow(b), ncol(b))
  r <- b
  p <- r
  rr <- colSums(r * r)
  target <- (eps * sqrt(colSums(b * b)))^2
  converged <- all(rr <= target)
  iter <- 0L
  while (!converged && iter < maxiter) {
    iter <- iter + 1L
    Ap <- op(p)
    step_len <- rr / pmax(colSums(p * Ap), .Machine$double.xmin)
    step_len[rr <= target] <- 0
    x <- x + scale_columns(p, step_len)
    r <- r - scale_columns(Ap, step_len)
    rr_new <- colSums(r * r)
    beta <- rr_new / pmax(rr, .Machine$double.xmin)
    p <- r + scale_columns(p, beta)
    rr <- rr_new
    converged <- all(rr <= target)
  }
  if (!converged) {
    warning(sprintf("solve(): conjugate gradients did not converge in %d iterations (relative residual %.3g)",
                    iter, max(sqrt(rr / pmax(colSums(b * b), .Machine$double.xmin)))), call. = FALSE)
  }
  x
}

# m %*% diag(s) without sweep()'s overhead: each column of m times the matching element of s.
scale_columns <- function(m, s) if (length(s) == 1L) m * s else m * rep(s, each = nrow(m))

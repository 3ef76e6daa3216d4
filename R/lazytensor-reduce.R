# Reductions of LazyTensor objects: the formula text and declarations go to keops_kernel(), whose
# operators are cached by formula and declarations.

.lazy_ops <- new.env(parent = emptyenv())

lazy_operator <- function(formula, args) {
  key <- paste(c(formula, args), collapse = "\r")
  op <- .lazy_ops[[key]]
  if (is.null(op)) {
    op <- keops_kernel(formula, args)
    assign(key, op, envir = .lazy_ops)
  }
  op
}

# The engine's axis for `index`: "i" reduces over i (axis 1), "j" over j (axis 0).
lazy_axis <- function(index, fun) {
  if (!is.character(index) || length(index) != 1L || is.na(index) || !index %in% c("i", "j")) {
    stop(sprintf("%s(): 'index' must be \"i\" (reduce over i) or \"j\" (reduce over j)", fun),
         call. = FALSE)
  }
  if (index == "i") 1L else 0L
}

# Builds "Name_Reduction(f, [middle,] axis)" and runs it on the variables of x (over the blocks of
# `ranges`, when given).
lazy_reduce <- function(x, name, index, fun, middle = NULL, weight = NULL, ranges = NULL) {
  need_lazy(x, "x", fun)
  no_complex(list(x, weight), paste0(fun, "()"))
  axis <- lazy_axis(index, fun)
  if (!is.null(weight)) {
    m <- lazy_merge(list(x, weight))
    parts <- m$formulas
    vars <- m$vars
    cats <- m$cats
    args <- sprintf("V%d = %s(%d)", seq_along(vars) - 1L, cats, m$dims)
  } else {
    parts <- x$formula
    vars <- x$vars
    cats <- x$cats
    args <- x$args
  }
  for (cat in c("Vi", "Vj")) {
    if (!cat %in% cats) {
      stop(sprintf("%s(): the LazyTensor has no variable indexed by %s (made with %s())", fun,
                   substr(cat, 2, 2), cat), call. = FALSE)
    }
  }
  body <- paste(c(parts, middle, axis), collapse = ", ")
  formula <- gsub("@([0-9]+)@", "V\\1", sprintf("%s_Reduction(%s)", name, body))
  lazy_operator(formula, args)(vars, ranges)
}

need_dim1 <- function(x, fun, label = "x") {
  if (x$dimres != 1L) {
    stop(sprintf("%s(): '%s' must have dimension 1, not %d", fun, label, x$dimres), call. = FALSE)
  }
}

#' Reductions of LazyTensor objects
#'
#' Reduce a symbolic matrix \eqn{F_{ij}}{F_ij} (a [LazyTensor] with at least one
#' variable indexed by `i` and one indexed by `j`) over `index = "j"` (one
#' result per `i`: `N` rows) or `index = "i"` (one result per `j`: `M` rows).
#' The formula is written and run by the engine of [keops_kernel()], with the
#' options of [get_rkeops_options()]. The operators are cached: the same
#' reduction on new data with the same numbers of columns is not parsed again.
#' * `sum()`, `min()`, `max()`: sums, minima, maxima (component by component
#'   when `F` has dimension `d > 1`);
#' * `argmin()`, `argmax()`: 1-based indices of the minima and maxima;
#'   `min_argmin()`, `max_argmax()`: both;
#' * `Kmin()`: the `K` smallest values in increasing order, `argKmin()` their
#'   1-based indices (the `K` nearest neighbours when `F` is a distance),
#'   `Kmin_argKmin()` both;
#' * `logsumexp()`: \eqn{\log \sum_j \exp F_{ij}}{log sum_j exp(F_ij)}, or
#'   \eqn{\log \sum_j \exp(F_{ij}) w_{ij}}{log sum_j exp(F_ij) w_ij} with `weight` (computed stably);
#' * `sumsoftmaxweight()`: \eqn{\sum_j \exp(F_{ij}) w_{ij} / \sum_j \exp F_{ij}}{sum_j exp(F_ij) w_ij / sum_j exp(F_ij)}
#'   (computed stably).
#'
#' For `logsumexp()` and `sumsoftmaxweight()`, `F` must have dimension 1.
#'
#' Without `index`, `sum()`, `min()`, `max()`, `argmin()` and `argmax()`
#' reduce the components of each \eqn{F_{ij}}{F_ij} instead and return a LazyTensor
#' of dimension 1 (KeOps' `Sum(F)`, `Min(F)`, ...; `argmin(F)` and
#' `argmax(F)` are then **0-based** positions, as in KeOps).
#' @param x A LazyTensor: the symbolic matrix \eqn{F}.
#' @param index `"i"` or `"j"`: the index reduced over.
#' @param K The number of smallest values: a whole number from 1 to the
#'   number of rows reduced over.
#' @param weight The weights \eqn{w}: a LazyTensor (such as `Vj(w)`) or a
#'   number, of dimension `e`.
#' @param ranges Optional: only the blocks of the symbolic matrix that
#'   `ranges` keeps are reduced (a block-sparse reduction; see the `ranges`
#'   argument of the function made by [keops_kernel()], and [from_matrix()]).
#' @param ... Unused.
#' @return With `n = N` for `index = "j"` and `n = M` for `index = "i"`, and
#'   `d` the dimension of `x`:
#'   * `sum()`, `min()`, `max()`: an `n x d` numeric matrix;
#'   * `argmin()`, `argmax()`: an `n x d` integer matrix;
#'   * `min_argmin()`, `max_argmax()`: `list(values =, indices =)` of two such
#'     matrices;
#'   * `Kmin()`, `argKmin()`: an `n x K` numeric or integer matrix (an
#'     `n x K x d` array when `d > 1`); `Kmin_argKmin()`:
#'     `list(values =, indices =)` of both;
#'   * `logsumexp()`: an `n x 1` matrix, `n x e` with `weight`;
#'     `sumsoftmaxweight()`: an `n x e` matrix;
#'   * a LazyTensor of dimension 1 when `index` is missing (see above).
#' @name lazytensor_reductions
#' @seealso `%*%` and [solve.LazyTensor()] for products and linear systems,
#'   [grad()] for gradients.
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' xi <- Vi(x); yj <- Vj(y)
#' D <- sqdist(xi, yj)                        # symbolic 10 x 20
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)  # dense
#' tol <- 1e-5                                # float32 by default
#' all.equal(sum(exp(-D), index = "j"), as.matrix(rowSums(exp(-D2))), tolerance = tol)
#' all.equal(min(D, index = "i"), as.matrix(apply(D2, 2, min)), tolerance = tol)
#' nn <- argmin(D, index = "j")               # nearest y_j of each x_i: 10 x 1
#' t(nn)
#' all(nn == apply(D2, 1, which.min))
#' far <- max_argmax(D, index = "i")          # farthest x_i of each y_j
#' all(far$indices == apply(D2, 2, which.max))
#' k3 <- Kmin_argKmin(D, 3, index = "j")      # 3 nearest y_j of each x_i: 10 x 3
#' all.equal(k3$values, t(apply(D2, 1, sort))[, 1:3], tolerance = tol)
#' all(k3$indices == t(apply(D2, 1, order))[, 1:3])
#' all(argKmin(D, 3, index = "i") == t(apply(D2, 2, order))[, 1:3])  # 20 x 3
#' dim(Kmin(xi - yj, 2, index = "j"))         # per component: 10 x 2 x 3
#' all.equal(logsumexp(-D, index = "j"), as.matrix(log(rowSums(exp(-D2)))),
#'           tolerance = tol)
#' w <- runif(20)
#' all.equal(logsumexp(-D, index = "j", weight = Vj(w)),
#'           log(exp(-D2) %*% w), tolerance = tol)
#' # softmax-weighted means of the y_j: 10 x 3
#' sm <- sumsoftmaxweight(-D, yj, index = "j")
#' all.equal(sm, exp(-D2) %*% y / rowSums(exp(-D2)), tolerance = tol)
#' # without index: the sum of the components, a LazyTensor of dimension 1
#' S <- sum(xi - yj)
#' S
#' all.equal(sum(S, index = "j"), as.matrix(20 * rowSums(x) - sum(y)), tolerance = tol)
NULL

#' @rdname lazytensor_reductions
#' @export
sum.LazyTensor <- function(x, index = NA, ranges = NULL, ...) {
  if (length(index) == 1L && is.na(index)) return(lazy_call("Sum", list(x), dimres = 1L))
  lazy_reduce(x, "Sum", index, "sum", ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
min.LazyTensor <- function(x, index = NA, ranges = NULL, ...) {
  if (length(index) == 1L && is.na(index)) return(lazy_call("Min", list(x), dimres = 1L))
  lazy_reduce(x, "Min", index, "min", ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
max.LazyTensor <- function(x, index = NA, ranges = NULL, ...) {
  if (length(index) == 1L && is.na(index)) return(lazy_call("Max", list(x), dimres = 1L))
  lazy_reduce(x, "Max", index, "max", ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
argmin <- function(x, index = NA, ranges = NULL) {
  need_lazy(x, "x", "argmin")
  if (length(index) == 1L && is.na(index)) return(lazy_call("ArgMin", list(x), dimres = 1L))
  lazy_reduce(x, "ArgMin", index, "argmin", ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
argmax <- function(x, index = NA, ranges = NULL) {
  need_lazy(x, "x", "argmax")
  if (length(index) == 1L && is.na(index)) return(lazy_call("ArgMax", list(x), dimres = 1L))
  lazy_reduce(x, "ArgMax", index, "argmax", ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
min_argmin <- function(x, index, ranges = NULL) {
  lazy_reduce(x, "Min_ArgMin", index, "min_argmin", ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
max_argmax <- function(x, index, ranges = NULL) {
  lazy_reduce(x, "Max_ArgMax", index, "max_argmax", ranges = ranges)
}

lazy_k <- function(K, fun) whole_number(K, "K", fun, 1)

#' @rdname lazytensor_reductions
#' @export
Kmin <- function(x, K, index, ranges = NULL) {
  lazy_reduce(x, "KMin", index, "Kmin", middle = lazy_k(K, "Kmin"), ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
argKmin <- function(x, K, index, ranges = NULL) {
  lazy_reduce(x, "ArgKMin", index, "argKmin", middle = lazy_k(K, "argKmin"), ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
Kmin_argKmin <- function(x, K, index, ranges = NULL) {
  lazy_reduce(x, "KMin_ArgKMin", index, "Kmin_argKmin", middle = lazy_k(K, "Kmin_argKmin"), ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
logsumexp <- function(x, index, weight = NULL, ranges = NULL) {
  need_lazy(x, "x", "logsumexp")
  need_dim1(x, "logsumexp")
  if (is.null(weight)) return(lazy_reduce(x, "LogSumExp", index, "logsumexp", ranges = ranges))
  lazy_reduce(x, "LogSumExpWeight", index, "logsumexp", weight = as_lazy(weight, "weight"), ranges = ranges)
}

#' @rdname lazytensor_reductions
#' @export
sumsoftmaxweight <- function(x, weight, index, ranges = NULL) {
  need_lazy(x, "x", "sumsoftmaxweight")
  need_dim1(x, "sumsoftmaxweight")
  lazy_reduce(x, "SumSoftMaxWeight", index, "sumsoftmaxweight", weight = as_lazy(weight, "weight"),
              ranges = ranges)
}

# The operator v -> K %*% v for a LazyTensor K of dimension 1: Sum_Reduction(K * b, 0) with b
# a new j-variable after the variables of K.
lazy_matvec <- function(K, fun) {
  need_lazy(K, "x", fun)
  no_complex(list(K), paste0(fun, "()"))
  need_dim1(K, fun)
  for (cat in c("Vi", "Vj")) {
    if (!cat %in% K$cats) {
      stop(sprintf("%s(): the LazyTensor has no variable indexed by %s (made with %s())", fun,
                   substr(cat, 2, 2), cat), call. = FALSE)
    }
  }
  M <- NROW(K$vars[[which(K$cats == "Vj")[1L]]])
  nb <- length(K$vars)
  vars <- K$vars
  base_args <- K$args
  # The formula and its operator are made once per number of columns of b, not at every product
  # (solve() makes one product per iteration).
  f <- sprintf("Sum_Reduction((%s) * V%d, 0)", gsub("@([0-9]+)@", "V\\1", K$formula), nb)
  op <- NULL
  op_cols <- -1L
  function(b, ranges = NULL) {
    # A vector is one column as it is (a dim attribute would copy it).
    if (!is.numeric(b) || length(dim(b)) > 2L || NROW(b) != M) {
      stop(sprintf("%s: 'y' must be a numeric matrix with %d rows (one per j), not %d", fun, M,
                   NROW(b)), call. = FALSE)
    }
    if (NCOL(b) != op_cols) {
      op_cols <<- NCOL(b)
      op <<- lazy_operator(f, c(base_args, sprintf("V%d = Vj(%d)", nb, op_cols)))
    }
    op(c(vars, list(b)), ranges)
  }
}

#' Matrix products with LazyTensor objects
#'
#' `K %*% b`, for a LazyTensor `K` of dimension 1 (a symbolic `N x M` matrix
#' \eqn{K_{ij}}{K_ij}) and a numeric `M x E` matrix `b` (or a vector of length `M`),
#' computes the `N x E` matrix \eqn{\sum_j K_{ij} b_j}{sum_j K_ij b_j} (the reduction
#' `Sum_Reduction(K * b, 0)`, `b` a new j-variable). For a [ComplexLazyTensor]
#' of complex dimension 1, or a complex `b`, the result is complex. Other
#' arguments give the usual matrix product ([base::matmult]); a LazyTensor on the
#' right is an error.
#' @param x,y A LazyTensor and a matrix, or two matrices.
#' @return The `N x E` matrix \eqn{K b} (complex for complex arguments), or the
#'   matrix product of `x` and `y`.
#' @seealso [solve.LazyTensor()], [lazytensor_reductions]
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' b <- matrix(rnorm(40), 20, 2)
#' K <- exp(-sqdist(Vi(x), Vj(y)))     # symbolic 10 x 20
#' Kb <- K %*% b                       # 10 x 2
#' Kb
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' all.equal(Kb, exp(-D2) %*% b, tolerance = 1e-5)
#' diag(2) %*% matrix(1:4, 2)          # base behaviour
`%*%` <- function(x, y) {
  if (is.LazyTensor(y)) stop("'%*%': only a LazyTensor times a matrix is supported", call. = FALSE)
  if (!is.LazyTensor(x)) return(base::`%*%`(x, y))
  if (is.ComplexLazyTensor(x) || is.complex(y)) return(complex_matvec(x, y))
  lazy_matvec(x, "%*%")(y)
}

#' Gradient of a reduction of a LazyTensor
#'
#' Builds the reduction `opstr` (such as `"Sum"`) of `f` over `index` and
#' returns the gradient of \eqn{\sum \langle \mathrm{red}(f), e \rangle}{sum <red(f), e>} with
#' respect to the variable `var`, with \eqn{e} = `gradin`, through
#' [keops_grad()].
#' @param f A LazyTensor (real).
#' @param gradin The gradient flowing back, \eqn{e}: a matrix shaped like the
#'   reduction's result (`N x d` for `index = "j"`, `M x d` for `index = "i"`).
#' @param opstr The reduction, written `opstr_Reduction(f, axis)` in the
#'   formula: `"Sum"` (the default), `"LogSumExp"`, `"Min"`, `"Max"`,
#'   `"Min_ArgMin"`, `"Max_ArgMax"`, `"ArgMin"` or `"ArgMax"` (see
#'   [keops_grad()] for the gradients of each).
#' @param var The variable: a LazyTensor made by `Vi()`, `Vj()` or `Pm()` from
#'   the same data as one of the variables of `f`, or its 1-based position
#'   among them.
#' @param index `"i"` or `"j"`, the index reduced over.
#' @return A matrix shaped like the variable: `N x dim` for a `Vi()` variable,
#'   `M x dim` for `Vj()`, `1 x dim` for `Pm()`.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' xi <- Vi(x)
#' f <- exp(-sqdist(xi, Vj(y)))
#' e <- matrix(1, 10, 1)
#' g <- grad(f, e, "Sum", xi, "j")     # 10 x 3
#' # the same in plain R: -2 sum_j (x_i - y_j) exp(-|x_i - y_j|^2)
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' W <- exp(-D2)
#' all.equal(g, -2 * (x * rowSums(W) - W %*% y), tolerance = 1e-5)
#' # with respect to a parameter: 1 x 1
#' s <- Pm(0.5)
#' gs <- grad(exp(-s * sqdist(xi, Vj(y))), e, "Sum", s, "j")
#' all.equal(c(gs), -sum(D2 * exp(-0.5 * D2)), tolerance = 1e-5)
grad <- function(f, gradin, opstr = "Sum", var, index) {
  need_lazy(f, "f", "grad")
  no_complex(list(f), "grad()")
  axis <- lazy_axis(index, "grad")
  if (!is.character(opstr) || length(opstr) != 1L || is.na(opstr)) {
    stop("grad(): 'opstr' must be the name of a reduction, such as \"Sum\"", call. = FALSE)
  }
  if (is.LazyTensor(var)) {
    if (length(var$vars) != 1L || var$formula != "@0@") {
      stop("grad(): 'var' must be a variable made by Vi(), Vj() or Pm()", call. = FALSE)
    }
    pos <- 0L
    for (k in seq_along(f$vars)) {
      if (f$cats[k] == var$cats[1L] && identical(f$vars[[k]], var$vars[[1L]])) pos <- k
    }
    if (pos == 0L) stop("grad(): 'var' is not a variable of 'f'", call. = FALSE)
  } else if (is.numeric(var) && length(var) == 1L && var == round(var) && var >= 1 &&
             var <= length(f$vars)) {
    pos <- as.integer(var)
  } else {
    stop("grad(): 'var' must be a LazyTensor variable of 'f' or its position, from 1 to ",
         length(f$vars), call. = FALSE)
  }
  formula <- gsub("@([0-9]+)@", "V\\1", sprintf("%s_Reduction(%s, %d)", opstr, f$formula, axis))
  op <- lazy_operator(formula, f$args)
  keops_grad(op, pos)(c(f$vars, list(gradin)))
}

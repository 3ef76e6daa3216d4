# Reductions of LazyTensor objects: the formula text and declarations go to keops_kernel(), whose
# operators are cached by formula and declarations.

.lazy_ops <- new.env(parent = emptyenv())

lazy_operator <- function(formula, args) {
  memoised(.lazy_ops, c(formula, args), function() keops_kernel(formula, args))
}

# The engine's axis for `index`: "i" reduces over i (axis 1), "j" over j (axis 0).
lazy_axis <- function(index, fun) {
  if (!is.character(index) || length(index) != 1L || is.na(index) || !index %in% c("i", "j")) {
    rkeops_abort(sprintf("%s(): 'index' must be \"i\" (reduce over i) or \"j\" (reduce over j)", fun),
                 kind = "input", arg = "index")
  }
  if (index == "i") 1L else 0L
}

# Builds "Name_Reduction(f, [middle,] axis)" and runs it on the variables of x (over the blocks of
# `ranges`, when given). A side without variables is one row, as in rkeops 2: sum(Vi(x), "i") sums
# the rows of x, sum(Vi(x), "j") returns x itself.
lazy_reduce <- function(x, name, index, fun, middle = NULL, weight = NULL, ranges = NULL) {
  need_lazy(x, "x", fun)
  no_complex(list(x, weight), paste0(fun, "()"))
  axis <- lazy_axis(index, fun)
  if (!is.null(weight)) {
    m <- lazy_merge(list(x, weight))
    parts <- m$formulas
    vars <- m$vars
    args <- if (length(vars)) sprintf("V%d = %s(%d)", seq_along(vars) - 1L, m$cats, m$dims) else character(0)
  } else {
    parts <- x$formula
    vars <- x$vars
    args <- x$args
  }
  body <- paste(c(parts, middle, axis), collapse = ", ")
  formula <- gsub("@([0-9]+)@", "V\\1", sprintf("%s_Reduction(%s)", name, body))
  lazy_operator(formula, args)(vars, ranges)
}

# The number of rows reduced over: those of the variables indexed by `index`, or 1 without any.
lazy_reduced_rows <- function(x, index) {
  k <- match(if (index == "j") "Vj" else "Vi", x$cats)
  if (is.na(k)) 1L else lazy_var_rows(x$vars[[k]])
}

need_dim1 <- function(x, fun, label = "x") {
  if (x$dimres != 1L) {
    rkeops_abort(sprintf("%s(): '%s' must have dimension 1, not %d", fun, label, x$dimres),
                 kind = "input", arg = label)
  }
}

#' Reductions of LazyTensor objects
#'
#' Reduce a symbolic matrix \eqn{F_{ij}}{F_ij} (a [LazyTensor]) over
#' `index = "j"` (one result per `i`: `N` rows) or `index = "i"` (one result
#' per `j`: `M` rows). The formula is written and run by the engine of
#' [keops_kernel()], with the options of [get_rkeops_options()]. The operators
#' are cached: the same reduction on new data with the same numbers of columns
#' is not parsed again.
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
#' A LazyTensor with no variable indexed by `j` (or by `i`) is constant along
#' that index, which counts one row (as in rkeops 2): `sum(Vi(x), index = "i")`
#' is `colSums(x)` as a `1 x d` matrix and `sum(Vi(x), index = "j")` is `x`
#' itself.
#'
#' With `K` larger than the number of rows reduced over, `Kmin()` pads its
#' values with `Inf` and `argKmin()` its indices with `NA` (rkeops 2 padded
#' the indices with 0, which is not an index in R).
#'
#' Without `index`, `sum()`, `min()`, `max()`, `argmin()` and `argmax()`
#' reduce the components of each \eqn{F_{ij}}{F_ij} instead and return a LazyTensor
#' of dimension 1 (KeOps' `Sum(F)`, `Min(F)`, ...; `argmin(F)` and
#' `argmax(F)` are then **0-based** positions, as in KeOps).
#'
#' The `*_reduction()` functions of rkeops 2 (`sum_reduction()`,
#' `min_reduction()`, ..., `sumsoftmaxweight_reduction()`) are the same
#' reductions, with a required `index`; `reduction.LazyTensor(x, opstr, index,
#' opt_arg)` runs the reduction named `opstr` (`"Sum"`, `"Min"`, `"ArgKMin"`,
#' `"SumSoftMaxWeight"`, ...) with its optional argument `opt_arg` (`K`, or the
#' weight).
#' @param x A LazyTensor: the symbolic matrix \eqn{F}.
#' @param index `"i"` or `"j"`: the index reduced over.
#' @param K The number of smallest values: a whole number, at least 1.
#' @param weight The weights \eqn{w}: a LazyTensor (such as `Vj(w)`) or a
#'   number, of dimension `e`.
#' @param opstr For `reduction.LazyTensor()`: the name of a KeOps reduction,
#'   `"Sum"`, `"Min"`, `"Max"`, `"ArgMin"`, `"ArgMax"`, `"Min_ArgMin"`,
#'   `"Max_ArgMax"`, `"KMin"`, `"ArgKMin"`, `"KMin_ArgKMin"`, `"LogSumExp"`,
#'   `"LogSumExpWeight"` or `"SumSoftMaxWeight"`.
#' @param opt_arg For `reduction.LazyTensor()`: `K` for the `KMin` reductions,
#'   the weight for `LogSumExp`, `LogSumExpWeight` and `SumSoftMaxWeight`, or
#'   `NULL`.
#' @param ranges Optional: only the blocks of the symbolic matrix that
#'   `ranges` keeps are reduced (a block-sparse reduction; see the `ranges`
#'   argument of the function made by [keops_kernel()], and [from_matrix()]).
#' @param ... Unused.
#' @return With `n = N` for `index = "j"` and `n = M` for `index = "i"` (1
#'   when `x` has no variable indexed by the other index), and `d` the
#'   dimension of `x`:
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
#' @aliases sum_reduction min_reduction max_reduction argmin_reduction
#'   argmax_reduction min_argmin_reduction max_argmax_reduction Kmin_reduction
#'   argKmin_reduction Kmin_argKmin_reduction logsumexp_reduction
#'   sumsoftmaxweight_reduction reduction.LazyTensor
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
#' argKmin(D, 22, index = "j")[1, 19:22]      # only 20 y_j: padded with NA
#' all.equal(logsumexp(-D, index = "j"), as.matrix(log(rowSums(exp(-D2)))),
#'           tolerance = tol)
#' w <- runif(20)
#' all.equal(logsumexp(-D, index = "j", weight = Vj(w)),
#'           log(exp(-D2) %*% w), tolerance = tol)
#' # softmax-weighted means of the y_j: 10 x 3
#' sm <- sumsoftmaxweight(-D, "j", yj)          # (x, index, weight), as in rkeops 2
#' all.equal(sm, exp(-D2) %*% y / rowSums(exp(-D2)), tolerance = tol)
#' # without index: the sum of the components, a LazyTensor of dimension 1
#' S <- sum(xi - yj)
#' S
#' all.equal(sum(S, index = "j"), as.matrix(20 * rowSums(x) - sum(y)), tolerance = tol)
#' # no j variable: one j row, so a reduction over j is the value itself
#' all.equal(sum(exp(xi), index = "j"), exp(x), tolerance = tol)
#' all.equal(sum(exp(xi), index = "i"), t(colSums(exp(x))), tolerance = tol)
#' # the rkeops 2 names
#' all.equal(sum_reduction(D, "i"), sum(D, index = "i"))
#' all.equal(reduction.LazyTensor(D, "KMin", "j", opt_arg = 3), k3$values)
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

# The K-min reductions. The engine refuses K larger than the number of rows reduced over; rkeops 2
# padded the result, so we reduce with fewer and pad: Inf for values, NA for indices.
lazy_kmin <- function(x, K, index, name, fun, ranges) {
  need_lazy(x, "x", fun)
  K <- check_whole(K, "K", fun, 1)
  lazy_axis(index, fun)
  n <- lazy_reduced_rows(x, index)
  # (members of a batch with different numbers of rows: the engine says which member is too short)
  if (is.na(n)) n <- K
  res <- lazy_reduce(x, name, index, fun, middle = min(K, n), ranges = ranges)
  if (K <= n) return(res)
  if (name == "KMin_ArgKMin") {
    return(list(values = pad_columns(res$values, K, Inf), indices = pad_columns(res$indices, K, NA_integer_)))
  }
  pad_columns(res, K, if (name == "ArgKMin") NA_integer_ else Inf)
}

# An n x k matrix (or n x k x d array) widened to K columns filled with `fill`; a list of them
# (the members of a batch), each widened.
pad_columns <- function(a, K, fill) {
  if (is.list(a)) return(lapply(a, pad_columns, K = K, fill = fill))
  d <- dim(a)
  out <- array(fill, c(d[1L], K, d[-(1:2)]))
  if (length(d) == 2L) out[, seq_len(d[2L])] <- a else out[, seq_len(d[2L]), ] <- a
  out
}

#' @rdname lazytensor_reductions
#' @export
Kmin <- function(x, K, index, ranges = NULL) lazy_kmin(x, K, index, "KMin", "Kmin", ranges)

#' @rdname lazytensor_reductions
#' @export
argKmin <- function(x, K, index, ranges = NULL) lazy_kmin(x, K, index, "ArgKMin", "argKmin", ranges)

#' @rdname lazytensor_reductions
#' @export
Kmin_argKmin <- function(x, K, index, ranges = NULL) {
  lazy_kmin(x, K, index, "KMin_ArgKMin", "Kmin_argKmin", ranges)
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
sumsoftmaxweight <- function(x, index, weight, ranges = NULL) {
  need_lazy(x, "x", "sumsoftmaxweight")
  if (missing(weight)) rkeops_abort("sumsoftmaxweight(): 'weight' is missing", kind = "input", arg = "weight")
  # Before rkeops 2's order was adopted, this function took (x, weight, index): such a call puts
  # the weight where the index goes and "i" or "j" where the weight goes.
  if (!missing(index) && !is.character(index) && is.character(weight) && length(weight) == 1L &&
      weight %in% c("i", "j")) {
    .rkeops_warn_once("sumsoftmaxweight_order", paste(
      "sumsoftmaxweight(): 'index' and 'weight' were given in the former order (x, weight, index);",
      "the arguments are now (x, index, weight), as in rkeops 2: write",
      "sumsoftmaxweight(x, \"j\", w) or name them"))
    tmp <- index
    index <- weight
    weight <- tmp
  }
  need_dim1(x, "sumsoftmaxweight")
  lazy_reduce(x, "SumSoftMaxWeight", index, "sumsoftmaxweight", weight = as_lazy(weight, "weight"),
              ranges = ranges)
}

# rkeops 2's *_reduction() names: the same reductions, with an index that must be given.
need_index <- function(index, fun) {
  if (missing(index) || length(index) != 1L || is.na(index)) {
    rkeops_abort(sprintf("%s(): 'index' must be \"i\" (reduce over i) or \"j\" (reduce over j); it cannot be NA",
                         fun), kind = "input", arg = "index")
  }
  lazy_axis(index, fun)
  index
}

#' @rdname lazytensor_reductions
#' @export
sum_reduction <- function(x, index, ranges = NULL) {
  need_lazy(x, "x", "sum_reduction")
  index <- need_index(index, "sum_reduction")
  if (is.ComplexLazyTensor(x)) {
    if (!is.null(ranges)) {
      rkeops_abort("sum_reduction(): 'ranges' is not supported for ComplexLazyTensors",
                   kind = "input", arg = "ranges")
    }
    return(sum(x, index = index))
  }
  sum.LazyTensor(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
min_reduction <- function(x, index, ranges = NULL) {
  need_lazy(x, "x", "min_reduction")
  index <- need_index(index, "min_reduction")
  min.LazyTensor(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
max_reduction <- function(x, index, ranges = NULL) {
  need_lazy(x, "x", "max_reduction")
  index <- need_index(index, "max_reduction")
  max.LazyTensor(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
argmin_reduction <- function(x, index, ranges = NULL) {
  index <- need_index(index, "argmin_reduction")
  argmin(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
argmax_reduction <- function(x, index, ranges = NULL) {
  index <- need_index(index, "argmax_reduction")
  argmax(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
min_argmin_reduction <- function(x, index, ranges = NULL) {
  index <- need_index(index, "min_argmin_reduction")
  min_argmin(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
max_argmax_reduction <- function(x, index, ranges = NULL) {
  index <- need_index(index, "max_argmax_reduction")
  max_argmax(x, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
Kmin_reduction <- function(x, K, index, ranges = NULL) {
  index <- need_index(index, "Kmin_reduction")
  Kmin(x, K, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
argKmin_reduction <- function(x, K, index, ranges = NULL) {
  index <- need_index(index, "argKmin_reduction")
  argKmin(x, K, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
Kmin_argKmin_reduction <- function(x, K, index, ranges = NULL) {
  index <- need_index(index, "Kmin_argKmin_reduction")
  Kmin_argKmin(x, K, index, ranges)
}

#' @rdname lazytensor_reductions
#' @export
logsumexp_reduction <- function(x, index, weight = NULL, ranges = NULL) {
  index <- need_index(index, "logsumexp_reduction")
  logsumexp(x, index, weight, ranges)
}

#' @rdname lazytensor_reductions
#' @export
sumsoftmaxweight_reduction <- function(x, index, weight, ranges = NULL) {
  index <- need_index(index, "sumsoftmaxweight_reduction")
  sumsoftmaxweight(x, index, weight, ranges)
}

#' @rdname lazytensor_reductions
#' @export
reduction.LazyTensor <- function(x, opstr, index, opt_arg = NULL, ranges = NULL) {
  need_lazy(x, "x", "reduction.LazyTensor")
  if (!is.character(opstr) || length(opstr) != 1L || is.na(opstr)) {
    rkeops_abort("reduction.LazyTensor(): 'opstr' must be the name of a reduction, such as \"Sum\"",
                 kind = "input", arg = "opstr")
  }
  index <- need_index(index, "reduction.LazyTensor")
  no_opt <- function() {
    if (!is.null(opt_arg)) {
      rkeops_abort(sprintf("reduction.LazyTensor(): the reduction \"%s\" takes no 'opt_arg'", opstr),
                   kind = "input", arg = "opt_arg")
    }
  }
  switch(opstr,
    Sum = { no_opt(); sum_reduction(x, index, ranges) },
    Min = { no_opt(); min_reduction(x, index, ranges) },
    Max = { no_opt(); max_reduction(x, index, ranges) },
    ArgMin = { no_opt(); argmin(x, index, ranges) },
    ArgMax = { no_opt(); argmax(x, index, ranges) },
    Min_ArgMin = { no_opt(); min_argmin(x, index, ranges) },
    Max_ArgMax = { no_opt(); max_argmax(x, index, ranges) },
    KMin = Kmin(x, opt_arg, index, ranges),
    ArgKMin = argKmin(x, opt_arg, index, ranges),
    KMin_ArgKMin = Kmin_argKmin(x, opt_arg, index, ranges),
    LogSumExp = logsumexp(x, index, opt_arg, ranges),
    LogSumExpWeight = {
      if (is.null(opt_arg)) {
        rkeops_abort("reduction.LazyTensor(): \"LogSumExpWeight\" needs the weight in 'opt_arg'",
                     kind = "input", arg = "opt_arg")
      }
      logsumexp(x, index, opt_arg, ranges)
    },
    SumSoftMaxWeight = {
      if (is.null(opt_arg)) {
        rkeops_abort("reduction.LazyTensor(): \"SumSoftMaxWeight\" needs the weight in 'opt_arg'",
                     kind = "input", arg = "opt_arg")
      }
      sumsoftmaxweight(x, index, opt_arg, ranges)
    },
    rkeops_abort(sprintf(paste("reduction.LazyTensor(): unknown reduction \"%s\"; use one of Sum, Min, Max, ArgMin,",
                               "ArgMax, Min_ArgMin, Max_ArgMax, KMin, ArgKMin, KMin_ArgKMin, LogSumExp,",
                               "LogSumExpWeight, SumSoftMaxWeight"), opstr), kind = "input", arg = "opstr")
  )
}

# The operator of Sum_Reduction(K * V, 0) for a LazyTensor K of dimension 1, V a j-variable of
# `cols` columns after the variables of K: K %*% V.
weighted_sum_operator <- function(K, cols) {
  nb <- length(K$vars)
  f <- sprintf("Sum_Reduction((%s) * V%d, 0)", gsub("@([0-9]+)@", "V\\1", K$formula), nb)
  lazy_operator(f, c(K$args, sprintf("V%d = Vj(%d)", nb, cols)))
}

# The operator v -> K %*% v for a LazyTensor K of dimension 1: Sum_Reduction(K * b, 0) with b
# a new j-variable after the variables of K. Without j-variables in K, b alone sets the j rows.
lazy_matvec <- function(K, fun) {
  need_lazy(K, "x", fun)
  no_complex(list(K), paste0(fun, "()"))
  need_dim1(K, fun)
  kj <- match("Vj", K$cats)
  M <- if (is.na(kj)) NA_integer_ else NROW(K$vars[[kj]])
  vars <- K$vars
  # The operator is made once per number of columns of b, not at every product (solve() makes one
  # product per iteration).
  op <- NULL
  op_cols <- -1L
  function(b, ranges = NULL) {
    # A vector is one column as it is (a dim attribute would copy it).
    if (!is.numeric(b) || length(dim(b)) > 2L || length(b) == 0L || (!is.na(M) && NROW(b) != M)) {
      rkeops_abort(sprintf("%s: 'y' must be a numeric matrix with %s rows (one per j), not %d", fun,
                           if (is.na(M)) "one or more" else M, NROW(b)), kind = "input", arg = "y")
    }
    if (NCOL(b) != op_cols) {
      op_cols <<- NCOL(b)
      op <<- weighted_sum_operator(K, op_cols)
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
#' of complex dimension 1, or a complex `b`, the result is complex.
#'
#' With a LazyTensor on both sides, `x %*% y` is `sum(x * y, index = "j")`, as
#' in rkeops 2: `K %*% Vj(b)` is the same as `K %*% b`, and `Vi(x) %*% Vj(y)`
#' is the `N x d` matrix \eqn{x_i \odot \sum_j y_j}{x_i * sum_j y_j}
#' (elementwise, not a matrix product). Other arguments give the usual matrix
#' product ([base::matmult]); an R matrix times a LazyTensor is an error.
#' @param x,y A LazyTensor and a matrix, two LazyTensors, or two matrices.
#' @return The `N x E` matrix \eqn{K b} (complex for complex arguments), the
#'   `N x d` matrix `sum(x * y, index = "j")`, or the matrix product of `x`
#'   and `y`.
#' @seealso [solve.LazyTensor()], [lazytensor_reductions]
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' b <- matrix(rnorm(40), 20, 2)
#' K <- exp(-sqdist(Vi(x), Vj(y)))     # symbolic 10 x 20
#' Kb <- K %*% b                       # 10 x 2
#' Kb
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' all.equal(Kb, exp(-D2) %*% b, tolerance = 1e-5)
#' all.equal(K %*% Vj(b), Kb)          # a LazyTensor on the right
#' all.equal(Vi(x) %*% Vj(y), x * matrix(colSums(y), 10, 3, byrow = TRUE),
#'           tolerance = 1e-5)
#' diag(2) %*% matrix(1:4, 2)          # base behaviour
#' @rawNamespace if (getRversion() >= "4.3.0") S3method(matrixOps, LazyTensor) else export("%*%")
`%*%` <- function(x, y) lazy_matmult(x, y)

# From R 4.3.0 on, %*% dispatches S3 methods through the group generic matrixOps (R 4.4 adds
# crossprod and tcrossprod): base's %*% is kept and LazyTensors have a method; before, the package
# exports its own %*% (see ?rkeops's masked functions).
matrixOps.LazyTensor <- function(x, y) {
  if (.Generic != "%*%") {
    rkeops_abort(sprintf("'%s' is not defined for LazyTensors: use %%*%% or the reductions", .Generic),
                 kind = "input", arg = "x")
  }
  lazy_matmult(x, y)
}

# x %*% y for a LazyTensor on either side (base's product otherwise).
lazy_matmult <- function(x, y) {
  if (is.LazyTensor(y)) {
    if (!is.LazyTensor(x)) {
      rkeops_abort("'%*%': with a LazyTensor on the right, the left side must be a LazyTensor too ",
                   "(wrap a matrix with Vi() or Vj())", kind = "input", arg = "x")
    }
    return(sum(x * y, index = "j"))
  }
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
#'
#' As in rkeops 2, `gradin` may be a LazyTensor `Vi(e)` (for `index = "j"`)
#' or `Vj(e)` (for `index = "i"`), and `var` the name `"V0"`, `"V1"`, ... of a
#' variable as [print()][print.LazyTensor] shows it. A numeric `var` is a
#' **1-based** position (rkeops 2 counted from 0: `var = 0` is an error, and
#' a one-time warning recalls it), and a LazyTensor `var` is that variable, as
#' rkeops 2 documented it (its code took the first variable of `f` whatever
#' LazyTensor `var` was).
#' @param f A LazyTensor (real), or the result of `solve(K, b, ..., info = TRUE)`
#'   (see [solve.LazyTensor()]).
#' @param gradin The gradient flowing back, \eqn{e}: a matrix shaped like the
#'   reduction's result (`N x d` for `index = "j"`, `M x d` for `index = "i"`),
#'   or the same matrix wrapped by `Vi()` (`index = "j"`) or `Vj()`
#'   (`index = "i"`).
#' @param opstr The reduction, written `opstr_Reduction(f, axis)` in the
#'   formula: `"Sum"` (the default), `"LogSumExp"`, `"Min"`, `"Max"`,
#'   `"Min_ArgMin"`, `"Max_ArgMax"`, `"ArgMin"` or `"ArgMax"` (see
#'   [keops_grad()] for the gradients of each).
#' @param var The variable: a LazyTensor made by `Vi()`, `Vj()` or `Pm()` from
#'   the same data as one of the variables of `f`, its name (`"V0"`, `"V1"`,
#'   ...) or its 1-based position among them.
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
#' # rkeops 2's way: gradin as a LazyTensor, var by name
#' all.equal(grad(f, Vi(e), "Sum", "V0", "j"), g)
#' # with respect to a parameter: 1 x 1
#' s <- Pm(0.5)
#' gs <- grad(exp(-s * sqdist(xi, Vj(y))), e, "Sum", s, "j")
#' all.equal(c(gs), -sum(D2 * exp(-0.5 * D2)), tolerance = 1e-5)
grad <- function(f, gradin, opstr = "Sum", var, index) {
  # The result of solve(K, b, info = TRUE) carries its system: its gradient is in solve.R.
  if (!is.LazyTensor(f) && !is.null(attr(f, "solve"))) return(solve_grad(f, gradin, var))
  need_lazy(f, "f", "grad")
  no_complex(list(f, gradin), "grad()")
  axis <- lazy_axis(index, "grad")
  if (!is.character(opstr) || length(opstr) != 1L || is.na(opstr)) {
    rkeops_abort("grad(): 'opstr' must be the name of a reduction, such as \"Sum\"",
                 kind = "input", arg = "opstr")
  }
  pos <- grad_position(f, var)
  if (is.LazyTensor(gradin)) {
    # rkeops 2 took e as a LazyTensor indexed like the result: Vi(e) for a reduction over j.
    side <- if (index == "j") "Vi" else "Vj"
    if (length(gradin$vars) != 1L || gradin$formula != "@0@" || gradin$cats != side) {
      rkeops_abort(sprintf("grad(): 'gradin' must be a matrix, or one wrapped by %s() (the result of a reduction over %s has one row per %s)",
                           side, index, substr(side, 2, 2)), kind = "input", arg = "gradin")
    }
    gradin <- gradin$vars[[1L]]
  }
  formula <- gsub("@([0-9]+)@", "V\\1", sprintf("%s_Reduction(%s, %d)", opstr, f$formula, axis))
  op <- lazy_operator(formula, f$args)
  keops_grad(op, pos)(c(f$vars, list(gradin)))
}

# The 1-based position of `var` among the variables of f: a LazyTensor variable, a name "Vk" (as
# print() shows them) or a position.
grad_position <- function(f, var) {
  n <- length(f$vars)
  if (is.LazyTensor(var)) {
    if (length(var$vars) != 1L || var$formula != "@0@") {
      rkeops_abort("grad(): 'var' must be a variable made by Vi(), Vj() or Pm()", kind = "input", arg = "var")
    }
    pos <- 0L
    for (k in seq_along(f$vars)) {
      if (f$cats[k] == var$cats[1L] && identical(f$vars[[k]], var$vars[[1L]])) pos <- k
    }
    if (pos == 0L) rkeops_abort("grad(): 'var' is not a variable of 'f'", kind = "input", arg = "var")
    return(pos)
  }
  if (is.character(var) && length(var) == 1L && grepl("^V[0-9]+$", var)) {
    pos <- as.integer(substring(var, 2L)) + 1L
    if (pos > n) {
      rkeops_abort(sprintf("grad(): 'var' = \"%s\" is not a variable of 'f' (V0 to V%d)", var, n - 1L),
                   kind = "input", arg = "var")
    }
    return(pos)
  }
  if (is.numeric(var) && length(var) == 1L && !is.na(var) && var == 0) {
    rkeops_abort("grad(): 'var' = 0: positions are 1-based (rkeops 2 counted from 0); write var = 1 for the ",
                 "first variable, or give the variable itself", kind = "input", arg = "var")
  }
  if (is_whole(var, 1, n)) {
    .rkeops_warn_once("grad_var_position", paste(
      "grad(): a numeric 'var' is a 1-based position among the variables of 'f'",
      "(rkeops 2 counted from 0); give the variable itself to be unambiguous"))
    return(as.integer(var))
  }
  rkeops_abort("grad(): 'var' must be a LazyTensor variable of 'f', its name (V0 to V", n - 1L,
               ") or its position, from 1 to ", n, kind = "input", arg = "var")
}

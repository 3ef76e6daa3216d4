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

# Builds "Name_Reduction(f, [middle,] axis)" and runs it on the variables of x.
lazy_reduce <- function(x, name, index, fun, middle = NULL, weight = NULL) {
  need_lazy(x, "x", fun)
  no_complex(list(x, weight), paste0(fun, "()"))
  axis <- lazy_axis(index, fun)
  if (!is.null(weight)) {
    m <- lazy_merge(list(x, weight))
    parts <- m$formulas
    vars <- m$vars
    cats <- m$cats
  } else {
    parts <- x$formula
    vars <- x$vars
    cats <- x$cats
  }
  for (cat in c("Vi", "Vj")) {
    if (!cat %in% cats) {
      stop(sprintf("%s(): the LazyTensor has no variable indexed by %s (made with %s())", fun,
                   substr(cat, 2, 2), cat), call. = FALSE)
    }
  }
  body <- paste(c(parts, middle, axis), collapse = ", ")
  formula <- gsub("@([0-9]+)@", "V\\1", sprintf("%s_Reduction(%s)", name, body))
  args <- sprintf("V%d = %s(%d)", seq_along(vars) - 1L, cats, vapply(vars, lazy_var_dim, 1L))
  lazy_operator(formula, args)(vars)
}

need_dim1 <- function(x, fun, label = "x") {
  if (x$dimres != 1L) {
    stop(sprintf("%s(): '%s' must have dimension 1, not %d", fun, label, x$dimres), call. = FALSE)
  }
}

#' Reductions of LazyTensor objects
#'
#' Reductions of a symbolic matrix over `index = "i"` (one result per `j`: an `M x d` matrix)
#' or `index = "j"` (one result per `i`: an `N x d` matrix). Without `index`, `sum()`, `min()`,
#' `max()`, `argmin()` and `argmax()` reduce the components of each `F(x_i, y_j)` and return a
#' LazyTensor of dimension 1 (`Sum(F)`, `Min(F)`, ...).
#'
#' `argmin()`, `argmax()` and `argKmin()` return 1-based indices; `min_argmin()`,
#' `max_argmax()` and `Kmin_argKmin()` return `list(values =, indices =)`. `Kmin()` returns an
#' `n x K` matrix (an `n x K x d` array for `d > 1`). `logsumexp()` computes
#' \eqn{\log \sum \exp F} (\eqn{\log \sum \exp(F) w} with `weight`), `sumsoftmaxweight()`
#' \eqn{\sum \exp(F) w / \sum \exp(F)}; `F` must have dimension 1.
#' @param x A LazyTensor.
#' @param index `"i"` or `"j"`, the index reduced over.
#' @param K The number of smallest values.
#' @param weight A LazyTensor of weights.
#' @param ... Unused.
#' @return A matrix, an array, a list (see above), or a LazyTensor when `index` is missing.
#' @name lazytensor_reductions
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' D <- sqdist(Vi(x), Vj(y))
#' sum(exp(-D), index = "j")       # 10 x 1
#' argmin(D, index = "j")          # nearest y_j of each x_i
#' argKmin(D, 3, index = "i")      # 3 nearest x_i of each y_j: 20 x 3
#' logsumexp(-D, index = "j")
NULL

#' @rdname lazytensor_reductions
#' @export
sum.LazyTensor <- function(x, index = NA, ...) {
  if (length(index) == 1L && is.na(index)) return(lazy_call("Sum", list(x), dimres = 1L))
  lazy_reduce(x, "Sum", index, "sum")
}

#' @rdname lazytensor_reductions
#' @export
min.LazyTensor <- function(x, index = NA, ...) {
  if (length(index) == 1L && is.na(index)) return(lazy_call("Min", list(x), dimres = 1L))
  lazy_reduce(x, "Min", index, "min")
}

#' @rdname lazytensor_reductions
#' @export
max.LazyTensor <- function(x, index = NA, ...) {
  if (length(index) == 1L && is.na(index)) return(lazy_call("Max", list(x), dimres = 1L))
  lazy_reduce(x, "Max", index, "max")
}

#' @rdname lazytensor_reductions
#' @export
argmin <- function(x, index = NA) {
  need_lazy(x, "x", "argmin")
  if (length(index) == 1L && is.na(index)) return(lazy_call("ArgMin", list(x), dimres = 1L))
  lazy_reduce(x, "ArgMin", index, "argmin")
}

#' @rdname lazytensor_reductions
#' @export
argmax <- function(x, index = NA) {
  need_lazy(x, "x", "argmax")
  if (length(index) == 1L && is.na(index)) return(lazy_call("ArgMax", list(x), dimres = 1L))
  lazy_reduce(x, "ArgMax", index, "argmax")
}

#' @rdname lazytensor_reductions
#' @export
min_argmin <- function(x, index) lazy_reduce(x, "Min_ArgMin", index, "min_argmin")

#' @rdname lazytensor_reductions
#' @export
max_argmax <- function(x, index) lazy_reduce(x, "Max_ArgMax", index, "max_argmax")

lazy_k <- function(K, fun) whole_number(K, "K", fun, 1)

#' @rdname lazytensor_reductions
#' @export
Kmin <- function(x, K, index) lazy_reduce(x, "KMin", index, "Kmin", middle = lazy_k(K, "Kmin"))

#' @rdname lazytensor_reductions
#' @export
argKmin <- function(x, K, index) {
  lazy_reduce(x, "ArgKMin", index, "argKmin", middle = lazy_k(K, "argKmin"))
}

#' @rdname lazytensor_reductions
#' @export
Kmin_argKmin <- function(x, K, index) {
  lazy_reduce(x, "KMin_ArgKMin", index, "Kmin_argKmin", middle = lazy_k(K, "Kmin_argKmin"))
}

#' @rdname lazytensor_reductions
#' @export
logsumexp <- function(x, index, weight = NULL) {
  need_lazy(x, "x", "logsumexp")
  need_dim1(x, "logsumexp")
  if (is.null(weight)) return(lazy_reduce(x, "LogSumExp", index, "logsumexp"))
  lazy_reduce(x, "LogSumExpWeight", index, "logsumexp", weight = as_lazy(weight, "weight"))
}

#' @rdname lazytensor_reductions
#' @export
sumsoftmaxweight <- function(x, weight, index) {
  need_lazy(x, "x", "sumsoftmaxweight")
  need_dim1(x, "sumsoftmaxweight")
  lazy_reduce(x, "SumSoftMaxWeight", index, "sumsoftmaxweight", weight = as_lazy(weight, "weight"))
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
  M <- nrow(K$vars[[which(K$cats == "Vj")[1L]]])
  nb <- length(K$vars)
  vars <- K$vars
  base_args <- K$args
  f <- gsub("@([0-9]+)@", "V\\1", K$formula)
  function(b) {
    if (is.null(dim(b))) b <- matrix(b, ncol = 1L)
    if (!is.numeric(b) || nrow(b) != M) {
      stop(sprintf("%s: 'y' must be a numeric matrix with %d rows (one per j), not %d", fun, M,
                   NROW(b)), call. = FALSE)
    }
    formula <- sprintf("Sum_Reduction((%s) * V%d, 0)", f, nb)
    args <- c(base_args, sprintf("V%d = Vj(%d)", nb, ncol(b)))
    lazy_operator(formula, args)(c(vars, list(b)))
  }
}

#' Matrix products with LazyTensor objects
#'
#' `K %*% b`, for a LazyTensor `K` of dimension 1 (a symbolic `N x M` matrix) and a dense
#' `M x E` matrix `b`, computes the `N x E` matrix \eqn{\sum_j K_{ij} b_j}. Other arguments
#' give the usual matrix product.
#' @param x,y A LazyTensor and a matrix, or two matrices.
#' @return A matrix.
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' K <- exp(-sqdist(Vi(x), Vj(y)))
#' K %*% matrix(1, 20, 2)
#' diag(2) %*% matrix(1:4, 2)   # base behaviour
`%*%` <- function(x, y) {
  if (is.LazyTensor(y)) stop("'%*%': only a LazyTensor times a matrix is supported", call. = FALSE)
  if (!is.LazyTensor(x)) return(base::`%*%`(x, y))
  if (is.ComplexLazyTensor(x) || is.complex(y)) return(complex_matvec(x, y))
  lazy_matvec(x, "%*%")(y)
}

#' Solve a linear system with a symbolic matrix
#'
#' Solves \eqn{(\alpha I + K) x = b} by conjugate gradients, where `K` is a LazyTensor of
#' dimension 1 standing for a symmetric positive definite `N x N` matrix (such as
#' `exp(-sqdist(Vi(x), Vj(x)))`); each product by `K` is computed by the engine.
#' @param a The LazyTensor `K`.
#' @param b An `N x E` matrix (or a vector).
#' @param alpha A non-negative number added to the diagonal.
#' @param eps The tolerance: iterations stop when the residual of each column is below `eps`
#'   times the norm of that column of `b`.
#' @param maxiter The maximum number of iterations; a warning is given when they do not suffice.
#' @param ... Unused.
#' @return An `N x E` matrix.
#' @export
#' @examples
#' x <- matrix(runif(60), 20, 3)
#' K <- exp(-sqdist(Vi(x), Vj(x)))
#' b <- matrix(rnorm(20), 20, 1)
#' sol <- solve(K, b, alpha = 0.1)
solve.LazyTensor <- function(a, b, alpha = 0, eps = 1e-6, maxiter = 10 * NROW(b), ...) {
  matvec <- lazy_matvec(a, "solve")
  if (is.null(dim(b))) b <- matrix(b, ncol = 1L)
  if (!is.numeric(alpha) || length(alpha) != 1L || !is.finite(alpha)) {
    stop("solve(): 'alpha' must be a single number", call. = FALSE)
  }
  storage.mode(b) <- "double"
  op <- function(v) matvec(v) + alpha * v
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
    x <- x + sweep(p, 2L, step_len, "*")
    r <- r - sweep(Ap, 2L, step_len, "*")
    rr_new <- colSums(r * r)
    beta <- rr_new / pmax(rr, .Machine$double.xmin)
    p <- r + sweep(p, 2L, beta, "*")
    rr <- rr_new
    converged <- all(rr <= target)
  }
  if (!converged) {
    warning(sprintf("solve(): conjugate gradients did not converge in %d iterations (relative residual %.3g)",
                    iter, max(sqrt(rr / pmax(colSums(b * b), .Machine$double.xmin)))), call. = FALSE)
  }
  x
}

#' Gradient of a reduction of a LazyTensor
#'
#' Builds the reduction `opstr` (such as `"Sum"`) of `f` over `index` and returns the gradient
#' of \eqn{\sum \langle \mathrm{red}(f), e \rangle} with respect to `var`, with `e = gradin`,
#' through [keops_grad()].
#' @param f A LazyTensor.
#' @param gradin The gradient flowing back: a matrix shaped like the reduction's result.
#' @param opstr The reduction: `"Sum"`, `"LogSumExp"`, `"Min"`, ...
#' @param var The variable: a LazyTensor made by `Vi()`, `Vj()` or `Pm()` from the same data
#'   as one of the variables of `f`, or its 1-based position among them.
#' @param index `"i"` or `"j"`, the index reduced over.
#' @return A matrix shaped like the variable (`1 x d` for a parameter).
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' xi <- Vi(x)
#' f <- exp(-sqdist(xi, Vj(y)))
#' g <- grad(f, matrix(1, 10, 1), "Sum", xi, "j")   # 10 x 3
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

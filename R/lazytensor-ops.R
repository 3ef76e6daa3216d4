# Operations on LazyTensor objects: each builds the formula text of the result.

# Dimension of an elementwise operation of inputs of dimensions `dims`: all equal, or 1.
elementwise_dim <- function(dims, what) {
  d <- max(dims)
  if (any(dims != d & dims != 1L)) {
    rkeops_abort(sprintf("%s: dimensions %s do not match (they must be equal, or 1)", what,
                         paste(dims, collapse = " and ")), kind = "formula")
  }
  d
}

# A function of the formulas of `xs` named `name`: "Name(a, b, ...)", elementwise. With a complex
# argument, the complex operation (or an error) of lazytensor-complex.R.
lazy_call <- function(name, xs, dimres = NULL, extra = NULL) {
  if (any(vapply(xs, is.ComplexLazyTensor, TRUE))) return(complex_call(name, xs, dimres, extra))
  if (is.null(dimres)) dimres <- elementwise_dim(vapply(xs, function(x) x$dimres, 1L), name)
  m <- lazy_merge(xs)
  new_lazy(paste0(name, "(", paste(c(m$formulas, extra), collapse = ", "), ")"), m$vars, m$cats,
           dimres, dims = m$dims)
}

lazy_unary <- function(x, name, fun, label = "x") {
  need_lazy(x, label, fun)
  lazy_call(name, list(need_lazy(x, label, fun)), dimres = x$dimres)
}

#' Arithmetic and comparison operators for LazyTensor objects
#'
#' `+`, `-`, `*`, `/` (and unary `-` and `+`) act elementwise; the dimensions
#' of the operands must be equal, or one of them 1 (it is then repeated).
#' Numbers mix with LazyTensors as constants, numeric vectors of length more
#' than 1 as parameters ([Pm()]). `x^p` is `Square(x)` for `p = 2`, `Sqrt(x)`
#' for `p = 0.5`, `Pow(x, p)` for another whole number `p` and `Powf(x, p)`
#' otherwise (`p` a number or a LazyTensor; `NaN` where `x < 0` and `p` is
#' not a whole number).
#' Comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`) give 1 where
#' true and 0 elsewhere. `x | y` is the scalar product of two LazyTensors of
#' the same dimension. Other operators (`!`, `&`, `%%`, `%/%`) are errors. With
#' a [ComplexLazyTensor] or a complex number, `+`, `-`, `*`, `/` are complex
#' operations.
#' @param e1,e2 LazyTensors or numbers (at least one is a LazyTensor).
#' @return A LazyTensor: of dimension 1 for `x | y`, of the larger of the two
#'   dimensions otherwise.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' xi <- Vi(x); yj <- Vj(y)
#' D <- (xi - yj)^2 / 2 + 1        # 10 x 20 matrix of 3-D vectors
#' D
#' # its sums over j, and the same in plain R
#' dense <- sapply(1:3, function(k) rowSums(outer(x[, k], y[, k], "-")^2 / 2 + 1))
#' all.equal(sum(D, index = "j"), dense, tolerance = 1e-5)
#' s <- (xi | yj)                   # scalar products x_i . y_j, dimension 1
#' all.equal(sum(s, index = "j"), x %*% t(y) %*% rep(1, 20), tolerance = 1e-5)
#' # comparisons: the number of y_j closer than 0.5 to each x_i
#' close <- sum(sqdist(xi, yj) < 0.25, index = "j")
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' all(close == rowSums(D2 < 0.25))
Ops.LazyTensor <- function(e1, e2) {
  g <- .Generic
  if (is.ComplexLazyTensor(e1) || is.complex(e1) ||
      (!missing(e2) && (is.ComplexLazyTensor(e2) || is.complex(e2)))) {
    return(complex_ops(e1, e2, g))   # see lazytensor-complex.R
  }
  if (missing(e2)) {
    x <- need_lazy(e1, "e1", g)
    if (g == "-") return(lazy_combine(list(x), function(a) paste0("(-", a, ")"), x$dimres))
    if (g == "+") return(x)
    rkeops_abort(sprintf("the unary operator '%s' is not defined for LazyTensors", g), kind = "formula")
  }
  if (g == "^") return(lazy_power(e1, e2))
  a <- as_lazy(e1, "e1")
  b <- as_lazy(e2, "e2")
  switch(g,
    "+" = , "-" = , "*" = , "/" = {
      d <- elementwise_dim(c(a$dimres, b$dimres), sprintf("'%s'", g))
      lazy_combine(list(a, b), function(u, v) paste0("(", u, " ", g, " ", v, ")"), d)
    },
    "==" = lazy_call("Equal", list(a, b)),
    "!=" = lazy_call("NotEqual", list(a, b)),
    "<" = lazy_call("LessThan", list(a, b)),
    "<=" = lazy_call("LessOrEqual", list(a, b)),
    ">" = lazy_call("LessThan", list(b, a)),
    ">=" = lazy_call("LessOrEqual", list(b, a)),
    "|" = {
      if (a$dimres != b$dimres) {
        rkeops_abort(sprintf("the scalar product (x | y) needs two LazyTensors of the same dimension, got %d and %d",
                             a$dimres, b$dimres), kind = "formula")
      }
      lazy_combine(list(a, b), function(u, v) paste0("(", u, " | ", v, ")"), 1L)
    },
    rkeops_abort(sprintf("the operator '%s' is not defined for LazyTensors", g), kind = "formula")
  )
}

lazy_power <- function(e1, e2) {
  if (is.LazyTensor(e1) && is.numeric(e2) && length(e2) == 1L && is.finite(e2)) {
    if (e2 == 2) return(lazy_unary(e1, "Square", "^"))
    if (e2 == 0.5) return(lazy_unary(e1, "Sqrt", "^"))
    if (e2 == round(e2) && abs(e2) < 2^31) {
      return(lazy_call("Pow", list(e1), dimres = e1$dimres, extra = sprintf("%.0f", e2)))
    }
  }
  a <- as_lazy(e1, "e1")
  b <- as_lazy(e2, "e2")
  lazy_call("Powf", list(a, b))
}

#' Elementwise mathematical functions of LazyTensor objects
#'
#' `abs`, `sqrt`, `exp`, `log`, `sin`, `cos`, `acos`, `asin`, `atan`, `sign`,
#' `floor`, `log(x, base)` and `round(x, digits = 0)` act on each component of a
#' LazyTensor.
#' Other functions of the `Math` group (`tan`, `cumsum`, ...) are errors. For
#' a [ComplexLazyTensor], `exp()` and `abs()` are defined.
#' @param x A LazyTensor.
#' @param ... `digits` for `round()`: a whole number of decimal places, or a
#'   LazyTensor holding one, such as `Pm(2)`; `base` for `log()`: a positive
#'   number.
#' @return A LazyTensor of the dimension of `x`.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' Z <- Vi(x) - Vj(y)
#' exp(-abs(Z))
#' # sums over j of the 10 x 20 matrices of 3-D vectors, and the same in plain R
#' dense <- function(f) sapply(1:3, function(k) rowSums(f(outer(x[, k], y[, k], "-"))))
#' all.equal(sum(exp(-abs(Z)), index = "j"), dense(function(z) exp(-abs(z))),
#'           tolerance = 1e-5)
#' all.equal(sum(round(10 * cos(Z), 1), index = "j"),
#'           dense(function(z) round(10 * cos(z), 1)), tolerance = 1e-5)
#' all.equal(sum(round(10 * cos(Z), Pm(1)), index = "j"),   # digits as in rkeops 2
#'           dense(function(z) round(10 * cos(z), 1)), tolerance = 1e-5)
Math.LazyTensor <- function(x, ...) {
  names <- c(abs = "Abs", sqrt = "Sqrt", exp = "Exp", log = "Log", sin = "Sin", cos = "Cos",
             acos = "Acos", asin = "Asin", atan = "Atan", sign = "Sign", floor = "Floor")
  g <- .Generic
  if (g == "round") {
    extra <- list(...)
    digits <- if (length(extra)) extra[[1L]] else 0
    if (is.LazyTensor(digits)) digits <- lazy_constant_value(digits, "round", "digits")
    digits <- check_whole(digits, "digits", "round")
    return(lazy_call("Round", list(x), dimres = x$dimres, extra = digits))
  }
  if (!g %in% names(names)) {
    rkeops_abort(sprintf("%s() is not defined for LazyTensors", g), kind = "formula")
  }
  if (g == "log" && ...length()) {
    base <- check_log_base(..1)
    return(lazy_unary(x, "Log", g) / log(base))
  }
  lazy_unary(x, names[[g]], g)
}

# The value of a LazyTensor that holds one known number: a constant, or Pm() of one number.
lazy_constant_value <- function(x, fun, label) {
  v <- NA_real_
  if (length(x$vars) == 0L) {
    v <- suppressWarnings(as.numeric(gsub("[()]", "", x$formula)))
  } else if (length(x$vars) == 1L && x$cats == "Pm" && x$formula == "@0@" && x$dims == 1L &&
             is.numeric(x$vars[[1L]])) {
    v <- x$vars[[1L]][[1L]]
  }
  if (is.na(v)) {
    rkeops_abort(sprintf("%s(): '%s' must be a number, or a LazyTensor made by Pm() of one number", fun, label),
                 kind = "input", arg = label)
  }
  v
}

#' Elementwise functions of LazyTensor objects
#'
#' Functions applied to each component of a [LazyTensor] (see also
#' [Math.LazyTensor] for `exp()`, `log()`, ...):
#' * `square(x)`: \eqn{x^2}; `rsqrt(x)`: \eqn{1/\sqrt{x}}{1/sqrt(x)} (0 at 0);
#'   `inv(x)`: \eqn{1/x};
#' * `relu(x)`: \eqn{\max(x, 0)}{max(x, 0)}; `step(x)`: 1 where \eqn{x \ge 0}{x >= 0}, 0
#'   elsewhere;
#' * `xlogx(x)`: \eqn{x \log x}{x log(x)} (0 at 0); `sinxdivx(x)`: \eqn{\sin(x) / x}{sin(x) / x} (1
#'   at 0);
#' * `clamp(x, a, b)`: `a` where \eqn{x < a}{x < a}, else `b` where \eqn{x > b}{x > b}, else `x`
#'   (\eqn{\min(\max(x, a), b)}{min(max(x, a), b)} when \eqn{a \le b}{a <= b});
#'   `clampint(x, a, b)`: the same with whole numbers `a` and `b`;
#' * `ifelse(test, yes, no)`: `yes` where \eqn{test \ge 0}{test >= 0}, `no` elsewhere (as
#'   KeOps' `IfElse`: the sign of `test` decides, not its truth);
#' * `mod(x, n, d = 0)`: \eqn{x - n \lfloor (x - d) / n \rfloor}{x - n floor((x - d) / n)}, in
#'   \eqn{[d, d + n)} for \eqn{n > 0};
#' * `atan2(y, x)`: the angle of the point `(x, y)`, in \eqn{(-\pi, \pi]}{(-pi, pi]}.
#'
#' The arguments of `clamp()`, `ifelse()`, `mod()` and `atan2()` combine like
#' those of `+` ([Ops.LazyTensor]): dimensions equal, or 1.
#'
#' On R numbers, vectors, matrices and arrays (as in rkeops 2), `square()`,
#' `rsqrt()`, `inv()`, `relu()`, `xlogx()` and `sinxdivx()` compute in plain R
#' with the same conventions at 0 (`rsqrt(0)` is 0, where rkeops 2 gave
#' `Inf`) and keep the dimensions; `clamp()`, `clampint()` and `mod()` make a
#' LazyTensor of them (numbers are constants, vectors parameters, as with
#' [Pm()]). `ifelse()`, `atan2()` and `step()` mask the base and stats
#' functions of the same name and call them when `test`, both `y` and `x`, or
#' `object` (respectively) are not LazyTensors.
#' @param x A LazyTensor, or an R number or numeric vector (for `square()`,
#'   `rsqrt()`, `inv()`, `relu()`, `xlogx()` and `sinxdivx()`: any numeric
#'   vector, matrix or array; for `atan2()`: a LazyTensor or a number, the
#'   second coordinate, as in [base::atan2()]).
#' @param object For `step()`: a LazyTensor, or a model passed to
#'   [stats::step()].
#' @param y For `atan2()`: a LazyTensor or a number, the first coordinate.
#' @param a,b For `clamp()`: the bounds, numbers, numeric vectors or
#'   LazyTensors; for `clampint()`: whole numbers.
#' @param n For `mod()`: the modulus, a number, a numeric vector or a
#'   LazyTensor.
#' @param d For `mod()`: the offset of the result's interval, a number, a
#'   numeric vector or a LazyTensor.
#' @param test A LazyTensor whose sign chooses (or, when it is not a
#'   LazyTensor, the argument of [base::ifelse()]).
#' @param yes,no What `ifelse()` chooses between: LazyTensors or numbers.
#' @param ... For `step()` on an object that is not a LazyTensor: passed to
#'   [stats::step()].
#' @return A LazyTensor of the dimension of `x` (the larger dimension of the
#'   arguments for `clamp()`, `ifelse()`, `mod()` and `atan2()`); for R
#'   numbers, the plain R result (see above), or the result of the base or
#'   stats function.
#' @name lazytensor_elementwise
#' @aliases lazytensor_functions
#' @seealso [lazytensor_norms], [lazytensor_components],
#'   [lazytensor_products], [lazytensor_reductions]
#' @examples
#' x <- matrix(c(-1.5, -0.2, 0.5, 0.7, 2), 5, 1)
#' y <- matrix(c(-1, 0.5, 1), 3, 1)
#' D <- Vi(x) - Vj(y)                 # the symbolic 5 x 3 matrix x_i - y_j
#' d <- outer(x[, 1], y[, 1], "-")    # the same, dense
#' relu(D)
#' # compare the row sums of each symbolic matrix with plain R
#' check <- function(F, f) {
#'   all.equal(c(sum(F, index = "j")), rowSums(f), tolerance = 1e-5)
#' }
#' check(square(D), d^2)
#' check(rsqrt(abs(D)), base::ifelse(d == 0, 0, 1 / sqrt(abs(d))))
#' check(inv(D + 3), 1 / (d + 3))
#' check(relu(D), pmax(d, 0))
#' check(step(D), (d >= 0) + 0)
#' check(xlogx(abs(D)), base::ifelse(d == 0, 0, abs(d) * log(abs(d))))
#' check(sinxdivx(D), base::ifelse(d == 0, 1, sin(d) / d))
#' check(clamp(D, -1, 1), pmin(pmax(d, -1), 1))
#' check(clampint(3 * D, -2, 2), pmin(pmax(3 * d, -2), 2))
#' check(ifelse(D, Vi(x), 0), base::ifelse(d >= 0, x[, 1], 0))
#' check(mod(D, 1), d %% 1)
#' check(mod(D, 2, -1), (d + 1) %% 2 - 1)
#' check(atan2(D, Vj(y) + 2), atan2(d, matrix(y + 2, 5, 3, byrow = TRUE)))
#' # plain R numbers
#' square(1:3)
#' rsqrt(c(0, 4))
#' relu(d)
#' clamp(0.5, Vj(y), 1)               # a LazyTensor: min(max(0.5, y_j), 1)
NULL

# The plain R value of an elementwise function for R numbers (rkeops 2 computed these in R too).
plain_elementwise <- function(x, fun, f, complex_ok = TRUE) {
  if (!(is.numeric(x) || is.logical(x) || (complex_ok && is.complex(x))) || is.data.frame(x)) {
    rkeops_abort(sprintf("%s(): 'x' must be a LazyTensor or a numeric vector, matrix or array, not %s", fun,
                         class(x)[1L]), kind = "input", arg = "x")
  }
  f(x)
}

#' @rdname lazytensor_elementwise
#' @export
square <- function(x) {
  if (!is.LazyTensor(x)) return(plain_elementwise(x, "square", function(v) v^2))
  lazy_unary(x, "Square", "square")
}

#' @rdname lazytensor_elementwise
#' @export
rsqrt <- function(x) {
  if (!is.LazyTensor(x)) {
    return(plain_elementwise(x, "rsqrt", function(v) {
      r <- 1 / sqrt(v)
      r[!is.na(v) & v == 0] <- 0    # KeOps' Rsqrt is 0 at 0
      r
    }))
  }
  lazy_unary(x, "Rsqrt", "rsqrt")
}

#' @rdname lazytensor_elementwise
#' @export
inv <- function(x) {
  if (!is.LazyTensor(x)) return(plain_elementwise(x, "inv", function(v) 1 / v))
  lazy_unary(x, "Inv", "inv")
}

#' @rdname lazytensor_elementwise
#' @export
relu <- function(x) {
  if (!is.LazyTensor(x)) return(plain_elementwise(x, "relu", function(v) pmax(v, 0), complex_ok = FALSE))
  lazy_unary(x, "ReLU", "relu")
}

#' @rdname lazytensor_elementwise
#' @export
step <- function(object, ...) {
  if (is.LazyTensor(object)) return(lazy_unary(object, "Step", "step"))
  # stats::step() refits the model in its caller's frame (eval.parent): call it from the user's
  # frame, with the object already evaluated, so that local data is found as without rkeops.
  call <- match.call()
  call[[1L]] <- quote(stats::step)
  call$object <- object
  eval(call, parent.frame())
}

#' @rdname lazytensor_elementwise
#' @export
xlogx <- function(x) {
  if (!is.LazyTensor(x)) {
    return(plain_elementwise(x, "xlogx", function(v) base::ifelse(v == 0, 0, v * log(v))))
  }
  lazy_unary(x, "XLogX", "xlogx")
}

#' @rdname lazytensor_elementwise
#' @export
sinxdivx <- function(x) {
  if (!is.LazyTensor(x)) {
    return(plain_elementwise(x, "sinxdivx", function(v) base::ifelse(v == 0, 1, sin(v) / v)))
  }
  lazy_unary(x, "SinXDivX", "sinxdivx")
}

# An argument that may be a LazyTensor, a number (a constant) or a numeric vector (a parameter);
# a matrix must say which index it follows.
lazy_arg <- function(x, label, fun) {
  if (is.LazyTensor(x)) return(x)
  if ((is.numeric(x) || is.logical(x)) && is.null(dim(x)) && length(x) >= 1L) return(as_lazy(x, label))
  if (is.complex(x) && is.null(dim(x)) && length(x) >= 1L) return(as_complex_lazy(x, label))
  what <- if (is.matrix(x)) "a matrix (wrap it with Vi() or Vj())" else class(x)[1L]
  rkeops_abort(sprintf("%s(): '%s' must be a LazyTensor, a number or a numeric vector, not %s", fun, label, what),
               kind = "input", arg = label)
}

#' @rdname lazytensor_elementwise
#' @export
clamp <- function(x, a, b) {
  lazy_call("Clamp", list(lazy_arg(x, "x", "clamp"), lazy_arg(a, "a", "clamp"), lazy_arg(b, "b", "clamp")))
}

#' @rdname lazytensor_elementwise
#' @export
clampint <- function(x, a, b) {
  x <- lazy_arg(x, "x", "clampint")
  a <- check_whole(a, "a", "clampint")
  b <- check_whole(b, "b", "clampint")
  lazy_call("ClampInt", list(x), dimres = x$dimres, extra = c(a, b))
}

#' @rdname lazytensor_elementwise
#' @export
ifelse <- function(test, yes, no) {
  if (!is.LazyTensor(test)) return(base::ifelse(test, yes, no))
  lazy_call("IfElse", list(test, as_lazy(yes, "yes"), as_lazy(no, "no")))
}

#' @rdname lazytensor_elementwise
#' @export
mod <- function(x, n, d = 0) {
  lazy_call("Mod", list(lazy_arg(x, "x", "mod"), lazy_arg(n, "n", "mod"), lazy_arg(d, "d", "mod")))
}

#' @rdname lazytensor_elementwise
#' @export
atan2 <- function(y, x) {
  if (!is.LazyTensor(y) && !is.LazyTensor(x)) return(base::atan2(y, x))
  lazy_call("Atan2", list(as_lazy(y, "y"), as_lazy(x, "x")))
}

#' Norms and distances of LazyTensor objects
#'
#' Functions of the vectors \eqn{x} (of dimension \eqn{d}) held by a
#' [LazyTensor]:
#' * `sqnorm2(x)`: \eqn{|x|^2 = \sum_k x_k^2}{|x|^2 = sum_k x_k^2}; `norm2(x)`: \eqn{|x|};
#'   `normalize(x)`: \eqn{x / |x|} (0 where \eqn{x = 0});
#' * `sqdist(x, y)`: \eqn{|x - y|^2};
#' * `weightedsqnorm(x, s)`: \eqn{s |x|^2} when `s` has dimension 1,
#'   \eqn{\sum_k s_k x_k^2}{sum_k s_k x_k^2} when it has dimension \eqn{d}, and
#'   \eqn{x^\top S x}{x' S x} when it has dimension \eqn{d^2} (`S` the \eqn{d \times d}{d x d}
#'   matrix stored column-major, `as.vector(S)`);
#' * `weightedsqdist(x, y, s)`: `weightedsqnorm(x - y, s)`.
#'
#' As in rkeops 2, `x` and `y` may also be R numbers (constants) or numeric
#' vectors (parameters, as with [Pm()]): the result is then a LazyTensor, and
#' `sqdist()` and `weightedsqdist()` accept one argument of dimension 1 (the
#' same value for every component: `sqdist(x, 0)` is `sqnorm2(x)`).
#' @param x,y LazyTensors of the same dimension \eqn{d} (or one of them of
#'   dimension 1), numbers or numeric vectors.
#' @param s The weights: a LazyTensor (such as `Pm(w)` or `Vj(w)`), a number
#'   or a numeric vector, of dimension 1, \eqn{d} or \eqn{d^2}.
#' @return A LazyTensor of dimension 1, or of dimension \eqn{d} for
#'   `normalize()`.
#' @name lazytensor_norms
#' @seealso [lazytensor_elementwise], [lazytensor_reductions]
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' xi <- Vi(x); yj <- Vj(y)
#' # the dense 10 x 20 matrix of squared distances
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' # compare the row sums of each symbolic matrix with plain R
#' check <- function(F, f) {
#'   all.equal(sum(F, index = "j"), as.matrix(rowSums(f)), tolerance = 1e-5)
#' }
#' check(sqdist(xi, yj), D2)
#' check(sqnorm2(xi - yj), D2)
#' check(norm2(xi - yj), sqrt(D2))
#' check(weightedsqnorm(xi - yj, 2), 2 * D2)
#' w <- c(1, 2, 3)                              # diagonal weights
#' check(weightedsqdist(xi, yj, Pm(w)),
#'       sapply(1:20, function(j) colSums(w * (t(x) - y[j, ])^2)))
#' S <- matrix(c(2, 1, 0, 1, 2, 0, 0, 0, 1), 3)  # a full 3 x 3 matrix
#' check(weightedsqdist(xi, yj, Pm(as.vector(S))),
#'       sapply(1:20, function(j) { z <- t(x) - y[j, ]; colSums(z * (S %*% z)) }))
#' # unit vectors (x_i - y_j) / |x_i - y_j|, summed over j: 10 x 3
#' u <- sum(normalize(xi - yj), index = "j")
#' all.equal(u, sapply(1:3, function(k) rowSums(outer(x[, k], y[, k], "-") / sqrt(D2))),
#'           tolerance = 1e-5)
#' # a vector of R numbers is a parameter; a number of dimension 1 is broadcast
#' sqnorm2(c(3, 4))
#' all.equal(sum(sqdist(xi, 0.5) * Vj(1), index = "j"), as.matrix(rowSums((x - 0.5)^2)),
#'           tolerance = 1e-5)
#' @export
sqnorm2 <- function(x) lazy_call("SqNorm2", list(lazy_arg(x, "x", "sqnorm2")), dimres = 1L)

#' @rdname lazytensor_norms
#' @export
norm2 <- function(x) lazy_call("Norm2", list(lazy_arg(x, "x", "norm2")), dimres = 1L)

#' @rdname lazytensor_norms
#' @export
normalize <- function(x) {
  x <- lazy_arg(x, "x", "normalize")
  lazy_call("Normalize", list(x), dimres = x$dimres)
}

# The dimension shared by x and y, or the larger one when the other is 1 (then written x - y,
# which broadcasts, instead of the engine's two-argument operation).
pair_dim <- function(x, y, fun) {
  if (x$dimres != y$dimres && x$dimres != 1L && y$dimres != 1L) {
    rkeops_abort(sprintf("%s(): 'x' and 'y' must have the same dimension (or one of them 1), got %d and %d",
                         fun, x$dimres, y$dimres), kind = "formula")
  }
  max(x$dimres, y$dimres)
}

#' @rdname lazytensor_norms
#' @export
sqdist <- function(x, y) {
  x <- lazy_arg(x, "x", "sqdist")
  y <- lazy_arg(y, "y", "sqdist")
  pair_dim(x, y, "sqdist")
  if (x$dimres != y$dimres) return(sqnorm2(x - y))
  lazy_call("SqDist", list(x, y), dimres = 1L)
}

weights_ok <- function(s, d, fun) {
  if (!s$dimres %in% c(1L, d, d * d)) {
    rkeops_abort(sprintf("%s(): 's' must have dimension 1, %d or %d, not %d", fun, d, d * d, s$dimres),
                 kind = "input", arg = "s")
  }
}

#' @rdname lazytensor_norms
#' @export
weightedsqnorm <- function(x, s) {
  x <- lazy_arg(x, "x", "weightedsqnorm")
  s <- lazy_arg(s, "s", "weightedsqnorm")
  weights_ok(s, x$dimres, "weightedsqnorm")
  lazy_call("WeightedSqNorm", list(s, x), dimres = 1L)
}

#' @rdname lazytensor_norms
#' @export
weightedsqdist <- function(x, y, s) {
  x <- lazy_arg(x, "x", "weightedsqdist")
  y <- lazy_arg(y, "y", "weightedsqdist")
  d <- pair_dim(x, y, "weightedsqdist")
  s <- lazy_arg(s, "s", "weightedsqdist")
  weights_ok(s, d, "weightedsqdist")
  if (x$dimres != y$dimres) return(lazy_call("WeightedSqNorm", list(s, x - y), dimres = 1L))
  lazy_call("WeightedSqDist", list(s, x, y), dimres = 1L)
}

#' Components of LazyTensor objects
#'
#' Select, place and join the components of the vectors held by a
#' [LazyTensor]; positions are 1-based:
#' * `elem(x, m)`: the `m`-th component of `x` (dimension 1);
#' * `elemT(x, m, n)`: the vector of dimension `n` holding `x` (of dimension 1)
#'   at position `m` and 0 elsewhere;
#' * `extract(x, m, d)`: the components `m` to `m + d - 1` of `x`;
#' * `extractT(x, m, d)`: the vector of dimension `d` holding `x` from position
#'   `m` on and 0 elsewhere;
#' * `concat(x, y)`: the components of `x` followed by those of `y`;
#' * `one_hot(x, D)`: the vector of dimension `D` with 1 at position
#'   `round(x) + 1` and 0 elsewhere (all 0 when `round(x)` is not in
#'   `0, ..., D - 1`): `x` (of dimension 1) holds a **0-based** position, as in
#'   KeOps' `OneHot`.
#' @param x,y LazyTensors.
#' @param m A position (a whole number, 1-based).
#' @param n The dimension of the result of `elemT()`, a whole number `>= m`.
#' @param d For `extract()`: the number of components taken; for
#'   `extractT()`: the dimension of the result, at least `m - 1` plus the
#'   dimension of `x`.
#' @param D The dimension of the result of `one_hot()`, a whole number.
#' @return A LazyTensor of dimension 1 (`elem()`), `n` (`elemT()`), `d`
#'   (`extract()`, `extractT()`), the sum of the dimensions of `x` and `y`
#'   (`concat()`) or `D` (`one_hot()`).
#' @name lazytensor_components
#' @seealso [lazytensor_elementwise], [lazytensor_products]
#' @examples
#' x <- matrix(as.numeric(1:12), 4, 3)   # 4 points x_i in dimension 3
#' xi <- Vi(x)
#' # F(x_i) as a 4 x d matrix: a sum over a single j
#' values <- function(F) sum(F * Vj(1), index = "j")
#' values(elem(xi, 2))
#' all.equal(values(elem(xi, 2)), x[, 2, drop = FALSE])
#' all.equal(values(elemT(elem(xi, 1), 2, 3)), cbind(0, x[, 1], 0))
#' all.equal(values(extract(xi, 2, 2)), x[, 2:3])
#' all.equal(values(extractT(xi, 2, 5)), cbind(0, x, 0))
#' all.equal(values(concat(xi, elem(xi, 1))), cbind(x, x[, 1]))
#' values(one_hot(elem(xi, 1) - 1, 4))    # x[, 1] - 1 = 0:3, so diag(4)
#' @export
elem <- function(x, m) {
  need_lazy(x, "x", "elem")
  m <- check_whole(m, "m", "elem", 1)
  if (m > x$dimres) {
    rkeops_abort(sprintf("elem(): 'm' = %d is beyond the dimension of 'x' (%d); positions are 1-based",
                         m, x$dimres), kind = "input", arg = "m")
  }
  lazy_call("Elem", list(x), dimres = 1L, extra = m - 1L)
}

#' @rdname lazytensor_components
#' @export
elemT <- function(x, m, n) {
  need_lazy(x, "x", "elemT")
  if (x$dimres != 1L) {
    rkeops_abort("elemT(): 'x' must have dimension 1, not ", x$dimres, kind = "input", arg = "x")
  }
  m <- check_whole(m, "m", "elemT", 1)
  n <- check_whole(n, "n", "elemT", 1)
  if (m > n) {
    rkeops_abort(sprintf("elemT(): 'm' = %d must be at most 'n' = %d", m, n), kind = "input", arg = "m")
  }
  lazy_call("ElemT", list(x), dimres = n, extra = c(n, m - 1L))
}

#' @rdname lazytensor_components
#' @export
extract <- function(x, m, d) {
  need_lazy(x, "x", "extract")
  m <- check_whole(m, "m", "extract", 1)
  d <- check_whole(d, "d", "extract", 1)
  if (m + d - 1L > x$dimres) {
    rkeops_abort(sprintf("extract(): components %d to %d are beyond the dimension of 'x' (%d)",
                         m, m + d - 1L, x$dimres), kind = "input", arg = "m")
  }
  lazy_call("Extract", list(x), dimres = d, extra = c(m - 1L, d))
}

#' @rdname lazytensor_components
#' @export
extractT <- function(x, m, d) {
  need_lazy(x, "x", "extractT")
  m <- check_whole(m, "m", "extractT", 1)
  d <- check_whole(d, "d", "extractT", 1)
  if (m + x$dimres - 1L > d) {
    rkeops_abort(sprintf("extractT(): 'x' of dimension %d does not fit at position %d of a vector of dimension %d",
                         x$dimres, m, d), kind = "input", arg = "x")
  }
  lazy_call("ExtractT", list(x), dimres = d, extra = c(m - 1L, d))
}

#' @rdname lazytensor_components
#' @export
concat <- function(x, y) {
  need_lazy(x, "x", "concat")
  need_lazy(y, "y", "concat")
  lazy_call("Concat", list(x, y), dimres = x$dimres + y$dimres)
}

#' @rdname lazytensor_components
#' @export
one_hot <- function(x, D) {
  need_lazy(x, "x", "one_hot")
  if (x$dimres != 1L) {
    rkeops_abort("one_hot(): 'x' must have dimension 1, not ", x$dimres, kind = "input", arg = "x")
  }
  D <- check_whole(D, "D", "one_hot", 1)
  lazy_call("OneHot", list(x), dimres = D, extra = D)
}

#' Matrix and tensor products of LazyTensor objects
#'
#' Products of the small matrices and vectors held by [LazyTensor] objects
#' (for the product of a symbolic matrix by an R matrix, see `%*%`). A matrix
#' is held column-major, as R stores it: `Pm(as.vector(A))` for an
#' `n x p` matrix `A` (or `Vi()`/`Vj()` of a matrix whose rows are such
#' vectors).
#' * `matvecmult(m, v)`: \eqn{A v}, with `m` holding an `n x p` matrix `A`
#'   and `v` of dimension `p`;
#' * `vecmatmult(v, m)`: \eqn{v^\top A}{v' A}, with `v` of dimension `p` and `m`
#'   holding a `p x n` matrix `A`;
#' * `tensorprod(x, y)`: `as.vector(outer(x, y))`, the \eqn{x_a y_b} with `a`
#'   varying fastest.
#' @param m A LazyTensor holding a matrix, of dimension a multiple of that of
#'   `v`.
#' @param v A LazyTensor of dimension `p`.
#' @param x,y LazyTensors.
#' @return A LazyTensor of dimension `n` (the dimension of `m` divided by that
#'   of `v`) for `matvecmult()` and `vecmatmult()`, and the product of the
#'   dimensions of `x` and `y` for `tensorprod()`.
#' @name lazytensor_products
#' @seealso [lazytensor_components], `%*%`
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(12), 4, 3)          # 4 vectors x_i of dimension 3
#' A <- matrix(rnorm(6), 2, 3)           # a 2 x 3 matrix
#' B <- matrix(rnorm(6), 3, 2)           # a 3 x 2 matrix
#' xi <- Vi(x)
#' # F(x_i) as a 4 x d matrix: a sum over a single j
#' values <- function(F) sum(F * Vj(1), index = "j")
#' all.equal(values(matvecmult(Pm(as.vector(A)), xi)), x %*% t(A),  # rows A x_i
#'           tolerance = 1e-5)
#' all.equal(values(vecmatmult(xi, Pm(as.vector(B)))), x %*% B,     # rows x_i B
#'           tolerance = 1e-5)
#' all.equal(values(tensorprod(xi, extract(xi, 1, 2))),
#'           t(apply(x, 1, function(r) as.vector(outer(r, r[1:2])))),
#'           tolerance = 1e-5)
#' @export
matvecmult <- function(m, v) {
  lazy_matrix_product("MatVecMult", "matvecmult", m, v, list(m, v))
}

#' @rdname lazytensor_products
#' @export
vecmatmult <- function(v, m) {
  lazy_matrix_product("VecMatMult", "vecmatmult", m, v, list(v, m))
}

# A product of the matrix m (stored column-major in a vector) and the vector v, arguments `args`.
lazy_matrix_product <- function(op, fun, m, v, args) {
  need_lazy(m, "m", fun)
  need_lazy(v, "v", fun)
  if (m$dimres %% v$dimres != 0L) {
    rkeops_abort(sprintf("%s(): the dimension of 'm' (%d) is not a multiple of that of 'v' (%d)",
                         fun, m$dimres, v$dimres), kind = "formula")
  }
  lazy_call(op, args, dimres = m$dimres %/% v$dimres)
}

#' @rdname lazytensor_products
#' @export
tensorprod <- function(x, y) {
  need_lazy(x, "x", "tensorprod")
  need_lazy(y, "y", "tensorprod")
  lazy_call("TensorProd", list(x, y), dimres = x$dimres * y$dimres)
}

#' Build LazyTensor operations by name (rkeops 2's low-level functions)
#'
#' `unaryop.LazyTensor()`, `binaryop.LazyTensor()` and `ternaryop.LazyTensor()`
#' write the KeOps operation `opstr` of one, two or three arguments, as in
#' rkeops 2: `opstr(x, opt_arg, opt_arg2)`, `opstr(x, y)` (or `x opstr y` with
#' `is_operator = TRUE`, such as `"+"`) and `opstr(x, y, z)`. They give access
#' to operations of the formula language of [keops_kernel()] that have no R
#' function; an unknown name is an error when the LazyTensor is reduced.
#' Numbers are constants and numeric vectors parameters (as with [Pm()]).
#' @param x,y,z LazyTensors, numbers or numeric vectors.
#' @param opstr The name of the operation, such as `"Exp"` or `"Atan2"` (or an
#'   operator such as `"+"` with `is_operator = TRUE`).
#' @param opt_arg,opt_arg2 For `unaryop.LazyTensor()`: whole numbers written
#'   after `x` (such as the exponent of `"Pow"`), or `NA`; for
#'   `binaryop.LazyTensor()`, `opt_arg` is a LazyTensor written between `x`
#'   and `y`, or `NA`.
#' @param is_operator For `binaryop.LazyTensor()`: `TRUE` to write `x opstr y`.
#' @param dim_check_type How the dimensions of the arguments must agree:
#'   `"sameor1"` (equal, or 1), `"same"` (equal) or `NA` (no check).
#' @param res_type `NA` (a real LazyTensor; complex results are made by the
#'   complex functions, see [ComplexLazyTensor]).
#' @param dim_res The dimension of the result: by default that of `x` for
#'   `unaryop.LazyTensor()` and the largest of the arguments otherwise.
#' @return A LazyTensor.
#' @name lazytensor_opbuilders
#' @aliases unaryop.LazyTensor binaryop.LazyTensor ternaryop.LazyTensor
#' @seealso [lazytensor_elementwise] for the functions that write these
#'   operations for you.
#' @examples
#' set.seed(1)
#' x <- matrix(runif(12), 4, 3); y <- matrix(runif(15), 5, 3)
#' P <- unaryop.LazyTensor(Vi(x), "Pow", 3)        # the same as Vi(x)^3
#' all.equal(sum(P, index = "j"), 1 * x^3, tolerance = 1e-5)
#' S <- binaryop.LazyTensor(Vi(x), Vj(y), "-", is_operator = TRUE)
#' A <- binaryop.LazyTensor(S, 1, "Atan2")        # atan2(x_i - y_j, 1)
#' ref <- sapply(1:3, function(k) rowSums(atan2(outer(x[, k], y[, k], "-"), 1)))
#' all.equal(sum(A, index = "j"), ref, tolerance = 1e-5)
#' C <- ternaryop.LazyTensor(S, 0, 0.2, "Clamp")  # clamp(x_i - y_j, 0, 0.2)
#' ref <- sapply(1:3, function(k) rowSums(pmin(pmax(outer(x[, k], y[, k], "-"), 0), 0.2)))
#' all.equal(sum(C, index = "j"), ref, tolerance = 1e-5)
NULL

# Checks the dimensions of the arguments of a built operation and returns the result's.
opbuilder_dim <- function(xs, dim_check_type, dim_res, opstr, fun) {
  dims <- vapply(xs, function(v) v$dimres, 1L)
  if (length(dim_check_type) != 1L || !(is.na(dim_check_type) || dim_check_type %in% c("same", "sameor1"))) {
    rkeops_abort(sprintf("%s(): 'dim_check_type' must be \"sameor1\", \"same\" or NA", fun),
                 kind = "input", arg = "dim_check_type")
  }
  if (!is.na(dim_check_type) && dim_check_type == "sameor1") elementwise_dim(dims, opstr)
  if (!is.na(dim_check_type) && dim_check_type == "same" && any(dims != dims[1L])) {
    rkeops_abort(sprintf("%s(): the operation '%s' needs arguments of the same dimension, got %s", fun, opstr,
                         paste(dims, collapse = " and ")), kind = "formula")
  }
  if (length(dim_res) == 1L && is.na(dim_res)) max(dims) else check_whole(dim_res, "dim_res", fun, 1)
}

opbuilder_checks <- function(opstr, res_type, fun) {
  if (!is.character(opstr) || length(opstr) != 1L || is.na(opstr) || !nzchar(opstr)) {
    rkeops_abort(sprintf("%s(): 'opstr' must be the name of an operation, such as \"Exp\"", fun),
                 kind = "input", arg = "opstr")
  }
  if (length(res_type) != 1L || !is.na(res_type) && res_type != "LazyTensor") {
    rkeops_abort(sprintf("%s(): 'res_type' must be NA; complex LazyTensors are made by the complex functions (see ?ComplexLazyTensor)",
                         fun), kind = "input", arg = "res_type")
  }
}

#' @rdname lazytensor_opbuilders
#' @export
unaryop.LazyTensor <- function(x, opstr, opt_arg = NA, opt_arg2 = NA, res_type = NA, dim_res = NA) {
  fun <- "unaryop.LazyTensor"
  opbuilder_checks(opstr, res_type, fun)
  x <- lazy_arg(x, "x", fun)
  extra <- NULL
  if (!(length(opt_arg) == 1L && is.na(opt_arg))) extra <- check_whole(opt_arg, "opt_arg", fun)
  if (!(length(opt_arg2) == 1L && is.na(opt_arg2))) extra <- c(extra, check_whole(opt_arg2, "opt_arg2", fun))
  d <- if (length(dim_res) == 1L && is.na(dim_res)) x$dimres else check_whole(dim_res, "dim_res", fun, 1)
  lazy_call(opstr, list(x), dimres = d, extra = extra)
}

#' @rdname lazytensor_opbuilders
#' @export
binaryop.LazyTensor <- function(x, y, opstr, is_operator = FALSE, dim_check_type = "sameor1",
                                res_type = NA, dim_res = NA, opt_arg = NA) {
  fun <- "binaryop.LazyTensor"
  opbuilder_checks(opstr, res_type, fun)
  xs <- list(lazy_arg(x, "x", fun), lazy_arg(y, "y", fun))
  d <- opbuilder_dim(xs, dim_check_type, dim_res, opstr, fun)
  if (isTRUE(is_operator)) {
    no_complex(xs, sprintf("%s(is_operator = TRUE)", fun))
    return(lazy_combine(xs, function(u, v) paste0("(", u, " ", opstr, " ", v, ")"), d))
  }
  if (is.LazyTensor(opt_arg)) xs <- list(xs[[1L]], opt_arg, xs[[2L]])
  lazy_call(opstr, xs, dimres = d)
}

#' @rdname lazytensor_opbuilders
#' @export
ternaryop.LazyTensor <- function(x, y, z, opstr, dim_check_type = "sameor1", dim_res = NA) {
  fun <- "ternaryop.LazyTensor"
  opbuilder_checks(opstr, NA, fun)
  xs <- list(lazy_arg(x, "x", fun), lazy_arg(y, "y", fun), lazy_arg(z, "z", fun))
  lazy_call(opstr, xs, dimres = opbuilder_dim(xs, dim_check_type, dim_res, opstr, fun))
}

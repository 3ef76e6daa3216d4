# Operations on LazyTensor objects: each builds the formula text of the result.

# Dimension of an elementwise operation of inputs of dimensions `dims`: all equal, or 1.
elementwise_dim <- function(dims, what) {
  d <- max(dims)
  if (any(dims != d & dims != 1L)) {
    stop(sprintf("%s: dimensions %s do not match (they must be equal, or 1)", what,
                 paste(dims, collapse = " and ")), call. = FALSE)
  }
  d
}

# A function of the formulas of `xs` named `name`: "Name(a, b, ...)", elementwise.
lazy_call <- function(name, xs, dimres = NULL, extra = NULL) {
  no_complex(xs, paste0(name, "()"))
  if (is.null(dimres)) dimres <- elementwise_dim(vapply(xs, function(x) x$dimres, 1L), name)
  lazy_combine(xs, function(...) {
    paste0(name, "(", paste(c(...), collapse = ", "), if (length(extra)) ", ",
           paste(extra, collapse = ", "), ")")
  }, dimres)
}

lazy_unary <- function(x, name, fun, label = "x") {
  need_lazy(x, label, fun)
  lazy_call(name, list(need_lazy(x, label, fun)), dimres = x$dimres)
}

# A whole number (for positions, dimensions, exponents).
whole_number <- function(n, label, fun, min = -Inf) {
  if (!is.numeric(n) || length(n) != 1L || !is.finite(n) || n != round(n) || n < min) {
    stop(sprintf("%s(): '%s' must be a whole number%s", fun, label,
                 if (is.finite(min)) sprintf(" >= %d", as.integer(min)) else ""), call. = FALSE)
  }
  as.integer(n)
}

#' Arithmetic and comparison operators for LazyTensor objects
#'
#' `+`, `-`, `*`, `/` (and unary minus) act elementwise; the dimensions of the operands must be
#' equal, or one of them 1. Numbers mix freely with LazyTensors. `x^n` is `Square(x)` for
#' `n = 2`, `Sqrt(x)` for `n = 0.5`, `Pow(x, n)` for other whole `n` and `Powf(x, n)` otherwise.
#' Comparisons (`==`, `!=`, `<`, `<=`, `>`, `>=`) give 1 or 0. `x | y` is the scalar product of
#' two LazyTensors of the same dimension.
#' @param e1,e2 LazyTensors or numbers.
#' @return A LazyTensor.
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' D <- (Vi(x) - Vj(y))^2 / 2 + 1
#' s <- (Vi(x) | Vj(y))       # scalar products, dimension 1
#' sum(s, index = "j")
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
    stop(sprintf("the unary operator '%s' is not defined for LazyTensors", g), call. = FALSE)
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
        stop(sprintf("the scalar product (x | y) needs two LazyTensors of the same dimension, got %d and %d",
                     a$dimres, b$dimres), call. = FALSE)
      }
      lazy_combine(list(a, b), function(u, v) paste0("(", u, " | ", v, ")"), 1L)
    },
    stop(sprintf("the operator '%s' is not defined for LazyTensors", g), call. = FALSE)
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
#' `abs`, `sqrt`, `exp`, `log`, `sin`, `cos`, `acos`, `asin`, `atan`, `sign`, `floor` and
#' `round(x, digits = 0)` act on each component of a LazyTensor.
#' @param x A LazyTensor.
#' @param ... `digits` for `round()`.
#' @return A LazyTensor.
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3)
#' exp(-abs(Vi(x)))
Math.LazyTensor <- function(x, ...) {
  names <- c(abs = "Abs", sqrt = "Sqrt", exp = "Exp", log = "Log", sin = "Sin", cos = "Cos",
             acos = "Acos", asin = "Asin", atan = "Atan", sign = "Sign", floor = "Floor")
  g <- .Generic
  if (g == "round") {
    extra <- list(...)
    digits <- if (length(extra)) extra[[1L]] else 0
    digits <- whole_number(digits, "digits", "round")
    return(lazy_call("Round", list(x), dimres = x$dimres, extra = digits))
  }
  if (!g %in% names(names)) {
    stop(sprintf("%s() is not defined for LazyTensors", g), call. = FALSE)
  }
  lazy_unary(x, names[[g]], g)
}

#' Functions of LazyTensor objects
#'
#' Elementwise: `square(x)`, `rsqrt(x)` (\eqn{1/\sqrt{x}}, 0 at 0), `inv(x)` (\eqn{1/x}),
#' `relu(x)`, `step(x)` (1 where `x >= 0`, else 0), `clamp(x, a, b)` and `clampint(x, a, b)`
#' (`a`, `b` whole numbers), `ifelse(x, a, b)` (`a` where `x >= 0`, `b` elsewhere, as in KeOps),
#' `mod(x, n, d = 0)` (\eqn{x - n \lfloor (x - d) / n \rfloor}), `xlogx(x)`, `sinxdivx(x)`,
#' `atan2(y, x)`.
#'
#' Vectors: `sqnorm2(x)`, `norm2(x)`, `normalize(x)`, `sqdist(x, y)`, `weightedsqnorm(x, s)`,
#' `weightedsqdist(x, y, s)` (`s` of dimension 1, `d` or `d * d`), `elem(x, m)` (the `m`-th
#' component, 1-based), `elemT(x, m, n)` (a vector of dimension `n`, `x` at position `m`),
#' `extract(x, m, d)` (components `m` to `m + d - 1`), `extractT(x, m, d)` (`x` placed from
#' position `m` in a vector of dimension `d`), `concat(x, y)`, `one_hot(x, D)`,
#' `matvecmult(m, v)`, `vecmatmult(v, m)` (matrices stored column-major, as in R) and
#' `tensorprod(x, y)` (`as.vector(outer(x, y))`).
#'
#' `ifelse()`, `atan2()` and `step()` keep their usual behaviour on objects that are not
#' LazyTensors; the other functions require LazyTensors.
#' @param x,y,m,v,test LazyTensors (numbers where noted).
#' @param a,b,n,d,D,s Numbers or LazyTensors, see above.
#' @param yes,no What `ifelse()` chooses between.
#' @param ... Passed to [stats::step()] for non-LazyTensors.
#' @return A LazyTensor.
#' @name lazytensor_functions
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' K <- exp(-sqdist(Vi(x), Vj(y)))
#' e <- elem(Vi(x), 1)              # the first coordinate of x_i
#' c1 <- concat(Vi(x), Vj(y))       # dimension 6
#' sum(ifelse(e - 0.5, K, 0), index = "j")
NULL

#' @rdname lazytensor_functions
#' @export
square <- function(x) lazy_unary(x, "Square", "square")

#' @rdname lazytensor_functions
#' @export
rsqrt <- function(x) lazy_unary(x, "Rsqrt", "rsqrt")

#' @rdname lazytensor_functions
#' @export
inv <- function(x) lazy_unary(x, "Inv", "inv")

#' @rdname lazytensor_functions
#' @export
relu <- function(x) lazy_unary(x, "ReLU", "relu")

#' @rdname lazytensor_functions
#' @export
step <- function(x, ...) {
  if (!is.LazyTensor(x)) return(get("step", envir = asNamespace("stats"))(x, ...))
  lazy_unary(x, "Step", "step")
}

#' @rdname lazytensor_functions
#' @export
xlogx <- function(x) lazy_unary(x, "XLogX", "xlogx")

#' @rdname lazytensor_functions
#' @export
sinxdivx <- function(x) lazy_unary(x, "SinXDivX", "sinxdivx")

#' @rdname lazytensor_functions
#' @export
clamp <- function(x, a, b) {
  need_lazy(x, "x", "clamp")
  lazy_call("Clamp", list(x, as_lazy(a, "a"), as_lazy(b, "b")))
}

#' @rdname lazytensor_functions
#' @export
clampint <- function(x, a, b) {
  need_lazy(x, "x", "clampint")
  a <- whole_number(a, "a", "clampint")
  b <- whole_number(b, "b", "clampint")
  lazy_call("ClampInt", list(x), dimres = x$dimres, extra = c(a, b))
}

#' @rdname lazytensor_functions
#' @export
ifelse <- function(test, yes, no) {
  if (!is.LazyTensor(test)) return(base::ifelse(test, yes, no))
  lazy_call("IfElse", list(test, as_lazy(yes, "yes"), as_lazy(no, "no")))
}

#' @rdname lazytensor_functions
#' @export
mod <- function(x, n, d = 0) {
  need_lazy(x, "x", "mod")
  lazy_call("Mod", list(x, as_lazy(n, "n"), as_lazy(d, "d")))
}

#' @rdname lazytensor_functions
#' @export
atan2 <- function(y, x) {
  if (!is.LazyTensor(y) && !is.LazyTensor(x)) return(base::atan2(y, x))
  lazy_call("Atan2", list(as_lazy(y, "y"), as_lazy(x, "x")))
}

#' @rdname lazytensor_functions
#' @export
sqnorm2 <- function(x) lazy_call("SqNorm2", list(need_lazy(x, "x", "sqnorm2")), dimres = 1L)

#' @rdname lazytensor_functions
#' @export
norm2 <- function(x) lazy_call("Norm2", list(need_lazy(x, "x", "norm2")), dimres = 1L)

#' @rdname lazytensor_functions
#' @export
normalize <- function(x) lazy_unary(x, "Normalize", "normalize")

same_dims <- function(x, y, fun) {
  if (x$dimres != y$dimres) {
    stop(sprintf("%s(): 'x' and 'y' must have the same dimension, got %d and %d", fun,
                 x$dimres, y$dimres), call. = FALSE)
  }
}

#' @rdname lazytensor_functions
#' @export
sqdist <- function(x, y) {
  need_lazy(x, "x", "sqdist")
  need_lazy(y, "y", "sqdist")
  same_dims(x, y, "sqdist")
  lazy_call("SqDist", list(x, y), dimres = 1L)
}

weights_ok <- function(s, d, fun) {
  if (!s$dimres %in% c(1L, d, d * d)) {
    stop(sprintf("%s(): 's' must have dimension 1, %d or %d, not %d", fun, d, d * d, s$dimres),
         call. = FALSE)
  }
}

#' @rdname lazytensor_functions
#' @export
weightedsqnorm <- function(x, s) {
  need_lazy(x, "x", "weightedsqnorm")
  s <- as_lazy(s, "s")
  weights_ok(s, x$dimres, "weightedsqnorm")
  lazy_call("WeightedSqNorm", list(s, x), dimres = 1L)
}

#' @rdname lazytensor_functions
#' @export
weightedsqdist <- function(x, y, s) {
  need_lazy(x, "x", "weightedsqdist")
  need_lazy(y, "y", "weightedsqdist")
  same_dims(x, y, "weightedsqdist")
  s <- as_lazy(s, "s")
  weights_ok(s, x$dimres, "weightedsqdist")
  lazy_call("WeightedSqDist", list(s, x, y), dimres = 1L)
}

#' @rdname lazytensor_functions
#' @export
elem <- function(x, m) {
  need_lazy(x, "x", "elem")
  m <- whole_number(m, "m", "elem", 1)
  if (m > x$dimres) {
    stop(sprintf("elem(): 'm' = %d is beyond the dimension of 'x' (%d); positions are 1-based",
                 m, x$dimres), call. = FALSE)
  }
  lazy_call("Elem", list(x), dimres = 1L, extra = m - 1L)
}

#' @rdname lazytensor_functions
#' @export
elemT <- function(x, m, n) {
  need_lazy(x, "x", "elemT")
  if (x$dimres != 1L) stop("elemT(): 'x' must have dimension 1, not ", x$dimres, call. = FALSE)
  m <- whole_number(m, "m", "elemT", 1)
  n <- whole_number(n, "n", "elemT", 1)
  if (m > n) stop(sprintf("elemT(): 'm' = %d must be at most 'n' = %d", m, n), call. = FALSE)
  lazy_call("ElemT", list(x), dimres = n, extra = c(n, m - 1L))
}

#' @rdname lazytensor_functions
#' @export
extract <- function(x, m, d) {
  need_lazy(x, "x", "extract")
  m <- whole_number(m, "m", "extract", 1)
  d <- whole_number(d, "d", "extract", 1)
  if (m + d - 1L > x$dimres) {
    stop(sprintf("extract(): components %d to %d are beyond the dimension of 'x' (%d)",
                 m, m + d - 1L, x$dimres), call. = FALSE)
  }
  lazy_call("Extract", list(x), dimres = d, extra = c(m - 1L, d))
}

#' @rdname lazytensor_functions
#' @export
extractT <- function(x, m, d) {
  need_lazy(x, "x", "extractT")
  m <- whole_number(m, "m", "extractT", 1)
  d <- whole_number(d, "d", "extractT", 1)
  if (m + x$dimres - 1L > d) {
    stop(sprintf("extractT(): 'x' of dimension %d does not fit at position %d of a vector of dimension %d",
                 x$dimres, m, d), call. = FALSE)
  }
  lazy_call("ExtractT", list(x), dimres = d, extra = c(m - 1L, d))
}

#' @rdname lazytensor_functions
#' @export
concat <- function(x, y) {
  need_lazy(x, "x", "concat")
  need_lazy(y, "y", "concat")
  lazy_call("Concat", list(x, y), dimres = x$dimres + y$dimres)
}

#' @rdname lazytensor_functions
#' @export
one_hot <- function(x, D) {
  need_lazy(x, "x", "one_hot")
  if (x$dimres != 1L) stop("one_hot(): 'x' must have dimension 1, not ", x$dimres, call. = FALSE)
  D <- whole_number(D, "D", "one_hot", 1)
  lazy_call("OneHot", list(x), dimres = D, extra = D)
}

#' @rdname lazytensor_functions
#' @export
matvecmult <- function(m, v) {
  lazy_matrix_product("MatVecMult", "matvecmult", m, v, list(m, v))
}

#' @rdname lazytensor_functions
#' @export
vecmatmult <- function(v, m) {
  lazy_matrix_product("VecMatMult", "vecmatmult", m, v, list(v, m))
}

# A product of the matrix m (stored column-major in a vector) and the vector v, arguments `args`.
lazy_matrix_product <- function(op, fun, m, v, args) {
  need_lazy(m, "m", fun)
  need_lazy(v, "v", fun)
  if (m$dimres %% v$dimres != 0L) {
    stop(sprintf("%s(): the dimension of 'm' (%d) is not a multiple of that of 'v' (%d)",
                 fun, m$dimres, v$dimres), call. = FALSE)
  }
  lazy_call(op, args, dimres = m$dimres %/% v$dimres)
}

#' @rdname lazytensor_functions
#' @export
tensorprod <- function(x, y) {
  need_lazy(x, "x", "tensorprod")
  need_lazy(y, "y", "tensorprod")
  lazy_call("TensorProd", list(x, y), dimres = x$dimres * y$dimres)
}

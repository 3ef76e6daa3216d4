# ComplexLazyTensor objects: LazyTensors of complex numbers, on top of the real formula language.
#
# A complex variable of dimension d is stored as a real variable of dimension 2d, its columns
# interleaved (Re z_1, Im z_1, Re z_2, Im z_2, ...). A ComplexLazyTensor is a LazyTensor whose
# formula is that interleaved real formula (dimres = 2d), with in addition
#   cdim  the complex dimension d;
#   re    a real LazyTensor of dimension d (or 1, broadcast), its real part;
#   im    a real LazyTensor of dimension d (or 1, broadcast), its imaginary part.
# Operations work on the parts (re, im); the interleaved formula is only rebuilt from them.

#' Complex LazyTensor objects
#'
#' `Vi()`, `Vj()`, `Pm()` and `LazyTensor()` applied to complex data give a
#' `ComplexLazyTensor`: a [LazyTensor] of complex numbers, held by the engine
#' as a real variable of twice the dimension (real and imaginary parts
#' interleaved). On them:
#' * `Re()`, `Im()`, `Mod()` (also `abs()`) and `Arg()` give real LazyTensors;
#' * `Conj()`, `exp()`, unary `-`, and `+`, `-`, `*`, `/` (with complex or real
#'   LazyTensors and numbers, complex ones included) and `z^2` give
#'   ComplexLazyTensors;
#' * `exp1j(x)` is \eqn{e^{ix} = \cos x + i \sin x}{exp(ix) = cos(x) + i sin(x)} for a real LazyTensor `x`;
#' * `sum(z, index)` reduces over `i` or `j` and `z %*% b` (for `z` of complex
#'   dimension 1 and a real or complex matrix `b`) computes
#'   \eqn{\sum_j z_{ij} b_j}{sum_j z_ij b_j}.
#'
#' Other operations (comparisons, `min()`, `argmin()`, `sqdist()`, ...) are
#' errors; apply them to `Re(z)`, `Mod(z)`, ... instead.
#' @param x A real LazyTensor (for `exp1j()`), a ComplexLazyTensor (for
#'   `sum()`), or any R object (for `is.ComplexLazyTensor()`).
#' @return `exp1j()`: a ComplexLazyTensor of the dimension of `x`;
#'   `is.ComplexLazyTensor()`: `TRUE` or `FALSE`; `sum()`: an `n x d` complex
#'   matrix (`n = N` for `index = "j"`, `M` for `index = "i"`, `d` the complex
#'   dimension).
#' @name ComplexLazyTensor
#' @examples
#' set.seed(1)
#' x <- matrix(runif(10), 10, 1); y <- matrix(runif(20), 20, 1)
#' w <- complex(real = rnorm(20), imaginary = rnorm(20))
#' # sum_j exp(-i |x_i - y_j|^2) w_j, a complex kernel sum
#' Z <- exp1j(-sqdist(Vi(x), Vj(y))) * Vj(w)
#' Z
#' a <- sum(Z, index = "j")             # a 10 x 1 complex matrix
#' D2 <- outer(x[, 1], y[, 1], "-")^2
#' all.equal(a, exp(-1i * D2) %*% w, tolerance = 1e-5)
#' all.equal(exp1j(-sqdist(Vi(x), Vj(y))) %*% w, a, tolerance = 1e-5)
#' # real functions of complex data
#' z <- complex(real = x, imaginary = 1)
#' is.ComplexLazyTensor(Vi(z))
#' all.equal(sum(Mod(Vi(z)) * Vj(y), index = "j"), as.matrix(Mod(z) * sum(y)),
#'           tolerance = 1e-5)
NULL

#' @rdname ComplexLazyTensor
#' @export
is.ComplexLazyTensor <- function(x) inherits(x, "ComplexLazyTensor")

#' @rdname ComplexLazyTensor
#' @export
exp1j <- function(x) {
  need_lazy(x, "x", "exp1j")
  if (is.ComplexLazyTensor(x)) stop("exp1j(): 'x' must be a real LazyTensor", call. = FALSE)
  new_complex(lazy_unary(x, "Cos", "exp1j"), lazy_unary(x, "Sin", "exp1j"))
}

# The real constant zero.
lazy_zero <- function() new_lazy("0", list(), character(0), 1L)

# A ComplexLazyTensor from its real and imaginary parts (real LazyTensors); `inter`, when
# given, is a real LazyTensor holding the interleaved formula already.
new_complex <- function(re, im, inter = NULL) {
  d <- max(re$dimres, im$dimres)
  if (is.null(inter)) {
    if (d == 1L) {
      inter <- lazy_combine(list(re, im), function(a, b) paste0("Concat(", a, ", ", b, ")"), 2L)
    } else {
      inter <- lazy_combine(list(re, im), function(a, b) {
        pick <- function(f, dim, k) if (dim == 1L) f else sprintf("Elem(%s, %d)", f, k)
        f <- NULL
        for (k in seq_len(d) - 1L) {
          for (g in c(pick(a, re$dimres, k), pick(b, im$dimres, k))) {
            f <- if (is.null(f)) g else sprintf("Concat(%s, %s)", f, g)
          }
        }
        f
      }, 2L * d)
    }
  }
  z <- unclass(inter)
  z$cdim <- d
  z$re <- re
  z$im <- im
  class(z) <- c("ComplexLazyTensor", "LazyTensor")
  z
}

# The components 0-based `ks` of a real LazyTensor, concatenated.
lazy_pick <- function(x, ks) {
  lazy_combine(list(x), function(a) {
    f <- NULL
    for (k in ks) {
      g <- sprintf("Elem(%s, %d)", a, k)
      f <- if (is.null(f)) g else sprintf("Concat(%s, %s)", f, g)
    }
    f
  }, length(ks))
}

# A complex variable (called by lazy_variable() for complex data).
complex_variable <- function(x, cat, label) {
  if (length(x) == 0L || length(dim(x)) > 2L) {
    what <- if (cat == "Pm") "a non-empty vector" else "a matrix or vector"
    stop(sprintf("%s(): '%s' must be %s", cat, label, what), call. = FALSE)
  }
  if (cat == "Pm") {
    x <- as.vector(x)
    d <- length(x)
    r <- as.vector(rbind(Re(x), Im(x)))
  } else {
    if (is.null(dim(x))) x <- matrix(x, ncol = 1L)
    d <- ncol(x)
    if (d == 0L || nrow(x) == 0L) stop(sprintf("%s(): '%s' has no rows or no columns", cat, label),
                                       call. = FALSE)
    r <- matrix(0, nrow(x), 2L * d)
    r[, 2L * seq_len(d) - 1L] <- Re(x)
    r[, 2L * seq_len(d)] <- Im(x)
  }
  v <- lazy_variable(r, cat, label)
  new_complex(lazy_pick(v, 2L * (seq_len(d) - 1L)), lazy_pick(v, 2L * seq_len(d) - 1L), inter = v)
}

# Anything that can be mixed with a ComplexLazyTensor, as a ComplexLazyTensor.
as_complex_lazy <- function(x, label = "argument") {
  if (is.ComplexLazyTensor(x)) return(x)
  if (is.LazyTensor(x)) return(new_complex(x, if (x$dimres == 1L) lazy_zero() else 0 * x))
  if (is.complex(x) && is.null(dim(x)) && length(x) == 1L) {
    if (!is.finite(x)) stop("a number mixed with a LazyTensor must be finite", call. = FALSE)
    return(new_complex(as_lazy(Re(x), label), as_lazy(Im(x), label)))
  }
  if (is.complex(x) && is.null(dim(x)) && length(x) > 1L) return(complex_variable(x, "Pm", label))
  as_complex_lazy(as_lazy(x, label), label)
}

# The complex dimension of an elementwise operation.
complex_dims <- function(a, b, what) {
  elementwise_dim(c(a$cdim, b$cdim), sprintf("'%s' (complex dimensions)", what))
}

# Arithmetic with at least one ComplexLazyTensor (called by Ops.LazyTensor()).
complex_ops <- function(e1, e2, g) {
  if (missing(e2)) {
    if (g == "+") return(e1)
    if (g == "-") return(new_complex(-e1$re, -e1$im))
    stop(sprintf("the unary operator '%s' is not defined for ComplexLazyTensors", g), call. = FALSE)
  }
  if (g == "^" && is.numeric(e2) && length(e2) == 1L && isTRUE(e2 == 2)) return(e1 * e1)
  if (!g %in% c("+", "-", "*", "/")) {
    stop(sprintf("the operator '%s' is not defined for ComplexLazyTensors", g), call. = FALSE)
  }
  a <- as_complex_lazy(e1, "e1")
  b <- as_complex_lazy(e2, "e2")
  complex_dims(a, b, g)
  switch(g,
    "+" = new_complex(a$re + b$re, a$im + b$im),
    "-" = new_complex(a$re - b$re, a$im - b$im),
    "*" = new_complex(a$re * b$re - a$im * b$im, a$re * b$im + a$im * b$re),
    "/" = {
      den <- square(b$re) + square(b$im)
      new_complex((a$re * b$re + a$im * b$im) / den, (a$im * b$re - a$re * b$im) / den)
    }
  )
}

#' @export
Math.ComplexLazyTensor <- function(x, ...) {
  switch(.Generic,
    exp = {
      e <- exp(x$re)
      new_complex(e * cos(x$im), e * sin(x$im))
    },
    abs = Mod(x),
    stop(sprintf("%s() is not defined for ComplexLazyTensors", .Generic), call. = FALSE)
  )
}

#' @export
Complex.LazyTensor <- function(z) {
  g <- .Generic
  if (!is.ComplexLazyTensor(z)) {
    # a real LazyTensor, seen as complex numbers of imaginary part 0
    return(switch(g,
      Re = , Conj = z,
      Im = 0 * z,
      Mod = abs(z),
      Arg = (z < 0) * pi
    ))
  }
  switch(g,
    Re = z$re,
    Im = z$im,
    Mod = sqrt(square(z$re) + square(z$im)),
    Arg = atan2(z$im, z$re),
    Conj = new_complex(z$re, -z$im)
  )
}

# The real LazyTensor of the interleaved formula.
complex_real_view <- function(z) {
  z <- unclass(z)
  new_lazy(z$formula, z$vars, z$cats, z$dimres, dims = z$dims)
}

# N x 2d interleaved real results as an N x d complex matrix.
complex_from_interleaved <- function(res) {
  d <- ncol(res) %/% 2L
  matrix(complex(real = res[, 2L * seq_len(d) - 1L], imaginary = res[, 2L * seq_len(d)]),
         nrow(res), d)
}

#' @rdname ComplexLazyTensor
#' @param index `"i"` or `"j"`, the index reduced over by `sum()`.
#' @param ... Unused.
#' @export
sum.ComplexLazyTensor <- function(x, index = NA, ...) {
  if (length(index) == 1L && is.na(index)) {
    stop("sum(): a ComplexLazyTensor can only be reduced over an index, \"i\" or \"j\"",
         call. = FALSE)
  }
  complex_from_interleaved(lazy_reduce(complex_real_view(x), "Sum", index, "sum"))
}

# z %*% b with z a ComplexLazyTensor, or a real LazyTensor and b complex (from `%*%`).
complex_matvec <- function(x, b) {
  if (is.ComplexLazyTensor(x) && x$cdim != 1L) {
    stop(sprintf("'%%*%%': the ComplexLazyTensor must have complex dimension 1, not %d", x$cdim),
         call. = FALSE)
  }
  if (!is.ComplexLazyTensor(x) && x$dimres != 1L) {
    stop(sprintf("'%%*%%': the LazyTensor must have dimension 1, not %d", x$dimres), call. = FALSE)
  }
  if (!"Vj" %in% x$cats) {
    stop("'%*%': the LazyTensor has no variable indexed by j (made with Vj())", call. = FALSE)
  }
  M <- NROW(x$vars[[which(x$cats == "Vj")[1L]]])
  if (is.null(dim(b))) b <- matrix(b, ncol = 1L)
  if (!(is.numeric(b) || is.complex(b)) || nrow(b) != M) {
    stop(sprintf("'%%*%%': 'y' must be a numeric or complex matrix with %d rows (one per j), not %d",
                 M, NROW(b)), call. = FALSE)
  }
  sum(as_complex_lazy(x) * as_complex_lazy(Vj(b), "y"), index = "j")
}

#' @export
print.ComplexLazyTensor <- function(x, ...) {
  cat("ComplexLazyTensor of complex dimension ", x$cdim, " (real dimension ", x$dimres,
      ", real and imaginary parts interleaved)\n", sep = "")
  cat("formula: ", lazy_formula_text(x), "\n", sep = "")
  print_lazy_variables(x)
  invisible(x)
}

# Stops when a real-only operation receives a ComplexLazyTensor.
no_complex <- function(xs, fun) {
  for (x in xs) {
    if (is.ComplexLazyTensor(x)) {
      stop(sprintf("%s is not supported for ComplexLazyTensors", fun), call. = FALSE)
    }
  }
}

# ComplexLazyTensor objects: LazyTensors of complex numbers, on top of the real formula language.
#
# A complex variable of dimension d is stored as a real variable of dimension 2d, its columns
# interleaved (Re z_1, Im z_1, Re z_2, Im z_2, ...). A ComplexLazyTensor is a LazyTensor whose
# formula is that interleaved real formula, with
#   dimres  the complex dimension d (as in rkeops 2; the formula itself has 2d real components);
#   re      a real LazyTensor of dimension d (or 1, broadcast), its real part;
#   im      a real LazyTensor of dimension d (or 1, broadcast), its imaginary part.
# Operations work on the parts (re, im) with the real operations; the interleaved formula is
# only rebuilt from them, for reductions. The engine shares repeated subexpressions, so a part
# used several times in a formula is computed once.

#' Complex LazyTensor objects
#'
#' `Vi()`, `Vj()`, `Pm()` and `LazyTensor()` applied to complex data (or to
#' real data with `is_complex = TRUE`) give a `ComplexLazyTensor`: a
#' [LazyTensor] of complex numbers. Its `dimres` and the last element of
#' [dim()][dim.LazyTensor] are its complex dimension `d`; the engine holds it
#' as `2d` real numbers (real and imaginary parts interleaved).
#'
#' Operations are those of complex arithmetic, as R computes them on complex
#' numbers:
#' * `+`, `-`, `*`, `/` with complex or real LazyTensors and numbers (complex
#'   numbers included); `==` and `!=` (1 where both parts are equal, as R's
#'   `==`, a real LazyTensor);
#' * `z^p`: `z * z` for `p = 2`, \eqn{|z|^p e^{i p \arg z}}{|z|^p exp(i p Arg(z))} for a real
#'   number or real LazyTensor `p` (the principal power, as R's `^`), and
#'   \eqn{e^{w \log z}}{exp(w log(z))} for a complex exponent `w`;
#' * `exp()`, `log()` (principal branch; `log(z, base)`, `log2()`, `log10()`),
#'   `sqrt()` (principal root), `cos()`, `sin()`, `tan()`, `cosh()`, `sinh()`,
#'   `tanh()`, `acos()`, `asin()`, `atan()`, `acosh()`, `asinh()`, `atanh()`
#'   (principal values, those of R off the branch cuts), `round(z, digits)`
#'   (both parts), `square()`, `inv()` (\eqn{1/z}) and `rsqrt()`
#'   (\eqn{1/\sqrt{z}}{1/sqrt(z)}, 0 at 0 like the real `rsqrt()`);
#' * `Re()`, `Im()`, `Mod()` (also `abs()`) and `Arg()` give real LazyTensors,
#'   `Conj()` the conjugate; `real2complex(x)` is `x + 0i` and
#'   `imag2complex(x)` is `0 + ix` for a real LazyTensor `x`, and `exp1j(x)` is
#'   \eqn{e^{ix} = \cos x + i \sin x}{exp(ix) = cos(x) + i sin(x)};
#' * `sqnorm2(z)` (\eqn{\sum_k |z_k|^2}{sum_k |z_k|^2}), `norm2(z)`,
#'   `sqdist(z, w)` (\eqn{\sum_k |z_k - w_k|^2}{sum_k |z_k - w_k|^2}) and
#'   `weightedsqnorm(z, s)`, `weightedsqdist(z, w, s)` with real weights `s`
#'   (those of the real and imaginary parts, added) give real LazyTensors;
#'   `normalize(z)` is \eqn{z / |z|};
#' * `(z | w)` is the Hermitian scalar product
#'   \eqn{\sum_k \bar z_k w_k}{sum_k Conj(z_k) w_k}, so that `(z | z)` is
#'   `sqnorm2(z)` (rkeops 2 gave its real part only);
#' * `elem()`, `elemT()`, `extract()`, `extractT()`, `concat()`,
#'   `tensorprod()`, `matvecmult()`, `vecmatmult()` and `sum(z)` without
#'   `index` (the sum of the `d` components) act on complex components;
#'   `ifelse(test, yes, no)` takes complex `yes` and `no` and a real `test`;
#' * `sum(z, index)` reduces over `i` or `j` and `z %*% b` (for `z` of complex
#'   dimension 1 and a real or complex matrix `b`) computes
#'   \eqn{\sum_j z_{ij} b_j}{sum_j z_ij b_j}: both give complex matrices.
#'
#' Functions without a complex meaning (comparisons `<`, `<=`, ...,
#' `step()`, `relu()`, `sign()`, `floor()`, `min()`, `max()`, `argmin()`,
#' `Kmin()`, `logsumexp()`, `mod()`, `clamp()`, `atan2()`, ...) are errors
#' that say to apply them to `Re(z)`, `Im(z)`, `Mod(z)` or `Arg(z)`. rkeops 2
#' applied most of them, and `sqrt()`, `log()`, `cos()`, powers, ..., to the
#' real and imaginary parts as if they were independent real numbers.
#' @param x A real LazyTensor (for `exp1j()`, `real2complex()`,
#'   `imag2complex()`), a ComplexLazyTensor (for `sum()`), or any R object
#'   (for `is.ComplexLazyTensor()`).
#' @return `exp1j()`, `real2complex()`, `imag2complex()`: a ComplexLazyTensor
#'   of the dimension of `x`; `is.ComplexLazyTensor()`: `TRUE` or `FALSE`;
#'   `sum()`: an `n x d` complex matrix (`n = N` for `index = "j"`, `M` for
#'   `index = "i"`, `d` the complex dimension), or a ComplexLazyTensor of
#'   dimension 1 without `index`.
#' @name ComplexLazyTensor
#' @seealso [LazyTensor()] (its argument `is_complex`),
#'   [is.ComplexLazyParameter()]
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
#' # complex functions, as R computes them
#' u <- matrix(complex(real = rnorm(10), imaginary = rnorm(10)), 10, 1)
#' v <- complex(real = rnorm(20), imaginary = rnorm(20))
#' F <- sqrt(Vi(u) * Vj(v)) + log(Vi(u))^3 - cos(Vj(v) / 2)
#' dense <- sqrt(outer(u[, 1], v)) + log(u[, 1])^3 - matrix(cos(v / 2), 10, 20, byrow = TRUE)
#' all.equal(sum(F, index = "j"), as.matrix(rowSums(dense)), tolerance = 1e-4)
#' # real functions of complex data
#' z <- complex(real = x, imaginary = 1)
#' is.ComplexLazyTensor(Vi(z))
#' all.equal(sum(Mod(Vi(z)) * Vj(y), index = "j"), as.matrix(Mod(z) * sum(y)),
#'           tolerance = 1e-5)
#' all.equal(sum(sqdist(Vi(z), Vj(w)), index = "j"),
#'           as.matrix(rowSums(Mod(outer(z, w, "-"))^2)), tolerance = 1e-5)
#' # a real LazyTensor made complex
#' all.equal(sum(real2complex(Vi(x)) * Vj(w), index = "j"), x %*% t(w) %*% rep(1, 20),
#'           tolerance = 1e-5)
NULL

#' @rdname ComplexLazyTensor
#' @export
is.ComplexLazyTensor <- function(x) inherits(x, "ComplexLazyTensor")

#' @rdname ComplexLazyTensor
#' @export
exp1j <- function(x) {
  need_real(x, "exp1j")
  new_complex(cos(x), sin(x))
}

#' @rdname ComplexLazyTensor
#' @export
real2complex <- function(x) {
  need_real(x, "real2complex")
  new_complex(x, lazy_zero())
}

#' @rdname ComplexLazyTensor
#' @export
imag2complex <- function(x) {
  need_real(x, "imag2complex")
  new_complex(lazy_zero(), x)
}

# Requires a real LazyTensor.
need_real <- function(x, fun) {
  need_lazy(x, "x", fun)
  if (is.ComplexLazyTensor(x)) {
    rkeops_abort(sprintf("%s(): 'x' must be a real LazyTensor, not a ComplexLazyTensor", fun),
                 kind = "input", arg = "x")
  }
  x
}

# The real constant zero. A zero part is a constant rather than 0 * x, which would be NaN where
# x is infinite.
lazy_zero <- function() new_lazy("0", list(), character(0), 1L)

# A ComplexLazyTensor from its real and imaginary parts (real LazyTensors of equal dimensions,
# or one of them of dimension 1); `inter`, when given, is a real LazyTensor holding the
# interleaved formula already.
new_complex <- function(re, im, inter = NULL) {
  d <- elementwise_dim(c(re$dimres, im$dimres), "the real and imaginary parts")
  if (is.null(inter)) {
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
  z <- unclass(inter)
  z$dimres <- as.integer(d)
  z$re <- re
  z$im <- im
  class(z) <- c("ComplexLazyTensor", "LazyTensor")
  z
}

# The real and imaginary parts of z, both of its full dimension (a part of dimension 1 is
# repeated), for the operations that do not broadcast (concat(), tensorprod(), ...).
complex_parts <- function(z) {
  d <- z$dimres
  full <- function(p) if (p$dimres == d) p else lazy_call("SumT", list(p), dimres = d, extra = d)
  list(re = full(z$re), im = full(z$im))
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
    rkeops_abort(sprintf("%s(): '%s' must be %s", cat, label, what), kind = "input", arg = label)
  }
  if (cat == "Pm") {
    x <- as.vector(x)
    d <- length(x)
    r <- as.vector(rbind(Re(x), Im(x)))
  } else {
    if (is.null(dim(x))) x <- matrix(x, ncol = 1L)
    d <- ncol(x)
    if (d == 0L || nrow(x) == 0L) {
      rkeops_abort(sprintf("%s(): '%s' has no rows or no columns", cat, label), kind = "input", arg = label)
    }
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
  if (is.LazyTensor(x)) return(new_complex(x, lazy_zero()))
  if (is.complex(x) && is.null(dim(x)) && length(x) == 1L) {
    if (!is.finite(x)) {
      rkeops_abort("a number mixed with a LazyTensor must be finite", kind = "input", arg = label)
    }
    return(new_complex(as_lazy(Re(x), label), as_lazy(Im(x), label)))
  }
  if (is.complex(x) && is.null(dim(x)) && length(x) > 1L) return(complex_variable(x, "Pm", label))
  as_complex_lazy(as_lazy(x, label), label)
}

# The complex dimension of an elementwise operation.
complex_dims <- function(a, b, what) {
  elementwise_dim(c(a$dimres, b$dimres), sprintf("'%s' (complex dimensions)", what))
}

# The error for what has no complex meaning.
complex_undefined <- function(what) {
  rkeops_abort(sprintf(paste("%s is not defined for ComplexLazyTensors (it has no complex meaning):",
                             "apply it to a real LazyTensor such as Re(z), Im(z), Mod(z) or Arg(z)"), what),
               kind = "formula")
}

# Operators with at least one ComplexLazyTensor or complex number (called by Ops.LazyTensor()).
complex_ops <- function(e1, e2, g) {
  if (missing(e2)) {
    if (g == "+") return(e1)
    if (g == "-") return(new_complex(-e1$re, -e1$im))
    complex_undefined(sprintf("the unary operator '%s'", g))
  }
  if (g == "^") return(complex_power(e1, e2))
  if (!g %in% c("+", "-", "*", "/", "==", "!=", "|")) {
    complex_undefined(sprintf("the operator '%s'", g))
  }
  a <- as_complex_lazy(e1, "e1")
  b <- as_complex_lazy(e2, "e2")
  if (g == "|") return(complex_scalar_product(a, b))
  complex_dims(a, b, g)
  switch(g,
    "+" = new_complex(a$re + b$re, a$im + b$im),
    "-" = new_complex(a$re - b$re, a$im - b$im),
    "*" = new_complex(a$re * b$re - a$im * b$im, a$re * b$im + a$im * b$re),
    "/" = {
      den <- square(b$re) + square(b$im)
      new_complex((a$re * b$re + a$im * b$im) / den, (a$im * b$re - a$re * b$im) / den)
    },
    # as R's == on complex numbers: both parts equal
    "==" = (a$re == b$re) * (a$im == b$im),
    "!=" = 1 - (a$re == b$re) * (a$im == b$im)
  )
}

# (a | b) = sum_k Conj(a_k) b_k, so that (z | z) = sqnorm2(z), as (x | x) = sqnorm2(x) for real x.
complex_scalar_product <- function(a, b) {
  if (a$dimres != b$dimres) {
    rkeops_abort(sprintf("the scalar product (x | y) needs two LazyTensors of the same dimension, got %d and %d",
                         a$dimres, b$dimres), kind = "formula")
  }
  pa <- complex_parts(a)
  pb <- complex_parts(b)
  new_complex((pa$re | pb$re) + (pa$im | pb$im), (pa$re | pb$im) - (pa$im | pb$re))
}

# r e^{i theta} for real LazyTensors r and theta.
complex_polar <- function(r, theta) new_complex(r * cos(theta), r * sin(theta))

complex_square <- function(z) new_complex(square(z$re) - square(z$im), 2 * z$re * z$im)

complex_inv <- function(z) {
  den <- square(z$re) + square(z$im)
  new_complex(z$re / den, -z$im / den)
}

# 1 / sqrt(z), 0 at 0 as the real rsqrt().
complex_rsqrt <- function(z) complex_polar(rsqrt(Mod(z)), Arg(z) * (-0.5))

# e1^e2 with e1 or e2 complex: the principal power, as R's ^.
complex_power <- function(e1, e2) {
  z <- as_complex_lazy(e1, "e1")
  if (is.ComplexLazyTensor(e2) || is.complex(e2)) {
    # a complex exponent: exp(w log(z)) (NaN at z = 0)
    return(complex_exp(as_complex_lazy(e2, "e2") * complex_log(z)))
  }
  if (is.numeric(e2) && length(e2) == 1L && is.null(dim(e2))) {
    if (!is.finite(e2)) rkeops_abort("'^': the exponent must be a finite number", kind = "input", arg = "e2")
    if (e2 == 1) return(z)
    if (e2 == 2) return(complex_square(z))
    if (e2 == -1) return(complex_inv(z))
  }
  # a real exponent: |z|^p e^{i p Arg(z)}, 0 at z = 0 for p > 0
  p <- as_lazy(e2, "e2")
  complex_polar(Mod(z)^p, p * Arg(z))
}

# Complex elementary functions, from the real functions of the parts z = a + ib.
real_cosh <- function(x) (exp(x) + exp(-x)) / 2
real_sinh <- function(x) (exp(x) - exp(-x)) / 2

complex_exp <- function(z) {
  e <- exp(z$re)
  new_complex(e * cos(z$im), e * sin(z$im))
}

complex_log <- function(z) new_complex(log(square(z$re) + square(z$im)) / 2, atan2(z$im, z$re))

complex_trig <- function(z, g) {
  a <- z$re
  b <- z$im
  switch(g,
    cos = new_complex(cos(a) * real_cosh(b), -(sin(a) * real_sinh(b))),
    sin = new_complex(sin(a) * real_cosh(b), cos(a) * real_sinh(b)),
    cosh = new_complex(real_cosh(a) * cos(b), real_sinh(a) * sin(b)),
    sinh = new_complex(real_sinh(a) * cos(b), real_cosh(a) * sin(b)),
    # tan and tanh with real denominators, finite for large |Im z| (|Re z|)
    tan = {
      den <- cos(2 * a) + real_cosh(2 * b)
      new_complex(sin(2 * a) / den, real_sinh(2 * b) / den)
    },
    tanh = {
      den <- real_cosh(2 * a) + cos(2 * b)
      new_complex(real_sinh(2 * a) / den, sin(2 * b) / den)
    }
  )
}

# asin(z) from the half sum (alpha) and half difference (beta) of |z + 1| and |z - 1|. The sign of
# the imaginary part is that of Im(z); on the real axis (|Re z| > 1), as R: - for Re z > 1, + for
# Re z < -1.
complex_asin <- function(z) {
  a <- z$re
  b <- z$im
  t1 <- sqrt(square(a + 1) + square(b)) / 2
  t2 <- sqrt(square(a - 1) + square(b)) / 2
  alpha <- t1 + t2
  beta <- clamp(t1 - t2, -1, 1)                 # |beta| <= 1, up to rounding
  s <- sign(b) - (1 - abs(sign(b))) * sign(a)
  new_complex(asin(beta), s * log(alpha + sqrt(relu(square(alpha) - 1))))
}

# atan(z); on the imaginary axis (|Im z| > 1) the real part is +-pi/2 with the sign of Im(z), as R.
complex_atan <- function(z) {
  a <- z$re
  b <- z$im
  off_axis <- abs(sign(a))
  re <- atan2(2 * a, 1 - square(a) - square(b)) / 2 * off_axis +
    (1 - off_axis) * sign(b) * (pi / 2) * step(abs(b) - 1)
  new_complex(re, log((square(a) + square(b + 1)) / (square(a) + square(b - 1))) / 4)
}

complex_inverse_trig <- function(z, g) {
  times_i <- function(w) new_complex(-w$im, w$re)       # i w
  times_minus_i <- function(w) new_complex(w$im, -w$re) # -i w
  switch(g,
    asin = complex_asin(z),
    acos = {
      s <- complex_asin(z)
      new_complex(pi / 2 - s$re, -s$im)
    },
    atan = complex_atan(z),
    asinh = times_minus_i(complex_asin(times_i(z))),
    atanh = times_minus_i(complex_atan(times_i(z))),
    # as R: i acos(z) (its real part has the sign of Im(z), where C's cacosh() keeps it >= 0)
    acosh = times_i(complex_inverse_trig(z, "acos"))
  )
}

#' @export
Math.ComplexLazyTensor <- function(x, ...) {
  g <- .Generic
  switch(g,
    abs = Mod(x),
    exp = complex_exp(x),
    log = {
      l <- complex_log(x)
      base <- list(...)
      if (length(base)) {
        l <- l / log(check_log_base(base[[1L]]))
      }
      l
    },
    log2 = complex_log(x) / log(2),
    log10 = complex_log(x) / log(10),
    sqrt = complex_power(x, 0.5),
    cos = , sin = , tan = , cosh = , sinh = , tanh = complex_trig(x, g),
    acos = , asin = , atan = , acosh = , asinh = , atanh = complex_inverse_trig(x, g),
    # as R's round() of complex numbers: both parts
    round = new_complex(round(x$re, ...), round(x$im, ...)),
    complex_undefined(sprintf("%s()", g))
  )
}

#' @export
Complex.LazyTensor <- function(z) {
  g <- .Generic
  if (!is.ComplexLazyTensor(z)) {
    # a real LazyTensor, seen as complex numbers of imaginary part 0
    return(switch(g,
      Re = , Conj = z,
      Im = if (z$dimres == 1L) lazy_zero() else {
        lazy_call("SumT", list(lazy_zero()), dimres = z$dimres, extra = z$dimres)
      },
      Mod = abs(z),
      Arg = (z < 0) * pi
    ))
  }
  switch(g,
    Re = complex_parts(z)$re,
    Im = complex_parts(z)$im,
    Mod = sqrt(square(z$re) + square(z$im)),
    Arg = atan2(z$im, z$re),
    Conj = new_complex(z$re, -z$im)
  )
}

# The operations of R/lazytensor-ops.R and R/lazytensor-reduce.R that write a KeOps function
# "name(args, extra)" (through lazy_call()) on arguments `xs` of which one at least is complex:
# the complex operation, or an error when it has no complex meaning. `dimres` is the dimension
# of the result computed by the caller, from the complex dimensions.
complex_call <- function(name, xs, dimres = NULL, extra = NULL) {
  zs <- lapply(xs, as_complex_lazy)
  z <- zs[[1L]]
  switch(name,
    Square = complex_square(z),
    Inv = complex_inv(z),
    Rsqrt = complex_rsqrt(z),
    Abs = Mod(z),
    Exp = complex_exp(z),
    Log = complex_log(z),
    Sqrt = complex_power(z, 0.5),
    Cos = complex_trig(z, "cos"),
    Sin = complex_trig(z, "sin"),
    Acos = complex_inverse_trig(z, "acos"),
    Asin = complex_inverse_trig(z, "asin"),
    Atan = complex_inverse_trig(z, "atan"),
    # norms and distances: those of the 2d real components, real
    SqNorm2 = , Norm2 = lazy_call(name, list(complex_real_view(z)), dimres = 1L),
    SqDist = lazy_call(name, lapply(zs, complex_real_view), dimres = 1L),
    Normalize = {
      r <- rsqrt(lazy_call("SqNorm2", list(complex_real_view(z)), dimres = 1L))
      new_complex(z$re * r, z$im * r)
    },
    WeightedSqNorm = , WeightedSqDist = {
      if (is.ComplexLazyTensor(xs[[1L]])) {
        rkeops_abort(sprintf("%s(): the weights 's' must be real", tolower(name)), kind = "input", arg = "s")
      }
      diff <- if (name == "WeightedSqDist") zs[[2L]] - zs[[3L]] else zs[[2L]]
      p <- complex_parts(diff)
      lazy_call("WeightedSqNorm", list(xs[[1L]], p$re), dimres = 1L) +
        lazy_call("WeightedSqNorm", list(xs[[1L]], p$im), dimres = 1L)
    },
    # linear in z: the same operation on both parts
    Sum = , SumT = , Elem = , ElemT = , Extract = , ExtractT = {
      p <- complex_parts(z)
      new_complex(lazy_call(name, list(p$re), dimres = dimres, extra = extra),
                  lazy_call(name, list(p$im), dimres = dimres, extra = extra))
    },
    Concat = {
      p <- lapply(zs, complex_parts)
      new_complex(lazy_call(name, list(p[[1L]]$re, p[[2L]]$re), dimres = dimres),
                  lazy_call(name, list(p[[1L]]$im, p[[2L]]$im), dimres = dimres))
    },
    # bilinear in the two arguments
    TensorProd = , MatVecMult = , VecMatMult = {
      p <- lapply(zs, complex_parts)
      op <- function(u, v) lazy_call(name, list(u, v), dimres = dimres)
      new_complex(op(p[[1L]]$re, p[[2L]]$re) - op(p[[1L]]$im, p[[2L]]$im),
                  op(p[[1L]]$re, p[[2L]]$im) + op(p[[1L]]$im, p[[2L]]$re))
    },
    # a real test choosing between complex values
    IfElse = {
      if (is.ComplexLazyTensor(xs[[1L]])) complex_undefined("ifelse() with a complex 'test'")
      test <- xs[[1L]]
      new_complex(ifelse(test, zs[[2L]]$re, zs[[3L]]$re), ifelse(test, zs[[2L]]$im, zs[[3L]]$im))
    },
    complex_undefined(sprintf("%s()", complex_function_name(name)))
  )
}

# The R name of a KeOps function, for messages.
complex_function_name <- function(name) {
  r_names <- c(ReLU = "relu", Step = "step", Sign = "sign", Floor = "floor", Round = "round",
               Clamp = "clamp", ClampInt = "clampint", Mod = "mod", Atan2 = "atan2",
               XLogX = "xlogx", SinXDivX = "sinxdivx", OneHot = "one_hot", Min = "min", Max = "max",
               ArgMin = "argmin", ArgMax = "argmax", Pow = "^", Powf = "^", Equal = "==",
               NotEqual = "!=", LessThan = "<", LessOrEqual = "<=")
  if (name %in% names(r_names)) r_names[[name]] else name
}

# The real LazyTensor of the interleaved formula (2 * dimres real components).
complex_real_view <- function(z) {
  z <- unclass(z)
  new_lazy(z$formula, z$vars, z$cats, 2L * z$dimres, dims = z$dims)
}

# N x 2d interleaved real results as an N x d complex matrix.
complex_from_interleaved <- function(res) {
  d <- ncol(res) %/% 2L
  matrix(complex(real = res[, 2L * seq_len(d) - 1L], imaginary = res[, 2L * seq_len(d)]),
         nrow(res), d)
}

#' @rdname ComplexLazyTensor
#' @param index `"i"` or `"j"`, the index reduced over by `sum()`, or `NA`
#'   (the default) to sum the components of each value.
#' @param ranges Optional block-sparse ranges, as for [sum.LazyTensor()].
#' @param ... Unused.
#' @export
sum.ComplexLazyTensor <- function(x, index = NA, ranges = NULL, ...) {
  if (length(index) == 1L && is.na(index)) return(complex_call("Sum", list(x), dimres = 1L))
  complex_from_interleaved(lazy_reduce(complex_real_view(x), "Sum", index, "sum", ranges = ranges))
}

# z %*% b with z a ComplexLazyTensor, or a real LazyTensor and b complex (from `%*%`).
complex_matvec <- function(x, b) {
  if (x$dimres != 1L) {
    rkeops_abort(sprintf("'%%*%%': the LazyTensor must have dimension 1, not %d", x$dimres),
                 kind = "input", arg = "x")
  }
  if (!"Vj" %in% x$cats) {
    rkeops_abort("'%*%': the LazyTensor has no variable indexed by j (made with Vj())",
                 kind = "input", arg = "x")
  }
  M <- NROW(x$vars[[which(x$cats == "Vj")[1L]]])
  if (is.null(dim(b))) b <- matrix(b, ncol = 1L)
  if (!(is.numeric(b) || is.complex(b)) || nrow(b) != M) {
    rkeops_abort(sprintf("'%%*%%': 'y' must be a numeric or complex matrix with %d rows (one per j), not %d",
                         M, NROW(b)), kind = "input", arg = "y")
  }
  sum(as_complex_lazy(x) * as_complex_lazy(Vj(b), "y"), index = "j")
}

#' @export
print.ComplexLazyTensor <- function(x, ...) {
  cat("ComplexLazyTensor of complex dimension ", x$dimres, " (held as ", 2L * x$dimres,
      " reals, real and imaginary parts interleaved)\n", sep = "")
  cat("formula: ", lazy_formula_text(x), "\n", sep = "")
  print_lazy_variables(x)
  invisible(x)
}

# Stops when an operation without a complex version receives a ComplexLazyTensor.
no_complex <- function(xs, fun) {
  for (x in xs) {
    if (is.ComplexLazyTensor(x)) {
      rkeops_abort(sprintf("%s is not supported for ComplexLazyTensors: apply it to a real LazyTensor such as Re(z), Im(z), Mod(z) or Arg(z)",
                           fun), kind = "formula")
    }
  }
}

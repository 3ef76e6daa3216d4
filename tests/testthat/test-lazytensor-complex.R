# ComplexLazyTensor against plain R complex arithmetic, in float64 (and a few cases in float32).
lsqdist <- rkeops::sqdist

N <- 37; M <- 53

cmat <- function(n, d) matrix(complex(real = rmat(n, d), imaginary = rmat(n, d)), n, d)

cz_data <- function(seed = 3) {
  set.seed(seed)
  list(a = cmat(N, 2), b = cmat(M, 2), u = rmat(N, 2), v = rmat(M, 2),
       p = complex(real = c(0.4, -1.2), imaginary = c(0.9, 0.3)),
       x = rmat(N, 3), y = rmat(M, 3), w = cmat(M, 1)[, 1], s = cmat(N, 1))
}

# Dense reference of sum(F, index): fun(I, J) gets the i-variables (a, u, s, x) and the
# j-variables (b, v, w, y) expanded to one row per pair (i, j), i varying fastest, and returns
# the values of F, one row per pair; they are summed over j (index "j", N rows) or i (M rows).
pair_sum <- function(fun, d, index) {
  I <- lapply(list(a = d$a, u = d$u, s = d$s, x = d$x),
              function(v) v[rep(seq_len(N), times = M), , drop = FALSE])
  J <- lapply(list(b = d$b, v = d$v, w = as.matrix(d$w), y = d$y),
              function(v) v[rep(seq_len(M), each = N), , drop = FALSE])
  V <- as.matrix(fun(I, J))
  g <- if (index == "j") rep(seq_len(N), times = M) else rep(seq_len(M), each = N)
  if (is.complex(V)) unname(rowsum(Re(V), g) + 1i * rowsum(Im(V), g)) else unname(rowsum(V, g))
}

# The result must be complex when the reference is, real (double) when it is not.
expect_cclose <- function(object, expected, info, tol = 1e-10) {
  expect_identical(is.complex(object), is.complex(expected), info = paste(info, ": complex type"))
  expect_true(is.double(object) || is.complex(object), info = info)
  expect_identical(dim(object), dim(expected), info = info)
  if (!identical(dim(object), dim(expected))) return(invisible())
  err <- max(Mod(object - expected)) / max(1, max(Mod(expected)))
  expect_lt(err, tol, label = paste("relative error", info))
}

# Checks sum(lazy, index) over both indices against pair_sum(fun, ...).
expect_csum <- function(lazy, fun, d, info, tol = 1e-10) {
  for (index in c("j", "i")) {
    expect_cclose(sum(lazy, index = index), pair_sum(fun, d, index), paste(info, index), tol)
  }
}

# Columns of a (rows x length(p)) matrix holding the parameter p on every row.
prow <- function(p, n) matrix(p, n, length(p), byrow = TRUE)

test_that("complex constructors, dimensions, printing and parts", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a)
  expect_true(is.ComplexLazyTensor(za))
  expect_true(is.LazyTensor(za))
  expect_identical(class(za), c("ComplexLazyTensor", "LazyTensor"))
  expect_identical(za$args, "V0 = Vi(4)")               # 2 reals per complex component
  expect_identical(za$dimres, 2L)                        # the complex dimension, as rkeops 2
  expect_identical(za$vars[[1L]][, c(1, 3)], unname(Re(d$a)))
  expect_identical(za$vars[[1L]][, c(2, 4)], unname(Im(d$a)))
  expect_identical(dim(za * Vj(d$b)), c(as.integer(N), as.integer(M), 2L))
  expect_identical(dim(Mod(za) + Vj(d$v)), c(as.integer(N), as.integer(M), 2L))
  expect_identical(dim(Pm(d$p)), c(NA, NA, 2L))
  expect_true(is.ComplexLazyTensor(Vj(d$w)))
  expect_identical(Vj(d$w)$args, "V0 = Vj(2)")
  expect_identical(LazyTensor(d$b, index = "j")$args, "V0 = Vj(4)")
  expect_identical(LazyTensor(d$p)$args, "V0 = Pm(4)")
  expect_true(is.ComplexLazyTensor(LazyTensor(d$a, "i")))
  expect_true(is.ComplexLazyTensor(Pm(d$p)))
  expect_false(is.ComplexLazyTensor(Vi(d$u)))
  out <- capture.output(print(za * Vj(d$b)))
  expect_true(any(grepl("ComplexLazyTensor of complex dimension 2 \\(held as 4 reals", out)))
  expect_true(any(grepl("37 x 4", out)) && any(grepl("53 x 4", out)))
  expect_false(is.ComplexLazyTensor(Re(za)))
  expect_identical(Re(za)$dimres, 2L)
  expect_identical(Im(real2complex(Vi(d$u)))$dimres, 2L)  # a zero part of the full dimension
  expect_identical(Mod(za)$dimres, 2L)
  expect_identical(sqnorm2(za)$dimres, 1L)
  expect_identical(elem(za, 2)$dimres, 1L)
  expect_false(is.ComplexLazyTensor(Arg(za)))
})

test_that("complex parts, modulus, argument, conjugate and exponentials, summed over i and j", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a); zb <- Vj(d$b); vb <- Vj(d$v)
  expect_csum(Re(za) * vb, function(I, J) Re(I$a) * J$v, d, "Re")
  expect_csum(Im(zb) * Vi(d$u), function(I, J) Im(J$b) * I$u, d, "Im")
  expect_csum(Mod(za - zb), function(I, J) Mod(I$a - J$b), d, "Mod")
  expect_csum(abs(za * zb), function(I, J) abs(I$a * J$b), d, "abs")
  expect_csum(Arg(za * zb), function(I, J) Arg(I$a * J$b), d, "Arg")
  expect_csum(Conj(za) * zb, function(I, J) Conj(I$a) * J$b, d, "Conj")
  expect_csum(exp(za - zb), function(I, J) exp(I$a - J$b), d, "exp")
  expect_csum(exp1j(Vi(d$u) * vb), function(I, J) exp(1i * I$u * J$v), d, "exp1j")
  expect_csum(real2complex(Vi(d$u)) * zb, function(I, J) I$u * J$b, d, "real2complex")
  expect_csum(imag2complex(Vi(d$u)) - zb, function(I, J) 1i * I$u - J$b, d, "imag2complex")
  expect_csum(-za + zb, function(I, J) -I$a + J$b, d, "unary minus")
})

test_that("complex arithmetic with complex and real LazyTensors and numbers", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a); zb <- Vj(d$b); ui <- Vi(d$u); vj <- Vj(d$v); zp <- Pm(d$p)
  expect_csum(za + zb, function(I, J) I$a + J$b, d, "c + c")
  expect_csum(za - zb, function(I, J) I$a - J$b, d, "c - c")
  expect_csum(za * zb, function(I, J) I$a * J$b, d, "c * c")
  expect_csum(za / zb, function(I, J) I$a / J$b, d, "c / c")
  expect_csum(za * vj + ui, function(I, J) I$a * J$v + I$u, d, "c * r + r")
  expect_csum(vj / za - ui * zb, function(I, J) J$v / I$a - I$u * J$b, d, "r / c - r * c")
  expect_csum((za - zb) * (2 + 3i), function(I, J) (I$a - J$b) * (2 + 3i), d, "* complex number")
  expect_csum((1 - 2i) / za + zb, function(I, J) (1 - 2i) / I$a + J$b, d, "complex number /")
  expect_csum(2 * za - zb / 4 + 1.5, function(I, J) 2 * I$a - J$b / 4 + 1.5, d, "real numbers")
  expect_csum(za * zp + zb^2, function(I, J) I$a * prow(d$p, N * M) + J$b^2, d,
              "complex parameter, ^2")
  expect_csum(za * Vi(d$s) + zb * Vj(d$w), function(I, J) I$a * I$s[, 1] + J$b * J$w[, 1], d,
              "broadcast of complex dimension 1")
  expect_csum((Vi(d$s) - Vj(d$w)) * d$p, function(I, J) (I$s[, 1] - J$w[, 1]) * prow(d$p, N * M),
              d, "complex vector as a parameter")
  # == and != as R's: both parts equal (real results); the data share some values
  e <- d
  e$b[1:20, ] <- e$a[1:20, ]
  e$b[21, 1] <- Conj(e$a[21, 1])
  ze <- Vj(e$b)
  expect_csum((za == ze) * vj, function(I, J) (I$a == J$b) * J$v, e, "==")
  expect_csum((za != ze) + (za == e$a[3, 1]), function(I, J) (I$a != J$b) + (I$a == e$a[3, 1]) + 0 * J$v,
              e, "!= and == with a complex number")
})

test_that("powers, roots, inverses and squares are the complex ones", {
  local_precision("float64")
  d <- cz_data(4)
  za <- Vi(d$a); zb <- Vj(d$b); vj <- Vj(d$v)
  expect_csum(za^3 - zb^(-2), function(I, J) I$a^3 - J$b^(-2), d, "whole powers")
  expect_csum((za * zb)^0.5, function(I, J) (I$a * J$b)^0.5, d, "^0.5")
  expect_csum((za - zb)^1.7 + za^(-0.3), function(I, J) (I$a - J$b)^1.7 + I$a^(-0.3), d,
              "real powers")
  expect_csum(za^0 + zb^1 + za^(-1), function(I, J) I$a^0 + J$b^1 + I$a^(-1), d, "^0, ^1, ^-1")
  expect_csum(za^vj, function(I, J) I$a^J$v, d, "real LazyTensor exponent")
  expect_csum(za^zb, function(I, J) I$a^J$b, d, "complex exponent")
  expect_csum(za^(0.5 - 1i) + (1 + 1i)^zb, function(I, J) I$a^(0.5 - 1i) + (1 + 1i)^J$b, d,
              "complex number exponent and base")
  expect_csum(2^(za - zb) + Vi(d$u)^(1i * vj), function(I, J) 2^(I$a - J$b) + (I$u + 0i)^(1i * J$v),
              d, "real base, complex exponent")
  expect_csum(sqrt(za * zb), function(I, J) sqrt(I$a * J$b), d, "sqrt")
  expect_csum(rsqrt(za - zb), function(I, J) 1 / sqrt(I$a - J$b), d, "rsqrt")
  expect_csum(inv(za + zb), function(I, J) 1 / (I$a + J$b), d, "inv")
  expect_csum(square(za - zb), function(I, J) (I$a - J$b)^2, d, "square")
})

test_that("logarithms, trigonometric and hyperbolic functions are the complex ones, as R's", {
  local_precision("float64")
  d <- cz_data(5)
  za <- Vi(d$a); zb <- Vj(d$b)
  for (g in c("exp", "log", "log2", "log10", "cos", "sin", "tan", "cosh", "sinh", "tanh",
              "acos", "asin", "atan", "acosh", "asinh", "atanh")) {
    f <- get(g)
    expect_csum(f(za * zb), function(I, J) f(I$a * J$b), d, g)
  }
  expect_csum(log(za - zb, 3), function(I, J) log(I$a - J$b, 3), d, "log base 3")
  expect_csum(round(10 * (za - zb), 1) + round(za * zb), function(I, J) round(10 * (I$a - J$b), 1) + round(I$a * J$b),
              d, "round")
  # the branch cuts of R on the real and imaginary axes, for real or imaginary data
  x <- c(2.5, -2, 0.5, 1.5, -0.4, -3)
  for (g in c("sqrt", "log", "acos", "asin", "atan", "acosh", "asinh", "atanh")) {
    f <- get(g)
    expect_cclose(sum(f(Vi(x, is_complex = TRUE)) * Vj(1), index = "j"),
                  as.matrix(f(complex(real = x, imaginary = 0))), paste(g, "on the real axis"))
    expect_cclose(sum(f(imag2complex(Vi(x))) * Vj(1), index = "j"),
                  as.matrix(f(complex(real = 0, imaginary = x))), paste(g, "on the imaginary axis"))
  }
})

test_that("norms, distances, normalization and the Hermitian scalar product", {
  local_precision("float64")
  d <- cz_data(6)
  za <- Vi(d$a); zb <- Vj(d$b); vj <- Vj(d$v)
  sqn <- function(z) rowSums(Mod(z)^2)
  expect_csum(sqnorm2(za - zb), function(I, J) sqn(I$a - J$b), d, "sqnorm2, real")
  expect_csum(norm2(za * zb), function(I, J) sqrt(sqn(I$a * J$b)), d, "norm2, real")
  expect_csum(lsqdist(za, zb), function(I, J) sqn(I$a - J$b), d, "sqdist")
  expect_csum(lsqdist(za, vj), function(I, J) sqn(I$a - J$v), d, "sqdist complex, real")
  expect_csum(normalize(za - zb), function(I, J) (I$a - J$b) / sqrt(sqn(I$a - J$b)), d,
              "normalize")
  expect_csum(weightedsqnorm(za - zb, 2.5), function(I, J) 2.5 * sqn(I$a - J$b), d,
              "weightedsqnorm, one weight")
  w <- c(0.5, 2)
  expect_csum(weightedsqnorm(za - zb, Pm(w)), function(I, J) rowSums(prow(w, N * M) * Mod(I$a - J$b)^2),
              d, "weightedsqnorm, diagonal")
  S <- matrix(c(2, 0.5, 0.5, 1), 2)                     # symmetric: z^H S z is real
  expect_csum(weightedsqdist(za, zb, Pm(as.vector(S))),
              function(I, J) {
                z <- I$a - J$b
                Re(rowSums(Conj(z) * (z %*% S)))
              }, d, "weightedsqdist, full matrix")
  expect_csum((za | zb), function(I, J) rowSums(Conj(I$a) * J$b), d, "(z | w)")
  expect_csum((za | vj) + (Vi(d$u) | zb), function(I, J) rowSums(Conj(I$a) * J$v + I$u * J$b), d,
              "(z | x) and (x | z)")
  expect_csum((za - zb | za - zb) - sqnorm2(za - zb), function(I, J) 0 * J$b[, 1], d,
              "(z | z) is sqnorm2(z)")
})

test_that("components, tensor and matrix products and sums of complex LazyTensors", {
  local_precision("float64")
  d <- cz_data(7)
  za <- Vi(d$a); zb <- Vj(d$b); vj <- Vj(d$v); si <- Vi(d$s)
  expect_csum(elem(za, 2) * zb, function(I, J) I$a[, 2] * J$b, d, "elem")
  expect_csum(elemT(si, 2, 3) + elem(zb, 1),
              function(I, J) cbind(0, I$s[, 1], 0) + J$b[, 1], d, "elemT")
  expect_csum(extract(concat(za, zb), 2, 2), function(I, J) cbind(I$a[, 2], J$b[, 1]), d,
              "concat, extract")
  expect_csum(extractT(si, 2, 3) * elem(zb, 2), function(I, J) cbind(0, I$s[, 1], 0) * J$b[, 2], d,
              "extractT")
  expect_csum(concat(za, vj), function(I, J) cbind(I$a, J$v), d, "concat complex, real")
  expect_csum(tensorprod(za, zb),
              function(I, J) cbind(I$a[, 1] * J$b[, 1], I$a[, 2] * J$b[, 1], I$a[, 1] * J$b[, 2],
                                   I$a[, 2] * J$b[, 2]), d, "tensorprod")
  A <- matrix(complex(real = c(1, -2, 0.5, 1), imaginary = c(0.3, 1, -1, 0)), 2)
  expect_csum(matvecmult(Pm(as.vector(A)), za - zb), function(I, J) (I$a - J$b) %*% t(A), d,
              "matvecmult")
  expect_csum(vecmatmult(za * vj, Pm(as.vector(A))), function(I, J) (I$a * J$v) %*% A, d,
              "vecmatmult")
  expect_csum(tensorprod(za, Vj(d$v[, 1])), function(I, J) I$a * J$v[, 1], d, "tensorprod complex, real")
  expect_csum(sum(za * zb), function(I, J) rowSums(I$a * J$b), d, "sum without index")
  expect_csum(ifelse(Vi(d$u[, 1]) - vj, za, zb),
              function(I, J) base::ifelse(I$u[, 1] - J$v >= 0, I$a, J$b), d, "ifelse")
})

test_that("complex Gaussian-like kernel and matrix products", {
  local_precision("float64")
  d <- cz_data()
  D <- sqdist(d$x, d$y)                      # the helper's dense distance matrix
  K <- exp1j(-lsqdist(Vi(d$x), Vj(d$y)))
  Kref <- exp(-1i * D)
  expect_cclose(sum(K * Vj(d$w), "j"), Kref %*% d$w, "kernel j")
  expect_cclose(sum(K * Vi(d$s), "i"), t(Kref) %*% d$s, "kernel i")
  W <- cmat(M, 3)
  expect_cclose(K %*% W, Kref %*% W, "K %*% complex W")
  expect_cclose(K %*% d$v, Kref %*% d$v, "K %*% real v")
  Kr <- exp(-lsqdist(Vi(d$x), Vj(d$y)))
  expect_cclose(Kr %*% W, exp(-D) %*% W, "real K %*% complex W")
  G <- exp(-lsqdist(Vi(d$x), Vj(d$y)) + 1i * (Vi(d$u[, 1]) - Vj(d$v[, 1])))
  expect_cclose(sum(G, "j"), rowSums(exp(-D + 1i * outer(d$u[, 1], d$v[, 1], "-"))) |> as.matrix(),
                "exp of complex kernel")
})

test_that("Re, Im, Mod, Arg and Conj of real LazyTensors", {
  local_precision("float64")
  d <- cz_data()
  ui <- Vi(d$u); vj <- Vj(d$v)
  f <- ui - vj
  expect_false(is.ComplexLazyTensor(Re(f)))
  expect_csum(Re(f) + 1i * Im(f) + Mod(f) + 2i * Arg(f) + Conj(f) * 1i,
              function(I, J) {
                z <- I$u - J$v
                Re(z) + 1i * Im(z) + Mod(z) + 2i * Arg(z + 0i) + Conj(z) * 1i
              }, d, "real parts")
})

test_that("complex functions in float32", {
  local_precision("float32")
  d <- cz_data(8)
  d$a <- complex(real = as_f32(Re(d$a)), imaginary = as_f32(Im(d$a))) |> matrix(N, 2)
  d$b <- complex(real = as_f32(Re(d$b)), imaginary = as_f32(Im(d$b))) |> matrix(M, 2)
  za <- Vi(d$a); zb <- Vj(d$b)
  expect_csum(sqrt(za * zb) + log(za - zb) + asin(za) * zb^1.5,
              function(I, J) sqrt(I$a * J$b) + log(I$a - J$b) + asin(I$a) * J$b^1.5, d,
              "float32", tol = 1e-4)
  expect_csum(sqnorm2(za - zb), function(I, J) rowSums(Mod(I$a - J$b)^2), d, "float32 sqnorm2",
              tol = 1e-5)
})

test_that("operations without a complex meaning, and wrong arguments, give errors", {
  local_precision("float64")
  d <- cz_data()
  za <- Vi(d$a); zb <- Vj(d$b); vj <- Vj(d$v)
  hint <- "ComplexLazyTensors.*Re\\(z\\), Im\\(z\\), Mod\\(z\\) or Arg\\(z\\)"
  expect_error(za < zb, hint, class = "rkeops_error_formula")
  expect_error(za >= 1i, hint, class = "rkeops_error_formula")
  expect_error(za %% 2, hint, class = "rkeops_error_formula")
  expect_error(za & zb, hint, class = "rkeops_error_formula")
  expect_error(!za, hint, class = "rkeops_error_formula")
  expect_error(step(za), hint, class = "rkeops_error_formula")
  expect_error(relu(za), hint, class = "rkeops_error_formula")
  expect_error(sign(za), hint, class = "rkeops_error_formula")
  expect_error(floor(za), hint, class = "rkeops_error_formula")
  expect_error(cumsum(za), hint, class = "rkeops_error_formula")
  expect_error(mod(za, 2), hint, class = "rkeops_error_formula")
  expect_error(clamp(za, 0, 1), hint, class = "rkeops_error_formula")
  expect_error(clampint(za, 0, 1), hint, class = "rkeops_error_formula")
  expect_error(atan2(za, vj), hint, class = "rkeops_error_formula")
  expect_error(xlogx(za), hint, class = "rkeops_error_formula")
  expect_error(sinxdivx(za), hint, class = "rkeops_error_formula")
  expect_error(one_hot(elem(za, 1), 3), hint, class = "rkeops_error_formula")
  expect_error(ifelse(za - zb, 1, 2), hint, class = "rkeops_error_formula")
  expect_error(min(za * zb), hint, class = "rkeops_error_formula")
  expect_error(argmax(za * zb), hint, class = "rkeops_error_formula")
  expect_error(min(za * zb, index = "j"), hint, class = "rkeops_error_formula")
  expect_error(argmin(za * zb, index = "j"), hint, class = "rkeops_error_formula")
  expect_error(Kmin(za * zb, 2, index = "j"), hint, class = "rkeops_error_formula")
  expect_error(logsumexp(Vi(d$s) * Vj(d$w), index = "j"), hint, class = "rkeops_error_formula")
  expect_error(grad(Vi(d$s) * Vj(d$w), matrix(1, N, 1), "Sum", 1, "j"), hint, class = "rkeops_error_formula")
  expect_error(solve(Vi(d$s) * Vj(d$w), d$v[, 1]), hint, class = "rkeops_error_formula")
  expect_error(weightedsqnorm(za, Pm(c(1i, 2))), "weights 's' must be real", class = "rkeops_error_input")
  expect_error(log(za, -1), "'base' must be a positive number", class = "rkeops_error_input")
  expect_error(za^Inf, "finite", class = "rkeops_error_input")
  expect_error(sum(za * zb, index = "k"), "index", class = "rkeops_error_input")
  expect_error(exp1j(za), "real LazyTensor", class = "rkeops_error_input")
  expect_error(real2complex(za), "real LazyTensor", class = "rkeops_error_input")
  expect_error(imag2complex(2), "must be a LazyTensor", class = "rkeops_error_input")
  expect_error(exp1j(2), "must be a LazyTensor", class = "rkeops_error_input")
  expect_error(za + Vj(cmat(M, 3)), "do not match", class = "rkeops_error_formula")
  expect_error((za | Vj(cmat(M, 3))), "same dimension", class = "rkeops_error_formula")
  expect_error((za * zb) %*% cmat(M, 1), "dimension 1", class = "rkeops_error_input")
  expect_error((Vi(d$s) * Vj(d$w)) %*% cmat(M + 1, 1), "rows", class = "rkeops_error_input")
  expect_error(Vi(array(1i, c(2, 2, 2, 2))), "matrix or vector", class = "rkeops_error_input")
  expect_error(Vi(array(1i, c(2, 2, 2))), "batches of complex numbers are not supported",
               class = "rkeops_error_input")
})

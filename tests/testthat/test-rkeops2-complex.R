# rkeops 2 compatibility of the LazyTensor constructors, predicates and complex LazyTensors,
# against plain R (complex) arithmetic in float64.
N <- 37; M <- 53

# F(x_i) as an N x d matrix: a sum over j of F / M, with one j-variable of M ones.
values_i <- function(F) sum(F * Vj(rep(1 / M, M)), index = "j")

expect_max_rel <- function(object, expected, info, tol = 1e-10) {
  expect_identical(is.complex(object), is.complex(expected), info = paste(info, ": complex type"))
  expect_identical(dim(object), dim(expected), info = info)
  if (!identical(dim(object), dim(expected))) return(invisible())
  expect_lt(max(Mod(object - expected)) / max(1, max(Mod(expected))), tol,
            label = paste("relative error", info))
}

test_that("is_complex = TRUE makes complex LazyTensors of real data, with zero imaginary parts", {
  local_precision("float64")
  set.seed(11)
  x <- rmat(N, 3); y <- rmat(M, 3); p <- c(0.5, -2, 1.5)
  cases <- list(
    list(z = LazyTensor(x, index = "i", is_complex = TRUE), cat = "Vi", n = N),
    list(z = Vi(x, is_complex = TRUE), cat = "Vi", n = N),
    list(z = LazyTensor(y, index = "j", is_complex = TRUE), cat = "Vj", n = M),
    list(z = Vj(y, is_complex = TRUE), cat = "Vj", n = M),
    list(z = LazyTensor(p, is_complex = TRUE), cat = "Pm", n = NA),
    list(z = Pm(p, is_complex = TRUE), cat = "Pm", n = NA))
  for (k in seq_along(cases)) {
    z <- cases[[k]]$z
    info <- paste("case", k)
    expect_true(is.ComplexLazyTensor(z), info = info)
    expect_identical(z$dimres, 3L, info = info)                       # the complex dimension
    expect_identical(z$args, sprintf("V0 = %s(6)", cases[[k]]$cat), info = info)
    data <- z$vars[[1L]]
    if (cases[[k]]$cat == "Pm") {
      expect_identical(data, as.vector(rbind(p, 0)), info = info)     # interleaved, 0 imaginary
    } else {
      src <- if (cases[[k]]$cat == "Vi") x else y
      expect_identical(data[, c(1, 3, 5)], src, info = info)
      expect_true(all(data[, c(2, 4, 6)] == 0), info = info)
    }
  }
  # the values: x_i * (1 - 2i) * p + sqrt(x_i - y_j), against R on x + 0i
  zi <- Vi(x, is_complex = TRUE); zj <- Vj(y, is_complex = TRUE); zp <- Pm(p, is_complex = TRUE)
  res <- sum(zi * (1 - 2i) * zp + sqrt(zi - zj), index = "j")
  ref <- M * x * (1 - 2i) * matrix(p, N, 3, byrow = TRUE) +
    sapply(1:3, function(k) rowSums(sqrt(outer(x[, k] + 0i, y[, k], "-"))))
  expect_max_rel(res, ref, "is_complex values")
  # complex data is complex whatever is_complex says; logical and integer data are numbers
  zc <- matrix(complex(real = x[, 1], imaginary = x[, 2]), N, 1)
  expect_true(is.ComplexLazyTensor(Vi(zc, is_complex = FALSE)))
  expect_identical(Vi(zc)$args, Vi(zc, is_complex = TRUE)$args)
  expect_identical(Vi(1:3, is_complex = TRUE)$vars[[1L]], cbind(c(1, 2, 3), 0))
  # a real LazyTensor made complex
  zl <- LazyTensor(Vi(x), is_complex = TRUE)
  expect_true(is.ComplexLazyTensor(zl))
  expect_max_rel(values_i(zl * 1i), x * 1i, "LazyTensor(Vi(x), is_complex = TRUE)")
  expect_identical(LazyTensor(zi, is_complex = TRUE), zi)
  # wrong flags
  expect_error(Vi(x, is_complex = NA), "'is_complex' must be TRUE or FALSE", class = "rkeops_error_input")
  expect_error(LazyTensor(x, "i", is_complex = "yes"), "'is_complex' must be TRUE or FALSE",
               class = "rkeops_error_input")
  expect_error(Pm(p, is_complex = c(TRUE, FALSE)), "'is_complex' must be TRUE or FALSE",
               class = "rkeops_error_input")
  expect_error(Vi("a", is_complex = TRUE), "numeric matrix or vector", class = "rkeops_error_input")
})

test_that("the dimension of a ComplexLazyTensor is its complex dimension, as in rkeops 2", {
  local_precision("float64")
  set.seed(12)
  z <- matrix(complex(real = rmat(N, 2), imaginary = rmat(N, 2)), N, 2)
  w <- matrix(complex(real = rmat(M, 2), imaginary = rmat(M, 2)), M, 2)
  zi <- Vi(z); wj <- Vj(w)
  # the rkeops 2 vignette's example: a 2 x 2 complex matrix, 4 real columns
  zz <- matrix(2 + 1i^(-6:-3), nrow = 2, ncol = 2)
  z_i <- LazyTensor(zz, index = "i", is_complex = TRUE)
  expect_identical(z_i$dimres, 2L)
  expect_identical(z_i$vars[[1L]], cbind(Re(zz[, 1]), Im(zz[, 1]), Re(zz[, 2]), Im(zz[, 2])))
  expect_identical(Pm(c(4 + 5i, 2 + 3i))$vars[[1L]], c(4, 5, 2, 3))
  expect_identical(Pm(c(4 + 5i, 2 + 3i))$dimres, 2L)
  dims <- list(zi * wj, zi + 1i, Conj(zi), exp(zi), Re(zi), Mod(zi - wj), sqrt(zi), zi^3,
               concat(zi, wj), tensorprod(zi, wj), elem(zi, 2), sqnorm2(zi), (zi | wj), sum(zi))
  expect_identical(vapply(dims, function(f) f$dimres, 1L),
                   c(2L, 2L, 2L, 2L, 2L, 2L, 2L, 2L, 4L, 4L, 1L, 1L, 1L, 1L))
  expect_identical(dim(zi * wj), c(as.integer(N), as.integer(M), 2L))
  # the dimension checks use it: elemT() needs complex dimension 1, elem() counts complex components
  expect_error(elemT(zi, 1, 3), "dimension 1", class = "rkeops_error_input")
  expect_error(elem(zi, 3), "beyond the dimension", class = "rkeops_error_input")
  expect_max_rel(values_i(elemT(elem(zi, 2), 2, 3)), cbind(0, z[, 2], 0), "elem, elemT")
  # the results keep it: N x d complex matrices
  res <- sum(zi * wj, index = "j")
  expect_identical(dim(res), c(as.integer(N), 2L))
  expect_max_rel(res, z * matrix(colSums(w), N, 2, byrow = TRUE), "sum over j")
})

test_that("LazyTensor() of a matrix needs an index; vectors and numbers are parameters", {
  set.seed(13)
  x <- rmat(N, 3)
  expect_error(LazyTensor(x), "'x' is a matrix, so 'index' must say how it is indexed",
               class = "rkeops_error_input")
  expect_error(LazyTensor(x), "Pm\\(as.vector\\(x\\)\\)", class = "rkeops_error_input")
  expect_error(LazyTensor(x[, 1, drop = FALSE]), "is a matrix", class = "rkeops_error_input")
  expect_error(LazyTensor(matrix(1i, 2, 2)), "is a matrix", class = "rkeops_error_input")
  expect_error(LazyTensor(as.data.frame(x)), "is a matrix", class = "rkeops_error_input")
  expect_error(LazyTensor(x, index = "k"), "'index' must be", class = "rkeops_error_input")
  expect_identical(LazyTensor(x, "i")$args, "V0 = Vi(3)")
  expect_identical(LazyTensor(c(1, 2, 3))$args, "V0 = Pm(3)")
  expect_identical(LazyTensor(3.14)$args, "V0 = Pm(1)")
  expect_identical(LazyTensor(3 + 2i)$args, "V0 = Pm(2)")
  expect_identical(LazyTensor(3 + 2i)$dimres, 1L)
  # parameter values reach the formula: sum_j (x_i . p) = M (x_i . p)
  p <- c(0.3, -1, 2)
  expect_equal(sum((Vi(x) | LazyTensor(p)) + 0 * Vj(rmat(M, 1)), index = "j"),
               M * x %*% p, tolerance = 1e-5)
})

test_that("predicates of rkeops 2: is.ComplexLazyParameter, is.LazyMatrix, is.int, ...", {
  set.seed(14)
  x <- rmat(N, 3)
  scal <- LazyTensor(3.14); cplx <- LazyTensor(2 + 3i); v <- LazyTensor(rep(3, 10))
  vc <- LazyTensor(rep(3 + 7i, 10)); x_i <- LazyTensor(x, "i")
  z_i <- LazyTensor(matrix(2 + 1i^(-6:5), nrow = 4), "i")
  expect_identical(c(is.LazyParameter(scal), is.LazyParameter(cplx), is.LazyParameter(v),
                     is.LazyParameter(x_i)), c(TRUE, FALSE, FALSE, FALSE))
  expect_identical(c(is.ComplexLazyParameter(scal), is.ComplexLazyParameter(cplx),
                     is.ComplexLazyParameter(vc), is.ComplexLazyParameter(z_i)),
                   c(FALSE, TRUE, FALSE, FALSE))
  expect_identical(c(is.LazyVector(scal), is.LazyVector(cplx), is.LazyVector(v),
                     is.LazyVector(x_i), is.LazyVector(x_i * scal)),
                   c(TRUE, TRUE, TRUE, FALSE, FALSE))
  expect_identical(c(is.LazyMatrix(scal), is.LazyMatrix(cplx), is.LazyMatrix(v),
                     is.LazyMatrix(x_i), is.LazyMatrix(z_i), is.LazyMatrix(Vj(1:3) * scal)),
                   c(FALSE, FALSE, FALSE, TRUE, TRUE, TRUE))
  # constants and their combinations
  expect_true(is.LazyParameter(Pm(2) * 3))
  expect_true(is.ComplexLazyParameter(Pm(2) * 1i))
  expect_true(is.LazyParameter(Mod(cplx)))
  expect_true(is.ComplexLazyParameter(sum(vc)))
  # not LazyTensors: FALSE (rkeops 2 stopped)
  for (f in list(is.LazyParameter, is.ComplexLazyParameter, is.LazyVector, is.LazyMatrix)) {
    expect_false(f(x))
    expect_false(f(7))
  }
  expect_identical(vapply(list(3, 3L, 3.4, c(3, 4), "3", NA, NA_real_, Inf, -2, 1e10, TRUE,
                               matrix(3), x_i), is.int, TRUE),
                   c(TRUE, TRUE, FALSE, FALSE, FALSE, FALSE, FALSE, FALSE, TRUE, FALSE, FALSE,
                     TRUE, FALSE))
})

test_that("complex functions that rkeops 2 applied to the parts are the complex ones", {
  local_precision("float64")
  set.seed(15)
  z <- matrix(complex(real = rmat(N, 2), imaginary = rmat(N, 2)), N, 2)
  zi <- Vi(z)
  # rkeops 2 computed sqrt(Re) + i sqrt(Im) and so on: here R's complex functions
  for (g in c("sqrt", "log", "cos", "sin", "acos", "asin", "atan", "square", "inv", "rsqrt")) {
    f <- get(g)
    ref <- switch(g, square = z^2, inv = 1 / z, rsqrt = 1 / sqrt(z), f(z))
    expect_max_rel(values_i(f(zi)), ref, g)
  }
  expect_max_rel(values_i(zi^3 + zi^0.5 + zi^-1.25), z^3 + z^0.5 + z^-1.25, "powers")
  # norms are the complex ones, real; (z | w) is Hermitian, its real part rkeops 2's value
  expect_max_rel(values_i(sqnorm2(zi)), as.matrix(rowSums(Mod(z)^2)), "sqnorm2")
  expect_max_rel(values_i(norm2(zi)), as.matrix(sqrt(rowSums(Mod(z)^2))), "norm2")
  w <- c(1 - 1i, 0.5 + 2i)
  sp <- values_i((zi | Pm(w)))
  expect_max_rel(sp, as.matrix(rowSums(Conj(z) * matrix(w, N, 2, byrow = TRUE))), "(z | w)")
  expect_max_rel(Re(sp), as.matrix(rowSums(Re(z) * matrix(Re(w), N, 2, byrow = TRUE) +
                                          Im(z) * matrix(Im(w), N, 2, byrow = TRUE))),
                 "the real part of (z | w) is the scalar product of the parts")
  expect_max_rel(values_i(sum(zi)), as.matrix(rowSums(z)), "sum without index")
  expect_max_rel(values_i(tensorprod(zi, Pm(w))),
                 cbind(z[, 1] * w[1], z[, 2] * w[1], z[, 1] * w[2], z[, 2] * w[2]), "tensorprod")
  expect_max_rel(values_i(real2complex(Re(zi)) + imag2complex(Im(zi))), z, "real2complex + imag2complex")
  expect_max_rel(values_i(exp1j(Arg(zi)) * Mod(zi)), z, "exp1j(Arg(z)) * Mod(z)")
})

test_that("functions without a complex meaning are errors that name what to write", {
  set.seed(16)
  zi <- Vi(matrix(complex(real = rmat(N, 2), imaginary = rmat(N, 2)), N, 2))
  hint <- "ComplexLazyTensors.*Re\\(z\\), Im\\(z\\), Mod\\(z\\) or Arg\\(z\\)"
  for (f in list(step, relu, sign, floor, min, max, argmin, argmax, xlogx, sinxdivx,
                 function(z) mod(z, 2), function(z) clamp(z, 0, 1), function(z) ifelse(z, 1, 0),
                 function(z) z < 1, function(z) z > 0i, function(z) z %/% 2)) {
    expect_error(f(zi), hint, class = "rkeops_error_formula")
  }
  expect_error(real2complex(zi), "must be a real LazyTensor", class = "rkeops_error_input")
  expect_error(imag2complex(zi), "must be a real LazyTensor", class = "rkeops_error_input")
  expect_error(exp1j(zi), "must be a real LazyTensor", class = "rkeops_error_input")
})

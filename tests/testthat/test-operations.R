# Every operation of the formula language, evaluated as a Sum_Reduction over
# j (axis 0) and over i (axis 1), in float64 (rel. tol 1e-10) and float32
# (rel. tol 1e-5), against plain-R references (helper-reference.R).
#
# In float32 runs the inputs are rounded to float32 beforehand (see prep()),
# so the reference sees exactly the engine's input values.  Piecewise
# operations are run in float32 only on data that stays far from their
# discontinuities (integer-valued data, or constructed offsets).

testthat::local_edition(3)

V3 <- c("x = Vi(3)", "y = Vj(3)")

# ---------------------------------------------------------------------------
# arithmetic, literals, precedence
# ---------------------------------------------------------------------------

test_that("binary operators + - * / on vectors", {
  set.seed(101)
  N <- 37; M <- 29
  x <- rmat(N, 3); y <- rmat(M, 3, 0.5, 1.5)
  i <- list(x = x); j <- list(y = y)
  check_formula("x + y", V3, function(x, y) x + y, i, j)
  check_formula("x - y", V3, function(x, y) x - y, i, j)
  check_formula("x * y", V3, function(x, y) x * y, i, j)
  check_formula("x / y", V3, function(x, y) x / y, i, j)
})

test_that("binary operators at sizes that are not tile multiples", {
  set.seed(102)
  for (sz in list(c(101, 257), c(513, 31), c(7, 1031), c(1, 29), c(37, 1))) {
    N <- sz[1]; M <- sz[2]
    x <- rmat(N, 3); y <- rmat(M, 3, 0.5, 1.5)
    check_formula("x * y + x / y", V3, function(x, y) x * y + x / y,
                  list(x = x), list(y = y))
  }
})

test_that("unary minus", {
  set.seed(103)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  check_formula("-x + y", V3, function(x, y) -x + y, i, j)
  check_formula("-(x - y)", V3, function(x, y) -(x - y), i, j)
  check_formula("-x * y", V3, function(x, y) -x * y, i, j)
  check_formula("Exp(-SqNorm2(x - y))", V3,
                function(x, y) exp(-rowSums((x - y)^2)), i, j)
  check_formula("y * (-x)", V3, function(x, y) -x * y, i, j)
})

test_that("operator precedence and associativity", {
  set.seed(104)
  x <- rmat(37, 3); y <- rmat(29, 3, 0.5, 1.5)
  i <- list(x = x); j <- list(y = y)
  check_formula("x - y * 2", V3, function(x, y) x - 2 * y, i, j)
  check_formula("x + y / 4", V3, function(x, y) x + y / 4, i, j)
  check_formula("2 * x - 3 * y", V3, function(x, y) 2 * x - 3 * y, i, j)
  check_formula("x * y + y / 2", V3, function(x, y) x * y + y / 2, i, j)
  check_formula("x - y - x", V3, function(x, y) -y, i, j)        # left assoc.
  check_formula("x - y + x", V3, function(x, y) 2 * x - y, i, j) # not x - (y + x)
  check_formula("x / y / 2", V3, function(x, y) x / y / 2, i, j) # (x/y)/2
  check_formula("x / y * 2", V3, function(x, y) 2 * x / y, i, j) # (x/y)*2
  check_formula("x - (y - x)", V3, function(x, y) 2 * x - y, i, j)
  check_formula("(x + y) * (x - y)", V3, function(x, y) (x + y) * (x - y), i, j)
})

test_that("integer and decimal literals, IntCst", {
  set.seed(105)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  check_formula("3 * x + y", V3, function(x, y) 3 * x + y, i, j)
  check_formula("x + 10 * y", V3, function(x, y) x + 10 * y, i, j)
  check_formula("0.5 * x + y", V3, function(x, y) 0.5 * x + y, i, j)
  check_formula("x * 1.25 - y * 0.75", V3, function(x, y) 1.25 * x - 0.75 * y, i, j)
  check_formula("x + 2.5 + y", V3, function(x, y) x + 2.5 + y, i, j)
  check_formula("IntCst(3) * x + y", V3, function(x, y) 3 * x + y, i, j)
  check_formula("x * y - IntCst(2)", V3, function(x, y) x * y - 2, i, j)
})

test_that("scalar product (a|b)", {
  set.seed(106)
  x <- rmat(37, 3); y <- rmat(29, 3); b <- rmat(29, 2)
  args <- c(V3, "b = Vj(2)")
  check_formula("(x|y)", V3, function(x, y) rdot(x, y), list(x = x), list(y = y))
  check_formula("(x|y) * b", args, function(x, y, b) rdot(x, y)[, 1] * b,
                list(x = x), list(y = y, b = b))
  check_formula("(x * 2|y + x)", V3, function(x, y) rdot(2 * x, y + x),
                list(x = x), list(y = y))
})

# ---------------------------------------------------------------------------
# element-wise mathematical functions (smooth; safe in float32)
# ---------------------------------------------------------------------------

test_that("Exp, Log, Sqrt, Rsqrt, Inv, Square, Abs", {
  set.seed(107)
  x <- rmat(37, 3, 0.5, 2); y <- rmat(29, 3, 0.5, 2)
  i <- list(x = x); j <- list(y = y)
  check_formula("Exp(x - y)", V3, function(x, y) exp(x - y), i, j)
  check_formula("Log(x + y)", V3, function(x, y) log(x + y), i, j)
  check_formula("Sqrt(x + y)", V3, function(x, y) sqrt(x + y), i, j)
  check_formula("Rsqrt(x + y)", V3, function(x, y) 1 / sqrt(x + y), i, j)
  check_formula("Inv(x + y)", V3, function(x, y) 1 / (x + y), i, j)
  check_formula("Square(x - y)", V3, function(x, y) (x - y)^2, i, j)
  check_formula("Abs(x - y)", V3, function(x, y) abs(x - y), i, j)
})

test_that("trigonometric functions: Cos, Sin, Acos, Asin, Atan, Atan2", {
  set.seed(108)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  check_formula("Cos(x - y)", V3, function(x, y) cos(x - y), i, j)
  check_formula("Sin(x * y + 1)", V3, function(x, y) sin(x * y + 1), i, j)
  check_formula("Atan(3 * (x - y))", V3, function(x, y) atan(3 * (x - y)), i, j)
  # all four quadrants; arguments are the raw (sign-exact) inputs
  check_formula("Atan2(x, y)", V3, function(x, y) atan2(x, y), i, j)
  xs <- rmat(37, 3, -0.45, 0.45); ys <- rmat(29, 3, -0.45, 0.45)
  check_formula("Acos(x - y)", V3, function(x, y) acos(x - y), list(x = xs), list(y = ys))
  check_formula("Asin(x + y)", V3, function(x, y) asin(x + y), list(x = xs), list(y = ys))
})

test_that("Pow (integer exponent) and Powf", {
  set.seed(109)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  check_formula("Pow(x - y, 2)", V3, function(x, y) (x - y)^2, i, j)
  check_formula("Pow(x - y, 3)", V3, function(x, y) (x - y)^3, i, j)
  check_formula("Pow(x + y, 1)", V3, function(x, y) x + y, i, j)
  xp <- rmat(37, 3, 0.5, 2); yp <- rmat(29, 3, 0.5, 2)
  check_formula("Powf(x, y)", V3, function(x, y) x^y, list(x = xp), list(y = yp))
  check_formula("Powf(x + y, 0.5)", V3, function(x, y) sqrt(x + y), list(x = xp), list(y = yp))
})

test_that("ReLU, SinXDivX, XLogX (including their values at 0)", {
  set.seed(110)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  check_formula("ReLU(x - y)", V3, function(x, y) pmax(x - y, 0), i, j)
  check_formula("SinXDivX(3 * (x - y))", V3,
                function(x, y) sin(3 * (x - y)) / (3 * (x - y)), i, j)
  xp <- rmat(37, 3, 0.1, 2); yp <- rmat(29, 3, 0.1, 2)
  check_formula("XLogX(x * y)", V3, function(x, y) x * y * log(x * y),
                list(x = xp), list(y = yp))
  # exact zeros: SinXDivX(0) = 1, XLogX(0) = 0
  check_formula("SinXDivX(x - x) * y", V3, function(x, y) y, i, j)
  check_formula("XLogX(x - x) + y", V3, function(x, y) y, i, j)
  check_formula("ReLU(x - x) + y", V3, function(x, y) y, i, j)
})

test_that("Clamp and ClampInt (continuous, safe in both precisions)", {
  set.seed(111)
  x <- rmat(37, 3, -2, 2); y <- rmat(29, 3, -2, 2)
  args <- c(V3, "lo = Pm(1)", "hi = Pm(1)")
  check_formula("Clamp(x - y, lo, hi)", args,
                function(x, y, lo, hi) pmin(pmax(x - y, lo[, 1]), hi[, 1]),
                list(x = x), list(y = y), list(lo = -0.3, hi = 0.4))
  check_formula("Clamp(x * y, -0.5, 0.5)", V3,
                function(x, y) pmin(pmax(x * y, -0.5), 0.5), list(x = x), list(y = y))
  check_formula("ClampInt(x - y, -1, 2)", V3,
                function(x, y) pmin(pmax(x - y, -1), 2), list(x = x), list(y = y))
})

# ---------------------------------------------------------------------------
# piecewise functions
# ---------------------------------------------------------------------------

test_that("piecewise functions on random data (float64)", {
  set.seed(112)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  f64 <- function(body, fun) check_formula(body, V3, fun, i, j, precision = "float64")
  f64("Floor(x * 3 - y)", function(x, y) floor(3 * x - y))
  f64("Round(x * y, 2)", function(x, y) round(x * y, 2))
  f64("Round(5 * (x - y), 0)", function(x, y) round(5 * (x - y)))
  f64("Sign(x - y)", function(x, y) sign(x - y))
  f64("Step(x - y)", function(x, y) (x - y >= 0) * 1)
  f64("LessThan(x, y)", function(x, y) (x < y) * 1)
  f64("LessOrEqual(y, x)", function(x, y) (y <= x) * 1)
  f64("NotEqual(x, y)", function(x, y) (x != y) * 1)
  f64("IfElse(x - y, x, y * 2)", function(x, y) ifelse(x - y >= 0, x, 2 * y))
  f64("Mod(x * 3 - y, 1.5, -0.25)", function(x, y) {
    v <- 3 * x - y
    v - 1.5 * floor((v + 0.25) / 1.5)
  })
  f64("ClampInt(x * 3 + y, -1, 2)", function(x, y) pmin(pmax(3 * x + y, -1), 2))
})

test_that("piecewise functions on integer-valued data (exact in both precisions)", {
  set.seed(113)
  x <- imat(37, 3); y <- imat(29, 3)
  stopifnot(any(outer(x[, 1], y[, 1], "==")))       # ties x == y do occur
  i <- list(x = x); j <- list(y = y)
  check_formula("Sign(x - y)", V3, function(x, y) sign(x - y), i, j)
  check_formula("Step(x - y)", V3, function(x, y) (x >= y) * 1, i, j)
  check_formula("Equal(x, y)", V3, function(x, y) (x == y) * 1, i, j)
  check_formula("NotEqual(x, y)", V3, function(x, y) (x != y) * 1, i, j)
  check_formula("LessThan(x, y)", V3, function(x, y) (x < y) * 1, i, j)
  check_formula("LessOrEqual(x, y)", V3, function(x, y) (x <= y) * 1, i, j)
  check_formula("IfElse(x - y, x, y * 2)", V3,
                function(x, y) ifelse(x - y >= 0, x, 2 * y), i, j)
  check_formula("Abs(x - y)", V3, function(x, y) abs(x - y), i, j)
  check_formula("ClampInt(x - y, -1, 1)", V3, function(x, y) pmin(pmax(x - y, -1), 1), i, j)
  # arguments at distance >= 0.25 from the discontinuities
  check_formula("Floor((x - y) * 0.5 + 0.25)", V3,
                function(x, y) floor((x - y) * 0.5 + 0.25), i, j)
  check_formula("Round((x - y) * 0.3 + 0.01, 1)", V3,
                function(x, y) round((x - y) * 0.3 + 0.01, 1), i, j)
  check_formula("Mod(x - y + 0.5, 3, 1)", V3, function(x, y) {
    v <- x - y + 0.5
    v - 3 * floor((v - 1) / 3)
  }, i, j)
})

test_that("IfElse with a scalar condition broadcasts over vector branches", {
  set.seed(114)
  x <- imat(37, 3); y <- imat(29, 3)
  check_formula("IfElse(Elem(x, 0) - Elem(y, 0), x, y)", V3,
                function(x, y) ifelse(matrix(x[, 1] - y[, 1], nrow(x), 3) >= 0, x, y),
                list(x = x), list(y = y))
})

test_that("OneHot", {
  set.seed(115)
  N <- 37; M <- 29
  onehot <- function(v, dim) {
    k <- round(v)
    out <- matrix(0, length(v), dim)
    out[cbind(seq_along(v), k + 1)] <- 1
    out
  }
  # integer-valued argument 0..4
  x <- imat(N, 1, 0:2); y <- imat(M, 1, 0:2)
  args <- c("x = Vi(1)", "y = Vj(1)")
  check_formula("OneHot(x - y + 2, 5)", args, function(x, y) onehot(x - y + 2, 5),
                list(x = x), list(y = y))
  # non-integer argument, rounded; at distance >= 0.1 from half-integers
  xr <- x + stats::runif(N, -0.3, 0.3); yr <- y + stats::runif(M, -0.1, 0.1)
  check_formula("OneHot(x + y, 5)", args, function(x, y) onehot(x + y, 5),
                list(x = xr), list(y = yr))
})

# ---------------------------------------------------------------------------
# vector functions
# ---------------------------------------------------------------------------

test_that("SqDist, SqNorm2, Norm2, Normalize, Sum, SumT", {
  set.seed(116)
  x <- rmat(37, 3); y <- rmat(29, 3)
  i <- list(x = x); j <- list(y = y)
  check_formula("SqDist(x, y)", V3, function(x, y) rsum((x - y)^2), i, j)
  check_formula("SqNorm2(x + y)", V3, function(x, y) rsum((x + y)^2), i, j)
  check_formula("Norm2(x - y)", V3, function(x, y) sqrt(rsum((x - y)^2)), i, j)
  check_formula("Normalize(x - y)", V3, function(x, y) (x - y) / sqrt(rowSums((x - y)^2)), i, j)
  check_formula("Sum(x * y)", V3, function(x, y) rsum(x * y), i, j)
  check_formula("SumT(Sum(x * y), 4)", V3,
                function(x, y) matrix(rowSums(x * y), nrow(x), 4), i, j)
})

test_that("Max, Min, ArgMax, ArgMin over the components (0-based positions)", {
  set.seed(117)
  N <- 37; M <- 29
  # each row of x is a permutation of (0, 1, 2) plus small noise and y is
  # small, so the components of x - y are at least 0.6 apart (no near-ties)
  x <- t(replicate(N, sample(0:2))) + rmat(N, 3, -0.1, 0.1)
  y <- rmat(M, 3, -0.1, 0.1)
  i <- list(x = x); j <- list(y = y)
  check_formula("Max(x - y)", V3, function(x, y) apply(x - y, 1, max), i, j)
  check_formula("Min(x - y)", V3, function(x, y) apply(x - y, 1, min), i, j)
  check_formula("ArgMax(x - y)", V3, function(x, y) apply(x - y, 1, which.max) - 1, i, j)
  check_formula("ArgMin(x - y)", V3, function(x, y) apply(x - y, 1, which.min) - 1, i, j)
  # random data, float64
  xr <- rmat(N, 4); yr <- rmat(M, 4)
  args4 <- c("x = Vi(4)", "y = Vj(4)")
  check_formula("ArgMin(x * y)", args4, function(x, y) apply(x * y, 1, which.min) - 1,
                list(x = xr), list(y = yr), precision = "float64")
  check_formula("Max(x * y) + ArgMax(x * y)", args4,
                function(x, y) apply(x * y, 1, max) + apply(x * y, 1, which.max) - 1,
                list(x = xr), list(y = yr), precision = "float64")
})

test_that("Elem, ElemT, Extract, ExtractT, Concat (0-based positions)", {
  set.seed(118)
  x <- rmat(37, 3); y <- rmat(29, 3); z <- rmat(37, 4); b <- rmat(29, 2)
  args <- c("x = Vi(3)", "z = Vi(4)", "y = Vj(3)", "b = Vj(2)")
  i <- list(x = x, z = z); j <- list(y = y, b = b)
  check_formula("Elem(x, 0) * Elem(y, 2)", args,
                function(x, z, y, b) x[, 1] * y[, 3], i, j)
  check_formula("Elem(z, 3) + Elem(b, 1)", args,
                function(x, z, y, b) z[, 4] + b[, 2], i, j)
  check_formula("ElemT(Elem(x, 0) * Elem(y, 1), 4, 1)", args, function(x, z, y, b) {
    out <- matrix(0, nrow(x), 4); out[, 2] <- x[, 1] * y[, 2]; out
  }, i, j)
  check_formula("Extract(z, 1, 2) * b", args, function(x, z, y, b) z[, 2:3] * b, i, j)
  check_formula("Extract(z, 0, 4) - Extract(z, 3, 1) * Elem(b, 0)", args,
                function(x, z, y, b) z - z[, 4] * b[, 1], i, j)
  check_formula("ExtractT(b, 1, 4) + z", args, function(x, z, y, b) {
    out <- matrix(0, nrow(b), 4); out[, 2:3] <- b; out + z
  }, i, j)
  check_formula("Concat(x, b)", args, function(x, z, y, b) cbind(x, b), i, j)
  check_formula("Concat(Elem(y, 2), z)", args, function(x, z, y, b) cbind(y[, 3], z), i, j)
})

test_that("TensorProd is as.vector(outer(a, b)) (column-major)", {
  set.seed(119)
  a <- rmat(37, 2); b <- rmat(29, 3)
  args <- c("a = Vi(2)", "b = Vj(3)")
  tp <- function(a, b) {
    # row r: as.vector(outer(a[r, ], b[r, ])) -> a1b1, a2b1, a1b2, a2b2, a1b3, a2b3
    do.call(cbind, lapply(seq_len(ncol(b)), function(l) a * b[, l]))
  }
  # sanity of the reference itself
  stopifnot(isTRUE(all.equal(tp(a[1, , drop = FALSE], b[1, , drop = FALSE])[1, ],
                             as.vector(outer(a[1, ], b[1, ])))))
  check_formula("TensorProd(a, b)", args, tp, list(a = a), list(b = b))
})

test_that("MatVecMult and VecMatMult use column-major matrices (A %*% x, x %*% A)", {
  set.seed(120)
  N <- 37; M <- 29
  x <- rmat(N, 3); y <- rmat(M, 3)
  A23 <- matrix(stats::runif(6, -1, 1), 2, 3)   # 2 x 3
  A32 <- matrix(stats::runif(6, -1, 1), 3, 2)   # 3 x 2
  args <- c(V3, "A = Pm(6)")
  # MatVecMult(A, v) = A %*% v : (2x3) %*% 3 -> 2
  check_formula("MatVecMult(A, x - y)", args,
                function(x, y, A) (x - y) %*% t(A23),
                list(x = x), list(y = y), list(A = as.vector(A23)))
  # VecMatMult(v, A) = v %*% A : 3 %*% (3x2) -> 2
  check_formula("VecMatMult(x - y, A)", args,
                function(x, y, A) (x - y) %*% A32,
                list(x = x), list(y = y), list(A = as.vector(A32)))
  # a matrix that varies with j (Vj(6)), each row a column-major 2 x 3 matrix
  Aj <- rmat(M, 6)
  argsj <- c("x = Vi(3)", "A = Vj(6)")
  check_formula("MatVecMult(A, x)", argsj, function(x, A) {
    sapply(1:2, function(k) rowSums(A[, k + 2 * (0:2), drop = FALSE] * x))
  }, list(x = x), list(A = Aj))
  Ajt <- rmat(M, 6)
  check_formula("VecMatMult(x, A)", argsj, function(x, A) {
    sapply(1:2, function(l) rowSums(A[, (l - 1) * 3 + 1:3, drop = FALSE] * x))
  }, list(x = x), list(A = Ajt))
})

test_that("SqNormDiag, SqNormIso, SymSqNorm, WeightedSqNorm, WeightedSqDist", {
  set.seed(121)
  N <- 37; M <- 29
  x <- rmat(N, 3); y <- rmat(M, 3)
  s1 <- 0.7
  s3 <- stats::runif(3, 0.5, 2)
  B <- matrix(stats::runif(9, -1, 1), 3, 3)
  S9 <- crossprod(B) + diag(3)          # positive definite, not diagonal
  i <- list(x = x); j <- list(y = y)
  q <- function(v, A) rowSums((v %*% t(A)) * v) # row-wise v' A v
  check_formula("SqNormIso(s, x - y)", c(V3, "s = Pm(1)"),
                function(x, y, s) s * rsum((x - y)^2), i, j, list(s = s1))
  check_formula("SqNormDiag(s, x - y)", c(V3, "s = Pm(3)"),
                function(x, y, s) rsum(s * (x - y)^2), i, j, list(s = s3))
  check_formula("SymSqNorm(A, x - y)", c(V3, "A = Pm(9)"),
                function(x, y, A) q(x - y, S9), i, j, list(A = as.vector(S9)))
  # WeightedSqNorm: Iso / Diag / Sym depending on the dimension of s
  check_formula("WeightedSqNorm(s, x + y)", c(V3, "s = Pm(1)"),
                function(x, y, s) s * rsum((x + y)^2), i, j, list(s = s1))
  check_formula("WeightedSqNorm(s, x + y)", c(V3, "s = Pm(3)"),
                function(x, y, s) rsum(s * (x + y)^2), i, j, list(s = s3))
  check_formula("WeightedSqNorm(s, x + y)", c(V3, "s = Pm(9)"),
                function(x, y, s) q(x + y, S9), i, j, list(s = as.vector(S9)))
  # WeightedSqDist(s, x, y) = WeightedSqNorm(s, x - y)
  check_formula("WeightedSqDist(s, x, y)", c(V3, "s = Pm(1)"),
                function(x, y, s) s * rsum((x - y)^2), i, j, list(s = s1))
  check_formula("WeightedSqDist(s, x, y)", c(V3, "s = Pm(3)"),
                function(x, y, s) rsum(s * (x - y)^2), i, j, list(s = s3))
  check_formula("WeightedSqDist(s, x, y)", c(V3, "s = Pm(9)"),
                function(x, y, s) q(x - y, S9), i, j, list(s = as.vector(S9)))
  # a non-symmetric matrix gives the same quadratic form as its symmetric part
  Ans <- matrix(stats::runif(9, -1, 1), 3, 3)
  check_formula("SymSqNorm(A, x - y)", c(V3, "A = Pm(9)"),
                function(x, y, A) q(x - y, Ans), i, j, list(A = as.vector(Ans)),
                precision = "float64")
})

# ---------------------------------------------------------------------------
# broadcasting, variables, composite formulas
# ---------------------------------------------------------------------------

test_that("element-wise operations broadcast a dimension-1 operand", {
  set.seed(122)
  x <- rmat(37, 3); y <- rmat(29, 3, 0.5, 1.5); b <- rmat(29, 2)
  i <- list(x = x); j <- list(y = y)
  check_formula("Elem(x, 0) * y", V3, function(x, y) x[, 1] * y, i, j)
  check_formula("y * Elem(x, 0)", V3, function(x, y) x[, 1] * y, i, j)
  check_formula("Elem(x, 1) + y", V3, function(x, y) x[, 2] + y, i, j)
  check_formula("y - Elem(x, 2)", V3, function(x, y) y - x[, 3], i, j)
  check_formula("x / Sum(y)", V3, function(x, y) x / rowSums(y), i, j)
  check_formula("Sum(y) / x", V3, function(x, y) rowSums(y) / x,
                list(x = rmat(37, 3, 0.5, 1.5)), j)
  check_formula("x - 1 + y", V3, function(x, y) x - 1 + y, i, j)
  check_formula("s * x + y", c(V3, "s = Pm(1)"), function(x, y, s) s[, 1] * x + y,
                i, j, list(s = 1.5))
  check_formula("Exp(-s * SqDist(x, y)) * b", c(V3, "b = Vj(2)", "s = Pm(1)"),
                function(x, y, b, s) exp(-s[, 1] * rowSums((x - y)^2)) * b,
                i, list(y = y, b = b), list(s = 0.5))
})

test_that("positional argument declarations Vi(pos, dim) and Var(pos, dim, cat)", {
  set.seed(123)
  x <- rmat(37, 3); y <- rmat(29, 3); b <- rmat(29, 2)
  i <- list(x = x); j <- list(y = y, b = b)
  ref <- function(x, y, b) exp(-rowSums((x - y)^2)) * b
  check_formula("Exp(-SqDist(x, y)) * b",
                c("x = Vi(0, 3)", "y = Vj(1, 3)", "b = Vj(2, 2)"), ref, i, j)
  check_formula("Exp(-SqDist(Var(0, 3, 0), Var(1, 3, 1))) * Var(2, 2, 1)",
                c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)"), ref, i, j)
  # names and Var() mixed in one formula
  check_formula("Exp(-SqDist(x, Var(1, 3, 1))) * b",
                c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)"), ref, i, j)
  # a parameter through Var(., ., 2)
  check_formula("Var(2, 1, 2) * (x|y)",
                c("x = Vi(3)", "y = Vj(3)", "s = Pm(1)"),
                function(x, y, s) s * rdot(x, y), list(x = x), list(y = y), list(s = 0.25))
})

test_that("a deep composite formula", {
  set.seed(124)
  N <- 101; M <- 257
  x <- rmat(N, 3); y <- rmat(M, 3); b <- rmat(M, 2, 0, 1)
  args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)")
  check_formula(
    "Exp(-s * SqDist(x, y)) * (Cos(x - y)|Sin(y) + 2) * b + Log(1 + Square(Sum(x * y))) * Elem(b, 0)",
    args,
    function(x, y, b, s) {
      exp(-s[, 1] * rowSums((x - y)^2)) * rowSums(cos(x - y) * (sin(y) + 2)) * b +
        log(1 + rowSums(x * y)^2) * b[, 1]
    },
    list(x = x), list(y = y, b = b), list(s = 0.8))
})

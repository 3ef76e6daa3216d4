# rkeops 2 compatibility of the LazyTensor operations and reductions, against dense float64 R.
# The helper's sqdist() (a dense distance matrix) masks rkeops::sqdist() here.
lsqdist <- rkeops::sqdist

N2 <- 37; M2 <- 53

r2_data <- function(seed = 7) {
  set.seed(seed)
  x <- rmat(N2, 3); y <- rmat(M2, 3)
  Z <- array(NA_real_, c(N2, M2, 3))                  # Z[i, j, ] = x_i - y_j
  for (k in 1:3) Z[, , k] <- outer(x[, k], y[, k], "-")
  D2 <- rowSums(Z^2, dims = 2L)                      # |x_i - y_j|^2, N x M
  list(x = x, y = y, u = rmat(N2, 1), b = rmat(M2, 2), w = runif(M2), Z = Z, D2 = D2)
}

test_that("the *_reduction() functions are the reductions, over both indices", {
  local_precision("float64")
  d <- r2_data()
  Z <- Vi(d$x) - Vj(d$y)
  D <- lsqdist(Vi(d$x), Vj(d$y))
  Y <- array(rep(d$y, each = N2), c(N2, M2, 3))      # the weight y_j at every (i, j)
  for (index in c("j", "i")) {
    ax <- if (index == "j") 0 else 1
    info <- paste("index", index)
    expect_close(sum_reduction(Z, index), ref_reduce(d$Z, ax, "sum"), 1e-10, info)
    expect_close(min_reduction(Z, index), ref_reduce(d$Z, ax, "min"), 1e-10, info)
    expect_close(max_reduction(Z, index), ref_reduce(d$Z, ax, "max"), 1e-10, info)
    expect_identical(argmin_reduction(Z, index), ref_reduce(d$Z, ax, "argmin"), info = info)
    expect_identical(argmax_reduction(Z, index), ref_reduce(d$Z, ax, "argmax"), info = info)
    ma <- min_argmin_reduction(Z, index)
    ref <- ref_reduce(d$Z, ax, "min_argmin")
    expect_close(ma[[1]], ref$values, 1e-10, info)         # positions as in rkeops 2, names as ours
    expect_identical(ma$indices, ref$indices, info = info)
    mx <- max_argmax_reduction(D, index)
    ref <- ref_reduce(d$D2, ax, "max_argmax")
    expect_close(mx$values, ref$values, 1e-10, info)
    expect_identical(mx[[2]], ref$indices, info = info)
    expect_close(Kmin_reduction(D, 4, index), ref_reduce(d$D2, ax, "kmin", K = 4), 1e-10, info)
    expect_identical(argKmin_reduction(D, 4, index), ref_reduce(d$D2, ax, "argkmin", K = 4), info = info)
    ka <- Kmin_argKmin_reduction(Z, 3, index)
    expect_close(ka$values, ref_reduce(d$Z, ax, "kmin", K = 3), 1e-10, info)
    expect_identical(ka$indices, ref_reduce(d$Z, ax, "argkmin", K = 3), info = info)
    expect_close(logsumexp_reduction(-D, index), ref_reduce(-d$D2, ax, "logsumexp"), 1e-10, info)
    W <- if (index == "j") Vj(d$w) else Vi(d$u^2)
    Wd <- if (index == "j") matrix(d$w, N2, M2, byrow = TRUE) else matrix(d$u^2, N2, M2)
    expect_close(logsumexp_reduction(-D, index, W), ref_reduce(-d$D2, ax, "lse_weight", G = Wd),
                 1e-10, info)
    expect_close(sumsoftmaxweight_reduction(-D, index, Vj(d$y)),
                 ref_reduce(-d$D2, ax, "softmax_weight", G = Y), 1e-10, info)
  }
})

test_that("reduction.LazyTensor() runs the reduction named by opstr, with opt_arg", {
  local_precision("float64")
  d <- r2_data(8)
  Z <- Vi(d$x) - Vj(d$y)
  D <- lsqdist(Vi(d$x), Vj(d$y))
  expect_close(reduction.LazyTensor(Z, "Sum", "i"), ref_reduce(d$Z, 1, "sum"), 1e-10)
  expect_close(reduction.LazyTensor(Z, "Max", "j"), ref_reduce(d$Z, 0, "max"), 1e-10)
  expect_identical(reduction.LazyTensor(D, "ArgMin", "i"), ref_reduce(d$D2, 1, "argmin"))
  expect_identical(reduction.LazyTensor(D, "Max_ArgMax", "j")$indices, ref_reduce(d$D2, 0, "argmax"))
  expect_close(reduction.LazyTensor(Z, "KMin", "j", opt_arg = 2), ref_reduce(d$Z, 0, "kmin", K = 2), 1e-10)
  expect_identical(reduction.LazyTensor(D, "ArgKMin", "i", 5), ref_reduce(d$D2, 1, "argkmin", K = 5))
  expect_close(reduction.LazyTensor(-D, "LogSumExp", "j"), ref_reduce(-d$D2, 0, "logsumexp"), 1e-10)
  Wd <- matrix(d$w, N2, M2, byrow = TRUE)
  expect_close(reduction.LazyTensor(-D, "LogSumExpWeight", "j", Vj(d$w)),
               ref_reduce(-d$D2, 0, "lse_weight", G = Wd), 1e-10)
  expect_close(reduction.LazyTensor(-D, "SumSoftMaxWeight", "j", Vj(d$w)),
               ref_reduce(-d$D2, 0, "softmax_weight", G = Wd), 1e-10)
  expect_keops_error(reduction.LazyTensor(D, "Mean", "j"), "unknown reduction", "Mean")
  expect_keops_error(reduction.LazyTensor(D, 2, "j"), "'opstr'")
  expect_keops_error(reduction.LazyTensor(D, "Sum", "j", 3), "no 'opt_arg'")
  expect_keops_error(reduction.LazyTensor(D, "SumSoftMaxWeight", "j"), "weight", "opt_arg")
  expect_keops_error(reduction.LazyTensor(d$x, "Sum", "j"), "'x'", "LazyTensor")
})

test_that("the *_reduction() functions need an index: NA or a missing one is an error", {
  d <- r2_data()
  Z <- Vi(d$x) - Vj(d$y)
  for (f in list(sum_reduction, min_reduction, max_reduction, argmin_reduction, argmax_reduction,
                 min_argmin_reduction, max_argmax_reduction, logsumexp_reduction)) {
    expect_keops_error(f(Z, NA), "'index'", "cannot be NA")
    expect_keops_error(f(Z, "k"), "'index'", "\"i\"")
  }
  for (f in list(Kmin_reduction, argKmin_reduction, Kmin_argKmin_reduction)) {
    expect_keops_error(f(Z, 2, NA), "'index'", "cannot be NA")
  }
  expect_keops_error(sumsoftmaxweight_reduction(lsqdist(Vi(d$x), Vj(d$y)), NA, Vj(d$w)), "'index'")
  expect_keops_error(sum_reduction(Z), "index")
  expect_keops_error(sum_reduction(d$x, "i"), "'x'", "LazyTensor")
  expect_keops_error(argmin_reduction(3, "i"), "'x'", "LazyTensor")
  expect_keops_error(Kmin_reduction(Z, 2.5, "i"), "'K'", "whole number")
  # without index, sum() is still KeOps' sum of the components (a LazyTensor)
  expect_true(is.LazyTensor(sum(Z)))
})

test_that("sumsoftmaxweight() takes (x, index, weight); the former order warns once and works", {
  local_precision("float64")
  d <- r2_data(9)
  D <- lsqdist(Vi(d$x), Vj(d$y))
  Y <- array(rep(d$y, each = N2), c(N2, M2, 3))
  want_j <- ref_reduce(-d$D2, 0, "softmax_weight", G = Y)
  expect_close(sumsoftmaxweight(-D, "j", Vj(d$y)), want_j, 1e-10)
  expect_close(sumsoftmaxweight(-D, weight = Vj(d$y), index = "j"), want_j, 1e-10)
  expect_close(sumsoftmaxweight(weight = Vj(d$y), x = -D, "j"), want_j, 1e-10)
  # over i the weights x_i are averaged for each j
  X <- array(NA_real_, c(N2, M2, 3))                  # the weight x_i at every (i, j)
  for (k in 1:3) X[, , k] <- d$x[, k]
  expect_close(sumsoftmaxweight(-D, "i", Vi(d$x)), ref_reduce(-d$D2, 1, "softmax_weight", G = X), 1e-10)
  # a constant weight is its own softmax mean
  expect_close(sumsoftmaxweight(-D, "j", 2.5), matrix(2.5, N2, 1), 1e-12)
  forget_notices()
  expect_warning(old <- sumsoftmaxweight(-D, Vj(d$y), "j"), "former order")
  expect_close(old, want_j, 1e-10)
  expect_no_warning(old2 <- sumsoftmaxweight(-D, Vj(d$y), "j"))   # once per session
  expect_close(old2, want_j, 1e-10)
  expect_keops_error(sumsoftmaxweight(-D, "j"), "'weight'")
  expect_keops_error(sumsoftmaxweight(-D, "j", d$b), "'weight'")
  expect_keops_error(sumsoftmaxweight(Vi(d$x) - Vj(d$y), "j", Vj(d$w)), "dimension 1")
})

test_that("x %*% y for two LazyTensors is sum(x * y, index = \"j\")", {
  local_precision("float64")
  d <- r2_data(10)
  xi <- Vi(d$x); yj <- Vj(d$y)
  # x_i * sum_j y_j, elementwise
  expect_close(xi %*% yj, d$x * matrix(colSums(d$y), N2, 3, byrow = TRUE), 1e-10)
  K <- exp(-lsqdist(xi, yj))
  expect_close(K %*% Vj(d$b), exp(-d$D2) %*% d$b, 1e-10)
  expect_close(K %*% Vj(d$b), K %*% d$b, 1e-12)
  # no j variable: one j row, as in rkeops 2's Vi(x) %*% Pm(2)
  expect_close(xi %*% Pm(2), 2 * d$x, 1e-12)
  expect_keops_error(xi %*% Vj(d$b), "dimension")
  expect_keops_error(d$x %*% yj, "left side", "Vi\\(\\)")
  # the base product is untouched
  A <- matrix(1:10, 2); B <- matrix(1:10, ncol = 2)
  expect_identical(A %*% B, base::`%*%`(A, B))
  expect_identical(3 %*% 100, base::`%*%`(3, 100))
})

test_that("a LazyTensor without j (or i) variables counts one row on that side", {
  local_precision("float64")
  d <- r2_data(11)
  xi <- Vi(d$x); yj <- Vj(d$y)
  expect_close(sum(xi, index = "i"), matrix(colSums(d$x), 1), 1e-10)
  expect_close(sum(xi, index = "j"), d$x, 1e-12)
  expect_close(sum(exp(yj), index = "j"), matrix(colSums(exp(d$y)), 1), 1e-10)
  expect_close(sum(exp(yj), index = "i"), exp(d$y), 1e-12)
  expect_close(min(xi, index = "i"), matrix(apply(d$x, 2, min), 1), 1e-12)
  expect_close(max(yj * 2, index = "j"), matrix(2 * apply(d$y, 2, max), 1), 1e-12)
  expect_identical(argmin(xi, index = "i"), matrix(apply(d$x, 2, which.min), 1))
  expect_identical(argmax(xi, index = "j"), matrix(1L, N2, 3))
  expect_close(logsumexp(lsqdist(xi, 0), "i"),
               matrix(log(sum(exp(rowSums(d$x^2)))), 1), 1e-10)
  # parameters only: one row and one column
  p <- c(0.3, -0.7, 1.1)
  expect_close(sum(Pm(p) * 2, index = "j"), matrix(2 * p, 1), 1e-12)
  expect_close(min(Pm(p), index = "i"), matrix(p, 1), 1e-12)
  # K %*% b: without j variables b alone gives the j rows; without i variables, one row
  Ki <- exp(-sqnorm2(xi))
  expect_close(Ki %*% d$b, outer(exp(-rowSums(d$x^2)), colSums(d$b)), 1e-10)
  Kj <- exp(-sqnorm2(yj))
  expect_close(Kj %*% d$b, matrix(colSums(exp(-rowSums(d$y^2)) * d$b), 1), 1e-10)
  expect_keops_error(Kj %*% d$b[-1, ], "rows", as.character(M2))
})

test_that("Kmin() and argKmin() with K beyond the rows reduced over pad with Inf and NA", {
  local_precision("float64")
  d <- r2_data(12)
  D <- lsqdist(Vi(d$x), Vj(d$y))
  K <- M2 + 3
  pad <- function(A, fill) cbind(A, matrix(fill, nrow(A), K - ncol(A)))
  v <- Kmin(D, K, "j")
  expect_close(v, pad(t(apply(d$D2, 1, sort)), Inf), 1e-10)
  a <- argKmin(D, K, "j")
  expect_identical(a, pad(t(apply(d$D2, 1, order)), NA_integer_))
  both <- Kmin_argKmin(D, K, "j")
  expect_close(both$values, v, 0)
  expect_identical(both$indices, a)
  # over i, N rows, and per component (an n x K x 3 array)
  Ki <- N2 + 2
  Zk <- Kmin(Vi(d$x) - Vj(d$y), Ki, "i")
  ref <- array(Inf, c(M2, Ki, 3))
  for (k in 1:3) ref[, 1:N2, k] <- t(apply(d$Z[, , k], 2, sort))
  expect_close(Zk, ref, 1e-10)
  Za <- argKmin(Vi(d$x) - Vj(d$y), Ki, "i")
  expect_identical(dim(Za), as.integer(c(M2, Ki, 3)))
  expect_true(all(is.na(Za[, N2 + 1:2, ])) && !anyNA(Za[, 1:N2, ]))
  expect_identical(Za[, 1:N2, 2], t(apply(d$Z[, , 2], 2, order)))
  # rkeops 2's own example: x_i alone reduced over j has one candidate
  x2 <- matrix(c(1, 2, 3), 2, 3, byrow = TRUE)
  want_v <- array(Inf, c(2, 2, 3)); want_v[, 1, ] <- x2
  want_i <- array(NA_integer_, c(2, 2, 3)); want_i[, 1, ] <- 1L
  expect_identical(Kmin_argKmin(Vi(x2), 2, "j"), list(values = want_v, indices = want_i))
  expect_keops_error(Kmin(D, 0, "j"), "'K'")
})

test_that("elementwise functions compute on plain R numbers, with the KeOps conventions at 0", {
  v <- c(-2.5, -1, 0, 0.5, 3)
  m <- matrix(c(v, 1.5), 2, 3)
  expect_equal(square(v), v * v)
  expect_equal(square(m), m * m)
  expect_identical(dim(square(m)), dim(m))
  expect_equal(inv(m), 1 / m)
  expect_equal(relu(v), c(0, 0, 0, 0.5, 3))
  expect_equal(relu(m), m * (m > 0))
  expect_equal(rsqrt(c(4, 0, 0.25)), c(0.5, 0, 2))
  expect_equal(rsqrt(matrix(c(4, 0), 1)), matrix(c(0.5, 0), 1))
  expect_equal(xlogx(c(0, 1, 2, 0.5)), c(0, 0, 2 * log(2), 0.5 * log(0.5)))
  expect_equal(sinxdivx(v), c(sin(-2.5) / -2.5, sin(1), 1, sin(0.5) / 0.5, sin(3) / 3))
  expect_identical(dim(sinxdivx(m)), dim(m))
  expect_equal(square(1:3), c(1, 4, 9))
  expect_equal(inv(2i), -0.5i)
  expect_keops_error(square("a"), "square", "'x'")
  expect_keops_error(relu(1i), "relu", "'x'")
  expect_keops_error(rsqrt(data.frame(a = 1)), "rsqrt", "'x'")
  # the same values as the LazyTensor versions (a LazyTensor with one j row)
  local_precision("float64")
  u <- matrix(c(0, 0.3, 2, 4.5), 4, 1)
  for (f in list(square, rsqrt, inv, relu, xlogx, sinxdivx)) {
    expect_close(sum(f(Vi(u)), index = "j"), f(u), 1e-12)
  }
})

test_that("step(), ifelse(), atan2() and %*% keep the base and stats behaviour", {
  fit_locally <- function() {
    set.seed(3)
    dd <- data.frame(a = rnorm(40), b = rnorm(40), c = rnorm(40))   # only in this frame
    fit <- lm(a ~ b + c, data = dd)
    list(ours = step(fit, trace = 0), theirs = stats::step(fit, trace = 0))
  }
  r <- fit_locally()
  expect_s3_class(r$ours, "lm")
  expect_equal(coef(r$ours), coef(r$theirs))
  expect_identical(deparse(formula(r$ours)), deparse(formula(r$theirs)))
  tst <- c(TRUE, NA, FALSE)
  expect_identical(ifelse(tst, 1:3, -(1:3)), base::ifelse(tst, 1:3, -(1:3)))
  expect_identical(ifelse(matrix(tst, 1), "a", "b"), base::ifelse(matrix(tst, 1), "a", "b"))
  expect_identical(atan2(1:3, c(-1, 0, 1)), base::atan2(1:3, c(-1, 0, 1)))
  # and the LazyTensor step() is still KeOps' Step
  local_precision("float64")
  u <- matrix(c(-1, 0, 2), 3, 1)
  expect_close(sum(step(Vi(u)), index = "j"), (u >= 0) + 0, 0)
})

test_that("clamp(), clampint(), mod() and the norms make LazyTensors of R numbers", {
  local_precision("float64")
  value <- function(L) sum(L, index = "j")    # no variables indexed by i or j: a 1 x d matrix
  expect_true(is.LazyTensor(clamp(2, 0, 1)))
  expect_close(value(clamp(c(-2, 0.5, 3), 0, 1)), matrix(c(0, 0.5, 1), 1), 0)
  expect_close(value(clampint(c(-2.5, 0.5, 3), -1, 2)), matrix(c(-1, 0.5, 2), 1), 0)
  xs <- c(-3.5, -1, 0.25, 7.5)
  ref_mod <- function(x, n, d = 0) x - n * floor((x - d) / n)
  expect_close(value(mod(xs, 2)), matrix(ref_mod(xs, 2), 1), 1e-12)
  expect_close(value(mod(xs, 3, -1)), matrix(ref_mod(xs, 3, -1), 1), 1e-12)
  expect_close(value(sqnorm2(c(3, 4))), matrix(25), 1e-12)
  expect_close(value(norm2(c(3, 4))), matrix(5), 1e-12)
  expect_close(value(normalize(c(3, 4))), matrix(c(0.6, 0.8), 1), 1e-12)
  expect_close(value(lsqdist(c(1, 2), c(4, 6))), matrix(25), 1e-12)
  expect_close(value(weightedsqnorm(c(1, 2), c(3, 5))), matrix(23), 1e-12)
  expect_close(value(weightedsqdist(c(1, 2), c(0, 0), 2)), matrix(10), 1e-12)
  # one argument of dimension 1 is the same value in every component
  d <- r2_data(13)
  xi <- Vi(d$x)
  wv <- c(0.5, 2, 3)
  expect_close(sum(lsqdist(xi, 0.5), index = "j"), matrix(rowSums((d$x - 0.5)^2)), 1e-10)
  expect_close(sum(lsqdist(Pm(-1), xi), index = "j"), matrix(rowSums((d$x + 1)^2)), 1e-10)
  expect_close(sum(weightedsqdist(xi, 0.5, Pm(wv)), index = "j"),
               matrix(colSums(wv * (t(d$x) - 0.5)^2)), 1e-10)
  # mixed: a number where a LazyTensor goes
  yj <- Vj(d$y)
  # (no i variable: the reduction over i has one row, the value itself)
  # KeOps' Clamp: a where x < a, else b where x > b, else x (so a wins when a > b)
  ref_clamp <- function(x, a, b) base::ifelse(x < a, a, base::ifelse(x > b, b, x))
  expect_close(sum(clamp(0.2, yj, 0.6), index = "i"), ref_clamp(0.2, d$y, 0.6), 1e-12)
  expect_close(sum(mod(1.7, yj + 2), index = "i"), ref_mod(1.7, d$y + 2), 1e-12)
  expect_keops_error(clamp(d$x, 0, 1), "'x'", "Vi\\(\\)")
  expect_keops_error(sqnorm2(d$x), "'x'", "matrix")
  expect_keops_error(lsqdist(xi, Vj(d$b)), "same dimension")
  expect_keops_error(clampint(xi, 0.5, 1), "'a'", "whole number")
  expect_keops_error(mod(xi, "a"), "'n'")
})

test_that("round() takes digits as a number or as Pm() of one whole number", {
  local_precision("float64")
  d <- r2_data(14)
  z <- 10 * d$x
  expect_close(sum(round(Vi(z), Pm(2)), index = "j"), round(z, 2), 1e-12)
  expect_close(sum(round(Vi(z), Pm(-1)), index = "j"), round(z, -1), 1e-12)
  expect_close(sum(round(Vi(z), 1), index = "j"), round(z, 1), 1e-12)
  expect_keops_error(round(Vi(z), Pm(c(1, 2))), "'digits'", "Pm\\(\\)")
  expect_keops_error(round(Vi(z), Pm(1.5)), "'digits'", "whole number")
  expect_keops_error(round(Vi(z), Vi(z)), "'digits'")
  expect_identical(round(c(2.567, -1.25), 1), base::round(c(2.567, -1.25), 1))
})

test_that("grad() takes gradin as Vi()/Vj() and var as a variable, a name or a 1-based position", {
  local_precision("float64")
  d <- r2_data(15)
  xi <- Vi(d$x); yj <- Vj(d$y)
  f <- sqnorm2(xi - yj)
  eta <- d$u
  # d/dx_i sum_j eta_i |x_i - y_j|^2 = 2 eta_i (M x_i - sum_j y_j)
  ref_x <- 2 * c(eta) * (M2 * d$x - matrix(colSums(d$y), N2, 3, byrow = TRUE))
  expect_close(grad(f, eta, "Sum", xi, "j"), ref_x, 1e-10)
  expect_close(grad(f, Vi(eta), "Sum", xi, "j"), ref_x, 1e-10)
  expect_close(grad(f, Vi(eta), "Sum", "V0", "j"), ref_x, 1e-10)
  # d/dy_j sum_i eta_i |x_i - y_j|^2 = -2 (sum_i eta_i x_i - (sum_i eta_i) y_j)
  ref_y <- -2 * (matrix(colSums(c(eta) * d$x), M2, 3, byrow = TRUE) - sum(eta) * d$y)
  expect_close(grad(f, Vi(eta), "Sum", "V1", "j"), ref_y, 1e-10)
  expect_close(grad(f, Vi(eta), "Sum", yj, "j"), ref_y, 1e-10)   # the variable given, not V0
  forget_notices()
  expect_warning(g <- grad(f, Vi(eta), "Sum", 2, "j"), "1-based")
  expect_close(g, ref_y, 1e-10)
  expect_no_warning(grad(f, Vi(eta), "Sum", 2, "j"))              # once per session
  # over i: gradin indexed by j
  ej <- d$b[, 1, drop = FALSE]
  ref_y2 <- 2 * c(ej) * (N2 * d$y - matrix(colSums(d$x), M2, 3, byrow = TRUE))
  expect_close(grad(f, Vj(ej), "Sum", yj, "i"), ref_y2, 1e-10)
  # a finite-difference check of one coordinate, independent of the analytic formula
  h <- 1e-6
  xp <- d$x; xp[5, 2] <- xp[5, 2] + h
  xm <- d$x; xm[5, 2] <- xm[5, 2] - h
  val <- function(xx) sum(eta * rowSums(sqdist(xx, d$y)))   # the dense helper
  expect_equal(grad(f, eta, "Sum", xi, "j")[5, 2], (val(xp) - val(xm)) / (2 * h), tolerance = 1e-6)
  # errors
  expect_keops_error(grad(f, Vj(ej), "Sum", xi, "j"), "'gradin'", "Vi\\(\\)")
  expect_keops_error(grad(f, Vi(eta) * 2, "Sum", xi, "j"), "'gradin'")
  expect_keops_error(grad(f, eta, "Sum", 0, "j"), "'var'", "1-based")
  expect_keops_error(grad(f, eta, "Sum", "V2", "j"), "'var'", "V0 to V1")
  expect_keops_error(grad(f, eta, 2, xi, "j"), "'opstr'")
})

test_that("the op builders of rkeops 2 write KeOps operations by name", {
  local_precision("float64")
  d <- r2_data(16)
  xi <- Vi(d$x); yj <- Vj(d$y)
  expect_close(sum(unaryop.LazyTensor(xi, "Pow", 3), index = "j"), d$x^3, 1e-12)
  expect_close(sum(unaryop.LazyTensor(xi, "SqNorm2", dim_res = 1), index = "j"),
               matrix(rowSums(d$x^2)), 1e-12)
  S <- binaryop.LazyTensor(xi, yj, "-", is_operator = TRUE)
  expect_close(sum(S, index = "j"), ref_reduce(d$Z, 0, "sum"), 1e-10)
  A <- binaryop.LazyTensor(S, 1, "Atan2")
  expect_close(sum(A, index = "i"), ref_reduce(atan2(d$Z, 1), 1, "sum"), 1e-10)
  C <- ternaryop.LazyTensor(S, 0, 0.2, "Clamp")
  expect_close(sum(C, index = "j"), ref_reduce(pmin(pmax(d$Z, 0), 0.2), 0, "sum"), 1e-10)
  E <- binaryop.LazyTensor(xi, yj, "SqDist", dim_check_type = "same", dim_res = 1)
  expect_close(sum(E, index = "j"), ref_reduce(d$D2, 0, "sum"), 1e-10)
  expect_keops_error(binaryop.LazyTensor(xi, Vj(d$b), "-", is_operator = TRUE), "dimension")
  expect_keops_error(binaryop.LazyTensor(xi, Pm(1), "SqDist", dim_check_type = "same"), "same dimension")
  expect_keops_error(unaryop.LazyTensor(xi, "Exp", res_type = "ComplexLazyTensor"), "'res_type'")
  expect_keops_error(unaryop.LazyTensor(xi, 3), "'opstr'")
  expect_keops_error(unaryop.LazyTensor(xi, "Pow", 1.5), "'opt_arg'")
  expect_keops_error(ternaryop.LazyTensor(d$x, 0, 1, "Clamp"), "'x'", "matrix")
})

test_that("rkeops 2's LazyTensor operations and reductions are all exported", {
  # rkeops 2's NAMESPACE, less constructors, predicates, complex functions and the operators
  # that R's group generics already cover here
  theirs <- c("%*%", "Kmin", "Kmin_argKmin", "Kmin_argKmin_reduction", "Kmin_reduction", "argKmin",
              "argKmin_reduction", "argmax", "argmax_reduction", "argmin", "argmin_reduction",
              "atan2", "binaryop.LazyTensor", "clamp", "clampint", "concat", "elem", "elemT",
              "extract", "extractT", "grad", "ifelse", "inv", "logsumexp", "logsumexp_reduction",
              "matvecmult", "max_argmax", "max_argmax_reduction", "max_reduction", "min_argmin",
              "min_argmin_reduction", "min_reduction", "mod", "norm2", "normalize", "one_hot",
              "reduction.LazyTensor", "relu", "rsqrt", "sinxdivx", "sqdist", "sqnorm2", "square",
              "step", "sum_reduction", "sumsoftmaxweight", "sumsoftmaxweight_reduction",
              "tensorprod", "ternaryop.LazyTensor", "unaryop.LazyTensor", "vecmatmult",
              "weightedsqdist", "weightedsqnorm", "xlogx")
  expect_identical(setdiff(theirs, getNamespaceExports("rkeops")), character(0))
})

test_that("log(x, base) of a real LazyTensor uses the base", {
  local_precision("float64")
  set.seed(19)
  x <- matrix(runif(14, 0.5, 3), 7, 2)
  y <- matrix(runif(22, 0.5, 3), 11, 2)
  for (base in c(2, 10, exp(1), 0.3)) {
    got <- sum(log(Vi(x) * Vj(y), base), index = "j")
    want <- sapply(1:2, function(k) rowSums(log(outer(x[, k], y[, k]), base)))
    expect_equal(got, want, tolerance = 1e-12, info = paste("base", base))
  }
  expect_equal(sum(log(Vi(x), base = 2), index = "j"), log2(x), tolerance = 1e-12)
  expect_keops_error(log(Vi(x), 1), "'base' must be a positive number")
  expect_keops_error(log(Vi(x), -2), "'base' must be a positive number")
  expect_keops_error(log(Vi(x), Vi(x)), "'base' must be a positive number")
})

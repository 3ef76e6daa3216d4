# LazyTensor interface against dense float64 references (see helper-reference.R).
# The helper's sqdist() (a dense distance matrix) masks rkeops::sqdist() here.
lsqdist <- rkeops::sqdist

N <- 37; M <- 29

lt_data <- function(seed = 1) {
  set.seed(seed)
  list(x = rmat(N, 3), y = rmat(M, 3), u = rmat(N, 1), v = rmat(M, 1), p = c(0.3, -0.7, 1.1))
}

# Checks the Sum reduction of a LazyTensor over both indices against pair_eval(fun, ...).
expect_lazy_sum <- function(lazy, fun, d, info, tol = 1e-10) {
  lazy <- lazy + 0 * Vi(d$u) + 0 * Vj(d$v)   # indexed by both i and j, whatever the formula
  Fij <- pair_eval(fun, i = list(x = d$x, u = d$u), j = list(y = d$y, v = d$v), p = list(p = d$p))
  expect_close(sum(lazy, index = "j"), ref_reduce(Fij, 0, "sum"), tol, info = paste(info, "j"))
  expect_close(sum(lazy, index = "i"), ref_reduce(Fij, 1, "sum"), tol, info = paste(info, "i"))
}

test_that("constructors, printing, predicates and deduplication of variables", {
  d <- lt_data()
  xi <- Vi(d$x)
  expect_true(is.LazyTensor(xi))
  expect_identical(xi$args, "V0 = Vi(3)")
  expect_identical(xi$dimres, 3L)
  expect_identical(LazyTensor(d$x, index = "j")$args, "V0 = Vj(3)")
  expect_identical(LazyTensor(d$p)$args, "V0 = Pm(3)")
  expect_identical(Vi(d$u[, 1])$args, "V0 = Vi(1)")
  f <- xi + xi * Vj(d$y) - Vi(d$x)
  expect_length(f$vars, 2L)
  expect_identical(f$args, c("V0 = Vi(3)", "V1 = Vj(3)"))
  g <- Vj(d$y) + Vi(d$x) + Vj(d$x[1:M, ])
  expect_identical(g$args, c("V0 = Vj(3)", "V1 = Vi(3)", "V2 = Vj(3)"))
  h <- Vi(d$x) + Vj(d$x)                     # the same data in two categories: two variables
  expect_length(h$vars, 2L)
  out <- capture.output(print(f))
  expect_true(any(grepl("V0", out)) && any(grepl("Vi\\(3\\)", out)) && any(grepl("37 x 3", out)))
  expect_true(is.LazyParameter(Pm(2)))
  expect_false(is.LazyParameter(Pm(d$p)))
  expect_true(is.LazyVector(Pm(d$p)))
  expect_false(is.LazyVector(xi))
  expect_false(is.LazyTensor(d$x))
  # numbers: integers written as integers, decimals round-trip, negatives parenthesised
  expect_identical((xi + 2)$formula, "(@0@ + 2)")
  expect_identical((xi * 2L)$formula, "(@0@ * 2)")
  expect_identical((xi - (-0.5))$formula, "(@0@ - (-0.5))")
  expect_identical((1e-3 * xi)$formula, "(0.001 * @0@)")
  expect_equal(as.numeric(gsub("[()@0 *]", "", (xi * (1 / 3))$formula)), 1 / 3, tolerance = 0)
})

test_that("arithmetic, powers, comparisons and scalar products match dense R", {
  local_precision("float64")
  d <- lt_data(2)
  xi <- Vi(d$x); yj <- Vj(d$y); ui <- Vi(d$u); vj <- Vj(d$v); p <- Pm(d$p)
  cases <- list(
    list(xi + yj, function(x, y, ...) x + y, "+"),
    list(xi - yj * 2, function(x, y, ...) x - y * 2, "- *"),
    list(xi / (yj + 3), function(x, y, ...) x / (y + 3), "/"),
    list(-xi + ui, function(x, u, ...) -x + as.vector(u), "unary minus, broadcast"),
    list(0.5 - xi * p, function(x, p, ...) 0.5 - x * p, "parameter"),
    list(xi^2, function(x, ...) x^2, "^2"),
    list((xi + 2)^0.5, function(x, ...) sqrt(x + 2), "^0.5"),
    list(xi^3, function(x, ...) x^3, "^3"),
    list(xi^(-2), function(x, ...) x^(-2), "^-2"),
    list((xi + 2)^1.7, function(x, ...) (x + 2)^1.7, "^1.7"),
    list((xi + 2)^(vj + 2), function(x, v, ...) (x + 2)^as.vector(v + 2), "^ lazy"),
    list(2^ui, function(u, ...) 2^u, "number ^ lazy"),
    list(xi == yj, function(x, y, ...) (x == y) + 0, "=="),
    list(round(xi) == 0, function(x, ...) (round(x) == 0) + 0, "== 0"),
    list(xi != round(yj), function(x, y, ...) (x != round(y)) + 0, "!="),
    list(xi < yj, function(x, y, ...) (x < y) + 0, "<"),
    list(xi <= 0.25, function(x, ...) (x <= 0.25) + 0, "<="),
    list(xi > yj, function(x, y, ...) (x > y) + 0, ">"),
    list(xi >= ui, function(x, u, ...) (x >= as.vector(u)) + 0, ">="),
    list((xi | yj), function(x, y, ...) rdot(x, y), "|"),
    list((xi - yj | xi - yj) * vj, function(x, y, v, ...) rdot(x - y, x - y) * v, "| *")
  )
  for (cs in cases) expect_lazy_sum(cs[[1]], cs[[2]], d, cs[[3]])
})

test_that("Math group functions match dense R", {
  local_precision("float64")
  d <- lt_data(3)
  xi <- Vi(d$x); yj <- Vj(d$y)
  z <- xi - yj
  cases <- list(
    list(abs(z), abs), list(sqrt(abs(z)), function(a) sqrt(abs(a))), list(exp(z), exp),
    list(log(abs(z) + 1), function(a) log(abs(a) + 1)), list(sin(z), sin), list(cos(z), cos),
    list(acos(z / 2), function(a) acos(a / 2)), list(asin(z / 2), function(a) asin(a / 2)),
    list(atan(z), atan), list(sign(z), sign), list(floor(z * 3), function(a) floor(a * 3)),
    list(round(z * 3), function(a) round(a * 3)), list(round(z, 2), function(a) round(a, 2))
  )
  for (k in seq_along(cases)) {
    fn <- cases[[k]][[2]]
    expect_lazy_sum(cases[[k]][[1]], function(x, y, ...) fn(x - y), d, paste("math", k))
  }
})

test_that("elementwise named functions match dense R", {
  local_precision("float64")
  d <- lt_data(4)
  xi <- Vi(d$x); yj <- Vj(d$y); vj <- Vj(d$v)
  z <- xi - yj
  cases <- list(
    list(square(z), function(a, ...) a^2, "square"),
    list(rsqrt(abs(z) + 0.1), function(a, ...) 1 / sqrt(abs(a) + 0.1), "rsqrt"),
    list(inv(z + 3), function(a, ...) 1 / (a + 3), "inv"),
    list(relu(z), function(a, ...) pmax(a, 0), "relu"),
    list(step(z), function(a, ...) (a >= 0) + 0, "step"),
    list(clamp(z, -0.3, 0.4), function(a, ...) pmin(pmax(a, -0.3), 0.4), "clamp"),
    list(clamp(z, vj / 2 - 0.5, 0.8), function(a, v, ...) pmin(pmax(a, as.vector(v) / 2 - 0.5), 0.8),
         "clamp lazy"),
    list(clampint(z * 3, -1, 2), function(a, ...) pmin(pmax(a * 3, -1), 2), "clampint"),
    list(ifelse(z, xi, yj * 2), function(a, x, y, ...) base::ifelse(a >= 0, x, y * 2), "ifelse"),
    list(mod(z * 5, 1.5), function(a, ...) a * 5 - 1.5 * floor(a * 5 / 1.5), "mod"),
    list(mod(z * 5, 2, 0.5), function(a, ...) a * 5 - 2 * floor((a * 5 - 0.5) / 2), "mod d"),
    list(xlogx(abs(z)), function(a, ...) base::ifelse(a == 0, 0, abs(a) * log(abs(a))), "xlogx"),
    list(sinxdivx(z), function(a, ...) base::ifelse(a == 0, 1, sin(a) / a), "sinxdivx"),
    list(atan2(xi, yj), function(x, y, ...) base::atan2(x, y), "atan2")
  )
  for (cs in cases) {
    fn <- cs[[2]]
    expect_lazy_sum(cs[[1]], function(x, y, v, ...) fn(x - y, x = x, y = y, v = v), d, cs[[3]])
  }
})

test_that("vector functions match dense R", {
  local_precision("float64")
  d <- lt_data(5)
  xi <- Vi(d$x); yj <- Vj(d$y); vj <- Vj(d$v); p <- Pm(d$p)
  S <- crossprod(matrix(rnorm(9), 3)) + diag(3)         # symmetric, for the full weighted norm
  A <- matrix(rnorm(6), 2, 3)                           # 2 x 3, column-major in a Pm(6)
  rnorm2 <- function(a) sqrt(rowSums(a^2))
  cases <- list(
    list(sqnorm2(xi - yj), function(x, y) rowSums((x - y)^2), "sqnorm2"),
    list(norm2(xi - yj), function(x, y) rnorm2(x - y), "norm2"),
    list(normalize(xi - yj), function(x, y) (x - y) / rnorm2(x - y), "normalize"),
    list(lsqdist(xi, yj), function(x, y) rowSums((x - y)^2), "sqdist"),
    list(weightedsqnorm(xi, 2.5), function(x, y) 2.5 * rowSums(x^2), "wsqnorm iso"),
    list(weightedsqnorm(xi, p^2), function(x, y) colSums(t(x^2) * d$p^2), "wsqnorm diag"),
    list(weightedsqnorm(xi - yj, Pm(as.vector(S))), function(x, y) rowSums(((x - y) %*% S) * (x - y)),
         "wsqnorm full"),
    list(weightedsqdist(xi, yj, vj^2), function(x, y) rowSums((x - y)^2) * y[, 1]^0 *
           d$v[rep(seq_len(M), each = N)]^2, "wsqdist"),
    list(elem(xi, 1), function(x, y) x[, 1], "elem 1"),
    list(elem(xi - yj, 3), function(x, y) (x - y)[, 3], "elem 3"),
    list(elemT(elem(xi, 2), 2, 4), function(x, y) cbind(0, x[, 2], 0, 0), "elemT"),
    list(extract(xi, 2, 2), function(x, y) x[, 2:3], "extract"),
    list(extractT(yj, 2, 5), function(x, y) cbind(0, y, 0), "extractT"),
    list(concat(xi, elem(yj, 1)), function(x, y) cbind(x, y[, 1]), "concat"),
    list(one_hot(floor(elem(xi, 1) * 2 + 2), 4),
         function(x, y) outer(floor(x[, 1] * 2 + 2), 0:3, "==") + 0, "one_hot"),
    list(matvecmult(Pm(as.vector(A)), xi), function(x, y) x %*% t(A), "matvecmult"),
    list(vecmatmult(elemT(elem(yj, 1), 1, 2) + 1, Pm(as.vector(A))),
         function(x, y) cbind(y[, 1] + 1, 1) %*% A, "vecmatmult"),
    list(tensorprod(xi, extract(yj, 1, 2)),
         function(x, y) do.call(cbind, lapply(1:2, function(b) x * y[, b])), "tensorprod")
  )
  for (cs in cases) expect_lazy_sum(cs[[1]], function(x, y, ...) cs[[2]](x, y), d, cs[[3]])
})

test_that("reductions match dense R over both indices", {
  local_precision("float64")
  d <- lt_data(6)
  xi <- Vi(d$x); yj <- Vj(d$y); vj <- Vj(d$v)
  D <- lsqdist(xi, yj)
  Dd <- sqdist(d$x, d$y)
  Z <- xi - yj
  Zd <- pair_eval(function(x, y) x - y, i = list(x = d$x), j = list(y = d$y))
  W <- pair_eval(function(v) v, j = list(v = d$v), N = N)
  tol <- 1e-10
  for (index in c("i", "j")) {
    ax <- if (index == "j") 0 else 1
    info <- paste("index", index)
    expect_close(min(Z, index = index), ref_reduce(Zd, ax, "min"), tol, info)
    expect_close(max(Z, index = index), ref_reduce(Zd, ax, "max"), tol, info)
    expect_identical(argmin(D, index = index), ref_reduce(Dd, ax, "argmin"))
    expect_identical(argmax(Z, index), ref_reduce(Zd, ax, "argmax"))
    ma <- min_argmin(Z, index)
    ref <- ref_reduce(if (ax == 1) aperm(Zd, c(2, 1, 3)) else Zd, 0, "min_argmin")
    expect_close(ma$values, ref$values, tol, info)
    expect_identical(ma$indices, ref$indices)
    mx <- max_argmax(D, index)
    ref <- ref_reduce(if (ax == 1) t(Dd) else Dd, 0, "max_argmax")
    expect_close(mx$values, ref$values, tol, info)
    expect_identical(mx$indices, ref$indices)
    expect_close(Kmin(D, 4, index), ref_reduce(Dd, ax, "kmin", K = 4), tol, info)
    expect_close(Kmin(Z, 3, index), ref_reduce(Zd, ax, "kmin", K = 3), tol, info)
    expect_identical(argKmin(D, 5, index), ref_reduce(Dd, ax, "argkmin", K = 5))
    ka <- Kmin_argKmin(D, 3, index)
    expect_close(ka$values, ref_reduce(Dd, ax, "kmin", K = 3), tol, info)
    expect_identical(ka$indices, ref_reduce(Dd, ax, "argkmin", K = 3))
    expect_close(logsumexp(-D, index), ref_reduce(-Dd, ax, "logsumexp"), tol, info)
    expect_close(logsumexp(-D, index, weight = exp(vj)), ref_reduce(-Dd, ax, "lse_weight", G = exp(W)),
                 tol, info)
    expect_close(sumsoftmaxweight(-D, index, Z), ref_reduce(-Dd, ax, "softmax_weight", G = Zd),
                 tol, info)
    # component reductions without index stay lazy
    expect_true(is.LazyTensor(sum(Z)))
    expect_close(sum(sum(Z), index = index), ref_reduce(apply(Zd, 1:2, sum), ax, "sum"), tol, info)
    expect_close(sum(min(Z), index = index), ref_reduce(apply(Zd, 1:2, min), ax, "sum"), tol, info)
    expect_close(sum(max(Z), index = index), ref_reduce(apply(Zd, 1:2, max), ax, "sum"), tol, info)
    expect_close(sum(argmin(Z) + 1, index = index),
                 ref_reduce(apply(Zd, 1:2, which.min), ax, "sum"), tol, info)
    expect_close(sum(argmax(Z), index = index),
                 ref_reduce(apply(Zd, 1:2, which.max) - 1, ax, "sum"), tol, info)
  }
})

test_that("%*% with a LazyTensor, and base behaviour of the masked functions", {
  local_precision("float64")
  d <- lt_data(7)
  K <- exp(-lsqdist(Vi(d$x), Vj(d$y)))
  b <- matrix(rnorm(M * 2), M, 2)
  expect_close(K %*% b, exp(-sqdist(d$x, d$y)) %*% b, 1e-10)
  expect_close(K %*% b[, 1], exp(-sqdist(d$x, d$y)) %*% b[, 1], 1e-10)
  # the reverse direction via Vi-reduction: t(K) %*% a
  a <- rnorm(N)
  expect_close(sum(K * Vi(a), index = "i"), t(exp(-sqdist(d$x, d$y))) %*% a, 1e-10)
  m <- matrix(1:6, 2)
  expect_identical(m %*% t(m), base::`%*%`(m, t(m)))
  expect_identical(ifelse(c(1, -1, 0) > 0, "a", "b"), c("a", "b", "b"))
  expect_identical(atan2(1, 2), base::atan2(1, 2))
  fit <- lm(mpg ~ wt + hp, data = mtcars)
  expect_s3_class(suppressWarnings(step(fit, trace = 0)), "lm")
})

test_that("K-means assignment step matches which.min on dense distances", {
  local_precision("float64")
  set.seed(8)
  x <- rmat(200, 2)
  centroids <- x[sample(200, 7), ]
  cl <- argmin(lsqdist(Vi(x), Vj(centroids)), index = "j")
  dense <- sqdist(x, centroids)
  expect_identical(as.vector(cl), apply(dense, 1, which.min))
  expect_close(min(lsqdist(Vi(x), Vj(centroids)), index = "j"),
               matrix(apply(dense, 1, min), ncol = 1), 1e-10)
})

test_that("kriging by conjugate gradients matches solve() on the dense system", {
  local_precision("float64")
  set.seed(9)
  x <- rmat(50, 2)
  b <- matrix(rnorm(100), 50, 2)
  K <- exp(-lsqdist(Vi(x), Vj(x)) / 0.5)
  sol <- solve(K, b, alpha = 0.1, eps = 1e-10)
  ref <- base::solve(exp(-sqdist(x, x) / 0.5) + 0.1 * diag(50), b)
  expect_equal(sol, ref, tolerance = 1e-7)
  expect_warning(solve(K, b, alpha = 0.01, eps = 1e-14, maxiter = 2), "did not converge")
})

test_that("K nearest neighbours match order() on dense distances", {
  local_precision("float64")
  set.seed(10)
  x <- rmat(N, 3); y <- rmat(M, 3)
  knn <- argKmin(lsqdist(Vi(x), Vj(y)), 5, index = "j")
  dense <- sqdist(x, y)
  expect_identical(knn, t(apply(dense, 1, function(r) order(r)[1:5])))
  knn_i <- argKmin(lsqdist(Vi(x), Vj(y)), 2, index = "i")
  expect_identical(knn_i, t(apply(dense, 2, function(r) order(r)[1:2])))
})

test_that("a log-domain Sinkhorn loop with logsumexp matches dense R", {
  local_precision("float64")
  set.seed(11)
  x <- rmat(N, 2); y <- rmat(M, 2)
  eps <- 0.1
  la <- rep(-log(N), N); lb <- rep(-log(M), M)
  f <- rep(0, N); g <- rep(0, M)
  fd <- f; gd <- g
  C <- sqdist(x, y) / 2
  lse_rows <- function(A) apply(A, 1, function(r) { m <- max(r); m + log(sum(exp(r - m))) })
  for (it in 1:5) {
    f <- -eps * as.vector(logsumexp((Vj(g) - lsqdist(Vi(x), Vj(y)) / 2) / eps + Vj(lb), "j"))
    g <- -eps * as.vector(logsumexp((Vi(f) - lsqdist(Vi(x), Vj(y)) / 2) / eps + Vi(la), "i"))
    fd <- -eps * lse_rows(sweep(-C, 2, gd, "+") / eps + rep(lb, each = N))
    gd <- -eps * lse_rows(t(sweep(-C, 1, fd, "+") / eps + la))
  }
  expect_equal(f, fd, tolerance = 1e-10)
  expect_equal(g, gd, tolerance = 1e-10)
})

test_that("grad() matches the analytic gradient of a Gaussian kernel sum", {
  local_precision("float64")
  d <- lt_data(12)
  xi <- Vi(d$x); yj <- Vj(d$y)
  f <- exp(-lsqdist(xi, yj)) * Vj(d$v)
  e <- matrix(rnorm(N), N, 1)
  g <- grad(f, e, "Sum", xi, "j")
  Kd <- exp(-sqdist(d$x, d$y)) * rep(d$v, each = N)
  ref <- -2 * (d$x * rowSums(Kd * as.vector(e)) - (Kd * as.vector(e)) %*% d$y)
  expect_close(g, ref, 1e-9)
  # a numeric position is 1-based (a one-time warning says so: rkeops 2 counted from 0)
  expect_close(suppressWarnings(grad(f, e, "Sum", 1, "j")), ref, 1e-9)
  # with respect to y, summed over i
  ej <- matrix(rnorm(M), M, 1)
  gy <- grad(f, ej, "Sum", yj, "i")
  Kt <- t(Kd) * as.vector(ej)
  expect_close(gy, -2 * (d$y * rowSums(Kt) - Kt %*% d$x), 1e-9)
})

test_that("LazyTensor errors are clear", {
  d <- lt_data(13)
  xi <- Vi(d$x); yj <- Vj(d$y)
  D <- lsqdist(xi, yj)
  expect_keops_error(sum(D, index = "k"), "index", "\"i\"")
  expect_keops_error(argmin(D, index = 1), "index")
  expect_keops_error(argmin(d$x, "j"), "'x'", "LazyTensor")
  expect_keops_error(Kmin(d$x, 2, "j"), "LazyTensor")
  expect_keops_error(logsumexp(d$x, "i"), "LazyTensor")
  expect_keops_error(xi + Vj(d$y[, 1:2]), "dimension")
  expect_keops_error(lsqdist(xi, Vj(d$y[, 1:2])), "same dimension")
  expect_keops_error(lsqdist(d$x, yj), "'x'", "LazyTensor")
  expect_keops_error((xi | Vj(d$v)), "same dimension")
  expect_keops_error(elem(xi, 0), "'m'")
  expect_keops_error(elem(xi, 4), "beyond", "1-based")
  expect_keops_error(extract(xi, 2, 3), "beyond")
  expect_keops_error(one_hot(xi, 3), "dimension 1")
  expect_keops_error(logsumexp(xi - yj, "j"), "dimension 1")
  expect_keops_error(Kmin(D, 0, "j"), "'K'")
  # no j variable: the j side is one row (as in rkeops 2)
  expect_close(sum(xi * 2, index = "j"), 2 * d$x, 1e-6)
  expect_keops_error(exp(xi - yj) %*% matrix(1, M, 1), "dimension 1")
  expect_keops_error(exp(-D) %*% matrix(1, M + 1, 1), "rows")
  expect_keops_error(xi + "a", "LazyTensor or a number")
  expect_keops_error(Vi("a"), "numeric")
  expect_keops_error(LazyTensor(d$x, index = "k"), "index")
  expect_keops_error(weightedsqnorm(xi, Pm(c(1, 2))), "dimension")
  expect_keops_error(grad(D, matrix(1, N, 1), "Sum", Vi(d$u), "j"), "not a variable")
  # plain numbers are squared in R
  expect_identical(square(d$x), d$x^2)
})

test_that("dim() gives the rows of the i- and j-variables and the dimension of the values", {
  x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
  expect_identical(dim(rkeops::sqdist(Vi(x), Vj(y))), c(10L, 20L, 1L))
  expect_identical(dim(Vi(x) - Vj(y)), c(10L, 20L, 3L))
  expect_identical(dim(Vi(x) * Pm(2)), c(10L, NA, 3L))
  expect_identical(dim(Pm(c(1, 2))), c(NA, NA, 2L))
})

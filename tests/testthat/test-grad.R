# keops_grad(): gradients of Sum reductions against central finite differences in float64.

testthat::local_edition(3)

# Central finite differences of the scalar function f at the numeric array v.
finite_differences <- function(f, v, h = 1e-6) {
  out <- v
  for (k in seq_along(v)) {
    vp <- v; vp[k] <- vp[k] + h
    vm <- v; vm[k] <- vm[k] - h
    out[k] <- (f(vp) - f(vm)) / (2 * h)
  }
  out
}

expect_gradient <- function(got, want) {
  expect_equal(dim(got), dim(as.matrix(want)))
  err <- max(abs(got - want) / (1 + abs(want)))
  expect_lt(err, 1e-6)
}

test_that("gradients in i-, j- and parameter variables match finite differences, both axes", {
  local_precision("float64")
  set.seed(401)
  N <- 13; M <- 29
  x <- matrix(runif(3 * N), N, 3); y <- matrix(runif(3 * M), M, 3)
  b <- matrix(rnorm(2 * M), M, 2); s <- 0.7
  args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)")
  op <- keops_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", args)
  e <- matrix(rnorm(2 * N), N, 2)
  S <- function(x, y, b, s) sum(op(list(x, y, b, s)) * e)
  expect_gradient(keops_grad(op, "x")(list(x, y, b, s, e)),
                  finite_differences(function(v) S(v, y, b, s), x))
  expect_gradient(keops_grad(op, "y")(list(x, y, b, s, e)),
                  finite_differences(function(v) S(x, v, b, s), y))
  expect_gradient(keops_grad(op, 3)(list(x, y, b, s, e)),
                  finite_differences(function(v) S(x, y, v, s), b))
  gs <- keops_grad(op, "s")(list(x, y, b, s, e))
  expect_equal(dim(gs), c(1L, 1L))
  expect_gradient(gs, matrix(finite_differences(function(v) S(x, y, b, v), s), 1))

  # Axis 1: the output is indexed by j.
  op1 <- keops_kernel("Sum_Reduction(Sin(x - y) * (x|y), 1)", c("x = Vi(3)", "y = Vj(3)"))
  e1 <- matrix(rnorm(3 * M), M, 3)
  S1 <- function(x, y) sum(op1(list(x, y)) * e1)
  expect_gradient(keops_grad(op1, "x")(list(x, y, e1)), finite_differences(function(v) S1(v, y), x))
  expect_gradient(keops_grad(op1, "y")(list(x, y, e1)), finite_differences(function(v) S1(x, v), y))
})

test_that("second order: the gradient of a gradient matches finite differences", {
  local_precision("float64")
  set.seed(402)
  N <- 11; M <- 17
  q <- matrix(runif(2 * N), N, 2); r <- matrix(runif(2 * M), M, 2)
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x,y)), 0)", c("x = Vi(2)", "y = Vj(2)"))
  dx <- keops_grad(op, "x")
  e <- matrix(rnorm(N), N, 1)
  e2 <- matrix(rnorm(2 * N), N, 2)
  T <- function(x) sum(dx(list(x, r, e)) * e2)
  expect_gradient(keops_grad(dx, "x")(list(q, r, e, e2)), finite_differences(T, q))
})

test_that("keops_grad() errors name what is wrong", {
  op <- keops_kernel("Sum_Reduction(SqDist(x,y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  expect_error(keops_grad(op, "z"), "'var' = \"z\" is not a variable")
  expect_error(keops_grad(op, 5), "from 1 to 2")
  expect_error(keops_grad(function(l) 1, "x"), "made by keops_kernel")
  mn <- keops_kernel("Min_Reduction(SqDist(x,y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  expect_error(keops_grad(mn, "x"), "Sum_Reduction so far")
})

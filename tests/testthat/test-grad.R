# keops_grad(): gradients of Sum reductions against central finite differences in float64.

testthat::local_edition(3)

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
  expect_gradient(keops_grad(op, "b")(list(x, y, b, s, e)),
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
  expect_error(keops_grad(op, "z"), "'var' = \"z\" is not a variable", class = "rkeops_error_input")
  expect_error(keops_grad(op, 5), "from 1 to 2", class = "rkeops_error_input")
  expect_error(keops_grad(function(l) 1, "x"), "made by keops_kernel", class = "rkeops_error_input")
  cr <- keops_kernel("Sum_Reduction(x, 0)", c("x = Vi(3)"))
  expect_error(keops_grad(keops_grad(cr, "x"), "eta")(list()), "takes a list|expected",
               class = "rkeops_error_input")
})

test_that("gradients of LogSumExp, SumSoftMaxWeight and LogSumExpWeight match finite differences", {
  local_precision("float64")
  set.seed(403)
  N <- 9; M <- 23
  x <- matrix(runif(2 * N), N, 2); y <- matrix(runif(2 * M), M, 2); g <- matrix(runif(2 * M) + 0.5, M, 2)
  s <- 10
  args <- c("x = Vi(2)", "y = Vj(2)", "g = Vj(2)", "s = Pm(1)")
  for (formula in c("LogSumExp_Reduction(50 - s*SqDist(x,y), 0)",
                    "SumSoftMaxWeight_Reduction(-s*SqDist(x,y), g, 0)",
                    "LogSumExpWeight_Reduction(-s*SqDist(x,y), g, 0)",
                    "LogSumExp_Reduction(-s*SqDist(x,y), 0, g)",
                    "SumSoftMaxWeight_Reduction(-s*SqDist(x,y), g*y, 1)")) {
    op <- keops_kernel(formula, args)
    out <- op(list(x, y, g, s))
    e <- matrix(rnorm(length(out)), nrow(out))
    S <- function(x, y, g, s) sum(op(list(x, y, g, s)) * e)
    inputs <- list(x, y, g, s, e)
    expect_gradient(keops_grad(op, "x")(inputs), finite_differences(function(v) S(v, y, g, s), x))
    expect_gradient(keops_grad(op, "y")(inputs), finite_differences(function(v) S(x, v, g, s), y))
    expect_gradient(keops_grad(op, "g")(inputs), finite_differences(function(v) S(x, y, v, s), g))
    expect_gradient(keops_grad(op, "s")(inputs), matrix(finite_differences(function(v) S(x, y, g, v), s), 1))
  }
})

test_that("gradients of Min, Max and KMin flow to the selected j; Arg reductions have none", {
  local_precision("float64")
  set.seed(404)
  N <- 8; M <- 31
  x <- matrix(runif(2 * N), N, 2); y <- matrix(runif(2 * M), M, 2); w <- c(0.7, 1.3)
  args <- c("x = Vi(2)", "y = Vj(2)", "w = Pm(2)")
  for (formula in c("Min_Reduction(WeightedSqDist(w, x, y), 0)", "Max_Reduction(x*y*w, 0)",
                    "KMin_Reduction(WeightedSqDist(w, x, y), 3, 0)",
                    "Min_ArgMin_Reduction(WeightedSqDist(w, x, y), 1)",
                    "KMin_ArgKMin_Reduction(x*w - y, 4, 0)", "Max_Reduction(x - y*w, 1)")) {
    op <- keops_kernel(formula, args)
    value <- function(x, y, w) { r <- op(list(x, y, w)); if (is.list(r)) r$values else r }
    out <- value(x, y, w)
    e <- array(rnorm(length(out)), dim(out))
    # the engine's dimension of the gradient input: one value per result of a row
    expect_identical(attr(op, "rkeops")$info$grad_dim, as.integer(length(out) / nrow(out)), info = formula)
    S <- function(x, y, w) sum(value(x, y, w) * e)
    inputs <- list(x, y, w, e)
    expect_gradient(keops_grad(op, "x")(inputs), finite_differences(function(v) S(v, y, w), x))
    expect_gradient(keops_grad(op, "y")(inputs), finite_differences(function(v) S(x, v, w), y))
    expect_gradient(keops_grad(op, "w")(inputs), matrix(finite_differences(function(v) S(x, y, v), w), 1))
  }
  am <- keops_kernel("ArgMin_Reduction(WeightedSqDist(w, x, y), 0)", args)
  expect_identical(keops_grad(am, "y")(list(x, y, w, matrix(1, N, 1))), matrix(0, M, 2))
  expect_identical(keops_grad(am, "w")(list(x, y, w, matrix(1, N, 1))), matrix(0, 1, 2))
})

test_that("every differentiable operation: gradients in x, y and the parameters match finite differences", {
  local_precision("float64")
  set.seed(405)
  N <- 4; M <- 6
  data <- list(x = matrix(runif(3 * N), N, 3), y = matrix(runif(3 * M), M, 3), b = matrix(runif(2 * M), M, 2),
               A = runif(6), S = runif(9), p = 0.7)
  args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "A = Pm(6)", "S = Pm(9)", "p = Pm(1)")
  formulas <- c(
    "Exp(-p*SqDist(x,y))*b", "x*y", "x/(y+0.5)", "Log(x+y+0.1)", "Sin(x)*Cos(y)", "Sqrt(x+y+0.1)",
    "Rsqrt(x+y+0.1)", "Inv(x+y+0.1)", "Square(x-y)", "Pow(x-y, 3)", "Pow(x+y, -2)", "Powf(x+1, y)",
    "Abs(x-y)", "ReLU(x-y)", "Atan(x*y)", "Asin(0.5*x*y)", "Acos(0.5*x*y)", "Atan2(x, y+0.1)", "XLogX(x+y)",
    "SinXDivX(x+y+0.1)", "Clamp(x-y, -0.2, 0.3)", "ClampInt(3*(x-y), -1, 1)", "IfElse(x-y, x*y, x+y)",
    "Mod(3*x, y+1, 0.1)", "Sum(x*y)", "SumT(Sum(x), 3)*y", "SqNorm2(x-y)", "(x|y)", "Max(x*y)", "Min(x-y)",
    "Elem(x,1)*y", "ElemT(Elem(x,0)*Elem(y,2), 4, 2)", "Extract(Concat(x,y), 1, 4)", "ExtractT(x*y, 1, 5)",
    "Concat(x*y, x)", "MatVecMult(A, x*y)", "VecMatMult(x+y, A)", "TensorProd(x, y)", "Normalize(x-y+0.1)",
    "Norm2(x-y)", "WeightedSqDist(S, x, y)", "SqNormDiag(x, y)", "SqNormIso(p, x-y)", "SymSqNorm(S, x)",
    "WeightedSqNorm(x*x, y)", "x*p - y", "-x + 2*y", "Exp(x)*Exp(-y) + x*x*y")
  for (formula in formulas) {
    op <- keops_kernel(sprintf("Sum_Reduction(%s, 0)", formula), args)
    e <- matrix(rnorm(N * ncol(op(data))), N)
    S <- function(name, v) { d <- data; d[[name]] <- v; sum(op(unname(d)) * e) }
    for (name in c("x", "y", "b", "A", "S", "p")) {
      if (!grepl(paste0("\\b", name, "\\b"), formula)) next
      got <- keops_grad(op, name)(c(unname(data), list(e)))
      want <- finite_differences(function(v) S(name, v), data[[name]])
      want <- if (name %in% c("A", "S", "p")) matrix(want, 1) else want
      expect_gradient(got, want)
    }
  }
})

test_that("a Hamiltonian is differentiated in q and p, and again through one step of its flow", {
  local_precision("float64")
  set.seed(406)
  n <- 7
  q <- matrix(runif(2 * n), n, 2); p <- matrix(rnorm(2 * n), n, 2)
  # H(q, p) = 1/2 sum_ij exp(-|q_i - q_j|^2) <p_i, p_j>: q and p enter both as i- and j-variables.
  args <- c("qi = Vi(2)", "qj = Vj(2)", "pi = Vi(2)", "pj = Vj(2)")
  K <- keops_kernel("Sum_Reduction(Exp(-SqDist(qi,qj)) * (pi|pj), 0)", args)
  H <- function(q, p) 0.5 * sum(K(list(q, q, p, p)))
  half <- matrix(0.5, n, 1)
  dH <- function(q, p, var) {
    both <- c(paste0(var, "i"), paste0(var, "j"))
    Reduce(`+`, lapply(both, function(v) keops_grad(K, v)(list(q, q, p, p, half))))
  }
  expect_gradient(dH(q, p, "q"), finite_differences(function(v) H(v, p), q))
  expect_gradient(dH(q, p, "p"), finite_differences(function(v) H(q, v), p))
  # One explicit Euler step of the flow, q1 = q + dt dH/dp, and a cost |q1 - target|^2 whose
  # gradient in the initial momentum needs second derivatives (keops_grad of keops_grad).
  dt <- 0.1; target <- matrix(runif(2 * n), n, 2)
  cost <- function(p) { q1 <- q + dt * dH(q, p, "p"); sum((q1 - target)^2) }
  q1 <- q + dt * dH(q, p, "p")
  w <- 2 * (q1 - target) * dt           # d cost / d (dH/dp)
  # d/dp <dH/dp, w>: the gradient operators of dH/dp, differentiated again in pi and pj.
  second <- 0
  for (v in c("pi", "pj")) {
    g1 <- keops_grad(K, v)             # inputs: qi, qj, pi, pj, eta (output-indexed)
    for (u in c("pi", "pj")) {
      g2 <- keops_grad(g1, u)          # inputs: ..., eta, w
      second <- second + g2(list(q, q, p, p, half, w))
    }
  }
  expect_gradient(second, finite_differences(cost, p))
})

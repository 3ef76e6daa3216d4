# Batches (R/batch.R): every member of a batched call equals the call on that member alone (and,
# for some reductions, dense R in float64); shared inputs are broadcast; gradients of shared
# variables sum over the members.

testthat::local_edition(3)

# Member b of a batched input as an unbatched input: x[, , b] of an array (a matrix, or the
# vector of a parameter), x[[b]] of a list, the input itself when shared.
member <- function(x, b, pm = FALSE) {
  if (is.list(x)) return(x[[b]])
  d <- dim(x)
  if (length(d) != 3L) return(x)
  if (d[3L] == 1L) b <- 1L
  if (pm) as.vector(x[, , b]) else matrix(x[, , b], d[1L], d[2L])
}

# Member b of a batched result: a matrix of the array, or the list element (values and indices
# of the selections with both).
result_member <- function(r, b) {
  if (is.list(r) && !is.null(r$values)) return(list(values = result_member(r$values, b),
                                                    indices = result_member(r$indices, b)))
  if (is.list(r)) return(r[[b]])
  d <- dim(r)
  if (length(d) == 3L) return(matrix(r[, , b], d[1L], d[2L]))
  array(r[, , , b], d[1:3])
}

# Checks that op(batch) has B members, each equal to op(member inputs).
expect_members <- function(op, input, B, pms = integer(0), tol = 1e-12, info = NULL) {
  got <- op(input)
  for (b in seq_len(B)) {
    alone <- op(lapply(seq_along(input), function(k) member(input[[k]], b, k %in% pms)))
    expect_equal(result_member(got, b), alone, tolerance = tol, info = paste(info, "member", b))
  }
  invisible(got)
}

arr <- function(n, d, B, lo = -1, hi = 1) array(runif(n * d * B, lo, hi), c(n, d, B))

test_that("every reduction of a batch equals the reduction of each member, both axes", {
  local_precision("float64")
  set.seed(171)
  B <- 5; N <- 13; M <- 17
  x <- arr(N, 3, B); y <- arr(M, 3, B); w <- arr(M, 2, B); u <- arr(N, 2, B)
  reductions <- c("Sum_Reduction(Exp(-SqDist(x, y)) * %s, %d)",
                  "Min_Reduction(SqDist(x, y) + %s, %d)",
                  "Max_Reduction(SqDist(x, y) - %s, %d)",
                  "ArgMin_Reduction(SqDist(x, y) + %s, %d)",
                  "ArgMax_Reduction(SqDist(x, y) + %s, %d)",
                  "Min_ArgMin_Reduction(SqDist(x, y) + %s, %d)",
                  "Max_ArgMax_Reduction(SqDist(x, y) + %s, %d)",
                  "KMin_Reduction(SqDist(x, y) + %s, 4, %d)",
                  "ArgKMin_Reduction(SqDist(x, y) + %s, 4, %d)",
                  "KMin_ArgKMin_Reduction(SqDist(x, y) + %s, 4, %d)",
                  "LogSumExp_Reduction(-SqDist(x, y) * 3 + Elem(%s, 0), %d)",
                  "SumSoftMaxWeight_Reduction(-SqDist(x, y) * 3, %s, %d)")
  for (axis in 0:1) {
    # the weight lives on the reduced side
    wname <- if (axis == 0L) "w" else "u"
    for (red in reductions) {
      formula <- sprintf(red, wname, axis)
      op <- keops_kernel(formula, c("x = Vi(3)", "y = Vj(3)", "w = Vj(2)", "u = Vi(2)"))
      got <- expect_members(op, list(x, y, w, u), B, info = formula)
      if (!is.list(got)) expect_identical(dim(got)[length(dim(got))], as.integer(B), info = formula)
    }
  }
})

test_that("a batch equals dense R in float64 (Gaussian sum, log-sum-exp, arg-min)", {
  local_precision("float64")
  set.seed(172)
  B <- 4; N <- 11; M <- 23
  x <- arr(N, 2, B); y <- arr(M, 2, B); b <- arr(M, 1, B)
  s <- array(c(0.5, 1, 2, 4), c(1, 1, B))
  D2 <- function(k) outer(rowSums(x[, , k]^2), rowSums(y[, , k]^2), "+") - 2 * x[, , k] %*% t(y[, , k])
  gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", c("x = Vi(2)", "y = Vj(2)", "b = Vj(1)", "s = Pm(1)"))
  lse <- keops_kernel("LogSumExp_Reduction(-s * SqDist(x, y), 1)", c("x = Vi(2)", "y = Vj(2)", "s = Pm(1)"))
  amin <- keops_kernel("ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(2)", "y = Vj(2)"))
  g <- gauss(list(x, y, b, s)); l <- lse(list(x, y, s)); a <- amin(list(x, y))
  expect_identical(dim(g), as.integer(c(N, 1, B)))
  expect_identical(dim(l), as.integer(c(M, 1, B)))
  expect_identical(dim(a), as.integer(c(N, 1, B)))
  for (k in seq_len(B)) {
    E <- exp(-s[k] * D2(k))
    expect_equal(c(g[, , k]), c(E %*% b[, , k]), tolerance = 1e-12)
    expect_equal(c(l[, , k]), log(colSums(E)), tolerance = 1e-12)
    expect_identical(c(a[, , k]), apply(D2(k), 1, which.min))
  }
})

test_that("inputs of batch one, plain matrices and parameters are shared by every member", {
  local_precision("float64")
  set.seed(173)
  B <- 6; N <- 9; M <- 14
  op <- keops_kernel("Sum_Reduction(Exp(-p * SqDist(x, y)) * b + q, 0)",
                     c("x = Vi(2)", "y = Vj(2)", "b = Vj(3)", "p = Pm(1)", "q = Pm(3)"))
  x <- arr(N, 2, B); y <- arr(M, 2, B); b <- arr(M, 3, B)
  p <- array(runif(B), c(1, 1, B)); q <- array(runif(3 * B), c(1, 3, B))
  cases <- list(
    "all batched" = list(x, y, b, p, q),
    "x shared" = list(x[, , 1], y, b, p, q),
    "x of batch one" = list(x[, , 2, drop = FALSE], y, b, p, q),
    "y and b shared" = list(x, y[, , 1], b[, , 1], p, q),
    "p shared" = list(x, y, b, 0.7, q),
    "q shared, p batched" = list(x, y, b, p, c(1, 2, 3)),
    "parameters as lists" = list(x, y, b, as.list(p), lapply(1:B, function(k) q[, , k]))
  )
  for (name in names(cases)) {
    got <- expect_members(op, cases[[name]], B, pms = 4:5, info = name)
    expect_identical(length(got) == B || dim(got)[3L] == B, TRUE, info = name)
  }
})

test_that("lists of members with different numbers of rows give lists of results", {
  local_precision("float64")
  set.seed(174)
  Ns <- c(3L, 1L, 12L, 7L); Ms <- c(5L, 2L, 1L, 9L)
  x <- lapply(Ns, function(n) matrix(runif(2 * n), n, 2))
  y <- lapply(Ms, function(m) matrix(runif(2 * m), m, 2))
  b <- lapply(Ms, function(m) runif(m))       # a vector: one value per point
  for (axis in 0:1) {
    op <- keops_kernel(sprintf("Sum_Reduction(Exp(-SqDist(x, y)) * b, %d)", axis),
                       c("x = Vi(2)", "y = Vj(2)", "b = Vj(1)"))
    if (axis == 1L) b2 <- lapply(Ns, function(n) runif(n)) else b2 <- b
    if (axis == 1L) op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 1)",
                                       c("x = Vi(2)", "y = Vj(2)", "b = Vi(1)"))
    got <- expect_members(op, list(x, y, b2), 4L, info = paste("axis", axis))
    expect_type(got, "list")
    expect_identical(vapply(got, nrow, 1L), if (axis == 0L) Ns else Ms)
  }
  # indices count from the start of each member
  amin <- keops_kernel("Min_ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(2)", "y = Vj(2)"))
  got <- expect_members(amin, list(x, y), 4L)
  expect_true(all(unlist(got$indices) >= 1L))
  expect_true(all(vapply(1:4, function(k) all(got$indices[[k]] <= Ms[k]), NA)))
})

test_that("a batch of one member is the unbatched call, as an n x d x 1 array", {
  local_precision("float64")
  set.seed(175)
  x <- arr(10, 3, 1); y <- arr(21, 3, 1)
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * y, 0)", c("x = Vi(3)", "y = Vj(3)"))
  got <- op(list(x, y))
  expect_identical(dim(got), c(10L, 3L, 1L))
  expect_identical(got[, , 1], op(list(x[, , 1], y[, , 1])))
})

test_that("large batches: 300 members of odd sizes, CPU float32 against float64", {
  set.seed(176)
  B <- 300; N <- 7; M <- 5
  x <- arr(N, 3, B); y <- arr(M, 3, B)
  op <- keops_kernel("LogSumExp_Reduction(-SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  local_precision("float32")
  got <- op(list(x, y))
  local_precision("float64")
  for (k in c(1, 77, 300)) {
    D2 <- outer(rowSums(x[, , k]^2), rowSums(y[, , k]^2), "+") - 2 * x[, , k] %*% t(y[, , k])
    expect_equal(c(got[, , k]), log(rowSums(exp(-D2))), tolerance = 1e-5)
  }
})

test_that("gradients of a batch: batched variables per member, shared ones summed over members", {
  local_precision("float64")
  set.seed(177)
  B <- 4; N <- 8; M <- 11
  x <- arr(N, 2, B); y <- arr(M, 2, B); b <- arr(M, 2, B)
  s <- array(runif(B, 0.5, 2), c(1, 1, B))
  e <- arr(N, 2, B)
  op <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", c("x = Vi(2)", "y = Vj(2)", "b = Vj(2)", "s = Pm(1)"))
  alone <- function(g, inputs, k) g(lapply(seq_along(inputs), function(v) member(inputs[[v]], k, v == 4L)))
  for (var in c("x", "y", "b", "s")) {
    g <- keops_grad(op, var)
    # every input batched: each member's gradient
    inputs <- list(x, y, b, s, e)
    got <- g(inputs)
    for (k in seq_len(B)) expect_equal(result_member(got, k), alone(g, inputs, k), tolerance = 1e-12, info = var)
    # the variable shared: the sum of its gradients in the members
    shared <- inputs
    shared[[match(var, c("x", "y", "b", "s"))]] <- if (var == "s") 0.8 else inputs[[match(var, c("x", "y", "b"))]][, , 1]
    got <- g(shared)
    want <- Reduce(`+`, lapply(seq_len(B), function(k) alone(g, shared, k)))
    expect_equal(got, want, tolerance = 1e-12, info = paste(var, "shared"))
  }
  # against finite differences of the batched forward: d/ds_b of sum(op(...) * e)
  S <- function(sv) sum(op(list(x, y, b, array(sv, c(1, 1, B)))) * e)
  gs <- keops_grad(op, "s")(list(x, y, b, s, e))
  expect_equal(c(gs), finite_differences(S, c(s)), tolerance = 1e-7)
})

test_that("gradients of batched LogSumExp and Min reductions, and of the Grad formula", {
  local_precision("float64")
  set.seed(178)
  B <- 3; N <- 6; M <- 9
  x <- arr(N, 2, B); y <- arr(M, 2, B); e <- arr(M, 1, B)
  lse <- keops_kernel("LogSumExp_Reduction(-SqDist(x, y) * 2, 1)", c("x = Vi(2)", "y = Vj(2)"))
  mn <- keops_kernel("Min_Reduction(SqDist(x, y), 1)", c("x = Vi(2)", "y = Vj(2)"))
  for (op in list(lse, mn)) {
    for (var in c("x", "y")) {
      g <- keops_grad(op, var)
      expect_members(g, list(x, y, e), B, tol = 1e-12, info = var)
    }
  }
  gf <- keops_kernel("Grad(LogSumExp_Reduction(-SqDist(x, y) * 2, 1), y, e)",
                     c("e = Vj(1)", "x = Vi(2)", "y = Vj(2)"))
  expect_members(gf, list(e, x, y), B)
  expect_equal(gf(list(e, x, y)), keops_grad(lse, "y")(list(x, y, e)), tolerance = 1e-12)
})

test_that("batched LazyTensors: reductions and grad() per member", {
  local_precision("float64")
  set.seed(179)
  B <- 4; N <- 10; M <- 7
  x <- arr(N, 3, B); y <- arr(M, 3, B)
  lam <- array(c(0.5, 1, 1.5, 2), c(1, 1, B))
  K <- exp(-rkeops::sqdist(Vi(x), Vj(y)) / Pm(lam))
  expect_identical(dim(K), as.integer(c(N, M, 1)))
  s <- sum(K, "j")
  l <- logsumexp(-rkeops::sqdist(Vi(x), Vj(y)), "i")
  kn <- argKmin(rkeops::sqdist(Vi(x), Vj(y)), 9, "j")     # K > M: padded with NA, as unbatched
  gx <- grad(rkeops::sqdist(Vi(x), Vj(y)), arr(N, 1, B), "Sum", Vi(x), "j")
  expect_identical(dim(kn), as.integer(c(N, 9, B)))
  for (k in seq_len(B)) {
    expect_equal(s[, , k], c(sum(exp(-rkeops::sqdist(Vi(x[, , k]), Vj(y[, , k])) / lam[k]), "j")), tolerance = 1e-12)
    expect_equal(l[, , k], c(logsumexp(-rkeops::sqdist(Vi(x[, , k]), Vj(y[, , k])), "i")), tolerance = 1e-12)
    expect_identical(kn[, , k], argKmin(rkeops::sqdist(Vi(x[, , k]), Vj(y[, , k])), 9, "j"))
  }
  expect_identical(dim(gx), as.integer(c(N, 3, B)))
  # sum_j d/dx_i |x_i - y_j|^2 e_i = 2 e_i (M x_i - sum_j y_j) per member
  e1 <- arr(N, 1, B)
  gx <- grad(rkeops::sqdist(Vi(x), Vj(y)), e1, "Sum", Vi(x), "j")
  for (k in seq_len(B)) {
    want <- 2 * c(e1[, , k]) * (M * x[, , k] - matrix(colSums(y[, , k]), N, 3, byrow = TRUE))
    expect_equal(gx[, , k], want, tolerance = 1e-12)
  }
  # lists of members give lists
  xl <- lapply(1:3, function(k) matrix(runif(3 * (k + 2)), k + 2, 3))
  yl <- lapply(1:3, function(k) matrix(runif(3 * (5 - k)), 5 - k, 3))
  r <- sum(exp(-rkeops::sqdist(Vi(xl), Vj(yl))), "j")
  expect_type(r, "list")
  for (k in 1:3) expect_equal(r[[k]], sum(exp(-rkeops::sqdist(Vi(xl[[k]]), Vj(yl[[k]]))), "j"), tolerance = 1e-12)
  expect_output(print(Vi(x)), "batch of 4 members")
})

test_that("bad batches are errors that say what is wrong", {
  sqdist <- rkeops::sqdist
  set.seed(180)
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(2)", "y = Vj(2)", "b = Vj(1)"))
  x <- arr(5, 2, 3); y <- arr(4, 2, 3); b <- arr(4, 1, 3)
  expect_keops_error(op(list(x, arr(4, 2, 2), b)), "same number of members", "\\('y'\\) has 2", "\\('x'\\) has 3")
  expect_keops_error(op(list(x, y, arr(6, 1, 3))), "member 1 has 4 rows in input 2 \\('y'\\) but 6 in input 3 \\('b'\\)")
  expect_keops_error(op(list(x, y, matrix(1, 6, 1))), "'b'.*shared by every member.*4.*not 6")
  expect_keops_error(op(list(x, arr(4, 3, 3), b)), "'y'.*member 1.*2 columns")
  expect_keops_error(op(list(x, list(), b)), "'y'.*empty batch")
  expect_keops_error(op(list(x, list(y[, , 1], "a", y[, , 3]), b)), "'y'.*member 2.*numeric")
  expect_keops_error(op(list(x, y, b), ranges = from_matrix(cbind(1, 15), cbind(1, 12), matrix(TRUE))),
                     "'ranges' cannot be combined with batched inputs")
  expect_keops_error(op(list(x, y, b), inner_dim = "row"), "inner_dim = \"row\"")
  kn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 3, 0)", c("x = Vi(2)", "y = Vj(2)"))
  expect_keops_error(kn(list(x, list(y[, , 1], y[1:2, , 2], y[, , 3]))), "K = 3.*member 2 \\(2\\)")
  po <- keops_kernel("Sum_Reduction(p * y, 1)", c("p = Pm(1)", "y = Vj(2)"))
  expect_keops_error(po(list(1, y)), "needs at least one Vi variable")
  expect_keops_error(op(list(x, y, list(1:4, 1:4, 1:5))), "member 3 has 4 rows in input 2 \\('y'\\) but 5")
  expect_keops_error(Vi(array(1i, c(2, 2, 2))), "batches of complex numbers")
  expect_keops_error(Pm(list("a")), "must be a batch of numeric vectors")
})

test_that("the gradient of every differentiable reduction of a batch equals each member's, both axes", {
  local_precision("float64")
  set.seed(181)
  B <- 3; N <- 7; M <- 10
  x <- arr(N, 2, B); y <- arr(M, 2, B); w <- arr(M, 1, B, 0.5, 2); u <- arr(N, 1, B, 0.5, 2)
  reductions <- c("Sum_Reduction(Exp(-SqDist(x, y)) * %s, %d)",
                  "Min_Reduction(SqDist(x, y) + %s, %d)",
                  "Max_Reduction(SqDist(x, y) * %s, %d)",
                  "Min_ArgMin_Reduction(SqDist(x, y) + %s, %d)",
                  "Max_ArgMax_Reduction(SqDist(x, y) * %s, %d)",
                  "KMin_Reduction(SqDist(x, y) + %s, 3, %d)",
                  "KMin_ArgKMin_Reduction(SqDist(x, y) + %s, 3, %d)",
                  "ArgMin_Reduction(SqDist(x, y) + %s, %d)",
                  "LogSumExp_Reduction(-SqDist(x, y) * %s, %d)",
                  "LogSumExpWeight_Reduction(-SqDist(x, y), %s, %d)",
                  "SumSoftMaxWeight_Reduction(-SqDist(x, y), %s, %d)")
  for (axis in 0:1) {
    wname <- if (axis == 0L) "w" else "u"
    n_out <- if (axis == 0L) N else M
    for (red in reductions) {
      formula <- sprintf(red, wname, axis)
      op <- keops_kernel(formula, c("x = Vi(2)", "y = Vj(2)", "w = Vj(1)", "u = Vi(1)"))
      info <- attr(op, "rkeops")$info
      e <- arr(n_out, info$grad_dim, B)
      for (var in c("x", "y", wname)) {
        expect_members(keops_grad(op, var), list(x, y, w, u, e), B, tol = 1e-11,
                       info = paste(formula, "in", var))
      }
    }
  }
})

test_that("a batch of one member, named inputs and lists: the plain call, the batch's shape", {
  local_precision("float64")
  set.seed(182)
  op <- keops_kernel("Min_ArgMin_Reduction(SqDist(x, y) * p, 0)", c("x = Vi(2)", "y = Vj(2)", "p = Pm(1)"))
  x <- arr(6, 2, 1); y <- arr(9, 2, 1)
  plain <- op(list(x[, , 1], y[, , 1], 2))
  got <- op(list(p = array(2, c(1, 1, 1)), y = y, x = x))
  expect_identical(got$values, array(plain$values, c(6L, 1L, 1L)))
  expect_identical(got$indices, array(plain$indices, c(6L, 1L, 1L)))
  got <- op(list(list(x[, , 1]), y, 2))
  expect_identical(got, list(values = list(plain$values), indices = list(plain$indices)))
  # the gradient in a batch of one member: the plain gradient (a shared input)
  e <- arr(6, 1, 1)
  g <- keops_grad(keops_kernel("Sum_Reduction(SqDist(x, y) * p, 0)", c("x = Vi(2)", "y = Vj(2)", "p = Pm(1)")), "x")
  expect_identical(g(list(x, y, 2, e)), g(list(x[, , 1], y[, , 1], 2, e[, , 1])))
})

test_that("a KMin gradient input shaped like the values (n x K x d) is one problem, or shared", {
  local_precision("float64")
  set.seed(183)
  N <- 6; M <- 9; B <- 3
  op <- keops_kernel("KMin_Reduction(x * w - y, 4, 0)", c("x = Vi(2)", "y = Vj(2)", "w = Pm(1)"))
  x <- arr(N, 2, B); y <- arr(M, 2, B)
  e <- array(rnorm(N * 4 * 2), c(N, 4, 2))          # like the values of one problem
  g <- keops_grad(op, "x")
  plain <- g(list(x[, , 1], y[, , 1], 0.5, e))
  expect_identical(dim(plain), c(6L, 2L))
  expect_identical(plain, g(list(x[, , 1], y[, , 1], 0.5, matrix(e, N))))
  # with batched points, the same e for every member
  got <- g(list(x, y, 0.5, e))
  for (k in seq_len(B)) expect_equal(got[, , k], g(list(x[, , k], y[, , k], 0.5, e)), tolerance = 1e-12)
  # a batch of gradient inputs: n x (K d) x B
  eb <- arr(N, 8, B)
  got <- g(list(x, y, 0.5, eb))
  for (k in seq_len(B)) expect_equal(got[, , k], g(list(x[, , k], y[, , k], 0.5, eb[, , k])), tolerance = 1e-12)
})

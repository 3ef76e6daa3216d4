# keops_iterate() (R/iterate.R): a loop of reductions in one call equals the same loop in dense R
# (float64) and the loop of operator calls; batches equal their members run alone.

testthat::local_edition(3)

lse_rows <- function(A) {   # log-sum-exp of each row
  m <- apply(A, 1L, max)
  m + log(rowSums(exp(A - m)))
}

# The same iterations in dense R, float64.
sinkhorn_dense <- function(x, y, lmu, lnu, s, iterations, f = rep(0, nrow(x)), g = rep(0, nrow(y))) {
  C <- sqdist(x, y) * s
  for (it in seq_len(iterations)) {
    g <- lse_rows(t(lmu - f - C))
    f <- lse_rows(rep(1, nrow(x)) %o% (lnu - g) - C)
  }
  list(f = f, g = g)
}

log_hist <- function(n) {
  h <- runif(n, 0.1, 1)
  log(h / sum(h))
}

test_that("a Sinkhorn loop equals dense R in float64, and the loop of calls in float32", {
  set.seed(1801)
  N <- 37; M <- 29
  x <- rmat(N, 2, 0, 1); y <- rmat(M, 2, 0, 1)
  lmu <- log_hist(N); lnu <- log_hist(M)
  ops <- sinkhorn_steps(2L)
  input <- list(x = x, y = y, lmu = lmu, lnu = lnu, s = 7, f = rep(0, N), g = rep(0, M))
  local_precision("float64")
  got <- keops_iterate(ops, input, iterations = 25)
  want <- sinkhorn_dense(x, y, lmu, lnu, 7, 25)
  expect_named(got, c("g", "f"))
  expect_equal(dim(got$f), c(N, 1L))
  expect_equal(as.vector(got$f), want$f, tolerance = 1e-12)
  expect_equal(as.vector(got$g), want$g, tolerance = 1e-12)
  # the same loop as calls of the operators, in float32 (inputs rounded alike by both)
  local_precision("float32")
  got32 <- keops_iterate(ops, input, iterations = 25)
  f <- input$f; g <- input$g
  for (it in 1:25) {
    g <- ops$g(list(x, y, lmu, f, 7))
    f <- ops$f(list(x, y, lnu, g, 7))
  }
  expect_equal(got32$f, f, tolerance = 1e-6)
  expect_equal(got32$g, g, tolerance = 1e-6)
  expect_equal(as.vector(got32$f), want$f, tolerance = 1e-4)
})

test_that("zero iterations give the initial values back; other reductions and a self-update", {
  local_precision("float64")
  set.seed(1802)
  N <- 11; M <- 9
  x <- rmat(N, 1); y <- rmat(M, 1)
  ops <- sinkhorn_steps()
  input <- list(x = x, y = y, lmu = log_hist(N), lnu = log_hist(M), s = 2,
                f = seq_len(N) / 7, g = seq_len(M) / 5)
  got <- keops_iterate(ops, input, iterations = 0)
  expect_equal(as.vector(got$f), seq_len(N) / 7)
  expect_equal(as.vector(got$g), seq_len(M) / 5)
  # v <- sum_j K(x_i, x_j) v_j / N: the operator reads the variable it replaces (on both sides
  # of the reduction: v_i and v_j), a Sum reduction of dimension 2.
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, z)) * v / n, 0)",
                     c("x = Vi(1)", "z = Vj(1)", "v = Vj(2)", "n = Pm(1)"))
  v0 <- rmat(N, 2)
  got <- keops_iterate(list(v = op), list(x = x, z = x, v = v0, n = N), iterations = 4)
  K <- exp(-sqdist(x, x))
  v <- v0
  for (it in 1:4) v <- K %*% v / N
  expect_equal(got$v, v, tolerance = 1e-12)
  # a Max reduction on axis 1, the iterated value a j-variable read as i-variable by the other op
  up <- keops_kernel("Max_Reduction(a - SqDist(x, y), 1)", c("x = Vi(1)", "y = Vj(1)", "a = Vi(1)"))
  down <- keops_kernel("Max_Reduction(b - SqDist(x, y), 0)", c("x = Vi(1)", "y = Vj(1)", "b = Vj(1)"))
  a0 <- rmat(N, 1)
  got <- keops_iterate(list(b = up, a = down), list(x = x, y = y, a = a0, b = rep(0, M)), 3)
  D <- sqdist(x, y)
  a <- as.vector(a0)
  for (it in 1:3) {
    b <- apply(a - D, 2L, max)
    a <- apply(rep(1, N) %o% b - D, 1L, max)
  }
  expect_equal(as.vector(got$a), a, tolerance = 1e-12)
  expect_equal(as.vector(got$b), b, tolerance = 1e-12)
})

test_that("a batch of Sinkhorn problems equals each member run alone; shared values broadcast", {
  local_precision("float64")
  set.seed(1803)
  B <- 6; N <- 23; M <- 19
  x <- rmat(N, 1, 0, 1); y <- rmat(M, 1, 0, 1)
  lmu <- array(replicate(B, log_hist(N)), c(N, 1, B))
  lnu <- log_hist(M)                                          # shared by every member
  s <- array(c(3, 5, 7, 9, 11, 13), c(1, 1, B))                # a parameter per member
  ops <- sinkhorn_steps()
  got <- keops_iterate(ops, list(x = x, y = y, lmu = lmu, lnu = lnu, s = s,
                                 f = rep(0, N), g = rep(0, M)), iterations = 15)
  expect_equal(dim(got$f), c(N, 1L, B))
  expect_equal(dim(got$g), c(M, 1L, B))
  for (b in seq_len(B)) {
    want <- sinkhorn_dense(x, y, lmu[, , b], lnu, s[, , b], 15)
    expect_equal(got$f[, 1, b], want$f, tolerance = 1e-12, info = paste("member", b))
    expect_equal(got$g[, 1, b], want$g, tolerance = 1e-12, info = paste("member", b))
  }
  # a batch of one member is the plain problem
  one <- keops_iterate(ops, list(x = x, y = y, lmu = lmu[, , 1, drop = FALSE], lnu = lnu,
                                 s = s[, , 1, drop = FALSE], f = rep(0, N), g = rep(0, M)), 15)
  expect_equal(one$f[, 1, 1], sinkhorn_dense(x, y, lmu[, , 1], lnu, 3, 15)$f, tolerance = 1e-12)
})

test_that("a ragged batch (lists of members of different sizes) gives lists", {
  local_precision("float64")
  set.seed(1804)
  Ns <- c(7, 31, 16); Ms <- c(12, 5, 20)
  xs <- lapply(Ns, function(n) rmat(n, 3)); ys <- lapply(Ms, function(m) rmat(m, 3))
  lmus <- lapply(Ns, log_hist); lnus <- lapply(Ms, log_hist)
  f0 <- lapply(Ns, function(n) rep(0, n)); g0 <- lapply(Ms, function(m) rep(0, m))
  got <- keops_iterate(sinkhorn_steps(3L), list(x = xs, y = ys, lmu = lmus, lnu = lnus, s = 0.5,
                                              f = f0, g = g0), iterations = 9)
  expect_type(got$f, "list")
  expect_length(got$f, 3L)
  for (b in 1:3) {
    want <- sinkhorn_dense(xs[[b]], ys[[b]], lmus[[b]], lnus[[b]], 0.5, 9)
    expect_equal(as.vector(got$f[[b]]), want$f, tolerance = 1e-12)
    expect_equal(as.vector(got$g[[b]]), want$g, tolerance = 1e-12)
  }
})

test_that("keops_iterate() says what is wrong with its arguments", {
  ops <- sinkhorn_steps()
  x <- rmat(5, 1); y <- rmat(4, 1)
  input <- list(x = x, y = y, lmu = rep(0, 5), lnu = rep(0, 4), s = 1, f = rep(0, 5), g = rep(0, 4))
  expect_error(keops_iterate(unname(ops), input, 2), "'ops' must be a named list",
               class = "rkeops_error_input")
  expect_error(keops_iterate(list(g = ops$g, f = sum), input, 2), "ops\\$f must be an operator",
               class = "rkeops_error_input")
  expect_error(keops_iterate(ops, input, -1), "'iterations' must be a whole number",
               class = "rkeops_error_input")
  expect_error(keops_iterate(ops, input, 1.5), "'iterations' must be a whole number",
               class = "rkeops_error_input")
  expect_error(keops_iterate(ops, unname(input), 2), "'input' must be a list that names",
               class = "rkeops_error_input")
  expect_error(keops_iterate(ops, input[-1], 2), "no value for 'x'", class = "rkeops_error_input")
  expect_error(keops_iterate(list(h = ops$g), c(input, h = 1), 2), "'h' is not a variable",
               class = "rkeops_error_input")
  expect_error(keops_iterate(list(s = ops$g), input, 2), "'s' is a parameter", class = "rkeops_error_input")
  # a result of the wrong shape for the variable it replaces: f is 5 x 1, g's result 4 x 1
  expect_error(keops_iterate(list(f = ops$g), input, 2), "its result is 4 x 1, but buffer 'f' is 5 x 1",
               class = "rkeops_error_input")
  knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 2, 0)", c("x = Vi(1)", "y = Vj(1)"))
  expect_error(keops_iterate(list(x = knn), list(x = x, y = y), 1), "cannot be iterated",
               class = "rkeops_error_input")
  bad <- input
  bad$x <- "a"
  expect_error(keops_iterate(ops, bad, 1), "input 'x'", class = "rkeops_error_input")
})

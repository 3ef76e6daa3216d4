# Batches in programs (R/program-batch.R): a batched run of keops_program() equals its members run
# one by one and dense R (float64), with members of different sizes, traces and stopping rules per
# batch, gradients, and errors that name the argument.

testthat::local_edition(3)

lse_rows <- function(A) {   # log-sum-exp of each row
  m <- apply(A, 1L, max)
  m + log(rowSums(exp(A - m)))
}

log_hist <- function(n) {
  h <- runif(n, 0.1, 1)
  log(h / sum(h))
}

sinkhorn_dense <- function(x, y, lmu, lnu, s, iterations) {
  C <- sqdist(x, y) * s
  f <- rep(0, nrow(x)); trace <- matrix(0, iterations, nrow(x))
  for (it in seq_len(iterations)) {
    g <- lse_rows(t(lmu - f - C))
    f <- lse_rows(rep(1, nrow(x)) %o% (lnu - g) - C)
    trace[it, ] <- f
  }
  list(f = f, g = g, trace = trace)
}

# Lloyd's K-means in plain R from the centres c, until no centre moves: list(c, labels, iterations,
# moved (the squared moves of each iteration)).
lloyd_dense <- function(x, c) {
  moved <- numeric(0)
  repeat {
    labels <- apply(sqdist(x, c), 1L, which.min)
    new <- c
    for (k in seq_len(nrow(c))) if (any(labels == k)) new[k, ] <- colMeans(x[labels == k, , drop = FALSE])
    moved <- c(moved, sum((new - c)^2))
    c <- new
    if (moved[length(moved)] == 0) break
  }
  list(c = c, labels = labels, iterations = length(moved), moved = moved)
}

kmeans_steps <- function() {
  list(old = keops_map("c", "c = Vj(2)"),
       labels = keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c("x = Vi(2)", "c = Vj(2)")),
       sums = keops_kernel("Sum_Reduction(Equal(labels, j) * x, 1)", c("labels = Vi(1)", "x = Vi(2)", "j = Vj(1)")),
       counts = keops_kernel("Sum_Reduction(Equal(labels, j), 1)", c("labels = Vi(1)", "j = Vj(1)")),
       c = keops_map("IfElse(counts - 0.5, sums / counts, c)", c("sums = Vj(2)", "counts = Vj(1)", "c = Vj(2)")),
       moved = keops_kernel("Sum_Reduction(SqDist(c, old), 1)", c("c = Vi(2)", "old = Vi(2)")))
}

test_that("a batch of Sinkhorn problems equals each member run alone and dense R; traces per member", {
  local_precision("float64")
  set.seed(5401)
  B <- 5; N <- 37; M <- 29
  x <- rmat(N, 2, 0, 1)                                    # shared by every member
  y <- array(runif(M * 2 * B), c(M, 2, B))
  lmu <- array(replicate(B, log_hist(N)), c(N, 1, B))
  lnu <- log_hist(M)
  s <- array(c(3, 5, 7, 9, 11), c(1, 1, B))               # a parameter per member
  prog <- keops_program(sinkhorn_steps(2L), iterations = 12, trace = "f")
  input <- list(x = x, y = y, lmu = lmu, lnu = lnu, s = s, f = rep(0, N), g = rep(0, M))
  got <- prog(input)
  expect_equal(dim(got$f), c(N, 1L, B))
  expect_equal(dim(got$g), c(M, 1L, B))
  expect_identical(attr(got, "iterations"), 12L)
  expect_equal(dim(attr(got, "trace")$f), c(12L, N, B))
  for (b in seq_len(B)) {
    want <- sinkhorn_dense(x, y[, , b], lmu[, , b], lnu, s[, , b], 12)
    expect_equal(got$f[, 1, b], want$f, tolerance = 1e-12, info = paste("member", b))
    expect_equal(got$g[, 1, b], want$g, tolerance = 1e-12, info = paste("member", b))
    expect_equal(attr(got, "trace")$f[, , b], want$trace, tolerance = 1e-12, info = paste("member", b))
    one <- prog(list(x = x, y = y[, , b], lmu = lmu[, , b], lnu = lnu, s = s[, , b], f = rep(0, N), g = rep(0, M)))
    expect_equal(got$f[, , b], one$f[, 1], tolerance = 1e-14)
  }
  # keops_iterate() is the same program, without the attributes
  it <- keops_iterate(sinkhorn_steps(2L), input, iterations = 12)
  expect_named(it, c("g", "f"))
  expect_equal(it$f, got$f, tolerance = 1e-14)
  expect_null(attr(it, "trace"))
})

test_that("a ragged batch of K-means: labels within each member, one stopping rule for the batch", {
  local_precision("float64")
  set.seed(5402)
  Ns <- c(101, 45, 77)
  xs <- lapply(Ns, function(n) matrix(rnorm(2 * n), n) + rep(c(0, 3), each = n))
  cs <- lapply(xs, function(x) x[c(1, 5, 9, 13), ])
  prog <- keops_program(kmeans_steps(), iterations = 50, until = "moved", tol = 1e-300, trace = "moved",
                        output = c("c", "labels", "moved"))
  got <- prog(list(x = xs, c = cs, j = 1:4))
  expect_type(got$c, "list")
  want <- lapply(1:3, function(b) lloyd_dense(xs[[b]], cs[[b]]))
  for (b in 1:3) {
    expect_equal(got$c[[b]], want[[b]]$c, tolerance = 1e-12, info = paste("member", b))
    expect_equal(as.vector(got$labels[[b]]), want[[b]]$labels, info = paste("member", b))
  }
  # the rule reads all the members as one buffer: the batch stops when every member has converged
  its <- vapply(want, function(w) w$iterations, 1)
  expect_gt(max(its), min(its))
  expect_identical(attr(got, "iterations"), as.integer(max(its)))
  moved <- Reduce(`+`, lapply(want, function(w) c(w$moved, rep(0, max(its) - length(w$moved)))))
  expect_equal(as.vector(attr(got, "trace")$moved), moved, tolerance = 1e-12)
  expect_equal(as.vector(got$moved), 0)
})

test_that("batched parameters in maps, batches of one shared, and a step's own ranges in every member", {
  local_precision("float64")
  set.seed(5403)
  scale <- keops_program(list(y = keops_map("x * w + v", c("x = Vi(3)", "w = Pm(1)", "v = Pm(3)"))))
  x <- array(runif(3 * 7 * 4), c(7, 3, 4))
  got <- scale(list(x = x, w = array(1:4, c(1, 1, 4)), v = array(c(1, 2, 3), c(1, 3, 1))))
  want <- sweep(x, 3, 1:4, "*") + rep(c(1, 2, 3), each = 7)
  expect_equal(got$y, want, tolerance = 1e-14)
  # ranges of one member (from_matrix()), applied in each member's block
  N <- 33; M <- 26; B <- 3
  bi <- cbind(c(1, 12, 25), c(11, 24, 33)); bj <- cbind(c(1, 9, 20), c(8, 19, 26))
  r <- from_matrix(bi, bj, matrix(c(TRUE, FALSE, TRUE, TRUE, TRUE, FALSE, FALSE, TRUE, TRUE), 3))
  f_op <- keops_kernel("LogSumExp_Reduction(-g - SqDist(x, y) * 4, 0)", c("x = Vi(2)", "y = Vj(2)", "g = Vj(1)"))
  g_op <- keops_kernel("LogSumExp_Reduction(-f - SqDist(x, y) * 4, 1)", c("x = Vi(2)", "y = Vj(2)", "f = Vi(1)"))
  prog <- keops_program(list(g = keops_step(g_op, r), f = keops_step(f_op, r)), iterations = 4)
  xs <- array(runif(2 * N * B), c(N, 2, B)); ys <- array(runif(2 * M * B), c(M, 2, B))
  got <- prog(list(x = xs, y = ys, f = matrix(0, N), g = matrix(0, M)))
  for (b in seq_len(B)) {
    f <- matrix(0, N); g <- matrix(0, M)
    for (t in 1:4) {
      g <- g_op(list(xs[, , b], ys[, , b], f), ranges = r)
      f <- f_op(list(xs[, , b], ys[, , b], g), ranges = r)
    }
    expect_equal(got$f[, , b], f[, 1], tolerance = 1e-12, info = paste("member", b))
    expect_equal(got$g[, , b], g[, 1], tolerance = 1e-12, info = paste("member", b))
  }
  # members of different sizes cannot share one member's ranges
  e <- tryCatch(prog(list(x = list(xs[, , 1], xs[-1, , 2]), y = list(ys[, , 1], ys[, , 2]), f = matrix(0, N),
                          g = matrix(0, M))), error = identity)
  expect_s3_class(e, "rkeops_error_input")
})

test_that("the gradient of a batched program is each member's; a shared input's sums the members'", {
  local_precision("float64")
  set.seed(5404)
  prog <- keops_program(list(
    f = keops_kernel("Sum_Reduction(Exp(-SqDist(x, y) * s) * f, 0)", c("x = Vi(2)", "y = Vj(2)", "f = Vj(1)", "s = Pm(1)")),
    loss = keops_kernel("Sum_Reduction(f * f, 1)", "f = Vi(1)")), iterations = 2, output = c("f", "loss"))
  Ns <- c(9, 14, 5)
  xs <- lapply(Ns, function(n) rmat(n, 2))
  fs <- lapply(Ns, function(n) runif(n))
  got <- keops_program_grad(prog, list(x = xs, y = xs, f = fs, s = 0.7), of = "loss", wrt = c("x", "f", "s"))
  expect_type(got$x, "list")
  s_total <- 0; loss_total <- 0
  for (b in 1:3) {
    one <- keops_program_grad(prog, list(x = xs[[b]], y = xs[[b]], f = fs[[b]], s = 0.7), of = "loss",
                              wrt = c("x", "f", "s"))
    expect_equal(got$x[[b]], one$x, tolerance = 1e-12, info = paste("member", b))
    expect_equal(as.vector(got$f[[b]]), as.vector(one$f), tolerance = 1e-12, info = paste("member", b))
    expect_equal(attr(got, "outputs")$f[[b]], attr(one, "outputs")$f, tolerance = 1e-12)
    s_total <- s_total + one$s
    loss_total <- loss_total + attr(one, "outputs")$loss
  }
  # the loss, a reduction to one row, is the sum over the members; so is the shared s's gradient
  expect_equal(as.vector(attr(got, "outputs")$loss), as.vector(loss_total), tolerance = 1e-12)
  expect_equal(got$s, s_total, tolerance = 1e-10)
  # a shared y (copied to every member): the gradient of the sum over the members
  x <- array(rmat(8 * 3, 2), c(8, 2, 3)); y <- rmat(8, 2); f <- runif(8)
  got <- keops_program_grad(prog, list(x = x, y = y, f = f, s = 0.7), of = "loss", wrt = "y")
  expect_equal(dim(got$y), c(8L, 2L))
  fd <- finite_differences(function(v) {
    sum(vapply(1:3, function(b) as.vector(prog(list(x = x[, , b], y = matrix(v, 8), f = f, s = 0.7))$loss), 1))
  }, as.vector(y))
  expect_equal(as.vector(got$y), fd, tolerance = 1e-6)
  # a buffer per member differentiated with weights: a batch like the buffer, or one member's shared
  w <- array(runif(8 * 3), c(8, 1, 3))
  got <- keops_program_grad(prog, list(x = x, y = x, f = f, s = 0.7), of = "f", wrt = "x", weight = w)
  shared <- keops_program_grad(prog, list(x = x, y = x, f = f, s = 0.7), of = "f", wrt = "x", weight = w[, , 1])
  for (b in 1:3) {
    one <- function(wb) keops_program_grad(prog, list(x = x[, , b], y = x[, , b], f = f, s = 0.7), of = "f",
                                           wrt = "x", weight = wb)$x
    expect_equal(got$x[, , b], one(w[, , b]), tolerance = 1e-12, info = paste("member", b))
    expect_equal(shared$x[, , b], one(w[, , 1]), tolerance = 1e-12, info = paste("member", b))
  }
  e <- tryCatch(keops_program_grad(prog, list(x = x, y = x, f = f, s = 0.7), of = "f", wrt = "x",
                                   weight = list(1:8, 1:7, 1:8)), error = identity)
  expect_identical(e$arg, "weight")
  e <- tryCatch(keops_program_grad(prog, list(x = x, y = y, f = f, s = list(1, 2, 3)), of = "loss", wrt = "s"),
                error = identity)
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, "wrt")
})

test_that("bad batches are errors that name the argument", {
  local_precision("float64")
  set.seed(5405)
  prog <- keops_program(sinkhorn_steps(1L), iterations = 2)
  N <- 11; M <- 7
  input <- list(x = array(runif(N * 3), c(N, 1, 3)), y = rmat(M, 1), lmu = log_hist(N), lnu = log_hist(M),
                s = 1, f = rep(0, N), g = rep(0, M))
  arg_of <- function(expr) {
    e <- tryCatch(expr, error = identity)
    expect_s3_class(e, "rkeops_error_input")
    e$arg
  }
  # members: 3 of x, 2 of y
  bad <- input
  bad$y <- array(runif(M * 2), c(M, 1, 2))
  expect_identical(arg_of(prog(bad)), "y")
  expect_error(prog(bad), "a batch of 2 members, but 'x' has 3")
  # a member with 2 columns for a variable of dimension 1
  bad <- input
  bad$lmu <- list(rmat(N, 1), rmat(N, 2), rmat(N, 1))
  expect_identical(arg_of(prog(bad)), "lmu")
  # the i variables of a step with members of different sizes
  bad <- input
  bad$lmu <- list(log_hist(N), log_hist(N + 1), log_hist(N))
  expect_identical(arg_of(prog(bad)), "input")
  # a batch of parameters: 2 values for a Pm(1)
  bad <- input
  bad$s <- list(1, c(1, 2), 3)
  expect_identical(arg_of(prog(bad)), "s")
  # a reduction to one row sums over the batch: no later step may read it
  p2 <- keops_program(list(total = keops_kernel("Sum_Reduction(x, 1)", "x = Vi(1)"),
                           y = keops_map("x * total", c("x = Vi(1)", "total = Pm(1)"))))
  expect_identical(arg_of(p2(list(x = list(1:3, 1:4)))), "steps")
  # a schedule is shared: not for a batched buffer (y = x * w, w = 3 at the last iteration)
  p3 <- keops_program(list(y = keops_map("x * w", c("x = Vi(1)", "w = Pm(1)"))), iterations = 2)
  expect_identical(arg_of(p3(list(x = list(1:3, 1:4), w = list(1, 2)), schedule = list(w = c(1, 2)))), "schedule")
  expect_equal(p3(list(x = list(1:3, 1:4)), schedule = list(w = c(2, 3)))$y, list(matrix(1:3 * 3), matrix(1:4 * 3)))
})

# keops_program() and keops_map() against the same algorithms written in plain R, in float64, on
# sizes that are not multiples of any tile.

kmeans_program <- function(d, iterations, ...) {
  dims <- function(a) gsub("D", d, a)
  keops_program(list(
    labels = keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", dims(c("x = Vi(D)", "c = Vj(D)"))),
    sums = keops_kernel("Sum_Reduction(Equal(labels, j) * x, 1)", dims(c("labels = Vi(1)", "x = Vi(D)", "j = Vj(1)"))),
    counts = keops_kernel("Sum_Reduction(Equal(labels, j), 1)", c("labels = Vi(1)", "j = Vj(1)")),
    c = keops_map("IfElse(counts - 0.5, sums / counts, c)", dims(c("sums = Vj(D)", "counts = Vj(1)", "c = Vj(D)")))
  ), iterations = iterations, ...)
}

# Lloyd's algorithm in plain R: labels and centres after `iterations` (an empty cluster keeps its centre).
lloyd <- function(x, c, iterations) {
  labels <- integer(nrow(x))
  for (t in seq_len(iterations)) {
    d2 <- outer(rowSums(x^2), rowSums(c^2), "+") - 2 * x %*% t(c)
    labels <- max.col(-d2, ties.method = "first")
    for (j in seq_len(nrow(c))) if (any(labels == j)) c[j, ] <- colMeans(x[labels == j, , drop = FALSE])
  }
  list(labels = labels, c = c)
}

test_that("a K-means program equals Lloyd's algorithm in R", {
  local_precision("float64")
  set.seed(3)
  x <- matrix(rnorm(3 * 1013), 1013, 3)
  c0 <- x[c(5, 77, 300, 512, 900, 1000, 1013), ]
  want <- lloyd(x, c0, 8)
  res <- kmeans_program(3, 8)(list(x = x, c = c0, j = seq_len(7)))
  expect_identical(res$labels, matrix(as.double(want$labels)))
  expect_equal(res$c, want$c, tolerance = 1e-12)
  expect_identical(names(res), c("labels", "sums", "counts", "c"))
  expect_identical(attr(res, "iterations"), 8L)
  # and stats::kmeans (Lloyd) from the same start
  km <- suppressWarnings(stats::kmeans(x, c0, iter.max = 8, algorithm = "Lloyd"))
  expect_equal(unname(res$c), unname(km$centers), tolerance = 1e-10)
})

test_that("a program of one step and one iteration is the plain call", {
  local_precision("float64")
  set.seed(4)
  x <- matrix(runif(3 * 301), 301, 3); y <- matrix(runif(3 * 203), 203, 3); b <- matrix(rnorm(203))
  gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
  res <- keops_program(list(s = gauss))(list(x = x, y = y, b = b))
  expect_identical(res$s, gauss(list(x, y, b)))
  want <- exp(-outer(rowSums(x^2), rowSums(y^2), "+") + 2 * x %*% t(y)) %*% b
  expect_equal(res$s, want, tolerance = 1e-12)
})

test_that("Sinkhorn with a schedule of its temperature, traced, equals the R loop", {
  local_precision("float64")
  set.seed(5)
  n <- 41; m <- 29
  x <- matrix(runif(n)); y <- matrix(runif(m))
  lmu <- matrix(log(rep(1 / n, n))); lnu <- matrix(log(rep(1 / m, m)))
  eps <- c(1, 0.5, 0.2, 0.1)
  prog <- keops_program(sinkhorn_steps(), iterations = 7, trace = c("s", "f"))
  res <- prog(list(x = x, y = y, lmu = lmu, lnu = lnu, f = matrix(0, n), g = matrix(0, m), s = 1),
              schedule = list(s = 1 / eps))
  lse <- function(v) max(v) + log(sum(exp(v - max(v))))
  C <- outer(x[, 1], y[, 1], "-")^2
  f <- rep(0, n); g <- rep(0, m); traced <- NULL
  for (t in 1:7) {
    s <- 1 / eps[min(t, 4)]
    g <- vapply(1:m, function(j) lse(lmu - f - C[, j] * s), 1)
    f <- vapply(1:n, function(i) lse(lnu - g - C[i, ] * s), 1)
    traced <- rbind(traced, f)
  }
  expect_equal(res$f, matrix(f), tolerance = 1e-10)
  expect_equal(res$g, matrix(g), tolerance = 1e-10)
  expect_identical(attr(res, "trace")$s, matrix(1 / eps[pmin(1:7, 4)]))
  # a buffer with a schedule needs no initial value: it starts at the schedule's first
  res2 <- prog(list(x = x, y = y, lmu = lmu, lnu = lnu, f = matrix(0, n), g = matrix(0, m)),
               schedule = list(s = 1 / eps))
  expect_identical(res2$f, res$f)
  expect_equal(attr(res, "trace")$f, unname(traced), tolerance = 1e-10)
  # keops_iterate() runs the same loop at a fixed temperature: the same as a program
  it <- keops_iterate(sinkhorn_steps(), list(x = x, y = y, lmu = lmu, lnu = lnu, s = 5,
                                             f = matrix(0, n), g = matrix(0, m)), 6)
  pr <- keops_program(sinkhorn_steps(), iterations = 6)(
    list(x = x, y = y, lmu = lmu, lnu = lnu, s = 5, f = matrix(0, n), g = matrix(0, m)))
  expect_identical(it$f, pr$f)
  expect_identical(it$g, pr$g)
})

test_that("a program stops when its buffer drops below the tolerance", {
  local_precision("float64")
  x <- matrix(seq(-3, 4, length.out = 97))
  half <- keops_map("x * 0.5", "x = Vi(1)")
  err <- keops_kernel("Sum_Reduction(Abs(x), 1)", "x = Vi(1)")
  prog <- keops_program(list(x = half, err = err), iterations = 500, until = "err", tol = 1e-4, every = 3,
                        trace = "err")
  res <- prog(list(x = x))
  total <- sum(abs(x))
  t_stop <- Find(function(t) t %% 3 == 0 && total / 2^t < 1e-4, 1:500)
  expect_identical(attr(res, "iterations"), as.integer(t_stop))
  expect_equal(res$x, x / 2^t_stop, tolerance = 1e-15)
  expect_equal(attr(res, "trace")$err, matrix(total / 2^(1:t_stop)), tolerance = 1e-13)
  # tol = 0: every iteration runs
  expect_identical(attr(keops_program(list(x = half, err = err), iterations = 7, until = "err")(list(x = x)),
                        "iterations"), 7L)
})

test_that("keops_map() evaluates a formula on each row of i or of j", {
  local_precision("float64")
  set.seed(6)
  q <- matrix(rnorm(3 * 37), 37, 3); p <- matrix(rnorm(3 * 37), 37, 3)
  step <- keops_map("q + dt * p", c("q = Vj(3)", "p = Vj(3)", "dt = Pm(1)"))
  expect_equal(step(list(q, p, 0.1)), q + 0.1 * p, tolerance = 1e-15)
  e <- tryCatch(keops_map("x + y", c("x = Vi(1)", "y = Vj(1)")), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  expect_match(conditionMessage(e), "all Vi or all Vj")
})

test_that("program errors name the step and the buffer", {
  local_precision("float64")
  x <- matrix(runif(40), 20, 2)
  prog <- kmeans_program(2, 2)
  e <- tryCatch(prog(list(x = x, c = x[1:3, ])), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  expect_match(conditionMessage(e), "no value for 'j', read by step 2 ('sums')", fixed = TRUE)
  e <- tryCatch(prog(list(x = x, c = x[1:3, ], j = 1:4)), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  expect_match(conditionMessage(e), "step 4 ('c')", fixed = TRUE)
  expect_match(conditionMessage(e), "has 3 rows, but 'sums' has 4", fixed = TRUE)
  e <- tryCatch(prog(list(x = x, c = x[1:3, ], j = 1:3), schedule = list(c = x[1:2, ])), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  e <- tryCatch(prog(list(x = x, c = x[1:3, ], j = 1:3), schedule = list(c = matrix(1, 2, 6))), error = identity)
  expect_match(conditionMessage(e), "buffer 'c' follows a schedule", fixed = TRUE)
  e <- tryCatch(kmeans_program(2, 2, until = "nothing")(list(x = x, c = x[1:3, ], j = 1:3)), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  expect_match(conditionMessage(e), "until: 'nothing' is not a buffer", fixed = TRUE)
  e <- tryCatch(keops_program(list(1)), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  e <- tryCatch(keops_program(list(a = identity)), error = identity)
  expect_match(conditionMessage(e), "steps$a must be an operator", fixed = TRUE)
})

# EM for a Gaussian mixture with diagonal covariances, as a program: the E-step's log-sum-exp, the
# M-step's sums in one reduction, maps over j for the new parameters, the log-likelihood traced (the
# operators of R/gmm.R, keops_gmm()'s).
gmm_program <- function(D, iterations) {
  ops <- rkeops:::gmm_operators(D)
  keops_program(ops[c("lse", "stats", "ll", "mu", "is2", "cst")], iterations = iterations, trace = "ll",
                output = c("mu", "is2", "cst"))
}

test_that("EM for a diagonal Gaussian mixture as a program equals EM in R", {
  local_precision("float64")
  set.seed(7)
  N <- 307; K <- 3; D <- 2
  x <- rbind(matrix(rnorm(200, 0, 0.5), 100), matrix(rnorm(214, 3, 0.8), 107), matrix(rnorm(200, c(-2, 4)), 100, byrow = TRUE))
  w <- rep(1 / K, K); mu <- x[c(1, 150, 300), ]; s2 <- matrix(1, K, D)
  start <- list(cst = matrix(log(w) - 0.5 * rowSums(log(s2)) - D / 2 * log(2 * pi)), is2 = 1 / s2, mu = mu)
  res <- gmm_program(D, 6)(c(list(x = x, n = N, c0 = D / 2 * log(2 * pi)), start))
  # the same EM in R, dense
  loglik <- numeric(6)
  for (t in 1:6) {
    logp <- sapply(1:K, function(k) log(w[k]) + colSums(dnorm(t(x), mu[k, ], sqrt(s2[k, ]), log = TRUE)))
    m <- apply(logp, 1, max)
    lse <- m + log(rowSums(exp(logp - m)))
    loglik[t] <- sum(lse)
    r <- exp(logp - lse)
    nk <- colSums(r)
    mu <- t(r) %*% x / nk
    s2 <- t(r) %*% x^2 / nk - mu^2
    w <- nk / N
  }
  expect_equal(attr(res, "trace")$ll, matrix(loglik), tolerance = 1e-10)
  expect_equal(res$mu, unname(mu), tolerance = 1e-10)
  expect_equal(res$is2, unname(1 / s2), tolerance = 1e-10)
  expect_equal(res$cst, matrix(log(w) - 0.5 * rowSums(log(s2)) - D / 2 * log(2 * pi)), tolerance = 1e-10)
})

test_that("keops_program_grad() matches finite differences through the iterations", {
  local_precision("float64")
  set.seed(8)
  n <- 9; m <- 7
  x <- matrix(runif(2 * n), n, 2); y <- matrix(runif(2 * m), m, 2)
  loss <- keops_kernel("Sum_Reduction(f * f, 1)", "f = Vi(1)")
  prog <- keops_program(c(sinkhorn_steps(2L), list(loss = loss)), iterations = 4)
  input <- list(x = x, y = y, lmu = matrix(runif(n)), lnu = matrix(runif(m)), f = matrix(0, n),
                g = matrix(rnorm(m)), s = 3)
  got <- keops_program_grad(prog, input, of = "loss", wrt = c("x", "y", "s", "g"))
  expect_identical(attr(got, "iterations"), 4L)
  value <- function(inp) prog(inp)$loss[1, 1]
  for (name in c("x", "y", "s", "g")) {
    fd <- input[[name]]
    for (k in seq_along(fd)) {
      up <- down <- input
      up[[name]][k] <- up[[name]][k] + 1e-6
      down[[name]][k] <- down[[name]][k] - 1e-6
      fd[k] <- (value(up) - value(down)) / 2e-6
    }
    expect_equal(got[[name]], fd, tolerance = 1e-6, info = name)
  }
  # a weight of the values of a buffer of several values
  w <- rnorm(n)
  g_f <- keops_program_grad(prog, input, of = "f", wrt = "x", weight = w)$x
  fd <- x
  for (k in seq_along(x)) {
    up <- down <- input
    up$x[k] <- up$x[k] + 1e-6
    down$x[k] <- down$x[k] - 1e-6
    fd[k] <- sum(w * (prog(up)$f - prog(down)$f)) / 2e-6
  }
  expect_equal(g_f, fd, tolerance = 1e-6)
  e <- tryCatch(keops_program_grad(prog, input, of = "loss", wrt = "nothing"), error = identity)
  expect_s3_class(e, "rkeops_error_input")
  e <- tryCatch(keops_program_grad(identity, input, of = "loss", wrt = "x"), error = identity)
  expect_match(conditionMessage(e), "made by keops_program()", fixed = TRUE)
})

test_that("a step with ranges (keops_step()) reduces over the kept blocks only, at every iteration", {
  local_precision("float64")
  set.seed(9)
  N <- 57; M <- 43
  x <- matrix(runif(2 * N), N); y <- matrix(runif(2 * M), M)
  bi <- cbind(c(1, 20, 41), c(19, 40, 57)); bj <- cbind(c(1, 11, 30), c(10, 29, 43))
  r <- from_matrix(bi, bj, matrix(c(TRUE, FALSE, TRUE, TRUE, TRUE, FALSE, FALSE, TRUE, TRUE), 3))
  f_op <- keops_kernel("LogSumExp_Reduction(-g - SqDist(x, y) * 4, 0)", c("x = Vi(2)", "y = Vj(2)", "g = Vj(1)"))
  g_op <- keops_kernel("LogSumExp_Reduction(-f - SqDist(x, y) * 4, 1)", c("x = Vi(2)", "y = Vj(2)", "f = Vi(1)"))
  prog <- keops_program(list(g = keops_step(g_op, r), f = keops_step(f_op, r)), iterations = 5)
  res <- prog(list(x = x, y = y, f = matrix(0, N), g = matrix(0, M)))
  f <- matrix(0, N); g <- matrix(0, M)
  for (t in 1:5) {
    g <- g_op(list(x, y, f), ranges = r)
    f <- f_op(list(x, y, g), ranges = r)
  }
  expect_equal(res$f, f, tolerance = 1e-12)
  expect_equal(res$g, g, tolerance = 1e-12)
  # and the ranges matter: without them the potentials differ
  dense <- keops_program(list(g = g_op, f = f_op), iterations = 5)(list(x = x, y = y, f = matrix(0, N), g = matrix(0, M)))
  expect_gt(max(abs(dense$f - res$f)), 1e-3)
  e <- tryCatch(keops_step(identity), error = identity)
  expect_s3_class(e, "rkeops_error_input")
})

test_that("a program of one step run once is the plain call, and equals the engine's program", {
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
  set.seed(11)
  x <- matrix(runif(3 * 37), 37, 3); y <- matrix(runif(3 * 29), 29, 3); b <- runif(29)
  dense <- exp(-outer(rowSums(x^2), rowSums(y^2), "+") + 2 * x %*% t(y)) %*% b
  one <- keops_program(list(out = op))
  res <- one(list(x = x, y = y, b = b))
  expect_equal(res$out, dense, tolerance = 1e-5)
  expect_identical(attr(res, "iterations"), 1L)
  # the same step through the engine's program (a trace makes it one): the same values
  traced <- keops_program(list(out = op), trace = "out")(list(x = x, y = y, b = b))
  expect_equal(traced$out, res$out, tolerance = 1e-6)
  expect_identical(attr(traced, "iterations"), 1L)
})

test_that("keops_step(reads =) and the gradient of a geodesic shooting against finite differences", {
  rkeops_use_float64()
  on.exit(rkeops_use_float32())
  args <- c("qi = Vi(2)", "qj = Vj(2)", "pi = Vi(2)", "pj = Vj(2)", "s = Pm(1)")
  dq <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(qi, qj)) * pj, 0)", args[-3])
  dp <- keops_kernel("Sum_Reduction(2 * s * Exp(-s * SqDist(qi, qj)) * (pi | pj) * (qi - qj), 0)", args)
  move <- keops_map("x + h * k", c("x = Vi(2)", "h = Pm(1)", "k = Vi(2)"))
  shoot <- keops_program(list(
    dq = keops_step(dq, reads = c(qi = "q", qj = "q", pj = "p")),
    dp = keops_step(dp, reads = c(qi = "q", qj = "q", pi = "p", pj = "p")),
    q = keops_step(move, reads = c(x = "q", h = "dt", k = "dq")),
    p = keops_step(move, reads = c(x = "p", h = "dt", k = "dp")),
    loss = keops_kernel("Sum_Reduction(SqDist(q, target), 1)", c("q = Vi(2)", "target = Vi(2)"))
  ), iterations = 3, output = c("q", "loss"))
  set.seed(12)
  n <- 9
  input <- list(q = matrix(runif(2 * n), n), p = matrix(rnorm(2 * n, sd = 0.3), n), s = 2, dt = 0.2,
                target = matrix(runif(2 * n), n))
  # the same shooting in plain R, dense
  shoot_r <- function(q, p) {
    for (t in 1:3) {
      K <- exp(-2 * as.matrix(dist(q))^2)
      B <- K * tcrossprod(p)
      vq <- K %*% p
      vp <- 4 * (rowSums(B) * q - B %*% q)
      q <- q + 0.2 * vq
      p <- p + 0.2 * vp
    }
    unname(q)
  }
  res <- shoot(input)
  expect_equal(res$q, shoot_r(input$q, input$p), tolerance = 1e-12)
  expect_equal(res$loss[[1]], sum((shoot_r(input$q, input$p) - input$target)^2), tolerance = 1e-12)
  g <- keops_program_grad(shoot, input, of = "loss", wrt = c("p", "q"))
  expect_equal(attr(g, "outputs")$loss, res$loss)
  loss <- function(q, p) sum((shoot_r(q, p) - input$target)^2)
  fd <- function(f, x, h = 1e-6) {
    vapply(seq_along(x), function(k) {
      xp <- x; xp[k] <- xp[k] + h; xm <- x; xm[k] <- xm[k] - h
      (f(xp) - f(xm)) / (2 * h)
    }, 0)
  }
  expect_equal(as.vector(g$p), fd(function(v) loss(input$q, matrix(v, n)), input$p), tolerance = 1e-6)
  expect_equal(as.vector(g$q), fd(function(v) loss(matrix(v, n), input$p), input$q), tolerance = 1e-6)
  expect_error(keops_step(dq, reads = c("q")), "named character vector", class = "rkeops_error_input")
  expect_error(keops_program(list(dq = keops_step(dq, reads = c(zz = "q")))), "not a variable of its formula",
               class = "rkeops_error_input")
})

test_that("sums over the same pairs run fused into one reduction, with the results of the steps apart", {
  local_precision("float64")
  set.seed(12)
  n <- 203; m <- 157
  x0 <- matrix(rnorm(2 * n), n, 2); y <- matrix(rnorm(2 * m), m, 2); b <- runif(m)
  xy <- c("x = Vi(2)", "y = Vj(2)", "s = Pm(1)")
  # u and v reduce over the same pairs: the engine runs them as one reduction (RKEOPS_FUSE_STEPS)
  prog <- keops_program(list(
    u = keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", c(xy, "b = Vj(1)")),
    v = keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * (y - x), 0)", xy),
    x = keops_map("x + 0.1 * u * v", c("x = Vi(2)", "u = Vi(1)", "v = Vi(2)")),
    loss = keops_kernel("Sum_Reduction(x * x, 1)", "x = Vi(2)")
  ), iterations = 4, output = c("x", "loss"))
  input <- list(x = x0, y = y, b = matrix(b), s = 0.7)
  x <- x0
  for (t in 1:4) {
    k <- exp(-0.7 * (outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)))
    x <- x + 0.1 * as.vector(k %*% b) * (k %*% y - rowSums(k) * x)
  }
  fused <- prog(input)
  expect_equal(fused$x, x, tolerance = 1e-12)
  grad_fused <- keops_program_grad(prog, input, of = "loss", wrt = c("x", "y"))
  old <- Sys.getenv("RKEOPS_FUSE_STEPS", unset = NA)
  Sys.setenv(RKEOPS_FUSE_STEPS = "0")
  on.exit(if (is.na(old)) Sys.unsetenv("RKEOPS_FUSE_STEPS") else Sys.setenv(RKEOPS_FUSE_STEPS = old), add = TRUE)
  apart <- prog(input)
  grad_apart <- keops_program_grad(prog, input, of = "loss", wrt = c("x", "y"))
  expect_equal(apart$x, x, tolerance = 1e-12)
  expect_equal(grad_fused$x, grad_apart$x, tolerance = 1e-12)
  expect_equal(grad_fused$y, grad_apart$y, tolerance = 1e-12)
  # and against finite differences (a few components)
  for (k in c(1, 2 * n, 17)) {
    up <- down <- input
    up$x[k] <- up$x[k] + 1e-6
    down$x[k] <- down$x[k] - 1e-6
    fd <- (sum(prog(up)$loss) - sum(prog(down)$loss)) / 2e-6
    expect_equal(grad_fused$x[k], fd, tolerance = 1e-6)
  }
})

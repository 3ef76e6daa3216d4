# solve() on LazyTensors: the Nystrom-preconditioned conjugate gradients against base::solve() on
# the dense matrix (float64), the diagnostics it reports, several right-hand sides, its errors, and
# the gradients of the solution (rkeops:::solve_grad) against finite differences of dense solves.

# Squared distances |x_i - y_j|^2 in plain R.
dense_sq <- function(x, y) {
  x <- as.matrix(x); y <- as.matrix(y)
  outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y)
}

# A Gaussian kernel on N points of the unit square (sigma as in bench/solve.R), symbolic and dense.
solve_case <- function(N, sigma = 0.1, D = 2, seed = N) {
  set.seed(seed)
  x <- matrix(runif(N * D), N, D)
  list(x = x, K = exp(-rkeops::sqdist(Vi(x), Vj(x)) / (2 * sigma^2)),
       Kd = exp(-dense_sq(x, x) / (2 * sigma^2)))
}

test_that("preconditioned solve() matches base::solve() on the dense system, several right-hand sides", {
  local_precision("float64")
  d <- solve_case(537)
  set.seed(2)
  b <- matrix(rnorm(537 * 3), 537, 3)
  ref <- base::solve(d$Kd + 0.09 * diag(537), b)
  for (rank in list(NULL, 40, 537)) {
    w <- solve(d$K, b, alpha = 0.09, eps = 1e-10, rank = rank, info = TRUE)
    expect_equal(c(w), c(ref), tolerance = 1e-7)
    expect_identical(dim(w), c(537L, 3L))
    if (!is.null(rank)) expect_identical(attr(w, "rank"), as.integer(rank))
    # the reported residual is the true one (dense, float64), the largest over the columns
    res <- sqrt(colSums((d$Kd %*% w + 0.09 * w - b)^2) / colSums(b^2))
    expect_lt(attr(w, "residual"), 1e-10)
    expect_equal(attr(w, "residual"), max(res), tolerance = 1e-2)
  }
  # each column solved alone gives the same column
  w1 <- solve(d$K, b[, 2], alpha = 0.09, eps = 1e-10)
  expect_equal(c(w1), ref[, 2], tolerance = 1e-7)
})

test_that("the Nystrom preconditioner needs far fewer iterations than plain conjugate gradients", {
  local_precision("float64")
  d <- solve_case(1237)
  b <- sin(4 * d$x[, 1]) * cos(3 * d$x[, 2]) + rnorm(1237, sd = 0.5)
  set.seed(1)
  # the automatic rank depends on timings: a fixed rank for the count of iterations
  pre <- solve(d$K, b, alpha = 0.09, eps = 1e-8, rank = 250, info = TRUE)
  auto <- solve(d$K, b, alpha = 0.09, eps = 1e-8, info = TRUE)
  none <- solve(d$K, b, alpha = 0.09, eps = 1e-8, precond = "none", info = TRUE)
  expect_identical(attr(none, "rank"), 0L)
  expect_identical(attr(pre, "rank"), 250L)
  expect_gte(attr(auto, "rank"), 64L)
  expect_lt(attr(auto, "rank"), 1237L)
  expect_lt(attr(pre, "iterations") * 5, attr(none, "iterations"))
  ref <- base::solve(d$Kd + 0.09 * diag(1237), b)
  expect_equal(c(pre), ref, tolerance = 1e-6)
  expect_equal(c(auto), ref, tolerance = 1e-6)
  expect_equal(c(none), ref, tolerance = 1e-6)
})

test_that("the preconditioner applies the same operator with its columns kept (CPU) or not (GPU's way)", {
  local_precision("float64")
  d <- solve_case(611)
  set.seed(3)
  r <- matrix(rnorm(611 * 2), 611, 2)
  for (rank in c(37L, 150L)) {
    set.seed(9)
    kept <- rkeops:::nystrom_preconditioner(d$K, 0.09, rank, 1e-8, 1, keep = TRUE)
    set.seed(9)
    streamed <- rkeops:::nystrom_preconditioner(d$K, 0.09, rank, 1e-8, 1, keep = FALSE)
    expect_true(kept$kept)
    expect_false(streamed$kept)
    expect_identical(streamed$rank, rank)
    # the same operator (to the rounding of an ill-conditioned W = K[S, S] at rank 150)
    expect_equal(streamed$apply(r), kept$apply(r), tolerance = 1e-7)
    if (rank > 100L) next
    # the preconditioner of Frangella, Tropp and Udell on the dense matrix, same landmarks (the
    # package's shift of W, a few rounding errors, weighs at 1e-6)
    set.seed(9)
    S <- sample.int(611, rank)
    C <- d$Kd[, S]
    W <- d$Kd[S, S]
    lambda <- eigen(C %*% base::solve(W, t(C)), symmetric = TRUE, only.values = TRUE)$values[seq_len(rank)]
    gamma <- 0.09 + min(lambda)
    ref <- (r - C %*% base::solve(gamma * W + crossprod(C), crossprod(C, r))) / gamma
    expect_equal(streamed$apply(r), ref, tolerance = 1e-4)
  }
  # a whole solve with the columns not kept
  b <- sin(4 * d$x[, 1]) + rnorm(611, sd = 0.3)
  set.seed(9)
  prec <- rkeops:::nystrom_preconditioner(d$K, 0.09, NULL, 1e-10, 1e-3, keep = FALSE)
  op <- function(v) rkeops:::lazy_matvec(d$K, "test")(v) + 0.09 * v
  start <- list(x = matrix(0, 611, 1), r = matrix(b), iterations = 0L)
  res <- rkeops:::conjugate_gradients(op, prec$apply, matrix(b), start, 1e-10, 1000, "test")
  expect_equal(c(res$x), c(base::solve(d$Kd + 0.09 * diag(611), b)), tolerance = 1e-7)
  expect_lt(res$iterations, 40)
})

test_that("the preconditioner's pieces (GPU's way) are K[S, ] K[, new] and K[landmarks, new], K not symmetric", {
  local_precision("float64")
  set.seed(2)
  N <- 517
  x <- matrix(runif(2 * N), N)
  y <- matrix(runif(2 * N), N)
  w <- runif(N)
  K <- exp(-rkeops::sqdist(Vi(x), Vj(y)) * 3) * Vj(matrix(w))
  Kd <- exp(-3 * (outer(x[, 1], y[, 1], "-")^2 + outer(x[, 2], y[, 2], "-")^2)) * rep(w, each = N)
  S <- sample.int(N, 90)
  new <- S[41:90]
  landmarks <- sample.int(N, 120)
  # pieces of 16 columns: three whole and a padded one
  got <- rkeops:::nystrom_pieces(K, S, new, landmarks, piece = 16L)
  expect_equal(got$products, Kd[S, ] %*% Kd[, new], tolerance = 1e-12)
  expect_equal(got$rows, Kd[landmarks, new], tolerance = 1e-14)
})

test_that("the automatic rank stops when the spectrum above alpha is captured", {
  local_precision("float64")
  # A smooth 1-D kernel with a large nugget: only a handful of eigenvalues above alpha.
  set.seed(4)
  x <- runif(1537)
  K <- exp(-rkeops::sqdist(Vi(x), Vj(x)) / (2 * 0.2^2))
  Kd <- exp(-outer(x, x, "-")^2 / (2 * 0.2^2))
  lam <- eigen(Kd, symmetric = TRUE, only.values = TRUE)$values
  above <- sum(lam > 1)
  b <- cos(5 * x)
  w <- solve(K, b, alpha = 1, eps = 1e-10, info = TRUE)
  expect_gte(attr(w, "rank"), above)
  expect_lte(attr(w, "rank"), 64L)          # the first 64 landmarks suffice
  expect_lte(attr(w, "iterations"), 10L)
  expect_equal(c(w), c(base::solve(Kd + diag(1537), b)), tolerance = 1e-8)
})

test_that("solve() in float32 reaches the tolerance asked for", {
  local_precision("float32")
  d <- solve_case(1237)
  b <- cbind(sin(4 * d$x[, 1]), cos(3 * d$x[, 2]))
  w <- solve(d$K, b, alpha = 0.09, eps = 1e-4, info = TRUE)
  expect_lt(attr(w, "residual"), 1e-4)
  # the residual of the dense float64 system: eps plus the rounding of float32 products
  res <- sqrt(colSums((d$Kd %*% w + 0.09 * w - b)^2) / colSums(b^2))
  expect_lt(max(res), 2e-4)
})

test_that("zero columns, info = FALSE, non-convergence and maxiter = 0", {
  local_precision("float64")
  d <- solve_case(137)
  b <- cbind(rnorm(137), 0)
  w <- solve(d$K, b, alpha = 0.5, eps = 1e-10)
  expect_identical(names(attributes(w)), "dim")
  expect_identical(w[, 2], rep(0, 137))
  expect_equal(w[, 1], c(base::solve(d$Kd + 0.5 * diag(137), b[, 1])), tolerance = 1e-8)
  z <- solve(d$K, matrix(0, 137, 2), alpha = 0.5, info = TRUE)
  expect_identical(c(z), rep(0, 274))
  expect_identical(attr(z, "iterations"), 0L)
  expect_identical(attr(z, "residual"), 0)
  for (precond in c("nystrom", "none")) {
    expect_warning(w3 <- solve(d$K, b, alpha = 1e-3, eps = 1e-15, maxiter = 3, precond = precond, rank = 5,
                               info = TRUE), "did not converge in 3 iterations", class = "rkeops_warning_convergence")
    expect_identical(attr(w3, "iterations"), 3L)
    expect_gt(attr(w3, "residual"), 1e-15)
  }
  expect_warning(w0 <- solve(d$K, b, maxiter = 0), "^solve\\(\\): conjugate gradients did not converge in 0 iterations",
                 class = "rkeops_warning_convergence")
  expect_identical(w0, matrix(0, 137, 2))
})

test_that("solve() with ranges and the preconditioner solves the truncated system", {
  local_precision("float64")
  set.seed(151)
  N <- 373
  x <- matrix(runif(2 * N), N)
  s <- sort_clusters(x, grid_cluster(x, 0.23))
  cl <- cluster_ranges_centroids(s$x, s$labels)
  gap <- sqrt(pmax(outer(rowSums(cl$centroids^2), rowSums(cl$centroids^2), "+") -
                     2 * tcrossprod(cl$centroids), 0)) - outer(cl$radii, cl$radii, "+")
  r <- from_matrix(cl$ranges, cl$ranges, gap < 0.2)
  keep <- (gap < 0.2)[s$labels, s$labels]     # the pairs of points whose clusters are kept
  expect_true(any(!keep))
  xs <- s$x
  K <- exp(-dense_sq(xs, xs) / 0.02) * keep
  b <- matrix(rnorm(2 * N), N)
  got <- solve(exp(-rkeops::sqdist(Vi(xs), Vj(xs)) / 0.02), b, alpha = 0.5, eps = 1e-10, ranges = r, info = TRUE)
  expect_gt(attr(got, "rank"), 0L)
  expect_equal(c(got), c(base::solve(K + 0.5 * diag(N), b)), tolerance = 1e-8)
})

test_that("bad arguments of solve() are errors that name them", {
  d <- solve_case(37)
  b <- rnorm(37)
  expect_error(solve(d$K, b, precond = "jacobi"), "'precond' must be \"nystrom\" or \"none\"",
               class = "rkeops_error_input")
  expect_error(solve(d$K, b, rank = 0), "'rank' must be a whole number >= 1", class = "rkeops_error_input")
  expect_error(solve(d$K, b, rank = 2.5), "'rank'", class = "rkeops_error_input")
  expect_error(solve(d$K, b, alpha = -1), "'alpha' must be a single non-negative number",
               class = "rkeops_error_input")
  expect_error(solve(d$K, b, alpha = c(1, 2)), "'alpha'", class = "rkeops_error_input")
  expect_error(solve(d$K, b, eps = 0), "'eps' must be a single positive number", class = "rkeops_error_input")
  expect_error(solve(d$K, b, maxiter = -1), "'maxiter'", class = "rkeops_error_input")
  expect_error(solve(d$K, b, info = NA), "'info' must be TRUE or FALSE", class = "rkeops_error_input")
  expect_error(solve(d$K, b[-1]), "'b' must be a numeric matrix \\(or vector\\) with 37 rows",
               class = "rkeops_error_input")
  expect_error(solve(exp(-rkeops::sqdist(Vi(d$x), Vi(d$x))), b), "with i and j variables",
               class = "rkeops_error_input")
  expect_error(solve(exp(-Pm(2)), b), "with i and j variables", class = "rkeops_error_input")
  expect_error(solve(d$K, letters[1:37]), "'b' must be a numeric", class = "rkeops_error_input")
  expect_error(solve(d$K, c(NA, b[-1])), "'b' must not hold NA", class = "rkeops_error_input")
  y <- matrix(runif(40), 20, 2)
  expect_error(solve(exp(-rkeops::sqdist(Vi(d$x), Vj(y))), rnorm(20)), "'a' must be a square",
               class = "rkeops_error_input")
  expect_error(solve(Vi(d$x) - Vj(d$x), b), "dimension 1", class = "rkeops_error_input")
  # a rank above N is N
  expect_identical(attr(solve(d$K, b, alpha = 0.1, rank = 1000, info = TRUE), "rank"), 37L)
})

# ---- gradients -----------------------------------------------------------------------------------

# <w, e> with w = (alpha I + K(x1, x2; s))^-1 b, all dense in float64.
dense_objective <- function(x1, x2, b, e, alpha, s) {
  K <- exp(-s * dense_sq(x1, x2))
  sum(base::solve(K + alpha * diag(nrow(x1)), b) * e)
}

test_that("gradients of the solution match finite differences (b, alpha, points, parameter)", {
  local_precision("float64")
  set.seed(37)
  N <- 37
  x <- matrix(runif(2 * N), N, 2)
  b <- matrix(rnorm(2 * N), N, 2)
  e <- matrix(rnorm(2 * N), N, 2)
  s <- 12.5
  alpha <- 0.09
  sp <- Pm(s)
  K <- exp(-sp * rkeops::sqdist(Vi(x), Vj(x)))
  for (rank in list(NULL, 5)) {
    w <- solve(K, b, alpha = alpha, eps = 1e-13, rank = rank, info = TRUE)
    expect_equal(c(w), c(base::solve(exp(-s * dense_sq(x, x)) + alpha * diag(N), b)), tolerance = 1e-9)
    # b: (alpha I + K)^-1 e
    gb <- rkeops:::solve_grad(w, e, "b")
    expect_identical(grad(w, e, var = "b"), gb)   # what users call
    fd_b <- finite_differences(function(p) dense_objective(x, x, matrix(p, N, 2), e, alpha, s), c(b))
    expect_equal(c(gb), fd_b, tolerance = 1e-6)
    # alpha
    ga <- rkeops:::solve_grad(w, e, "alpha")
    expect_identical(dim(ga), c(1L, 1L))
    expect_equal(c(ga), finite_differences(function(p) dense_objective(x, x, b, e, p, s), alpha), tolerance = 1e-6)
    # the points: both roles of x together (its data), then each role alone
    gx <- rkeops:::solve_grad(w, e, x)
    fd_x <- finite_differences(function(p) { xp <- matrix(p, N, 2); dense_objective(xp, xp, b, e, alpha, s) }, c(x))
    expect_identical(dim(gx), c(37L, 2L))
    expect_equal(c(gx), fd_x, tolerance = 1e-6)
    gi <- rkeops:::solve_grad(w, e, Vi(x))
    fd_i <- finite_differences(function(p) dense_objective(matrix(p, N, 2), x, b, e, alpha, s), c(x))
    expect_equal(c(gi), fd_i, tolerance = 1e-6)
    gj <- rkeops:::solve_grad(w, e, Vj(x))
    expect_equal(c(gi + gj), fd_x, tolerance = 1e-6)
    # the parameter of the kernel, given as the LazyTensor or by its position
    gs <- rkeops:::solve_grad(w, e, sp)
    expect_identical(dim(gs), c(1L, 1L))
    expect_equal(c(gs), finite_differences(function(p) dense_objective(x, x, b, e, alpha, p), s), tolerance = 1e-6)
    pos <- which(K$cats == "Pm")
    expect_equal(rkeops:::solve_grad(w, e, pos), gs)
  }
})

test_that("gradients of a solve with one right-hand side given as a vector", {
  local_precision("float64")
  set.seed(53)
  N <- 53
  x <- matrix(runif(3 * N), N, 3)
  b <- rnorm(N)
  e <- rnorm(N)
  K <- exp(-rkeops::sqdist(Vi(x), Vj(x)) / 0.3)
  w <- solve(K, b, alpha = 0.2, eps = 1e-13, info = TRUE)
  gx <- rkeops:::solve_grad(w, e, x)
  fd <- finite_differences(function(p) { xp <- matrix(p, N, 3); dense_objective(xp, xp, b, e, 0.2, 1 / 0.3) }, c(x))
  expect_equal(c(gx), fd, tolerance = 1e-6)
  expect_equal(c(rkeops:::solve_grad(w, e, "b")), c(base::solve(exp(-dense_sq(x, x) / 0.3) + 0.2 * diag(N), e)),
               tolerance = 1e-9)
})

test_that("bad arguments of the solve gradient are errors that name them", {
  d <- solve_case(37)
  b <- rnorm(37)
  w <- solve(d$K, b, alpha = 0.1, info = TRUE)
  expect_error(rkeops:::solve_grad(solve(d$K, b, alpha = 0.1), b, "b"), "info = TRUE",
               class = "rkeops_error_input")
  expect_error(rkeops:::solve_grad(w, b[-1], "b"), "'gradin' must be a numeric 37 x 1 matrix",
               class = "rkeops_error_input")
  expect_error(rkeops:::solve_grad(w, b, "beta"), "'var' must be \"b\", \"alpha\"",
               class = "rkeops_error_input")
  expect_error(rkeops:::solve_grad(w, b, Vi(d$x + 1)), "'var' must be", class = "rkeops_error_input")
  expect_error(rkeops:::solve_grad(w, b, 7), "'var' must be", class = "rkeops_error_input")
  expect_error(rkeops:::solve_grad(w, b, Vi(d$x) + 1), "made by Vi\\(\\), Vj\\(\\) or Pm\\(\\)",
               class = "rkeops_error_input")
})

test_that("an indefinite system or preconditioner is handled, not divided by", {
  local_precision("float64")
  d <- solve_case(137)
  b <- rnorm(137)
  for (precond in c("none", "nystrom")) {
    expect_warning(w <- solve(-d$K, b, alpha = 0, precond = precond), "not positive definite.*increase 'alpha'",
                   class = "rkeops_warning_not_positive_definite")
    expect_true(all(is.finite(w)))
  }
  # a preconditioner that is not positive definite is dropped: plain conjugate gradients
  set.seed(5)
  A <- crossprod(matrix(rnorm(53 * 53), 53)) + diag(53)
  B <- matrix(rnorm(106), 53, 2)
  op <- function(v) A %*% v
  start <- list(x = matrix(0, 53, 2), r = B, iterations = 0L)
  res <- rkeops:::conjugate_gradients(op, function(r) -r, B, start, 1e-12, 500, "test")
  expect_equal(res$x, base::solve(A, B), tolerance = 1e-8)
  expect_lt(res$residual, 1e-12)
})

test_that("the conjugate gradients' progress bar ends at the iterations made, not at maxiter", {
  local_precision("float64")
  d <- solve_case(137)
  old <- options(rkeops.progress = TRUE, cli.progress_show_after = 0, cli.progress_throttle = 0,
                 cli.progress_handlers_only = "logger")
  on.exit(options(old), add = TRUE)
  printed <- utils::capture.output(w <- solve(d$K, rnorm(137), alpha = 0.01, eps = 1e-10, maxiter = 5000,
                                              precond = "none", info = TRUE))
  counts <- regmatches(printed, regexec(" ([0-9]+)/([0-9]+) ", printed))
  counts <- do.call(rbind, lapply(counts, function(m) as.numeric(m[2:3])))
  expect_gt(attr(w, "iterations"), 10)
  expect_lt(attr(w, "iterations"), 5000)
  expect_identical(counts[1, ], c(0, 5000))                                       # created: maxiter
  expect_identical(counts[nrow(counts), ], rep(as.numeric(attr(w, "iterations")), 2))  # ended: iterations
  expect_match(printed[length(printed)], "terminated")
})

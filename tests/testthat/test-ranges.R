# Block-sparse reductions (`ranges`) against dense float64 R on the same blocks: the mask of the
# kept (i, j) pairs is rebuilt here from the six parts of the ranges object, one loop per block.

# The N x M logical mask of the pairs that the i part of `r` keeps (and, with `part = "j"`, the
# M x N mask of its j part).
kept_mask <- function(r, N, M, part = "i") {
  other <- if (part == "i") "j" else "i"
  blocks <- r[[paste0("ranges_", part)]]
  slices <- r[[paste0("slices_", part)]]
  red <- r[[paste0("redranges_", other)]]
  keep <- matrix(FALSE, N, M)
  first <- 1L
  for (b in seq_len(nrow(blocks))) {
    last <- slices[b]
    if (blocks[b, 2] >= blocks[b, 1] && last >= first) {
      for (q in first:last) {
        if (red[q, 2] >= red[q, 1]) keep[blocks[b, 1]:blocks[b, 2], red[q, 1]:red[q, 2]] <- TRUE
      }
    }
    first <- last + 1L
  }
  keep
}

# Blocks of odd sizes covering 1..n, with an empty block.
odd_blocks <- function(n, sizes) {
  sizes <- c(sizes, n - sum(sizes))
  last <- cumsum(sizes)
  cbind(last - sizes + 1L, last)
}

ranges_data <- function() {
  set.seed(15)
  N <- 157; M <- 203
  bi <- odd_blocks(N, c(13, 0, 41, 7, 29, 1))         # 7 blocks of i, one empty
  bj <- odd_blocks(M, c(31, 17, 5, 0, 60, 11, 2))     # 8 blocks of j, one empty
  keep <- matrix(runif(nrow(bi) * nrow(bj)) < 0.4, nrow(bi))
  keep[, 2] <- TRUE
  keep[3, ] <- FALSE                                   # a block of i that keeps nothing
  keep[6, ] <- seq_len(nrow(bj)) == 7                  # one that keeps 2 indices of j
  list(x = matrix(runif(3 * N), N), y = matrix(runif(3 * M), M), b = matrix(rnorm(2 * M), M),
       a = runif(N), N = N, M = M, r = from_matrix(bi, bj, keep))
}

args3 <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)")

test_that("the masks of both parts of a ranges object are transposes", {
  d <- ranges_data()
  m <- kept_mask(d$r, d$N, d$M)
  expect_true(any(m) && !all(m) && any(rowSums(m) == 0))
  expect_identical(kept_mask(d$r, d$M, d$N, "j"), t(m))
})

test_that("a block-sparse Gaussian sum is the dense sum over the kept pairs, both axes", {
  d <- ranges_data()
  keep <- kept_mask(d$r, d$N, d$M)
  D2 <- outer(rowSums(d$x^2), rowSums(d$y^2), "+") - 2 * d$x %*% t(d$y)
  K <- exp(-0.7 * D2) * keep
  for (precision in PRECISIONS) {
    local_precision(precision)
    tol <- tol_for(precision)
    op0 <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", args3)
    expect_equal(op0(list(d$x, d$y, d$b, 0.7), ranges = d$r), K %*% d$b, tolerance = tol)
    # over i, with the transposed ranges (j part): one row per j
    op1 <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * a, 1)",
                        c("x = Vi(3)", "y = Vj(3)", "a = Vi(1)", "s = Pm(1)"))
    expect_equal(op1(list(d$x, d$y, d$a, 0.7), ranges = d$r), t(K) %*% d$a, tolerance = tol)
    # without ranges: the dense sum
    expect_equal(op0(list(d$x, d$y, d$b, 0.7)), exp(-0.7 * D2) %*% d$b, tolerance = tol)
  }
})

test_that("every reduction over kept pairs, rows that keep nothing get the identity", {
  d <- ranges_data()
  keep <- kept_mask(d$r, d$N, d$M)
  D2 <- outer(rowSums(d$x^2), rowSums(d$y^2), "+") - 2 * d$x %*% t(d$y)
  F <- D2 + d$a                        # F_ij = |x_i - y_j|^2 + a_i
  Fm <- ifelse(keep, F, Inf)
  none <- rowSums(keep) == 0
  local_precision("float64")   # indices of near ties agree with R's
  args <- c("x = Vi(3)", "y = Vj(3)", "a = Vi(1)", "b = Vj(2)")
  run <- function(formula) keops_kernel(formula, args)(list(d$x, d$y, d$a, d$b), ranges = d$r)
  expect_equal(run("Min_Reduction(SqDist(x, y) + a, 0)"), matrix(apply(Fm, 1, min)), tolerance = 1e-6)
  expect_equal(run("Max_Reduction(-SqDist(x, y) - a, 0)"), matrix(-apply(Fm, 1, min)), tolerance = 1e-6)
  want_idx <- ifelse(none, 0L, apply(Fm, 1, which.min))
  expect_identical(run("ArgMin_Reduction(SqDist(x, y) + a, 0)"), matrix(as.integer(want_idx)))
  # 4 nearest kept j of each i: rows keeping fewer than 4 are padded with Inf and index 0
  k <- run("KMin_ArgKMin_Reduction(SqDist(x, y), 4, 0)")
  expect_true(any(rowSums(keep) > 0 & rowSums(keep) < 4))
  Dm <- ifelse(keep, D2, Inf)
  ord <- t(apply(Dm, 1, order))[, 1:4]
  want_i <- ifelse(t(apply(Dm, 1, sort))[, 1:4, drop = FALSE] < Inf, ord, 0L)
  expect_identical(k$indices, matrix(as.integer(want_i), ncol = 4))
  expect_equal(k$values, t(apply(Dm, 1, function(v) sort(v)[1:4])), tolerance = 1e-6)
  # log-sum-exp and soft-max weights over the kept pairs
  E <- exp(-D2) * keep
  expect_equal(run("LogSumExp_Reduction(-SqDist(x, y), 0)"), matrix(log(rowSums(E))), tolerance = 1e-6)
  sm <- run("SumSoftMaxWeight_Reduction(-SqDist(x, y), b, 0)")
  expect_equal(sm[!none, ], (E %*% d$b / rowSums(E))[!none, ], tolerance = 1e-6)
  expect_true(all(is.nan(sm[none, ])))
})

test_that("keops_grad() and LazyTensor reductions take the same ranges", {
  d <- ranges_data()
  local_precision("float64")
  keep <- kept_mask(d$r, d$N, d$M)
  D2 <- outer(rowSums(d$x^2), rowSums(d$y^2), "+") - 2 * d$x %*% t(d$y)
  K <- exp(-0.7 * D2) * keep
  op <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", args3)
  e <- matrix(rnorm(2 * d$N), d$N)
  # d/dx_i sum_j K_ij <e_i, b_j> = sum_j -2 s (x_i - y_j) K_ij <e_i, b_j>
  W <- K * (e %*% t(d$b))
  want_x <- -2 * 0.7 * (d$x * rowSums(W) - W %*% d$y)
  gx <- keops_grad(op, "x")
  expect_equal(gx(list(d$x, d$y, d$b, 0.7, e), ranges = d$r), want_x, tolerance = 1e-10)
  # the gradient with respect to y_j reduces over i: it uses the j part of the ranges
  want_y <- -2 * 0.7 * (d$y * colSums(W) - t(W) %*% d$x)
  gy <- keops_grad(op, "y")
  expect_equal(gy(list(d$x, d$y, d$b, 0.7, e), ranges = d$r), want_y, tolerance = 1e-10)
  # a gradient that runs the forward reduction (Min) with the same ranges
  opmin <- keops_kernel("Min_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  em <- matrix(rnorm(d$N), d$N)
  Dm <- ifelse(keep, D2, Inf)
  nearest <- apply(Dm, 1, which.min)
  has <- rowSums(keep) > 0
  want_m <- 2 * (d$x - d$y[nearest, ]) * em[, 1]
  want_m[!has, ] <- 0
  expect_equal(keops_grad(opmin, "x")(list(d$x, d$y, em), ranges = d$r), want_m, tolerance = 1e-10)
  # LazyTensor reductions
  xi <- Vi(d$x); yj <- Vj(d$y)
  Kl <- exp(-0.7 * rkeops::sqdist(xi, yj))
  expect_equal(sum(Kl * Vj(d$b), index = "j", ranges = d$r), K %*% d$b, tolerance = 1e-10)
  expect_equal(sum(Kl, index = "i", ranges = d$r), matrix(colSums(K)), tolerance = 1e-10)
  expect_identical(argmin(rkeops::sqdist(xi, yj), index = "j", ranges = d$r),
                   matrix(as.integer(ifelse(has, nearest, 0L))))
  expect_equal(logsumexp(-rkeops::sqdist(xi, yj), index = "j", ranges = d$r),
               matrix(log(rowSums(exp(-D2) * keep))), tolerance = 1e-10)
})

test_that("solve() with ranges solves the truncated system", {
  set.seed(151)
  N <- 173
  x <- matrix(runif(2 * N), N)
  s <- sort_clusters(x, grid_cluster(x, 0.23))
  cl <- cluster_ranges_centroids(s$x, s$labels)
  gap <- sqrt(pmax(outer(rowSums(cl$centroids^2), rowSums(cl$centroids^2), "+") -
                     2 * tcrossprod(cl$centroids), 0)) - outer(cl$radii, cl$radii, "+")
  r <- from_matrix(cl$ranges, cl$ranges, gap < 0.2)       # symmetric: same blocks, symmetric keep
  keep <- kept_mask(r, N, N)
  expect_true(isSymmetric(keep) && any(!keep))
  xs <- s$x
  D2 <- outer(rowSums(xs^2), rowSums(xs^2), "+") - 2 * tcrossprod(xs)
  K <- exp(-D2 / 0.02) * keep
  b <- matrix(rnorm(2 * N), N)
  local_precision("float64")
  got <- solve(exp(-rkeops::sqdist(Vi(xs), Vj(xs)) / 0.02), b, alpha = 0.5, eps = 1e-10, ranges = r)
  expect_equal(got, solve(K + 0.5 * diag(N), b), tolerance = 1e-8)
})

test_that("bad ranges are errors that name what is wrong", {
  d <- ranges_data()
  op <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", args3)
  call <- function(r) op(list(d$x, d$y, d$b, 0.7), ranges = r)
  expect_error(call(list(1, 2)), "'ranges' must be made by from_matrix", class = "rkeops_error_input")
  r <- unclass(d$r)
  r$ranges_i[2, 1] <- 1.5
  expect_error(call(r), "'ranges\\$ranges_i' must hold whole numbers", class = "rkeops_error_input")
  r <- unclass(d$r)
  r$redranges_j <- r$redranges_j[, 1, drop = FALSE]
  expect_error(call(r), "'ranges\\$redranges_j' must be a matrix with 2 columns",
               class = "rkeops_error_input")
  r <- unclass(d$r)
  r$ranges_i[7, 2] <- d$N + 1
  expect_error(call(r), "row 7 of `ranges_i` .* goes past the last index; there are 157",
               class = "rkeops_error_input")
  r <- unclass(d$r)
  r$ranges_i[4, 1] <- r$ranges_i[3, 1] - 2
  expect_error(call(r), "row 4 of `ranges_i` .* overlaps or precedes", class = "rkeops_error_input")
  r <- unclass(d$r)
  r$slices_i <- r$slices_i[-1]
  expect_error(call(r), "`slices_i` has 6 values, one per block of `ranges_i` \\(7\\)",
               class = "rkeops_error_input")
  r <- unclass(d$r)
  r$ranges_j[1, 1] <- 0
  expect_error(call(r), "'ranges\\$ranges_j' holds a value below 1", class = "rkeops_error_input")
})

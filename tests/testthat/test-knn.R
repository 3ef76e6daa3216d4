# keops_knn() against brute force in float64 R: the k smallest distances of each query, and
# indices whose true distances are those (the same indices where no two distances tie).

knn_brute <- function(x, y, k, metric = "euclidean") {
  if (metric == "cosine") {
    x <- x / sqrt(rowSums(x^2)); y <- y / sqrt(rowSums(y^2))
  }
  D <- matrix(0, nrow(y), nrow(x))
  for (c in seq_len(ncol(x))) {
    diff <- outer(y[, c], x[, c], "-")
    D <- D + if (metric == "manhattan") abs(diff) else diff^2
  }
  D <- switch(metric, euclidean = sqrt(D), manhattan = D, cosine = D / 2)
  list(index = t(apply(D, 1, order))[, 1:k, drop = FALSE],
       distance = t(apply(D, 1, sort))[, 1:k, drop = FALSE], D = D)
}

# Same distances, and each index found is at the distance reported.
expect_knn <- function(got, want, exact_index = TRUE) {
  expect_equal(dim(got$index), dim(want$index))
  expect_equal(got$distance, want$distance, tolerance = 1e-10)
  at <- want$D[cbind(rep(seq_len(nrow(got$index)), ncol(got$index)), as.vector(got$index))]
  expect_equal(as.vector(got$distance), at, tolerance = 1e-10)
  expect_true(all(apply(got$index, 1, anyDuplicated) == 0))   # k distinct neighbours
  if (exact_index) expect_identical(got$index, matrix(as.integer(want$index), ncol = ncol(want$index)))
}

test_that("pruned and brute-force searches find the neighbours of uniform and clustered points", {
  local_precision("float64")
  set.seed(151)
  x <- matrix(runif(3 * 3001), ncol = 3)
  y <- matrix(runif(3 * 1207), ncol = 3)
  want <- knn_brute(x, y, 7)
  for (prune in c(NA, TRUE, FALSE)) expect_knn(keops_knn(x, y, 7, prune = prune, cell_points = 50), want)
  # the backend's default cells (24 points on the CPU, 128 on a GPU), pruned
  expect_knn(keops_knn(x, y, 7, prune = TRUE), want)
  expect_true(rkeops:::last_run()$pruned)
  # 20 blobs of very different sizes and spreads, far from the origin
  centres <- matrix(runif(60, 1e3, 1e3 + 50), 20)
  sizes <- c(1, 2, 5, rep(40, 12), 900, 600, 300, 100, 33)
  blobs <- centres[rep(1:20, sizes), ] + matrix(rnorm(3 * sum(sizes)), ncol = 3) * rep(c(0.01, 1, 3), length.out = sum(sizes))
  expect_knn(keops_knn(blobs, k = 11, prune = TRUE, cell_points = 30), knn_brute(blobs, blobs, 11))
  # k equal to the number of points, a query far from every point
  small <- x[1:40, ]
  expect_knn(keops_knn(small, rbind(y[1:30, ], c(100, -50, 3)), 40, prune = TRUE, cell_points = 4),
             knn_brute(small, rbind(y[1:30, ], c(100, -50, 3)), 40))
})

test_that("dimensions 1 to 8 are pruned, more are brute force, with the same neighbours", {
  local_precision("float64")
  set.seed(152)
  for (d in c(1, 2, 5, 8, 13)) {
    x <- matrix(rnorm(d * 1501), ncol = d)
    y <- matrix(rnorm(d * 333), ncol = d)
    expect_knn(keops_knn(x, y, 4, prune = TRUE, cell_points = 20), knn_brute(x, y, 4))
  }
  v <- rnorm(2000)
  expect_knn(keops_knn(v, c(0, 5, -1), 3, prune = TRUE), knn_brute(matrix(v), matrix(c(0, 5, -1)), 3))
})

test_that("duplicates and a single cell: the right distances, ties in any order", {
  local_precision("float64")
  set.seed(153)
  x <- matrix(round(runif(3 * 800) * 4) / 4, ncol = 3)        # many equal points and distances
  expect_knn(keops_knn(x, k = 9, prune = TRUE, cell_points = 30), knn_brute(x, x, 9), exact_index = FALSE)
  same <- matrix(1, 300, 2)                                     # one point 300 times
  got <- keops_knn(same, k = 5, prune = TRUE)
  expect_true(all(got$distance == 0))
  expect_true(all(apply(got$index, 1, function(r) !anyDuplicated(r))))
})

test_that("manhattan and cosine distances, pruned", {
  local_precision("float64")
  set.seed(154)
  x <- matrix(rnorm(3 * 2222), ncol = 3)
  y <- matrix(rnorm(3 * 501), ncol = 3)
  for (metric in c("manhattan", "cosine")) {
    for (prune in c(TRUE, FALSE)) {
      expect_knn(keops_knn(x, y, 6, metric = metric, prune = prune, cell_points = 40),
                 knn_brute(x, y, 6, metric))
    }
  }
})

test_that("float32 finds the neighbours of float64 up to near ties", {
  local_precision("float32")
  set.seed(155)
  x <- matrix(runif(3 * 5003), ncol = 3)
  got <- keops_knn(x, k = 10, prune = TRUE, cell_points = 64)
  want <- knn_brute(x, x, 10)
  expect_equal(got$distance, want$distance, tolerance = 1e-5)
  expect_gt(mean(got$index == want$index), 0.999)
})

# The k = 5 neighbours found in float32 against float64 brute force (`knn_brute`): each at the
# distance of the k nearest (ties aside), and the same indices for at least 99 % of the queries.
expect_float64_neighbours <- function(got, want, what) {
  at <- matrix(want$D[cbind(rep(seq_len(nrow(got$index)), 5), as.vector(got$index))], ncol = 5)
  expect_lt(max(abs(at - want$distance)), 1e-6, label = what)
  expect_lt(max(abs(got$distance - want$distance)), 1e-5, label = what)
  expect_gte(mean(rowSums(got$index == want$index) == 5), 0.99, label = what)
}

test_that("float32 finds the float64 neighbours of points far from the origin (centred first)", {
  local_precision("float32")
  set.seed(157)
  # Near 1e6 float32's spacing is 0.0625: uncentred, 1 query in 2000 had the float64 neighbours.
  u <- matrix(runif(3 * 2003), ncol = 3)
  q <- matrix(runif(3 * 517), ncol = 3)
  for (offset in c(1e3, 1e6, 1e7)) {
    x <- u + offset
    y <- q + offset
    want <- knn_brute(x, y, 5)
    for (prune in c(NA, FALSE)) {
      expect_float64_neighbours(keops_knn(x, y, 5, prune = prune), want, paste(offset, prune))
    }
  }
  expect_float64_neighbours(keops_knn(x, k = 5), knn_brute(x, x, 5), "queries that are the data")
})

test_that("the brute-force reduction under rkeops_use_future() centres the points too", {
  skip_if_not_installed("future")
  local_precision("float32")
  set.seed(158)
  x <- matrix(runif(3 * 1003), ncol = 3) + 1e6
  y <- matrix(runif(3 * 301), ncol = 3) + 1e6
  future::plan(future::sequential)
  old <- rkeops_use_future(blocks = 2)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  expect_float64_neighbours(keops_knn(x, y, 5), knn_brute(x, y, 5), "future")
  expect_match(rkeops:::last_run()$backend, "^future")
})

test_that("bad arguments are named errors", {
  x <- matrix(runif(30), 10)
  expect_error(keops_knn("a", k = 1), "'x' must be a numeric matrix", class = "rkeops_error_input")
  expect_error(keops_knn(x, matrix(1, 2, 2), k = 1), "'y' must have the columns of 'x' \\(3\\)",
               class = "rkeops_error_input")
  expect_error(keops_knn(x, k = 11), "'k' must be at most nrow\\(x\\) = 10", class = "rkeops_error_input")
  expect_error(keops_knn(x, k = 0), "'k' must be a whole number >= 1", class = "rkeops_error_input")
  expect_error(keops_knn(rbind(x, NA), k = 1), "'x' must be .*without NA", class = "rkeops_error_input")
  expect_error(keops_knn(x, k = 2, metric = "cosine", y = matrix(0, 1, 3)), "rows of 'y' that are not 0",
               class = "rkeops_error_input")
  expect_error(keops_knn(x, k = 2, metric = "hamming"), "'arg' should be one of",
               class = "rkeops_error_input")
  expect_error(keops_knn(x, k = 2, prune = "yes"), "'prune' must be NA, TRUE or FALSE",
               class = "rkeops_error_input")
  for (bad in list(0, -3, NA, c(10, 20), "16")) {
    expect_error(keops_knn(x, k = 2, cell_points = bad), "cell_points", class = "rkeops_error_input")
  }
})



test_that("forked children search as their parent did (the engine's threads, started by the parent, are not theirs)", {
  skip_on_os("windows") # (no fork)
  set.seed(156)
  # Large enough for the engine to share the work among its threads, which the parent starts here.
  x <- matrix(runif(3 * 200003), ncol = 3)
  want <- keops_knn(x, k = 3)
  got <- parallel::mclapply(1:2, function(i) keops_knn(x, k = 3), mc.cores = 2)
  for (g in got) {
    expect_identical(g$index, want$index)
    expect_identical(g$distance, want$distance)
  }
  expect_identical(want$index[, 1], seq_len(nrow(x)))
})

# keops_kmeans() and keops_gmm() under rkeops_use_future(): the points cut into shards kept on the
# workers across the iterations (each sent once), the iterations' sums added in this process. Their
# results are those of one process (labels, sizes, classifications and iterations identical,
# centres, parameters and log-likelihoods up to the order of the float sums), and K-means' those of
# stats::kmeans() from the same start; on two multisession workers (what CI runs), on
# plan(sequential) with unequal shards, and with a worker that lost its shard.

assign("socket_noted", TRUE, envir = rkeops:::.rkeops_env)

# Five well-separated blobs of 3001 points in D = 2 (an odd number: unequal shards) far from the
# origin, and a start of one point of each blob.
set.seed(56)
kmf_blobs <- matrix(c(0, 0, 10, 0, 0, 10, 10, 10, 5, 5), ncol = 2, byrow = TRUE) + 100
kmf_truth <- sample(5, 3001, replace = TRUE)
kmf_x <- kmf_blobs[kmf_truth, ] + matrix(rnorm(2 * 3001), ncol = 2)
kmf_start <- kmf_x[match(1:5, kmf_truth), ]

# fit(...) with the future path on (`blocks` shards; NULL: one per worker), the path then off.
on_workers <- function(fit, ..., blocks = NULL) {
  old <- rkeops_use_future(blocks = blocks)
  on.exit(do.call(rkeops_use_future, old))
  fit(...)
}

# The components of fit `split` (on the workers) against those of `one` (one process): `same`
# identical, `close` equal within `tolerance`.
expect_same_fit <- function(split, one, same, close, tolerance) {
  for (name in same) expect_identical(split[[name]], one[[name]], label = name)
  for (name in close) expect_equal(split[[name]], one[[name]], tolerance = tolerance, label = name)
}
kmeans_same <- c("cluster", "size", "iter", "ifault")
kmeans_close <- c("centers", "withinss", "totss")
gmm_same <- c("classification", "iterations")
gmm_close <- c("loglik", "loglik_trace", "parameters", "BIC")

test_that("keops_kmeans() on two multisession workers sends each shard once and fits as one process", {
  skip_without_future()
  local_precision("float64")
  start_plan(future::multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  one <- keops_kmeans(kmf_x, kmf_start, iter.max = 20)
  split <- on_workers(keops_kmeans, kmf_x, kmf_start, iter.max = 20)
  expect_same_fit(split, one, kmeans_same, kmeans_close, 1e-12)
  # one shard per worker, sent with the first pass only, then kept (the passes, and the end)
  shards <- rkeops:::.rkeops_env$last_shards
  expect_identical(shards$shards, 2L)
  expect_identical(shards$sent, 2L)
  expect_identical(shards$steps, split$iter + 1L)
  # against stats::kmeans() from the same centres (float64, Lloyd's passes)
  ref <- suppressWarnings(stats::kmeans(kmf_x, kmf_start, iter.max = 20, algorithm = "Lloyd"))
  expect_identical(unname(split$cluster), ref$cluster)
  expect_equal(unname(split$centers), unname(ref$centers), tolerance = 1e-10)
  expect_equal(split$withinss, ref$withinss, tolerance = 1e-8)
  # several seedings (k-means++ with R's random numbers, drawn here): the same best fit, the
  # shards sent once for all of them
  set.seed(3)
  one <- keops_kmeans(kmf_x, 5, iter.max = 20, nstart = 3)
  set.seed(3)
  split <- on_workers(keops_kmeans, kmf_x, 5, iter.max = 20, nstart = 3)
  expect_same_fit(split, one, kmeans_same, kmeans_close, 1e-12)
  expect_identical(rkeops:::.rkeops_env$last_shards$sent, 2L)
  # the future path on again after the call, off after on_workers(keops_kmeans, )
  expect_null(rkeops:::.rkeops_env$future)
  old <- rkeops_use_future(blocks = 2)
  expect_error(keops_kmeans(kmf_x, "a"), class = "rkeops_error_input")
  expect_identical(rkeops_use_future(FALSE), list(enable = TRUE, blocks = 2L, ncore = NULL))
})

test_that("keops_kmeans() on plan(sequential) with unequal shards, float32 and unconverged, fits as one process", {
  skip_without_future()
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  one <- keops_kmeans(kmf_x, kmf_start, iter.max = 20)
  split <- on_workers(keops_kmeans, kmf_x, kmf_start, iter.max = 20, blocks = 3)
  expect_same_fit(split, one, kmeans_same, kmeans_close, 1e-5)
  expect_identical(rkeops:::.rkeops_env$last_shards[c("shards", "sent")], list(shards = 3L, sent = 3L))
  # stopped before convergence: the same warning, iterations and labels of the last pass
  far <- kmf_start + 1.5
  expect_warning(one <- keops_kmeans(kmf_x, far, iter.max = 1), class = "rkeops_warning_convergence")
  expect_warning(split <- on_workers(keops_kmeans, kmf_x, far, iter.max = 1, blocks = 3),
                 class = "rkeops_warning_convergence")
  expect_identical(split$ifault, 2L)
  expect_same_fit(split, one, kmeans_same, kmeans_close, 1e-5)
  # more than 255 clusters: their labels come back as integers, not bytes
  many <- kmf_x[seq(1, 3001, by = 10), ]
  one <- suppressWarnings(keops_kmeans(kmf_x, many, iter.max = 2))
  split <- suppressWarnings(on_workers(keops_kmeans, kmf_x, many, iter.max = 2, blocks = 3))
  expect_gt(max(split$cluster), 255L)
  expect_same_fit(split, one, kmeans_same, kmeans_close, 1e-5)
  # the shards dropped from this process (the "worker" here) after the loop
  expect_length(ls(rkeops:::.rkeops_shards), 0L)
})

test_that("a worker that does not hold its shard gets its rows again, and the pass counts as a change", {
  skip_without_future()
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  local_precision("float64")
  old <- rkeops_use_future(blocks = 2)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  shards <- rkeops:::shards_open(list(x = kmf_x), list(blocks = 2L))
  j <- as.double(1:5)
  pass <- function(p, centres) {
    rkeops:::shards_map(shards, "kmeans_shard_pass", list(centres = centres, j = j, pass = p))
  }
  first <- pass(1L, kmf_start)
  expect_identical(shards$sent, 2L)
  expect_true(all(is.na(vapply(first, `[[`, 0, "changed"))))   # no labels before the first pass
  sc <- Reduce(`+`, lapply(first, `[[`, "sc"))
  labels <- max.col(-sqdist(kmf_x, kmf_start), ties.method = "first")
  expect_equal(sc[, 3], as.vector(table(factor(labels, 1:5))))
  expect_equal(sc[, 1:2], rowsum(kmf_x, labels, reorder = TRUE), tolerance = 1e-12, ignore_attr = TRUE)
  # the second shard lost (a worker restarted): sent again, its change unknown; the first kept
  keys <- ls(rkeops:::.rkeops_shards)
  rm(list = keys[endsWith(keys, " 2")], envir = rkeops:::.rkeops_shards)
  centres <- sc[, 1:2] / sc[, 3]
  second <- pass(2L, centres)
  expect_identical(shards$sent, 3L)
  moved <- labels != max.col(-sqdist(kmf_x, centres), ties.method = "first")
  expect_identical(second[[1L]]$changed, as.double(sum(moved[seq_len(shards$bounds[2L])])))
  expect_true(is.na(second[[2L]]$changed))
  # both kept now: the same centres change no label
  third <- pass(3L, centres)
  expect_identical(shards$sent, 3L)
  expect_identical(vapply(third, `[[`, 0, "changed"), c(0, 0))
  # a loop's first shard sent drops the shards of other loops
  other <- rkeops:::shards_open(list(x = kmf_x[1:10, ]), list(blocks = 1L))
  rkeops:::shards_map(other, "kmeans_shard_pass", list(centres = kmf_start, j = j, pass = 1L))
  keys <- ls(rkeops:::.rkeops_shards)
  expect_identical(keys, paste(other$token, 1))
  rm(list = keys, envir = rkeops:::.rkeops_shards)
})

test_that("a shard's rows travel as the bytes of their doubles, or of their float32 numbers", {
  m <- matrix(c(pi * 1:10, -exp(1:10), 1e300, -1e-300, NA, NaN, Inf, 0, 1:4 / 3), 10, 3)
  packed <- rkeops:::shard_pack(m, 3L, 9L, 8L)
  expect_identical(packed$dim, c(6L, 3L))
  expect_identical(packed$bytes, writeBin(as.vector(m[4:9, ]), raw(), size = 8, endian = "little"))
  expect_identical(rkeops:::shard_unpack(packed), m[4:9, ])
  # float32: R's own rounding to 4 bytes (1e300 overflows to Inf, -1e-300 underflows to -0)
  packed <- rkeops:::shard_pack(m, 0L, 10L, 4L)
  expect_identical(packed$bytes, writeBin(as.vector(m), raw(), size = 4, endian = "little"))
  float32 <- readBin(packed$bytes, "double", 30, size = 4, endian = "little")
  expect_identical(rkeops:::shard_unpack(packed), matrix(float32, 10, 3))
  expect_identical(dim(rkeops:::shard_unpack(rkeops:::shard_pack(m, 5L, 5L, 4L))), c(0L, 3L))
  # integers go as doubles
  expect_identical(rkeops:::shard_unpack(rkeops:::shard_pack(matrix(1:6, 3), 1L, 3L, 8L)), matrix(c(2, 3, 5, 6), 2))
  # what the engine refuses, with the argument named
  pack <- function(...) .Call(rkeops:::wrap__keops_shard_pack, ...)
  unpack <- function(...) .Call(rkeops:::wrap__keops_shard_unpack, ...)
  expect_error(rkeops:::rust_result(pack(m, 4L, 3L, 8L)), class = "rkeops_error_input")
  expect_error(rkeops:::rust_result(pack(m, 0L, 11L, 8L)), "not rows of 'x'")
  expect_error(rkeops:::rust_result(pack(m, 0L, 1L, 5L)), "'size' must be 4 or 8")
  expect_error(rkeops:::rust_result(pack("a", 0L, 1L, 8L)), "'x' must be a double matrix")
  expect_error(rkeops:::rust_result(unpack(1:3, 1L, 1L, 8L)), "'bytes' must be a raw vector")
  expect_error(rkeops:::rust_result(unpack(raw(7), 1L, 1L, 8L)), "7 bytes are not 1 x 1 numbers of 8 bytes")
})

# Four correlated blobs of 5003 points in D = 2 for keops_gmm().
set.seed(57)
gmf_x <- matrix(c(0, 0, 6, 0, 0, 6, 6, 6), 4, 2, byrow = TRUE)[sample(4, 5003, TRUE), ] +
  matrix(rnorm(10006), ncol = 2) %*% matrix(c(1, 0.3, 0, 0.8), 2)

test_that("keops_gmm() on two multisession workers (its K-means start too) fits as one process", {
  skip_without_future()
  local_precision("float64")
  start_plan(future::multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  for (model in c("VVI", "VVV")) {
    set.seed(4)
    one <- keops_gmm(gmf_x, 4, model = model, tol = 1e-10, iter.max = 30)
    set.seed(4)
    split <- on_workers(keops_gmm, gmf_x, 4, model = model, tol = 1e-10, iter.max = 30)
    expect_same_fit(split, one, gmm_same, gmm_close, 1e-10)
    expect_gt(split$iterations, 3L)
    # the EM's shards sent once (after the K-means start's own), one step per iteration and the end
    expect_identical(rkeops:::.rkeops_env$last_shards,
                     list(shards = 2L, sent = 2L, steps = split$iterations + 1L))
  }
})

test_that("keops_gmm() on plan(sequential) with unequal shards, float32, fits as one process", {
  skip_without_future()
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  for (model in c("VVI", "VVV")) {
    set.seed(5)
    one <- keops_gmm(gmf_x, 3:4, model = model)
    set.seed(5)
    split <- on_workers(keops_gmm, gmf_x, 3:4, model = model, blocks = 3)
    expect_same_fit(split, one, gmm_same, gmm_close, 1e-5)
    expect_identical(rkeops:::.rkeops_env$last_shards$sent, 3L)
  }
  expect_length(ls(rkeops:::.rkeops_shards), 0L)
})

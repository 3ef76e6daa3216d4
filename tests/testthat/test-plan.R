# The plans that R asks of the engine (src/rust/rkeops/src/plan.rs): the blocks of output rows of
# the future path and the layout of a batch, against references computed here by brute force, on
# sizes that are multiples of nothing in particular; and their errors, by class.

# Sorted blocks of 1..n (1-based, inclusive, as from_matrix() takes them), some rows in none.
random_blocks <- function(n) {
  cuts <- sort(unique(c(0L, sample.int(n - 1L, min(n - 1L, sample.int(6L, 1L))), n)))
  blocks <- cbind(utils::head(cuts, -1L) + 1L, utils::tail(cuts, -1L))
  blocks[sort(sample.int(nrow(blocks), max(1L, nrow(blocks) - 1L))), , drop = FALSE]
}

# The reduced rows (1-based, increasing) that output row `r` (1-based) visits under ranges in the
# engine's form (0-based starts then exclusive ends) for a reduction over `axis`.
visited <- function(ranges, axis, r) {
  parts <- if (axis == 0L) c("ranges_i", "slices_i", "redranges_j") else c("ranges_j", "slices_j", "redranges_i")
  blocks <- ranges[[parts[1L]]]
  slices <- ranges[[parts[2L]]]
  red <- ranges[[parts[3L]]]
  nb <- length(blocks) %/% 2L
  nr <- length(red) %/% 2L
  for (k in seq_len(nb)) {
    if (r > blocks[k] && r <= blocks[nb + k]) {
      first <- if (k == 1L) 0L else slices[k - 1L]
      at <- seq.int(first + 1L, length.out = slices[k] - first)
      rows <- unlist(lapply(at, function(q) seq.int(red[q] + 1L, length.out = red[nr + q] - red[q])))
      return(sort(as.integer(rows)))
    }
  }
  integer(0)
}

future_plan <- function(formula, args, inputs, blocks, ranges) {
  rkeops:::rust_result(.Call(rkeops:::wrap__keops_future_blocks, formula, args, inputs, as.integer(blocks), ranges))
}

test_that("the future path's blocks are R's cuts, each sent the reduced rows its ranges visit", {
  set.seed(3601)
  args <- c("x = Vi(2)", "y = Vj(2)")
  for (trial in 1:12) {
    n <- sample(20:97, 1L)
    m <- sample(11:83, 1L)
    x <- rmat(n, 2)
    y <- rmat(m, 2)
    bi <- random_blocks(n)
    bj <- random_blocks(m)
    keep <- matrix(stats::runif(nrow(bi) * nrow(bj)) < 0.4, nrow(bi), nrow(bj))
    ranges <- rkeops:::ranges_for_engine(from_matrix(bi, bj, keep))
    for (axis in 0:1) {
      formula <- sprintf("Sum_Reduction(SqDist(x, y), %d)", axis)
      n_out <- if (axis == 0L) n else m
      n_red <- if (axis == 0L) m else n
      for (blocks in c(1L, 2L, 3L, 7L, 1000L)) {
        info <- sprintf("trial %d, axis %d, %d blocks", trial, axis, blocks)
        cuts <- as.integer(round(seq(0, n_out, length.out = min(blocks, n_out) + 1L)))
        dense <- future_plan(formula, args, list(x, y), blocks, NULL)
        expect_identical(dense[c("first", "last", "from", "to")],
                         list(first = utils::head(cuts, -1L), last = cuts[-1L],
                              from = rep(0L, length(cuts) - 1L), to = rep(n_red, length(cuts) - 1L)), info = info)
        expect_null(dense$ranges)
        plan <- future_plan(formula, args, list(x, y), blocks, ranges)
        expect_identical(plan$first, utils::head(cuts, -1L), info = info)
        expect_true(all(vapply(plan$ranges, inherits, NA, "keops_engine_ranges")), info = info)
        # each row of each block visits the reduced rows it visits in the whole reduction
        got <- want <- sent <- hulls <- list()
        for (b in seq_along(plan$first)) {
          rows <- seq.int(plan$first[b] + 1L, plan$last[b])
          got <- c(got, lapply(rows - plan$first[b], function(r) visited(plan$ranges[[b]], axis, r) + plan$from[b]))
          mine <- lapply(rows, function(r) visited(ranges, axis, r))
          want <- c(want, mine)
          # and is sent those rows, from the first to the last (one row when it visits none)
          seen <- unlist(mine)
          sent[[b]] <- c(plan$from[b], plan$to[b])
          hulls[[b]] <- if (length(seen)) c(min(seen) - 1L, max(seen)) else c(0L, 1L)
        }
        expect_identical(got, want, info = info)
        expect_identical(sent, hulls, info = info)
      }
    }
  }
})

test_that("with random ranges, the future path equals one process, indices included", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  local_precision("float64")
  set.seed(3602)
  n <- 89
  m <- 61
  x <- rmat(n, 2)
  y <- rmat(m, 2)
  bi <- random_blocks(n)
  bj <- random_blocks(m)
  ranges <- from_matrix(bi, bj, matrix(stats::runif(nrow(bi) * nrow(bj)) < 0.5, nrow(bi), nrow(bj)))
  ops <- list(sum = keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)), 1)", c("x = Vi(2)", "y = Vj(2)")),
              argmin = keops_kernel("ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(2)", "y = Vj(2)")))
  here <- lapply(ops, function(op) op(list(x, y), ranges = ranges))
  old <- rkeops_use_future(blocks = 4)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  for (name in names(ops)) {
    got <- ops[[name]](list(x, y), ranges = ranges)
    expect_match(rkeops:::last_run()$backend, "^future \\(4 blocks\\)", info = name)
    expect_equal(got, here[[name]], tolerance = 1e-13, info = name)
  }
})

test_that("the future path refuses bad shapes and ranges before sending data, as one process does", {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  op <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 3, 0)", c("x = Vi(2)", "y = Vj(2)"))
  x <- rmat(13, 2)
  y <- rmat(7, 2)
  bad <- list(
    columns = list(list(x, rmat(7, 3)), NULL),
    k = list(list(x, y[1:2, ]), NULL),
    ranges = list(list(x, y), from_matrix(cbind(1, 20), cbind(1, 7), matrix(TRUE)))
  )
  here <- lapply(bad, function(b) tryCatch(op(b[[1L]], ranges = b[[2L]]), error = identity))
  old <- rkeops_use_future(blocks = 3)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  for (name in names(bad)) {
    err <- tryCatch(op(bad[[name]][[1L]], ranges = bad[[name]][[2L]]), error = identity)
    expect_s3_class(err, "rkeops_error_input")
    expect_identical(conditionMessage(err), conditionMessage(here[[name]]), info = name)
    expect_identical(err$arg, here[[name]]$arg, info = name)
  }
  expect_identical(here$columns$arg, "y")
  expect_match(conditionMessage(here$ranges), "ranges_i")
})

# The block-diagonal ranges of members of `ni` i-rows and `nj` j-rows, in the engine's form.
diagonal_ranges <- function(ni, nj) {
  ends_i <- cumsum(ni)
  ends_j <- cumsum(nj)
  one_each <- seq_along(ni)
  list(ranges_i = as.integer(c(ends_i - ni, ends_i)), slices_i = one_each,
       redranges_j = as.integer(c(ends_j - nj, ends_j)), ranges_j = as.integer(c(ends_j - nj, ends_j)),
       slices_j = one_each, redranges_i = as.integer(c(ends_i - ni, ends_i)))
}

test_that("the engine's batch layout is the members' rows end to end and block-diagonal ranges", {
  set.seed(3603)
  info <- list(names = c("x", "y", "p", "b", "s"), categories = c("Vi", "Vj", "Pm", "Vj", "Pm"),
               dims = c(2L, 1L, 1L, 1L, 1L))
  for (trial in 1:5) {
    B <- sample(2:11, 1L)
    ni <- sample.int(9L, B, replace = TRUE)
    nj <- sample.int(13L, B, replace = TRUE)
    input <- list(lapply(ni, function(r) rmat(r, 2)), lapply(nj, function(r) rmat(r, 1)),
                  lapply(seq_len(B), function(b) stats::runif(1)), lapply(nj, function(r) rmat(r, 1)), 0.5)
    for (axis in 0:1) {
      layout <- rkeops:::batch_layout(input, info, axis)
      expect_identical(layout$B, B)
      expect_identical(layout$rows, list(Vi = ni, Vj = nj))
      expect_identical(layout$starts, list(Vi = as.integer(cumsum(ni) - ni), Vj = as.integer(cumsum(nj) - nj)))
      expect_identical(layout$batched, c(TRUE, TRUE, TRUE, TRUE, FALSE))
      expect_s3_class(layout$ranges, "keops_engine_ranges")
      expect_identical(unclass(layout$ranges), diagonal_ranges(ni, nj))
      # the batched parameter, one copy per row of its member, on the output's index
      out <- if (axis == 0L) ni else nj
      expect_identical(layout$categories[3L], if (axis == 0L) "Vi" else "Vj")
      expect_identical(layout$inputs[[3L]][, 1], rep(unlist(input[[3L]]), out))
    }
  }
  # members of equal size in arrays, a shared variable and a batch of one member
  arrays <- list(array(stats::runif(5 * 2 * 3), c(5, 2, 3)), rmat(4, 1), list(0.1),
                 array(stats::runif(4 * 3), c(4, 1, 3)), 2)
  layout <- rkeops:::batch_layout(arrays, info, 0L)
  expect_identical(layout$rows, list(Vi = rep(5L, 3), Vj = rep(4L, 3)))
  expect_identical(layout$batched, c(TRUE, FALSE, FALSE, TRUE, FALSE))
  expect_identical(unclass(layout$ranges), diagonal_ranges(rep(5L, 3), rep(4L, 3)))
  expect_identical(layout$inputs[[2L]], rbind(arrays[[2L]], arrays[[2L]], arrays[[2L]]))
  expect_identical(layout$inputs[[3L]], 0.1)
})

test_that("bad batches are input errors that name the input", {
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(2)", "y = Vj(2)", "b = Vj(1)"))
  x <- array(stats::runif(5 * 2 * 3), c(5, 2, 3))
  y <- array(stats::runif(4 * 2 * 3), c(4, 2, 3))
  b <- array(stats::runif(4 * 3), c(4, 1, 3))
  cases <- list(
    y = list(x, y[, , 1:2], b),                     # 2 members against 3
    y = list(x, list(), b),                         # an empty batch
    b = list(x, y, list(b[, , 1], b[, , 2], rmat(5, 1))),   # member 3: 5 rows against 4 in y
    b = list(x, y, rmat(6, 1))                      # shared, 6 rows against 4
  )
  for (k in seq_along(cases)) {
    err <- tryCatch(op(cases[[k]]), error = identity)
    expect_s3_class(err, "rkeops_error_input")
    expect_identical(err$arg, names(cases)[k], info = conditionMessage(err))
    expect_match(conditionMessage(err), sprintf("^input '%s': ", names(cases)[k]))
  }
  po <- keops_kernel("Sum_Reduction(p * y, 1)", c("p = Pm(1)", "y = Vj(2)"))
  expect_error(po(list(list(1, 2, 3), y)), "needs at least one Vi variable", class = "rkeops_error_input")
})

# The clustering helpers that build the ranges of block-sparse reductions
# (R/clustering.R), against brute-force references written here with loops.
# Pure R: nothing here calls the engine.

# ---------------------------------------------------------------------------
# Brute-force references
# ---------------------------------------------------------------------------

# Cell coordinates of each point, one point at a time (the definition).
ref_cells <- function(x, size) {
  x <- as.matrix(x)
  size <- rep_len(size, ncol(x))
  mins <- numeric(ncol(x))
  for (d in seq_len(ncol(x))) mins[d] <- min(x[, d])
  v <- matrix(0, nrow(x), ncol(x))
  for (i in seq_len(nrow(x))) v[i, ] <- floor((x[i, ] - mins) / size)
  v
}

# TRUE if cell u comes before cell w, first coordinate compared first.
ref_lex_less <- function(u, w) {
  for (d in seq_along(u)) {
    if (u[d] < w[d]) return(TRUE)
    if (u[d] > w[d]) return(FALSE)
  }
  FALSE
}

# Label of each point: 1 + the number of distinct non-empty cells before its cell.
ref_grid_labels <- function(x, size) {
  v <- ref_cells(x, size)
  distinct <- list()
  for (i in seq_len(nrow(v))) {
    seen <- FALSE
    for (u in distinct) if (all(u == v[i, ])) { seen <- TRUE; break }
    if (!seen) distinct[[length(distinct) + 1L]] <- v[i, ]
  }
  labels <- integer(nrow(v))
  for (i in seq_len(nrow(v))) {
    labels[i] <- 1L + sum(vapply(distinct, function(u) ref_lex_less(u, v[i, ]), TRUE))
  }
  labels
}

# Dense mask of the entries a (blocks, slices, redranges) triple computes.
ref_mask <- function(blocks, slices, red, n, m) {
  mask <- matrix(FALSE, n, m)
  prev <- 0L
  for (k in seq_len(nrow(blocks))) {
    for (r in seq_len(slices[k] - prev) + prev) {
      if (blocks[k, 2] >= blocks[k, 1] && red[r, 2] >= red[r, 1]) {
        mask[blocks[k, 1]:blocks[k, 2], red[r, 1]:red[r, 2]] <- TRUE
      }
    }
    prev <- slices[k]
  }
  mask
}

# Dense mask implied by blocks and keep.
ref_keep_mask <- function(ranges_i, ranges_j, keep, n, m) {
  mask <- matrix(FALSE, n, m)
  for (k in seq_len(nrow(ranges_i))) for (l in seq_len(nrow(ranges_j))) {
    if (isTRUE(keep[k, l] == 1) && ranges_i[k, 2] >= ranges_i[k, 1] && ranges_j[l, 2] >= ranges_j[l, 1]) {
      mask[ranges_i[k, 1]:ranges_i[k, 2], ranges_j[l, 1]:ranges_j[l, 2]] <- TRUE
    }
  }
  mask
}

# Random sorted blocks within 1..n, with gaps and empty blocks.
random_blocks <- function(nb, n, p_empty = 0.2) {
  cuts <- sort(sample(n + 1L, 2L * nb, replace = TRUE))
  first <- cuts[c(TRUE, FALSE)]
  last <- cuts[c(FALSE, TRUE)] - 1L
  # Sorted and not overlapping: each block strictly after the previous one.
  for (k in seq_len(nb)[-1]) {
    if (first[k] <= last[k - 1]) first[k] <- last[k - 1] + 1L
    if (last[k] < first[k] - 1L) last[k] <- first[k] - 1L
  }
  empty <- runif(nb) < p_empty
  last[empty] <- first[empty] - 1L
  cbind(first, last)
}

# The structure the engine relies on.
expect_ranges_format <- function(r) {
  expect_s3_class(r, "keops_ranges")
  expect_identical(names(r), c("ranges_i", "slices_i", "redranges_j", "ranges_j", "slices_j", "redranges_i"))
  for (nm in c("ranges_i", "redranges_j", "ranges_j", "redranges_i")) {
    expect_true(is.matrix(r[[nm]]) && is.integer(r[[nm]]) && ncol(r[[nm]]) == 2L, label = nm)
  }
  for (side in list(c("ranges_i", "slices_i", "redranges_j"), c("ranges_j", "slices_j", "redranges_i"))) {
    s <- r[[side[2]]]
    red <- r[[side[3]]]
    expect_true(is.integer(s) && length(s) == nrow(r[[side[1]]]), label = side[2])
    expect_true(all(diff(c(0L, s)) >= 0L), label = side[2])
    if (length(s)) expect_identical(s[length(s)], nrow(red))
    # Within each block: sorted, non-empty ranges that never touch (merged).
    prev <- 0L
    for (k in seq_along(s)) {
      rows <- seq_len(s[k] - prev) + prev
      expect_true(all(red[rows, 2] >= red[rows, 1]), label = paste(side[3], "non-empty"))
      if (length(rows) > 1L) {
        expect_true(all(red[rows[-1], 1] > red[rows[-length(rows)], 2] + 1L), label = paste(side[3], "merged"))
      }
      prev <- s[k]
    }
  }
}

# from_matrix() against the dense masks, both parts.
check_from_matrix <- function(ranges_i, ranges_j, keep, n, m) {
  r <- from_matrix(ranges_i, ranges_j, keep)
  expect_ranges_format(r)
  expect_identical(r$ranges_i, matrix(as.integer(ranges_i), ncol = 2))
  expect_identical(r$ranges_j, matrix(as.integer(ranges_j), ncol = 2))
  want <- ref_keep_mask(ranges_i, ranges_j, keep, n, m)
  expect_identical(ref_mask(r$ranges_i, r$slices_i, r$redranges_j, n, m), want)
  expect_identical(ref_mask(r$ranges_j, r$slices_j, r$redranges_i, m, n), t(want))
  invisible(r)
}

# ---------------------------------------------------------------------------
# grid_cluster()
# ---------------------------------------------------------------------------

test_that("grid_cluster() labels as the brute force, D = 1, 2, 3, 7, 100", {
  set.seed(11)
  for (d in c(1L, 2L, 3L, 7L, 100L)) {
    n <- 57L
    # Points around a few centres so that cells are shared in any dimension.
    centres <- matrix(sample(0:3, 5L * d, replace = TRUE), 5L, d)
    x <- centres[sample(5L, n, replace = TRUE), , drop = FALSE] + matrix(runif(n * d, 0, 0.4), n, d)
    for (size in c(0.37, 1.3, 10)) {
      lab <- grid_cluster(x, size)
      expect_identical(lab, ref_grid_labels(x, size), label = sprintf("D = %d, size = %g", d, size))
      # Same cell iff same label; labels 1..C consecutive.
      v <- ref_cells(x, size)
      same_cell <- outer(seq_len(n), seq_len(n), Vectorize(function(a, b) all(v[a, ] == v[b, ])))
      expect_identical(outer(lab, lab, "=="), same_cell)
      expect_setequal(lab, seq_len(max(lab)))
    }
  }
})

test_that("grid_cluster() takes one size per dimension and a vector as one column", {
  set.seed(12)
  x <- cbind(runif(43), runif(43, -5, 5), rnorm(43))
  size <- c(0.1, 2.5, 0.7)
  lab <- grid_cluster(x, size)
  expect_identical(lab, ref_grid_labels(x, size))
  expect_false(identical(lab, grid_cluster(x, 0.1)))
  v <- rnorm(31)
  expect_identical(grid_cluster(v, 0.4), grid_cluster(matrix(v), 0.4))
  expect_identical(grid_cluster(v, 0.4), ref_grid_labels(matrix(v), 0.4))
  expect_identical(grid_cluster(matrix(1:6, 3), 1), ref_grid_labels(matrix(1:6, 3), 1))
  expect_identical(grid_cluster(matrix(0, 0, 2), 1), integer(0))
  expect_identical(grid_cluster(c(5, 5, 5), 1), c(1L, 1L, 1L))
})

test_that("grid_cluster() does not overflow with many cells per dimension", {
  set.seed(13)
  # 100 dimensions with ~1e6 cells each: a single cell number would not fit
  # an integer (nor a double).
  d <- 100L
  base <- matrix(runif(6L * d, 0, 1e6), 6L, d)
  x <- base[c(1:6, 6:1, 3, 3, 2), ]
  x[7:12, 100] <- x[7:12, 100] + 1.5   # the copies are in other cells along the last dimension
  lab <- grid_cluster(x, 1)
  expect_identical(lab, ref_grid_labels(x, 1))
  expect_identical(max(lab), 12L)
  # Very wide spreads in 3-D.
  x <- cbind(c(-1e12, 1e12, 0, 1e12 - 0.5), c(0, 1, 2, 1.2), c(5, 5, 5, 5))
  expect_identical(grid_cluster(x, 1), ref_grid_labels(x, 1))
})

test_that("grid_cluster() checks its arguments", {
  x <- matrix(runif(12), 4)
  expect_error(grid_cluster(matrix(letters[1:4], 2), 1), "'x'", class = "rkeops_error_input")
  expect_error(grid_cluster(list(1, 2), 1), "'x'", class = "rkeops_error_input")
  expect_error(grid_cluster(c(1, NA, 3), 1), "'x'.*NA", class = "rkeops_error_input")
  expect_error(grid_cluster(c(1, NaN, 3), 1), "'x'", class = "rkeops_error_input")
  expect_error(grid_cluster(c(1, Inf, 3), 1), "'x'", class = "rkeops_error_input")
  expect_error(grid_cluster(array(1, c(2, 2, 2)), 1), "'x'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, 0), "'size'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, -1), "'size'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, NA), "'size'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, Inf), "'size'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, "1"), "'size'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, numeric(0)), "'size'", class = "rkeops_error_input")
  expect_error(grid_cluster(x, c(1, 2)), "'size'.*length", class = "rkeops_error_input")
  expect_error(grid_cluster(c(-1e300, 1e300), 1e-300), "'size'", class = "rkeops_error_input")
})

# ---------------------------------------------------------------------------
# sort_clusters()
# ---------------------------------------------------------------------------

test_that("sort_clusters() sorts stably and round-trips through order(perm)", {
  set.seed(21)
  x <- matrix(rnorm(47 * 3), 47, 3)
  lab <- sample(c(4L, 1L, 7L, 2L), 47, replace = TRUE)
  s <- sort_clusters(x, lab)
  # Stable sort by brute force: the points of each label in their order.
  perm <- unlist(lapply(sort(unique(lab)), function(l) which(lab == l)))
  expect_identical(s$perm, perm)
  expect_identical(s$labels, lab[perm])
  expect_identical(s$x, x[perm, , drop = FALSE])
  expect_false(is.unsorted(s$labels))
  expect_identical(s$x[order(s$perm), ], x)
  # A vector, a one-column matrix, a data frame.
  v <- rnorm(47)
  sv <- sort_clusters(v, lab)
  expect_identical(sv$x, v[perm])
  expect_identical(sv$x[order(sv$perm)], v)
  expect_identical(sort_clusters(matrix(v), lab)$x, matrix(v[perm]))
  df <- data.frame(a = v, b = seq_along(v))
  expect_identical(sort_clusters(df, lab)$x, df[perm, , drop = FALSE])
})

test_that("sort_clusters() checks its arguments", {
  expect_error(sort_clusters(matrix(1:6, 3), 1:2), "'labels'", class = "rkeops_error_input")
  expect_error(sort_clusters(1:4, 1:5), "'labels'", class = "rkeops_error_input")
  expect_error(sort_clusters(1:3, c(1, NA, 2)), "'labels'", class = "rkeops_error_input")
  expect_error(sort_clusters(1:3, c("a", "b", "c")), "'labels'", class = "rkeops_error_input")
  expect_error(sort_clusters(list(1, 2, 3), 1:3), "'x'", class = "rkeops_error_input")
})

# ---------------------------------------------------------------------------
# cluster_ranges_centroids()
# ---------------------------------------------------------------------------

# Loop reference: ranges from the sorted labels, weighted centroids, radii.
ref_clusters <- function(x, labels, w = rep(1, nrow(x))) {
  nc <- max(labels)
  sorted <- sort(labels)
  ranges <- matrix(0L, nc, 2)
  cent <- matrix(NA_real_, nc, ncol(x))
  wsum <- numeric(nc)
  radii <- rep(NA_real_, nc)
  next_row <- 1L
  for (cl in seq_len(nc)) {
    rows <- which(sorted == cl)
    ranges[cl, ] <- if (length(rows)) c(min(rows), max(rows)) else c(next_row, next_row - 1L)
    next_row <- next_row + length(rows)
    idx <- which(labels == cl)
    if (length(idx)) {
      wsum[cl] <- sum(w[idx])
      cent[cl, ] <- colSums(x[idx, , drop = FALSE] * w[idx]) / sum(w[idx])
      radii[cl] <- max(sqrt(rowSums(sweep(x[idx, , drop = FALSE], 2, cent[cl, ])^2)))
    }
  }
  list(ranges = ranges, centroids = cent, weights = wsum, radii = radii)
}

test_that("cluster_ranges_centroids() matches the loop, unweighted", {
  set.seed(31)
  x <- matrix(rnorm(73 * 3), 73, 3)
  lab <- grid_cluster(x, 0.9)
  got <- cluster_ranges_centroids(x, lab)
  ref <- ref_clusters(x, lab)
  expect_identical(names(got), c("ranges", "centroids", "weights", "radii"))
  expect_identical(got$ranges, ref$ranges)
  expect_type(got$ranges, "integer")
  expect_equal(got$centroids, ref$centroids, tolerance = 1e-12)
  expect_identical(got$weights, as.double(tabulate(lab)))
  expect_equal(got$radii, ref$radii, tolerance = 1e-12)
  # The ranges cover the sorted rows exactly, each with its label.
  s <- sort_clusters(x, lab)
  expect_identical(unlist(lapply(seq_len(nrow(got$ranges)), function(k) got$ranges[k, 1]:got$ranges[k, 2])),
                   seq_len(73))
  for (k in seq_len(nrow(got$ranges))) {
    expect_true(all(s$labels[got$ranges[k, 1]:got$ranges[k, 2]] == k))
    expect_equal(got$centroids[k, ], colMeans(s$x[got$ranges[k, 1]:got$ranges[k, 2], , drop = FALSE]),
                 tolerance = 1e-12)
  }
  # The order of the points does not matter.
  expect_equal(cluster_ranges_centroids(s$x, s$labels), got, tolerance = 1e-12)
})

test_that("cluster_ranges_centroids() matches the loop, weighted, with empty clusters", {
  set.seed(32)
  x <- matrix(runif(61 * 2), 61, 2)
  lab <- sample(c(2L, 3L, 6L, 9L), 61, replace = TRUE)   # 1, 4, 5, 7, 8 empty
  w <- runif(61, 0.1, 3)
  w[5] <- 0                                             # a point of weight 0
  got <- cluster_ranges_centroids(x, lab, weights = w)
  ref <- ref_clusters(x, lab, w)
  expect_identical(got$ranges, ref$ranges)
  expect_equal(got$centroids, ref$centroids, tolerance = 1e-12)
  expect_equal(got$weights, ref$weights, tolerance = 1e-12)
  expect_equal(got$radii, ref$radii, tolerance = 1e-12)
  empty <- c(1L, 4L, 5L, 7L, 8L)
  expect_identical(got$ranges[empty, 2], got$ranges[empty, 1] - 1L)
  expect_true(all(is.na(got$centroids[empty, ])) && !any(is.nan(got$centroids)))
  expect_true(all(is.na(got$radii[empty])) && !anyNA(got$radii[-empty]))
  expect_identical(got$weights[empty], numeric(5))
  expect_identical(got$ranges[1, ], c(1L, 0L))
  # A vector is one column; a weight of 0 keeps the point in the radius.
  v <- c(0, 10, 1, 2)
  got <- cluster_ranges_centroids(v, c(1, 1, 2, 2), weights = c(1, 0, 1, 3))
  expect_equal(got$centroids, matrix(c(0, 1.75)))
  expect_equal(got$radii, c(10, 0.75))
  expect_identical(got$weights, c(1, 4))
})

test_that("cluster_ranges_centroids() checks its arguments", {
  x <- matrix(runif(10), 5)
  expect_error(cluster_ranges_centroids(x, 1:4), "'labels'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, c(1, 2, 0, 1, 1)), "'labels'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, c(1, 2, 1.5, 1, 1)), "'labels'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, c(1, 2, NA, 1, 1)), "'labels'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, letters[1:5]), "'labels'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(matrix("a", 5, 2), 1:5), "'x'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(c(1, NaN, 2, 3, 4), 1:5), "'x'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, 1:5, weights = 1:4), "'weights'", class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, 1:5, weights = c(1, 1, -1, 1, 1)), "'weights'",
               class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, 1:5, weights = c(1, 1, NA, 1, 1)), "'weights'",
               class = "rkeops_error_input")
  expect_error(cluster_ranges_centroids(x, c(1, 1, 2, 2, 2), weights = c(0, 0, 1, 1, 1)), "'weights'.*cluster 1",
               class = "rkeops_error_input")
})

# ---------------------------------------------------------------------------
# from_matrix(), swap_axes(), the object
# ---------------------------------------------------------------------------

test_that("from_matrix() computes the entries of the kept block pairs (random keep)", {
  set.seed(41)
  for (rep in 1:12) {
    n <- sample(30:90, 1)
    m <- sample(25:80, 1)
    ri <- random_blocks(sample(1:9, 1), n)
    rj <- random_blocks(sample(1:11, 1), m)
    keep <- matrix(runif(nrow(ri) * nrow(rj)) < runif(1), nrow(ri), nrow(rj))
    r <- check_from_matrix(ri, rj, keep, n, m)
    check_from_matrix(ri, rj, keep * 1, n, m)   # 0/1
    # from_pairs(): the same kept pairs as a list, repeated and in any order, integers or doubles
    p <- which(keep, arr.ind = TRUE)
    p <- rbind(p, p[seq_len(min(3, nrow(p))), , drop = FALSE])
    p <- p[sample(nrow(p)), , drop = FALSE]
    expect_identical(from_pairs(ri, rj, p), r)
    expect_identical(from_pairs(ri, rj, p * 1.0), r)
  }
})

test_that("from_matrix() merges contiguous blocks, all-TRUE keep gives one range per block", {
  set.seed(42)
  x <- matrix(runif(67 * 2), 67, 2)
  y <- matrix(runif(53 * 2), 53, 2)
  cx <- cluster_ranges_centroids(x, grid_cluster(x, 0.3))
  cy <- cluster_ranges_centroids(y, grid_cluster(y, 0.3))
  r <- check_from_matrix(cx$ranges, cy$ranges, matrix(TRUE, nrow(cx$ranges), nrow(cy$ranges)), 67, 53)
  expect_identical(r$slices_i, seq_len(nrow(cx$ranges)))
  expect_identical(r$redranges_j, matrix(rep(c(1L, 53L), each = nrow(cx$ranges)), ncol = 2))
  expect_identical(r$redranges_i, matrix(rep(c(1L, 67L), each = nrow(cy$ranges)), ncol = 2))
  expect_output(print(r), "100%")
  # Banded keep: kept blocks l - 1, l, l + 1 merged into one range.
  ci <- nrow(cx$ranges)
  cj <- nrow(cy$ranges)
  band <- abs(outer(seq_len(ci), seq_len(cj), "-")) <= 1
  r <- check_from_matrix(cx$ranges, cy$ranges, band, 67, 53)
  expect_identical(diff(c(0L, r$slices_i)), as.integer(rowSums(band) > 0))
  # Two kept blocks with a non-kept block between them stay two ranges.
  rb <- cbind(c(1, 4, 6), c(3, 5, 9))
  r <- check_from_matrix(rb, rb, rbind(c(TRUE, FALSE, TRUE), c(FALSE, FALSE, FALSE), c(TRUE, TRUE, TRUE)), 9, 9)
  expect_identical(r$slices_i, c(2L, 2L, 3L))
  expect_identical(r$redranges_j, rbind(c(1L, 3L), c(6L, 9L), c(1L, 9L)))
  # Blocks with a gap between them are not merged.
  rg <- cbind(c(1, 5), c(3, 8))
  r <- check_from_matrix(rg, rg, matrix(TRUE, 2, 2), 8, 8)
  expect_identical(r$redranges_j, rbind(c(1L, 3L), c(5L, 8L), c(1L, 3L), c(5L, 8L)))
})

test_that("from_matrix() handles empty rows of keep and empty blocks", {
  rb <- cbind(c(1, 4, 4, 8, 8), c(3, 3, 7, 7, 11))   # blocks 2 and 4 empty
  keep <- matrix(c(TRUE, FALSE, TRUE, FALSE, TRUE,
                   TRUE, TRUE, TRUE, TRUE, TRUE,
                   FALSE, FALSE, FALSE, FALSE, FALSE,
                   TRUE, TRUE, FALSE, TRUE, TRUE,
                   FALSE, TRUE, TRUE, TRUE, FALSE), 5, 5, byrow = TRUE)
  r <- check_from_matrix(rb, rb, keep, 11, 11)
  # Row 1: blocks 1, 3, 5 (block 2 and 4 empty, between them) merged into 1..11.
  expect_identical(r$redranges_j[1, ], c(1L, 11L))
  # Empty blocks of i and empty rows of keep reduce over nothing.
  expect_identical(diff(c(0L, r$slices_i)), c(1L, 0L, 0L, 0L, 1L))
  # NA is allowed in the rows and columns of empty blocks only.
  keep_na <- keep
  keep_na[2, ] <- NA
  keep_na[, 4] <- NA
  expect_identical(from_matrix(rb, rb, keep_na), from_matrix(rb, rb, keep))
  keep_na[1, 1] <- NA
  expect_error(from_matrix(rb, rb, keep_na), "'keep'.*NA", class = "rkeops_error_input")
  # No block at all, or nothing kept.
  r <- check_from_matrix(matrix(0L, 0, 2), rb, matrix(TRUE, 0, 5), 0, 11)
  expect_identical(r$slices_j, integer(5))
  r <- check_from_matrix(rb, rb, matrix(FALSE, 5, 5), 11, 11)
  expect_identical(r$slices_i, integer(5))
  expect_identical(dim(r$redranges_j), c(0L, 2L))
  # Empty clusters from cluster_ranges_centroids().
  set.seed(43)
  x <- matrix(runif(38), 19)
  cl <- cluster_ranges_centroids(x, sample(c(1, 3, 4, 7), 19, replace = TRUE))
  keep <- matrix(runif(49) < 0.5, 7, 7)
  check_from_matrix(cl$ranges, cl$ranges, keep, 19, 19)
  dist_keep <- as.matrix(dist(cl$centroids)) < 0.5   # NA for the empty clusters
  expect_true(anyNA(dist_keep))
  check_from_matrix(cl$ranges, cl$ranges, dist_keep, 19, 19)
})

test_that("from_pairs() leaves out the pairs of empty blocks and checks its arguments", {
  rb <- cbind(c(1, 4, 4), c(3, 3, 7))                         # block 2 empty: its pairs hold nothing
  expect_identical(from_pairs(rb, rb, rbind(c(2, 1), c(1, 3), c(3, 2))),
                   from_matrix(rb, rb, rbind(c(FALSE, FALSE, TRUE), c(FALSE, FALSE, FALSE), c(FALSE, FALSE, FALSE))))
  expect_identical(from_pairs(rb, rb, matrix(integer(0), 0, 2)), from_matrix(rb, rb, matrix(FALSE, 3, 3)))
  expect_error(from_pairs(rb, rb, c(1, 2)), "from_pairs\\(\\): 'pairs' must be a numeric matrix with 2 columns",
               class = "rkeops_error_input")
  expect_error(from_pairs(rb, rb, rbind(c(1, 4))), "'pairs' must hold block numbers: 1 to 3 in column 1, 1 to 3 in column 2",
               class = "rkeops_error_input")
  expect_error(from_pairs(rb, rb, rbind(c(0, 1))), "'pairs' must hold block numbers",
               class = "rkeops_error_input")
  expect_error(from_pairs(rb, rb, rbind(c(1.5, 1))), "'pairs' must hold block numbers",
               class = "rkeops_error_input")
  expect_error(from_pairs(rb, rb, rbind(c(NA, 1))), "'pairs' must hold block numbers",
               class = "rkeops_error_input")
  expect_error(from_pairs(rb[3:1, ], rb, rbind(c(1, 1))), "'ranges_i'.*sorted", class = "rkeops_error_input")
})

test_that("swap_axes() exchanges the two parts; twice is the identity", {
  set.seed(44)
  ri <- random_blocks(6, 41)
  rj <- random_blocks(8, 37)
  keep <- matrix(runif(48) < 0.4, 6, 8)
  r <- from_matrix(ri, rj, keep)
  s <- swap_axes(r)
  expect_ranges_format(s)
  expect_identical(swap_axes(s), r)
  expect_identical(s, from_matrix(rj, ri, t(keep)))
  expect_identical(s$ranges_i, r$ranges_j)
  expect_identical(s$slices_i, r$slices_j)
  expect_identical(s$redranges_j, r$redranges_i)
  expect_identical(ref_mask(s$ranges_i, s$slices_i, s$redranges_j, 37, 41), t(ref_keep_mask(ri, rj, keep, 41, 37)))
  expect_error(swap_axes(unclass(r)), "'ranges'", class = "rkeops_error_input")
})

test_that("the print method counts blocks, kept pairs and entries", {
  rb <- cbind(c(1, 4, 6), c(3, 5, 9))   # sizes 3, 2, 4
  r <- from_matrix(rb, rb[1:2, ], rbind(c(TRUE, TRUE), c(FALSE, FALSE), c(FALSE, TRUE)))
  out <- capture.output(res <- print(r))
  expect_identical(res, r)
  expect_match(out[1], "3 blocks of i, 2 blocks of j")
  expect_match(out[2], "kept block pairs: 3 of 6 ")
  expect_match(out[3], "2 of j .* 3 of i")   # i1: j1-j2 merged, i3: j2; j2: i1 and i3 apart
  # Entries: 3 * 5 + 4 * 2 = 23 of 9 x 5.
  expect_match(out[4], "23 of 9 x 5 ")
  expect_match(out[4], "(51.1%)", fixed = TRUE)
  # Empty blocks count neither as pairs nor as rows.
  re <- cbind(c(1, 4, 4, 6), c(3, 3, 5, 9))
  out <- capture.output(print(from_matrix(re, re, matrix(TRUE, 4, 4))))
  expect_match(out[2], "9 of 9 ")
  expect_match(out[3], "3 of j .* 3 of i")
  expect_match(out[4], "81 of 9 x 9 .*(100%)")
  expect_output(print(from_matrix(matrix(0L, 0, 2), rb, matrix(TRUE, 0, 3))), "0 blocks of i")
})

test_that("from_matrix() checks its arguments", {
  rb <- cbind(c(1, 4), c(3, 8))
  keep <- matrix(TRUE, 2, 2)
  expect_error(from_matrix(cbind(rb, 1), rb, keep), "'ranges_i'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, c(1, 3), keep), "'ranges_j'", class = "rkeops_error_input")
  expect_error(from_matrix(rb + 0.5, rb, keep), "'ranges_i'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, rbind(c(1, NA), c(4, 8)), keep), "'ranges_j'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, cbind(c(0, 4), c(3, 8)), keep), "'ranges_j'", class = "rkeops_error_input")
  expect_error(from_matrix(cbind(c(1, 3), c(3, 8)), rb, keep), "'ranges_i'.*overlap",
               class = "rkeops_error_input")
  expect_error(from_matrix(cbind(c(4, 1), c(8, 3)), rb, keep), "'ranges_i'.*sorted",
               class = "rkeops_error_input")
  expect_error(from_matrix(rb, cbind(c(1, 6), c(3, 4)), keep), "'ranges_j'", class = "rkeops_error_input")
  expect_error(from_matrix(matrix(letters[1:4], 2), rb, keep), "'ranges_i'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, rb, matrix(TRUE, 2, 3)), "'keep'.*2 x 2", class = "rkeops_error_input")
  expect_error(from_matrix(rb, rb, c(TRUE, TRUE, TRUE, TRUE)), "'keep'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, rb, matrix(c(0, 1, 2, 1), 2)), "'keep'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, rb, matrix("TRUE", 2, 2)), "'keep'", class = "rkeops_error_input")
  expect_error(from_matrix(rb, rb, matrix(c(TRUE, NA, TRUE, TRUE), 2)), "'keep'.*NA",
               class = "rkeops_error_input")
})

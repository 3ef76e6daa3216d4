# Clustering helpers that build the `ranges` of block-sparse reductions.
#
# R checks the arguments; the engine (engine/src/clustering.rs and
# BlockRanges::from_block_pairs) sorts the points and the pairs, which R does
# too slowly for millions of them. The only object they build, "keops_ranges",
# is made by new_keops_ranges() and nowhere else.

# ---------------------------------------------------------------------------
# Internal checks
# ---------------------------------------------------------------------------

# An input error "fun(): message" about argument `arg`, as the other functions of the package raise.
clustering_stop <- function(fun, ..., arg) {
  rkeops_abort(fun, "(): ", ..., kind = "input", arg = arg)
}

# `res`, the result of one of the engine's clustering helpers, or its error raised from `fun`.
clustering_result <- function(fun, res) rust_result(res, fun)

# Cluster labels: positive whole numbers, one per row of x, as integers.
clustering_labels <- function(labels, n, fun) {
  if (!is.numeric(labels)) {
    clustering_stop(fun, "'labels' must be a vector of positive whole numbers", arg = "labels")
  }
  if (length(labels) != n) {
    clustering_stop(fun, "'labels' must have one value per point of 'x' (", n, "), not ", length(labels),
                    arg = "labels")
  }
  if (!all(is.finite(labels)) || any(labels < 1) || any(labels != round(labels)) ||
      any(labels > .Machine$integer.max)) {
    clustering_stop(fun, "'labels' must be positive whole numbers (cluster 1, 2, ...), without NA",
                    arg = "labels")
  }
  as.integer(as.vector(labels))
}

# A C x 2 matrix of 1-based inclusive blocks (first, last), sorted and not
# overlapping; an empty block has last = first - 1. Returned as a bare
# integer matrix.
clustering_blocks <- function(r, arg, fun) {
  if (!is.matrix(r) || !is.numeric(r) || ncol(r) != 2L) {
    clustering_stop(fun, "'", arg, "' must be a numeric matrix with 2 columns (first, last row of each block)",
                    arg = arg)
  }
  if (!all(is.finite(r)) || any(r != round(r)) || any(abs(r) > .Machine$integer.max)) {
    clustering_stop(fun, "'", arg, "' must hold whole numbers, without NA", arg = arg)
  }
  r <- matrix(as.integer(r), ncol = 2L)
  if (any(r[, 1L] < 1L)) {
    clustering_stop(fun, "'", arg, "' must hold 1-based rows: a first row is below 1", arg = arg)
  }
  if (any(r[, 2L] < r[, 1L] - 1L)) {
    clustering_stop(fun, "'", arg, "' has a block with last < first - 1 ",
                    "(an empty block is written first, first - 1)", arg = arg)
  }
  k <- nrow(r)
  if (k > 1L && any(r[-1L, 1L] <= r[-k, 2L])) {
    clustering_stop(fun, "the blocks of '", arg, "' must be sorted and must not overlap ",
                    "(each first row after the previous block's last row)", arg = arg)
  }
  r
}

# ---------------------------------------------------------------------------
# The ranges object
# ---------------------------------------------------------------------------

# The one constructor of "keops_ranges". Checks the structure the engine
# relies on; the values come from from_matrix() or swap_axes().
new_keops_ranges <- function(ranges_i, slices_i, redranges_j, ranges_j, slices_j, redranges_i) {
  check_ranges <- function(r, name) {
    if (!is.matrix(r) || !is.integer(r) || ncol(r) != 2L || anyNA(r)) {
      rkeops_abort("new_keops_ranges(): '", name, "' must be an integer matrix with 2 columns",
                   kind = "input", arg = name)
    }
  }
  check_slices <- function(s, blocks, red, name) {
    if (!is.integer(s) || !is.null(dim(s)) || length(s) != nrow(blocks) || anyNA(s) ||
        any(diff(c(0L, s)) < 0L) || length(s) > 0L && s[length(s)] != nrow(red) ||
        length(s) == 0L && nrow(red) != 0L) {
      rkeops_abort("new_keops_ranges(): '", name, "' must be a non-decreasing integer vector, one value per block, ",
                   "ending at the number of reduced ranges", kind = "input", arg = name)
    }
  }
  check_ranges(ranges_i, "ranges_i")
  check_ranges(redranges_j, "redranges_j")
  check_ranges(ranges_j, "ranges_j")
  check_ranges(redranges_i, "redranges_i")
  check_slices(slices_i, ranges_i, redranges_j, "slices_i")
  check_slices(slices_j, ranges_j, redranges_i, "slices_j")
  structure(
    list(ranges_i = ranges_i, slices_i = slices_i, redranges_j = redranges_j,
         ranges_j = ranges_j, slices_j = slices_j, redranges_i = redranges_i),
    class = "keops_ranges"
  )
}

# The ranges object of the kept pairs (k, l) of blocks (integers, valid block
# numbers; pairs with an empty block are left out).
clustering_ranges_of_pairs <- function(ranges_i, ranges_j, k, l, fun) {
  sides <- clustering_result(fun, .Call(wrap__keops_ranges_of_pairs, ranges_i, ranges_j, k, l))
  new_keops_ranges(ranges_i, sides$i$slices, sides$i$red, ranges_j, sides$j$slices, sides$j$red)
}

#' Block-sparse ranges of a reduction
#'
#' An object of class `keops_ranges` says which blocks of the \eqn{N \times M}{N x M}
#' symbolic matrix a reduction computes: the rows \eqn{i} are cut into blocks,
#' the columns \eqn{j} too, and each block of \eqn{i} is reduced only over the
#' blocks of \eqn{j} it is paired with (all other entries are left out, as if
#' they were zero for a sum). It is made by [from_matrix()] from the blocks
#' of [cluster_ranges_centroids()] and a matrix of kept block pairs, and
#' turned around by [swap_axes()].
#'
#' It is a list of six elements; all rows are 1-based and ranges are
#' inclusive (`first:last`):
#' * `ranges_i`: an integer matrix with \eqn{C_i} rows and 2 columns, the first
#'   and last row \eqn{i} of each block of \eqn{i}; an empty block has
#'   `last = first - 1`. The blocks are sorted and do not overlap.
#' * `slices_i`: an integer vector of length \eqn{C_i}, cumulative: block `k`
#'   of \eqn{i} is reduced over the rows `(slices_i[k - 1] + 1):slices_i[k]` of
#'   `redranges_j` (with `slices_i[0] = 0`). It does not decrease and its
#'   last value is `nrow(redranges_j)`.
#' * `redranges_j`: an integer matrix with 2 columns, ranges (first, last) of
#'   rows \eqn{j}; for each block of \eqn{i}, its ranges are sorted, not
#'   empty, and two of them never touch (touching blocks are merged).
#' * `ranges_j`, `slices_j`, `redranges_i`: the same for the transposed
#'   matrix (blocks of \eqn{j}, each reduced over ranges of \eqn{i}), used by
#'   reductions over \eqn{i} and by gradients.
#'
#' The print method shows the number of blocks of \eqn{i} and \eqn{j}, the
#' number of kept pairs of non-empty blocks and the stored ranges, and the
#' fraction of the entries covered by the blocks that are computed.
#'
#' @param x A `keops_ranges` object.
#' @param ... Not used.
#' @return The print method returns `x`, invisibly.
#' @seealso [grid_cluster()], [sort_clusters()], [cluster_ranges_centroids()],
#'   [from_matrix()], [swap_axes()].
#' @name keops_ranges
#' @examples
#' blocks <- cbind(c(1, 4, 8), c(3, 7, 10))     # rows 1-3, 4-7, 8-10
#' r <- from_matrix(blocks, blocks, diag(3) == 1)
#' r
#' str(unclass(r))
NULL

#' @rdname keops_ranges
#' @export
print.keops_ranges <- function(x, ...) {
  ci <- nrow(x$ranges_i)
  cj <- nrow(x$ranges_j)
  len_i <- pmax(as.double(x$ranges_i[, 2L]) - x$ranges_i[, 1L] + 1, 0)
  len_j <- pmax(as.double(x$ranges_j[, 2L]) - x$ranges_j[, 1L] + 1, 0)
  # Kept pairs of non-empty blocks: each stored range of j is a run of whole
  # non-empty blocks of j, counted from the sorted blocks.
  ne_j <- len_j > 0
  red <- x$redranges_j
  n_pairs <- sum(findInterval(red[, 2L], x$ranges_j[ne_j, 2L]) -
                   findInterval(as.double(red[, 1L]) - 1, x$ranges_j[ne_j, 1L]))
  cat(sprintf("<keops_ranges: %d blocks of i, %d blocks of j>\n", ci, cj))
  cat(sprintf("  kept block pairs: %s of %s pairs of non-empty blocks\n",
              format(n_pairs), format(sum(len_i > 0) * sum(ne_j))))
  cat(sprintf("  stored ranges: %d of j (for the blocks of i), %d of i (for the blocks of j)\n",
              nrow(x$redranges_j), nrow(x$redranges_i)))
  n <- sum(len_i)
  m <- sum(len_j)
  if (n > 0 && m > 0) {
    block_of_range <- rep(seq_len(ci), diff(c(0L, x$slices_i)))
    kept <- sum(len_i[block_of_range] * (as.double(red[, 2L]) - red[, 1L] + 1))
    cat(sprintf("  kept entries: %s of %s x %s covered by the blocks (%.3g%%)\n",
                format(kept), format(n), format(m), 100 * kept / (n * m)))
  }
  invisible(x)
}

# ---------------------------------------------------------------------------
# Exported helpers
# ---------------------------------------------------------------------------

#' Cluster points on a regular grid
#'
#' Puts each point in a cubic (or box-shaped) cell of a regular grid and
#' numbers the non-empty cells. Point \eqn{i} falls in the cell of integer
#' coordinates `floor((x[i, d] - min(x[, d])) / size[d])`, `d = 1, ..., D`.
#' The cells are compared coordinate by coordinate, so any number of
#' dimensions can be used (no single cell number is formed that could
#' overflow).
#'
#' The labels are `1, ..., C`, where `C` is the number of non-empty cells, in
#' the lexicographic order of the cell coordinates with the **first dimension
#' varying slowest** (as `order(v[, 1], v[, 2], ..., v[, D])` sorts the cell
#' coordinates `v`): two points have the same label if and only if they are
#' in the same cell.
#'
#' @param x A numeric matrix, one point per row (\eqn{N \times D}{N x D}), or a
#'   numeric vector (one dimension). Values must be finite.
#' @param size The side of the cells: one positive number, or one per
#'   dimension (a vector of length `ncol(x)`).
#' @return An integer vector of length \eqn{N}, the label of each point.
#' @seealso [sort_clusters()] and [cluster_ranges_centroids()], the next steps
#'   towards the ranges of a block-sparse reduction ([keops_ranges]).
#' @export
#' @examples
#' x <- cbind(c(0.1, 0.4, 1.2, 0.2, 2.5), c(0, 0.3, 0.1, 1.1, 0.2))
#' grid_cluster(x, 1)            # cells (0,0), (0,0), (1,0), (0,1), (2,0)
#' grid_cluster(x, c(1, 2))      # one size per dimension
#' grid_cluster(c(3, 1, 2.5, 1.2), 1)
grid_cluster <- function(x, size) {
  fun <- "grid_cluster"
  x <- check_points(x, "x", fun, min_rows = 0L)
  n <- nrow(x)
  d <- ncol(x)
  if (!is.numeric(size) || length(size) == 0L || !all(is.finite(size)) || any(size <= 0)) {
    clustering_stop(fun, "'size' must be positive finite numbers", arg = "size")
  }
  if (length(size) != 1L && length(size) != d) {
    clustering_stop(fun, "'size' must have length 1 or ncol(x) = ", d, ", not ", length(size), arg = "size")
  }
  if (n == 0L) return(integer(0))
  clustering_result(fun, .Call(wrap__keops_grid_labels, x, rep_len(as.double(size), d)))
}

#' Sort points by cluster label
#'
#' Reorders points so that the points of each cluster are contiguous, in
#' increasing order of label: the order in which [cluster_ranges_centroids()]
#' gives the ranges of the clusters, and in which the variables of a
#' block-sparse reduction must be passed.
#'
#' The sort is stable: the points of one cluster keep their relative order.
#' Results computed on the sorted points are put back in the original order of
#' the points with `result[order(perm), ]` (or `result[order(perm)]` for a
#' vector); `x_sorted[order(perm), ]` is `x`.
#'
#' @param x A numeric matrix (one point per row), a data frame, or a vector.
#' @param labels The label of each point (`length(labels) == NROW(x)`), e.g.
#'   from [grid_cluster()]; numbers without NA.
#' @return A list: `x`, the points sorted (`x[perm, , drop = FALSE]`, or
#'   `x[perm]` for a vector); `labels`, the labels sorted (`labels[perm]`); and
#'   `perm`, the permutation `order(labels)`.
#' @seealso [grid_cluster()], [cluster_ranges_centroids()].
#' @export
#' @examples
#' x <- cbind(1:6, c(0.5, 2.2, 0.1, 1.7, 0.3, 2.9))
#' lab <- grid_cluster(x[, 2], 1)
#' s <- sort_clusters(x, lab)
#' s$labels
#' identical(s$x[order(s$perm), ], x)
sort_clusters <- function(x, labels) {
  fun <- "sort_clusters"
  if (!is.numeric(labels) || is.factor(labels) || anyNA(labels)) {
    clustering_stop(fun, "'labels' must be a numeric vector without NA", arg = "labels")
  }
  is_rows <- is.matrix(x) || is.data.frame(x)
  if (!is_rows && (!is.atomic(x) || length(dim(x)) > 1L)) {
    clustering_stop(fun, "'x' must be a matrix, a data frame or a vector", arg = "x")
  }
  if (length(labels) != NROW(x)) {
    clustering_stop(fun, "'labels' must have one value per point of 'x' (", NROW(x), "), not ", length(labels),
                    arg = "labels")
  }
  perm <- order(as.vector(labels), method = "radix")
  list(x = if (is_rows) x[perm, , drop = FALSE] else x[perm],
       labels = labels[perm], perm = perm)
}

#' Ranges, centroids and radii of clusters
#'
#' For clusters labelled `1, ..., C`, gives the rows of each cluster in the
#' points **sorted by label** ([sort_clusters()]), with the (weighted) centroid
#' of each cluster, its total weight and its radius. `x` itself does not need
#' to be sorted: the centroids, weights and radii do not depend on the order
#' of the points, but the ranges refer to the sorted order, the one in which
#' the points must be passed to a block-sparse reduction.
#'
#' `C` is `max(labels)`. A label between 1 and `C` with no point is an empty
#' cluster: its range is empty (`last = first - 1`), its weight 0, and its
#' centroid (a row of `NA`) and radius (`NA`) are not defined. [from_matrix()]
#' leaves out the pairs of an empty block, and accepts `NA` there in `keep`.
#'
#' @param x A numeric matrix, one point per row (\eqn{N \times D}{N x D}), or a
#'   numeric vector (one dimension). Values must be finite.
#' @param labels The cluster of each point: positive whole numbers
#'   (`length(labels) == NROW(x)`), e.g. from [grid_cluster()].
#' @param weights `NULL` (each point weighs 1) or a vector of \eqn{N}
#'   non-negative weights; a non-empty cluster must have a positive total
#'   weight.
#' @return A list:
#' * `ranges`: a \eqn{C \times 2}{C x 2} integer matrix, the first and last row
#'   (1-based, inclusive) of each cluster among the sorted points;
#' * `centroids`: a \eqn{C \times D}{C x D} matrix, the weighted mean of the
#'   points of each cluster (`NA` for an empty cluster);
#' * `weights`: a numeric vector of length `C`, the total weight of each
#'   cluster (the number of its points when `weights` is `NULL`);
#' * `radii`: a numeric vector of length `C`, the largest euclidean distance
#'   from a point of the cluster (whatever its weight) to its centroid (`NA`
#'   for an empty cluster), e.g. to bound the distances between the points of
#'   two clusters when pruning.
#' @seealso [from_matrix()] to build the ranges of a block-sparse reduction.
#' @export
#' @examples
#' set.seed(2)
#' x <- matrix(runif(40), ncol = 2)
#' lab <- grid_cluster(x, 0.5)
#' s <- sort_clusters(x, lab)
#' cl <- cluster_ranges_centroids(s$x, s$labels)
#' cl$ranges        # rows of each cluster in s$x
#' cl$centroids
#' cluster_ranges_centroids(x, lab, weights = runif(20))$weights
cluster_ranges_centroids <- function(x, labels, weights = NULL) {
  fun <- "cluster_ranges_centroids"
  x <- check_points(x, "x", fun, min_rows = 0L)
  n <- nrow(x)
  labels <- clustering_labels(labels, n, fun)
  if (!is.null(weights)) {
    if (!is.numeric(weights) || length(weights) != n) {
      clustering_stop(fun, "'weights' must be NULL or a numeric vector with one value per point of 'x' (", n, ")",
                      arg = "weights")
    }
    if (!all(is.finite(weights)) || any(weights < 0)) {
      clustering_stop(fun, "'weights' must be non-negative finite numbers", arg = "weights")
    }
    weights <- as.double(weights)
  }
  n_clusters <- if (n == 0L) 0L else max(labels)
  s <- clustering_result(fun, .Call(wrap__keops_cluster_summary, x, labels, n_clusters, weights))
  last <- cumsum(s$counts)
  ranges <- cbind(last - s$counts + 1L, last)
  dimnames(ranges) <- NULL
  empty <- s$counts == 0L
  centroids <- s$centroids
  centroids[empty, ] <- NA_real_      # (NaN from the engine)
  colnames(centroids) <- colnames(x)
  radii <- s$radii
  radii[empty] <- NA_real_
  list(ranges = ranges, centroids = centroids, weights = s$weights, radii = radii)
}

#' Sort points by grid cell and summarise the cells
#'
#' [grid_cluster()], [sort_clusters()] and [cluster_ranges_centroids()] in one call to the engine
#' (on every core): the points sorted by the cells of side `size` of [grid_cluster()] (the cells in
#' the order of its labels, the points of a cell in their first order), with the rows, weighted
#' centroid, total weight and radius of each cell. The first step of the two-scale Sinkhorn solver
#' (`vignette("sinkhorn-multiscale")`, [cell_pair_ranges()]), faster than the three functions at
#' millions of points (whose sort is R's).
#'
#' @inheritParams grid_cluster
#' @param weights `NULL` (each point weighs 1) or a vector of \eqn{N} positive finite weights.
#' @return A list: `x`, the sorted points (`x[perm, , drop = FALSE]`); `perm`, the permutation
#'   (the sorted points' rows in `x`: results on the sorted points are put back with
#'   `result[order(perm)]`, or `out[perm] <- result`); `ranges`, `centroids`, `weights`, `radii`
#'   as [cluster_ranges_centroids()] gives them for the sorted points (no cell is empty); and
#'   `bounds`, a 2-row matrix of the smallest and largest value of each column of `x` (the box of
#'   the points: a diameter without another pass over them).
#' @seealso [cell_pair_ranges()], [from_pairs()].
#' @export
#' @examples
#' set.seed(2)
#' x <- matrix(runif(40), ncol = 2)
#' cells <- sort_grid_cells(x, 0.5, weights = runif(20))
#' cells$ranges
#' identical(cells$x, x[cells$perm, ])
sort_grid_cells <- function(x, size, weights = NULL) {
  fun <- "sort_grid_cells"
  x <- check_points(x, "x", fun)
  if (!is.numeric(size) || !(length(size) %in% c(1L, ncol(x))) || !all(is.finite(size)) || any(size <= 0)) {
    clustering_stop(fun, "'size' must be positive finite numbers, one or one per column of 'x'", arg = "size")
  }
  la <- if (is.null(weights)) numeric(nrow(x)) else {
    # (min and max rather than all(is.finite()) and any(<= 0): no vector of N logicals; NA and NaN
    # make them NA)
    if (!is.numeric(weights) || length(weights) != nrow(x) ||
        length(weights) > 0L && !isTRUE(min(weights) > 0 && max(weights) < Inf)) {
      clustering_stop(fun, "'weights' must be NULL or ", nrow(x), " positive finite numbers (one per point)",
                      arg = "weights")
    }
    log(as.double(weights))
  }
  two_scale_cells(x, size, la, fun)[c("x", "perm", "ranges", "centroids", "weights", "radii", "bounds")]
}

#' Ranges of a block-sparse reduction from a matrix of kept block pairs
#'
#' Builds the [keops_ranges] object of a block-sparse reduction: the rows
#' \eqn{i} are cut into the blocks `ranges_i`, the columns \eqn{j} into the
#' blocks `ranges_j`, and `keep[k, l]` says whether block `k` of \eqn{i}
#' interacts with block `l` of \eqn{j}. The entries of the other block pairs
#' are not computed.
#'
#' For each block of \eqn{i}, its kept blocks of \eqn{j} are listed in
#' increasing order, and kept blocks that follow each other without a gap (the
#' last row of one plus 1 is the first row of the next) are merged into one
#' range: the same entries, fewer ranges. The transposed part (blocks of
#' \eqn{j}, each with its ranges of \eqn{i}) is built in the same way from
#' `t(keep)`. Pairs where one block is empty hold no entry and are left out;
#' `keep` may be `NA` there (e.g. from the `NA` centroids of empty clusters).
#'
#' The blocks are usually the `ranges` of [cluster_ranges_centroids()], for
#' points sorted by [sort_clusters()]; the variables \eqn{x_i} and \eqn{y_j}
#' must then be passed to the reduction in that sorted order.
#'
#' @param ranges_i,ranges_j The blocks of \eqn{i} and of \eqn{j}: matrices of
#'   whole numbers with 2 columns, the first and last row (1-based, inclusive)
#'   of each block, sorted and not overlapping; an empty block has
#'   `last = first - 1`.
#' @param keep A logical (or 0/1) matrix, `nrow(ranges_i)` by
#'   `nrow(ranges_j)`: which block pairs are computed.
#' @return A [keops_ranges] object.
#' @seealso [swap_axes()], [cluster_ranges_centroids()].
#' @export
#' @examples
#' # Points on a line, clustered in cells of side 1; a block pair is kept when
#' # the clusters may hold points closer than 0.5.
#' set.seed(3)
#' x <- runif(30, 0, 5)
#' y <- runif(25, 0, 5)
#' sx <- sort_clusters(x, grid_cluster(x, 1))
#' sy <- sort_clusters(y, grid_cluster(y, 1))
#' cx <- cluster_ranges_centroids(sx$x, sx$labels)
#' cy <- cluster_ranges_centroids(sy$x, sy$labels)
#' gap <- abs(outer(cx$centroids[, 1], cy$centroids[, 1], "-")) -
#'   outer(cx$radii, cy$radii, "+")
#' r <- from_matrix(cx$ranges, cy$ranges, gap < 0.5)
#' r
#' r$redranges_j[1:r$slices_i[1], , drop = FALSE]   # what block 1 of i reduces over
from_matrix <- function(ranges_i, ranges_j, keep) {
  fun <- "from_matrix"
  ranges_i <- clustering_blocks(ranges_i, "ranges_i", fun)
  ranges_j <- clustering_blocks(ranges_j, "ranges_j", fun)
  if (!is.matrix(keep) || !(is.logical(keep) || is.numeric(keep))) {
    clustering_stop(fun, "'keep' must be a logical (or 0/1) matrix", arg = "keep")
  }
  if (nrow(keep) != nrow(ranges_i) || ncol(keep) != nrow(ranges_j)) {
    clustering_stop(fun, "'keep' must be ", nrow(ranges_i), " x ", nrow(ranges_j),
                    " (blocks of i x blocks of j), not ", nrow(keep), " x ", ncol(keep), arg = "keep")
  }
  if (is.numeric(keep)) {
    if (any(!is.na(keep) & keep != 0 & keep != 1)) {
      clustering_stop(fun, "'keep' must hold TRUE/FALSE or 0/1", arg = "keep")
    }
    keep <- keep != 0
  }
  keep <- matrix(as.vector(keep), nrow(keep), ncol(keep))
  keep[ranges_i[, 2L] < ranges_i[, 1L], ] <- FALSE
  keep[, ranges_j[, 2L] < ranges_j[, 1L]] <- FALSE
  if (anyNA(keep)) {
    clustering_stop(fun, "'keep' is NA for a pair of non-empty blocks ",
                    "(NA is allowed only in the rows and columns of empty blocks)", arg = "keep")
  }
  p <- which(keep, arr.ind = TRUE)
  clustering_ranges_of_pairs(ranges_i, ranges_j, p[, 1L], p[, 2L], fun)
}

#' Block-sparse ranges from a list of kept block pairs
#'
#' The same as [from_matrix()], with the kept pairs of blocks given as a list
#' rather than as a `nrow(ranges_i)` by `nrow(ranges_j)` matrix: for many
#' clusters with few kept pairs each (thousands of cells, e.g. from
#' [Kmin_argKmin()] on their centroids), the list is what is cheap to build.
#'
#' @inheritParams from_matrix
#' @param pairs A matrix of whole numbers with 2 columns: each row a kept pair
#'   (block of \eqn{i}, block of \eqn{j}), 1-based. Pairs may repeat and come
#'   in any order; pairs with an empty block hold no entry and are left out.
#' @return A [keops_ranges] object, the one `from_matrix()` gives for the
#'   logical matrix that is `TRUE` at the pairs.
#' @seealso [from_matrix()], [cluster_ranges_centroids()].
#' @export
#' @examples
#' bi <- cbind(c(1, 5), c(4, 9))
#' bj <- cbind(c(1, 3, 6), c(2, 5, 7))
#' r <- from_pairs(bi, bj, rbind(c(1, 1), c(1, 2), c(2, 3), c(1, 2)))
#' keep <- rbind(c(TRUE, TRUE, FALSE), c(FALSE, FALSE, TRUE))
#' identical(r, from_matrix(bi, bj, keep))
from_pairs <- function(ranges_i, ranges_j, pairs) {
  fun <- "from_pairs"
  ranges_i <- clustering_blocks(ranges_i, "ranges_i", fun)
  ranges_j <- clustering_blocks(ranges_j, "ranges_j", fun)
  if (!is.matrix(pairs) || !is.numeric(pairs) || ncol(pairs) != 2L) {
    clustering_stop(fun, "'pairs' must be a numeric matrix with 2 columns (block of i, block of j)",
                    arg = "pairs")
  }
  k <- pairs[, 1L]
  l <- pairs[, 2L]
  if (anyNA(pairs) || !is.integer(pairs) && any(pairs != round(pairs)) ||
      length(k) > 0L && (min(k) < 1 || max(k) > nrow(ranges_i) || min(l) < 1 || max(l) > nrow(ranges_j))) {
    clustering_stop(fun, "'pairs' must hold block numbers: 1 to ", nrow(ranges_i),
                    " in column 1, 1 to ", nrow(ranges_j), " in column 2, without NA", arg = "pairs")
  }
  clustering_ranges_of_pairs(ranges_i, ranges_j, as.integer(k), as.integer(l), fun)
}

#' Swap the axes of block-sparse ranges
#'
#' Exchanges the roles of \eqn{i} and \eqn{j} in a [keops_ranges] object: the
#' ranges of the transposed matrix, e.g. for a reduction whose variables
#' \eqn{x_i} and \eqn{y_j} are exchanged.
#'
#' @param ranges A [keops_ranges] object.
#' @return A [keops_ranges] object with `ranges_i` and `ranges_j`, `slices_i`
#'   and `slices_j`, `redranges_j` and `redranges_i` exchanged.
#'   `swap_axes(swap_axes(r))` is `r`.
#' @seealso [from_matrix()].
#' @export
#' @examples
#' bi <- cbind(c(1, 5), c(4, 9))
#' bj <- cbind(c(1, 3, 6), c(2, 5, 7))
#' keep <- rbind(c(TRUE, TRUE, FALSE), c(FALSE, TRUE, TRUE))
#' r <- from_matrix(bi, bj, keep)
#' identical(swap_axes(r), from_matrix(bj, bi, t(keep)))
swap_axes <- function(ranges) {
  if (!inherits(ranges, "keops_ranges")) {
    clustering_stop("swap_axes", "'ranges' must be a keops_ranges object (made by from_matrix())",
                    arg = "ranges")
  }
  new_keops_ranges(ranges$ranges_j, ranges$slices_j, ranges$redranges_i,
                   ranges$ranges_i, ranges$slices_i, ranges$redranges_j)
}

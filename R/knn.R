#' Exact K nearest neighbours, pruned with clusters
#'
#' For each row of `y` (the queries), the `k` nearest rows of `x` (the data),
#' with the arguments and results of `RANN::nn2(data, query, k)` and
#' `FNN::get.knnx(data, query, k)`. Both clouds are cut into the cells of a
#' grid ([grid_cluster()]); from the centroids and radii of the cells, the
#' triangle inequality bounds the distance of the `k`-th neighbour of every
#' query of a cell, and only the cells of data that may hold a neighbour are
#' searched (a block-sparse `ArgKMin`, see [from_matrix()]). The result is the
#' brute-force result: the same neighbours whatever the data (ties between
#' equal distances aside). Where pruning would not pay (more than 8
#' dimensions, few points, or cells that keep most pairs), the search is the
#' brute-force reduction.
#'
#' @param x The data: a numeric matrix, one point per row (or a vector: one
#'   dimension).
#' @param y The queries, with as many columns as `x` (by default `x` itself:
#'   each point is then its own first neighbour).
#' @param k The number of neighbours, from 1 to `nrow(x)`.
#' @param metric `"euclidean"`, `"manhattan"` (sum of absolute differences)
#'   or `"cosine"` (the distance is `1 - cos` of the angle between the rows;
#'   rows of zeros are not allowed).
#' @param prune `NA` (the default) prunes where it pays (on the CPU), `TRUE`
#'   always (if `x` has at most 8 columns), `FALSE` never.
#' @param cell_points The number of points per cell of the grid aimed at
#'   (cells of about this many data points on average).
#' @return `list(index, distance)`: `nrow(y) x k` matrices of the 1-based rows
#'   of `x`, nearest first, and of their distances.
#' @details The computation uses the precision of [get_rkeops_options()]:
#'   in float32, two neighbours whose distances differ by less than float32
#'   can resolve may come in the other order than in a float64 search.
#' @seealso `nn2()` of the RANN package and `get.knnx()` of FNN (trees),
#'   [argKmin()] (brute force).
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(3000), ncol = 3)
#' nn <- keops_knn(x, k = 5)
#' str(nn)
#' D2 <- outer(rowSums(x^2), rowSums(x^2), "+") - 2 * x %*% t(x)
#' all(nn$index == t(apply(D2, 1, order))[, 1:5])
keops_knn <- function(x, y = x, k, metric = c("euclidean", "manhattan", "cosine"), prune = NA,
                      cell_points = 128) {
  x <- knn_points(x, "x")
  y <- knn_points(y, "y")
  if (ncol(y) != ncol(x)) {
    stop("keops_knn(): 'y' must have the columns of 'x' (", ncol(x), "), not ", ncol(y), call. = FALSE)
  }
  k <- whole_number(k, "k", "keops_knn", 1)
  if (k > nrow(x)) stop("keops_knn(): 'k' must be at most nrow(x) = ", nrow(x), call. = FALSE)
  metric <- match.arg(metric)
  if (!is.logical(prune) || length(prune) != 1L) {
    stop("keops_knn(): 'prune' must be NA, TRUE or FALSE", call. = FALSE)
  }
  if (metric == "cosine") {
    x <- knn_unit_rows(x, "x")
    y <- knn_unit_rows(y, "y")
  }
  d <- ncol(x)
  distance <- if (metric == "manhattan") "Sum(Abs(q - p))" else "SqDist(q, p)"
  formula <- sprintf("KMin_ArgKMin_Reduction(%s, %d, 0)", distance, k)
  op <- lazy_operator(formula, c(sprintf("q = Vi(%d)", d), sprintf("p = Vj(%d)", d)))
  # On a GPU, brute force is faster than the clusters this version builds in R (measured: 10-NN of
  # 1e6 points in D = 3 on an H100, 0.89 s against 2.2 s).
  on_gpu <- function() {
    opts <- get_rkeops_options()
    opts$backend != "CPU" && isTRUE(tryCatch(gpu_status(opts$device)$available, error = function(e) FALSE))
  }
  pruned <- if (isFALSE(prune) || d > 8L || is.na(prune) && (nrow(x) < 4L * cell_points || on_gpu())) NULL else
    knn_pruned(x, y, k, op, metric, cell_points, force = isTRUE(prune))
  res <- if (is.null(pruned)) op(list(y, x)) else pruned
  values <- matrix(res$values, ncol = k)
  list(index = matrix(res$indices, ncol = k),
       distance = switch(metric, euclidean = sqrt(values), manhattan = values, cosine = values / 2))
}

# x as a double matrix of finite values.
knn_points <- function(x, arg) {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.numeric(x) || length(dim(x)) > 2L || length(x) == 0L) {
    stop("keops_knn(): '", arg, "' must be a numeric matrix (one point per row) or vector", call. = FALSE)
  }
  if (!is.matrix(x)) x <- matrix(x, ncol = 1L)
  if (storage.mode(x) != "double") storage.mode(x) <- "double"
  if (!all(is.finite(x))) stop("keops_knn(): '", arg, "' must not hold NA, NaN or infinite values", call. = FALSE)
  x
}

# Rows scaled to norm 1 (|u - v|^2 / 2 is then 1 - cos).
knn_unit_rows <- function(x, arg) {
  norms <- sqrt(rowSums(x^2))
  if (any(norms == 0)) stop("keops_knn(): 'metric = \"cosine\"' needs rows of '", arg, "' that are not 0", call. = FALSE)
  x / norms
}

# The block-sparse search, or NULL where it would visit most pairs anyway (unless `force`).
knn_pruned <- function(x, y, k, op, metric, cell_points, force) {
  # Cells of about `cell_points` data points if the data filled its bounding box.
  span <- pmax(apply(x, 2L, function(v) diff(range(v))), 1e-300)
  size <- (prod(span) * cell_points / nrow(x))^(1 / ncol(x))
  size <- pmin(pmax(size, span / 1e6), span)
  sx <- sort_clusters(x, grid_cluster(x, size))
  sy <- sort_clusters(y, grid_cluster(y, size))
  bx <- knn_boxes(sx, size)
  by <- knn_boxes(sy, size)
  counts <- bx$ranges[, 2L] - bx$ranges[, 1L] + 1L
  if (all(counts < k)) return(NULL)
  cells <- knn_kept_cells(by, bx, counts >= k, metric)
  if (is.null(cells)) return(NULL)
  # One range of data rows per run of kept cells, where runs less than `gap` rows apart are one:
  # a range costs the engine about as much per query as that many more pairs.
  gap <- 1024L
  start <- bx$ranges[cells$cell, 1L]
  end <- bx$ranges[cells$cell, 2L]
  n <- length(start)
  first <- c(TRUE, cells$row[-1L] != cells$row[-n] | start[-1L] - end[-n] > gap)
  last <- c(first[-1L], TRUE)
  red <- cbind(start[first], end[last])
  slices <- cumsum(tabulate(cells$row[first], nrow(by$ranges)))
  pairs <- sum(as.double(by$ranges[cells$row[first], 2L] - by$ranges[cells$row[first], 1L] + 1) *
                 (red[, 2L] - red[, 1L] + 1))
  if (!force && pairs > 0.5 * nrow(x) * nrow(y)) return(NULL)
  none <- matrix(0L, 0L, 2L)
  ranges <- new_keops_ranges(by$ranges, as.integer(slices), red, none, integer(0), none)
  res <- op(list(sy$x, sx$x), ranges = ranges)
  back <- order(sy$perm)
  values <- matrix(res$values, ncol = k)[back, , drop = FALSE]
  indices <- matrix(sx$perm[res$indices], ncol = k)[back, , drop = FALSE]
  list(values = values, indices = indices)
}

# The ranges of the cells of sorted points and the boxes of the grid that hold them (a little
# wider, for the rounding of the cell coordinates).
knn_boxes <- function(s, size) {
  counts <- tabulate(s$labels)            # (grid_cluster numbers the cells 1, 2, ... without gaps)
  last <- cumsum(counts)
  ranges <- cbind(last - counts + 1L, last)
  mins <- apply(s$x, 2L, min)
  corner <- s$x[ranges[, 1L], , drop = FALSE]
  n <- nrow(corner)
  lo <- rep(mins, each = n) + floor((corner - rep(mins, each = n)) / rep(size, each = n)) * rep(size, each = n)
  margin <- 1e-9 * (max(abs(s$x)) + max(size))
  list(ranges = ranges, lo = lo - margin, hi = lo + rep(size, each = n) + margin)
}

# For each query cell a, the data cells b that may hold a neighbour of one of its points, as
# list(row = a, cell = b), sorted by a then b; NULL when a cell keeps too many to list.
# Any point of box a is within maxdist(a, b) of every point of box b: with b among the cells of
# at least k points (`full`), the k-th neighbour of every query of a is within
# bound_a = min_b maxdist(a, b), and the cells b with mindist(a, b) > bound_a hold none.
# Both are reductions over the cells, in float64.
knn_kept_cells <- function(by, bx, full, metric) {
  d <- ncol(by$lo)
  args <- c(sprintf("alo = Vi(%d)", d), sprintf("ahi = Vi(%d)", d), sprintf("blo = Vj(%d)", d),
            sprintf("bhi = Vj(%d)", d), "full = Vj(1)", "u = Vi(1)", "jj = Vj(1)")
  # Per coordinate: the largest and smallest distances between the boxes.
  far <- "((ahi - blo + bhi - alo + Abs(ahi - blo - bhi + alo)) / 2)"
  near <- "(ReLU(blo - ahi) + ReLU(alo - bhi))"
  norm <- if (metric == "manhattan") function(v) sprintf("Sum(%s)", v) else function(v) sprintf("SqNorm2(%s)", v)
  old <- set_rkeops_options(precision = "float64")
  on.exit(set_rkeops_options(precision = old$precision))
  # The reduction `formula` over all the data cells, for the query cells `rows`.
  run <- function(formula, u = numeric(nrow(by$lo)), rows = seq_len(nrow(by$lo))) {
    one <- function(v) v[rows, , drop = FALSE]
    lazy_operator(formula, args)(list(one(by$lo), one(by$hi), bx$lo, bx$hi, as.double(full), u[rows],
                                      seq_len(nrow(bx$lo)) - 1))
  }
  bound <- run(sprintf("Min_Reduction(%s + (1 - full) * 1e300, 0)", norm(far)))
  bound <- bound * (1 + 1e-9)   # (rounding)
  kept <- sprintf("IfElse(u - %s, %%s, %%s)", norm(near))
  counts <- run(sprintf("Sum_Reduction(%s, 0)", sprintf(kept, "1", "0")), bound)
  if (max(counts) > 4096) return(NULL)
  # The kept cells of each query cell, smallest first: a K-min of their numbers, with K the
  # number kept, so that the selection fills exactly (rows with fewer kept than K would move
  # every value that is not kept through the selection). One call per number kept.
  row <- cell <- vector("list", 0L)
  for (K in setdiff(unique(counts), 0)) {
    rows <- which(counts == K)
    found <- run(sprintf("KMin_Reduction(%s, %d, 0)", sprintf(kept, "jj", "1e300"), K), bound, rows)
    row[[length(row) + 1L]] <- rep(rows, each = K)
    cell[[length(cell) + 1L]] <- as.integer(t(matrix(found, ncol = K))) + 1L
  }
  row <- unlist(row)
  cell <- unlist(cell)
  o <- order(row, cell, method = "radix")
  list(row = row[o], cell = cell[o])
}

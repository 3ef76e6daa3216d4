#' Exact K nearest neighbours, pruned with clusters
#'
#' For each row of `y` (the queries), the `k` nearest rows of `x` (the data),
#' with the arguments and results of `RANN::nn2(data, query, k)` and
#' `FNN::get.knnx(data, query, k)`. Both clouds are sorted by the cells of a
#' grid (as [grid_cluster()]) and each cell of queries searches the cells of
#' data around it (a block-sparse `ArgKMin`, see [keops_ranges]): a query
#' whose `k`-th neighbour found is nearer than all the data left out (with a
#' margin for the rounding of the computed distances) has its answer. The
#' others are searched again among the cells that may hold a neighbour: the
#' `k`-th neighbour of a query is no farther than the largest distance from
#' its cell to a cell of at least `k` data points. The engine plans the
#' searches, which run on the CPU or the GPU as any reduction. The result is the
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
#'   of `x`, nearest first, and of their distances; the list has class
#'   `"keops_knn"` (printed as the list): `plot(nn, x, y)` draws each query's
#'   links to its neighbours ([plot.keops_knn()]).
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
    rkeops_abort("keops_knn(): 'y' must have the columns of 'x' (", ncol(x), "), not ", ncol(y),
                 kind = "input", arg = "y")
  }
  k <- check_whole(k, "k", "keops_knn", 1)
  if (k > nrow(x)) {
    rkeops_abort("keops_knn(): 'k' must be at most nrow(x) = ", nrow(x), kind = "input", arg = "k")
  }
  metric <- check_choice(metric, c("euclidean", "manhattan", "cosine"), "metric")
  check_flag(prune, "prune", "keops_knn", na_ok = TRUE)
  if (metric == "cosine") {
    x <- knn_unit_rows(x, "x")
    y <- knn_unit_rows(y, "y")
  }
  d <- ncol(x)
  distance <- if (metric == "manhattan") "Sum(Abs(q - p))" else "SqDist(q, p)"
  formula <- sprintf("KMin_ArgKMin_Reduction(%s, %d, 0)", distance, k)
  op <- lazy_operator(formula, c(sprintf("q = Vi(%d)", d), sprintf("p = Vj(%d)", d)))
  # On a GPU the pruned search's kernel takes milliseconds, but planning it and putting 10^7 results
  # back in order on the host took longer than brute force (10-NN of 1e6 points in D = 3 on an
  # H100: 0.74 to 1.19 s against 0.93 s, bench/RESULTS.md): brute force unless asked.
  pruned <- if (isFALSE(prune) || d > 8L || is.na(prune) && (nrow(x) < 4L * cell_points || gpu_in_use())) NULL else
    knn_pruned(x, y, k, op, metric, cell_points, force = isTRUE(prune))
  res <- if (is.null(pruned)) op(list(y, x)) else pruned
  # (both come as nrow(y) x k matrices: matrix() would copy 10^7 numbers for 10^6 queries)
  structure(list(index = res$indices,
                 distance = switch(metric, euclidean = sqrt(res$values), manhattan = res$values, cosine = res$values / 2)),
            class = "keops_knn")
}

# x as a double matrix of finite values.
knn_points <- function(x, arg) {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.numeric(x) || length(dim(x)) > 2L || length(x) == 0L) {
    rkeops_abort("keops_knn(): '", arg, "' must be a numeric matrix (one point per row) or vector",
                 kind = "input", arg = arg)
  }
  if (!is.matrix(x)) x <- matrix(x, ncol = 1L)
  if (storage.mode(x) != "double") storage.mode(x) <- "double"
  if (!all(is.finite(x))) {
    rkeops_abort("keops_knn(): '", arg, "' must not hold NA, NaN or infinite values",
                 kind = "input", arg = arg)
  }
  x
}

# Rows scaled to norm 1 (|u - v|^2 / 2 is then 1 - cos).
knn_unit_rows <- function(x, arg) {
  norms <- sqrt(rowSums(x^2))
  if (any(norms == 0)) {
    rkeops_abort("keops_knn(): 'metric = \"cosine\"' needs rows of '", arg, "' that are not 0",
                 kind = "input", arg = arg)
  }
  x / norms
}

# The block-sparse search, or NULL where it would visit most pairs anyway (unless `force`). The
# engine plans it (engine/src/knn.rs). First each cell of queries searches the cells of data
# around it: that is the answer of every query whose K-th neighbour found is nearer than the data
# left out (its `reach`, up to the rounding of the computed distances); the other queries are
# searched again within a bound that holds for sure.
knn_pruned <- function(x, y, k, op, metric, cell_points, force) {
  found <- knn_search(x, y, k, op, metric, cell_points, neighbourhood = TRUE, force)
  if (is.null(found)) return(knn_search(x, y, k, op, metric, cell_points, neighbourhood = FALSE, force))
  kth <- found$values[, k]
  if (metric != "manhattan") kth <- sqrt(pmax(kth, 0))
  eps <- c(float16 = 2^-10, float32 = 2^-23, float64 = 2^-52)[[get_rkeops_options()$precision]]
  rounding <- 8 * ncol(x) * eps * max(abs(x), abs(y))
  redo <- which(!(kth * (1 + 16 * eps) + rounding < found$reach))
  if (length(redo) > 0L) {
    y_redo <- y[redo, , drop = FALSE]
    again <- knn_search(x, y_redo, k, op, metric, cell_points, neighbourhood = FALSE, force = TRUE)
    if (is.null(again)) again <- op(list(y_redo, x))
    found$values[redo, ] <- again$values
    found$indices[redo, ] <- again$indices
  }
  found
}

# One block-sparse search planned by the engine: list(values, indices, reach) in the user's order.
knn_search <- function(x, y, k, op, metric, cell_points, neighbourhood, force) {
  plan <- rust_result(.Call(wrap__keops_knn_plan, x, y, as.integer(k), metric == "manhattan",
                            as.double(cell_points), neighbourhood, force))
  if (is.null(plan)) return(NULL)
  none <- matrix(0L, 0L, 2L)
  ranges <- new_keops_ranges(plan$ranges_i, plan$slices_i, plan$redranges_j, none, integer(0), none)
  res <- op(list(plan$y, plan$x), ranges = ranges)
  c(rust_result(.Call(wrap__keops_knn_restore, res$values, res$indices, plan$x_order, plan$y_order)),
    list(reach = plan$reach))
}

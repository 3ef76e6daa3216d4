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
#' searches and runs them on the CPU or the GPU in one call, the results written
#' once in the order of the queries (with several GPUs, a pruned search runs on
#' the first: its kernel is shorter than putting their results together; the
#' brute-force reduction is shared). The result is the
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
#' @param prune `NA` (the default) prunes where it pays, `TRUE` always (if
#'   `x` has at most 8 columns), `FALSE` never. Under [rkeops_use_future()],
#'   the search is the brute-force reduction, split among the futures as any
#'   reduction.
#' @param cell_points The number of points per cell of the grid aimed at
#'   (cells of about this many data points on average); `NULL` (the default):
#'   128 on a GPU, 24 on the CPU (where smaller cells prune more than they
#'   cost).
#' @return `list(index, distance)`: `nrow(y) x k` matrices of the 1-based rows
#'   of `x`, nearest first, and of their distances; the list has class
#'   `"keops_knn"` (printed as the list): `plot(nn, x, y)` draws each query's
#'   links to its neighbours ([plot.keops_knn()]).
#' @details The computation uses the precision of [get_rkeops_options()]:
#'   in float32, two neighbours whose distances differ by less than float32
#'   can resolve may come in the other order than in a float64 search. The
#'   data and the queries are first translated by one centre (that of the
#'   bounding box of `x`; the distances do not change), so that points far
#'   from the origin keep the precision of points near it.
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
                      cell_points = NULL) {
  # (the queries being the data: one matrix, which the engine sorts and plans once)
  same <- missing(y)
  x <- check_points(x, "x", "keops_knn")
  y <- if (same) x else check_points(y, "y", "keops_knn")
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
    y <- if (same) x else knn_unit_rows(y, "y")
  }
  # (NaN: the engine's default for the backend that searches, 128 points on a GPU, 24 on the CPU)
  cells <- if (is.null(cell_points)) NaN else check_number(cell_points, "cell_points", "keops_knn", "positive")
  # Grid cells prune nothing in many dimensions, and cost more than they save for few points (fewer
  # than 4 cells of the given size, or of 128 points).
  few <- 4 * (if (is.null(cell_points)) 128 else cell_points)
  if (ncol(x) > 8L || is.na(prune) && nrow(x) < few) prune <- FALSE
  # Under rkeops_use_future(), the brute-force reduction, split into blocks of queries as any other.
  if (!is.null(.rkeops_env$future)) return(knn_reduction(x, y, k, metric))
  res <- rust_result(.Call(wrap__keops_knn_search, x, y, as.integer(k), metric, as.double(cells), prune,
                           engine_options()), "keops_knn")
  record_run(res$backend, res$timings, pruned = res$pruned, redone = res$redone)
  structure(list(index = res$index, distance = res$distance), class = "keops_knn")
}

# The K-NN as a KMin_ArgKMin reduction (the queries' rows may then be split among futures).
knn_reduction <- function(x, y, k, metric) {
  if (!all(is.finite(x)) || !all(is.finite(y))) {
    arg <- if (all(is.finite(x))) "y" else "x"
    rkeops_abort("keops_knn(): '", arg, "' must not hold NA, NaN or infinite values", kind = "input", arg = arg)
  }
  # One centre for both, that of the data's box, as the engine's search: the distances are
  # unchanged, and float32 keeps the precision of points far from the origin.
  centre <- apply(x, 2, min) / 2 + apply(x, 2, max) / 2   # (the engine's knn::centre)
  x <- x - rep(centre, each = nrow(x))
  y <- y - rep(centre, each = nrow(y))
  d <- ncol(x)
  distance <- if (metric == "manhattan") "Sum(Abs(q - p))" else "SqDist(q, p)"
  op <- lazy_operator(sprintf("KMin_ArgKMin_Reduction(%s, %d, 0)", distance, k),
                      c(sprintf("q = Vi(%d)", d), sprintf("p = Vj(%d)", d)))
  res <- op(list(y, x))
  structure(list(index = res$indices,
                 distance = switch(metric, euclidean = sqrt(res$values), manhattan = res$values, cosine = res$values / 2)),
            class = "keops_knn")
}

# Rows scaled to norm 1 (|u - v|^2 / 2 is then 1 - cos).
knn_unit_rows <- function(x, arg) {
  norms <- sqrt(rowSums(x^2))
  if (isTRUE(any(norms == 0))) {
    rkeops_abort("keops_knn(): 'metric = \"cosine\"' needs rows of '", arg, "' that are not 0",
                 kind = "input", arg = arg)
  }
  x / norms
}

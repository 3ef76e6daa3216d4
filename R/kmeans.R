#' K-means clustering (Lloyd's algorithm) in one engine call
#'
#' `keops_kmeans()` clusters the rows of `x` as `stats::kmeans(x, centers, algorithm = "Lloyd")`
#' does, and returns the same object: each iteration assigns every point to its nearest centre (an
#' `ArgMin` reduction over the N x K pairs), then moves each centre to the mean of its points (a sum
#' over the N x K pairs), until no point changes cluster or `iter.max` iterations have run. The
#' whole loop is one program ([keops_program()]): on a GPU, the points, labels and centres stay on
#' the device and only the result comes back.
#'
#' Costs: each iteration is three reductions over N x K pairs of dimension D (the labels, the
#' centres' sums, the clusters' sums of squares `withinss`; memory O(N + K) beyond `x`); k-means++
#' seeding (`centers` a number) is K passes over the N points, in R; `totss` follows from `withinss`
#' and the centres, the means of their points. Same clusters as `stats::kmeans()` (Lloyd) from the
#' same start, up to ties between equally near centres (in float32, distances that differ by less than
#' its precision may break a tie differently; `rkeops_use_float64()` to match exactly).
#'
#' @param x A numeric matrix (or data frame) of N points, one per row.
#' @param centers A K x D matrix of starting centres, or a number K: then the centres are seeded by
#'   k-means++ (each next centre drawn with probability proportional to the squared distance to the
#'   nearest centre drawn before), with R's random numbers (reproducible with `set.seed()`).
#' @param iter.max The most iterations.
#' @param nstart With `centers` a number: how many seedings to run; the clustering with the smallest
#'   total within-cluster sum of squares is kept.
#' @param algorithm `"Lloyd"` (or its other name `"Forgy"`): the only algorithm.
#' @return An object of class `c("keops_kmeans", "kmeans")` with the components of
#'   [stats::kmeans()]: `cluster`, `centers`, `totss`, `withinss`, `tot.withinss`, `betweenss`,
#'   `size`, `iter` (assignment passes; `iter.max + 1` when the last one still moved points, with a
#'   warning and `ifault = 2`), `ifault` (`NULL`, or 2). A centre left with no point keeps its place,
#'   with a warning. `print()`, `fitted()` and code for `kmeans` objects work;
#'   `predict(object, newdata)` gives the nearest centre of each row of `newdata`.
#' @seealso [stats::kmeans()], [keops_program()], `vignette("kmeans")`.
#' @export
#' @examples
#' set.seed(1)
#' x <- rbind(matrix(rnorm(400, 0), 200), matrix(rnorm(400, 4), 200))
#' fit <- keops_kmeans(x, 2)
#' fit$size
#' predict(fit, rbind(c(0, 0), c(4, 4)))
keops_kmeans <- function(x, centers, iter.max = 10, nstart = 1, algorithm = "Lloyd") {
  fun <- "keops_kmeans"
  if (is.data.frame(x)) x <- as.matrix(x)
  # (the sum first: one pass, and finite for all but data with non-finite or huge values)
  if (!is.matrix(x) || !is.numeric(x) || nrow(x) < 1L || ncol(x) < 1L || (!is.finite(sum(x)) && !all(is.finite(x)))) {
    rkeops_abort(arg_label("x", fun), " must be a numeric matrix of finite values, one point per row",
                 kind = "input", arg = "x")
  }
  storage.mode(x) <- "double"
  iter.max <- check_whole(iter.max, "iter.max", fun, min = 1)
  nstart <- check_whole(nstart, "nstart", fun, min = 1)
  if (!is.character(algorithm) || length(algorithm) != 1L || !algorithm %in% c("Lloyd", "Forgy")) {
    rkeops_abort(arg_label("algorithm", fun), " must be \"Lloyd\" (or \"Forgy\"): the only algorithm",
                 kind = "input", arg = "algorithm")
  }
  seeded <- is.numeric(centers) && length(centers) == 1L
  if (seeded) {
    k <- check_whole(centers, "centers", fun, min = 1, max = nrow(x))
    starts <- lapply(seq_len(nstart), function(s) kmeans_pp(x, k))
  } else {
    if (is.data.frame(centers)) centers <- as.matrix(centers)
    if (!is.matrix(centers) || !is.numeric(centers) || ncol(centers) != ncol(x) || nrow(centers) < 1L ||
        nrow(centers) > nrow(x) || !all(is.finite(centers))) {
      rkeops_abort(arg_label("centers", fun), " must be a number of clusters or a matrix of finite starting ",
                   "centres with ", ncol(x), " columns (as 'x') and at most ", nrow(x), " rows",
                   kind = "input", arg = "centers")
    }
    storage.mode(centers) <- "double"
    starts <- list(centers)
  }
  fits <- lapply(starts, function(start) kmeans_lloyd(x, start, iter.max))
  best <- fits[[which.min(vapply(fits, function(f) f$tot.withinss, 0))]]
  if (any(best$size == 0L)) warning("empty cluster: try a better set of initial centers", call. = FALSE)
  if (!is.null(best$ifault)) {
    warning(sprintf("did not converge in %d iterations", iter.max), call. = FALSE)
  }
  best
}

# Lloyd's iterations from the centres `start`, as one program; the kmeans object.
kmeans_lloyd <- function(x, start, iter.max) {
  d <- ncol(x)
  k <- nrow(start)
  res <- kmeans_program(d, iter.max)(list(x = x, c = start, labels = rep(0, nrow(x)), j = seq_len(k)))
  iter <- attr(res, "iterations")
  converged <- res$changed[[1L]] < 0.5
  cluster <- as.integer(res$labels)
  centers <- res$c
  dimnames(centers) <- list(seq_len(k), colnames(x))
  size <- res$sc[, d + 1L]
  withinss <- as.vector(res$withinss)
  # Each centre is the mean of its points (the last step computed it from the last labels; an empty
  # cluster counts for nothing): the total sum of squares is the within one plus the between one.
  mean <- colSums(size * centers) / nrow(x)
  totss <- sum(withinss) + sum(size * rowSums((centers - rep(mean, each = k))^2))
  names(cluster) <- rownames(x)
  structure(list(cluster = cluster, centers = centers, totss = totss, withinss = withinss,
                 tot.withinss = sum(withinss), betweenss = totss - sum(withinss),
                 size = as.integer(round(size)), iter = if (converged) iter else iter + 1L,
                 ifault = if (!converged) 2L),
            class = c("keops_kmeans", "kmeans"))
}

# The operators of K-means in dimension `d`, made once per dimension (their kernels are cached by
# the package; the R closures here too).
kmeans_operators <- function(d) {
  key <- as.character(d)
  if (is.null(kmeans_cache$operators[[key]])) {
    vi <- function(name, dim = d) sprintf("%s = Vi(%d)", name, dim)
    vj <- function(name, dim = d) sprintf("%s = Vj(%d)", name, dim)
    kmeans_cache$operators[[key]] <- list(
      old = keops_map("labels", vi("labels", 1)),
      labels = keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c(vi("x"), vj("c"))),
      # points that changed cluster (a reduction over every i: one value, the stopping rule's)
      changed = keops_kernel("Sum_Reduction(Abs(labels - old), 1)", c(vi("labels", 1), vi("old", 1))),
      # per centre j: the sum of its points and their count
      sc = keops_kernel("Sum_Reduction(Equal(labels, j) * Concat(x, IntCst(1)), 1)",
                        c(vi("labels", 1), vi("x"), vj("j", 1))),
      # a centre with no point stays where it is
      c = keops_map(sprintf("IfElse(Elem(sc, %d) - 0.5, Extract(sc, 0, %d) / Elem(sc, %d), c)", d, d, d),
                    c(vj("sc", d + 1), vj("c"))),
      withinss = keops_kernel("Sum_Reduction(Equal(labels, j) * SqDist(x, c), 1)",
                              c(vi("labels", 1), vi("x"), vj("j", 1), vj("c"))))
  }
  kmeans_cache$operators[[key]]
}

# The program of Lloyd's iterations in dimension `d`: the labels before (old), the labels, how many
# changed (the stopping rule: none), the centres' sums and counts, the centres, and the clusters'
# sums of squares (N x K pairs, a fraction of an iteration: cheaper in every iteration than reading
# the points again after the program).
kmeans_program <- function(d, iter.max) {
  key <- paste(d, iter.max)
  if (is.null(kmeans_cache$programs[[key]])) {
    ops <- kmeans_operators(d)
    kmeans_cache$programs[[key]] <- keops_program(ops[c("old", "labels", "changed", "sc", "c", "withinss")],
                                                  iterations = iter.max, until = "changed", tol = 0.5,
                                                  output = c("labels", "changed", "sc", "c", "withinss"))
  }
  kmeans_cache$programs[[key]]
}

kmeans_cache <- new.env(parent = emptyenv())

# k-means++ seeding: K rows of `x`, the first uniformly, each next one with probability
# proportional to its squared distance to the nearest row drawn before.
kmeans_pp <- function(x, k) {
  n <- nrow(x)
  picked <- integer(k)
  picked[1L] <- sample.int(n, 1L)
  d2 <- rowSums((x - rep(x[picked[1L], ], each = n))^2)
  for (m in seq_len(k)[-1L]) {
    if (!any(d2 > 0)) {
      rkeops_abort("keops_kmeans(): 'centers': more clusters (", k, ") than distinct points in 'x' (", m - 1L, ")",
                   kind = "input", arg = "centers")
    }
    picked[m] <- sample.int(n, 1L, prob = d2)
    d2 <- pmin(d2, rowSums((x - rep(x[picked[m], ], each = n))^2))
  }
  x[picked, , drop = FALSE]
}

#' The nearest centre of new points
#'
#' @param object A clustering made by [keops_kmeans()].
#' @param newdata A numeric matrix (or data frame) of points, with the columns of the data clustered.
#' @param ... Not used.
#' @return The integer vector of the nearest centre of each row of `newdata` (the lowest number on
#'   ties).
#' @export
predict.keops_kmeans <- function(object, newdata, ...) {
  if (is.data.frame(newdata)) newdata <- as.matrix(newdata)
  d <- ncol(object$centers)
  if (!is.matrix(newdata) || !is.numeric(newdata) || ncol(newdata) != d || !all(is.finite(newdata))) {
    rkeops_abort("predict(): 'newdata' must be a numeric matrix of finite values with ", d, " columns",
                 kind = "input", arg = "newdata")
  }
  storage.mode(newdata) <- "double"
  as.integer(kmeans_operators(d)$labels(list(newdata, unname(object$centers))))
}

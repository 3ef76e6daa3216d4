#' K-means clustering (Lloyd's algorithm) with its loop in the engine
#'
#' `keops_kmeans()` clusters the rows of `x` as `stats::kmeans(x, centers, algorithm = "Lloyd")`
#' does, and returns the same object: each iteration assigns every point to its nearest centre (an
#' `ArgMin` reduction over the N x K pairs), then moves each centre to the mean of its points (a sum
#' over the N x K pairs), until no point changes cluster or `iter.max` iterations have run. The
#' whole loop runs in the engine ([keops_program()], two passes per iteration of the program): on a GPU, the points, labels and centres stay on
#' the device and only the result comes back.
#'
#' Costs: each iteration is one reduction over N x K pairs of dimension D (the labels: on the CPU,
#' a path of its own for a few centres, at a few instructions per pair) and the centres' sums (on the
#' CPU a grouped sum, O(N)); memory O(N + K) beyond `x`. The clusters' sums of squares `withinss` come
#' once after the last iteration, in float64 on the host's cores. k-means++ seeding (`centers` a number) draws each centre by rejection from squared
#' distances brought up to date only when they have become too stale: the distances to each centre
#' are computed once, by the engine (N x K pairs in all, in a few reductions), not in K passes in R. In float32 (and float16) the points are centred (their column means subtracted, in
#' float64) before the engine sees them, so that data far from the origin keep their digits:
#' the results do not depend on where the data are; in float64 the engine sees them as they are;
#' `totss` is computed in float64 (two passes over each column, as [stats::var()]). Same clusters as `stats::kmeans()` (Lloyd) from the same start, up to ties between
#' equally near centres (in float32, distances that differ by less than its precision may break a tie
#' differently; `rkeops_use_float64()` to match exactly).
#'
#' **On several GPUs.** With several GPUs set ([rkeops_use_gpu()] with `device = c(0, 1)` or
#' `"all"`) and at least 65536 points per GPU, the program shares out the points' rows: each GPU
#' keeps its rows, labels them and sums its clusters, and the sums are added between the GPUs after
#' each pass, in their order (the same result from run to run; against one GPU, only the order of the
#' float sums differs).
#'
#' **On the workers of a `future` plan.** After [rkeops_use_future()], the points are cut into one
#' shard of rows per worker of the plan (or `blocks`), each sent once to a worker, which keeps it
#' (and its labels) for all the passes and all the starts of the call: a pass sends the K centres
#' and gets back each shard's sums and counts by cluster, which this process adds up; the labels
#' come back once, at the end. The seeding runs in this process. The clusters, sizes and iterations
#' are those of one process; the centres too, up to the order of the float sums. Any plan works
#' (`multisession`, `cluster`, ...); a worker that lost its shard is sent it again (with `multicore`,
#' whose workers are new forks each time, every pass sends the points). With `progressr`, each pass
#' is a step of a progress bar.
#'
#' @param x A numeric matrix or data frame of N points, one per row, or a numeric vector (one
#'   column), as for [stats::kmeans()].
#' @param centers A K x D matrix (or data frame; a vector when D = 1) of starting centres, or a
#'   number K: then the centres are seeded by k-means++ (the first a row drawn uniformly, each next
#'   one a row drawn with probability proportional to its squared distance to the nearest centre
#'   drawn before), with R's random numbers (reproducible with `set.seed()`).
#' @param iter.max The most iterations.
#' @param nstart With `centers` a number: how many seedings to run; the clustering with the smallest
#'   total within-cluster sum of squares is kept.
#' @param algorithm `"Lloyd"` (or its other name `"Forgy"`): the only algorithm.
#' @return An object of class `c("keops_kmeans", "kmeans")` with the components of
#'   [stats::kmeans()]: `cluster`, `centers`, `totss`, `withinss`, `tot.withinss`, `betweenss`,
#'   `size`, `iter` (assignment passes; `iter.max + 1` when the last one still moved points, with a
#'   warning of class `rkeops_warning_convergence` and `ifault = 2`), `ifault` (`NULL`, or 2). A
#'   centre left with no point keeps its place, with a warning of class `rkeops_warning_empty_cluster`. `print()`, `fitted()` and code for `kmeans` objects work;
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
  # (under rkeops_use_future(), only Lloyd's passes go to the workers, where the points stay: the
  # seeding's and the sums of squares' reductions run here, not as futures sending the points)
  on_workers <- local_future_off()
  vector_names <- if (is.null(dim(x))) names(x)
  x <- check_points(x, "x", fun)
  if (!is.null(vector_names)) rownames(x) <- vector_names  # as as.matrix() does in stats::kmeans()
  iter.max <- check_whole(iter.max, "iter.max", fun, min = 1)
  nstart <- check_whole(nstart, "nstart", fun, min = 1)
  if (!is.character(algorithm) || length(algorithm) != 1L || !algorithm %in% c("Lloyd", "Forgy")) {
    rkeops_abort(arg_label("algorithm", fun), " must be \"Lloyd\" (or \"Forgy\"): the only algorithm",
                 kind = "input", arg = "algorithm")
  }
  # K-means does not change when points and centres move together: in float32 and float16 the engine
  # sees the points centred (kmeans_shift()), so that data far from the origin keep their digits; the
  # centres move back at the end. In float64, the points as they are (as stats::kmeans() sees them:
  # no copy of 'x').
  n <- nrow(x)
  col_means <- if (get_rkeops_options("precision") != "float64") column_means(x)
  means <- if (is.null(col_means)) numeric(ncol(x)) else kmeans_shift(x, col_means)
  xc <- if (any(means != 0)) columns_moved(x, means) else x
  if (is.numeric(centers) && length(centers) == 1L) {
    k <- check_whole(centers, "centers", fun, min = 1)
    if (k > n) {
      rkeops_abort(arg_label("centers", fun), " must be at most the number of points (", n, "), not ", k,
                   kind = "input", arg = "centers")
    }
    starts <- lapply(seq_len(nstart), function(s) xc[kmeans_pp(xc, k), , drop = FALSE])
  } else {
    centers <- check_points(centers, "centers", fun, d = ncol(x))
    if (nrow(centers) > n) {
      rkeops_abort(arg_label("centers", fun), " must have at most as many rows (", nrow(centers),
                   ") as 'x' (", n, ")", kind = "input", arg = "centers")
    }
    starts <- list(centers - rep(means, each = nrow(centers)))
  }
  fits <- if (is.null(on_workers)) {
    lapply(starts, function(start) kmeans_lloyd(xc, start, iter.max))
  } else {
    kmeans_on_workers(xc, starts, iter.max, on_workers)
  }
  best <- fits[[which.min(vapply(fits, function(f) sum(f$withinss), 0))]]
  if (any(best$size == 0L)) rkeops_warn("empty cluster: try a better set of initial centers", kind = "empty_cluster")
  if (!is.null(best$ifault)) {
    rkeops_warn("did not converge in ", iter.max, if (iter.max == 1L) " iteration" else " iterations",
                kind = "convergence")
  }
  kmeans_result(best, xc, means, if (!is.null(col_means)) col_means - means, rownames(x), colnames(x))
}

# The columns' means of the finite points `x`: their sums on every core (R's colMeans() takes 1 s
# for 1e9 values on one), or colMeans()'s extended precision where a sum overflows.
column_means <- function(x) {
  means <- column_sums(x) / nrow(x)
  if (all(is.finite(means))) means else colMeans(x)
}

# How far the points `x` move before float32 or float16 sees them: their columns' means `means` (in
# float64), or nothing when every mean is within its column's spread (the standard deviation of
# 1000 evenly spaced rows: no random draw, which would change the session's stream), where centring
# keeps no digit worth its copy of 'x' (~10 ns a value: 10 s for 1e8 x 10 points).
kmeans_shift <- function(x, means) {
  rows <- x[unique(round(seq(1, nrow(x), length.out = 1000L))), , drop = FALSE]
  spread <- apply(rows, 2, stats::sd)
  if (nrow(rows) > 1L && all(abs(means) <= spread)) numeric(ncol(x)) else means
}

# The object of stats::kmeans() from the fit `fit` of the centred points `xc` (`means` the columns'
# means subtracted; `xc_mean` the mean of `xc` when known): the centres moved back, the total sum
# of squares from the centred points in float64 (as stats::kmeans() computes it).
kmeans_result <- function(fit, xc, means, xc_mean, row_names, col_names) {
  k <- nrow(fit$centers)
  centers <- fit$centers + rep(means, each = k)
  dimnames(centers) <- list(seq_len(k), col_names)
  cluster <- fit$cluster
  names(cluster) <- row_names
  totss <- kmeans_totss(xc, xc_mean)
  tot.withinss <- sum(fit$withinss)
  structure(list(cluster = cluster, centers = centers, totss = totss, withinss = fit$withinss,
                 tot.withinss = tot.withinss, betweenss = totss - tot.withinss, size = fit$size,
                 iter = fit$iter, ifault = fit$ifault),
            class = c("keops_kmeans", "kmeans"))
}

# The total sum of squares of the points `xc` (centred or not), in float64 as stats::kmeans()
# computes it: their squared distances to their mean `mean` (NULL: computed), both sums by the
# engine on every core (no N x D temporary, and a mean already known saves a pass over the points).
kmeans_totss <- function(xc, mean = NULL) {
  if (is.null(mean)) mean <- column_means(xc)
  sum(column_squares(xc, mean))
}

# k-means++ seeding (Arthur and Vassilvitskii, 2007): the indices of K rows of `x`, the first drawn
# uniformly, each next one with probability proportional to its squared distance to the nearest
# row drawn before (D^2).
#
# Updating the N distances and their cumulative sums after every centre would be K passes over the
# points in R. Instead `d2` is updated only now and then, with the distances to the centres drawn
# since computed by the engine (one reduction over N x those centres), and a row is drawn from the
# last `d2` by its cumulative sums, then kept with probability (its squared distance to the nearest
# centre now) / d2, at most 1: rejection sampling, whose kept row follows D^2 exactly. After
# `tries` rejections in a row (the centres drawn since have made `d2` much too large), `d2` is
# updated and the next row drawn from it. (1e6 points, K = 50: 2 or 3 updates.) The draws run in
# the engine, with R's random numbers, in the order this loop once drew them in R.
kmeans_pp <- function(x, k, tries = 32L) {
  n <- nrow(x)
  picked <- sample.int(n, 1L)
  counted <- 0L  # the centres that d2 counts: picked[seq_len(counted)]
  x <- `storage.mode<-`(x, "double")
  while (length(picked) < k) {
    # the draws (the first one after an update kept as drawn), until k or `tries` rejections
    if (counted > 0L) {
      picked <- rust_result(.Call(wrap__keops_kmeans_pp_draws, x, d2, cs, picked, counted, as.integer(k),
                                  as.integer(tries)), "keops_kmeans")
      if (length(picked) == k) break
    }
    since <- picked[(counted + 1L):length(picked)]
    near <- kmeans_operators(ncol(x))$nearest(list(x, x[since, , drop = FALSE]))
    updated <- rust_result(.Call(wrap__keops_kmeans_pp_update, if (counted > 0L) d2, near), "keops_kmeans")
    d2 <- updated$d2
    cs <- updated$cs
    counted <- length(picked)
    if (!is.finite(cs[n])) {
      rkeops_abort("keops_kmeans(): 'x': squared distances between its points overflow the precision ",
                   "in use; scale 'x' down", kind = "input", arg = "x")
    }
    if (!(cs[n] > 0)) {
      rkeops_abort("keops_kmeans(): 'centers': more clusters (", k, ") than distinct points in 'x' (", counted, ")",
                   kind = "input", arg = "centers")
    }
  }
  picked
}

# Lloyd's iterations of keops_kmeans() as one program, and the methods of its result.

# Lloyd's iterations on the centred points `x` from the centres `start` (centred as `x`): the
# labels, the centres (centred), the sizes, the clusters' sums of squares and the passes made.
# The passes go two at a time (`kmeans_pairs()`), an odd last one alone (`kmeans_program()`).
kmeans_lloyd <- function(x, start, iter.max) {
  d <- ncol(x)
  j <- as.double(seq_len(nrow(start)))
  pairs <- iter.max %/% 2L
  # (labels as a one-column matrix: the program takes it as it is, with no copy)
  res <- list(labels = zero_matrix(nrow(x), 1L), c = start)
  passes <- 0L
  converged <- FALSE
  if (pairs > 0L) {
    res <- kmeans_pairs(d, pairs)(list(x = x, c = start, lb = res$labels, j = j))
    t <- attr(res, "iterations")
    # converged in the first pass of the last pair: the second found the same labels and centres
    first <- res$ca[[1L]] < 0.5
    converged <- first || res$changed[[1L]] < 0.5
    passes <- 2L * t - first
    res$labels <- res$lb
  }
  if (!converged && iter.max %% 2L == 1L) {
    res <- kmeans_program(d, 1L)(list(x = x, c = res$c, labels = res$labels, j = j, one = 1))
    converged <- res$changed[[1L]] < 0.5
    passes <- passes + 1L
  }
  # The sums of squares once, after the loop: in the loop they would cost one more pass over the
  # N x K pairs per iteration (a fifth of an iteration on the CPU) for a value only the last one needs.
  withinss <- kmeans_withinss(x, res$labels, res$c)
  list(cluster = labels_as_integers(res$labels), centers = res$c, withinss = withinss,
       size = as.integer(round(res$sc[, d + 1L])), iter = if (converged) passes else passes + 1L,
       ifault = if (!converged) 2L)
}

# Lloyd's iterations from each of `starts` with the points `x` kept on the workers of the future
# plan (`settings` of rkeops_use_future(); `future-shards.R`): its rows cut into one shard per
# worker (or `settings$blocks`), each sent once for all the starts; a pass sends the centres and
# gets back each shard's sums and counts by cluster and its labels changed, added here in the
# shards' order (the same centres as in one process up to the order of the sums).
kmeans_on_workers <- function(x, starts, iter.max, settings) {
  future_packages_check()
  shards <- shards_open(list(x = x), settings)
  lapply(seq_along(starts), function(s) {
    kmeans_lloyd_shards(shards, starts[[s]], iter.max, drop = s == length(starts))
  })
}

# Lloyd's iterations on the shards of `shards` from the centres `start`: what kmeans_lloyd()
# returns. The passes go one at a time; the loop stops after a pass that changed no label (as in one
# process), a pass whose shard went to a worker that had not labelled it counting as a change.
# `drop`: the last start, whose last step drops the shards from the workers.
kmeans_lloyd_shards <- function(shards, start, iter.max, drop) {
  d <- ncol(start)
  ops <- kmeans_operators(d)
  j <- as.double(seq_len(nrow(start)))
  centres <- start
  converged <- FALSE
  progress <- if (requireNamespace("progressr", quietly = TRUE)) progressr::progressor(steps = iter.max)
  for (pass in seq_len(iter.max)) {
    previous <- centres
    steps <- shards_map(shards, "kmeans_shard_pass", list(centres = centres, j = j, pass = pass))
    sc <- shards_total(steps, "sc")
    changed <- shards_total(steps, "changed")
    centres <- ops$c(list(sc, centres))
    if (!is.null(progress)) progress()
    if (!is.na(changed) && changed < 0.5) {
      converged <- TRUE
      break
    }
  }
  ends <- shards_map(shards, "kmeans_shard_end",
                     list(centres = centres, previous = previous, j = j, pass = pass, drop = drop))
  list(cluster = as.integer(unlist(lapply(ends, `[[`, "labels"))), centers = centres,
       withinss = shards_total(ends, "withinss"), size = as.integer(round(sc[, d + 1L])),
       iter = if (converged) pass else pass + 1L, ifault = if (!converged) 2L)
}

# On a worker, a pass of Lloyd's iterations over its shard: the labels against `args$centres`
# (kept for the next pass), how many changed since the pass before (NA when this worker did not
# make them) and the clusters' sums and counts.
kmeans_shard_pass <- function(shard, args) {
  x <- shard$rows$x
  ops <- kmeans_operators(ncol(x))
  labels <- ops$labels(list(x, args$centres))
  changed <- if (identical(shard$pass, args$pass - 1L)) as.double(sum(labels != shard$labels)) else NA_real_
  shard$labels <- labels
  shard$pass <- args$pass
  list(sc = ops$sc(list(labels, x, args$j)), changed = changed)
}

# On a worker, the end of the iterations over its shard: its labels of the last pass (made again
# from the centres of that pass if this worker did not keep them) and the clusters' sums of squares
# around the last centres.
kmeans_shard_end <- function(shard, args) {
  x <- shard$rows$x
  labels <- shard$labels
  if (!identical(shard$pass, args$pass)) labels <- kmeans_operators(ncol(x))$labels(list(x, args$previous))
  shard$pass <- NULL
  if (args$drop) shard_drop(shard)
  # (labels of at most 255 clusters travel as bytes: a quarter of the integers' 16 MB for 4e6 points)
  back <- if (nrow(args$centres) <= 255L) as.raw(labels) else as.integer(labels)
  list(labels = back, withinss = kmeans_withinss(x, labels, args$centres))
}

# The clusters' sums of squares of the points `x` labelled `labels` (1 to K, as numbers) around the
# centres `centers` (K x D): each point's squared distance to its own centre, added by cluster, in
# float64 by the engine on every core (as a reduction it sent the points to the GPU again: 0.33 s of
# a K-means of 1e8 x 10 points on an H200 host).
kmeans_withinss <- function(x, labels, centers) {
  # (as.double() would copy a program's N x 1 labels to drop their dimensions)
  if (!is.double(labels)) labels <- as.double(labels)
  rust_result(.Call(wrap__keops_cluster_squares, x, labels, centers))
}

# The operators of K-means in dimension `d`, made once per dimension and process.
kmeans_operators <- function(d) {
  memoised(kmeans_cache, c("operators", d), function() {
    vi <- function(name, dim = d) sprintf("%s = Vi(%d)", name, dim)
    vj <- function(name, dim = d) sprintf("%s = Vj(%d)", name, dim)
    list(
      # the labels before the step (a copy, as a reduction over one j, `one` = 1: on the CPU a third
      # of the time of the map "labels", 15 against 48 ms per 1e6 points in a program)
      old = keops_kernel("Sum_Reduction(labels * one, 0)", c(vi("labels", 1), vj("one", 1))),
      labels = keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c(vi("x"), vj("c"))),
      # points that changed cluster (a reduction over every i: one value, the stopping rule's)
      changed = keops_kernel("Sum_Reduction(Abs(labels - old), 1)", c(vi("labels", 1), vi("old", 1))),
      # per centre j: the sum of its points and their count
      sc = keops_kernel("Sum_Reduction(Equal(labels, j) * Concat(x, IntCst(1)), 1)",
                        c(vi("labels", 1), vi("x"), vj("j", 1))),
      # the same for the pairs of passes (kmeans_pairs()): points whose labels la and lb differ,
      # the sums and counts of the clusters of la, of lb
      differ = keops_kernel("Sum_Reduction(Abs(la - lb), 1)", c(vi("la", 1), vi("lb", 1))),
      sc_a = keops_kernel("Sum_Reduction(Equal(la, j) * Concat(x, IntCst(1)), 1)",
                          c(vi("la", 1), vi("x"), vj("j", 1))),
      sc_b = keops_kernel("Sum_Reduction(Equal(lb, j) * Concat(x, IntCst(1)), 1)",
                          c(vi("lb", 1), vi("x"), vj("j", 1))),
      # a centre with no point stays where it is
      c = keops_map(sprintf("IfElse(Elem(sc, %d) - 0.5, Extract(sc, 0, %d) / Elem(sc, %d), c)", d, d, d),
                    c(vj("sc", d + 1), vj("c"))),
      # k-means++: each point's squared distance to the nearest centre
      nearest = keops_kernel("Min_Reduction(SqDist(x, c), 0)", c(vi("x"), vj("c"))))
  })
}

# The program of Lloyd's iterations in dimension `d`: the labels before (old), the labels, how many
# changed (the stopping rule: none), the centres' sums and counts, and the centres.
kmeans_program <- function(d, iter.max) {
  memoised(kmeans_cache, c("program", d, iter.max), function() {
    ops <- kmeans_operators(d)
    keops_program(ops[c("old", "labels", "changed", "sc", "c")], iterations = iter.max, until = "changed",
                  tol = 0.5, output = c("labels", "changed", "sc", "c"))
  })
}

# The program of Lloyd's passes two at a time, in dimension `d`: the labels of the first pass in
# `la`, of the second in `lb`, each pass's changed labels counted against the other's (`ca`, then
# `changed`, the stopping rule: none). No copy of the labels before each pass (the `old` of
# `kmeans_program()`): on the CPU, 8 of ~25 ms a pass for 1e6 points. A loop stopped in a first pass
# runs the second for nothing (the same labels and centres again).
kmeans_pairs <- function(d, pairs) {
  memoised(kmeans_cache, c("pairs", d, pairs), function() {
    ops <- kmeans_operators(d)
    steps <- list(la = ops$labels, ca = ops$differ, sc = ops$sc_a, c = ops$c,
                  lb = ops$labels, changed = ops$differ, sc = ops$sc_b, c = ops$c)
    keops_program(steps, iterations = pairs, until = "changed", tol = 0.5,
                  output = c("lb", "ca", "changed", "sc", "c"))
  })
}

kmeans_cache <- new.env(parent = emptyenv())

#' The nearest centre of new points
#'
#' @param object A clustering made by [keops_kmeans()].
#' @param newdata A numeric matrix (or data frame, or vector for one column) of points, with the
#'   columns of the data clustered.
#' @param ... Not used.
#' @return The integer vector of the nearest centre of each row of `newdata` (the lowest number on
#'   ties).
#' @export
predict.keops_kmeans <- function(object, newdata, ...) {
  centers <- unname(object$centers)
  newdata <- check_points(newdata, "newdata", "predict", d = ncol(centers))
  # Distances do not change when points and centres move together: moved near the origin (by the
  # centres' mean), they keep their digits in float32 for data far from it.
  shift <- colMeans(centers)
  as.integer(kmeans_operators(ncol(centers))$labels(list(columns_moved(newdata, shift),
                                                         centers - rep(shift, each = nrow(centers)))))
}

# Lloyd's iterations of keops_kmeans() as one program, and the methods of its result.

# Lloyd's iterations on the centred points `x` from the centres `start` (centred as `x`): the
# labels, the centres (centred), the sizes, the clusters' sums of squares and the passes made.
kmeans_lloyd <- function(x, start, iter.max) {
  d <- ncol(x)
  k <- nrow(start)
  j <- seq_len(k)
  res <- kmeans_program(d, iter.max)(list(x = x, c = start, labels = rep(0, nrow(x)), j = j, one = 1))
  iter <- attr(res, "iterations")
  converged <- res$changed[[1L]] < 0.5
  # The sums of squares once, after the loop: in the loop they would cost one more pass over the
  # N x K pairs per iteration (a fifth of an iteration on the CPU) for a value only the last one needs.
  withinss <- as.vector(kmeans_operators(d)$withinss(list(res$labels, x, j, res$c)))
  list(cluster = as.integer(res$labels), centers = res$c, withinss = withinss,
       size = as.integer(round(res$sc[, d + 1L])), iter = if (converged) iter else iter + 1L,
       ifault = if (!converged) 2L)
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
      # a centre with no point stays where it is
      c = keops_map(sprintf("IfElse(Elem(sc, %d) - 0.5, Extract(sc, 0, %d) / Elem(sc, %d), c)", d, d, d),
                    c(vj("sc", d + 1), vj("c"))),
      withinss = keops_kernel("Sum_Reduction(Equal(labels, j) * SqDist(x, c), 1)",
                              c(vi("labels", 1), vi("x"), vj("j", 1), vj("c"))),
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
  as.integer(kmeans_operators(ncol(centers))$labels(list(newdata - rep(shift, each = nrow(newdata)),
                                                         centers - rep(shift, each = nrow(centers)))))
}

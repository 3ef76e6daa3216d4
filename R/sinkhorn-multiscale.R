# The two-scale Sinkhorn solver of keops_sinkhorn(multiscale = TRUE), for the cost |x - y|^2 / 2
# (appendix C of Feydy et al., "Fast geometric learning with symbolic matrices", after Schmitzer's
# kernel truncation; vignette("sinkhorn-multiscale") derives the bound and checks it):
# 1. both clouds are cut into the cells of a grid and sorted by cell; each cell is its centroid;
# 2. the iterations whose blur is larger than a cell's diagonal run on the centroids (one dense
#    program, small);
# 3. the coarse potentials are extended to the points by the optimality equations;
# 4. the other iterations run on the points (one program), each reduction over the pairs of cells
#    where the plan may exceed exp(-tau) times its largest value: a bound, made once from the
#    extended potentials at the first fine temperature (the largest of the fine ones, so the
#    loosest test), chooses them.

# The side of the grid's cells: a twentieth of the clouds' diameter at 1e4 points, shrinking as
# n^(-1/4) (measured on tori of 1e4 to 1e6 points: vignette("sinkhorn-multiscale")).
sinkhorn_cell_size <- function(diameter, n) diameter / 20 * (max(n, 1e4) / 1e4)^(-1 / 4)

# Multiscale solver of the problem `pb` (as sinkhorn_run()) with temperatures `eps` and updates
# `kind` (sinkhorn_rows()); returns what sinkhorn_solve() does, in the order of the points given,
# with `ranges` (xy, xx and yy, in the sorted order), `perm_x`, `perm_y` (the sort) and `kept` (the
# fractions of the N x M pairs that the fine iterations reduce over: first, and after the ranges are
# made again).
sinkhorn_two_scale <- function(pb, eps, kind, debias, rho, tol, extra, cell, tau = 5) {
  sx <- sort_clusters(pb$x, grid_cluster(pb$x, cell))
  sy <- sort_clusters(pb$y, grid_cluster(pb$y, cell))
  la <- pb$la[sx$perm]
  lb <- pb$lb[sy$perm]
  cx <- cluster_ranges_centroids(sx$x, sx$labels, exp(la))
  cy <- cluster_ranges_centroids(sy$x, sy$labels, exp(lb))
  # the coarse iterations: a prefix (the first one at least, the last update never)
  coarse <- sqrt(eps) > cell * sqrt(ncol(pb$x)) & !kind %in% c("alternate", "last")
  coarse[1L] <- TRUE
  rows <- function(keep) sinkhorn_rows(eps[keep], kind[keep], rho)
  cp <- sinkhorn_run(list(x = cx$centroids, y = cy$centroids, la = log(cx$weights), lb = log(cy$weights)),
                     rows(coarse), 2, debias)
  e <- eps[sum(coarse)]
  de <- if (is.null(rho)) e else e / (1 + e / rho)
  lse <- sinkhorn_operators(ncol(pb$x), 2)$lse
  extend <- function(points, centroids, logw, h) {
    -de * as.vector(lse(list(points, centroids, matrix(logw), matrix(h), 1 / e)))
  }
  fine <- list(x = sx$x, y = sy$x, la = la, lb = lb,
               f = extend(sx$x, cy$centroids, log(cy$weights), cp$g),
               g = extend(sy$x, cx$centroids, log(cx$weights), cp$f))
  # the pairs of cells kept for potentials (sorted), tested at the first fine temperature
  slack <- tau * eps[!coarse][1L]
  bounds <- list(xy = two_scale_bound(cx, cy, sx, sy, cp$f, cp$g, e))
  if (debias) {
    bounds$xx <- two_scale_bound(cx, cx, sx, sx, cp$fa, cp$fa, e)
    bounds$yy <- two_scale_bound(cy, cy, sy, sy, cp$gb, cp$gb, e)
  }
  plan <- function(sol) {
    out <- list(xy = two_scale_ranges(bounds$xy, sol$f, sol$g, slack))
    if (debias) {
      out$xx <- two_scale_ranges(bounds$xx, sol$fa, sol$fa, slack)
      out$yy <- two_scale_ranges(bounds$yy, sol$gb, sol$gb, slack)
    }
    out
  }
  if (debias) {
    fine$fa <- extend(sx$x, cx$centroids, log(cx$weights), cp$fa)
    fine$gb <- extend(sy$x, cy$centroids, log(cy$weights), cp$gb)
  }
  first_ranges <- plan(fine)
  # made again from the potentials after the first fine updates: the extended ones are rough
  res <- sinkhorn_solve(fine, eps[!coarse], kind[!coarse], 2, debias, rho, tol, extra, first_ranges, replan = plan)
  unsort <- function(v, s) v[order(s$perm)]
  res$f <- unsort(res$f, sx)
  res$g <- unsort(res$g, sy)
  if (debias) {
    res$fa <- unsort(res$fa, sx)
    res$gb <- unsort(res$gb, sy)
  }
  res$iterations <- res$iterations + sum(coarse)
  kept <- c(kept_fraction(first_ranges$xy), kept_fraction(res$ranges$xy))
  c(res, list(perm_x = sx$perm, perm_y = sy$perm, kept = kept))
}

# The block-sparse ranges of the pairs of cells (I of x, J of y) where, for the potentials f, g (of
# the sorted points sx$x, sy$x), f_i + g_j - C_ij may be above -slack for some i in I, j in J. With
# t_I where the coarse plan (potentials fc, gc at temperature e) sends cell I and s_J where J gets its
# mass from, for every i in I, j in J:
#   f_i + g_j - C_ij <= F_I + G_J - |x_I - y_J|^2 / 2 + r_I |y_J - t_I| + r_J |x_I - s_J|,
#   F_I = max_i (f_i - <x_i - x_I, x_I - t_I>), G_J the same in y
# (x_I, y_J the centroids, r_I, r_J the radii). Each cell keeps at least its best partner.
# two_scale_bound() computes what the coarse plan fixes (t, s and the points' slopes, once: a problem
# of a cloud with itself has t = s), two_scale_ranges() the ranges for potentials f, g.
two_scale_bound <- function(cx, cy, sx, sy, fc, gc, e) {
  s <- Pm(1 / e)
  xc <- Vi(cx$centroids)
  yc <- Vj(cy$centroids)
  Cc <- sqdist(xc, yc) / 2
  symmetric <- identical(cx, cy) && identical(fc, gc)
  to <- sumsoftmaxweight(Vj(log(cy$weights)) + (Vj(gc) - Cc) * s, weight = yc, index = "j")
  from <- if (symmetric) to else sumsoftmaxweight(Vi(log(cx$weights)) + (Vi(fc) - Cc) * s, weight = xc, index = "i")
  slope_x <- along_slope(sx, cx$centroids, to)
  list(cx = cx, cy = cy, to = to, from = from, slope_x = slope_x, symmetric = symmetric,
       slope_y = if (symmetric) slope_x else along_slope(sy, cy$centroids, from))
}

two_scale_ranges <- function(bound, f, g, slack) {
  cx <- bound$cx
  cy <- bound$cy
  F <- block_max(f - bound$slope_x, cx$ranges)
  G <- if (bound$symmetric && identical(f, g)) F else block_max(g - bound$slope_y, cy$ranges)
  xc <- Vi(cx$centroids)
  yc <- Vj(cy$centroids)
  margin <- Vi(F) + Vj(G) - sqdist(xc, yc) / 2 + Vi(cx$radii) * sqrt(sqdist(yc, Vi(bound$to))) +
    Vj(cy$radii) * sqrt(sqdist(xc, Vj(bound$from))) + Pm(slack)
  from_pairs(cx$ranges, cy$ranges, kept_cell_pairs(margin, nrow(cy$ranges)))
}

# The largest value of v in each block of rows.
block_max <- function(v, blocks) {
  cell <- rep.int(seq_len(nrow(blocks)), blocks[, 2L] - blocks[, 1L] + 1L)
  as.vector(tapply(v, cell, max))
}

# <p_i - c_I, c_I - t_I> for each sorted point p_i of cell I (centroid c_I, target t_I).
along_slope <- function(sorted, centroids, targets) {
  l <- sorted$labels
  rowSums((sorted$x - centroids[l, , drop = FALSE]) * (centroids - targets)[l, , drop = FALSE])
}

# The pairs (I, J) with a margin >= 0: for each I, as many of its best J as the most kept by any I
# (rounded up to a power of 2: few formulas); each I and each J with at least its best partner.
kept_cell_pairs <- function(margin, n_y) {
  most <- max(sum(step(margin), index = "j"))
  K <- min(2^ceiling(log2(max(most, 1))), n_y)
  top <- Kmin_argKmin(-margin, K = K, index = "j")
  keep <- top$values <= 0
  keep[, 1L] <- TRUE
  best_i <- argmin(-margin, index = "i")[, 1L]
  rbind(cbind(row(keep)[keep], top$indices[keep]), cbind(best_i, seq_len(n_y)))
}

# The fraction of the N x M pairs that the ranges cover.
kept_fraction <- function(ranges) {
  len <- function(r) as.double(r[, 2L] - r[, 1L] + 1)
  ends <- c(0, cumsum(len(ranges$redranges_j)))[ranges$slices_i + 1L]
  per_block <- diff(c(0, ends))
  sum(len(ranges$ranges_i) * per_block) / (sum(len(ranges$ranges_i)) * sum(len(ranges$ranges_j)))
}

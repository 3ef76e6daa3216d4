# The planning of the two-scale Sinkhorn solver (keops_sinkhorn(multiscale = TRUE)) in the engine
# against the R planning it replaced (kept below as it was in R/sinkhorn-multiscale.R), on the same
# data and potentials, in one run: sorting by cell and the cells' summaries, the coarse plan's
# targets (engine reductions over the cells in both), the ranges of the three problems (x y, x x,
# y y) made twice (the plan and the replan) and the unsort of four potentials. The coarse solve and
# the extension of its potentials to the points (engine programs and reductions, the same in both)
# are not timed: the potentials are the coarse ones extended to first order within each cell.
# Run from the repository root:
#   R_LIBS=lib Rscript bench/two_scale_planning.R [N ...]     (default 1e5 1e6; REPS=3)
# Prints the median seconds of each stage (REPS runs after a warm-up) and the ratio old / new, and
# checks that both plannings give the same cells and ranges (float64: the old one's margins were
# rounded to float32 otherwise).
suppressPackageStartupMessages(library(rkeops))
rkeops_use_float64()
ns <- asNamespace("rkeops")
reps <- as.integer(Sys.getenv("REPS", "3"))
sizes <- as.numeric(commandArgs(trailingOnly = TRUE))
if (length(sizes) == 0L) sizes <- c(1e5, 1e6)

# ---- The R planning before the engine did it (R/sinkhorn-multiscale.R, 2026-11-28) ----
old_cells <- function(x, cell, la) {
  s <- sort_clusters(x, grid_cluster(x, cell))
  c(s, cluster_ranges_centroids(s$x, s$labels, exp(la[s$perm])), list(la = la[s$perm]))
}
old_bound <- function(cx, cy, sx, sy, fc, gc, e) {
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
old_ranges <- function(bound, f, g, slack) {
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
block_max <- function(v, blocks) {
  cell <- rep.int(seq_len(nrow(blocks)), blocks[, 2L] - blocks[, 1L] + 1L)
  as.vector(tapply(v, cell, max))
}
along_slope <- function(sorted, centroids, targets) {
  l <- sorted$labels
  rowSums((sorted$x - centroids[l, , drop = FALSE]) * (centroids - targets)[l, , drop = FALSE])
}
kept_cell_pairs <- function(margin, n_y) {
  most <- max(sum(step(margin), index = "j"))
  K <- min(2^ceiling(log2(max(most, 1))), n_y)
  top <- Kmin_argKmin(-margin, K = K, index = "j")
  keep <- top$values <= 0
  keep[, 1L] <- TRUE
  best_i <- argmin(-margin, index = "i")[, 1L]
  rbind(cbind(row(keep)[keep], top$indices[keep]), cbind(best_i, seq_len(n_y)))
}
old_planning <- function(d, pot, slack) {
  t <- list()
  t$cells <- system.time({ sx <- old_cells(d$x, d$cell, d$la); sy <- old_cells(d$y, d$cell, d$la) })[["elapsed"]]
  t$targets <- system.time(b <- list(xy = old_bound(sx, sy, sx, sy, pot$fc, pot$gc, d$e),
                                     xx = old_bound(sx, sx, sx, sx, pot$fc, pot$fc, d$e),
                                     yy = old_bound(sy, sy, sy, sy, pot$gc, pot$gc, d$e)))[["elapsed"]]
  t$ranges <- system.time(for (k in 1:2) {
    r <- list(xy = old_ranges(b$xy, pot$f, pot$g, slack), xx = old_ranges(b$xx, pot$f, pot$f, slack),
              yy = old_ranges(b$yy, pot$g, pot$g, slack))
  })[["elapsed"]]
  t$unsort <- system.time(for (k in 1:2) { pot$f[order(sx$perm)]; pot$g[order(sy$perm)] })[["elapsed"]]
  list(times = unlist(t), perm = sx$perm, ranges = r)
}

# ---- The engine's planning (R/sinkhorn-multiscale.R now) ----
new_planning <- function(d, pot, slack) {
  t <- list()
  t$cells <- system.time({
    sx <- ns$two_scale_cells(d$x, d$cell, d$la); sy <- ns$two_scale_cells(d$y, d$cell, d$la)
  })[["elapsed"]]
  t$targets <- system.time(tg <- list(xy = ns$coarse_targets(sx, sy, pot$fc, pot$gc, d$e),
                                      xx = ns$coarse_targets(sx, sx, pot$fc, pot$fc, d$e),
                                      yy = ns$coarse_targets(sy, sy, pot$gc, pot$gc, d$e)))[["elapsed"]]
  t$ranges <- system.time(for (k in 1:2) {
    r <- list(xy = cell_pair_ranges(sx, sy, pot$f, pot$g, tg$xy$to, tg$xy$from, slack),
              xx = cell_pair_ranges(sx, sx, pot$f, pot$f, tg$xx$to, tg$xx$from, slack),
              yy = cell_pair_ranges(sy, sy, pot$g, pot$g, tg$yy$to, tg$yy$from, slack))
  })[["elapsed"]]
  unsort <- function(v, perm) `[<-`(numeric(length(v)), perm, v)
  t$unsort <- system.time(for (k in 1:2) { unsort(pot$f, sx$perm); unsort(pot$g, sy$perm) })[["elapsed"]]
  list(times = unlist(t), perm = sx$perm, ranges = r)
}

# ---- Data: the tori of bench/algorithms.R's sinkhorn_case, blur 0.05 ----
torus <- function(n) {
  u <- runif(n, 0, 2 * pi); v <- runif(n, 0, 2 * pi)
  cbind((1 + 0.4 * cos(v)) * cos(u), (1 + 0.4 * cos(v)) * sin(u), 0.4 * sin(v))
}
problem <- function(n) {
  set.seed(n)
  x <- torus(n)
  y <- torus(n) %*% diag(c(1.2, 0.9, 1)) + 0.2
  sch <- ns$sinkhorn_schedule(x, y, 2, 0.05, 0.5)
  cell <- ns$sinkhorn_cell_size(sch$diameter, n)
  eps <- c(sch$eps, 0.05^2)
  coarse <- sqrt(eps) > cell * sqrt(3)
  list(x = x, y = y, la = rep(-log(n), n), cell = cell, eps = eps, coarse = coarse, e = eps[sum(coarse)])
}
# The coarse potentials (a short dense solve on the cells), extended to first order in each cell:
# f_i = fc_I + <x_i - x_I, x_I - t_I> (the gradient of f is x - T(x)).
potentials <- function(d) {
  sx <- ns$two_scale_cells(d$x, d$cell, d$la)
  sy <- ns$two_scale_cells(d$y, d$cell, d$la)
  rows <- ns$sinkhorn_rows(d$eps[d$coarse], c("first", rep("averaged", sum(d$coarse) - 1L)))
  cp <- ns$sinkhorn_run(list(x = sx$centroids, y = sy$centroids, la = log(sx$weights), lb = log(sy$weights)),
                        rows, 2, FALSE)
  tg <- ns$coarse_targets(sx, sy, cp$f, cp$g, d$e)
  first_order <- function(s, h, t) {
    l <- rep(seq_len(nrow(s$ranges)), diff(c(0L, s$ranges[, 2L])))
    h[l] + rowSums((s$x - s$centroids[l, , drop = FALSE]) * (s$centroids - t)[l, , drop = FALSE])
  }
  list(fc = cp$f, gc = cp$g, f = first_order(sx, cp$f, tg$to), g = first_order(sy, cp$g, tg$from))
}

for (n in sizes) {
  d <- problem(n)
  pot <- potentials(d)
  slack <- 5 * d$eps[!d$coarse][1L]
  old <- old_planning(d, pot, slack)              # warm-ups (and the check)
  new <- new_planning(d, pot, slack)
  same <- identical(old$perm, new$perm) && identical(old$ranges, new$ranges)
  old_t <- replicate(reps, old_planning(d, pot, slack)$times)
  new_t <- replicate(reps, new_planning(d, pot, slack)$times)
  med <- function(t) c(apply(t, 1L, median), total = median(colSums(t)))
  tab <- rbind(old_R = med(old_t), engine = med(new_t))
  tab <- rbind(tab, ratio = tab["old_R", ] / tab["engine", ])
  cat(sprintf("\nN = M = %g, D = 3, blur 0.05: %d x %d cells, %.1f %% of the pairs kept; same cells and ranges: %s\n",
              n, nrow(old$ranges$xy$ranges_i), nrow(old$ranges$xy$ranges_j), 100 * ns$kept_fraction(new$ranges$xy),
              same))
  cat(sprintf("median seconds of %d runs after a warm-up (ranges: 3 problems, twice; unsort: 4 vectors)\n", reps))
  print(round(tab, 4))
}

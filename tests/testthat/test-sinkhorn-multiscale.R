# The two-scale solver's planning in the engine (sort_grid_cells(), cell_pair_ranges()) against a
# plain-R float64 reference of the planning it replaced (R/sinkhorn-multiscale.R before the engine
# did it: R's sort, tapply() maxima, the margins of every pair of cells, from_pairs()).

# grid_cluster()'s cells by plain R: integer coordinates from the smallest value, numbered in the
# lexicographic order of the coordinates (first dimension slowest).
ref_labels <- function(x, size) {
  v <- floor(sweep(x, 2L, apply(x, 2L, min)) / size)
  key <- apply(v, 1L, paste, collapse = " ")
  u <- unique(v)
  u <- u[do.call(order, as.data.frame(u)), , drop = FALSE]
  match(key, apply(u, 1L, paste, collapse = " "))
}

ref_cells <- function(x, size, w) {
  lab <- ref_labels(x, size)
  perm <- order(lab)                                    # stable
  xs <- x[perm, , drop = FALSE]
  ls <- lab[perm]
  ws <- w[perm]
  counts <- tabulate(ls)
  centroids <- rowsum(xs * ws, ls) / as.vector(rowsum(ws, ls))
  d2 <- rowSums((xs - centroids[ls, , drop = FALSE])^2)
  list(x = xs, perm = perm, labels = ls, ranges = cbind(cumsum(counts) - counts + 1L, cumsum(counts)),
       centroids = unname(centroids), weights = as.vector(rowsum(ws, ls)), radii = sqrt(as.vector(tapply(d2, ls, max))))
}

# The margins of every pair of cells and the kept pairs: margin >= 0, and each cell's best partner.
ref_ranges <- function(cx, cy, f, g, to, from, slack) {
  slope <- function(c, t) rowSums((c$x - c$centroids[c$labels, , drop = FALSE]) * (c$centroids - t)[c$labels, , drop = FALSE])
  F <- as.vector(tapply(f - slope(cx, to), cx$labels, max))
  G <- as.vector(tapply(g - slope(cy, from), cy$labels, max))
  dist2 <- function(a, b) Reduce(`+`, lapply(seq_len(ncol(a)), function(k) outer(a[, k], b[, k], "-")^2))
  margin <- outer(F, G, "+") - dist2(cx$centroids, cy$centroids) / 2 +
    cx$radii * sqrt(dist2(to, cy$centroids)) + rep(cy$radii, each = nrow(to)) * sqrt(dist2(cx$centroids, from)) + slack
  keep <- margin >= 0
  keep[cbind(seq_len(nrow(keep)), max.col(margin, "first"))] <- TRUE
  keep[cbind(apply(margin, 2L, which.max), seq_len(ncol(keep)))] <- TRUE
  list(ranges = from_matrix(cx$ranges, cy$ranges, keep), kept = mean(keep))
}

# Clouds of sizes not multiples of 32: uniform, or clustered around a few centres.
cloud <- function(n, d, clustered) {
  if (!clustered) return(matrix(runif(n * d), n, d))
  centres <- matrix(runif(5 * d), 5, d)
  centres[sample.int(5L, n, TRUE), , drop = FALSE] + matrix(rnorm(n * d, sd = 0.04), n, d)
}

test_that("sort_grid_cells() sorts and summarises the cells as plain R does", {
  set.seed(11)
  for (d in 2:3) for (clustered in c(FALSE, TRUE)) {
    x <- cloud(1001, d, clustered)
    w <- runif(1001, 0.5, 2)
    ref <- ref_cells(x, 0.13, w)
    got <- sort_grid_cells(x, 0.13, weights = w)
    expect_identical(got$perm, ref$perm)
    expect_identical(got$x, ref$x)
    expect_identical(got$ranges, ref$ranges)
    expect_equal(got$centroids, ref$centroids, tolerance = 1e-13)
    expect_equal(got$weights, ref$weights, tolerance = 1e-13)
    expect_equal(got$radii, ref$radii, tolerance = 1e-12)
    expect_identical(got$bounds, apply(x, 2, range))
  }
  expect_error(sort_grid_cells(x, -1), class = "rkeops_error_input")
  expect_error(sort_grid_cells(x, 0.1, weights = c(1, 2)), "'weights'", class = "rkeops_error_input")
  for (bad in list(0, -1, NA, NaN, Inf)) {
    expect_error(sort_grid_cells(x, 0.1, weights = replace(w, 3, bad)), "'weights'", class = "rkeops_error_input")
  }
})

test_that("cell_pair_ranges() keeps the pairs of the plain-R bound (x against y, and a cloud against itself)", {
  set.seed(12)
  for (d in 2:3) for (clustered in c(FALSE, TRUE)) {
    x <- cloud(1203, d, clustered)
    y <- cloud(999, d, clustered) + 0.05
    cx <- sort_grid_cells(x, 0.11)
    cy <- sort_grid_cells(y, 0.11)
    rx <- c(cx, list(labels = rep(seq_len(nrow(cx$ranges)), diff(c(0L, cx$ranges[, 2L])))))
    ry <- c(cy, list(labels = rep(seq_len(nrow(cy$ranges)), diff(c(0L, cy$ranges[, 2L])))))
    # the potentials of the map x -> x + shift (f + g - C = -|x + shift - y|^2 / 2 <= 0), perturbed
    shift <- rep(0.05, d)
    f <- -as.vector(cx$x %*% shift) + rnorm(1203, sd = 1e-3)
    g <- as.vector(cy$x %*% shift) - sum(shift^2) / 2 + rnorm(999, sd = 1e-3)
    to <- sweep(cx$centroids, 2L, shift, "+") + rnorm(length(cx$centroids), sd = 0.01)
    from <- sweep(cy$centroids, 2L, shift, "-")
    for (slack in c(1e-3, 0.02)) {
      ref <- ref_ranges(rx, ry, f, g, to, from, slack)
      expect_gt(ref$kept, 0)
      expect_lt(ref$kept, 0.5)                    # a pruning, not every pair
      expect_identical(cell_pair_ranges(cx, cy, f, g, to, from, slack), ref$ranges)
    }
    # debiasing's problems: a cloud with itself, its own potential, to = from
    fa <- -as.vector(rowSums(cx$x^2)) / 2 * 0.1 + rnorm(1203, sd = 1e-3)
    t_xx <- cx$centroids * 0.9
    expect_identical(cell_pair_ranges(cx, cx, fa, fa, t_xx, t_xx, 0.01), ref_ranges(rx, rx, fa, fa, t_xx, t_xx, 0.01)$ranges)
  }
  expect_error(cell_pair_ranges(cx, cy, f[-1], g, to, from, 0.1), "'f'", class = "rkeops_error_input")
  expect_error(cell_pair_ranges(cx, cy, f, g, to[-1, ], from, 0.1), "'to'", class = "rkeops_error_input")
  expect_error(cell_pair_ranges(cx, cy, f, g, to, from, NA), "'slack'", class = "rkeops_error_input")
  expect_error(cell_pair_ranges(list(1), cy, f, g, to, from, 0.1), "'cx'", class = "rkeops_error_input")
  expect_error(cell_pair_ranges(cx, cy, replace(f, 7, NaN), g, to, from, 0.1), "finite", class = "rkeops_error")
})

test_that("keops_sinkhorn(multiscale = TRUE) plans with the engine as the plain-R planning did", {
  # the solver's first ranges (tol = NULL: the only ones) against the plain-R planning of its coarse
  # solve: cells, extended potentials and targets remade here as the solver makes them
  local_precision("float64")
  set.seed(13)
  ns <- asNamespace("rkeops")
  for (debias in c(FALSE, TRUE)) for (d in 2:3) {
    x <- cloud(1501, d, TRUE)
    y <- cloud(1299, d, TRUE) + 0.03
    pb <- ns$sinkhorn_problem(x, y, NULL, runif(1299), balanced = TRUE)
    sch <- ns$sinkhorn_schedule(pb$x, pb$y, 2, 0.05, 0.5)
    eps <- c(sch$eps[1L], sch$eps, 0.05^2)
    kind <- c("first", rep("averaged", length(sch$eps)), "last")
    cell <- ns$sinkhorn_cell_size(sch$diameter, 1501)
    sol <- ns$sinkhorn_two_scale(pb, eps, kind, debias, NULL, NULL, 0L, cell)
    sx <- ref_cells(pb$x, cell, exp(pb$la))
    sy <- ref_cells(pb$y, cell, exp(pb$lb))
    expect_identical(sol$perm_x, sx$perm)
    expect_identical(sol$perm_y, sy$perm)
    coarse <- sqrt(eps) > cell * sqrt(d) & kind != "last"
    coarse[1L] <- TRUE
    cp <- ns$sinkhorn_run(list(x = sx$centroids, y = sy$centroids, la = log(sx$weights), lb = log(sy$weights)),
                          ns$sinkhorn_rows(eps[coarse], kind[coarse]), 2, debias)
    e <- eps[sum(coarse)]
    # (the extension and the targets: the engine's reductions, as in the solver)
    extend <- function(p, c, h) -e * as.vector(ns$sinkhorn_operators(d, 2)$lse(list(p, c$centroids, matrix(log(c$weights)), matrix(h), 1 / e)))
    slack <- 5 * eps[!coarse][1L]
    t <- ns$coarse_targets(sx, sy, cp$f, cp$g, e)
    ref <- ref_ranges(sx, sy, extend(sx$x, sy, cp$g), extend(sy$x, sx, cp$f), t$to, t$from, slack)
    expect_lt(ref$kept, 0.9)
    expect_identical(sol$ranges$xy, ref$ranges)
    if (debias) {
      t <- ns$coarse_targets(sx, sx, cp$fa, cp$fa, e)
      fa <- extend(sx$x, sx, cp$fa)
      expect_identical(sol$ranges$xx, ref_ranges(sx, sx, fa, fa, t$to, t$from, slack)$ranges)
    }
  }
})

test_that("the two-scale keops_sinkhorn() agrees with the dense one, debiased or not, in float32", {
  # (uniform clouds in the plane: clustered ones take thousands of iterations to converge)
  set.seed(14)
  x <- cloud(1201, 2, FALSE)
  y <- cloud(1099, 2, FALSE) * 0.9 + 0.1
  for (debias in c(FALSE, TRUE)) {
    dense <- keops_sinkhorn(x, y, blur = 0.05, tol = 1e-4, debias = debias, multiscale = FALSE)
    two <- keops_sinkhorn(x, y, blur = 0.05, tol = 1e-4, debias = debias, multiscale = TRUE)
    expect_lt(attr(two, "kept")[2L], 0.5)       # a block-sparse solve, not a dense one in disguise
    expect_equal(as.vector(two), as.vector(dense), tolerance = 1e-4)
  }
})

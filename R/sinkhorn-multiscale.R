# The two-scale Sinkhorn solver of keops_sinkhorn(multiscale = TRUE), for the cost |x - y|^2 / 2
# (appendix C of Feydy et al., "Fast geometric learning with symbolic matrices", after Schmitzer's
# kernel truncation; vignette("sinkhorn-multiscale") derives the bound and checks it):
# 1. both clouds are cut into the cells of a grid and sorted by cell; each cell is its centroid
#    (the engine's sort and summary: two_scale_cells());
# 2. the iterations whose blur is larger than a cell's diagonal run on the centroids (one dense
#    program, small);
# 3. the coarse potentials are extended to the points by the optimality equations;
# 4. the other iterations run on the points (one program), each reduction over the pairs of cells
#    where the plan may exceed exp(-tau) times its largest value: a bound, made once from the
#    extended potentials at the first fine temperature (the largest of the fine ones, so the
#    loosest test), chooses them: cell_pair_ranges(), in the engine, which tests every pair of
#    cells on every core and makes the ranges (the planning in R took 1.1 s of 1.6 s at 10^6 points
#    on a GPU).

# The side of the grid's cells: a twentieth of the clouds' diameter at 1e4 points, shrinking as
# n^(-1/4) (measured on tori of 1e4 to 1e6 points: vignette("sinkhorn-multiscale")).
sinkhorn_cell_size <- function(diameter, n) diameter / 20 * (max(n, 1e4) / 1e4)^(-1 / 4)

# Multiscale solver of the problem `pb` (as sinkhorn_run()) with temperatures `eps` and updates
# `kind` (sinkhorn_rows()); returns what sinkhorn_solve() does, in the order of the points given,
# with `ranges` (xy, xx and yy, in the sorted order), `perm_x`, `perm_y` (the sort) and `kept` (the
# fractions of the N x M pairs that the fine iterations reduce over: first, and after the ranges are
# made again).
sinkhorn_two_scale <- function(pb, eps, kind, debias, rho, tol, extra, cell, tau = 5) {
  sx <- two_scale_cells(pb$x, cell, pb$la, "keops_sinkhorn")
  sy <- two_scale_cells(pb$y, cell, pb$lb, "keops_sinkhorn")
  # the coarse iterations: a prefix (the first one at least, the last update never)
  coarse <- sqrt(eps) > cell * sqrt(ncol(pb$x)) & !kind %in% c("alternate", "last")
  coarse[1L] <- TRUE
  rows <- function(keep) sinkhorn_rows(eps[keep], kind[keep], rho)
  cp <- sinkhorn_run(list(x = sx$centroids, y = sy$centroids, la = log(sx$weights), lb = log(sy$weights)),
                     rows(coarse), 2, debias)
  e <- eps[sum(coarse)]
  de <- if (is.null(rho)) e else e / (1 + e / rho)
  lse <- sinkhorn_operators(ncol(pb$x), 2)$lse
  extend <- function(points, cells, h) {
    -de * as.vector(lse(list(points, cells$centroids, matrix(log(cells$weights)), matrix(h), 1 / e)))
  }
  fine <- list(x = sx$x, y = sy$x, la = sx$la, lb = sy$la, f = extend(sx$x, sy, cp$g), g = extend(sy$x, sx, cp$f))
  # where the coarse plan sends each cell's mass, and where each cell gets it from
  targets <- list(xy = coarse_targets(sx, sy, cp$f, cp$g, e))
  if (debias) {
    fine$fa <- extend(sx$x, sx, cp$fa)
    fine$gb <- extend(sy$x, sy, cp$gb)
    targets$xx <- coarse_targets(sx, sx, cp$fa, cp$fa, e)
    targets$yy <- coarse_targets(sy, sy, cp$gb, cp$gb, e)
  }
  # the pairs of cells kept for potentials (sorted), tested at the first fine temperature
  slack <- tau * eps[!coarse][1L]
  plan <- function(sol) {
    t <- targets$xy
    out <- list(xy = cell_pair_ranges(sx, sy, sol$f, sol$g, t$to, t$from, slack))
    if (debias) {
      out$xx <- cell_pair_ranges(sx, sx, sol$fa, sol$fa, targets$xx$to, targets$xx$from, slack)
      out$yy <- cell_pair_ranges(sy, sy, sol$gb, sol$gb, targets$yy$to, targets$yy$from, slack)
    }
    out
  }
  first_ranges <- plan(fine)
  # made again from the potentials after the first fine updates: the extended ones are rough
  res <- sinkhorn_solve(fine, eps[!coarse], kind[!coarse], 2, debias, rho, tol, extra, first_ranges, replan = plan)
  unsort <- function(v, s) {
    out <- v
    out[s$perm] <- v
    out
  }
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

# The clouds' cells (the engine's sort by cell and summary, sort_grid_cells() without its checks:
# its caller `fun` checked x, size and la), with `la`, the log-weights in the sorted order.
two_scale_cells <- function(x, size, la, fun) {
  cells <- rust_result(.Call(wrap__keops_two_scale_cells, x, rep_len(as.double(size), ncol(x)), la), fun)
  colnames(cells$centroids) <- colnames(x)
  colnames(cells$bounds) <- colnames(x)
  cells
}

# Where the coarse plan (potentials fc, gc of the cells cx, cy at temperature e) sends the mass of
# each cell of x (`to`, its barycentric projection) and where each cell of y gets its mass from
# (`from`): reductions over the cells. A problem of a cloud with itself has to = from.
coarse_targets <- function(cx, cy, fc, gc, e) {
  s <- Pm(1 / e)
  xc <- Vi(cx$centroids)
  yc <- Vj(cy$centroids)
  Cc <- sqdist(xc, yc) / 2
  to <- sumsoftmaxweight(Vj(log(cy$weights)) + (Vj(gc) - Cc) * s, weight = yc, index = "j")
  symmetric <- identical(cx, cy) && identical(fc, gc)
  list(to = to, from = if (symmetric) to else {
    sumsoftmaxweight(Vi(log(cx$weights)) + (Vi(fc) - Cc) * s, weight = xc, index = "i")
  })
}

#' Block-sparse ranges of the pairs of cells where a transport plan may not be negligible
#'
#' The pruning of the two-scale Sinkhorn solver (`keops_sinkhorn(multiscale = TRUE)`,
#' `vignette("sinkhorn-multiscale")`, after appendix C of Feydy et al., "Fast geometric learning
#' with symbolic matrices", and Schmitzer's kernel truncation), for the cost
#' \eqn{C(x, y) = |x - y|^2 / 2}{C(x, y) = |x - y|^2 / 2}. The points of both clouds are sorted by
#' cell ([sort_grid_cells()]); for potentials \eqn{f} (on the sorted points of x) and \eqn{g} (of y),
#' a pair of cells \eqn{(I, J)} is kept when, for some \eqn{i \in I}{i in I}, \eqn{j \in J}{j in J},
#' \eqn{f_i + g_j - C(x_i, y_j) \ge -}{f_i + g_j - C(x_i, y_j) >= -}`slack` may hold, as the bound
#' \deqn{f_i + g_j - C_{ij} \le F_I + G_J - |\bar x_I - \bar y_J|^2 / 2 + r_I |\bar y_J - t_I| +
#'   r_J |\bar x_I - s_J|}{f_i + g_j - C_ij <= F_I + G_J - |x_I - y_J|^2 / 2 + r_I |y_J - t_I| + r_J |x_I - s_J|}
#' says, with \eqn{F_I = \max_{i \in I} (f_i - \langle x_i - \bar x_I, \bar x_I - t_I \rangle)}{F_I =
#' max_(i in I) (f_i - <x_i - x_I, x_I - t_I>)} and \eqn{G_J} the same in y (\eqn{\bar x_I}{x_I},
#' \eqn{\bar y_J}{y_J} the centroids, \eqn{r} the radii, \eqn{t_I} = `to[I, ]` and
#' \eqn{s_J} = `from[J, ]` any points, tightest where the plan sends cell \eqn{I} and where cell
#' \eqn{J} gets its mass from). Each cell of x and each cell of y also keeps its best partner (the
#' largest bound), so that no row of a reduction is left empty.
#'
#' The engine tests every pair of cells, on every core, in double precision (groups of cells of
#' y far from a cell of x at once, by a looser bound).
#'
#' @param cx,cy The cells of the two clouds, from [sort_grid_cells()] (`x`, `ranges`,
#'   `centroids` and `radii` are read).
#' @param f,g The potentials at the sorted points `cx$x` and `cy$x`: finite numbers.
#' @param to,from Matrices with a row per cell of x (`to`) and of y (`from`) and the
#'   points' dimension: the points \eqn{t_I} and \eqn{s_J} of the bound.
#' @param slack The margin \eqn{\tau \varepsilon}{tau eps}: a finite number.
#' @return A [keops_ranges] object over the sorted points (blocks: the cells).
#' @seealso [sort_grid_cells()], [from_pairs()], [keops_sinkhorn()].
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(400), ncol = 2)
#' y <- matrix(runif(300), ncol = 2) + 0.1
#' cx <- sort_grid_cells(x, 0.25)
#' cy <- sort_grid_cells(y, 0.25)
#' # potentials of the identity map (f + g = C on the diagonal) and targets at the centroids
#' r <- cell_pair_ranges(cx, cy, numeric(200), numeric(150), cx$centroids, cy$centroids, 0.01)
#' r
cell_pair_ranges <- function(cx, cy, f, g, to, from, slack) {
  fun <- "cell_pair_ranges"
  side <- function(cells, h, target, arg, harg, targ) {
    if (!is.list(cells) || !all(c("x", "ranges", "centroids", "radii") %in% names(cells))) {
      clustering_stop(fun, "'", arg, "' must be the cells of sort_grid_cells()", arg = arg)
    }
    if (!is.numeric(h) || length(h) != nrow(cells$x)) {
      clustering_stop(fun, "'", harg, "' must be a numeric vector with one value per point of '", arg, "' (",
                      nrow(cells$x), ")", arg = harg)
    }
    if (!is.matrix(target) || !is.numeric(target) || !identical(dim(target), dim(cells$centroids))) {
      clustering_stop(fun, "'", targ, "' must be a numeric matrix with one row per cell of '", arg, "' (",
                      nrow(cells$centroids), " x ", ncol(cells$centroids), ")", arg = targ)
    }
    list(x = cells$x, ranges = cells$ranges, centroids = cells$centroids, radii = cells$radii,
         target = `storage.mode<-`(target, "double"), potential = as.double(h))
  }
  sx <- side(cx, f, to, "cx", "f", "to")
  sy <- side(cy, g, from, "cy", "g", "from")
  check_number(slack, "slack", fun)
  sides <- clustering_result(fun, .Call(wrap__keops_cell_pair_ranges, sx, sy, as.double(slack)))
  new_keops_ranges(cx$ranges, sides$i$slices, sides$i$red, cy$ranges, sides$j$slices, sides$j$red)
}

# The fraction of the N x M pairs that the ranges cover.
kept_fraction <- function(ranges) {
  len <- function(r) as.double(r[, 2L] - r[, 1L] + 1)
  ends <- c(0, cumsum(len(ranges$redranges_j)))[ranges$slices_i + 1L]
  per_block <- diff(c(0, ends))
  sum(len(ranges$ranges_i) * per_block) / (sum(len(ranges$ranges_i)) * sum(len(ranges$ranges_j)))
}

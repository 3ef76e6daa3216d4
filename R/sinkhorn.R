#' Entropic optimal transport: the Sinkhorn divergence between two point clouds
#'
#' `keops_sinkhorn()` computes the entropic optimal transport cost between the weighted point
#' clouds `(x, a)` and `(y, b)`, for the cost `C(x, y) = |x - y|^p / p` at the temperature
#' `eps = blur^p`, as GeomLoss's `SamplesLoss("sinkhorn")` does: symmetric log-domain Sinkhorn
#' iterations (each potential the average of its update and its previous value) with
#' epsilon-scaling, from the clouds' diameter to `blur` by factors of `scaling`, then Sinkhorn's
#' alternate updates at `blur^p` until the marginals of the transport plan match `a` and `b` to
#' `tol` (in L1, the weights summing to 1). With `debias = TRUE` (the default) the result is the
#' Sinkhorn divergence `OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2`, which is positive, zero
#' for equal clouds and a smooth, metric-like loss; with `reach` the transport is unbalanced (the
#' marginals are penalised by `reach^p` times a Kullback-Leibler divergence instead of imposed).
#'
#' The loop runs as programs ([keops_program()]): on a GPU the potentials stay on the device from
#' the first iteration to the last (of each program: one for the schedule and the first 20 updates
#' at `blur^p`, one for the others, which leaves the self problems' potentials `f_aa`, `g_bb` as
#' the first one ends: their symmetric updates have converged by then), and the stopping test is
#' made there.
#'
#' **Two scales.** For large clouds in dimension 3 or less (p = 2), the two-scale solver of Feydy et
#' al. (`vignette("sinkhorn-multiscale")`) cuts both clouds into the cells of a grid (side: a
#' twentieth of the diameter at 10^4 points, shrinking as `n^(-1/4)`), runs the iterations whose
#' blur is larger than a cell on the cells' centroids, extends the potentials to the points, and
#' runs the others as block-sparse reductions over the pairs of cells where the plan may exceed
#' `exp(-5)` times its largest value (a bound, evaluated from the extended potentials, and again
#' after 20 fine updates when `tol` asks for more). Attribute `kept`: the fractions of the N x M
#' pairs reduced over (before and after that second test). `multiscale = "auto"` uses it from 2e4
#' points on the CPU (1.8 x faster than the dense solver there, 7 x at 5e4, on tori at blur 0.05)
#' and 2e5 on a GPU (where the dense solver is faster below: planning on the host costs ~0.1 s),
#' never for batches.
#'
#' **Over-relaxation.** Sinkhorn's alternate updates converge at a linear rate that tends to 1 as
#' `blur` decreases; after 20 plain ones, the rate is measured and the others are over-relaxed
#' (Thibault et al., 2017): 4 to 10 times fewer iterations to reach `tol` at blur 0.05.
#'
#' **Batches.** `x` and `y` may be batches of B clouds (lists of matrices, sizes free; or
#' `n x d x B` arrays), with `a`, `b` lists of weight vectors or matrices with B columns: the result
#' is one loss per member, all solved by one program over block-diagonal ranges (the temperatures
#' follow the diameter of the whole batch; the stopping test is on the sum of the members' errors).
#'
#' Costs: each iteration is two log-sum-exp reductions over the N x M pairs (four with `debias` in
#' the first program: the N x N and M x M ones too), and one to test the marginals; memory O(N + M).
#'
#' @param x,y Numeric matrices of points, one per row, with the same number of columns; or batches
#'   of them.
#' @param a,b `NULL` (uniform) or the non-negative weights of the points (normalised to sum 1 in
#'   the balanced case; used as given with `reach`).
#' @param blur The temperature's length: `eps = blur^p`.
#' @param p The exponent of the cost, 1 or 2.
#' @param scaling The factor of the epsilon-scaling, in (0, 1).
#' @param reach `NULL` (balanced) or the length of the unbalanced penalty.
#' @param debias Whether to return the debiased divergence.
#' @param multiscale `"auto"`, `TRUE` or `FALSE`: whether to use the two-scale solver (above).
#' @param tol `NULL` (GeomLoss's schedule alone, ending with a last full update: an
#'   approximation, a few percent off the converged value when `blur` is small against the
#'   distances) or the tolerance on the marginals' L1 error, reached by more iterations at `blur^p`:
#'   `sum_i |sum_j pi_ij - a_i|`, and with `reach` the distance of the plan's row marginal to its
#'   value at the optimum, `sum_i |sum_j pi_ij - a_i exp(-f_i / reach^p)|`. Sinkhorn's iterations
#'   need of the order of `max C / eps` of them: a small `blur` may need more than `max_iter`.
#' @param max_iter The most iterations at `blur^p` after the schedule (a warning when reached).
#' @param potentials Whether to return the potentials as attributes.
#' @param gradient Whether to return the gradients of the loss (balanced transport only), by the
#'   envelope theorem (exact up to the convergence of the potentials): attribute `gradient`, with
#'   respect to the points `x` (N x D: `sum_j pi_ij grad_x C(x_i, y_j)`, `pi` the transport plan
#'   of `g` with its rows made to sum to `a`, minus the same for the plan of `x` with itself when
#'   debiased; the potentials first taken one update further at `blur^p`: four or seven more
#'   reductions; with `tol = NULL`, nearer the converged gradient than GeomLoss's, which
#'   differentiates its last update: 1.0 and 1.1 % against 2.3 and 3.0 % on far clouds), and
#'   `gradient_a`, with respect to the weights `a` as given (`f - f_aa`, or `f`, through the
#'   normalisation `a / sum(a)`).
#' @return The loss, a number (a vector for a batch: one per member), with attributes
#'   `iterations` and, with `potentials = TRUE`, `f` (of `x`) and `g` (of `y`) (GeomLoss's `f_ba`,
#'   `g_ab`; with `debias`, also `f_aa`, `g_bb`). For a batch, potentials and gradients are lists
#'   (list input) or matrices and arrays with a column or slice per member (array input). The
#'   number (or vector) has class `"keops_sinkhorn"` and attribute `settings` (`blur`, `p`,
#'   `reach`), whatever the arguments: for one pair of clouds with `potentials = TRUE`,
#'   `plot(loss, x, y)` draws the strongest links of the transport plan ([plot.keops_sinkhorn()]);
#'   it prints as the number and the names of its attributes, and stays a number (arithmetic,
#'   `as.vector()`, `c()`).
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(400), 200, 2)
#' y <- matrix(rnorm(600, 1), 300, 2)
#' keops_sinkhorn(x, y, blur = 0.1)                    # about |mean(x) - mean(y)|^2 / 2 = 1
#' keops_sinkhorn(x, y, blur = 0.1, tol = NULL)        # GeomLoss's schedule alone: 2 % lower here
#' keops_sinkhorn(x, x, blur = 0.1)                    # 0: the divergence of a cloud to itself
#' # a batch of two pairs of clouds: one loss each
#' keops_sinkhorn(list(x, x), list(y, x[1:50, ]), blur = 0.1)
keops_sinkhorn <- function(x, y, a = NULL, b = NULL, blur = 0.05, p = 2, scaling = 0.5, reach = NULL,
                           debias = TRUE, multiscale = "auto", tol = 1e-3, max_iter = 1000, potentials = FALSE,
                           gradient = FALSE) {
  fun <- "keops_sinkhorn"
  check_number(blur, "blur", fun, sign = "positive")
  if (!identical(p, 1) && !identical(p, 2) && !identical(p, 1L) && !identical(p, 2L)) {
    rkeops_abort(arg_label("p", fun), " must be 1 or 2", kind = "input", arg = "p")
  }
  check_number(scaling, "scaling", fun, sign = "positive")
  if (scaling >= 1) rkeops_abort(arg_label("scaling", fun), " must be below 1", kind = "input", arg = "scaling")
  if (!is.null(reach)) check_number(reach, "reach", fun, sign = "positive")
  check_flag(debias, "debias", fun)
  if (!is.null(tol)) check_number(tol, "tol", fun, sign = "positive")
  max_iter <- check_whole(max_iter, "max_iter", fun, min = 1)
  check_flag(potentials, "potentials", fun)
  check_flag(gradient, "gradient", fun)
  if (gradient && !is.null(reach)) {
    rkeops_abort(arg_label("gradient", fun), ": the gradient is for balanced transport (reach = NULL) only",
                 kind = "input", arg = "gradient")
  }
  pb <- sinkhorn_problem(x, y, a, b, balanced = is.null(reach))
  two_scale <- sinkhorn_multiscale_choice(multiscale, pb, p)
  rho <- if (is.null(reach)) NULL else reach^p
  schedule <- sinkhorn_schedule(pb$x, pb$y, p, blur, scaling)
  # a first update from zero potentials, GeomLoss's annealing, then more at blur^p
  eps <- c(schedule$eps[1L], schedule$eps, blur^p)
  kind <- c("first", rep("averaged", length(schedule$eps)), if (is.null(tol)) "last" else "alternate")
  sol <- if (two_scale) {
    sinkhorn_two_scale(pb, eps, kind, debias, rho, tol, max_iter,
                       sinkhorn_cell_size(schedule$diameter, max(nrow(pb$x), nrow(pb$y))))
  } else {
    sinkhorn_solve(pb, eps, kind, p, debias, rho, tol, max_iter, pb$ranges)
  }
  if (!is.null(tol) && sol$iterations == length(kind) - 1L + max_iter && !(sol$err < tol)) {
    rkeops_warn(sprintf("keops_sinkhorn(): the marginals' error is above tol = %g after max_iter = %d iterations",
                        tol, max_iter), kind = "convergence")
  }
  loss <- sinkhorn_loss(pb, sol, rho, blur^p, debias)
  attr(loss, "iterations") <- sol$iterations
  if (two_scale) attr(loss, "kept") <- sol$kept
  if (gradient) {
    attr(loss, "gradient") <- pb$shape_x(sinkhorn_gradient_x(pb, sol, p, blur^p, debias))
    u <- if (debias) sol$f - sol$fa else sol$f
    # a enters as a / sum(a): the gradient of <a, u> through that normalisation
    ga <- (u - rowsum(pb$a_normal * u, pb$member_x)[pb$member_x]) / pb$a_total[pb$member_x]
    attr(loss, "gradient_a") <- pb$shape_w(ga, pb$member_x)
  }
  if (potentials) {
    attr(loss, "f") <- pb$shape_w(sol$f, pb$member_x)
    attr(loss, "g") <- pb$shape_w(sol$g, pb$member_y)
    if (debias) {
      attr(loss, "f_aa") <- pb$shape_w(sol$fa, pb$member_x)
      attr(loss, "g_bb") <- pb$shape_w(sol$gb, pb$member_y)
    }
  }
  # (whatever the arguments: plot() says what it needs when the potentials are not there)
  attr(loss, "settings") <- list(blur = blur, p = as.numeric(p), reach = reach)
  class(loss) <- "keops_sinkhorn"
  loss
}

# The loss of each member from the potentials (GeomLoss's formulas: the dual objective at the
# optimum; for unbalanced transport, with the KL penalties' terms).
sinkhorn_loss <- function(pb, sol, rho, eps, debias) {
  a <- exp(pb$la)
  b <- exp(pb$lb)
  per_member <- function(v, member) as.vector(rowsum(v, member, reorder = TRUE))
  if (is.null(rho)) {
    ux <- if (debias) sol$f - sol$fa else sol$f
    uy <- if (debias) sol$g - sol$gb else sol$g
  } else {
    weight <- function(h) (rho + eps / 2) * exp(-h / rho)
    ux <- if (debias) weight(sol$fa) - weight(sol$f) else (rho + eps / 2) - weight(sol$f)
    uy <- if (debias) weight(sol$gb) - weight(sol$g) else (rho + eps / 2) - weight(sol$g)
  }
  per_member(a * ux, pb$member_x) + per_member(b * uy, pb$member_y)
}

# The gradient in x by the envelope theorem: sum_j pi_ij grad_x C(x_i, y_j), pi the plan of the
# potentials, minus the same for the plan of x with itself when debiased (over the ranges of the
# solver: the batch's blocks, or the two-scale solver's pairs of cells). The envelope theorem holds
# at the fixed point only, and GeomLoss's schedule (tol = NULL) updates the potentials once at the
# last temperature: so the gradient's potentials are first taken one update further there, by the
# updates of the solver itself (two reductions more, three when debiased):
# - x against y: one alternate Sinkhorn iteration from the last g (f = S_b(g), g = S_a(f)), then the
#   plan of that g and of the f made from it, pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps),
#   f_i = -eps lse_j(log b_j + (g_j - C_ij) / eps), whose rows sum to a_i exactly (the plan of the
#   last f and g does not before convergence: row sums 0.7 to 2.7 at tol = NULL on far clouds,
#   gradients 58 % off the converged one);
# - x against itself: one more averaged symmetric update of f_aa, then the same row-normalised plan.
# At tol = NULL on far clouds the distance to the converged gradient goes from 1.44 and 2.05 %
# (the plan of the last g) to 0.97 and 1.12 % (GeomLoss's autodiff through its last extrapolation:
# 2.26 and 2.97 %), on overlapping ones from 15.1 and 2.6 % to 13.4 and 0.9 % (GeomLoss 19.1 and
# 7.1 %; bench/sinkhorn_geomloss.R). A second iteration: 0.74 % on far clouds, for two reductions
# more. At a converged tol the update changes nothing but rounding.
sinkhorn_gradient_x <- function(pb, sol, p, eps, debias) {
  ops <- sinkhorn_operators(ncol(pb$x), p)
  px <- if (is.null(sol$perm_x)) seq_len(nrow(pb$x)) else sol$perm_x
  py <- if (is.null(sol$perm_y)) seq_len(nrow(pb$y)) else sol$perm_y
  ranges <- if (is.null(sol$ranges)) pb$ranges else sol$ranges
  x <- pb$x[px, , drop = FALSE]
  y <- pb$y[py, , drop = FALSE]
  la <- matrix(pb$la[px])
  lb <- matrix(pb$lb[py])
  # the softmin -eps lse_j(lw_j + (h_j - C(u_i, v_j)) / eps), and the plan's rows times grad C
  softmin <- function(u, v, lw, h, r) -eps * ops$lse(list(u, v, lw, matrix(h), 1 / eps), ranges = r)
  plan_grad <- function(v, lw, f, h, r) ops$plan_grad(list(x, v, lw, matrix(h), matrix(f), 1 / eps), ranges = r)
  yx <- if (!is.null(ranges$xy)) swap_axes(ranges$xy)
  g <- softmin(y, x, la, softmin(x, y, lb, sol$g[py], ranges$xy), yx)
  grad <- plan_grad(y, lb, softmin(x, y, lb, g, ranges$xy), g, ranges$xy)
  if (debias) {
    fa <- sol$fa[px]
    fa <- (fa + softmin(x, x, la, fa, ranges$xx)) / 2
    grad <- grad - plan_grad(x, la, softmin(x, x, la, fa, ranges$xx), fa, ranges$xx)
  }
  exp(pb$la) * grad[order(px), , drop = FALSE]
}

# The clouds as one problem: x, y (the members of a batch end to end), la, lb (log weights, each
# member's normalised when balanced), member_x, member_y (each point's member), ranges (the
# batch's block-diagonal ranges xy, xx, yy; NULL for one pair of clouds), a_normal, a_total (a
# normalised, and the total each member's normalisation divided by), and shape_x, shape_w to give
# per-point results the shape of the input (a matrix; a list or array for a batch).
sinkhorn_problem <- function(x, y, a, b, balanced) {
  batch <- sinkhorn_batch_kind(x)
  xs <- sinkhorn_members(x, "x", batch)
  ys <- sinkhorn_members(y, "y", batch, n = length(xs), d = ncol(xs[[1L]]))
  nx <- vapply(xs, nrow, 0L)
  ny <- vapply(ys, nrow, 0L)
  as <- sinkhorn_member_weights(a, "a", nx, batch)
  bs <- sinkhorn_member_weights(b, "b", ny, batch)
  total <- vapply(as, function(w) if (balanced) sum(w) else 1, 0)
  normal <- function(ws) unlist(lapply(ws, function(w) if (balanced) w / sum(w) else w))
  member_x <- rep.int(seq_along(xs), nx)
  member_y <- rep.int(seq_along(ys), ny)
  blocks <- function(n) cbind(cumsum(n) - n + 1L, cumsum(n))
  diagonal <- cbind(seq_along(xs), seq_along(xs))
  ranges <- if (batch != "none") {
    list(xy = from_pairs(blocks(nx), blocks(ny), diagonal), xx = from_pairs(blocks(nx), blocks(nx), diagonal),
         yy = from_pairs(blocks(ny), blocks(ny), diagonal))
  }
  a_normal <- normal(as)
  split_rows <- function(v, member) lapply(split(seq_along(member), member), function(r) v[r, , drop = FALSE])
  list(x = do.call(rbind, xs), y = do.call(rbind, ys), la = log(a_normal), lb = log(normal(bs)),
       member_x = member_x, member_y = member_y, ranges = ranges, batch = batch != "none",
       a_normal = a_normal, a_total = total,
       shape_x = function(v) switch(batch, none = v, list = unname(split_rows(v, member_x)),
                                    array = aperm(array(v, c(nx[1L], length(xs), ncol(v))), c(1L, 3L, 2L))),
       shape_w = function(v, member) switch(batch, none = v, list = unname(split(v, member)),
                                            array = matrix(v, ncol = length(nx))))
}
# GeomLoss's temperatures, from the diameter^p down to blur^p by factors scaling^p; and the clouds'
# diameter.
sinkhorn_schedule <- function(x, y, p, blur, scaling) {
  # (column by column: no copy of both clouds bound together)
  r <- vapply(seq_len(ncol(x)), function(k) range(x[, k], y[, k]), numeric(2))
  diameter <- max(sqrt(sum((r[2, ] - r[1, ])^2)), blur)
  steps <- seq(p * log(diameter), p * log(blur), by = p * log(scaling))
  list(eps = c(diameter^p, exp(steps), blur^p), diameter = diameter)
}

# Whether to use the two-scale solver: "auto" for one pair of clouds in D <= 3 with p = 2, above
# the sizes where it was measured faster than the dense solver (vignette("sinkhorn-multiscale")).
sinkhorn_multiscale_choice <- function(multiscale, pb, p) {
  fun <- "keops_sinkhorn"
  if (identical(multiscale, "auto")) {
    n <- min(nrow(pb$x), nrow(pb$y))
    return(p == 2 && ncol(pb$x) <= 3L && !pb$batch && n >= if (gpu_in_use()) 2e5 else 2e4)
  }
  check_flag(multiscale, "multiscale", fun)
  if (multiscale && (p != 2 || pb$batch)) {
    rkeops_abort(arg_label("multiscale", fun), ": the two-scale solver is for the cost |x - y|^2 / 2 (p = 2) and ",
                 "one pair of clouds, not a batch", kind = "input", arg = "multiscale")
  }
  multiscale
}

# "list" (a batch as a list of clouds), "array" (an n x d x B array) or "none" (one cloud).
sinkhorn_batch_kind <- function(x) {
  if (is.list(x) && !is.data.frame(x)) "list" else if (length(dim(x)) == 3L) "array" else "none"
}

# The members of a batch (a list of matrices, or the slices of an n x d x B array), or the one
# cloud, as a list of checked matrices; y must have n members of dimension d.
sinkhorn_members <- function(x, arg, batch, n = NULL, d = NULL) {
  fun <- "keops_sinkhorn"
  kind <- sinkhorn_batch_kind(x)
  size <- switch(kind, none = 1L, list = length(x), array = dim(x)[3L])
  if (kind != batch || size < 1L || (!is.null(n) && size != n)) {
    rkeops_abort(arg_label(arg, fun), " must be a batch like 'x' (", n, " members, each a list element or ",
                 "the slices of an n x d x B array)", kind = "input", arg = arg)
  }
  switch(kind,
         none = list(check_points(x, arg, fun, d)),
         list = lapply(seq_along(x), function(k) check_points(x[[k]], sprintf("%s[[%d]]", arg, k), fun, d)),
         array = lapply(seq_len(dim(x)[3L]), function(k) {
           check_points(matrix(x[, , k], dim(x)[1L]), sprintf("%s[, , %d]", arg, k), fun, d)
         }))
}

# The weights of each member: uniform when NULL; for a batch a list of vectors, or a matrix with
# one column per member (array batches).
sinkhorn_member_weights <- function(w, arg, sizes, batch) {
  B <- length(sizes)
  ws <- if (is.null(w)) {
    vector("list", B)
  } else if (batch == "none") {
    list(w)
  } else if (is.list(w) && length(w) == B) {
    w
  } else if (is.matrix(w) && ncol(w) == B) {
    lapply(seq_len(B), function(k) w[, k])
  } else {
    rkeops_abort(arg_label(arg, "keops_sinkhorn"), " must be NULL, a list of ", B, " weight vectors or a matrix ",
                 "with ", B, " columns", kind = "input", arg = arg)
  }
  lapply(seq_len(B), function(k) {
    check_point_weights(ws[[k]], sizes[k], arg, "keops_sinkhorn", if (B > 1L) k)
  })
}

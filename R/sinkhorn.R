#' Entropic optimal transport: the Sinkhorn divergence between two point clouds
#'
#' `keops_sinkhorn()` computes the entropic optimal transport cost between the weighted point
#' clouds `(x, a)` and `(y, b)`, for the cost `C(x, y) = |x - y|^p / p` at the temperature
#' `eps = blur^p`, as GeomLoss's `SamplesLoss("sinkhorn")` does: symmetric log-domain Sinkhorn
#' iterations (each potential the average of its update and its previous value) with
#' epsilon-scaling, from the clouds' diameter to `blur` by factors of `scaling`, then Sinkhorn's
#' alternate updates at `blur^p` until the marginals of the transport plan match `a` and `b` to `tol`
#' (in L1, the weights summing to 1), then a last full update. With `debias = TRUE` (the default) the result is the Sinkhorn divergence
#' `OT_eps(a, b) - OT_eps(a, a) / 2 - OT_eps(b, b) / 2`, which is positive, zero for equal clouds
#' and a smooth, metric-like loss; with `reach` the transport is unbalanced (the marginals are
#' penalised by `reach^p` times a Kullback-Leibler divergence instead of imposed).
#'
#' Costs: each iteration is two log-sum-exp reductions over the N x M pairs (four with `debias`: the
#' N x N and M x M ones too); memory O(N + M). The two-scale (block-sparse) solver and batches are
#' not available yet: `multiscale` is accepted for compatibility and ignored.
#'
#' @param x,y Numeric matrices of points, one per row, with the same number of columns.
#' @param a,b `NULL` (uniform) or the non-negative weights of the points (normalised to sum 1 in
#'   the balanced case; used as given with `reach`).
#' @param blur The temperature's length: `eps = blur^p`.
#' @param p The exponent of the cost, 1 or 2.
#' @param scaling The factor of the epsilon-scaling, in (0, 1).
#' @param reach `NULL` (balanced) or the length of the unbalanced penalty.
#' @param debias Whether to return the debiased divergence.
#' @param multiscale Not used yet.
#' @param tol `NULL` (GeomLoss's schedule alone: an approximation, a few percent off the converged
#'   value when `blur` is small against the distances) or the tolerance on the marginals' L1
#'   error, reached by more iterations at `blur^p` (balanced only; ignored with `reach`). Sinkhorn's
#'   iterations need of the order of `max C / eps` of them: a small `blur` may need more than
#'   `max_iter`.
#' @param max_iter The most iterations at `blur^p` after the schedule (a warning when reached).
#' @param potentials Whether to return the potentials as attributes.
#' @param gradient Whether to return the gradient of the loss with respect to the points `x` (an
#'   N x D matrix, attribute `gradient`; balanced transport only): by the envelope theorem, at the
#'   optimum it is `sum_j pi_ij grad_x C(x_i, y_j)` with `pi` the transport plan of the potentials,
#'   minus the same for the plan of `x` with itself when debiased: one or two more reductions, exact
#'   up to the convergence of the potentials.
#' @return The loss, a number, with attributes `iterations` and, with `potentials = TRUE`, `f`
#'   (of `x`) and `g` (of `y`) (GeomLoss's `f_ba`, `g_ab`; with `debias`, also `f_aa`, `g_bb`).
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(400), 200, 2)
#' y <- matrix(rnorm(600, 1), 300, 2)
#' keops_sinkhorn(x, y, blur = 0.1)                    # about |mean(x) - mean(y)|^2 / 2 = 1
#' keops_sinkhorn(x, y, blur = 0.1, tol = NULL)        # GeomLoss's schedule alone: 2 % lower here
#' keops_sinkhorn(x, x, blur = 0.1)                    # 0: the divergence of a cloud to itself
keops_sinkhorn <- function(x, y, a = NULL, b = NULL, blur = 0.05, p = 2, scaling = 0.5, reach = NULL,
                           debias = TRUE, multiscale = "auto", tol = 1e-3, max_iter = 1000, potentials = FALSE,
                           gradient = FALSE) {
  fun <- "keops_sinkhorn"
  x <- check_points(x, "x", fun)
  y <- check_points(y, "y", fun, d = ncol(x))
  a <- sinkhorn_weights(a, nrow(x), "a", is.null(reach))
  b <- sinkhorn_weights(b, nrow(y), "b", is.null(reach))
  check_number(blur, "blur", fun, sign = "positive")
  if (!identical(p, 1) && !identical(p, 2) && !identical(p, 1L) && !identical(p, 2L)) {
    rkeops_abort(arg_label("p", fun), " must be 1 or 2", kind = "input", arg = "p")
  }
  check_number(scaling, "scaling", fun, sign = "positive")
  if (scaling >= 1) rkeops_abort(arg_label("scaling", fun), " must be below 1", kind = "input", arg = "scaling")
  if (!is.null(reach)) check_number(reach, "reach", fun, sign = "positive")
  check_flag(debias, "debias", fun)
  if (!is.null(tol)) check_number(tol, "tol", fun, sign = "positive")
  max_iter <- check_whole(max_iter, "max_iter", fun, min = 0)
  check_flag(potentials, "potentials", fun)
  check_flag(gradient, "gradient", fun)
  if (gradient && !is.null(reach)) {
    rkeops_abort(arg_label("gradient", fun), ": the gradient is for balanced transport (reach = NULL) only",
                 kind = "input", arg = "gradient")
  }
  ops <- sinkhorn_operators(ncol(x), p)
  rho <- if (is.null(reach)) NULL else reach^p
  damping <- function(eps) if (is.null(rho)) 1 else 1 / (1 + eps / rho)
  # softmin over the points `to` (weights w) for each point of `from`: -eps log sum exp(log w + (h - C) / eps)
  softmin <- function(eps, from, to, logw, h) {
    -eps * as.vector(ops$lse(list(from, to, matrix(logw), matrix(h), 1 / eps)))
  }
  la <- log(a)
  lb <- log(b)
  epsilons <- sinkhorn_schedule(x, y, p, blur, scaling)
  eps <- epsilons[1L]
  d <- damping(eps)
  f <- d * softmin(eps, x, y, lb, 0 * lb)
  g <- d * softmin(eps, y, x, la, 0 * la)
  if (debias) {
    fa <- d * softmin(eps, x, x, la, 0 * la)
    gb <- d * softmin(eps, y, y, lb, 0 * lb)
  }
  averaged <- function(eps) {
    u <- sinkhorn_update(eps, x, y, la, lb, f, g, softmin, damping(eps))
    f <<- (f + u$f) / 2
    g <<- (g + u$g) / 2
    if (debias) {
      fa <<- (fa + damping(eps) * softmin(eps, x, x, la, fa)) / 2
      gb <<- (gb + damping(eps) * softmin(eps, y, y, lb, gb)) / 2
    }
    u
  }
  for (eps in epsilons) averaged(eps)
  eps <- blur^p
  extra <- 0L
  if (!is.null(tol) && is.null(rho)) {
    # Sinkhorn's alternate updates (faster than the averaged ones at a fixed eps): after g's, the
    # plan's columns sum to b; its rows sum to a exp((f - f~) / eps), f~ the next update of f.
    repeat {
      ft <- softmin(eps, x, y, lb, g)
      if (sum(abs(exp(la + (f - ft) / eps) - a)) < tol) break
      if (extra == max_iter) {
        warning(sprintf("keops_sinkhorn(): the marginals' error is above tol = %g after max_iter = %d iterations",
                        tol, max_iter), call. = FALSE)
        break
      }
      f <- ft
      g <- softmin(eps, y, x, la, f)
      if (debias) {            # the symmetric problems of each cloud with itself, on the same footing
        fa <- (fa + softmin(eps, x, x, la, fa)) / 2
        gb <- (gb + softmin(eps, y, y, lb, gb)) / 2
      }
      extra <- extra + 1L
    }
  }
  # the last update, not averaged (GeomLoss's extrapolation)
  u <- sinkhorn_update(eps, x, y, la, lb, f, g, softmin, damping(eps))
  f <- u$f
  g <- u$g
  if (debias) {
    fa <- damping(eps) * softmin(eps, x, x, la, fa)
    gb <- damping(eps) * softmin(eps, y, y, lb, gb)
  }
  weight <- function(v) if (is.null(rho)) v else (rho + eps / 2) * v
  loss <- if (is.null(rho)) {
    if (debias) sum(a * (f - fa)) + sum(b * (g - gb)) else sum(a * f) + sum(b * g)
  } else if (debias) {
    sum(a * weight(exp(-fa / rho) - exp(-f / rho))) + sum(b * weight(exp(-gb / rho) - exp(-g / rho)))
  } else {
    sum(a * weight(1 - exp(-f / rho))) + sum(b * weight(1 - exp(-g / rho)))
  }
  attr(loss, "iterations") <- length(epsilons) + extra + 1L
  if (gradient) {
    # sum_j a_i b_j exp((f_i + g_j - C_ij) / eps) grad_x C(x_i, y_j): the plan's rows times the
    # cost's gradient
    plan_grad <- function(q, lw, fi, gj) a * ops$plan_grad(list(x, q, matrix(lw), matrix(gj), matrix(fi), 1 / eps))
    g_x <- plan_grad(y, lb, f, g)
    if (debias) g_x <- g_x - plan_grad(x, la, fa, fa)
    attr(loss, "gradient") <- unclass(g_x)
  }
  if (potentials) {
    attr(loss, "f") <- f
    attr(loss, "g") <- g
    if (debias) {
      attr(loss, "f_aa") <- fa
      attr(loss, "g_bb") <- gb
    }
  }
  loss
}

# Both potentials updated from the previous ones (f from g, g from f).
sinkhorn_update <- function(eps, x, y, la, lb, f, g, softmin, damping) {
  list(f = damping * softmin(eps, x, y, lb, g), g = damping * softmin(eps, y, x, la, f))
}

# GeomLoss's temperatures: from the diameter^p down to blur^p by factors scaling^p.
sinkhorn_schedule <- function(x, y, p, blur, scaling) {
  r <- apply(rbind(x, y), 2, range)
  diameter <- max(sqrt(sum((r[2, ] - r[1, ])^2)), blur)
  steps <- seq(p * log(diameter), p * log(blur), by = p * log(scaling))
  c(diameter^p, exp(steps), blur^p)
}

# Weights: uniform when NULL; checked; normalised in the balanced case.
sinkhorn_weights <- function(w, n, arg, balanced) {
  if (is.null(w)) return(rep(1 / n, n))
  if (!is.numeric(w) || length(w) != n || !all(is.finite(w)) || any(w < 0) || sum(w) <= 0) {
    rkeops_abort("keops_sinkhorn(): '", arg, "' must be NULL or ", n, " finite non-negative weights of positive sum",
                 kind = "input", arg = arg)
  }
  w <- as.double(w)
  if (balanced) w / sum(w) else w
}

# The softmin's log-sum-exp in dimension `d` for the cost |x - y|^p / p (made once).
sinkhorn_operators <- function(d, p) {
  key <- paste(d, p)
  if (is.null(sinkhorn_cache$operators[[key]])) {
    cost <- if (p == 2) "SqDist(x, y) / 2" else "Norm2(x - y)"
    grad <- if (p == 2) "x - y" else "Normalize(x - y)"
    xy <- c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), "logw = Vj(1)", "h = Vj(1)")
    sinkhorn_cache$operators[[key]] <- list(
      lse = keops_kernel(sprintf("LogSumExp_Reduction(logw + (h - %s) * s, 0)", cost), c(xy, "s = Pm(1)")),
      plan_grad = keops_kernel(sprintf("Sum_Reduction(Exp(logw + (f + h - %s) * s) * (%s), 0)", cost, grad),
                               c(xy, "f = Vi(1)", "s = Pm(1)")))
  }
  sinkhorn_cache$operators[[key]]
}

sinkhorn_cache <- new.env(parent = emptyenv())

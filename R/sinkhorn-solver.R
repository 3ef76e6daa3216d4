# The Sinkhorn loop of keops_sinkhorn() as one program: every update of the potentials, the
# eps-scaling and the stopping test run in the engine, with no R between iterations.
#
# One iteration, from the potentials f (of x), g (of y), and with `debias` fa (of x against x) and
# gb (of y against y):
#   lf = lse_j(log b_j + (g_j - C(x_i, y_j)) / eps)       (the softmin of f is -eps lf)
#   err = sum_i |a_i exp((f_i + eps lf_i) / eps) - a_i|    (the row marginal's L1 error)
#   fs = c1 f - c2 lf                                      (the f that g's update reads)
#   f = w f - k lf
#   lg = lse_i(log a_i + (fs_i - C(x_i, y_j)) / eps); g = w g - k lg
#   fa = wa fa - ka lse_j(log a_j + (fa_j - C(x_i, x_j)) / eps), gb the same in y
# The scalars come from the schedule, one row per iteration (sinkhorn_rows()): w is the weight of
# the previous value (1/2: GeomLoss's symmetric averaged updates; 0: plain updates), k = (1 - w)
# damping eps, and fs is the previous f (symmetric updates, c1 = 1, c2 = 0) or the new one
# (Sinkhorn's alternate updates). `err` plus `off` is the stopping rule's buffer: `off` is huge in
# the rows that must not stop.

# The operators, made once per dimension and exponent (their kernels are cached by the package).
sinkhorn_operators <- function(d, p) {
  key <- paste(d, p)
  if (is.null(sinkhorn_cache$operators[[key]])) {
    cost <- if (p == 2) "SqDist(x, y) / 2" else "Norm2(x - y)"
    grad <- if (p == 2) "x - y" else "Normalize(x - y)"
    xy <- c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), "lw = Vj(1)", "h = Vj(1)")
    sinkhorn_cache$operators[[key]] <- list(
      lse = keops_kernel(sprintf("LogSumExp_Reduction(lw + (h - %s) * s, 0)", cost), c(xy, "s = Pm(1)")),
      err = keops_kernel("Sum_Reduction(Abs(Exp(la + (f + de * lf) * s) - Exp(la)) + off, 1)",
                         c("la = Vi(1)", "f = Vi(1)", "lf = Vi(1)", "de = Pm(1)", "s = Pm(1)", "off = Pm(1)")),
      relax = keops_map("w * h - k * l", c("h = Vi(1)", "l = Vi(1)", "w = Pm(1)", "k = Pm(1)")),
      # sum_j exp(lw_j + (f_i + h_j - C_ij) s) grad_x C(x_i, y_j): the plan's rows times the cost's gradient
      plan_grad = keops_kernel(sprintf("Sum_Reduction(Exp(lw + (f + h - %s) * s) * (%s), 0)", cost, grad),
                               c(xy, "f = Vi(1)", "s = Pm(1)")))
  }
  sinkhorn_cache$operators[[key]]
}

sinkhorn_cache <- new.env(parent = emptyenv())

# The program's steps; `ranges` NULL (all pairs) or a list of block-sparse ranges xy (x against y),
# xx and yy, in the order of the points (the batch's diagonal blocks, or the two-scale solver's).
sinkhorn_steps <- function(ops, debias, ranges = NULL) {
  lse <- function(xi, yj, lw, h, r) {
    keops_step(ops$lse, r, reads = c(x = xi, y = yj, lw = lw, h = h))
  }
  relax <- function(h, l, w = "w", k = "k") keops_step(ops$relax, reads = c(h = h, l = l, w = w, k = k))
  steps <- list(
    lf = lse("x", "y", "lb", "g", ranges$xy),
    err = ops$err,
    fs = relax("f", "lf", "c1", "c2"),
    f = relax("f", "lf"),
    lg = lse("y", "x", "la", "fs", if (!is.null(ranges)) swap_axes(ranges$xy)),
    g = relax("g", "lg"))
  if (debias) {
    steps <- c(steps, list(
      lfa = lse("x", "x", "la", "fa", ranges$xx), fa = relax("fa", "lfa", "wa", "ka"),
      lgb = lse("y", "y", "lb", "gb", ranges$yy), gb = relax("gb", "lgb", "wa", "ka")))
  }
  steps
}

# The program of `iterations` iterations stopping when err < tol (tol = 0: never), made once per
# setting when dense (a block-sparse one holds its ranges).
sinkhorn_program <- function(d, p, debias, iterations, tol, ranges = NULL) {
  make <- function() {
    keops_program(sinkhorn_steps(sinkhorn_operators(d, p), debias, ranges), iterations = iterations,
                  until = "err", tol = tol, output = c("f", "g", if (debias) c("fa", "gb"), "err"))
  }
  if (!is.null(ranges)) return(make())
  key <- paste(d, p, debias, iterations, tol)
  if (is.null(sinkhorn_cache$programs[[key]])) sinkhorn_cache$programs[[key]] <- make()
  sinkhorn_cache$programs[[key]]
}

# The schedule: one row per iteration of the temperatures `eps` and the kinds of update `kind`:
# "first" (from zero potentials), "averaged" (GeomLoss's annealing), "alternate" (Sinkhorn's, the
# stopping rule tested) or "last" (GeomLoss's final extrapolation, not averaged). `rho` NULL
# (balanced) or reach^p: the updates are damped by 1 / (1 + eps / rho).
sinkhorn_rows <- function(eps, kind, rho = NULL) {
  damping <- if (is.null(rho)) 1 else 1 / (1 + eps / rho)
  w <- ifelse(kind == "averaged", 0.5, 0)
  symmetric <- kind != "alternate"                    # g's update reads the previous f
  wa <- ifelse(kind %in% c("averaged", "alternate"), 0.5, 0)
  k <- (1 - w) * damping * eps
  list(s = 1 / eps, de = damping * eps, w = w, k = k, c1 = ifelse(symmetric, 1, w), c2 = ifelse(symmetric, 0, k),
       wa = wa, ka = (1 - wa) * damping * eps, off = ifelse(kind == "alternate", 0, 1e20))
}

# Runs the program on the problem `pb` (x, y, la = log a, lb = log b; f, g, fa, gb the starting
# potentials, zeros when NULL) with the schedule `rows` (sinkhorn_rows()); with `tol`, its last row
# is repeated up to `extra` more times, until the row marginals' error is below tol. Returns the
# potentials (vectors), `iterations` and `err` (the last error tested; NA without tol).
sinkhorn_run <- function(pb, rows, p, debias, tol = NULL, extra = 0L, ranges = NULL) {
  n <- length(rows$s)
  iterations <- if (is.null(tol)) n else n - 1L + extra
  program <- sinkhorn_program(ncol(pb$x), p, debias, iterations, if (is.null(tol)) 0 else tol, ranges)
  zero <- function(v, m) matrix(if (is.null(v)) 0 else v, m, 1L)
  input <- list(x = pb$x, y = pb$y, la = matrix(pb$la), lb = matrix(pb$lb),
                f = zero(pb$f, nrow(pb$x)), g = zero(pb$g, nrow(pb$y)))
  if (debias) input <- c(input, list(fa = zero(pb$fa, nrow(pb$x)), gb = zero(pb$gb, nrow(pb$y))))
  res <- program(input, schedule = rows)
  out <- lapply(res[setdiff(names(res), "err")], function(v) as.vector(v))
  c(out, list(iterations = attr(res, "iterations"), err = if (is.null(tol)) NA_real_ else as.vector(res$err)))
}

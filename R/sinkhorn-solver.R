# The Sinkhorn loop of keops_sinkhorn() as programs: every update of the potentials, the
# eps-scaling and the stopping test run in the engine, with no R between iterations (one program
# for GeomLoss's schedule; a second one for the over-relaxed updates when `tol` asks for more).
#
# One iteration, from the potentials f (of x), g (of y), and with `debias` fa (of x against x) and
# gb (of y against y):
#   lf = lse_j(log b_j + (g_j - C(x_i, y_j)) / eps)       (the softmin of f is -eps lf)
#   err = sum_i |a_i exp((f_i + eps lf_i) / eps) - a_i exp(-f_i / rho)|
#                                  (the row marginal's L1 error: a_i exp(-f_i / rho) is the
#                                   unbalanced plan's row marginal at the optimum; a_i when balanced)
#   fs = c1 f - c2 lf                                      (the f that g's update reads)
#   f = w f - k lf
#   lg = lse_i(log a_i + (fs_i - C(x_i, y_j)) / eps); g = w g - k lg
#   fa = wa fa - ka lse_j(log a_j + (fa_j - C(x_i, x_j)) / eps), gb the same in y
# The scalars come from the schedule, one row per iteration (sinkhorn_rows()): w is the weight of
# the previous value (1/2: GeomLoss's symmetric averaged updates; 0: plain updates), k = (1 - w)
# damping eps, and fs is the previous f (symmetric updates, c1 = 1, c2 = 0) or the new one
# (Sinkhorn's alternate updates). `err` plus `off` is the stopping rule's buffer: `off` is huge in
# the rows that must not stop.

# The cost |x - y|^p / p between the variables x and y, as a formula.
sinkhorn_cost_formula <- function(p) if (p == 2) "SqDist(x, y) / 2" else "Norm2(x - y)"

# The operators, made once per dimension and exponent (their kernels are cached by the package).
sinkhorn_operators <- function(d, p) {
  memoised(sinkhorn_cache, c("operators", d, p), function() {
    cost <- sinkhorn_cost_formula(p)
    grad <- if (p == 2) "x - y" else "Normalize(x - y)"
    xy <- c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), "lw = Vj(1)", "h = Vj(1)")
    list(
      lse = keops_kernel(sprintf("LogSumExp_Reduction(lw + (h - %s) * s, 0)", cost), c(xy, "s = Pm(1)")),
      err = keops_kernel("Sum_Reduction(Abs(Exp(la + (f + e * lf) * s) - Exp(la - f * r)) + off, 1)",
                         c("la = Vi(1)", "f = Vi(1)", "lf = Vi(1)", "e = Pm(1)", "s = Pm(1)", "r = Pm(1)",
                           "off = Pm(1)")),
      relax = keops_map("w * h - k * l", c("h = Vi(1)", "l = Vi(1)", "w = Pm(1)", "k = Pm(1)")),
      # sum_j exp(lw_j + (f_i + h_j - C_ij) s) grad_x C(x_i, y_j): the plan's rows times the cost's gradient
      plan_grad = keops_kernel(sprintf("Sum_Reduction(Exp(lw + (f + h - %s) * s) * (%s), 0)", cost, grad),
                               c(xy, "f = Vi(1)", "s = Pm(1)")))
  })
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

# The program of `iterations` iterations stopping when err < tol (tol = 0: never), with err's trace
# when `trace`, made once per setting when dense (a block-sparse one holds its ranges).
sinkhorn_program <- function(d, p, debias, iterations, tol, trace, ranges = NULL) {
  make <- function() {
    keops_program(sinkhorn_steps(sinkhorn_operators(d, p), debias, ranges), iterations = iterations,
                  until = "err", tol = tol, trace = if (trace) "err",
                  output = c("f", "g", if (debias) c("fa", "gb"), "err"))
  }
  if (!is.null(ranges)) return(make())
  memoised(sinkhorn_cache, c("program", d, p, debias, iterations, tol, trace), make)
}

# The schedule: one row per iteration of the temperatures `eps` and the kinds of update `kind`:
# "first" (from zero potentials), "averaged" (GeomLoss's annealing), "alternate" (Sinkhorn's,
# over-relaxed by `omega`, the stopping rule tested) or "last" (GeomLoss's final extrapolation, not
# averaged). `rho` NULL (balanced) or reach^p: the updates are damped by 1 / (1 + eps / rho).
sinkhorn_rows <- function(eps, kind, rho = NULL, omega = 1) {
  damping <- if (is.null(rho)) 1 else 1 / (1 + eps / rho)
  w <- ifelse(kind == "averaged", 0.5, ifelse(kind == "alternate", 1 - omega, 0))
  symmetric <- kind != "alternate"                    # g's update reads the previous f
  wa <- ifelse(kind %in% c("averaged", "alternate"), 0.5, 0)
  k <- (1 - w) * damping * eps
  list(s = 1 / eps, e = eps, r = if (is.null(rho)) 0 * eps else 1 / rho + 0 * eps, w = w, k = k, c1 = ifelse(symmetric, 1, w), c2 = ifelse(symmetric, 0, k),
       wa = wa, ka = (1 - wa) * damping * eps, off = ifelse(kind == "alternate", 0, 1e20))
}

# Runs `iterations` iterations of the program on the problem `pb` (x, y, la = log a, lb = log b; f,
# g, fa, gb the starting potentials, zeros when NULL) with the schedule `rows` (sinkhorn_rows(), its
# last row repeated), stopping when the row marginals' error is below `tol` (NULL: never). Returns
# the potentials (vectors), `iterations`, `err` (the last error tested) and `trace` (err after each
# iteration, when asked).
sinkhorn_run <- function(pb, rows, p, debias, iterations = length(rows$s), tol = NULL, ranges = NULL,
                         trace = FALSE) {
  program <- sinkhorn_program(ncol(pb$x), p, debias, iterations, if (is.null(tol)) 0 else tol, trace, ranges)
  zero <- function(v, m) matrix(if (is.null(v)) 0 else v, m, 1L)
  input <- list(x = pb$x, y = pb$y, la = matrix(pb$la), lb = matrix(pb$lb),
                f = zero(pb$f, nrow(pb$x)), g = zero(pb$g, nrow(pb$y)))
  if (debias) input <- c(input, list(fa = zero(pb$fa, nrow(pb$x)), gb = zero(pb$gb, nrow(pb$y))))
  # (the debiasing's weights only where its steps read them: a program refuses names it does not read)
  res <- program(input, schedule = if (debias) rows else rows[setdiff(names(rows), c("wa", "ka"))])
  out <- lapply(res[setdiff(names(res), "err")], function(v) as.vector(v))
  c(out, list(iterations = attr(res, "iterations"), err = as.vector(res$err),
              trace = if (trace) as.vector(attr(res, "trace")$err)))
}

# The whole solve of `pb` at temperatures `eps` with updates `kind` (ending with one "alternate"
# row when `tol` is given: then at most `extra` alternate updates, until the error is below tol).
# Sinkhorn's updates converge at a linear rate eta that tends to 1 as eps / max C decreases (10^3
# iterations at blur 0.05 on clouds of diameter 2); over-relaxed by omega = 2 / (1 + sqrt(1 - eta)),
# the rate of an ideal successive over-relaxation, they took 10 times fewer (Thibault et al.,
# "Overrelaxed Sinkhorn-Knopp", 2017; measured at blur 0.05 and 0.3). So the first `probe` of them
# are plain, eta is measured on their errors, and the others run over-relaxed (omega at most 1.9:
# 1.95 diverged at blur 0.05). `replan`: NULL, or a function of the potentials after the plain
# updates giving the block-sparse ranges of the others (the two-scale solver's, tighter then). The
# result holds the ranges last used.
sinkhorn_solve <- function(pb, eps, kind, p, debias, rho, tol, extra, ranges = NULL, probe = 20L, replan = NULL) {
  rows <- sinkhorn_rows(eps, kind, rho)
  n <- length(eps)
  if (is.null(tol)) return(c(sinkhorn_run(pb, rows, p, debias, ranges = ranges), list(ranges = ranges)))
  first <- sinkhorn_run(pb, rows, p, debias, n - 1L + min(extra, probe), tol, ranges, trace = TRUE)
  done <- first$iterations - (n - 1L)
  if (first$err < tol || done >= extra) return(c(first, list(ranges = ranges)))
  if (!is.null(replan)) ranges <- replan(first)
  errs <- first$trace[seq.int(max(1L, length(first$trace) - 10L), length.out = 11L)]   # the last 11 (or NA)
  eta <- (errs[11L] / errs[1L])^(1 / 10)
  omega <- if (is.finite(eta) && eta < 1) min(2 / (1 + sqrt(1 - eta)), 1.9) else 1
  pb[c("f", "g")] <- first[c("f", "g")]
  # the self problems' symmetric updates have converged by now: the others update f and g only
  last <- sinkhorn_run(pb, sinkhorn_rows(eps[n], "alternate", rho, omega), p, FALSE, extra - done, tol, ranges)
  last$iterations <- first$iterations + last$iterations
  if (debias) last[c("fa", "gb")] <- first[c("fa", "gb")]
  c(last, list(ranges = ranges))
}

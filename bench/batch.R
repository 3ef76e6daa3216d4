# Batches (issue 17): many independent problems of one formula in one engine call, against the
# loop of one call per problem, in one run. Run it with
#   make bench-batch [BACKEND=CPU|GPU] [SIZES=small|full] [REPS=n] [B=256] [BENCH_OUT=file.md]
# or R_LIBS=lib Rscript bench/batch.R from the repository root. It needs the installed package
# and base R only.
#   BACKEND      CPU (default) or GPU (stops if no GPU can be used)
#   SIZES        full (default): B = 256 Sinkhorn problems of 200 iterations, batches of 10 and
#                100 point clouds; small: a smoke run (B = 8, 20 iterations, 2 clouds)
#   B            the number of Sinkhorn problems of the batch (default 256; 8 with SIZES=small)
#   REPS         timed runs per median (default 3), after a warm-up
#   LOOP_BUDGET  seconds one run of a loop over the members may take (default 30): a longer loop
#                is timed on its first members and extrapolated to all (the report says so)
#   BENCH_OUT    also write the report to this file
# The cases:
#   1. seed 001's example: two histograms of n = 100 bins on linspace(0, 100), Normal(20, 10) and
#      Normal(60, 30) normalised, cost |x_i - x_j|^2 divided by its max, lambda = 1e-3, 200
#      log-domain Sinkhorn iterations (two LogSumExp reductions each), the loss sum_ij P_ij C_ij
#      (one Sum reduction) and its gradient in the first histogram, lambda log u (as the seed);
#   2. B such problems (random normal histograms, member 1 the seed's) in one call per half
#      iteration, against the loop over the problems;
#   3. 40-NN graphs (ArgKMin) and the Gaussian-window average (SumSoftMaxWeight, sigma = 0.1) of
#      batches of 10 and 100 clouds of N = 2048 points uniform in the unit cube, D = 3 (seed 004,
#      Table 4), one batched call against the loop of one call per cloud;
#   4. a batch of one member (n x d x 1 arrays) against the unbatched call of the same problem.
# Checks: the single Sinkhorn problem and member 1 of the clouds against dense R in float64; every
# batched result against the per-member calls (max abs diff; K-NN indices identical up to ties:
# the distances of the k-th neighbours agree). A failed check is marked FAIL and makes the script
# exit with status 1. Computations in float32 (the default), inputs in R memory.
library(rkeops)

local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
backend <- toupper(env_str("BACKEND", "CPU"))
stopifnot(backend %in% c("CPU", "GPU"))
sizes <- env_str("SIZES", "full")
stopifnot(sizes %in% c("small", "full"))
full <- sizes == "full"
max_reps <- env_num("REPS", 3)
B <- env_num("B", if (full) 256 else 8)
iters <- if (full) 200 else 20
cloud_batches <- if (full) c(10, 100) else 2
loop_budget <- env_num("LOOP_BUDGET", 30)
out_path <- env_str("BENCH_OUT", "")
stopifnot(max_reps >= 1, B >= 2, loop_budget > 0)

if (backend == "GPU") {
  if (!rkeops_use_gpu()) stop("BACKEND=GPU but no GPU can be used (see the message above)")
} else {
  rkeops_use_cpu()
}
rkeops_use_float32()
rkeops_disable_verbosity()

n <- 100          # histogram bins (seed 001)
lam <- 1e-3       # entropic regularisation (seed 001)
N_pts <- 2048     # points per cloud (seed 004, Table 4)
K <- 40           # neighbours
sigma <- 0.1      # Gaussian window: about the mean spacing of 2048 uniform points in the unit cube

# ---- timing --------------------------------------------------------------------------------------

# (proc.time() counts milliseconds: too coarse for the GPU's calls)
clock <- function() as.numeric(Sys.time())
# REPS timed runs of f() after one warm-up run (none with warm = FALSE): the median, the range and
# the last value.
measure <- function(f, warm = TRUE) {
  if (warm) f()
  times <- numeric(max_reps)
  for (r in seq_len(max_reps)) {
    t0 <- clock()
    v <- f()
    times[r] <- clock() - t0
  }
  list(value = v, time = median(times), min = min(times), max = max(times))
}
# The same for two computations, their runs alternated so that the load of a shared machine weighs
# on both alike: list(a = measure of a, b = measure of b).
measure_pair <- function(a, b, warm = TRUE) {
  if (warm) {
    a()
    b()
  }
  ta <- tb <- numeric(max_reps)
  for (r in seq_len(max_reps)) {
    t0 <- clock()
    va <- a()
    ta[r] <- clock() - t0
    t0 <- clock()
    vb <- b()
    tb[r] <- clock() - t0
  }
  summary <- function(v, t) list(value = v, time = median(t), min = min(t), max = max(t))
  list(a = summary(va, ta), b = summary(vb, tb))
}
# batch() against the loop of one(b) over the members b = 1..B, their runs alternated as in
# measure_pair(); when one warm call predicts a loop longer than LOOP_BUDGET, only the first `k`
# members are looped and the loop's times are extrapolated to B (times B / k). Returns
# list(batch, loop), the loop's value the list of the looped members' results.
measure_vs_loop <- function(batch, one, B) {
  batch()                               # warm-ups
  one(1L)
  t0 <- clock()
  one(1L)
  t1 <- clock() - t0
  k <- if (t1 * B <= loop_budget) B else max(1L, min(B, floor(loop_budget / t1)))
  m <- measure_pair(batch, function() lapply(seq_len(k), one), warm = FALSE)
  loop <- m$b
  loop$k <- k
  loop$B <- B
  loop$time <- loop$time * B / k
  list(batch = m$a, loop = loop)
}

# ---- seed 001: log-domain Sinkhorn ---------------------------------------------------------------

# The bins on linspace(0, 100) divided by 100: SqDist is then the cost divided by its max (1e4).
grid <- seq(0, 100, length.out = n)
xs <- matrix(grid / 100, ncol = 1)
# log v_j = log nu_j - LSE_i(log u_i - C_ij / lambda) (an output per j: axis 1), and
# log u_i = log mu_i - LSE_j(log v_j - C_ij / lambda) (per i: axis 0); s = 1 / lambda.
step_v <- keops_kernel("LogSumExp_Reduction(lu - SqDist(x, y) * s, 1)",
                       c("x = Vi(1)", "y = Vj(1)", "lu = Vi(1)", "s = Pm(1)"))
step_u <- keops_kernel("LogSumExp_Reduction(lv - SqDist(x, y) * s, 0)",
                       c("x = Vi(1)", "y = Vj(1)", "lv = Vj(1)", "s = Pm(1)"))
# The loss sum_ij P_ij C_ij with P_ij = u_i exp(-C_ij / lambda) v_j: sums over j, then over i in R.
plan_cost <- keops_kernel("Sum_Reduction(Exp(lu + lv - SqDist(x, y) * s) * SqDist(x, y), 0)",
                          c("x = Vi(1)", "y = Vj(1)", "lu = Vi(1)", "lv = Vj(1)", "s = Pm(1)"))

# lmu, lnu: log-histograms, n x 1 matrices (one problem) or n x 1 x B arrays (a batch, one call per
# half iteration for all members). Returns the loss of each member and the gradient in mu,
# lambda log u (shaped like lmu).
sinkhorn <- function(lmu, lnu, iters) {
  lu <- array(-log(n), dim(lmu))
  lv <- array(-log(n), dim(lnu))
  for (it in seq_len(iters)) {
    lv <- lnu - step_v(list(xs, xs, lu, 1 / lam))
    lu <- lmu - step_u(list(xs, xs, lv, 1 / lam))
  }
  per_i <- plan_cost(list(xs, xs, lu, lv, 1 / lam))
  list(loss = colSums(matrix(per_i, n)), grad = lam * lu)
}

# The same iterations run by the engine in one call (keops_iterate()), with the raw log-sum-exps
# as the iterated values: f = LSE_j(lnu_j - g_j - C_ij / lambda), log u = lmu - f, and
# g = LSE_i(lmu_i - f_i - C_ij / lambda), log v = lnu - g. Starting from f = lmu + log(n) is
# starting from log u = -log(n), as sinkhorn() does.
f_op <- keops_kernel("LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
                     c("x = Vi(1)", "y = Vj(1)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"))
g_op <- keops_kernel("LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
                     c("x = Vi(1)", "y = Vj(1)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"))
sinkhorn_iterate <- function(lmu, lnu, iters) {
  res <- keops_iterate(list(g = g_op, f = f_op),
                       list(x = xs, y = xs, lmu = lmu, lnu = lnu, s = 1 / lam,
                            f = lmu + log(n), g = matrix(0, n)), iters)
  lu <- lmu - res$f
  lv <- lnu - res$g
  per_i <- plan_cost(list(xs, xs, lu, lv, 1 / lam))
  list(loss = colSums(matrix(per_i, n)), grad = lam * lu)
}

# The same iterations in dense R, float64: the reference.
sinkhorn_dense <- function(mu, nu, iters) {
  C <- outer(grid, grid, "-")^2 / 1e4
  lse_cols <- function(A) {   # log-sum-exp of each column
    m <- apply(A, 2L, max)
    m + log(colSums(exp(A - rep(m, each = nrow(A)))))
  }
  lu <- lv <- rep(-log(n), n)
  for (it in seq_len(iters)) {
    lv <- log(nu) - lse_cols(lu - C / lam)        # A[i, j] = lu_i - C_ij / lambda
    lu <- log(mu) - lse_cols(lv - t(C) / lam)     # A[j, i] = lv_j - C_ji / lambda
  }
  list(loss = sum(exp(outer(lu, lv, "+") - C / lam) * C), grad = lam * lu)
}

normal_hist <- function(m, s) {
  h <- dnorm(grid, m, s)
  h / sum(h)
}
# B problems: member 1 is the seed's example, the others normal histograms of random means and
# deviations. n x 1 x B arrays of the histograms.
sinkhorn_problems <- function(B) {
  set.seed(17)
  m <- rbind(c(20, 60), matrix(runif(2 * (B - 1), 10, 90), B - 1))
  s <- rbind(c(10, 30), matrix(runif(2 * (B - 1), 8, 30), B - 1))
  mu <- vapply(seq_len(B), function(b) normal_hist(m[b, 1], s[b, 1]), numeric(n))
  nu <- vapply(seq_len(B), function(b) normal_hist(m[b, 2], s[b, 2]), numeric(n))
  list(mu = array(mu, c(n, 1, B)), nu = array(nu, c(n, 1, B)))
}

# ---- seed 004: batches of point clouds -----------------------------------------------------------

knn <- keops_kernel(sprintf("ArgKMin_Reduction(SqDist(x, y), %d, 0)", K), c("x = Vi(3)", "y = Vj(3)"))
# sum_j w_ij y_j / sum_j w_ij, w_ij = exp(-|x_i - y_j|^2 / (2 sigma^2)): one reduction.
window_avg <- keops_kernel("SumSoftMaxWeight_Reduction(-SqDist(x, y) * g, y, 0)",
                           c("x = Vi(3)", "y = Vj(3)", "g = Pm(1)"))
g_window <- 1 / (2 * sigma^2)

# The squared distances of each point to its neighbours `idx` (N x K), float64.
neighbour_d2 <- function(x, idx) {
  i <- rep(seq_len(nrow(x)), ncol(idx))
  matrix(rowSums((x[i, , drop = FALSE] - x[as.vector(idx), , drop = FALSE])^2), nrow(x))
}
# Two K-NN index arrays of the cloud x agree up to ties when the k-th neighbours are at the same
# distance: the largest difference of these distances (0 when the indices are identical) and the
# number of differing indices.
knn_gap <- function(x, a, b) {
  list(gap = max(abs(neighbour_d2(x, a) - neighbour_d2(x, b))), differ = sum(a != b))
}
knn_dense <- function(x) {
  D <- as.matrix(dist(x))^2
  t(apply(D, 1L, function(d) order(d)[seq_len(K)]))
}
window_dense <- function(x) {
  W <- exp(-as.matrix(dist(x))^2 * g_window)
  (W %*% x) / rowSums(W)
}

# ---- the report ----------------------------------------------------------------------------------

rows <- list()
failed <- character()
# A row of the table: `batch`, `loop` measurements (or NULL), the check list(ok, text), the goal
# list(text, backend, max_time, min_ratio, applies).
record <- function(case, batch, loop = NULL, check, goal = NULL, note = "") {
  ratio <- if (is.null(loop)) NA else loop$time / batch$time
  met <- "-"
  if (!is.null(goal)) {
    met <- if (!goal$applies) "n/a" else if (!identical(goal$backend, backend)) paste0("n/a (", goal$backend, " goal)") else {
      ok <- (is.null(goal$max_time) || batch$time <= goal$max_time) &&
        (is.null(goal$min_ratio) || (!is.na(ratio) && ratio >= goal$min_ratio))
      if (ok) "met" else "not met"
    }
  }
  if (!check$ok) failed <<- c(failed, case)
  rows[[length(rows) + 1L]] <<- list(case = case, batch = batch, loop = loop, ratio = ratio,
                                      goal = if (is.null(goal)) "" else goal$text, met = met,
                                      check = check, note = note)
  emit(sprintf("  %s: %s%s%s; goal %s: %s; %s%s", case, fmt_time(batch),
               if (is.null(loop)) "" else paste0(" vs loop ", fmt_time(loop)),
               if (is.na(ratio)) "" else sprintf(" (ratio %.2f)", ratio),
               if (is.null(goal)) "-" else goal$text, met,
               if (check$ok) "ok: " else "FAIL: ", check$text))
  if (nzchar(note)) emit("    ", note)
}
fmt_s <- function(t) {
  if (t >= 10) sprintf("%.1f s", t) else if (t >= 1) sprintf("%.2f s", t) else if (t >= 0.01) sprintf("%.1f ms", 1e3 * t) else
    sprintf("%.2f ms", 1e3 * t)
}
fmt_time <- function(m) {
  txt <- sprintf("%s (%s-%s)", fmt_s(m$time), fmt_s(m$min * (if (is.null(m$k)) 1 else m$B / m$k)),
                 fmt_s(m$max * (if (is.null(m$k)) 1 else m$B / m$k)))
  if (!is.null(m$k) && m$k < m$B) txt <- paste0(txt, sprintf(", extrapolated from %d of %d", m$k, m$B))
  txt
}
# The largest abs difference of two lists of matrices or arrays, member by member.
max_diff <- function(a, b) max(abs(unlist(a) - unlist(b)))
goal <- function(text, backend, max_time = NULL, min_ratio = NULL, applies = full) {
  list(text = text, backend = backend, max_time = max_time, min_ratio = min_ratio, applies = applies)
}

machine <- if (backend == "GPU") {
  paste("GPU:", rkeops:::gpu_status()$message)
} else {
  l <- grep("^model name", readLines("/proc/cpuinfo", warn = FALSE), value = TRUE)
  sprintf("CPU: %s, %d cores", if (length(l)) sub("^model name\\s*:\\s*", "", l[1L]) else "unknown",
          parallel::detectCores())
}
t_start <- clock()
emit("# rkeops: batches against loops of calls (bench/batch.R)")
emit("")
emit(sprintf("Backend %s, %s; float32; SIZES=%s (B = %d Sinkhorn problems of %d iterations, batches of %s clouds), REPS=%g, LOOP_BUDGET=%g s",
             backend, machine, sizes, B, iters, paste(cloud_batches, collapse = " and "), max_reps, loop_budget))
emit(sprintf("%s; git %s; %s; load average at the start %s", format(Sys.time(), "%Y-%m-%d %H:%M:%S %Z"),
             git_version(), R.version.string, load_avg()))
emit("")

# ---- 1. one Sinkhorn problem ---------------------------------------------------------------------

pb <- sinkhorn_problems(B)
lmu <- log(pb$mu)
lnu <- log(pb$nu)
# The members as the loop passes them: n x 1 matrices, cut beforehand (not timed).
members <- lapply(seq_len(B), function(b) list(mu = matrix(lmu[, 1, b]), nu = matrix(lnu[, 1, b])))
one_problem <- function(b) sinkhorn(members[[b]]$mu, members[[b]]$nu, iters)

ref <- sinkhorn_dense(pb$mu[, 1, 1], pb$nu[, 1, 1], iters)
check_one <- function(v) {
  d_grad <- max(abs(v$grad - ref$grad))
  d_loss <- abs(v$loss - ref$loss) / abs(ref$loss)
  list(ok = d_grad <= 1e-3 * max(abs(ref$grad)) && d_loss <= 1e-3,
       text = sprintf("vs dense R float64: gradient max abs diff %.1e (max |grad| %.2g), loss %.6g rel. diff %.1e",
                      d_grad, max(abs(ref$grad)), ref$loss, d_loss))
}
one_problem_iterate <- function(b) sinkhorn_iterate(members[[b]]$mu, members[[b]]$nu, iters)
mp <- measure_pair(function() one_problem(1L), function() one_problem_iterate(1L))
record(sprintf("Sinkhorn seed 001, 1 problem n=%d, %d it., loss + gradient: R loop of %d calls", n, iters, 2 * iters + 1),
       mp$a, check = check_one(mp$a$value))
record(sprintf("Sinkhorn seed 001, 1 problem n=%d, %d it., loss + gradient: keops_iterate() + 1 call", n, iters),
       mp$b, check = check_one(mp$b$value), goal = goal("GPU <= 10 ms", "GPU", max_time = 0.010, applies = full))

# ---- 2. B Sinkhorn problems: one batch against the loop ------------------------------------------

# Every member of a batched run against the runs of the looped members.
check_members <- function(mb, ml) {
  looped <- seq_len(ml$k)
  d_grad <- max_diff(lapply(looped, function(b) mb$value$grad[, , b]), lapply(ml$value, `[[`, "grad"))
  d_loss <- max(abs(mb$value$loss[looped] - vapply(ml$value, `[[`, 0, "loss")) / abs(mb$value$loss[looped]))
  scale <- max(abs(mb$value$grad[, , looped]))
  list(ok = d_grad <= 1e-4 * scale && d_loss <= 1e-4,
       text = sprintf("batch vs per-problem runs (%d problems): gradient max abs diff %.1e (max |grad| %.2g), loss max rel. diff %.1e",
                      ml$k, d_grad, scale, d_loss))
}

m <- measure_vs_loop(function() sinkhorn(lmu, lnu, iters), one_problem, B)
mb <- m$batch
ml <- m$loop
# The phases of one more run of f() (kept out of the timed runs): the R side against the engine.
profile_note <- function(f) {
  if (!exists("phase_totals", envir = asNamespace("rkeops"), inherits = FALSE)) return("")
  t0 <- clock()
  p <- rkeops:::phase_totals(f())
  total <- clock() - t0
  engine <- sum(p$phases)
  sprintf("profile of one more batched run: %s total, %d engine calls; per call %.3f ms in the engine (%s), %.3f ms on the R side",
          fmt_s(total), p$calls, 1e3 * engine / p$calls,
          paste(sprintf("%s %.3f", names(p$phases), 1e3 * p$phases / p$calls), collapse = ", "),
          1e3 * (total - engine) / p$calls)
}
sink_goal <- if (backend == "GPU") {
  goal("GPU <= 60 ms and >= 25 x the loop", "GPU", max_time = 0.060, min_ratio = 25, applies = full && B == 256)
} else {
  goal("CPU >= 5 x the loop", "CPU", min_ratio = 5, applies = full && B == 256)
}
record(sprintf("Sinkhorn, B=%d problems n=%d, %d it., one call per half iteration", B, n, iters), mb, ml,
       check = check_members(mb, ml), note = profile_note(function() sinkhorn(lmu, lnu, iters)))

# The batch in one keops_iterate() call (and one call for the loss), against the same loop of
# calls per problem as above (today's way), and against the loop of keops_iterate() per problem.
m <- measure_vs_loop(function() sinkhorn_iterate(lmu, lnu, iters), one_problem, B)
record(sprintf("Sinkhorn, B=%d problems n=%d, %d it., keops_iterate() on the batch vs the loop of calls per problem", B, n, iters),
       m$batch, m$loop, check = check_members(m$batch, m$loop), goal = sink_goal,
       note = profile_note(function() sinkhorn_iterate(lmu, lnu, iters)))
m <- measure_vs_loop(function() sinkhorn_iterate(lmu, lnu, iters), one_problem_iterate, B)
record(sprintf("Sinkhorn, B=%d problems n=%d, %d it., keops_iterate() on the batch vs keops_iterate() per problem", B, n, iters),
       m$batch, m$loop, check = check_members(m$batch, m$loop))

# ---- 3. K-NN graphs and Gaussian-window averages of batches of clouds -----------------------------

set.seed(4)
max_clouds <- max(cloud_batches)
X_all <- array(runif(N_pts * 3 * max_clouds), c(N_pts, 3, max_clouds))
ref_knn <- knn_dense(X_all[, , 1])
ref_win <- window_dense(X_all[, , 1])
for (Bc in cloud_batches) {
  X <- X_all[, , seq_len(Bc), drop = FALSE]
  clouds <- lapply(seq_len(Bc), function(b) X[, , b])
  # K-NN: one call for the batch, one per cloud.
  m <- measure_vs_loop(function() knn(list(X, X)), function(b) knn(list(clouds[[b]], clouds[[b]])), Bc)
  mb <- m$batch
  ml <- m$loop
  gaps <- lapply(seq_len(ml$k), function(b) knn_gap(clouds[[b]], mb$value[, , b], ml$value[[b]]))
  gap <- max(vapply(gaps, `[[`, 0, "gap"))
  differ <- sum(vapply(gaps, `[[`, 0, "differ"))
  dense <- knn_gap(clouds[[1L]], mb$value[, , 1], ref_knn)
  record(sprintf("%d-NN graphs, B=%d clouds N=%d D=3", K, Bc, N_pts), mb, ml,
         check = list(ok = gap <= 1e-6 && dense$gap <= 1e-5,
                      text = sprintf("batch vs per-cloud calls (%d clouds): %d indices differ, k-th neighbour distances max diff %.1e; cloud 1 vs dense R: %d differ, %.1e",
                                     ml$k, differ, gap, dense$differ, dense$gap)),
         goal = if (Bc == 100) goal("GPU <= 3 ms and >= 20 x the loop", "GPU", max_time = 0.003, min_ratio = 20) else NULL,
         note = if (Bc == 100) profile_note(function() knn(list(X, X))) else "")
  # Gaussian-window average.
  m <- measure_vs_loop(function() window_avg(list(X, X, g_window)),
                       function(b) window_avg(list(clouds[[b]], clouds[[b]], g_window)), Bc)
  mb <- m$batch
  ml <- m$loop
  d <- max_diff(lapply(seq_len(ml$k), function(b) mb$value[, , b]), ml$value)
  d_dense <- max(abs(mb$value[, , 1] - ref_win))
  record(sprintf("Gaussian-window average (sigma=%g), B=%d clouds N=%d D=3", sigma, Bc, N_pts), mb, ml,
         check = list(ok = d <= 1e-5 && d_dense <= 1e-4,
                      text = sprintf("batch vs per-cloud calls (%d clouds): max abs diff %.1e; cloud 1 vs dense R: %.1e",
                                     ml$k, d, d_dense)))
}

# ---- 4. a batch of one member against the unbatched call ------------------------------------------

# The loop's column is the unbatched call: ratio = unbatched / batch of 1, within 5 % when >= 0.95
# (a batch of one faster than the plain call is fine). The two are timed alternately.
one_goal <- goal("within 5 % of unbatched (ratio >= 0.95)", backend, min_ratio = 0.95, applies = TRUE)
lmu1 <- array(members[[1L]]$mu, c(n, 1, 1))
lnu1 <- array(members[[1L]]$nu, c(n, 1, 1))
mp <- measure_pair(function() sinkhorn(lmu1, lnu1, iters), function() one_problem(1L))
m_one <- mp$a
m_plain <- mp$b
d <- max(abs(m_one$value$grad[, , 1] - m_plain$value$grad), abs(m_one$value$loss - m_plain$value$loss))
record(sprintf("batch of 1 vs unbatched: Sinkhorn n=%d, %d it. (%d calls)", n, iters, 2 * iters + 1), m_one, m_plain,
       check = list(ok = d <= 1e-6 * max(1, max(abs(m_plain$value$grad))),
                    text = sprintf("batch of 1 vs unbatched: max abs diff %.1e", d)),
       goal = one_goal)
x1 <- X_all[, , 1]
x1_batch <- X_all[, , 1, drop = FALSE]
# A run is 10 calls (the Sinkhorn run above makes 401), so that a 5 % difference shows over the noise.
calls <- 10L
repeated <- function(f) function() {
  for (r in seq_len(calls)) v <- f()
  v
}
mp <- measure_pair(repeated(function() knn(list(x1_batch, x1_batch))), repeated(function() knn(list(x1, x1))))
m_one <- mp$a
m_plain <- mp$b
g <- knn_gap(x1, m_one$value[, , 1], m_plain$value)
record(sprintf("batch of 1 vs unbatched: %d-NN of one cloud N=%d (%d calls)", K, N_pts, calls), m_one, m_plain,
       check = list(ok = g$gap <= 1e-6, text = sprintf("%d indices differ, distances max diff %.1e", g$differ, g$gap)),
       goal = one_goal)

# ---- the table -----------------------------------------------------------------------------------

emit("")
emit("| case | batch time (median, range) | loop time (median, range) | ratio loop / batch | goal | met | check |")
emit("|---|---|---|---|---|---|---|")
for (r in rows) {
  emit(sprintf("| %s | %s | %s | %s | %s | %s | %s%s |", r$case, fmt_time(r$batch),
               if (is.null(r$loop)) "-" else fmt_time(r$loop), if (is.na(r$ratio)) "-" else sprintf("%.2f", r$ratio),
               if (nzchar(r$goal)) r$goal else "-", r$met, if (r$check$ok) "ok: " else "FAIL: ", r$check$text))
}
emit("")
emit("Times are medians of REPS runs after a warm-up, from R (inputs in R memory, results back in R).")
emit("The batch-of-1 rows: the batch column is the call with n x d x 1 arrays, the loop column the unbatched call,")
emit("their runs alternated.")
for (r in rows) if (nzchar(r$note)) emit(sprintf("%s: %s.", r$case, r$note))
emit(sprintf("Whole run: %.0f s; load average at the end %s.", clock() - t_start, load_avg()))
if (nzchar(out_path)) writeLines(report, out_path)
if (length(failed)) {
  message("checks failed: ", paste(failed, collapse = "; "))
  quit(status = 1)
}

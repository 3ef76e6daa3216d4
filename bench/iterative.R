# Whole iterative algorithms timed from R: EM for a diagonal Gaussian mixture, Sinkhorn with
# epsilon-annealing, two-scale Sinkhorn, landmark matching by geodesic shooting (L-BFGS), K-means
# (Lloyd), kriging by conjugate gradients, and the CPU goal rows of issue 14, with the R peers in
# the same run (mclust::em, stats::kmeans, dense solve()) where they are installed and fit. EM,
# Sinkhorn, two-scale Sinkhorn and K-means run the vignettes' own functions (read from
# vignettes/*.Rmd by vignette_functions(), bench/common.R), each as its R loop and as its program
# (keops_program()): two rows per size. Run it with
#   make bench-iterative [BACKEND=CPU|GPU] [SIZES=small|full] [CASES=regex] [BUDGET=s] [REPS=n]
# or R_LIBS=lib BACKEND=CPU Rscript bench/iterative.R from the repository root.
#   BACKEND    CPU (default) or GPU (stops if no GPU can be used)
#   SIZES      small (default on the CPU: the sizes a 2-core machine runs in ~10-15 minutes) or
#              full (default on the GPU: the sizes of the KeOps paper and of issue 14)
#   CASES      only the cases whose label matches this regular expression (default: all)
#   BUDGET     seconds per case (default 60): after the warm-up, timed runs stop when the next one
#              would end past the budget (at least one is made); a case whose time, predicted from
#              the previous size of its workload, is over the budget is skipped; the same for peers
#   REPS       timed runs per median (default 3), after one warm-up run
#   PEER_GB    memory allowed to a peer's N x K (or N x N) matrices (default 4)
#   LANDMARK_IT  L-BFGS iterations of the landmark matching (default 400 full, 1 small: one
#              evaluation of the cost and its gradient takes ~30 s on 2 cores)
#   MS_CELLS   cell scales of the multiscale Sinkhorn (default 0.1; e.g. 0.2,0.1 times both)
#   BENCH_OUT  also write the report to this file
# For each case: the median total time, the share of the engine's kernels (phases whose name holds
# "kernel" or "CPU evaluation"), the R side (total minus all the engine's phases), the number of
# engine calls and each phase summed over them (rkeops:::last_run()$timings of every call, the
# phase names are the engine's), the peer's median time and a correctness check. A failed check
# is marked FAIL in the table and makes the script exit with status 1 at the end.
library(rkeops)
library(stats)

local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
backend <- toupper(env_str("BACKEND", "CPU"))
stopifnot(backend %in% c("CPU", "GPU"))
sizes <- env_str("SIZES", if (backend == "GPU") "full" else "small")
stopifnot(sizes %in% c("small", "full"))
full <- sizes == "full"
wanted <- env_str("CASES", "")
budget <- env_num("BUDGET", 60)
max_reps <- env_num("REPS", 3)
peer_gb <- env_num("PEER_GB", 4)
out_path <- env_str("BENCH_OUT", "")
stopifnot(budget > 0, max_reps >= 1)

if (backend == "GPU") {
  if (!rkeops_use_gpu()) stop("BACKEND=GPU but no GPU can be used (see the message above)")
} else {
  rkeops_use_cpu()
}
rkeops_use_float32()

has_pkg <- function(p) requireNamespace(p, quietly = TRUE)
# The matrices an algorithm passes unchanged to every reduction are kept on the GPU (keops_device()),
# so that they are converted and copied once per run, not once per reduction.
keep <- function(x) if (backend == "GPU") keops_device(x) else x
rel <- function(a, b) max(abs(a - b)) / max(abs(b))
# 50000 -> "5e4", 1000 -> "1000"
num <- function(n) if (n >= 1e4) sub("e\\+0*", "e", sprintf("%.0e", n)) else sprintf("%.0f", n)

# ---- timing ------------------------------------------------------------------------------------

# One run of `f()`, with the engine's phases summed over its calls.
timed <- function(f) {
  t0 <- proc.time()[["elapsed"]]
  p <- rkeops:::phase_totals(f())
  list(value = p$value, total = proc.time()[["elapsed"]] - t0, calls = p$calls, phases = p$phases,
       engine = p$engine)
}

# A warm-up run (of `warmup`, where running `f` twice would not fit: the same formulas on less
# data), then timed runs until REPS or the budget. Returns the median run (its value, its phases)
# with the number of runs; predicted: the expected seconds of one run, or NA.
measure <- function(f, predicted = NA, warmup = NULL) {
  if (!is.na(predicted) && predicted > budget) {
    return(list(skipped = sprintf("skipped: predicted %.0f s > BUDGET", predicted)))
  }
  warm <- timed(if (is.null(warmup)) f else warmup)
  optimised_kernels()
  runs <- list()
  spent <- warm$total
  while (length(runs) < max_reps && (length(runs) == 0L || spent + warm$total <= budget)) {
    r <- timed(f)
    runs[[length(runs) + 1L]] <- r
    spent <- spent + r$total
  }
  totals <- vapply(runs, function(r) r$total, 0)
  mid <- runs[[order(totals)[ceiling(length(totals) / 2)]]]
  mid$reps <- length(runs)
  mid$warm <- warm$total
  mid$total <- median(totals)
  mid
}

# A peer (plain R) run: no warm-up (nothing to compile), runs until REPS or the budget.
measure_peer <- function(f, available = TRUE, why = "peer not installed", predicted = NA, gb = 0) {
  if (!available) return(list(skipped = why))
  if (gb > peer_gb) return(list(skipped = sprintf("skipped: needs %.1f GB > PEER_GB", gb)))
  if (!is.na(predicted) && predicted > budget) {
    return(list(skipped = sprintf("skipped: predicted %.0f s > BUDGET", predicted)))
  }
  runs <- list()
  spent <- 0
  repeat {
    t0 <- proc.time()[["elapsed"]]
    v <- f()
    t <- proc.time()[["elapsed"]] - t0
    runs[[length(runs) + 1L]] <- list(value = v, total = t)
    spent <- spent + t
    if (length(runs) >= max_reps || spent + t > budget) break
  }
  totals <- vapply(runs, function(r) r$total, 0)
  list(value = runs[[length(runs)]]$value, total = median(totals), reps = length(runs))
}

is_kernel <- function(names) grepl("kernel|CPU evaluation", names, ignore.case = TRUE)

rows <- list()
failed <- character()
# Records one case: m from measure(), peer from measure_peer(), check a list(ok, text).
record <- function(workload, size, m, peer = NULL, peer_name = "", check = NULL, extra = "") {
  if (!is.null(m$skipped)) {
    rows[[length(rows) + 1L]] <<- list(workload = workload, size = size, note = m$skipped)
    emit(sprintf("  %s %s: %s", workload, size, m$skipped))
    return(invisible())
  }
  # (a program's step phases are within its loop: the engine's seconds count the outer ones)
  engine <- m$engine
  kernel <- sum(m$phases[is_kernel(names(m$phases))])
  phases <- if (length(m$phases)) {
    paste(sprintf("%s %.3g", names(m$phases), m$phases), collapse = ", ")
  } else "-"
  peer_txt <- if (is.null(peer)) "" else if (!is.null(peer$skipped)) paste0(peer_name, ": ", peer$skipped) else
    sprintf("%s %.3g s (%d run%s); rkeops %.2f x faster", peer_name, peer$total, peer$reps,
            if (peer$reps == 1L) "" else "s", peer$total / m$total)
  ok <- is.null(check) || isTRUE(check$ok)
  if (!ok) failed <<- c(failed, paste(workload, size))
  check_txt <- if (is.null(check)) "" else paste0(if (ok) "ok: " else "FAIL: ", check$text)
  row <- list(workload = workload, size = size, total = m$total, reps = m$reps, warm = m$warm,
              calls = m$calls, kernel_share = if (m$total > 0) kernel / m$total else NA,
              r_side = m$total - engine, per_call = (m$total - engine) / max(m$calls, 1L),
              phases = phases, peer = peer_txt, check = check_txt, extra = extra)
  rows[[length(rows) + 1L]] <<- row
  emit(sprintf("  %s %s: %.3f s (median of %d; warm-up %.3f s), %d calls, kernels %.0f %%, R side %.3f s; %s%s%s",
               workload, size, m$total, m$reps, m$warm, m$calls, 100 * row$kernel_share, row$r_side,
               phases, if (nzchar(peer_txt)) paste0("; ", peer_txt) else "",
               if (nzchar(check_txt)) paste0("; ", check_txt) else ""))
  invisible(row)
}
selected <- function(label) grepl(wanted, label)
# Time of the next size from the previous one of the same workload, scaled by the work.
predict_next <- function(prev, work_prev, work) {
  if (is.null(prev) || !is.null(prev$skipped)) return(NA)
  prev$total * work / work_prev
}

# ---- The vignettes' code -----------------------------------------------------------------------

# The cases below time the functions of the vignettes themselves, read from their labelled chunks of
# definitions (vignette_functions() in bench/common.R), each as its R loop and as its program
# (keops_program()). They take their matrices from R: on a GPU each call of an R loop copies its
# inputs, as the vignettes' code does (the program copies them once per run).
vig <- list(gmm = vignette_functions("gmm", c("lazy", "program")),
            sinkhorn = vignette_functions("sinkhorn", c("solver", "dense", "program")),
            multiscale = vignette_functions("sinkhorn-multiscale", "solvers"),
            kmeans = vignette_functions("kmeans", c("kmeans-function", "program")),
            landmarks = vignette_functions("landmarks", c("program", "program-cost")))

# ---- EM for a Gaussian mixture with diagonal covariances (vignettes/gmm.Rmd) -------------------

gmm_data <- function(N, K, D) {
  set.seed(N + K + D)
  centres <- matrix(runif(K * D, 0, 10), K, D)
  x <- centres[sample(K, N, replace = TRUE), , drop = FALSE] + matrix(rnorm(N * D, sd = 0.3), N, D)
  list(x = x, start = list(w = rep(1 / K, K), mu = x[sample(N, K), , drop = FALSE],
                           s = matrix(apply(x, 2, sd), K, D, byrow = TRUE)))
}
# mclust::em from the same start: VVI is the diagonal model with free volumes and shapes, the
# model of the vignette's em_step(). 10 M-steps with the E-steps around them; tol = 0: never stops
# early.
mclust_run <- function(d, iters = 10) {
  p <- d$start
  v <- p$s^2
  scale <- exp(rowMeans(log(v)))
  params <- list(pro = p$w, mean = t(p$mu),
                 variance = list(modelName = "VVI", d = ncol(d$x), G = length(p$w),
                                 scale = scale, shape = t(v / scale)))
  mclust::emVVI(d$x, parameters = params,
             control = mclust::emControl(itmax = iters, tol = c(0, sqrt(.Machine$double.eps))),
                warn = FALSE)
}
gmm_case <- function(N, K, D, prev = NULL, label = "GMM EM diagonal, 10 it.") {
  size <- sprintf("N=%s K=%s D=%d", num(N), num(K), D)
  if (!selected(paste(label, size))) return(prev)
  d <- gmm_data(N, K, D)
  em <- vig$gmm
  m <- measure(function() em$em_fit(d$x, d$start, 10), predict_next(prev$m, prev$work, N * K))
  program <- em$em_program(10, D)   # made once, as a user keeps it
  input <- em$em_program_input(d$x, d$start)
  mp <- measure(function() program(input), predict_next(prev$mp, prev$work, N * K))
  check <- check_p <- NULL
  peer <- NULL
  if (is.null(m$skipped)) {
    L <- m$value$loglik
    L_final <- em$em_step(d$x, m$value$params)$loglik   # the log-likelihood after 10 steps
    steps <- diff(c(L, L_final))
    tol <- 1e-5 * abs(L_final)   # float32 log-densities summed over N points
    check <- list(ok = is.finite(L_final) && all(steps > -tol),
                  text = sprintf("log-likelihood non-decreasing (smallest step %.3g, allowed %.3g), final %.6g",
                                 min(steps), -tol, L_final))
    peer <- measure_peer(function() mclust_run(d), has_pkg("mclust"),
                         predicted = predict_next(prev$peer, prev$work, N * K),
                         gb = 3 * N * K * 8 / 1e9)
    if (!is.null(peer$value)) {
      ll <- peer$value$loglik
      ok <- is.finite(ll) && abs(ll - L_final) <= 1e-4 * abs(ll)
      check$ok <- check$ok && ok
      check$text <- sprintf("%s; mclust::em (%d iterations) final log-likelihood %.6g (relative difference %.1e)",
                            check$text, abs(attr(peer$value, "info")[["iterations"]]),
                            ll, abs(ll - L_final) / abs(ll))
    }
    if (is.null(mp$skipped)) {
      # the program traces the log-likelihood of each iteration's start, as the loop's loglik
      gap <- max(abs(attr(mp$value, "trace")$ll - L)) / abs(L_final)
      check_p <- list(ok = is.finite(gap) && gap < 1e-5,
                      text = sprintf("log-likelihoods of the 10 iterations vs the R loop: relative difference %.1e < 1e-5", gap))
    }
  }
  record(paste(label, "(R loop)"), size, m, peer, "mclust::em VVI", check)
  record(paste(label, "(program)"), size, mp, peer, "mclust::em VVI", check_p)
  invisible(list(m = m, mp = mp, peer = peer, work = N * K))
}

# ---- Sinkhorn with epsilon-annealing (vignettes/sinkhorn.Rmd) ----------------------------------

sinkhorn_data <- function(N, D = 3) {
  set.seed(N)
  x <- matrix(rnorm(N * D, sd = 0.25), N, D)
  y <- matrix(rnorm(N * D), N, D)
  y <- y / sqrt(rowSums(y^2)) + matrix(rnorm(N * D, sd = 0.05), N, D)   # a noisy sphere
  a <- runif(N, 0.5, 1.5)
  b <- runif(N, 0.5, 1.5)
  list(x = x, y = y, a = a / sum(a), b = b / sum(b))
}
# The vignette's solver for exactly 10 iterations: 9 annealed ones (from the potentials at
# eps = +Inf) and 1 at eps = blur^2; tol = 0 never stops early (the loop then warns that it did not
# converge: ten iterations end far from convergence, as in the paper's benchmark).
sinkhorn_loop <- function(d, blur = 0.05) {
  suppressWarnings(vig$sinkhorn$sinkhorn_keops(d$x, d$a, d$y, d$b, blur, n_anneal = 9, tol = 0, max_iter = 10))
}
sinkhorn_in_program <- function(d, program, blur = 0.05) {
  res <- vig$sinkhorn$run_program(d$x, d$a, d$y, d$b, blur, n_anneal = 9, program = program)
  list(f = res$f[, 1], g = res$g[, 1], eps = blur^2)
}
# The L1 errors of the two marginals of the plan pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps).
sinkhorn_marginals <- function(d, sol) {
  P <- exp(Vi(log(d$a)) + Vj(log(d$b)) +
             (Vi(sol$f) + Vj(sol$g) - sqdist(Vi(d$x), Vj(d$y)) / 2) * Pm(1 / sol$eps))
  c(rows = sum(abs(sum(P, index = "j")[, 1] - d$a)), cols = sum(abs(sum(P, index = "i")[, 1] - d$b)))
}
# The vignette's loop against the vignette's dense R (double precision, the same temperatures) at a
# small size: the check of the formulas.
sinkhorn_dense_check <- function() {
  d <- sinkhorn_data(300)
  sol <- sinkhorn_loop(d)
  ref <- vig$sinkhorn$sinkhorn_dense(d$x, d$a, d$y, d$b, sol$history$eps)
  max(abs(sol$f - ref$f), abs(sol$g - ref$g))
}
sinkhorn_case <- function(N, prev = NULL, dense_err = NULL) {
  label <- "Sinkhorn eps-annealing, 10 it., D=3"
  size <- sprintf("N=M=%s", num(N))
  if (!selected(paste(label, size))) return(prev)
  d <- sinkhorn_data(N)
  m <- measure(function() sinkhorn_loop(d), predict_next(prev$m, prev$work, N^2))
  program <- vig$sinkhorn$sinkhorn_program(ncol(d$x), tol = 0, max_iter = 10)
  mp <- measure(function() sinkhorn_in_program(d, program), predict_next(prev$mp, prev$work, N^2))
  check <- check_p <- NULL
  if (is.null(m$skipped)) {
    marg <- sinkhorn_marginals(d, m$value)
    # Ten annealed iterations end at eps = blur^2 far from convergence (as in the paper's
    # benchmark): the marginals are printed, the check is the same iterations in dense R.
    check <- list(ok = all(is.finite(marg)) && all(is.finite(m$value$f)) && dense_err < 1e-4,
                  text = sprintf("potentials vs dense R (float64, same 10 iterations) at N=300: %.1e; marginal L1 errors of the plan after 10 it. (eps = blur^2 = %.4g): rows %.2f cols %.2f",
                                 dense_err, m$value$eps, marg[["rows"]], marg[["cols"]]))
    if (is.null(mp$skipped)) {
      gap <- max(abs(mp$value$f - m$value$f), abs(mp$value$g - m$value$g))
      check_p <- list(ok = is.finite(gap) && gap < 1e-4,
                      text = sprintf("potentials vs the R loop: max difference %.1e < 1e-4", gap))
    }
  }
  record(paste(label, "(R loop)"), size, m, check = check)
  record(paste(label, "(program)"), size, mp, check = check_p)
  invisible(list(m = m, mp = mp, work = N^2))
}

# ---- Multiscale Sinkhorn with block-sparse fine iterations (vignettes/sinkhorn-multiscale.Rmd) --

# Two samples of a torus, the second deformed by an affine map, scaled to a diameter of 2 (the
# paper's Table 6 deforms the Stanford dragon the same way).
tori_data <- function(N) {
  set.seed(N + 6)
  torus <- function(n, R = 1, r = 0.4) {
    u <- runif(n, 0, 2 * pi); v <- runif(n, 0, 2 * pi)
    cbind((R + r * cos(v)) * cos(u), (R + r * cos(v)) * sin(u), r * sin(v))
  }
  x <- torus(N)
  y <- torus(N) %*% (diag(3) + matrix(rnorm(9, sd = 0.2), 3, 3)) + rep(c(0.3, -0.2, 0.1), each = N)
  r <- apply(rbind(x, y), 2, range)
  s <- sqrt(sum((r[2, ] - r[1, ])^2)) / 2
  a <- runif(N, 0.5, 1.5); b <- runif(N, 0.5, 1.5)
  list(x = x / s, a = a / sum(a), y = y / s, b = b / sum(b))
}
# Cells of side cell_scale * (N / 1e4)^(-1/4): a surface holds ~ area / side^2 cells, so their
# number grows like sqrt(N) (the paper's coarse measures have sqrt(N) points). MS_CELLS lists the
# scales to time (default 0.1: ~ 4 sqrt(N) cells in each cloud of tori_data()).
ms_scales <- as.numeric(strsplit(env_str("MS_CELLS", "0.1"), ",")[[1]])

multiscale_case <- function(N, prev = NULL) {
  label <- "Sinkhorn multiscale, 10 it., D=3, blur=0.01"
  size <- sprintf("N=M=%s", num(N))
  if (!selected(paste(label, size))) return(prev)
  d <- tori_data(N)
  ms <- vig$multiscale
  # the peer: the vignette's dense annealing (its R loop), the same 10 temperatures
  dense <- measure(function() ms$sinkhorn_dense(d$x, d$a, d$y, d$b, blur = 0.01),
                   predict_next(prev$dense, prev$work, N^2))
  w2 <- function(s) sqrt(2 * (sum(d$a * s$f) + sum(d$b * s$g)))
  for (scale in ms_scales) {
    cell <- scale * (N / 1e4)^(-1 / 4)
    # the R loop chooses the pairs of cells at every fine iteration; the program (coarse annealing
    # and fine iterations, one program each) once, at the first fine iteration
    for (form in c("R loop", "program")) {
      m <- measure(function() ms$sinkhorn_multiscale(d$x, d$a, d$y, d$b, blur = 0.01, cell = cell,
                                                     program = form == "program"))
      check <- NULL
      if (is.null(m$skipped)) {
        about <- sprintf("cell %.3g, %d cells, %d coarse it., kept %% per fine it.: %s", cell,
                         sum(m$value$cells), m$value$coarse_iters,
                         paste(sprintf("%.1f", 100 * m$value$kept), collapse = " "))
        if (is.null(dense$skipped)) {
          rel <- abs(w2(m$value) / w2(dense$value) - 1)
          check <- list(ok = rel < 0.01, text = sprintf("sqrt(2 OT_eps) %.5f vs dense annealing %.5f (relative %.1e < 1e-2); %s",
                                                         w2(m$value), w2(dense$value), rel, about))
        } else {
          check <- list(ok = all(is.finite(m$value$f), is.finite(m$value$g)),
                        text = sprintf("potentials finite; sqrt(2 OT_eps) %.5f (dense not run); %s", w2(m$value), about))
        }
      }
      record(sprintf("%s (%s)", label, form), size, m, dense, "dense annealing (vignette's R loop, same 10 eps)", check)
    }
  }
  invisible(list(dense = dense, work = N^2))
}

# ---- Landmark matching by geodesic shooting (seed 003; vignettes/landmarks.Rmd) ----------------

# Synthetic shapes at the scale of the paper (mm): 1847 landmarks on an ellipsoid, the target a
# smooth deformation of it (mean displacement ~1.7 mm as the paper's data before registration).
landmark_data <- function(N = 1847) {
  set.seed(3)
  k <- seq_len(N) - 0.5
  phi <- acos(1 - 2 * k / N); theta <- pi * (1 + sqrt(5)) * k   # a Fibonacci sphere
  q0 <- cbind(15 * cos(theta) * sin(phi), 8 * sin(theta) * sin(phi), 6 * cos(phi))
  centres <- q0[sample(N, 6), ]
  amp <- matrix(rnorm(18, sd = 2.5), 6, 3)
  field <- Reduce(`+`, lapply(1:6, function(c) {
    w <- exp(-rowSums((q0 - rep(centres[c, ], each = N))^2) / (2 * 6^2))
    outer(w, amp[c, ])
  }))
  list(q0 = q0, target = q0 + field + 0.5 * sin(q0[, c(2, 3, 1)] / 3))
}
# H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j>, k Gaussian of standard deviation sigma; forward
# Euler over T steps as in Algorithm 1 of the paper, its adjoint with the second derivatives of H
# from keops_grad(); E(p0) = |q(1) - target|^2 + H(q0, p0) / lambda.
landmark_problem <- function(q0, target, sigma = 1.5, nt = 40, lambda = 5e5) {
  s <- 1 / (2 * sigma^2)
  args <- c("qi = Vi(3)", "qj = Vj(3)", "pi = Vi(3)", "pj = Vj(3)", "s = Pm(1)")
  Hk <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(qi, qj)) * (pi | pj), 0)", args)
  gp <- keops_grad(Hk, "pi"); gq <- keops_grad(Hk, "qi")
  ones <- matrix(1, nrow(q0), 1)
  H <- function(q, p) 0.5 * sum(Hk(list(q, q, p, p, s)))
  dHdp <- function(q, p) gp(list(q, q, p, p, s, ones))
  dHdq <- function(q, p) gq(list(q, q, p, p, s, ones))
  g2 <- list(gp_qi = keops_grad(gp, "qi"), gp_qj = keops_grad(gp, "qj"), gp_pj = keops_grad(gp, "pj"),
             gq_qi = keops_grad(gq, "qi"), gq_qj = keops_grad(gq, "qj"),
             gq_pi = keops_grad(gq, "pi"), gq_pj = keops_grad(gq, "pj"))
  vjp <- function(q, p, aq, ap) {
    a <- list(q, q, p, p, s, ones, aq); b <- list(q, q, p, p, s, ones, ap)
    list(q = g2$gp_qi(a) + g2$gp_qj(a) - g2$gq_qi(b) - g2$gq_qj(b),
         p = g2$gp_pj(a) - g2$gq_pi(b) - g2$gq_pj(b))
  }
  dt <- 1 / nt
  shoot <- function(p0) {
    path <- vector("list", nt)
    q <- q0; p <- p0
    for (k in seq_len(nt)) {
      path[[k]] <- list(q = q, p = p)
      dq <- dHdp(q, p); dp <- -dHdq(q, p)
      q <- q + dt * dq; p <- p + dt * dp
    }
    list(path = path, q1 = q)
  }
  last <- NULL
  evaluate <- function(x) {
    if (is.null(last) || !identical(last$x, x)) {
      p0 <- matrix(x, ncol = 3)
      sh <- shoot(p0)
      aq <- 2 * (sh$q1 - target); ap <- 0 * p0
      for (k in rev(seq_len(nt))) {
        st <- sh$path[[k]]
        a <- vjp(st$q, st$p, dt * aq, dt * ap)
        aq <- aq + a$q; ap <- ap + a$p
      }
      last <<- list(x = x, q1 = sh$q1, E = sum((sh$q1 - target)^2) + H(q0, p0) / lambda,
                    grad = as.vector(dHdp(q0, p0) / lambda + ap))
    }
    last
  }
  list(fn = function(x) evaluate(x)$E, gr = function(x) evaluate(x)$grad, evaluate = evaluate)
}
landmark_case <- function(maxit) {
  label <- "Landmarks seed 003, 1847 pts, sigma=1.5, T=40"
  size <- sprintf("%d L-BFGS it.", maxit)
  if (!selected(paste(label, size))) return(invisible())
  d <- landmark_data()
  dist_stats <- function(a, b) { r <- sqrt(rowSums((a - b)^2)); c(mean = mean(r), max = max(r)) }
  lm <- vig$landmarks
  # the paper's scheme (forward Euler, T = 40) as the vignette's program, made once
  shooting <- lm$shooting_program(40, dim = 3, scheme = "euler")
  problems <- list(
    "R loop" = function(d) landmark_problem(d$q0, d$target),
    program = function(d) lm$matching_program(d$q0, d$target, gamma = 1 / 5e5, s = 1 / (2 * 1.5^2),
                                                shooting = shooting))
  run <- function(form, d, maxit) {
    prob <- problems[[form]](d)
    fit <- optim(numeric(3 * nrow(d$q0)), prob$fn, prob$gr, method = "L-BFGS-B",
                 control = list(maxit = maxit))
    list(fit = fit, q1 = prob$evaluate(fit$par)$q1)
  }
  # the warm-up: one iteration on 100 of the landmarks (the same formulas)
  small <- list(q0 = d$q0[1:100, ], target = d$target[1:100, ])
  # one evaluation of the cost and its gradient, program against the hand-written adjoint
  set.seed(5)
  x <- rnorm(3 * nrow(d$q0), sd = 1e-3)
  a <- problems$program(d)
  b <- problems[["R loop"]](d)
  agree <- c(E = abs(a$fn(x) - b$fn(x)) / abs(b$fn(x)), gradient = rel(a$gr(x), b$gr(x)))
  before <- dist_stats(d$q0, d$target)
  for (form in names(problems)) {
    m <- measure(function() run(form, d, maxit), warmup = function() run(form, small, 1))
    check <- NULL
    if (is.null(m$skipped)) {
      after <- dist_stats(m$value$q1, d$target)
      fit <- m$value$fit
      ok <- all(is.finite(after)) && after[["mean"]] < before[["mean"]] && all(agree < 1e-4)
      check <- list(ok = ok, text = sprintf(
        "mean / max landmark distance %.4f / %.4f mm before, %.4f / %.4f mm after; %d evaluations, %s; one evaluation program vs R loop: E %.1e, gradient %.1e relative",
        before[["mean"]], before[["max"]], after[["mean"]], after[["max"]], fit$counts[[1]], fit$message,
        agree[["E"]], agree[["gradient"]]))
    }
    record(paste0(label, " (", form, ")"), size, m, check = check)
  }
}

# ---- K-means, Lloyd's algorithm (vignettes/kmeans.Rmd) -----------------------------------------

kmeans_data <- function(N, D, K) {
  set.seed(N + D + K)
  centres <- matrix(runif(K * D, 0, 10), K, D)
  x <- centres[sample(K, N, replace = TRUE), , drop = FALSE] + matrix(rnorm(N * D, sd = 0.4), N, D)
  list(x = x, init = x[sample(N, K), , drop = FALSE])
}
kmeans_case <- function(N, D, K, prev = NULL) {
  label <- "K-means Lloyd, 10 it."
  size <- sprintf("N=%s D=%d K=%s", num(N), D, num(K))
  if (!selected(paste(label, size))) return(prev)
  d <- kmeans_data(N, D, K)
  km <- vig$kmeans
  work <- N * K * (D + 4)
  # both stop early when no label changes, as stats::kmeans does
  m <- measure(function() km$kmeans_keops(d$x, d$init, niter = 10), predict_next(prev$m, prev$work, work))
  program <- km$make_kmeans_program(D, 10)   # made once, as a user keeps it
  mp <- measure(function() km$kmeans_keops_program(d$x, d$init, 10, program),
                predict_next(prev$mp, prev$work, work))
  # the package's function (issue 38): the same Lloyd iterations, and stats::kmeans' object
  mf <- measure(function() suppressWarnings(keops_kmeans(d$x, d$init, iter.max = 10)),
                predict_next(prev$mf, prev$work, work))
  peer <- NULL
  checks <- list()
  if (is.null(m$skipped) || is.null(mp$skipped)) {
    peer <- measure_peer(function() suppressWarnings(kmeans(d$x, centers = d$init, iter.max = 10,
                                                               algorithm = "Lloyd")),
                         predicted = predict_next(prev$peer, prev$work_peer, N * K * D))
  }
  forms <- list("R loop" = m, program = mp, "keops_kmeans()" = mf)
  for (form in names(forms)) {
    r <- forms[[form]]
    if (!is.null(r$skipped)) next
    checks[[form]] <- list(ok = TRUE, text = sprintf("%d iterations", r$value$iter))
    if (!is.null(peer$value)) {
      ref <- peer$value
      ssd <- function(cl, cent) sum((d$x - cent[cl, , drop = FALSE])^2)
      rel_ssd <- abs(ssd(r$value$cluster, r$value$centers) - ref$tot.withinss) / ref$tot.withinss
      diff_lab <- mean(r$value$cluster != ref$cluster)
      # float32 distances can flip a nearly tied point and the iterations then drift a little
      checks[[form]] <- list(ok = rel_ssd < 1e-3 && diff_lab < 0.01,
                             text = sprintf("vs stats::kmeans from the same start: %.3f %% labels differ, SSD relative difference %.1e; %d iterations (stats: %d)",
                                            100 * diff_lab, rel_ssd, r$value$iter, ref$iter))
    }
  }
  record(paste(label, "(R loop)"), size, m, peer, "stats::kmeans Lloyd", checks[["R loop"]])
  record(paste(label, "(program)"), size, mp, peer, "stats::kmeans Lloyd", checks[["program"]])
  record(paste(label, "(keops_kmeans())"), size, mf, peer, "stats::kmeans Lloyd", checks[["keops_kmeans()"]])
  invisible(list(m = m, mp = mp, mf = mf, peer = peer, work = work, work_peer = N * K * D))
}

# ---- Kriging by conjugate gradients (vignettes/kriging.Rmd) ------------------------------------

kriging_data <- function(N) {
  set.seed(N)
  x <- matrix(runif(2 * N), N, 2)
  list(x = x, b = sin(4 * x[, 1]) * cos(3 * x[, 2]) + rnorm(N, sd = 0.5))
}
kriging_case <- function(N, prev = NULL, sigma = 0.1, alpha = 0.25) {
  label <- "Kriging CG, Gaussian sigma=0.1, alpha=0.25, eps=1e-4"
  size <- sprintf("N=%s D=2", num(N))
  if (!selected(paste(label, size))) return(prev)
  d <- kriging_data(N)
  xk <- keep(d$x)
  K <- exp(-sqdist(Vi(xk), Vj(xk)) / (2 * sigma^2))
  m <- measure(function() solve(K, d$b, alpha = alpha, eps = 1e-4, maxiter = 2000),
               predict_next(prev$m, prev$work, N^2))
  peer <- NULL
  check <- NULL
  if (is.null(m$skipped)) {
    a <- m$value
    res <- (K %*% a)[, 1] + alpha * a[, 1] - d$b
    check <- list(ok = sqrt(sum(res^2)) / sqrt(sum(d$b^2)) < 1e-3,
                  text = sprintf("%d CG iterations, relative residual %.1e", m$calls,
                                 sqrt(sum(res^2)) / sqrt(sum(d$b^2))))
    dense <- function() {
      G <- exp(-as.matrix(dist(d$x))^2 / (2 * sigma^2))
      diag(G) <- diag(G) + alpha
      solve(G, d$b)
    }
    # dense solve() is O(N^3): predicted from the previous size's peer
    peer <- measure_peer(dense, predicted = predict_next(prev$peer, prev$work_peer, N^3),
                         gb = 3 * N^2 * 8 / 1e9)
    if (!is.null(peer$value)) {
      err <- rel(a[, 1], peer$value)
      check$ok <- check$ok && err < 1e-2
      check$text <- sprintf("%s; vs dense solve(): relative difference %.1e", check$text, err)
    }
  }
  record(label, size, m, peer, "dense solve()", check)
  invisible(list(m = m, peer = peer, work = N^2, work_peer = N^3))
}

# ---- CPU goal rows: one K-means assignment, and the time outside the engine --------------------

assignment_case <- function(N = 5e6, D = 5, K = 10) {
  label <- "ArgMin over K centroids (one K-means assignment)"
  size <- sprintf("N=%s D=%d K=%s", num(N), D, num(K))
  if (!selected(paste(label, size))) return(invisible())
  set.seed(5)
  x <- matrix(runif(N * D), N, D)
  cent <- x[sample(N, K), ]
  op <- keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c(sprintf("x = Vi(%d)", D), sprintf("c = Vj(%d)", D)))
  dense <- function() max.col(-(rep(rowSums(cent^2), each = N) - 2 * tcrossprod(x, cent)), "first")
  peer <- measure_peer(dense, gb = 3 * N * K * 8 / 1e9)
  for (how in c("keops_kernel()", "LazyTensor")) {
    f <- if (how == "LazyTensor") function() argmin(sqdist(Vi(x), Vj(cent)), index = "j") else
      function() op(list(x, cent))
    m <- measure(f)
    check <- NULL
    if (!is.null(peer$value)) {
      d2 <- function(lab) rowSums((x - cent[lab, ])^2)
      gap <- max(d2(m$value[, 1]) - d2(peer$value))   # float32 may pick a nearly tied centroid
      check <- list(ok = gap < 1e-5, text = sprintf("chosen centroid's distance - dense R's minimum <= %.1e", gap))
    }
    record(paste(label, "via", how), size, m, peer, "dense R (tcrossprod + max.col)", check)
  }
}

# ---- run ---------------------------------------------------------------------------------------

t_start <- proc.time()[["elapsed"]]
emit(sprintf("# rkeops: whole iterative algorithms from R (bench/iterative.R)"))
emit("")
emit(sprintf("Backend %s (%s), float32, SIZES=%s, REPS=%g, BUDGET=%g s, PEER_GB=%g%s; %s; git %s; %s",
             backend, if (backend == "GPU") "see the message above" else
               paste(parallel::detectCores(), "cores,", sub("^model name\\s*:\\s*", "",
                     grep("^model name", readLines("/proc/cpuinfo", warn = FALSE), value = TRUE)[1])),
             sizes, max_reps, budget, peer_gb, if (nzchar(wanted)) paste0(", CASES='", wanted, "'") else "",
             R.version.string, git_version(), format(Sys.time(), "%Y-%m-%d %H:%M:%S %Z")))
emit(sprintf("Peers: mclust %s, stats::kmeans, dense solve() (%s)",
             if (has_pkg("mclust")) as.character(packageVersion("mclust")) else "not installed",
             sub(".*/", "", extSoftVersion()[["BLAS"]])))
emit("")

# GMM: the paper's Table 1 rows, the CPU goal row (K = 10)
invisible(gmm_case(1e5, 10, 5, label = "GMM EM diagonal, 10 it. (CPU goal row)"))
prev <- gmm_case(5e4, 100, 5)
prev <- gmm_case(5e5, 1e3, 5, prev)
if (full) gmm_case(5e6, 1e4, 5, prev)

# Sinkhorn: Table 6
if (selected("Sinkhorn")) {
  dense_err <- sinkhorn_dense_check()
  prev <- sinkhorn_case(1e4, dense_err = dense_err)
  prev <- sinkhorn_case(1e5, prev, dense_err)
  if (full) sinkhorn_case(1e6, prev, dense_err)
}
# Multiscale Sinkhorn: Table 6's multiscale column
prev <- multiscale_case(1e4)
prev <- multiscale_case(1e5, prev)
if (full) multiscale_case(1e6, prev)

# K-means: the CPU goal row is N = 1e6, D = 2, K = 50
prev <- kmeans_case(1e6, 2, 50)
prev <- kmeans_case(1e6, 10, 50, prev)
prev <- kmeans_case(1e6, 2, 1000, prev)
prev <- kmeans_case(1e6, 10, 1000, prev)

# Kriging: N = 5e3 also in full, so that dense solve() at 1e4 (O(N^3), minutes with a reference
# BLAS) is predicted from a measured size before it is run
prev <- kriging_case(5e3)
prev <- kriging_case(1e4, prev)
prev <- kriging_case(1e5, prev)

assignment_case()

# Landmarks: 400 L-BFGS iterations as the paper (full); 1 on the CPU (small)
landmark_case(env_num("LANDMARK_IT", if (full) 400 else 1))

# The cost of one cached call from R, what every iteration pays at least: a Gaussian kernel sum
# through keops_kernel(), median of 200 calls after a warm-up, at N = M = 1e3 and 1e4.
cached_calls <- character()
if (selected("cached call")) {
  gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
  for (n in c(1e3, 1e4)) {
    set.seed(n)
    x <- matrix(runif(3 * n), n, 3); y <- matrix(runif(3 * n), n, 3); b <- matrix(runif(n), n, 1)
    input <- list(x, y, b)
    invisible(gauss(input))
    # proc.time() has a resolution of about a millisecond: 200 calls timed together.
    whole <- system.time(for (k in 1:200) gauss(input))[["elapsed"]] / 200
    engine <- sum(rkeops:::last_run()$timings)
    cached_calls <- c(cached_calls, sprintf("cached call from R, Gaussian sum N = M = %s: %.3f ms per call (mean of 200), engine phases %.3f ms, on %s",
                                            num(n), 1e3 * whole, 1e3 * engine, rkeops:::last_run()$backend))
  }
}

# ---- the table ---------------------------------------------------------------------------------

fmt_s <- function(t) if (t >= 100) sprintf("%.0f", t) else if (t >= 1) sprintf("%.2f", t) else sprintf("%.3g", t)
emit("")
emit("| workload | size | total s (median) | runs | engine calls | kernels | R side s (per call ms) | peer | check |")
emit("|---|---|---|---|---|---|---|---|---|")
for (r in rows) {
  if (!is.null(r$note)) {
    emit(sprintf("| %s | %s | %s | | | | | | |", r$workload, r$size, r$note))
  } else {
    emit(sprintf("| %s | %s | %s | %d | %d | %.0f %% | %s (%.3f) | %s | %s |", r$workload, r$size,
                 fmt_s(r$total), r$reps, r$calls, 100 * r$kernel_share, fmt_s(r$r_side),
                 1e3 * r$per_call, r$peer, r$check))
  }
}
emit("")
for (line in cached_calls) emit(line)
emit("")
emit("Engine phases of the median run, seconds summed over its calls:")
emit("")
emit("| workload | size | phases |")
emit("|---|---|---|")
for (r in rows) if (is.null(r$note)) emit(sprintf("| %s | %s | %s |", r$workload, r$size, r$phases))
emit("")
emit(sprintf("Whole run: %.0f s.", proc.time()[["elapsed"]] - t_start))
if (nzchar(out_path)) writeLines(report, out_path)
if (length(failed)) {
  message("checks failed: ", paste(failed, collapse = "; "))
  quit(status = 1)
}

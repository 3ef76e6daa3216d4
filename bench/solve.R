# solve() on a LazyTensor (kriging with a Gaussian kernel) with and without the Nystrom
# preconditioner, and dense base::solve() where it fits, in one run. Run it with
#   make bench-solve [SIZES=1e4,5e4] [REPS=n] ...
# or R_LIBS=lib Rscript bench/solve.R from the repository root.
#   SIZES      the numbers of points N (default 1e4,5e4)
#   EPS        the tolerances of the conjugate gradients (default 1e-4, the kriging vignette's;
#              e.g. 1e-4,1e-6)
#   REPS       timed runs per median (default 3), after a warm-up on 2000 points
#   BUDGET     seconds per case (default 120): after the first timed run, runs stop when the
#              next one would end past the budget
#   PLAIN_MAX  largest N for plain conjugate gradients (default 5e4: about 400 products)
#   DENSE_MAX  largest N for dense base::solve() (default 1e4: O(N^3) in R's BLAS, one run)
#   RANKS      fixed ranks of the preconditioner to time too, e.g. 100,200,300,400,600
#              (default: none; "sweep" = 100,200,300,400,500,600)
#   BENCH_OUT  also write the report to this file
# The problem: N points uniform in the unit square, K = exp(-|x - y|^2 / (2 sigma^2)) with
# sigma = 0.1 (as bench/iterative.R's kriging case), alpha = 0.09, b = sin(4 x1) cos(3 x2) plus
# noise of deviation 0.5, float32 products on the CPU. Every solution is checked: its relative
# residual recomputed with one more product, and its distance to the dense solution where there
# is one. A failed check is marked FAIL and makes the script exit with status 1.
library(rkeops)

local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
env_nums <- function(name, default) as.numeric(strsplit(env_str(name, default), ",")[[1L]])
sizes <- env_nums("SIZES", "1e4,5e4")
eps_list <- env_nums("EPS", "1e-4")
max_reps <- env_nums("REPS", "3")
budget <- env_nums("BUDGET", "120")
plain_max <- env_nums("PLAIN_MAX", "5e4")
dense_max <- env_nums("DENSE_MAX", "1e4")
ranks_txt <- env_str("RANKS", "")
ranks <- if (ranks_txt == "sweep") c(100, 200, 300, 400, 500, 600) else if (nzchar(ranks_txt)) env_nums("RANKS", "") else numeric(0)
out_path <- env_str("BENCH_OUT", "")
sigma <- 0.1
alpha <- 0.09

rkeops_use_cpu()
rkeops_use_float32()

cpu_model <- function() {
  l <- tryCatch(grep("^model name", readLines("/proc/cpuinfo"), value = TRUE), error = function(e) character())
  if (length(l)) sub("^model name\\s*:\\s*", "", l[1L]) else "unknown CPU"
}
# 50000 -> "5e4", 2000 -> "2000"
num <- function(n) if (n >= 1e4) sub("e\\+0*", "e", sprintf("%.0e", n)) else sprintf("%.0f", n)

kriging_data <- function(N) {
  set.seed(N)
  x <- matrix(runif(2 * N), N, 2)
  list(x = x, b = sin(4 * x[, 1]) * cos(3 * x[, 2]) + rnorm(N, sd = 0.5))
}
kernel_of <- function(x) exp(-sqdist(Vi(x), Vj(x)) / (2 * sigma^2))

# Timed runs of f() until REPS or the budget (at least one); the median run.
measure <- function(f) {
  runs <- list()
  spent <- 0
  repeat {
    t0 <- proc.time()[["elapsed"]]
    v <- f()
    t <- proc.time()[["elapsed"]] - t0
    runs[[length(runs) + 1L]] <- list(value = v, time = t)
    spent <- spent + t
    if (length(runs) >= max_reps || spent + t > budget) break
  }
  times <- vapply(runs, function(r) r$time, 0)
  mid <- runs[[order(times)[ceiling(length(times) / 2)]]]
  list(value = mid$value, time = median(times), reps = length(runs), min = min(times), max = max(times))
}

rows <- list()
failed <- character()
record <- function(N, eps, method, m, check) {
  w <- m$value
  it <- attr(w, "iterations")
  rk <- attr(w, "rank")
  row <- list(N = N, eps = eps, method = method, time = m$time, reps = m$reps, spread = c(m$min, m$max),
              iterations = if (is.null(it)) NA else it, rank = if (is.null(rk)) NA else rk, check = check)
  rows[[length(rows) + 1L]] <<- row
  if (!check$ok) failed <<- c(failed, sprintf("%s N=%s eps=%g", method, num(N), eps))
  emit(sprintf("  N=%s eps=%g %s: %.3f s (median of %d, %.3f-%.3f)%s%s; %s%s", num(N), eps, method, m$time,
               m$reps, m$min, m$max, if (is.null(it)) "" else sprintf(", %d iterations", it),
               if (is.null(rk) || rk == 0) "" else sprintf(", rank %d", rk),
               if (check$ok) "ok: " else "FAIL: ", check$text))
}

t_start <- proc.time()[["elapsed"]]
emit("# solve() on LazyTensors: kriging by (preconditioned) conjugate gradients (bench/solve.R)")
emit("")
emit(sprintf("%s; git %s; %s, %d cores; R %s, BLAS %s; load average at the start %s",
             format(Sys.time(), "%Y-%m-%d %H:%M %Z"), git_version(), cpu_model(), parallel::detectCores(),
             getRversion(), basename(extSoftVersion()[["BLAS"]]), load_avg()))
emit(sprintf("Gaussian kernel sigma = %g, alpha = %g, points uniform in the unit square, float32 products on the CPU",
             sigma, alpha))
emit("")

# Warm-up: every formula the runs use, on 2000 points.
{
  d <- kriging_data(2000)
  K <- kernel_of(d$x)
  invisible(solve(K, d$b, alpha = alpha, eps = 1e-4))
  invisible(solve(K, d$b, alpha = alpha, eps = 1e-4, precond = "none"))
}

for (N in sizes) {
  d <- kriging_data(N)
  K <- kernel_of(d$x)
  bnorm <- sqrt(sum(d$b^2))
  dense <- NULL
  if (N <= dense_max) {
    t0 <- proc.time()[["elapsed"]]
    G <- exp(-as.matrix(dist(d$x))^2 / (2 * sigma^2))
    diag(G) <- diag(G) + alpha
    sol <- base::solve(G, d$b)
    t_dense <- proc.time()[["elapsed"]] - t0
    rm(G)
    invisible(gc())
    dense <- sol
    rows[[length(rows) + 1L]] <- list(N = N, eps = NA, method = "dense base::solve()", time = t_dense,
                                      reps = 1L, spread = c(t_dense, t_dense), iterations = NA, rank = NA,
                                      check = list(ok = TRUE, text = "the reference"))
    emit(sprintf("  N=%s dense base::solve(): %.1f s (one run, float64)", num(N), t_dense))
  }
  check <- function(w, eps) {
    res <- sqrt(sum((K %*% w + alpha * w - d$b)^2)) / bnorm
    # float32 products: the recomputed residual carries their rounding too
    ok <- is.finite(res) && res < max(2 * eps, 5e-5)
    text <- sprintf("residual %.1e (reported %.1e)", res, attr(w, "residual"))
    if (!is.null(dense)) {
      err <- sqrt(sum((w - dense)^2) / sum(dense^2))
      ok <- ok && err < 1e3 * max(eps, 1e-5)
      text <- sprintf("%s, %.1e from the dense solution", text, err)
    }
    list(ok = ok, text = text)
  }
  for (eps in eps_list) {
    m <- measure(function() solve(K, d$b, alpha = alpha, eps = eps, maxiter = 5000, info = TRUE))
    record(N, eps, "Nystrom, automatic rank", m, check(m$value, eps))
    for (rk in ranks) {
      m <- measure(function() solve(K, d$b, alpha = alpha, eps = eps, maxiter = 5000, rank = rk, info = TRUE))
      record(N, eps, sprintf("Nystrom, rank %d", rk), m, check(m$value, eps))
    }
    if (N <= plain_max) {
      m <- measure(function() solve(K, d$b, alpha = alpha, eps = eps, maxiter = 5000, precond = "none", info = TRUE))
      record(N, eps, "plain conjugate gradients", m, check(m$value, eps))
    }
  }
}

fmt_s <- function(t) if (t >= 100) sprintf("%.0f", t) else if (t >= 1) sprintf("%.2f", t) else sprintf("%.3f", t)
emit("")
emit("| N | eps | method | time s (median) | runs (min-max s) | iterations | rank | check |")
emit("|---|---|---|---|---|---|---|---|")
for (r in rows) {
  emit(sprintf("| %s | %s | %s | %s | %d (%s-%s) | %s | %s | %s%s |", num(r$N), if (is.na(r$eps)) "" else format(r$eps),
               r$method, fmt_s(r$time), r$reps, fmt_s(r$spread[1]), fmt_s(r$spread[2]),
               if (is.na(r$iterations)) "" else r$iterations, if (is.na(r$rank) || r$rank == 0) "" else r$rank,
               if (r$check$ok) "ok: " else "FAIL: ", r$check$text))
}
emit("")
emit(sprintf("Whole run: %.0f s; load average at the end %s.", proc.time()[["elapsed"]] - t_start, load_avg()))
if (nzchar(out_path)) writeLines(report, out_path)
if (length(failed)) {
  message("checks failed: ", paste(failed, collapse = "; "))
  quit(status = 1)
}

# The future path (issue 18): a Gaussian kernel sum split over the workers of
# plan(multisession, workers = W) by rkeops_use_future(), against one process computing with W
# threads (the option ncore), on the CPU, with the same data. Run it with
#   make bench-future [REPS=n] [N=1e5] [WORKERS=2] [BENCH_OUT=file.md]
# or R_LIBS=lib Rscript bench/future.R from the repository root. It needs the installed package
# and the R packages future and future.apply.
#   N          points x_i and y_j (N = M; default 1e5), D = 3, float32 (the default precision)
#   WORKERS    workers of the plan and threads of the one process (default 2)
#   REPS       timed runs per median (default 3), after a warm-up run of each
#   BENCH_OUT  also write the report to this file
# The case: a_i = sum_j exp(-|x_i - y_j|^2 / (2 sigma^2)) b_j, x, y uniform in the unit cube,
# sigma = 0.1, b normal. The goal (issue 18): the future path within 15 % of the one process
# (median time ratio <= 1.15), timed on a plan whose sockets are made as they are by default and
# on one made with options(socketOptions = "no-delay") (see ?rkeops_use_future, "Cost"). The
# results are checked against the one process's (max relative difference); the checks and the goal
# are marked PASS or FAIL, a failed check makes the script exit with status 1. The plan's start-up
# (the workers' R sessions) is timed apart, not in the medians: a session starts its plan once and
# runs many reductions on it.
suppressPackageStartupMessages(library(rkeops))

local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
n <- env_num("N", 1e5)
workers <- env_num("WORKERS", 2)
reps <- env_num("REPS", 3)
out_path <- env_str("BENCH_OUT", "")
stopifnot(n >= 2, workers >= 1, reps >= 1)
for (p in c("future", "future.apply")) {
  if (!requireNamespace(p, quietly = TRUE)) stop("bench/future.R needs the R package ", p)
}

rkeops_use_cpu(ncore = workers)
rkeops_use_float32()
rkeops_disable_verbosity()
set.seed(1)
x <- matrix(runif(3 * n), n, 3)
y <- matrix(runif(3 * n), n, 3)
b <- matrix(rnorm(n), n, 1)
s <- 1 / (2 * 0.1^2)
gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
                      c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
run <- function() gauss(list(x, y, b, s))

# Median elapsed seconds of `reps` runs after a warm-up, and the last result.
timed <- function() {
  value <- run()
  secs <- vapply(seq_len(reps), function(r) {
    t <- system.time(value <<- run())[["elapsed"]]
    t
  }, 0)
  list(median = stats::median(secs), runs = secs, value = value)
}

emit("# rkeops: the future path (bench/future.R)")
emit("")
emit(sprintf("%s, commit %s, %d cores (parallel::detectCores()), load average %s at the start",
             format(Sys.time(), "%Y-%m-%d %H:%M %Z"), git_version(), parallel::detectCores(), load_avg()))
emit(sprintf("Gaussian sum, N = M = %g, D = 3, float32, CPU; %d reps after a warm-up; future %s, future.apply %s",
             n, reps, utils::packageVersion("future"), utils::packageVersion("future.apply")))
emit("")

one <- timed()
one_backend <- rkeops:::last_run()$backend

# The future path on a fresh plan; `no_delay`: its sockets made with TCP_NODELAY (the option
# socketOptions, read when plan() starts the workers), as ?rkeops_use_future advises.
split_case <- function(no_delay) {
  old_opt <- options(socketOptions = if (no_delay) "no-delay" else NULL)
  start <- system.time(future::plan(future::multisession, workers = workers))[["elapsed"]]
  options(old_opt)
  on.exit(future::plan(future::sequential), add = TRUE)
  old <- rkeops_use_future()
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  res <- timed()
  c(res, list(start = start, run = rkeops:::last_run(),
              diff = max(abs(res$value - one$value)) / max(abs(one$value))))
}
cases <- list(default = split_case(FALSE), no_delay = split_case(TRUE))

fmt_runs <- function(r) paste(sprintf("%.3f", r), collapse = ", ")
label <- c(default = "default sockets", no_delay = "options(socketOptions = \"no-delay\")")
emit("| case | median (s) | runs (s) | ratio to one process |")
emit("|---|---|---|---|")
emit(sprintf("| one process, %d threads (ncore = %d) | %.3f | %s | 1 |", workers, workers, one$median,
             fmt_runs(one$runs)))
for (name in names(cases)) {
  case <- cases[[name]]
  emit(sprintf("| plan(multisession, workers = %d), rkeops_use_future(), %s | %.3f | %s | %.3f |", workers,
               label[[name]], case$median, fmt_runs(case$runs), case$median / one$median))
}
emit("")
failed <- FALSE
for (name in names(cases)) {
  case <- cases[[name]]
  ratio <- case$median / one$median
  emit(sprintf("%s: ratio future / one process %.3f (goal <= 1.15): %s; plan start-up %.2f s (not in the ",
               label[[name]], ratio, if (ratio <= 1.15) "PASS" else "FAIL", case$start),
       sprintf("medians); %s computed by %d worker processes; check: max |future - one process| / ",
               sub(":.*", "", case$run$backend), length(case$run$processes)),
       sprintf("max |one process| = %.2g: %s", case$diff, if (case$diff < 1e-5) "PASS" else "FAIL"))
  failed <- failed || case$diff >= 1e-5
}
emit(sprintf("engine backend: %s; load average %s at the end", one_backend, load_avg()))
if (nzchar(out_path)) writeLines(report, out_path)
if (failed) quit(status = 1)

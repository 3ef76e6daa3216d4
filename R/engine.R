# The bridge to the engine's binding: the options of a call, its errors (rust_result()), and what
# it ran (last_run(), phase_totals()). Every call of the engine goes through these, so that each
# takes the options in force the same way and is recorded the same way.

# The settings of an engine call from the options in force: the precision, the threads (0: the
# engine uses every core; parallel::detectCores() would cost a millisecond a call), the backend,
# the devices, and the kernel cache directory ("" for the CPU backend, which compiles nothing).
engine_options <- function() {
  opts <- .rkeops_env$options
  list(precision = opts$precision, threads = if (is.null(opts$ncore)) 0L else opts$ncore,
       backend = opts$backend, device = opts$device,
       cache_dir = if (opts$backend == "CPU") "" else kernel_cache_dir())
}

# Records an engine call (or several, summed): what computed it and the seconds of each phase, for
# last_run() (with the fields `...`) and phase_totals().
record_run <- function(backend, timings, ...) {
  .rkeops_env$last_run <- list(backend = backend, timings = timings, ...)
  if (!is.null(.rkeops_env$phase_log)) log_phases(timings)
}

# The Rust side reports failures as list(error = message, kind, arg): raised as the rkeops error of
# that kind (see checks.R; Ctrl-C, kind "interrupt", is also a condition that tryCatch(interrupt = )
# catches like R's own). `fun`: the R function whose name starts the message ("fun(): message").
rust_result <- function(res, fun = NULL) {
  # (a value that is not a list, an external pointer, is a success)
  if (!is.list(res) || is.null(res$error)) return(res)
  rkeops_abort(if (!is.null(fun)) paste0(fun, "(): "), res$error, kind = res$kind, arg = res$arg)
}

# What computed the last reduction, and the seconds spent in each of its phases (conversion,
# compilation, transfers, kernel, ...): a tool for benchmarks and for checking the backend.
last_run <- function() .rkeops_env$last_run

# Evaluates `expr` and returns list(value, calls, phases): the number of reductions it ran and the
# seconds of each engine phase summed over them, by name (the names are the engine's; they differ
# between backends). For benchmarks of whole algorithms (bench/iterative.R). Nested uses: the inner
# one counts its calls only.
phase_totals <- function(expr) {
  log <- new.env(parent = emptyenv())
  log$calls <- 0L
  log$phases <- numeric(0)
  old <- .rkeops_env$phase_log
  .rkeops_env$phase_log <- log
  on.exit(.rkeops_env$phase_log <- old)
  value <- expr
  list(value = value, calls = log$calls, phases = log$phases)
}

log_phases <- function(timings) {
  log <- .rkeops_env$phase_log
  log$calls <- log$calls + 1L
  for (name in names(timings)) {
    before <- log$phases[name]
    log$phases[name] <- if (is.na(before)) timings[[name]] else before + timings[[name]]
  }
}

# rkeops_cache_dir() costs tens of microseconds (tools::R_user_dir()); it is computed again only
# when one of the environment variables it depends on changes.
kernel_cache_dir <- function() {
  env <- Sys.getenv(c("RKEOPS_CACHE_DIR", "R_USER_CACHE_DIR", "XDG_CACHE_HOME", "HOME"))
  memo <- .rkeops_env$cache_dir_memo
  if (is.null(memo) || !identical(memo$env, env)) {
    memo <- list(env = env, dir = rkeops_cache_dir())
    .rkeops_env$cache_dir_memo <- memo
  }
  memo$dir
}

# The bridge to the engine's binding: the options of a call, its errors (rust_result()), and what
# it ran (last_run(), phase_totals()). Every call of the engine goes through these, so that each
# takes the options in force the same way and is recorded the same way.

# The settings of an engine call from the options in force: the precision, the threads (0: the
# engine uses every core; parallel::detectCores() would cost a millisecond a call), the backend,
# the devices, and the kernel cache directory ("" for the CPU backend, which compiles nothing).
# `progress`: the seconds after which the engine makes a progress bar, -1 for none (progress_delay()).
engine_options <- function() {
  opts <- .rkeops_env$options
  list(precision = opts$precision, threads = if (is.null(opts$ncore)) 0L else opts$ncore,
       backend = opts$backend, device = opts$device,
       cache_dir = if (opts$backend == "CPU") "" else kernel_cache_dir(), progress = progress_delay())
}

# Whether long calls show a progress bar: option `rkeops.progress`, NA (the default) in interactive
# sessions only, TRUE always, FALSE never (documented in ?rkeops, section Progress bars).
progress_wanted <- function() {
  on <- getOption("rkeops.progress")
  if (isTRUE(on)) TRUE else if (isFALSE(on)) FALSE else interactive()
}

# The engine's progress option: -1 (no bar) unless bars are wanted and no loop in R shows its own
# (loop_progress()); else the seconds a call runs before the engine makes its bar (making one costs
# about 0.2 ms, so calls shorter than 0.1 s make none; cli shows a bar only after
# `cli.progress_show_after`, 2 s by default, anyway). About a microsecond a call.
progress_delay <- function() {
  if (!progress_wanted() || !is.null(.rkeops_env$progress_loop)) return(-1)
  min(0.1, getOption("cli.progress_show_after", 2))
}

# A cli progress bar for a loop in R (the conjugate gradients, the evaluations of optim()): returns
# list(set = function(done), done = function()); the caller ends it with on.exit(bar$done(), add =
# TRUE) (cli also ends it when `env`, the caller's frame, exits). While it runs, the engine's calls
# make no bar of their own. Functions that do nothing when bars are not wanted or another loop
# already shows one.
loop_progress <- function(total, name, env = parent.frame()) {
  if (!is.null(.rkeops_env$progress_loop) || !progress_wanted()) {
    return(list(set = function(done, total = NULL) invisible(), done = function() invisible(), shown = FALSE))
  }
  id <- cli::cli_progress_bar(name = name, total = total, .envir = env)
  .rkeops_env$progress_loop <- id
  # (`total`: a new total, for loops whose length becomes known as they run)
  list(set = function(done, total = NULL) cli::cli_progress_update(set = done, total = total, id = id, .envir = env),
       shown = TRUE,
       done = function() {
         if (identical(.rkeops_env$progress_loop, id)) .rkeops_env$progress_loop <- NULL
         cli::cli_progress_done(id = id, .envir = env)
       })
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

# Evaluates `expr` and returns list(value, calls, phases, engine): the number of reductions it ran,
# the seconds of each engine phase summed over them, by name, and the engine's seconds in all
# (`engine_seconds()`; the names are the engine's; they differ between backends). For benchmarks
# of whole algorithms (bench/iterative.R). Nested uses: the inner one counts its calls only.
phase_totals <- function(expr) {
  log <- new.env(parent = emptyenv())
  log$calls <- 0L
  log$phases <- numeric(0)
  log$engine <- 0
  old <- .rkeops_env$phase_log
  .rkeops_env$phase_log <- log
  on.exit(.rkeops_env$phase_log <- old)
  value <- expr
  list(value = value, calls = log$calls, phases = log$phases, engine = log$engine)
}

# The seconds a call spent in the engine: its phases, but for a program (or its gradient) only
# the outer ones (its steps' phases are within its loop).
engine_seconds <- function(timings) {
  outer <- c("upload once", "loop", "forward and backward", "download once")
  if (any(names(timings) %in% outer[2:3])) sum(timings[names(timings) %in% outer]) else sum(timings)
}

log_phases <- function(timings) {
  log <- .rkeops_env$phase_log
  log$calls <- log$calls + 1L
  log$engine <- log$engine + engine_seconds(timings)
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

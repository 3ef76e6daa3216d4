# Progress bars (option rkeops.progress; cli): forced, a long CPU reduction and a program of several
# iterations report their updates up to the total, with unchanged results; off, and by default in a
# non-interactive session, nothing is printed. cli's "logger" handler prints one line per event of a
# bar: "<time> <id> <current>/<total> <event>". cli updates a bar made by compiled code when its
# timer ticks: every 3 s in a non-interactive session, unless CLI_TICK_TIME (ms) says otherwise when
# cli is loaded; the bars of compiled code are therefore checked in a child R process.

# The events of the progress bars in `printed` (a data frame: id, current, total, event).
bar_events <- function(printed) {
  lines <- grep("^\\S+ cli-\\S+ [0-9NA]+/[0-9NA]+ ", printed, value = TRUE)
  parts <- regmatches(lines, regexec("^\\S+ (cli-\\S+) ([0-9NA]+)/([0-9NA]+) (.*)$", lines))
  field <- function(k) vapply(parts, `[`, "", k)
  data.frame(id = field(2), current = suppressWarnings(as.numeric(field(3))),
             total = suppressWarnings(as.numeric(field(4))), event = field(5))
}

# What is printed while `expr` runs (output and messages), bars shown by the logger at once, with
# the value of `expr`.
progress_events <- function(expr, progress) {
  old <- options(rkeops.progress = progress, cli.progress_show_after = 0, cli.progress_throttle = 0,
                 cli.progress_handlers_only = "logger")
  on.exit(options(old), add = TRUE)
  printed <- utils::capture.output(messages <- utils::capture.output(value <- expr, type = "message"))
  printed <- c(printed, messages)
  list(value = value, events = bar_events(printed), printed = printed)
}

# A bar updated before its end, with counts that never decrease, ended at its total.
expect_bar_to_its_total <- function(events, info) {
  expect_true(any(events$event %in% c("updated", "added") & events$current < events$total), info = info)
  expect_false(is.unsorted(events$current), info = info)
  last <- events[nrow(events), ]
  expect_match(last$event, "^terminated", info = info)
  expect_equal(last$current, last$total, info = info)
  expect_gt(last$total, 1)
}

test_that("a long CPU reduction, a program and its gradient show their bars up to their totals (child process)", {
  script <- tempfile(fileext = ".R")
  writeLines(c(
    'library(rkeops)',
    'options(rkeops.progress = TRUE, cli.progress_show_after = 0, cli.progress_handlers_only = "logger")',
    '# (one thread: several polls of the engine, 10 ms apart, on any machine)',
    'rkeops_use_cpu(ncore = 1)',
    'set.seed(1)',
    'n <- 2e4; x <- matrix(runif(3 * n), n, 3); b <- runif(n)',
    'op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))',
    'cat("CPU\n"); on <- op(list(x, x, b))',
    'options(rkeops.progress = FALSE); off <- op(list(x, x, b)); options(rkeops.progress = TRUE)',
    'cat(sprintf("cpu_same=%s\n", identical(on, off)))',
    'n <- 3000; x <- matrix(runif(2 * n), n, 2)',
    'step <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * v / 3000, 0)", c("x = Vi(2)", "y = Vj(2)", "v = Vj(1)"))',
    'program <- keops_program(list(v = step), iterations = 40, output = "v")',
    'cat("PROGRAM\n"); on <- program(list(x = x, y = x, v = rep(1, n)))',
    'options(rkeops.progress = FALSE); off <- program(list(x = x, y = x, v = rep(1, n)))',
    'cat(sprintf("program_same=%s\n", identical(on, off)))',
    'options(rkeops.progress = TRUE)',
    'cat("GRADIENT\n"); on <- keops_program_grad(program, list(x = x, y = x, v = rep(1, n)), of = "v", wrt = "v")',
    'options(rkeops.progress = FALSE); off <- keops_program_grad(program, list(x = x, y = x, v = rep(1, n)), of = "v", wrt = "v")',
    'cat(sprintf("gradient_same=%s\n", identical(on, off)))'
  ), script)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE,
                                  env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")), "CLI_TICK_TIME=5"),
                                  timeout = 120))
  log <- paste(out, collapse = "\n")
  at <- match(c("CPU", "PROGRAM", "GRADIENT"), out)
  expect_false(anyNA(at), info = log)
  cpu <- bar_events(out[seq(at[1], at[2])])
  program <- bar_events(out[seq(at[2], at[3])])
  gradient <- bar_events(out[-seq_len(at[3])])
  expect_length(unique(cpu$id), 1)
  expect_bar_to_its_total(cpu, log)               # blocks of rows
  expect_length(unique(program$id), 1)
  expect_bar_to_its_total(program, log)
  expect_equal(program$total[1], 40)              # iterations, not the steps' blocks of rows
  expect_true(any(out == "cpu_same=TRUE"), info = log)
  expect_true(any(out == "program_same=TRUE"), info = log)
  expect_length(unique(gradient$id), 1)
  expect_bar_to_its_total(gradient, log)
  expect_equal(gradient$total[1], 80)             # the iterations forward, then backward
  expect_true(any(out == "gradient_same=TRUE"), info = log)
})

gauss_sum <- function(x, b) {
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
  op(list(x, x, b))
}

test_that("no bar when the option is FALSE, nor by default in a non-interactive session", {
  old <- rkeops_use_cpu()
  on.exit(set_rkeops_options(backend = old$backend), add = TRUE)
  set.seed(1)
  n <- 1e4
  x <- matrix(runif(3 * n), n, 3)
  b <- runif(n)
  off <- progress_events(gauss_sum(x, b), FALSE)
  expect_identical(off$printed, character())
  default <- progress_events(gauss_sum(x, b), NA)
  expect_identical(default$printed, character())
  expect_identical(off$value, default$value)
  step <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * v / 3000, 0)", c("x = Vi(3)", "y = Vj(3)", "v = Vj(1)"))
  run <- function() keops_program(list(v = step), iterations = 5, output = "v")(list(x = x, y = x, v = b))
  expect_identical(progress_events(run(), FALSE)$printed, character())
  expect_identical(progress_events(run(), NA)$printed, character())
})

test_that("solve()'s conjugate gradients show one bar (cli's R API), their reductions none", {
  set.seed(3)
  n <- 200
  x <- matrix(runif(n), n, 1)
  K <- exp(-rkeops::sqdist(Vi(x), Vj(x)) / 0.1)
  b <- runif(n)
  on <- progress_events(solve(K, b, alpha = 1, eps = 1e-8, precond = "none", info = TRUE), TRUE)
  expect_length(unique(on$events$id), 1)
  expect_identical(on$events$event[1], "created")
  expect_match(on$events$event[nrow(on$events)], "^terminated")
  expect_equal(on$events$total[1], 10 * n)                    # maxiter
  expect_equal(max(on$events$current), attr(on$value, "iterations"))
  expect_null(rkeops:::.rkeops_env$progress_loop)           # ended: engine bars allowed again
  off <- progress_events(solve(K, b, alpha = 1, eps = 1e-8, precond = "none"), FALSE)
  expect_identical(off$printed, character())
})

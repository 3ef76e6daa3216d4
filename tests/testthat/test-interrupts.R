# Ctrl-C during a long computation, in a separate R process (the signal goes to that process): the
# call ends with an interrupt condition within a second, and the session goes on computing right. On
# the GPU, where a kernel runs to its end once launched, the engine cuts a long reduction into steps of
# a fraction of a second and asks between them.

# The child's script: `use` selects the backend; n x m pairs in float64.
interrupt_child <- function(use, n, m, progress = FALSE) c(
  'library(rkeops)',
  use,
  # (a progress bar forced, shown at once and updated every 5 ms: Ctrl-C works as without)
  if (progress) 'options(rkeops.progress = TRUE, cli.progress_show_after = 0)',
  'rkeops_use_float64()',
  'op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))',
  'set.seed(1)',
  sprintf('n <- %g; m <- %g', n, m),
  'x <- matrix(runif(3 * n), n); y <- matrix(runif(3 * m), m); b <- runif(m)',
  'invisible(op(list(x[1:7, ], y[1:29, ], b[1:29])))   # (compiles the GPU kernel before the clock)',
  'stamp <- tempfile()',
  'system(sprintf("(sleep 1; date +%%s.%%N > %s; kill -INT %d) &", stamp, Sys.getpid()))',
  'classes <- NA',
  'res <- tryCatch({ op(list(x, y, b)); "finished" },',
  '                interrupt = function(e) { classes <<- paste(class(e), collapse = ","); conditionMessage(e) })',
  'stopped <- as.numeric(Sys.time())',
  'sent <- as.numeric(readLines(stamp))',
  'small <- op(list(x[1:7, ], y[1:29, ], b[1:29]))',
  'd2 <- outer(rowSums(x[1:7, ]^2), rowSums(y[1:29, ]^2), "+") - 2 * x[1:7, ] %*% t(y[1:29, ])',
  'cat(sprintf("result=%s\\nclasses=%s\\nlatency=%.4f\\nsmall_error=%.3g\\n", res, classes, stopped - sent,',
  '            max(abs(small - exp(-d2) %*% b[1:29]))))'
)

expect_interrupted_within_a_second <- function(script_lines, env = character()) {
  script <- tempfile(fileext = ".R")
  writeLines(script_lines, script)
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE,
                                  env = c(paste0("R_LIBS=", paste(.libPaths(), collapse = ":")), env),
                                  timeout = 600))
  value <- function(key) {
    line <- grep(paste0("^", key, "="), out, value = TRUE)
    if (length(line) == 1L) sub("^[a-z_]+=", "", line) else NA_character_
  }
  log <- paste(out, collapse = "\n")
  expect_identical(value("result"), "interrupted by the user", info = log)
  # an rkeops error of kind interrupt, which tryCatch(interrupt = ) catches (?rkeops_errors)
  expect_identical(value("classes"), "rkeops_error_interrupt,rkeops_error,interrupt,error,condition", info = log)
  expect_lt(as.numeric(value("latency")), 1, label = paste("seconds from SIGINT to the end of the call:", log))
  expect_lt(as.numeric(value("small_error")), 1e-12, label = log)
}

test_that("Ctrl-C stops a long CPU computation within a second, and R goes on", {
  # 1e11 pairs: a minute or more on any CPU, unless interrupted.
  expect_interrupted_within_a_second(interrupt_child("rkeops_use_cpu()", 5e4, 2e6))
})

test_that("Ctrl-C stops a long CPU computation within a second with a progress bar shown", {
  expect_interrupted_within_a_second(interrupt_child("rkeops_use_cpu()", 5e4, 2e6, progress = TRUE),
                                     env = "CLI_TICK_TIME=5")
})

test_that("Ctrl-C stops a long GPU computation within a second, and R goes on", {
  gpu <- rkeops:::gpu_status(0L)
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): interrupting a GPU computation is not checked here")
    return(expect_match(gpu$message, "[a-z]"))
  }
  # 1e13 pairs in float64: a minute or more on an H100, unless interrupted.
  expect_interrupted_within_a_second(interrupt_child("rkeops_use_gpu()", 1e6, 1e7))
  # shared by two GPUs (GPU 0 twice where there is one): every GPU stops
  expect_interrupted_within_a_second(interrupt_child("rkeops_use_gpu(device = c(0, 0))", 1e6, 1e7))
})

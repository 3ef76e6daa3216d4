# Helpers of the tests of rkeops_use_future() (test-future.R, test-future-algorithms.R).

# The tests that run futures need the Suggests packages future and future.apply (CI installs them
# and fails when a test is skipped: tools/run-tests.R).
skip_without_future <- function() {
  skip_if_not_installed("future")
  skip_if_not_installed("future.apply")
}

# Sets the plan, its sockets made with TCP_NODELAY (the option socketOptions, read when plan()
# starts the workers): without it each call waits for TCP's delayed acknowledgements (~0.2 s here).
start_plan <- function(strategy, ...) {
  old <- options(socketOptions = "no-delay")
  on.exit(options(old))
  future::plan(strategy, ...)
}

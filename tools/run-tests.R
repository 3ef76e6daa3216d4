# Run the testthat suite against the installed rkeops (R_LIBS=lib) and print
# a summary line "N passed, N failed". Exits with status 1 when a test fails,
# errors (errors count as failures) or is skipped (see below), 0 otherwise.
#
# Usage: R_LIBS=lib Rscript tools/run-tests.R [tests/testthat]

args <- commandArgs(trailingOnly = TRUE)
test_path <- if (length(args) >= 1L) args[[1L]] else "tests/testthat"

res <- tryCatch(
  testthat::test_dir(
    test_path,
    package = "rkeops",
    load_package = "installed",
    reporter = testthat::SummaryReporter$new(show_praise = FALSE),
    stop_on_failure = FALSE
  ),
  error = function(e) {
    # An error outside any test_that() block (e.g. in a helper file, or the
    # package failing to load).
    cat("\nError while running the tests: ", conditionMessage(e), "\n",
        sep = "")
    NULL
  }
)

if (is.null(res)) {
  n_passed <- 0L
  n_failed <- 1L
  n_skipped <- 0L
} else {
  df <- as.data.frame(res)
  if (nrow(df) == 0L) {
    n_passed <- 0L
    n_failed <- 0L
    n_skipped <- 0L
  } else {
    # One row per test_that() block: nb expectations (an error that ended
    # the block excluded), failed expectations, skipped (logical), error
    # (logical: the block stopped on an error), warning (count), and, in
    # recent testthat versions, passed.
    failed <- as.integer(df$failed)
    errored <- as.integer(as.logical(df$error))
    skipped <- as.integer(as.logical(df$skipped))
    if ("passed" %in% names(df)) {
      passed <- as.integer(df$passed)
    } else {
      warned <- if ("warning" %in% names(df)) as.integer(df$warning) else 0L
      passed <- pmax(as.integer(df$nb) - failed - skipped - warned, 0L)
    }
    n_passed <- sum(passed)
    n_failed <- sum(failed) + sum(errored)
    n_skipped <- sum(skipped)
  }
}

cat("\n")
# A skipped test is a test CI did not run: `make deps` installs every Suggests package the tests
# use, so here (CI's command) a skip fails the run, unless RKEOPS_ALLOW_SKIPS=true (a machine
# that lacks a Suggests package on purpose, to see the tests skip rather than error).
allow_skips <- identical(tolower(Sys.getenv("RKEOPS_ALLOW_SKIPS")), "true")
if (n_skipped > 0L) {
  cat(n_skipped, " skipped", if (!allow_skips) " (a failure here: install the Suggests packages, see `make deps`)",
      "\n", sep = "")
}
cat(n_passed, " passed, ", n_failed, " failed\n", sep = "")
quit(save = "no", status = if (n_failed > 0L || n_skipped > 0L && !allow_skips) 1L else 0L)

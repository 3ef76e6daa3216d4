# No .Call entry of the package may end the R process, whatever it is given: scripts/scan-entries.R
# calls each one as the package does, then again with each argument (and each element of a list
# argument) replaced by hostile values (0 iterations, empty buffers, wrong types, NULL, NA sizes,
# huge sizes), in a child R process that must reach its end.

test_that("no .Call entry aborts R, whatever its arguments (a scan in a child R process)", {
  log <- tempfile(fileext = ".log")
  out <- suppressWarnings(system2(file.path(R.home("bin"), "Rscript"),
                                  c("--vanilla", test_path("scripts", "scan-entries.R"), log),
                                  stdout = TRUE, stderr = TRUE,
                                  env = paste0("R_LIBS=", paste(.libPaths(), collapse = ":")), timeout = 600))
  last <- if (file.exists(log)) tail(readLines(log), 1L) else "(no log)"
  expect_null(attr(out, "status"), label = paste("the exit status of the scan; its last call:", last))
  expect_true("scan: done" %in% out, label = paste(c("the scan reached its end; last call:", last, tail(out, 5L)),
                                                      collapse = "\n"))
  counts <- regmatches(out, regexec("^scan: ([0-9]+) entries, ([0-9]+) with plausible arguments, ([0-9]+) calls", out))
  counts <- as.integer(unlist(Filter(length, counts))[-1L])
  # every entry was called, most of them as the package calls them (the others need a GPU's objects)
  expect_gte(counts[1L], 20L)
  expect_gte(counts[2L], counts[1L] - 2L)
  expect_gt(counts[3L], 5000L)
})

test_that("a program of 0 iterations returns its initial buffers or names what has no value", {
  half <- keops_map("x * 0.5", "x = Vi(1)")
  e <- tryCatch(keops_program(list(y = half), iterations = 0)(list(x = matrix(c(1, 2, 3)))),
                rkeops_error = function(e) e)
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, "iterations")
  expect_match(conditionMessage(e), "buffer 'y' has no initial value")
  x <- matrix(c(1, 2, 3))
  res <- keops_program(list(x = half), iterations = 0, trace = "x")(list(x = x))
  expect_identical(res$x, x)
  expect_identical(attr(res, "iterations"), 0L)
  expect_identical(dim(attr(res, "trace")$x), c(0L, 3L))
  # one iteration: the trace has the width of the buffer too
  res <- keops_program(list(x = half), iterations = 1, trace = "x")(list(x = x))
  expect_equal(attr(res, "trace")$x, t(x / 2))
})

test_that("a program refuses an input or schedule name that no step reads (a misspelt name was ignored)", {
  p <- keops_program(list(y = keops_map("x * w", c("x = Vi(1)", "w = Pm(1)"))), iterations = 2)
  x <- matrix(c(1, 2, 3))
  expect_equal(p(list(x = x, w = 2))$y, x * 2)
  e <- tryCatch(p(list(x = x, w = 2), schedule = list(W = c(1, 2))), rkeops_error = function(e) e)
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, "schedule")
  expect_match(conditionMessage(e), "'W' is not a buffer of the program")
  e <- tryCatch(p(list(x = x, w = 2, z = 5)), rkeops_error = function(e) e)
  expect_identical(e$arg, "input")
  expect_match(conditionMessage(e), "'z' is not a buffer of the program")
  # a one-step program of one iteration (a plain call) checks them too
  one <- keops_program(list(y = keops_map("x * w", c("x = Vi(1)", "w = Pm(1)"))))
  expect_error(one(list(x = x, w = 2, z = 5)), "'z' is not a buffer", class = "rkeops_error_input")
  expect_error(keops_program_grad(p, list(x = x, w = 2, z = 1), of = "y", wrt = "x"), "'z' is not a buffer",
               class = "rkeops_error_input")
})

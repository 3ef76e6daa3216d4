# The classes of rkeops' errors (?rkeops_errors): one case of each kind, from R's checks and from the
# engine, with its class vector, its `arg` field where it has one, and its whole message. The other
# test files match errors by class; the messages are checked here.

# The condition `expr` raises (NULL if none).
condition_of <- function(expr) tryCatch({ force(expr); NULL }, error = function(e) e)

expect_rkeops_error <- function(e, kind, message, arg = NULL) {
  base <- if (kind == "interrupt") c("interrupt", "error") else "error"
  expect_identical(class(e), c(paste0("rkeops_error_", kind), "rkeops_error", base, "condition"))
  expect_identical(conditionMessage(e), message)
  expect_identical(e$arg, arg)
  expect_null(conditionCall(e))
}

test_that("formula errors: parse errors and bad declarations, from the engine", {
  e <- condition_of(keops_kernel("Sum_Reduction(Exp(-x)*, 0)", "x = Vi(1)"))
  expect_rkeops_error(e, "formula", paste0(
    "formula parse error at position 23: expected a number, a variable, a function call or '(', found ','\n",
    "  Sum_Reduction(Exp(-x)*, 0)\n",
    "                        ^"))
  e <- condition_of(keops_kernel("Sum_Reduction(x, 0)", "x = Vk(1)"))
  expect_s3_class(e, "rkeops_error_formula")
  expect_match(conditionMessage(e), "^argument declaration 1 \\(\"x = Vk\\(1\\)\"\\): ")
  # and from R: the gradient forms are read in R
  e <- condition_of(keops_kernel("Grad(Sum_Reduction(x, 0), x)", "x = Vi(1)"))
  expect_rkeops_error(e, "formula", "Grad() takes 3 arguments: Grad(reduction, variable, gradient input), not 2")
})

test_that("input errors name the argument or input: R's checks, the binding's and the engine's", {
  op <- keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  # R: an argument of a function, and an input of an operator
  e <- condition_of(keops_knn(matrix(runif(30), 10), k = 2.5))
  expect_rkeops_error(e, "input", "keops_knn(): 'k' must be a whole number >= 1", arg = "k")
  e <- condition_of(op(list(x = matrix(1, 2, 3), y = "a")))
  expect_rkeops_error(e, "input", "input 'y' must be a numeric matrix with 3 columns (Vj(3)), not character",
                      arg = "y")
  # the engine: an input that does not fit its declaration ...
  e <- condition_of(op(list(matrix(1, 5, 3), matrix(1, 4, 2))))
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, "y")
  expect_match(conditionMessage(e), "^input 'y': ")
  # ... and a request that does not fit the data (no single argument to name)
  knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 5, 0)", c("x = Vi(3)", "y = Vj(3)"))
  e <- condition_of(knn(list(matrix(1, 5, 3), matrix(1, 4, 3))))
  expect_rkeops_error(e, "input", "K = 5 is larger than the number of j-rows reduced over (4)")
  # the binding: an option string it does not know
  e <- condition_of(rkeops:::rust_result(.Call(rkeops:::wrap__keops_run, "Sum_Reduction(x, 0)", "x = Vi(1)",
                                                list(1), list(precision = "float8", threads = 0L,
                                                              backend = "CPU", device = 0L, cache_dir = ""),
                                                "auto", NULL, NULL)))
  expect_rkeops_error(e, "input", "precision must be \"float16\", \"float32\" or \"float64\", not \"float8\"",
                      arg = "precision")
})

test_that("gpu errors", {
  old <- set_rkeops_options(backend = "CPU")
  on.exit(set_rkeops_options(old))
  e <- condition_of(keops_device(matrix(1, 3, 3)))
  expect_rkeops_error(e, "gpu", "keops_device(): the CPU backend is in use (rkeops_use_gpu() to use a GPU)")
  # the engine's, where no GPU can be used
  status <- rkeops:::gpu_status(0L)
  if (!isTRUE(status$available)) {
    set_rkeops_options(backend = "GPU")
    op <- keops_kernel("Sum_Reduction(x, 0)", "x = Vi(1)")
    e <- condition_of(op(list(matrix(1, 3, 1))))
    expect_rkeops_error(e, "gpu", paste0("GPU: ", status$message))
  }
})

test_that("memory errors: a result larger than memory", {
  old <- set_rkeops_options(backend = "CPU")
  on.exit(set_rkeops_options(old))
  op <- keops_kernel("Sum_Reduction(OneHot(x + y, 1048576), 0)", c("x = Vi(1)", "y = Vj(1)"))
  e <- condition_of(op(list(numeric(1e6), 0)))
  expect_s3_class(e, "rkeops_error_memory")
  expect_identical(class(e), c("rkeops_error_memory", "rkeops_error", "error", "condition"))
  expect_match(conditionMessage(e), "^the result \\(1000000 rows of 1048576 values\\) needs 8388.61 GB of memory")
  expect_null(e$arg)
})

test_that("cache errors: a kernel cache directory that cannot be used", {
  file <- tempfile()
  writeLines("not a directory", file)
  on.exit(unlink(file))
  e <- condition_of(set_rkeops_cache_dir(file, verbose = FALSE))
  expect_rkeops_error(e, "cache", paste0("rkeops option 'cache_dir': \"", file, "\" is a file, not a directory."))
})

test_that("interrupts are rkeops errors and R interrupts", {
  # (Ctrl-C itself: test-interrupts.R; here the condition that the engine's report becomes)
  res <- list(error = "interrupted by the user", kind = "interrupt")
  e <- condition_of(rkeops:::rust_result(res))
  expect_rkeops_error(e, "interrupt", "interrupted by the user")
  caught <- tryCatch(rkeops:::rust_result(res), interrupt = function(e) "caught as an interrupt")
  expect_identical(caught, "caught as an interrupt")
})

test_that("internal errors: a panic in the engine or the binding", {
  # (the binding's panic on purpose: no input reaches a panic otherwise)
  e <- condition_of(rkeops:::rust_result(.Call(rkeops:::wrap__panic_for_tests)))
  expect_s3_class(e, "rkeops_error_internal")
  expect_identical(class(e), c("rkeops_error_internal", "rkeops_error", "error", "condition"))
  expect_match(conditionMessage(e), "^internal error in rkeops \\(please report it\\): a panic on purpose")
  # an argument R never passes is an input error of the binding, named
  e <- condition_of(rkeops:::rust_result(.Call(rkeops:::wrap__keops_knn_search, matrix(1), matrix(1), 1L,
                                                "hamming", 128, NA, rkeops:::engine_options())))
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, "metric")
})

test_that("the checks of R/checks.R: their messages and arguments", {
  e <- condition_of(rkeops:::check_whole(2.5, "n", "f", min = 1))
  expect_rkeops_error(e, "input", "f(): 'n' must be a whole number >= 1", arg = "n")
  e <- condition_of(rkeops:::check_whole(-1, "iterations", min = 0, show_value = TRUE))
  expect_rkeops_error(e, "input", "'iterations' must be a whole number >= 0, not -1", arg = "iterations")
  expect_identical(rkeops:::check_whole(3, "n"), 3L)
  e <- condition_of(rkeops:::check_flag(NA, "info", "solve"))
  expect_rkeops_error(e, "input", "solve(): 'info' must be TRUE or FALSE", arg = "info")
  expect_identical(rkeops:::check_flag(NA, "prune", "keops_knn", na_ok = TRUE), NA)
  e <- condition_of(rkeops:::check_flag("yes", "prune", "keops_knn", na_ok = TRUE, show_value = TRUE))
  expect_rkeops_error(e, "input", "keops_knn(): 'prune' must be NA, TRUE or FALSE, not \"yes\"", arg = "prune")
  e <- condition_of(rkeops:::check_number(0, "eps", "solve", "positive"))
  expect_rkeops_error(e, "input", "solve(): 'eps' must be a single positive number", arg = "eps")
  expect_identical(rkeops:::check_number(0, "alpha", "solve", "non-negative"), 0)
  e <- condition_of(rkeops:::check_number(Inf, "x"))
  expect_rkeops_error(e, "input", "'x' must be a single number", arg = "x")
  e <- condition_of(log(Vi(matrix(1, 2, 1)), base = 1))
  expect_rkeops_error(e, "input", "log(): 'base' must be a positive number other than 1", arg = "base")
  e <- condition_of(keops_knn(matrix(runif(30), 10), k = 2, metric = "hamming"))
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, "metric")
  expect_match(conditionMessage(e), "^'arg' should be one of ")
})

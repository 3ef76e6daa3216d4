# rkeops_precompile(): GPU kernels compiled into the kernel cache before their first call. Its
# arguments are checked everywhere; where no GPU can be used it compiles nothing and says so; where
# one can, the kernels land in the cache and the calls after it compile none and give plain R's
# results.

args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)")

test_that("rkeops_precompile() names the argument it cannot take", {
  input_error <- function(expr, message) {
    expect_error(expr, message, fixed = TRUE, class = "rkeops_error_input")
  }
  input_error(rkeops_precompile(3, args), "rkeops_precompile(): 'formula' must be a character vector of reductions")
  input_error(rkeops_precompile("Sum_Reduction(x, 0)", 1), "rkeops_precompile(): 'args' must be a character vector")
  input_error(rkeops_precompile("Sum_Reduction(x, 0)", args, precision = "float8"), "'precision' must be among")
  input_error(rkeops_precompile("Sum_Reduction(x, 0)", args, reduced_rows = c(10, 0)),
              "'reduced_rows' must be numbers of rows, at least 1")
  # The engine's own checks (reached on the CPU too): a formula that does not parse, a gradient.
  old <- get_rkeops_options()
  on.exit(set_rkeops_options(backend = old$backend))
  set_rkeops_options(backend = "auto")
  expect_error(rkeops_precompile("Sum_Reduction(z, 0)", args), "rkeops_precompile\\(\\): .*z", class = "rkeops_error")
  input_error(rkeops_precompile("Grad(Sum_Reduction(x, 0), x, e)", c(args, "e = Vi(3)")), "'formula' must be reductions")
})

test_that("on the CPU rkeops_precompile() compiles nothing and says so", {
  old <- get_rkeops_options()
  on.exit(set_rkeops_options(backend = old$backend))
  set_rkeops_options(backend = "CPU")
  expect_message(done <- rkeops_precompile("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", args),
                 "run on the CPU, which compiles nothing")
  expect_false(done)
})

test_that("kernels precompiled on a GPU are in the cache, and the calls after it compile none", {
  gpu <- rkeops:::gpu_status(0L)
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): rkeops_precompile() checked on the CPU only")
    old <- get_rkeops_options()
    on.exit(set_rkeops_options(backend = old$backend))
    set_rkeops_options(backend = "auto")
    expect_false(suppressMessages(rkeops_precompile("Sum_Reduction(x, 0)", args)))
    return(invisible())
  }
  old <- get_rkeops_options()
  old_dir <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
  on.exit({
    set_rkeops_options(backend = old$backend, precision = old$precision)
    if (is.na(old_dir)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = old_dir)
  })
  Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "precompiled"))
  set_rkeops_options(backend = "GPU")
  # Formulas no other test uses (their numbers 17 and 7), in both precisions.
  formulas <- c(gauss = "Sum_Reduction(Exp(-SqDist(x, y) * IntCst(17)) * b, 0)",
                knn = "ArgKMin_Reduction(SqDist(x, y) + IntCst(7), 7, 0)")
  expect_true(rkeops_precompile(formulas, args, precision = c("float32", "float64"), reduced_rows = c(517, 1e6)))
  entries <- list.files(file.path(tempdir(), "precompiled"), recursive = TRUE)
  expect_gt(length(entries), 4)
  set.seed(31)
  x <- matrix(runif(3 * 1003), ncol = 3); y <- matrix(runif(3 * 517), ncol = 3); b <- matrix(rnorm(517), ncol = 1)
  d2 <- Reduce(`+`, lapply(1:3, function(k) outer(x[, k], y[, k], "-")^2))
  for (precision in c("float32", "float64")) {
    set_rkeops_options(precision = precision)
    gauss <- keops_kernel(formulas[["gauss"]], args)(list(x, y, b))
    expect_equal(gauss, exp(-17 * d2) %*% b, tolerance = if (precision == "float32") 1e-4 else 1e-10)
    knn <- keops_kernel(formulas[["knn"]], args)(list(x, y, b))
    # (float32 may order near-ties otherwise: the neighbours' distances are compared)
    expect_equal(d2[cbind(rep(seq_len(1003), 7), as.vector(knn))], as.vector(t(apply(d2, 1, sort))[, 1:7]),
                 tolerance = if (precision == "float32") 1e-5 else 1e-12)
  }
  # (no kernel compiled by the calls: the cache holds what it held)
  expect_identical(list.files(file.path(tempdir(), "precompiled"), recursive = TRUE), entries)
})

# Matrices kept on the GPU with keops_device(). Where no GPU can be used, keops_device() must say
# why; where one can, results from kept matrices must equal those from the R matrices, follow new
# values when the matrix is kept again, and fail clearly once it is freed or in another precision.

gpu <- rkeops:::gpu_status(0L)

# Where no GPU can be used: keops_device() says why (the GPU checks below need one).
no_gpu_checks <- function() {
  old <- get_rkeops_options()
  on.exit(set_rkeops_options(backend = old$backend))
  set_rkeops_options(backend = "auto")
  expect_error(keops_device(matrix(1, 3, 3)), "GPU 0 cannot be used", class = "rkeops_error_gpu")
  set_rkeops_options(backend = "CPU")
  expect_error(keops_device(matrix(1, 3, 3)), "CPU backend is in use", class = "rkeops_error_gpu")
  expect_error(keops_device_free(matrix(1, 3, 3)), "made by keops_device", class = "rkeops_error_input")
}

# Where a GPU can be used: the GPU in float64 for the calling test (the options restored at its
# exit), TRUE; where none can, the checks above, with a message saying so, FALSE.
local_gpu_float64 <- function(env = parent.frame()) {
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): only checked that keops_device() says why it cannot be used")
    no_gpu_checks()
    return(FALSE)
  }
  old <- get_rkeops_options()
  do.call(on.exit, list(substitute(set_rkeops_options(backend = b, precision = p),
                                   list(b = old$backend, p = old$precision)), add = TRUE), envir = env)
  set_rkeops_options(backend = "GPU", precision = "float64")
  TRUE
}

test_that("matrices kept on the GPU give the results of the R matrices, never stale ones", {
  if (!local_gpu_float64()) return()
  set.seed(3)
  x <- matrix(runif(3 * 2011), ncol = 3); y <- matrix(runif(3 * 517), ncol = 3); b <- runif(517)
  gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
                        c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
  dense <- function(x) exp(-2 * outer(rowSums(x^2), rowSums(y^2), "+") + 4 * x %*% t(y)) %*% b
  xd <- keops_device(x)
  expect_s3_class(xd, "keops_device_matrix")
  expect_equal(dim(xd), dim(x))
  expect_equal(as.matrix(xd), x)
  expect_output(print(xd), "2011 x 3, kept on GPU 0 in float64")
  expect_equal(gauss(list(xd, y, b, 2)), dense(x), tolerance = 1e-12)
  # the same call again, then with every input kept
  expect_equal(gauss(list(xd, keops_device(y), keops_device(b), 2)), dense(x), tolerance = 1e-12)
  # x changed: the kept copy is the old x; kept again, the new values are used
  x2 <- x + 0.5
  expect_equal(gauss(list(xd, y, b, 2)), dense(x), tolerance = 1e-12)
  expect_equal(gauss(list(keops_device(x2), y, b, 2)), dense(x2), tolerance = 1e-12)
  # LazyTensors take kept matrices too
  lazy <- sum(exp(-2 * rkeops::sqdist(Vi(xd), Vj(y))) * Vj(b), index = "j")   # the helper masks sqdist()
  expect_equal(lazy, dense(x), tolerance = 1e-12)
  # the CPU reads a kept matrix back
  set_rkeops_options(backend = "CPU")
  expect_equal(gauss(list(xd, y, b, 2)), dense(x), tolerance = 1e-12)
  # another precision than the kept one
  set_rkeops_options(backend = "GPU", precision = "float32")
  expect_error(gauss(list(xd, y, b, 2)), "'x': is kept on GPU 0 in float64, but this computation is in float32",
               class = "rkeops_error_input")
  # freed: an error, then a new copy works
  keops_device_free(xd)
  set_rkeops_options(precision = "float64")
  expect_error(gauss(list(xd, y, b, 2)), "freed by keops_device_free", class = "rkeops_error_input")
  expect_error(as.matrix(xd), "freed", class = "rkeops_error_input")
  expect_equal(gauss(list(keops_device(x), y, b, 2)), dense(x), tolerance = 1e-12)
  # the engine's buffers can be given back; the next call allocates them again
  expect_true(rkeops_release_gpu_memory())
  expect_equal(gauss(list(x, y, b, 2)), dense(x), tolerance = 1e-12)
})

test_that("a program takes matrices kept on the GPU: the values kept, copied on the device", {
  if (!local_gpu_float64()) return()
  set.seed(4)
  x <- matrix(rnorm(2 * 1013), ncol = 2)
  lloyd <- function(iterations) {
    keops_program(list(
      labels = keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c("x = Vi(2)", "c = Vj(2)")),
      sums = keops_kernel("Sum_Reduction(Equal(labels, j) * x, 1)", c("labels = Vi(1)", "x = Vi(2)", "j = Vj(1)")),
      counts = keops_kernel("Sum_Reduction(Equal(labels, j), 1)", c("labels = Vi(1)", "j = Vj(1)")),
      c = keops_map("IfElse(counts - 0.5, sums / counts, c)", c("sums = Vj(2)", "counts = Vj(1)", "c = Vj(2)"))
    ), iterations = iterations)
  }
  start <- x[1:5, ]
  for (iterations in c(1, 4)) {      # one iteration runs on the host: the kept matrix is read back
    ref <- lloyd(iterations)(list(x = x, c = start, j = 1:5))
    xd <- keops_device(x)
    expect_equal(lloyd(iterations)(list(x = xd, c = start, j = 1:5)), ref, tolerance = 1e-12)
    # the buffer is copied: the program does not change the kept matrix, which another run reads again
    cd <- keops_device(start)
    expect_equal(lloyd(iterations)(list(x = xd, c = cd, j = 1:5))$c, ref$c, tolerance = 1e-12)
    expect_equal(as.matrix(cd), start)
  }
  expect_equal(lloyd(4)(list(x = keops_device(x + 1), c = start + 1, j = 1:5))$c,
               lloyd(4)(list(x = x + 1, c = start + 1, j = 1:5))$c, tolerance = 1e-12)
  set_rkeops_options(precision = "float32")
  expect_error(lloyd(4)(list(x = xd, c = start, j = 1:5)), "'x'.*float64|kept on", class = "rkeops_error")
  keops_device_free(xd)
  expect_error(lloyd(4)(list(x = xd, c = start, j = 1:5)), "freed", class = "rkeops_error_input")
})

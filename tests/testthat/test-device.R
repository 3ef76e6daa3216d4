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

test_that("matrices kept on the GPU give the results of the R matrices, never stale ones", {
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): only checked that keops_device() says why it cannot be used")
    return(no_gpu_checks())
  }
  old <- get_rkeops_options()
  on.exit(set_rkeops_options(backend = old$backend, precision = old$precision))
  set_rkeops_options(backend = "GPU", precision = "float64")
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

# The R side of a call: no copy of inputs that are already double, the same results for the
# shortcuts (vectors kept as vectors, products by a vector, several columns in solve()), the
# count of engine calls and phases used by bench/iterative.R. References are plain R, float64.

# The helper's sqdist() (a dense distance matrix) masks rkeops::sqdist() here.
sqdist <- rkeops::sqdist
old_opts <- set_rkeops_options(precision = "float64")
withr_restore <- function() do.call(set_rkeops_options, old_opts)

r_data <- function(seed = 3, N = 23, M = 17) {
  set.seed(seed)
  list(x = matrix(runif(N * 3), N, 3), y = matrix(runif(M * 3), M, 3), v = runif(M), u = runif(N))
}
dense_d2 <- function(x, y) outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y)

test_that("double matrices and vectors reach the engine without a copy", {
  expect_true(capabilities("profmem"), label = "memory profiling (tracemem), which these no-copy checks need")
  d <- r_data()
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * v, 0)", c("x = Vi(3)", "y = Vj(3)", "v = Vj(1)"))
  tracemem(d$x); tracemem(d$y); tracemem(d$v)
  on.exit({ untracemem(d$x); untracemem(d$y); untracemem(d$v) })
  copies <- capture.output({
    a1 <- op(list(d$x, d$y, d$v))
    a2 <- sum(exp(-sqdist(Vi(d$x), Vj(d$y))) * Vj(d$v), index = "j")
    a3 <- exp(-sqdist(Vi(d$x), Vj(d$y))) %*% d$v
  })
  expect_identical(grep("tracemem", copies, value = TRUE), character(0))
  ref <- exp(-dense_d2(d$x, d$y)) %*% d$v
  expect_equal(a1, ref, tolerance = 1e-12)
  expect_equal(a2, ref, tolerance = 1e-12)
  expect_equal(a3, ref, tolerance = 1e-12)
})

test_that("a vector is a one-column variable, kept as a vector", {
  d <- r_data()
  vj <- Vj(d$v)
  expect_null(dim(vj$vars[[1L]]))
  expect_identical(vj$args, "V0 = Vj(1)")
  expect_identical(vj$dims, 1L)
  expect_identical(dim(sqdist(Vi(d$u), vj)), c(23L, 17L, 1L))
  # the same variable as its one-column matrix, in results
  ref <- rowSums(exp(-outer(d$u, d$v, "-")^2))
  expect_equal(sum(exp(-sqdist(Vi(d$u), vj)), index = "j"), matrix(ref), tolerance = 1e-12)
  expect_equal(sum(exp(-sqdist(Vi(matrix(d$u)), Vj(matrix(d$v)))), index = "j"), matrix(ref),
               tolerance = 1e-12)
  # integer data is converted; dimnames stay and do not matter
  xi <- matrix(1:6, 3, 2, dimnames = list(NULL, c("a", "b")))
  expect_identical(Vi(xi)$vars[[1L]], matrix(as.double(1:6), 3, 2, dimnames = list(NULL, c("a", "b"))))
  expect_equal(sum(Vi(xi) - Vj(d$y[, 1:2]), index = "j"),
               xi * 17 - matrix(colSums(d$y[, 1:2]), 3, 2, byrow = TRUE), tolerance = 1e-12,
               ignore_attr = TRUE)
  # a one-dimensional array is a vector; other attributes are dropped
  a1 <- array(d$u, length(d$u))
  expect_null(dim(Vi(a1)$vars[[1L]]))
  expect_identical(Vi(structure(d$u, names = letters[seq_along(d$u)]))$vars[[1L]], d$u)
  expect_identical(Pm(matrix(1:4, 2))$vars[[1L]], as.double(1:4))
  print_out <- capture.output(print(sqdist(Vi(d$u), vj)))
  expect_true(any(grepl("23 x 1 matrix", print_out)) && any(grepl("17 x 1 matrix", print_out)))
})

test_that("renumbered placeholders and merged variables", {
  d <- r_data()
  rp <- rkeops:::remap_placeholders
  expect_identical(rp("(@0@ + @1@)", c(0L, 1L)), "(@0@ + @1@)")
  expect_identical(rp("(@0@ + @1@)", c(2L, 0L)), "(@2@ + @0@)")
  expect_identical(rp("@1@", c(5L, 11L)), "@11@")
  expect_identical(rp("Exp(@0@)", 12L), "Exp(@12@)")
  f <- Vi(d$x) - Vj(d$y)
  g <- (Vj(d$y) | Vj(d$y)) + sqdist(Vi(d$x), Vj(d$y)) + elem(f, 1)
  expect_identical(g$args, c("V0 = Vj(3)", "V1 = Vi(3)"))
  ref <- rowSums(d$y^2) + t(dense_d2(d$x, d$y)) + outer(d$y[, 1], d$x[, 1], function(a, b) b - a)
  expect_equal(sum(g, index = "i"), matrix(rowSums(ref)), tolerance = 1e-10)
})

test_that("%*% and solve() with vectors and several columns", {
  d <- r_data(N = 30, M = 30)
  x <- d$x
  K <- exp(-sqdist(Vi(x), Vj(x)))
  Kd <- exp(-dense_d2(x, x))
  expect_equal(K %*% d$u, Kd %*% d$u, tolerance = 1e-12)
  B <- cbind(d$u, 2 - d$u, 1)
  expect_equal(K %*% B, Kd %*% B, tolerance = 1e-12)
  sol <- solve(K, B, alpha = 0.5, eps = 1e-10)
  expect_equal(sol, solve(Kd + diag(0.5, 30), B), tolerance = 1e-7)
  expect_error(K %*% d$u[-1], "'y' must be a numeric matrix with 30 rows", class = "rkeops_error_input")
})

test_that("phase_totals() counts the engine calls of an expression and sums their phases", {
  d <- r_data()
  op <- keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  p <- rkeops:::phase_totals({
    op(list(d$x, d$y))
    first <- rkeops:::last_run()$timings
    op(list(d$x, d$y))
    second <- rkeops:::last_run()$timings
    inner <- rkeops:::phase_totals(op(list(d$x, d$y)))
    list(first, second, inner)
  })
  expect_identical(p$calls, 2L)     # the inner call is counted by the inner phase_totals() only
  expect_identical(p$value[[3]]$calls, 1L)
  expect_equal(sum(p$phases), sum(p$value[[1]]) + sum(p$value[[2]]))
  expect_identical(names(p$phases), union(names(p$value[[1]]), names(p$value[[2]])))
  expect_null(rkeops:::.rkeops_env$phase_log)
})

test_that("the cache directory follows RKEOPS_CACHE_DIR between calls", {
  old <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = old))
  Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "cache-a"))
  expect_identical(rkeops:::kernel_cache_dir(), file.path(tempdir(), "cache-a"))
  Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "cache-b"))
  expect_identical(rkeops:::kernel_cache_dir(), file.path(tempdir(), "cache-b"))
  Sys.unsetenv("RKEOPS_CACHE_DIR")
  expect_identical(rkeops:::kernel_cache_dir(), rkeops_cache_dir())
})

withr_restore()

# float16 storage: the inputs are rounded to half precision, then everything is computed in float32.

testthat::local_edition(3)

# Rounds doubles to the nearest float16 (ties to even, as R's round()), for values in the normal
# and subnormal float16 range.
round_f16 <- function(x) {
  e <- pmax(floor(log2(abs(x))), -14)
  q <- 2^(e - 10)
  ifelse(x == 0, 0, round(x / q) * q)
}

test_that("the float16 rounding helper is right on known values", {
  expect_identical(round_f16(c(1, 1 + 2^-11, 1 + 3 * 2^-11, 0.1, 2049)),
                   c(1, 1, 1 + 2^-9, 0.0999755859375, 2048))
})

test_that("float16 results are float32 results on inputs rounded to half precision", {
  set.seed(301)
  x <- matrix(runif(3 * 257), 257, 3); y <- matrix(runif(3 * 301), 301, 3)
  b <- matrix(rnorm(2 * 301), 301, 2)
  for (formula in c("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", "Sum_Reduction(Exp(-SqDist(x,y))*b, 1)")) {
    args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)")
    if (grepl(", 1)$", formula)) args <- c("x = Vi(3)", "y = Vj(3)", "b = Vi(2)")
    bb <- if (grepl(", 1)$", formula)) matrix(rnorm(2 * 257), 257, 2) else b
    op <- keops_kernel(formula, args)
    old <- set_rkeops_options(precision = "float16")
    half <- op(list(x, y, bb))
    set_rkeops_options(precision = "float32")
    single <- op(list(round_f16(x), round_f16(y), round_f16(bb)))
    direct <- op(list(x, y, bb))
    do.call(set_rkeops_options, old)
    expect_identical(half, single)
    # The rounding is real: half precision inputs move the result.
    expect_false(identical(half, direct))
    expect_equal(half, direct, tolerance = 1e-2)
  }
})

test_that("float16 with ranges: the kept pairs of the inputs rounded to half precision", {
  set.seed(302)
  x <- matrix(runif(3 * 157), 157, 3); y <- matrix(runif(3 * 203), 203, 3)
  b <- matrix(rnorm(2 * 203), 203, 2)
  bi <- cbind(c(1, 14, 14, 60), c(13, 13, 59, 157))          # the second block is empty
  bj <- cbind(c(1, 40, 41, 150), c(39, 40, 149, 203))
  keep <- rbind(c(TRUE, FALSE, TRUE, FALSE), c(TRUE, TRUE, TRUE, TRUE),
                c(FALSE, TRUE, FALSE, TRUE), c(FALSE, FALSE, FALSE, FALSE))  # the last keeps nothing
  r <- from_matrix(bi, bj, keep)
  mask <- matrix(FALSE, 157, 203)
  for (k in 1:4) for (l in 1:4) {
    if (keep[k, l] && bi[k, 2] >= bi[k, 1]) mask[bi[k, 1]:bi[k, 2], bj[l, 1]:bj[l, 2]] <- TRUE
  }
  xh <- round_f16(x); yh <- round_f16(y); bh <- round_f16(b)
  K <- exp(-(outer(rowSums(xh^2), rowSums(yh^2), "+") - 2 * xh %*% t(yh))) * mask
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)"))
  old <- set_rkeops_options(precision = "float16")
  on.exit(do.call(set_rkeops_options, old))
  got <- op(list(x, y, b), ranges = r)
  expect_equal(got, K %*% bh, tolerance = 1e-5)
  expect_identical(got[60:157, ], matrix(0, 98, 2))
})

test_that("rkeops_use_float16() sets the option and bad precisions are refused", {
  old <- rkeops_use_float16()
  on.exit(do.call(set_rkeops_options, old))
  expect_identical(get_rkeops_options("precision"), "float16")
  expect_error(set_rkeops_options(precision = "float8"), "float16", class = "rkeops_error_input")
})

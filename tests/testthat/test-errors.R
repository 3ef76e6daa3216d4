# Input validation and formula errors of keops_kernel() and its operators.
# Each error case has a matching valid call (a control) so that the tests
# cannot pass merely because the operator always fails.  Message checks are
# loose and case-insensitive: they only look for the key facts.

testthat::local_edition(3)

ARGS <- c("pts = Vi(3)", "ctr = Vj(3)", "wts = Vj(2)")
FORM <- "Sum_Reduction(Exp(-SqDist(pts, ctr)) * wts, 0)"
good <- function(N = 11, M = 7) {
  list(rmat(N, 3), rmat(M, 3), rmat(M, 2))
}

test_that("control: the operator used below works on valid inputs", {
  set.seed(301)
  op <- keops_kernel(FORM, ARGS)
  inp <- good()
  res <- op(inp)
  expect_identical(dim(res), c(11L, 2L))
  expect_close(res, exp(-sqdist(inp[[1]], inp[[2]])) %*% inp[[3]], 1e-5)
  expect_identical(dim(op(setNames(inp, c("pts", "ctr", "wts")))), c(11L, 2L))
})

test_that("errors are ordinary R errors, of rkeops' classes (?rkeops_errors), without a call", {
  set.seed(302)
  op <- keops_kernel(FORM, ARGS)
  err <- tryCatch(op(good()[1:2]), error = function(e) e)
  expect_identical(class(err), c("rkeops_error_input", "rkeops_error", "error", "condition"))
  expect_null(conditionCall(err))
  err <- tryCatch(keops_kernel("Sum_Reduction(Exp(-x)*, 0)", "x = Vi(1)"),
                  error = function(e) e)
  expect_identical(class(err), c("rkeops_error_formula", "rkeops_error", "error", "condition"))
  expect_null(conditionCall(err))
})

test_that("wrong number of inputs", {
  set.seed(303)
  op <- keops_kernel(FORM, ARGS)
  inp <- good()
  expect_keops_error(op(inp[1:2]), "\\b3\\b", class = "rkeops_error_input")
  expect_keops_error(op(c(inp, list(rmat(7, 2)))), "\\b3\\b", class = "rkeops_error_input")
  expect_keops_error(op(list()), class = "rkeops_error_input")
})

test_that("wrong dimension names the variable and both dimensions", {
  set.seed(304)
  op <- keops_kernel(FORM, ARGS)
  inp <- good()
  bad <- inp; bad[[1]] <- rmat(11, 5)             # pts: Vi(3) given 5 columns
  expect_keops_error(op(bad), "\\bpts\\b", "3", "5", class = "rkeops_error_input")
  bad <- inp; bad[[3]] <- rmat(7, 4)              # wts: Vj(2) given 4 columns
  expect_keops_error(op(bad), "\\bwts\\b", "2", "4", class = "rkeops_error_input")
  # parameter: Pm(2) given 4 values
  args_p <- c(ARGS, "sig = Pm(2)")
  op_p <- keops_kernel("Sum_Reduction(Exp(-SqDist(pts, ctr)) * wts * sig, 0)", args_p)
  expect_identical(dim(op_p(c(inp, list(c(1, 2))))), c(11L, 2L)) # control
  expect_keops_error(op_p(c(inp, list(c(1, 2, 3, 4)))), "\\bsig\\b", "2", "4", class = "rkeops_error_input")
})

test_that("rows that disagree among i-variables or among j-variables", {
  set.seed(305)
  args <- c("u = Vi(2)", "v = Vi(2)", "w = Vj(2)", "z = Vj(2)")
  op <- keops_kernel("Sum_Reduction((u|w) * v + z, 0)", args)
  ok <- list(rmat(10, 2), rmat(10, 2), rmat(7, 2), rmat(7, 2))
  expect_identical(dim(op(ok)), c(10L, 2L))          # control
  bad <- ok; bad[[2]] <- rmat(11, 2)
  expect_keops_error(op(bad), class = "rkeops_error_input")
  bad <- ok; bad[[4]] <- rmat(8, 2)
  expect_keops_error(op(bad), class = "rkeops_error_input")
  # the same checks for an axis-1 reduction
  op1 <- keops_kernel("Sum_Reduction((u|w) * v + z, 1)", args)
  expect_identical(dim(op1(ok)), c(7L, 2L))          # control
  bad <- ok; bad[[1]] <- rmat(9, 2)
  expect_keops_error(op1(bad), class = "rkeops_error_input")
})

test_that("non-numeric, NULL and 3-d array inputs", {
  set.seed(306)
  op <- keops_kernel(FORM, ARGS)
  inp <- good()
  bad <- inp; bad[[1]] <- matrix(as.character(inp[[1]]), 11, 3)
  expect_keops_error(op(bad), class = "rkeops_error_input")
  bad <- inp; bad[[3]] <- matrix("a", 7, 2)
  expect_keops_error(op(bad), class = "rkeops_error_input")
  bad <- inp; bad[1] <- list(NULL)
  expect_identical(length(bad), 3L)
  expect_keops_error(op(bad), class = "rkeops_error_input")
  # (a 3-d array is a batch, see test-batch.R: one with the wrong number of columns is an error)
  bad <- inp; bad[[2]] <- array(stats::runif(7 * 4 * 2), c(7, 4, 2))
  expect_keops_error(op(bad), "member 1", "3 columns", class = "rkeops_error_input")
  bad <- inp; bad[[1]] <- array(inp[[1]], c(11, 3, 1, 1))
  expect_keops_error(op(bad), class = "rkeops_error_input")
  # parameter given as a character string
  op_p <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(pts, ctr)) * wts, 0)",
                       c(ARGS, "s = Pm(1)"))
  expect_identical(dim(op_p(c(inp, list(0.5)))), c(11L, 2L)) # control
  expect_keops_error(op_p(c(inp, list("0.5"))), class = "rkeops_error_input")
  expect_keops_error(op_p(c(inp, list(NULL))), class = "rkeops_error_input")
})

test_that("K larger than the reduction range", {
  set.seed(307)
  inp <- good(N = 11, M = 7)
  args <- ARGS[1:2]
  for (red in c("KMin_Reduction", "ArgKMin_Reduction", "KMin_ArgKMin_Reduction")) {
    # controls: K equal to the range is fine
    ok0 <- keops_kernel(sprintf("%s(SqDist(pts, ctr), 7, 0)", red), args)
    expect_error(ok0(inp[1:2]), NA)
    ok1 <- keops_kernel(sprintf("%s(SqDist(pts, ctr), 11, 1)", red), args)
    expect_error(ok1(inp[1:2]), NA)
    # K = M + 1 (axis 0 reduces over the 7 j-rows), K = N + 1 (axis 1)
    expect_keops_error({
      op <- keops_kernel(sprintf("%s(SqDist(pts, ctr), 8, 0)", red), args)
      op(inp[1:2])
    }, class = "rkeops_error_input")
    expect_keops_error({
      op <- keops_kernel(sprintf("%s(SqDist(pts, ctr), 12, 1)", red), args)
      op(inp[1:2])
    }, class = "rkeops_error_input")
  }
})

test_that("invalid sum_scheme", {
  set.seed(308)
  for (scheme in c("auto", "direct_sum", "block_sum", "kahan_scheme")) {
    expect_error(keops_kernel(FORM, ARGS, sum_scheme = scheme)(good()), NA) # controls
  }
  expect_keops_error({
    op <- keops_kernel(FORM, ARGS, sum_scheme = "bogus_scheme")
    op(good())
  }, "bogus_scheme|sum_scheme|scheme", class = "rkeops_error_input")
})

test_that("formula parse errors are reported at creation with position and token", {
  # the ',' is at 0-based offset 22 (1-based column 23)
  msg <- expect_keops_error(keops_kernel("Sum_Reduction(Exp(-x)*, 0)", "x = Vi(1)"),
                            "pos|col|offset|char", class = "rkeops_error_formula")
  expect_match(msg, ",", fixed = TRUE)
  expect_match(msg, "\\b2[1-4]\\b")
  # an invalid character: '$' at 0-based offset 16 (1-based 17)
  msg <- expect_keops_error(keops_kernel("Sum_Reduction(x $ 2, 0)", "x = Vi(1)"),
                            "pos|col|offset|char", class = "rkeops_error_formula")
  expect_match(msg, "$", fixed = TRUE)
  expect_match(msg, "\\b1[5-8]\\b")
  # unbalanced parentheses / trailing tokens / empty operand
  expect_keops_error(keops_kernel("Sum_Reduction(Exp(-x), 0", "x = Vi(1)"),
                     "pos|col|offset|char|end", class = "rkeops_error_formula")
  expect_keops_error(keops_kernel("Sum_Reduction(Exp(-x), 0))", "x = Vi(1)"),
                     "pos|col|offset|char", class = "rkeops_error_formula")
  expect_keops_error(keops_kernel("Sum_Reduction(x + , 0)", "x = Vi(1)"),
                     "pos|col|offset|char", class = "rkeops_error_formula")
  # control
  expect_error(keops_kernel("Sum_Reduction(Exp(-x)*x, 0)", "x = Vi(1)"), NA)
})

test_that("deep formulas and long chains are errors, not a crash of R", {
  for (f in c(paste0(strrep("Exp(", 1e5), "x", strrep(")", 1e5)),
              paste0("x", strrep("+x", 1e5)),
              paste0("x", strrep("*x", 1e5)),
              paste0(strrep("-", 1e5), "x"))) {
    expect_keops_error(keops_kernel(paste0("Sum_Reduction(", f, ", 0)"), "x = Vi(1)"), "nested",
                       class = "rkeops_error_formula")
  }
  # control: a sum of 100 terms is fine and correct
  op <- keops_kernel(paste0("Sum_Reduction(x", strrep("+x", 99), ", 0)"), c("x = Vi(1)", "y = Vj(1)"))
  x <- matrix(c(0.5, 2), 2, 1)
  expect_equal(op(list(x, matrix(1, 3, 1))), 300 * x, tolerance = 1e-6)
})

test_that("unknown function names are reported", {
  set.seed(309)
  expect_keops_error({
    op <- keops_kernel("Sum_Reduction(Frobnicate(pts - ctr) * wts, 0)", ARGS)
    op(good())
  }, "Frobnicate", class = "rkeops_error_formula")
  expect_keops_error({
    op <- keops_kernel("Avg_Reduction(Exp(-SqDist(pts, ctr)) * wts, 0)", ARGS)
    op(good())
  }, "Avg_Reduction|reduction", class = "rkeops_error_formula")
})

test_that("unknown variables in the formula are reported", {
  set.seed(310)
  expect_keops_error({
    op <- keops_kernel("Sum_Reduction(Exp(-SqDist(pts, zeta)) * wts, 0)", ARGS)
    op(good())
  }, "zeta", class = "rkeops_error_formula")
})

test_that("unknown argument names in named inputs are reported", {
  set.seed(311)
  op <- keops_kernel(FORM, ARGS)
  inp <- good()
  expect_error(op(list(wts = inp[[3]], pts = inp[[1]], ctr = inp[[2]])), NA) # control
  expect_keops_error(op(list(pts = inp[[1]], ctr = inp[[2]], weights = inp[[3]])),
                     "weights", class = "rkeops_error_input")
})

# A program keeps its plan (its steps, read once by the engine) between calls: each call checks and
# converts its values only. These tests check that what is kept does not leak from one call to the
# next: new data, new sizes and bad values are taken or refused on every call, and schedules and
# values that are not double matrices are converted by the engine as R did.

test_that("a program called again with new data and new sizes computes each call from its own data", {
  local_precision("float64")
  # y = Sum_j exp(-|x_i - z_j|^2) w_j, then x <- x * s (s a parameter), twice
  prog <- keops_program(list(
    y = keops_kernel("Sum_Reduction(Exp(-SqDist(x, z)) * w, 0)", c("x = Vi(2)", "z = Vj(2)", "w = Vj(1)")),
    x = keops_map("x * s", c("x = Vi(2)", "s = Pm(1)"))
  ), iterations = 2)
  reference <- function(x, z, w, s) {
    for (it in 1:2) {
      y <- exp(-outer(rowSums(x^2), rowSums(z^2), "+") + 2 * x %*% t(z)) %*% w
      x <- x * s
    }
    list(y = y, x = x)
  }
  set.seed(11)
  for (n in c(37L, 23L, 37L)) {
    x <- matrix(rnorm(2 * n), n, 2); z <- matrix(rnorm(2 * 19), 19, 2); w <- runif(19); s <- runif(1)
    res <- prog(list(x = x, z = z, w = w, s = s))
    ref <- reference(x, z, w, s)
    expect_equal(res$y, ref$y, tolerance = 1e-12)
    expect_equal(res$x, ref$x, tolerance = 1e-12)
  }
})

test_that("a program's second call refuses bad values with errors naming the argument", {
  local_precision("float64")
  prog <- keops_program(list(y = keops_map("x * w", c("x = Vi(2)", "w = Pm(1)"))), iterations = 2)
  x <- matrix(runif(14), 7, 2)
  expect_equal(prog(list(x = x, w = 3))$y, x * 3, tolerance = 1e-15)
  arg_of <- function(expr) tryCatch({
    expr
    "no error"
  }, rkeops_error_input = function(e) e$arg)
  # the same names as the first call (its checks kept), bad values
  expect_identical(arg_of(prog(list(x = matrix(letters[1:4], 2), w = 3))), "x")
  expect_identical(arg_of(prog(list(x = x, w = "a"))), "w")
  expect_identical(arg_of(prog(list(x = factor(1:3), w = 3))), "x")
  expect_identical(arg_of(prog(list(x = array(1, c(2, 2, 2, 2)), w = 3))), "x")
  # a schedule of the wrong shape, or not numbers
  expect_identical(arg_of(prog(list(x = x, w = 3), schedule = list(w = matrix(1, 2, 2)))), "schedule")
  expect_identical(arg_of(prog(list(x = x), schedule = list(w = c("a", "b")))), "schedule")
  expect_identical(arg_of(prog(list(x = x), schedule = list(w = numeric(0)))), "schedule")
  expect_identical(arg_of(prog(list(x = x), schedule = c(w = 2))), "schedule")
  # a misspelt name after calls with the right ones
  expect_identical(arg_of(prog(list(x = x, W = 3))), "input")
  # and a good call after the errors
  expect_equal(prog(list(x = x, w = 2))$y, x * 2, tolerance = 1e-15)
})

test_that("schedules of several values, integers, logicals, data frames and 1-d arrays are converted as R does", {
  local_precision("float64")
  # y = x * w (w a Pm(2), from a schedule: one row per iteration), then x <- y, three iterations
  prog <- keops_program(list(x = keops_map("x * w", c("x = Vi(2)", "w = Pm(2)"))), iterations = 3,
                        trace = "w")
  x <- matrix(1:10, 5, 2)
  w <- rbind(c(2, 3), c(0.5, 4), c(1, -1))
  res <- prog(list(x = x), schedule = list(w = w))
  expect_equal(res$x, x * rep(w[1, ] * w[2, ] * w[3, ], each = 5), tolerance = 1e-15)
  expect_equal(attr(res, "trace")$w, w)
  # the last row repeated after its end
  res <- prog(list(x = x), schedule = list(w = w[1:2, ]))
  expect_equal(res$x, x * rep(w[1, ] * w[2, ]^2, each = 5), tolerance = 1e-15)
  # an integer schedule, a logical input, a data frame, a 1-d array
  expect_equal(prog(list(x = x), schedule = list(w = matrix(c(2L, 1L, 1L, 3L), 2)))$x,
               x * rep(c(2 * 1^2, 1 * 3^2), each = 5), tolerance = 1e-15)
  lgl <- matrix(c(TRUE, FALSE, TRUE, TRUE), 2)
  expect_equal(prog(list(x = lgl, w = c(2, 1)))$x, (lgl + 0) * rep(c(8, 1), each = 2), tolerance = 1e-15)
  expect_equal(prog(list(x = data.frame(a = 1:3, b = 4:6), w = c(1, 2)))$x,
               cbind(1:3, 8 * (4:6)) + 0, tolerance = 1e-15, ignore_attr = TRUE)
  one <- keops_program(list(x = keops_map("x * 2", "x = Vi(1)")), iterations = 2)
  expect_equal(one(list(x = array(c(1, 5, 7), 3)))$x, matrix(c(4, 20, 28)), tolerance = 1e-15)
  expect_equal(one(list(x = c(NA, 1L)))$x, matrix(c(NA, 4)), tolerance = 1e-15)
})

test_that("keops_program_grad() shares the program's plan and computes from its own data", {
  local_precision("float64")
  # loss = sum_i |x_i / 2|^2 after one halving: d/dx = x / 2
  prog <- keops_program(list(x = keops_map("x / 2", "x = Vi(3)"),
                             loss = keops_kernel("Sum_Reduction(SqNorm2(x), 1)", "x = Vi(3)")), iterations = 1)
  set.seed(3)
  x1 <- matrix(rnorm(3 * 29), 29, 3)
  expect_equal(prog(list(x = x1))$loss, matrix(sum((x1 / 2)^2)), tolerance = 1e-12)
  for (n in c(29L, 13L)) {
    x <- matrix(rnorm(3 * n), n, 3)
    g <- keops_program_grad(prog, list(x = x), of = "loss", wrt = "x")
    expect_equal(g$x, x / 2, tolerance = 1e-12)
    expect_equal(attr(g, "outputs")$loss, matrix(sum((x / 2)^2)), tolerance = 1e-12)
  }
  e <- tryCatch(keops_program_grad(prog, list(x = matrix("a", 2, 3)), of = "loss", wrt = "x"),
                rkeops_error_input = function(e) e)
  expect_identical(e$arg, "x")
})

test_that("a program saved and loaded again (its kept plan gone) still runs", {
  local_precision("float64")
  prog <- keops_program(list(y = keops_map("x * w", c("x = Vi(2)", "w = Pm(1)"))), iterations = 2)
  x <- matrix(runif(10), 5, 2)
  expect_equal(prog(list(x = x, w = 3))$y, x * 3, tolerance = 1e-15)
  again <- unserialize(serialize(prog, NULL))
  expect_equal(again(list(x = x, w = 2))$y, x * 2, tolerance = 1e-15)
  expect_equal(keops_program_grad(again, list(x = x, w = 2), of = "y", wrt = "x")$x, matrix(2, 5, 2),
               tolerance = 1e-15)
})

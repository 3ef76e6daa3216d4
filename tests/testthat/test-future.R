# rkeops_use_future(): reductions cut into blocks of output rows, each block a future on the plan
# in force, give the results of one process (and of plain R in float64), for every kind of
# reduction and both axes, on local R processes (multisession) and on a cluster of localhost
# workers (the same code path as machines reached by SSH). Sizes are odd, so that the blocks are
# unequal. Each test_that() block starts one plan and resets it on exit; worker start-up dominates.

set.seed(18)
fut_N <- 203
fut_M <- 157
fut_x <- rmat(fut_N, 3)
fut_y <- rmat(fut_M, 3)
fut_a <- rmat(fut_N, 1, 0.5, 1.5)
fut_b <- rmat(fut_M, 2, 0.5, 1.5)   # positive: also the weights of a log-sum-exp
fut_s <- 0.7
fut_D <- sqdist(fut_x, fut_y)          # the helper's dense |x_i - y_j|^2 (float64)
fut_xy <- fut_x %*% t(fut_y)
fut_K <- exp(-fut_s * fut_D)
on_j <- function(v) matrix(v, fut_N, fut_M, byrow = TRUE)   # a j-variable on the N x M grid

# The tests that run futures skip without future and future.apply (helper-future.R), which CI
# installs (it fails when a test is skipped). The note on socket options (tested below) is not for
# the other tests' plans.
assign("socket_noted", TRUE, envir = rkeops:::.rkeops_env)

# formula, declarations, inputs, and the plain-R float64 reference.
fut_cases <- list(
  sum_j = list("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
               c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)"),
               list(fut_x, fut_y, fut_b, fut_s),
               ref_reduce(list(fut_K * on_j(fut_b[, 1]), fut_K * on_j(fut_b[, 2])), 0, "sum")),
  sum_i = list("Sum_Reduction(Exp(-s * SqDist(x, y)) * a, 1)",
               c("x = Vi(3)", "y = Vj(3)", "a = Vi(1)", "s = Pm(1)"),
               list(fut_x, fut_y, fut_a, fut_s),
               ref_reduce(fut_K * c(fut_a), 1, "sum")),
  argkmin_j = list("ArgKMin_Reduction(SqDist(x, y), 3, 0)", c("x = Vi(3)", "y = Vj(3)"),
                   list(fut_x, fut_y), ref_reduce(fut_D, 0, "argkmin", K = 3)),
  kmin_argkmin_i = list("KMin_ArgKMin_Reduction(SqDist(x, y), 4, 1)", c("x = Vi(3)", "y = Vj(3)"),
                        list(fut_x, fut_y), ref_reduce(fut_D, 1, "kmin_argkmin", K = 4)),
  kmin_d2_j = list("KMin_Reduction(Concat(SqDist(x, y), (x | y)), 2, 0)", c("x = Vi(3)", "y = Vj(3)"),
                   list(fut_x, fut_y), ref_reduce(list(fut_D, fut_xy), 0, "kmin", K = 2)),
  min_argmin_j = list("Min_ArgMin_Reduction(SqDist(x, y) - s, 0)",
                      c("x = Vi(3)", "y = Vj(3)", "s = Pm(1)"), list(fut_x, fut_y, fut_s),
                      ref_reduce(fut_D - fut_s, 0, "min_argmin")),
  max_argmax_i = list("Max_ArgMax_Reduction(Concat(-SqDist(x, y), (x | y)), 1)",
                      c("x = Vi(3)", "y = Vj(3)"), list(fut_x, fut_y),
                      ref_reduce(list(-fut_D, fut_xy), 1, "max_argmax")),
  argmin_i = list("ArgMin_Reduction(SqDist(x, y), 1)", c("x = Vi(3)", "y = Vj(3)"),
                  list(fut_x, fut_y), ref_reduce(fut_D, 1, "argmin")),
  logsumexp_i = list("LogSumExp_Reduction(-s * SqDist(x, y), 1)",
                     c("x = Vi(3)", "y = Vj(3)", "s = Pm(1)"), list(fut_x, fut_y, fut_s),
                     ref_reduce(-fut_s * fut_D, 1, "logsumexp")),
  lse_weight_j = list("LogSumExpWeight_Reduction(-SqDist(x, y), b, 0)",
                      c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)"), list(fut_x, fut_y, fut_b),
                      ref_reduce(-fut_D, 0, "lse_weight",
                                 G = list(on_j(fut_b[, 1]), on_j(fut_b[, 2])))),
  softmax_j = list("SumSoftMaxWeight_Reduction(-SqDist(x, y), b, 0)",
                   c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)"), list(fut_x, fut_y, fut_b),
                   ref_reduce(-fut_D, 0, "softmax_weight",
                              G = list(on_j(fut_b[, 1]), on_j(fut_b[, 2]))))
)

# The operators, and their results in this process (the future path off).
fut_ops <- lapply(fut_cases, function(case) keops_kernel(case[[1L]], case[[2L]]))
fut_here <- local({
  local_precision("float64")
  Map(function(op, case) op(case[[3L]]), fut_ops, fut_cases)
})

# Splits the reductions of `fut_cases` into `blocks` blocks on the plan in force and checks them
# against this process and plain R; checks that they ran in `processes` processes other than this.
expect_future_cases <- function(blocks, processes) {
  local_precision("float64")
  old <- rkeops_use_future(blocks = blocks)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  for (name in names(fut_cases)) {
    got <- fut_ops[[name]](fut_cases[[name]][[3L]])
    run <- rkeops:::last_run()
    expect_match(run$backend, sprintf("^future \\(%d blocks\\)", if (is.null(blocks)) processes else blocks),
                 info = name)
    expect_length(setdiff(run$processes, Sys.getpid()), processes)
    expect_equal(got, fut_here[[name]], tolerance = 1e-13, info = name)
    expect_equal(got, fut_cases[[name]][[4L]], tolerance = 1e-10, info = name)
  }
}

# LazyTensor reductions, gradients (with forward passes and in a parameter), ranges and batches:
# the same under the plan in force (3 blocks) as in this process.
expect_future_others <- function() {
  local_precision("float64")
  calls <- list(
    lazy_sum_i = function() sum(exp(-rkeops::sqdist(Vi(fut_x), Vj(fut_y))) * Vi(fut_a), index = "i"),
    lazy_argkmin_j = function() argKmin(rkeops::sqdist(Vi(fut_x), Vj(fut_y)), K = 2, index = "j"),
    grad_sum_x = function() keops_grad(fut_ops$sum_j, "x")(c(fut_cases$sum_j[[3L]], list(fut_a %*% c(1, 2)))),
    grad_sum_s = function() keops_grad(fut_ops$sum_j, "s")(c(fut_cases$sum_j[[3L]], list(fut_a %*% c(1, 2)))),
    grad_lse_y = function() keops_grad(fut_ops$logsumexp_i, "y")(c(fut_cases$logsumexp_i[[3L]],
                                                                   list(fut_b[, 1, drop = FALSE]))),
    grad_kmin_x = function() keops_grad(fut_ops$kmin_argkmin_i, "x")(list(fut_x, fut_y, fut_e4)),
    ranges_sum = function() fut_ops$sum_j(fut_cases$sum_j[[3L]], ranges = fut_ranges),
    ranges_argmin = function() fut_ops$argmin_i(list(fut_x, fut_y), ranges = fut_ranges),
    batch_sum = function() fut_ops$sum_j(list(fut_xb, fut_y, fut_bb, fut_s)),
    batch_list = function() fut_ops$argkmin_j(list(list(fut_x[1:50, ], fut_x[51:203, ]), fut_y)),
    knn_pruned = function() keops_knn(fut_x, fut_y, k = 4, prune = TRUE),
    knn_cosine = function() keops_knn(fut_x, fut_y, k = 4, metric = "cosine")
  )
  here <- lapply(calls, function(f) f())
  old <- rkeops_use_future(blocks = 3)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  for (name in names(calls)) {
    got <- calls[[name]]()
    expect_match(rkeops:::last_run()$backend, "^future", info = name)
    expect_equal(got, here[[name]], tolerance = 1e-13, info = name)
  }
}
# Blocks of 60 and 143 rows of x against y_1..y_70 and y_71..y_157 (x_61..x_90 against both), and
# rows of x and y in no block (the reduction over nothing); a batch of 4 problems.
fut_ranges <- from_matrix(rbind(c(1, 60), c(61, 90), c(100, 203)), rbind(c(1, 70), c(71, 150)),
                          rbind(c(TRUE, FALSE), c(TRUE, TRUE), c(FALSE, TRUE)))
fut_xb <- array(rmat(4 * 41, 3), c(41, 3, 4))
fut_bb <- array(rmat(4 * fut_M, 2), c(fut_M, 2, 4))
fut_e4 <- rmat(fut_M, 4)   # the gradient input of a KMin of 4 values over i

test_that("reductions split over plan(multisession) equal one process and plain R", {
  skip_without_future()
  start_plan(future::multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  expect_future_cases(blocks = 3, processes = 2)      # 3 unequal blocks on 2 workers
  expect_future_cases(blocks = NULL, processes = 2)   # one block per worker
  expect_future_others()
  # the threads of the workers: what future grants a multisession worker (1), or `ncore`
  old <- rkeops_use_future(blocks = 2)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  fut_ops$sum_j(fut_cases$sum_j[[3L]])
  expect_identical(rkeops:::last_run()$ncore, c(1L, 1L))
  rkeops_use_future(blocks = 3, ncore = 2)
  fut_ops$sum_j(fut_cases$sum_j[[3L]])
  expect_identical(rkeops:::last_run()$ncore, c(2L, 2L, 2L))
})

test_that("reductions split over plan(cluster) of localhost workers equal one process and plain R", {
  skip_without_future()
  # localhost workers are started as local R processes (no SSH); rscript_libs: the library that
  # holds the rkeops under test.
  start_plan(future::cluster, workers = c("localhost", "localhost"), rscript_libs = .libPaths())
  on.exit(future::plan(future::sequential), add = TRUE)
  expect_future_cases(blocks = 5, processes = 2)
  expect_future_others()
})

test_that("plan(sequential) computes the blocks in this process with its options", {
  skip_without_future()
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  local_precision("float64")
  old_threads <- set_rkeops_options(ncore = 1)
  on.exit(set_rkeops_options(ncore = old_threads$ncore), add = TRUE)
  old <- rkeops_use_future(blocks = 4)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  got <- fut_ops$softmax_j(fut_cases$softmax_j[[3L]])
  expect_identical(rkeops:::last_run()$processes, Sys.getpid())
  expect_identical(rkeops:::last_run()$ncore, rep(1L, 4))   # this process's threads
  expect_match(rkeops:::last_run()$backend, "^future \\(4 blocks\\)")
  expect_equal(got, fut_here$softmax_j, tolerance = 1e-13)
  # the options come back, the future path still on
  expect_identical(get_rkeops_options("precision"), "float64")
  expect_identical(rkeops_use_future(blocks = 4), list(enable = TRUE, blocks = 4L, ncore = NULL))
  # more blocks than output rows: one block per row
  rkeops_use_future(blocks = 1000)
  three <- fut_ops$sum_j(list(fut_x[1:3, ], fut_y, fut_b, fut_s))
  expect_match(rkeops:::last_run()$backend, "^future \\(3 blocks\\)")
  expect_equal(three, fut_here$sum_j[1:3, ], tolerance = 1e-13)
})

test_that("progressr reports one step per block", {
  skip_without_future()
  skip_if_not_installed("progressr")
  start_plan(future::multisession, workers = 2)
  on.exit(future::plan(future::sequential), add = TRUE)
  old <- rkeops_use_future(blocks = 5)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  # A handler that records the number of steps announced and each step reached.
  seen <- list(max = NULL, steps = numeric(0))
  recorder <- function(...) {
    progressr::make_progression_handler("recorder", reporter = list(
      initiate = function(config, state, ...) seen$max <<- config$max_steps,
      update = function(config, state, ...) seen$steps <<- c(seen$steps, state$step)
    ), ...)
  }
  # (enable = TRUE: progressr reports nothing in a non-interactive session otherwise)
  res <- progressr::with_progress(fut_ops$sum_i(fut_cases$sum_i[[3L]]), handlers = recorder,
                                  enable = TRUE)
  expect_equal(res, fut_here$sum_i, tolerance = 1e-5)   # (float32, the default)
  expect_identical(seen$max, 5L)
  expect_equal(seen$steps, 1:5)
})

test_that("a plan of socket workers without TCP_NODELAY is pointed out once per session", {
  skip_without_future()
  verbosity <- get_rkeops_options("verbosity")
  on.exit(set_rkeops_options(verbosity = verbosity), add = TRUE)
  on.exit(assign("socket_noted", TRUE, envir = rkeops:::.rkeops_env), add = TRUE)   # no note for the others
  rkeops_enable_verbosity()
  forget_notices()
  sockets <- structure(function() NULL, class = c("FutureStrategy", "multisession", "cluster", "future", "function"))
  forked <- structure(function() NULL, class = c("FutureStrategy", "multicore", "future", "function"))
  expect_no_message(rkeops:::future_socket_note(forked, NULL))
  expect_no_message(rkeops:::future_socket_note(sockets, "no-delay"))
  expect_no_message(rkeops:::future_socket_note(sockets, c("keep-alive", "no-delay")))
  expect_message(rkeops:::future_socket_note(sockets, NULL), "socketOptions = \"no-delay\"\\) before plan\\(\\)")
  expect_no_message(rkeops:::future_socket_note(sockets, NULL))   # once
  forget_notices()
  rkeops_disable_verbosity()
  expect_no_message(rkeops:::future_socket_note(sockets, NULL))
  # what rkeops_use_future() finds: the plan in force and the option now
  rkeops_enable_verbosity()
  forget_notices()
  future::plan(future::cluster, workers = 1L)
  on.exit(future::plan(future::sequential), add = TRUE)
  old <- rkeops_use_future(FALSE)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  socket_options <- options(socketOptions = NULL)
  on.exit(options(socket_options), add = TRUE)
  expect_message(rkeops_use_future(blocks = 2), "no-delay")
})

test_that("rkeops_use_future() checks its arguments and says what to install", {
  expect_error(rkeops_use_future(blocks = 0), "'blocks' must be NULL or a positive whole number",
               class = "rkeops_error_input")
  expect_error(rkeops_use_future(blocks = 2.5), "'blocks' must be NULL or a positive whole number",
               class = "rkeops_error_input")
  expect_error(rkeops_use_future(blocks = "all"), "'blocks' must be NULL or a positive whole number",
               class = "rkeops_error_input")
  expect_error(rkeops_use_future(ncore = -1), "'ncore' must be NULL or a positive whole number",
               class = "rkeops_error_input")
  expect_error(rkeops_use_future(enable = NA), "'enable' must be TRUE or FALSE", class = "rkeops_error_input")
  expect_error(rkeops_use_future(enable = "yes"), "'enable' must be TRUE or FALSE",
               class = "rkeops_error_input")
  # an error changes nothing
  expect_identical(rkeops_use_future(FALSE), list(enable = FALSE, blocks = NULL, ncore = NULL))
  expect_error(rkeops:::future_packages_check(have = function(p) p != "future.apply"),
               "needs the package future.apply, not installed: install.packages\\(c\\(\"future.apply\"\\)\\)",
               class = "rkeops_error_input")
  expect_error(rkeops:::future_packages_check(have = function(p) FALSE),
               "needs the packages future and future.apply", class = "rkeops_error_input")
  expect_identical(rkeops:::future_packages_check(have = function(p) TRUE), TRUE)
})

test_that("the future path refuses the inputs that one process refuses, with the same words", {
  skip_without_future()
  future::plan(future::sequential)
  on.exit(future::plan(future::sequential), add = TRUE)
  bad <- list(
    rows = list(fut_x, fut_y, fut_a[-1, , drop = FALSE], fut_s),   # checked before cutting rows
    vector = list(as.vector(fut_x), fut_y, fut_a, fut_s),          # a Vi(3) given as a vector
    parameter = list(fut_x, fut_y, fut_a, c(1, 2))                 # checked by the engine, on a worker
  )
  here <- lapply(bad, function(input) tryCatch(fut_ops$sum_i(input), error = conditionMessage))
  expect_match(here$rows, "input 'a': has 202 rows, but 'x' has 203", fixed = TRUE)
  expect_match(here$vector, "input 'x': expected a matrix with 3 columns", fixed = TRUE)
  expect_match(here$parameter, "input 's': expected a parameter of length 1", fixed = TRUE)
  old <- rkeops_use_future(blocks = 2)
  on.exit(do.call(rkeops_use_future, old), add = TRUE)
  for (name in names(bad)) {
    expect_error(fut_ops$sum_i(bad[[name]]), here[[name]], fixed = TRUE, info = name,
                 class = "rkeops_error_input")
  }
})

# Several GPUs sharing each reduction (rkeops_use_gpu(device = c(0, 1)) or "all"). Everywhere: the
# option takes several devices and says clearly what it expects. Where a GPU is found: results
# shared by several GPUs (RKEOPS_TEST_GPUS, e.g. "0,0,0,0"; else every GPU found, or GPU 0 twice
# where there is one: its parts then share it, split and merged the same way) equal plain R in
# float64, for long outputs (blocks of rows) and short ones (parts of the reduced range, merged),
# both axes, block-sparse ones and batches.

gpu <- rkeops:::gpu_status(0L)

test_that("the device option takes one or several GPUs and refuses anything else", {
  old <- get_rkeops_options()
  on.exit(do.call(set_rkeops_options, old))
  set_rkeops_options(device = c(0, 1))
  expect_identical(get_rkeops_options("device"), c(0L, 1L))
  set_rkeops_options(device = c(-1, 2))   # -1: rkeops 2's first GPU
  expect_identical(get_rkeops_options("device"), c(0L, 2L))
  for (bad in list(c(0, NA), c(0, 1.5), numeric(0), "0", c(0, -2), list(0, 1))) {
    expect_error(set_rkeops_options(device = bad), "'device'.*several, which share each computation",
                 info = deparse(bad), class = "rkeops_error_input")
  }
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): several GPUs only checked to fall back to the CPU")
    expect_message(expect_false(rkeops_use_gpu(device = c(0, 1))), "computations stay on the CPU")
    expect_identical(get_rkeops_options("backend"), "CPU")
    expect_message(expect_false(rkeops_use_gpu(device = "all")), "computations stay on the CPU")
    expect_identical(get_rkeops_options("backend"), "CPU")
    status <- rkeops:::gpu_status(c(0L, 1L))
    expect_false(status$available)
    expect_identical(status$message, gpu$message)
  } else {
    expect_message(expect_true(rkeops_use_gpu(device = "all")), "GPU 0")
    count <- rkeops:::rust_result(.Call(rkeops:::wrap__gpu_count))$count
    expect_identical(get_rkeops_options("device"), seq_len(count) - 1L)
  }
})

test_that("reductions shared by several GPUs equal plain R (rows split, reduced range split, ranges)", {
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): reductions shared by several GPUs are not computed here")
    expect_false(gpu$available)
    return(invisible())
  }
  count <- rkeops:::rust_result(.Call(rkeops:::wrap__gpu_count))$count
  listed <- Sys.getenv("RKEOPS_TEST_GPUS")
  gpus <- if (nzchar(listed)) as.integer(strsplit(listed, ",")[[1]]) else
    if (count >= 2L) seq_len(count) - 1L else c(0L, 0L)
  old <- get_rkeops_options()
  on.exit(do.call(set_rkeops_options, old))
  set_rkeops_options(backend = "GPU", precision = "float64", device = gpus)
  set.seed(41)
  # 600011 output rows: more than one GPU fills (blocks of rows); 37: parts of the reduced range
  N <- 600011L; M <- 37L
  x <- matrix(runif(3 * N), N); y <- matrix(runif(3 * M), M)
  bx <- runif(N); by <- runif(M)
  D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
  args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "a = Vi(1)")
  shared <- function(formula, inputs) {
    res <- keops_kernel(formula, args)(inputs)
    expect_match(rkeops:::last_run()$backend, paste0("^GPUs ", paste(gpus, collapse = ", "), " "),
                 info = formula)
    res
  }
  inputs <- list(x, y, by, bx)
  # over j (rows split) and over i (37 rows: the reduced range split)
  expect_equal(shared("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", inputs), exp(-D2) %*% by,
               tolerance = 1e-12)
  expect_equal(shared("Sum_Reduction(Exp(-SqDist(x, y)) * a, 1)", inputs), t(exp(-D2)) %*% bx,
               tolerance = 1e-12)
  lse <- function(A) apply(A, 2, function(v) max(v) + log(sum(exp(v - max(v)))))
  expect_equal(as.vector(shared("LogSumExp_Reduction(-SqDist(x, y) + a, 1)", inputs)),
               lse(-D2 + bx), tolerance = 1e-12)
  expect_equal(as.vector(shared("LogSumExp_Reduction(-SqDist(x, y) + b, 0)", inputs)),
               lse(t(-D2) + by), tolerance = 1e-12)
  # 5 nearest x of each y (parts of the reduced range merged) and 3 nearest y of each x (rows)
  nn_i <- shared("ArgKMin_Reduction(SqDist(x, y), 5, 1)", inputs)
  expect_equal(unname(nn_i), t(apply(D2, 2, order))[, 1:5])
  nn_j <- shared("ArgKMin_Reduction(SqDist(x, y), 3, 0)", inputs)
  expect_equal(unname(nn_j), t(apply(D2, 1, order))[, 1:3])
  expect_equal(as.vector(shared("Max_Reduction(a - SqDist(x, y), 1)", inputs)),
               apply(bx - D2, 2, max), tolerance = 1e-12)
  # the same on one GPU
  set_rkeops_options(device = gpus[1])
  one <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 5, 1)", args)(inputs)
  expect_match(rkeops:::last_run()$backend, paste0("^GPU ", gpus[1], " "))
  expect_identical(one, nn_i)

  # a block-sparse reduction, split at its blocks of rows
  set_rkeops_options(device = gpus)
  n <- 3001L; m <- 2003L
  xs <- matrix(runif(3 * n), n); ys <- matrix(runif(3 * m), m); bs <- runif(m)
  bi <- cbind(c(1L, 701L, 1801L), c(700L, 1800L, n)); bj <- cbind(c(1L, 1001L), c(1000L, m))
  keep <- matrix(c(TRUE, FALSE, TRUE, TRUE, FALSE, TRUE), 3)
  r <- from_matrix(bi, bj, keep)
  mask <- matrix(FALSE, n, m)
  for (k in 1:3) for (l in 1:2) if (keep[k, l]) mask[bi[k, 1]:bi[k, 2], bj[l, 1]:bj[l, 2]] <- TRUE
  Ks <- exp(-(outer(rowSums(xs^2), rowSums(ys^2), "+") - 2 * xs %*% t(ys))) * mask
  got <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", args[1:3])(list(xs, ys, bs), ranges = r)
  expect_match(rkeops:::last_run()$backend, "^GPUs")
  expect_equal(got, Ks %*% bs, tolerance = 1e-12)

  # a batch (its members' blocks of rows go to the GPUs): each member as alone on one GPU
  B <- 5L; nb <- 1201L; mb <- 803L
  xb <- array(runif(3 * nb * B), c(nb, 3, B)); yb <- array(runif(3 * mb * B), c(mb, 3, B))
  knn5 <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 5, 0)", args[1:2])
  got <- knn5(list(xb, yb))
  expect_match(rkeops:::last_run()$backend, "^GPUs")
  for (k in seq_len(B)) {
    d2 <- outer(rowSums(xb[, , k]^2), rowSums(yb[, , k]^2), "+") - 2 * xb[, , k] %*% t(yb[, , k])
    expect_equal(unname(got[, , k]), t(apply(d2, 1, order))[, 1:5], info = paste("member", k))
  }

  # loops and matrices kept on a GPU run on the first GPU of the list
  xd <- keops_device(x)
  expect_output(print(xd), paste("kept on GPU", gpus[1], "in float64"))
  expect_equal(keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", args[1:3])(list(xd, y, by)),
               exp(-D2) %*% by, tolerance = 1e-12)
  expect_match(rkeops:::last_run()$backend, paste0("^GPU ", gpus[1], " "))
  keops_device_free(xd)
})

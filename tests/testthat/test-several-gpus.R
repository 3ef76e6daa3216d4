# Several GPUs sharing each reduction (rkeops_use_gpu(device = c(0, 1)) or "all"). Everywhere: the
# option takes several devices and says clearly what it expects. Where a GPU is found: results
# shared by several GPUs (RKEOPS_TEST_GPUS, e.g. "0,0,0,0"; else every GPU found, or GPU 0 twice
# where there is one: its parts then share it, split and merged the same way) equal plain R in
# float64, for long outputs (blocks of rows) and short ones (parts of the reduced range, merged),
# both axes, block-sparse ones and batches; programs spread over them (their points' rows shared
# out, sums over them merged) equal plain R and the same on one GPU, and so do the algorithm
# functions that run programs (K-means, EM, Sinkhorn).

gpu <- rkeops:::gpu_status(0L)

# The GPUs the tests share: RKEOPS_TEST_GPUS, else every GPU found, or GPU 0 twice where there is one.
test_gpus <- function() {
  count <- rkeops:::rust_result(.Call(rkeops:::wrap__gpu_count))$count
  listed <- Sys.getenv("RKEOPS_TEST_GPUS")
  if (nzchar(listed)) as.integer(strsplit(listed, ",")[[1]]) else if (count >= 2L) seq_len(count) - 1L else c(0L, 0L)
}

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
  gpus <- test_gpus()
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

test_that("programs and the algorithm functions spread over several GPUs equal plain R and one GPU", {
  if (!isTRUE(gpu$available)) {
    message("NO GPU (", gpu$message, "): programs spread over GPUs are not run here (the engine's ",
            "tests spread them over parts in host memory)")
    expect_false(gpu$available)
    return(invisible())
  }
  gpus <- test_gpus()
  old <- get_rkeops_options()
  on.exit(do.call(set_rkeops_options, old))
  Sys.setenv(RKEOPS_SPREAD_ROWS = "1000")   # (spread at these sizes)
  on.exit(Sys.unsetenv("RKEOPS_SPREAD_ROWS"), add = TRUE)
  set_rkeops_options(backend = "GPU", precision = "float64", device = gpus)
  set.seed(43)
  # Sinkhorn between two clouds of 5003 and 2999 points (the rows of x split; g's log-sum-exps over
  # them merged), against plain R
  n <- 5003L; m <- 2999L
  x <- matrix(runif(n)); y <- matrix(runif(m))
  lmu <- matrix(log(rep(1 / n, n))); lnu <- matrix(log(rep(1 / m, m)))
  prog <- keops_program(sinkhorn_steps(), iterations = 4)
  input <- list(x = x, y = y, lmu = lmu, lnu = lnu, f = matrix(0, n), g = matrix(0, m), s = 20)
  res <- prog(input)
  expect_match(rkeops:::last_run()$backend, paste0("^GPUs ", paste(gpus, collapse = ", "), " "))
  lse <- function(v) max(v) + log(sum(exp(v - max(v))))
  C <- outer(x[, 1], y[, 1], "-")^2
  f <- rep(0, n); g <- rep(0, m)
  for (t in 1:4) {
    g <- vapply(1:m, function(j) lse(lmu - f - C[, j] * 20), 1)
    f <- vapply(1:n, function(i) lse(lnu - g - C[i, ] * 20), 1)
  }
  expect_equal(res$f, matrix(f), tolerance = 1e-10)
  expect_equal(res$g, matrix(g), tolerance = 1e-10)
  expect_identical(prog(input)$g, res$g)   # the same bits from run to run

  # the functions, on several GPUs and on the first alone
  xs <- matrix(rnorm(3 * 20011L), ncol = 3) + sample(0:3, 20011L, replace = TRUE)
  both <- function(f) {
    set_rkeops_options(device = gpus)
    spread <- f()
    set_rkeops_options(device = gpus[1])
    list(spread = spread, one = f())
  }
  km <- both(function() suppressWarnings(keops_kmeans(xs, xs[c(1, 5, 9, 13, 17), ], iter.max = 8)))
  expect_identical(km$spread$cluster, km$one$cluster)
  expect_equal(km$spread$centers, km$one$centers, tolerance = 1e-10)
  init <- list(pro = rep(0.25, 4), mean = t(xs[c(2, 4, 6, 8), ]), variance = list(sigma = array(diag(3), c(3, 3, 4))))
  em <- both(function() keops_gmm(xs, 4, init = init, iter.max = 6, tol = 0))
  expect_equal(em$spread$loglik, em$one$loglik, tolerance = 1e-10)
  expect_equal(em$spread$parameters$mean, em$one$parameters$mean, tolerance = 1e-10)
  ot <- both(function() keops_sinkhorn(xs[1:3001, ], xs[3002:7000, ] + 1, multiscale = FALSE, tol = NULL))
  expect_equal(as.vector(ot$spread), as.vector(ot$one), tolerance = 1e-10)
  # solve()'s preconditioner: its pieces (a program over the N rows, spread, the products merged)
  # against dense R, and a solve of fixed rank (the same landmarks) against one GPU
  N <- 2503L
  u <- matrix(runif(2 * N), N) * 8
  K <- exp(-rkeops::sqdist(Vi(u), Vj(u)) / 2)
  Kd <- exp(-(outer(u[, 1], u[, 1], "-")^2 + outer(u[, 2], u[, 2], "-")^2) / 2)
  S <- sample.int(N, 70)
  set_rkeops_options(device = gpus)
  piece <- rkeops:::nystrom_piece_program(K, 16L)(list(V0 = u, V1 = u, V0_S = u[S, ], V1_new = u[S[31:46], ],
                                                       onehot = diag(16)))
  expect_match(rkeops:::last_run()$backend, paste0("^GPUs ", paste(gpus, collapse = ", "), " "))
  expect_equal(piece$products, Kd[S, ] %*% Kd[, S[31:46]], tolerance = 1e-10)
  pieces <- rkeops:::nystrom_pieces(K, S, S[31:70], sample.int(N, 90), piece = 16L)
  expect_equal(pieces$products, Kd[S, ] %*% Kd[, S[31:70]], tolerance = 1e-10)
  b <- sin(u[, 1]) + cos(u[, 2])
  solved <- both(function() {
    set.seed(8)
    solve(K, b, alpha = 0.1, rank = 120L)
  })
  # (the same to the conjugate gradients' tolerance: their iterates follow the sums' rounding, which
  # the GPUs' parts change; measured 1e-7 relative on two H200s)
  expect_equal(solved$spread, solved$one, tolerance = 1e-5)
  # (the system solved: conjugate gradients to eps = 1e-6)
  expect_lt(sqrt(sum((Kd %*% solved$spread + 0.1 * solved$spread - b)^2) / sum(b^2)), 1e-5)
})

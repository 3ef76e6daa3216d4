# keops_program_optim(): L-BFGS over a program's buffer in one engine call, against closed forms and
# stats::optim() on the same problems written in plain R (float64).

# loss(x) = sum_i w_i |x_i - c_i|^2 + 1/2 sum_ij exp(-|c_i - c_j|^2) <x_i, x_j>
kernel_quadratic <- function() {
  keops_program(list(
    kx = keops_step(keops_kernel("Sum_Reduction(Exp(-SqDist(ci, cj)) * xj, 0)", c("ci = Vi(2)", "cj = Vj(2)", "xj = Vj(2)")),
                    reads = c(ci = "c", cj = "c", xj = "x")),
    loss = keops_kernel("Sum_Reduction(w * SqDist(x, c) + (x | kx) / 2, 1)",
                        c("w = Vi(1)", "x = Vi(2)", "c = Vi(2)", "kx = Vi(2)"))))
}

test_that("a convex kernel-weighted quadratic reaches its closed-form minimiser", {
  local_precision("float64")
  set.seed(11)
  n <- 37
  c0 <- matrix(rnorm(2 * n), n, 2)
  w <- runif(n, 0.5, 2)
  fit <- keops_program_optim(kernel_quadratic(), list(x = matrix(0, n, 2), c = c0, w = w), of = "loss", wrt = "x",
                             control = list(maxit = 500, factr = 0, pgtol = 1e-12))
  # the gradient 2 W (x - c) + K x vanishes: (2 W + K) x = 2 W c
  K <- exp(-as.matrix(dist(c0))^2)
  x <- unname(solve(2 * diag(w) + K, 2 * w * c0))
  expect_equal(fit$par, x, tolerance = 1e-6)
  expect_identical(dim(fit$par), c(37L, 2L))
  loss <- sum(w * rowSums((x - c0)^2)) + sum(x * (K %*% x)) / 2
  expect_equal(fit$value, loss, tolerance = 1e-10)
  expect_identical(fit$convergence, 0L)
  expect_length(fit$trace, fit$counts[["function"]])
  expect_equal(fit$trace[length(fit$trace)], fit$value)
  expect_lt(fit$value, fit$trace[1L])
  # a vector `wrt` comes back a vector; maxit = 0 returns the start
  one <- keops_program_optim(kernel_quadratic(), list(x = matrix(0, n, 2), c = c0, w = w), of = "loss", wrt = "x",
                             control = list(maxit = 0))
  expect_identical(c(one$counts[["function"]], one$convergence), c(1L, 1L))
  expect_equal(one$value, sum(w * rowSums(c0^2)))
})

# A non-convex problem: a Rosenbrock valley for each of N points of the plane, and a Gaussian
# repulsion between the points: loss = sum_i 100 (y_i - x_i^2)^2 + (1 - x_i)^2 + sum_ij exp(-|z_i - z_j|^2).
rosen_r <- function(z, n) {
  z <- matrix(z, n, 2)
  d2 <- as.matrix(dist(z))^2
  sum(100 * (z[, 2] - z[, 1]^2)^2 + (1 - z[, 1])^2) + sum(exp(-d2))
}
rosen_grad_r <- function(z, n) {
  z <- matrix(z, n, 2)
  K <- exp(-as.matrix(dist(z))^2)
  r <- z[, 2] - z[, 1]^2
  g <- cbind(-400 * z[, 1] * r - 2 * (1 - z[, 1]), 200 * r)
  # d/dz_i sum_jk exp(-|z_j - z_k|^2) = -4 sum_j K_ij (z_i - z_j)
  as.vector(g - 4 * (rowSums(K) * z - K %*% z))
}

test_that("a non-convex problem reaches optim()'s L-BFGS-B value, with a small gradient", {
  local_precision("float64")
  n <- 5
  z0 <- cbind(seq(-1.3, -0.9, length.out = n), seq(0.6, 1.4, length.out = n))
  prog <- keops_program(list(
    rep = keops_step(keops_kernel("Sum_Reduction(Exp(-SqDist(zi, zj)), 0)", c("zi = Vi(2)", "zj = Vj(2)")),
                     reads = c(zi = "z", zj = "z")),
    loss = keops_kernel(
      "Sum_Reduction(100 * Square(Elem(z, 1) - Square(Elem(z, 0))) + Square(1 - Elem(z, 0)) + rep, 1)",
      c("z = Vi(2)", "rep = Vi(1)"))))
  fit <- keops_program_optim(prog, list(z = z0), of = "loss", wrt = "z", control = list(maxit = 1000, factr = 10))
  ref <- stats::optim(as.vector(z0), rosen_r, rosen_grad_r, n = n, method = "L-BFGS-B",
                      control = list(maxit = 1000, factr = 10))
  expect_identical(ref$convergence, 0L)
  expect_identical(fit$convergence, 0L)
  expect_lte(fit$value, ref$value * (1 + 1e-6))
  expect_equal(fit$value, rosen_r(fit$par, n), tolerance = 1e-12)
  expect_lt(max(abs(rosen_grad_r(fit$par, n))), 1e-4)
  # (near the minimum the gradient is a difference of terms of order 100: an absolute tolerance,
  # the GPU sums in another order)
  expect_lt(max(abs(as.vector(fit$gradient) - rosen_grad_r(fit$par, n))), 1e-9)
})

test_that("keops_landmarks(optimizer = 'engine') reaches the loss of optimizer = 'optim'", {
  local_precision("float64")
  theta <- 2 * pi * (0:22) / 23
  q0 <- cbind(cos(theta), sin(theta))
  target <- cbind(0.2 + 1.3 * cos(theta), 0.7 * sin(theta))
  args <- list(q0, target, sigma = 0.5, nt = 5, lambda = 10, iter.max = 300)
  eng <- do.call(keops_landmarks, c(args, optimizer = "engine"))
  opt <- do.call(keops_landmarks, c(args, optimizer = "optim"))
  expect_identical(opt$convergence, 0L)
  expect_identical(eng$convergence, 0L)
  expect_equal(eng$value, opt$value, tolerance = 1e-4)
  expect_equal(eng$loss[length(eng$loss)], eng$value)
  # the engine's E at its p0 is the R path's E there (the energy term from the schedule)
  problem <- landmarks_problem(q0, target, 0.5, 5L, 10)
  expect_equal(problem$fn(as.vector(eng$p0)), eng$value, tolerance = 1e-12)
  expect_equal(eng$loss[1L], problem$fn(rep(0, length(q0))), tolerance = 1e-12)
  expect_equal(eng$distance, opt$distance, tolerance = 1e-3)
  expect_error(keops_landmarks(q0, target, 0.5, lambda = 1, optimizer = "bfgs"), class = "rkeops_error_input")
})

test_that("keops_program_optim() names the argument it refuses", {
  n <- 7
  input <- list(x = matrix(0, n, 2), c = matrix(1, n, 2), w = rep(1, n))
  prog <- kernel_quadratic()
  arg_of <- function(...) tryCatch(keops_program_optim(...), rkeops_error_input = function(e) e$arg)
  # of: not one value; not a buffer; not a string
  expect_identical(arg_of(prog, input, of = "kx", wrt = "x"), "of")
  expect_error(keops_program_optim(prog, input, of = "kx", wrt = "x"), "'of' must be a buffer of one value; 'kx' is 7 x 2")
  expect_identical(arg_of(prog, input, of = "nothing", wrt = "x"), "of")
  expect_identical(arg_of(prog, input, of = 1, wrt = "x"), "of")
  # wrt: not given in input, not a string
  expect_identical(arg_of(prog, input, of = "loss", wrt = "kx"), "wrt")
  expect_identical(arg_of(prog, input, of = "loss", wrt = c("x", "c")), "wrt")
  # control
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", control = list(maxiter = 3)), "control")
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", control = list(maxit = -1)), "control$maxit")
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", control = list(factr = NA)), "control$factr")
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", control = list(m = 0)), "control$m")
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", control = 5), "control")
  expect_identical(arg_of(function(x) x, input, of = "loss", wrt = "x"), "program")
  # schedule: not a named list (as keops_program_grad() refuses it)
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", schedule = list(matrix(1, n, 2))), "schedule")
  expect_identical(arg_of(prog, input, of = "loss", wrt = "x", schedule = "c"), "schedule")
})

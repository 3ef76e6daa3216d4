# Landmark matching by geodesic shooting (issue 38): keops_landmarks().
#
# The model and the program are those of vignettes/landmarks.Rmd (chunks `program` and
# `program-cost`), with the forward Euler scheme of Wang's paper (seed 003): the shooting is one
# keops_program() whose last step is the matching loss, and keops_program_grad() gives, in one
# pass, the gradient of the loss in p0 and the program's outputs (the final landmarks, the loss).
# The kinetic energy H(q0, p0) and its gradient K(q0) p0 come from one more reduction.

#' Landmark matching by geodesic shooting
#'
#' Finds the initial momentum `p0` of the geodesic that carries the landmarks `q0` closest to
#' `target`, in the LDDMM model of `vignette("landmarks")` with the Gaussian kernel
#' \eqn{k(x, y) = \exp(-|x - y|^2 / (2 \sigma^2))}{k(x, y) = exp(-|x - y|^2 / (2 sigma^2))}
#' (the vignette writes \eqn{\exp(-|x - y|^2 / \sigma^2)}{exp(-|x - y|^2 / sigma^2)}: its `sigma` is
#' `sqrt(2)` times this one). `p0` minimises
#' \deqn{E(p_0) = H(q_0, p_0) + \lambda \sum_i |q_i(1) - \mathrm{target}_i|^2, \qquad
#'   H(q, p) = \frac12 \sum_{i,j} k(q_i, q_j) \langle p_i, p_j \rangle,}{E(p0) = H(q0, p0) +
#'   lambda sum_i |q_i(1) - target_i|^2,   H(q, p) = 1/2 sum_ij k(q_i, q_j) <p_i, p_j>,}
#' where \eqn{q(1)} is the end of the Hamiltonian flow \eqn{\dot q = \partial_p H, \dot p =
#' -\partial_q H}{dq/dt = dH/dp, dp/dt = -dH/dq} from \eqn{(q_0, p_0)}{(q0, p0)} over
#' \eqn{t \in [0, 1]}{t in [0, 1]}, integrated by `nt` forward Euler steps (as Algorithm 1 of
#' J. Wang, *Fast geodesic shooting for landmark matching using CUDA*; the vignette's default is
#' Ralston's second-order scheme). L-BFGS (in the engine, [keops_program_optim()], or
#' [stats::optim()] with `method = "L-BFGS-B"` and no bounds: see `optimizer`) minimises \eqn{E}
#' itself, from \eqn{p_0 = 0}{p0 = 0} (no motion), with at most `iter.max` iterations.
#' (The vignette's `matching_program()` minimises \eqn{\gamma H + \sum_i |q_i(1) -
#' \mathrm{target}_i|^2}{gamma H + sum_i |q_i(1) - target_i|^2}, which is \eqn{E / \lambda}{E /
#' lambda} with \eqn{\gamma = 1 / \lambda}{gamma = 1 / lambda}: the same minimiser.)
#'
#' Each evaluation of \eqn{E} and its gradient (`optim()` asks for both at each point; they are
#' computed together) is one run of a [keops_program()] and its gradient
#' ([keops_program_grad()]) through every step, plus one reduction for \eqn{H(q_0, p_0)}{H(q0, p0)}
#' and its gradient \eqn{K(q_0) p_0}{K(q0) p0}. It costs `2 * nt + 1` reductions forward and
#' `4 * nt` backward, each a sum over the `N^2` pairs of landmarks (time quadratic in `N`; the
#' Euler updates and the matching term are linear). No `N x N` matrix is ever stored: the memory is
#' linear in `N`, the tape of the backward pass keeping the `nt` values of `q`, `p` and of the two
#' vector fields (`4 * nt * N * D` numbers). On a GPU the whole evaluation, forward and backward,
#' stays on the device, with one wait at the end; on a CPU, as in the examples, the reductions run
#' on the cores of the host. After the optimisation, one more run of the shooting, which records
#' `q` after each step, gives the trajectory. The precision is that of [rkeops_use_float32()] (the
#' default) or [rkeops_use_float64()]: in float32, the rounding of \eqn{E} and of its gradient
#' bounds how far L-BFGS-B can go (use float64 for tight tolerances).
#'
#' @param q0 The source landmarks: a numeric matrix, one landmark per row (`N >= 2` rows, `D >= 1`
#'   columns), finite values.
#' @param target The target landmarks, a matrix of the shape of `q0`: row `i` is where landmark `i`
#'   should go.
#' @param sigma The width of the kernel, a positive number.
#' @param nt The number of time steps of the flow, a whole number >= 1.
#' @param lambda The weight of the matching term, a positive number (larger: closer matching, a
#'   more energetic deformation).
#' @param iter.max The most iterations of L-BFGS-B (`control = list(maxit = iter.max)`), a whole
#'   number >= 1.
#' @param optimizer `"optim"` (the default): [stats::optim()] in R, whose every evaluation is a
#'   call of [keops_program_grad()] and one more reduction; `"engine"`: the whole minimisation is
#'   one engine call, [keops_program_optim()] on a program whose last step is \eqn{E} itself (the
#'   kinetic energy \eqn{H(q_0, p_0)}{H(q0, p0)} taken from the first step's \eqn{K(q_0) p_0}{K(q0)
#'   p0}). Both are L-BFGS with `optim()`'s stopping rules (their line searches differ: their paths,
#'   not always their minima: on the seed 003 setup, float32, H200, 400 iterations, the engine's
#'   stopped at 206.07 against optim's 205.64, and no faster, its program having one more step).
#' @return An object of class `"keops_landmarks"`, a list of
#'   * `p0`: the initial momentum found, an `N x D` matrix;
#'   * `q`: the trajectory of the landmarks, an array `nt + 1 x N x D`: `q[1, , ]` is `q0`,
#'     `q[t + 1, , ]` the landmarks after step `t`, `q[nt + 1, , ]` is \eqn{q(1)};
#'   * `target`: the target, an `N x D` matrix (`plot(fit)` draws it with `q`, see
#'     [plot.keops_landmarks()]);
#'   * `loss`: \eqn{E} at each evaluation that the optimiser made, in order (line searches make
#'     some go up);
#'   * `distance`: a `2 x 2` matrix, rows `before` (`q0`) and `after` (\eqn{q(1)}), columns `mean`
#'     and `max`: the mean and the largest Euclidean distance of a landmark to its target;
#'   * `value`: \eqn{E} at `p0`;
#'   * `sigma`, `lambda`, `nt`: the arguments;
#'   * `counts`, `convergence`, `message`: those of [stats::optim()] (`convergence` 1: `iter.max`
#'     reached), or of [keops_program_optim()], which gives them as `optim()` does;
#'   * `optimizer`: the argument;
#'   * `call`: the call.
#' @seealso `vignette("landmarks")` (the model, the checks, a larger example, pictures),
#'   [keops_program()], [keops_program_grad()].
#' @export
#' @examples
#' # 30 landmarks on a circle, matched to a shifted ellipse
#' theta <- 2 * pi * (0:29) / 30
#' q0 <- cbind(cos(theta), sin(theta))
#' target <- cbind(0.2 + 1.3 * cos(theta), 0.7 * sin(theta))
#' fit <- keops_landmarks(q0, target, sigma = 0.5, nt = 10, lambda = 10, iter.max = 20)
#' fit
#' fit$distance
#' dim(fit$q)
#' plot(fit)   # start (grey), target (red), trajectories and q(1) (blue)
keops_landmarks <- function(q0, target, sigma, nt = 40, lambda, iter.max = 400,
                            optimizer = c("optim", "engine")) {
  call <- match.call()
  fun <- "keops_landmarks"
  q0 <- check_points(q0, "q0", fun, min_rows = 2L, allow_vector = FALSE, allow_data_frame = FALSE)
  target <- check_points(target, "target", fun, min_rows = 2L, allow_vector = FALSE,
                         allow_data_frame = FALSE)
  if (!identical(dim(target), dim(q0))) {
    rkeops_abort("keops_landmarks(): 'target' must have the shape of 'q0' (", nrow(q0), " x ", ncol(q0),
                 "), not ", nrow(target), " x ", ncol(target), kind = "input", arg = "target")
  }
  check_number(sigma, "sigma", fun, sign = "positive")
  nt <- check_whole(nt, "nt", fun, min = 1, max = .Machine$integer.max, show_value = TRUE)
  check_number(lambda, "lambda", fun, sign = "positive")
  iter.max <- check_whole(iter.max, "iter.max", fun, min = 1, max = .Machine$integer.max, show_value = TRUE)
  optimizer <- check_choice(optimizer, c("optim", "engine"), "optimizer")

  problem <- landmarks_problem(q0, target, sigma, nt, lambda)
  fit <- if (optimizer == "engine") {
    landmarks_engine_fit(q0, target, sigma, nt, lambda, iter.max)
  } else {
    landmarks_optim_fit(problem, length(q0), iter.max)
  }
  loss <- fit$loss
  p0 <- matrix(fit$par, nrow(q0), ncol(q0))
  q <- problem$trajectory(p0)
  dist_stats <- function(a) {
    d <- sqrt(rowSums((a - target)^2))
    c(mean = mean(d), max = max(d))
  }
  distance <- rbind(before = dist_stats(q0), after = dist_stats(matrix(q[nt + 1L, , ], nrow(q0), ncol(q0))))
  structure(list(p0 = p0, q = q, target = target, loss = loss, distance = distance, value = fit$value, sigma = sigma, lambda = lambda,
                 nt = nt, counts = fit$counts, convergence = fit$convergence, message = fit$message,
                 optimizer = optimizer, call = call), class = "keops_landmarks")
}

#' @export
print.keops_landmarks <- function(x, ...) {
  d <- dim(x$q)
  cat("Landmark matching by geodesic shooting (keops_landmarks)\n")
  cat(sprintf("  N = %d landmarks in D = %d, nt = %d Euler steps, sigma = %s, lambda = %s\n",
              d[2L], d[3L], d[1L] - 1L, format(x$sigma, digits = 4), format(x$lambda, digits = 4)))
  status <- switch(as.character(x$convergence), "0" = "converged", "1" = "iteration limit reached",
                   paste0("convergence ", x$convergence))
  method <- if (identical(x$optimizer, "optim")) "L-BFGS-B (optim)" else "L-BFGS (engine)"
  cat(sprintf("  %s: %d evaluations, %s%s\n", method, x$counts[[1L]], status,
              if (is.null(x$message) || x$convergence == 1) "" else paste0(" (", x$message, ")")))
  if (length(x$loss)) {
    cat(sprintf("  E: %s -> %s\n", format(x$loss[1L], digits = 4), format(x$value, digits = 4)))
  }
  cat(sprintf("  landmark distance to target: mean %s -> %s, max %s -> %s\n",
              format(x$distance["before", "mean"], digits = 4), format(x$distance["after", "mean"], digits = 4),
              format(x$distance["before", "max"], digits = 4), format(x$distance["after", "max"], digits = 4)))
  invisible(x)
}

# The steps of `nt` forward Euler steps of the flow of H in dimension `dim`, with k(x, y) =
# exp(-s |x - y|^2) (s = 1 / (2 sigma^2), a parameter): as the vignette's shooting_program(scheme =
# "euler"). Buffers: q, p (the state), dq = dH/dp, dp = -dH/dq, s and dt (parameters); with `loss`,
# a last step loss = sum_i |q_i - target_i|^2. Returns the steps and the operator dH/dp.
landmarks_steps <- function(dim, loss = TRUE) {
  v <- function(name, cat) sprintf("%s = %s(%d)", name, cat, dim)
  dHdp <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(qi, qj)) * pj, 0)",
                       c(v("qi", "Vi"), v("qj", "Vj"), v("pj", "Vj"), "s = Pm(1)"))
  minus_dHdq <- keops_kernel(
    "Sum_Reduction(2 * s * Exp(-s * SqDist(qi, qj)) * (pi | pj) * (qi - qj), 0)",
    c(v("qi", "Vi"), v("qj", "Vj"), v("pi", "Vi"), v("pj", "Vj"), "s = Pm(1)"))
  move <- keops_map("x + h * k", c(v("x", "Vi"), "h = Pm(1)", v("k", "Vi")))
  steps <- list(
    dq = keops_step(dHdp, reads = c(qi = "q", qj = "q", pj = "p")),
    dp = keops_step(minus_dHdq, reads = c(qi = "q", qj = "q", pi = "p", pj = "p")),
    q = keops_step(move, reads = c(x = "q", h = "dt", k = "dq")),
    p = keops_step(move, reads = c(x = "p", h = "dt", k = "dp")))
  if (loss) {
    steps$loss <- keops_kernel("Sum_Reduction(SqDist(q, target), 1)", c(v("q", "Vi"), v("target", "Vi")))
  }
  list(steps = steps, dHdp = dHdp)
}

# The matching problem of keops_landmarks() (arguments checked there): `fn(x)` and `gr(x)`, E and
# its gradient at p0 = matrix(x, N, D) (as optim() takes them), computed together by `evaluate(x)`
# (which keeps the last point: optim() asks for both at each point), and `trajectory(p0)`, the
# array nt + 1 x N x D of the landmarks along the flow from (q0, p0). The kernels of the formulas
# are cached by the package; the programs are made once here.
landmarks_problem <- function(q0, target, sigma, nt, lambda) {
  n <- nrow(q0)
  dim <- ncol(q0)
  s <- 1 / (2 * sigma^2)
  dt <- 1 / nt
  shooting <- landmarks_steps(dim)
  program <- keops_program(shooting$steps, iterations = nt, output = c("q", "loss"))
  dHdp <- shooting$dHdp
  constants <- list(q = q0, target = target, s = s, dt = dt)
  last <- NULL
  evaluate <- function(x) {
    if (is.null(last) || !identical(last$x, x)) {
      p0 <- matrix(x, n, dim)
      g <- keops_program_grad(program, c(constants, list(p = p0)), of = "loss", wrt = "p")
      Kp <- dHdp(list(q0, q0, p0, s))       # dH/dp at (q0, p0): H = <p0, K p0> / 2
      shot <- attr(g, "outputs")
      last <<- list(x = x, q1 = shot$q, E = sum(p0 * Kp) / 2 + lambda * shot$loss[[1L]],
                    grad = as.vector(Kp + lambda * g$p))
    }
    last
  }
  tracer <- NULL
  trajectory <- function(p0) {
    if (is.null(tracer)) {
      tracer <<- keops_program(landmarks_steps(dim, loss = FALSE)$steps, iterations = nt, trace = "q",
                               output = "q")
    }
    res <- tracer(list(q = q0, p = p0, s = s, dt = dt))
    path <- attr(res, "trace")$q            # row t: q after step t, as.vector() of N x D
    out <- array(0, c(nt + 1L, n, dim))
    out[1L, , ] <- q0
    out[-1L, , ] <- path
    out
  }
  list(fn = function(x) evaluate(x)$E, gr = function(x) evaluate(x)$grad, evaluate = evaluate,
       trajectory = trajectory)
}

# The minimisation of keops_landmarks(optimizer = "optim"): stats::optim() on `problem`
# (landmarks_problem()) from p0 = 0, each evaluation an engine call; `loss` its values in order.
landmarks_optim_fit <- function(problem, len, iter.max) {
  loss <- numeric()
  # (optim() makes at most about iter.max evaluations plus its line searches: the bar's total is not
  # known)
  bar <- loop_progress(NA, "keops_landmarks() evaluations")
  on.exit(bar$done(), add = TRUE)
  fn <- function(x) {
    e <- problem$fn(x)
    loss <<- c(loss, e)
    bar$set(length(loss))
    e
  }
  fit <- stats::optim(rep(0, len), fn, problem$gr, method = "L-BFGS-B", control = list(maxit = iter.max))
  fit$loss <- loss
  fit
}

# The minimisation of keops_landmarks(optimizer = "engine"): one keops_program_optim() call on the
# shooting whose last step is E = H(q0, p0) + lambda sum_i |q_i(1) - target_i|^2 itself. H(q0, p0)
# = <p0, K(q0) p0> / 2 comes from the first iteration's dq = K(q0) p0: a step adds hw (p | dq) to
# each row of `e`, with hw = 1/2 at the first iteration and 0 after (a schedule), so that the
# gradient of E in p0 flows through it too (K p0, as optim()'s path adds it).
landmarks_engine_fit <- function(q0, target, sigma, nt, lambda, iter.max) {
  dim <- ncol(q0)
  v <- function(name, cat) sprintf("%s = %s(%d)", name, cat, dim)
  shooting <- landmarks_steps(dim, loss = FALSE)$steps
  energy <- keops_map("e + hw * (p | dq)", c("e = Vi(1)", "hw = Pm(1)", v("p", "Vi"), v("dq", "Vi")))
  loss <- keops_kernel("Sum_Reduction(l * SqDist(q, target) + e, 1)",
                       c(v("q", "Vi"), v("target", "Vi"), "l = Pm(1)", "e = Vi(1)"))
  # (dq and dp side by side: the engine fuses them into one reduction over the pairs)
  steps <- c(shooting[c("dq", "dp")], list(e = energy), shooting[c("q", "p")], list(E = loss))
  program <- keops_program(steps, iterations = nt, output = "E")
  input <- list(q = q0, p = matrix(0, nrow(q0), dim), target = target, s = 1 / (2 * sigma^2), dt = 1 / nt,
                e = matrix(0, nrow(q0), 1L), hw = 0.5, l = lambda)
  fit <- keops_program_optim(program, input, of = "E", wrt = "p", control = list(maxit = iter.max),
                             schedule = list(hw = c(0.5, 0)))
  fit$loss <- fit$trace
  fit
}

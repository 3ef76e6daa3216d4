# solve() for LazyTensors: conjugate gradients with the engine's products, preconditioned by a
# Nystrom approximation of K built from a few of its columns, and the gradients of the solution.

#' Solve a linear system with a symbolic matrix
#'
#' Solves \eqn{(\alpha I + K) x = b}{(alpha I + K) x = b} by preconditioned conjugate gradients, where `K` is a
#' LazyTensor of dimension 1 standing for a symmetric positive semi-definite
#' `N x N` matrix (such as `exp(-sqdist(Vi(x), Vj(x)))`) and
#' \eqn{\alpha I + K}{alpha I + K} is positive definite. Each product by `K` is computed by
#' the engine (`K %*% p`, in the precision of [get_rkeops_options()]); the
#' iterations run in R in double precision, on all the columns of `b` at once.
#'
#' **The preconditioner** (`precond = "nystrom"`, the default) is the
#' randomized Nystrom preconditioner of Frangella, Tropp and Udell (2023),
#' also used by Falkon: `rank` landmarks \eqn{S}, drawn uniformly at random
#' among the `N` points, give the columns \eqn{C = K_{\cdot S}}{C = K[, S]} (`N x rank`, computed by
#' the engine: `N * rank` kernel evaluations, never the whole matrix) and
#' \eqn{W = K_{SS}}{W = K[S, S]}; the conjugate gradients are preconditioned by
#' \eqn{\gamma I + C W^{-1} C^T}{gamma I + C W^-1 C'}, applied by the Woodbury identity, with
#' \eqn{\gamma = \alpha + \hat\lambda_{min}}{gamma = alpha + lambda_min}, the smallest eigenvalue of the approximation. When
#' `K` has few eigenvalues above \eqn{\alpha}{alpha} (smooth kernels, a kernel
#' width that is not small, a nugget \eqn{\alpha}{alpha} that is not tiny), a rank
#' above that number leaves a nearly perfectly conditioned system: a few
#' iterations instead of hundreds. Building it costs about `N * rank^2`
#' floating point operations (in float64, by the engine or by R's BLAS,
#' whichever is faster), then `4 N rank` per iteration.
#'
#' With `rank = NULL` (the default) the rank is chosen automatically: it
#' starts at 64 landmarks and grows by half at a time while the approximation
#' has more than `rank / 2` eigenvalues above \eqn{\alpha}{alpha} (the spectrum
#' above the nugget is not captured yet), within a time budget: to pass the
#' number of eigenvalues above \eqn{\alpha}{alpha}, which makes the iterations
#' collapse, a tenth of the time that plain conjugate gradients would take
#' (their iterations estimated from the largest eigenvalue, each timed with a
#' product by `K` on an eighth of its rows, at most \eqn{10^{12}}{10^12} pairs:
#' the rank adapts to the problem and to the machine); past it, the time of 4
#' iterations. On a GPU the columns are not kept: each block of 64 landmarks'
#' columns is made and used on the device (one program, spread over several
#' GPUs as [keops_program()]'s). The rank is at most 2000
#' (and `2^27 / N`, which bounds the memory of the columns to 1 GB).
#' The landmarks are drawn with R's random number generator: call
#' [set.seed()] first for reproducible iteration counts (the solution does
#' not depend on them beyond `eps`). `precond = "none"` gives plain conjugate
#' gradients.
#' @param a The LazyTensor `K`, with as many rows (`i`) as columns (`j`).
#' @param b An `N x E` numeric matrix (or a vector of length `N`).
#' @param alpha A non-negative number added to the diagonal (a ridge or
#'   nugget).
#' @param eps The tolerance: the iterations stop when the residual of each
#'   column is below `eps` times the norm of that column of `b`.
#' @param maxiter The maximum number of iterations (products by `K`); a
#'   warning is given when they do not suffice.
#' @param ranges Optional: a block-sparse `K` (see [keops_ranges]): every
#'   product by `K` reduces only the blocks that `ranges` keeps, e.g. a kernel
#'   truncated beyond a cut-off radius. The truncated matrix must stay
#'   symmetric (the same clusters for `i` and `j`, a symmetric `keep` in
#'   [from_matrix()]) and \eqn{\alpha I + K}{alpha I + K} positive definite:
#'   truncation moves each eigenvalue by at most the largest row sum of the
#'   absolute values left out, so a nugget `alpha` above that bound is enough.
#'   The preconditioner is built from the columns of the untruncated `K`.
#' @param precond `"nystrom"` (the default) or `"none"`: see above.
#' @param rank The number of landmarks of the Nystrom preconditioner, from 1
#'   to `N`; `NULL` (the default) chooses it as described above.
#' @param info `TRUE` to return the diagnostics and what [grad()] needs as
#'   attributes of the result (see the value); `FALSE` (the default) returns a
#'   plain matrix, which [all.equal()] and `testthat::expect_equal()` compare
#'   with other matrices without reporting extra attributes.
#' @param ... Unused.
#' @return The `N x E` matrix \eqn{x}. With `info = TRUE` it has the
#'   attributes `iterations` (the number of products by `K`), `residual` (the
#'   largest relative residual \eqn{|b - (\alpha I + K) x| / |b|}{|b - (alpha I + K) x| / |b|} over the columns, as
#'   the iterations updated it: in float32 each product carries rounding
#'   errors of relative size about \eqn{10^{-7} |K|}, so that the residual of
#'   the exact system stops near \eqn{10^{-5}}{1e-5} even when this one goes
#'   lower), `rank` (the rank of the preconditioner, 0
#'   without one) and `solve` (the system, with its preconditioner: what the
#'   gradient of the solution with respect to `b`, `alpha` or a variable of
#'   `K` reuses; it holds the `N x rank` columns of the preconditioner:
#'   `attr(x, "solve") <- NULL` frees them).
#' @seealso `%*%`
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(60), 20, 3)
#' K <- exp(-sqdist(Vi(x), Vj(x)))
#' b <- matrix(rnorm(20), 20, 1)
#' sol <- solve(K, b, alpha = 0.1)     # 20 x 1
#' # the same with the dense 20 x 20 matrix in plain R
#' D2 <- outer(rowSums(x^2), rowSums(x^2), "+") - 2 * x %*% t(x)
#' all.equal(sol, solve(exp(-D2) + 0.1 * diag(20), b), tolerance = 1e-4)
#'
#' # kriging: a Gaussian kernel on 2,000 points, two right-hand sides
#' z <- matrix(runif(4000), 2000, 2)
#' G <- exp(-sqdist(Vi(z), Vj(z)) / (2 * 0.1^2))
#' B <- cbind(sin(4 * z[, 1]), cos(3 * z[, 2]))
#' w <- solve(G, B, alpha = 0.09, eps = 1e-4, info = TRUE)
#' attr(w, "iterations")               # with the Nystrom preconditioner
#' attr(w, "rank")
#' attr(w, "residual")
#' w0 <- solve(G, B, alpha = 0.09, eps = 1e-4, precond = "none", info = TRUE)
#' attr(w0, "iterations")              # plain conjugate gradients
solve.LazyTensor <- function(a, b, alpha = 0, eps = 1e-6, maxiter = 10 * NROW(b), ranges = NULL,
                             precond = c("nystrom", "none"), rank = NULL, info = FALSE, ...) {
  lazy_solve(a, b, alpha, eps, maxiter, ranges, precond, rank, info)
}

# solve.LazyTensor()'s work, for the functions built on it: `what` starts its warnings (and names
# its progress bar), `alpha_arg` is the caller's argument that alpha is (keops_krige()'s
# "nugget"), the one its warnings tell to increase.
lazy_solve <- function(a, b, alpha = 0, eps = 1e-6, maxiter = 10 * NROW(b), ranges = NULL, precond = "nystrom",
                       rank = NULL, info = FALSE, what = "solve()", alpha_arg = "alpha") {
  matvec <- lazy_matvec(a, "solve")
  dims <- dim(a)
  N <- dims[2L]
  if (anyNA(dims)) {
    rkeops_abort("solve(): 'a' must be a square symbolic matrix with i and j variables, such as ",
                 "exp(-sqdist(Vi(x), Vj(x)))", kind = "input", arg = "a")
  }
  if (dims[1L] != N) {
    rkeops_abort(sprintf("solve(): 'a' must be a square symbolic matrix, not %d x %d", dims[1L], N),
                 kind = "input", arg = "a")
  }
  if (is.data.frame(b)) b <- as.matrix(b)
  if (!(is.numeric(b) || is.logical(b)) || length(dim(b)) > 2L || NROW(b) != N || length(b) == 0L) {
    rkeops_abort(sprintf("solve(): 'b' must be a numeric matrix (or vector) with %d rows, one per j", N),
                 kind = "input", arg = "b")
  }
  if (is.null(dim(b))) b <- matrix(b, ncol = 1L)
  storage.mode(b) <- "double"
  if (!all(is.finite(b))) {
    rkeops_abort("solve(): 'b' must not hold NA, NaN or infinite values", kind = "input", arg = "b")
  }
  check_number(alpha, "alpha", "solve", "non-negative")
  check_number(eps, "eps", "solve", "positive")
  maxiter <- check_whole(maxiter, "maxiter", "solve", 0)
  precond <- solve_precond_arg(precond)
  if (!is.null(rank)) rank <- min(check_whole(rank, "rank", "solve", 1), N)
  check_flag(info, "info", "solve")
  alpha <- as.double(alpha)
  op <- function(v) matvec(v, ranges) + alpha * v

  prec <- NULL
  if (precond == "nystrom" && maxiter > 0L && any(b != 0)) {
    prec <- nystrom_preconditioner(a, alpha, rank, eps, t_iteration = iteration_time(a, b, op, ranges))
  }
  start <- list(x = matrix(0, nrow(b), ncol(b)), r = b, iterations = 0L)
  res <- conjugate_gradients(op, prec$apply, b, start, eps, maxiter, what, alpha_arg)
  x <- res$x
  if (info) {
    attr(x, "iterations") <- res$iterations
    attr(x, "residual") <- res$residual
    attr(x, "rank") <- if (is.null(prec)) 0L else prec$rank
    attr(x, "solve") <- structure(list(K = a, alpha = alpha, eps = eps, maxiter = maxiter, ranges = ranges,
                                       prec = prec, op = op), class = "keops_solve_system")
  }
  x
}

# The seconds of one iteration of plain conjugate gradients (the unit of the preconditioner's time
# budget): a product by K, timed on a random eighth of its rows (at least 2500: the engine's time
# is proportional to the rows; at most 1e12 pairs: an eighth of 1e7 rows is 2.8 s on two H200s;
# block-sparse products and data kept on the GPU are timed whole), and the vector operations in R,
# which weigh when the product is fast (on a GPU).
iteration_time <- function(K, b, op, ranges) {
  N <- nrow(b)
  n <- min(N, max(2500L, min(ceiling(N / 8), ceiling(1e12 / N))))
  on_gpu <- any(vapply(K$vars, inherits, TRUE, "keops_device_matrix"))
  t0 <- proc.time()[["elapsed"]]
  if (n == N || on_gpu || !is.null(ranges)) {
    op(b)
    n <- N
  } else {
    kernel_rows_times(K, sample.int(N, n), b)
  }
  t1 <- proc.time()[["elapsed"]]
  for (k in 1:2) colSums(b * scale_columns(b + 0.5 * b, 1))
  t2 <- proc.time()[["elapsed"]]
  max(t1 - t0, 1e-4) * N / n + (t2 - t1)
}

# The share of the estimated time of plain conjugate gradients that the preconditioner may take,
# and its largest automatic rank (its N x rank columns are kept, and it costs rank^3 operations).
nystrom_share <- 0.1
# Once the rank is past the eigenvalues above alpha, its growth may cost this many iterations.
nystrom_past <- 4
nystrom_max_rank <- 2000L

solve_precond_arg <- function(precond) {
  if (identical(precond, c("nystrom", "none"))) return("nystrom")
  if (!is.character(precond) || length(precond) != 1L || is.na(precond) || !precond %in% c("nystrom", "none")) {
    rkeops_abort("solve(): 'precond' must be \"nystrom\" or \"none\"", kind = "input", arg = "precond")
  }
  precond
}

# Conjugate gradients on the columns of b at once, from start$x with residual start$r, each column
# with its own step lengths, stopped when every column's residual is below eps |b|. prec: a
# function r -> P^-1 r (symmetric positive definite), or NULL. Returns x, the number of products
# and the largest relative residual. `what` and `alpha_arg` name the caller and its argument alpha
# in the warnings.
conjugate_gradients <- function(op, prec, b, start, eps, maxiter, what, alpha_arg = "alpha") {
  x <- start$x
  r <- start$r
  iter <- start$iterations
  bb <- colSums(b * b)
  target <- eps^2 * bb
  rr <- colSums(r * r)
  done <- rr <= target
  restart <- FALSE
  precondition <- function(r) {
    if (is.null(prec)) return(r)
    z <- prec(r)
    rz <- colSums(r * z)
    # A preconditioner that rounding made indefinite would break the iterations: drop it, and
    # restart from the current residual.
    if (all(is.finite(z)) && all(rz > 0 | done)) return(z)
    prec <<- NULL
    restart <<- TRUE
    r
  }
  z <- precondition(r)
  rz <- colSums(r * z)
  p <- z
  breakdown <- FALSE
  bar <- cg_progress(maxiter, eps, bb, what)
  on.exit(bar$done(), add = TRUE)
  while (!all(done) && iter < maxiter) {
    iter <- iter + 1L
    Ap <- op(p)
    pAp <- colSums(p * Ap)
    if (any(!(pAp > 0) & !done)) {
      breakdown <- TRUE   # alpha I + K is not positive definite (in this precision)
      break
    }
    step <- rz / pAp
    step[done] <- 0
    x <- x + scale_columns(p, step)
    r <- r - scale_columns(Ap, step)
    rr <- colSums(r * r)
    done <- rr <= target
    bar$set(iter, rr, done)
    if (all(done)) break
    z <- precondition(r)
    rz_new <- colSums(r * z)
    beta <- rz_new / rz
    beta[done | !is.finite(beta) | restart] <- 0
    restart <- FALSE
    p <- z + scale_columns(p, beta)
    rz <- rz_new
  }
  relres <- sqrt(rr / bb)
  relres[bb == 0] <- 0
  residual <- max(relres)
  if (!all(done)) {
    message <- sprintf("%s: conjugate gradients did not converge in %d iterations (relative residual %.3g)",
                       what, iter, residual)
    if (breakdown) {
      rkeops_warn(message, sprintf(" (%s I + K is not positive definite in this precision: increase '%s')",
                                   alpha_arg, alpha_arg), kind = "not_positive_definite")
    } else {
      rkeops_warn(message, kind = "convergence")
    }
  }
  list(x = x, iterations = iter, residual = residual)
}

# The progress bar of the conjugate gradients (loop_progress()), set(iter, rr, done) after each
# iteration. Its total starts at maxiter, which the iterations rarely reach (cli's ETA said minutes
# for a fit of seconds), then is the number of iterations that the residual's decrease so far
# predicts: each divides it by about the same factor, so log(|r| / |b|) / log(eps) of the way is
# made in `iter` iterations (the slowest column; within maxiter).
cg_progress <- function(maxiter, eps, bb, what, env = parent.frame()) {
  bar <- loop_progress(maxiter, paste(what, "conjugate gradients"), env = env)
  if (!bar$shown) return(list(set = function(...) invisible(), done = bar$done))
  set <- function(iter, rr, done) {
    left <- !done & bb > 0
    way <- if (!any(left)) 1 else if (eps < 1) min(log(rr[left] / bb[left]) / log(eps^2)) else 0
    total <- if (isTRUE(way > 0)) min(maxiter, max(iter + !all(done), ceiling(iter / min(way, 1)))) else maxiter
    bar$set(iter, total)
  }
  list(set = set, done = bar$done)
}

# m %*% diag(s) without sweep()'s overhead: each column of m times the matching element of s.
scale_columns <- function(m, s) if (length(s) == 1L) m * s else m * rep(s, each = nrow(m))

# ---- the Nystrom preconditioner ------------------------------------------------------------------

# The preconditioner (gamma I + C W^-1 C')^-1 of the system (alpha I + K), from `rank` landmarks
# drawn uniformly (or a rank grown within a time budget when rank is NULL, see ?solve.LazyTensor:
# t_iteration is the time of one iteration without the preconditioner). Returns list(apply =
# function(r), rank, kept), or NULL when K vanishes on the landmarks. On the CPU the columns C =
# K[, S] are kept (kept = TRUE: the products by BLAS are faster than evaluating the kernel again),
# which holds the automatic rank to 1 GiB of them; on a GPU they are not (kept = FALSE): C'C grows
# block by block in the engine, the preconditioner applies C and C' as two reductions of N x rank
# pairs, and the rank may grow to nystrom_max_rank at any N.
nystrom_preconditioner <- function(K, alpha, rank, eps, t_iteration, keep = !gpu_in_use()) {
  N <- dim(K)[1L]
  auto <- is.null(rank)
  m_max <- if (!auto) rank else if (keep) min(N, nystrom_max_rank, max(64L, floor(2^30 / (8 * N)))) else
    min(N, nystrom_max_rank)
  m <- min(64L, m_max)   # a first block, then growth steps (auto) or the rest at once
  if (auto) force(t_iteration)   # timed in the precision of the products, before the switch below
  landmarks <- sample.int(N, m_max)
  # The columns and C'C in float64, whatever the precision of the products: C'C must be C'C of
  # the very columns the preconditioner applies (else it may not be positive definite), and the
  # eigenvalues of the approximation need more digits than float32 has.
  K <- lazy_on_host(K)
  local_float64()
  u <- 2^-53
  t0 <- proc.time()[["elapsed"]]
  columns <- nystrom_columns(K, landmarks, keep)
  rows <- list()     # the columns' rows at the landmarks (W = K[S, S] is made of them)
  have <- 0L
  CC <- NULL
  repeat {
    # C'C grown by the new columns' block: N m^2 operations in all.
    S <- landmarks[seq_len(m)]
    grown <- columns$grow(S, have)
    cross <- grown$products[seq_len(have), , drop = FALSE]
    new <- grown$products[have + seq_len(m - have), , drop = FALSE]
    new <- (new + t(new)) / 2
    CC <- if (have == 0L) new else rbind(cbind(CC, cross), cbind(t(cross), new))
    rows[[length(rows) + 1L]] <- grown$rows
    rm(grown)
    have <- m
    if (!auto && m < m_max) {
      m <- m_max
      next
    }
    W <- do.call(cbind, rows)[seq_len(m), , drop = FALSE]
    fac <- nystrom_factor(W, CC, alpha, u)
    if (!auto || is.null(fac) || m >= m_max) break
    # The rank passes the number k of eigenvalues above alpha: then the iterations collapse (from
    # hundreds to tens), further landmarks bring a few less. Enough when k <= m / 2.
    k <- sum(fac$lambda > alpha)
    if (k <= m / 2) break
    if (length(rows) == 1L) {
      # Plain conjugate gradients need about sqrt(condition number) / 2 * log(2 / eps) iterations
      # (an upper bound): to pass k, the preconditioner may cost a tenth of their time (50 ms at
      # least: less is lost in the noise of the timings, and is nothing to wait for).
      plain <- sqrt(1 + max(fac$lambda) / alpha) / 2 * log(2 / eps)
      to_pass <- max(0.05, t_iteration * plain * nystrom_share)
    }
    # Past k, the time of a few iterations more.
    budget <- if (k <= m / 1.2) min(to_pass, max(0.05, t_iteration * nystrom_past)) else to_pass
    elapsed <- proc.time()[["elapsed"]] - t0
    m_new <- min(m_max, ceiling(1.5 * m))
    # The work grows like m^2 (C'C): stay within the budget.
    if (elapsed * (m_new / m)^2 > budget) m_new <- min(m_new, floor(m * sqrt(budget / max(elapsed, 1e-6))))
    if (m_new < 1.1 * m) break
    m <- m_new
  }
  if (is.null(fac)) return(NULL)
  S <- landmarks[seq_len(m)]
  R <- fac$R
  gamma <- fac$gamma
  # C y and C' r: by BLAS with the columns kept, else as two reductions in float64.
  if (keep) {
    C <- columns$kept()
    C_times <- function(y) base::`%*%`(C, y)
    Ct_times <- function(r) crossprod(C, r)
  } else {
    C_times <- function(y) {
      local_float64()
      kernel_columns_times(K, S, y)
    }
    Ct_times <- function(r) {
      local_float64()
      kernel_rows_times(K, S, r)
    }
  }
  list(rank = m, kept = keep, apply = function(r) {
    y <- backsolve(R, backsolve(R, Ct_times(r), transpose = TRUE))
    (r - C_times(y)) / gamma
  })
}

# The columns C = K[, S] of the landmarks S = landmarks[1:m], block by block: grow(S, have) makes
# the columns have + 1..m and returns their products with all m columns (products = C'Cn, m x new)
# and their rows at the landmarks; kept() returns C. Kept (CPU), the products are by R's BLAS below
# 128 landmarks, then by the engine (K[S, ] %*% Cn, on every core; it needs as many landmarks to
# fill them: then 2 to 2.5 times faster than the reference BLAS here), unless it turns out slower
# than the BLAS's speed on the first block predicts. Not kept (GPU), by pieces made and used on the
# device.
nystrom_columns <- function(K, landmarks, keep) {
  N <- dim(K)[1L]
  blocks <- list()
  blas_rate <- NA
  use_engine <- TRUE
  grow <- function(S, have) {
    new <- S[seq.int(have + 1L, length(S))]
    if (!keep) return(nystrom_pieces(K, S, new, landmarks))
    Cn <- kernel_columns(K, new)
    t1 <- proc.time()[["elapsed"]]
    if (have == 0L) {
      products <- crossprod(Cn)
      blas_rate <<- N * length(new) * (length(new) + 1) / 2 / max(proc.time()[["elapsed"]] - t1, 1e-3)
    } else if (use_engine && length(S) >= 128L) {
      products <- kernel_rows_times(K, S, Cn, chunk = 64L)
      blas_time <- N * length(new) * (have + (length(new) + 1) / 2) / blas_rate
      use_engine <<- proc.time()[["elapsed"]] - t1 < 1.2 * blas_time
    } else {
      products <- rbind(do.call(rbind, lapply(blocks, crossprod, Cn)), crossprod(Cn))
    }
    blocks[[length(blocks) + 1L]] <<- Cn
    list(products = products, rows = Cn[landmarks, , drop = FALSE])
  }
  kept <- function() {
    C <- if (length(blocks) == 1L) blocks[[1L]] else do.call(cbind, blocks)
    blocks <<- list()
    C
  }
  list(grow = grow, kept = kept)
}

# The products K[S, ] %*% K[, new] (length(S) x length(new)) and the rows K[landmarks, new], by
# pieces of `piece` columns. Each piece is one program (nystrom_piece_program()) whose N x piece
# columns stay on the device: at N = 1e7 they are 5 GB of doubles, which once came back to R and
# went again as the weight of the products, twice per piece.
nystrom_pieces <- function(K, S, new, landmarks, piece = 64L) {
  products <- matrix(0, length(S), length(new))
  rows <- matrix(0, length(landmarks), length(new))
  onehot <- diag(piece)
  program <- nystrom_piece_program(K, piece)
  input <- K$vars
  names(input) <- sprintf("V%d", seq_along(input) - 1L)
  at_S <- restrict_vars(K, "Vi", S)[K$cats == "Vi"]
  names(at_S) <- paste0(names(input)[K$cats == "Vi"], "_S")
  for (first in seq.int(1L, length(new), by = piece)) {
    cols <- first:min(length(new), first + piece - 1L)
    idx <- c(new[cols], rep(new[first], piece - length(cols)))   # the last piece padded
    K_new <- K
    K_new$vars <- restrict_vars(K, "Vj", idx)
    at_new <- K_new$vars[K$cats == "Vj"]
    names(at_new) <- paste0(names(input)[K$cats == "Vj"], "_new")
    products[, cols] <- program(c(input, at_S, at_new, list(onehot = onehot)))$products[, seq_along(cols)]
    rows[, cols] <- kernel_rows_times(K_new, landmarks, onehot)[, seq_along(cols)]
  }
  list(products = products, rows = rows)
}

# The program of a piece of nystrom_pieces() for the square LazyTensor K: the columns Cp = K[, new]
# (K's j-variables at the rows `new` (buffers V<k>_new), times the identity `onehot`), then the
# products K[S, ] %*% Cp, written as a sum over the N rows of Cp as i (K's variables change index:
# its i-variables at the rows S (V<k>_S) follow j, its j-variables i), so that over several GPUs
# each sums its own rows of Cp and the sums are merged: no device needs all of Cp.
nystrom_piece_program <- function(K, piece) {
  memoised(.lazy_ops, c("nystrom piece", K$formula, K$args, piece), function() {
    nb <- length(K$vars)
    vars <- sprintf("V%d", seq_len(nb) - 1L)
    weight <- sprintf("V%d", nb)
    swapped <- ifelse(K$cats == "Vi", sub("= Vi\\(", "= Vj(", K$args), sub("= Vj\\(", "= Vi(", K$args))
    body <- sprintf("(%s) * %s", gsub("@([0-9]+)@", "V\\1", K$formula), weight)
    by_rows <- keops_kernel(sprintf("Sum_Reduction(%s, 1)", body), c(swapped, sprintf("%s = Vi(%d)", weight, piece)))
    columns <- c(ifelse(K$cats == "Vj", paste0(vars, "_new"), vars), "onehot")
    products <- c(ifelse(K$cats == "Vi", paste0(vars, "_S"), vars), "Cp")
    names(columns) <- names(products) <- c(vars, weight)
    keops_program(list(Cp = keops_step(weighted_sum_operator(K, piece), reads = columns),
                       products = keops_step(by_rows, reads = products)),
                  output = "products")
  })
}

# Products in float64 until the calling function returns, the precision in force restored then.
local_float64 <- function(envir = parent.frame()) {
  precision <- .rkeops_env$options$precision
  .rkeops_env$options$precision <- "float64"
  do.call(on.exit, list(substitute(.rkeops_env$options$precision <- p, list(p = precision)), add = TRUE),
          envir = envir)
}

# From W = K[S, S] and C'C (C = K[, S]): the eigenvalues `lambda` of the Nystrom approximation
# C (W + nu I)^-1 C' (the shift nu, a few rounding errors of the precision, keeps the factorisation
# stable), gamma = alpha + their smallest (the preconditioner of Frangella, Tropp and Udell when
# the rank misses eigenvalues above alpha) and R = chol(gamma (W + nu I) + C'C), the factor of the
# Woodbury identity.
nystrom_factor <- function(W, CC, alpha, u) {
  m <- nrow(W)
  W <- (W + t(W)) / 2
  scale <- max(abs(diag(W)), abs(W))
  if (!is.finite(scale) || scale == 0) return(NULL)
  nu <- scale * max(m * u, 1e-7)
  R_W <- NULL
  for (k in 1:20) {
    R_W <- tryCatch(chol(W + diag(nu, m)), error = function(e) NULL)
    if (!is.null(R_W)) break
    nu <- nu * 10
  }
  if (is.null(R_W)) return(NULL)
  # The nonzero eigenvalues of C (W + nu I)^-1 C' are those of R_W^-T C'C R_W^-1.
  G <- backsolve(R_W, t(backsolve(R_W, CC, transpose = TRUE)), transpose = TRUE)
  lambda <- pmax(eigen((G + t(G)) / 2, symmetric = TRUE, only.values = TRUE)$values, 0)
  gamma <- alpha + min(lambda)
  if (!(gamma > 0)) gamma <- max(lambda) * 1e-8
  if (!(gamma > 0)) return(NULL)
  M <- gamma * (W + diag(nu, m)) + CC
  M <- (M + t(M)) / 2
  jitter <- 0
  for (k in 1:20) {
    R <- tryCatch(chol(M + diag(jitter, m)), error = function(e) NULL)
    if (!is.null(R)) break
    jitter <- if (jitter == 0) 1e-14 * max(diag(M)) else jitter * 10
  }
  if (is.null(R)) return(NULL)
  list(lambda = lambda, gamma = gamma, R = R)
}

# K with its variables kept on the GPU (keops_device()) read back into R matrices: they hold one
# precision, and the preconditioner computes in float64.
lazy_on_host <- function(K) {
  for (k in seq_along(K$vars)) {
    if (inherits(K$vars[[k]], "keops_device_matrix")) {
      v <- as.matrix(K$vars[[k]])
      K$vars[[k]] <- if (K$cats[k] == "Pm") as.vector(v) else v
    }
  }
  K
}

# K[S, ] %*% Cn for a square LazyTensor K: its i-variables restricted to the rows S, reduced over
# j with the weight Cn (N x new), a length(S) x new matrix. With `chunk`, Cn goes by blocks of that
# many columns (the last one padded with zeros): one formula whatever the number of columns, so
# that a GPU compiles it once, and as fast as all columns at once on the CPU.
kernel_rows_times <- function(K, S, Cn, chunk = NULL) {
  vars <- restrict_vars(K, "Vi", S)
  if (is.null(chunk)) return(weighted_sum_operator(K, NCOL(Cn))(c(vars, list(Cn))))
  op <- weighted_sum_operator(K, chunk)
  out <- matrix(0, length(S), ncol(Cn))
  for (first in seq.int(1L, ncol(Cn), by = chunk)) {
    cols <- first:min(ncol(Cn), first + chunk - 1L)
    w <- Cn[, cols, drop = FALSE]
    if (length(cols) < chunk) w <- cbind(w, matrix(0, nrow(w), chunk - length(cols)))
    out[, cols] <- op(c(vars, list(w)))[, seq_along(cols)]
  }
  out
}

# K[, S] %*% w for a square LazyTensor K: its j-variables restricted to the rows S, reduced over j
# with the weight w (length(S) x E), an N x E matrix.
kernel_columns_times <- function(K, S, w) {
  weighted_sum_operator(K, NCOL(w))(c(restrict_vars(K, "Vj", S), list(w)))
}

# The columns S of a square LazyTensor K, an N x length(S) matrix, with N * length(S) kernel
# evaluations: K[, S] times identity blocks of 16 columns (wider weights cost more per pair than
# they save in calls).
kernel_columns <- function(K, S, block = 16L) {
  B <- min(block, length(S))
  onehot <- diag(B)
  out <- matrix(0, dim(K)[1L], length(S))
  for (first in seq.int(1L, length(S), by = B)) {
    cols <- first:min(length(S), first + B - 1L)
    idx <- S[cols]
    idx <- c(idx, rep(idx[1L], B - length(idx)))   # the last block padded to B columns
    out[, cols] <- kernel_columns_times(K, idx, onehot)[, seq_along(cols)]
  }
  out
}

# The variables of K with those of category `cat` ("Vi" or "Vj") restricted to the rows S.
restrict_vars <- function(K, cat, S) {
  vars <- K$vars
  for (k in which(K$cats == cat)) vars[[k]] <- if (is.matrix(vars[[k]])) vars[[k]][S, , drop = FALSE] else vars[[k]][S]
  vars
}

# ---- gradients of the solution -------------------------------------------------------------------

# The gradient of <w, e> = sum(w * gradin), w = (alpha I + K)^-1 b the result of
# solve(K, b, alpha, info = TRUE), with respect to `var`:
#   "b":      v = (alpha I + K)^-1 e (K is symmetric), N x E;
#   "alpha":  -<v, w>, 1 x 1;
#   a variable of K (a LazyTensor made by Vi(), Vj() or Pm() from the data of one of K's
#   variables, or its position): -grad of sum_ij <v_i, w_j> K_ij, shaped like grad()'s result;
#   a numeric matrix or vector: the sum of the gradients of every variable of K holding this data
#   (for K = k(Vi(x), Vj(x)), the derivative with respect to the points x).
# v is solved with the preconditioner of the forward solve.
solve_grad <- function(w, gradin, var) {
  sys <- attr(w, "solve")
  if (!inherits(sys, "keops_solve_system")) {
    rkeops_abort("grad(): 'f' must be the result of solve(K, b, ..., info = TRUE) to differentiate a solve",
                 kind = "input", arg = "f")
  }
  K <- sys$K
  dw <- dim(w)
  if (is.data.frame(gradin)) gradin <- as.matrix(gradin)
  if (!(is.numeric(gradin) || is.logical(gradin)) || length(gradin) != prod(dw) ||
      !(is.null(dim(gradin)) && dw[2L] == 1L || identical(as.integer(dim(gradin)), as.integer(dw)))) {
    rkeops_abort(sprintf("grad(): 'gradin' must be a numeric %d x %d matrix, shaped like the solution", dw[1L], dw[2L]),
                 kind = "input", arg = "gradin")
  }
  e <- matrix(as.double(gradin), dw[1L], dw[2L])
  x <- matrix(as.vector(w), dw[1L], dw[2L])   # without the attributes
  positions <- solve_grad_positions(K, var)
  start <- list(x = matrix(0, dw[1L], dw[2L]), r = e, iterations = 0L)
  v <- conjugate_gradients(sys$op, sys$prec$apply, e, start, sys$eps, sys$maxiter, "grad() of solve()")$x
  if (identical(positions, "b")) return(v)
  if (identical(positions, "alpha")) return(matrix(-sum(v * x), 1L, 1L))
  # d<w, e> = -<v, dK w>: minus the gradient of sum_i <v_i, sum_j K_ij w_j>.
  op <- weighted_sum_operator(K, dw[2L])
  input <- c(K$vars, list(x, v))
  g <- 0
  for (k in positions) g <- g + keops_grad(op, k)(input, sys$ranges)
  -g
}

# The positions of the variables of K that `var` designates, or "b" / "alpha".
solve_grad_positions <- function(K, var) {
  if (is.character(var) && length(var) == 1L && var %in% c("b", "alpha")) return(var)
  n <- length(K$vars)
  if (is.LazyTensor(var)) {
    if (length(var$vars) != 1L || var$formula != "@0@") {
      rkeops_abort("grad(): 'var' must be a variable made by Vi(), Vj() or Pm()", kind = "input", arg = "var")
    }
    hit <- which(vapply(seq_len(n), function(k) K$cats[k] == var$cats[1L] && identical(K$vars[[k]], var$vars[[1L]]),
                        TRUE))
  } else if (is.null(dim(var)) && is_whole(var, 1, n)) {
    hit <- as.integer(var)
  } else if (is.numeric(var) || is.logical(var)) {
    data <- var
    storage.mode(data) <- "double"
    same <- function(v, cat) {
      if (cat == "Pm") return(identical(as.vector(v), as.vector(data)))
      identical(v, data) || is.null(dim(v)) && identical(matrix(v), data) ||
        is.null(dim(data)) && identical(v, matrix(data))
    }
    hit <- which(vapply(seq_len(n), function(k) same(K$vars[[k]], K$cats[k]), TRUE))
  } else {
    hit <- integer(0)
  }
  if (length(hit) == 0L) {
    rkeops_abort("grad(): 'var' must be \"b\", \"alpha\", a variable of K (made by Vi(), Vj() or Pm() from its data), ",
                 "its position from 1 to ", n, ", or the data of variables of K", kind = "input", arg = "var")
  }
  hit
}

#' @export
print.keops_solve_system <- function(x, ...) {
  cat(sprintf("<the system (alpha I + K) w = b solved: K %d x %d, alpha = %g, %s>\n", dim(x$K)[1L], dim(x$K)[2L],
              x$alpha, if (is.null(x$prec)) "no preconditioner" else sprintf("Nystrom preconditioner of rank %d", x$prec$rank)))
  invisible(x)
}

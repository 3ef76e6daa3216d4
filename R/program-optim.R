#' Minimise a program's loss in the engine: L-BFGS in one call
#'
#' `keops_program_optim()` minimises the final value of a buffer of one value (a loss) of a program
#' made by [keops_program()] over the initial value of another buffer (the parameters), by L-BFGS,
#' with the whole minimisation in one engine call: each evaluation of the loss and its gradient is
#' one run of the program and of its reverse pass, as [keops_program_grad()] gives them, and no
#' evaluation goes back to R. It replaces `stats::optim(method = "L-BFGS-B")` (without bounds)
#' whose `fn` and `gr` would run the program and its gradient: a round trip through R for each
#' evaluation.
#'
#' The minimiser keeps the last `m` steps and changes of the gradient as a model of the inverse
#' Hessian (the two-loop recursion) and searches along each direction for a step that meets the
#' strong Wolfe conditions (sufficient decrease 1e-3, curvature 0.9, as L-BFGS-B; a value that is not
#' finite counts as too high: the search comes back). Its stopping rules are those of L-BFGS-B:
#' the relative reduction of the loss in an iteration, \eqn{(f_{k-1} - f_k) / \max(|f_{k-1}|, |f_k|,
#' 1)}{(f[k-1] - f[k]) / max(|f[k-1]|, |f[k]|, 1)}, at most `factr` times the machine epsilon; the
#' largest component of the gradient at most `pgtol` (also tested at the start); or `maxit`
#' iterations. Its state (the point, the gradients, the model) is in float64 whatever the precision
#' of the program ([rkeops_use_float32()], the default, or [rkeops_use_float64()]): in float32, the
#' rounding of the loss and of its gradient bounds how far it can go.
#'
#' @param program A program made by [keops_program()].
#' @param input,schedule As for the program: `input` gives the start, the initial value of `wrt`.
#' @param of The name of the buffer minimised: one value after the program (a reduction over all
#'   rows, such as `Sum_Reduction(SqDist(q, target), 1)`).
#' @param wrt The name of the buffer of the parameters: one given in `input` (not by a `schedule`),
#'   a matrix or a vector.
#' @param control A list of any of `maxit` (the most iterations, a whole number >= 0; 100),
#'   `factr` (>= 0; 1e7), `pgtol` (>= 0; 0: not tested) and `m` (the pairs of the model, a whole
#'   number >= 1; 5): `optim()`'s names and defaults for L-BFGS-B.
#' @return A list as [stats::optim()]'s: `par` (the minimiser, of the shape of `input[[wrt]]`),
#'   `value` (the loss there), `counts` (the evaluations, each of the loss and its gradient together:
#'   `c("function" = n, gradient = n)`), `convergence` (0 converged; 1 `maxit` reached; 52 the line
#'   search found no lower value), `message` (L-BFGS-B's), and `gradient` (at `par`, of its shape),
#'   `iterations` and `trace` (the loss at each evaluation, in order: line searches make some go up).
#' @seealso [keops_program_grad()], [keops_landmarks()] (which uses it), [stats::optim()].
#' @export
#' @examples
#' # The points x closest to targets c under a kernel smoothness penalty:
#' # loss = sum_i |x_i - c_i|^2 + 1/2 sum_ij exp(-|c_i - c_j|^2) <x_i, x_j>
#' set.seed(1)
#' c0 <- matrix(rnorm(20), 10, 2)
#' prog <- keops_program(list(
#'   kx = keops_step(keops_kernel("Sum_Reduction(Exp(-SqDist(ci, cj)) * xj, 0)",
#'                                c("ci = Vi(2)", "cj = Vj(2)", "xj = Vj(2)")), reads = c(ci = "c", cj = "c", xj = "x")),
#'   loss = keops_kernel("Sum_Reduction(SqDist(x, c) + (x | kx) / 2, 1)", c("x = Vi(2)", "c = Vi(2)", "kx = Vi(2)"))))
#' fit <- keops_program_optim(prog, list(x = matrix(0, 10, 2), c = c0), of = "loss", wrt = "x")
#' fit$value
#' fit$counts
#' # the closed form: (2 I + K) x = 2 c (to ~1e-5 in float32, the default precision)
#' K <- exp(-as.matrix(dist(c0))^2)
#' max(abs(fit$par - solve(2 * diag(10) + K, 2 * c0)))
keops_program_optim <- function(program, input, of, wrt, control = list(), schedule = NULL) {
  fun <- "keops_program_optim"
  settings <- program_settings(program, fun)
  for (arg in c("of", "wrt")) {
    value <- get(arg)
    if (!is.character(value) || length(value) != 1L || is.na(value)) {
      rkeops_abort(fun, "(): '", arg, "' must be the name of a buffer", kind = "input", arg = arg)
    }
  }
  control <- optim_control(control, fun)
  program_check_input(input)
  program_check_schedule(schedule)
  if (!wrt %in% names(input)) {
    rkeops_abort(fun, "(): wrt: '", wrt, "' has no value in 'input' to start from", kind = "input", arg = "wrt")
  }
  program_check_names(settings, input, schedule, also = of)
  if (!is.null(program_batch(settings, input, schedule))) {
    rkeops_abort(fun, "(): 'input' is a batch: minimise each member on its own", kind = "input", arg = "input")
  }
  layout <- program_cached_layout(settings, unique(c(names(input), names(schedule))))
  at <- match(c(of, wrt), layout$buffers)
  if (is.na(at[1L])) {
    rkeops_abort(fun, "(): of: '", of, "' is not a buffer of the program", kind = "input", arg = "of")
  }
  res <- rust_result(.Call(wrap__keops_program_optimise, program_description(layout, input, schedule),
                           as.integer(at[1L] - 1L), as.integer(at[2L] - 1L), control, engine_options()), fun)
  record_run(res$backend, res$timings)
  shape <- function(v) if (is.null(dim(input[[wrt]]))) as.vector(v) else array(v, dim(input[[wrt]]))
  n <- as.integer(res$evaluations)
  list(par = shape(res$par), value = res$value, counts = c("function" = n, gradient = n),
       convergence = res$convergence, message = res$message, gradient = shape(res$gradient),
       iterations = as.integer(res$iterations), trace = res$trace)
}

# optim()'s control for L-BFGS-B, checked, with its defaults.
optim_control <- function(control, fun) {
  defaults <- list(maxit = 100, factr = 1e7, pgtol = 0, m = 5)
  if (!is.list(control) || is.object(control) || (length(control) && (is.null(names(control)) ||
      !all(names(control) %in% names(defaults))))) {
    rkeops_abort(fun, "(): 'control' must be a list of any of ", paste(names(defaults), collapse = ", "),
                 kind = "input", arg = "control")
  }
  out <- utils::modifyList(defaults, control)
  check_whole(out$maxit, "control$maxit", fun, min = 0, max = .Machine$integer.max, show_value = TRUE)
  check_number(out$factr, "control$factr", fun, sign = "non-negative")
  check_number(out$pgtol, "control$pgtol", fun, sign = "non-negative")
  check_whole(out$m, "control$m", fun, min = 1, max = 1000, show_value = TRUE)
  lapply(out, as.double)
}

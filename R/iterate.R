#' Run a loop of reductions in one call
#'
#' Fixed-point algorithms such as log-domain Sinkhorn alternate reductions, each result an input
#' of the next. Written as an R loop, every reduction is a call whose fixed costs (R, conversions,
#' copies to and from the GPU, a wait for the GPU) are, on small problems, most of the time.
#' `keops_iterate()` runs the whole loop in the engine.
#'
#' `keops_iterate()` is a thin wrapper over [keops_program()]: `keops_iterate(ops, input, n)` is
#' `keops_program(ops, iterations = n)(input)` (its outputs, the iterated values, without the
#' program's attributes), after checks of its own (each name of `ops` a variable it replaces; inputs
#' that no operator reads are left out). Everything said there holds here: on a GPU every input is
#' copied once, the iterated values stay on the device, and from the third iteration on each step
#' issues the kernel launches recorded for it; batches run as in a batched program. For maps,
#' stopping rules, schedules, traces, block-sparse steps or gradients, use [keops_program()].
#'
#' Each iteration runs the operators of `ops` in order. The result of `ops$name` replaces the value
#' of the variable `name`, which must be an `i` or `j` variable (`Vi`, `Vj`) of at least one of the
#' operators (the operator itself included) with as many rows as the result. So the update has to
#' be the reduction itself: write the formulas with the raw reduction results as variables (see the
#' example, where `f` and `g` are the log-sum-exps, the potentials being `lmu - f` and `lnu - g`).
#' Operators that return indices (`ArgMin`, K-nearest neighbours) cannot be iterated.
#'
#' Any input may be a batch (an `n x d x B` array or a list of matrices, as for [keops_kernel()]):
#' the loop then runs every member at once, each reduction one call for the whole batch, and the
#' iterated values are batches (an initial value that is not a batch is the start of every member;
#' see Batches in [keops_program()]). Inputs kept on the GPU ([keops_device()]) are taken as a
#' program takes them, outside batches. The engine's timings are in `rkeops:::last_run()`, summed
#' over the loop.
#'
#' @param ops A named list of operators made by [keops_kernel()]: the result of `ops$name`
#'   replaces the variable `name`.
#' @param input A named list with a value for each variable of the operators (a variable of the same
#'   name in several operators takes the same value), the iterated ones included: their values
#'   before the first iteration.
#' @param iterations The number of times the operators run, in order (0: the initial values come back).
#' @return A named list of the iterated variables' final values: matrices, or for a batch arrays
#'   (`n x d x B`) or lists like the inputs.
#' @seealso [keops_program()], which this wraps; [keops_kernel()], and
#'   `vignette("batched-ot", package = "rkeops")`.
#' @export
#' @examples
#' # Log-domain Sinkhorn between two histograms on a line (lambda = 0.05): with
#' # f = LSE_j(log nu_j - g_j - C_ij / lambda) and g = LSE_i(log mu_i - f_i - C_ij / lambda),
#' # the potentials are lambda (log mu - f) and lambda (log nu - g).
#' x <- matrix(seq(0, 1, length.out = 60)); y <- matrix(seq(0, 1, length.out = 50))
#' lmu <- matrix(log(dnorm(x, 0.3, 0.1) / sum(dnorm(x, 0.3, 0.1))))
#' lnu <- matrix(log(dnorm(y, 0.6, 0.2) / sum(dnorm(y, 0.6, 0.2))))
#' f_op <- keops_kernel("LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
#'                      c("x = Vi(1)", "y = Vj(1)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"))
#' g_op <- keops_kernel("LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
#'                      c("x = Vi(1)", "y = Vj(1)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"))
#' res <- keops_iterate(list(g = g_op, f = f_op),
#'                      list(x = x, y = y, lmu = lmu, lnu = lnu, s = 1 / 0.05,
#'                           f = matrix(0, 60), g = matrix(0, 50)),
#'                      iterations = 100)
#' str(res)
keops_iterate <- function(ops, input, iterations) {
  if (!is.list(ops) || is.object(ops) || length(ops) == 0L || is.null(names(ops)) ||
      !all(nzchar(names(ops))) || anyDuplicated(names(ops))) {
    rkeops_abort("'ops' must be a named list of operators made by keops_kernel(), each name the variable ",
                 "its result replaces", kind = "input", arg = "ops")
  }
  specs <- lapply(names(ops), function(name) {
    spec <- attr(ops[[name]], "rkeops")
    if (!is.function(ops[[name]]) || is.null(spec$info$reduction) || is.null(spec$formula)) {
      rkeops_abort("ops$", name, " must be an operator made by keops_kernel()", kind = "input", arg = "ops")
    }
    spec
  })
  check_whole(iterations, "iterations", min = 0, max = .Machine$integer.max, show_value = TRUE)
  if (!is.list(input) || is.object(input) || (length(input) > 0L && (is.null(names(input)) ||
      !all(nzchar(names(input))) || anyDuplicated(names(input))))) {
    rkeops_abort("'input' must be a list that names the value of each variable of the operators",
                 kind = "input", arg = "input")
  }
  iterated <- names(ops)
  for (s in seq_along(specs)) {
    missing <- setdiff(specs[[s]]$info$names, names(input))
    if (length(missing)) {
      rkeops_abort("input: no value for '", missing[1L], "', a variable of ops$", iterated[s],
                   kind = "input", arg = "input")
    }
  }
  for (name in iterated) {
    if (is.null(input[[name]])) {
      rkeops_abort("input: no initial value for '", name, "' (the variable that ops$", name, " replaces)",
                   kind = "input", arg = "input")
    }
    read_as <- unlist(lapply(specs, function(sp) sp$info$categories[sp$info$names == name]))
    if (length(read_as) == 0L) {
      rkeops_abort("ops$", name, ": '", name, "' is not a variable of any of the operators, so its value ",
                   "would not change the loop: compute it once after keops_iterate()",
                   kind = "input", arg = "ops")
    }
    if (any(read_as == "Pm")) {
      rkeops_abort("'", name, "' is a parameter (Pm) of an operator: the result of ops$", name,
                   " has one value per row, so it must be a Vi or Vj variable", kind = "input", arg = "ops")
    }
  }
  for (s in seq_along(specs)) {
    reduction <- specs[[s]]$info$reduction
    if (reduction %in% c("ArgMin", "ArgMax", "ArgKMin", "MinArgMin", "MaxArgMax", "KMin", "KMinArgKMin")) {
      rkeops_abort("ops$", iterated[s], ": ", reduction, " cannot be iterated: only reductions that return one ",
                   "value per row (or vector) can", kind = "input", arg = "ops")
    }
  }
  # The loop is the program of these steps; its outputs are the iterated values.
  # (as before the wrapper, an input that no operator reads is left out, not refused)
  read <- unique(unlist(lapply(specs, function(spec) spec$info$names)))
  # (the program made once per operators and iterations, as a user keeps one: its making is a fifth
  # of a small call)
  key <- c(iterations, unlist(Map(function(name, spec) c(name, spec$formula, spec$args, spec$sum_scheme),
                                  names(ops), specs)))
  program <- memoised(iterate_programs, key, function() keops_program(ops, iterations = iterations))
  out <- program(input[intersect(names(input), read)])
  attributes(out) <- list(names = names(out))
  out
}

iterate_programs <- new.env(parent = emptyenv())

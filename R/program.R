#' Run a whole algorithm in one call: a program of reductions
#'
#' An algorithm such as K-means, EM for a mixture or Sinkhorn alternates reductions and small
#' updates. Written as an R loop, each reduction is a call whose fixed costs (R, conversions,
#' copies to and from the GPU, a wait for the GPU) are, on all but the largest problems, most of
#' the time. `keops_program()` describes the loop once; the program it returns runs it in the
#' engine, with no R in the loop: on a GPU every value stays on the device for the whole program
#' and, from the third iteration on, each step issues the kernel launches recorded for it.
#' Consecutive sums over the same pairs (same index and rows, none reading another's result) run as
#' one reduction of their terms side by side, on every backend and in [keops_program_grad()]: the
#' pairs' common work is done once. A result that the program returns, traces or tests stays a
#' step of its own, so `output` should name only the buffers needed (environment variable
#' `RKEOPS_FUSE_STEPS=0`: every step on its own).
#'
#' A program works on named buffers: the matrices given in `input`, and those the steps compute.
#' Each step is an operator made by [keops_kernel()] (a reduction) or by [keops_map()] (a formula
#' evaluated on each row, for updates such as `s / n`); its name in `steps` is the buffer its result
#' is assigned to (a name may come back: two steps may write one buffer), and each of its variables
#' reads the buffer of that name. Steps run in order, `iterations` times, or until every value of
#' the buffer `until` is below `tol` in absolute value, tested after every `every`-th iteration (on a
#' GPU the host reads an iteration's test and traces once the next iteration is queued, so that the
#' device does not wait for it; when the test ends the loop, that iteration is undone: the same
#' results; environment variable `RKEOPS_LATE_CHECKS=0`: each iteration read as it ends). A
#' reduction over all rows of an index with no variable of the other index (`Sum_Reduction(Abs(f -
#' f0), 1)` with `f`, `f0` `Vi` variables) has one row: a scalar for such tests, or a `Pm` parameter
#' of later steps.
#'
#' Operators that return indices (`ArgMin`, `ArgKMin`) give them as numbers (from 1, as in R):
#' K-means labels are a buffer like any other (see the example). A buffer that a step writes needs
#' no value in `input` when a step writes it before any step reads it; its shape is that of the
#' result.
#'
#' **Batches.** Any input may be a batch of B independent problems, as for [keops_kernel()]: an
#' `n x d x B` array or a list of B matrices (members may then differ in size), for a parameter a
#' `1 x d x B` array or a list of B vectors. The program then runs every member at once, one engine
#' call: the members of each buffer are laid end to end and each reduction sums over the pairs of
#' one member only (block-diagonal ranges, built from the members' sizes; a step's own `ranges`,
#' from [keops_step()], are those of one member, used in every member's block, so the members must
#' then have the same sizes). A matrix that is not a batch is shared: copied to every member (an
#' initial value is the start of every member); so is a batch of one member; a parameter that is
#' not a batch stays one value, and a `schedule` is shared by every member. Indices (`ArgMin`) count
#' from 1 within each member. A reduction to one row (no variable of the result's index, as the
#' stopping test above) sums over every member: one value for the whole batch, which `until`, `trace`
#' and `output` may name but no later step may read. So `until` stops the batch when the values of
#' every member are below `tol` (all members run the same iterations: a member that has converged
#' runs on until the last one has). Outputs and traces come back per member, as the batch was given:
#' an `n x d x B` array (a trace `iterations x (n d) x B`), or a list of B matrices when an input was
#' a list; a buffer of one value for the whole batch comes back as one matrix. [keops_iterate()] is
#' this for the programs whose steps are reductions only.
#'
#' @param steps A named list of operators made by [keops_kernel()] or [keops_map()] (or
#'   [keops_step()] for a block-sparse one), in the order they run; each name is the buffer its result
#'   goes to.
#' @param iterations The most times the steps run (all of them without `until`).
#' @param until `NULL`, or the name of the buffer of the stopping rule.
#' @param tol The tolerance of the stopping rule (0: no stop before `iterations`).
#' @param every Test the stopping rule after every `every`-th iteration only (on a GPU, each test
#'   waits for the device).
#' @param trace `NULL`, or names of buffers whose values are recorded after each iteration (on a
#'   GPU, each iteration then waits for the device).
#' @param output The buffers that come back: by default, those the steps write.
#' @return A function `program(input, schedule = NULL)`: `input` a named list with the initial
#'   value of each buffer that a step reads before one writes it (matrices; vectors are one column;
#'   a parameter's vector of values; or matrices kept on the GPU by [keops_device()], in the
#'   precision of the call, copied there on the device instead of uploaded: the kept matrix is not
#'   changed); `schedule` a named list of the values that buffers take at
#'   each iteration (for eps-annealing): a matrix with one row per iteration and as many columns as
#'   the buffer has values, or a vector for a buffer of one value; iteration t takes row t, the last
#'   row repeated after its end (a buffer with a schedule needs no value in `input`: it starts at the
#'   first row, as a column). It returns a named list of the `output` buffers (matrices), with
#'   attributes `iterations` (how many ran) and `trace` (a named list of matrices: one row per
#'   iteration, the buffer's values in R's order). Inputs may be batches (see Batches): then the
#'   outputs and traces are per member.
#' @seealso [keops_map()], [keops_iterate()] (the loops whose updates are raw reduction results).
#' @export
#' @examples
#' # K-means (Lloyd) on 500 points in the plane, 4 clusters, 10 iterations.
#' set.seed(1)
#' x <- matrix(rnorm(1000), 500, 2)
#' kmeans_step <- keops_program(list(
#'   labels = keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c("x = Vi(2)", "c = Vj(2)")),
#'   sums = keops_kernel("Sum_Reduction(Equal(labels, j) * x, 1)",
#'                       c("labels = Vi(1)", "x = Vi(2)", "j = Vj(1)")),
#'   counts = keops_kernel("Sum_Reduction(Equal(labels, j), 1)", c("labels = Vi(1)", "j = Vj(1)")),
#'   c = keops_map("IfElse(counts - 0.5, sums / counts, c)",
#'                 c("sums = Vj(2)", "counts = Vj(1)", "c = Vj(2)"))
#' ), iterations = 10)
#' res <- kmeans_step(list(x = x, c = x[1:4, ], j = 1:4))
#' res$c
#' table(res$labels)
#' # The same for three sets of points of different sizes, one engine call: a list per member.
#' xs <- list(x[1:100, ], x[101:350, ], x[351:500, ])
#' batch <- kmeans_step(list(x = xs, c = lapply(xs, function(m) m[1:4, ]), j = 1:4))
#' batch$c[[2]]
keops_program <- function(steps, iterations = 1, until = NULL, tol = 0, every = 1, trace = NULL,
                          output = NULL) {
  if (!is.list(steps) || is.object(steps) || length(steps) == 0L || is.null(names(steps)) ||
      !all(nzchar(names(steps)))) {
    rkeops_abort("'steps' must be a named list of operators made by keops_kernel() or keops_map(), each ",
                 "name the buffer its result goes to", kind = "input", arg = "steps")
  }
  # (a step with options, keops_step(), holds its operator, its ranges and the buffers it reads)
  ranges <- lapply(steps, function(step) if (inherits(step, "keops_step")) step$ranges)
  reads <- lapply(steps, function(step) if (inherits(step, "keops_step")) step$reads)
  steps <- lapply(steps, function(step) if (inherits(step, "keops_step")) step$op else step)
  specs <- lapply(seq_along(steps), function(s) {
    spec <- attr(steps[[s]], "rkeops")
    if (!is.function(steps[[s]]) || is.null(spec$info$reduction) || is.null(spec$formula)) {
      rkeops_abort("steps$", names(steps)[s], " must be an operator made by keops_kernel() or keops_map()",
                   kind = "input", arg = "steps")
    }
    unknown <- setdiff(names(reads[[s]]), spec$info$names)
    if (length(unknown)) {
      rkeops_abort("steps$", names(steps)[s], ": 'reads' names '", unknown[1L], "', not a variable of its formula (",
                   paste(spec$info$names, collapse = ", "), ")", kind = "input", arg = "steps")
    }
    spec$reads <- step_reads(spec$info$names, reads[[s]])
    spec
  })
  check_whole(iterations, "iterations", "keops_program", min = 0, max = .Machine$integer.max, show_value = TRUE)
  check_number(tol, "tol", "keops_program", sign = "non-negative")
  check_whole(every, "every", "keops_program", min = 1, max = .Machine$integer.max, show_value = TRUE)
  for (arg in c("until", "trace", "output")) {
    value <- get(arg)
    if (!is.null(value) && (!is.character(value) || anyNA(value) || (arg == "until" && length(value) != 1L))) {
      rkeops_abort("'", arg, "' must be NULL or ", if (arg == "until") "the name of a buffer" else "names of buffers",
                   kind = "input", arg = arg)
    }
  }
  settings <- list(names = names(steps), specs = specs, ranges = ranges, iterations = iterations, until = until, tol = tol,
                   every = every, trace = trace, output = if (is.null(output)) unique(names(steps)) else output)
  settings$known <- program_buffer_names(settings)
  # A program of one plain step run once is that step's call (what it costs, nothing more).
  plain <- length(steps) == 1L && iterations == 1 && is.null(until) && is.null(trace) &&
    identical(settings$output, settings$names) && is.null(ranges[[1L]]) &&
    specs[[1L]]$info$reduction %in% c("Sum", "LogSumExp", "LogSumExpWeight", "SumSoftMaxWeight", "Min", "Max")
  # The engine's plan of the program for the names of the last input (made again when they change,
  # kept with the settings so that keops_program_grad() shares it): a call then checks and converts
  # its values only, in place where they are double matrices.
  settings$cache <- new.env(parent = emptyenv())
  program <- function(input = list(), schedule = NULL) {
    program_check_input(input)
    program_check_schedule(schedule)
    given <- unique(c(names(input), names(schedule)))
    layout <- settings$cache$layout
    # (the names of `input` and `schedule` checked once: the layout is kept only for valid names)
    if (is.null(layout) || !identical(layout$given, given)) {
      program_check_names(settings, input, schedule)
      layout <- NULL
    }
    batch <- if (program_may_batch(input)) program_batch(settings, input, schedule)
    if (!is.null(batch)) {
      # (the layout depends on the members' sizes: made for each batched call)
      given <- unique(c(names(batch$input), names(schedule)))
      out <- program_run(batch$settings, program_layout(batch$settings, given), batch$input, schedule)
      return(program_batch_outputs(out, batch))
    }
    if (plain && is.null(schedule)) {
      values <- input[specs[[1L]]$reads]
      plain_values <- TRUE
      for (x in values) if (!is_plain_value(x)) plain_values <- FALSE
      if (plain_values) {
        return(structure(list(steps[[1L]](unname(values))), names = settings$names,
                         iterations = 1L, trace = list()))
      }
    }
    if (is.null(layout)) layout <- program_cached_layout(settings, given)
    program_run(settings, layout, input, schedule)
  }
  attr(program, "rkeops_program") <- settings
  program
}

# The buffer each variable of a step reads: that of its name, unless `reads` names another.
step_reads <- function(variables, reads) {
  out <- variables
  at <- match(names(reads), variables)
  out[at] <- unname(reads)
  out
}

# Whether `x` is a value a plain call takes as a program does: a numeric matrix or vector.
is_plain_value <- function(x) (is.numeric(x) || is.logical(x)) && !is.object(x) && length(dim(x)) <= 2L

# Whether `input` may hold a batch (a list of matrices, an array of 3 dimensions): program_batch()
# tells; the other calls skip it.
program_may_batch <- function(input) {
  for (x in input) if (is.list(x) || length(dim(x)) > 2L) return(TRUE)
  FALSE
}

# The layout of the program `settings` for the names `given` (program_layout()), kept in the
# settings' cache for the next call with the same names.
program_cached_layout <- function(settings, given) {
  layout <- settings$cache$layout
  if (is.null(layout) || !identical(layout$given, given)) {
    layout <- program_layout(settings, given)
    if (!is.null(settings$cache)) settings$cache$layout <- layout
  }
  layout
}

program_check_input <- function(input) {
  if (!is.list(input) || is.object(input) || (length(input) > 0L && (is.null(names(input)) ||
      !all(nzchar(names(input))) || anyDuplicated(names(input))))) {
    rkeops_abort("'input' must be a named list of the buffers' initial values", kind = "input", arg = "input")
  }
}

# Refuses a name of `input` or `schedule` that no step reads or writes and that the program does not
# test, trace, return (or differentiate: `also`): a misspelt name (`W` for `w`) was ignored.
program_check_names <- function(settings, input, schedule, also = NULL) {
  known <- c(settings$known, also)
  for (arg in c("input", "schedule")) {
    given <- names(if (arg == "input") input else schedule)
    unknown <- given[!given %in% known]
    if (length(unknown)) {
      rkeops_abort(arg, ": '", unknown[1L], "' is not a buffer of the program: no step reads or writes it ",
                   "(buffers: ", paste(unique(known), collapse = ", "), ")", kind = "input", arg = arg)
    }
  }
}
# The names of the buffers of a program: those its steps read or write, its stopping rule, trace and
# outputs (made once, with the program).
program_buffer_names <- function(settings) {
  unique(c(unlist(lapply(settings$specs, function(spec) spec$reads)), settings$names, settings$until,
           settings$trace, settings$output))
}

# The buffers of the program `settings` (keops_program()) given initial values named `given`, and
# its description for the engine, less the values: buffer numbers are 0-based.
program_layout <- function(settings, given) {
  variables <- unlist(lapply(settings$specs, function(spec) spec$reads))
  buffers <- unique(c(given, settings$names, variables))
  for (s in seq_along(settings$specs)) {
    missing <- setdiff(settings$specs[[s]]$reads, c(given, settings$names))
    if (length(missing)) {
      rkeops_abort("input: no value for '", missing[1L], "', read by step ", s, " ('", settings$names[s],
                   "'), and no step computes it", kind = "input", arg = "input")
    }
  }
  named <- function(names, what) {
    at <- match(names, buffers)
    if (anyNA(at)) {
      rkeops_abort(what, ": '", names[is.na(at)][1L], "' is not a buffer of the program (",
                   paste(buffers, collapse = ", "), ")", kind = "input", arg = what)
    }
    as.integer(at - 1L)
  }
  steps <- lapply(seq_along(settings$specs), function(s) {
    spec <- settings$specs[[s]]
    list(name = settings$names[s], formula = spec$formula, args = spec$args,
         inputs = named(spec$reads, "steps"), output = named(settings$names[s], "steps"),
         sum_scheme = spec$sum_scheme, ranges = settings$ranges[[s]])
  })
  layout <- list(given = given, buffers = buffers, steps = steps,
                 program = list(iterations = as.double(settings$iterations),
                                until = if (is.null(settings$until)) -1 else as.double(named(settings$until, "until")),
                                tol = as.double(settings$tol), every = as.double(settings$every),
                                trace = named(as.character(settings$trace), "trace"),
                                outputs = named(settings$output, "output")))
  # the engine's plan (operators, steps, ranges), read once: each call then passes its values only
  layout$plan <- rust_result(.Call(wrap__keops_program_plan,
                                   c(list(buffers = list(names = buffers), steps = steps), layout$program)))
  layout
}

# The engine's description of a call of the program laid out as `layout` (program_layout()): its
# plan (the steps as the engine read them once), and the values of its buffers: `initial` and
# `schedule`, one element per buffer (a value or NULL). The engine reads numeric matrices and
# vectors in place (integers and logicals converted), and checks and transposes the schedules
# (errors name `schedule`); R converts only the other objects (data frames: program_value()).
program_description <- function(layout, input, schedule) {
  for (name in names(input)) {
    x <- input[[name]]
    if (is.object(x) && !inherits(x, "keops_device_matrix")) input[[name]] <- program_value(x, name)
  }
  buffers <- layout$buffers
  values <- list(names = buffers, initial = input[buffers], schedule = if (!is.null(schedule)) schedule[buffers])
  # (the steps too, which the engine reads when the plan is gone: a program saved and loaded again)
  c(list(plan = layout$plan, buffers = values, steps = layout$steps), layout$program)
}

# Runs the program `settings` laid out as `layout` (program_layout()) from `input`, with `schedule`.
program_run <- function(settings, layout, input, schedule) {
  program <- program_description(layout, input, schedule)
  res <- rust_result(.Call(wrap__keops_program_run, program, engine_options()))
  record_run(res$backend, res$timings)
  out <- res$outputs
  names(out) <- settings$output
  trace <- lapply(seq_along(settings$trace), function(k) {
    matrix(res$trace[[k]], nrow = res$iterations, ncol = res$trace_widths[[k]], byrow = TRUE)
  })
  names(trace) <- settings$trace
  attr(out, "iterations") <- res$iterations
  attr(out, "trace") <- trace
  out
}

# The initial value of buffer `name` as the engine takes it: NULL, a double matrix (a vector is
# one column), or a matrix kept on a GPU (keops_device(): copied on the device, not uploaded).
program_value <- function(x, name) {
  if (is.null(x) || inherits(x, "keops_device_matrix")) return(x)
  if (is.data.frame(x)) x <- as.matrix(x)
  if (is.list(x) || length(dim(x)) > 2L) {
    rkeops_abort("input '", name, "': a program takes matrices, vectors, numbers or matrices kept on a GPU ",
                 "(keops_device()), not batches", kind = "input", arg = name)
  }
  if (!(is.numeric(x) || is.logical(x)) || is.object(x)) {
    rkeops_abort("input '", name, "' must be numeric", kind = "input", arg = name)
  }
  if (!is.matrix(x)) x <- matrix(x, ncol = 1L)
  if (!is.double(x)) storage.mode(x) <- "double"
  x
}

# The settings of `program`, a function made by keops_program(), or an error naming it (after
# "fun(): " where `fun` is given).
program_settings <- function(program, fun = NULL) {
  settings <- attr(program, "rkeops_program")
  if (!is.function(program) || is.null(settings)) {
    rkeops_abort(if (!is.null(fun)) paste0(fun, "(): "), "'program' must be a program made by keops_program()",
                 kind = "input", arg = "program")
  }
  settings
}

# Refuses a `schedule` that is not a named list (its values are checked by the engine).
program_check_schedule <- function(schedule) {
  if (!is.null(schedule) && (!is.list(schedule) || is.object(schedule) || is.null(names(schedule)) ||
                             !all(nzchar(names(schedule))))) {
    rkeops_abort("'schedule' must be NULL or a named list of the values of buffers at each iteration",
                 kind = "input", arg = "schedule")
  }
}

#' A formula evaluated on each row: a map
#'
#' `keops_map()` makes an operator that evaluates `formula` on each row of its variables, all of
#' one index (`Vi`, or `Vj`) and parameters (`Pm`): an element-wise update such as `s / n` or
#' `q + dt * p`. It is the reduction `Sum_Reduction(formula, axis)` over an index with no variable,
#' which has one term per row, so it runs wherever a reduction runs: called alone, or as a step of
#' [keops_program()].
#'
#' @param formula A formula of the variables declared in `args`, without reduction.
#' @param args Their declarations, as for [keops_kernel()]: `Vi` variables and parameters, or `Vj`
#'   variables and parameters.
#' @param sum_scheme As for [keops_kernel()] (one term per row: no effect on the values).
#' @return An operator: called with a list of its inputs, it returns the matrix of the formula's
#'   values, one row per row of its variables.
#' @seealso [keops_program()]
#' @export
#' @examples
#' scale <- keops_map("x * w", c("x = Vi(3)", "w = Pm(1)"))
#' x <- matrix(runif(12), 4, 3)
#' all.equal(scale(list(x, 2)), 2 * x)
keops_map <- function(formula, args, sum_scheme = "auto") {
  if (!is.character(formula) || length(formula) != 1L || is.na(formula)) {
    rkeops_abort("keops_map(): 'formula' must be a string", kind = "input", arg = "formula")
  }
  info <- rust_result(.Call(wrap__keops_parse, sprintf("Sum_Reduction(%s, 0)", formula), args), "keops_map")
  sides <- unique(info$categories[info$categories != "Pm"])
  if (length(sides) != 1L) {
    rkeops_abort("keops_map(): a map evaluates its formula on each row of one index, so its variables ",
                 "must be all Vi or all Vj (and parameters), not ",
                 if (length(sides)) "both" else "parameters only", kind = "input", arg = "args")
  }
  keops_kernel(sprintf("Sum_Reduction(%s, %d)", formula, if (sides == "Vi") 0L else 1L), args,
               sum_scheme = sum_scheme)
}

#' Gradients of a program
#'
#' The gradient of a buffer's final value (a scalar, such as a loss; or `sum(weight * buffer)`)
#' with respect to the initial values of chosen buffers, through every step of every iteration of
#' a program made by [keops_program()]: reverse-mode differentiation built from the engine's
#' gradients of each step's reduction. The forward pass keeps, before each step, the value its
#' result replaces (memory: one copy of each step's result per iteration, nothing recomputed);
#' steps that return indices (`ArgMin`) pass no gradient. The gradients of a step's sums (and maps)
#' are computed together, one reduction per axis.
#'
#' With batched inputs (see [keops_program()]), `of` is taken over every member (a buffer of one value
#' for the whole batch, or all the members' values with `weight` a batch like the buffer or one
#' member's weights shared): the gradient in a batched input is that of each member, in a shared one
#' the sum of the members'; a batch of parameters cannot be in `wrt`.
#'
#' On a GPU, both passes keep every value on the device and issue each step's launches again as
#' they were first recorded (as a program does); the host waits once. A step whose gradient needs
#' forward runs first (a log-sum-exp, a min) runs that gradient as plain calls on host data, the other
#' values staying on the device; float16 runs every reduction as a plain call, as the CPU does.
#'
#' @param program A program made by [keops_program()].
#' @param input,schedule As for the program.
#' @param of The name of the buffer differentiated.
#' @param wrt Names of buffers given in `input`: the gradient is with respect to their initial values.
#' @param weight `NULL` (ones: the gradient of the sum of the buffer's values) or the weights of its
#'   values, of its shape.
#' @return A named list of the gradients, of the shapes of the `wrt` inputs, with the attributes
#'   `iterations` and `outputs` (the program's outputs, as the program returns them: a loss and
#'   its gradient from one pass, for an optimiser).
#' @seealso [keops_program()], [keops_grad()]
#' @export
#' @examples
#' # x halved three times, then its squared norm: d/dx = 2 x / 64
#' prog <- keops_program(list(x = keops_map("x / 2", "x = Vi(2)"),
#'                            loss = keops_kernel("Sum_Reduction(SqNorm2(x), 1)", "x = Vi(2)")),
#'                       iterations = 3)
#' x <- matrix(c(1, 2, 3, 4), 2)
#' keops_program_grad(prog, list(x = x), of = "loss", wrt = "x")$x
keops_program_grad <- function(program, input, of, wrt, weight = NULL, schedule = NULL) {
  settings <- program_settings(program)
  if (!is.character(of) || length(of) != 1L || !is.character(wrt) || length(wrt) == 0L) {
    rkeops_abort("'of' must be the name of a buffer and 'wrt' names of buffers", kind = "input",
                 arg = if (!is.character(of) || length(of) != 1L) "of" else "wrt")
  }
  program_check_input(input)
  program_check_schedule(schedule)
  missing <- setdiff(wrt, names(input))
  if (length(missing)) {
    rkeops_abort("wrt: '", missing[1L], "' has no value in 'input' to differentiate", kind = "input", arg = "wrt")
  }
  program_check_names(settings, input, schedule, also = of)
  batch <- if (program_may_batch(input)) program_batch(settings, input, schedule)
  run <- settings
  values <- input
  if (!is.null(batch)) {
    # the steps and buffers of the members laid end to end; the gradient of the sum over the members
    batched_param <- intersect(wrt, names(batch$params))
    if (length(batched_param)) {
      rkeops_abort("wrt: '", batched_param[1L], "' is a batch of parameters (Pm): its gradient in a batched ",
                   "program is not available; run each member", kind = "input", arg = "wrt")
    }
    run <- batch$settings
    values <- batch$input
    weight <- program_batch_weight(weight, batch, of)
  }
  given <- unique(c(names(values), names(schedule)))
  layout <- if (is.null(batch)) program_cached_layout(settings, given) else program_layout(run, given)
  at <- match(c(of, wrt), layout$buffers)
  if (anyNA(at)) {
    rkeops_abort("'", c(of, wrt)[is.na(at)][1L], "' is not a buffer of the program", kind = "input",
                 arg = if (is.na(at[1L])) "of" else "wrt")
  }
  if (!is.null(weight)) weight <- as.double(weight)
  res <- rust_result(.Call(wrap__keops_program_gradient, program_description(layout, values, schedule),
                           as.integer(at[1L] - 1L), weight, as.integer(at[-1L] - 1L), engine_options()))
  record_run(res$backend, res$timings)
  out <- lapply(seq_along(wrt), function(k) {
    g <- res$gradients[[k]]
    x <- input[[wrt[k]]]
    if (!is.null(batch)) return(program_batch_gradient(g, x, wrt[k], batch))
    if (is.null(dim(x))) g else array(g, dim(x))
  })
  names(out) <- wrt
  outputs <- stats::setNames(res$outputs, settings$output)
  if (!is.null(batch)) outputs <- program_batch_outputs(outputs, batch)[settings$output]
  attr(out, "iterations") <- res$iterations
  attr(out, "outputs") <- outputs
  out
}

#' A step of a program with its ranges
#'
#' In [keops_program()], a step is an operator; `keops_step()` gives it the `ranges` of a
#' block-sparse reduction (made by [from_matrix()] or [from_pairs()]), which every iteration uses.
#'
#' @param op An operator made by [keops_kernel()] or [keops_map()].
#' @param ranges `NULL` or the ranges of the reduction, as for the operator itself.
#' @param reads `NULL`, or a named character vector: the buffer that each variable named reads
#'   instead of the buffer of its name. A formula names `x_i` and `x_j` differently (`qi = Vi(3)`,
#'   `qj = Vj(3)`); `reads = c(qi = "q", qj = "q")` makes both read the buffer `q`.
#' @return An object of class `"keops_step"`, for the list of steps of [keops_program()].
#' @seealso [keops_program()]
#' @export
#' @examples
#' # One step of a Gaussian kernel sum of a set of points with itself: both variables read `x`.
#' smooth <- keops_step(keops_kernel("Sum_Reduction(Exp(-SqDist(xi, xj)) * fj, 0)",
#'                                   c("xi = Vi(2)", "xj = Vj(2)", "fj = Vj(1)")),
#'                      reads = c(xi = "x", xj = "x", fj = "f"))
#' prog <- keops_program(list(f = smooth), iterations = 2)
#' x <- matrix(runif(20), 10, 2)
#' prog(list(x = x, f = rep(1, 10)))$f
keops_step <- function(op, ranges = NULL, reads = NULL) {
  if (!is.function(op) || is.null(attr(op, "rkeops")$info$reduction)) {
    rkeops_abort("keops_step(): 'op' must be an operator made by keops_kernel() or keops_map()",
                 kind = "input", arg = "op")
  }
  if (!is.null(reads) && (!is.character(reads) || anyNA(reads) || is.null(names(reads)) ||
                          !all(nzchar(names(reads))) || anyDuplicated(names(reads)) || !all(nzchar(reads)))) {
    rkeops_abort("keops_step(): 'reads' must be NULL or a named character vector (variable = buffer)",
                 kind = "input", arg = "reads")
  }
  structure(list(op = op, ranges = ranges_for_engine(ranges), reads = reads), class = "keops_step")
}

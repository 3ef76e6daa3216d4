# The errors of rkeops.
#
# Every error of the package is a condition of classes c("rkeops_error_<kind>", "rkeops_error",
# "error", "condition"), so that code can tell a bad input from a GPU failure without reading the
# message (see ?rkeops_errors). The engine's errors come with their kind (rust_result()).

#' Errors of rkeops
#'
#' Every error raised by rkeops, from its R functions or from its engine, is
#' a condition of classes `c("rkeops_error_<kind>", "rkeops_error", "error",
#' "condition")`, so that a program can catch one kind of failure, e.g.
#' `tryCatch(op(input), rkeops_error_gpu = function(e) ...)` to fall back to
#' the CPU, without reading the message. The kinds are:
#'
#' * `formula`: a formula that cannot be parsed or used (syntax, unknown
#'   names, dimensions that do not match, bad declarations in `args`), or a
#'   LazyTensor operation that cannot be built;
#' * `input`: a bad argument or input (type, shape, value, or a request
#'   that does not fit the data, such as `K` larger than the number of
#'   points). The condition's field `arg` is the name of the argument or of
#'   the operator's input variable that is wrong, as the message quotes it
#'   (`NULL` where the message names none);
#' * `gpu`: the GPU cannot be used, or failed;
#' * `memory`: the computation needs more memory than the host or the GPU
#'   has;
#' * `cache`: the directory of compiled GPU kernels cannot be created or
#'   used ([rkeops_cache_dir()]);
#' * `interrupt`: the user pressed Ctrl-C during a computation. The
#'   condition is also of R's class `interrupt` (classes
#'   `c("rkeops_error_interrupt", "rkeops_error", "interrupt", "error",
#'   "condition")`), so `tryCatch(interrupt = )` catches it as it catches
#'   an interrupt of R code;
#' * `internal`: a bug of rkeops ("internal error in rkeops (please report
#'   it)"): please report it with the code that raised it.
#'
#' The message is the field `message` ([conditionMessage()]), as for any R
#' error; no call is attached (the message says which function failed).
#'
#' @name rkeops_errors
#' @aliases rkeops_error
#' @examples
#' op <- keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
#' e <- tryCatch(op(list(matrix(1, 5, 3), matrix(1, 4, 2))), rkeops_error = function(e) e)
#' class(e)
#' e$arg
#' conditionMessage(e)
#' # a formula error
#' e <- tryCatch(keops_kernel("Sum_Reduction(x +, 0)", "x = Vi(1)"),
#'               rkeops_error_formula = function(e) e)
#' cat(conditionMessage(e))
NULL

# The condition of an rkeops error of `kind`. An interrupt keeps R's class "interrupt" as well.
rkeops_error <- function(message, kind, arg = NULL, call = NULL) {
  base <- if (identical(kind, "interrupt")) c("interrupt", "error") else "error"
  structure(class = c(paste0("rkeops_error_", kind), "rkeops_error", base, "condition"),
            list(message = message, call = call, arg = arg))
}

# Raises an rkeops error of `kind` whose message is the pieces `...` pasted together, as stop()
# pastes its arguments. `arg`: the argument or input that is wrong (input errors). `call`: the
# call to show, none by default (the messages say which function they come from).
rkeops_abort <- function(..., kind, arg = NULL, call = NULL) {
  message <- paste(unlist(lapply(list(...), as.character)), collapse = "")
  stop(rkeops_error(message, kind, arg, call))
}

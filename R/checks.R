# The errors of rkeops, and the checks of arguments that raise them.
#
# Every error of the package is a condition of classes c("rkeops_error_<kind>", "rkeops_error",
# "error", "condition"), so that code can tell a bad input from a GPU failure without reading the
# message (see ?rkeops_errors). The engine's errors come with their kind (rust_result()); the
# checks below raise `input` errors that name the argument, as the message does.

#' Errors of rkeops
#'
#' Every error raised by rkeops, from its R functions or from its engine, is
#' a condition of classes `c("rkeops_error_<kind>", "rkeops_error", "error",
#' "condition")`, so that a program can catch one kind of failure, e.g.
#' `tryCatch(op(input), rkeops_error_gpu = function(e) ...)` to fall back to
#' the CPU, without reading the message.
#'
#' The kinds of errors:
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
  stop(rkeops_error(pasted(...), kind, arg, call))
}

# The pieces `...` pasted together as stop() pastes its arguments.
pasted <- function(...) paste(unlist(lapply(list(...), as.character)), collapse = "")

# How a message names argument `arg` of `fun`: "fun(): 'arg'", or "'arg'" without `fun`.
arg_label <- function(arg, fun = NULL) {
  if (is.null(fun)) sprintf("'%s'", arg) else sprintf("%s(): '%s'", fun, arg)
}

# Whether `x` is one whole number from `min` to `max` (finite, not NA).
is_whole <- function(x, min = -Inf, max = Inf) {
  is.numeric(x) && length(x) == 1L && is.finite(x) && x == round(x) && x >= min && x <= max
}

# `x` as an integer if it is one whole number from `min` to `max`, else an input error:
# "fun(): 'arg' must be a whole number >= min" (", not <x>" with `show_value`).
check_whole <- function(x, arg, fun = NULL, min = -Inf, max = Inf, show_value = FALSE) {
  if (!is_whole(x, min, max)) {
    rkeops_abort(arg_label(arg, fun), " must be a whole number",
                 if (is.finite(min)) sprintf(" >= %d", as.integer(min)),
                 if (show_value) paste0(", not ", .rkeops_show(x)), kind = "input", arg = arg)
  }
  as.integer(x)
}

# `x` if it is TRUE or FALSE (or NA, with `na_ok`), else an input error:
# "fun(): 'arg' must be TRUE or FALSE" (", not <x>" with `show_value`).
check_flag <- function(x, arg, fun = NULL, na_ok = FALSE, show_value = FALSE) {
  ok <- if (na_ok) is.logical(x) && length(x) == 1L else isTRUE(x) || isFALSE(x)
  if (!ok) {
    rkeops_abort(arg_label(arg, fun), " must be ", if (na_ok) "NA, ", "TRUE or FALSE",
                 if (show_value) paste0(", not ", .rkeops_show(x)), kind = "input", arg = arg)
  }
  x
}

# `x` if it is one finite number, of `sign` "positive" (> 0), "non-negative" (>= 0) or "any";
# else an input error: "fun(): 'arg' must be a single [positive | non-negative] number".
check_number <- function(x, arg, fun = NULL, sign = c("any", "positive", "non-negative")) {
  sign <- match.arg(sign)
  ok <- is.numeric(x) && length(x) == 1L && is.finite(x) &&
    switch(sign, any = TRUE, positive = x > 0, "non-negative" = x >= 0)
  if (!ok) {
    rkeops_abort(arg_label(arg, fun), " must be a single ", if (sign != "any") paste0(sign, " "), "number",
                 kind = "input", arg = arg)
  }
  x
}

# The `base` of log() of a LazyTensor or a ComplexLazyTensor: a positive number other than 1.
check_log_base <- function(base) {
  if (!is.numeric(base) || length(base) != 1L || !is.finite(base) || base <= 0 || base == 1) {
    rkeops_abort("log(): 'base' must be a positive number other than 1", kind = "input", arg = "base")
  }
  base
}

# match.arg(x, choices), its error (with match.arg's message) an input error naming `arg`.
check_choice <- function(x, choices, arg) {
  tryCatch(match.arg(x, choices),
           error = function(e) rkeops_abort(conditionMessage(e), kind = "input", arg = arg))
}

# The weights of n points: uniform (1 / n) when NULL, else checked (finite, non-negative, of positive
# sum) and as doubles; `member` names a batch's member in the message.
check_point_weights <- function(w, n, arg, fun, member = NULL) {
  if (is.null(w)) return(rep(1 / n, n))
  if (!is.numeric(w) || length(w) != n || !all(is.finite(w)) || any(w < 0) || sum(w) <= 0) {
    rkeops_abort(arg_label(arg, fun), " must be NULL or ", n, " finite non-negative weights of positive sum",
                 if (!is.null(member)) sprintf(" (member %d)", member), kind = "input", arg = arg)
  }
  as.double(w)
}

# `x` as a double matrix of finite values, one point per row: the one check of the points of every
# function of the package. A vector is one column (`allow_vector`), a data frame its matrix
# (`allow_data_frame`); `d`: the number of columns required; `min_rows`: the fewest points. The
# error names `arg` (and `fun`) and says which rule failed.
check_points <- function(x, arg, fun = NULL, d = NULL, min_rows = 1L, allow_vector = TRUE,
                         allow_data_frame = TRUE) {
  what <- paste0(if (allow_data_frame) "a numeric matrix or data frame" else "a numeric matrix",
                 if (allow_vector) " (or vector)", ", one point per row")
  fail <- function(...) rkeops_abort(arg_label(arg, fun), " must be ", ..., kind = "input", arg = arg)
  if (allow_data_frame && is.data.frame(x)) {
    if (!all(vapply(x, is.numeric, logical(1)))) fail(what, ": a column is not numeric")
    x <- as.matrix(x)
  }
  if (allow_vector && is.null(dim(x)) && (is.numeric(x) || is.logical(x)) && !is.object(x)) {
    x <- matrix(x, ncol = 1L)
  }
  if (!is.matrix(x) || !(is.numeric(x) || is.logical(x)) || is.object(x)) fail(what)
  if (!is.null(d) && ncol(x) != d) fail(what, ", with ", d, " columns, not ", ncol(x))
  if (nrow(x) < min_rows || ncol(x) < 1L) {
    fail(what, ", with at least ", min_rows, " row", if (min_rows != 1L) "s", " and 1 column, not ",
         nrow(x), " x ", ncol(x))
  }
  if (!all_finite(x)) fail(what, ", without NA, NaN or infinite values")
  if (storage.mode(x) != "double") storage.mode(x) <- "double"
  x
}

# Whether every value of the numeric or logical matrix `x` is finite, with no copy of it. For
# doubles a finite sum says so in one quick pass (NA, NaN and infinite values make it so, too; 4 ms
# against range()'s 16-33 ms for 2e6 values); a sum that overflows is checked again by range(),
# whose NA or NaN anywhere makes it NA (integers go there at once: their sum can overflow to NA).
all_finite <- function(x) {
  if (!length(x)) return(TRUE)
  # (from 1e6 doubles, the columns' sums on every core: R's sum() is 1 s for 1e9 values)
  total <- if (is.double(x) && length(x) >= 1e6) sum(column_sums(x)) else if (is.double(x)) sum(x) else NA
  is.finite(total) || all(is.finite(range(x)))
}

# The sums of the columns of the double matrix (or vector) `x`, by the engine on every core (not
# finite where a value is not).
column_sums <- function(x) rust_result(.Call(wrap__keops_column_sums, x))

# The sums of the squared deviations of the columns of the double matrix `x` from `m` (a value per
# column), sum((x - m)^2) in float64, by the engine on every core (as a reduction, the points went to
# the GPU again: 0.37 s of a K-means of 1e8 x 10 points on an H200 host).
column_squares <- function(x, m) rust_result(.Call(wrap__keops_column_squares, x, as.double(m)))

# Labels or indices `x` (a program's or a reduction's doubles) as an integer vector, converted on
# every core into memory backed by huge pages (R's as.integer() took 0.3 s for 1e8 labels here); NA
# where a value is not a whole number within R's integers.
labels_as_integers <- function(x) {
  if (!is.double(x)) return(as.integer(x))
  rust_result(.Call(wrap__keops_labels_as_integers, x))
}

# An nrow x ncol matrix of zeros written on every core (as labels' first value; R's matrix(0, 1e8, 1)
# took 0.3 s here).
zero_matrix <- function(nrow, ncol) rust_result(.Call(wrap__keops_zero_matrix, as.double(nrow), as.double(ncol)))

# The points `x` (N x D doubles) moved by -m and scaled by s (D values each), (x - m) * s, a new
# matrix written by the engine on every core: R's x - rep(m, each = N) makes two N x D temporaries
# (12 s of a 17.7 s K-means of 1e8 x 10 points on an H200 host; an engine map took 1.6 s for 2e7 x
# 5 on this 2-core box, R 1.1 s).
columns_moved <- function(x, m, s = rep(1, ncol(x))) {
  rust_result(.Call(wrap__keops_columns_moved, x, as.double(m), as.double(s)))
}

# Warns with a condition of classes c("rkeops_warning_<kind>", "rkeops_warning", "warning",
# "condition"), the pieces `...` pasted together as in rkeops_abort(), so that code can muffle or
# catch one kind (e.g. `convergence`, `degenerate`, `empty_cluster`) without reading the message.
rkeops_warn <- function(..., kind) {
  warning(structure(class = c(paste0("rkeops_warning_", kind), "rkeops_warning", "warning", "condition"),
                    list(message = pasted(...), call = NULL)))
}

# The value kept in environment `cache` under `key`, made by `make()` the first time: the operators
# and programs of the algorithm functions, built once per process and shape.
memoised <- function(cache, key, make) {
  key <- paste(key, collapse = "\r")
  value <- cache[[key]]
  if (is.null(value)) {
    value <- make()
    assign(key, value, envir = cache)
  }
  value
}

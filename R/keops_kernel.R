#' Define a reduction of a symbolic matrix
#'
#' `keops_kernel()` compiles a formula of the KeOps formula language into an R function that
#' computes the reduction without ever storing the symbolic matrix `M[i, j] = F(x_i, y_j)`.
#'
#' @param formula A single string: a reduction of a formula, such as
#'   `"Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)"`. Axis 0 reduces over `j` (the result has one
#'   row per `i`), axis 1 reduces over `i` (one row per `j`). Positions inside formulas, as in
#'   `Elem(x, 0)`, are 0-based as in KeOps.
#' @param args A character vector declaring the variables: `"x = Vi(3)"` (indexed by `i`, 3 columns),
#'   `"y = Vj(3)"` (indexed by `j`), `"s = Pm(1)"` (a parameter); `"x = Vi(0, 3)"` gives the
#'   position in the list of inputs explicitly.
#' @param sum_scheme How sums are accumulated: `"auto"` (the same as `"block_sum"`: sums of tiles
#'   combined in float64), `"direct_sum"` (one running sum in the working precision) or
#'   `"kahan_scheme"` (compensated summation).
#'
#' @details Reductions: `Sum`, `Min`, `Max`, `ArgMin`, `ArgMax`, `Min_ArgMin`, `Max_ArgMax`
#'   (`Name_Reduction(f, axis)`), `KMin`, `ArgKMin`, `KMin_ArgKMin` (`Name_Reduction(f, K, axis)`),
#'   `LogSumExp` (`LogSumExp_Reduction(f, axis)`), `LogSumExpWeight` and `SumSoftMaxWeight`
#'   (`Name_Reduction(f, g, axis)`). Indices returned to R are 1-based.
#'
#'   Matrices stored in vector variables are column-major, as in R: with `A = Pm(as.vector(A))` for
#'   an `n x p` matrix, `MatVecMult(A, x)` is `A %*% x`, `VecMatMult(x, A)` is `x %*% A` and
#'   `TensorProd(a, b)` is `as.vector(outer(a, b))` (KeOps' Python interface is row-major).
#'
#' @return A function of one argument, a list of inputs in the order of `args` (or named after the
#'   variables, in any order): matrices with one row per `i` or `j` and as many columns as declared,
#'   and numeric vectors for parameters. It returns an `n x d` matrix; for K-selections an
#'   `n x K` matrix (`n x K x d` array when `d > 1`); `Min_ArgMin`, `Max_ArgMax` and `KMin_ArgKMin`
#'   return `list(values =, indices =)`.
#' @export
#' @examples
#' x <- matrix(runif(300), 100, 3)
#' y <- matrix(runif(600), 200, 3)
#' b <- matrix(rnorm(200), 200, 1)
#' gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
#'                       c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
#' res <- gauss(list(x, y, b, 0.5))
#' knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 5, 0)", c("x = Vi(3)", "y = Vj(3)"))
#' head(knn(list(x, y)))
keops_kernel <- function(formula, args, sum_scheme = "auto") {
  if (!is.character(formula) || length(formula) != 1L || is.na(formula)) {
    stop("'formula' must be a single string, such as \"Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)\"",
         call. = FALSE)
  }
  if (missing(args) || !is.character(args) || anyNA(args)) {
    stop("'args' must be a character vector of declarations such as c(\"x = Vi(3)\", \"y = Vj(3)\")",
         call. = FALSE)
  }
  schemes <- c("auto", "direct_sum", "block_sum", "kahan_scheme")
  if (!is.character(sum_scheme) || length(sum_scheme) != 1L || !sum_scheme %in% schemes) {
    stop("'sum_scheme' must be one of ", paste0("\"", schemes, "\"", collapse = ", "), call. = FALSE)
  }
  info <- rust_result(.Call(wrap__keops_parse, formula, args))
  force(sum_scheme)
  op <- function(input = list()) {
    inputs <- prepare_inputs(input, info)
    opts <- get_rkeops_options()
    # 0 threads: the engine uses every core (parallel::detectCores() would cost a millisecond a call).
    threads <- if (is.null(opts$ncore)) 0L else opts$ncore
    res <- rust_result(.Call(wrap__keops_run, formula, args, inputs, opts$precision,
                             threads, sum_scheme, opts$backend, opts$device, rkeops_cache_dir()))
    .rkeops_env$last_run <- list(backend = res$backend, timings = res$timings)
    shape_result(res, info)
  }
  # What keops_grad() needs to build the gradient's formula.
  attr(op, "rkeops") <- list(formula = formula, args = args, sum_scheme = sum_scheme, info = info)
  op
}

# What computed the last reduction, and the seconds spent in each of its phases (conversion,
# compilation, transfers, kernel, ...): a tool for benchmarks and for checking the backend.
last_run <- function() .rkeops_env$last_run

# The Rust side reports failures as list(error = message).
rust_result <- function(res) {
  if (!is.null(res$error)) stop(res$error, call. = FALSE)
  res
}

# Checks the list of inputs (count, names, types) and converts each to a double vector or matrix.
prepare_inputs <- function(input, info) {
  n <- length(info$names)
  expected <- paste(sprintf("%s = %s(%d)", info$names, info$categories, info$dims), collapse = ", ")
  if (!is.list(input) || is.data.frame(input)) {
    stop("the operator takes one argument, a list of ", n, " inputs (", expected, ")", call. = FALSE)
  }
  if (length(input) != n) {
    stop("expected ", n, " inputs (", expected, "), got ", length(input), call. = FALSE)
  }
  given <- names(input)
  if (!is.null(given) && any(nzchar(given))) {
    unknown <- setdiff(given, info$names)
    if (length(unknown) > 0L || any(!nzchar(given)) || anyDuplicated(given)) {
      bad <- if (length(unknown) > 0L) paste0("'", unknown, "'", collapse = ", ") else "some inputs"
      stop("input names must name each variable once (", paste(info$names, collapse = ", "),
           "): ", bad, " do not match", call. = FALSE)
    }
    input <- input[info$names]
  }
  for (k in seq_len(n)) {
    input[k] <- list(as_numeric_input(input[[k]], info$names[k], info$categories[k], info$dims[k]))
  }
  input
}

as_numeric_input <- function(x, name, category, dim) {
  what <- if (category == "Pm") {
    sprintf("a numeric vector of length %d (Pm(%d))", dim, dim)
  } else {
    sprintf("a numeric matrix with %d column%s (%s(%d))", dim, if (dim == 1L) "" else "s", category, dim)
  }
  if (is.null(x)) stop(sprintf("input '%s' is NULL; expected %s", name, what), call. = FALSE)
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!(is.numeric(x) || is.logical(x)) || is.object(x) && !is.matrix(x)) {
    stop(sprintf("input '%s' must be %s, not %s", name, what, class(x)[1L]), call. = FALSE)
  }
  d <- dim(x)
  if (length(d) > 2L) {
    stop(sprintf("input '%s' is an array with %d dimensions; expected %s", name, length(d), what),
         call. = FALSE)
  }
  if (length(d) == 1L) dim(x) <- NULL
  if (storage.mode(x) != "double") storage.mode(x) <- "double"
  x
}

# Turns the column-major values and 1-based indices of the engine into R matrices, arrays or lists.
shape_result <- function(res, info) {
  selection <- info$reduction %in% c("KMin", "ArgKMin", "KMinArgKMin")
  shape <- function(v) {
    if (is.null(v)) return(NULL)
    if (!selection) {
      dim(v) <- c(res$nrow, res$dim)
    } else if (res$dim == 1L) {
      dim(v) <- c(res$nrow, res$k)
    } else {
      dim(v) <- c(res$nrow, res$k, res$dim)
    }
    v
  }
  values <- shape(res$values)
  indices <- shape(res$indices)
  if (!is.null(values) && !is.null(indices)) {
    list(values = values, indices = indices)
  } else if (!is.null(values)) {
    values
  } else {
    indices
  }
}

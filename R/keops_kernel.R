#' Define a reduction of a symbolic matrix
#'
#' `keops_kernel()` parses a reduction written in the KeOps formula language
#' and returns an R function that computes it on given data, without ever
#' storing the symbolic matrix \eqn{M_{ij} = F(x_i, y_j, p)}{M_ij = F(x_i, y_j, p)}: the formula is
#' evaluated tile by tile and reduced on the fly, on the CPU or the GPU (see
#' [get_rkeops_options()]). Syntax errors and dimension mismatches are R errors
#' raised by `keops_kernel()`; wrong inputs are R errors raised by the
#' returned function.
#'
#' @param formula A single string: a reduction of a formula, such as
#'   `"Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)"`. Its last argument is the
#'   axis: 0 reduces over `j` (the result has one row per `i`), 1 reduces over
#'   `i` (one row per `j`). Positions inside formulas, as in `Elem(x, 0)`, are
#'   0-based as in KeOps.
#' @param args A character vector declaring the variables of the formula, in
#'   the order of the inputs: `"x = Vi(3)"` (indexed by `i`, 3 columns),
#'   `"y = Vj(3)"` (indexed by `j`), `"s = Pm(1)"` (a parameter, the same for
#'   all `(i, j)`); `"x = Vi(0, 3)"` gives the position of the input
#'   (0-based) explicitly.
#' @param sum_scheme How sums (`Sum`, and the sums inside `LogSumExp`, ...)
#'   are accumulated: `"auto"` (the same as `"block_sum"`: sums of tiles in the
#'   working precision, combined in float64), `"direct_sum"` (one running sum
#'   in the working precision) or `"kahan_scheme"` (compensated summation).
#'
#' @details
#' **Reductions** (`f` a formula, `K` a whole number, `axis` 0 or 1):
#' `Sum`, `Min`, `Max`, `ArgMin`, `ArgMax`, `Min_ArgMin`, `Max_ArgMax`
#' (`Name_Reduction(f, axis)`, component by component); `KMin`, `ArgKMin`,
#' `KMin_ArgKMin` (`Name_Reduction(f, K, axis)`: the `K` smallest values, in
#' increasing order); `LogSumExp_Reduction(f, axis)`
#' (\eqn{\log \sum_j \exp f_{ij}}{log sum_j exp(f_ij)}, `f` of dimension 1);
#' `LogSumExpWeight_Reduction(f, g, axis)` (\eqn{\log \sum_j \exp(f_{ij}) g_{ij}}{log sum_j exp(f_ij) g_ij},
#' also written `LogSumExp_Reduction(f, axis, g)`) and
#' `SumSoftMaxWeight_Reduction(f, g, axis)`
#' (\eqn{\sum_j \exp(f_{ij}) g_{ij} / \sum_j \exp(f_{ij})}{sum_j exp(f_ij) g_ij / sum_j exp(f_ij)}). Indices returned to
#' R are 1-based.
#'
#' **Operations**: `+`, `-`, `*`, `/` (elementwise; an operand of dimension 1
#' is broadcast), `(a | b)` (scalar product), numbers; elementwise `Exp`,
#' `Log`, `Sqrt`, `Rsqrt`, `Square`, `Inv`, `Abs`, `Sign`, `Step`, `ReLU`,
#' `Sin`, `Cos`, `Asin`, `Acos`, `Atan`, `Atan2(y, x)`, `Floor`,
#' `Round(f, digits)`, `Pow(f, n)`, `Powf(f, g)`, `Clamp(f, a, b)`,
#' `ClampInt(f, a, b)`, `IfElse(f, a, b)`, `Mod(f, n, d)`, `XLogX`,
#' `SinXDivX`, `Equal`, `NotEqual`, `LessThan`, `LessOrEqual`; on vectors
#' `SqNorm2`, `Norm2`, `Normalize`, `SqDist(x, y)`, `WeightedSqNorm(s, x)`,
#' `WeightedSqDist(s, x, y)`, `Sum`, `Min`, `Max`, `ArgMin`, `ArgMax` (over
#' the components), `Elem(f, m)`, `ElemT(f, n, m)`, `Extract(f, m, d)`,
#' `ExtractT(f, m, d)`, `Concat(f, g)`, `OneHot(f, d)`, `SumT(f, d)`,
#' `MatVecMult(A, x)`, `VecMatMult(x, A)`, `TensorProd(a, b)`, and
#' `Grad(f, v, e)` (the gradient of `f` with respect to the variable `v`,
#' contracted with `e`; see [keops_grad()]).
#'
#' Matrices stored in vector variables are column-major, as in R: with
#' `A = Pm(as.vector(A))` for an `n x p` matrix, `MatVecMult(A, x)` is
#' `A %*% x`, `VecMatMult(x, A)` is `x %*% A` and `TensorProd(a, b)` is
#' `as.vector(outer(a, b))` (KeOps' Python interface is row-major).
#'
#' @return A function of one argument, `input`: a list of the inputs in the
#'   order of `args` (or named after the variables, in any order): numeric
#'   matrices with one row per `i` (`Vi`) or per `j` (`Vj`) and as many columns
#'   as declared (a vector is a one-column matrix), and numeric vectors for
#'   parameters (`Pm`). With `N` rows per `i`, `M` per `j`, and `d` the
#'   dimension of the formula (of `g` for the weighted reductions), the
#'   function returns, for axis 0 (`n = N`; for axis 1, `n = M`):
#'   * an `n x d` numeric matrix for `Sum`, `Min`, `Max`, `LogSumExp`
#'     (`d = 1`), `LogSumExpWeight` and `SumSoftMaxWeight`;
#'   * an `n x d` integer matrix of 1-based indices for `ArgMin` and `ArgMax`;
#'   * an `n x K` matrix for `KMin` (numeric) and `ArgKMin` (integer), an
#'     `n x K x d` array when `d > 1`;
#'   * `list(values =, indices =)` of two such matrices for `Min_ArgMin`,
#'     `Max_ArgMax` and `KMin_ArgKMin`.
#'
#'   The function computes with the options in force when it is called
#'   ([get_rkeops_options()]).
#'
#'   Its second argument, `ranges`, makes the reduction block-sparse (KeOps'
#'   `ranges`): with the points sorted by cluster ([sort_clusters()]), each
#'   block of rows reduces only over the ranges of the other index that
#'   `ranges` keeps for it (a "keops_ranges" object made by [from_matrix()];
#'   1-based, inclusive). A reduction over `j` (axis 0) uses `ranges_i`,
#'   `slices_i` and `redranges_j`; over `i` (axis 1) `ranges_j`, `slices_j` and
#'   `redranges_i`, so the same object serves both axes and the gradients of
#'   [keops_grad()]. Rows in no block, or whose block keeps nothing, get the
#'   reduction's value over nothing: 0 for sums, `Inf` (`-Inf`) for minima
#'   (maxima) with index 0, `-Inf` for log-sum-exp, `NaN` for soft-max
#'   weights.
#' @seealso [keops_grad()] for gradients, [LazyTensor] for the same
#'   computations written with R operators.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(300), 100, 3)   # N = 100 points x_i
#' y <- matrix(runif(600), 200, 3)   # M = 200 points y_j
#' b <- matrix(rnorm(200), 200, 1)
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)  # dense |x_i - y_j|^2
#'
#' # Gaussian kernel sum a_i = sum_j exp(-s |x_i - y_j|^2) b_j: a 100 x 1 matrix
#' gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
#'                       c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
#' a <- gauss(list(x, y, b, 0.5))
#' head(a, 3)
#' all.equal(a, exp(-0.5 * D2) %*% b, tolerance = 1e-5)   # float32 by default
#' # inputs named after the variables, in any order
#' all.equal(gauss(list(s = 0.5, b = b, x = x, y = y)), a)
#'
#' # the 5 nearest x_i of each y_j (axis 1): a 200 x 5 integer matrix
#' knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 5, 1)",
#'                     c("x = Vi(3)", "y = Vj(3)"))
#' idx <- knn(list(x, y))
#' head(idx, 3)
#' all(idx == t(apply(D2, 2, order))[, 1:5])
#'
#' # nearest y_j of each x_i, with its squared distance
#' nn <- keops_kernel("Min_ArgMin_Reduction(SqDist(x, y), 0)",
#'                    c("x = Vi(3)", "y = Vj(3)"))(list(x, y))
#' str(nn)
#' all(nn$indices == apply(D2, 1, which.min))
#'
#' # log-sum-exp over i (one row per j)
#' lse <- keops_kernel("LogSumExp_Reduction(-SqDist(x, y), 1)",
#'                     c("x = Vi(3)", "y = Vj(3)"))
#' all.equal(lse(list(x, y)), matrix(log(colSums(exp(-D2)))), tolerance = 1e-5)
#'
#' # block-sparse: x_1..x_50 meet y_1..y_100 only, x_51..x_100 y_101..y_200 only
#' r <- from_matrix(rbind(c(1, 50), c(51, 100)), rbind(c(1, 100), c(101, 200)),
#'                  diag(2) == 1)
#' a2 <- gauss(list(x, y, b, 0.5), ranges = r)
#' keep <- outer(seq_len(100) > 50, seq_len(200) > 100, "==")
#' all.equal(a2, (exp(-0.5 * D2) * keep) %*% b, tolerance = 1e-5)
#' # a 2 x 3 matrix as a parameter (column-major): sum_j A (x_i - y_j)
#' A <- matrix(rnorm(6), 2, 3)
#' mv <- keops_kernel("Sum_Reduction(MatVecMult(A, x - y), 0)",
#'                    c("A = Pm(6)", "x = Vi(3)", "y = Vj(3)"))
#' all.equal(mv(list(as.vector(A), x, y)),
#'           (x * nrow(y) - rep(colSums(y), each = nrow(x))) %*% t(A),
#'           tolerance = 1e-5)
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
  # Everything below runs at every call, so it stays at a few microseconds and does no work that
  # grows with the data (see bench/iterative.R and bench/lazytensor_overhead.R).
  op <- function(input = list(), ranges = NULL) {
    inputs <- prepare_inputs(input, info)
    opts <- .rkeops_env$options
    # 0 threads: the engine uses every core (parallel::detectCores() would cost a millisecond a call).
    threads <- if (is.null(opts$ncore)) 0L else opts$ncore
    # The CPU backend compiles nothing: no cache directory to look up.
    cache_dir <- if (opts$backend == "CPU") "" else kernel_cache_dir()
    res <- .Call(wrap__keops_run, formula, args, inputs, opts$precision,
                 threads, sum_scheme, opts$backend, opts$device, cache_dir,
                 ranges_for_engine(ranges))
    if (!is.null(res$error)) rust_result(res)
    .rkeops_env$last_run <- list(backend = res$backend, timings = res$timings)
    if (!is.null(.rkeops_env$phase_log)) log_phases(res$timings)
    result_value(res)
  }
  # What keops_grad() needs to build the gradient's formula.
  attr(op, "rkeops") <- list(formula = formula, args = args, sum_scheme = sum_scheme, info = info)
  op
}

# What computed the last reduction, and the seconds spent in each of its phases (conversion,
# compilation, transfers, kernel, ...): a tool for benchmarks and for checking the backend.
last_run <- function() .rkeops_env$last_run

# Evaluates `expr` and returns list(value, calls, phases): the number of reductions it ran and the
# seconds of each engine phase summed over them, by name (the names are the engine's; they differ
# between backends). For benchmarks of whole algorithms (bench/iterative.R). Nested uses: the inner
# one counts its calls only.
phase_totals <- function(expr) {
  log <- new.env(parent = emptyenv())
  log$calls <- 0L
  log$phases <- numeric(0)
  old <- .rkeops_env$phase_log
  .rkeops_env$phase_log <- log
  on.exit(.rkeops_env$phase_log <- old)
  value <- expr
  list(value = value, calls = log$calls, phases = log$phases)
}

log_phases <- function(timings) {
  log <- .rkeops_env$phase_log
  log$calls <- log$calls + 1L
  for (name in names(timings)) {
    before <- log$phases[name]
    log$phases[name] <- if (is.na(before)) timings[[name]] else before + timings[[name]]
  }
}

# rkeops_cache_dir() costs tens of microseconds (tools::R_user_dir()); it is computed again only
# when one of the environment variables it depends on changes.
kernel_cache_dir <- function() {
  env <- Sys.getenv(c("RKEOPS_CACHE_DIR", "R_USER_CACHE_DIR", "XDG_CACHE_HOME", "HOME"))
  memo <- .rkeops_env$cache_dir_memo
  if (is.null(memo) || !identical(memo$env, env)) {
    memo <- list(env = env, dir = rkeops_cache_dir())
    .rkeops_env$cache_dir_memo <- memo
  }
  memo$dir
}

# The Rust side reports failures as list(error = message), and Ctrl-C as list(error, interrupted =
# TRUE): a condition that tryCatch(interrupt = ) catches like R's own, and that is an error for the
# rest (a script stops there).
rust_result <- function(res) {
  if (!is.list(res)) return(res)   # a value that is not a list (an external pointer) is a success
  if (isTRUE(res$interrupted)) {
    stop(structure(class = c("interrupt", "error", "condition"),
                   list(message = res$error, call = NULL)))
  }
  if (!is.null(res$error)) stop(res$error, call. = FALSE)
  res
}

# Checks the list of inputs (count, names, types) and converts each to a double vector or matrix.
prepare_inputs <- function(input, info) {
  n <- length(info$names)
  # The usual call, an unnamed list of double vectors and matrices, is passed on as it is: no copy,
  # no work per element beyond these tests (the engine checks the shapes).
  if (is.list(input) && !is.object(input) && length(input) == n && is.null(names(input))) {
    plain <- TRUE
    for (x in input) {
      if (!is.double(x) || is.object(x) || length(dim(x)) == 1L || length(dim(x)) > 2L) {
        plain <- FALSE
        break
      }
    }
    if (plain) return(input)
  }
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
  # A matrix kept on the GPU (keops_device()) goes to the engine as it is; the engine checks its
  # shape, precision and device.
  if (inherits(x, "keops_device_matrix")) return(x)
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

# The engine's results, already R matrices or arrays (column-major values, 1-based indices): one
# of them, or both in a list (KMinArgKMin, ArgMin with values).
result_value <- function(res) {
  if (is.null(res$values)) {
    res$indices
  } else if (is.null(res$indices)) {
    res$values
  } else {
    list(values = res$values, indices = res$indices)
  }
}

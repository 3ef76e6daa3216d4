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
#'   `i` (one row per `j`), as in the KeOps papers and rkeops 2's
#'   documentation (rkeops 2's code did the opposite: the first call in a
#'   session gives a message about it, see Details). Positions inside
#'   formulas, as in `Elem(x, 0)`, are 0-based as in KeOps. Or KeOps' gradient
#'   of a reduction: `Grad(reduction, v, e)`, or `GradFromPos(reduction, v, I)`
#'   (see Details).
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
#' **Gradients** (as [keops_grad()] computes them): `Grad(reduction, v, e)`
#' is the gradient with respect to the variable `v` of
#' \eqn{\sum \langle a, e\rangle}{sum <a, e>}, `a` the result of `reduction` and
#' `e` a new variable declared in `args`, shaped like `a`: `e = Vi(d)` for a
#' reduction over `j` (axis 0), `e = Vj(d)` over `i`, `d` the dimension of
#' the result (`K d` for `KMin`). The operator takes the inputs in the order of
#' `args` (with `e`), and returns a matrix shaped like `v` (one row per `i`
#' for a `Vi`, per `j` for a `Vj`, `1 x dim` for a `Pm`).
#' `GradFromPos(reduction, v, I)` (KeOps' C++ form) is the same with `e` not
#' declared: it is the input at 0-based position `I`. Gradients of gradients
#' of `Sum` reductions work too.
#'
#' **The reduction axis and rkeops 2**: the formula text
#' `Sum_Reduction(f, 0)` sums over `j` here, as KeOps' papers and C++ code
#' and rkeops 2's documentation say; rkeops 2 passed the axis to pykeops,
#' whose axis 0 sums over `i`. The first `keops_kernel()` of a session says so
#' in a message (not for the package's own formulas, nor in tests run by
#' testthat or documents knitted by knitr); the option `verbosity`
#' ([rkeops_disable_verbosity()]) hides it.
#'
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
#' @return A function whose first argument, `input`, is a list of the inputs in the
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
#'   Its second argument, `inner_dim`, is `"col"` (default: one row per point
#'   `i` or `j`, the coordinates in columns) or `"row"` (the inputs given
#'   transposed, one column per point, as rkeops 2 allowed): the result has one
#'   row per point in both cases, as in rkeops 2. Called without input, the
#'   function returns its description, as in rkeops 2: a list of `formula`,
#'   `args`, `args_info` (the variables in the order of `args`: `args`,
#'   `var_name`, `var_type`, `var_pos` (0-based input positions), `var_dim`,
#'   `decl` (`"dim"`, or `"pos_dim"` when every declaration gives its
#'   position)) and `sum_scheme`.
#'
#'   Its third argument, `ranges`, makes the reduction block-sparse (KeOps'
#'   `ranges`): with the points sorted by cluster ([sort_clusters()]), each
#'   block of rows reduces only over the ranges of the other index that
#'   `ranges` keeps for it (a "keops_ranges" object made by [from_matrix()];
#'   1-based, inclusive). A reduction over `j` (axis 0) uses `ranges_i`,
#'   `slices_i` and `redranges_j`; over `i` (axis 1) `ranges_j`, `slices_j` and
#'   `redranges_i`, so the same object serves both axes and the gradients of
#'   [keops_grad()]. Rows in no block, or whose block keeps nothing, get the
#'   reduction's value over nothing: 0 for sums, `Inf` (`-Inf`) for minima
#'   (maxima) with index 0, `-Inf` for log-sum-exp, `NaN` for soft-max
#'   weights. (A `ranges` object given as the second argument is taken as
#'   `ranges`, as before `inner_dim` was added.)
#'
#'   **Batches**: many independent problems of the same formula in one call.
#'   Any input may be a batch of `B` members: an `n x d x B` array (member `b`
#'   is `x[, , b]`; for a parameter `Pm(d)`, a `1 x d x B` array) or a list of
#'   `B` matrices (of vectors for a parameter), whose members may have
#'   different numbers of rows. Member `b` of the result is the reduction of
#'   member `b` of every batched input: an `n x d x B` array (for `KMin` with
#'   `d > 1`, `n x K x d x B`; for `Min_ArgMin`, ..., a list of two such
#'   arrays), or a list of `B` matrices when any batched input is a list. An
#'   input that is not a batch (a matrix, a vector, a number), or a batch of
#'   one member, is shared by every member (broadcast, as in KeOps); batched
#'   inputs must have the same `B`. Indices count from 1 within each member.
#'   The batch is one engine call, one kernel launch on the GPU: the members
#'   are laid end to end and reduced as the blocks of block-diagonal ranges
#'   (a shared input is repeated for each member). The gradients of
#'   [keops_grad()] take batches the same way (the gradient input `e`
#'   batched like the result): the gradient in a batched variable has one
#'   member per member, the gradient in a shared variable is the sum over the
#'   members, and the gradient in a batched parameter is a `1 x d x B` array.
#'   A batch needs an `i` and a `j` variable, and cannot be combined with
#'   `ranges`, `inner_dim = "row"` or inputs kept on the GPU ([keops_device()]).
#'   A loop whose reductions feed one another (log-domain Sinkhorn) runs in one
#'   call with [keops_iterate()], batches included.
#' @seealso [keops_grad()] for gradients, [LazyTensor] for the same
#'   computations written with R operators, [keops_iterate()] for loops.
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
#' # one column per point (rkeops 2's inner_dim = "row"): the same result
#' all.equal(gauss(list(t(x), t(y), t(b), 0.5), inner_dim = "row"), a)
#' # no input: the description of the operator
#' str(gauss()$args_info)
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
#'
#' # a batch of 4 problems: x and b per problem (arrays), y shared by all
#' xb <- array(runif(10 * 3 * 4), c(10, 3, 4))
#' bb <- array(rnorm(200 * 4), c(200, 1, 4))
#' ab <- gauss(list(xb, y, bb, 0.5))   # 10 x 1 x 4: one call for the 4
#' all.equal(ab[, , 2], c(gauss(list(xb[, , 2], y, bb[, , 2], 0.5))))
#'
#' # KeOps' gradient syntax: d/dx_i of sum_i e_i sum_j |x_i - y_j|^2,
#' # that is 2 e_i sum_j (x_i - y_j) (100 x 3)
#' dx <- keops_kernel("Grad(Sum_Reduction(SqDist(x, y), 0), x, e)",
#'                    c("x = Vi(3)", "y = Vj(3)", "e = Vi(1)"))
#' e <- matrix(runif(100), 100, 1)
#' all.equal(dx(list(x, y, e)),
#'           2 * c(e) * (nrow(y) * x - rep(colSums(y), each = nrow(x))),
#'           tolerance = 1e-5)
keops_kernel <- function(formula, args, sum_scheme = "auto") {
  if (!is.character(formula) || length(formula) != 1L || is.na(formula)) {
    rkeops_abort("'formula' must be a single string, such as \"Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)\"",
                 kind = "input", arg = "formula")
  }
  if (missing(args) || !is.character(args) || anyNA(args)) {
    rkeops_abort("'args' must be a character vector of declarations such as c(\"x = Vi(3)\", \"y = Vj(3)\")",
                 kind = "input", arg = "args")
  }
  schemes <- c("auto", "direct_sum", "block_sum", "kahan_scheme")
  if (!is.character(sum_scheme) || length(sum_scheme) != 1L || !sum_scheme %in% schemes) {
    rkeops_abort("'sum_scheme' must be one of ", paste0("\"", schemes, "\"", collapse = ", "),
                 kind = "input", arg = "sum_scheme")
  }
  op <- make_kernel(formula, args, sum_scheme)
  # The package's own formulas (LazyTensor reductions, gradients) need no note; users' do.
  if (!identical(topenv(parent.frame()), topenv())) axis_notice(formula)
  op
}

# The operator of `formula` (a reduction, or KeOps' Grad(reduction, v, e) / GradFromPos(reduction,
# v, I)): the engine's for a reduction, a gradient operator for the Grad forms. `shown` (formula,
# args, info) is what the operator describes when called without input, if not itself.
make_kernel <- function(formula, args, sum_scheme, shown = NULL) {
  info <- rust_result(.Call(wrap__keops_parse, formula, args))
  if (isTRUE(info$gradient)) return(grad_kernel(formula, args, sum_scheme))
  if (is.null(shown)) shown <- list(formula = formula, args = args, info = info)
  force(sum_scheme)
  # Everything below runs at every call, so it stays at a few microseconds and does no work that
  # grows with the data (see bench/iterative.R and bench/lazytensor_overhead.R).
  op <- function(input = NULL, inner_dim = "col", ranges = NULL) {
    if (is.null(input)) return(describe_operator(shown, sum_scheme))
    one <- NULL
    kind <- batch_kind(input)
    if (kind > 0L) {
      # A batch of one member continues here: the plain call, its result shaped as a batch. Arrays
      # of one member (n x d x 1) go to the engine as they are.
      one <- if (kind == 1L) list(as_list = FALSE) else batch_of_one(input, info)
      if (is.null(one)) return(batch_forward(formula, sum_scheme, info, input, ranges, inner_dim))
      batch_unsupported(ranges, inner_dim)
      if (kind == 2L) input <- one$input
    }
    if (!identical(inner_dim, "col")) {
      layout <- input_layout(input, inner_dim, ranges)
      input <- layout$input
      ranges <- layout$ranges
    }
    inputs <- prepare_inputs(input, info)
    if (!is.null(.rkeops_env$future)) return(future_reduce(formula, args, sum_scheme, info, inputs, ranges, one))
    res <- engine_run(formula, args, sum_scheme, inputs, ranges)
    if (is.null(one)) res else batch_of_one_value(res, one$as_list)
  }
  # What keops_grad() needs to build the gradient's formula.
  attr(op, "rkeops") <- list(formula = formula, args = args, sum_scheme = sum_scheme, info = info)
  op
}

# The engine's result (see result_value()) for `inputs` (checked by prepare_inputs()). `members`:
# the output rows are a batch of members of equal size laid end to end, whose results come back as
# `n x ... x B` arrays, `members[b]` (member b's first reduced row) subtracted from its indices.
engine_run <- function(formula, args, sum_scheme, inputs, ranges, members = NULL) {
  res <- .Call(wrap__keops_run, formula, args, inputs, engine_options(), sum_scheme,
               ranges_for_engine(ranges), members)
  if (!is.null(res$error)) rust_result(res)
  record_run(res$backend, res$timings)
  result_value(res)
}

# An operator that runs `run(inputs, ranges)` on the inputs put in the order of `shown$info`
# (checked and converted, after `adjust`), with the same front end as the engine's operators: no
# input describes it, `inner_dim` and `ranges` as there.
wrap_operator <- function(run, shown, sum_scheme, adjust = identity) {
  function(input = NULL, inner_dim = "col", ranges = NULL) {
    if (is.null(input)) return(describe_operator(shown, sum_scheme))
    if (!identical(inner_dim, "col")) {
      layout <- input_layout(input, inner_dim, ranges)
      input <- layout$input
      ranges <- layout$ranges
    }
    run(prepare_inputs(adjust(input), shown$info), ranges)
  }
}

# The second argument of an operator is `inner_dim` (rkeops 2); a `ranges` object given there (this
# package's former second argument) is taken as `ranges`. With inner_dim = "row" the inputs are
# given transposed, one column per point, as rkeops 2 allowed: they are transposed back here (the
# result keeps one row per point, as in rkeops 2).
input_layout <- function(input, inner_dim, ranges) {
  if (is.null(inner_dim)) inner_dim <- "col"
  if (is.list(inner_dim)) {
    if (!is.null(ranges)) {
      rkeops_abort("'ranges' is given twice (second argument and ranges = )", kind = "input", arg = "ranges")
    }
    ranges <- inner_dim
    inner_dim <- "col"
  }
  if (!is.character(inner_dim) || length(inner_dim) != 1L || !inner_dim %in% c("col", "row")) {
    rkeops_abort("'inner_dim' (the second argument of the operator) must be \"col\" (one row per point, ",
                 "the default) or \"row\" (one column per point), not ", .rkeops_show(inner_dim),
                 "; the inputs go in one list: op(list(x, y, ...))", kind = "input", arg = "inner_dim")
  }
  if (inner_dim == "row") {
    if (!is.list(input) || is.data.frame(input)) {
      rkeops_abort("the operator takes one argument, a list of inputs", kind = "input", arg = "input")
    }
    for (k in seq_along(input)) {
      x <- input[[k]]
      if (inherits(x, "keops_device_matrix")) {
        rkeops_abort("inner_dim = \"row\" cannot transpose input ", k, ", a matrix kept on the GPU: ",
                     "give it with one row per point and inner_dim = \"col\"", kind = "input", arg = "input")
      }
      # Vectors (one value per point, or a parameter) have no orientation: kept as they are.
      if (is.data.frame(x)) x <- as.matrix(x)
      if (length(dim(x)) == 2L) input[k] <- list(t(x))
    }
  }
  list(input = input, ranges = ranges)
}

# What rkeops 2's operators returned when called without input: the formula, the declarations, the
# variables (in the order of `args`, with their 0-based input positions) and the sum scheme.
describe_operator <- function(shown, sum_scheme) {
  args <- shown$args
  info <- shown$info
  names <- trimws(sub("=.*$", "", args))
  k <- match(names, info$names)
  two_numbers <- grepl("\\(\\s*[0-9]+\\s*,\\s*[0-9]+\\s*\\)\\s*$", args)
  list(
    formula = shown$formula,
    args = args,
    args_info = list(
      args = gsub(" ", "", args, fixed = TRUE),
      var_name = names,
      var_type = info$categories[k],
      var_pos = k - 1L,
      var_dim = info$dims[k],
      decl = if (length(args) > 0L && all(two_numbers)) "pos_dim" else "dim"
    ),
    sum_scheme = sum_scheme
  )
}

# One line (at most 100 characters: `library(rkeops)` and a first formula print at most two such):
# axis 0 reduces over j, as in KeOps; rkeops 2's code passed it to pykeops, where 0 reduced over i.
axis_note <- "rkeops: Name_Reduction(f, 0) reduces over j (a row per i), as KeOps; rkeops 2 did the reverse"

# Once per session (unless the option verbosity is FALSE): the reduction axis of formulas follows
# the KeOps papers, not what rkeops 2's code did. A message, not a warning: it is a reminder of a
# convention, given for correct code too. Not while testthat runs tests (edition 3 prints
# messages) or knitr knits a document: test logs and reports are no place for it.
axis_notice <- function(formula) {
  if (isTRUE(.rkeops_env$axis_noticed) || !.rkeops_verbose()) return(invisible())
  if (identical(Sys.getenv("TESTTHAT"), "true") || isTRUE(getOption("knitr.in.progress"))) {
    return(invisible())
  }
  .rkeops_env$axis_noticed <- TRUE
  message(axis_note)
  invisible()
}

# KeOps' gradient forms, as an operator taking the inputs in the order of `args`:
# * Grad(reduction, v, e): the gradient in `v` of <reduction, e>, `e` declared in `args` like the
#   reduction's result (Vi for axis 0, Vj for axis 1, of its dimension);
# * GradFromPos(reduction, v, I) (KeOps' C++ form): the same, with the gradient input not declared
#   but inserted at 0-based input position I.
# The engine checks the form and plans the gradient (keops_gradient()), as for keops_grad().
grad_kernel <- function(formula, args, sum_scheme) {
  plan <- rust_result(.Call(wrap__keops_gradient, formula, args, NULL))
  shown <- list(formula = formula, args = args, info = plan[c("names", "categories", "dims")])
  plain <- plan_operator(plan, shown, sum_scheme)
  # Batches go to keops_grad()'s operator of the reduction, whose gradient input comes last.
  forward <- make_kernel(plan$forward$formula, plan$forward$args, sum_scheme)
  order <- c(seq_along(plan$names)[-plan$input], plan$input)
  batched <- NULL
  with_batches(plain, function(input, ranges, inner_dim) {
    if (!is.null(names(input)) && all(nzchar(names(input)))) input <- input[plan$names]
    if (is.null(batched)) batched <<- grad_with_batches(forward, match(plan$variable, order))
    batched(unname(input)[order], inner_dim, ranges)
  }, attr(forward, "rkeops")$info, plan$input)
}

# Checks the list of inputs (count, names, types) and converts each to a double vector or matrix.
prepare_inputs <- function(input, info) {
  n <- length(info$names)
  # The usual call, an unnamed list of double vectors and matrices, is passed on as it is: no copy,
  # no work per element beyond these tests (the engine checks the shapes).
  if (is.list(input) && !is.object(input) && length(input) == n && is.null(names(input))) {
    plain <- TRUE
    for (x in input) {
      # (n x d x 1: a batch of one member, that matrix)
      nd <- length(dim(x))
      if (!is.double(x) || is.object(x) || nd == 1L || nd > 3L || nd == 3L && dim(x)[3L] != 1L) {
        plain <- FALSE
        break
      }
    }
    if (plain) return(input)
  }
  expected <- paste(sprintf("%s = %s(%d)", info$names, info$categories, info$dims), collapse = ", ")
  if (!is.list(input) || is.data.frame(input)) {
    rkeops_abort("the operator takes one argument, a list of ", n, " inputs (", expected, ")",
                 kind = "input", arg = "input")
  }
  if (length(input) != n) {
    rkeops_abort("expected ", n, " inputs (", expected, "), got ", length(input),
                 kind = "input", arg = "input")
  }
  given <- names(input)
  if (!is.null(given) && any(nzchar(given))) {
    unknown <- setdiff(given, info$names)
    if (length(unknown) > 0L || any(!nzchar(given)) || anyDuplicated(given)) {
      bad <- if (length(unknown) > 0L) paste0("'", unknown, "'", collapse = ", ") else "some inputs"
      rkeops_abort("input names must name each variable once (", paste(info$names, collapse = ", "),
                   "): ", bad, " do not match", kind = "input", arg = "input")
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
  if (is.null(x)) {
    rkeops_abort(sprintf("input '%s' is NULL; expected %s", name, what), kind = "input", arg = name)
  }
  # A matrix kept on the GPU (keops_device()) goes to the engine as it is; the engine checks its
  # shape, precision and device.
  if (inherits(x, "keops_device_matrix")) return(x)
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!(is.numeric(x) || is.logical(x)) || is.object(x) && !is.matrix(x)) {
    rkeops_abort(sprintf("input '%s' must be %s, not %s", name, what, class(x)[1L]),
                 kind = "input", arg = name)
  }
  d <- dim(x)
  if (length(d) > 2L) {
    rkeops_abort(sprintf("input '%s' is an array with %d dimensions; expected %s", name, length(d), what),
                 kind = "input", arg = name)
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

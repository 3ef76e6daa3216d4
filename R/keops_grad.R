#' Gradient of a reduction
#'
#' `keops_grad()` turns an operator made by [keops_kernel()] into the operator
#' of its gradient with respect to one of its variables. The gradient is a
#' formula too: the engine differentiates the formula symbolically
#' (`Grad(F, v, e)` in the formula language) and compiles the result like any
#' other formula, on the CPU or the GPU.
#'
#' For `op` computing \eqn{a_i = \sum_j F(x_i, y_j, p)}{a_i = sum_j F(x_i, y_j, p)} (axis 0; axis 1 is
#' symmetric), the gradient operator takes the inputs of `op` followed by `e`,
#' a matrix shaped like `op`'s output (the gradient flowing back), and returns
#' the gradient of \eqn{\sum_i \langle a_i, e_i \rangle}{sum_i <a_i, e_i>} with respect to
#' `var`. Applying `keops_grad()` to a gradient operator gives second
#' derivatives (Hessian-vector products). The same operator is made by
#' [keops_kernel()] from KeOps' formula `Grad(reduction, var, e)`, with `e`
#' declared in its `args`; called without input, the gradient operator
#' returns that formula and its declarations.
#'
#' In rkeops 2, the gradient input had the category of `var` and dimension 1:
#' it is the same here for the usual case (the gradient in an `i`-variable of
#' a one-dimensional reduction over `j`), but in general `e` is shaped like
#' the result of `op`.
#'
#' @param op An operator made by [keops_kernel()] or by `keops_grad()`.
#'   Supported reductions: `Sum`; `LogSumExp`, `LogSumExpWeight` and
#'   `SumSoftMaxWeight` (through their forward result, numerically stable);
#'   `Min`, `Max`, `Min_ArgMin`, `Max_ArgMax`, `KMin` and `KMin_ArgKMin`,
#'   whose gradient flows to the selected `j` (found by the forward pass's
#'   indices: exact in float64, and in float32 up to 2^24 reduced rows, in
#'   float16 up to 2048); `ArgMin`, `ArgMax` and `ArgKMin` have a zero
#'   gradient. Only gradients of `Sum` reductions can be differentiated again.
#' @param var The variable: its name in `args` (`"x"`) or its 1-based
#'   position among the inputs. rkeops 2 counted positions from 0: here 0 is an
#'   error, and the first numeric position given in a session comes with a
#'   warning saying which variable it is (names are clear in both).
#' @return An operator: a function of the list of `op`'s inputs followed by
#'   `e` (`n x d` like `op`'s result; for a `KMin`, `n x K` or `n x K x d` like
#'   its values), of `inner_dim` (as for [keops_kernel()]'s operators) and of
#'   the `ranges` of a block-sparse `op` (the same object: the gradient visits
#'   the same blocks). It returns an `N x dim` matrix for a
#'   variable `Vi(dim)` (one row per `i`), an `M x dim` matrix for a variable
#'   `Vj(dim)`, and a `1 x dim` matrix for a parameter `Pm(dim)` (summed over
#'   the whole reduction).
#' @seealso [grad()] for LazyTensors.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' b <- matrix(runif(20), 20, 1)
#' gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)",
#'                       c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
#' dx <- keops_grad(gauss, "x")
#' e <- matrix(1, 10, 1)
#' g <- dx(list(x, y, b, e))  # 10 x 3: the gradient of sum(gauss(list(x, y, b))) in x
#' g[1:3, ]
#' # the same in plain R: -2 sum_j (x_i - y_j) exp(-|x_i - y_j|^2) b_j
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' W <- exp(-D2) * rep(b, each = 10)       # W[i, j] = exp(-|x_i - y_j|^2) b_j
#' all.equal(g, -2 * (x * rowSums(W) - W %*% y), tolerance = 1e-5)
#' # with respect to b (a j-variable, 20 x 1): sum_i exp(-|x_i - y_j|^2) e_i
#' all.equal(keops_grad(gauss, "b")(list(x, y, b, e)), t(exp(-D2)) %*% e,
#'           tolerance = 1e-5)
#' # the same gradient in x, written as a KeOps formula
#' gx <- keops_kernel("Grad(Sum_Reduction(Exp(-SqDist(x, y)) * b, 0), x, e)",
#'                    c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "e = Vi(1)"))
#' all.equal(gx(list(x, y, b, e)), g)
#' dx()$formula   # what dx computes, in KeOps' syntax
#' # second order: d/dx of <dx(x), u>, a Hessian-vector product (10 x 3)
#' dxx <- keops_grad(dx, "x")
#' u <- matrix(rnorm(30), 10, 3)
#' dim(dxx(list(x, y, b, e, u)))
keops_grad <- function(op, var) {
  spec <- attr(op, "rkeops")
  if (!is.function(op) || is.null(spec)) {
    rkeops_abort("'op' must be an operator made by keops_kernel() or keops_grad()",
                 kind = "input", arg = "op")
  }
  k <- grad_variable(var, spec$info)
  # rkeops 2 counted positions from 0: keops_grad(op, 1) meant its second variable. Said once, to
  # the users' calls (the package's own calls use 1-based positions knowingly).
  if (is.numeric(var) && !identical(topenv(parent.frame()), topenv())) {
    names <- spec$info$names
    meant <- if (k < length(names)) sprintf("\"%s\"", names[k + 1L]) else "no variable"
    .rkeops_warn_once("grad_position", sprintf(paste0(
      "keops_grad(): 'var' = %d is the variable at 1-based position %d, \"%s\". rkeops 2 ",
      "counted positions from 0: there, var = %d meant %s. Give the name, keops_grad(op, \"%s\"), ",
      "to be clear in both. This warning is given once per session."),
      k, k, names[k], k, meant, names[k]))
  }
  grad_with_batches(op, k)
}

# The gradient operator of `op` (made by keops_kernel()) in its variable number `k`, its gradient
# input last, for plain inputs and for batches.
grad_with_batches <- function(op, k) {
  plan <- gradient_plan(op, k)
  plain <- grad_operator(op, k, plan)
  with_batches(plain, function(input, ranges, inner_dim) {
    batch_gradient(op, k, plan, plain, input, ranges, inner_dim)
  }, attr(op, "rkeops")$info, plan$input)
}


# The engine's plan of the gradient of `op` (made by keops_kernel()) in its variable number `k`,
# the gradient input after its inputs (see keops_gradient() in src/rust/rkeops/src/gradient.rs):
# which forward reductions to run first, and the gradient's reduction of the inputs and of their
# results. Each reduction's rule is the engine's (src/rust/engine/src/reduction/gradient.rs).
gradient_plan <- function(op, k) {
  spec <- attr(op, "rkeops")
  rust_result(.Call(wrap__keops_gradient, spec$formula, spec$args, as.integer(k)))
}

# The gradient operator of `op` in its variable number `k`, following `plan`; called without
# input, it describes itself in KeOps' form, Grad(formula, v, eta).
grad_operator <- function(op, k, plan = gradient_plan(op, k)) {
  spec <- attr(op, "rkeops")
  e <- plan$input
  shown <- list(formula = sprintf("Grad(%s, %s, %s)", spec$formula, spec$info$names[k], plan$names[e]),
                args = c(spec$args, sprintf("%s = %s(%d)", plan$names[e], plan$categories[e], plan$dims[e])),
                info = plan[c("names", "categories", "dims")])
  plan_operator(plan, shown, spec$sum_scheme)
}

# The operator that computes the gradient `plan` describes: a kernel made by make_kernel() when the
# gradient is one reduction of the inputs (a Sum in a variable: it can be differentiated again),
# else a function that runs the plan's forward steps, then its reduction of the inputs and of their
# results (for a parameter, summed over the rows), or a zero matrix.
plan_operator <- function(plan, shown, sum_scheme) {
  if (plan$plain) return(make_kernel(plan$formula, plan$args, sum_scheme, shown = shown))
  if (is.null(plan$formula)) return(wrap_operator(zero_gradient(plan$zero), shown, sum_scheme))
  steps <- lapply(plan$steps, function(step) {
    if (!is.null(step$formula)) step$op <- make_kernel(step$formula, step$args, sum_scheme)
    step
  })
  grad <- make_kernel(plan$formula, plan$args, sum_scheme)
  run <- function(inputs, ranges) {
    inputs <- unname(inputs)
    saved <- lapply(steps, run_step, inputs = inputs, ranges = ranges)
    res <- grad(c(inputs, saved), ranges = ranges)
    if (plan$sum_rows) matrix(colSums(res), nrow = 1L) else res
  }
  wrap_operator(run, shown, sum_scheme, adjust = function(input) flatten_grad_input(input, plan))
}

# The result of a forward step of a gradient plan on the gradient's `inputs` (with their `ranges`:
# the forward results of the same blocks), as a matrix of the step's dimension: a reduction's values
# or 0-based indices (the selected rows), or the 0-based index of each row of an input.
run_step <- function(step, inputs, ranges) {
  if (is.null(step$formula)) {
    rows <- if (is.na(step$rows_of)) 1L else NROW(inputs[[step$rows_of]])
    return(matrix(seq_len(rows) - 1, ncol = 1L))
  }
  res <- step$op(inputs[step$inputs], ranges = ranges)
  if (step$indices) res <- res - 1
  matrix(res, ncol = step$dim)
}

# A zero gradient (that of indices) shaped like its variable: `zero$dim` columns, the rows of input
# `zero$rows_of` (one row for a parameter).
zero_gradient <- function(zero) {
  function(inputs, ranges) {
    rows <- if (is.na(zero$rows_of)) 1L else NROW(inputs[[zero$rows_of]])
    matrix(0, rows, zero$dim)
  }
}

# The gradient input of a KMin may be given like its values, an n x K x d array: made n x (K d).
flatten_grad_input <- function(input, plan) {
  e <- plan$names[plan$input]
  at <- if (!is.null(names(input)) && e %in% names(input)) e else plan$input
  x <- if (is.list(input) && length(input) == length(plan$names)) input[[at]]
  if (length(dim(x)) == 3L) input[[at]] <- matrix(x, nrow = dim(x)[1L])
  input
}

# The 1-based position of `var` (a name or a position) among the variables of `info`.
grad_variable <- function(var, info) {
  n <- length(info$names)
  if (is.character(var) && length(var) == 1L && !is.na(var)) {
    k <- match(var, info$names)
    if (is.na(k)) {
      rkeops_abort("'var' = \"", var, "\" is not a variable of the operator (",
                   paste(info$names, collapse = ", "), ")", kind = "input", arg = "var")
    }
    return(k)
  }
  if (is_whole(var, 1, n)) {
    return(as.integer(var))
  }
  if (identical(as.numeric(var), 0)) {
    rkeops_abort("'var' = 0: positions are 1-based here (rkeops 2 counted from 0); the first variable is ",
                 "var = 1, or better its name, var = \"", info$names[1L], "\"", kind = "input", arg = "var")
  }
  rkeops_abort("'var' must be the name of a variable (", paste(info$names, collapse = ", "),
               ") or its position, from 1 to ", n, kind = "input", arg = "var")
}

#' Gradient of a reduction
#'
#' `keops_grad()` turns an operator made by [keops_kernel()] into the operator of its gradient with
#' respect to one of its variables. The gradient is a formula too: the engine differentiates the
#' formula symbolically (`Grad(F, v, e)` in the formula language) and compiles the result like any
#' other formula, on the CPU or the GPU.
#'
#' For `op` computing `a_i = sum_j F(x_i, y_j, p)` (axis 0), the gradient operator takes the inputs
#' of `op` followed by `e`, an `N x d` matrix shaped like `op`'s output (the gradient flowing back),
#' and returns the gradient of `sum_i <a_i, e_i>` with respect to `var`: an `N x dim` matrix for an
#' i-variable, an `M x dim` matrix for a j-variable, a `1 x dim` matrix for a parameter (summed over
#' the whole reduction). Applying `keops_grad()` to a gradient gives second derivatives
#' (Hessian-vector products).
#'
#' @param op An operator made by [keops_kernel()] or by `keops_grad()`; so far its reduction must be
#'   `Sum_Reduction`.
#' @param var The variable: its name in `args` (`"x"`) or its 1-based position among the inputs.
#' @return An operator: a function of one argument, the list of `op`'s inputs followed by `e`.
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3); b <- matrix(runif(20), 20, 1)
#' gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)",
#'                       c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
#' dx <- keops_grad(gauss, "x")
#' e <- matrix(1, 10, 1)
#' dx(list(x, y, b, e))   # 10 x 3: the gradient of sum(gauss(list(x, y, b))) in x
keops_grad <- function(op, var) {
  spec <- attr(op, "rkeops")
  if (!is.function(op) || is.null(spec)) {
    stop("'op' must be an operator made by keops_kernel() or keops_grad()", call. = FALSE)
  }
  info <- spec$info
  if (info$reduction != "Sum") {
    stop("keops_grad() differentiates Sum_Reduction so far, not ", info$reduction, "_Reduction",
         call. = FALSE)
  }
  k <- grad_variable(var, info)
  parts <- reduction_arguments(spec$formula)
  axis <- info$axis
  # The gradient flowing back is indexed like the output; it needs a name no variable has.
  eta <- "eta"
  while (eta %in% info$names) eta <- paste0(eta, "_")
  output_category <- if (axis == 0L) "Vi" else "Vj"
  category <- info$categories[k]
  new_axis <- if (category == "Vi" || category == "Pm") 0L else 1L
  formula <- sprintf("Sum_Reduction(Grad(%s, %s, %s), %d)", parts[1L], info$names[k], eta, new_axis)
  args <- c(spec$args, sprintf("%s = %s(%d)", eta, output_category, info$dim))
  grad <- keops_kernel(formula, args, spec$sum_scheme)
  if (category != "Pm") return(grad)
  # A parameter's gradient sums over the whole reduction.
  summed <- function(input = list()) matrix(colSums(grad(input)), nrow = 1L)
  summed
}

# The 1-based position of `var` (a name or a position) among the variables of `info`.
grad_variable <- function(var, info) {
  n <- length(info$names)
  if (is.character(var) && length(var) == 1L && !is.na(var)) {
    k <- match(var, info$names)
    if (is.na(k)) {
      stop("'var' = \"", var, "\" is not a variable of the operator (",
           paste(info$names, collapse = ", "), ")", call. = FALSE)
    }
    return(k)
  }
  if (is.numeric(var) && length(var) == 1L && !is.na(var) && var == round(var) && var >= 1 && var <= n) {
    return(as.integer(var))
  }
  stop("'var' must be the name of a variable (", paste(info$names, collapse = ", "),
       ") or its position, from 1 to ", n, call. = FALSE)
}

# The top-level arguments of the reduction call `Name_Reduction(a, b, ...)`, as strings.
reduction_arguments <- function(formula) {
  chars <- strsplit(formula, "")[[1L]]
  open <- match("(", chars)
  depth <- 0L
  start <- open + 1L
  parts <- character()
  for (p in seq.int(open, length(chars))) {
    ch <- chars[p]
    if (ch == "(") depth <- depth + 1L
    if (ch == ")") depth <- depth - 1L
    if ((ch == "," && depth == 1L) || (ch == ")" && depth == 0L)) {
      parts <- c(parts, trimws(paste(chars[start:(p - 1L)], collapse = "")))
      start <- p + 1L
    }
    if (depth == 0L) break
  }
  parts
}

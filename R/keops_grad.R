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
  eta <- "eta"
  while (eta %in% spec$info$names) eta <- paste0(eta, "_")
  plain <- grad_operator(op, k, eta)
  with_batches(plain, function(input, ranges, inner_dim) {
    batch_gradient(op, k, eta, plain, input, ranges, inner_dim)
  }, spec$info, length(spec$info$names) + 1L)
}

# The dimension of the gradient input of a reduction described by `info`: that of its result
# (K values per component for the KMin reductions).
grad_input_dim <- function(info) {
  if (info$reduction %in% c("KMin", "KMinArgKMin")) info$k * info$dim else info$dim
}

# The gradient operator of `op` (made by keops_kernel()) in its variable number `k`, with gradient
# input named `eta` (a name no variable of `op` has): a kernel made by make_kernel() when the
# gradient is one Sum reduction of `op`'s inputs and `eta` (Sum in a variable), else a function
# that computes forward passes first.
grad_operator <- function(op, k, eta) {
  spec <- attr(op, "rkeops")
  info <- spec$info
  parts <- split_call(spec$formula)$args   # the reduction's arguments, as strings
  f <- parts[1L]
  v <- info$names[k]
  category <- info$categories[k]
  n_inputs <- length(info$names)
  # Names for the new inputs that no variable has.
  fresh <- function(base) {
    while (base %in% c(info$names, eta)) base <- paste0(base, "_")
    base
  }
  out_category <- if (info$axis == 0L) "Vi" else "Vj"
  declare <- function(name, dim, category = out_category) sprintf("%s = %s(%d)", name, category, dim)
  eta_dim <- grad_input_dim(info)
  # What the operator describes when called without input: the gradient in KeOps' own form.
  shown <- list(formula = sprintf("Grad(%s, %s, %s)", spec$formula, v, eta),
                args = c(spec$args, declare(eta, eta_dim)),
                info = list(names = c(info$names, eta), categories = c(info$categories, out_category),
                            dims = c(info$dims, eta_dim)))
  # Each reduction's gradient is a sum over the reduced index of Grad terms, possibly using the
  # forward results (`extra`: name -> function of the inputs and ranges computing it, with its
  # dimension).
  extra <- list()
  g_formula <- NULL
  if (info$reduction == "Sum") {
    terms <- sprintf("Grad(%s, %s, %s)", f, v, eta)
  } else if (info$reduction %in% c("LogSumExp", "SumSoftMaxWeight", "LogSumExpWeight")) {
    lse <- fresh("lse")
    # The weights: Name_Reduction(f, g, axis), or KeOps' LogSumExp_Reduction(f, axis, g).
    g_formula <- if (length(parts) < 3L) NULL else
      if (startsWith(trimws(spec$formula), "LogSumExp_Reduction")) parts[3L] else parts[2L]
    lse_op <- keops_kernel(sprintf("LogSumExp_Reduction(%s, %d)", f, info$axis), spec$args, spec$sum_scheme)
    softmax <- sprintf("Exp(%s - %s)", f, lse)
    extra[[lse]] <- list(run = lse_op, dim = 1L)
    if (is.null(g_formula)) {
      terms <- sprintf("Grad(%s, %s, %s * %s)", f, v, eta, softmax)
    } else {
      out <- fresh("out")
      extra[[out]] <- list(run = op, dim = info$dim)
      if (info$reduction == "SumSoftMaxWeight") {
        terms <- c(sprintf("Grad(%s, %s, %s * %s)", g_formula, v, eta, softmax),
                   sprintf("Grad(%s, %s, %s * (%s | %s - %s))", f, v, softmax, eta, g_formula, out))
      } else {
        # log sum_j exp(f) g_c: weights exp(f - out_c) per component.
        w <- sprintf("Exp(%s - %s)", f, out)
        terms <- c(sprintf("Grad(%s, %s, Sum(%s * %s * %s))", f, v, eta, w, g_formula),
                   sprintf("Grad(%s, %s, %s * %s)", g_formula, v, eta, w))
      }
    }
  } else if (info$reduction %in% c("Min", "Max", "MinArgMin", "MaxArgMax", "KMin", "KMinArgKMin")) {
    # The gradient flows to the selected j: the forward pass's indices `sel` (0-based, N x (K d),
    # column k + K c) are compared with the index of each reduced row, `jj` = 0, 1, ... Integers
    # compare exactly on every backend (comparing values would depend on how each kernel rounds).
    K <- info$k
    selection <- switch(info$reduction, Min = , MinArgMin = "ArgMin", Max = , MaxArgMax = "ArgMax", "ArgKMin")
    index_formula <- if (selection == "ArgKMin") {
      sprintf("ArgKMin_Reduction(%s, %d, %d)", f, K, info$axis)
    } else {
      sprintf("%s_Reduction(%s, %d)", selection, f, info$axis)
    }
    index_op <- keops_kernel(index_formula, spec$args)
    sel <- fresh("sel")
    jj <- fresh("jj")
    reduced_category <- if (info$axis == 0L) "Vj" else "Vi"
    reduced <- match(reduced_category, info$categories)
    extra[[sel]] <- list(run = function(x, ranges) index_op(x, ranges = ranges) - 1, dim = K * info$dim)
    extra[[jj]] <- list(run = function(x, ranges) {
      rows <- if (is.na(reduced)) 1L else NROW(x[[reduced]])
      seq_len(rows) - 1
    }, dim = 1L, category = reduced_category)
    components <- vapply(seq_len(info$dim) - 1L, function(c) {
      at <- seq_len(K) - 1L + K * c
      paste(sprintf("Elem(%s, %d) * Equal(%s, Elem(%s, %d))", eta, at, jj, sel, at), collapse = " + ")
    }, "")
    weight <- Reduce(function(a, b) sprintf("Concat(%s, %s)", a, b), components)
    terms <- sprintf("Grad(%s, %s, %s)", f, v, weight)
  } else if (info$reduction %in% c("ArgMin", "ArgMax", "ArgKMin")) {
    # Indices do not move with the inputs: a zero gradient of the variable's shape.
    dim <- info$dims[k]
    return(wrap_operator(function(inputs, ranges) {
      rows <- if (category == "Pm") 1L else NROW(inputs[[k]])
      matrix(0, rows, dim)
    }, shown, spec$sum_scheme))
  } else {
    rkeops_abort("keops_grad() does not differentiate ", info$reduction, "_Reduction of a ",
                 info$dim, "-dimensional formula yet", kind = "formula")
  }
  new_axis <- if (category == "Vi" || category == "Pm") 0L else 1L
  formula <- sprintf("Sum_Reduction(%s, %d)", paste(terms, collapse = " + "), new_axis)
  args <- c(spec$args, declare(eta, eta_dim),
            vapply(names(extra), function(n) {
              declare(n, extra[[n]]$dim, if (is.null(extra[[n]]$category)) out_category else extra[[n]]$category)
            }, ""))
  if (length(extra) == 0L && category != "Pm") {
    return(make_kernel(formula, args, spec$sum_scheme, shown = shown))
  }
  grad <- make_kernel(formula, args, spec$sum_scheme)
  n_inputs <- length(info$names)
  run <- function(inputs, ranges) {
    inputs <- unname(inputs)
    forward <- inputs[seq_len(n_inputs)]
    saved <- lapply(extra, function(x) matrix(x$run(forward, ranges = ranges), ncol = x$dim))
    res <- grad(c(inputs, unname(saved)), ranges = ranges)
    # A parameter's gradient sums over the whole reduction.
    if (category == "Pm") matrix(colSums(res), nrow = 1L) else res
  }
  # The gradient input of a KMin may be given like its values, an n x K x d array.
  flatten_eta <- function(input) {
    at <- if (!is.null(names(input)) && eta %in% names(input)) eta else n_inputs + 1L
    e <- if (is.list(input) && length(input) == n_inputs + 1L) input[[at]]
    if (length(dim(e)) == 3L) input[[at]] <- matrix(e, nrow = dim(e)[1L])
    input
  }
  wrap_operator(run, shown, spec$sum_scheme, adjust = flatten_eta)
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

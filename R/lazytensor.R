# LazyTensor objects: symbolic matrices built with ordinary R operators, turned into KeOps formula
# strings and run through keops_kernel() at reduction time.
#
# A LazyTensor is a list with
#   formula  the formula text, where variable k (0-based) is written as the placeholder "@k@";
#   vars     the list of the data of its variables (matrices for Vi / Vj, or a plain vector for a
#            one-column Vi / Vj, vectors for Pm): the user's objects themselves, not copies, when
#            they are already double;
#   cats     their categories ("Vi", "Vj" or "Pm");
#   dims     their dimensions (columns for Vi / Vj, lengths for Pm);
#   args     their declarations, "V0 = Vi(3)", ... (names V0, V1, ... in the order of vars);
#   dimres   the dimension of the formula.
# Combining two LazyTensors merges their variables (the same data in the same category is one
# variable, compared with identical(), which returns at once for the same object) and renumbers
# the placeholders of the second one. Iterative algorithms build their expressions again at every
# iteration, so this costs microseconds and nothing that grows with the data.

#' Symbolic matrices: LazyTensor objects
#'
#' `Vi()`, `Vj()` and `Pm()` wrap R data into `LazyTensor` objects: `Vi(x)`
#' stands for the variable \eqn{x_i} (one row of `x` per index `i`), `Vj(y)`
#' for \eqn{y_j} (one row per `j`) and `Pm(p)` for a parameter shared by all
#' `(i, j)`. Combining them with R operators and functions (`+`, `*`, `exp()`,
#' [sqdist()], ...: see [Ops.LazyTensor], [Math.LazyTensor],
#' [lazytensor_elementwise], [lazytensor_norms], [lazytensor_components],
#' [lazytensor_products]) builds a symbolic `N x M` matrix whose entries are
#' `d`-dimensional vectors \eqn{F(x_i, y_j, p)}; it is never stored. A
#' reduction ([sum.LazyTensor()], [argmin()], [Kmin()], [logsumexp()], `%*%`,
#' [solve.LazyTensor()], ...: see [lazytensor_reductions]) writes the formula
#' and runs it with the engine of [keops_kernel()]. Complex data gives a
#' [ComplexLazyTensor].
#'
#' Numbers mix with LazyTensors as constants, and numeric vectors of length
#' more than 1 as parameters (`Vi(x) + c(1, 2, 3)` is `Vi(x) + Pm(c(1, 2, 3))`).
#' Two variables made from identical data in the same category are one
#' variable of the formula.
#'
#' @param x The data: a numeric (or logical) matrix with one row per index and
#'   one column per dimension, or a vector (a matrix with one column), for
#'   `Vi()` and `Vj()`; a numeric vector for `Pm()` (a parameter of dimension
#'   `length(x)`; a matrix is taken as `as.vector(x)`). A data frame is taken
#'   as `as.matrix(x)`; complex data gives a [ComplexLazyTensor]. For
#'   `LazyTensor()`, data as above (a matrix needs `index`), or a
#'   `LazyTensor`, returned unchanged. A batch of problems is an
#'   `n x d x B` array or a list of `B` matrices (for `Pm()`, a `1 x d x B`
#'   array or a list of vectors): reductions then return one result per
#'   member (see "Batches" in [keops_kernel()]).
#' @param index For `LazyTensor()`: `"i"` (the same as `Vi(x)`), `"j"`
#'   (`Vj(x)`) or `NA` (the default: a parameter, `Pm(x)`, for a vector or a
#'   number; a matrix without `index` is an error, as in rkeops 2).
#' @param is_complex `TRUE` to make a [ComplexLazyTensor] of real data (its
#'   imaginary part is 0), as in rkeops 2; complex data gives one anyway.
#'   `LazyTensor(x, is_complex = TRUE)` of a real LazyTensor `x` is
#'   [real2complex(x)][real2complex].
#' @return A `LazyTensor` of dimension `ncol(x)` (`Vi()`, `Vj()`) or
#'   `length(x)` (`Pm()`): a list with `formula` (the formula, with the
#'   variables written `@k@`; [print()][print.LazyTensor] names them `V0`,
#'   `V1`, ...), `vars` (the data of the variables, not copied when it is
#'   already a double matrix or vector), `cats` (their categories), `dims`
#'   (their dimensions), `args` (their declarations, such as `"V0 = Vi(3)"`)
#'   and `dimres` (the dimension `d` of the formula; for a ComplexLazyTensor,
#'   its complex dimension, the formula holding `2d` reals). [dim()][dim.LazyTensor]
#'   gives `c(N, M, d)`.
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(runif(30), 10, 3)
#' y <- matrix(runif(60), 20, 3)
#' K <- exp(-sqdist(Vi(x), Vj(y)))   # the 10 x 20 Gaussian kernel matrix, symbolic
#' K
#' dim(K)
#' a <- sum(K, index = "j")          # its row sums, a 10 x 1 matrix
#' # the same with the dense matrix in plain R
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' all.equal(a, matrix(rowSums(exp(-D2))), tolerance = 1e-5)
#' # a parameter: the scale of the kernel
#' s <- Pm(0.5)
#' all.equal(sum(exp(-s * sqdist(Vi(x), Vj(y))), index = "i"),
#'           matrix(colSums(exp(-0.5 * D2))), tolerance = 1e-5)
#' LazyTensor(x, index = "i")        # the same as Vi(x)
#' # complex numbers with zero imaginary parts: x_i * (1 + 2i) summed over j
#' z <- LazyTensor(x, index = "i", is_complex = TRUE)
#' z$dimres                          # the complex dimension, 3
#' all.equal(sum(z * (1 + 2i) + 0 * Vj(y), index = "j"), 20 * x * (1 + 2i),
#'           tolerance = 1e-5)
LazyTensor <- function(x, index = NA, is_complex = FALSE) {
  is_complex <- complex_flag(is_complex, "LazyTensor")
  if (is.LazyTensor(x)) {
    if (is_complex && !is.ComplexLazyTensor(x)) return(real2complex(x))
    return(x)
  }
  if (length(index) != 1L || !(is.na(index) || index %in% c("i", "j"))) {
    rkeops_abort("LazyTensor(): 'index' must be \"i\", \"j\" or NA (a parameter)",
                 kind = "input", arg = "index")
  }
  label <- deparse1(substitute(x))
  if (is.na(index) && (length(dim(x)) == 2L || is.data.frame(x))) {
    # rkeops 2 stops here too: a matrix is one row per i or per j, never a parameter.
    rkeops_abort(sprintf(paste("LazyTensor(): '%s' is a matrix, so 'index' must say how it is indexed:",
                               "\"i\" (one row per i, as Vi(x)) or \"j\" (as Vj(x)); for a parameter,",
                               "give a vector: Pm(as.vector(x))"), label), kind = "input", arg = "index")
  }
  cat <- if (is.na(index)) "Pm" else if (index == "i") "Vi" else "Vj"
  lazy_variable(x, cat, label, is_complex)
}

#' @rdname LazyTensor
#' @export
Vi <- function(x, is_complex = FALSE) {
  lazy_variable(x, "Vi", deparse1(substitute(x)), complex_flag(is_complex, "Vi"))
}

#' @rdname LazyTensor
#' @export
Vj <- function(x, is_complex = FALSE) {
  lazy_variable(x, "Vj", deparse1(substitute(x)), complex_flag(is_complex, "Vj"))
}

#' @rdname LazyTensor
#' @export
Pm <- function(x, is_complex = FALSE) {
  lazy_variable(x, "Pm", deparse1(substitute(x)), complex_flag(is_complex, "Pm"))
}

complex_flag <- function(is_complex, fun) check_flag(is_complex, "is_complex", fun)

lazy_variable <- function(x, cat, label, is_complex = FALSE) {
  if (is.LazyTensor(x)) rkeops_abort("'", label, "' is already a LazyTensor", kind = "input", arg = label)
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.na(batch_size(x))) return(lazy_batch_variable(x, cat, label, is_complex))   # see batch.R
  if (is_complex && (is.numeric(x) || is.logical(x))) storage.mode(x) <- "complex"  # keeps dim
  if (is.complex(x)) return(complex_variable(x, cat, label))   # see lazytensor-complex.R
  if (inherits(x, "keops_device_matrix")) {                     # kept on the GPU, see device.R
    if (is_complex) {
      rkeops_abort(sprintf("%s(): 'is_complex = TRUE' needs data in R memory, not a device matrix", cat),
                   kind = "input", arg = "is_complex")
    }
    dim <- if (cat == "Pm") prod(dim(x)) else dim(x)[2L]
    return(new_lazy("@0@", list(x), cat, dim, dims = dim))
  }
  d <- dim(x)
  if (!(is.numeric(x) || is.logical(x)) || length(x) == 0L || length(d) > 2L) {
    what <- if (cat == "Pm") "a non-empty numeric vector" else "a numeric matrix or vector"
    rkeops_abort(sprintf("%s(): '%s' must be %s", cat, label, what), kind = "input", arg = label)
  }
  # The data is kept as it is whenever the engine can read it (a double vector or matrix): any
  # change here (a dim attribute, other attributes removed) would copy all of it at every call.
  if (!is.double(x)) storage.mode(x) <- "double"
  if (cat == "Pm") {
    if (!is.null(d) || !is.null(attributes(x))) x <- as.vector(x)
    dim <- length(x)
  } else {
    if (length(d) == 1L) d <- NULL              # a one-dimensional array: a vector
    if (is.null(d)) {
      if (!is.null(attributes(x))) x <- as.vector(x)
      dim <- 1L                                  # a vector is one column, without copying it
    } else {
      if (d[1L] == 0L || d[2L] == 0L) {
        rkeops_abort(sprintf("%s(): '%s' has no rows or no columns", cat, label), kind = "input", arg = label)
      }
      # Only dim and dimnames may stay (the engine reads neither names nor classes).
      if (is.object(x) || length(attributes(x)) > 1L &&
          !all(names(attributes(x)) %in% c("dim", "dimnames"))) {
        attributes(x) <- list(dim = d)
      }
      dim <- d[2L]
    }
  }
  new_lazy("@0@", list(x), cat, dim, dims = dim)
}

new_lazy <- function(formula, vars, cats, dimres, dims = NULL) {
  if (is.null(dims)) dims <- vapply(seq_along(vars), function(k) lazy_var_dim(vars[[k]], cats[k]), 1L)
  args <- if (length(vars)) sprintf("V%d = %s(%d)", seq_along(vars) - 1L, cats, dims) else character(0)
  x <- list(formula = formula, vars = vars, cats = cats, dims = dims, args = args,
            dimres = as.integer(dimres))
  class(x) <- "LazyTensor"
  x
}

# The dimension of a variable: columns for Vi and Vj (a vector is one column), length for Pm.
lazy_var_dim <- function(v, cat) {
  if (inherits(v, "keops_device_matrix")) return(if (cat == "Pm") prod(dim(v)) else dim(v)[2L])
  if (!is.na(batch_size(v))) return(batch_var_dim(v, cat))
  if (cat == "Pm") length(v) else if (is.matrix(v)) ncol(v) else 1L
}

# A constant written in the formula language: integers as integers, other numbers with enough
# digits to round-trip; negative ones in parentheses.
lazy_number <- function(x) {
  if (!is.numeric(x) && !is.logical(x) || length(x) != 1L || !is.finite(x)) {
    rkeops_abort("a number mixed with a LazyTensor must be a single finite number", kind = "input")
  }
  x <- as.double(x)
  a <- abs(x)
  txt <- if (a == round(a) && a < 1e15) {
    sprintf("%.0f", a)
  } else {
    s <- sprintf("%.15g", a)
    if (as.double(s) != a) s <- sprintf("%.17g", a)
    s
  }
  if (x < 0) paste0("(-", txt, ")") else txt
}

# Anything that can take part in a formula: a LazyTensor, a number (a constant) or a numeric
# vector of length > 1 (a parameter).
as_lazy <- function(x, label = "argument") {
  if (is.LazyTensor(x)) return(x)
  if ((is.numeric(x) || is.logical(x)) && is.null(dim(x)) && length(x) == 1L) {
    return(new_lazy(lazy_number(x), list(), character(0), 1L))
  }
  if ((is.numeric(x) || is.logical(x)) && is.null(dim(x)) && length(x) > 1L) {
    return(lazy_variable(x, "Pm", label))
  }
  rkeops_abort(sprintf("'%s' must be a LazyTensor or a number, not %s", label, class(x)[1L]),
               kind = "input", arg = label)
}

# Requires a LazyTensor, naming the argument in the error.
need_lazy <- function(x, label, fun) {
  if (!is.LazyTensor(x)) {
    rkeops_abort(sprintf("%s(): '%s' must be a LazyTensor (made with Vi(), Vj(), Pm() or LazyTensor()), not %s",
                         fun, label, class(x)[1L]), kind = "input", arg = label)
  }
  x
}

# Renumbers the placeholders of `formula`: @k@ becomes @map[k + 1]@. Split at the "@"s, the
# numbers are every second piece: a few microseconds (regmatches() took tens).
remap_placeholders <- function(formula, map) {
  if (identical(map, seq_along(map) - 1L)) return(formula)
  p <- strsplit(formula, "@", fixed = TRUE)[[1L]]
  if (endsWith(formula, "@")) p <- c(p, "")   # strsplit() drops a last empty piece
  at <- seq.int(2L, length(p), by = 2L)
  p[at] <- map[as.integer(p[at]) + 1L]
  paste(p, collapse = "@")
}

# Merges the variables of several LazyTensors; returns the merged lists and the formulas of the
# inputs renumbered against them.
lazy_merge <- function(xs) {
  first <- xs[[1L]]
  if (length(xs) == 1L) {
    return(list(vars = first$vars, cats = first$cats, dims = first$dims, formulas = first$formula))
  }
  vars <- first$vars
  cats <- first$cats
  dims <- first$dims
  formulas <- character(length(xs))
  formulas[1L] <- first$formula   # the first one keeps its numbers
  for (n in seq_along(xs)[-1L]) {
    x <- xs[[n]]
    map <- integer(length(x$vars))
    for (k in seq_along(x$vars)) {
      hit <- 0L
      for (q in seq_along(vars)) {
        if (cats[q] == x$cats[k] && dims[q] == x$dims[k] && identical(vars[[q]], x$vars[[k]])) {
          hit <- q
          break
        }
      }
      if (hit == 0L) {
        vars[[length(vars) + 1L]] <- x$vars[[k]]
        cats <- c(cats, x$cats[k])
        dims <- c(dims, x$dims[k])
        hit <- length(vars)
      }
      map[k] <- hit - 1L
    }
    formulas[n] <- remap_placeholders(x$formula, map)
  }
  list(vars = vars, cats = cats, dims = dims, formulas = formulas)
}

# Builds a LazyTensor from a template over the formulas of its inputs: `fmt` is a function of the
# renumbered formula strings returning the new formula text.
lazy_combine <- function(xs, fmt, dimres) {
  m <- lazy_merge(xs)
  formula <- switch(length(xs), fmt(m$formulas[1L]), fmt(m$formulas[1L], m$formulas[2L]),
                    do.call(fmt, as.list(m$formulas)))
  new_lazy(formula, m$vars, m$cats, dimres, dims = m$dims)
}

# The formula with the placeholders written as V0, V1, ...
lazy_formula_text <- function(x) gsub("@([0-9]+)@", "V\\1", x$formula)

#' @rdname is.LazyParameter
#' @export
is.LazyTensor <- function(x) inherits(x, "LazyTensor")

#' Tests on LazyTensor objects
#'
#' `is.LazyTensor()` tells whether `x` is a [LazyTensor] (a
#' [ComplexLazyTensor] included); `is.LazyVector()` whether it is a
#' LazyTensor indexed by neither `i` nor `j` (made of parameters and constants
#' only, such as `Pm(p)`), and `is.LazyMatrix()` whether it is indexed by `i`
#' or `j` (it has a variable made by `Vi()` or `Vj()`). `is.LazyParameter()`
#' tells whether `x` is a real LazyTensor indexed by neither `i` nor `j` of
#' dimension 1 (a single number), and `is.ComplexLazyParameter()` the same for
#' a ComplexLazyTensor (a single complex number). `is.int()` tells whether `x`
#' is a single whole number (an R integer or a double without fractional
#' part, within the range of R integers).
#'
#' Unlike rkeops 2, these tests return `FALSE` for an `x` that is not a
#' LazyTensor rather than stopping, and `is.LazyVector()` is `FALSE` for a
#' LazyTensor that mixes parameters with `Vi()` or `Vj()` variables.
#' @param x Any R object.
#' @return `TRUE` or `FALSE`.
#' @export
#' @examples
#' x <- matrix(1:6, 3)
#' is.LazyTensor(Vi(x))                # TRUE
#' is.LazyTensor(x)                    # FALSE
#' is.LazyParameter(Pm(0.5))           # TRUE
#' is.LazyParameter(Pm(c(1, 2, 3)))    # FALSE: dimension 3
#' is.LazyParameter(Pm(2 + 1i))        # FALSE: complex
#' is.ComplexLazyParameter(Pm(2 + 1i)) # TRUE
#' is.LazyVector(Pm(c(1, 2, 3)))       # TRUE
#' is.LazyVector(Vj(1:3))              # FALSE: indexed by j
#' is.LazyMatrix(Vj(1:3) * Pm(2))      # TRUE
#' is.int(3)                           # TRUE
#' is.int(3.5)                         # FALSE
#' is.int(c(1, 2))                     # FALSE: not a single number
is.LazyParameter <- function(x) {
  is.LazyVector(x) && !is.ComplexLazyTensor(x) && x$dimres == 1L
}

#' @rdname is.LazyParameter
#' @export
is.ComplexLazyParameter <- function(x) {
  is.LazyVector(x) && is.ComplexLazyTensor(x) && x$dimres == 1L
}

#' @rdname is.LazyParameter
#' @export
is.LazyVector <- function(x) is.LazyTensor(x) && all(x$cats == "Pm")

#' @rdname is.LazyParameter
#' @export
is.LazyMatrix <- function(x) is.LazyTensor(x) && any(x$cats %in% c("Vi", "Vj"))

#' @rdname is.LazyParameter
#' @export
is.int <- function(x) {
  (is.integer(x) || is.double(x)) && length(x) == 1L && is.finite(x) &&
    x == round(x) && abs(x) <= .Machine$integer.max
}

# The variables of a LazyTensor with their sizes, for print().
print_lazy_variables <- function(x) {
  if (length(x$vars)) {
    sizes <- vapply(seq_along(x$vars), function(k) {
      v <- x$vars[[k]]
      if (!is.na(batch_size(v))) sprintf("batch of %d members", batch_size(v))
      else if (x$cats[k] == "Pm") sprintf("vector of length %d", length(v))
      else sprintf("%d x %d matrix", NROW(v), NCOL(v))
    }, "")
    cat("variables:\n")
    cat(paste0("  ", x$args, "  (", sizes, ")", collapse = "\n"), "\n", sep = "")
  } else {
    cat("variables: none\n")
  }
}

#' Print a LazyTensor
#'
#' Prints the dimension of a [LazyTensor], its formula (variables named `V0`,
#' `V1`, ... as in its declarations) and its variables with their sizes.
#' @param x A LazyTensor.
#' @param ... Unused.
#' @return `x`, invisibly.
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3)
#' print(exp(-sqdist(Vi(x), Vj(x)) / Pm(2)))
print.LazyTensor <- function(x, ...) {
  cat("LazyTensor of dimension ", x$dimres, "\n", sep = "")
  cat("formula: ", lazy_formula_text(x), "\n", sep = "")
  print_lazy_variables(x)
  invisible(x)
}

#' Dimensions of a LazyTensor
#'
#' A LazyTensor is a symbolic `N x M` matrix of `d`-dimensional values.
#' @param x A [LazyTensor].
#' @return An integer vector `c(N, M, d)`: the number of rows of its
#'   i-variables (`NA` when it has none), of its j-variables (`NA` when it has
#'   none) and the dimension of its values. `nrow()` and `ncol()` give `N` and
#'   `M`. For a batch (see [keops_kernel()]), `N` and `M` are those of each
#'   member (`NA` when the members differ).
#' @export
#' @examples
#' x <- matrix(runif(30), 10, 3); y <- matrix(runif(60), 20, 3)
#' dim(sqdist(Vi(x), Vj(y)))   # 10 20 1
#' dim(Vi(x) - Vj(y))          # 10 20 3
#' dim(Pm(c(1, 2)))            # NA NA 2
dim.LazyTensor <- function(x) {
  rows <- function(category) {
    k <- match(category, x$cats)
    if (is.na(k)) NA_integer_ else lazy_var_rows(x$vars[[k]])
  }
  c(rows("Vi"), rows("Vj"), as.integer(x$dimres))
}


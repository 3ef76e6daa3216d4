# Batches: many independent problems of one formula in one call.
#
# A batched input is a 3-d array (`n x d x B`: member b is x[, , b]) or a list of B matrices
# (members may then have different numbers of rows); for a parameter, a list of B vectors or a
# `1 x d x B` array. Any other input, and a batch of one member, is shared by every member
# (broadcast, as in KeOps). The members are laid end to end and reduced with block-diagonal ranges
# (member b's rows only against member b's rows of the other index), so the whole batch is one
# engine call and one kernel launch, on the CPU and on the GPU. A shared variable is repeated for
# each member; a batched parameter becomes a variable of the output's index (one copy of p_b per
# row of member b), which is the same formula with another declaration.

# The operators of the formulas whose batched parameters moved to another index, by declarations,
# and the last plan of a batch (batch_plan()).
.batch_ops <- new.env(parent = emptyenv())

# Whether `input` (the list given to an operator) holds a batched input.
is_batch_input <- function(input) batch_kind(input) > 0L

# 0 when `input` holds no batch; 1 when its batches are arrays of one member (n x d x 1) in an
# unnamed list of doubles, which the engine takes as they are (the call of one problem); 2 for any
# other batch.
batch_kind <- function(input) {
  if (!is.list(input) || is.object(input)) return(0L)
  kind <- 0L
  for (x in input) {
    if (is.list(x) && !is.object(x)) return(2L)
    d <- dim(x)
    if (length(d) == 3L) {
      if (d[3L] != 1L || !is.double(x) || is.object(x)) return(2L)
      kind <- 1L
    }
  }
  if (kind == 1L && !is.null(names(input))) 2L else kind
}

# The number of members of a batched input, NA for an input shared by every member.
batch_size <- function(x) {
  if (is.list(x) && !is.object(x)) return(length(x))
  if (length(dim(x)) == 3L) return(dim(x)[3L])
  NA_integer_
}

# A batched input stacked for the engine: list(data, rows), `data` the members' rows end to end
# (for a parameter, one row per member) and `rows` the rows of each member; `label` names the input
# in errors, `name` is its variable's.
batch_stack <- function(x, category, dim, label, name) {
  if (!is.list(x)) {
    d <- dim(x)
    if (!(is.numeric(x) || is.logical(x)) || is.object(x)) {
      rkeops_abort(label, ": expected a numeric array (n x d x B) or a list of matrices",
                   kind = "input", arg = name)
    }
    if (category == "Pm") {
      if (d[1L] * d[2L] != dim) {
        rkeops_abort(label, ": a batch of parameters Pm(", dim, ") needs a 1 x ", dim, " x B array, not ",
                     paste(d, collapse = " x "), kind = "input", arg = name)
      }
      return(list(data = t(matrix(as.double(x), dim, d[3L])), rows = rep(1L, d[3L])))
    }
    if (d[2L] != dim || d[1L] == 0L) {
      rkeops_abort(label, ", member 1: expected a matrix with ", dim, " column", if (dim > 1L) "s",
                   " and at least one row, not ", d[1L], " x ", d[2L], kind = "input", arg = name)
    }
    # (one copy: each allocation of a large vector costs page faults)
    data <- if (dim == 1L) x else aperm(x, c(1L, 3L, 2L))
    dim(data) <- c(d[1L] * d[3L], dim)
    if (!is.double(data)) storage.mode(data) <- "double"
    return(list(data = data, rows = rep(d[1L], d[3L])))
  }
  members <- lapply(seq_along(x), function(b) {
    m <- x[[b]]
    if (is.data.frame(m)) m <- as.matrix(m)
    if (!(is.numeric(m) || is.logical(m)) || is.object(m) || length(dim(m)) > 2L) {
      rkeops_abort(label, ", member ", b, ": expected a numeric ", if (category == "Pm") "vector" else "matrix",
                   kind = "input", arg = name)
    }
    if (category == "Pm") {
      if (length(m) != dim) {
        rkeops_abort(label, ", member ", b, ": a parameter Pm(", dim, ") needs ", dim, " values, not ",
                     length(m), kind = "input", arg = name)
      }
      return(matrix(as.double(m), 1L, dim))
    }
    if (!is.matrix(m)) m <- matrix(m, ncol = 1L)   # a vector: one value per point
    if (ncol(m) != dim || nrow(m) == 0L) {
      rkeops_abort(label, ", member ", b, ": expected a matrix with ", dim, " column", if (dim > 1L) "s",
                   " and at least one row, not ", nrow(m), " x ", ncol(m), kind = "input", arg = name)
    }
    m
  })
  data <- do.call(rbind, members)
  storage.mode(data) <- "double"
  list(data = data, rows = vapply(members, nrow, 1L))
}

# The inputs of one engine call for the batch `input` of an operator described by `info` (names,
# categories, dims; the output of its reduction indexed by i for axis 0, by j for axis 1):
# list(inputs, categories (batched parameters moved to the output's index), ranges (block-diagonal),
# B, rows = list(Vi = member sizes, Vj = member sizes), batched (per input), as_list (whether the
# results are lists of members rather than arrays)).
batch_layout <- function(input, info, axis) {
  n <- length(info$names)
  cats <- info$categories
  labels <- sprintf("input %d ('%s')", seq_len(n), info$names)
  if (length(input) != n) {
    rkeops_abort("expected ", n, " inputs (", paste(info$names, collapse = ", "), "), got ", length(input),
                 kind = "input", arg = "input")
  }
  if (!is.null(names(input)) && all(nzchar(names(input)))) {
    if (!setequal(names(input), info$names)) {
      rkeops_abort("input names must name each variable once (", paste(info$names, collapse = ", "), ")",
                   kind = "input", arg = "input")
    }
    input <- input[info$names]
  }
  for (k in seq_len(n)) {
    if (inherits(input[[k]], "keops_device_matrix")) {
      rkeops_abort(labels[k], " is kept on the GPU (keops_device()): a batched call takes its inputs from ",
                   "R memory", kind = "input", arg = info$names[k])
    }
  }
  sizes <- vapply(input, batch_size, 1L)
  as_list <- any(vapply(input, function(x) is.list(x) && !is.object(x), NA))
  # Each member checked and the members laid end to end; the engine then checks that they make a
  # batch (counts of members, rows on each index) and lays it out.
  stacks <- vector("list", n)
  for (k in which(sizes > 0L)) {
    stacks[[k]] <- batch_stack(input[[k]], cats[k], info$dims[k], labels[k], info$names[k])
  }
  given <- lapply(seq_len(n), function(k) if (is.na(sizes[k])) NROW(input[[k]]) else as.integer(stacks[[k]]$rows))
  plan <- batch_plan(info$names, cats, sizes, given)
  B <- plan$B
  batched <- plan$batched
  rows <- plan$rows
  # A batch of one member is shared: its only member is the input.
  for (k in which(!is.na(sizes) & !batched)) {
    input[[k]] <- if (cats[k] == "Pm") as.vector(stacks[[k]]$data) else stacks[[k]]$data
  }
  out_side <- if (axis == 0L) "Vi" else "Vj"
  inputs <- vector("list", n)
  new_cats <- cats
  for (k in seq_len(n)) {
    x <- input[[k]]
    if (batched[k]) {
      inputs[[k]] <- stacks[[k]]$data
      if (cats[k] == "Pm") {
        # p_b repeated on every row of member b, on the output's side.
        new_cats[k] <- out_side
        inputs[[k]] <- repeat_rows(inputs[[k]], rows[[out_side]])
      }
    } else if (cats[k] == "Pm") {
      inputs[k] <- list(x)
    } else {
      if (is.data.frame(x)) x <- as.matrix(x)
      x <- if (is.matrix(x)) x else matrix(x, ncol = 1L)
      if (!is.double(x)) storage.mode(x) <- "double"
      inputs[[k]] <- repeat_rows(x, rep.int(1L, nrow(x)), B)
    }
  }
  list(inputs = inputs, categories = new_cats, ranges = plan$ranges, B = B, rows = rows,
       starts = plan$starts, batched = batched, as_list = as_list)
}

# The engine's layout of a batch (keops_batch_plan()) of inputs with these names, categories,
# numbers of members (NA: not a batch) and rows. The last one is kept: an iterative algorithm asks
# again and again with the same sizes, and the call costs 50 us for 256 members, 0.4 ms for 10^4
# (one batch_layout() of 256 members of 100 points: 0.37 ms with the plan kept).
batch_plan <- function(names, categories, sizes, rows) {
  key <- list(names, categories, sizes, rows)
  last <- .batch_ops$last_plan
  if (!is.null(last) && identical(last$key, key)) return(last$plan)
  plan <- rust_result(.Call(wrap__keops_batch_plan, names, categories, sizes, rows))
  .batch_ops$last_plan <- list(key = key, plan = plan)
  plan
}

# The rows of the matrix `x` (doubles), row r repeated `times[r]` times, the whole `each` times:
# indexing the data as a vector, which R does several times faster than x[rows, , drop = FALSE].
repeat_rows <- function(x, times, each = 1L) {
  n <- NROW(x)
  d <- length(x) %/% n
  # (each allocation of a large vector costs page faults: as few as possible)
  if (d == 1L && all(times == 1L)) {
    out <- rep.int(as.vector(x), each)
  } else {
    rows <- rep.int(rep.int(seq_len(n), times), each)
    out <- x[if (d == 1L) rows else rows + rep(n * (seq_len(d) - 1L), each = length(rows))]
  }
  dim(out) <- c(length(out) %/% d, d)
  out
}

# The declarations of the variables of `info` with the categories `categories`, in input order.
batch_args <- function(info, categories) {
  sprintf("%s = %s(%d)", info$names, categories, info$dims)
}


batch_operator <- function(formula, args, sum_scheme) {
  memoised(.batch_ops, c(formula, sum_scheme, args), function() make_kernel(formula, args, sum_scheme))
}

# `res` (an engine result with the members' rows end to end) cut into the members' matrices
# (`rows` rows each).
batch_split <- function(res, rows) {
  ends <- cumsum(rows)
  lapply(seq_along(rows), function(b) {
    at <- seq.int(ends[b] - rows[b] + 1L, length.out = rows[b])
    if (length(dim(res)) == 3L) res[at, , , drop = FALSE] else res[at, , drop = FALSE]
  })
}

# `res` (the members' rows end to end, `rows` each) as the caller gave the batch: a list of
# members, or an `n x d x B` array (`n x K x d x B` for a K-selection of dimension d > 1) when
# every input was an array (then the members have the same number of rows); `offsets` (one per
# member) subtracted from indices.
batch_value <- function(res, rows, as_list, offsets = NULL) {
  if (as_list) {
    parts <- batch_split(res, rows)
    if (!is.null(offsets)) parts <- lapply(seq_along(parts), function(b) parts[[b]] - offsets[b])
    return(parts)
  }
  d <- dim(res)
  if (is.null(d)) d <- c(length(res), 1L)
  B <- length(rows)
  if (prod(d[-1L]) != 1 || !is.null(offsets)) {
    # (one pass in the engine: R would copy the whole result three times)
    res <- rust_result(.Call(wrap__keops_unstack, res, rows[1L], B, if (is.null(offsets)) integer(0) else offsets))
  }
  dim(res) <- c(rows[1L], d[-1L], B)
  res
}

# The result of the reduction of `formula` (described by `info`) over the batch `input` of more than
# one member (a batch of one is the plain call: see make_kernel()).
batch_forward <- function(formula, sum_scheme, info, input, ranges, inner_dim) {
  batch_unsupported(ranges, inner_dim)
  layout <- batch_layout(input, info, info$axis)
  op <- batch_operator(formula, batch_args(info, layout$categories), sum_scheme)
  reduced <- layout$rows[[if (info$axis == 0L) "Vj" else "Vi"]]
  if (info$reduction %in% c("KMin", "ArgKMin", "KMinArgKMin") && info$k > min(reduced)) {
    b <- which.min(reduced)
    rkeops_abort("K = ", info$k, " is larger than the number of ", if (info$axis == 0L) "j" else "i",
                 "-rows reduced over in member ", b, " (", reduced[b], ")", kind = "input")
  }
  out_rows <- layout$rows[[if (info$axis == 0L) "Vi" else "Vj"]]
  # Indices count from the start of each member's reduced rows.
  offsets <- layout$starts[[if (info$axis == 0L) "Vj" else "Vi"]]
  if (!layout$as_list && is.null(.rkeops_env$future)) {
    # Members of equal size: the engine writes the n x ... x B arrays (one pass over the results).
    spec <- attr(op, "rkeops")
    inputs <- prepare_inputs(layout$inputs, spec$info)
    return(engine_run(spec$formula, spec$args, sum_scheme, inputs, layout$ranges, members = offsets))
  }
  res <- op(layout$inputs, ranges = layout$ranges)
  if (is.list(res)) {
    return(list(values = batch_value(res$values, out_rows, layout$as_list),
                indices = batch_value(res$indices, out_rows, layout$as_list, offsets)))
  }
  index_only <- info$reduction %in% c("ArgMin", "ArgMax", "ArgKMin")
  batch_value(res, out_rows, layout$as_list, if (index_only) offsets)
}

# The gradient of `op` (its forward operator) in its variable number `k` over the batch `input`
# (the inputs of `op`, then the gradient input `e`, batched like the result, or shared); `plan`
# is the engine's plan of that gradient and `plain` its operator for inputs that are not batches,
# used when no parameter moves.
batch_gradient <- function(op, k, plan, plain, input, ranges, inner_dim) {
  batch_unsupported(ranges, inner_dim)
  spec <- attr(op, "rkeops")
  info <- spec$info
  n <- length(info$names)
  # The gradient input of a KMin may be given like its values: n x K x d per member (in a list),
  # or one n x K x d array shared by every member.
  e <- input[[length(input)]]
  if (length(input) == n + 1L && is.list(e) && !is.object(e)) {
    input[[length(input)]] <- lapply(e, function(m) if (length(dim(m)) == 3L) matrix(m, nrow = dim(m)[1L]) else m)
  } else if (length(input) == n + 1L && values_shaped(e, info)) {
    input[[length(input)]] <- matrix(e, nrow = dim(e)[1L])
  }
  info_g <- plan[c("names", "categories", "dims")]
  # (a batch of one member is shared: the gradient of the only member, not an array)
  one <- batch_of_one(input, info_g)
  if (!is.null(one)) return(plain(one$input))
  layout <- batch_layout(input, info_g, info$axis)
  forward_cats <- layout$categories[seq_len(n)]
  grad_op <- if (identical(forward_cats, info$categories)) plain else
    grad_operator(batch_operator(spec$formula, batch_args(info, forward_cats), spec$sum_scheme), k)
  res <- grad_op(layout$inputs, ranges = layout$ranges)
  category <- forward_cats[k]
  if (category == "Pm") return(res)                    # a shared parameter: summed over all pairs
  rows <- layout$rows[[category]]
  member <- rep(seq_len(layout$B), rows)
  if (info$categories[k] == "Pm") {
    # A batched parameter: its gradient sums over each member's rows.
    return(batch_value(unname(rowsum(res, member, reorder = FALSE)), rep(1L, layout$B), layout$as_list))
  }
  if (!layout$batched[k]) {
    # A variable shared by every member: the sum of its gradients in each member.
    return(unname(rowsum(res, sequence(rows), reorder = FALSE)))
  }
  batch_value(res, rows, layout$as_list)
}

# When no input has more than one member: list(input = the inputs as the call of one problem,
# as_list = whether a list was given), else NULL. The common case of code written for batches run
# on one problem costs a call of the plain operator, without ranges or stacking.
batch_of_one <- function(input, info) {
  sizes <- vapply(input, batch_size, 1L)
  if (any(sizes != 1L, na.rm = TRUE) || length(input) != length(info$names)) return(NULL)
  if (!is.null(names(input)) && all(nzchar(names(input)))) {
    if (!setequal(names(input), info$names)) return(NULL)   # (batch_layout() says what is wrong)
    input <- input[info$names]
  }
  as_list <- FALSE
  for (k in which(!is.na(sizes))) {
    x <- input[[k]]
    if (is.list(x)) {
      as_list <- TRUE
      x <- x[[1L]]
      if (is.data.frame(x)) x <- as.matrix(x)
    } else {
      dim(x) <- if (info$categories[k] == "Pm") NULL else dim(x)[1:2]
    }
    input[k] <- list(x)
  }
  list(input = input, as_list = as_list)
}

# The result `res` of the call of one problem (batch_of_one()) as that of a batch of one member:
# a list of one matrix, or an array whose last dimension is 1 (both for the values and indices of
# the selections that return the two).
batch_of_one_value <- function(res, as_list) {
  wrap <- function(r) {
    if (as_list) return(list(r))
    dim(r) <- c(dim(r), 1L)   # (in place: the result is referenced nowhere else)
    r
  }
  if (is.list(res)) lapply(res, wrap) else wrap(res)
}

# Whether `e` is the gradient input of the reduction `info` (a KMin of dimension d > 1) given
# like its values, one `n x K x d` array, rather than a batch (`n x (K d) x B`).
values_shaped <- function(e, info) {
  d <- dim(e)
  length(d) == 3L && info$reduction %in% c("KMin", "KMinArgKMin") && d[2L] == info$k &&
    d[3L] > 1L && info$k * d[3L] == info$grad_dim
}

# What batches do not combine with yet: errors that say so.
batch_unsupported <- function(ranges, inner_dim) {
  # (the second argument may hold the ranges, as input_layout() explains)
  if (is.list(inner_dim)) ranges <- inner_dim
  if (is.null(inner_dim) || is.list(inner_dim)) inner_dim <- "col"
  if (!is.null(ranges)) {
    rkeops_abort("'ranges' cannot be combined with batched inputs yet: the batch is itself a set of ",
                 "blocks; call each member with its ranges", kind = "input", arg = "ranges")
  }
  if (!identical(inner_dim, "col")) {
    rkeops_abort("inner_dim = \"row\" cannot be combined with batched inputs: give each member with one ",
                 "row per point", kind = "input", arg = "inner_dim")
  }
}

# `plain` (a gradient operator) extended to batches: batched inputs go to `batched(input, ranges,
# inner_dim)`, anything else to `plain`, whose description (attribute "rkeops") is kept. The
# gradient input (at position `at`) of a KMin of dimension d > 1 may be given like the values,
# `n x K x d`: that 3-d array is one problem (a batch of them is `n x (K d) x B`).
with_batches <- function(plain, batched, info, at) {
  op <- function(input = NULL, inner_dim = "col", ranges = NULL) {
    if (!is.null(input) && is_batch_input(input)) {
      e <- if (length(input) >= at) input[[at]]
      others <- if (length(input) >= at) input[-at] else input
      if (!values_shaped(e, info) || is_batch_input(others)) return(batched(input, ranges, inner_dim))
    }
    plain(input, inner_dim, ranges)
  }
  attr(op, "rkeops") <- attr(plain, "rkeops")
  op
}

# ---- batched LazyTensor variables -----------------------------------------------------------------

# Vi(x), Vj(x) or Pm(x) of a batch `x` (see above): kept as given, checked when reduced.
lazy_batch_variable <- function(x, cat, label, is_complex) {
  if (is_complex || (is.list(x) && any(vapply(x, is.complex, NA))) || is.complex(x)) {
    rkeops_abort(sprintf("%s(): '%s' is a batch: batches of complex numbers are not supported", cat, label),
                 kind = "input", arg = label)
  }
  dim <- batch_var_dim(x, cat)
  if (is.na(dim) || dim < 1L) {
    rkeops_abort(sprintf("%s(): '%s' must be a batch of numeric %s (a list, or an array whose third index is the member)",
                         cat, label, if (cat == "Pm") "vectors" else "matrices"), kind = "input", arg = label)
  }
  new_lazy("@0@", list(x), cat, dim, dims = dim)
}

# The dimension of a batched variable: that of its first member.
batch_var_dim <- function(x, cat) {
  if (!is.list(x)) return(if (cat == "Pm") as.integer(prod(dim(x)[1:2])) else dim(x)[2L])
  m <- x[[1L]]
  if (!(is.numeric(m) || is.logical(m))) return(NA_integer_)
  if (cat == "Pm") length(m) else NCOL(m)
}

# The rows of a variable, of each member for a batch (NA when they differ).
lazy_var_rows <- function(v) {
  if (is.na(batch_size(v))) return(NROW(v))
  if (!is.list(v)) return(dim(v)[1L])
  r <- unique(vapply(v, NROW, 1L))
  if (length(r) == 1L) r else NA_integer_
}

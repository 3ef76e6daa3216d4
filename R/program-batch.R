# Batches in programs: B independent problems of one program in one engine call.
#
# A batched input (an `n x d x B` array or a list of B matrices; for a parameter a `1 x d x B`
# array or a list of B vectors) gives each member its own value; any other input is shared. As for
# the batched calls of an operator (R/batch.R), the members of each buffer are laid end to end and
# every reduction gets block-diagonal ranges (member b's rows only against member b's rows), built
# from the members' sizes, which the steps propagate: a step's result has, in each member, the rows
# of that member's variables of the result's index. A shared matrix is copied to every member (an
# iterated value that is not a batch is the start of every member, as keops_iterate() does); a
# shared parameter stays one value. A batched parameter is read, by each step, as a variable of one
# index (p_b repeated on the rows of member b: the same value in every pair of member b), in a
# buffer of its own per index and sizes. Indices (ArgMin, ArgKMin) count within each member: a map
# step added after the reduction subtracts the member's first row. A reduction to one row (no
# variable of the result's index) sums over every member: one value for the whole batch, which a
# stopping rule, a trace or the outputs may read, but not a later step.

# The batched run of a program: NULL when `input` holds no batch, else list(settings (the program's
# settings, steps rewritten for the stacked buffers), input (stacked), rows (per buffer, the rows
# of each member; NULL for a value shared by the batch), as_list, B).
program_batch <- function(settings, input, schedule) {
  sizes <- vapply(input, function(x) if (inherits(x, "keops_device_matrix")) NA_integer_ else batch_size(x), 1L)
  if (all(is.na(sizes))) return(NULL)
  B <- max(sizes, na.rm = TRUE)
  first <- names(sizes)[which(sizes == B)[1L]]
  for (name in names(input)) {
    if (inherits(input[[name]], "keops_device_matrix")) {
      rkeops_abort("input '", name, "' is kept on the GPU (keops_device()): a batched program takes its ",
                   "inputs from R memory", kind = "input", arg = name)
    }
    if (!is.na(sizes[[name]]) && sizes[[name]] != B && sizes[[name]] != 1L) {
      rkeops_abort("input '", name, "' is a batch of ", sizes[[name]], " members, but '", first, "' has ", B,
                   " (a batch of one member is shared)", kind = "input", arg = name)
    }
  }
  for (name in intersect(names(schedule), names(sizes)[!is.na(sizes)])) {
    rkeops_abort("schedule: '", name, "' is a batch in 'input': a schedule is shared by every member",
                 kind = "input", arg = "schedule")
  }
  specs <- settings$specs
  # How each buffer is read (its categories, and its dimension) by the steps.
  read_as <- list()
  dims <- list()
  for (spec in specs) {
    for (k in seq_along(spec$reads)) {
      b <- spec$reads[k]
      read_as[[b]] <- union(read_as[[b]], spec$info$categories[k])
      if (is.null(dims[[b]])) dims[[b]] <- spec$info$dims[k]
    }
  }
  for (name in names(schedule)) {
    if (any(read_as[[name]] != "Pm")) {
      rkeops_abort("schedule: '", name, "' is read as a variable (Vi or Vj): in a batched program a schedule ",
                   "gives parameters (Pm), shared by every member", kind = "input", arg = "schedule")
    }
  }
  as_list <- any(vapply(input, function(x) is.list(x) && !is.object(x), NA))
  rows <- list()      # the rows of each member of a buffer laid end to end
  params <- list()    # the batched parameters: a matrix of B rows each
  whole <- character(0)   # buffers of one value for the whole batch (reductions to one row)
  for (name in names(input)) {
    x <- input[[name]]
    cats <- read_as[[name]]
    is_param <- "Pm" %in% cats
    if (is_param && length(cats) > 1L && !is.na(sizes[[name]])) {
      rkeops_abort("input '", name, "' is read as a parameter (Pm) and as a variable: in a batch it must be ",
                   "one or the other", kind = "input", arg = name)
    }
    if (is.na(sizes[[name]])) {
      # a shared matrix read as a variable: one copy per member (one that no step reads is copied
      # when a step writes it, unless that step's result is one value for the whole batch)
      if (is_param || is.null(x) || is.null(cats)) next
      rows[[name]] <- program_batch_copies(input, name, B)
      input[[name]] <- attr(rows[[name]], "data")
      attr(rows[[name]], "data") <- NULL
      next
    }
    dim <- if (!is.null(dims[[name]])) dims[[name]] else batch_var_dim(x, if (is_param) "Pm" else "Vi")
    stack <- batch_stack(x, if (is_param) "Pm" else "Vi", dim, sprintf("input '%s'", name), name)
    if (sizes[[name]] == 1L && B > 1L) {
      # a batch of one member is shared by every member
      if (is_param) {
        input[[name]] <- as.vector(stack$data)
        next
      }
      stack$data <- repeat_rows(stack$data, rep.int(1L, nrow(stack$data)), B)
      stack$rows <- rep.int(stack$rows, B)
    }
    if (is_param) {
      params[[name]] <- stack$data
      input[[name]] <- NULL
    } else {
      input[[name]] <- stack$data
      rows[[name]] <- stack$rows
    }
  }
  # The steps, in order: the sizes of their results, their declarations and ranges.
  names_out <- character(0)
  specs_out <- list()
  ranges_out <- list()
  spread <- list()    # the buffers of batched parameters repeated on the rows of an index
  for (s in seq_along(specs)) {
    spec <- specs[[s]]
    info <- spec$info
    step <- settings$names[s]
    label <- sprintf("steps$%s", step)
    if (info$reduction %in% c("MinArgMin", "MaxArgMax", "KMinArgKMin")) {
      rkeops_abort(label, ": a ", info$reduction, " reduction (values and indices in one buffer) cannot run ",
                   "in a batched program: use two steps, one for the values (Min, Max, KMin) and one for ",
                   "the indices (ArgMin, ArgMax, ArgKMin)", kind = "input", arg = "steps")
    }
    if (step %in% names(params)) {
      rkeops_abort(label, " writes '", step, "', a batch of parameters: in a batched program a step's result ",
                   "has one value per row, or one for the whole batch", kind = "input", arg = "steps")
    }
    side_rows <- list(Vi = NULL, Vj = NULL)
    for (k in seq_along(spec$reads)) {
      b <- spec$reads[k]
      cat <- info$categories[k]
      if (b %in% whole) {
        rkeops_abort(label, " reads '", b, "', the result of a reduction to one row: in a batched program it ",
                     "sums over every member (one value for the whole batch), for a stopping rule, a trace ",
                     "or the outputs, not for a later step", kind = "input", arg = "steps")
      }
      if (cat == "Pm") next
      r <- rows[[b]]
      if (is.null(r)) {
        rkeops_abort("input: no value for '", b, "', read by step ", s, " ('", step, "'), and no step computes ",
                     "it before", kind = "input", arg = "input")
      }
      if (!is.null(side_rows[[cat]]) && !identical(side_rows[[cat]], r)) {
        rkeops_abort(label, ": its ", cat, " variables have members of different sizes ('", b, "': ",
                     program_batch_sizes(r), "; others: ", program_batch_sizes(side_rows[[cat]]), ")",
                     kind = "input", arg = "input")
      }
      side_rows[[cat]] <- r
    }
    out_side <- if (info$axis == 0L) "Vi" else "Vj"
    red_side <- if (info$axis == 0L) "Vj" else "Vi"
    # A batched parameter moves to the result's index (or, for a reduction to one row, the other).
    cats <- info$categories
    to <- if (!is.null(side_rows[[out_side]])) out_side else red_side
    for (k in which(cats == "Pm" & spec$reads %in% names(params))) {
      b <- spec$reads[k]
      if (is.null(side_rows[[to]])) {
        rkeops_abort(label, ": the batched parameter '", b, "' needs a variable of either index",
                     kind = "input", arg = "steps")
      }
      key <- paste(b, to, paste(side_rows[[to]], collapse = ","))
      if (is.null(spread[[key]])) {
        spread[[key]] <- sprintf("%s (batch, %s of step %d)", b, to, s)
        input[[spread[[key]]]] <- repeat_rows(params[[b]], side_rows[[to]])
        rows[[spread[[key]]]] <- side_rows[[to]]
      }
      spec$reads[k] <- spread[[key]]
      cats[k] <- to
    }
    spec$args <- batch_args(info, cats)
    ranges <- NULL
    if (!is.null(side_rows$Vi) && !is.null(side_rows$Vj)) {
      ranges <- program_batch_ranges(side_rows$Vi, side_rows$Vj, settings$ranges[[s]], label)
    } else if (!is.null(settings$ranges[[s]])) {
      ranges <- settings$ranges[[s]]    # (a map: the engine says what is wrong with its ranges)
    }
    names_out <- c(names_out, step)
    specs_out <- c(specs_out, list(spec))
    ranges_out <- c(ranges_out, list(ranges))
    out_rows <- side_rows[[out_side]]
    if (is.null(out_rows)) {
      whole <- union(whole, step)
      rows[step] <- list(NULL)
      next
    }
    if (is.null(rows[[step]]) && !is.null(input[[step]])) {
      rows[[step]] <- program_batch_copies(input, step, B)
      input[[step]] <- attr(rows[[step]], "data")
      attr(rows[[step]], "data") <- NULL
    }
    if (!is.null(rows[[step]]) && !identical(rows[[step]], out_rows)) {
      rkeops_abort(label, ": its result has members of ", program_batch_sizes(out_rows), " rows, but buffer '",
                   step, "' has members of ", program_batch_sizes(rows[[step]]), kind = "input", arg = "input")
    }
    rows[[step]] <- out_rows
    whole <- setdiff(whole, step)
    if (info$reduction %in% c("ArgMin", "ArgMax", "ArgKMin") && !is.null(side_rows[[red_side]])) {
      # indices from the start of each member: minus the rows of the members before
      first_row <- sprintf("%s (batch, first rows of step %d)", step, s)
      starts <- c(0, cumsum(side_rows[[red_side]]))[seq_len(B)]
      input[[first_row]] <- matrix(rep.int(starts, out_rows), ncol = 1L)
      rows[[first_row]] <- out_rows
      width <- info$dim * (if (info$reduction == "ArgKMin") info$k else 1L)
      names_out <- c(names_out, step)
      specs_out <- c(specs_out, list(list(
        formula = sprintf("Sum_Reduction(a - o, %d)", info$axis),
        args = c(sprintf("a = %s(%d)", out_side, width), sprintf("o = %s(1)", out_side)),
        sum_scheme = "auto", reads = c(step, first_row),
        info = list(names = c("a", "o"), categories = c(out_side, out_side), dims = c(width, 1L),
                    reduction = "Sum", axis = info$axis, dim = width))))
      ranges_out <- c(ranges_out, list(NULL))
    }
  }
  settings$names <- names_out
  settings$specs <- specs_out
  settings$ranges <- ranges_out
  list(settings = settings, input = input, rows = rows, params = params, as_list = as_list, B = B)
}

# The rows of each member of the shared matrix input[[name]] copied to every member of a batch of
# `B`, with the copies (attribute "data").
program_batch_copies <- function(input, name, B) {
  x <- program_value(input[[name]], name)
  structure(rep.int(nrow(x), B), data = repeat_rows(x, rep.int(1L, nrow(x)), B))
}

# Sizes of members, for errors: "3, 4, 5" (the first ones).
program_batch_sizes <- function(r) {
  paste0(paste(utils::head(r, 4L), collapse = ", "), if (length(r) > 4L) ", ...")
}

# The block-diagonal ranges of the members of `ri` rows of i and `rj` rows of j (each member's
# rows against its own), in the engine's form; a step's own ranges `own` (for one member, every
# member of the same sizes) are repeated in each member's block.
program_batch_ranges <- function(ri, rj, own, label) {
  B <- length(ri)
  si <- c(0L, cumsum(ri))
  sj <- c(0L, cumsum(rj))
  # (the engine's ranges are matrices of one row per block, column-major: first rows, then ends)
  pairs <- function(starts) as.integer(c(starts[-length(starts)], starts[-1L]))
  if (is.null(own)) {
    ranges <- list(ranges_i = pairs(si), slices_i = seq_len(B), redranges_j = pairs(sj),
                   ranges_j = pairs(sj), slices_j = seq_len(B), redranges_i = pairs(si))
    return(structure(ranges, class = "keops_engine_ranges"))
  }
  if (any(ri != ri[1L]) || any(rj != rj[1L])) {
    rkeops_abort(label, ": a step's own ranges apply to every member of a batch, so the members must have ",
                 "the same sizes (here ", program_batch_sizes(ri), " rows of i and ", program_batch_sizes(rj),
                 " of j)", kind = "input", arg = "ranges")
  }
  if (max(c(own$ranges_i, own$redranges_i, 0L)) > ri[1L] || max(c(own$ranges_j, own$redranges_j, 0L)) > rj[1L]) {
    rkeops_abort(label, ": its ranges reach past the ", ri[1L], " x ", rj[1L], " rows of a member of the batch",
                 kind = "input", arg = "ranges")
  }
  # member b: rows shifted by b's first rows, slices by the blocks of the members before
  shift <- function(x, by) {
    m <- matrix(x, ncol = 2L)
    as.integer(m[rep(seq_len(nrow(m)), B), , drop = FALSE] + rep(by, each = nrow(m)))
  }
  shift_slices <- function(x, blocks) as.integer(x + rep((seq_len(B) - 1L) * (length(blocks) %/% 2L), each = length(x)))
  ranges <- list(ranges_i = shift(own$ranges_i, si[-(B + 1L)]),
                 slices_i = shift_slices(own$slices_i, own$redranges_j),
                 redranges_j = shift(own$redranges_j, sj[-(B + 1L)]),
                 ranges_j = shift(own$ranges_j, sj[-(B + 1L)]),
                 slices_j = shift_slices(own$slices_j, own$redranges_i),
                 redranges_i = shift(own$redranges_i, si[-(B + 1L)]))
  structure(ranges, class = "keops_engine_ranges")
}

# The outputs `out` (and their trace) of the batched run `batch` (program_batch()) as members:
# arrays n x d x B, or lists of B matrices when a batch was given as a list (or members differ in
# size); a buffer of one value for the whole batch as it is.
program_batch_outputs <- function(out, batch) {
  trace <- attr(out, "trace")
  iterations <- attr(out, "iterations")
  members <- function(name, x) {
    r <- batch$rows[[name]]
    if (is.null(r)) return(x)
    batch_value(x, r, batch$as_list || any(r != r[1L]))
  }
  res <- lapply(names(out), function(name) members(name, out[[name]]))
  names(res) <- names(out)
  trace <- lapply(names(trace), function(name) {
    r <- batch$rows[[name]]
    t <- trace[[name]]
    if (is.null(r)) return(t)
    # row t holds the stacked buffer's values in R's order: column by column
    N <- sum(r)
    d <- ncol(t) %/% N
    ends <- cumsum(r)
    parts <- lapply(seq_along(r), function(b) {
      at <- seq.int(ends[b] - r[b] + 1L, length.out = r[b])
      t[, as.vector(outer(at, N * (seq_len(d) - 1L), "+")), drop = FALSE]
    })
    if (batch$as_list || any(r != r[1L])) return(parts)
    array(unlist(parts, use.names = FALSE), c(nrow(t), r[1L] * d, length(r)))
  })
  names(trace) <- names(attr(out, "trace"))
  attr(res, "iterations") <- iterations
  attr(res, "trace") <- trace
  res
}

# The weights of the gradient of buffer `of` in the batched run `batch`: a batch like the buffer, or
# one member's weights shared by every member (NULL: ones).
program_batch_weight <- function(weight, batch, of) {
  r <- batch$rows[[of]]
  if (is.null(weight) || is.null(r)) return(weight)
  if (is.na(batch_size(weight))) {
    w <- as.double(weight)
    if (length(w) %% r[1L] != 0L || any(r != r[1L])) {
      rkeops_abort("weight: one member's weights (shared) must have the shape of each member of '", of, "'",
                   kind = "input", arg = "weight")
    }
    w <- matrix(w, r[1L])
    return(as.double(repeat_rows(w, rep.int(1L, nrow(w)), length(r))))
  }
  first <- if (is.list(weight)) weight[[1L]] else weight[, , 1L, drop = TRUE]
  stack <- batch_stack(weight, "Vi", NCOL(first), "weight", "weight")
  if (!identical(stack$rows, r)) {
    rkeops_abort("weight: members of ", program_batch_sizes(stack$rows), " rows, but '", of, "' has members of ",
                 program_batch_sizes(r), kind = "input", arg = "weight")
  }
  as.double(stack$data)
}

# The gradient `g` (the engine's values, for the stacked buffer) in the input `name` of the batched
# run `batch`, given as `x`: per member for a batch, summed over the members for a shared matrix
# (copied to every member: the gradient of the sum over the members).
program_batch_gradient <- function(g, x, name, batch) {
  r <- batch$rows[[name]]
  if (is.null(r)) return(if (is.null(dim(x))) g else array(g, dim(x)))
  g <- matrix(g, sum(r))
  if (!is.na(batch_size(x)) && batch_size(x) == batch$B) return(batch_value(g, r, batch$as_list || any(r != r[1L])))
  g <- unname(rowsum(g, rep.int(seq_len(r[1L]), length(r)), reorder = FALSE))
  if (is.null(dim(x)) || is.list(x)) as.vector(g) else array(g, dim(x))
}

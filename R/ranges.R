# The `ranges` argument of the reductions (block-sparse reductions): from the R description
# (a "keops_ranges" object, see ?keops_ranges, or a list with the same six elements, 1-based and
# inclusive) to what the engine takes: six integer vectors, the range matrices as their starts
# (0-based) then their ends (exclusive). The engine checks that the ranges are sorted, disjoint and
# within the data, and names the element that is not.

ranges_parts <- c("ranges_i", "slices_i", "redranges_j", "ranges_j", "slices_j", "redranges_i")

ranges_for_engine <- function(ranges) {
  if (is.null(ranges) || inherits(ranges, "keops_engine_ranges")) return(ranges)
  if (!is.list(ranges) || !all(ranges_parts %in% names(ranges))) {
    rkeops_abort("'ranges' must be made by from_matrix() (or be a list with elements ",
                 paste(ranges_parts, collapse = ", "), ")", kind = "input", arg = "ranges")
  }
  whole <- function(x, name) {
    # (from_matrix() and from_pairs() give integers: only NA to look for)
    if (is.integer(x) && !anyNA(x)) return(x)
    if (!is.numeric(x) || anyNA(x) || any(x != round(x)) || any(abs(x) > .Machine$integer.max)) {
      rkeops_abort("'ranges$", name, "' must hold whole numbers, without NA", kind = "input", arg = "ranges")
    }
    as.integer(x)
  }
  parts <- lapply(ranges_parts, function(name) {
    x <- ranges[[name]]
    if (startsWith(name, "slices")) {
      if (!is.null(dim(x)) && length(dim(x)) != 1L) {
        rkeops_abort("'ranges$", name, "' must be a vector (one value per block)",
                     kind = "input", arg = "ranges")
      }
      return(whole(x, name))
    }
    if (!is.matrix(x) || ncol(x) != 2L) {
      rkeops_abort("'ranges$", name, "' must be a matrix with 2 columns (first and last index, 1-based)",
                   kind = "input", arg = "ranges")
    }
    x <- whole(x, name)
    # the first rows less 1, the last rows as they are (one subtraction: 4 x faster than taking the
    # two columns apart and joining them, 2 ms for 10^6 ranges)
    n <- length(x) %/% 2L
    y <- x - rep.int(c(1L, 0L), c(n, n))
    attributes(y) <- NULL
    y
  })
  names(parts) <- ranges_parts
  # (the form the engine reads, and gives in its plans: see keops_batch_plan(), keops_future_blocks())
  structure(parts, class = "keops_engine_ranges")
}

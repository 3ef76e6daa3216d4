#' Keep a matrix on the GPU between reductions
#'
#' Iterative algorithms (EM, K-means, Sinkhorn, conjugate gradients) pass the
#' same large matrices to every reduction. `keops_device()` copies a matrix to
#' the GPU once, in the precision in force ([get_rkeops_options()]), and returns
#' an object that can be passed wherever the operators of [keops_kernel()] (and
#' their gradients) take a matrix: it is then neither converted nor copied
#' again.
#'
#' The object is a copy made when `keops_device()` is called, not a view of
#' `x`: changing `x` afterwards does not change it (call `keops_device()` again
#' with the new values). Its memory is freed when R collects the object, or at
#' once with `keops_device_free()`; using it afterwards is an error. It is used
#' only by computations in the same precision (and, on the GPU, on the same
#' device); on the CPU backend its values are read back from the GPU.
#'
#' @param x A numeric matrix (or vector, one column); for
#'   `keops_device_free()` and the methods, an object made by `keops_device()`.
#' @param ... Not used.
#' @return `keops_device()`: an object of class `keops_device_matrix`, with
#'   `dim()`, `nrow()` and `ncol()` as the matrix's, `as.matrix()` to read it
#'   back. `keops_device_free()`: `x`, invisibly, now empty.
#' @seealso [rkeops_release_gpu_memory()] for the buffers the engine keeps
#'   between calls.
#' @export
#' @examples
#' if (isTRUE(rkeops:::gpu_status()$available)) {
#'   x <- matrix(runif(3e5), ncol = 3); y <- matrix(runif(3e3), ncol = 3)
#'   xd <- keops_device(x)          # copied to the GPU once
#'   nearest <- keops_kernel("ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
#'   for (k in 1:5) idx <- nearest(list(xd, y))   # x is not copied again
#'   all(idx == nearest(list(x, y)))
#'   keops_device_free(xd)
#' }
keops_device <- function(x) {
  if (is.data.frame(x)) x <- as.matrix(x)
  if (!is.numeric(x) && !is.logical(x) || length(dim(x)) > 2L) {
    rkeops_abort("keops_device(): 'x' must be a numeric matrix or vector", kind = "input", arg = "x")
  }
  if (storage.mode(x) != "double") storage.mode(x) <- "double"
  opts <- get_rkeops_options()
  if (identical(opts$backend, "CPU")) {
    rkeops_abort("keops_device(): the CPU backend is in use (rkeops_use_gpu() to use a GPU)", kind = "gpu")
  }
  # (with several GPUs, the first: loops and reductions with device matrices run there)
  device <- opts$device[1L]
  status <- gpu_status(device)
  if (!isTRUE(status$available)) {
    rkeops_abort("keops_device(): GPU ", device, " cannot be used: ", status$message, kind = "gpu")
  }
  ptr <- rust_result(.Call(wrap__keops_device_put, x, opts$precision, device))
  d <- if (is.matrix(x)) dim(x) else c(length(x), 1L)
  structure(ptr, class = "keops_device_matrix", keops_dim = as.integer(d),
            keops_where = sprintf("GPU %d in %s", device, opts$precision))
}

#' @rdname keops_device
#' @export
keops_device_free <- function(x) {
  if (!inherits(x, "keops_device_matrix")) {
    rkeops_abort("keops_device_free(): 'x' must be made by keops_device()", kind = "input", arg = "x")
  }
  rust_result(.Call(wrap__keops_device_free, x))
  invisible(x)
}

#' @rdname keops_device
#' @export
dim.keops_device_matrix <- function(x) attr(x, "keops_dim")

#' @rdname keops_device
#' @export
as.matrix.keops_device_matrix <- function(x, ...) {
  res <- rust_result(.Call(wrap__keops_device_get, x))
  matrix(res$values, res$nrow, res$ncol)
}

#' @rdname keops_device
#' @export
print.keops_device_matrix <- function(x, ...) {
  d <- dim(x)
  cat(sprintf("<keops_device_matrix: %d x %d, kept on %s>\n", d[1L], d[2L], attr(x, "keops_where")))
  invisible(x)
}

#' Give back the GPU memory kept between calls
#'
#' To make repeated calls cheap, the engine keeps the device and page-locked
#' host buffers of its last largest call. `rkeops_release_gpu_memory()` gives
#' them back (the next call allocates them again). Matrices kept with
#' [keops_device()] are not affected.
#'
#' @param device The GPUs (0-based), by default those of [get_rkeops_options()].
#' @return `TRUE`, invisibly.
#' @export
rkeops_release_gpu_memory <- function(device = get_rkeops_options()$device) {
  for (d in unique(as.integer(device))) rust_result(.Call(wrap__gpu_release_memory, d))
  invisible(TRUE)
}

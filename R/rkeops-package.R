#' rkeops: kernel operations on symbolic matrices
#'
#' rkeops computes reductions (sums, minima, arg-minima, K-nearest
#' neighbours, log-sum-exp, ...) of very large *symbolic matrices*
#' \eqn{M_{ij} = F(x_i, y_j, p)}, where the formula \eqn{F} is written in the
#' KeOps formula language, e.g.
#' `"Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)"`. The \eqn{N \times M} matrix is
#' never stored: the Rust engine streams tiles of it through fast memory and
#' reduces them on the fly, on an NVIDIA GPU (CUDA source generated per formula,
#' compiled at run time by NVRTC and cached) or on all the cores of the CPU, so
#' that kernel sums or nearest-neighbour queries over millions of points fit in
#' memory.
#'
#' The main entry point is [keops_kernel()]. Computation options (backend,
#' precision, number of threads) are set with [set_rkeops_options()] and the
#' helpers [rkeops_use_cpu()], [rkeops_use_gpu()], [rkeops_use_float32()] and
#' [rkeops_use_float64()].
#'
#' The default backend, `"auto"`, uses the GPU when one can be used (an NVIDIA
#' driver and NVRTC are found) and the CPU otherwise; the package says which
#' when it is attached.
#'
#' @keywords internal
#' @useDynLib rkeops, .registration = TRUE
"_PACKAGE"

.onAttach <- function(libname, pkgname) {
  status <- tryCatch(gpu_status(get_rkeops_options("device")),
                     error = function(e) list(available = FALSE, message = conditionMessage(e)))
  if (status$available) {
    packageStartupMessage("rkeops: computations run on ", status$message,
                          " (rkeops_use_cpu() to use the CPU)")
  } else {
    packageStartupMessage("rkeops: computations run on the CPU; the GPU is not used: ",
                          status$message)
  }
}

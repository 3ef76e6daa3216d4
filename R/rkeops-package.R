#' rkeops: kernel operations on symbolic matrices
#'
#' rkeops computes reductions (sums, minima, arg-minima, K-nearest
#' neighbours, log-sum-exp, ...) of very large *symbolic matrices*
#' \eqn{M_{ij} = F(x_i, y_j, p)}, where the formula \eqn{F} is written in the
#' KeOps formula language, e.g.
#' `"Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)"`. The \eqn{N \times M} matrix is
#' never stored: the Rust engine streams tiles of it through fast memory and
#' reduces them on the fly, on all the cores of the CPU, so that kernel sums
#' or nearest-neighbour queries over millions of points fit in memory.
#'
#' The main entry point is [keops_kernel()]. Computation options (backend,
#' precision, number of threads) are set with [set_rkeops_options()] and the
#' helpers [rkeops_use_cpu()], [rkeops_use_gpu()], [rkeops_use_float32()] and
#' [rkeops_use_float64()].
#'
#' In this version only the CPU backend is available; the GPU (CUDA) backend
#' is planned.
#'
#' @keywords internal
#' @useDynLib rkeops, .registration = TRUE
"_PACKAGE"

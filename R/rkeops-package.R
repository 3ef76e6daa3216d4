#' rkeops: kernel operations on symbolic matrices
#'
#' rkeops computes reductions (sums, minima, arg-minima, K nearest
#' neighbours, log-sum-exp, ...) of very large *symbolic matrices*
#' \eqn{M_{ij} = F(x_i, y_j, p)}{M_ij = F(x_i, y_j, p)}, such as the Gaussian kernel sum
#' \eqn{a_i = \sum_j \exp(-s |x_i - y_j|^2) b_j}{a_i = sum_j exp(-s |x_i - y_j|^2) b_j}. The \eqn{N \times M}{N x M} matrix is
#' never stored: a Rust engine streams tiles of it through fast memory and
#' reduces them on the fly, so memory grows with \eqn{N + M}, not
#' \eqn{N M}, and kernel sums or nearest-neighbour queries over millions of
#' points fit in memory. Derivatives of the formulas are computed
#' symbolically ([keops_grad()], [grad()]).
#'
#' @section Two interfaces:
#' * **Formulas**: [keops_kernel()] turns a reduction written in the KeOps
#'   formula language, e.g. `"Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)"`
#'   with the variables declared as `c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)",
#'   "s = Pm(1)")`, into an R function of a list of matrices. [keops_grad()]
#'   gives the operator of its gradient.
#' * **LazyTensors**: [Vi()], [Vj()] and [Pm()] wrap R matrices and vectors into
#'   [LazyTensor] objects, combined with R operators ([Ops.LazyTensor]) and
#'   functions ([Math.LazyTensor], [sqdist()], [lazytensor_elementwise], ...)
#'   into a symbolic matrix, then reduced with `sum(K, index = "j")`, [argKmin()],
#'   [logsumexp()], `K %*% b`, [solve()][solve.LazyTensor] ([lazytensor_reductions]).
#'   The formula is built underneath and run by [keops_kernel()]. Complex data
#'   gives a [ComplexLazyTensor].
#'
#' In R functions, indices and positions are 1-based (results of [argmin()],
#' [elem()]); inside formula strings they are 0-based, as in KeOps.
#'
#' @section Functions masked at attach:
#' R reports that `library(rkeops)` masks a few functions. Each is needed by
#' the LazyTensor syntax (rkeops 2's) because the original does not dispatch on
#' the class of its arguments; each calls the original for anything that is not
#' a LazyTensor, so code without LazyTensors behaves as before:
#' * `%*%` (base), `K %*% b`: R before 4.3.0 has no method dispatch for `%*%`.
#'   From R 4.3.0 on it is not masked: LazyTensors get a `matrixOps` method.
#' * `ifelse()` (base), `ifelse(x > 0, x, 0)` on LazyTensors: not generic.
#' * `atan2()` (base), `atan2(Vi(y), Vi(x))`: not generic (not in the Math group).
#' * `step()` (stats), the Heaviside step of a LazyTensor (rkeops 2's name):
#'   `stats::step()` (model selection) is not generic; models still go to it,
#'   evaluated in the caller's frame.
#'
#' @section Options:
#' [get_rkeops_options()] and [set_rkeops_options()] read and set the options
#' `backend` (`"auto"`, `"CPU"` or `"GPU"`), `precision` (`"float32"` by
#' default, `"float64"`, `"float16"`), `device` (the GPU index) and `ncore`
#' (the number of CPU threads); [rkeops_use_cpu()], [rkeops_use_gpu()],
#' [rkeops_use_float32()], [rkeops_use_float64()] and [rkeops_use_float16()]
#' are shortcuts. Inputs and results are R doubles (integers for indices)
#' whatever the precision.
#'
#' @section Progress bars:
#' Calls that run long show a progress bar (package cli): the blocks of rows
#' of a reduction on the CPU, the steps of a long reduction on a GPU (summed
#' over several GPUs), the iterations of a program ([keops_program()],
#' [keops_iterate()] and the algorithm functions built on them; a program's
#' gradient counts them forward, then backward), the
#' conjugate gradients of [solve()] and [keops_krige()], and the evaluations
#' of [keops_landmarks()]. The option `rkeops.progress` chooses: `NA` (the
#' default) shows them in interactive sessions only, `TRUE` always, `FALSE`
#' never, e.g. `options(rkeops.progress = FALSE)`. cli shows a bar only after
#' `getOption("cli.progress_show_after")` seconds (2 by default), so short
#' calls show none; Ctrl-C interrupts as without a bar. The future path
#' ([rkeops_use_future()]) reports its blocks through progressr instead.
#'
#' @section CPU and GPU:
#' On the CPU, reductions run on all the cores (or `ncore` threads), with
#' vector instructions chosen at run time; no compiler is needed. The default
#' backend, `"auto"`, uses an NVIDIA GPU when one can be used (an NVIDIA
#' driver, `libcuda.so.1`, and the CUDA runtime compiler NVRTC,
#' `libnvrtc.so.13` or `.so.12`, are found) and the CPU otherwise; the package
#' says which when it is attached. On the GPU, each formula is compiled by
#' NVRTC on its first use and the result is kept in [rkeops_cache_dir()]
#' (emptied by [clean_rkeops()]). Nothing CUDA is needed to build the package.
#' [rkeops_use_future()] splits reductions over several R processes or
#' machines, each on its own backend, through the `future` package.
#'
#' @section Vignettes:
#' * "Introduction to rkeops": `vignette("rkeops", package = "rkeops")`
#' * "Kriging and Gaussian process regression": `vignette("kriging", package = "rkeops")`
#' * "K-means clustering": `vignette("kmeans", package = "rkeops")`
#' * "K nearest neighbours under several metrics": `vignette("knn", package = "rkeops")`
#' * "Gaussian mixture models by EM": `vignette("gmm", package = "rkeops")`
#' * "Optimal transport with log-domain Sinkhorn": `vignette("sinkhorn", package = "rkeops")`
#' * "Landmark matching by geodesic shooting": `vignette("landmarks", package = "rkeops")`
#'
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(300), 100, 3)   # N = 100 points x_i in 3-D
#' y <- matrix(rnorm(600), 200, 3)   # M = 200 points y_j
#' b <- matrix(rnorm(200), 200, 1)   # a weight b_j per y_j
#'
#' # a_i = sum_j exp(-|x_i - y_j|^2 / 2) b_j, with a formula ...
#' gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
#'                       c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
#' a1 <- gauss(list(x, y, b, 0.5))                # a 100 x 1 matrix
#' # ... with LazyTensors ...
#' a2 <- exp(-0.5 * sqdist(Vi(x), Vj(y))) %*% b   # a 100 x 1 matrix
#' # ... and with the dense 100 x 200 matrix in plain R
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' a3 <- exp(-0.5 * D2) %*% b
#' all.equal(a1, a3, tolerance = 1e-5)            # float32 by default
#' all.equal(a2, a3, tolerance = 1e-5)
#'
#' # the 5 nearest neighbours y_j of each x_i (1-based row numbers of y)
#' nn <- argKmin(sqdist(Vi(x), Vj(y)), K = 5, index = "j")
#' head(nn, 3)
#' all(nn == t(apply(D2, 1, order))[, 1:5])
#'
#' get_rkeops_options()
#' @useDynLib rkeops, .registration = TRUE
#' @importFrom cli cli_progress_bar
"_PACKAGE"

.onAttach <- function(libname, pkgname) {
  status <- tryCatch(gpu_status(get_rkeops_options("device")),
                     error = function(e) list(available = FALSE, message = conditionMessage(e)))
  packageStartupMessage(attach_line(status))
}

# One line of at most 100 characters: where computations run, the GPU's name without its details
# (rkeops_sitrep() gives them), or why no GPU is used.
attach_line <- function(status) {
  brief <- sub(" \\(.*$", "", status$message)
  line <- if (isTRUE(status$available)) {
    paste0("rkeops: runs on ", brief, "; rkeops_sitrep() for details")
  } else {
    paste0("rkeops: runs on the CPU (no GPU: ", brief, "); rkeops_sitrep() for details")
  }
  if (nchar(line) > 100L) paste0(substr(line, 1L, 97L), "...") else line
}

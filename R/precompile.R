#' Compile GPU kernels before their first call
#'
#' Compiles the GPU kernels of reductions into the kernel cache without running
#' them, so that their first calls, in this R session or a later one, find them
#' there instead of waiting for NVRTC: for scripts, reports and CI jobs whose
#' formulas are known in advance.
#'
#' @param formula A character vector of reductions, as [keops_kernel()] takes
#'   them (not gradients: a gradient's kernels are compiled by its first call).
#' @param args The variables of the formulas, as for [keops_kernel()] (one list
#'   for all of them).
#' @param precision `"float32"`, `"float64"` or both: the precisions of the
#'   calls to come (by default the one in force, [get_rkeops_options()]).
#' @param reduced_rows The numbers of reduced rows of the calls to come (at
#'   least one): a K-selection (`ArgKMin`, nearest neighbours) keeps its lists
#'   in registers over short ranges and sifts long ones, with two kernels.
#'   Other reductions have one kernel whatever the size.
#' @return Invisibly, `TRUE` where the kernels were compiled (or already in the
#'   cache), `FALSE` where the computations run on the CPU, which compiles
#'   nothing (with a message).
#' @details The kernels of dense calls are compiled, optimised, on the GPUs in
#'   use ([rkeops_use_gpu()]), one formula after the other; a call with
#'   `ranges` (block-sparse) compiles its own kernel on first use. The kernel
#'   cache is in [get_rkeops_cache_dir()]; kernels compiled by another process
#'   for the same GPU architecture are loaded from it, not compiled again.
#' @seealso [keops_kernel()], [rkeops_use_gpu()].
#' @export
#' @examples
#' \donttest{
#' rkeops_precompile(c("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)",
#'                     "ArgKMin_Reduction(SqDist(x, y), 10, 0)"),
#'                   c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
#' }
rkeops_precompile <- function(formula, args, precision = NULL, reduced_rows = c(1e3, 1e6)) {
  if (!is.character(formula) || length(formula) == 0L || anyNA(formula)) {
    rkeops_abort("rkeops_precompile(): 'formula' must be a character vector of reductions", kind = "input",
                 arg = "formula")
  }
  if (!is.character(args) || anyNA(args)) {
    rkeops_abort("rkeops_precompile(): 'args' must be a character vector", kind = "input", arg = "args")
  }
  options <- engine_options()
  if (is.null(precision)) precision <- options$precision
  if (!is.character(precision) || length(precision) == 0L ||
      !all(precision %in% c("float16", "float32", "float64"))) {
    rkeops_abort("rkeops_precompile(): 'precision' must be among \"float16\", \"float32\" and \"float64\"",
                 kind = "input", arg = "precision")
  }
  if (!is.numeric(reduced_rows) || length(reduced_rows) == 0L || !all(is.finite(reduced_rows) & reduced_rows >= 1)) {
    rkeops_abort("rkeops_precompile(): 'reduced_rows' must be numbers of rows, at least 1", kind = "input",
                 arg = "reduced_rows")
  }
  for (p in unique(precision)) {
    options$precision <- p
    for (f in formula) {
      gpu <- rust_result(.Call(wrap__keops_precompile, f, args, as.double(reduced_rows), options),
                         "rkeops_precompile")$gpu
      if (gpu < 0L) {
        message("rkeops_precompile(): the computations run on the CPU, which compiles nothing")
        return(invisible(FALSE))
      }
    }
  }
  invisible(TRUE)
}

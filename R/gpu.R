# The GPU and the cache of compiled GPU kernels.

# Whether GPU `device` can be used: list(available = , message = ), the message
# describing the device or saying why it cannot be used.
gpu_status <- function(device = 0L) {
  rust_result(.Call(wrap__gpu_status, as.integer(device)))
}

#' Where compiled GPU kernels are kept
#'
#' Kernels compiled for the GPU are stored on disk so that a formula is compiled
#' once, not once per R session. The directory is the environment variable
#' `RKEOPS_CACHE_DIR` when it is set, else `tools::R_user_dir("rkeops", "cache")`.
#' Several R processes can share it.
#'
#' @return The path of the cache directory (it may not exist yet).
#' @seealso [clean_rkeops()]
#' @export
#' @examples
#' rkeops_cache_dir()
rkeops_cache_dir <- function() {
  dir <- Sys.getenv("RKEOPS_CACHE_DIR")
  if (nzchar(dir)) dir else tools::R_user_dir("rkeops", "cache")
}

#' Empty the cache of compiled GPU kernels
#'
#' Removes the compiled kernels from [rkeops_cache_dir()]; they are compiled
#' again when next used.
#'
#' @return The number of files removed, invisibly.
#' @export
#' @examples
#' \dontrun{
#' clean_rkeops()
#' }
clean_rkeops <- function() {
  res <- rust_result(.Call(wrap__clean_cache, rkeops_cache_dir()))
  invisible(res$removed)
}

# The GPU and the cache of compiled GPU kernels.

# Whether the GPUs `device` (one or several) can be used: list(available = , message = ), the
# message describing them or saying why one cannot be used.
gpu_status <- function(device = 0L) {
  status <- lapply(unique(as.integer(device)), function(d) rust_result(.Call(wrap__gpu_status, d)))
  ok <- vapply(status, function(s) isTRUE(s$available), logical(1))
  messages <- vapply(status, function(s) s$message, character(1))
  if (all(ok)) {
    list(available = TRUE, message = paste(messages, collapse = " and "))
  } else {
    list(available = FALSE, message = paste(unique(messages[!ok]), collapse = "; "))
  }
}

# A new GPU kernel is first built quickly (unless RKEOPS_GPU_FAST_COMPILE=0, or its first call
# has much work) and its optimised build compiles in the background; when R exits, builds still compiling are finished (at most 2
# minutes), so that they reach the kernel cache and the next session loads them.
kernel_builds <- new.env()
.onLoad <- function(libname, pkgname) {
  reg.finalizer(kernel_builds, function(e) wait_for_kernel_builds(), onexit = TRUE)
}
wait_for_kernel_builds <- function() invisible(rust_result(.Call(wrap__wait_for_kernel_builds)))

# Whether reductions run on a GPU with the options in force (for choices of algorithm that depend
# on the backend).
gpu_in_use <- function() {
  opts <- get_rkeops_options()
  opts$backend != "CPU" && isTRUE(tryCatch(gpu_status(opts$device)$available, error = function(e) FALSE))
}

#' Where compiled GPU kernels are kept
#'
#' Kernels compiled for the GPU are stored on disk (one `.cubin` file per
#' generated kernel and GPU architecture) so that a formula is compiled once, not
#' once per R session. The directory is the environment variable
#' `RKEOPS_CACHE_DIR` when it is set, else
#' `tools::R_user_dir("rkeops", "cache")`. It is created, private to the user
#' (mode 0700), by the first computation on a GPU; several R processes can share
#' it. Each entry carries a checksum: a damaged one is compiled again. A directory
#' that other users (group or others) can write to is refused with an error, as
#' they could plant code that would run on the GPU. The CPU backend stores
#' nothing.
#'
#' @return The path of the cache directory, a string (the directory may not
#'   exist yet).
#' @seealso [clean_rkeops()]
#' @export
#' @examples
#' rkeops_cache_dir()   # RKEOPS_CACHE_DIR, or tools::R_user_dir("rkeops", "cache")
#' # move the cache, here to a temporary directory
#' old <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
#' Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "rkeops-cache"))
#' rkeops_cache_dir()
#' if (is.na(old)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = old)
rkeops_cache_dir <- function() {
  dir <- Sys.getenv("RKEOPS_CACHE_DIR")
  if (nzchar(dir)) dir else tools::R_user_dir("rkeops", "cache")
}

#' Empty the cache of compiled GPU kernels
#'
#' Removes the compiled kernels (the `.cubin` files, and `.tmp` files left by
#' interrupted writes) from [rkeops_cache_dir()]; files that are not the
#' engine's are never deleted. The kernels are compiled again when next used.
#' The arguments are rkeops 2's.
#'
#' @param verbose `TRUE` (default) to say in a message what was removed.
#' @param all `TRUE` (default) removes the compiled kernels and the files left
#'   by interrupted writes; `FALSE` only the latter.
#' @param remove_cache_dir `TRUE` to remove the directory too when nothing
#'   else is left in it (default `FALSE`).
#' @return The number of files removed (0 when the directory does not exist),
#'   invisibly.
#' @seealso [rkeops_cache_dir()]
#' @export
#' @examples
#' # here on a cache in a temporary directory, to leave the user's cache alone
#' old <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
#' Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "rkeops-cache"))
#' x <- matrix(runif(30), 10, 3)
#' a <- sum(exp(-sqdist(Vi(x), Vj(x))), index = "j")  # on a GPU, compiled and cached
#' list.files(rkeops_cache_dir())
#' n <- clean_rkeops()   # the number of kernels removed: 0 without a GPU
#' if (is.na(old)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = old)
clean_rkeops <- function(verbose = TRUE, all = TRUE, remove_cache_dir = FALSE) {
  for (arg in c("verbose", "all", "remove_cache_dir")) check_flag(get(arg), arg, "clean_rkeops")
  dir <- get_rkeops_cache_dir()
  removed <- 0L
  if (dir.exists(dir)) {
    if (all) {
      removed <- rust_result(.Call(wrap__clean_cache, dir))$removed
    } else {
      tmp <- list.files(dir, pattern = "\\.tmp$", full.names = TRUE)
      removed <- sum(file.remove(tmp))
    }
  }
  gone <- FALSE
  if (remove_cache_dir && dir.exists(dir)) {
    left <- list.files(dir, all.files = TRUE, no.. = TRUE)
    if (length(left) == 0L) {
      gone <- unlink(dir, recursive = TRUE) == 0L && !dir.exists(dir)
    } else if (verbose) {
      message("rkeops: ", dir, " is kept: it holds files that are not compiled kernels.")
    }
  }
  if (verbose) {
    message("rkeops: ", removed, " file", if (removed == 1L) "" else "s", " removed from ", dir,
            if (!all) " (temporary files only; the compiled kernels are kept)",
            if (gone) "; the directory is removed")
  }
  invisible(removed)
}


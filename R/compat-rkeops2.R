# rkeops 2's leftovers: its set-up functions that have a meaning here (the cache directory of
# compiled GPU kernels, a check that the engine computes correctly, and install_rkeops(): nothing to
# install).
#
# The cache directory is the environment variable RKEOPS_CACHE_DIR when it is set, else
# tools::R_user_dir("rkeops", "cache") (rkeops_cache_dir()). set_rkeops_cache_dir() sets that
# variable, so that every part of the package (and the engine) sees the same directory. Nothing
# here creates the directory: the engine creates it, private to the user, on the first
# computation on a GPU.

# The value of RKEOPS_CACHE_DIR before this session's first set_rkeops_cache_dir(), so that
# set_rkeops_cache_dir(NULL) and set_rkeops_options() can put it back (NA: it was not set), in
# .rkeops_env$cache_dir_before (R/options.R; NULL until then).

# Validate a cache directory: NULL (the default one) or a path; return NULL or the expanded path.
.rkeops_check_cache_dir <- function(value) {
  if (is.null(value)) {
    return(NULL)
  }
  if (!is.character(value) || length(value) != 1L || is.na(value) || !nzchar(value)) {
    rkeops_abort("rkeops option 'cache_dir' must be NULL (the default directory) or the path of a ",
                 "directory (a string), not ", .rkeops_show(value), ".", kind = "input", arg = "cache_dir")
  }
  path <- path.expand(value)
  if (file.exists(path) && !dir.exists(path)) {
    rkeops_abort("rkeops option 'cache_dir': ", .rkeops_show(value), " is a file, not a directory.",
                 kind = "cache")
  }
  # The engine refuses a directory that others can write to (they could plant GPU code): say it now.
  if (dir.exists(path)) {
    mode <- as.integer(file.info(path)$mode)
    if (!is.na(mode) && bitwAnd(mode, strtoi("022", 8L)) != 0L) {
      rkeops_abort("rkeops option 'cache_dir': other users can write to ", .rkeops_show(value),
                   " (mode ", format(as.octmode(mode)), "); rkeops keeps compiled code there and ",
                   "refuses such a directory. Use a private one (Sys.chmod(path, \"700\")) or a new path ",
                   "(created private on first use).", kind = "cache")
    }
  }
  path
}

# Point RKEOPS_CACHE_DIR at `path` (already checked); NULL puts back the value of the start of
# the session.
.rkeops_set_cache_dir <- function(path) {
  if (is.null(path)) {
    .rkeops_restore_cache_dir()
    return(invisible())
  }
  if (is.null(.rkeops_env$cache_dir_before)) {
    .rkeops_env$cache_dir_before <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
  }
  Sys.setenv(RKEOPS_CACHE_DIR = path)
  invisible()
}

.rkeops_restore_cache_dir <- function() {
  before <- .rkeops_env$cache_dir_before
  if (is.null(before)) {
    return(invisible())   # never changed by this session
  }
  if (is.na(before)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = before)
  .rkeops_env$cache_dir_before <- NULL
  invisible()
}

#' The cache directory of compiled GPU kernels (rkeops 2 names)
#'
#' rkeops 2 compiled every formula into a shared library kept in a cache
#' directory. Here the CPU backend compiles nothing; the GPU backend compiles
#' each formula with NVRTC once and keeps the result in the same kind of cache
#' directory, [rkeops_cache_dir()]: the environment variable
#' `RKEOPS_CACHE_DIR` when it is set, else `tools::R_user_dir("rkeops",
#' "cache")`.
#'
#' * `get_rkeops_cache_dir()` returns its path (the directory may not exist
#'   yet: it is created, private to the user, by the first computation on a
#'   GPU).
#' * `set_rkeops_cache_dir(cache_dir)` moves it, for this R session (and the
#'   processes it starts), by setting `RKEOPS_CACHE_DIR`; `NULL` puts back the
#'   directory of the start of the session. The kernels of the previous
#'   directory stay there. A path that exists must be a directory that other
#'   users cannot write to; a path that does not exist is created on first use.
#'   The same as `set_rkeops_options(cache_dir = )`.
#' * `stat_rkeops_cache_dir()` gives the disk space its files use.
#'
#' [clean_rkeops()] empties it.
#'
#' @param cache_dir `NULL` or the path of the directory (a string).
#' @param verbose `TRUE` (default) to say, in a message, which directory is
#'   used (and for `stat_rkeops_cache_dir()`, its disk usage).
#' @param startup Ignored (rkeops 2 used it when the package was loaded).
#'
#' @return `get_rkeops_cache_dir()`: the path, a string.
#'   `set_rkeops_cache_dir()`: the previous path, invisibly.
#'   `stat_rkeops_cache_dir()`: the disk usage of the files in the directory
#'   (and its subdirectories), a string such as `"12.5 Kb"` (`"0 bytes"` when
#'   the directory does not exist).
#' @seealso [rkeops_cache_dir()], [clean_rkeops()]
#' @export
#' @examples
#' get_rkeops_cache_dir()
#' # move the cache to a temporary directory, then back
#' old <- set_rkeops_cache_dir(file.path(tempdir(), "rkeops-kernels"))
#' get_rkeops_cache_dir()
#' stat_rkeops_cache_dir()   # "0 bytes": nothing compiled there yet
#' set_rkeops_cache_dir(NULL, verbose = FALSE)
#' identical(get_rkeops_cache_dir(), old)
get_rkeops_cache_dir <- function() {
  rkeops_cache_dir()
}

#' @rdname get_rkeops_cache_dir
#' @export
set_rkeops_cache_dir <- function(cache_dir = NULL, verbose = TRUE) {
  check_flag(verbose, "verbose")
  path <- .rkeops_check_cache_dir(cache_dir)
  old <- get_rkeops_cache_dir()
  .rkeops_set_cache_dir(path)
  if (verbose) {
    message("rkeops: compiled GPU kernels go to ", get_rkeops_cache_dir(),
            if (!identical(old, get_rkeops_cache_dir())) paste0(
              " (the kernels in ", old, " stay there: clean_rkeops() before moving empties it)"))
  }
  invisible(old)
}

#' @rdname get_rkeops_cache_dir
#' @export
stat_rkeops_cache_dir <- function(verbose = TRUE, startup = FALSE) {
  check_flag(verbose, "verbose")
  dir <- get_rkeops_cache_dir()
  files <- list.files(dir, recursive = TRUE, full.names = TRUE, all.files = TRUE)
  bytes <- sum(file.size(files), na.rm = TRUE)
  usage <- format(structure(bytes, class = "object_size"), units = "auto")
  if (verbose) {
    message("rkeops cache directory: ", dir, "\ndisk usage: ", usage,
            "\nclean_rkeops() empties it.")
  }
  usage
}

#' Check that rkeops computes correctly
#'
#' Runs a small reduction (a Gaussian kernel sum over 53 points for each of
#' 37 points, and the nearest neighbours of the same points) with the current
#' options, on the backend they select (the GPU when `backend` is `"auto"`
#' and one can be used), and compares the results with plain R in double
#' precision. rkeops 2 checked its Python installation this way; here there is
#' nothing else to check.
#'
#' @param verbose `TRUE` (default) to say the result in a message: the
#'   backend and precision used and the error, or what failed.
#'
#' @return `TRUE` if the results match plain R (to the accuracy of the
#'   precision in force), `FALSE` otherwise or if the computation fails.
#' @seealso [get_rkeops_options()], [install_rkeops()]
#' @export
#' @examples
#' # on a GPU the formulas are compiled and cached: here in a temporary directory
#' set_rkeops_cache_dir(file.path(tempdir(), "rkeops-kernels"), verbose = FALSE)
#' check_rkeops()
#' set_rkeops_cache_dir(NULL, verbose = FALSE)   # back to the usual directory
check_rkeops <- function(verbose = TRUE) {
  check_flag(verbose, "verbose")
  precision <- get_rkeops_options("precision")
  tolerance <- c(float16 = 1e-2, float32 = 1e-5, float64 = 1e-12)[[precision]]
  # Fixed data (no use of the random seed): 37 x 3 and 53 x 3 points, weights 53 x 2.
  x <- matrix(sin(seq_len(37 * 3)), 37, 3)
  y <- matrix(cos(seq_len(53 * 3) * 0.7), 53, 3)
  b <- matrix(seq_len(53 * 2) / 53, 53, 2)
  d2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
  want_sum <- exp(-d2) %*% b
  want_nn <- apply(d2, 1, which.min)
  outcome <- tryCatch({
    gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)",
                          c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)"))
    got_sum <- gauss(list(x, y, b))
    backend <- last_run()$backend
    nn <- keops_kernel("ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
    got_nn <- nn(list(x, y))
    error <- max(abs(got_sum - want_sum)) / max(abs(want_sum))
    # A near tie may pick another neighbour in low precision: accept one at the same distance.
    picked <- d2[cbind(seq_len(37), c(got_nn))]
    nn_ok <- all(abs(picked - d2[cbind(seq_len(37), want_nn)]) <= tolerance * 10 * max(abs(d2)))
    ok <- is.finite(error) && error <= tolerance && nn_ok
    list(ok = ok, text = sprintf(
      "a kernel sum and a nearest-neighbour search on the %s in %s %s plain R (relative error %.1e)",
      backend, precision, if (ok) "match" else "do NOT match", error))
  }, error = function(e) list(ok = FALSE, text = paste("the computation failed:", conditionMessage(e))))
  if (verbose) {
    message(if (outcome$ok) "rkeops is ready: " else "rkeops is NOT working: ", outcome$text, ".")
  }
  outcome$ok
}

#' Nothing to install
#'
#' rkeops 2 needed Python packages (`pykeops`, `keopscore`) that
#' `install_rkeops()` installed with `reticulate`. This package needs nothing
#' more than itself: its engine is compiled with the package, computes on the
#' CPU without any compiler, and on an NVIDIA GPU needs only the driver and
#' the CUDA runtime compiler NVRTC (found at run time). `install_rkeops()`
#' says so, and checks the engine with [check_rkeops()].
#'
#' @param ... Ignored (the arguments of rkeops 2's `install_rkeops()`, passed
#'   to `reticulate::py_install()` there).
#'
#' @return The result of [check_rkeops()], invisibly.
#' @seealso [check_rkeops()]
#' @export
#' @examples
#' set_rkeops_cache_dir(file.path(tempdir(), "rkeops-kernels"), verbose = FALSE)
#' install_rkeops()
#' set_rkeops_cache_dir(NULL, verbose = FALSE)
install_rkeops <- function(...) {
  message("rkeops: nothing to install (no Python, no compiler needed): the engine is part of ",
          "the package. On an NVIDIA GPU, only the driver and NVRTC are needed.")
  invisible(check_rkeops())
}

#' Say hello
#'
#' Prints a greeting and where computations run, as a first test that the
#' package is loaded (rkeops 2 had this function too).
#'
#' @return The greeting (a string), invisibly.
#' @export
#' @examples
#' helloWorld()
helloWorld <- function() {
  backend <- get_rkeops_options("backend")
  greeting <- paste0("Hello from rkeops: reductions of symbolic matrices, backend \"", backend,
                     "\", precision ", get_rkeops_options("precision"), ".")
  print(greeting)
  invisible(greeting)
}

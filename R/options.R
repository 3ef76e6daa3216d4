# Options of rkeops: backend, precision, GPU device, number of CPU threads.
# They live in a package environment (not in options()) so that they can be
# validated when they are set.

.rkeops_env <- new.env(parent = emptyenv())

.rkeops_default_options <- function() {
  list(backend = "auto", precision = "float32", device = 0L, ncore = NULL)
}

.rkeops_env$options <- .rkeops_default_options()

# Validate one option value; return the normalised value or stop() with a
# message naming the option and what was expected.
.rkeops_check_option <- function(name, value) {
  is_count <- function(x, min) {
    is.numeric(x) && length(x) == 1L && !is.na(x) && is.finite(x) &&
      x == round(x) && x >= min
  }
  switch(name,
    backend = {
      if (!is.character(value) || length(value) != 1L || is.na(value) ||
          !value %in% c("auto", "CPU", "GPU")) {
        stop("rkeops option 'backend' must be one of \"auto\", \"CPU\" or ",
             "\"GPU\", not ", .rkeops_show(value), ".", call. = FALSE)
      }
      value
    },
    precision = {
      if (!is.character(value) || length(value) != 1L || is.na(value) ||
          !value %in% c("float16", "float32", "float64")) {
        stop("rkeops option 'precision' must be \"float16\", \"float32\" or \"float64\", ",
             "not ", .rkeops_show(value), ".", call. = FALSE)
      }
      value
    },
    device = {
      if (!is_count(value, 0)) {
        stop("rkeops option 'device' must be a non-negative integer ",
             "(a GPU index, 0 for the first GPU), not ", .rkeops_show(value),
             ".", call. = FALSE)
      }
      as.integer(value)
    },
    ncore = {
      if (is.null(value)) {
        return(NULL)
      }
      if (!is_count(value, 1)) {
        stop("rkeops option 'ncore' must be NULL (use all the cores) or a ",
             "positive integer (a number of CPU threads), not ",
             .rkeops_show(value), ".", call. = FALSE)
      }
      as.integer(value)
    },
    stop("unknown rkeops option ", .rkeops_show(name), "; the options are: ",
         paste(names(.rkeops_default_options()), collapse = ", "), ".",
         call. = FALSE)
  )
}

# Short printable description of a value, for error messages.
.rkeops_show <- function(x) {
  if (is.null(x)) {
    return("NULL")
  }
  if (length(x) != 1L) {
    return(paste0("a ", class(x)[1L], " of length ", length(x)))
  }
  if (is.character(x)) {
    return(paste0("\"", x, "\""))
  }
  format(x)
}

#' Get rkeops options
#'
#' Returns the current computation options of rkeops.
#'
#' The options are:
#' * `backend`: `"auto"` (default), `"CPU"` or `"GPU"`;
#' * `precision`: `"float32"` (default), `"float64"`, or `"float16"` (inputs
#'   stored in half precision, computed in single precision), the floating
#'   point type used for the computations (inputs and outputs are R doubles);
#' * `device`: index of the GPU to use (0 for the first one);
#' * `ncore`: number of CPU threads, `NULL` (default) for all the cores.
#'
#' @param tag `NULL` (all options) or the name of one option.
#'
#' @return A named list of all options, or the value of option `tag`.
#' @seealso [set_rkeops_options()], [rkeops_use_cpu()],
#'   [rkeops_use_float64()].
#' @export
#' @examples
#' get_rkeops_options()
#' get_rkeops_options("precision")
get_rkeops_options <- function(tag = NULL) {
  opts <- .rkeops_env$options
  if (is.null(tag)) {
    return(opts)
  }
  if (!is.character(tag) || length(tag) != 1L || is.na(tag) ||
      !tag %in% names(opts)) {
    stop("unknown rkeops option 'tag' = ", .rkeops_show(tag),
         "; the options are: ", paste(names(opts), collapse = ", "), ".",
         call. = FALSE)
  }
  opts[[tag]]
}

#' Set rkeops options
#'
#' Sets one or several computation options of rkeops, checking their values.
#' See [get_rkeops_options()] for the list of options.
#'
#' @param ... Named option values, e.g. `precision = "float64"`,
#'   `ncore = 4`. `ncore = NULL` resets the number of threads to all the
#'   cores.
#'
#' @return The previous options (a named list), invisibly, so that they can be
#'   restored with `do.call(set_rkeops_options, old)`.
#' @seealso [get_rkeops_options()]
#' @export
#' @examples
#' old <- set_rkeops_options(precision = "float64", ncore = 2)
#' get_rkeops_options()
#' # restore the previous options
#' do.call(set_rkeops_options, old)
set_rkeops_options <- function(...) {
  new <- list(...)
  old <- .rkeops_env$options
  if (length(new) == 0L) {
    return(invisible(old))
  }
  nms <- names(new)
  if (is.null(nms) || any(is.na(nms) | nms == "")) {
    stop("all the arguments of set_rkeops_options() must be named, e.g. ",
         "set_rkeops_options(precision = \"float64\").", call. = FALSE)
  }
  opts <- old
  for (nm in nms) {
    # opts[nm] <- list(NULL) keeps an element set to NULL (opts[[nm]] <- NULL
    # would remove it).
    opts[nm] <- list(.rkeops_check_option(nm, new[[nm]]))
  }
  .rkeops_env$options <- opts
  invisible(old)
}

#' Compute on the CPU
#'
#' Selects the CPU backend and the number of threads it uses.
#'
#' @param ncore `NULL` (all the cores, the default) or a positive integer,
#'   the number of CPU threads.
#'
#' @return The previous options, invisibly.
#' @seealso [rkeops_use_gpu()], [set_rkeops_options()]
#' @export
#' @examples
#' old <- rkeops_use_cpu(ncore = 2)
#' get_rkeops_options("ncore")
#' rkeops_use_cpu()  # back to all the cores
#' do.call(set_rkeops_options, old)
rkeops_use_cpu <- function(ncore = NULL) {
  set_rkeops_options(backend = "CPU", ncore = ncore)
}

#' Compute on the GPU
#'
#' Selects the GPU backend on a given device when it can be used: an NVIDIA
#' driver (`libcuda.so.1`), the CUDA runtime compiler NVRTC (`libnvrtc.so.13`
#' or `.so.12`) and the device must be present. Otherwise it says why, with a
#' message, and computations stay on the CPU. Each formula is compiled for the
#' device on its first use (see [clean_rkeops()] for the cache of compiled
#' kernels).
#'
#' @param device A non-negative integer, the index of the GPU (0 for the first
#'   one).
#'
#' @return `TRUE` if the GPU backend was selected, `FALSE` otherwise,
#'   invisibly.
#' @seealso [rkeops_use_cpu()], [set_rkeops_options()]
#' @export
#' @examples
#' old <- get_rkeops_options()
#' rkeops_use_gpu()
#' get_rkeops_options("backend")
#' do.call(set_rkeops_options, old)
rkeops_use_gpu <- function(device = 0) {
  set_rkeops_options(device = device)
  status <- gpu_status(get_rkeops_options("device"))
  if (status$available) {
    set_rkeops_options(backend = "GPU")
    message("rkeops: computations run on ", status$message)
  } else {
    set_rkeops_options(backend = "CPU")
    message("rkeops: the GPU cannot be used (", status$message,
            "); computations stay on the CPU.")
  }
  invisible(status$available)
}

#' Choose the floating point precision
#'
#' `rkeops_use_float32()` makes the computations run in single precision
#' (the default: faster, about 7 significant digits);
#' `rkeops_use_float64()` in double precision; `rkeops_use_float16()` stores
#' the inputs in half precision (about 3 significant digits: half the memory
#' and transfers on the GPU) and computes and accumulates in single precision.
#' Inputs and outputs are R doubles in every case.
#'
#' @return The previous options, invisibly.
#' @seealso [set_rkeops_options()]
#' @export
#' @examples
#' old <- rkeops_use_float64()
#' get_rkeops_options("precision")
#' rkeops_use_float32()
#' do.call(set_rkeops_options, old)
rkeops_use_float32 <- function() {
  set_rkeops_options(precision = "float32")
}

#' @rdname rkeops_use_float32
#' @export
rkeops_use_float16 <- function() {
  set_rkeops_options(precision = "float16")
}

#' @rdname rkeops_use_float32
#' @export
rkeops_use_float64 <- function() {
  set_rkeops_options(precision = "float64")
}

# Effective number of CPU threads: the option `ncore` if set, else the number
# of cores (1 when it cannot be detected).
rkeops_ncore <- function() {
  ncore <- get_rkeops_options("ncore")
  if (!is.null(ncore)) {
    return(as.integer(ncore))
  }
  n <- parallel::detectCores()
  if (is.na(n) || n < 1L) 1L else as.integer(n)
}

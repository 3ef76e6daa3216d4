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
#' Returns the current computation options of rkeops, used by every
#' reduction ([keops_kernel()] operators and LazyTensor reductions) at the
#' time it runs.
#'
#' The options are:
#' * `backend`: `"auto"` (default: the GPU when one can be used, else the
#'   CPU), `"CPU"` or `"GPU"`;
#' * `precision`: the floating point type of the computations, `"float32"`
#'   (default), `"float64"`, or `"float16"` (inputs stored in half precision,
#'   computed in single precision); inputs and results are R doubles in every
#'   case;
#' * `device`: the index of the GPU to use (0, the default, for the first one);
#' * `ncore`: the number of CPU threads, `NULL` (default) for all the cores.
#'
#' @param tag `NULL` (all the options) or the name of one option:
#'   `"backend"`, `"precision"`, `"device"` or `"ncore"`.
#'
#' @return A named list of the four options, or the value of option `tag`
#'   (a string, an integer, or `NULL` for `ncore` when all the cores are used).
#'   An unknown `tag` is an error.
#' @seealso [set_rkeops_options()], [rkeops_use_cpu()], [rkeops_use_gpu()],
#'   [rkeops_use_float64()].
#' @export
#' @examples
#' str(get_rkeops_options())
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
#' Sets one or several computation options of rkeops, checking their values:
#' an invalid value or an unknown option is an error and changes nothing.
#' See [get_rkeops_options()] for the options and their values. The new
#' values apply to every later reduction, including those of operators made
#' before.
#'
#' @param ... Named option values, e.g. `precision = "float64"`,
#'   `ncore = 2`: `backend` (`"auto"`, `"CPU"` or `"GPU"`), `precision`
#'   (`"float16"`, `"float32"` or `"float64"`), `device` (a non-negative
#'   whole number) and `ncore` (a positive whole number, or `NULL` for all the
#'   cores).
#'
#' @return The previous options (a named list), invisibly, so that they can be
#'   restored with `do.call(set_rkeops_options, old)`.
#' @seealso [get_rkeops_options()]
#' @export
#' @examples
#' old <- set_rkeops_options(precision = "float64", ncore = 2)
#' str(get_rkeops_options())
#' # an invalid value is an error that names the option
#' tryCatch(set_rkeops_options(precision = "double"),
#'          error = function(e) conditionMessage(e))
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
#' Sets the option `backend` to `"CPU"` and `ncore` to the number of CPU
#' threads used by the reductions.
#'
#' @param ncore `NULL` (all the cores, the default) or a positive whole
#'   number, the number of CPU threads.
#'
#' @return The previous options (a named list), invisibly.
#' @seealso [rkeops_use_gpu()], [set_rkeops_options()]
#' @export
#' @examples
#' old <- rkeops_use_cpu(ncore = 2)
#' get_rkeops_options("backend")
#' get_rkeops_options("ncore")
#' x <- matrix(runif(30), 10, 3)
#' sum(sqdist(Vi(x), Vj(x)), index = "j")   # computed on the CPU with 2 threads
#' do.call(set_rkeops_options, old)
rkeops_use_cpu <- function(ncore = NULL) {
  set_rkeops_options(backend = "CPU", ncore = ncore)
}

#' Compute on the GPU
#'
#' Sets the option `device` and, when that GPU can be used, the backend
#' `"GPU"`: an NVIDIA driver (`libcuda.so.1`), the CUDA runtime compiler
#' NVRTC (`libnvrtc.so.13` or `.so.12`) and the device must be present.
#' Otherwise it sets the backend `"CPU"` (replacing `"auto"` too) and says
#' why in a message. In both cases a message says where computations run.
#' Each formula is compiled for the GPU on its first use and kept in
#' [rkeops_cache_dir()].
#'
#' @param device A non-negative whole number, the index of the GPU (0 for the
#'   first one).
#'
#' @return `TRUE` if the GPU backend was selected, `FALSE` otherwise,
#'   invisibly.
#' @seealso [rkeops_use_cpu()], [set_rkeops_options()], [clean_rkeops()]
#' @export
#' @examples
#' old <- get_rkeops_options()
#' # compiled kernels go to a temporary cache here (see rkeops_cache_dir())
#' old_cache <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
#' Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "rkeops-cache"))
#' # TRUE on a machine with a usable NVIDIA GPU, FALSE (with a message) elsewhere
#' if (rkeops_use_gpu()) {
#'   x <- matrix(runif(3000), 1000, 3)
#'   a <- sum(exp(-sqdist(Vi(x), Vj(x))), index = "j")   # run on the GPU
#'   dim(a)
#' }
#' get_rkeops_options("backend")
#' do.call(set_rkeops_options, old)
#' if (is.na(old_cache)) Sys.unsetenv("RKEOPS_CACHE_DIR") else
#'   Sys.setenv(RKEOPS_CACHE_DIR = old_cache)
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
#' Set the option `precision`: `rkeops_use_float32()` makes the computations
#' run in single precision (the default: faster, about 7 significant digits);
#' `rkeops_use_float64()` in double precision (about 16 digits);
#' `rkeops_use_float16()` stores the inputs in half precision (about 3
#' significant digits: half the memory and transfers on the GPU) and computes
#' and accumulates in single precision. Inputs and results are R doubles in
#' every case. Sums are accumulated as set by the `sum_scheme` argument of
#' [keops_kernel()].
#'
#' @return The previous options (a named list), invisibly.
#' @seealso [set_rkeops_options()]
#' @export
#' @examples
#' set.seed(1)
#' x <- matrix(rnorm(300), 100, 3)
#' y <- matrix(rnorm(600), 200, 3)
#' D2 <- outer(rowSums(x^2), rowSums(y^2), "+") - 2 * x %*% t(y)
#' dense <- rowSums(exp(-D2))                   # plain R, double precision
#' K <- exp(-sqdist(Vi(x), Vj(y)))
#' old <- rkeops_use_float64()
#' max(abs(sum(K, index = "j") - dense) / dense)   # about 1e-15
#' rkeops_use_float32()
#' max(abs(sum(K, index = "j") - dense) / dense)   # about 1e-7
#' rkeops_use_float16()
#' max(abs(sum(K, index = "j") - dense) / dense)   # about 1e-3
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

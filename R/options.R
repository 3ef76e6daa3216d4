# Options of rkeops: backend, precision, GPU device, number of CPU threads, verbosity.
# They live in a package environment (not in options()) so that they can be
# validated when they are set. The option names of rkeops 2 are accepted too:
# device_id, cache_dir, debug and formula_only (see .rkeops_alias_options).

.rkeops_env <- new.env(parent = emptyenv())

.rkeops_default_options <- function() {
  list(backend = "auto", precision = "float32", device = 0L, ncore = NULL, verbosity = TRUE)
}

.rkeops_env$options <- .rkeops_default_options()
# rkeops 2's compilation debug flag: kept only so that get_rkeops_options("debug") answers.
.rkeops_env$debug <- FALSE

# rkeops 2 option names that are not in the list of get_rkeops_options(), but can be read and set
# by name.
.rkeops_alias_options <- c("device_id", "cache_dir", "debug", "formula_only")

# Options of rkeops 1 (compile options): what replaces each here.
.rkeops1_options <- c(
  use_cuda_if_possible = "the option 'backend' (\"auto\", \"CPU\" or \"GPU\")",
  build_dir = "the option 'cache_dir' (or set_rkeops_cache_dir())",
  src_dir = "nothing: no source file is compiled here",
  tagCpuGpu = "the option 'backend' (\"auto\", \"CPU\" or \"GPU\")",
  tag1D2D = "nothing: the engine chooses its tiling itself"
)

# Whether `x` is TRUE/FALSE or 1/0 (rkeops 2 accepted both for its flags).
.rkeops_is_flag <- function(x) {
  (is.logical(x) || is.numeric(x)) && length(x) == 1L && !is.na(x) && x %in% c(0, 1)
}

# Validate one option value; return the normalised value or stop() with a
# message naming the option and what was expected. `name` is one of our names
# (aliases are mapped before).
.rkeops_check_option <- function(name, value) {
  switch(name,
    backend = {
      if (!is.character(value) || length(value) != 1L || is.na(value) ||
          !value %in% c("auto", "CPU", "GPU")) {
        rkeops_abort("rkeops option 'backend' must be one of \"auto\", \"CPU\" or ",
                     "\"GPU\", not ", .rkeops_show(value), ".", kind = "input", arg = "backend")
      }
      value
    },
    precision = {
      if (!is.character(value) || length(value) != 1L || is.na(value) ||
          !value %in% c("float16", "float32", "float64")) {
        hint <- if (identical(value, "float")) " (rkeops 1's \"float\" is \"float32\")" else
          if (identical(value, "double")) " (rkeops 1's \"double\" is \"float64\")" else ""
        rkeops_abort("rkeops option 'precision' must be \"float16\", \"float32\" or \"float64\", ",
                     "not ", .rkeops_show(value), hint, ".", kind = "input", arg = "precision")
      }
      value
    },
    device = {
      # -1 was rkeops 2's "default GPU", the first one.
      if (!is.numeric(value) || length(value) == 0L ||
          !all(vapply(value, is_whole, logical(1), min = -1))) {
        rkeops_abort("rkeops option 'device' (rkeops 2: 'device_id') must be a GPU index, a whole ",
                     "number: 0 for the first GPU (-1 also means the first GPU, as in rkeops 2), ",
                     "or several, which share each computation (e.g. c(0, 1)), not ",
                     .rkeops_show(value), ".", kind = "input", arg = "device")
      }
      pmax(as.integer(value), 0L)
    },
    ncore = {
      # 0 meant "all the cores" in rkeops 2's rkeops_use_cpu().
      if (is.null(value) || identical(as.numeric(value), 0)) {
        return(NULL)
      }
      if (!is_whole(value, 1)) {
        rkeops_abort("rkeops option 'ncore' must be NULL or 0 (use all the cores) or a ",
                     "positive integer (a number of CPU threads), not ",
                     .rkeops_show(value), ".", kind = "input", arg = "ncore")
      }
      as.integer(value)
    },
    verbosity = {
      if (!.rkeops_is_flag(value)) {
        rkeops_abort("rkeops option 'verbosity' must be TRUE or FALSE (or 1 or 0), not ",
                     .rkeops_show(value), ".", kind = "input", arg = "verbosity")
      }
      as.logical(value)
    },
    debug = {
      if (!.rkeops_is_flag(value)) {
        rkeops_abort("rkeops option 'debug' must be TRUE or FALSE (or 1 or 0), not ",
                     .rkeops_show(value), ".", kind = "input", arg = "debug")
      }
      as.logical(value)
    },
    formula_only = {
      if (!.rkeops_is_flag(value)) {
        rkeops_abort("rkeops option 'formula_only' must be FALSE, not ", .rkeops_show(value), ".",
                     kind = "input", arg = "formula_only")
      }
      if (as.logical(value)) {
        rkeops_abort("rkeops option 'formula_only' = TRUE (return formulas instead of computing) is not ",
                     "supported: reductions always compute here. Print a LazyTensor to see its formula.",
                     kind = "input", arg = "formula_only")
      }
      FALSE
    },
    cache_dir = .rkeops_check_cache_dir(value),
    {
      if (name %in% names(.rkeops1_options)) {
        rkeops_abort("rkeops option '", name, "' was an option of rkeops 1; it is replaced by ",
                     .rkeops1_options[[name]], ".", kind = "input", arg = name)
      }
      rkeops_abort("unknown rkeops option ", .rkeops_show(name), "; the options are: ",
                   paste(c(names(.rkeops_default_options()), .rkeops_alias_options), collapse = ", "),
                   ".", kind = "input", arg = name)
    }
  )
}

# Our name of an option given by its rkeops 2 name.
.rkeops_option_name <- function(name) {
  if (identical(name, "device_id")) "device" else name
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

# Warn once per session (per `key`), a warning of class rkeops_warning_compat: for rkeops 2 habits
# that still run here but may not do what they did there.
.rkeops_warn_once <- function(key, ...) {
  seen <- .rkeops_env$warned
  if (key %in% seen) {
    return(invisible(FALSE))
  }
  .rkeops_env$warned <- c(seen, key)
  rkeops_warn(..., kind = "compat")
  invisible(TRUE)
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
#' * `ncore`: the number of CPU threads, `NULL` (default) for all the cores;
#' * `verbosity`: `TRUE` (default) or `FALSE`; `FALSE` hides the informative
#'   messages of rkeops (the note on the reduction axis given once per session
#'   by [keops_kernel()], the messages of [rkeops_use_gpu()]).
#'
#' The names of rkeops 2 are accepted too: `device_id` (the same as `device`),
#' `cache_dir` (the directory of compiled GPU kernels, see
#' [get_rkeops_cache_dir()]), `debug` (accepted, no effect: nothing is
#' compiled by a C++ compiler here) and `formula_only` (always `FALSE`). They
#' are not in the list of all the options.
#'
#' @param option `NULL` (all the options) or a character vector of option
#'   names (`"backend"`, `"precision"`, `"device"`, `"ncore"`, `"verbosity"`,
#'   or the rkeops 2 names above). `tag` is the same argument under its former
#'   name.
#' @param tag Former name of `option`, kept for existing code.
#'
#' @return A named list of the five options; for one name, its value (a
#'   string, an integer, a logical, or `NULL` for `ncore` when all the cores
#'   are used); for several names, a named list of their values. An unknown
#'   name is an error.
#' @seealso [set_rkeops_options()], [rkeops_use_cpu()], [rkeops_use_gpu()],
#'   [rkeops_use_float64()], [rkeops_disable_verbosity()].
#' @export
#' @examples
#' str(get_rkeops_options())
#' get_rkeops_options("precision")
#' get_rkeops_options(c("backend", "precision"))
#' get_rkeops_options("device_id")   # rkeops 2's name of "device"
get_rkeops_options <- function(option = NULL, tag = NULL) {
  if (is.null(option)) option <- tag
  opts <- .rkeops_env$options
  if (is.null(option)) {
    return(opts)
  }
  known <- c(names(opts), .rkeops_alias_options)
  if (!is.character(option) || length(option) == 0L || anyNA(option) ||
      !all(option %in% known)) {
    bad <- if (is.character(option)) setdiff(option, known) else option
    rkeops_abort("unknown rkeops option ", .rkeops_show(if (length(bad) == 1L) bad else option),
                 "; the options are: ", paste(known, collapse = ", "), ".", kind = "input", arg = "option")
  }
  value_of <- function(name) {
    switch(name,
      device_id = opts$device,
      cache_dir = get_rkeops_cache_dir(),
      debug = .rkeops_env$debug,
      formula_only = FALSE,
      opts[[name]]
    )
  }
  if (length(option) == 1L) {
    return(value_of(option))
  }
  # opts[nm] <- list(NULL) keeps an element set to NULL (ncore).
  res <- list()
  for (nm in option) res[nm] <- list(value_of(nm))
  res
}

#' Set rkeops options
#'
#' Sets one or several computation options of rkeops, checking their values:
#' an invalid value or an unknown option is an error and changes nothing.
#' See [get_rkeops_options()] for the options and their values. The new
#' values apply to every later reduction, including those of operators made
#' before. With no argument, every option goes back to its default value, as
#' in rkeops 2.
#'
#' @param ... Named option values, e.g. `precision = "float64"`,
#'   `ncore = 2`: `backend` (`"auto"`, `"CPU"` or `"GPU"`), `precision`
#'   (`"float16"`, `"float32"` or `"float64"`), `device` (a GPU index, a whole
#'   number; -1 means 0), `ncore` (a positive whole number, or `NULL` or 0 for
#'   all the cores) and `verbosity` (`TRUE`/`FALSE` or 1/0). Or, as in rkeops
#'   2, one list of named values: `set_rkeops_options(list(precision =
#'   "float64"))` (also as `input = list(...)`). rkeops 2's names are accepted:
#'   `device_id` (for `device`), `cache_dir` (see [set_rkeops_cache_dir()]),
#'   `debug` (no effect here, with a warning once per session when `TRUE`) and
#'   `formula_only` (only `FALSE`: reductions always compute here). The
#'   compile options of rkeops 1 (`use_cuda_if_possible`, `build_dir`, ...)
#'   are errors that name what replaces them.
#'
#' @return The previous options (the named list of [get_rkeops_options()]),
#'   invisibly, so that they can be restored with
#'   `do.call(set_rkeops_options, old)`.
#' @seealso [get_rkeops_options()]
#' @export
#' @examples
#' old <- set_rkeops_options(precision = "float64", ncore = 2)
#' str(get_rkeops_options())
#' # rkeops 2's form: one list of named values, and its option names
#' set_rkeops_options(list(precision = "float32", device_id = 0))
#' get_rkeops_options("precision")
#' # an invalid value is an error that names the option
#' tryCatch(set_rkeops_options(precision = "double"),
#'          error = function(e) conditionMessage(e))
#' # no argument: every option back to its default
#' set_rkeops_options()
#' str(get_rkeops_options())
#' # restore the options of the start of this example
#' do.call(set_rkeops_options, old)
set_rkeops_options <- function(...) {
  new <- list(...)
  old <- .rkeops_env$options
  # rkeops 2's form: set_rkeops_options(list(...)) or set_rkeops_options(input = list(...)).
  if (length(new) == 1L && (is.null(names(new)) || names(new) %in% c("", "input")) &&
      (is.list(new[[1L]]) || is.null(new[[1L]]))) {
    if (is.null(new[[1L]])) {
      new <- list()
    } else {
      new <- new[[1L]]
      if (length(new) == 0L) return(invisible(old))
    }
  }
  if (length(new) == 0L) {
    .rkeops_env$options <- .rkeops_default_options()
    .rkeops_env$debug <- FALSE
    .rkeops_restore_cache_dir()
    return(invisible(old))
  }
  nms <- names(new)
  if (is.null(nms) || any(is.na(nms) | nms == "")) {
    rkeops_abort("all the arguments of set_rkeops_options() must be named, e.g. ",
                 "set_rkeops_options(precision = \"float64\"), or be one list of named values, e.g. ",
                 "set_rkeops_options(list(precision = \"float64\")).", kind = "input")
  }
  # Check every value before changing anything.
  opts <- old
  debug <- .rkeops_env$debug
  cache_dir <- NULL
  for (nm in nms) {
    name <- .rkeops_option_name(nm)
    value <- .rkeops_check_option(name, new[[nm]])
    if (name == "debug") {
      debug <- value
    } else if (name == "cache_dir") {
      cache_dir <- list(value)
    } else if (name != "formula_only") {
      # opts[nm] <- list(NULL) keeps an element set to NULL (opts[[nm]] <- NULL
      # would remove it).
      opts[name] <- list(value)
    }
  }
  .rkeops_env$options <- opts
  .rkeops_env$debug <- debug
  if (!is.null(cache_dir)) .rkeops_set_cache_dir(cache_dir[[1L]])
  if (debug) {
    .rkeops_warn_once("debug", "rkeops option 'debug' has no effect here: formulas are not ",
                      "compiled by a C++ compiler (the CPU engine evaluates them directly, the GPU ",
                      "compiles them with NVRTC). This warning is given once per session.")
  }
  invisible(old)
}

#' Turn the informative messages of rkeops on or off
#'
#' `rkeops_disable_verbosity()` sets the option `verbosity` to `FALSE`: the
#' informative messages of rkeops (the note on the reduction axis that
#' [keops_kernel()] gives once per session, the messages of
#' [rkeops_use_gpu()]) are no longer shown. `rkeops_enable_verbosity()` sets
#' it back to `TRUE`, the default. Errors and warnings are always given.
#'
#' @return The previous options (a named list), invisibly.
#' @seealso [set_rkeops_options()]
#' @export
#' @examples
#' old <- rkeops_disable_verbosity()
#' get_rkeops_options("verbosity")
#' rkeops_enable_verbosity()
#' get_rkeops_options("verbosity")
#' do.call(set_rkeops_options, old)
rkeops_enable_verbosity <- function() {
  set_rkeops_options(verbosity = TRUE)
}

#' @rdname rkeops_enable_verbosity
#' @export
rkeops_disable_verbosity <- function() {
  set_rkeops_options(verbosity = FALSE)
}

# Whether informative messages are shown (option `verbosity`).
.rkeops_verbose <- function() isTRUE(.rkeops_env$options$verbosity)

#' Compute on the CPU
#'
#' Sets the option `backend` to `"CPU"` and `ncore` to the number of CPU
#' threads used by the reductions.
#'
#' @param ncore `NULL` (all the cores, the default) or a positive whole
#'   number, the number of CPU threads; 0 also means all the cores, as in
#'   rkeops 2.
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
#' why in a message. In both cases a message says where computations run
#' (unless the option `verbosity` is `FALSE`).
#' Each formula is compiled for the GPU on its first use and kept in
#' [rkeops_cache_dir()].
#'
#' Several GPUs of the machine can share each computation:
#' `rkeops_use_gpu(device = c(0, 1))` or `rkeops_use_gpu(device = "all")`.
#' Each reduction is then cut into one part per GPU, computed side by side, one
#' host thread per GPU: blocks of output rows in proportion to each GPU's
#' multiprocessors (a block-sparse reduction at the boundaries of its blocks
#' of rows, in proportion to their pairs); when the output rows are too few to
#' fill the GPUs (fewer than a few hundred thousand), parts of the reduced
#' range, whose partial results are merged in order as one GPU merges its own
#' chunks. Results equal those of one GPU up to the order of the floating point
#' sums. Every GPU receives its part of the inputs at each call.
#'
#' A program ([keops_program()], and the functions that run one:
#' [keops_kmeans()], [keops_gmm()] with `model = "VVI"`, [keops_sinkhorn()]
#' with `multiscale = FALSE`) is spread over the GPUs: the
#' rows of its points (its largest i-axis) are shared out once, each GPU
#' keeping its part for the whole program, with one host thread per GPU; each
#' computes the steps over its rows, and the sums over all the rows (a
#' log-sum-exp's, a minimum's) are merged between the GPUs at each iteration,
#' in the GPUs' order: the results equal one GPU's up to the order of those
#' sums, the same from run to run. A program stays on the first GPU when each
#' GPU would get fewer than 65536 rows (the environment variable
#' `RKEOPS_SPREAD_ROWS` sets that number), when a step over those rows is
#' block-sparse or reduces them to indices, soft-max weights or K best, or
#' when an input is kept on a GPU. Program gradients, loops
#' ([keops_iterate()]) and matrices kept on a GPU ([keops_device()]) use the
#' first GPU of the list. Ctrl-C stops a long computation within a second on
#' every GPU.
#'
#' @param device A non-negative whole number, the index of the GPU (0 for the
#'   first one); -1, rkeops 2's default, also means the first GPU. Or several
#'   indices (`c(0, 1)`), or `"all"` for every GPU of the machine, to share
#'   each computation among them (a GPU listed twice gets two parts, one after
#'   the other: only useful to test the splitting on one GPU).
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
  if (identical(device, "all")) {
    count <- rust_result(.Call(wrap__gpu_count))
    if (count$count == 0L) {
      set_rkeops_options(backend = "CPU")
      if (.rkeops_verbose()) {
        message("rkeops: the GPU cannot be used (", count$message, "); computations stay on the CPU.")
      }
      return(invisible(FALSE))
    }
    device <- seq_len(count$count) - 1L
  }
  set_rkeops_options(device = device)
  status <- gpu_status(get_rkeops_options("device"))
  if (status$available) {
    set_rkeops_options(backend = "GPU")
    if (.rkeops_verbose()) message("rkeops: computations run on ", status$message)
  } else {
    set_rkeops_options(backend = "CPU")
    if (.rkeops_verbose()) {
      message("rkeops: the GPU cannot be used (", status$message,
              "); computations stay on the CPU.")
    }
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

# `expr` evaluated with the precision option float64, restored after (the sums that float64 keeps
# exact enough: K-means' total sum of squares, GMM's standardisation).
in_float64 <- function(expr) {
  old <- get_rkeops_options("precision")
  on.exit(set_rkeops_options(precision = old))
  set_rkeops_options(precision = "float64")
  expr
}

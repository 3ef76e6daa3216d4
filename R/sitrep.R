# rkeops_sitrep(): everything a bug report needs, in one call.

#' What a bug report needs: versions, backend, GPUs, NVRTC, cache, options
#'
#' Collects the package's and the engine's versions, R's, the options in force (backend,
#' precision, threads, devices), where computations run now, every GPU the driver reports (name,
#' compute capability, multiprocessors, memory total and free, the NVRTC version the engine
#' compiles with), the NVRTC and driver libraries loaded and where they were found, the kernel
#' cache (directory, files, size) and whether the GPU kernels use the tensor cores (environment
#' variable `RKEOPS_GPU_TENSOR`, `off` to disable them). Opening a GPU to describe it loads the
#' driver and NVRTC, as a first computation would; nothing is compiled.
#'
#' @return An object of class `"rkeops_sitrep"`, a list of the above, printed as a short report
#'   (paste it into bug reports).
#' @seealso [check_rkeops()] to check that results are right, [stat_rkeops_cache_dir()].
#' @export
#' @examples
#' rkeops_sitrep()
#' str(unclass(rkeops_sitrep())$options)
rkeops_sitrep <- function() {
  opts <- get_rkeops_options()
  count <- tryCatch(rust_result(.Call(wrap__gpu_count)), error = function(e) list(count = 0L, message = conditionMessage(e)))
  gpus <- lapply(seq_len(count$count) - 1L, function(d) c(list(device = d), rust_result(.Call(wrap__gpu_details, d))))
  cache_dir <- get_rkeops_cache_dir()
  cache_files <- list.files(cache_dir, recursive = TRUE, full.names = TRUE, all.files = TRUE)
  structure(list(
    package = getNamespaceVersion("rkeops")[[1L]],
    engine = .Call(wrap__engine_version),
    r = R.version.string,
    platform = R.version$platform,
    options = opts,
    runs_on = if (gpu_in_use()) sprintf("GPU %s", paste(opts$device, collapse = ", ")) else "CPU",
    gpu_count = count$count,
    gpu_message = count$message,
    gpus = gpus,
    libraries = loaded_libraries(c("libnvrtc", "libcuda")),
    cache = list(dir = cache_dir, files = length(cache_files), bytes = sum(file.size(cache_files), na.rm = TRUE)),
    tensor_cores = rust_result(.Call(wrap__engine_tuning))$tensor_cores
  ), class = "rkeops_sitrep")
}

# The paths of the shared libraries of this process whose file names start with one of `prefixes`
# (Linux's /proc/self/maps; none where it cannot be read): where NVRTC and the driver were found.
loaded_libraries <- function(prefixes, maps = "/proc/self/maps") {
  lines <- tryCatch(suppressWarnings(readLines(maps)), error = function(e) character(0))
  paths <- unique(sub("^[^/]*", "", grep("/", lines, value = TRUE, fixed = TRUE)))
  paths[Reduce(`|`, lapply(prefixes, function(p) startsWith(basename(paths), p)), logical(length(paths)))]
}

#' @export
print.rkeops_sitrep <- function(x, ...) {
  o <- x$options
  size <- format(structure(x$cache$bytes, class = "object_size"), units = "auto")
  line <- function(name, value) cat(sprintf("%-13s %s\n", paste0(name, ":"), value))
  line("rkeops", sprintf("%s (engine %s), %s, %s", x$package, x$engine, x$r, x$platform))
  line("runs on", x$runs_on)
  line("options", sprintf("backend %s, precision %s, device %s, threads %s, verbosity %s", o$backend, o$precision,
                          paste(o$device, collapse = ", "), if (is.null(o$ncore)) "all cores" else o$ncore,
                          o$verbosity))
  line("GPUs", if (x$gpu_count > 0L) x$gpu_count else paste("none:", sub("^GPU: ", "", x$gpu_message)))
  for (g in x$gpus) {
    line(sprintf("  GPU %d", g$device), if (!isTRUE(g$available)) paste("cannot be used:", g$message) else
      sprintf("%s, compute capability %s, %d multiprocessors, %.1f GiB (%.1f free), NVRTC %s", g$name,
              g$compute_capability, g$multiprocessors, g$memory_total / 2^30, g$memory_free / 2^30, g$nvrtc))
  }
  line("libraries", if (length(x$libraries)) paste(x$libraries, collapse = ", ") else "no NVRTC or driver loaded")
  line("tensor cores", if (x$tensor_cores) "on (RKEOPS_GPU_TENSOR=off to disable)" else "off (RKEOPS_GPU_TENSOR=off)")
  line("cache", sprintf("%s (%d files, %s)", x$cache$dir, x$cache$files, size))
  invisible(x)
}

# How many GPU kernels (and CUDA graphs, each once) this R process has launched: benchmarks count a
# call's launches as the difference of two readings.
gpu_launches <- function() .Call(wrap__gpu_launches)

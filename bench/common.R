# Helpers shared by the benchmark scripts: their settings, their report and the revision timed.
# A script sources it with
#   local({
#     f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
#     source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
#   })

# A setting from the environment, or its default when unset or empty.
env_str <- function(name, default) {
  v <- Sys.getenv(name, "")
  if (nzchar(v)) v else default
}
env_num <- function(name, default) as.numeric(env_str(name, default))

# A fresh kernel cache for this process (or `cache`, to reuse one) and, unless KEEP_HOME=1, a fresh
# HOME: NVRTC (12.9 and later) keeps compilations of its own under $HOME/.nv, across processes (a
# source compiled before comes back in ~20 ms, H200 host, 2026-11-29), so that every compilation is
# timed. Then, on a machine without a GPU, the script ends: the CPU compiles nothing.
fresh_kernel_cache <- function(cache = "") {
  if (Sys.getenv("KEEP_HOME") != "1") Sys.setenv(HOME = tempfile("home-"))
  if (!nzchar(cache)) cache <- tempfile("rkeops-cache-")
  dir.create(cache, showWarnings = FALSE, recursive = TRUE)
  Sys.setenv(RKEOPS_CACHE_DIR = cache)
  if (!isTRUE(suppressWarnings(rkeops_use_gpu()))) {
    cat("no GPU here: nothing is compiled on the CPU, nothing to time\n")
    quit(status = 0)
  }
  cache
}

# After a warm-up: waits for the optimised builds of the kernels it compiled (a new kernel's first
# call of little work runs a fast build, up to ~40 x slower, until its optimised build, compiled in
# the background, replaces it); nothing for a library without fast builds.
optimised_kernels <- function() {
  wait <- get0("wait_for_kernel_builds", envir = asNamespace("rkeops"), inherits = FALSE)
  if (!is.null(wait)) wait()
  invisible()
}

# Selects the backend that BACKEND names (CPU or GPU; `default` when unset), in float32, and returns
# its name: GPU stops where no GPU can be used.
use_backend <- function(default) {
  backend <- toupper(env_str("BACKEND", default))
  if (backend == "GPU") stopifnot(rkeops_use_gpu()) else rkeops_use_cpu()
  rkeops_use_float32()
  backend
}

# Each line is printed and kept, to be written to BENCH_OUT at the end.
report <- character()
emit <- function(...) {
  line <- paste0(...)
  cat(line, "\n", sep = "")
  report <<- c(report, line)
}

# The git revision of the checkout holding the script, and whether it has uncommitted changes.
git_version <- function() {
  script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  root <- if (length(script)) dirname(dirname(normalizePath(script))) else "."
  git <- function(...) suppressWarnings(system2("git", c("-C", shQuote(root), ...), stdout = TRUE, stderr = FALSE))
  commit <- git("rev-parse", "--short", "HEAD")
  if (length(commit) == 0L) return("unknown")
  changed <- git("status", "--porcelain", "--untracked-files=no")
  paste0(commit, if (length(changed) > 0L) " with uncommitted changes")
}

# The load averages over 1, 5 and 15 minutes: how busy the shared machine was.
load_avg <- function() {
  l <- tryCatch(readLines("/proc/loadavg", n = 1L), error = function(e) "unknown")
  paste(strsplit(l, " ")[[1L]][1:3], collapse = " ")
}

# The definitions of the vignette vignettes/NAME.Rmd that a benchmark times, so that it times the
# vignette's own code rather than a copy: knitr::purl() writes the vignette's R code with a header
# line per chunk, knitr::read_chunk() reads it back by chunk label, and only the chunks named in
# `chunks` (labelled chunks of definitions: functions and operators, no heavy computation) are
# evaluated, in order, in a new environment, which is returned. `root`: the repository (by default
# the one holding the running bench script).
vignette_functions <- function(name, chunks, root = NULL) {
  if (is.null(root)) {
    script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
    root <- if (length(script)) dirname(dirname(normalizePath(script))) else "."
  }
  rmd <- file.path(root, "vignettes", paste0(name, ".Rmd"))
  code <- tempfile(fileext = ".R")
  on.exit(unlink(code))
  knitr::purl(rmd, output = code, documentation = 1, quiet = TRUE)
  knitr::knit_code$restore()           # only this vignette's chunks
  knitr::read_chunk(code)
  env <- new.env(parent = globalenv())
  for (label in chunks) {
    lines <- knitr::knit_code$get(label)
    if (is.null(lines)) stop("vignettes/", name, ".Rmd has no chunk labelled '", label, "'")
    eval(parse(text = lines, keep.source = FALSE), env)
  }
  knitr::knit_code$restore()
  env
}

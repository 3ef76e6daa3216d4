# Calls every .Call entry of rkeops with hostile arguments, in this process: run by test-entries.R
# in a child R process, which must survive (no abort, no crash) and end with the line "scan: done".
#
# Each entry is first called as the package calls it: the functions of the namespace are rewritten
# so that `.Call(entry, ...)` records its arguments, then a corpus of ordinary uses runs. Then each
# recorded call is made again with one argument, or one element of a list argument (to depth 3),
# replaced by each hostile value; entries the corpus did not reach are called with every argument
# hostile. Every call gets a time limit (the engine's interrupt checks end a long one) and any R
# error is fine: only the process ending is a failure. The line before each call goes to the file
# `log` (argument 1), so that a crash names the call that made it.

args <- commandArgs(trailingOnly = TRUE)
log <- file(args[[1L]], open = "w")
# (entries that take a directory are given hostile ones: all in a temporary one)
setwd(tempdir())
Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "cache"))
suppressPackageStartupMessages(library(rkeops))
rkeops_use_cpu()
options(rkeops.progress = FALSE, warn = -1)
ns <- asNamespace("rkeops")
entries <- names(getDLLRegisteredRoutines("rkeops")$.Call)

# --- Recording the package's own calls -------------------------------------------------------
recorded <- new.env()
record_call <- function(.NAME, ...) {
  args <- list(...)
  name <- .NAME$name
  if (length(recorded[[name]]) < 2L) recorded[[name]] <- c(recorded[[name]], list(args))
  do.call(.Call, c(list(.NAME), args))
}
rewrite <- function(e) {
  if (is.call(e)) {
    # (the function itself in the call: the namespace cannot take a new name)
    if (identical(e[[1L]], as.name(".Call"))) e[[1L]] <- record_call
    for (k in seq_along(e)) if (!is.null(e[[k]])) e[[k]] <- rewrite(e[[k]])
  }
  e
}
for (name in ls(ns, all.names = TRUE)) {
  f <- get(name, envir = ns)
  if (is.function(f) && !is.primitive(f) && any(grepl(".Call", deparse(body(f)), fixed = TRUE))) {
    body(f) <- rewrite(body(f))
    unlockBinding(name, ns)
    assign(name, f, envir = ns)
  }
}

# The corpus: ordinary uses that reach each entry (errors are fine: some need a GPU).
set.seed(1)
x <- matrix(runif(30), 10)
y <- matrix(runif(21), 7)
corpus <- list(
  quote(keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))(
    list(x, y, runif(7)))),
  quote(keops_grad(keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)), 0)", c("x = Vi(3)", "y = Vj(3)")), "x")(
    list(x, y, matrix(1, 10)))),
  quote(keops_kernel("Grad(Sum_Reduction(SqDist(x, y), 0), x, e)", c("x = Vi(3)", "y = Vj(3)", "e = Vi(1)"))(
    list(x, y, matrix(1, 10)))),
  quote(keops_program(list(y = keops_map("x * 0.5", "x = Vi(1)"), s = keops_kernel("Sum_Reduction(y, 1)", "y = Vi(1)")),
                      iterations = 3, until = "s", tol = 1e-9, trace = "s")(list(x = matrix(1:5)))),
  quote(keops_program_grad(keops_program(list(y = keops_map("x * x", "x = Vi(1)")), iterations = 2),
                            list(x = matrix(1:5)), of = "y", wrt = "x")),
  quote(keops_program_optim(keops_program(list(loss = keops_kernel("Sum_Reduction(SqDist(x, c), 1)", c("x = Vi(1)", "c = Vi(1)")))),
                             list(x = matrix(0, 5), c = matrix(1:5)), of = "loss", wrt = "x", control = list(maxit = 3))),
  quote(keops_iterate(list(g = keops_kernel("Sum_Reduction(x - g, 1)", c("x = Vi(1)", "g = Vj(1)"))),
                      list(x = matrix(1:5), g = matrix(0, 3)), iterations = 2)),
  quote(keops_knn(x, y, k = 2)),
  quote(keops_knn(x, y, k = 2, prune = FALSE)),
  quote(keops_kmeans(x, 3)),
  quote(grid_cluster(x, 0.3)),
  quote(cluster_ranges_centroids(x, c(1, 1, 2, 2, 1, 2, 1, 1, 2, 2))),
  quote(from_pairs(cbind(c(1, 6), c(5, 10)), cbind(c(1, 4), c(3, 7)), cbind(c(1, 2), c(2, 1)))),
  quote(cell_pair_ranges(sort_grid_cells(x, 0.3), sort_grid_cells(y, 0.3), numeric(10), numeric(7),
                         sort_grid_cells(x, 0.3)$centroids, sort_grid_cells(y, 0.3)$centroids, 0.1)),
  quote(keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))(
    list(array(runif(60), c(10, 3, 2)), array(runif(42), c(7, 3, 2))))),
  quote(keops_kernel("ArgKMin_Reduction(SqDist(x, y), 2, 0)", c("x = Vi(3)", "y = Vj(3)"))(
    list(array(runif(60), c(10, 3, 2)), array(runif(42), c(7, 3, 2))))),
  quote({
    future::plan("sequential")
    rkeops_use_future(blocks = 2)
    on.exit(rkeops_use_future(FALSE))
    keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))(list(x, y))
  }),
  quote(keops_device(x)),
  quote(keops_device_free(structure(list(), class = "keops_device_matrix"))),
  quote(rkeops_sitrep()),
  quote(gpu_launches()),
  quote(clean_rkeops()),
  quote(rkeops_release_gpu_memory()),
  quote(wait_for_kernel_builds()),
  quote(suppressMessages(rkeops_precompile("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)")))),
  quote(shard_unpack(shard_pack(x, 1L, 3L, 4L))),
  quote(column_sums(x)),
  quote(columns_moved(x, c(1, 2, 3), c(1, 0.5, 2))),
  quote(column_squares(x, c(1, 2, 3))),
  quote(labels_as_integers(c(1, 2.5, NA, 3e9))),
  quote(zero_matrix(3, 2)),
  quote(rkeops_use_gpu())
)
# (evaluated in the namespace: the attached package holds the functions as they were)
here <- list2env(list(x = x, y = y), parent = ns)
for (use in corpus) tryCatch(eval(use, here), error = function(e) if (nzchar(Sys.getenv("SCAN_VERBOSE"))) message("corpus: ", conditionMessage(e)))

# Plausible arguments for the entries that the corpus reaches only with a GPU.
fallback <- list(
  wrap__clean_cache = list(file.path(tempdir(), "cache")),
  wrap__keops_device_put = list(x, "float32", 0L),
  wrap__keops_unstack = list(as.numeric(1:20), 10L, 2L, integer(0)),
  wrap__gpu_details = list(0L)
)
for (entry in setdiff(names(fallback), ls(recorded))) recorded[[entry]] <- list(fallback[[entry]])

# --- Hostile values ------------------------------------------------------------------------
hostile <- list(
  NULL, NA, NA_integer_, NA_real_, NaN, Inf, -Inf, -1L, 0L, 0, 1e12, 2^31, .Machine$integer.max, -2^31 + 1,
  "", "x", NA_character_, character(0), numeric(0), integer(0), logical(0), list(), list(NULL), list(a = 1),
  matrix(numeric(0), 0, 3), matrix(NA_real_, 2, 2), matrix(1, 2, 2), TRUE, c(-1, 2.5), 1:3, c(1e12, 1e12),
  function() 1, new.env(), as.raw(1), 1i, quote(x), structure(1, class = "keops_device_matrix")
)
describe <- function(v) paste(deparse(v, width.cutoff = 60L, nlines = 1L), collapse = "")

calls <- 0L
call_entry <- function(entry, args, what) {
  writeLines(sprintf("%s: %s", entry, what), log)
  flush(log)
  calls <<- calls + 1L
  setTimeLimit(elapsed = 2, transient = TRUE)
  on.exit(setTimeLimit(elapsed = Inf))
  tryCatch(invisible(do.call(.Call, c(list(get(entry, envir = ns)), args))), error = function(e) NULL)
}

# Paths to the elements of `x` (a list) to depth `depth`: integer vectors for `[[`.
paths <- function(x, depth = 3L) {
  if (!is.list(x) || depth == 0L) return(list())
  unlist(lapply(seq_along(x), function(k) c(list(k), lapply(paths(x[[k]], depth - 1L), function(p) c(k, p)))),
         recursive = FALSE)
}
replace_at <- function(x, path, value) {
  if (length(path) == 1L) {
    if (is.null(value)) x[path] <- list(NULL) else x[[path]] <- value
    return(x)
  }
  x[[path[1L]]] <- replace_at(x[[path[1L]]], path[-1L], value)
  x
}

for (entry in entries) {
  arity <- getDLLRegisteredRoutines("rkeops")$.Call[[entry]]$numParameters
  if (arity == 0L) {
    call_entry(entry, list(), "no arguments")
    next
  }
  for (h in hostile) call_entry(entry, rep(list(h), arity), paste("every argument", describe(h)))
  for (args in recorded[[entry]]) {
    call_entry(entry, args, "as recorded")
    for (k in seq_len(arity)) {
      for (h in hostile) call_entry(entry, replace_at(args, k, h), sprintf("argument %d = %s", k, describe(h)))
      for (p in paths(args[[k]])) {
        for (h in hostile) {
          call_entry(entry, replace_at(args, c(k, p), h),
                     sprintf("argument %d [[%s]] = %s", k, paste(p, collapse = ","), describe(h)))
        }
      }
    }
  }
}
gc()
writeLines("scan: finished", log)
close(log)
cat(sprintf("scan: %d entries, %d with plausible arguments, %d calls\n", length(entries),
            sum(entries %in% ls(recorded)), calls))
cat("scan: entries called only with hostile arguments:", setdiff(entries, ls(recorded)), "\n")
cat("scan: done\n")

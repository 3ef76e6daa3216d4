# The first call of new formulas from a fresh kernel cache (issue 55): 60 probe formulas (a Gaussian
# sum, LogSumExp, KMin_ArgKMin with K = 10, Max_ArgMax, SumSoftMaxWeight; D = 3, 16, 64; both axes;
# float32 and float64) on N = 1000 x M = 4099 points, each one's first call (the kernels made,
# compiled and loaded) and second call (from memory), and the engine's own "compile or load" time;
# then the 10-NN formula's first call in a new R process that finds it in the disk cache. The
# NVRTC time of each kernel alone: examples/compile_probe (a binary for the GPU host).
# GPU only (the CPU compiles nothing). Usage: R_LIBS=lib Rscript bench/compile_time.R
# [ONLY=<regex on the formula label>, CACHE=<dir> to reuse a cache]
# A fresh kernel cache and HOME (KEEP_HOME=1 keeps HOME: see common.R's fresh_kernel_cache()).
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
source(file.path(local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(f)) dirname(f) else "bench"
}), "common.R"))
cache <- fresh_kernel_cache(Sys.getenv("CACHE", ""))

kinds <- list(
  gaussian = "Sum_Reduction(Exp(-SqDist(x, y)) * b, %d)",
  lse = "LogSumExp_Reduction(b - SqDist(x, y), %d)",
  knn = "KMin_ArgKMin_Reduction(SqDist(x, y), 10, %d)",
  maxarg = "Max_ArgMax_Reduction((x | y), %d)",
  softmax = "SumSoftMaxWeight_Reduction(b - SqDist(x, y), y, %d)"
)
n <- 1000
m <- 4099
set.seed(1)
only <- Sys.getenv("ONLY", "")
emit(sprintf("# first calls of new formulas, fresh cache %s; git %s; %s UTC", cache, git_version(),
             format(Sys.time(), tz = "UTC")))
# A first call runs a fast build (unless RKEOPS_GPU_FAST_COMPILE=0); after the background's
# optimised build is swapped in, a third call says whether the two builds' results are bit-identical.
fast <- Sys.getenv("RKEOPS_GPU_FAST_COMPILE", "1") != "0"
emit("formula | precision | first call s | engine compile or load s | second call ms | fast = optimised bits")
rows <- list()
for (precision in c("float32", "float64")) {
  set_rkeops_options(precision = precision)
  for (kind in names(kinds)) for (d in c(3L, 16L, 64L)) for (axis in 0:1) {
    label <- sprintf("%s D=%d axis=%d", kind, d, axis)
    if (nzchar(only) && !grepl(only, label)) next
    # axis 0 reduces over j (x = Vi); axis 1 over i: the roles of the points swap
    a <- if (axis == 0) c("Vi", "Vj") else c("Vj", "Vi")
    args <- c(sprintf("x = %s(%d)", a[1], d), sprintf("y = %s(%d)", a[2], d), sprintf("b = %s(1)", a[2]))
    op <- keops_kernel(sprintf(kinds[[kind]], axis), args)
    rows_x <- if (axis == 0) n else m
    rows_y <- if (axis == 0) m else n
    x <- matrix(rnorm(rows_x * d), rows_x, d) / sqrt(d)
    y <- matrix(rnorm(rows_y * d), rows_y, d) / sqrt(d)
    b <- matrix(rnorm(rows_y), rows_y, 1)
    first <- system.time(first_result <- op(list(x, y, b)))[["elapsed"]]
    timings <- rkeops:::last_run()$timings
    compile <- if ("compile or load" %in% names(timings)) timings[["compile or load"]] else NA
    second <- system.time(op(list(x, y, b)))[["elapsed"]]
    same <- NA
    if (fast) {
      rkeops:::wait_for_kernel_builds()
      same <- identical(first_result, op(list(x, y, b)))
    }
    emit(sprintf("%s | %s | %.3f | %.3f | %.0f | %s", label, precision, first, compile, 1000 * second, same))
    rows[[length(rows) + 1L]] <- data.frame(label, precision, first, compile, same)
  }
}
all <- do.call(rbind, rows)
emit(sprintf("%d formulas: first call median %.3f s, max %.3f s (%s, %s), total %.1f s; engine compile or load median %.3f s",
             nrow(all), median(all$first), max(all$first), all$label[which.max(all$first)],
             all$precision[which.max(all$first)], sum(all$first), median(all$compile, na.rm = TRUE)))
if (fast) emit(sprintf("fast and optimised builds bit-identical in %d of %d formulas", sum(all$same), nrow(all)))

# The same formula in a new R process: read from the disk cache, not compiled.
script <- tempfile(fileext = ".R")
writeLines(c("suppressPackageStartupMessages(library(rkeops)); rkeops_disable_verbosity(); rkeops_use_gpu(); rkeops_use_float32()",
             "x <- matrix(rnorm(3000), 1000); y <- matrix(rnorm(3 * 4099), 4099); b <- matrix(1, 4099)",
             "args <- c('x = Vi(3)', 'y = Vj(3)', 'b = Vj(1)')",
             "# the device opened by another formula of the cache, then the 10-NN formula's first call",
             "invisible(keops_kernel('Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)', args)(list(x, y, b)))",
             "op <- keops_kernel('KMin_ArgKMin_Reduction(SqDist(x, y), 10, 0)', args)",
             "cat(sprintf('%.3f\\n', system.time(op(list(x, y, b)))[['elapsed']]))"), script)
emit(sprintf("knn D=3 float32, first call in a new R process (from the disk cache): %s s",
             paste(system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE), collapse = " ")))

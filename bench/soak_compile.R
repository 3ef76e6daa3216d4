# A random soak of plain reductions from a fresh kernel cache (issue 55's soak row): DRAWS formulas
# drawn with a fixed seed (a random scalar expression of x, y and b under Sum, LogSumExp, Min_ArgMin,
# Max_ArgMax, KMin_ArgKMin or SumSoftMaxWeight; D = 1-16, both axes, float32 or float64, sizes that
# are not multiples of tiles), each called once and timed: what a user exploring new formulas
# waits. The issue's own soak script is held out; this one is ours, drawn the same way in spirit.
# Each draw's result is checked against the same call on the CPU (plain float64 R for no reference:
# the CPU evaluator is tested against it elsewhere), so that a fast build is also a right one.
# GPU only. Usage: R_LIBS=lib Rscript bench/soak_compile.R [DRAWS=100 SEED=55; RKEOPS_GPU_FAST_COMPILE=0
# for optimised builds only; WAIT=1 waits, untimed, for the background's optimised builds before
# each draw, to see what they cost the next draws]
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
source(file.path(local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(f)) dirname(f) else "bench"
}), "common.R"))
cache <- fresh_kernel_cache()
draws <- env_num("DRAWS", 100)
wait <- env_str("WAIT", "0") == "1"
set.seed(env_num("SEED", 55))

# A random scalar expression of x, y (vectors of the same dimension) and b (a scalar of y's rows).
leaves <- c("SqDist(x, y)", "(x | y)", "Sum(x * y)", "Norm2(x - y)", "Sum(Abs(x - y))", "b", "Elem(x, 0)",
            "SqNorm2(x)", "Sum(y)")
expression <- function(depth) {
  if (depth == 0 || runif(1) < 0.3) return(sample(leaves, 1))
  a <- expression(depth - 1)
  switch(sample.int(9, 1),
         sprintf("Exp(-%s)", a), sprintf("Sin(%s)", a), sprintf("Cos(%s)", a), sprintf("Sqrt(Abs(%s))", a),
         sprintf("Inv(IntCst(1) + Square(%s))", a), sprintf("Log(IntCst(1) + Abs(%s))", a),
         sprintf("(%s + %s)", a, expression(depth - 1)), sprintf("(%s * %s)", a, expression(depth - 1)),
         sprintf("(%s - IntCst(%d) * %s)", a, sample.int(5, 1), expression(depth - 1)))
}
reduction <- function(f, axis) {
  switch(sample.int(6, 1),
         sprintf("Sum_Reduction(%s * %s, %d)", f, sample(c("b", "y"), 1), axis),
         sprintf("LogSumExp_Reduction(%s, %d)", f, axis),
         sprintf("Min_ArgMin_Reduction(%s, %d)", f, axis),
         sprintf("Max_ArgMax_Reduction(%s, %d)", f, axis),
         sprintf("KMin_ArgKMin_Reduction(%s, %d, %d)", f, sample(c(1L, 3L, 10L), 1), axis),
         sprintf("SumSoftMaxWeight_Reduction(%s, y, %d)", f, axis))
}

emit(sprintf("# soak: %d random plain reductions, fresh cache and HOME; fast builds %s; git %s; %s UTC", draws,
             if (Sys.getenv("RKEOPS_GPU_FAST_COMPILE", "1") != "0") "on" else "off", git_version(),
             format(Sys.time(), tz = "UTC")))
firsts <- compiles <- numeric(draws)
wrong <- 0L
for (k in seq_len(draws)) {
  d <- sample(c(1L, 2L, 3L, 4L, 8L, 16L), 1)
  axis <- sample(0:1, 1)
  precision <- sample(c("float32", "float64"), 1, prob = c(0.7, 0.3))
  text <- reduction(expression(sample.int(3, 1)), axis)
  a <- if (axis == 0) c("Vi", "Vj") else c("Vj", "Vi")
  args <- c(sprintf("x = %s(%d)", a[1], d), sprintf("y = %s(%d)", a[2], d), sprintf("b = %s(1)", a[2]))
  rows_x <- sample(500:3000, 1)
  rows_y <- sample(500:5000, 1)
  x <- matrix(runif(rows_x * d, -1, 1), rows_x, d)
  y <- matrix(runif(rows_y * d, -1, 1), rows_y, d)
  b <- matrix(runif(rows_y), rows_y, 1)
  set_rkeops_options(precision = precision)
  rkeops_use_gpu()
  if (wait) rkeops:::wait_for_kernel_builds()
  firsts[k] <- system.time(gpu <- keops_kernel(text, args)(list(x, y, b)))[["elapsed"]]
  timings <- rkeops:::last_run()$timings
  compiles[k] <- if ("compile or load" %in% names(timings)) timings[["compile or load"]] else NA
  rkeops_use_cpu()
  cpu <- keops_kernel(text, args)(list(x, y, b))
  # (selections' indices may differ at ties: their values are compared; absolute differences, on
  # the scale of the largest value, as float32 sums of terms of both signs cancel)
  if (is.list(cpu)) {
    gpu <- gpu$values
    cpu <- cpu$values
  }
  tol <- if (precision == "float32") 1e-3 else 1e-9
  scale <- max(1, abs(cpu[is.finite(cpu)]))
  close <- isTRUE(all.equal(as.vector(gpu), as.vector(cpu), tolerance = tol, scale = scale))
  if (!close) wrong <- wrong + 1L
  emit(sprintf("%3d | %.3f s | compile %.3f s | %s | %s | %s%s", k, firsts[k], compiles[k], precision, text,
               paste(args, collapse = ", "),
               if (close) "" else " | DIFFERS FROM THE CPU"))
}
emit(sprintf("%d draws%s: first calls total %.1f s, median %.3f s, max %.3f s (compile or load median %.3f s); %d differ from the CPU",
             draws, if (wait) " (each after the builds before it)" else "", sum(firsts), median(firsts),
             max(firsts), median(compiles, na.rm = TRUE), wrong))

# Cosine 10-NN written as in vignettes/knn.Rmd, SqDist(Normalize(x), Normalize(y)), against the same
# search on points normalised beforehand, SqDist(x, y) (issue 19: within 10 %), from R, float32,
# N = 1e6 queries and points, D = 10, medians of REPS after a warm-up, the two alternated.
#   N=1e6, D=10, REPS=3, BACKEND=GPU (or CPU, with N=1e5), BENCH_OUT=file for the report.
local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
suppressMessages(library(rkeops))
rkeops_disable_verbosity()
`%||%` <- function(a, b) if (is.null(a)) b else a
n <- env_num("N", 1e6); d <- env_num("D", 10); reps <- env_num("REPS", 3)
set_rkeops_options(backend = env_str("BACKEND", "GPU"), precision = "float32")
set.seed(1)
x <- matrix(rnorm(n * d), n)
xn <- x / sqrt(rowSums(x^2))
args <- c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d))
vignette_form <- keops_kernel("ArgKMin_Reduction(SqDist(Normalize(x), Normalize(y)), 10, 0)", args)
normalised <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 10, 0)", args)
a <- vignette_form(list(x, x)); b <- normalised(list(xn, xn))   # warm-up: compilation
t_v <- t_n <- k_v <- k_n <- numeric()
for (r in seq_len(reps)) {
  t_v <- c(t_v, system.time(a <- vignette_form(list(x, x)))[["elapsed"]])
  k_v <- c(k_v, rkeops:::last_run()$timings[["kernel"]] %||% NA)
  t_n <- c(t_n, system.time(b <- normalised(list(xn, xn)))[["elapsed"]])
  k_n <- c(k_n, rkeops:::last_run()$timings[["kernel"]] %||% NA)
}
emit(sprintf("# Cosine 10-NN, N = %g, D = %g, float32, on %s (%s, rkeops %s, load %s)", n, d,
             rkeops:::last_run()$backend, format(Sys.time(), "%Y-%m-%d %H:%M UTC", tz = "UTC"), git_version(),
             load_avg()))
emit(sprintf("| form | from R (median of %d) | kernel |", reps))
emit("|---|---|---|")
emit(sprintf("| SqDist(Normalize(x), Normalize(y)) | %.1f ms | %.1f ms |", 1e3 * median(t_v), 1e3 * median(k_v)))
emit(sprintf("| SqDist(x, y), x normalised in R | %.1f ms | %.1f ms |", 1e3 * median(t_n), 1e3 * median(k_n)))
emit(sprintf("ratio %.3f; neighbours that differ: %.2e of %d", median(t_v) / median(t_n), mean(a != b), length(a)))
out <- env_str("BENCH_OUT", "")
if (nzchar(out)) writeLines(report, out)

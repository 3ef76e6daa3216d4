# Several GPUs sharing each reduction (issue 18) against one GPU, from R, float32, same data, same run:
# a Gaussian sum N = M (D = 3), 10 nearest neighbours of N points (D = 3, brute force), and a short
# output (N = 100 against M = 10 N: parts of the reduced range, merged). Medians of REPS runs after a
# warm-up, one GPU and the shared GPUs alternated.
#   GPUS=0,1 (default: every GPU found; one GPU is listed twice, which only measures the cost of
#   splitting), N=1e7 (the goals' size; 2e6 for a quick run), REPS=3, BENCH_OUT=file for the report.
local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
suppressMessages(library(rkeops))
rkeops_disable_verbosity()
count <- rkeops:::rust_result(.Call(rkeops:::wrap__gpu_count))$count
if (count == 0L) stop("no GPU found: ", rkeops:::gpu_status(0L)$message)
gpus <- as.integer(strsplit(env_str("GPUS", paste(if (count >= 2L) seq_len(count) - 1L else c(0L, 0L), collapse = ",")), ",")[[1]])
n <- env_num("N", 1e7)
reps <- env_num("REPS", 3)
set_rkeops_options(backend = "GPU", precision = "float32")
emit(sprintf("# Several GPUs: GPUs %s against GPU %d, N = %g, float32, medians of %d (%s, rkeops %s, load %s)",
             paste(gpus, collapse = ", "), gpus[1], n, reps, format(Sys.time(), "%Y-%m-%d %H:%M UTC", tz = "UTC"),
             git_version(), load_avg()))
emit(rkeops:::gpu_status(unique(gpus))$message)

set.seed(1)
x <- matrix(runif(3 * n), n, 3); b <- matrix(runif(n), n, 1)
gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 10, 0)", c("x = Vi(3)", "y = Vj(3)"))
m_short <- 10 * n
y_short <- matrix(runif(3 * m_short), m_short, 3); b_short <- matrix(runif(m_short), m_short, 1)
cases <- list(
  list(name = sprintf("Gaussian sum, N = M = %g", n), run = function() gauss(list(x, x, b))),
  list(name = sprintf("10-NN, N = %g (brute force)", n), run = function() knn(list(x, x))),
  list(name = sprintf("Gaussian sum, N = 100, M = %g", m_short), run = function() gauss(list(x[1:100, ], y_short, b_short)))
)
emit("| case | one GPU | shared | speed-up | max relative difference | phases of the shared call (ms) |")
emit("|---|---|---|---|---|---|")
for (case in cases) {
  on <- function(device) {
    set_rkeops_options(device = device)
    t <- system.time(value <- case$run())[["elapsed"]]
    list(t = t, value = value, run = rkeops:::last_run())
  }
  one <- on(gpus[1]); shared <- on(gpus)   # warm-up (compilation), and the results compared
  diff <- if (is.integer(one$value)) mean(one$value != shared$value) else
    max(abs(one$value - shared$value)) / max(abs(one$value))
  t_one <- t_shared <- numeric()
  for (r in seq_len(reps)) {
    t_one <- c(t_one, on(gpus[1])$t)
    s <- on(gpus); t_shared <- c(t_shared, s$t)
  }
  phases <- paste(names(s$run$timings), round(1e3 * s$run$timings, 1), collapse = ", ")
  emit(sprintf("| %s | %.3f s | %.3f s | %.2f x | %.1e%s | %s |", case$name, median(t_one), median(t_shared),
               median(t_one) / median(t_shared), diff, if (is.integer(one$value)) " (indices differing)" else "",
               phases))
}
emit("shared on: ", s$run$backend)
out <- env_str("BENCH_OUT", "")
if (nzchar(out)) writeLines(report, out)

# Several GPUs sharing each reduction (issues 18 and 20) against one GPU, from R, float32, same data,
# same run. CASES (separated by commas, default gauss,knn,short):
#   gauss  Gaussian sum, N = M (D = 3)
#   knn    10 nearest neighbours of N points (D = 3, brute force)
#   short  Gaussian sum, N = 100 against M_SHORT (default 10 N): parts of the reduced range, merged
#   wide   Gaussian sum, WIDE_N output rows against WIDE_M (default 4e6 x 1e8): a band of the rows of
#          the N = M = 1e8 problem, whose whole takes ~74 min on one H200, more than a device call
#          may run; every count of GPUs computes the same band, each GPU its share of its rows against
#          all of M, so the speed-up is the whole problem's but for its fixed costs (the conversion and
#          upload of y, seconds against the whole's minutes)
# GPUS=0,1,2,3 the list (default: every GPU found; where there is one, it is listed twice, which only
# measures the cost of splitting); COUNTS=1,2,4 how many of the list's first GPUs share each call
# (default: 1 and the whole list); N=1e7 (the goals' size; 2e6 for a quick run); REPS=3: medians of
# REPS runs, the counts alternated, after a warm-up on 2000 rows (the compilation); results compared
# with those of the first count; BENCH_OUT=file for the report.
local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
suppressMessages(library(rkeops))
rkeops_disable_verbosity()
count <- rkeops:::rust_result(.Call(rkeops:::wrap__gpu_count))$count
if (count == 0L) stop("no GPU found: ", rkeops:::gpu_status(0L)$message)
ordinals <- function(text) as.integer(strsplit(text, ",")[[1]])
gpus <- ordinals(env_str("GPUS", paste(if (count >= 2L) seq_len(count) - 1L else c(0L, 0L), collapse = ",")))
counts <- ordinals(env_str("COUNTS", paste(unique(c(1L, length(gpus))), collapse = ",")))
if (any(counts < 1L | counts > length(gpus))) stop("COUNTS must be between 1 and the ", length(gpus), " GPUs listed")
n <- env_num("N", 1e7)
reps <- env_num("REPS", 3)
chosen <- strsplit(env_str("CASES", "gauss,knn,short"), ",")[[1]]
set_rkeops_options(backend = "GPU", precision = "float32")
emit(sprintf("# Several GPUs: the first %s of GPUs %s, N = %g, float32, medians of %d (%s, rkeops %s, load %s)",
             paste(counts, collapse = ", "), paste(gpus, collapse = ", "), n, reps,
             format(Sys.time(), "%Y-%m-%d %H:%M UTC", tz = "UTC"), git_version(), load_avg()))
emit(rkeops:::gpu_status(unique(gpus))$message)

# Uniform points as an n x d matrix, made without a copy (at 1e9 rows a copy is 24 GB).
points <- function(n, d) {
  v <- runif(d * n)
  dim(v) <- c(n, d)
  v
}
gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
knn <- keops_kernel("ArgKMin_Reduction(SqDist(x, y), 10, 0)", c("x = Vi(3)", "y = Vj(3)"))
# Each case makes its data when it is chosen, and runs on all of it or on its first 2000 rows.
first <- function(a, small) if (small) a[seq_len(min(nrow(a), 2000)), , drop = FALSE] else a
cases <- list(
  gauss = function() {
    x <- points(n, 3); b <- points(n, 1)
    list(name = sprintf("Gaussian sum, N = M = %g", n),
         run = function(small) gauss(list(first(x, small), first(x, small), first(b, small))))
  },
  knn = function() {
    x <- points(n, 3)
    list(name = sprintf("10-NN, N = %g (brute force)", n), run = function(small) knn(list(first(x, small), first(x, small))))
  },
  short = function() {
    m <- env_num("M_SHORT", 10 * n)
    x <- points(100, 3); y <- points(m, 3); b <- points(m, 1)
    list(name = sprintf("Gaussian sum, N = 100, M = %g", m),
         run = function(small) gauss(list(x, first(y, small), first(b, small))))
  },
  wide = function() {
    rows <- env_num("WIDE_N", 4e6); m <- env_num("WIDE_M", 1e8)
    x <- points(rows, 3); y <- points(m, 3); b <- points(m, 1)
    list(name = sprintf("Gaussian sum, N = %g of M = %g", rows, m),
         run = function(small) gauss(list(first(x, small), first(y, small), first(b, small))))
  }
)
unknown <- setdiff(chosen, names(cases))
if (length(unknown)) stop("CASES: unknown ", paste(unknown, collapse = ", "), "; known: ", paste(names(cases), collapse = ", "))

phases <- function(run) paste(names(run$timings), round(1e3 * run$timings, 1), collapse = ", ")
label <- function(k) sprintf("%d GPU%s", k, if (k > 1) "s" else "")
emit("| case | ", paste(vapply(counts, label, ""), collapse = " | "), " | speed-ups | results against ",
     label(counts[1]), " | phases of the calls on ", label(counts[1]), " and ", label(max(counts)), " (ms) |")
emit("|", strrep("---|", length(counts) + 4))
for (name in chosen) {
  case <- cases[[name]]()
  on <- function(k, small = FALSE) {
    set_rkeops_options(device = gpus[seq_len(k)])
    t <- system.time(value <- case$run(small))[["elapsed"]]
    list(t = t, value = value, run = rkeops:::last_run())
  }
  for (k in counts) on(k, small = TRUE)
  times <- matrix(NA_real_, reps, length(counts))
  values <- vector("list", length(counts))
  for (r in seq_len(reps)) {
    for (j in seq_along(counts)) {
      got <- on(counts[j])
      times[r, j] <- got$t
      if (r == 1L) values[[j]] <- got$value
      if (j == 1L) runs_first <- got$run
      if (counts[j] == max(counts)) last <- got$run
    }
  }
  differences <- vapply(values[-1], function(v) {
    if (is.integer(v)) mean(v != values[[1]]) else max(abs(v - values[[1]])) / max(abs(values[[1]]))
  }, 0)
  results <- if (length(differences) == 0L) "" else
    sprintf("%s %.1e", if (is.integer(values[[1]])) "indices differing:" else "max relative difference:", max(differences))
  t <- apply(times, 2, median)
  emit(sprintf("| %s | %s | %s | %s | %s |", case$name, paste(sprintf("%.3f s", t), collapse = " | "),
               paste(sprintf("%.2f x", t[1] / t), collapse = ", "), results,
               paste(phases(runs_first), phases(last), sep = "; ")))
  rm(case, values)
  invisible(gc())
}
emit("the largest count ran on: ", last$backend)
out <- env_str("BENCH_OUT", "")
if (nzchar(out)) writeLines(report, out)

# keops_kmeans() on the workers of plan(multisession, workers = W) (rkeops_use_future(): the points
# kept on the workers, each shard sent once) against one process computing with W threads, on the
# CPU, the same data and start (issue 56's CPU row: >= 0.9 x, no loss). Usage, from the repository:
#   make bench-kmeans-future [KM_N=4e6 KM_D=2 KM_K=50 KM_ITER=10 WORKERS=2 REPS=3]
# Two cases: from given centres (Lloyd's passes alone) and from K (k-means++ seeding, in this
# process in both). Medians of REPS runs after a warm-up of each, the two alternated; the plan's
# start-up timed apart. Reported: the labels that differ from the one process's (in float32 the
# shards' sums, added in another order, may move a centre by a rounding and a point at a near-tie
# with it; the tests check identical fits in float64 and on separated clusters).
suppressPackageStartupMessages(library(rkeops))
local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
for (p in c("future", "future.apply")) {
  if (!requireNamespace(p, quietly = TRUE)) stop("bench/kmeans_future.R needs the R package ", p)
}
n <- env_num("KM_N", 4e6)
d <- env_num("KM_D", 2)
k <- env_num("KM_K", 50)
iter <- env_num("KM_ITER", 10)
workers <- env_num("WORKERS", 2)
reps <- env_num("REPS", 3)

rkeops_use_cpu(ncore = workers)
rkeops_disable_verbosity()
set.seed(1)
blobs <- matrix(runif(k * d, 0, 100), k, d)
x <- blobs[sample(k, n, replace = TRUE), , drop = FALSE] + matrix(rnorm(n * d, sd = 3), n, d)
start <- x[sample(n, k), , drop = FALSE]

options(socketOptions = "no-delay")
t_plan <- system.time(future::plan(future::multisession, workers = workers))[["elapsed"]]
emit(sprintf("# keops_kmeans() N = %g, D = %d, K = %d, iter.max = %d: one process with %d threads vs plan(multisession, workers = %d); git %s; %s UTC; load %s",
             n, d, k, iter, workers, workers, git_version(), format(Sys.time(), tz = "UTC"), load_avg()))
emit(sprintf("plan start-up (not in the times): %.2f s", t_plan))

one_process <- function(centers) {
  set.seed(7)
  suppressWarnings(keops_kmeans(x, centers, iter.max = iter))
}
on_workers <- function(centers) {
  old <- rkeops_use_future()
  on.exit(do.call(rkeops_use_future, old))
  set.seed(7)
  suppressWarnings(keops_kmeans(x, centers, iter.max = iter))
}
emit("case | one process s | workers s | ratio (one / workers) | shards sent / steps | labels that differ | iterations | largest centre difference")
for (case in c("given centres", "k-means++")) {
  centers <- if (case == "given centres") start else k
  invisible(one_process(centers))
  invisible(on_workers(centers))
  t_one <- t_split <- numeric(reps)
  for (r in seq_len(reps)) {
    t_one[r] <- system.time(a <- one_process(centers))[["elapsed"]]
    t_split[r] <- system.time(b <- on_workers(centers))[["elapsed"]]
  }
  shards <- rkeops:::.rkeops_env$last_shards
  emit(sprintf("%s | %.3f (%s) | %.3f (%s) | %.2f | %d / %d | %d of %g | %d / %d | %.2g", case, median(t_one),
               paste(sprintf("%.2f", t_one), collapse = " "), median(t_split), paste(sprintf("%.2f", t_split), collapse = " "),
               median(t_one) / median(t_split), shards$sent, shards$steps, sum(a$cluster != b$cluster), n, a$iter, b$iter,
               max(abs(a$centers - b$centers))))
}
future::plan(future::sequential)

# keops_kmeans() seeded by k-means++ against stats::kmeans() seeded by random rows, in one run on
# this machine: N = 1e6 points in D = 2 (50 blobs), K = 50, 10 iterations, CPU, float32; medians of
# REPS runs after a warm-up, ours and the peer's runs alternated. Also the k-means++ seeding alone,
# and each one's total within-cluster sum of squares (its median over the runs). Then both from the
# SAME start (K rows drawn at random), float32 and float64: the Lloyd iterations alone, with the
# fraction of points whose labels are equal.
# Usage: R_LIBS=lib Rscript bench/kmeans-seeding.R [REPS=3 N=1e6 K=50 in the environment]
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
source(file.path(local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(f)) dirname(f) else "bench"
}), "common.R"))
rkeops_use_cpu()
rkeops_use_float32()
reps <- env_num("REPS", 3)
n <- env_num("N", 1e6)
k <- env_num("K", 50)

set.seed(1)
blobs <- matrix(runif(100, 0, 10), 50, 2)
x <- blobs[sample(50, n, replace = TRUE), ] + matrix(rnorm(2 * n, sd = 0.4), n, 2)
ours <- function() suppressWarnings(keops_kmeans(x, k, iter.max = 10))
peer <- function() suppressWarnings(kmeans(x, k, iter.max = 10, algorithm = "Lloyd"))
seeding <- function() rkeops:::kmeans_pp(x - rep(colMeans(x), each = n), k)

emit("# keops_kmeans(x, K) (k-means++) against stats::kmeans(x, K, algorithm = \"Lloyd\") (bench/kmeans-seeding.R)")
emit(sprintf("CPU (%d cores), float32, N=%g D=2 K=%g iter.max=10, REPS=%d; git %s; %s UTC; load %s",
             parallel::detectCores(), n, k, reps, git_version(), format(Sys.time(), tz = "UTC"), load_avg()))
invisible(ours()); invisible(peer()); invisible(seeding())  # warm-up (kernels made, memory touched)
# elapsed and CPU (user + system, all threads) seconds of one call, and its value
timed <- function(f) {
  t <- system.time(value <- f())
  list(value = value, elapsed = t[["elapsed"]], cpu = t[["user.self"]] + t[["sys.self"]])
}
runs <- lapply(seq_len(reps), function(r) list(ours = timed(ours), peer = timed(peer), seeding = timed(seeding)))
med <- function(who, what) median(vapply(runs, function(run) run[[who]][[what]], 0))
wss <- function(who) median(vapply(runs, function(run) run[[who]]$value$tot.withinss, 0))
emit(sprintf("keops_kmeans(x, %g): %.3f s (CPU %.3f s), of which k-means++ seeding %.3f s (CPU %.3f s)",
             k, med("ours", "elapsed"), med("ours", "cpu"), med("seeding", "elapsed"), med("seeding", "cpu")))
emit(sprintf("stats::kmeans(x, %g): %.3f s (CPU %.3f s); stats / ours, elapsed: %.2f, CPU: %.2f",
             k, med("peer", "elapsed"), med("peer", "cpu"), med("peer", "elapsed") / med("ours", "elapsed"),
             med("peer", "cpu") / med("ours", "cpu")))
emit(sprintf("tot.withinss (medians): keops_kmeans %.5g, stats::kmeans %.5g", wss("ours"), wss("peer")))

# The same start for both: only the iterations are compared.
start <- x[sample(n, k), ]
for (precision in c("float32", "float64")) {
  set_rkeops_options(precision = precision)
  ours_same <- function() suppressWarnings(keops_kmeans(x, start, iter.max = 10))
  peer_same <- function() suppressWarnings(kmeans(x, start, iter.max = 10, algorithm = "Lloyd"))
  invisible(ours_same())
  same <- lapply(seq_len(reps), function(r) list(ours = timed(ours_same), peer = timed(peer_same)))
  med_same <- function(who, what) median(vapply(same, function(run) run[[who]][[what]], 0))
  fits <- same[[1L]]
  emit(sprintf("same start, %s: keops_kmeans %.3f s (CPU %.3f s, %d iterations), stats::kmeans %.3f s (CPU %.3f s, %d iterations): stats / ours, elapsed %.2f, CPU %.2f; labels equal for %.6f of the points",
               precision, med_same("ours", "elapsed"), med_same("ours", "cpu"), fits$ours$value$iter,
               med_same("peer", "elapsed"), med_same("peer", "cpu"), fits$peer$value$iter,
               med_same("peer", "elapsed") / med_same("ours", "elapsed"), med_same("peer", "cpu") / med_same("ours", "cpu"),
               mean(fits$ours$value$cluster == fits$peer$value$cluster)))
}
rkeops_use_float32()
emit(sprintf("load at the end %s", load_avg()))

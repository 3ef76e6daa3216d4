# keops_knn() of 1e6 uniform points (D = 3, k = 10, float32, the default pruned search) with two
# installed builds of rkeops, alternated process by process in one run: the cost of centring the
# points before the search (issue 52). Each process: a warm-up, then `reps` timed calls.
#   Rscript bench/knn_centred.R <old lib> <new lib> [rounds = 2] [reps = 3] [offset = 0]
args <- commandArgs(TRUE)
if (length(args) == 0L || args[1] == "--child") {
  # the child: one build, prints elapsed seconds and the engine's plan phase of each call
  .libPaths(c(args[2], .libPaths()))
  suppressMessages(library(rkeops))
  set.seed(42)
  x <- matrix(runif(3e6), ncol = 3) + as.numeric(args[4])
  invisible(keops_knn(x, k = 10))
  for (r in seq_len(as.integer(args[3]))) {
    t <- system.time(nn <- keops_knn(x, k = 10))[["elapsed"]]
    tm <- rkeops:::last_run()$timings
    cat(sprintf("%.4f %.4f %d\n", t, sum(unlist(tm[grepl("plan", names(tm))])), rkeops:::last_run()$redone))
  }
  quit(save = "no")
}
libs <- c(old = args[1], new = args[2])
rounds <- if (length(args) >= 3) as.integer(args[3]) else 2L
reps <- if (length(args) >= 4) as.integer(args[4]) else 3L
offset <- if (length(args) >= 5) args[5] else "0"
me <- normalizePath(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)))
res <- list(old = NULL, new = NULL)
for (r in seq_len(rounds)) for (b in names(libs)) {
  out <- system2("Rscript", c(me, "--child", libs[[b]], reps, offset), stdout = TRUE)
  v <- do.call(rbind, lapply(strsplit(out, " "), as.numeric))
  res[[b]] <- rbind(res[[b]], v)
  cat(b, "round", r, ":", sprintf("%.3f", v[, 1]), "s\n")
}
med <- sapply(res, function(v) median(v[, 1]))
plan <- sapply(res, function(v) median(v[, 2]))
cat(sprintf("keops_knn 1e6 x 3, k = 10, offset %s: median %s: old %.3f s, new %.3f s, new/old %.4f (plan phases %.3f / %.3f s; redone %s / %s)\n",
            offset, paste(nrow(res$old), "calls"), med["old"], med["new"], med["new"] / med["old"],
            plan["old"], plan["new"], paste(unique(res$old[, 3]), collapse = ","), paste(unique(res$new[, 3]), collapse = ",")))

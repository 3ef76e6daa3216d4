# Programs with their sums over the same pairs fused into one reduction (issue 54,
# `RKEOPS_FUSE_STEPS`, on by default) and with each step apart, alternated in one process: each case
# the median of REPS runs of each after a warm-up, with the GPU launches of one run
# (rkeops:::gpu_launches()) and a value of the result (equal up to float summation order).
#   make bench-fusion [BACKEND=GPU|CPU] [REPS=3]
# Cases: keops_landmarks() on seed 003's setup (1847 landmarks, nt = 40, 400 L-BFGS iterations; on
# the CPU 200 landmarks, nt = 10, 10 iterations), with optim() and with the engine's L-BFGS, and one
# evaluation of its cost and gradient (keops_program_grad() of the shooting program).
suppressPackageStartupMessages(library(rkeops))
rkeops_disable_verbosity()
source(file.path(local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  if (length(f)) dirname(f) else "bench"
}), "common.R"))
backend <- use_backend("GPU")
reps <- env_num("REPS", 3)
gpu <- backend == "GPU"

# One run of f() with the steps fused or apart: its seconds, GPU launches and result.
run_with <- function(fuse, f) {
  Sys.setenv(RKEOPS_FUSE_STEPS = if (fuse) "1" else "0")
  on.exit(Sys.unsetenv("RKEOPS_FUSE_STEPS"))
  launches <- rkeops:::gpu_launches()
  t <- system.time(v <- f())[["elapsed"]]
  list(seconds = t, launches = rkeops:::gpu_launches() - launches, value = v)
}

case <- function(name, f, value, per = function(v) 1) {
  runs <- list(fused = list(), apart = list())
  for (fuse in c(TRUE, FALSE)) run_with(fuse, f)                # warm-up (kernels compiled)
  for (r in seq_len(reps)) {
    for (fuse in if (r %% 2) c(TRUE, FALSE) else c(FALSE, TRUE)) {
      k <- if (fuse) "fused" else "apart"
      runs[[k]][[r]] <- run_with(fuse, f)
    }
  }
  for (k in names(runs)) {
    ms <- 1000 * vapply(runs[[k]], `[[`, 0, "seconds")
    last <- runs[[k]][[reps]]
    emit(sprintf("%s | %s | %.1f ms (%s) | %.0f launches, %.1f per evaluation | %.8g", name, k, median(ms),
                 paste(sprintf("%.1f", ms), collapse = " "), last$launches, last$launches / per(last$value),
                 value(last$value)))
  }
  m <- vapply(runs, function(x) median(vapply(x, `[[`, 0, "seconds")), 0)
  emit(sprintf("%s | fused / apart | %.3f", name, m[["fused"]] / m[["apart"]]))
}

bench_dir <- dirname(sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE)))
for (e in parse(file.path(if (length(bench_dir) && nzchar(bench_dir)) bench_dir else "bench", "iterative.R"))) {
  if (is.call(e) && identical(e[[1]], as.name("<-")) && as.character(e[[2]])[1] == "landmark_data") eval(e, globalenv())
}
d <- if (gpu) landmark_data() else landmark_data(200)
nt <- if (gpu) 40 else 10
it <- if (gpu) 400 else 10
evaluations <- function(v) v$counts[[1L]]
for (optimizer in c("optim", "engine")) {
  case(sprintf("keops_landmarks %d pts nt=%d %d it. optimizer=%s", nrow(d$q0), nt, it, optimizer),
       function() keops_landmarks(d$q0, d$target, sigma = 1.5, nt = nt, lambda = 5e5, iter.max = it,
                                  optimizer = optimizer),
       function(v) v$value, per = evaluations)
}
# one evaluation: the shooting program's loss and its gradient in p0 (at a p0 of the fit's scale)
shooting <- rkeops:::landmarks_steps(3)
program <- keops_program(shooting$steps, iterations = nt, output = c("q", "loss"))
set.seed(5)
input <- list(q = d$q0, target = d$target, s = 1 / (2 * 1.5^2), dt = 1 / nt,
              p = matrix(rnorm(length(d$q0), sd = 0.1), nrow(d$q0)))
evaluate <- function() keops_program_grad(program, input, of = "loss", wrt = "p")
case(sprintf("one evaluation (keops_program_grad) %d pts nt=%d, 20 calls", nrow(d$q0), nt),
     function() for (k in 1:20) g <- evaluate(), function(v) sum(evaluate()$p), per = function(v) 20)

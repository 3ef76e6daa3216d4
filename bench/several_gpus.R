# Several GPUs sharing each reduction (issues 18 and 20) against one GPU, from R, float32, same data,
# same run. CASES (separated by commas, default gauss,knn,short):
#   gauss  Gaussian sum, N = M (D = 3)
#   knn    10 nearest neighbours of N points (D = 3, brute force)
#   short  Gaussian sum, N = 100 against M_SHORT (default 10 N): parts of the reduced range, merged
#   kmeans, gmm, sinkhorn, knnfun, krige   the algorithm functions (sizes below, in `cases`)
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
  # The algorithm functions (issue 56): their programs spread over the GPUs (K-means, EM, Sinkhorn),
  # or their reductions shared (K-NN, kriging's conjugate gradients); KM_N, GMM_N, SK_N, KNN_N, KR_N
  # their sizes (default: the issue's goals'), from fixed starts (no seeding) so that every count
  # runs the same iterations.
  kmeans = function() {
    km_n <- env_num("KM_N", 1e8); d <- env_num("KM_D", 10); k <- env_num("KM_K", 1000)
    x <- points(km_n, d) - 0.5
    start <- x[sample.int(km_n, k), , drop = FALSE]
    list(name = sprintf("keops_kmeans(), %g x %d, K = %d, 10 passes", km_n, d, k),
         run = function(small) keops_kmeans(first(x, small), start, iter.max = 10)$cluster)
  },
  gmm = function() {
    gmm_n <- env_num("GMM_N", 2e7); d <- env_num("GMM_D", 5); g <- env_num("GMM_G", 1000)
    x <- points(gmm_n, d)
    init <- list(pro = rep(1 / g, g), mean = t(x[sample.int(gmm_n, g), , drop = FALSE]),
                 variance = list(sigma = array(diag(0.01, d), c(d, d, g))))
    list(name = sprintf("keops_gmm() VVI, %g x %d, G = %d, 10 iterations", gmm_n, d, g),
         run = function(small) keops_gmm(first(x, small), g, init = init, iter.max = 10, tol = 0)$loglik)
  },
  sinkhorn = function() {
    sk_n <- env_num("SK_N", 1e6)
    x <- points(sk_n, 3); y <- points(sk_n, 3) + 0.1
    list(name = sprintf("keops_sinkhorn(), %g x %g, D = 3, dense (multiscale = FALSE), tol = NULL", sk_n, sk_n),
         run = function(small) as.vector(keops_sinkhorn(first(x, small), first(y, small), multiscale = FALSE, tol = NULL)))
  },
  knnfun = function() {
    knn_n <- env_num("KNN_N", 1e7)
    x <- points(knn_n, 3)
    list(name = sprintf("keops_knn(), %g points, D = 3, k = 10", knn_n),
         run = function(small) keops_knn(first(x, small), k = 10)$index)
  },
  krige = function() {
    kr_n <- env_num("KR_N", 1e6)
    x <- points(kr_n, 2); z <- sin(6 * x[, 1]) + cos(4 * x[, 2]) + rnorm(kr_n, sd = 0.1)
    new <- points(1e4, 2)
    list(name = sprintf("keops_krige() %g points, D = 2, fit + predict 1e4", kr_n),
         run = function(small) {
           rows <- if (small) seq_len(2000) else seq_len(kr_n)
           predict(keops_krige(x[rows, , drop = FALSE], z[rows], range = 0.1, nugget = 0.01), new)
         })
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
    t <- system.time(logged <- rkeops:::phase_totals(suppressWarnings(case$run(small))))[["elapsed"]]
    program <- logged$phases[intersect(c("upload once", "loop", "download once"), names(logged$phases))]
    list(t = t, value = logged$value, run = rkeops:::last_run(), loop = if (length(program)) sum(program) else NA)
  }
  # (the warm-up spreads its programs too, so that each GPU's kernels are loaded before the timing)
  Sys.setenv(RKEOPS_SPREAD_ROWS = "500")
  for (k in counts) on(k, small = TRUE)
  Sys.unsetenv("RKEOPS_SPREAD_ROWS")
  times <- matrix(NA_real_, reps, length(counts))
  loops <- matrix(NA_real_, reps, length(counts))
  values <- vector("list", length(counts))
  for (r in seq_len(reps)) {
    for (j in seq_along(counts)) {
      got <- on(counts[j])
      times[r, j] <- got$t
      loops[r, j] <- got$loop
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
  loop <- apply(loops, 2, median)
  # (a program's time in the engine, where the case runs one: its upload, iterations and results,
  # without the R around them)
  loop_note <- if (all(is.na(loop))) "" else
    sprintf("; programs %s (%s)", paste(sprintf("%.3f s", loop), collapse = ", "),
            paste(sprintf("%.2f x", loop[1] / loop), collapse = ", "))
  emit(sprintf("| %s | %s | %s | %s | %s%s |", case$name, paste(sprintf("%.3f s", t), collapse = " | "),
               paste(sprintf("%.2f x", t[1] / t), collapse = ", "), results,
               paste(phases(runs_first), phases(last), sep = "; "), loop_note))
  rm(case, values)
  invisible(gc())
}
emit("the largest count ran on: ", last$backend)
out <- env_str("BENCH_OUT", "")
if (nzchar(out)) writeLines(report, out)

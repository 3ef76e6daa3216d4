# Block-sparse reductions (issue 15): what ranges cost and what they save, and keops_knn()
# against brute force and the R peers. Run: make bench-ranges (BACKEND=CPU|GPU, N=1e6, KNN_N=N,
# REPS=3).
suppressMessages(library(rkeops))
backend <- Sys.getenv("BACKEND", "CPU")
N <- as.numeric(Sys.getenv("N", "1e6"))
reps <- as.integer(Sys.getenv("REPS", "3"))
set_rkeops_options(backend = backend)
median_time <- function(f) { f(); median(replicate(reps, system.time(f())[["elapsed"]])) }
cat(sprintf("backend %s, N = M = %g, float32, medians of %d after a warm-up, %s\n", backend, N, reps, format(Sys.time())))

# Gaussian sum over 1e3 blocks of each index: ranges keeping every block, and keeping 10 % of them
# (each block of i with the 10 % of blocks of j nearest in index, a band).
set.seed(1)
x <- matrix(runif(3 * N), ncol = 3); y <- matrix(runif(3 * N), ncol = 3); b <- matrix(rnorm(N), ncol = 1)
gauss <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y) * s) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
nb <- 1000
blocks <- cbind(floor((seq_len(nb) - 1) * N / nb) + 1, floor(seq_len(nb) * N / nb))
all_kept <- from_matrix(blocks, blocks, matrix(TRUE, nb, nb))
band <- abs(outer(seq_len(nb), seq_len(nb), "-")) < nb / 20
tenth <- from_matrix(blocks, blocks, band)
t_dense <- median_time(function() gauss(list(x, y, b, 10)))
t_all <- median_time(function() gauss(list(x, y, b, 10), ranges = all_kept))
t_tenth <- median_time(function() gauss(list(x, y, b, 10), ranges = tenth))
cat(sprintf("Gaussian sum: dense %.3f s, ranges keeping every block %.3f s (%+.1f %%), keeping %.1f %% of the blocks %.3f s (%.1f x faster than dense)\n",
            t_dense, t_all, 100 * (t_all / t_dense - 1), 100 * mean(band), t_tenth, t_dense / t_tenth))

if (backend == "GPU") {
  # Ranges run the 1D scheme (one GPU block per block of rows, each over all its ranges); the dense
  # reduction splits the reduced index too (2D) when that gives more blocks. The dense 1D time
  # separates the cost of the scheme from the cost of reading the ranges.
  Sys.setenv(RKEOPS_GPU_SCHEME = "1d")
  t_dense1d <- median_time(function() gauss(list(x, y, b, 10)))
  Sys.unsetenv("RKEOPS_GPU_SCHEME")
  cat(sprintf("Gaussian sum, dense with the 1D scheme forced: %.3f s (ranges keeping every block: %+.1f %% of it)\n",
              t_dense1d, 100 * (t_all / t_dense1d - 1)))
  # Small blocks (200 rows): the narrow ranged kernel (64 rows per CUDA block) against the wide one.
  nb_small <- 5000
  small <- cbind(floor((seq_len(nb_small) - 1) * N / nb_small) + 1, floor(seq_len(nb_small) * N / nb_small))
  near <- cbind(rep(seq_len(nb_small), each = 501), rep(seq_len(nb_small), each = 501) + rep(-250:250, nb_small))
  near <- near[near[, 2] >= 1 & near[, 2] <= nb_small, ]
  band_small <- from_pairs(small, small, near)
  t_narrow <- median_time(function() gauss(list(x, y, b, 10), ranges = band_small))
  Sys.setenv(RKEOPS_GPU_RANGED = "wide")
  t_wide <- median_time(function() gauss(list(x, y, b, 10), ranges = band_small))
  Sys.unsetenv("RKEOPS_GPU_RANGED")
  cat(sprintf("Gaussian sum over a band of %d blocks of %d rows (%.1f %% kept): narrow kernel %.3f s, wide kernel %.3f s (%.1f x), dense %.3f s\n",
              nb_small, N / nb_small, 100 * nrow(near) / nb_small^2, t_narrow, t_wide, t_wide / t_narrow, t_dense))
}

# 10 nearest neighbours: N uniform points and N points in 100 blobs in D = 3, N / 10 uniform points
# in D = 10 (brute force there), against brute force (on the GPU, or when small) and the R peers.
# Peers that are not installed (none on the GPU host) are left out.
knn_case <- function(label, x) {
  t_knn <- median_time(function() keops_knn(x, k = 10))
  a <- keops_knn(x, k = 10)
  out <- sprintf("10-NN, %s: keops_knn %.3f s", label, t_knn)
  if (backend == "GPU" || as.double(nrow(x))^2 <= 1e11) {
    t_brute <- median_time(function() keops_knn(x, k = 10, prune = FALSE))
    bf <- keops_knn(x, k = 10, prune = FALSE)
    out <- c(out, sprintf("brute force %.3f s (%.1f x slower), same indices %.6f", t_brute, t_brute / t_knn,
                          mean(a$index == bf$index)))
  }
  peers <- list(RANN = function() RANN::nn2(x, x, k = 10)$nn.idx,
                FNN = function() FNN::get.knnx(x, x, k = 10, algorithm = "kd_tree")$nn.index)
  for (p in names(peers)) {
    if (!requireNamespace(p, quietly = TRUE)) next
    t_peer <- median_time(peers[[p]])
    out <- c(out, sprintf("%s %.2f s (keops_knn %.2f x faster, same indices %.6f)", p, t_peer, t_peer / t_knn,
                          mean(a$index == peers[[p]]())))
  }
  cat(paste(out, collapse = "; "), "\n")
}
n_knn <- as.numeric(Sys.getenv("KNN_N", N))
set.seed(2)
x <- matrix(runif(3 * n_knn), ncol = 3)
centres <- matrix(runif(300), ncol = 3)
blobs <- centres[sample(100, n_knn, replace = TRUE), ] + matrix(rnorm(3 * n_knn, sd = 0.02), ncol = 3)
knn_case(sprintf("%g uniform points, D = 3", n_knn), x)
knn_case(sprintf("%g points in 100 blobs, D = 3", n_knn), blobs)
knn_case(sprintf("%g uniform points, D = 10", n_knn / 10), matrix(runif(n_knn), ncol = 10))

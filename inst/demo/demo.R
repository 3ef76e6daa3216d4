# rkeops demo: a Gaussian kernel sum and a 10-nearest-neighbour query on
# 100,000 random points in 3-D, each checked on its first 200 rows against
# the dense computation in plain R.
#
# Run from the repository root with `make demo` (which installs the package
# into ./lib first), or `R_LIBS=lib Rscript inst/demo/demo.R`.
# (inst/demo is kept out of the source tarball by .Rbuildignore: R reserves
# the installed `demo` directory for demo(), and R CMD check warns about it.)

library(rkeops)

set.seed(1234)
N <- 100000L
M <- 100000L
D <- 3L
x <- matrix(rnorm(N * D), N, D)
y <- matrix(rnorm(M * D), M, D)
b <- matrix(rnorm(M), M, 1)
s <- 0.5

cat("rkeops demo\n")
cat("  CPU threads used:", rkeops:::rkeops_ncore(), "\n")
cat("  precision:", get_rkeops_options("precision"),
    "(the default; rkeops_use_float64() switches to double precision)\n")
cat("  N =", N, "points x_i, M =", M, "points y_j, in dimension", D, "\n\n")

# Squared distances of the rows of a to all the rows of y (dense, plain R).
sq_dist <- function(a, y) {
  d2 <- matrix(0, nrow(a), nrow(y))
  for (k in seq_len(ncol(a))) {
    d2 <- d2 + outer(a[, k], y[, k], "-")^2
  }
  d2
}
n_check <- 200L
d2_check <- sq_dist(x[seq_len(n_check), , drop = FALSE], y)

# (a) Gaussian kernel sum: a_i = sum_j exp(-s |x_i - y_j|^2) b_j -----------
cat("(a) Gaussian kernel sum  a_i = sum_j exp(-s |x_i - y_j|^2) b_j\n")
gauss <- keops_kernel(
  "Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)",
  c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)")
)
time_a <- system.time(res <- gauss(list(x, y, b, s)))[["elapsed"]]
cat(sprintf("  time: %.3f s for %d x %d = %.1e kernel evaluations\n",
            time_a, N, M, as.numeric(N) * M))
cat("  head of the result:\n")
print(head(res))

ref <- exp(-s * d2_check) %*% b
rel_err <- max(abs(res[seq_len(n_check)] - ref) / abs(ref))
cat(sprintf("  check on the first %d rows against dense R: max relative error %.2e\n\n",
            n_check, rel_err))

# (b) 10 nearest neighbours of each x_i among the y_j ------------------------
K <- 10L
cat("(b)", K, "nearest neighbours of each x_i among the y_j\n")
knn <- keops_kernel(
  "ArgKMin_Reduction(SqDist(x,y), 10, 0)",
  c("x = Vi(3)", "y = Vj(3)")
)
time_b <- system.time(idx <- knn(list(x, y)))[["elapsed"]]
cat(sprintf("  time: %.3f s; result: %d x %d matrix of %s (1-based indices into y)\n",
            time_b, nrow(idx), ncol(idx), typeof(idx)))
print(head(idx))

ref_idx <- t(apply(d2_check, 1L, function(d) order(d)[seq_len(K)]))
exact <- mean(apply(idx[seq_len(n_check), , drop = FALSE] == ref_idx, 1L, all))
same_set <- mean(vapply(seq_len(n_check), function(i) {
  setequal(idx[i, ], ref_idx[i, ])
}, logical(1)))
cat(sprintf("  check on the first %d rows against order() on dense distances:\n", n_check))
cat(sprintf("    rows matching exactly (same neighbours, same order): %.1f%%\n",
            100 * exact))
cat(sprintf("    rows with the same set of neighbours:               %.1f%%\n",
            100 * same_set))

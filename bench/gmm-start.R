# keops_gmm()'s default start against mclust on a mixture whose truth is known.
#
# The mixture: 10 Gaussian components in 5-D, N = 1e5 points (GMM_N), equal weights. The means are
# uniform in [0, 10]^5, the standard deviations of each component along each axis uniform in
# [0.3, 0.8] (diagonal covariances: model VVI is the true model). The nearest means are 1.9 to 4.5
# apart (seeds 1-5), 2.5 to 7 standard deviations: the components overlap moderately, the Bayes
# classifier (the true parameters) has an adjusted Rand index (ARI) of 0.985 to 1 against the true
# labels, 0.995 on average; a start that merges two components and splits another is a poor
# optimum that EM does not leave.
#
# For each seed (GMM_SEEDS, default 1-5) the script draws the mixture, then fits it with
# keops_gmm(x, 10) (default start and precision, float32) and mclust::Mclust(x, G = 10,
# modelNames = "VVI") (float64, its hierarchical start on a subset), and prints the ARI of the Bayes
# classifier, each fit's ARI against the true labels, its log-likelihood, and the seconds it took
# (one run each: the times are indicative).
#
# Run: Rscript bench/gmm-start.R (R_LIBS pointing at an installed rkeops). GMM_NSTART sets
# keops_gmm()'s `nstart` (default: the function's).

local({
  f <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
  source(file.path(if (length(f)) dirname(f) else "bench", "common.R"))
})
suppressPackageStartupMessages({
  library(rkeops)
  library(mclust)
})

n <- env_num("GMM_N", 1e5)
seeds <- as.integer(strsplit(env_str("GMM_SEEDS", "1,2,3,4,5"), ",")[[1L]])
nstart <- env_str("GMM_NSTART", "")
G <- 10L
D <- 5L

# The mixture of the header for `seed`: points and true labels.
draw_mixture <- function(seed) {
  set.seed(seed)
  mu <- matrix(runif(G * D, 0, 10), G, D)
  sd <- matrix(runif(G * D, 0.3, 0.8), G, D)
  labels <- sample(G, n, replace = TRUE)
  x <- mu[labels, ] + sd[labels, ] * matrix(rnorm(n * D), n, D)
  # the Bayes classifier: the component of largest density at each point (equal weights)
  logd <- vapply(seq_len(G), function(g) colSums(dnorm(t(x), mu[g, ], sd[g, ], log = TRUE)), numeric(n))
  list(x = x, labels = labels, bayes = max.col(logd, "first"))
}

emit("keops_gmm() default start vs Mclust(G = 10, VVI): N = ", n, ", D = 5, G = 10 (", git_version(),
     "; load ", load_avg(), ")")
emit(sprintf("%4s %9s %9s %14s %6s %9s %14s %6s", "seed", "ARI Bayes", "ARI keops", "loglik keops", "s", "ARI mclust",
             "loglik mclust", "s"))
ari <- matrix(NA_real_, length(seeds), 3)
for (s in seq_along(seeds)) {
  m <- draw_mixture(seeds[s])
  set.seed(seeds[s])
  t_k <- system.time(fit <- if (nzchar(nstart)) keops_gmm(m$x, G, nstart = as.integer(nstart)) else
    keops_gmm(m$x, G))[["elapsed"]]
  t_m <- system.time(ref <- Mclust(m$x, G = G, modelNames = "VVI", verbose = FALSE))[["elapsed"]]
  ari[s, ] <- c(adjustedRandIndex(fit$classification, m$labels), adjustedRandIndex(ref$classification, m$labels),
                adjustedRandIndex(m$bayes, m$labels))
  emit(sprintf("%4d %9.4f %9.4f %14.1f %6.1f %9.4f %14.1f %6.1f", seeds[s], ari[s, 3], ari[s, 1], fit$loglik, t_k,
               ari[s, 2], ref$loglik, t_m))
}
emit(sprintf("mean ARI: Bayes %.4f, keops_gmm %.4f, Mclust %.4f", mean(ari[, 3]), mean(ari[, 1]), mean(ari[, 2])))

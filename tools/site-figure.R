# Draws the figures of README.md (and so of the site's home page): man/figures/kriging.png, the 1-D
# kriging example of vignettes/kriging.Rmd, 10,000 noisy samples, fitted by solve() on a symbolic
# Gaussian kernel matrix; man/figures/plots.png, the plot() methods of keops_kmeans(), keops_gmm()
# and keops_sinkhorn(). Run by hand after a change (R_LIBS=lib Rscript tools/site-figure.R) and
# commit the PNGs (keep each under 100 KB).
library(rkeops, warn.conflicts = FALSE)
set.seed(1)
f <- function(x) sin(2 * pi * x) + 0.5 * cos(6 * pi * x)
N <- 10000
x <- runif(N)
b <- f(x) + rnorm(N, sd = 0.3)
sigma <- 0.1
K <- exp(-sqdist(Vi(x), Vj(x)) / (2 * sigma^2))
a <- solve(K, b, alpha = 0.3^2, eps = 1e-4)
grid1 <- seq(0, 1, length.out = 400)
fit1 <- exp(-sqdist(Vi(grid1), Vj(x)) / (2 * sigma^2)) %*% a

out <- "man/figures/kriging.png"
dir.create(dirname(out), showWarnings = FALSE, recursive = TRUE)
png(out, width = 720, height = 300, res = 96, type = "cairo")
show <- sample(N, 1500)
par(mar = c(4, 4, 0.5, 0.5))
plot(x[show], b[show], pch = 16, cex = 0.35, col = "grey70", xlab = "x", ylab = "b",
     ylim = c(-2.2, 4))
lines(grid1, fit1, lwd = 3, col = "red3")
lines(grid1, f(grid1), lwd = 1.5, lty = 2)
labels <- c("samples (1,500 of 10,000)", "true function",
            "kriging: solve() on a symbolic 10,000 x 10,000 matrix")
legend("topright", labels, bg = "white",
       pch = c(16, NA, NA), lty = c(NA, 2, 1), lwd = c(NA, 1.5, 3),
       col = c("grey70", "black", "red3"), cex = 0.8)
invisible(dev.off())
message(out, ": ", file.size(out), " bytes")

# The plot() methods: a clustering, a mixture's ellipses, a transport plan's strongest links.
set.seed(2)
blobs <- rbind(matrix(rnorm(600, 0, 1), 300), matrix(rnorm(600, 4, 0.7), 300),
               cbind(rnorm(300, 4, 0.5), rnorm(300, -1, 1.5)))
out <- "man/figures/plots.png"
png(out, width = 900, height = 300, res = 96, type = "cairo", antialias = "none")
par(mfrow = c(1, 3), mar = c(4, 4, 2, 0.5))
plot(keops_kmeans(blobs, 3), blobs, main = "plot(keops_kmeans(x, 3), x)")
plot(keops_gmm(blobs, 3, model = "VVV"), blobs, main = "plot(keops_gmm(x, 3, \"VVV\"), x)")
u <- runif(150, 0, 2 * pi)
ring <- cbind(cos(u), sin(u)) * (1 + rnorm(150, sd = 0.05))
disc <- matrix(rnorm(200, sd = 0.35), 100)
plot(keops_sinkhorn(ring, disc, blur = 0.05, potentials = TRUE), ring, disc, main = "transport plan (sinkhorn)")
invisible(dev.off())
message(out, ": ", file.size(out), " bytes")

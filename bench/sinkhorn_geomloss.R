# keops_sinkhorn(tol = NULL) against GeomLoss 0.3.1 (loss and gradient in x), and both against the
# converged gradient (plain-R log-domain Sinkhorn to 1e-12, from tests/testthat/test-sinkhorn-function.R);
# "before": the gradient as keops_sinkhorn() made it until 2026-11-29 (the plan of the last g, without
# the further update at blur^p), rebuilt in plain R from the returned potentials.
# Three steps (GeomLoss: pip install geomloss torch numpy):
#   Rscript bench/sinkhorn_geomloss.R write DIR      # the cases, as CSV
#   python3 bench/sinkhorn_geomloss.py DIR           # GeomLoss's loss and gradient of each
#   Rscript bench/sinkhorn_geomloss.R compare DIR
library(rkeops)
set_rkeops_options(precision = "float64")
args <- commandArgs(trailingOnly = TRUE)
dir <- args[2]
src <- readLines("tests/testthat/test-sinkhorn-function.R")
eval(parse(text = src[grep("^ref_cost <-", src):(grep("^gradient_test_clouds <-", src) - 1L)]))
set.seed(3)
n <- 47
m <- 53
a <- runif(n)
a <- a / sum(a)
b <- rep(1 / m, m)
x <- matrix(runif(2 * n), n, 2)
cases <- list(far_0.1 = list(y = matrix(runif(2 * m), m, 2) + 3, blur = 0.1),
              far_0.2 = list(y = matrix(runif(2 * m), m, 2) + 3, blur = 0.2),
              near_0.1 = list(y = matrix(runif(2 * m), m, 2) * 0.8 + 0.3, blur = 0.1),
              near_0.2 = list(y = matrix(runif(2 * m), m, 2) * 0.8 + 0.3, blur = 0.2))
rel <- function(g, r) max(abs(g - r)) / max(abs(r))
for (nm in names(cases)) {
  y <- cases[[nm]]$y
  blur <- cases[[nm]]$blur
  if (args[1] == "write") {
    writeLines(c(sprintf("settings,%.17g,2,0", blur), sprintf("x,%.17g,%.17g,%.17g", a, x[, 1], x[, 2]),
                 sprintf("y,%.17g,%.17g,%.17g", b, y[, 1], y[, 2])), file.path(dir, paste0(nm, ".csv")))
    next
  }
  gl <- unname(as.matrix(read.csv(file.path(dir, paste0(nm, ".out.csv")), header = FALSE)))
  conv <- ref_divergence(x, y, a, b, blur)
  s <- keops_sinkhorn(x, y, a, b, blur = blur, tol = NULL, gradient = TRUE, potentials = TRUE)
  plain <- ref_geomloss(x, y, a, b, blur)       # the test's plain-R GeomLoss
  # the previous gradient (before 2026-11-29), in plain R from the returned potentials: the
  # row-normalised plans of the last g and f_aa, without the further update
  e <- blur^2
  row_plan <- function(q, lw, h) ref_plan_grad(x, q, log(a), lw, ref_softmin(ref_cost(x, q), lw, h, e), h, e)
  before <- row_plan(y, log(b), attr(s, "g")) - row_plan(x, log(a), attr(s, "f_aa"))
  cat(sprintf(paste("%-9s loss vs GeomLoss %.1e, vs converged %.1e; plain-R GeomLoss vs GeomLoss: loss %.1e,",
                    "gradient %.1e; gradient vs converged: rkeops %.4f (before %.4f), GeomLoss %.4f\n"),
              nm, abs(s - gl[1, 1]) / abs(gl[1, 1]), abs(s - conv$value) / abs(conv$value),
              abs(plain$value - gl[1, 1]) / abs(gl[1, 1]), rel(plain$gradient, gl[-1, ]),
              rel(attr(s, "gradient"), conv$gradient), rel(before, conv$gradient), rel(gl[-1, ], conv$gradient)))
}

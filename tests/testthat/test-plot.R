# The plot() methods (R/plot.R): each draws on a null device and returns what it documents; the
# computed content (a mixture's ellipses, the transport plan's strongest links) against plain R.

# Runs `expr` with a null pdf device open; its value and visibility.
drawn <- function(expr) {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  withVisible(expr)
}

# The input error of `expr`, checked to name `arg` in its message and its field `arg`.
expect_plot_error <- function(expr, arg, pattern = NULL) {
  grDevices::pdf(NULL)
  on.exit(grDevices::dev.off(), add = TRUE)
  e <- tryCatch({ force(expr); NULL }, error = function(e) e)
  expect_s3_class(e, "rkeops_error_input")
  expect_identical(e$arg, arg)
  expect_match(conditionMessage(e), sprintf("'%s'", arg), fixed = TRUE)
  if (!is.null(pattern)) expect_match(conditionMessage(e), pattern)
}

test_that("plot() of keops_kmeans draws the clusters of the data given and returns the fit", {
  set.seed(11)
  x <- rbind(matrix(rnorm(63, 0), 21), matrix(rnorm(63, 4), 21))
  colnames(x) <- c("u", "v", "w")
  fit <- keops_kmeans(x, 2)
  out <- drawn(plot(fit, x))
  expect_false(out$visible)
  expect_identical(out$value, fit)
  expect_identical(drawn(plot(fit, as.data.frame(x), which = c(3, 1), col = c("red", "blue", "green")))$value, fit)
  expect_plot_error(plot(fit), "data", "is missing")
  expect_plot_error(plot(fit, x[-1, ]), "data", "42 rows and 3 columns")
  expect_plot_error(plot(fit, x[, 1:2]), "data")
  expect_plot_error(plot(fit, x, which = c(1, 1)), "which", "two different coordinates among 1..3")
  expect_plot_error(plot(fit, x, which = c(1, 4)), "which")
  expect_plot_error(plot(fit, x, which = 1), "which")
  expect_plot_error(plot(fit, x, col = list()), "col")
})

test_that("plot() of keops_gmm draws the components' ellipses: the points at Mahalanobis distance r", {
  set.seed(12)
  x <- rbind(matrix(rnorm(3 * 51), 51) %*% matrix(c(1, 0.6, 0, 0, 1, 0.3, 0, 0, 0.5), 3),
             matrix(rnorm(3 * 37, 3), 37))
  for (model in c("VVI", "VVV")) {
    fit <- keops_gmm(x, 2, model = model, iter.max = 20)
    out <- drawn(plot(fit, x, which = c(1, 3), levels = c(1, 2.5), npoints = 1000))
    expect_false(out$visible)
    e <- out$value
    expect_named(e, c("component", "level", "x", "y"))
    expect_equal(nrow(e), 2L * 2L * 1001L)
    for (g in 1:2) {
      m <- fit$parameters$mean[c(1, 3), g]
      S <- fit$parameters$variance$sigma[c(1, 3), c(1, 3), g]
      for (r in c(1, 2.5)) {
        pts <- as.matrix(e[e$component == g & e$level == r, c("x", "y")])
        info <- paste(model, g, r)
        expect_equal(unname(stats::mahalanobis(pts, m, S)), rep(r^2, 1001), tolerance = 1e-10, info = info)
        expect_equal(pts[1, ], pts[1001, ], info = info)     # closed
        # the whole ellipse: its extent along each axis is r times the standard deviation
        expect_equal(apply(pts, 2, max) - m, r * sqrt(diag(S)), tolerance = 1e-4, ignore_attr = TRUE, info = info)
        expect_equal(m - apply(pts, 2, min), r * sqrt(diag(S)), tolerance = 1e-4, ignore_attr = TRUE, info = info)
      }
    }
  }
  expect_equal(nrow(drawn(plot(fit))$value), 2L * 2L * 101L)   # the data are optional
  expect_plot_error(plot(fit, x[-1, ]), "data", "88 rows")
  expect_plot_error(plot(fit, which = c(2, 5)), "which")
  expect_plot_error(plot(fit, levels = c(1, -1)), "levels")
  expect_plot_error(plot(fit, npoints = 2), "npoints")
})

test_that("plot() of keops_sinkhorn draws the plan's strongest links: those of the dense plan in float64", {
  local_precision("float64")
  set.seed(13)
  x <- matrix(rnorm(2 * 23), 23, 2)
  y <- matrix(rnorm(2 * 17, 0.8), 17, 2)
  a <- runif(23)
  b <- runif(17)
  cases <- list(list(p = 2, reach = NULL, blur = 0.5), list(p = 1, reach = NULL, blur = 0.7),
                list(p = 2, reach = 2, blur = 0.5))
  for (case in cases) {
    info <- paste("p =", case$p, "reach =", format(case$reach))
    s <- keops_sinkhorn(x, y, a, b, blur = case$blur, p = case$p, reach = case$reach, tol = 1e-10, max_iter = 1e5,
                        potentials = TRUE)
    expect_s3_class(s, "keops_sinkhorn")
    # the dense plan, from the potentials (weights normalised when balanced)
    aa <- if (is.null(case$reach)) a / sum(a) else a
    bb <- if (is.null(case$reach)) b / sum(b) else b
    D <- sqrt(outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y))
    C <- if (case$p == 2) D^2 / 2 else D
    eps <- case$blur^case$p
    P <- outer(aa, bb) * exp((outer(attr(s, "f"), attr(s, "g"), "+") - C) / eps)
    if (is.null(case$reach)) expect_equal(rowSums(P), aa, tolerance = 1e-6, info = info)  # it is the plan
    out <- drawn(plot(s, x, y, a, b, links = 3))
    expect_false(out$visible)
    links <- out$value
    want <- t(apply(P, 1, order, decreasing = TRUE))[, 1:3]
    expect_identical(links$i, rep(1:23, each = 3), info = info)
    expect_identical(links$j, as.vector(t(want)), info = info)
    expect_equal(links$plan, P[cbind(links$i, links$j)], tolerance = 1e-10, info = info)
  }
  # the loss stays a number: arithmetic, as.vector(), c(); printed as the number
  expect_equal(as.vector(s * 2 + 1), 2 * as.vector(s) + 1)
  expect_identical(c(s), as.vector(s))
  expect_output(print(s), "attributes: iterations, f, g, f_aa, g_bb, settings")
  # the class whatever the arguments; the plot says what it needs
  plain <- keops_sinkhorn(x, y, blur = 0.5)
  expect_s3_class(plain, "keops_sinkhorn")
  expect_plot_error(plot(plain, x, y), "x", "potentials = TRUE")
  batch <- keops_sinkhorn(list(x, x), list(y, y), blur = 0.5, potentials = TRUE)
  expect_s3_class(batch, "keops_sinkhorn")
  expect_length(batch, 2L)
  expect_plot_error(plot(batch, x, y), "x", "one pair of clouds")
  # the legend: anywhere graphics::legend() puts it, or none
  expect_identical(drawn(plot(s, x, y, a, b, legend = NULL))$value, drawn(plot(s, x, y, a, b))$value)
  expect_plot_error(plot(s, x, y, a, b, legend = "nowhere"), "legend")
  # more links than points of y: all of them
  expect_equal(nrow(drawn(plot(s, x, y, a, b, links = 40))$value), 23L * 17L)
  expect_plot_error(plot(s, x), "to", "is missing")
  expect_plot_error(plot(s), "from", "is missing")
  expect_plot_error(plot(s, x[-1, ], y), "from", "23 rows")
  expect_plot_error(plot(s, x, cbind(y, 1)), "to", "17 rows and 2 columns")
  expect_plot_error(plot(s, x, y, a = -a), "a")
  expect_plot_error(plot(s, x, y, b = b[-1]), "b")
  expect_plot_error(plot(s, x, y, links = 0), "links")
  expect_plot_error(plot(structure(1, class = "keops_sinkhorn"), x, y), "x", "potentials = TRUE")
})

test_that("plot() of keops_landmarks draws start, target and trajectories and returns the fit", {
  theta <- 2 * pi * (0:14) / 15
  q0 <- cbind(cos(theta), sin(theta), 0)
  target <- cbind(1.2 * cos(theta), 0.8 * sin(theta), 0.1)
  fit <- keops_landmarks(q0, target, sigma = 0.5, nt = 4, lambda = 10, iter.max = 5)
  expect_equal(fit$target, target)
  out <- drawn(plot(fit))
  expect_false(out$visible)
  expect_identical(out$value, fit)
  expect_identical(drawn(plot(fit, which = c(2, 3), every = 4, closed = FALSE, main = "t"))$value, fit)
  expect_plot_error(plot(fit, which = c(1, 4)), "which")
  expect_plot_error(plot(fit, every = 0), "every")
  expect_plot_error(plot(fit, closed = NA), "closed")
})

test_that("keops_knn() results keep working as lists; plot() draws the links to the neighbours", {
  set.seed(14)
  x <- matrix(runif(2 * 41), 41, 2)
  y <- matrix(runif(2 * 9), 9, 2)
  nn <- keops_knn(x, y, k = 3)
  expect_s3_class(nn, "keops_knn")
  expect_true(is.list(nn))
  expect_named(nn, c("index", "distance"))
  expect_equal(dim(nn[["index"]]), c(9L, 3L))
  expect_output(print(nn), "\\$index")
  out <- drawn(plot(nn, x, y))
  expect_false(out$visible)
  expect_identical(out$value, nn)
  self <- keops_knn(x, k = 2)
  expect_identical(drawn(plot(self, x))$value, self)      # the queries: the data by default
  expect_plot_error(plot(nn), "data", "is missing")
  expect_plot_error(plot(nn, x[1:5, ], y), "data", "rows")
  expect_plot_error(plot(nn, x, y[-1, ]), "queries", "9 rows and 2 columns")
  expect_plot_error(plot(nn, x, y, which = c(2, 3)), "which")
  expect_identical(drawn(plot(nn, x, y, legend = "bottomleft"))$value, nn)
  expect_identical(drawn(plot(nn, x, y, legend = NULL))$value, nn)
  expect_plot_error(plot(nn, x, y, legend = 3), "legend")
})

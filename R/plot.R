#' Plots of clusterings, mixtures, transport plans, landmark matchings and nearest neighbours
#'
#' `plot()` methods, in base graphics, for the results of [keops_kmeans()], [keops_gmm()],
#' [keops_sinkhorn()] (with `potentials = TRUE`), [keops_landmarks()] and [keops_knn()]. Each draws
#' a pair of coordinates of the points, `which` (the first two by default). The clusterings,
#' the losses and the neighbours do not hold their data (as [stats::kmeans()] does not): it is
#' given again to `plot()`, and checked against the result (its number of rows and columns).
#'
#' * `plot(fit, data)` for [keops_kmeans()]: the points of `data` (the matrix clustered) coloured by
#'   cluster, and the centres (crosses). Returns `fit`, invisibly.
#' * `plot(fit)` or `plot(fit, data)` for [keops_gmm()]: the ellipses of each component at `levels`
#'   standard deviations (the points `m + r L u`, `m` the mean and `L L' = S` the covariance matrix
#'   `parameters$variance$sigma` restricted to the two coordinates, `u` on the unit circle, `r` a
#'   level: the points at Mahalanobis distance `r` of the mean), the means (plus signs, their size
#'   growing with the component's weight), and with `data` (the matrix fitted) its points coloured by
#'   `classification`. Returns, invisibly, the ellipses drawn: a data frame of `component`, `level`,
#'   and the two coordinates `x`, `y` of `npoints + 1` points per ellipse (the first repeated last).
#' * `plot(loss, from, to)` for [keops_sinkhorn()] with `potentials = TRUE` (`from`, `to`: its
#'   clouds `x` and `y`; `a`, `b`: its weights): the strongest links of the transport plan
#'   `pi_ij = a_i b_j exp((f_i + g_j - C_ij) / eps)` (`f`, `g` the potentials, `C` the cost,
#'   `eps = blur^p`; with `reach`, the weights as given, else normalised to sum 1): for each point
#'   `x_i`, the `links` points `y_j` receiving most of its mass, found by an `ArgKMin` reduction of
#'   `C_ij - g_j - eps log b_j` over `j` (memory O(N + M), whatever the clouds' sizes), drawn as
#'   segments whose darkness follows `pi_ij` (the strongest on top), with the points of `x` and `y`.
#'   Returns, invisibly, the links: a data frame of `i`, `j` and `plan` (`pi_ij`), `links` rows per
#'   point `x_i` (the strongest first). The loss of `keops_sinkhorn(potentials = TRUE)` (one pair of
#'   clouds) has class `"keops_sinkhorn"` for this method (and attribute `settings`: `blur`, `p`,
#'   `reach`): it stays a number (arithmetic, `as.vector()`, `c()` work as on any number), printed as
#'   the number and the names of its attributes.
#' * `plot(fit)` for [keops_landmarks()]: the start `q0` (grey), the target (red), the trajectories
#'   of every `every`-th landmark (thin lines, `fit$q[, i, ]`) and the end `q(1)` (blue), each shape a
#'   closed polygon when `closed = TRUE` (landmarks in order along a contour).
#' * `plot(nn, data, queries)` for [keops_knn()] (`data`, `queries`: its `x` and `y`, `queries`
#'   by default `data`): the data (grey), the queries (orange) and a segment from each query to each
#'   of its `k` neighbours. The result of `keops_knn()` is a list with class `"keops_knn"` (printed as
#'   the list). Returns `nn`, invisibly.
#'
#' The arguments in `...` go to the [graphics::plot.default()] call that opens the plot (`main`,
#' `xlab`, `xlim`, `asp`, ...): the plot's frame holds everything drawn.
#'
#' @param x The result to draw: of class `"keops_kmeans"`, `"keops_gmm"`, `"keops_sinkhorn"`,
#'   `"keops_landmarks"` or `"keops_knn"`.
#' @param data The data: for a clustering or a mixture, the matrix (or data frame) fitted, N rows;
#'   for nearest neighbours, the data searched (`keops_knn()`'s `x`).
#' @param queries The queries of [keops_knn()] (its `y`; by default `data`).
#' @param from,to The clouds `x` and `y` given to [keops_sinkhorn()].
#' @param a,b The weights given to [keops_sinkhorn()] (`NULL`: uniform).
#' @param links The number of links drawn from each point of `from` (its strongest ones).
#' @param which The two coordinates drawn (column numbers).
#' @param levels The ellipses drawn for each component, in standard deviations.
#' @param npoints The number of points of each ellipse (one more: closed).
#' @param every Draw the trajectory of every `every`-th landmark (1: all).
#' @param closed Whether the landmarks are in order along a closed contour (drawn as polygons).
#' @param col `NULL` (a default palette) or the colours of the clusters or components.
#' @param legend Where the legend goes (a keyword of [graphics::legend()]: `"topright"`,
#'   `"bottomleft"`, ...), or `NULL` for none.
#' @param ... Arguments of [graphics::plot.default()] (title, labels, limits, `asp`).
#' @return See above: the object, invisibly, or what was computed to draw it (ellipses, links).
#' @name plot.rkeops
#' @seealso [keops_kmeans()], [keops_gmm()], [keops_sinkhorn()], [keops_landmarks()], [keops_knn()].
#' @examples
#' set.seed(1)
#' x <- rbind(matrix(rnorm(100), 50), matrix(rnorm(100, 3), 50))
#' fit <- keops_kmeans(x, 2)
#' plot(fit, x)
#' mix <- keops_gmm(x, 2)
#' plot(mix, x, main = "keops_gmm")
#' y <- matrix(rnorm(60, 1), 30)
#' loss <- keops_sinkhorn(x[1:40, ], y, blur = 0.3, potentials = TRUE)
#' loss
#' plot(loss, x[1:40, ], y)
#' nn <- keops_knn(x, y, k = 3)
#' plot(nn, x, y)
#' theta <- 2 * pi * (0:19) / 20
#' shape <- keops_landmarks(cbind(cos(theta), sin(theta)), cbind(1.3 * cos(theta), 0.7 * sin(theta)),
#'                          sigma = 0.5, nt = 5, lambda = 10, iter.max = 10)
#' plot(shape, every = 2)
NULL

#' @rdname plot.rkeops
#' @export
plot.keops_kmeans <- function(x, data, which = c(1, 2), col = NULL, ...) {
  centers <- x$centers
  if (missing(data)) {
    rkeops_abort("plot(): 'data' is missing: plot(fit, data), with the matrix clustered",
                 kind = "input", arg = "data")
  }
  data <- plot_data(data, "data", nrow = length(x$cluster), ncol = ncol(centers))
  which <- plot_which(which, ncol(centers))
  col <- plot_colours(col, nrow(centers))
  plot_frame(rbind(data, centers)[, which, drop = FALSE], which, colnames(centers), list(...))
  graphics::points(data[, which, drop = FALSE], col = col[x$cluster], pch = 20, cex = 0.6)
  graphics::points(centers[, which, drop = FALSE], pch = 4, cex = 2, lwd = 3)
  invisible(x)
}

#' @rdname plot.rkeops
#' @export
plot.keops_gmm <- function(x, data = NULL, which = c(1, 2), levels = c(1, 2), npoints = 100, col = NULL, ...) {
  p <- x$parameters
  d <- x$d
  G <- x$G
  if (!is.null(data)) data <- plot_data(data, "data", nrow = x$n, ncol = d)
  which <- plot_which(which, d)
  if (!is.numeric(levels) || length(levels) < 1L || !all(is.finite(levels)) || any(levels <= 0)) {
    rkeops_abort("plot(): 'levels' must be positive numbers (standard deviations)", kind = "input", arg = "levels")
  }
  npoints <- check_whole(npoints, "npoints", "plot", min = 3)
  col <- plot_colours(col, G)
  mean <- matrix(p$mean, d, G)
  sigma <- array(p$variance$sigma, c(d, d, G))
  ellipses <- do.call(rbind, lapply(seq_len(G), function(g) {
    do.call(rbind, lapply(levels, function(r) {
      e <- gmm_ellipse(mean[which, g], sigma[which, which, g], r, npoints)
      data.frame(component = g, level = r, x = e[, 1L], y = e[, 2L])
    }))
  }))
  frame <- rbind(as.matrix(ellipses[, c("x", "y")]), if (!is.null(data)) data[, which, drop = FALSE])
  plot_frame(frame, which, rownames(mean), list(...))
  if (!is.null(data)) {
    graphics::points(data[, which, drop = FALSE], col = grDevices::adjustcolor(col[x$classification], 0.4),
                     pch = 20, cex = 0.5)
  }
  for (g in seq_len(G)) {
    for (r in levels) {
      e <- ellipses[ellipses$component == g & ellipses$level == r, ]
      graphics::lines(e$x, e$y, col = col[g], lwd = if (r == min(levels)) 2 else 1)
    }
  }
  graphics::points(t(mean[which, , drop = FALSE]), pch = 3, lwd = 2, cex = 1 + 2 * sqrt(p$pro))
  invisible(ellipses)
}

# The ellipse of the points at Mahalanobis distance r of m for the 2 x 2 covariance s:
# m + r V sqrt(diag(lambda)) u, s = V diag(lambda) V', u at npoints + 1 angles of the unit circle.
gmm_ellipse <- function(m, s, r, npoints) {
  e <- eigen(s, symmetric = TRUE)
  angle <- seq(0, 2 * pi, length.out = npoints + 1L)
  u <- rbind(cos(angle), sin(angle))
  t(m + r * e$vectors %*% (sqrt(pmax(e$values, 0)) * u))
}

#' @rdname plot.rkeops
#' @export
plot.keops_sinkhorn <- function(x, from, to, a = NULL, b = NULL, links = 1, which = c(1, 2),
                                legend = "topright", ...) {
  f <- attr(x, "f")
  g <- attr(x, "g")
  settings <- attr(x, "settings")
  if (!is.numeric(f) || !is.numeric(g) || !is.null(dim(f)) || length(x) != 1L || is.null(settings)) {
    rkeops_abort("plot(): 'x' must be the loss of one pair of clouds computed with ",
                 "keops_sinkhorn(potentials = TRUE): the plan is drawn from the potentials",
                 kind = "input", arg = "x")
  }
  absent <- c(from = missing(from), to = missing(to))
  if (any(absent)) {
    arg <- names(absent)[absent][1L]
    rkeops_abort("plot(): '", arg, "' is missing: plot(loss, from, to), with the clouds x and y of ",
                 "keops_sinkhorn()", kind = "input", arg = arg)
  }
  from <- plot_data(from, "from", nrow = length(f))
  to <- plot_data(to, "to", nrow = length(g), ncol = ncol(from))
  balanced <- is.null(settings$reach)
  weights <- function(w, n, arg) {
    w <- check_point_weights(w, n, arg, "plot")
    if (balanced) w / sum(w) else w
  }
  a <- weights(a, nrow(from), "a")
  b <- weights(b, nrow(to), "b")
  links <- check_whole(links, "links", "plot", min = 1)
  links <- min(links, nrow(to))
  which <- plot_which(which, ncol(from))
  plan <- sinkhorn_links(from, to, a, b, f, g, settings$blur^settings$p, settings$p, links)
  plot_frame(rbind(from, to)[, which, drop = FALSE], which, colnames(from), list(...), list(asp = 1))
  w <- plan$plan / max(plan$plan)
  ord <- order(w)
  xi <- from[plan$i[ord], which, drop = FALSE]
  yj <- to[plan$j[ord], which, drop = FALSE]
  graphics::segments(xi[, 1L], xi[, 2L], yj[, 1L], yj[, 2L],
                     col = grDevices::rgb(0.2, 0.2, 0.2, alpha = 0.15 + 0.7 * w[ord]), lwd = 0.3 + 1.2 * w[ord])
  size <- function(w) 0.25 + 0.45 * sqrt(w / max(w))
  graphics::points(from[, which, drop = FALSE], pch = 19, cex = size(a), col = "#1F77B4")
  graphics::points(to[, which, drop = FALSE], pch = 19, cex = size(b), col = "#D95F02")
  plot_legend(legend, c("from (x)", "to (y)", "links of the plan"), pch = c(19, 19, NA),
              col = c("#1F77B4", "#D95F02", "grey30"), lty = c(NA, NA, 1))
  invisible(plan)
}

# The `links` strongest links of each point x_i in the transport plan pi_ij = a_i b_j exp((f_i + g_j -
# C_ij) / eps): the j of the smallest C_ij - g_j - eps log b_j, by one ArgKMin reduction over j.
sinkhorn_links <- function(x, y, a, b, f, g, eps, p, links) {
  d <- ncol(x)
  op <- keops_kernel(sprintf("ArgKMin_Reduction((%s - h) * s - lw, %d, 0)", sinkhorn_cost_formula(p), links),
                     c(sprintf("x = Vi(%d)", d), sprintf("y = Vj(%d)", d), "h = Vj(1)", "lw = Vj(1)", "s = Pm(1)"))
  j <- matrix(op(list(x, y, matrix(g), matrix(log(b)), 1 / eps)), ncol = links)
  i <- rep(seq_len(nrow(x)), links)
  j <- as.vector(j)
  diff <- x[i, , drop = FALSE] - y[j, , drop = FALSE]
  cij <- if (p == 2) rowSums(diff^2) / 2 else sqrt(rowSums(diff^2))
  out <- data.frame(i = i, j = as.integer(j), plan = a[i] * b[j] * exp((f[i] + g[j] - cij) / eps))
  out <- out[order(out$i, -out$plan), ]
  rownames(out) <- NULL
  out
}

#' @rdname plot.rkeops
#' @export
plot.keops_landmarks <- function(x, which = c(1, 2), every = 1, closed = TRUE, ...) {
  q <- x$q
  nt1 <- dim(q)[1L]
  d <- dim(q)[3L]
  which <- plot_which(which, d)
  every <- check_whole(every, "every", "plot", min = 1)
  check_flag(closed, "closed", "plot")
  start <- matrix(q[1L, , which], ncol = 2L)
  end <- matrix(q[nt1, , which], ncol = 2L)
  target <- if (is.null(x$target)) NULL else x$target[, which, drop = FALSE]
  plot_frame(rbind(matrix(q[, , which], ncol = 2L), target), which, colnames(x$target), list(...), list(asp = 1))
  shape <- function(pts, col, lwd, lty = 1) {
    if (closed) graphics::polygon(pts, border = col, lwd = lwd, lty = lty) else graphics::lines(pts, col = col, lwd = lwd, lty = lty)
    graphics::points(pts, pch = 20, cex = 0.5, col = col)
  }
  for (i in seq(1L, dim(q)[2L], by = every)) graphics::lines(q[, i, which[1L]], q[, i, which[2L]], lwd = 0.7)
  shape(start, "grey50", 2)
  if (!is.null(target)) shape(target, "red", 2)
  shape(end, "blue", 1.5, 2)
  invisible(x)
}

#' @rdname plot.rkeops
#' @export
plot.keops_knn <- function(x, data, queries = data, which = c(1, 2), legend = "topright", ...) {
  index <- x$index
  if (missing(data)) {
    rkeops_abort("plot(): 'data' is missing: plot(nn, data, queries), with the x and y of keops_knn()",
                 kind = "input", arg = "data")
  }
  data <- plot_data(data, "data")
  if (max(index) > nrow(data)) {
    rkeops_abort("plot(): 'data' must have at least ", max(index), " rows (the neighbours found), not ", nrow(data),
                 kind = "input", arg = "data")
  }
  queries <- plot_data(queries, "queries", nrow = nrow(index), ncol = ncol(data))
  which <- plot_which(which, ncol(data))
  plot_frame(rbind(data, queries)[, which, drop = FALSE], which, colnames(data), list(...), list(asp = 1))
  graphics::points(data[, which, drop = FALSE], pch = 20, cex = 0.5, col = "grey55")
  i <- rep(seq_len(nrow(index)), ncol(index))
  graphics::segments(queries[i, which[1L]], queries[i, which[2L]], data[index, which[1L]], data[index, which[2L]],
                     col = "grey30", lwd = 0.7)
  graphics::points(queries[, which, drop = FALSE], pch = 19, cex = 0.6, col = "#D95F02")
  plot_legend(legend, c("data (x)", "queries (y)", "to each neighbour"), pch = c(20, 19, NA),
              col = c("grey55", "#D95F02", "grey30"), lty = c(NA, NA, 1))
  invisible(x)
}

#' @export
print.keops_knn <- function(x, ...) {
  print(unclass(x), ...)
  invisible(x)
}

#' @export
print.keops_sinkhorn <- function(x, ...) {
  print(as.vector(x), ...)
  extra <- setdiff(names(attributes(x)), c("class", "names"))
  if (length(extra)) cat("attributes:", paste(extra, collapse = ", "), "\n")
  invisible(x)
}

# A legend at `where` (a keyword of graphics::legend(): "topright", ...; NULL: none).
plot_legend <- function(where, labels, pch, col, lty) {
  if (is.null(where)) return(invisible())
  places <- c("topright", "topleft", "bottomright", "bottomleft", "top", "bottom", "left", "right", "center")
  if (!is.character(where) || length(where) != 1L || !where %in% places) {
    rkeops_abort("plot(): 'legend' must be NULL or one of ", paste0("\"", places, "\"", collapse = ", "),
                 kind = "input", arg = "legend")
  }
  graphics::legend(where, legend = labels, pch = pch, col = col, lty = lty, bg = "white", cex = 0.8)
}

# `x` as a double matrix of finite values (a data frame converted) with `nrow` rows and `ncol`
# columns where given; else an input error naming `arg`.
plot_data <- function(x, arg, nrow = NULL, ncol = NULL) {
  if ((!is.null(nrow) && NROW(x) != nrow) || (!is.null(ncol) && NCOL(x) != ncol)) {
    rkeops_abort("plot(): '", arg, "' must be a numeric matrix of finite values",
                 if (!is.null(nrow)) paste0(" with ", nrow, " rows"),
                 if (!is.null(ncol)) paste0(if (is.null(nrow)) " with " else " and ", ncol, " columns"),
                 " (the data of the result)", kind = "input", arg = arg)
  }
  check_points(x, arg, "plot", allow_vector = FALSE)
}

# Two different column numbers among 1..d, as integers.
plot_which <- function(which, d) {
  if (!is.numeric(which) || length(which) != 2L || !all(is.finite(which)) || any(which != round(which)) ||
      any(which < 1) || any(which > d) || which[1L] == which[2L]) {
    rkeops_abort("plot(): 'which' must be two different coordinates among 1..", d,
                 if (d < 2L) " (a plot needs 2 coordinates)", kind = "input", arg = "which")
  }
  as.integer(which)
}

# `k` colours: `col` recycled, or a palette (Okabe-Ito up to 8, else HCL's "Dark 3").
plot_colours <- function(col, k) {
  if (is.null(col)) {
    return(if (k <= 8L) unname(grDevices::palette.colors(k + 1L, "Okabe-Ito"))[-1L] else grDevices::hcl.colors(k, "Dark 3"))
  }
  if (!(is.character(col) || is.numeric(col)) || length(col) < 1L) {
    rkeops_abort("plot(): 'col' must be NULL or colours", kind = "input", arg = "col")
  }
  rep_len(col, k)
}

# Opens a plot whose frame holds the rows of `points` (2 columns), labelled by the names of the
# coordinates `which` (`names[which]`, or "coordinate k"), with `defaults` and the arguments `args` of
# plot.default() the user gave (these first).
plot_frame <- function(points, which, names, args, defaults = list()) {
  label <- function(k) if (length(names) >= k && nzchar(names[k])) names[k] else paste("coordinate", k)
  defaults$xlab <- label(which[1L])
  defaults$ylab <- label(which[2L])
  defaults[names(args)] <- args
  do.call(graphics::plot, c(list(x = points[, 1L], y = points[, 2L], type = "n"), defaults))
}

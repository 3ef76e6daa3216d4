# keops_kmeans() against stats::kmeans(algorithm = "Lloyd") from the same start: the same object.

kmeans_data <- function(seed = 2) {
  set.seed(seed)
  rbind(matrix(rnorm(2 * 301), 301), matrix(rnorm(2 * 203, 3), 203),
        matrix(rnorm(2 * 97, c(-3, 3)), 97, byrow = TRUE))
}

test_that("keops_kmeans() equals stats::kmeans (Lloyd) from the same centres, converged or not", {
  local_precision("float64")
  x <- kmeans_data()
  start <- x[c(1, 400, 550), ]
  ours <- keops_kmeans(x, start, iter.max = 20)
  theirs <- kmeans(x, start, iter.max = 20, algorithm = "Lloyd")
  expect_s3_class(ours, c("keops_kmeans", "kmeans"), exact = TRUE)
  expect_equal(unclass(ours)[names(theirs)], unclass(theirs), tolerance = 1e-10)
  expect_equal(fitted(ours), fitted(theirs), tolerance = 1e-12)
  expect_output(print(ours), "K-means clustering with 3 clusters of sizes")
  # stopped before convergence: iter.max + 1 passes, ifault 2 and stats' warning
  for (it in 1:2) {  # "1 iteration", "2 iterations"
    w <- tryCatch(keops_kmeans(x, start, iter.max = it), warning = identity)
    expect_s3_class(w, "rkeops_warning_convergence")
    stats_warning <- tryCatch(kmeans(x, start, iter.max = it, algorithm = "Lloyd"), warning = identity)
    expect_identical(conditionMessage(w), conditionMessage(stats_warning))
  }
  short <- suppressWarnings(keops_kmeans(x, start, iter.max = 1))
  theirs <- suppressWarnings(kmeans(x, start, iter.max = 1, algorithm = "Lloyd"))
  expect_equal(unclass(short)[names(theirs)], unclass(theirs), tolerance = 1e-10)
  expect_identical(short$ifault, 2L)
  # in D = 5, K = 7, odd sizes
  set.seed(4)
  y <- matrix(rnorm(5 * 333), 333, 5) + rep(sample(0:6, 333, TRUE) * 2, 5)
  start <- y[1:7, ]
  expect_equal(unclass(keops_kmeans(y, start, iter.max = 30))[1:9],
               unclass(kmeans(y, start, iter.max = 30, algorithm = "Lloyd")), tolerance = 1e-10)
})

test_that("keops_kmeans() in float32 finds stats' clusters", {
  x <- kmeans_data(5)
  start <- x[c(2, 410, 560), ]
  ours <- keops_kmeans(x, start, iter.max = 20)
  theirs <- kmeans(x, start, iter.max = 20, algorithm = "Lloyd")
  expect_gt(mean(ours$cluster == theirs$cluster), 0.99)
  expect_equal(ours$tot.withinss, theirs$tot.withinss, tolerance = 1e-4)
})

test_that("seeding by k-means++ is reproducible, nstart keeps the best, predict() gives the nearest centre", {
  local_precision("float64")
  x <- kmeans_data(6)
  set.seed(10)
  a <- keops_kmeans(x, 3)
  set.seed(10)
  b <- keops_kmeans(x, 3)
  expect_identical(a, b)
  # the seeding draws rows of x: the first uniformly
  set.seed(10)
  first <- sample.int(nrow(x), 1L)
  set.seed(10)
  expect_identical(rkeops:::kmeans_pp(x, 3)[1], first)
  # nstart: the seedings drawn one after the other (on the centred points, as keops_kmeans() does),
  # Lloyd from each by stats::kmeans, the best kept; K = 6 on 3 blobs: the starts end apart
  xc <- x - rep(colMeans(x), each = nrow(x))
  set.seed(12)
  many <- keops_kmeans(x, 6, iter.max = 50, nstart = 5)
  set.seed(12)
  starts <- lapply(1:5, function(s) rkeops:::kmeans_pp(xc, 6))
  fits <- lapply(starts, function(s) kmeans(x, x[s, ], iter.max = 50, algorithm = "Lloyd"))
  each <- vapply(fits, function(f) f$tot.withinss, 0)
  expect_gt(max(each) - min(each), 1e-3 * min(each))
  expect_equal(unclass(many)[1:9], unclass(fits[[which.min(each)]]), tolerance = 1e-10)
  new <- matrix(rnorm(2 * 41, 1, 3), 41, 2)
  brute <- apply(new, 1, function(p) which.min(colSums((t(many$centers) - p)^2)))
  expect_identical(predict(many, new), unname(brute))
})

test_that("k-means++ draws each centre with probability proportional to D^2", {
  # 5 points (two the same) in the plane, 3 centres: the exact probability of each set of centres
  # (the first uniform, the second in proportion to D^2 from it, the third to the least D^2 from
  # both), against the frequencies of 2000 seedings. The third draw is the rejection step's.
  x <- rbind(c(0, 0), c(0, 0), c(1, 0), c(0, 2), c(3, 3))
  n <- nrow(x)
  d2 <- as.matrix(dist(x))^2
  sets <- combn(n, 3, paste, collapse = " ")
  p <- setNames(numeric(length(sets)), sets)
  for (a in 1:n) for (b in setdiff(1:n, a)) for (c in setdiff(1:n, c(a, b))) {
    w <- pmin(d2[a, ], d2[b, ])
    key <- paste(sort(c(a, b, c)), collapse = " ")
    p[key] <- p[key] + d2[a, b] / sum(d2[a, ]) * w[c] / sum(w) / n
  }
  set.seed(3)
  drawn <- replicate(2000, paste(sort(rkeops:::kmeans_pp(x, 3)), collapse = " "))
  counts <- table(factor(drawn, levels = sets))
  expect_identical(sum(counts[p == 0]), 0L)  # never both copies of a point
  test <- suppressWarnings(chisq.test(counts[p > 0], p = p[p > 0]))
  expect_gt(test$p.value, 1e-3)
  # drawing by D (not D^2) or uniformly is told apart
  expect_lt(suppressWarnings(chisq.test(counts[p > 0], p = rep(1, sum(p > 0)), rescale.p = TRUE))$p.value, 1e-6)
})

test_that("k-means++ draws in the engine what a plain R loop draws from the same seed", {
  # the reference: every draw by rejection written in R (the loop the engine replaced), exact
  # distances from R's dist() at each update
  reference <- function(x, k, tries = 32L) {
    n <- nrow(x)
    picked <- sample.int(n, 1L)
    counted <- 0L
    while (length(picked) < k) {
      if (counted > 0L) {
        accepted <- FALSE
        for (attempt in seq_len(tries)) {
          i <- findInterval(stats::runif(1L) * cs[n], cs) + 1L
          new <- picked[(counted + 1L):length(picked)]
          if (stats::runif(1L) * d2[i] < min(colSums((t(x[new, , drop = FALSE]) - x[i, ])^2))) {
            picked <- c(picked, i)
            accepted <- TRUE
            break
          }
        }
        if (accepted) next
      }
      d2 <- apply(as.matrix(dist(rbind(x, x[picked, , drop = FALSE])))[seq_len(n), n + seq_along(picked), drop = FALSE]^2,
                  1, min)
      cs <- cumsum(d2)
      counted <- length(picked)
      picked <- c(picked, findInterval(stats::runif(1L) * cs[n], cs) + 1L)
    }
    picked
  }
  set.seed(11)
  x <- rbind(matrix(rnorm(2 * 613), ncol = 2) * 0.3 + rep(c(0, 5), each = 613), matrix(0, 4, 2))  # 4 equal points
  for (k in c(2L, 7L, 40L)) {
    set.seed(k)
    drawn <- rkeops:::kmeans_pp(x, k, tries = 3L)
    after <- runif(1)
    set.seed(k)
    expect_identical(drawn, reference(x, k, tries = 3L), label = paste("the rows drawn, k =", k))
    expect_identical(after, runif(1), label = "R's random numbers used as the R loop used them")
  }
  # the engine's draws refuse rows that are not rows of x
  expect_error(rkeops:::rust_result(.Call(rkeops:::wrap__keops_kmeans_pp_draws, x, numeric(617), cumsum(rep(1, 617)),
                                          c(1L, 700L), 1L, 5L, 3L)),
               "'picked'", class = "rkeops_error_input")
})

test_that("an empty cluster keeps its centre, with stats' warning", {
  local_precision("float64")
  x <- kmeans_data(7)
  start <- rbind(x[1, ], x[400, ], c(100, 100))
  expect_warning(fit <- keops_kmeans(x, start), "empty cluster", class = "rkeops_warning_empty_cluster")
  expect_identical(fit$size[3], 0L)
  expect_equal(unname(fit$centers[3, ]), c(100, 100))
  expect_equal(fit$withinss[3], 0)
})

test_that("keops_kmeans() refuses bad input, naming the argument", {
  x <- kmeans_data()
  expect_error(keops_kmeans("a", 2), "'x' must be a numeric matrix", class = "rkeops_error_input")
  bad <- x
  bad[3, 1] <- NA
  expect_error(keops_kmeans(bad, 2), "'x' must be .* without NA, NaN or infinite values", class = "rkeops_error_input")
  expect_error(keops_kmeans(data.frame(a = 1:5, b = letters[1:5]), 2), "'x' must be .*a column is not numeric",
               class = "rkeops_error_input")
  expect_error(keops_kmeans(x[1:3, ], x[1:4, ]), "'centers' must have at most as many rows \\(4\\) as 'x' \\(3\\)",
               class = "rkeops_error_input")
  expect_error(keops_kmeans(x, 0), "'centers' must be a whole number >= 1", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, nrow(x) + 1), "'centers' must be at most the number of points \\(601\\), not 602",
               class = "rkeops_error_input")
  expect_error(keops_kmeans(x, x[1:3, 1, drop = FALSE]), "'centers' must be .* with 2 columns, not 1",
               class = "rkeops_error_input")
  expect_error(keops_kmeans(x, 2, iter.max = 0), "'iter.max'", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, 2, algorithm = "Hartigan-Wong"), "'algorithm'", class = "rkeops_error_input")
  expect_error(keops_kmeans(matrix(1, 5, 2), 2), "more clusters \\(2\\) than distinct points",
               class = "rkeops_error_input")
  # squared distances beyond float32's range: an error, not centres drawn from infinities
  expect_error(keops_kmeans(c(0, 1e20, -1e20, 5, 7), 2), "'x': squared distances .* overflow", class = "rkeops_error_input")
  fit <- keops_kmeans(x, x[1:2, ])
  expect_error(predict(fit, matrix(1, 2, 3)), "'newdata' must be .* with 2 columns, not 3", class = "rkeops_error_input")
})

test_that("keops_kmeans() in float32 far from the origin: stats' labels and centres, float64's results", {
  # three blobs (sd 1, 8 apart) in D = 3, 517 points, moved by 1e3, 1e5 and 1e7: in float32 the
  # engine sees the points centred, so the clusters do not depend on where the data are
  set.seed(21)
  base <- matrix(rnorm(3 * 517), 517, 3) + 8 * c(rep(0, 200), rep(1, 190), rep(2, 127))
  start <- base[c(5, 250, 450), ]
  ref <- kmeans(base, start, iter.max = 20, algorithm = "Lloyd")
  for (offset in c(1e3, 1e5, 1e7)) {
    x <- base + offset
    theirs <- kmeans(x, start + offset, iter.max = 20, algorithm = "Lloyd")
    ours <- keops_kmeans(x, start + offset, iter.max = 20)
    tol <- 1e-4 * min(apply(x, 2, sd))
    expect_identical(ours$cluster, theirs$cluster)
    expect_identical(ours$cluster, ref$cluster)
    expect_lt(max(abs(ours$centers - theirs$centers)), tol)
    expect_equal(ours$totss, theirs$totss, tolerance = 1e-7)
    expect_equal(ours$withinss, theirs$withinss, tolerance = 1e-5)
    expect_equal(ours$betweenss, theirs$betweenss, tolerance = 1e-5)
    expect_identical(ours$size, theirs$size)
    expect_identical(ours$iter, theirs$iter)
    # float64: stats' object field by field (stats' own sums lose digits at 1e7: 1e-8)
    local({
      local_precision("float64")
      expect_equal(unclass(keops_kmeans(x, start + offset, iter.max = 20))[names(theirs)], unclass(theirs),
                   tolerance = 1e-8)
    })
    # seeded: the same seeding and clusters as the data at the origin, the centres moved
    set.seed(5)
    moved <- keops_kmeans(x, 3)
    set.seed(5)
    here <- keops_kmeans(base, 3)
    expect_identical(moved$cluster, here$cluster)
    expect_lt(max(abs(moved$centers - offset - here$centers)), tol)
    # predict() far from the origin: the nearest centre in float64
    new <- base[c(1, 2, 300, 301, 500, 517), ] + offset + 0.3
    brute <- apply(new, 1, function(p) which.min(colSums((t(ours$centers) - p)^2)))
    expect_identical(predict(ours, new), unname(brute))
  }
})

test_that("keops_kmeans() takes a vector (one column) and a data frame, as stats::kmeans does", {
  local_precision("float64")
  set.seed(8)
  v <- c(rnorm(151), rnorm(97, 6))
  names(v) <- paste0("p", seq_along(v))
  theirs <- kmeans(v, c(-1, 5), algorithm = "Lloyd")
  ours <- keops_kmeans(v, c(-1, 5))
  expect_equal(unclass(ours)[names(theirs)], unclass(theirs), tolerance = 1e-10)
  expect_identical(names(ours$cluster), names(v))
  expect_identical(predict(ours, c(-2, 0.5, 7)), c(1L, 1L, 2L))
  df <- data.frame(a = kmeans_data(9)[, 1], b = kmeans_data(9)[, 2])
  start <- df[c(3, 320, 560), ]
  theirs <- kmeans(df, start, algorithm = "Lloyd")
  ours <- keops_kmeans(df, start)
  expect_equal(unclass(ours)[names(theirs)], unclass(theirs), tolerance = 1e-10)
  expect_identical(colnames(ours$centers), c("a", "b"))
})

test_that("the operators and programs of K-means are made once per shape", {
  expect_identical(rkeops:::kmeans_operators(4), rkeops:::kmeans_operators(4))
  expect_identical(rkeops:::kmeans_program(4, 7), rkeops:::kmeans_program(4, 7))
  expect_false(identical(rkeops:::kmeans_program(4, 7), rkeops:::kmeans_program(4, 8)))
})

test_that("keops_kmeans() with many clusters (K = 37, D = 3) equals stats::kmeans from the same start", {
  # the assignment by the engine's nearest-centre path (K not a multiple of its lanes, N not a
  # multiple of its groups of points), the sums by the grouped sums taken from the points
  local_precision("float64")
  set.seed(8)
  x <- matrix(rnorm(3 * 1037), 1037, 3) + 4 * matrix(sample(0:4, 3 * 1037, TRUE), 1037, 3)
  start <- x[sample(1037, 37), ]
  for (iter in c(3, 50)) {
    ours <- suppressWarnings(keops_kmeans(x, start, iter.max = iter))
    theirs <- suppressWarnings(kmeans(x, start, iter.max = iter, algorithm = "Lloyd"))
    expect_equal(unclass(ours)[names(theirs)], unclass(theirs), tolerance = 1e-10)
  }
  # float32: the labels of the points that are not near a tie in float64
  local_precision("float32")
  ours <- keops_kmeans(x, start, iter.max = 50)
  expect_gt(mean(ours$cluster == theirs$cluster), 0.99)
  expect_equal(ours$tot.withinss, theirs$tot.withinss, tolerance = 1e-4)
})

test_that("the finiteness check of points sees every NA, NaN and infinite value, and only those", {
  # all_finite() against is.finite() on every element: a sum that overflows (finite values), infinite
  # values that cancel in a sum (Inf and -Inf: NaN), NA and NaN, integers and logicals
  cases <- list(matrix(c(1e308, 1e308, 1, 2), 2), matrix(c(Inf, -Inf, 1, 2), 2), matrix(c(1, NA, 3, 4), 2),
                matrix(c(NaN, 1, 2, 3), 2), matrix(c(-Inf, 1, 2, 3), 2), matrix(1:4, 2), matrix(c(1L, NA, 2L, 3L), 2),
                matrix(c(.Machine$integer.max, .Machine$integer.max, 1L, 1L), 2), matrix(c(TRUE, NA), 1),
                matrix(numeric(0), 0, 2))
  for (x in cases) expect_identical(rkeops:::all_finite(x), all(is.finite(x)), info = deparse(x))
  # from 1e6 doubles, the engine's column sums (on every core) say it
  big <- matrix(runif(3 * 400009), ncol = 3)
  expect_equal(rkeops:::column_sums(big), colSums(big), tolerance = 1e-12)
  for (bad in list(NA, NaN, Inf, -Inf)) {
    worse <- big
    worse[400001, 2] <- bad
    expect_false(rkeops:::all_finite(worse), info = format(bad))
  }
  big[1:2, 3] <- 1e308   # (a sum that overflows: finite values)
  expect_true(rkeops:::all_finite(big))
  expect_no_warning(keops_kmeans(matrix(c(.Machine$integer.max, 1L, 2L, 3L), 2), 1))
  expect_identical(keops_kmeans(matrix(1e308, 3, 1), 1)$size, 3L)  # (its sum overflows)
})

test_that("float32 sees the points centred only when their means are beyond their spread", {
  near <- cbind(rnorm(5003), rnorm(5003, 0.5))
  expect_identical(rkeops:::kmeans_shift(near, colMeans(near)), c(0, 0))
  far <- near + rep(c(0, 3), each = 5003)
  expect_identical(rkeops:::kmeans_shift(far, colMeans(far)), colMeans(far))
  expect_identical(rkeops:::kmeans_shift(far[1, , drop = FALSE], colMeans(far[1, , drop = FALSE])), colMeans(far[1, , drop = FALSE]))
})

test_that("the points moved by the engine (K-means' centring, GMM's standardisation) and their spreads are R's arithmetic", {
  set.seed(4)
  x <- matrix(rnorm(3 * 300007, 1e6), ncol = 3)   # (several threads' blocks)
  m <- colMeans(x)
  s <- c(1, 0.25, 3)
  expect_identical(rkeops:::columns_moved(x, m), x - rep(m, each = nrow(x)), ignore_attr = TRUE)
  expect_identical(rkeops:::columns_moved(x, m, s), (x - rep(m, each = nrow(x))) * rep(s, each = nrow(x)))
  expect_error(rkeops:::columns_moved(x, 1:2), "'m' must be 3 doubles")
  # the sums of squared deviations (K-means' total, GMM's spreads) against R's, to the sums' order
  expect_equal(rkeops:::column_squares(x, m), colSums((x - rep(m, each = nrow(x)))^2), tolerance = 1e-13)
  expect_error(rkeops:::column_squares(x, 1), "'m' must be 3 doubles")
  # the clusters' sums of squares around their centres (cluster 4 empty)
  labels <- rep_len(c(1, 2, 3, 5, 2), nrow(x))
  centers <- matrix(rnorm(15, 1e6), 5, 3)
  want <- vapply(1:5, function(l) sum((x[labels == l, , drop = FALSE] - rep(centers[l, ], each = sum(labels == l)))^2), 0)
  expect_equal(rkeops:::kmeans_withinss(x, labels, centers), want, tolerance = 1e-12)
  expect_error(rkeops:::kmeans_withinss(x, replace(labels, 7, 6), centers), "whole numbers from 1 to 5")
  # labels (doubles) as integers: as.integer() for whole numbers, NA for anything else; zeros
  expect_identical(rkeops:::labels_as_integers(matrix(as.double(labels))), as.integer(labels))
  expect_identical(rkeops:::labels_as_integers(c(1, -4, 3.5, NA, NaN, Inf, 3e9, -2^31)),
                   c(1L, -4L, NA, NA, NA, NA, NA, NA))
  expect_identical(rkeops:::labels_as_integers(5:7), 5:7)
  expect_identical(rkeops:::zero_matrix(300007, 2), matrix(0, 300007, 2))
  expect_identical(rkeops:::zero_matrix(0, 1), matrix(0, 0, 1))
})

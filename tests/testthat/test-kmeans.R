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
  expect_warning(short <- keops_kmeans(x, start, iter.max = 1), "did not converge in 1 iterations")
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
  # the seeding draws rows of x: the first is uniform
  set.seed(10)
  first <- sample.int(nrow(x), 1L)
  set.seed(10)
  expect_equal(unname(rkeops:::kmeans_pp(x, 3)[1, ]), unname(x[first, ]))
  set.seed(11)
  many <- keops_kmeans(x, 3, nstart = 4)
  set.seed(11)
  starts <- lapply(1:4, function(s) rkeops:::kmeans_pp(x, 3))
  each <- vapply(starts, function(s) kmeans(x, s, algorithm = "Lloyd")$tot.withinss, 0)
  expect_equal(many$tot.withinss, min(each), tolerance = 1e-10)
  new <- matrix(rnorm(2 * 41, 1, 3), 41, 2)
  brute <- apply(new, 1, function(p) which.min(colSums((t(many$centers) - p)^2)))
  expect_identical(predict(many, new), unname(brute))
})

test_that("an empty cluster keeps its centre, with stats' warning", {
  local_precision("float64")
  x <- kmeans_data(7)
  start <- rbind(x[1, ], x[400, ], c(100, 100))
  expect_warning(fit <- keops_kmeans(x, start), "empty cluster")
  expect_identical(fit$size[3], 0L)
  expect_equal(unname(fit$centers[3, ]), c(100, 100))
  expect_equal(fit$withinss[3], 0)
})

test_that("keops_kmeans() refuses bad input, naming the argument", {
  x <- kmeans_data()
  expect_error(keops_kmeans("a", 2), "'x' must be a numeric matrix", class = "rkeops_error_input")
  bad <- x
  bad[3, 1] <- NA
  expect_error(keops_kmeans(bad, 2), "finite values", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, 0), "'centers' must be a whole number >= 1", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, nrow(x) + 1), "'centers' must be", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, x[1:3, 1, drop = FALSE]), "3 columns|2 columns", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, 2, iter.max = 0), "'iter.max'", class = "rkeops_error_input")
  expect_error(keops_kmeans(x, 2, algorithm = "Hartigan-Wong"), "'algorithm'", class = "rkeops_error_input")
  expect_error(keops_kmeans(matrix(1, 5, 2), 2), "more clusters \\(2\\) than distinct points",
               class = "rkeops_error_input")
  fit <- keops_kmeans(x, x[1:2, ])
  expect_error(predict(fit, matrix(1, 2, 3)), "'newdata' must be", class = "rkeops_error_input")
})

# Reductions, sum schemes, numerical robustness and input handling of the
# operators returned by keops_kernel().

testthat::local_edition(3)

GAUSS_ARGS <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)")

# data for the min/max/k-min tests: f = Cos(x - y) + SqDist(x, y) * b has
# dimension 3 and continuous random values (no ties)
MM_ARGS <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)")
MM_F <- "Cos(x - y) + SqDist(x, y) * b"
mm_data <- function(N, M, precision) {
  list(x = prep(rmat(N, 3), precision), y = prep(rmat(M, 3), precision),
       b = prep(rmat(M, 1, 0.5, 1.5), precision))
}
mm_values <- function(d) {
  pair_eval(function(x, y, b) cos(x - y) + rowSums((x - y)^2) * b[, 1],
            list(x = d$x), list(y = d$y, b = d$b))
}

# ---------------------------------------------------------------------------
# Sum_Reduction
# ---------------------------------------------------------------------------

test_that("Sum_Reduction of a Gaussian kernel, both axes, large odd sizes", {
  set.seed(201)
  for (prec in PRECISIONS) {
    for (sz in list(c(513, 1031), c(101, 257), c(1, 1031), c(513, 1))) {
      N <- sz[1]; M <- sz[2]
      x <- prep(rmat(N, 3), prec); y <- prep(rmat(M, 3), prec)
      b <- prep(rmat(M, 2), prec); a <- prep(rmat(N, 2), prec)
      s <- 0.5
      K <- exp(-s * sqdist(x, y))
      res0 <- run_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS,
                         list(x, y, b, s), prec)
      expect_close(res0, K %*% b, tol_for(prec), info = paste(prec, N, M, "axis 0"))
      res1 <- run_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*a, 1)",
                         c("x = Vi(3)", "y = Vj(3)", "a = Vi(2)", "s = Pm(1)"),
                         list(x, y, a, s), prec)
      expect_close(res1, t(K) %*% a, tol_for(prec), info = paste(prec, N, M, "axis 1"))
    }
  }
})

test_that("the documented example returns an N x 2 matrix", {
  set.seed(202)
  x <- rmat(37, 3); y <- rmat(29, 3); b <- rmat(29, 2)
  op <- keops_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS)
  expect_true(is.function(op))
  res <- op(list(x, y, b, 0.5))
  expect_true(is.matrix(res))
  expect_identical(dim(res), c(37L, 2L))
  expect_type(res, "double")
  # default precision is float32 unless changed; float32 accuracy suffices
  expect_close(res, exp(-0.5 * sqdist(x, y)) %*% b, 1e-5)
})

test_that("scalar Sum_Reduction gives an N x 1 (or M x 1) matrix", {
  set.seed(203)
  x <- rmat(37, 3); y <- rmat(29, 3)
  for (prec in PRECISIONS) {
    r0 <- run_kernel("Sum_Reduction(SqDist(x, y), 0)", MM_ARGS[1:2], list(x, y), prec)
    r1 <- run_kernel("Sum_Reduction(SqDist(x, y), 1)", MM_ARGS[1:2], list(x, y), prec)
    expect_identical(dim(r0), c(37L, 1L))
    expect_identical(dim(r1), c(29L, 1L))
  }
})

# ---------------------------------------------------------------------------
# Min / Max / ArgMin / ArgMax
# ---------------------------------------------------------------------------

test_that("Min_Reduction and Max_Reduction, componentwise for vector f", {
  set.seed(204)
  for (prec in PRECISIONS) {
    d <- mm_data(37, 101, prec)
    Fv <- mm_values(d)
    for (ax in 0:1) {
      for (red in c("Min", "Max")) {
        res <- run_kernel(sprintf("%s_Reduction(%s, %d)", red, MM_F, ax), MM_ARGS,
                          list(d$x, d$y, d$b), prec)
        expect_close(res, ref_reduce(Fv, ax, tolower(red)), tol_for(prec),
                     info = paste(red, prec, "axis", ax))
      }
    }
  }
})

test_that("ArgMin_Reduction and ArgMax_Reduction give 1-based integer indices", {
  set.seed(205)
  for (prec in PRECISIONS) {
    d <- mm_data(37, 101, prec)
    Fv <- mm_values(d)
    for (ax in 0:1) {
      for (red in c("Min", "Max")) {
        res <- run_kernel(sprintf("Arg%s_Reduction(%s, %d)", red, MM_F, ax), MM_ARGS,
                          list(d$x, d$y, d$b), prec)
        info <- paste0("Arg", red, " ", prec, " axis ", ax)
        ref_idx <- ref_reduce(Fv, ax, paste0("arg", tolower(red)))
        if (prec == "float64") {
          expect_identical(res, ref_idx, info = info)
        } else {
          expect_indices_attain(res, Fv, ax, ref_reduce(Fv, ax, tolower(red)),
                                tol_for(prec), info = info)
        }
      }
    }
  }
})

test_that("Min_ArgMin_Reduction and Max_ArgMax_Reduction return list(values, indices)", {
  set.seed(206)
  for (prec in PRECISIONS) {
    d <- mm_data(29, 37, prec)
    Fv <- mm_values(d)
    for (ax in 0:1) {
      for (red in c("Min", "Max")) {
        res <- run_kernel(sprintf("%s_Arg%s_Reduction(%s, %d)", red, red, MM_F, ax),
                          MM_ARGS, list(d$x, d$y, d$b), prec)
        info <- paste0(red, "_Arg", red, " ", prec, " axis ", ax)
        expect_type(res, "list")
        expect_named(res, c("values", "indices"))
        vals <- ref_reduce(Fv, ax, tolower(red))
        expect_close(res$values, vals, tol_for(prec), info = info)
        if (prec == "float64") {
          expect_identical(res$indices, ref_reduce(Fv, ax, paste0("arg", tolower(red))),
                           info = info)
        } else {
          expect_indices_attain(res$indices, Fv, ax, vals, tol_for(prec), info = info)
        }
      }
    }
  }
})

# ---------------------------------------------------------------------------
# K-min
# ---------------------------------------------------------------------------

test_that("KMin_Reduction: N x K matrix for scalar f, N x K x D array otherwise, sorted", {
  set.seed(207)
  for (prec in PRECISIONS) {
    d <- mm_data(37, 101, prec)
    F1 <- pair_eval(function(x, y) rowSums((x - y)^2), list(x = d$x), list(y = d$y))
    F3 <- mm_values(d)
    for (ax in 0:1) {
      n <- if (ax == 0) 37L else 101L
      r1 <- run_kernel(sprintf("KMin_Reduction(SqDist(x, y), 3, %d)", ax), MM_ARGS[1:2],
                       list(d$x, d$y), prec)
      expect_true(is.matrix(r1))
      expect_identical(dim(r1), c(n, 3L))
      expect_close(r1, ref_reduce(F1, ax, "kmin", K = 3), tol_for(prec),
                   info = paste("KMin dim 1", prec, ax))
      expect_true(all(apply(r1, 1, function(v) !is.unsorted(v))))
      r3 <- run_kernel(sprintf("KMin_Reduction(%s, 4, %d)", MM_F, ax), MM_ARGS,
                       list(d$x, d$y, d$b), prec)
      expect_identical(dim(r3), c(n, 4L, 3L))
      expect_close(r3, ref_reduce(F3, ax, "kmin", K = 4), tol_for(prec),
                   info = paste("KMin dim 3", prec, ax))
      expect_true(all(apply(r3, c(1, 3), function(v) !is.unsorted(v))))
    }
  }
})

test_that("ArgKMin_Reduction gives 1-based integer indices, shapes as KMin", {
  set.seed(208)
  for (prec in PRECISIONS) {
    d <- mm_data(37, 101, prec)
    F1 <- pair_eval(function(x, y) rowSums((x - y)^2), list(x = d$x), list(y = d$y))
    F3 <- mm_values(d)
    for (ax in 0:1) {
      r1 <- run_kernel(sprintf("ArgKMin_Reduction(SqDist(x, y), 3, %d)", ax),
                       MM_ARGS[1:2], list(d$x, d$y), prec)
      r3 <- run_kernel(sprintf("ArgKMin_Reduction(%s, 4, %d)", MM_F, ax), MM_ARGS,
                       list(d$x, d$y, d$b), prec)
      info <- paste("ArgKMin", prec, "axis", ax)
      if (prec == "float64") {
        expect_identical(r1, ref_reduce(F1, ax, "argkmin", K = 3), info = info)
        expect_identical(r3, ref_reduce(F3, ax, "argkmin", K = 4), info = info)
      } else {
        expect_indices_attain(r1, F1, ax, ref_reduce(F1, ax, "kmin", K = 3),
                              tol_for(prec), K = 3, info = info)
        expect_indices_attain(r3, F3, ax, ref_reduce(F3, ax, "kmin", K = 4),
                              tol_for(prec), K = 4, info = info)
      }
    }
  }
})

test_that("KMin_ArgKMin_Reduction returns list(values, indices)", {
  set.seed(209)
  for (prec in PRECISIONS) {
    d <- mm_data(37, 57, prec)
    F3 <- mm_values(d)
    for (ax in 0:1) {
      res <- run_kernel(sprintf("KMin_ArgKMin_Reduction(%s, 5, %d)", MM_F, ax), MM_ARGS,
                        list(d$x, d$y, d$b), prec)
      info <- paste("KMin_ArgKMin", prec, "axis", ax)
      expect_named(res, c("values", "indices"))
      vals <- ref_reduce(F3, ax, "kmin", K = 5)
      expect_close(res$values, vals, tol_for(prec), info = info)
      if (prec == "float64") {
        expect_identical(res$indices, ref_reduce(F3, ax, "argkmin", K = 5), info = info)
      } else {
        expect_indices_attain(res$indices, F3, ax, vals, tol_for(prec), K = 5, info = info)
      }
    }
  }
})

test_that("K equal to the reduction range gives a full sort", {
  set.seed(210)
  x <- rmat(13, 2); y <- rmat(5, 2)
  F1 <- sqdist(x, y)
  res <- run_kernel("KMin_ArgKMin_Reduction(SqDist(x, y), 5, 0)",
                    c("x = Vi(2)", "y = Vj(2)"), list(x, y), "float64")
  expect_close(res$values, t(apply(F1, 1, sort)), 1e-10)
  ord <- t(apply(F1, 1, order)); storage.mode(ord) <- "integer"
  expect_identical(res$indices, ord)
})

# ---------------------------------------------------------------------------
# LogSumExp, LogSumExpWeight, SumSoftMaxWeight
# ---------------------------------------------------------------------------

test_that("LogSumExp_Reduction, both axes", {
  set.seed(211)
  for (prec in PRECISIONS) {
    x <- prep(rmat(37, 3), prec); y <- prep(rmat(101, 3), prec)
    Fv <- pair_eval(function(x, y) -2 * rowSums((x - y)^2) + rowSums(x * y),
                    list(x = x), list(y = y))
    for (ax in 0:1) {
      res <- run_kernel(sprintf("LogSumExp_Reduction(-2 * SqDist(x, y) + (x|y), %d)", ax),
                        MM_ARGS[1:2], list(x, y), prec)
      expect_close(res, ref_reduce(Fv, ax, "logsumexp"), tol_for(prec),
                   info = paste("LogSumExp", prec, "axis", ax))
    }
  }
})

test_that("LogSumExp_Reduction does not overflow or underflow for |f| ~ 1000", {
  set.seed(212)
  args <- c("x = Vi(3)", "y = Vj(3)", "s = Pm(1)")
  for (prec in PRECISIONS) {
    x <- prep(rmat(37, 3), prec); y <- prep(rmat(101, 3), prec)
    for (s in c(1000, -1000, 5000)) {
      Fv <- pair_eval(function(x, y) s + rowSums(x * y), list(x = x), list(y = y))
      for (ax in 0:1) {
        res <- run_kernel(sprintf("LogSumExp_Reduction(s + (x|y), %d)", ax), args,
                          list(x, y, s), prec)
        info <- paste("LogSumExp s =", s, prec, "axis", ax)
        expect_true(all(is.finite(res)), info = info)
        expect_close(res, ref_reduce(Fv, ax, "logsumexp"), tol_for(prec), info = info)
      }
    }
  }
})

test_that("LogSumExpWeight_Reduction = log(sum_j exp(f) g), output dim of g", {
  set.seed(213)
  args <- c("x = Vi(3)", "y = Vj(3)", "g = Vj(2)")
  for (prec in PRECISIONS) {
    x <- prep(rmat(37, 3), prec); y <- prep(rmat(101, 3), prec)
    g <- prep(rmat(101, 2, 0.5, 1.5), prec)
    Fv <- pair_eval(function(x, y) rowSums(x * y), list(x = x), list(y = y))
    G <- pair_eval(function(g) g, j = list(g = g), N = 37)
    res <- run_kernel("LogSumExpWeight_Reduction((x|y), g, 0)", args, list(x, y, g), prec)
    expect_close(res, ref_reduce(Fv, 0, "lse_weight", G = G), tol_for(prec),
                 info = paste("LSEWeight", prec))
    # axis 1 with an i-indexed weight
    h <- prep(rmat(37, 2, 0.5, 1.5), prec)
    H <- pair_eval(function(h) h, i = list(h = h), M = 101)
    res1 <- run_kernel("LogSumExpWeight_Reduction((x|y), h, 1)",
                       c("x = Vi(3)", "y = Vj(3)", "h = Vi(2)"), list(x, y, h), prec)
    expect_close(res1, ref_reduce(Fv, 1, "lse_weight", G = H), tol_for(prec),
                 info = paste("LSEWeight axis 1", prec))
  }
})

test_that("SumSoftMaxWeight_Reduction = sum_j exp(f) g / sum_j exp(f)", {
  set.seed(214)
  args <- c("x = Vi(3)", "y = Vj(3)", "g = Vj(3)")
  for (prec in PRECISIONS) {
    x <- prep(rmat(37, 3), prec); y <- prep(rmat(101, 3), prec)
    g <- prep(rmat(101, 3, 0.5, 2), prec)
    Fv <- pair_eval(function(x, y) -3 * rowSums((x - y)^2), list(x = x), list(y = y))
    G <- pair_eval(function(g) g, j = list(g = g), N = 37)
    res <- run_kernel("SumSoftMaxWeight_Reduction(-3 * SqDist(x, y), g, 0)", args,
                      list(x, y, g), prec)
    expect_identical(dim(res), c(37L, 3L))
    expect_close(res, ref_reduce(Fv, 0, "softmax_weight", G = G), tol_for(prec),
                 info = paste("SoftMax", prec))
    h <- prep(rmat(37, 3, 0.5, 2), prec)
    H <- pair_eval(function(h) h, i = list(h = h), M = 101)
    res1 <- run_kernel("SumSoftMaxWeight_Reduction(-3 * SqDist(x, y), h, 1)",
                       c("x = Vi(3)", "y = Vj(3)", "h = Vi(3)"), list(x, y, h), prec)
    expect_close(res1, ref_reduce(Fv, 1, "softmax_weight", G = H), tol_for(prec),
                 info = paste("SoftMax axis 1", prec))
  }
})

test_that("LogSumExpWeight and SumSoftMaxWeight are stable for large f", {
  # data chosen so that s + (x|y) is exact in float32 (multiples of 1/16)
  set.seed(215)
  x <- imat(37, 3); y <- imat(101, 3) / 8
  g <- rmat(101, 2, 0.5, 1.5)
  args <- c("x = Vi(3)", "y = Vj(3)", "g = Vj(2)", "s = Pm(1)")
  for (prec in PRECISIONS) {
    gg <- prep(g, prec)
    G <- pair_eval(function(g) g, j = list(g = gg), N = 37)
    for (s in c(600, -600)) {
      Fv <- pair_eval(function(x, y) s + rowSums(x * y), list(x = x), list(y = y))
      r1 <- run_kernel("LogSumExpWeight_Reduction(s + (x|y), g, 0)", args,
                       list(x, y, gg, s), prec)
      r2 <- run_kernel("SumSoftMaxWeight_Reduction(s + (x|y), g, 0)", args,
                       list(x, y, gg, s), prec)
      info <- paste(prec, "s =", s)
      expect_true(all(is.finite(r1)), info = info)
      expect_true(all(is.finite(r2)), info = info)
      expect_close(r1, ref_reduce(Fv, 0, "lse_weight", G = G), tol_for(prec), info = info)
      expect_close(r2, ref_reduce(Fv, 0, "softmax_weight", G = G), tol_for(prec), info = info)
    }
  }
})

# ---------------------------------------------------------------------------
# summation schemes and accuracy
# ---------------------------------------------------------------------------

test_that("all sum schemes give the right answer", {
  set.seed(216)
  N <- 101; M <- 1031
  for (prec in PRECISIONS) {
    x <- prep(rmat(N, 3), prec); y <- prep(rmat(M, 3), prec); b <- prep(rmat(M, 2), prec)
    ref <- exp(-0.5 * sqdist(x, y)) %*% b
    for (scheme in c("auto", "direct_sum", "block_sum", "kahan_scheme")) {
      tol <- if (prec == "float32" && scheme == "direct_sum") 5e-5 else tol_for(prec)
      res <- run_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS,
                        list(x, y, b, 0.5), prec, sum_scheme = scheme)
      expect_close(res, ref, tol, info = paste(scheme, prec))
    }
  }
})

test_that("default scheme sums 1e6 float32 terms to 1e-6 relative accuracy", {
  set.seed(217)
  M <- 1e6
  xi <- matrix(c(1, 0.5, 2), ncol = 1)
  args <- c("x = Vi(1)", "b = Vj(1)")
  # (a) values exactly representable in float32: the double sum is exact
  b <- matrix(sample(1:1024, M, replace = TRUE) / 1024, ncol = 1)
  # (b) arbitrary positive values, reference = exact sum of the float32-rounded values
  b2 <- matrix(stats::runif(M, 0.5, 1.5), ncol = 1)
  for (case in list(list(b = b, total = sum(b)),
                    list(b = b2, total = sum(as_f32(b2))))) {
    for (n in 1:3) {
      x <- xi[seq_len(n), , drop = FALSE]
      res <- run_kernel("Sum_Reduction(b * x, 0)", args, list(x, case$b), "float32")
      expect_identical(dim(res), c(n, 1L))
      rel <- max(abs(res - x * case$total) / (x * case$total))
      expect_lt(rel, 1e-6)
    }
    # the same over axis 1 (1e6 i-rows reduced)
    res1 <- run_kernel("Sum_Reduction(x * b, 1)", c("x = Vi(1)", "b = Vj(1)"),
                       list(case$b, xi), "float32")
    expect_identical(dim(res1), c(3L, 1L))
    expect_lt(max(abs(res1 - xi * case$total) / (xi * case$total)), 1e-6)
  }
})

# ---------------------------------------------------------------------------
# NaN / Inf
# ---------------------------------------------------------------------------

test_that("NaN and Inf propagate like IEEE arithmetic", {
  set.seed(218)
  N <- 37; M <- 29
  for (prec in PRECISIONS) {
    x <- prep(rmat(N, 3, 0, 0.5), prec); y <- prep(rmat(M, 3, 0, 0.5), prec)
    b <- prep(rmat(M, 2, 0.5, 1), prec)
    info <- prec
    # NaN in an i-row: only that output row is NaN (axis 0) ...
    xn <- x; xn[3, 2] <- NaN
    r <- run_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS,
                    list(xn, y, b, 0.5), prec)
    expect_true(all(is.na(r[3, ])), info = info)
    expect_close(r[-3, , drop = FALSE], (exp(-0.5 * sqdist(x, y)) %*% b)[-3, , drop = FALSE],
                 tol_for(prec), info = info)
    # ... and every output row reducing over it is NaN (axis 1)
    r1 <- run_kernel("Sum_Reduction(Exp(-SqDist(x,y))*a, 1)",
                     c("x = Vi(3)", "y = Vj(3)", "a = Vi(1)"),
                     list(xn, y, matrix(1, N, 1)), prec)
    expect_true(all(is.na(r1)), info = info)
    # NaN in a j-row: every output row of axis 0 is NaN
    yn <- y; yn[5, 1] <- NaN
    r <- run_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS,
                    list(x, yn, b, 0.5), prec)
    expect_true(all(is.na(r)), info = info)
    # Inf weight with positive kernel values: +Inf in that column only
    bi <- b; bi[4, 1] <- Inf
    r <- run_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS,
                    list(x, y, bi, 0.5), prec)
    expect_true(all(r[, 1] == Inf), info = info)
    expect_true(all(is.finite(r[, 2])), info = info)
    # Min over a NaN term gives NaN
    r <- run_kernel("Min_Reduction(SqDist(x, y), 0)", MM_ARGS[1:2], list(x, yn), prec)
    expect_true(all(is.na(r)), info = info)
    r <- run_kernel("Min_Reduction(SqDist(x, y), 0)", MM_ARGS[1:2], list(xn, y), prec)
    expect_true(is.na(r[3, 1]), info = info)
    expect_close(r[-3, , drop = FALSE], matrix(apply(sqdist(x, y), 1, min))[-3, , drop = FALSE],
                 tol_for(prec), info = info)
    # NaN produced inside the formula (Log of a negative number)
    r <- run_kernel("Sum_Reduction(Log(Elem(x, 0) - Elem(y, 0)) * 0 + 1, 0)",
                    MM_ARGS[1:2], list(x, y), prec)
    has_neg <- apply(outer(x[, 1], y[, 1], "-") < 0, 1, any)
    expect_identical(is.na(r[, 1]), has_neg, info = info)
  }
})

# ---------------------------------------------------------------------------
# input handling
# ---------------------------------------------------------------------------

test_that("named inputs are matched by name, in any order", {
  set.seed(219)
  x <- rmat(37, 3); y <- rmat(29, 3); b <- rmat(29, 2)
  local_precision("float64")
  op <- keops_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS)
  ref <- exp(-0.5 * sqdist(x, y)) %*% b
  r_pos <- op(list(x, y, b, 0.5))
  r_named <- op(list(x = x, y = y, b = b, s = 0.5))
  r_perm <- op(list(s = 0.5, b = b, y = y, x = x))
  expect_close(r_pos, ref, 1e-10)
  expect_identical(r_named, r_pos)
  expect_identical(r_perm, r_pos)
  # two variables of the same shape swapped by name must not be swapped
  op2 <- keops_kernel("Sum_Reduction(x - 2 * y, 0)", c("x = Vi(3)", "y = Vj(3)"))
  xs <- rmat(29, 3)
  expect_close(op2(list(y = y, x = xs)), 29 * xs - 2 * matrix(colSums(y), 29, 3, byrow = TRUE),
               1e-10)
})

test_that("parameters may be a vector or a 1 x d matrix; Pm(1) a scalar", {
  set.seed(220)
  x <- rmat(37, 3); y <- rmat(29, 3)
  w <- stats::runif(3, 0.5, 2)
  args <- c("x = Vi(3)", "y = Vj(3)", "w = Pm(3)", "s = Pm(1)")
  local_precision("float64")
  op <- keops_kernel("Sum_Reduction(Exp(-s * SqNormDiag(w, x - y)), 0)", args)
  ref <- pair_eval(function(x, y) exp(-0.7 * rowSums(matrix(w, nrow(x), 3, byrow = TRUE) *
                                                     (x - y)^2)),
                   list(x = x), list(y = y))
  ref <- ref_reduce(ref, 0)
  r_vec <- op(list(x, y, w, 0.7))
  r_mat <- op(list(x, y, matrix(w, nrow = 1), matrix(0.7, 1, 1)))
  expect_close(r_vec, ref, 1e-10)
  expect_identical(r_mat, r_vec)
})

test_that("a plain vector is accepted for a Vi(1) variable", {
  set.seed(221)
  v <- stats::runif(37); y <- rmat(29, 1)
  args <- c("v = Vi(1)", "y = Vj(1)")
  local_precision("float64")
  op <- keops_kernel("Sum_Reduction(Exp(-Square(v - y)), 0)", args)
  r_vec <- op(list(v, y))
  r_mat <- op(list(matrix(v, ncol = 1), y))
  expect_identical(dim(r_vec), c(37L, 1L))
  expect_identical(r_vec, r_mat)
  expect_close(r_vec, matrix(rowSums(exp(-outer(v, y[, 1], "-")^2))), 1e-10)
})

test_that("integer and logical inputs are converted to numeric", {
  set.seed(222)
  xi <- matrix(sample(-3:3, 37 * 3, replace = TRUE), 37, 3)
  yi <- matrix(sample(-3:3, 29 * 3, replace = TRUE), 29, 3)
  bl <- matrix(stats::runif(29 * 2) > 0.5, 29, 2)
  stopifnot(is.integer(xi), is.logical(bl))
  for (prec in PRECISIONS) {
    local_precision(prec)
    op <- keops_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS)
    r_conv <- op(list(xi, yi, bl, 1L))
    r_dbl <- op(list(xi * 1.0, yi * 1.0, bl * 1.0, 1.0))
    expect_identical(r_conv, r_dbl, info = prec)
    expect_close(r_conv, exp(-sqdist(xi * 1.0, yi * 1.0)) %*% (bl * 1.0), tol_for(prec),
                 info = prec)
  }
})

test_that("an operator called twice gives identical results", {
  set.seed(223)
  x <- rmat(101, 3); y <- rmat(257, 3); b <- rmat(257, 2)
  for (prec in PRECISIONS) {
    local_precision(prec)
    op <- keops_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS)
    r1 <- op(list(x, y, b, 0.5))
    r2 <- op(list(x, y, b, 0.5))
    expect_identical(r1, r2)
    op_b <- keops_kernel("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", GAUSS_ARGS)
    expect_close(op_b(list(x, y, b, 0.5)), r1, tol_for(prec)) # a second operator
    # an operator is reusable with inputs of other sizes
    r3 <- op(list(x[1:7, ], y[1:11, ], b[1:11, ], 0.5))
    expect_close(r3, exp(-0.5 * sqdist(x[1:7, ], y[1:11, ])) %*% b[1:11, ], tol_for(prec))
    expect_identical(op(list(x, y, b, 0.5)), r1)
  }
})

test_that("precision options select float32 or float64 arithmetic", {
  args <- c("x = Vi(1)", "y = Vj(1)")
  x <- matrix(1 + 2^-30, 1, 1); y <- matrix(1, 1, 1)
  old <- local_precision("float64") # restores the original setting afterwards
  r64 <- keops_kernel("Sum_Reduction(x * y, 0)", args)(list(x, y))
  expect_identical(r64, matrix(1 + 2^-30, 1, 1))
  set_rkeops_options(precision = "float32")
  r32 <- keops_kernel("Sum_Reduction(x * y, 0)", args)(list(x, y))
  expect_identical(r32, matrix(1, 1, 1))
  rkeops_use_float64()
  expect_identical(keops_kernel("Sum_Reduction(x * y, 0)", args)(list(x, y)), r64)
  rkeops_use_float32()
  expect_identical(keops_kernel("Sum_Reduction(x * y, 0)", args)(list(x, y)), r32)
})

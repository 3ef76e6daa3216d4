# Plain-R reference helpers for the keops_kernel() test suite.
#
# Everything here is computed in float64 base R and is independent of the
# package implementation.  Conventions used throughout the tests:
#   * a reduction over axis 0 returns an N x D matrix (one row per i),
#     a reduction over axis 1 an M x D matrix (one row per j), also for D == 1;
#   * index reductions return 1-based integer matrices / arrays;
#   * "formula values" are held as N x M x D arrays F[i, j, d] = f_ij[d].

# ---------------------------------------------------------------------------
# float32 rounding (base R can write 4-byte IEEE floats)
# ---------------------------------------------------------------------------

#' Round a numeric vector / matrix / array to the nearest float32 value,
#' keeping dimensions. NaN / Inf are preserved.
as_f32 <- function(x) {
  d <- dim(x)
  v <- readBin(writeBin(as.double(x), raw(), size = 4L),
               what = "double", n = length(x), size = 4L)
  dim(v) <- d
  v
}

# In float32 tests the inputs are rounded to float32 *before* they are handed
# to both the engine and the reference, so that the reference sees exactly the
# values the engine sees.
prep <- function(x, precision) {
  if (identical(precision, "float32") && is.double(x)) as_f32(x) else x
}

PRECISIONS <- c("float64", "float32")

# default relative tolerances
tol_for <- function(precision) if (identical(precision, "float64")) 1e-10 else 1e-5

# ---------------------------------------------------------------------------
# precision option handling (no withr): set for the calling frame, restore on
# exit of that frame.
# ---------------------------------------------------------------------------

current_precision <- function() {
  p <- get_rkeops_options("precision")
  if (is.list(p)) p <- p[["precision"]]
  p
}

local_precision <- function(precision, env = parent.frame()) {
  old <- current_precision()
  set_rkeops_options(precision = precision)
  do.call(on.exit,
          list(substitute(set_rkeops_options(precision = old), list(old = old)),
               add = TRUE, after = FALSE), # LIFO: nested calls unwind in order
          envir = env)
  invisible(old)
}

# Create the operator and apply it, with `precision` in force for both the
# creation and the call; the previous precision is restored afterwards.
run_kernel <- function(formula, args, inputs, precision = "float64",
                       sum_scheme = NULL) {
  local_precision(precision)
  op <- if (is.null(sum_scheme)) {
    keops_kernel(formula, args)
  } else {
    keops_kernel(formula, args, sum_scheme = sum_scheme)
  }
  op(inputs)
}

# ---------------------------------------------------------------------------
# data helpers
# ---------------------------------------------------------------------------

rmat <- function(n, d, min = -1, max = 1) {
  matrix(stats::runif(n * d, min, max), nrow = n, ncol = d)
}

# integer-valued (but double) matrix: exact in float32, so comparisons,
# Sign, Step... can be tested exactly in both precisions.
imat <- function(n, d, values = -2:2) {
  matrix(as.double(sample(values, n * d, replace = TRUE)), nrow = n, ncol = d)
}

arg_names <- function(args) trimws(sub("=.*$", "", args))

as_col_matrix <- function(v) {
  if (is.null(dim(v))) matrix(as.double(v), ncol = 1L) else v
}

# squared Euclidean distance matrix between the rows of x (N x D) and y (M x D)
sqdist <- function(x, y) {
  x <- as_col_matrix(x); y <- as_col_matrix(y)
  d2 <- matrix(0, nrow(x), nrow(y))
  for (k in seq_len(ncol(x))) d2 <- d2 + outer(x[, k], y[, k], "-")^2
  d2
}

# ---------------------------------------------------------------------------
# pair expansion: every (i, j) pair becomes one row; i varies fastest, so a
# (N*M) x D matrix of values reshapes directly to an N x M x D array.
# ---------------------------------------------------------------------------

ei <- function(x, M) { # i-variable, N x d -> (N*M) x d
  x <- as_col_matrix(x)
  x[rep(seq_len(nrow(x)), times = M), , drop = FALSE]
}
ej <- function(y, N) { # j-variable, M x d -> (N*M) x d
  y <- as_col_matrix(y)
  y[rep(seq_len(nrow(y)), each = N), , drop = FALSE]
}
ep <- function(p, N, M) { # parameter, length d -> (N*M) x d
  p <- as.double(p)
  matrix(rep(p, each = N * M), nrow = N * M, ncol = length(p))
}

to_array <- function(V, N, M) {
  V <- as_col_matrix(V)
  stopifnot(nrow(V) == N * M)
  array(V, dim = c(N, M, ncol(V)))
}

#' Evaluate a vectorised formula `fun` on all (i, j) pairs.
#' i, j, p: named lists of i-variables, j-variables and parameters; `fun`
#' receives (N*M) x d matrices under the same names and returns a
#' (N*M) x D matrix (or a vector of length N*M). Returns an N x M x D array.
pair_eval <- function(fun, i = list(), j = list(), p = list(), N = NULL, M = NULL) {
  if (is.null(N)) N <- nrow(as_col_matrix(i[[1]]))
  if (is.null(M)) M <- nrow(as_col_matrix(j[[1]]))
  a <- c(lapply(i, ei, M = M), lapply(j, ej, N = N), lapply(p, ep, N = N, M = M))
  to_array(do.call(fun, a), N, M)
}

# row-wise helpers for (N*M) x d matrices
rsum <- function(A) matrix(rowSums(A), ncol = 1L)
rdot <- function(A, B) matrix(rowSums(A * B), ncol = 1L)
col_k <- function(A, k) A[, k, drop = FALSE] # 1-based column extraction

# ---------------------------------------------------------------------------
# generic reference reduction
# ---------------------------------------------------------------------------

as_f_array <- function(F) {
  if (is.function(F)) F <- F()
  if (is.list(F)) { # list of D N x M matrices
    D <- length(F)
    N <- nrow(F[[1]]); M <- ncol(F[[1]])
    F <- array(unlist(lapply(F, as.double)), dim = c(N, M, D))
  }
  if (length(dim(F)) == 2L) F <- array(F, dim = c(dim(F), 1L))
  stopifnot(length(dim(F)) == 3L)
  F
}

#' Reference reduction in float64.
#' @param Fij N x M x D array of formula values (or N x M matrix, a list of D
#'   N x M matrices, or a function returning one of those).
#' @param axis 0: reduce over j (result indexed by i); 1: reduce over i.
#' @param red one of "sum", "min", "max", "argmin", "argmax", "min_argmin",
#'   "max_argmax", "kmin", "argkmin", "kmin_argkmin", "logsumexp",
#'   "lse_weight", "softmax_weight".
#' @param K for the k-min reductions.
#' @param G weights (same conventions as Fij) for "lse_weight" and
#'   "softmax_weight".
ref_reduce <- function(Fij, axis = 0, red = "sum", K = NULL, G = NULL) {
  A <- as_f_array(Fij)
  if (!is.null(G)) G <- as_f_array(G)
  if (axis == 1) {
    A <- aperm(A, c(2L, 1L, 3L))
    if (!is.null(G)) G <- aperm(G, c(2L, 1L, 3L))
  }
  n <- dim(A)[1]; D <- dim(A)[3]
  per_cell <- function(fn) { # apply fn to each reduction vector A[r, , d]
    out <- matrix(NA, n, D)
    for (d in seq_len(D)) for (r in seq_len(n)) out[r, d] <- fn(A[r, , d])
    out
  }
  per_cell_k <- function(fn) { # fn returns K values -> n x K (x D)
    out <- array(NA, c(n, K, D))
    for (d in seq_len(D)) for (r in seq_len(n)) out[r, , d] <- fn(A[r, , d])
    if (D == 1L) out <- matrix(out[, , 1], n, K)
    out
  }
  switch(red,
    sum = matrix(rowSums(aperm(A, c(1L, 3L, 2L)), dims = 2L), n, D),
    min = per_cell(min),
    max = per_cell(max),
    argmin = { o <- per_cell(which.min); storage.mode(o) <- "integer"; o },
    argmax = { o <- per_cell(which.max); storage.mode(o) <- "integer"; o },
    min_argmin = list(values = ref_reduce(A, 0, "min"),
                      indices = ref_reduce(A, 0, "argmin")),
    max_argmax = list(values = ref_reduce(A, 0, "max"),
                      indices = ref_reduce(A, 0, "argmax")),
    kmin = per_cell_k(function(v) sort(v)[seq_len(K)]),
    argkmin = {
      o <- per_cell_k(function(v) order(v)[seq_len(K)])
      storage.mode(o) <- "integer"
      o
    },
    kmin_argkmin = list(values = ref_reduce(A, 0, "kmin", K = K),
                        indices = ref_reduce(A, 0, "argkmin", K = K)),
    logsumexp = {
      stopifnot(D == 1L)
      matrix(vapply(seq_len(n), function(r) {
        v <- A[r, , 1]; m <- max(v); m + log(sum(exp(v - m)))
      }, 0), n, 1L)
    },
    lse_weight = ,
    softmax_weight = {
      stopifnot(D == 1L, !is.null(G))
      Dg <- dim(G)[3]
      out <- matrix(NA_real_, n, Dg)
      for (r in seq_len(n)) {
        v <- A[r, , 1]; m <- max(v); w <- exp(v - m)
        for (k in seq_len(Dg)) {
          out[r, k] <- if (red == "lse_weight") {
            m + log(sum(w * G[r, , k]))
          } else {
            sum(w * G[r, , k]) / sum(w)
          }
        }
      }
      out
    },
    stop("unknown reduction in ref_reduce(): ", red)
  )
}

# ---------------------------------------------------------------------------
# expectations
# ---------------------------------------------------------------------------

#' Compare a numeric result with a reference: same dim, aggregate relative
#' error (expect_equal) and an element-wise check
#'   |res - ref| <= tol * (|ref| + mean |ref| of its slice)
#' where a slice is a column (matrix) or a [, , d] slab (3-d array). NaN must
#' be at the same places, infinities must match exactly.
expect_close <- function(object, expected, tol, info = NULL) {
  lab <- if (is.null(info)) "" else paste0(" [", info, "]")
  expect(is.numeric(object) && !is.null(dim(object)),
         paste0("result is not a numeric matrix/array", lab))
  expect_identical(dim(object), dim(expected), info = info)
  if (!is.numeric(object) || !identical(dim(object), dim(expected))) return(invisible())
  expect_equal(object, expected, tolerance = tol, info = info)
  o <- as.vector(object); e <- as.vector(expected)
  nas_ok <- identical(is.na(o), is.na(e))
  inf_ok <- identical(is.infinite(o), is.infinite(e)) &&
    all(o[is.infinite(e)] == e[is.infinite(e)])
  expect(nas_ok, paste0("NaN pattern differs", lab))
  expect(inf_ok, paste0("Inf pattern differs", lab))
  fin <- is.finite(e) & is.finite(o)
  nslice <- dim(expected)[length(dim(expected))]
  slice <- rep(seq_len(nslice), each = length(e) / nslice)
  scale <- vapply(seq_len(nslice), function(s) {
    v <- abs(e[slice == s & is.finite(e)])
    if (length(v)) mean(v) else 0
  }, 0)
  bound <- tol * (abs(e) + scale[slice])
  err <- abs(o - e)
  bad <- which(fin & err > bound)
  expect(length(bad) == 0L, if (length(bad)) sprintf(
    "%d element(s) off%s; first at %d: got %.10g, expected %.10g (rel tol %g)",
    length(bad), lab, bad[1], o[bad[1]], e[bad[1]], tol) else "")
  invisible(object)
}

#' Index result: integer type, right dim, and every reported index must reach
#' the optimum of its reduction vector (robust to near-ties in float32).
#' `Fij` as for ref_reduce; `best` the reference optimum values as returned by
#' ref_reduce(Fij, axis, "min"/"max") (K = NULL) or "kmin" (K given).
expect_indices_attain <- function(idx, Fij, axis, best, tol, K = NULL, info = NULL) {
  lab <- if (is.null(info)) "" else paste0(" [", info, "]")
  A <- as_f_array(Fij)
  if (axis == 1) A <- aperm(A, c(2L, 1L, 3L))
  n <- dim(A)[1]; R <- dim(A)[2]; D <- dim(A)[3]
  kk <- if (is.null(K)) 1L else as.integer(K)
  want_dim <- if (is.null(K)) c(n, D) else if (D == 1L) c(n, kk) else c(n, kk, D)
  expect_type(idx, "integer")
  expect_identical(dim(idx), as.integer(want_dim), info = info)
  if (!is.integer(idx) || !identical(dim(idx), as.integer(want_dim))) return(invisible())
  in_range <- all(!is.na(idx) & idx >= 1L & idx <= R)
  expect(in_range, paste0("indices not all in 1..", R, " (1-based?)", lab))
  if (!in_range) return(invisible())
  idxA <- array(idx, c(n, kk, D))
  bestA <- array(best, c(n, kk, D))
  picked <- array(NA_real_, c(n, kk, D))
  for (r in seq_len(n)) for (k in seq_len(kk)) for (d in seq_len(D)) {
    picked[r, k, d] <- A[r, idxA[r, k, d], d]
  }
  expect_close(picked, bestA, tol, info = info)
  if (kk > 1L) {
    distinct <- all(apply(idxA, c(1L, 3L), function(v) !anyDuplicated(v)))
    expect(distinct, paste0("repeated indices within a k-min row", lab))
  }
  invisible(idx)
}

# ---------------------------------------------------------------------------
# one-stop check of a formula body as a Sum_Reduction
# ---------------------------------------------------------------------------

#' Build "Sum_Reduction(<body>, axis)" with `args`, run it in each precision
#' and each axis and compare with the plain-R reference `fun` (see pair_eval).
#' i, j, p: named lists of inputs (names must match `args`).
check_formula <- function(body, args, fun, i = list(), j = list(), p = list(),
                          axis = c(0, 1), precision = PRECISIONS, tol = NULL,
                          red = "sum") {
  nm <- arg_names(args)
  all_in <- c(i, j, p)
  stopifnot(setequal(nm, names(all_in)))
  for (prec in precision) {
    ii <- lapply(i, prep, prec); jj <- lapply(j, prep, prec); pp <- lapply(p, prep, prec)
    inputs <- unname(c(ii, jj, pp)[nm])
    Fij <- pair_eval(fun, ii, jj, pp)
    for (ax in axis) {
      formula <- sprintf("Sum_Reduction(%s, %d)", body, ax)
      info <- sprintf("%s | %s", formula, prec)
      res <- run_kernel(formula, args, inputs, prec)
      expect_close(res, ref_reduce(Fij, ax, red), if (is.null(tol)) tol_for(prec) else tol,
                   info = info)
    }
  }
  invisible(TRUE)
}

# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------

#' Evaluate `expr`, expect an R error of class `class` (an rkeops error, see
#' ?rkeops_errors) and return its message. Errors that look like mistakes in
#' R code rather than deliberate input validation (missing function / object,
#' unused argument) make the expectation fail.
expect_keops_error <- function(expr, ..., class = "rkeops_error") {
  err <- tryCatch({ force(expr); NULL }, error = function(e) e)
  expect(!is.null(err), "expected an error, but none was raised")
  if (is.null(err)) return(invisible(""))
  expect(inherits(err, class), sprintf("the error is of class %s, not %s: %s", paste(class(err), collapse = "/"),
                                       class, conditionMessage(err)))
  msg <- conditionMessage(err)
  sloppy <- grepl("could not find function|unused argument|object '.*' not found|subscript out of bounds",
                  msg)
  expect(!sloppy, paste0("error looks accidental, not a validation error: ", msg))
  pats <- c(...)
  for (p in pats) {
    expect(grepl(p, msg, ignore.case = TRUE, perl = TRUE),
           sprintf("error message %s does not match /%s/", encodeString(msg, quote = "\""), p))
  }
  invisible(msg)
}

# Central finite differences of the scalar function f at the numeric array v (shaped like v).
finite_differences <- function(f, v, h = 1e-6) {
  out <- v
  for (k in seq_along(v)) {
    vp <- v; vp[k] <- vp[k] + h
    vm <- v; vm[k] <- vm[k] - h
    out[k] <- (f(vp) - f(vm)) / (2 * h)
  }
  out
}

# A gradient against finite differences: same shape, relative error below 1e-6.
expect_gradient <- function(got, want) {
  want <- as.matrix(want)
  expect_identical(dim(got), dim(want))
  expect_lt(max(abs(got - want) / (1 + abs(want))), 1e-6)
}

# Forget which one-time notes and warnings were given, so that a test sees them again.
forget_notices <- function() {
  env <- rkeops:::.rkeops_env
  env$axis_noticed <- NULL
  env$socket_noted <- NULL
  env$warned <- NULL
}

# rkeops 2 compatibility of the options, the set-up functions, keops_kernel()'s operators
# (inner_dim, description, Grad formulas) and keops_grad() (positions), against plain R in float64
# (dense matrices, finite differences).

testthat::local_edition(3)

# The options as they are at the start of each test, restored at its end.
local_options <- function(env = parent.frame()) {
  old <- get_rkeops_options()
  old_cache <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
  do.call(on.exit, list(substitute({
    do.call(set_rkeops_options, old)
    if (is.na(old_cache)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = old_cache)
  }, list(old = old, old_cache = old_cache)), add = TRUE), envir = env)
  invisible(old)
}

# A private temporary directory (as the engine wants its cache).
private_tempdir <- function(name) {
  dir <- file.path(tempdir(), paste0(name, "-", paste(sample(letters, 8), collapse = "")))
  dir.create(dir, mode = "0700")
  Sys.chmod(dir, "700")
  dir
}

# ---------------------------------------------------------------------------
# Options
# ---------------------------------------------------------------------------

test_that("set_rkeops_options() takes rkeops 2's list of named values and its option names", {
  local_options()
  set_rkeops_options(precision = "float32", device = 0)
  old <- set_rkeops_options(list(precision = "float64", device_id = 1))
  expect_identical(old$precision, "float32")
  expect_identical(get_rkeops_options("precision"), "float64")
  expect_identical(get_rkeops_options("device"), 1L)
  expect_identical(get_rkeops_options("device_id"), 1L)
  set_rkeops_options(input = list(precision = "float16"))
  expect_identical(get_rkeops_options("precision"), "float16")
  # rkeops 2's default device -1 is the first GPU; rkeops 2's ncore = 0 is all the cores
  set_rkeops_options(list(device_id = -1, ncore = 2))
  expect_identical(get_rkeops_options("device"), 0L)
  expect_identical(get_rkeops_options("ncore"), 2L)
  rkeops_use_cpu(ncore = 0)
  expect_null(get_rkeops_options("ncore"))
  expect_identical(get_rkeops_options("backend"), "CPU")
  # an empty list changes nothing
  before <- get_rkeops_options()
  set_rkeops_options(list())
  expect_identical(get_rkeops_options(), before)
  # the computations follow the precision set by the list form: float64 matches R to 1e-12
  set.seed(501)
  x <- rmat(37, 3); y <- rmat(53, 3)
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)), 0)", c("x = Vi(3)", "y = Vj(3)"))
  set_rkeops_options(list(precision = "float64"))
  expect_close(op(list(x, y)), matrix(rowSums(exp(-sqdist(x, y)))), 1e-12)
})

test_that("set_rkeops_options() with no argument resets every option, and do.call() restores", {
  local_options()
  defaults <- list(backend = "auto", precision = "float32", device = 0L, ncore = NULL,
                   verbosity = TRUE)
  old <- set_rkeops_options(backend = "CPU", precision = "float64", device = 2, ncore = 1,
                            verbosity = FALSE)
  expect_identical(get_rkeops_options("ncore"), 1L)
  changed <- set_rkeops_options()
  expect_identical(changed$precision, "float64")
  expect_identical(changed$verbosity, FALSE)
  expect_identical(get_rkeops_options(), defaults)
  set_rkeops_options(NULL)   # rkeops 2's explicit NULL input: the same reset
  expect_identical(get_rkeops_options(), defaults)
  # the returned options put everything back, NULL ncore included
  do.call(set_rkeops_options, changed)
  expect_identical(get_rkeops_options()[c("backend", "ncore")], list(backend = "CPU", ncore = 1L))
  do.call(set_rkeops_options, old)
  expect_identical(get_rkeops_options(), old)
})

test_that("get_rkeops_options() takes a vector of names, and rkeops 2's names", {
  local_options()
  set_rkeops_options(backend = "CPU", precision = "float64", ncore = NULL)
  all <- get_rkeops_options()
  expect_identical(names(all), c("backend", "precision", "device", "ncore", "verbosity"))
  two <- get_rkeops_options(c("backend", "precision"))
  expect_identical(two, list(backend = "CPU", precision = "float64"))
  expect_identical(get_rkeops_options(c("precision", "ncore")), all[c("precision", "ncore")])
  expect_identical(get_rkeops_options(tag = "precision"), "float64")  # the former argument name
  expect_identical(get_rkeops_options("cache_dir"), rkeops_cache_dir())
  expect_identical(get_rkeops_options("formula_only"), FALSE)
  expect_keops_error(get_rkeops_options(c("backend", "colour")), "colour")
  expect_keops_error(get_rkeops_options(3), "unknown")
})

test_that("verbosity: rkeops_enable_verbosity() and rkeops_disable_verbosity()", {
  local_options()
  old <- rkeops_disable_verbosity()
  expect_identical(get_rkeops_options("verbosity"), FALSE)
  expect_identical(old$verbosity, TRUE)
  rkeops_enable_verbosity()
  expect_identical(get_rkeops_options("verbosity"), TRUE)
  set_rkeops_options(list(verbosity = 0))   # rkeops 2's 0/1
  expect_identical(get_rkeops_options("verbosity"), FALSE)
  expect_keops_error(set_rkeops_options(verbosity = "yes"), "verbosity")
})

test_that("options without an effect here: an error, or a warning once per session", {
  local_options()
  forget_notices()
  before <- get_rkeops_options()
  expect_warning(set_rkeops_options(debug = TRUE), "no effect")
  expect_identical(get_rkeops_options("debug"), TRUE)
  expect_no_warning(set_rkeops_options(debug = 1))   # once per session
  set_rkeops_options(debug = FALSE)
  expect_identical(get_rkeops_options("debug"), FALSE)
  expect_no_error(set_rkeops_options(formula_only = FALSE))
  expect_keops_error(set_rkeops_options(formula_only = TRUE), "formula_only", "not supported")
  expect_keops_error(set_rkeops_options(list(use_cuda_if_possible = 1)), "rkeops 1", "backend")
  expect_keops_error(set_rkeops_options(build_dir = tempdir()), "rkeops 1", "cache_dir")
  expect_keops_error(set_rkeops_options(precision = "double"), "float64")
  expect_keops_error(set_rkeops_options(colour = 1), "unknown", "colour")
  expect_keops_error(set_rkeops_options("float64"), "named")
  # an error anywhere changes nothing
  expect_keops_error(set_rkeops_options(list(precision = "float64", backend = "TPU")), "backend")
  expect_identical(get_rkeops_options(), before)
  expect_keops_error(set_rkeops_options(device_id = 1.5), "device")
  expect_keops_error(set_rkeops_options(device = -2), "device")
})

test_that("rkeops_use_gpu() takes rkeops 2's device -1 (the first GPU)", {
  local_options()
  available <- rkeops:::gpu_status(0L)$available
  rkeops_disable_verbosity()     # no message either way
  expect_no_message(res <- rkeops_use_gpu(device = -1))
  expect_identical(res, available)
  expect_identical(get_rkeops_options("device"), 0L)
  expect_identical(get_rkeops_options("backend"), if (available) "GPU" else "CPU")
  rkeops_enable_verbosity()
  expect_message(rkeops_use_gpu(), "rkeops")
})

# ---------------------------------------------------------------------------
# Cache directory, clean, check, install, hello
# ---------------------------------------------------------------------------

test_that("the cache directory can be read and moved with rkeops 2's functions and option", {
  local_options()
  start <- get_rkeops_cache_dir()
  expect_identical(start, rkeops_cache_dir())
  dir <- file.path(tempdir(), "rkeops-test-cache-a")
  expect_message(old <- set_rkeops_cache_dir(dir), dir, fixed = TRUE)
  expect_identical(old, start)
  expect_identical(get_rkeops_cache_dir(), dir)
  expect_identical(Sys.getenv("RKEOPS_CACHE_DIR"), dir)
  expect_identical(rkeops:::kernel_cache_dir(), dir)   # what the operators use
  expect_false(dir.exists(dir))                        # nothing is created before a GPU needs it
  dir_b <- file.path(tempdir(), "rkeops-test-cache-b")
  set_rkeops_options(list(cache_dir = dir_b))
  expect_identical(get_rkeops_options("cache_dir"), dir_b)
  # NULL: back to the directory of the start of the session; so does the reset of all options
  set_rkeops_cache_dir(NULL, verbose = FALSE)
  expect_identical(get_rkeops_cache_dir(), start)
  set_rkeops_cache_dir(dir, verbose = FALSE)
  set_rkeops_options()
  expect_identical(get_rkeops_cache_dir(), start)
  # a file, or a directory others can write to, is refused (and nothing changes)
  file <- tempfile("not-a-dir"); writeLines("x", file)
  expect_keops_error(set_rkeops_cache_dir(file), "not a directory")
  open_dir <- private_tempdir("open"); Sys.chmod(open_dir, "777", use_umask = FALSE)
  expect_keops_error(set_rkeops_cache_dir(open_dir), "other users")
  expect_keops_error(set_rkeops_options(cache_dir = 3), "cache_dir")
  expect_identical(get_rkeops_cache_dir(), start)
})

test_that("stat_rkeops_cache_dir() sums the sizes of the files of the cache", {
  local_options()
  dir <- private_tempdir("stat")
  set_rkeops_cache_dir(dir, verbose = FALSE)
  expect_identical(stat_rkeops_cache_dir(verbose = FALSE),
                   format(structure(0, class = "object_size"), units = "auto"))
  sizes <- c(a.cubin = 1500, b.tmp = 70, c.txt = 2600)
  for (f in names(sizes)) writeBin(as.raw(seq_len(sizes[[f]]) %% 256), file.path(dir, f))
  dir.create(file.path(dir, "sub"))
  writeBin(raw(333), file.path(dir, "sub", "d.bin"))
  total <- sum(sizes) + 333
  expect_message(usage <- stat_rkeops_cache_dir(), "disk usage")
  expect_identical(usage, format(structure(total, class = "object_size"), units = "auto"))
  set_rkeops_cache_dir(file.path(dir, "missing"), verbose = FALSE)
  expect_identical(stat_rkeops_cache_dir(verbose = FALSE), "0 bytes")
})

test_that("cleaning the cache: all, temporary files only, and the directory itself", {
  local_options()
  clean <- clean_rkeops
  dir <- private_tempdir("clean")
  set_rkeops_cache_dir(dir, verbose = FALSE)
  files <- c("k1.cubin", "k2.cubin", "w.123.0.tmp", "notes.txt")
  for (f in files) writeLines(f, file.path(dir, f))
  # all = FALSE: the files left by interrupted writes only
  expect_message(n <- clean(all = FALSE), "1 file removed")
  expect_identical(n, 1L)
  expect_setequal(list.files(dir), c("k1.cubin", "k2.cubin", "notes.txt"))
  # all = TRUE: the compiled kernels too; the user's file and the directory stay
  expect_identical(clean(verbose = FALSE, all = TRUE, remove_cache_dir = TRUE), 2L)
  expect_identical(list.files(dir), "notes.txt")
  expect_true(dir.exists(dir))
  # once nothing else is left, remove_cache_dir removes the directory
  file.remove(file.path(dir, "notes.txt"))
  expect_identical(clean(verbose = FALSE, remove_cache_dir = TRUE), 0L)
  expect_false(dir.exists(dir))
  expect_identical(clean(verbose = FALSE), 0L)   # a missing directory is not an error
  expect_keops_error(clean(all = NA), "all")
  # with no argument: the kernels, with a message
  dir.create(dir, mode = "0700")
  writeLines("k", file.path(dir, "k3.cubin"))
  expect_message(n <- clean_rkeops(), "1 file removed")
  expect_identical(n, 1L)
  expect_identical(list.files(dir), character(0))
})

test_that("check_rkeops() compares a small reduction with R; install_rkeops() installs nothing", {
  local_options()
  set_rkeops_cache_dir(private_tempdir("check"), verbose = FALSE)
  for (p in c("float64", "float32")) {
    set_rkeops_options(precision = p, backend = "CPU")
    expect_message(ok <- check_rkeops(), "ready.*CPU")
    expect_true(ok)
  }
  expect_no_message(expect_true(check_rkeops(verbose = FALSE)))
  # a backend that cannot run: FALSE and a message saying so, not an error
  gpu <- rkeops:::gpu_status(0L)$available
  set_rkeops_options(backend = "GPU")
  expect_message(ok <- check_rkeops(), if (gpu) "ready" else "NOT working")
  expect_identical(ok, gpu)
  set_rkeops_options(backend = "CPU")
  expect_message(expect_message(res <- install_rkeops(envname = "r-keops"), "ready"),
                 "nothing to install")
  expect_true(res)
  expect_output(hello <- helloWorld(), "rkeops")
  expect_match(hello, "backend \"CPU\"", fixed = TRUE)
})

# ---------------------------------------------------------------------------
# Operators: inner_dim, positional arguments, description
# ---------------------------------------------------------------------------

test_that("inner_dim = \"row\" takes the inputs transposed; the result keeps one row per point", {
  local_precision("float64")
  set.seed(511)
  N <- 37; M <- 53
  x <- rmat(N, 3); y <- rmat(M, 3); b <- rmat(M, 2); s <- 0.7
  args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)")
  want0 <- exp(-s * sqdist(x, y)) %*% b
  op0 <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", args)
  expect_close(op0(list(t(x), t(y), t(b), s), inner_dim = "row"), want0, 1e-12)
  expect_close(op0(list(t(x), t(y), t(b), s), "row"), want0, 1e-12)        # positional
  expect_close(op0(list(b = t(b), s = s, y = t(y), x = t(x)), "row"), want0, 1e-12)  # named
  expect_close(op0(list(t(x), t(y), t(b), matrix(s)), "row"), want0, 1e-12) # Pm as a matrix
  expect_close(op0(list(x, y, b, s), "col"), want0, 1e-12)
  # axis 1, a 2-dimensional parameter, a one-dimensional variable given as a vector
  w <- runif(N); p <- c(0.3, -1.2)
  op1 <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * w * p, 1)",
                      c("x = Vi(3)", "y = Vj(3)", "w = Vi(1)", "p = Pm(2)"))
  want1 <- (t(exp(-sqdist(x, y))) %*% w) %*% t(p)
  expect_close(op1(list(t(x), t(y), w, p), inner_dim = "row"), want1, 1e-12)
  expect_close(op1(list(t(x), t(y), t(w), matrix(p, 2, 1)), inner_dim = "row"), want1, 1e-12)
  # an index reduction: 1-based indices, one row per point
  nn <- keops_kernel("ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  expect_identical(c(nn(list(t(x), t(y)), "row")), apply(sqdist(x, y), 1, which.min))
  # transposed inputs given with "col" are refused (wrong number of columns)
  expect_keops_error(op0(list(t(x), t(y), t(b), s)), "x")
})

test_that("the second argument is inner_dim; ranges still work by name and positionally", {
  local_precision("float64")
  set.seed(512)
  N <- 37; M <- 53
  x <- rmat(N, 2); y <- rmat(M, 2); b <- rmat(M, 1)
  op <- keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(2)", "y = Vj(2)", "b = Vj(1)"))
  r <- from_matrix(rbind(c(1, 20), c(21, N)), rbind(c(1, 30), c(31, M)), diag(2) == 1)
  keep <- outer(seq_len(N) > 20, seq_len(M) > 30, "==")
  want <- (exp(-sqdist(x, y)) * keep) %*% b
  expect_close(op(list(x, y, b), ranges = r), want, 1e-12)
  expect_close(op(list(x, y, b), r), want, 1e-12)                    # former positional call
  expect_close(op(list(t(x), t(y), t(b)), "row", r), want, 1e-12)
  expect_close(op(list(x, y, b), NULL), exp(-sqdist(x, y)) %*% b, 1e-12)
  expect_keops_error(op(list(x, y, b), r, ranges = r), "twice")
  expect_keops_error(op(list(x, y, b), "rows"), "inner_dim")
  expect_keops_error(op(x, y), "inner_dim", "list")   # rkeops 2 users' op(x, y): one list
  expect_keops_error(op(list(x, y, b), inner_dim = c("row", "col")), "inner_dim")
})

test_that("an operator called without input describes itself as in rkeops 2", {
  args <- c("x = Vi(0, 3)", "b=Vj(2,2)", "y = Vj(1, 3)")
  op <- keops_kernel("Sum_Reduction(SqDist(x, y) * b, 0)", args, sum_scheme = "kahan_scheme")
  d <- op()
  expect_identical(names(d), c("formula", "args", "args_info", "sum_scheme"))
  expect_identical(d$formula, "Sum_Reduction(SqDist(x, y) * b, 0)")
  expect_identical(d$args, args)
  expect_identical(d$sum_scheme, "kahan_scheme")
  expect_identical(names(d$args_info), c("args", "var_name", "var_type", "var_pos", "var_dim", "decl"))
  expect_identical(d$args_info$args, c("x=Vi(0,3)", "b=Vj(2,2)", "y=Vj(1,3)"))
  expect_identical(d$args_info$var_name, c("x", "b", "y"))
  expect_identical(d$args_info$var_type, c("Vi", "Vj", "Vj"))
  expect_equal(d$args_info$var_pos, c(0, 2, 1))
  expect_equal(d$args_info$var_dim, c(3, 2, 3))
  expect_identical(d$args_info$decl, "pos_dim")
  expect_identical(op(NULL), d)
  d2 <- keops_kernel("Sum_Reduction(x, 1)", c("x = Vi(2)", "s = Pm(1)"))()
  expect_identical(d2$args_info$decl, "dim")
  expect_equal(d2$args_info$var_pos, c(0, 1))
  expect_keops_error(op(list()), "3")    # an empty list is an input, not a description request
})

# ---------------------------------------------------------------------------
# Grad(reduction, v, e) and GradFromPos in formulas
# ---------------------------------------------------------------------------

test_that("Grad(Sum_Reduction(...), v, e) is the gradient, for i-, j- and parameter variables", {
  local_precision("float64")
  set.seed(521)
  N <- 37; M <- 53
  x <- rmat(N, 3); y <- rmat(M, 3); b <- rmat(M, 2); s <- 0.7; e <- rmat(N, 2)
  # S(x, y, b, s) = sum_i <a_i, e_i>, a = Sum_Reduction(exp(-s |x_i - y_j|^2) b_j, 0)
  S <- function(x, y, b, s) sum((exp(-s * sqdist(x, y)) %*% b) * e)
  red <- "Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)"
  args <- c("x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)", "e = Vi(2)")
  gx <- keops_kernel(sprintf("Grad(%s, x, e)", red), args)
  expect_gradient(gx(list(x, y, b, s, e)), finite_differences(function(v) S(v, y, b, s), x))
  # dense R: -2 s sum_j (x_i - y_j) w_ij, w_ij = exp(-s |x_i - y_j|^2) <b_j, e_i>
  W <- exp(-s * sqdist(x, y)) * (e %*% t(b))
  expect_close(gx(list(x, y, b, s, e)), -2 * s * (x * rowSums(W) - W %*% y), 1e-12)
  gy <- keops_kernel(sprintf("Grad(%s, y, e)", red), args)
  expect_gradient(gy(list(x, y, b, s, e)), finite_differences(function(v) S(x, v, b, s), y))
  gb <- keops_kernel(sprintf("Grad(%s, b, e)", red), args)
  expect_gradient(gb(list(x, y, b, s, e)), finite_differences(function(v) S(x, y, v, s), b))
  gs <- keops_kernel(sprintf("Grad(%s, s, e)", red), args)
  expect_gradient(gs(list(x, y, b, s, e)), matrix(finite_differences(function(v) S(x, y, b, v), s), 1))
  # the same as keops_grad()
  op <- keops_kernel(red, args[1:4])
  expect_equal(gy(list(x, y, b, s, e)), keops_grad(op, "y")(list(x, y, b, s, e)), tolerance = 1e-13)
  expect_equal(gs(list(x, y, b, s, e)), keops_grad(op, "s")(list(x, y, b, s, e)), tolerance = 1e-13)
})

test_that("Grad formulas: axis 1, declarations in any order, named and transposed inputs", {
  local_precision("float64")
  set.seed(522)
  N <- 37; M <- 53
  x <- rmat(N, 2); y <- rmat(M, 2); e <- rmat(M, 1)
  # T(x, y) = sum_j e_j sum_i |x_i - y_j|^2 (axis 1: one row per j)
  T <- function(x, y) sum(t(sqdist(x, y)) %*% rep(1, N) * e)
  want_x <- finite_differences(function(v) T(v, y), x)
  # e first, with explicit positions
  g <- keops_kernel("Grad(Sum_Reduction(SqDist(x, y), 1), x, e)",
                    c("e = Vj(0, 1)", "x = Vi(1, 2)", "y = Vj(2, 2)"))
  expect_gradient(g(list(e, x, y)), want_x)
  expect_gradient(g(list(y = y, e = e, x = x)), want_x)
  expect_gradient(g(list(t(e), t(x), t(y)), inner_dim = "row"), want_x)
  d <- g()
  expect_identical(d$formula, "Grad(Sum_Reduction(SqDist(x, y), 1), x, e)")
  expect_identical(d$args_info$var_name, c("e", "x", "y"))
  expect_equal(d$args_info$var_pos, c(0, 1, 2))
  # dense R: 2 sum_j e_j (x_i - y_j)
  expect_close(g(list(e, x, y)), 2 * (x * sum(e) - matrix(colSums(y * c(e)), N, 2, byrow = TRUE)), 1e-12)
})

test_that("Grad of the other reductions matches finite differences", {
  local_precision("float64")
  set.seed(523)
  N <- 37; M <- 53
  x <- rmat(N, 2); y <- rmat(M, 2); e <- rmat(N, 1)
  args <- c("x = Vi(2)", "y = Vj(2)", "e = Vi(1)")
  lse <- function(x, y) {
    F <- -sqdist(x, y)
    m <- apply(F, 1, max)
    sum((m + log(rowSums(exp(F - m)))) * e)
  }
  g <- keops_kernel("Grad(LogSumExp_Reduction(-SqDist(x, y), 0), y, e)", args)
  expect_gradient(g(list(x, y, e)), finite_differences(function(v) lse(x, v), y))
  # Min: the gradient flows to the nearest y_j (no ties with random data)
  mn <- function(x, y) sum(apply(sqdist(x, y), 1, min) * e)
  g <- keops_kernel("Grad(Min_Reduction(SqDist(x, y), 0), x, e)", args)
  expect_gradient(g(list(x, y, e)), finite_differences(function(v) mn(v, y), x))
  g <- keops_kernel("Grad(Min_Reduction(SqDist(x, y), 0), y, e)", args)
  expect_gradient(g(list(x, y, e)), finite_differences(function(v) mn(x, v), y))
  expect_gradient(g(list(t(x), t(y), t(e)), "row"), finite_differences(function(v) mn(x, v), y))
  # SumSoftMaxWeight with weights w_j of dimension 2
  w <- rmat(M, 2); E <- rmat(N, 2)
  ssm <- function(x, y, w) {
    K <- exp(-sqdist(x, y))
    sum((K %*% w) / rowSums(K) * E)
  }
  g <- keops_kernel("Grad(SumSoftMaxWeight_Reduction(-SqDist(x, y), w, 0), w, E)",
                    c("x = Vi(2)", "y = Vj(2)", "w = Vj(2)", "E = Vi(2)"))
  expect_gradient(g(list(x, y, w, E)), finite_differences(function(v) ssm(x, y, v), w))
})

test_that("GradFromPos and nested Grad forms", {
  local_precision("float64")
  set.seed(524)
  N <- 37; M <- 53
  x <- rmat(N, 3); y <- rmat(M, 3); e <- rmat(N, 1)
  red <- "Sum_Reduction(Exp(-SqDist(x, y)), 0)"
  g <- keops_kernel(sprintf("Grad(%s, x, e)", red), c("x = Vi(3)", "y = Vj(3)", "e = Vi(1)"))
  want <- g(list(x, y, e))
  W <- exp(-sqdist(x, y)) * c(e)
  expect_close(want, -2 * (x * rowSums(W) - W %*% y), 1e-12)
  # KeOps' C++ form: the gradient input at 0-based position 2 (last), or 0 (first)
  g2 <- keops_kernel(sprintf("GradFromPos(%s, x, 2)", red), c("x = Vi(3)", "y = Vj(3)"))
  expect_equal(g2(list(x, y, e)), want, tolerance = 1e-13)
  g0 <- keops_kernel(sprintf("GradFromPos(%s, x, 0)", red), c("x = Vi(3)", "y = Vj(3)"))
  expect_equal(g0(list(e, x, y)), want, tolerance = 1e-13)
  expect_identical(g0()$args, c("x = Vi(3)", "y = Vj(3)"))
  # second order: d/dy <g(x, y, e), u>, against finite differences of the dense gradient
  u <- rmat(N, 3)
  dense_g <- function(y) {
    W <- exp(-sqdist(x, y)) * c(e)
    -2 * (x * rowSums(W) - W %*% y)
  }
  h <- keops_kernel(sprintf("Grad(Grad(%s, x, e), y, u)", red),
                    c("x = Vi(3)", "y = Vj(3)", "e = Vi(1)", "u = Vi(3)"))
  expect_gradient(h(list(x, y, e, u)), finite_differences(function(v) sum(dense_g(v) * u), y))
  # keops_grad() differentiates a Grad formula again, the same way
  expect_equal(keops_grad(g, "y")(list(x, y, e, u)), h(list(x, y, e, u)), tolerance = 1e-13)
})

test_that("Grad formulas that cannot be gradients are errors naming what is wrong", {
  red <- "Sum_Reduction(SqDist(x, y), 0)"
  a <- c("x = Vi(3)", "y = Vj(3)")
  expect_keops_error(keops_kernel(sprintf("Grad(%s, x, e)", red), c(a, "e = Vj(1)")),
                     "e = Vi\\(1\\)", "one row per i")
  expect_keops_error(keops_kernel(sprintf("Grad(%s, x, e)", red), c(a, "e = Vi(2)")),
                     "e = Vi\\(1\\)")
  expect_keops_error(keops_kernel("Grad(Sum_Reduction(SqDist(x, y), 1), y, e)", c(a, "e = Vi(1)")),
                     "e = Vj\\(1\\)", "one row per j")
  expect_keops_error(keops_kernel(sprintf("Grad(%s, z, e)", red), c(a, "e = Vi(1)")),
                     "\"z\"", "not a variable")
  expect_keops_error(keops_kernel(sprintf("Grad(%s, x, e)", red), a), "\\be\\b")
  expect_keops_error(keops_kernel(sprintf("Grad(%s, x)", red), c(a, "e = Vi(1)")), "3 arguments")
  expect_keops_error(keops_kernel(sprintf("Grad(%s, x, 2 * e)", red), c(a, "e = Vi(1)")), "name")
  expect_keops_error(keops_kernel(sprintf("GradFromPos(%s, x, 3)", red), a), "from 0 to 2")
  expect_keops_error(keops_kernel(sprintf("GradFromPos(%s, x, e)", red), a), "whole number")
  expect_keops_error(keops_kernel("Grad(Sum_Reduction(SqDist(x, y) * e, 0), x, e)", c(a, "e = Vi(1)")),
                     "\\be\\b")
  # controls
  expect_no_error(keops_kernel(sprintf("Grad(%s, x, e)", red), c(a, "e = Vi(1)")))
  expect_no_error(keops_kernel(sprintf("GradFromPos(%s, y, 2)", red), a))
})

# ---------------------------------------------------------------------------
# keops_grad(): positions
# ---------------------------------------------------------------------------

test_that("keops_grad(): position 0 is an error, numeric positions warn once, names never", {
  local_precision("float64")
  forget_notices()
  set.seed(531)
  N <- 37; M <- 53
  x <- rmat(N, 3); y <- rmat(M, 3); e <- rmat(N, 1)
  op <- keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(3)", "y = Vj(3)"))
  expect_keops_error(keops_grad(op, 0), "1-based", "\"x\"")
  expect_keops_error(keops_grad(op, 3), "from 1 to 2")
  expect_warning(g2 <- keops_grad(op, 2), "\"y\".*rkeops 2.*var = 2 meant no variable")
  expect_no_warning(g1 <- keops_grad(op, 1))   # once per session
  # position 2 is y (M x 3): d/dy_j sum_i e_i |x_i - y_j|^2 = -2 sum_i e_i (x_i - y_j)
  want_y <- -2 * (matrix(colSums(x * c(e)), M, 3, byrow = TRUE) - sum(e) * y)
  expect_close(g2(list(x, y, e)), want_y, 1e-12)
  expect_equal(g1(list(x, y, e)), keops_grad(op, "x")(list(x, y, e)))
  forget_notices()
  expect_warning(keops_grad(op, 1), "var = 1 meant \"y\"")
  forget_notices()
  expect_no_warning(keops_grad(op, "y"))
  # the package's own numeric positions (LazyTensor grad()) give no warning
  forget_notices()
  f <- rkeops::sqdist(Vi(x), Vj(y))
  expect_no_warning(gl <- grad(f, e, "Sum", "V1", "j"))
  expect_close(gl, want_y, 1e-12)
})

test_that("keops_grad() operators describe themselves and take inner_dim", {
  local_precision("float64")
  set.seed(532)
  N <- 37; M <- 53
  x <- rmat(N, 2); y <- rmat(M, 2); e <- rmat(N, 1)
  mn <- keops_kernel("Min_Reduction(SqDist(x, y), 0)", c("x = Vi(2)", "y = Vj(2)"))
  g <- keops_grad(mn, "y")
  d <- g()
  expect_identical(d$formula, "Grad(Min_Reduction(SqDist(x, y), 0), y, eta)")
  expect_identical(d$args_info$var_name, c("x", "y", "eta"))
  expect_identical(d$args_info$var_type, c("Vi", "Vj", "Vi"))
  # the description is a formula that keops_kernel() makes into the same operator
  again <- keops_kernel(d$formula, d$args)
  expect_equal(again(list(x, y, e)), g(list(x, y, e)), tolerance = 1e-13)
  want <- finite_differences(function(v) sum(apply(sqdist(x, v), 1, min) * e), y)
  expect_gradient(g(list(t(x), t(y), t(e)), inner_dim = "row"), want)
  expect_gradient(g(list(eta = e, y = y, x = x)), want)
  sm <- keops_kernel("Sum_Reduction(SqDist(x, y), 0)", c("x = Vi(2)", "y = Vj(2)"))
  expect_identical(keops_grad(sm, "x")()$formula, "Grad(Sum_Reduction(SqDist(x, y), 0), x, eta)")
  expect_identical(keops_grad(keops_kernel("ArgMin_Reduction(SqDist(x, y), 0)", c("x = Vi(2)", "y = Vj(2)")),
                              "x")(list(x, y, e)), matrix(0, N, 2))
})

# ---------------------------------------------------------------------------
# The reduction axis note
# ---------------------------------------------------------------------------

test_that("the first keops_kernel() of a session says which index each axis reduces, once", {
  local_options()
  forget_notices()
  # testthat sets TESTTHAT = "true", which hides the note: shown here as outside tests
  testing <- Sys.getenv("TESTTHAT", unset = NA)
  on.exit(if (is.na(testing)) Sys.unsetenv("TESTTHAT") else Sys.setenv(TESTTHAT = testing), add = TRUE)
  Sys.setenv(TESTTHAT = "false")
  rkeops_enable_verbosity()
  f <- "Sum_Reduction(SqDist(x, y), 0)"
  a <- c("x = Vi(1)", "y = Vj(1)")
  expect_message(keops_kernel(f, a), "Name_Reduction\\(f, 0\\) reduces over j.*rkeops 2")
  expect_no_message(keops_kernel(f, a))
  # verbosity off: no note
  forget_notices()
  rkeops_disable_verbosity()
  expect_no_message(keops_kernel(f, a))
  # the package's own formulas (LazyTensor reductions, gradients) give none
  forget_notices()
  rkeops_enable_verbosity()
  x <- rmat(37, 1); y <- rmat(53, 1)
  expect_no_message(s <- sum(rkeops::sqdist(Vi(x), Vj(y)), index = "j"))
  expect_close(s, matrix(rowSums(sqdist(x, y))), 1e-5)
  expect_message(op <- keops_kernel(f, a), "reduces over j")
  expect_no_message(keops_grad(op, "x"))
  # what the note says is what the engine does: axis 0 gives one row per i (37), summed over j
  local_precision("float64")
  expect_close(op(list(x, y)), matrix(rowSums(sqdist(x, y))), 1e-12)
  # in tests (and knitted documents) there is no note
  forget_notices()
  Sys.setenv(TESTTHAT = "true")
  expect_no_message(keops_kernel(f, a))
})

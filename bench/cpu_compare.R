# CPU benchmark: rkeops from R, pykeops (CPU) and the dense R computation a user would write, on the
# same data in the same run, medians of several calls after a warm-up. Run it with
#   make bench-cpu [NMAX=1e6] [BUDGET=60] [REPS=5] [BENCH_OUT=file.md]
# or R_LIBS=lib NMAX=1e4 Rscript bench/cpu_compare.R from the repository root.
#   NMAX       largest N = M (sizes 1e3, 1e4, ... up to NMAX)
#   BUDGET     seconds allowed to one measurement (one tool, one size): a tool whose next size is
#              predicted (quadratically from its previous size) to take longer is skipped
#   REPS       runs per median, fewer when the budget requires it
#   DENSE_GB   memory allowed to the dense R computation's N x M matrices (default 4)
#   CASES      only the cases whose "label precision" matches this regular expression
#              (e.g. CASES='D=3 float64'; default: all)
#   BENCH_OUT  also write the report to this file
library(rkeops)

env_num <- function(name, default) {
  v <- Sys.getenv(name, "")
  if (nzchar(v)) as.numeric(v) else default
}
nmax <- env_num("NMAX", 1e6)
budget <- env_num("BUDGET", 60)
max_reps <- env_num("REPS", 5)
dense_gb <- env_num("DENSE_GB", 4)
out_path <- Sys.getenv("BENCH_OUT", "")
stopifnot(nmax >= 1e3, budget > 0, max_reps >= 1)
sizes <- 10^(3:6)
sizes <- unique(c(sizes[sizes < nmax], nmax))

script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
helper <- file.path(dirname(script), "cpu_compare_pykeops.py")
tmp <- tempfile("cpu_compare_")  # inside R's session directory: removed when R exits
dir.create(tmp)

report <- character()
emit <- function(...) {
  line <- paste0(...)
  cat(line, "\n", sep = "")
  report <<- c(report, line)
}
# R prepends its library directories (/usr/lib/x86_64-linux-gnu among them) to LD_LIBRARY_PATH: a
# python built elsewhere (pyenv) then loads the system's libpython and loses its site-packages.
python <- function(args, ...) system2("python3", args, env = "LD_LIBRARY_PATH=", ...)
git_version <- function() {
  git <- function(...) suppressWarnings(system2("git", c("-C", shQuote(root), ...), stdout = TRUE, stderr = FALSE))
  root <- dirname(dirname(normalizePath(script)))
  commit <- git("rev-parse", "--short", "HEAD")
  if (length(commit) == 0L) return("unknown")
  changed <- git("status", "--porcelain", "--untracked-files=no")
  paste0(commit, if (length(changed) > 0L) " with uncommitted changes")
}

# ---- the computations --------------------------------------------------------------------------

# rkeops operators, and the width of their results (for reading pykeops' results back).
gauss_op <- function(D) {
  keops_kernel("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)",
               c(sprintf("x = Vi(%d)", D), sprintf("y = Vj(%d)", D), "b = Vj(1)"))
}
rkeops_fun <- function(kind, D) {
  switch(kind,
    gauss = { op <- gauss_op(D); function(d) op(list(d$x, d$y, d$b)) },
    argkmin = {
      op <- keops_kernel("ArgKMin_Reduction(SqDist(x,y), 10, 0)", c("x = Vi(3)", "y = Vj(3)"))
      function(d) op(list(d$x, d$y))
    },
    logsumexp = {
      op <- keops_kernel("LogSumExp_Reduction(-SqDist(x,y)+b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)"))
      function(d) op(list(d$x, d$y, d$b))
    },
    grad = { dx <- keops_grad(gauss_op(D), "x"); function(d) dx(list(d$x, d$y, d$b, d$e)) })
}
result_width <- function(kind, D) switch(kind, argkmin = 10L, grad = D, 1L)

# What a user would write in plain R (float64).
sqdist_dense <- function(x, y) outer(rowSums(x^2), rowSums(y^2), "+") - 2 * tcrossprod(x, y)
dense_fun <- list(
  gauss = function(d) exp(-sqdist_dense(d$x, d$y)) %*% d$b,
  argkmin = function(d) {
    d2t <- sqdist_dense(d$y, d$x)  # column i holds the distances from x_i: contiguous
    t(vapply(seq_len(ncol(d2t)), function(i) {
      v <- d2t[, i]
      kth <- sort.int(v, partial = 10L)[10L]  # a partial sort is O(M), a full order() O(M log M)
      near <- which(v <= kth)
      near[order(v[near])][1:10]
    }, integer(10L)))
  },
  logsumexp = function(d) {
    s <- rep(d$b, each = nrow(d$x)) - sqdist_dense(d$x, d$y)  # s[i, j] = b_j - |x_i - y_j|^2
    m <- s[cbind(seq_len(nrow(s)), max.col(s, "first"))]       # shift by the row maxima
    m + log(rowSums(exp(s - m)))
  },
  # g_i = -2 e_i sum_j K_ij b_j (x_i - y_j) = -2 e_i (x_i (K b)_i - (K (b * y))_i)
  grad = function(d) {
    k <- exp(-sqdist_dense(d$x, d$y))
    -2 * as.vector(d$e) * (d$x * as.vector(k %*% d$b) - k %*% (as.vector(d$b) * d$y))
  })
# N x M double matrices alive at once in each dense computation, for the memory limit.
dense_matrices <- c(gauss = 3, argkmin = 3, logsumexp = 4, grad = 3)

cases <- list(
  list(label = "Gaussian sum D=3", kind = "gauss", D = 3, precision = "float32"),
  list(label = "Gaussian sum D=3", kind = "gauss", D = 3, precision = "float64"),
  list(label = "Gaussian sum D=64", kind = "gauss", D = 64, precision = "float32"),
  list(label = "Gaussian sum D=64", kind = "gauss", D = 64, precision = "float64"),
  list(label = "ArgKMin K=10 D=3", kind = "argkmin", D = 3, precision = "float32"),
  list(label = "LogSumExp(b_j - SqDist) D=3", kind = "logsumexp", D = 3, precision = "float32"),
  list(label = "gradient in x of the Gaussian sum D=3", kind = "grad", D = 3, precision = "float32"))
wanted <- Sys.getenv("CASES", "")
cases <- Filter(function(cs) grepl(wanted, paste(cs$label, cs$precision)), cases)
stopifnot(length(cases) > 0)

# ---- data, timing, checks -----------------------------------------------------------------------

# The same data for every case of a given size and dimension, and for all three tools.
make_data <- function(n, D) {
  set.seed(n + D)
  list(x = matrix(runif(n * D), n, D), y = matrix(runif(n * D), n, D),
       b = matrix(rnorm(n), n, 1), e = matrix(rnorm(n), n, 1))
}
# float64, row-major, x then y then b then e: what cpu_compare_pykeops.py reads.
write_data <- function(d, path) {
  con <- file(path, "wb")
  on.exit(close(con))
  for (a in d) writeBin(as.vector(t(a)), con)
}

# How to measure a tool at size n given its previous measurement in this case (list(n, time)):
# skip when the quadratic extrapolation exceeds the budget; otherwise as many runs as fit in it.
# "small" warm-up: one call on 1000 rows (absorbs compilation) when two full calls would not fit.
plan_for <- function(prev, n) {
  if (is.null(prev)) return(list(reps = max_reps, warmup = "full"))
  predicted <- prev$time * (n / prev$n)^2
  if (predicted > budget) {
    return(list(skip = sprintf("skipped: predicted %.3g s > budget %g s (not run)", predicted, budget)))
  }
  calls <- floor(budget / predicted)
  if (calls >= 2) list(reps = min(max_reps, calls - 1), warmup = "full") else list(reps = 1, warmup = "small")
}

measure <- function(f, d, plan) {
  f(if (plan$warmup == "full") d else lapply(d, function(a) a[seq_len(min(nrow(a), 1000)), , drop = FALSE]))
  times <- numeric(plan$reps)
  for (r in seq_len(plan$reps)) {
    gc()  # not inside the timing
    start <- Sys.time()
    res <- f(d)
    times[r] <- as.numeric(difftime(Sys.time(), start, units = "secs"))
  }
  list(time = median(times), reps = plan$reps, warmup = plan$warmup, result = res)
}

run_pykeops <- function(cs, n, data_file, plan) {
  out_file <- file.path(tmp, "pykeops_result.bin")
  unlink(out_file)
  args <- c(helper, cs$kind, cs$D, cs$precision, data_file, format(n, scientific = FALSE),
            plan$reps, plan$warmup, out_file)
  out <- suppressWarnings(python(args, stdout = TRUE, stderr = TRUE))
  line <- grep("^TIME ", out, value = TRUE)
  if (length(line) == 0L) {
    message(paste(out, collapse = "\n"))
    return(list(skip = paste("failed:", tail(out, 1L))))
  }
  width <- result_width(cs$kind, cs$D)
  res <- matrix(readBin(out_file, "double", n = n * width), nrow = n, byrow = TRUE)
  if (cs$kind == "argkmin") res <- res + 1  # pykeops' indices are 0-based
  list(time = as.numeric(sub("^TIME ", "", line)), reps = plan$reps, warmup = plan$warmup, result = res)
}

# Largest difference relative to the reference's scale. For ArgKMin, rounding can swap nearly
# equidistant neighbours: compare the (float64) squared distances of the selected neighbours.
check <- function(cs, d, res, ref, ref_name) {
  tol <- if (cs$precision == "float64") 1e-8 else 1e-4
  if (cs$kind == "argkmin") {
    n <- nrow(d$x)
    dist <- function(idx) rowSums((d$x[rep(seq_len(n), 10), , drop = FALSE] - d$y[as.vector(idx), , drop = FALSE])^2)
    err <- max(abs(dist(res) - dist(ref))) / max(abs(dist(ref)))
    what <- sprintf("distance rel err %.1e, %.2f%% same indices", err, 100 * mean(res == ref))
  } else {
    err <- max(abs(res - ref)) / max(abs(ref))
    what <- sprintf("rel err %.1e", err)
  }
  sprintf("vs %s: %s, %s", ref_name, what, if (is.finite(err) && err <= tol) "ok" else "**MISMATCH**")
}

cell <- function(m) {
  if (!is.null(m$skip)) return(m$skip)
  sprintf("%.3g [%d%s]", m$time, m$reps, if (m$warmup == "small") "*" else "")
}
ratio <- function(a, b) {
  if (is.null(a$time) || is.null(b$time)) return("-")
  r <- a$time / b$time
  if (r >= 10) sprintf("%.0f", r) else sprintf("%.2g", r)
}

# ---- header -------------------------------------------------------------------------------------

has_pykeops <- python(c("-c", shQuote("import pykeops")), stdout = FALSE, stderr = FALSE) == 0
model <- sub("^Model name:\\s*", "", grep("^Model name", system2("lscpu", stdout = TRUE), value = TRUE))
emit("# CPU benchmark: rkeops, pykeops and dense R")
emit("")
emit("- machine: ", paste(model, collapse = ", "), "; ", parallel::detectCores(), " cores (rkeops: all of them, ",
     "option ncore = NULL; pykeops: OpenMP, OMP_NUM_THREADS = ", Sys.getenv("OMP_NUM_THREADS", "unset"),
     "; dense R: the BLAS ", extSoftVersion()[["BLAS"]], ")")
emit("- load average at start: ", readLines("/proc/loadavg"), " (other work on the machine slows every column)")
emit("- date: ", format(Sys.time(), "%Y-%m-%d %H:%M:%S %Z"))
emit("- ", R.version.string, "; rkeops ", format(packageVersion("rkeops")), " (git ",
     git_version(), ")")
emit("- pykeops ", if (has_pykeops) {
  out <- python(c("-c", shQuote("import pykeops, numpy; print(pykeops.__version__, '(numpy', numpy.__version__ + ')')")),
                stdout = TRUE, stderr = FALSE)
  tail(out, 1L)
} else "not installed (pip install pykeops): its column is empty")
emit("- settings: NMAX = ", format(nmax), ", BUDGET = ", budget, " s per measurement, REPS = ", max_reps,
     ", DENSE_GB = ", dense_gb)
emit("")

# ---- memory -------------------------------------------------------------------------------------

# Peak resident memory of this process during one call, above what it held before (the inputs
# included): VmHWM after resetting it (writing 5 to clear_refs), minus VmRSS before.
status_mb <- function(field) {
  line <- grep(paste0("^", field, ":"), readLines("/proc/self/status"), value = TRUE)
  as.numeric(gsub("[^0-9]", "", line)) / 1024
}
mem_n <- min(1e6, nmax)
mem_m <- min(1e4, nmax)
rkeops_use_cpu()
rkeops_use_float32()
can_reset <- file.access("/proc/self/clear_refs", 2) == 0
big <- function(v) formatC(v, format = "d", big.mark = ",")
emit("## Memory")
emit("")
emit(sprintf(paste("Float32, D = 3, N = %s%s, M = %s: the peak resident memory of the R process during one call,",
                   "above what it held before (inputs included; VmHWM reset before the call%s).",
                   "%sFor scale: x as R doubles is %.1f MB."),
             big(mem_n), if (mem_n < 1e6) " (NMAX < 10^6)" else "", big(mem_m),
             if (can_reset) "" else ": could not be reset, a lower bound",
             if (mem_m < mem_n) "Memory does not depend on M beyond the size of y: M is kept small to keep the call short. " else "",
             8 * 3 * mem_n / 2^20))
emit("")
emit("| case | seconds | peak above before (MB) | result as R holds it (MB) |")
emit("|---|---|---|---|")
set.seed(1)
mem_data <- list(x = matrix(runif(3 * mem_n), mem_n, 3), y = matrix(runif(3 * mem_m), mem_m, 3),
                 b = matrix(rnorm(mem_m), mem_m, 1))
for (kind in c("gauss", "argkmin")) local({
  f <- rkeops_fun(kind, 3)
  f(lapply(mem_data, function(a) a[1:100, , drop = FALSE]))  # threads and libraries loaded first
  gc()
  if (can_reset) writeLines("5", "/proc/self/clear_refs")
  before <- status_mb("VmRSS")
  start <- Sys.time()
  res <- f(mem_data)
  secs <- as.numeric(difftime(Sys.time(), start, units = "secs"))
  peak <- status_mb("VmHWM")
  label <- c(gauss = "Gaussian sum", argkmin = "ArgKMin K=10")[[kind]]
  emit(sprintf("| %s | %.3g | %.1f | %.1f |", label, secs, peak - before, as.numeric(object.size(res)) / 2^20))
})
emit("")

# ---- timings ------------------------------------------------------------------------------------

emit("## Times (seconds)")
emit("")
emit("| case | precision | N=M | rkeops s | pykeops s | dense R s | pykeops/rkeops | dense/rkeops | check |")
emit("|---|---|---|---|---|---|---|---|---|")
dense_done <- list()  # dense R is float64 whatever the precision: measured once per kind, D and n
for (cs in cases) {
  if (cs$precision == "float64") rkeops_use_float64() else rkeops_use_float32()
  rk_f <- rkeops_fun(cs$kind, cs$D)
  last <- list()
  # D = 64 also at N = 2e4, the size of the goal in issue 6.
  case_sizes <- if (cs$D == 64) sort(unique(c(sizes, 2e4[2e4 <= nmax]))) else sizes
  for (n in case_sizes) {
    key <- paste(cs$kind, cs$D, n)
    dense_gb_needed <- dense_matrices[[cs$kind]] * 8 * n^2 / 1e9
    plans <- list(
      rkeops = plan_for(last$rkeops, n),
      pykeops = if (has_pykeops) plan_for(last$pykeops, n) else list(skip = "not installed"),
      dense = if (!is.null(dense_done[[key]])) list(done = TRUE) else if (dense_gb_needed > dense_gb) {
        list(skip = sprintf("skipped: %d N x M matrices = %.3g GB > %g GB", dense_matrices[[cs$kind]],
                            dense_gb_needed, dense_gb))
      } else plan_for(last$dense, n))
    message(sprintf("[%s] %s %s N = M = %g", format(Sys.time(), "%H:%M:%S"), cs$label, cs$precision, n))
    runs <- vapply(plans, function(p) is.null(p$skip) && is.null(p$done), TRUE)
    d <- if (any(runs)) make_data(n, cs$D)
    rk <- if (runs[["rkeops"]]) measure(rk_f, d, plans$rkeops) else plans$rkeops
    py <- if (runs[["pykeops"]]) {
      data_file <- file.path(tmp, sprintf("data_%s_%d.bin", format(n, scientific = FALSE), cs$D))
      if (!file.exists(data_file)) write_data(d, data_file)
      run_pykeops(cs, n, data_file, plans$pykeops)
    } else plans$pykeops
    if (runs[["dense"]]) dense_done[[key]] <- measure(dense_fun[[cs$kind]], d, plans$dense)
    de <- if (!is.null(dense_done[[key]])) dense_done[[key]] else plans$dense
    # Dense R is exact (float64): the reference where it ran, pykeops otherwise.
    chk <- if (is.null(rk$result)) {
      "-"
    } else if (!is.null(de$result)) {
      check(cs, d, rk$result, de$result, "dense R")
    } else if (!is.null(py$result)) {
      check(cs, d, rk$result, py$result, "pykeops")
    } else "no peer at this size"
    for (tool in c("rkeops", "pykeops", "dense")) {
      m <- list(rkeops = rk, pykeops = py, dense = de)[[tool]]
      if (!is.null(m$time)) last[[tool]] <- list(n = n, time = m$time)
    }
    emit(sprintf("| %s | %s | %s | %s | %s | %s | %s | %s | %s |", cs$label, cs$precision,
                 formatC(n, format = "d", big.mark = ","), cell(rk), cell(py), cell(de), ratio(py, rk), ratio(de, rk), chk))
    rm(d, rk, py, de)
  }
}
emit("")
emit("Times: median of [r] runs after one warm-up call at full size; [1*]: one run after a warm-up on the",
     " first 1000 rows only (it absorbs compilation), because two full calls would not fit in the budget.",
     " Skipped sizes were not run; a predicted time is extrapolated quadratically from the previous size.",
     " rkeops is called from R on R double matrices (conversion to float32 included); pykeops gets numpy",
     " arrays already in the precision. Dense R always computes in float64 (the same measurement serves the",
     " float32 and float64 rows). Ratios above 1: rkeops is faster. Check: max |rkeops - reference| /",
     " max |reference|, against dense R where it ran, otherwise pykeops; for ArgKMin the float64 squared",
     " distances of the selected neighbours are compared (rounding may swap near-ties).")
if (nzchar(out_path)) {
  writeLines(report, out_path)
  message("report written to ", out_path)
}

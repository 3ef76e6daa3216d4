# The R side of one reduction on the CPU, N = 1e3 and 5e6 points in D = 5 (issue 14, "The R side").
#   R_LIBS=lib Rscript bench/r_side.R [REV]
# Table 1: R's own work per call, the engine's .Call replaced by a stub that returns a result
#   computed once, so that the microseconds are not lost in the engine's time and its noise: CPU
#   time of the R process (R is single-threaded) and wall time, medians of 9 blocks of calls. With
#   a git revision REV, the R code of that revision (R/keops_kernel.R and R/lazytensor*.R, loaded
#   over the installed package) is timed in the same run, interleaved with the installed code.
# Table 2: the real calls at N = 5e6: wall time minus the engine's phases (rkeops:::last_run()),
#   medians of 5 calls: R, plus what the Rust layer does outside the phases it reports.
suppressMessages(library(rkeops))
rkeops_use_cpu()
ns <- asNamespace("rkeops")
rev <- commandArgs(TRUE)[1]
script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
root <- dirname(dirname(normalizePath(script)))

# The R code of revision `rev`, in an environment over the namespace (native routines, options).
old_code <- function(rev) {
  env <- new.env(parent = ns)
  for (f in c("keops_kernel.R", "lazytensor.R", "lazytensor-ops.R", "lazytensor-reduce.R",
              "lazytensor-complex.R")) {
    src <- system2("git", c("-C", shQuote(root), "show", paste0(rev, ":R/", f)), stdout = TRUE)
    eval(parse(text = src), env)
  }
  env
}
stub <- new.env()
# keops_kernel() whose operators call stub_call() instead of the engine: the first call of a case
# runs the engine, the next ones return its result.
stubbed_kernel <- function(kk, parent) {
  src <- paste(deparse(kk), collapse = "\n")
  src2 <- sub(".Call(wrap__keops_run,", "stub_call(wrap__keops_run,", src, fixed = TRUE)
  stopifnot(src2 != src)
  holder <- new.env(parent = parent)
  holder$stub_call <- function(...) {
    if (is.null(stub$res)) stub$res <- .Call(...)
    stub$res
  }
  f <- eval(parse(text = src2))
  environment(f) <- holder
  f
}
blocks <- function(f, inner, reps = 9) {
  w <- cp <- numeric(reps)
  for (r in seq_len(reps)) {
    p0 <- proc.time()
    for (k in seq_len(inner)) f()
    p <- proc.time() - p0
    w[r] <- p[[3]] / inner
    cp[r] <- (p[[1]] + p[[2]]) / inner
  }
  c(wall = median(w), cpu = median(cp))
}

exprs <- list(
  "keops_kernel() ArgMin" = quote(op(list(x, cc))),
  "argmin(sqdist(Vi(x), Vj(c)), 'j')" = quote(argmin(sqdist(Vi(x), Vj(cc)), index = "j")),
  "exp(-sqdist(Vi(x), Vj(c))) %*% b" = quote(exp(-sqdist(Vi(x), Vj(cc))) %*% b),
  "sum(exp(-sqdist(Vi(x), Vj(c))) * Vj(b), 'j')" = quote(sum(exp(-sqdist(Vi(x), Vj(cc))) * Vj(b), index = "j")),
  "logsumexp(Vj(b) - sqdist(Vi(x), Vj(c)) * Pm(0.5), 'j')" =
    quote(logsumexp(Vj(b) - sqdist(Vi(x), Vj(cc)) * Pm(0.5), index = "j")),
  "exp(-sqdist(Vi(c), Vj(x))) %*% v, v a vector (length N)" = quote(exp(-sqdist(Vi(cc), Vj(x))) %*% v),
  "logsumexp(Vi(v) - sqdist(Vi(x), Vj(c)), 'j'), v a vector" =
    quote(logsumexp(Vi(v) - sqdist(Vi(x), Vj(cc)), index = "j")))
make_data <- function(N, D = 5) {
  set.seed(1)
  list(x = matrix(runif(N * D), N, D), cc = matrix(runif(10 * D), 10, D), b = matrix(runif(10), 10, 1),
       v = runif(N))
}
op_in <- function(env) {
  eval(quote(keops_kernel("ArgMin_Reduction(SqDist(x, c), 0)", c("x = Vi(5)", "c = Vj(5)"))), env)
}

# ---- table 2 first (it needs the real engine) ---------------------------------------------------
outside <- list()
d <- make_data(5e6)
env <- list2env(d, parent = ns)
env$op <- op_in(env)
for (nm in names(exprs)[c(1, 2, 4, 7)]) {
  f <- eval(call("function", as.pairlist(alist()), exprs[[nm]]), env)
  f()
  o <- t <- numeric(5)
  for (k in 1:5) {
    t0 <- proc.time()[[3]]
    f()
    t[k] <- proc.time()[[3]] - t0
    o[k] <- t[k] - sum(rkeops:::last_run()$timings)
  }
  outside[[nm]] <- c(total = median(t), outside = median(o))
}

# ---- table 1 ------------------------------------------------------------------------------------
versions <- list(installed = ns)
if (!is.na(rev)) {
  old <- old_code(rev)
  old$keops_kernel <- stubbed_kernel(old$keops_kernel, old)
  versions <- c(setNames(list(old), rev), versions)
}
unlockBinding("keops_kernel", ns)
assign("keops_kernel", stubbed_kernel(get("keops_kernel", ns), ns), ns)
rm(list = ls(ns$.lazy_ops), envir = ns$.lazy_ops)   # operators made with the real keops_kernel()

cat(sprintf("R side per reduction, engine stubbed out; CPU / wall microseconds, medians (%s, %s)\n\n",
            R.version.string, format(Sys.time(), "%Y-%m-%d %H:%M %Z")))
cat(sprintf("| reduction | N | %s |\n", paste(names(versions), collapse = " | ")))
cat(sprintf("|---|---|%s\n", strrep("---|", length(versions))))
for (N in c(1e3, 5e6)) {
  d <- make_data(N)
  inner <- if (N < 1e4) 1000 else 10
  for (nm in names(exprs)) {
    res <- character()
    for (v in names(versions)) {
      env <- list2env(d, parent = versions[[v]])
      env$op <- op_in(env)
      f <- eval(call("function", as.pairlist(alist()), exprs[[nm]]), env)
      stub$res <- NULL
      f()
      t <- blocks(f, inner)
      res[v] <- sprintf("%.0f / %.0f", 1e6 * t[["cpu"]], 1e6 * t[["wall"]])
    }
    cat(sprintf("| %s | %g | %s |\n", nm, N, paste(res, collapse = " | ")))
  }
}
cat("\nReal calls at N = 5e6 (installed code): wall time and wall time outside the engine's phases, medians of 5\n\n")
cat("| reduction | total ms | outside the engine's phases ms |\n|---|---|---|\n")
for (nm in names(outside)) {
  cat(sprintf("| %s | %.1f | %.1f |\n", nm, 1e3 * outside[[nm]][["total"]], 1e3 * outside[[nm]][["outside"]]))
}

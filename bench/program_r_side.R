# The time outside the engine of each program call (issue 54: "R-side share of each program call
# <= 0.3 ms a call"), on the CPU, float32, for N = M = 200 and 1e4 (points in D = 3).
#   R_LIBS=lib Rscript bench/program_r_side.R
# For each case: the wall time of a call minus the engine's own phases (rkeops:::last_run(): for a
# program, "upload once" + "loop" + "download once", which hold its steps' phases; for a gradient,
# "upload once" + "forward and backward" + "download once"; for a plain call, all of its phases),
# summed over the engine calls the case makes: R's checks and conversions, the binding's
# conversions, names and traces. Medians of several calls after a
# warm-up call. The R side does not depend on the backend, so the CPU measures it.
#   keops_program()(input)   the vignette's Sinkhorn program (10 iterations), its input ready
#     the same call, 0 iterations: the call without the engine's steps (its cost around the engine)
#   keops_program_grad()     the gradient in x of a Gaussian-kernel loss (2 steps, 1 iteration)
#   vignette run_program()   the vignette's function as it is written (the temperatures, the initial
#                            potentials, the program call; before 2026-11-29 its initial potentials
#                            were two more engine calls)
#     its R code around the call: the same with the program replaced by a function that evaluates its
#                            arguments and returns NULL
suppressMessages(library(rkeops))
rkeops_use_cpu()
rkeops_use_float32()
script <- sub("^--file=", "", grep("^--file=", commandArgs(FALSE), value = TRUE))
root <- if (length(script)) dirname(dirname(normalizePath(script))) else "."

# The vignette's chunks `solver` and `program` (sinkhorn_keops(), sinkhorn_program(), run_program()),
# from the installed package (so that R_LIBS=<another library> times that version's vignette), else
# from this tree.
vig <- local({
  path <- system.file("doc", "sinkhorn.Rmd", package = "rkeops")
  if (!nzchar(path)) path <- file.path(root, "vignettes", "sinkhorn.Rmd")
  src <- readLines(path)
  chunk <- function(label) {
    s <- grep(paste0("^```\\{r ", label, "[ ,}]"), src)
    e <- which(src == "```")
    e <- e[e > s][1L]
    src[(s + 1L):(e - 1L)]
  }
  env <- new.env()
  eval(parse(text = c(chunk("solver"), chunk("program"))), env)
  env
})

# The engine's seconds in each engine call, summed over the calls of `f()` (nested phases left out).
engine_seconds <- new.env()
record <- get("record_run", asNamespace("rkeops"))
local({
  wrapped <- function(backend, timings, ...) {
    top <- if ("download once" %in% names(timings)) {
      c("upload once", "loop", "forward and backward", "download once")
    } else names(timings)
    engine_seconds$total <- engine_seconds$total + sum(timings[names(timings) %in% top])
    engine_seconds$calls <- engine_seconds$calls + 1L
    record(backend, timings, ...)
  }
  ns <- asNamespace("rkeops")
  unlockBinding("record_run", ns)
  assign("record_run", wrapped, ns)
})

# Median over `reps` calls (after one warm-up) of the wall time and of the time outside the engine.
outside <- function(f, reps) {
  f()
  wall <- out <- numeric(reps)
  for (k in seq_len(reps)) {
    engine_seconds$total <- 0
    engine_seconds$calls <- 0L
    t0 <- Sys.time()
    f()
    wall[k] <- as.double(Sys.time() - t0, units = "secs")
    out[k] <- wall[k] - engine_seconds$total
  }
  list(wall = median(wall), outside = median(out), calls = engine_seconds$calls)
}

sinkhorn_data <- function(N) {
  set.seed(N)
  list(x = matrix(rnorm(3 * N), N, 3), y = matrix(rnorm(3 * N, 1), N, 3),
       a = (a <- runif(N, 0.5, 1.5)) / sum(a), b = (b <- runif(N, 0.5, 1.5)) / sum(b))
}
blur <- 0.05
n_anneal <- 9
program <- vig$sinkhorn_program(3, tol = 0, max_iter = 10)
# (the same program of 0 iterations: the engine runs no step, so its call's wall time is its own
# cost around the engine, exactly, without the noise of 10 iterations' engine time)
program0 <- vig$sinkhorn_program(3, tol = 0, max_iter = 0)
loss <- keops_program(list(
  f = keops_kernel("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)")),
  loss = keops_kernel("Sum_Reduction(SqNorm2(f), 1)", "f = Vi(1)")
), iterations = 1)

# (the program's arguments evaluated: run_program()'s own work, which R's lazy arguments would skip)
stub <- function(input, schedule) {
  force(input)
  force(schedule)
  NULL
}

cat(sprintf("Time outside the engine per call, CPU, float32, ms (medians; %s, %s, %d cores)\n\n",
            R.version.string, format(Sys.time(), "%Y-%m-%d %H:%M %Z"), parallel::detectCores()))
cat("| case | N = M | engine calls | wall ms | outside the engine ms | per engine call ms |\n")
cat("|---|---|---|---|---|---|\n")
for (N in c(200, 1e4)) {
  d <- sinkhorn_data(N)
  D2 <- vig$diameter(d$x, d$y)^2
  eps <- c(D2 * (blur^2 / D2)^((1:n_anneal) / n_anneal), blur^2)
  input <- list(x = d$x, y = d$y, a = d$a, b = d$b, loga = log(d$a), logb = log(d$b),
                f = matrix(0, N, 1), g = matrix(0, N, 1))
  schedule <- list(eps = eps, s = 1 / eps, wait = c(rep(1e30, n_anneal), 0))
  cases <- list(
    "keops_program()(input)" = function() program(input, schedule = schedule),
    "  the same call, 0 iterations" = function() program0(input, schedule = schedule),
    "keops_program_grad()" = function() {
      keops_program_grad(loss, list(x = d$x, y = d$y, b = d$b), of = "loss", wrt = "x")
    },
    "vignette run_program()" = function() {
      vig$run_program(d$x, d$a, d$y, d$b, blur, n_anneal = n_anneal, program = program)
    },
    "  its R code around the call" = function() {
      vig$run_program(d$x, d$a, d$y, d$b, blur, n_anneal = n_anneal, program = stub)
    })
  for (name in names(cases)) {
    # (3 calls of the engine's seconds at 1e4; R's own code, many)
    m <- outside(cases[[name]], if (N <= 1000 || startsWith(name, " ")) 200L else 3L)
    cat(sprintf("| %s | %s | %d | %.3f | %.3f | %s |\n", name, format(N, scientific = FALSE), m$calls,
                1e3 * m$wall, 1e3 * m$outside, if (m$calls) sprintf("%.3f", 1e3 * m$outside / m$calls) else "-"))
  }
}

# Reductions split into blocks of output rows, each block evaluated as a future (package `future`)
# on the plan the user set: local R processes, machines reached by SSH, a scheduler. A reduction is
# independent from one output row to the next, so the blocks are combined by stacking their rows:
# no merge of partial states is needed, and every row is computed by the same kernel as in one
# process. The operator itself does not travel: its closure belongs to this process, so each
# future carries the formula, the declarations and its block's data, and the worker rebuilds the
# operator (make_kernel(), cached per process like the engine's compiled kernels).

# rkeops_use_future() keeps its settings in .rkeops_env$future (R/options.R): NULL (unset, the
# state at start-up) when reductions run in this process only.

#' Split reductions over the workers of a `future` plan
#'
#' `rkeops_use_future()` makes every reduction of rkeops (the operators of
#' [keops_kernel()] and [keops_grad()], LazyTensor reductions, [keops_knn()])
#' run as blocks of output rows, each block a future evaluated on the plan
#' set with [future::plan()]: other R processes on this machine
#' (`multisession`, `multicore`), other machines (`cluster`), or the nodes of
#' a scheduler (`future.batchtools`). The results are those of one process,
#' row by row. `rkeops_use_future(FALSE)` goes back to computing in this
#' process only.
#'
#' @param enable `TRUE` (split reductions over the workers of the plan) or
#'   `FALSE` (compute in this process, the default state of the package).
#' @param blocks `NULL` (the default: one block per worker of the plan in
#'   force at each reduction, [future::nbrOfWorkers()]) or a positive whole
#'   number of blocks. More blocks than workers balance unequal workers and
#'   give a finer progress bar, at the price of more data sent (see "Cost").
#'   A reduction never has more blocks than output rows.
#' @param ncore The CPU threads of each worker: `NULL` (the default) for
#'   what [parallelly::availableCores()] says on the worker (1 on the workers
#'   of `plan(multisession)`, which `future` limits to one core each; the
#'   cores that the machine or the scheduler grants elsewhere), or a positive
#'   whole number. A block that the plan evaluates in this process
#'   (`plan(sequential)`) uses the option `ncore` of this process.
#'
#' @details
#' **How it runs.** The reduction's output rows (one per `i` for a reduction
#' over `j`, axis 0; one per `j` for axis 1) are cut into `blocks` contiguous
#' blocks of nearly equal sizes. Each block is one future of
#' [future.apply::future_lapply()], holding the formula, the declarations,
#' the options and the block's data; the worker rebuilds the operator from
#' the formula (the first block of a formula on a worker compiles its GPU
#' kernel there, later ones find it in the worker's cache), computes its rows
#' and sends them back, and the blocks are stacked in order. Every reduction
#' is split this way (`Sum`, `Min`, `ArgKMin`, `LogSumExp`,
#' `SumSoftMaxWeight`, ...), over either axis, with parameters, `ranges` and
#' batches. A gradient of [keops_grad()] that needs forward passes (of
#' `LogSumExp`, `Min`, ..., or a gradient in a parameter) runs each of its
#' reductions this way in turn, the intermediate results coming back here
#' in between. [keops_kmeans()] and [keops_gmm()] keep their points on the
#' workers for all their iterations (each shard of rows sent once; see their
#' help). [keops_iterate()] and
#' the other programs run in this process (their loops keep their states in
#' the engine), and so do inputs kept on a GPU of this process
#' ([keops_device()]), which are an error here.
#'
#' **Options on the workers.** Each block runs with this process's options
#' `backend`, `precision` and `device` ([get_rkeops_options()]): with the
#' backend `"auto"`, a worker with a usable GPU computes on it, the others on
#' their CPU; its threads are set by `ncore` above. The workers need rkeops
#' installed where their R finds it (for local workers, `R_LIBS` or the
#' `rscript_libs` argument of `plan(multisession)` / `plan(cluster)`).
#' `plan(multicore)` forks this process: use it for the CPU only, since a
#' GPU used by this process before the fork cannot be used by the forks.
#'
#' **Cost.** With `N` output rows, `M` reduced rows, `B` blocks and `W`
#' workers, each block receives once its `N / B` rows of the variables of the
#' output index, all the `M` rows of the variables of the reduced index (with
#' `ranges` or a batch: only the rows between the first and the last that
#' the block's ranges reduce over) and the parameters, and sends back its
#' `N / B` rows of results. The data sent is thus about `N d_out + B M d_red`
#' numbers (in doubles, 8 bytes each): the reduced side is sent once per
#' block, so `blocks = NULL` (one per worker) sends the least. Nothing stays
#' on the workers between reductions: a second call sends its data again. The
#' time of a reduction is that of the slowest block plus the transfers
#' (serialised by R: about 2 ms per MB between local processes) and a fixed
#' cost per call: about 30 ms with two `plan(multisession)` workers on a
#' loaded 2-core machine, but 250 ms when the sockets of the plan were made
#' without `options(socketOptions = "no-delay")` (TCP then holds back small
#' messages; set the option before `plan()`: `rkeops_use_future()` says so
#' once per session when it finds a plan of socket workers without it). The future path thus pays off
#' for reductions that take seconds, not for the many small reductions of an
#' iterative algorithm ([solve()] on a LazyTensor, Sinkhorn loops), which it
#' slows down. Only the output rows are cut: a reduction with fewer output
#' rows than workers (100 points against 10^8) leaves workers idle (the
#' reduced index is not cut into chunks whose partial states would be
#' merged). `future` refuses to send more than 500 MiB to one future unless
#' `options(future.globals.maxSize = )` is raised. While the futures run,
#' this process holds the data of every block besides the inputs (about
#' `N d_out + B M d_red` doubles too).
#'
#' **Progress.** With the package `progressr` installed, each block done is
#' one step of a progressor: wrap the call in [progressr::with_progress()],
#' or call `progressr::handlers(global = TRUE)` once, to see a progress bar.
#'
#' The packages `future` and `future.apply` (and, for progress bars,
#' `progressr`) are suggested, not required: rkeops works without them, and
#' `rkeops_use_future()` says what to install when they are missing.
#'
#' @return The previous settings, invisibly: a list of `enable`, `blocks`
#'   and `ncore`, so that `do.call(rkeops_use_future, old)` restores them.
#' @seealso [future::plan()], [get_rkeops_options()] for the options that the
#'   workers use.
#' @export
#' @examples
#' if (requireNamespace("future", quietly = TRUE) &&
#'     requireNamespace("future.apply", quietly = TRUE)) {
#'   x <- matrix(runif(3000), 1000, 3)
#'   y <- matrix(runif(1500), 500, 3)
#'   b <- matrix(rnorm(500), 500, 1)
#'   gauss <- keops_kernel("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)",
#'                         c("x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "s = Pm(1)"))
#'   here <- gauss(list(x, y, b, 2))
#'   # plan(sequential) evaluates the futures in this process; plan(multisession,
#'   # workers = 2) would use two R processes, plan(cluster, workers = hosts) machines
#'   old_plan <- future::plan(future::sequential)
#'   old <- rkeops_use_future(blocks = 3)   # 3 blocks of about 333 rows of x
#'   split <- gauss(list(x, y, b, 2))
#'   print(all.equal(split, here))   # TRUE: the rows of one process
#'   do.call(rkeops_use_future, old)        # back to this process only
#'   future::plan(old_plan)
#' }
rkeops_use_future <- function(enable = TRUE, blocks = NULL, ncore = NULL) {
  check_flag(enable, "enable", "rkeops_use_future", show_value = TRUE)
  blocks <- future_count(blocks, "blocks", "the number of blocks (NULL: one per worker of the plan)")
  ncore <- future_count(ncore, "ncore", "the CPU threads of each worker (NULL: what the worker may use)")
  if (enable) {
    future_packages_check()
    future_socket_note()
  }
  old <- .rkeops_env$future
  .rkeops_env$future <- if (enable) list(blocks = blocks, ncore = ncore)
  invisible(if (is.null(old)) list(enable = FALSE, blocks = NULL, ncore = NULL) else
    list(enable = TRUE, blocks = old$blocks, ncore = old$ncore))
}

# Once per session (unless verbosity is off): with a plan of socket workers (multisession,
# cluster), each split call waits ~0.2 s for TCP's delayed acknowledgements unless the sockets were
# made with TCP_NODELAY (the option socketOptions = "no-delay" when plan() started the workers;
# measured 2.85 x one process at N = M = 2e4 without it, 1.25 x with it). A made socket's options
# cannot be read or changed from R: the option in force now stands for the one at plan() time.
future_socket_note <- function(strategy = future::plan(), socket_options = getOption("socketOptions")) {
  if (isTRUE(.rkeops_env$socket_noted) || !.rkeops_verbose()) return(invisible(FALSE))
  if (!inherits(strategy, "cluster") || any(grepl("no-delay", socket_options, fixed = TRUE))) {
    return(invisible(FALSE))
  }
  .rkeops_env$socket_noted <- TRUE
  message("rkeops: options(socketOptions = \"no-delay\") before plan() saves ~0.2 s per call on its workers")
  invisible(TRUE)
}

# NULL, or a positive whole number as an integer; an error naming the argument otherwise.
future_count <- function(x, name, what) {
  if (is.null(x)) return(NULL)
  if (!is_whole(x, 1, .Machine$integer.max)) {
    rkeops_abort("rkeops_use_future(): '", name, "' must be NULL or a positive whole number (", what,
                 "), not ", .rkeops_show(x), kind = "input", arg = name)
  }
  as.integer(x)
}

# Stops, saying what to install, when a package of the future path is missing. `have` tells whether
# a package can be loaded (replaced in the tests, where all are installed).
future_packages_check <- function(have = function(p) requireNamespace(p, quietly = TRUE)) {
  missing <- Filter(function(p) !have(p), c("future", "future.apply"))
  if (length(missing) > 0L) {
    rkeops_abort("rkeops_use_future() needs the package", if (length(missing) > 1L) "s", " ",
                 paste(missing, collapse = " and "), ", not installed: install.packages(c(",
                 paste0("\"", missing, "\"", collapse = ", "), ")) (Debian: apt-get install ",
                 paste0("r-cran-", missing, collapse = " "), ")", kind = "input")
  }
  invisible(TRUE)
}

# The reduction `formula` of an operator (made by make_kernel(); `info` from the engine's parser) on
# its checked inputs (in the order of `info`), split into blocks of output rows evaluated as futures.
# Returns what the operator returns in one process (`one`: the input was a batch of one member, see
# make_kernel()).
future_reduce <- function(formula, args, sum_scheme, info, inputs, ranges, one) {
  settings <- .rkeops_env$future
  future_packages_check()
  out_cat <- if (info$axis == 0L) "Vi" else "Vj"
  red_cat <- if (info$axis == 0L) "Vj" else "Vi"
  for (k in seq_along(inputs)) {
    x <- inputs[[k]]
    if (inherits(x, "keops_device_matrix")) {
      rkeops_abort("input '", info$names[k], "' is kept on a GPU of this process (keops_device()): the ",
                   "blocks of rkeops_use_future() go to other processes; give it as an R matrix, or call ",
                   "rkeops_use_future(FALSE)", kind = "input", arg = info$names[k])
    }
    # (a batch of one member, n x d x 1, is the matrix of that member; see batch_of_one())
    if (length(dim(x)) == 3L) {
      dim(x) <- if (info$categories[k] == "Pm") NULL else dim(x)[1:2]
      inputs[k] <- list(x)
    }
  }
  blocks <- settings$blocks
  if (is.null(blocks)) blocks <- future_workers()
  # The engine checks the inputs' shapes, with the words of one process, and cuts the rows.
  plan <- rust_result(.Call(wrap__keops_future_blocks, formula, args, inputs, blocks, ranges_for_engine(ranges)))
  blocks <- length(plan$first)
  tasks <- lapply(seq_len(blocks), function(b) {
    future_block_task(inputs, info$categories, out_cat, red_cat, plan, b)
  })
  shared <- list(formula = formula, args = args, sum_scheme = sum_scheme,
                 options = .rkeops_env$options, ncore = settings$ncore, caller = future_process())
  progress <- if (requireNamespace("progressr", quietly = TRUE)) progressr::progressor(steps = blocks)
  done <- future.apply::future_lapply(tasks, future_block_fun(shared, progress),
                                      future.chunk.size = 1L, future.packages = "rkeops",
                                      future.seed = FALSE)
  value <- future_bind(lapply(seq_len(blocks), function(b) {
    future_shift_indices(done[[b]]$value, tasks[[b]]$index_offset)
  }))
  timings <- Reduce(function(a, b) {
    for (name in names(b)) a[name] <- sum(a[name], b[[name]], na.rm = TRUE)
    a
  }, lapply(done, `[[`, "timings"), numeric(0))
  backends <- unique(vapply(done, function(d) as.character(d$backend)[1L], ""))
  # (what last_run() reports: the processes that computed the blocks and the threads of each block,
  # NA for all the cores, for checks and benchmarks)
  record_run(sprintf("future (%d block%s): %s", blocks, if (blocks > 1L) "s" else "",
                     paste(backends, collapse = ", ")),
             timings, processes = unique(vapply(done, `[[`, 1L, "process")),
             ncore = vapply(done, `[[`, 1L, "ncore"))
  if (is.null(one)) value else batch_of_one_value(value, one$as_list)
}

# The number of workers of the plan in force: one block each.
future_workers <- function() {
  w <- future::nbrOfWorkers()
  if (!is.finite(w)) {
    rkeops_abort("the future plan has no fixed number of workers (", class(future::plan())[1L], "): give ",
                 "the number of blocks, rkeops_use_future(blocks = )", kind = "input", arg = "blocks")
  }
  as.integer(max(1, w))
}

# Rows `first + 1` to `last` (0-based `first`, exclusive `last`) of a matrix or of a vector (a
# variable of dimension 1 given as a vector).
future_slice <- function(x, first, last) {
  rows <- seq.int(first + 1, length.out = last - first)
  if (is.null(dim(x))) x[rows] else x[rows, , drop = FALSE]
}

# What block `b` of the engine's `plan` (keops_future_blocks()) needs: its inputs (the rows of the
# output index sliced; those of the reduced index whole, or, with ranges, the rows its ranges
# visit), its ranges, and the offset of the reduced rows sent (added back to the indices it returns).
future_block_task <- function(inputs, cats, out_cat, red_cat, plan, b) {
  for (k in which(cats == out_cat)) inputs[k] <- list(future_slice(inputs[[k]], plan$first[b], plan$last[b]))
  if (is.null(plan$ranges)) return(list(inputs = inputs, ranges = NULL, index_offset = 0L))
  for (k in which(cats == red_cat)) inputs[k] <- list(future_slice(inputs[[k]], plan$from[b], plan$to[b]))
  list(inputs = inputs, ranges = plan$ranges[[b]], index_offset = plan$from[b])
}

# The function that the futures apply to their block: it closes over `shared` (formula,
# declarations, options: small) and the progressor only, never over the inputs of all the blocks.
future_block_fun <- function(shared, progress) {
  force(shared)
  force(progress)
  function(task) {
    res <- future_block_run(task, shared)
    if (!is.null(progress)) progress()
    res
  }
}

# Operators rebuilt from their formula by the workers, by formula, declarations and sum scheme.
.future_ops <- new.env(parent = emptyenv())

# Runs one block on the worker (or in this process under plan(sequential)), as the caller would.
future_block_run <- function(task, shared) {
  future_as_caller(shared, function() {
    op <- memoised(.future_ops, c(shared$formula, shared$args, shared$sum_scheme),
                   function() make_kernel(shared$formula, shared$args, shared$sum_scheme))
    value <- op(task$inputs, ranges = task$ranges)
    ncore <- .rkeops_env$options$ncore
    list(value = value, backend = .rkeops_env$last_run$backend, timings = .rkeops_env$last_run$timings,
         process = Sys.getpid(), ncore = if (is.null(ncore)) NA_integer_ else ncore)
  })
}

# `f()` with the caller's options of `shared` (its `options`, and on another process its `ncore`
# or the worker's cores) and the future path off, so that a block or a shard is computed here
# whatever the state of the package in this process; the state restored after.
future_as_caller <- function(shared, f) {
  saved <- list(options = .rkeops_env$options, future = .rkeops_env$future)
  on.exit({
    .rkeops_env$options <- saved$options
    .rkeops_env$future <- saved$future
  })
  opts <- shared$options
  if (!identical(future_process(), shared$caller)) {
    opts$ncore <- if (!is.null(shared$ncore)) shared$ncore else future_worker_cores()
  }
  .rkeops_env$options <- opts
  .rkeops_env$future <- NULL
  f()
}

# Turns the future path off until the calling function returns (then back as it was) and returns
# its settings: an algorithm that keeps its points on the workers (future-shards.R) runs its other
# reductions here rather than as futures that would send the points with each.
local_future_off <- function(env = parent.frame()) {
  settings <- .rkeops_env$future
  .rkeops_env$future <- NULL
  do.call(on.exit, list(substitute(.rkeops_env$future <- s, list(s = settings)), add = TRUE), envir = env)
  settings
}

# This process, on this machine: a block evaluated where it was made (plan(sequential)) keeps the
# caller's threads.
future_process <- function() paste(Sys.info()[["nodename"]], Sys.getpid())

# The cores a worker may use, as `future` and schedulers tell it (parallelly, a dependency of
# future); NULL (all the cores) without parallelly.
future_worker_cores <- function() {
  if (!requireNamespace("parallelly", quietly = TRUE)) return(NULL)
  as.integer(max(1L, parallelly::availableCores()))
}

# The indices (integers: 1-based rows of the reduced rows sent, 0 for none) of a block's result,
# back to rows of the whole reduced index.
future_shift_indices <- function(value, offset) {
  if (offset == 0L) return(value)
  shift <- function(x) {
    if (!is.integer(x)) return(x)
    x[x > 0L] <- x[x > 0L] + offset
    x
  }
  if (is.list(value)) lapply(value, shift) else shift(value)
}

# The blocks' results stacked by rows: matrices, arrays (n x K x d) or lists of two of them.
future_bind <- function(parts) {
  if (is.list(parts[[1L]])) {
    out <- lapply(names(parts[[1L]]), function(name) future_bind(lapply(parts, `[[`, name)))
    names(out) <- names(parts[[1L]])
    return(out)
  }
  if (length(parts) == 1L) return(parts[[1L]])
  d <- dim(parts[[1L]])
  # Column-major: an n x K x d array is the n x (K d) matrix of its values; stacked, then reshaped.
  flat <- do.call(rbind, lapply(parts, function(p) matrix(p, nrow = dim(p)[1L])))
  dim(flat) <- c(nrow(flat), d[-1L])
  flat
}

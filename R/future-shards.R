# Rows kept on the workers of a `future` plan across the iterations of a loop (keops_kmeans() and
# keops_gmm() under rkeops_use_future()). The points are cut into shards of rows; each shard is sent
# once, with the first step of the loop, to the worker that computes it, and kept there (in the
# worker's rkeops namespace, under the loop's token), so that each later step sends only the loop's
# small state (centres, a mixture's parameters) and gets back small sums, which this process adds up
# in the shards' order.
#
# `future` does not say which worker evaluates a future. With the shards' futures made in the same
# order at each step, the workers of a multisession or cluster plan take the same shards each time
# (seen with two local workers); a worker that does not hold the shard it is given says so, and the
# shard's rows are sent again with the step (`handle$sent` counts the shards sent). A worker keeps
# the shards of one loop (token) at a time, and the loop's last step drops them.

# The shards on a worker (or in this process, under plan(sequential)), by token and shard.
.rkeops_shards <- new.env(parent = emptyenv())

# A loop's shards: the rows of the matrices `rows` (a named list, all with the same rows) cut into
# shards of nearly equal sizes, one per worker of the plan or `settings$blocks` (the settings of
# rkeops_use_future()), not sent yet.
shards_open <- function(rows, settings) {
  n <- nrow(rows[[1L]])
  blocks <- if (is.null(settings$blocks)) future_workers() else settings$blocks
  blocks <- max(1L, min(as.integer(blocks), n))
  .rkeops_env$shard_loops <- (if (is.null(.rkeops_env$shard_loops)) 0 else .rkeops_env$shard_loops) + 1
  handle <- new.env(parent = emptyenv())
  # (a token of this process and loop: R's random numbers are the user's, not drawn from here)
  handle$token <- sprintf("%s %d %.0f", Sys.info()[["nodename"]], Sys.getpid(), .rkeops_env$shard_loops)
  handle$bounds <- as.integer(round(seq(0, n, length.out = blocks + 1L)))
  handle$rows <- rows
  handle$shared <- list(token = handle$token, options = .rkeops_env$options, ncore = settings$ncore,
                        caller = future_process())
  handle$sent <- 0L
  handle$steps <- 0L
  handle
}

# Runs the step `step` (the name of a function of this namespace, called on the worker as
# `step(shard, args)` with `shard` the environment that holds the shard's `rows` and whatever the
# steps keep there) on every shard; returns the steps' values in the shards' order. The shards sent
# so far and the steps run are kept for tests and benchmarks (`.rkeops_env$last_shards`).
shards_map <- function(handle, step, args) {
  shared <- c(handle$shared, list(step = step, args = args))
  count <- length(handle$bounds) - 1L
  # (in float32 the rows go as the float32 numbers that the engine computes with: half the bytes)
  size <- if (identical(handle$shared$options$precision, "float32")) 4L else 8L
  task <- function(s, with_rows) {
    rows <- if (with_rows) lapply(handle$rows, shard_pack, handle$bounds[s], handle$bounds[s + 1L], size)
    list(shard = s, rows = rows)
  }
  # (one future per shard, its globals given: future_lapply()'s search for globals and chunks cost
  # ~30-50 ms a step with two local workers)
  run <- function(shards, with_rows) {
    if (with_rows) handle$sent <- handle$sent + length(shards)
    futures <- lapply(shards, function(s) {
      work <- task(s, with_rows)
      # (the function travels as a reference to this namespace, which the worker loads)
      run_task <- shard_task
      future::future(run_task(work, shared), globals = list(run_task = run_task, work = work, shared = shared),
                     packages = "rkeops", seed = FALSE)
    })
    lapply(futures, future::value)
  }
  # (the first step sends every shard; later ones send those a worker says it does not hold)
  done <- run(seq_len(count), with_rows = handle$steps == 0L)
  missing <- which(vapply(done, function(d) isTRUE(d$missing), NA))
  if (length(missing) > 0L) done[missing] <- run(missing, with_rows = TRUE)
  handle$steps <- handle$steps + 1L
  .rkeops_env$last_shards <- list(shards = count, sent = handle$sent, steps = handle$steps)
  lapply(done, `[[`, "value")
}

# The sum of the component `name` of the steps' values `parts`, added in the shards' order (so that
# a loop's sums do not depend on which worker answers first).
shards_total <- function(parts, name) Reduce(`+`, lapply(parts, `[[`, name))

# A shard's future: its step run as the caller would (future_as_caller()).
shard_task <- function(task, shared) future_as_caller(shared, function() shard_run(task, shared))

# On the worker: the step of `shared` on its shard, kept from an earlier step or made from the rows
# sent; `list(missing = TRUE)` when neither.
shard_run <- function(task, shared) {
  key <- paste(shared$token, task$shard)
  if (!is.null(task$rows)) {
    # (one loop's shards at a time: those of other tokens go)
    keys <- ls(.rkeops_shards)
    rm(list = keys[!startsWith(keys, paste0(shared$token, " "))], envir = .rkeops_shards)
    shard <- new.env(parent = emptyenv())
    shard$rows <- lapply(task$rows, shard_unpack)
    shard$key <- key
    assign(key, shard, envir = .rkeops_shards)
  }
  shard <- .rkeops_shards[[key]]
  if (is.null(shard)) return(list(missing = TRUE))
  list(value = get(shared$step, envir = asNamespace("rkeops"), mode = "function")(shard, shared$args))
}

# Rows `first + 1` to `last` of the matrix `m` as the bytes of their numbers, `size` bytes each (4:
# rounded to float32), little-endian, written by the engine on every core: R serialises a raw vector
# as it is (it swaps the bytes of each double: XDR), and in float32 the socket carries half of them.
shard_pack <- function(m, first, last, size) {
  if (!is.double(m)) storage.mode(m) <- "double"
  list(dim = c(last - first, ncol(m)), size = size,
       bytes = rust_result(.Call(wrap__keops_shard_pack, m, as.integer(first), as.integer(last), as.integer(size))))
}

# The matrix of shard_pack()'s bytes (doubles again).
shard_unpack <- function(packed) {
  rust_result(.Call(wrap__keops_shard_unpack, packed$bytes, as.integer(packed$dim[1L]), as.integer(packed$dim[2L]),
                    as.integer(packed$size)))
}

# Drops a shard from its worker (a loop's last step).
shard_drop <- function(shard) {
  if (exists(shard$key, envir = .rkeops_shards, inherits = FALSE)) rm(list = shard$key, envir = .rkeops_shards)
}

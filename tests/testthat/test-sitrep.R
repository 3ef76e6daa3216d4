# What the package prints at attach and at a first formula (at most two lines of 100 characters,
# R's own masking report aside), and rkeops_sitrep()'s report against what it describes.

test_that("library(rkeops) and a first formula print at most two lines of at most 100 characters", {
  script <- tempfile(fileext = ".R")
  writeLines(c(
    "msgs <- character()",
    "withCallingHandlers({",
    "  library(rkeops, warn.conflicts = FALSE)",
    "  op <- keops_kernel('Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)', c('x = Vi(3)', 'y = Vj(3)', 'b = Vj(1)'))",
    "  invisible(op(list(matrix(1:9 / 9, 3), matrix(1:6 / 6, 2), matrix(1:2, 2))))",
    "}, message = function(m) { msgs <<- c(msgs, conditionMessage(m)); invokeRestart('muffleMessage') })",
    "cat(msgs, sep = '')"), script)
  out <- system2(file.path(R.home("bin"), "Rscript"), script, stdout = TRUE, stderr = TRUE,
                 env = c(sprintf("R_LIBS=%s", paste(c(dirname(find.package("rkeops")), .libPaths()), collapse = ":")),
                         "TESTTHAT=false"))
  expect_length(out, 2L)   # the attach line and the axis note (shown outside tests)
  expect_true(all(nchar(out) <= 100L), info = paste(out, collapse = "\n"))
  expect_match(out[1L], "^rkeops: runs on ")
  expect_match(out[2L], "reduces over j")
})

test_that("the attach line names the device or why none is used, within 100 characters", {
  gpu <- list(available = TRUE,
              message = "GPU 0: NVIDIA H100 80GB HBM3 (compute capability 9.0, 132 multiprocessors, NVRTC 13.0)")
  expect_identical(rkeops:::attach_line(gpu), "rkeops: runs on GPU 0: NVIDIA H100 80GB HBM3; rkeops_sitrep() for details")
  none <- list(available = FALSE, message = "no NVIDIA driver found (libcuda.so.1 could not be loaded)")
  expect_identical(rkeops:::attach_line(none),
                   "rkeops: runs on the CPU (no GPU: no NVIDIA driver found); rkeops_sitrep() for details")
  long <- list(available = FALSE, message = strrep("why ", 40))
  expect_identical(nchar(rkeops:::attach_line(long)), 100L)
  expect_match(rkeops:::attach_line(long), "\\.\\.\\.$")
  expect_lte(nchar(rkeops:::axis_note), 100L)
})

test_that("rkeops_sitrep() reports the versions, options, GPUs and cache it finds", {
  dir <- tempfile("cache")
  dir.create(dir, mode = "0700")
  old <- Sys.getenv("RKEOPS_CACHE_DIR", unset = NA)
  Sys.setenv(RKEOPS_CACHE_DIR = dir)
  on.exit(if (is.na(old)) Sys.unsetenv("RKEOPS_CACHE_DIR") else Sys.setenv(RKEOPS_CACHE_DIR = old), add = TRUE)
  writeLines("x", file.path(dir, "a.cubin"))
  writeBin(raw(1000), file.path(dir, "b.cubin"))
  s <- rkeops_sitrep()
  expect_s3_class(s, "rkeops_sitrep")
  expect_identical(s$package, as.character(packageVersion("rkeops")))
  expect_match(s$engine, "^[0-9]+\\.[0-9]+\\.[0-9]+$")
  expect_identical(s$options, get_rkeops_options())
  expect_identical(s$cache$files, 2L)
  expect_identical(s$cache$bytes, 1002)
  count <- rkeops:::rust_result(.Call(rkeops:::wrap__gpu_count))$count
  expect_identical(s$gpu_count, count)
  expect_length(s$gpus, count)
  for (g in s$gpus) if (isTRUE(g$available)) expect_gt(g$memory_total, g$memory_free)
  expect_identical(s$runs_on, if (rkeops:::gpu_in_use()) "GPU 0" else "CPU")
  text <- capture.output(print(s))
  expect_match(text[1L], paste0("^rkeops: +", s$package, " \\(engine ", s$engine, "\\)"))
  expect_true(any(grepl(paste0("^cache: +", dir, " \\(2 files, 1002 bytes\\)"), text)))
  expect_true(any(grepl("^runs on: +", text)))
  capture.output(printed <- print(s))
  expect_identical(printed, s)
})

test_that("the loaded NVRTC and driver libraries are read from the process's memory map", {
  maps <- tempfile()
  writeLines(c("7f00-7f01 r-xp 00000000 08:01 12 /usr/lib/x86_64-linux-gnu/libcuda.so.580.1",
               "7f01-7f02 r--p 00001000 08:01 12 /usr/lib/x86_64-linux-gnu/libcuda.so.580.1",
               "7f02-7f03 r-xp 00000000 08:01 13 /opt/cuda/lib64/libnvrtc.so.13.0.48",
               "7f03-7f04 r-xp 00000000 08:01 14 /usr/lib/R/lib/libR.so",
               "7f04-7f05 rw-p 00000000 00:00 0 [heap]"), maps)
  expect_identical(rkeops:::loaded_libraries(c("libnvrtc", "libcuda"), maps),
                   c("/usr/lib/x86_64-linux-gnu/libcuda.so.580.1", "/opt/cuda/lib64/libnvrtc.so.13.0.48"))
  expect_identical(rkeops:::loaded_libraries("libnvrtc", tempfile()), character(0))
})

test_that("the functions masked at attach are those the LazyTensor syntax needs, and fall back to the originals", {
  masked <- intersect(getNamespaceExports("rkeops"), c(ls(baseenv()), getNamespaceExports("stats")))
  want <- c("atan2", "ifelse", "step", if (getRversion() < "4.3.0") "%*%")
  expect_setequal(masked, want)
  # the originals' results for anything that is not a LazyTensor
  m <- matrix(1:6, 2)
  expect_identical(rkeops:::`%*%`(m, t(m)), base::`%*%`(m, t(m)))
  expect_identical(rkeops::atan2(1:3, 3:1), base::atan2(1:3, 3:1))
  expect_identical(rkeops::ifelse(c(TRUE, FALSE), 1, 2), c(1, 2))
  fit <- lm(mpg ~ wt + hp, data = mtcars)
  expect_identical(capture.output(a <- rkeops::step(fit, trace = 0)), capture.output(b <- stats::step(fit, trace = 0)))
  expect_identical(coef(a), coef(b))
})

test_that("rkeops_sitrep() reports the tensor cores as the engine reads RKEOPS_GPU_TENSOR (any case)", {
  old <- Sys.getenv("RKEOPS_GPU_TENSOR", unset = NA)
  on.exit(if (is.na(old)) Sys.unsetenv("RKEOPS_GPU_TENSOR") else Sys.setenv(RKEOPS_GPU_TENSOR = old))
  for (value in c("OFF", "off", "Off")) {
    Sys.setenv(RKEOPS_GPU_TENSOR = value)
    expect_false(rkeops_sitrep()$tensor_cores, label = value)
    expect_false(rkeops:::rust_result(.Call(rkeops:::wrap__engine_tuning))$tensor_cores, label = value)
  }
  Sys.setenv(RKEOPS_GPU_TENSOR = "on")
  expect_true(rkeops_sitrep()$tensor_cores)
  Sys.unsetenv("RKEOPS_GPU_TENSOR")
  expect_true(rkeops_sitrep()$tensor_cores)
})

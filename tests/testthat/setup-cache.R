# GPU kernels compiled by the tests go to a temporary cache, never the user's (R CMD check must
# not write outside tempdir()). Set RKEOPS_CACHE_DIR to keep them between runs.
if (!nzchar(Sys.getenv("RKEOPS_CACHE_DIR"))) {
  Sys.setenv(RKEOPS_CACHE_DIR = file.path(tempdir(), "rkeops-test-cache"))
}

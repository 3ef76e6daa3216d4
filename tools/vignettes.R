# Knits every vignette with the package installed in ./lib into inst/doc (git-ignored), so that the
# next `R CMD INSTALL .` installs them and vignette("kmeans", package = "rkeops") works from a clone
# (make vignettes; make demo runs it). R installs the vignettes' index only when every vignette has
# its output, so a vignette that fails stops this script. Usage: R_LIBS=lib Rscript tools/vignettes.R

if (!nzchar(system.file(package = "rkeops"))) stop("rkeops is not installed in R_LIBS (make install first)")
out <- file.path(getwd(), "inst", "doc")
dir.create(out, recursive = TRUE, showWarnings = FALSE)
# (on the CPU, as the site: a GPU is used only when asked)
if (!nzchar(Sys.getenv("RKEOPS_VIGNETTES_GPU"))) Sys.setenv(CUDA_VISIBLE_DEVICES = "")
start <- Sys.time()
for (rmd in Sys.glob("vignettes/*.Rmd")) {
  work <- tempfile("vignette")
  dir.create(work)
  rmarkdown::render(rmd, output_dir = out, intermediates_dir = work, knit_root_dir = work, envir = new.env(),
                    quiet = TRUE)
  unlink(work, recursive = TRUE)
  message("vignettes: ", basename(rmd), " knitted")
}
message(sprintf("vignettes: %d knitted into %s in %.0f s", length(Sys.glob("vignettes/*.Rmd")), out,
                as.numeric(difftime(Sys.time(), start, units = "secs"))))

# Builds the pkgdown documentation site into docs/ offline, from the package installed in ./lib
# (make site: R_LIBS=lib Rscript tools/site.R). Usage: Rscript tools/site.R [docs-dir]
#
# Offline: pkgdown asks CRAN whether the package is published (the home page's "Links"); the
# option pkgdown.internet = FALSE turns that off. The Bootstrap 5 template takes its CSS and
# JavaScript from bslib (copied into docs/deps), no bootswatch theme or Google font is set, and
# the vignettes need no network. The formulas become MathML, which browsers draw without MathJax
# (tools/site-math.R); the pages still point at the docsearch scripts of a CDN (search only).

args <- commandArgs(trailingOnly = TRUE)
dest <- if (length(args) >= 1) args[[1]] else "docs"

if (!requireNamespace("pkgdown", quietly = TRUE)) {
  stop("make site needs the R package pkgdown (apt-get install r-cran-pkgdown, or make deps as root)")
}
lib <- Sys.getenv("R_LIBS")
if (!nzchar(system.file(package = "rkeops"))) {
  stop("rkeops is not installed in R_LIBS=", lib, " (make install first)")
}
# pkgdown renders the vignettes and examples with the installed package (install = FALSE): make
# sure it is the one of this tree.
message("site: rkeops from ", dirname(system.file(package = "rkeops")))

options(pkgdown.internet = FALSE, repos = c(CRAN = "file:///nonexistent"))
Sys.setenv(R_KEEP_PKG_SOURCE = "no")
# Vignettes and examples run on the CPU with 2 threads unless told otherwise (the CI host).
if (!nzchar(Sys.getenv("RKEOPS_SITE_GPU"))) Sys.setenv(CUDA_VISIBLE_DEVICES = "")

start <- Sys.time()
pkg <- pkgdown::as_pkgdown(".", override = list(destination = dest))
# A vignette that _pkgdown.yml's articles do not list (pkgdown stops on it) goes to an "Other
# articles" group, with a message: add it to a group of _pkgdown.yml.
meta <- yaml::read_yaml("_pkgdown.yml")
listed <- unlist(lapply(meta$articles, `[[`, "contents"))
vignettes <- sub("\\.[Rr]md$", "", basename(Sys.glob("vignettes/*.[Rr]md")))
unlisted <- setdiff(vignettes, c(listed, "rkeops"))
if (length(unlisted) > 0) {
  message("site: vignettes not in _pkgdown.yml's articles, listed under \"Other articles\": ",
          paste(unlisted, collapse = ", "))
  pkg$meta$articles <- c(meta$articles, list(list(title = "Other articles", navbar = "Other articles",
                                                  contents = as.list(unlisted))))
}
# Every exported topic in a section, every vignette in the articles (stops otherwise).
pkgdown::check_pkgdown(pkg)

# new_process = FALSE: knit in this process, whose library path has ./lib first.
pkgdown::build_site(pkg, lazy = FALSE, preview = FALSE, install = FALSE, new_process = FALSE,
                    devel = FALSE, examples = TRUE)

source("tools/site-math.R")
message("site: ", mathml_site(dest), " formulas as MathML (no MathJax)")

took <- as.numeric(difftime(Sys.time(), start, units = "secs"))
message(sprintf("site: built into %s in %d min %d s", normalizePath(dest), as.integer(took %/% 60),
                as.integer(round(took %% 60))))

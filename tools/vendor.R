# Vendors the Rust crates of src/rust/Cargo.lock into src/rust/vendor.tar.xz, so that the package
# builds with no network (CRAN's Rust policy), and lists their authors and licences in inst/AUTHORS.
#
#   make vendor            (or: Rscript tools/vendor.R, from the package root)
#
# Run it again after any change of src/rust/Cargo.lock; it needs the network (or every crate
# already downloaded in $CARGO_HOME) and the R package jsonlite. tools/configure.R unpacks the
# tarball at install time (R's own untar: no xz program needed) where no crates were downloaded.
#
# What cargo never reads is left out to keep the tarball small: the crates' tests, benches and
# examples, and the modules of cudarc behind features we do not enable (cuBLAS, cuDNN, ... bindings,
# most of its 8 MB). Cargo checks each vendored file against the crate's .cargo-checksum.json:
# removed files are dropped from its "files" list (the "package" hash, checked against Cargo.lock,
# stays). A build from the tarball (R CMD build, then R CMD INSTALL of the result) proves that
# nothing needed was dropped.

local({
  if (!requireNamespace("jsonlite", quietly = TRUE)) stop("tools/vendor.R needs the R package jsonlite")
  if (!file.exists("src/rust/Cargo.lock")) stop("run tools/vendor.R from the package root")
  Sys.setenv(PATH = paste(path.expand("~/.cargo/bin"), Sys.getenv("PATH"), sep = .Platform$path.sep))
  if (!nzchar(Sys.getenv("CARGO_HOME"))) Sys.setenv(CARGO_HOME = normalizePath("src/rust/.cargo", mustWork = FALSE))
  manifest <- "src/rust/Cargo.toml"

  # Runs cargo, returns its output; its messages are shown only when it fails.
  cargo <- function(...) {
    log <- tempfile()
    out <- suppressWarnings(system2("cargo", c(...), stdout = TRUE, stderr = log))
    if (!is.null(attr(out, "status"))) {
      writeLines(readLines(log), stderr())
      stop("cargo ", paste(c(...), collapse = " "), " failed")
    }
    out
  }

  work <- tempfile("rkeops-vendor")
  dir.create(work)
  on.exit(unlink(work, recursive = TRUE), add = TRUE)
  vendor <- file.path(work, "vendor")
  # --locked: vendor exactly the versions of Cargo.lock (the ones the package is tested with).
  cargo("vendor", "--locked", "--manifest-path", manifest, vendor)
  meta <- jsonlite::fromJSON(paste(cargo("metadata", "--format-version", "1", "--locked",
                                         "--manifest-path", manifest), collapse = "\n"),
                             simplifyVector = FALSE)

  # cudarc's feature-gated modules: keep src/<module> only where a feature enables it
  # ("driver", or "cudnn-09021" for "cudnn").
  cudarc <- Filter(function(n) grepl("#cudarc@", n$id, fixed = TRUE), meta$resolve$nodes)
  cudarc_features <- if (length(cudarc)) unlist(cudarc[[1]]$features) else character()
  keep_module <- function(m) any(cudarc_features == m | startsWith(cudarc_features, paste0(m, "-")))

  dropped <- 0
  for (crate in list.dirs(vendor, recursive = FALSE)) {
    drop <- file.path(crate, c("tests", "benches", "examples", "testdata", "ci"))
    if (basename(crate) == "cudarc") {
      modules <- list.dirs(file.path(crate, "src"), recursive = FALSE)
      drop <- c(drop, modules[!vapply(basename(modules), keep_module, TRUE)])
    }
    drop <- drop[dir.exists(drop)]
    if (!length(drop)) next
    gone <- list.files(drop, recursive = TRUE, all.files = TRUE, full.names = TRUE)
    dropped <- dropped + sum(file.size(gone))
    unlink(drop, recursive = TRUE)
    sums_file <- file.path(crate, ".cargo-checksum.json")
    sums <- jsonlite::fromJSON(sums_file, simplifyVector = FALSE)
    kept <- names(sums$files)[file.exists(file.path(crate, names(sums$files)))]
    sums$files <- sums$files[kept]
    writeLines(jsonlite::toJSON(sums, auto_unbox = TRUE), sums_file, useBytes = TRUE)
  }

  # A reproducible tarball: sorted names, one fixed time stamp.
  old <- setwd(work)
  on.exit(setwd(old), add = TRUE, after = FALSE)
  files <- sort(list.files("vendor", recursive = TRUE, all.files = TRUE, include.dirs = TRUE,
                           full.names = TRUE))
  Sys.setFileTime(c(files, "vendor"), as.POSIXct("2020-01-01", tz = "UTC"))
  out <- file.path(old, "src/rust/vendor.tar.xz")
  utils::tar(out, c("vendor", files), compression = "xz", compression_level = 9, tar = "internal")
  setwd(old)

  # inst/AUTHORS: the vendored crates, their authors and licences (CRAN asks for both).
  pkgs <- Filter(function(p) !is.null(p$source), meta$packages)
  pkgs <- pkgs[order(vapply(pkgs, function(p) p$name, ""), vapply(pkgs, function(p) p$version, ""))]
  entry <- function(p) {
    authors <- unlist(p$authors)
    c(sprintf("%s %s (%s)", p$name, p$version, if (is.null(p$license)) "licence: see the crate" else p$license),
      sprintf("  authors: %s", if (length(authors)) paste(authors, collapse = ", ")
                               else "not listed in the crate; see its repository"),
      if (!is.null(p$repository)) sprintf("  repository: %s", p$repository),
      "")
  }
  dir.create("inst", showWarnings = FALSE)
  writeLines(c(
    "Authors and licences of the Rust crates bundled with rkeops",
    "===========================================================",
    "",
    "The Rust code of rkeops (src/rust/engine, src/rust/rkeops) is by the rkeops authors (MIT licence,",
    "file LICENSE). src/rust/vendor.tar.xz bundles the source of the crates below, from crates.io, so",
    "that the package builds offline; each keeps its own copyright and licence (the licence texts are",
    "in each crate's directory of the tarball). Generated by tools/vendor.R from src/rust/Cargo.lock.",
    "",
    unlist(lapply(pkgs, entry))), "inst/AUTHORS")

  cat(sprintf("tools/vendor.R: %d crates in src/rust/vendor.tar.xz (%.2f MB; %.1f MB of tests, benches, examples and unused cudarc modules left out); inst/AUTHORS written\n",
              length(pkgs), file.size(out) / 1e6, dropped / 1e6))
})

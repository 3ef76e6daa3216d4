# Run by ./configure (R CMD INSTALL), from the package root, before src/Makevars builds the Rust library.
#
# 1. Checks that cargo and rustc are there (on the PATH, or in ~/.cargo/bin where rustup puts them)
#    and that rustc is at least the version in DESCRIPTION's SystemRequirements; says what to install
#    otherwise, and reports both versions in the installation log (CRAN asks for it).
# 2. Chooses where cargo takes the crates of src/rust/Cargo.lock from:
#    - vendored: from src/rust/vendor.tar.xz (made by `make vendor`), unpacked into src/rust/vendor,
#      with no network. That is the case of the source tarball (R CMD build, CRAN) and of a fresh
#      clone. The choice is written into the package's private cargo home, src/rust/.cargo/config.toml,
#      so that every cargo command using that home (make test's cargo test too) takes the same crates:
#      switching sources would make cargo compile every dependency again.
#    - downloaded: from crates.io into src/rust/.cargo, as before vendoring existed. That is kept for
#      a tree where cargo already downloaded crates (src/rust/.cargo/registry exists), so that its
#      build is not redone from scratch. Remove src/rust/.cargo (make distclean) to switch such a tree
#      to the vendored crates.

local({
  say <- function(...) cat("rkeops: ", ..., "\n", sep = "")
  fail <- function(lines) {
    cat(paste0(c("rkeops: ", rep("  ", length(lines) - 1L)), lines, "\n"), sep = "", file = stderr())
    quit(save = "no", status = 1)
  }

  sysreq <- read.dcf("DESCRIPTION", fields = "SystemRequirements")[1, 1]
  msrv <- regmatches(sysreq, regexec("rustc >= ([0-9.]+)", sysreq))[[1]][2]
  if (is.na(msrv)) fail("DESCRIPTION's SystemRequirements must say 'rustc >= <version>'")

  install_hint <- c(
    sprintf("rkeops is built with Rust: it needs cargo and rustc >= %s.", msrv),
    "Install the current Rust with rustup (https://rustup.rs), as the user who installs R packages:",
    "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal",
    "(it goes to ~/.cargo/bin, where rkeops looks too), or update it with: rustup update stable",
    sprintf("System packages do too where their rustc is >= %s (Debian 12's 1.63 is too old):", msrv),
    "  Debian/Ubuntu: apt-get install cargo rustc",
    "  Fedora: dnf install cargo rustc",
    "  macOS (Homebrew): brew install rust",
    "then install rkeops again.")

  # The same PATH as src/Makevars: rustup's ~/.cargo/bin first.
  Sys.setenv(PATH = paste(file.path(Sys.getenv("HOME"), ".cargo", "bin"), Sys.getenv("PATH"), sep = ":"))
  tool_version <- function(tool) {
    if (!nzchar(Sys.which(tool))) fail(c(sprintf("'%s' was not found.", tool), install_hint))
    out <- suppressWarnings(system2(tool, "--version", stdout = TRUE, stderr = TRUE))
    # A rustup proxy with no toolchain installed is on the PATH but fails.
    if (!is.null(attr(out, "status")) || !length(out))
      fail(c(sprintf("'%s --version' failed:", tool), paste0("  ", out), install_hint))
    out[1]
  }
  cargo_version <- tool_version("cargo")
  rustc_version <- tool_version(Sys.getenv("RUSTC", "rustc"))   # cargo uses $RUSTC where it is set
  say("using ", cargo_version)
  say("using ", rustc_version)
  found <- regmatches(rustc_version, regexec("rustc ([0-9]+[.][0-9]+[.][0-9]+)", rustc_version))[[1]][2]
  if (is.na(found)) fail(c(sprintf("cannot read the version of rustc in '%s'.", rustc_version), install_hint))
  if (package_version(found) < package_version(msrv))
    fail(c(sprintf("rustc %s is too old.", found), install_hint))

  rust <- file.path("src", "rust")
  cargo_home <- file.path(rust, ".cargo")
  config <- file.path(cargo_home, "config.toml")
  tarball <- file.path(rust, "vendor.tar.xz")
  marker <- "# rkeops: vendored crates (written by tools/configure.R)"
  ours <- file.exists(config) && identical(readLines(config, n = 1L, warn = FALSE), marker)
  vendored <- ours || (file.exists(tarball) && !dir.exists(file.path(cargo_home, "registry")) &&
                         !file.exists(config))
  if (!vendored) {
    say("cargo takes the crates of src/rust/Cargo.lock from crates.io (cached in src/rust/.cargo)")
    return(invisible())
  }
  if (!file.exists(tarball))
    fail(c("src/rust/.cargo/config.toml asks for the vendored crates, but src/rust/vendor.tar.xz is missing:",
           "make it with `make vendor`, or remove src/rust/.cargo to download the crates instead."))

  # Unpack again whenever the tarball changed (make vendor, git pull).
  dir.create(cargo_home, recursive = TRUE, showWarnings = FALSE)
  vendor <- file.path(rust, "vendor")
  stamp <- file.path(cargo_home, "vendor.md5")
  md5 <- unname(tools::md5sum(tarball))
  if (!dir.exists(vendor) || !file.exists(stamp) || !identical(readLines(stamp, warn = FALSE), md5)) {
    unlink(vendor, recursive = TRUE)
    utils::untar(tarball, exdir = rust, tar = "internal")
    writeLines(md5, stamp)
  }

  # Every crate of Cargo.lock must be in the tarball (cargo would fail later, less clearly): compare
  # the lock's checksums with the "package" checksums of the vendored crates.
  grab <- function(file, pattern) {
    lines <- readLines(file, warn = FALSE)
    regmatches(lines, regexpr(pattern, lines, perl = TRUE))
  }
  locked <- grab(file.path(rust, "Cargo.lock"), "(?<=^checksum = \")[0-9a-f]{64}")
  sums <- file.path(list.dirs(vendor, recursive = FALSE), ".cargo-checksum.json")
  have <- unlist(lapply(sums, grab, pattern = "(?<=\"package\":\")[0-9a-f]{64}"))
  missing <- setdiff(locked, have)
  if (length(missing))
    fail(c(sprintf("src/rust/vendor.tar.xz lacks %d crate(s) of src/rust/Cargo.lock: it is out of date.", length(missing)),
           "Make it again with `make vendor` (needs the network)."))

  # Paths in a cargo config are relative to the parent of its directory: "vendor" is src/rust/vendor.
  writeLines(c(marker,
               "[source.crates-io]",
               "replace-with = \"vendored-sources\"",
               "",
               "[source.vendored-sources]",
               "directory = \"vendor\""), config)
  say(sprintf("cargo builds offline with the %d vendored crates of src/rust/vendor.tar.xz", length(locked)))
})

# Developer entry points of the rkeops package.
#
#   make deps     check (and, as root, install with apt) R, testthat, roxygen2,
#                 knitr, rmarkdown, pandoc, pkgdown, chromium; check that cargo is there
#   make install  build and install the package into ./lib
#   make vignettes  knit the vignettes into inst/doc and install them with the package
#   make demo     make vignettes, then run inst/demo/demo.R against ./lib
#   make test     clippy (warnings are errors), the engine's cargo tests, then the testthat suite
#   make check    R CMD build (knits the vignettes) + R CMD check --as-cran
#                 --no-manual (offline: no CRAN incoming or URL checks)
#   make fuzz     run the formula fuzzer for FUZZ_SECONDS=300 (make test runs it for 10 s)
#   make bench-cpu  time rkeops, pykeops and dense R on the CPU in one run
#                 (NMAX=1e6 largest N = M, BUDGET=60 seconds per measurement,
#                 REPS=5, BENCH_OUT=file.md to also write the report,
#                 CASES=regex to run only some cases, e.g. CASES='D=3 float64')
#   make bench-iterative  time whole iterative algorithms (EM, Sinkhorn, landmark matching,
#                 K-means, CG kriging) from R with their R peers (bench/iterative.R;
#                 BACKEND=CPU|GPU, SIZES=small|full, CASES=regex, BUDGET=60 s per case,
#                 REPS=3, BENCH_OUT=file.md)
#   make bench-algorithms  the algorithm functions (keops_kmeans, keops_gmm, keops_krige,
#                 keops_sinkhorn, keops_landmarks on a GPU) against their R peers (bench/algorithms.R;
#                 BACKEND=CPU|GPU, REPS=3, KRIGE_N=5e4, SINKHORN_N=1e4, BENCH_OUT=file.md)
#   make bench-ranges  block-sparse reductions (ranges) and keops_knn() against brute force
#                 and RANN/FNN (bench/ranges.R; BACKEND=CPU|GPU, RANGES_N=1e6, KNN_N=RANGES_N, REPS=3)
#   make bench-solve  solve() on a LazyTensor with and without the Nystrom preconditioner, and
#                 dense base::solve() (bench/solve.R; SIZES=1e4,5e4, EPS=1e-4, RANKS=sweep, REPS=3,
#                 BUDGET=120 s per case, BENCH_OUT=file.md)
#   make bench-batch  batches (issue 17): batched Sinkhorn (seed 001), K-NN graphs and Gaussian-window
#                 averages of batches of point clouds, each against the loop of per-member calls
#                 (bench/batch.R; BACKEND=CPU|GPU, SIZES=full|small, B=256 problems, REPS=3,
#                 LOOP_BUDGET=30 s per loop run, BENCH_OUT=file.md)
#   make bench-future  the future path (issue 18): a Gaussian sum split over plan(multisession) by
#                 rkeops_use_future() against one process with as many threads (bench/future.R;
#                 FUTURE_N=1e5 points, WORKERS=2, REPS=3, BENCH_OUT=file.md; needs future, future.apply)
#   make bench-tensor  tensor-core dot products (issue 19): 10-NN in D = 100 and 784, a Gaussian sum in
#                 D = 64, against the FP32 kernel from R, then the torch peers (bench/tensor_cores.R,
#                 bench/tensor_cores_peers.py; GPU only; REPS=3, FP32_REPS=1, SCALE=1, BENCH_OUT=file.md)
#   make bench-old-new OLD=<library> [NEW=<library>]  two installed revisions alternated in one call
#                 (bench/old_new.sh: the algorithm functions and programs; BACKEND=GPU|CPU, REPS=3)
#   make doc      regenerate NAMESPACE and man/ with roxygen2
#   make site     build the pkgdown documentation site offline into docs/ (git-ignored) from the
#                 package in ./lib: README as home page, reference grouped by _pkgdown.yml, the
#                 vignettes as articles (tools/site.R; 3 to 4 min on 2 cores, mostly knitting)
#   make site-check  make site, then render pages of docs/ in headless chromium, save screenshots
#                 in docs/_check/ and check their text (tools/check-site.sh); CI runs it after make test
#   make vendor   bundle the crates of src/rust/Cargo.lock into src/rust/vendor.tar.xz (commit it)
#                 and list their authors and licences in inst/AUTHORS; run it after any change of
#                 Cargo.lock (needs the network and the R package jsonlite). A source tarball or a
#                 fresh clone then builds offline (tools/configure.R).
#   make clean    remove R build products (keeps the cargo target directory)
#   make distclean  also remove src/rust/target and src/rust/.cargo

SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c

# cargo is often installed by rustup in ~/.cargo/bin, which may not be on PATH.
export PATH := $(HOME)/.cargo/bin:$(PATH)
# The same private cargo home as src/Makevars: cargo fingerprints registry
# crates by their unpacked path, so building with two cargo homes in one
# target directory recompiles every dependency at each switch.
export CARGO_HOME := $(CURDIR)/src/rust/.cargo

LIB_DIR := $(CURDIR)/lib
APT_PKGS := r-base-dev r-cran-testthat r-cran-roxygen2 r-cran-knitr r-cran-rmarkdown pandoc \
	r-cran-future r-cran-future.apply r-cran-progressr r-cran-pkgdown chromium r-cran-mclust
R_PKGS := testthat roxygen2 knitr rmarkdown future future.apply progressr pkgdown mclust
CARGO_MANIFEST := src/rust/Cargo.toml

# make bench-cpu settings (see bench/cpu_compare.R).
NMAX ?= 1e6
BUDGET ?= 60
REPS ?= 5
BENCH_OUT ?=
CASES ?=

# make bench-iterative settings (see bench/iterative.R); empty: the script's defaults.
BACKEND ?= CPU
SIZES ?=
ITER_BUDGET ?= $(if $(filter command line,$(origin BUDGET)),$(BUDGET),60)
ITER_REPS ?= $(if $(filter command line,$(origin REPS)),$(REPS),3)

.PHONY: bench-kmeans-seeding bench-gmm-start bench-old-new bench-compile bench-soak bench-fast-builds
.PHONY: all deps install vignettes demo test fuzz check doc site site-check clean distclean bench-cpu bench-iterative bench-program bench-program-r-side bench-fusion bench-algorithms bench-ranges bench-solve bench-batch bench-future bench-kmeans-future bench-gpus bench-tensor vendor

all: install

# Prints what is missing (nothing when all is there).
define missing_deps
	missing=""; \
	command -v R >/dev/null 2>&1 && command -v Rscript >/dev/null 2>&1 || missing="$$missing R"; \
	command -v cc >/dev/null 2>&1 || missing="$$missing C-compiler"; \
	if command -v Rscript >/dev/null 2>&1; then \
		for p in $$(Rscript -e 'p <- commandArgs(TRUE); cat(p[!vapply(p, requireNamespace, TRUE, quietly = TRUE)])' $(R_PKGS) 2>/dev/null); do \
			missing="$$missing $$p"; \
		done; \
	else \
		missing="$$missing $(R_PKGS)"; \
	fi; \
	command -v pandoc >/dev/null 2>&1 || missing="$$missing pandoc"; \
	command -v chromium >/dev/null 2>&1 || missing="$$missing chromium"; \
	echo "$$missing"
endef

deps:
	@missing=$$($(missing_deps)); \
	if [ -n "$$missing" ]; then \
		echo "deps: missing:$$missing"; \
		if [ "$$(id -u)" = "0" ]; then \
			echo "deps: installing with apt-get: $(APT_PKGS)"; \
			apt-get update; \
			DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $(APT_PKGS); \
			missing=$$($(missing_deps)); \
			if [ -n "$$missing" ]; then echo "deps: still missing after apt-get:$$missing" >&2; exit 1; fi; \
		else \
			echo "deps: not root; please install these Debian/Ubuntu packages:" >&2; \
			echo "  sudo apt-get install -y --no-install-recommends $(APT_PKGS)" >&2; \
			exit 1; \
		fi; \
	fi
	@if ! command -v cargo >/dev/null 2>&1; then \
		echo "deps: cargo (Rust) was not found. Install Rust with rustup:" >&2; \
		echo "  curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh" >&2; \
		exit 1; \
	fi
	@echo "deps: $$(Rscript --version 2>&1 | head -n 1); $$(cargo --version)"

install: deps
	mkdir -p $(LIB_DIR)
	R CMD INSTALL --no-test-load -l $(LIB_DIR) .
	R_LIBS=$(LIB_DIR) Rscript -e 'library(rkeops)'

# The vignettes knitted into inst/doc (git-ignored) and installed with the package, so that
# vignette(package = "rkeops") lists them from a clone (3 to 4 minutes on 2 cores).
vignettes: install
	R_LIBS=$(LIB_DIR) Rscript tools/vignettes.R
	R CMD INSTALL --no-test-load -l $(LIB_DIR) .

demo: vignettes
	R_LIBS=$(LIB_DIR) Rscript inst/demo/demo.R

# The engine's tests use the release profile of the package's library; its integration tests are
# one binary (tests/main.rs). clippy checks every target (examples and benchmarks too: they are
# compiled nowhere else); no import circle among the engine's files nor among its folders, and no
# function over 80 lines (tools/). Prints how long it all took: at most 12 minutes on a fresh clone
# on 2 cores.
test:
	@start=$$(date +%s); status=0; \
	{ $(MAKE) --no-print-directory install && \
	  cargo clippy --manifest-path $(CARGO_MANIFEST) --workspace --all-targets -- -D warnings && \
	  python3 tools/engine_circles.py src/rust/engine/src && \
	  python3 tools/engine_circles.py src/rust/engine/src --top && \
	  python3 tools/long_functions.py src/rust/engine/src && \
	  cargo test --release --manifest-path $(CARGO_MANIFEST) -p rkeops-engine && \
	  R_LIBS=$(LIB_DIR) Rscript tools/run-tests.R tests/testthat; } || status=$$?; \
	took=$$(( $$(date +%s) - start )); \
	echo "make test: $$((took / 60)) min $$((took % 60)) s"; \
	exit $$status

# The engine's fuzzer for longer than the 10 s of make test (FUZZ_SECONDS; FUZZ_START=first seed,
# so that successive runs try new cases).
FUZZ_SECONDS ?= 300
FUZZ_START ?= 1
fuzz:
	FUZZ_SECONDS=$(FUZZ_SECONDS) FUZZ_START=$(FUZZ_START) cargo test --release --manifest-path $(CARGO_MANIFEST) \
		-p rkeops-engine --test engine_tests fuzz:: -- --nocapture

bench-cpu: install
	NMAX=$(NMAX) BUDGET=$(BUDGET) REPS=$(REPS) BENCH_OUT='$(BENCH_OUT)' CASES='$(CASES)' \
		R_LIBS=$(LIB_DIR) Rscript bench/cpu_compare.R

bench-iterative: install
	BACKEND='$(BACKEND)' SIZES='$(SIZES)' BUDGET=$(ITER_BUDGET) REPS=$(ITER_REPS) BENCH_OUT='$(BENCH_OUT)' \
		CASES='$(CASES)' R_LIBS=$(LIB_DIR) Rscript bench/iterative.R

# make bench-program: whole algorithms as programs (keops_program()) against R loops and their R
# peers (bench/program.R; BACKEND=GPU on the GPU host; KMEANS_N, SINKHORN_N, GMM=N,K,D, REPS).
bench-program: install
	BACKEND='$(BACKEND)' REPS=$(ITER_REPS) R_LIBS=$(LIB_DIR) Rscript bench/program.R

# make bench-fusion [BACKEND=GPU|CPU] [REPS=3]: programs with their sums over the same pairs fused
# and apart, alternated (bench/fusion.R): times, GPU launches per evaluation, values.
bench-fusion: install
	BACKEND=$(or $(BACKEND),GPU) REPS=$(or $(REPS),3) R_LIBS=$(LIB_DIR) Rscript bench/fusion.R

# make bench-program-r-side: the time a program call spends outside the engine (bench/program_r_side.R).
bench-program-r-side: install
	R_LIBS=$(LIB_DIR) Rscript bench/program_r_side.R

# make bench-algorithms: the algorithm functions (keops_kmeans, keops_gmm, keops_krige, keops_sinkhorn,
# keops_landmarks on a GPU) against their R peers (bench/algorithms.R; BACKEND=GPU, REPS, KRIGE_N,
# SINKHORN_N, CASES=kmeans,gmm,krige,sinkhorn,landmarks, BENCH_OUT=file.md).
bench-algorithms: install
	BACKEND='$(BACKEND)' REPS=$(ITER_REPS) CASES='$(CASES)' R_LIBS=$(LIB_DIR) Rscript bench/algorithms.R

# make bench-ranges: block-sparse reductions and keops_knn() (bench/ranges.R), N = M points.
RANGES_N ?= 1e6
KNN_N ?= $(RANGES_N)
# keops_kmeans(x, 50) with its k-means++ seeding against stats::kmeans (Lloyd), 10^6 x 2 (issue 52;
# REPS, N, K in the environment), and keops_gmm's default start against Mclust (ARI, log-likelihood).
# make bench-compile: the first call of 60 new formulas from a fresh kernel cache (GPU only).
bench-compile: install
	R_LIBS=$(LIB_DIR) Rscript bench/compile_time.R

# make bench-soak: 100 random plain reductions' first calls from a fresh kernel cache (GPU only).
bench-soak: install
	R_LIBS=$(LIB_DIR) Rscript bench/soak_compile.R

# make bench-fast-builds: fast builds' run time and bits against optimised builds on 2e5 x 2e5
# reductions (GPU only; N, RKEOPS_GPU_FAST_OPTIONS, RKEOPS_GPU_NVRTC_OPTIONS in the environment).
bench-fast-builds: install
	R_LIBS=$(LIB_DIR) Rscript bench/fast_builds.R

bench-kmeans-seeding: install
	R_LIBS=$(LIB_DIR) Rscript bench/kmeans-seeding.R

# make bench-old-new: OLD is the library of another revision (R CMD INSTALL -l <dir> in its checkout),
# NEW this checkout's by default.
NEW ?= $(LIB_DIR)
bench-old-new: install
	@test -n "$(OLD)" || { echo "make bench-old-new OLD=<library of the other revision>"; exit 1; }
	sh bench/old_new.sh "$(abspath $(OLD))" "$(abspath $(NEW))"

bench-gmm-start: install
	R_LIBS=$(LIB_DIR) Rscript bench/gmm-start.R

bench-ranges: install
	BACKEND='$(BACKEND)' N=$(RANGES_N) KNN_N=$(KNN_N) REPS=$(ITER_REPS) R_LIBS=$(LIB_DIR) Rscript bench/ranges.R

# make bench-solve: empty settings are the script's defaults.
EPS ?=
RANKS ?=
bench-solve: install
	SIZES='$(SIZES)' EPS='$(EPS)' RANKS='$(RANKS)' REPS=$(ITER_REPS) \
		BUDGET=$(if $(filter command line,$(origin BUDGET)),$(BUDGET),120) BENCH_OUT='$(BENCH_OUT)' \
		R_LIBS=$(LIB_DIR) Rscript bench/solve.R

# make bench-batch: empty settings are the script's defaults.
B ?=
LOOP_BUDGET ?=
bench-batch: install
	BACKEND='$(BACKEND)' SIZES='$(SIZES)' B='$(B)' REPS=$(ITER_REPS) LOOP_BUDGET='$(LOOP_BUDGET)' \
		BENCH_OUT='$(BENCH_OUT)' R_LIBS=$(LIB_DIR) Rscript bench/batch.R

# make bench-kmeans-future: keops_kmeans() with its points kept on plan(multisession) workers
# against one process with as many threads (bench/kmeans_future.R; KM_N=4e6, KM_D=2, KM_K=50).
bench-kmeans-future: install
	WORKERS=$(WORKERS) R_LIBS=$(LIB_DIR) Rscript bench/kmeans_future.R

# make bench-future: the future path (bench/future.R).
FUTURE_N ?= 1e5
WORKERS ?= 2
bench-future: install
	N=$(FUTURE_N) WORKERS=$(WORKERS) REPS=$(ITER_REPS) BENCH_OUT='$(BENCH_OUT)' R_LIBS=$(LIB_DIR) \
		Rscript bench/future.R

# make bench-gpus: several GPUs sharing each reduction against one (bench/several_gpus.R; needs
# GPUs: GPUS=0,1,2,3 the list, COUNTS=1,2,4 how many of them share a call, N=1e7 the goals' size,
# N=2e6 a quick run, CASES=gauss,knn,short,wide or the algorithm functions kmeans,gmm,sinkhorn,
# knnfun,krige (their programs spread: KM_N, GMM_N, SK_N, KNN_N, KR_N their sizes), REPS=3). Issue 20 on 8 GPUs, in two device calls
# of under 10 minutes: COUNTS=1,2,4,8 REPS=1 CASES=gauss,knn,short M_SHORT=1e9, then CASES=wide.
GPUS_N ?= 1e7
GPUS_REPS ?= 3
bench-gpus: install
	N=$(GPUS_N) GPUS='$(GPUS)' COUNTS='$(COUNTS)' CASES='$(CASES)' M_SHORT='$(M_SHORT)' REPS=$(GPUS_REPS) \
		BENCH_OUT='$(BENCH_OUT)' R_LIBS=$(LIB_DIR) Rscript bench/several_gpus.R

# make bench-tensor: tensor-core dot products against the FP32 kernel from R (bench/tensor_cores.R),
# then the torch peers and cuBLAS's TF32 peak in the same call (bench/tensor_cores_peers.py; needs a GPU,
# torch for the peers).
bench-tensor: install
	REPS=3 BENCH_OUT='$(BENCH_OUT)' R_LIBS=$(LIB_DIR) Rscript bench/tensor_cores.R
	python3 bench/tensor_cores_peers.py

# CRAN's incoming checks and the clock check need the internet: off, so that the
# check runs offline and says the same everywhere. --as-cran needs qpdf, and checkbashisms
# (Debian package devscripts) for ./configure.
# HOME is an empty temporary directory during the build and the check (R's libraries and rustup's
# toolchains are still found): whatever appears in it was written outside tempdir(), which CRAN
# forbids, and fails make check.
check: deps
	@command -v qpdf >/dev/null 2>&1 || { echo "make check: R CMD check --as-cran needs qpdf (apt-get install qpdf)" >&2; exit 1; }
	@command -v checkbashisms >/dev/null 2>&1 || { echo "make check: R CMD check needs checkbashisms for ./configure (apt-get install devscripts)" >&2; exit 1; }
	rm -f rkeops_*.tar.gz
	@home=$$(mktemp -d); status=0; \
	export R_LIBS="$$(Rscript -e 'cat(.libPaths(), sep = ":")')" RUSTUP_HOME="$${RUSTUP_HOME:-$$HOME/.rustup}" HOME="$$home"; \
	R CMD build . && \
	_R_CHECK_CRAN_INCOMING_REMOTE_=false _R_CHECK_SYSTEM_CLOCK_=false \
		R CMD check --as-cran --no-manual rkeops_*.tar.gz || status=$$?; \
	written=$$(find "$$home" -mindepth 1); rm -rf "$$home"; \
	if [ -n "$$written" ]; then echo "make check: written to HOME during the check:" >&2; echo "$$written" >&2; exit 1; fi; \
	exit $$status

vendor:
	Rscript tools/vendor.R

doc: deps
	Rscript -e 'roxygen2::roxygenise(load_code = roxygen2::load_source)'

# The documentation site (pkgdown), offline, from the package installed in ./lib; docs/ is rebuilt
# from scratch. Vignettes and examples run on the CPU (RKEOPS_SITE_GPU=1: as found).
site: install
	rm -rf docs
	R_LIBS=$(LIB_DIR) Rscript tools/site.R docs

# The site in a browser: headless chromium renders pages of docs/ (screenshots in docs/_check/).
site-check: site
	tools/check-site.sh docs

clean:
	rm -rf $(LIB_DIR) rkeops.Rcheck rkeops_*.tar.gz docs
	rm -f src/*.o src/*.so src/*.dll src/rust/target/release/librkeops.a

distclean: clean
	rm -rf src/rust/target src/rust/.cargo

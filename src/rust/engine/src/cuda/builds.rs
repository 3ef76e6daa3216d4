//! Kernel binaries from NVRTC. With `Tuning::fast_compile` (on by default), a kernel new to the
//! process (not in memory, not in the disk cache) whose first call has little work is built first
//! with NVRTC's fast-compile level (`-Ofc=max`, CUDA 12.8+), from its source written for one row
//! per thread where it has one (`codegen::generate_one_row`: the 60 probe formulas' first calls
//! 0.036 s median against 0.49 s, H200, 2026-11-30, bench/RESULTS.md) and launched at once, while
//! its optimised build compiles on a background thread and replaces it when ready; only optimised
//! builds go to the disk cache. Every build is compiled without contraction (`BASE_OPTIONS`), so
//! that both compute the same bits. The background thread takes one kernel at a time, in order,
//! so that a script's new formulas do not take every core.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, OnceLock};

use cudarc::nvrtc::{result as nvrtc_result, sys as nvrtc_sys};

use super::guard::{driver_error, guarded};
use crate::cache::DiskCache;
use crate::error::{Error, Result};

/// Whether NVRTC can be loaded (compiling needs no driver, nor a GPU).
pub fn nvrtc_present() -> Result<()> {
    // SAFETY: this only tries to dlopen the candidate library names.
    if !unsafe { nvrtc_sys::is_culib_present() } {
        return Err(Error::Gpu(
            "the NVIDIA driver is present but NVRTC is not (libnvrtc.so.13 or .so.12 could not be loaded; \
             install the CUDA runtime compiler, e.g. the cuda-nvrtc package, and make it visible to the \
             dynamic loader)"
                .into(),
        ));
    }
    Ok(())
}

/// How a kernel is compiled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Build {
    /// NVRTC's full optimisation: the build kept on disk and run after the first calls.
    Optimised,
    /// NVRTC's fast-compile level: about 4 times quicker to compile, but its kernels run up to ~40
    /// times slower (the same bits); the first calls of little work of a new kernel.
    Fast,
}

impl Build {
    fn options(self) -> &'static [String] {
        match self {
            Build::Optimised => &[],
            Build::Fast => fast_options(),
        }
    }

    /// The build of a kernel that is neither in memory nor on disk: fast where `fast_first` and
    /// NVRTC has the option (12.8+).
    pub fn first(fast_first: bool) -> Build {
        match fast_first && nvrtc_at_least(12, 8) {
            true => Build::Fast,
            false => Build::Optimised,
        }
    }
}

/// The NVRTC options of a fast build: `-Ofc=max`, or `RKEOPS_GPU_FAST_OPTIONS` (space-separated)
/// to try others (whether they keep the optimised build's bits: bench/compile_time.R says).
fn fast_options() -> &'static [String] {
    static OPTIONS: OnceLock<Vec<String>> = OnceLock::new();
    OPTIONS.get_or_init(|| options_from_env("RKEOPS_GPU_FAST_OPTIONS").unwrap_or_else(|| vec!["-Ofc=max".into()]))
}

/// NVRTC options of every compilation. No contraction of products and sums into fused
/// multiply-adds: the fast level contracts fewer than full optimisation, so that the two builds of
/// a kernel gave different bits; the sources write each fused multiply-add (`fma`) instead, so that
/// every build computes the same numbers (bench/RESULTS.md, 2026-11-30).
pub(crate) const BASE_OPTIONS: [&str; 3] = ["-default-device", "--std=c++17", "--fmad=false"];

/// NVRTC options added to every compilation (`RKEOPS_GPU_NVRTC_OPTIONS`, space-separated: for
/// experiments such as `--fmad=false`; part of the caches' keys).
pub(crate) fn added_options() -> &'static [String] {
    static OPTIONS: OnceLock<Vec<String>> = OnceLock::new();
    OPTIONS.get_or_init(|| options_from_env("RKEOPS_GPU_NVRTC_OPTIONS").unwrap_or_default())
}

fn options_from_env(name: &str) -> Option<Vec<String>> {
    let value = std::env::var(name).ok().filter(|o| !o.trim().is_empty())?;
    Some(value.split_whitespace().map(String::from).collect())
}

/// NVRTC's version (major, minor), asked once (`Device` reports it and keys its caches with it).
pub fn nvrtc_version() -> Result<(i32, i32)> {
    static VERSION: OnceLock<(i32, i32)> = OnceLock::new();
    if let Some(version) = VERSION.get() {
        return Ok(*version);
    }
    nvrtc_present()?;
    let (mut major, mut minor) = (0, 0);
    guarded("querying the NVRTC version", || {
        // SAFETY: plain out-parameters; the library was found above.
        unsafe { nvrtc_sys::nvrtcVersion(&mut major, &mut minor) }
            .result()
            .map_err(|e| driver_error("querying the NVRTC version", e))
    })?;
    Ok(*VERSION.get_or_init(|| (major, minor)))
}

/// Whether NVRTC is version `major.minor` or later (false where it cannot say).
fn nvrtc_at_least(major: i32, minor: i32) -> bool {
    nvrtc_version().is_ok_and(|version| version >= (major, minor))
}

/// NVRTC: CUDA source to a CUBIN for `arch` (`sm_90`), optimised, with the compiler log in the error.
pub fn compile_cubin(source: &str, arch: &str) -> Result<Vec<u8>> {
    compile_cubin_with(source, arch, Build::Optimised.options())
}

/// `source`'s binary for `arch`: from `cache` under `key` if there, else compiled in `build` (and
/// stored there when optimised: only optimised builds are kept on disk).
pub fn load_or_compile(source: &str, arch: &str, build: Build, cache: Option<&DiskCache>, key: &str) -> Result<Vec<u8>> {
    match cache.and_then(|c| c.load(key)) {
        Some(bytes) => Ok(bytes),
        None => compile_and_store(source, arch, build, cache, key),
    }
}

/// `source` compiled for `arch` in `build`, and stored under `key` in `cache` when optimised.
pub fn compile_and_store(source: &str, arch: &str, build: Build, cache: Option<&DiskCache>, key: &str) -> Result<Vec<u8>> {
    let source = match build {
        Build::Optimised => std::borrow::Cow::Borrowed(source),
        // NVRTC's own cache (12.9+) leaves some options out of its key: a fast build's source is
        // marked so that the optimised build of the same kernel cannot be served the fast binary.
        Build::Fast => std::borrow::Cow::Owned(format!("{source}\n// fast build\n")),
    };
    let bytes = compile_cubin_with(&source, arch, build.options())?;
    if let (Some(c), Build::Optimised) = (cache, build) {
        // A cache that cannot be written only costs a compilation next time.
        let _ = c.store(key, &bytes);
    }
    Ok(bytes)
}

/// `compile_cubin` with the NVRTC options of `extra` after the engine's (`examples/compile_probe`).
pub fn compile_cubin_with<S: AsRef<str>>(source: &str, arch: &str, extra: &[S]) -> Result<Vec<u8>> {
    nvrtc_present()?;
    guarded("NVRTC compilation", || {
        let src = CString::new(source).map_err(|_| Error::Gpu("the kernel source contains a NUL byte".into()))?;
        let program = nvrtc_result::create_program(&src, Some(c"rkeops.cu")).map_err(|e| driver_error("NVRTC", e))?;
        let mut options = vec![format!("--gpu-architecture={arch}")];
        options.extend(BASE_OPTIONS.iter().map(|o| o.to_string()));
        options.extend(extra.iter().map(|o| o.as_ref().to_string()).chain(added_options().iter().cloned()));
        let out = (|| unsafe {
            // SAFETY: `program` is a valid NVRTC program until destroyed below.
            if let Err(e) = nvrtc_result::compile_program(program, &options) {
                let log = nvrtc_result::get_program_log(program)
                    .map(|l| CStr::from_ptr(l.as_ptr()).to_string_lossy().into_owned())
                    .unwrap_or_default();
                return Err(Error::Gpu(format!("NVRTC could not compile the kernel ({e:?}):\n{log}")));
            }
            let mut size = 0usize;
            nvrtc_sys::nvrtcGetCUBINSize(program, &mut size).result().map_err(|e| driver_error("NVRTC", e))?;
            if size == 0 {
                return Err(Error::Gpu(format!("NVRTC produced no binary for {arch}")));
            }
            let mut buf = vec![0u8; size];
            nvrtc_sys::nvrtcGetCUBIN(program, buf.as_mut_ptr().cast())
                .result()
                .map_err(|e| driver_error("NVRTC", e))?;
            Ok(buf)
        })();
        // SAFETY: destroyed once, after its last use.
        let _ = unsafe { nvrtc_result::destroy_program(program) };
        out
    })
}

type Job = Box<dyn FnOnce() + Send>;

/// The background thread's queue, and the process that started the thread: a child forked from
/// that process (R's `parallel::mclapply`) has a copy of the queue but not the thread.
struct Queue {
    process: u32,
    sender: Mutex<Sender<Job>>,
}

static QUEUE: OnceLock<Queue> = OnceLock::new();

/// Kernels whose optimised build is queued or compiling.
static PENDING: AtomicUsize = AtomicUsize::new(0);

/// The queue, if this process's own thread takes it.
fn own_queue() -> Option<&'static Queue> {
    QUEUE.get().filter(|q| q.process == std::process::id())
}

/// Runs `job` on the background thread (started on first use), after the jobs queued before it.
/// A job that panics is dropped; the thread goes on with the next. In a forked child the job is
/// dropped (its kernels keep their fast builds).
pub fn in_background(job: impl FnOnce() + Send + 'static) {
    let queue = QUEUE.get_or_init(|| {
        let (sender, receiver) = channel::<Job>();
        std::thread::spawn(move || {
            for job in receiver {
                let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(job));
                PENDING.fetch_sub(1, Ordering::SeqCst);
            }
        });
        Queue { process: std::process::id(), sender: Mutex::new(sender) }
    });
    if own_queue().is_none() {
        return;
    }
    PENDING.fetch_add(1, Ordering::SeqCst);
    let sent = queue.sender.lock().map(|q| q.send(Box::new(job)).is_ok()).unwrap_or(false);
    if !sent {
        PENDING.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Waits until every optimised build queued so far has replaced its fast one, or `limit` has
/// passed; returns whether none is left (tests; R calls it as it exits, so that the builds reach
/// the disk cache). A forked child has none of its own.
pub fn wait_for_background(limit: std::time::Duration) -> bool {
    wait_until(limit, || false)
}

/// Waits until `done()`, no build is left, or `limit` has passed; returns whether no build is left
/// or `done()`.
pub fn wait_until(limit: std::time::Duration, done: impl Fn() -> bool) -> bool {
    if own_queue().is_none() {
        return true;
    }
    let clock = std::time::Instant::now();
    while PENDING.load(Ordering::SeqCst) > 0 && !done() {
        if clock.elapsed() > limit {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    true
}

/// How many fast builds an optimised one has replaced in this process.
pub fn optimised_swaps() -> usize {
    SWAPS.load(Ordering::SeqCst)
}

static SWAPS: AtomicUsize = AtomicUsize::new(0);

/// Counts a replacement (`optimised_swaps`).
pub(crate) fn swapped() {
    SWAPS.fetch_add(1, Ordering::SeqCst);
}

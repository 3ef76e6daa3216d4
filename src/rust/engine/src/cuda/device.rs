//! GPU discovery, one context per device, and the kernels compiled for it: NVRTC to a CUBIN for the
//! device's architecture, kept on disk between sessions and loaded once per process. Everything
//! about a device (context, stream, loaded kernels, the memory reused between calls) is looked up
//! once and kept with it.

use std::cell::Cell;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use cudarc::driver::{sys, CudaContext, CudaFunction, CudaStream};
use cudarc::nvrtc::Ptx;

use super::builds::{self, compile_and_store, compile_cubin, load_or_compile, nvrtc_present, Build};
use super::guard::{driver_error, guarded};
use super::codegen::{self, Kernel, KernelOptions, Variant};
use super::workspace::Workspace;
use crate::cache::{self, DiskCache};
use crate::error::{Error, Result};
use crate::formula::Formula;

pub struct Device {
    pub ordinal: usize,
    pub name: String,
    /// Compute capability (major, minor).
    pub arch: (i32, i32),
    pub multiprocessors: usize,
    /// The most shared memory a block may have (bytes, once allowed).
    pub shared_per_block: usize,
    pub ctx: Arc<CudaContext>,
    pub stream: Arc<CudaStream>,
    nvrtc_version: (i32, i32),
    /// Loaded kernels (the reduction and its merge) by cache key: a repeated call costs a launch,
    /// not a load.
    functions: Mutex<HashMap<String, Slot>>,
    /// The kernels of the formulas run here, by formula and kernel options, so that a repeated call
    /// neither generates nor hashes its source again.
    compiled: Mutex<CompiledByFormula>,
    /// The engine's own small kernels (`utility`), by name.
    utilities: Mutex<HashMap<&'static str, CudaFunction>>,
    /// The buffers reused from call to call; held for the whole of a call, which also keeps two
    /// threads from interleaving their work on this device.
    pub workspace: Mutex<Option<Workspace>>,
}

/// The loaded functions of a kernel's module: the reduction, its merge, and the preparation run
/// before the reduction (`Kernel::prepare`).
#[derive(Clone)]
pub struct Functions {
    pub reduce: CudaFunction,
    pub merge: CudaFunction,
    pub prepare: Option<CudaFunction>,
    /// Output rows per thread of the reduction as compiled (a fast build's may be 1: see
    /// `codegen::generate_one_row`); its launches cover `tile * rows` rows a block.
    pub rows: usize,
    /// Whether these are the fast build's (`builds::Build::Fast`).
    pub fast: bool,
}

/// A kernel's loaded functions, shared by the formulas that generate it; a fast build is replaced
/// here by the optimised one (`builds`).
pub type Slot = Arc<Mutex<Functions>>;

/// A formula's kernels, compiled and loaded on one device, with their checked resources.
pub struct Compiled {
    pub kernel: Kernel,
    slot: Slot,
}

impl Compiled {
    /// The kernel's functions now: the fast build until the optimised one replaces it.
    pub fn functions(&self) -> Functions {
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Whether the kernel still runs its fast build.
    pub fn is_fast_build(&self) -> bool {
        self.slot.lock().unwrap_or_else(|p| p.into_inner()).fast
    }
}

/// The engine's own kernels: the indices of a selection (1-based ints) written as numbers into a
/// matrix kept on the device (`n` of them), for a loop that uses them as values (`crate::program`);
/// `n` values copied, and sums of matrices into others (`super::elementwise`: a program's gradient).
const UTILITIES: &str = r#"
#define RKEOPS_EACH int k = blockIdx.x * blockDim.x + threadIdx.x; if (k < n)
extern "C" __global__ void rkeops_indices_as_f32(int n, const int* indices, float* out) {
  RKEOPS_EACH out[k] = (float)indices[k];
}
extern "C" __global__ void rkeops_indices_as_f64(int n, const int* indices, double* out) {
  RKEOPS_EACH out[k] = (double)indices[k];
}
extern "C" __global__ void rkeops_copy_f32(int n, const float* x, float* y) { RKEOPS_EACH y[k] = x[k]; }
extern "C" __global__ void rkeops_copy_f64(int n, const double* x, double* y) { RKEOPS_EACH y[k] = x[k]; }
// Block row d of the grid: destination d of the table, 4 + RKEOPS_SOURCES numbers each: its
// address, its length, whether it is set (else added to), how many sources, their addresses.
#define RKEOPS_SOURCES 8
#define RKEOPS_SUMS(T) \
  const long long* t = table + (4 + RKEOPS_SOURCES) * blockIdx.y; \
  int n = (int)t[1]; \
  RKEOPS_EACH { \
    T* y = (T*)t[0]; \
    T acc = t[2] ? (T)0 : y[k]; \
    for (int m = 0; m < (int)t[3]; m++) acc += ((const T*)t[4 + m])[k]; \
    y[k] = acc; \
  }
extern "C" __global__ void rkeops_sums_f32(int destinations, const long long* table) { RKEOPS_SUMS(float) }
extern "C" __global__ void rkeops_sums_f64(int destinations, const long long* table) { RKEOPS_SUMS(double) }
"#;

/// A device's kernels by formula (`Formula::identity`) and kernel options.
type CompiledByFormula = HashMap<(Arc<str>, KernelOptions), Arc<Compiled>>;

/// Most formulas whose kernels a device keeps at hand (a loop that writes its numbers into the
/// formula makes a new one each time); beyond, the map starts again.
const MAX_COMPILED: usize = 4096;

/// Whether the libraries are there, checked without touching the driver (the bindings panic
/// when a library is missing). Asked once per process: a failed search of the loader's paths takes
/// about a millisecond, which every call with the backend "auto" paid on a machine without a GPU.
fn libraries_present() -> Result<()> {
    static PRESENT: OnceLock<std::result::Result<(), String>> = OnceLock::new();
    let present = PRESENT.get_or_init(|| {
        // SAFETY: this only tries to dlopen the candidate library names.
        if !unsafe { sys::is_culib_present() } {
            return Err("no NVIDIA driver found (libcuda.so.1 could not be loaded)".into());
        }
        match nvrtc_present() {
            Err(Error::Gpu(why)) => Err(why),
            other => other.map_err(|e| e.to_string()),
        }
    });
    present.clone().map_err(Error::Gpu)
}

/// The device `ordinal`, initialised once per process.
pub fn device(ordinal: usize) -> Result<Arc<Device>> {
    static DEVICES: OnceLock<Mutex<HashMap<usize, Arc<Device>>>> = OnceLock::new();
    let devices = DEVICES.get_or_init(Default::default);
    if let Some(d) = devices.lock().ok().and_then(|m| m.get(&ordinal).cloned()) {
        d.ctx.bind_to_thread().map_err(|e| driver_error("binding the CUDA context", e))?;
        return Ok(d);
    }
    libraries_present()?;
    let d = Arc::new(guarded("CUDA initialisation", || Device::open(ordinal))?);
    if let Ok(mut m) = devices.lock() {
        m.insert(ordinal, d.clone());
    }
    Ok(d)
}

/// How many CUDA devices the driver reports, or why none can be used.
pub fn count() -> Result<usize> {
    libraries_present()?;
    guarded("counting CUDA devices", || {
        CudaContext::device_count().map(|c| c.max(0) as usize).map_err(|e| driver_error("counting CUDA devices", e))
    })
}

/// A description of the device if it can be used, or why it cannot.
pub fn availability(ordinal: usize) -> Result<String> {
    let d = device(ordinal)?;
    Ok(format!(
        "GPU {}: {} (compute capability {}.{}, {} multiprocessors, NVRTC {}.{})",
        d.ordinal, d.name, d.arch.0, d.arch.1, d.multiprocessors, d.nvrtc_version.0, d.nvrtc_version.1
    ))
}

/// What a bug report needs of a device (`rkeops_sitrep()`).
pub struct Details {
    pub name: String,
    /// Compute capability (major, minor).
    pub arch: (i32, i32),
    pub multiprocessors: usize,
    /// Bytes of device memory: all of it, and free now (other processes' use included).
    pub memory_total: usize,
    pub memory_free: usize,
    /// The NVRTC the engine compiles kernels with (major, minor).
    pub nvrtc_version: (i32, i32),
}

/// The details of device `ordinal`, opening it (and NVRTC) as a computation would.
pub fn details(ordinal: usize) -> Result<Details> {
    let d = device(ordinal)?;
    let (memory_free, memory_total) = d.ctx.mem_get_info().map_err(|e| driver_error("querying the memory", e))?;
    Ok(Details {
        name: d.name.clone(),
        arch: d.arch,
        multiprocessors: d.multiprocessors,
        memory_total,
        memory_free,
        nvrtc_version: d.nvrtc_version,
    })
}

impl Device {
    fn open(ordinal: usize) -> Result<Device> {
        let count = CudaContext::device_count().map_err(|e| driver_error("counting CUDA devices", e))?;
        if count <= 0 {
            return Err(Error::Gpu("the NVIDIA driver reports no CUDA device".into()));
        }
        if ordinal >= count as usize {
            return Err(Error::Gpu(format!(
                "there is no device {ordinal}: this machine has {count} CUDA device{} (0 to {})",
                if count == 1 { "" } else { "s" },
                count - 1
            )));
        }
        let ctx = CudaContext::new(ordinal)
            .map_err(|e| driver_error(&format!("creating a context on device {ordinal}"), e))?;
        let arch = ctx.compute_capability().map_err(|e| driver_error("querying the compute capability", e))?;
        let multiprocessors = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| driver_error("querying the device", e))? as usize;
        let shared_per_block = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
            .map_err(|e| driver_error("querying the device", e))? as usize;
        let name = ctx.name().unwrap_or_else(|_| "unknown device".into());
        let (major, minor) = builds::nvrtc_version()?;
        let stream = ctx.default_stream();
        Ok(Device {
            ordinal,
            name,
            arch,
            multiprocessors,
            shared_per_block,
            ctx,
            stream,
            nvrtc_version: (major, minor),
            functions: Mutex::new(HashMap::new()),
            compiled: Mutex::new(HashMap::new()),
            utilities: Mutex::new(HashMap::new()),
            workspace: Mutex::new(None),
        })
    }

    /// The kernels of `formula` with these options (dense or block-sparse: `options.variant`;
    /// `options.selection`: see `codegen::Selection`), compiled (or loaded from `cache_dir`) on
    /// first use, a fast build first where `fast_first` (`builds`).
    pub fn kernels(
        &self,
        formula: &Formula,
        options: KernelOptions,
        cache_dir: Option<&std::path::Path>,
        fast_first: bool,
    ) -> Result<Arc<Compiled>> {
        let key = (formula.identity.clone(), options);
        if let Some(c) = self.compiled.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(c);
        }
        let mut kernel = codegen::generate_variant(formula, &options);
        if options.variant == Variant::DotTiles && kernel.static_shared + kernel.dynamic_shared > self.shared_per_block
        {
            // (GPUs of compute capability 8.6 and 8.9 give a block at most 99 KB: rows of 128
            // dimensions and a wide tile of other inputs may not fit)
            kernel =
                codegen::generate_variant(formula, &KernelOptions { variant: Variant::StreamedDotTiles, ..options });
        }
        let cache = cache_dir.map(DiskCache::open).transpose().map_err(Error::Cache)?;
        // (a fast build compiles the kernel written for one row per thread, where there is one)
        let one_row = fast_first.then(|| codegen::generate_one_row(formula, &options)).flatten();
        let slot = self.functions(&kernel, one_row.as_ref(), cache.as_ref(), fast_first)?;
        let compiled = Arc::new(Compiled { kernel, slot });
        check_resources(self, &compiled.functions().reduce, &compiled.kernel)?;
        if let Ok(mut m) = self.compiled.lock() {
            if m.len() >= MAX_COMPILED {
                // (formulas that differ by their numbers only share their loaded functions)
                m.clear();
            }
            m.insert(key, compiled.clone());
        }
        Ok(compiled)
    }

    /// The kernel `name` of `UTILITIES` (the engine's own, the same for every formula), compiled and
    /// loaded on first use.
    pub fn utility(&self, name: &'static str) -> Result<CudaFunction> {
        if let Some(f) = self.utilities.lock().ok().and_then(|m| m.get(name).cloned()) {
            return Ok(f);
        }
        let cubin = compile_cubin(UTILITIES, &self.arch_name())?;
        let f = guarded("loading the engine's utility kernels", || {
            let module = self
                .ctx
                .load_module(Ptx::from_binary(cubin))
                .map_err(|e| driver_error(&format!("loading a kernel on device {}", self.ordinal), e))?;
            module.load_function(name).map_err(|e| driver_error("finding the kernel", e))
        })?;
        if let Ok(mut m) = self.utilities.lock() {
            m.insert(name, f.clone());
        }
        Ok(f)
    }

    /// How many kernels (a reduction and its merge: one) the calling thread has loaded on any
    /// device: a count that other threads' calls cannot change, for tests that check which calls
    /// reuse a kernel.
    pub fn loaded_by_this_thread() -> usize {
        LOADED_BY_THIS_THREAD.with(Cell::get)
    }

    /// Waits for everything queued on the device's stream (the steps of a loop, `crate::iterate`).
    pub fn synchronize(&self) -> Result<()> {
        guarded("waiting for the GPU", || {
            self.stream.synchronize().map_err(|e| {
                Error::Gpu(format!("running the kernels on device {} ({}): {e:?}", self.ordinal, self.name))
            })
        })
    }

    /// Gives back the memory kept between calls (the next call allocates it again).
    pub fn release_memory(&self) {
        if let Ok(mut w) = self.workspace.lock() {
            if let Some(w) = w.as_mut() {
                w.release();
            }
        }
    }

    /// The compiled kernels: from memory, else from the disk cache, else compiled now (the
    /// reduction's program and the merge's on two threads) in `Build::first(fast_first)`, a fast
    /// build from `one_row`'s program where given (`codegen::generate_one_row`); a fast build is
    /// replaced in its slot by the optimised one, compiled in the background (`builds`).
    pub fn functions(
        &self,
        kernel: &Kernel,
        one_row: Option<&Kernel>,
        cache: Option<&DiskCache>,
        fast_first: bool,
    ) -> Result<Slot> {
        let (key, merge_key) = (self.cache_key(&kernel.source), self.cache_key(&kernel.merge_source));
        if let Some(f) = self.functions.lock().ok().and_then(|m| m.get(&key).cloned()) {
            return Ok(f);
        }
        let cached = cache.and_then(|c| c.load(&key));
        let build = if cached.is_some() { Build::Optimised } else { Build::first(fast_first) };
        let arch = self.arch_name();
        let built = match (build, one_row) {
            (Build::Fast, Some(one_row)) => one_row,
            _ => kernel,
        };
        let (reduce_cubin, merge_cubin) = std::thread::scope(|s| {
            let merge = s.spawn(|| load_or_compile(&kernel.merge_source, &arch, build, cache, &merge_key));
            let reduce = cached.map_or_else(|| compile_and_store(&built.source, &arch, build, cache, &key), Ok);
            let merge =
                merge.join().unwrap_or_else(|_| Err(Error::Gpu("the merge kernel's compilation failed".into())));
            (reduce, merge)
        });
        let slot = Arc::new(Mutex::new(self.load(built, reduce_cubin?, merge_cubin?, build)?));
        if let Ok(mut m) = self.functions.lock() {
            m.insert(key.clone(), slot.clone());
        }
        LOADED_BY_THIS_THREAD.with(|n| n.set(n.get() + 1));
        if build == Build::Fast {
            self.optimise_in_background(kernel.clone(), (key, merge_key), cache.map(|c| c.dir().to_path_buf()), &slot);
        }
        Ok(slot)
    }

    fn arch_name(&self) -> String {
        format!("sm_{}{}", self.arch.0, self.arch.1)
    }

    /// The key of a kernel's binary in the caches: its source, this device's architecture, the
    /// engine's and NVRTC's versions and options.
    fn cache_key(&self, source: &str) -> String {
        let versions = format!(
            "engine {} nvrtc {}.{}{}",
            env!("CARGO_PKG_VERSION"),
            self.nvrtc_version.0,
            self.nvrtc_version.1,
            builds::BASE_OPTIONS.iter().copied().chain(builds::added_options().iter().map(String::as_str)).map(|o| format!(" {o}")).collect::<String>()
        );
        cache::key(&[source.as_bytes(), self.arch_name().as_bytes(), versions.as_bytes()])
    }

    /// The functions of `kernel` from its binaries, loaded on this device.
    fn load(&self, kernel: &Kernel, reduce_cubin: Vec<u8>, merge_cubin: Vec<u8>, build: Build) -> Result<Functions> {
        guarded("loading the compiled kernel", || {
            let load = |cubin| {
                self.ctx
                    .load_module(Ptx::from_binary(cubin))
                    .map_err(|e| driver_error(&format!("loading the kernel on device {}", self.ordinal), e))
            };
            let (module, merge_module) = (load(reduce_cubin)?, load(merge_cubin)?);
            let find = |name| module.load_function(name).map_err(|e| driver_error("finding the kernel", e));
            let reduce = find(kernel.name)?;
            if kernel.dynamic_shared > 0 {
                // (above 48 KB, a kernel gets dynamic shared memory only once allowed to)
                let attribute = sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES;
                reduce
                    .set_attribute(attribute, kernel.dynamic_shared as i32)
                    .map_err(|e| driver_error("allowing the kernel its shared memory", e))?;
            }
            let prepare = kernel.prepare.map(|p| find(p.name)).transpose()?;
            let merge =
                merge_module.load_function(kernel.merge_name).map_err(|e| driver_error("finding the kernel", e))?;
            Ok(Functions { reduce, merge, prepare, rows: kernel.rows, fast: build == Build::Fast })
        })
    }

    /// Queues the optimised build of `kernel` (its binaries stored under `keys` in the disk cache
    /// at `cache_dir`), which replaces the fast one in `slot` once loaded. Where it cannot be
    /// compiled, loaded or run with the kernel's tile, the fast build stays.
    fn optimise_in_background(&self, kernel: Kernel, keys: (String, String), cache_dir: Option<PathBuf>, slot: &Slot) {
        let (ordinal, slot) = (self.ordinal, slot.clone());
        builds::in_background(move || {
            let Ok(device) = device(ordinal) else { return };
            let cache = cache_dir.and_then(|dir| DiskCache::open(dir).ok());
            let arch = device.arch_name();
            // (a merge kernel already on disk is read, not compiled again)
            let cubin = |source: &str, key: &str| load_or_compile(source, &arch, Build::Optimised, cache.as_ref(), key);
            let (Ok(reduce), Ok(merge)) = (cubin(&kernel.source, &keys.0), cubin(&kernel.merge_source, &keys.1)) else {
                return;
            };
            if let Ok(f) = device.load(&kernel, reduce, merge, Build::Optimised) {
                if check_resources(&device, &f.reduce, &kernel).is_ok() {
                    *slot.lock().unwrap_or_else(|p| p.into_inner()) = f;
                    builds::swapped();
                }
            }
        });
    }
}

thread_local! {
    static LOADED_BY_THIS_THREAD: Cell<usize> = const { Cell::new(0) };
}

/// Checks, before anything is copied, what would make the launch fail with an obscure driver error:
/// registers per thread that leave room for fewer threads per block than the kernel's tile, and
/// local memory per thread (the values of wide intermediate results) beyond the 512 KB a thread may
/// have or beyond the device's memory, reserved for all the threads it keeps resident.
fn check_resources(device: &Device, function: &cudarc::driver::CudaFunction, kernel: &codegen::Kernel) -> Result<()> {
    let on_device = format!("device {} ({})", device.ordinal, device.name);
    let attribute_error = |e| Error::Gpu(format!("reading the kernel's attributes on {on_device}: {e:?}"));
    let advice = "Use fewer or smaller intermediate values, or compute on the CPU (rkeops_use_cpu())";
    let max_threads = function.max_threads_per_block().map_err(attribute_error)?;
    if (max_threads.max(0) as usize) < kernel.tile {
        let registers = function.num_regs().map_or("too many".to_string(), |r| r.to_string());
        return Err(Error::Gpu(format!(
            "the kernel of this formula uses {registers} registers per thread: {on_device} can run at most \
             {max_threads} such threads per block, fewer than the {} it needs. {advice}",
            kernel.tile
        )));
    }
    // Every NVIDIA GPU since Volta keeps up to 2048 threads (1536 on some) resident per multiprocessor.
    const RESIDENT_PER_SM: usize = 2048;
    const MAX_LOCAL: usize = 512 << 10;
    let local = function.local_size_bytes().map_err(attribute_error)?.max(0) as usize;
    let reserved = local * RESIDENT_PER_SM * device.multiprocessors;
    let total = device.ctx.mem_get_info().map_or(usize::MAX, |(_, total)| total);
    if local > MAX_LOCAL || reserved > total {
        return Err(Error::Gpu(format!(
            "the kernel of this formula keeps {:.0} KB per thread in local memory (its intermediate values): \
             {on_device} would have to reserve {:.1} GB for its threads, and has {:.1} GB (a thread may have \
             at most 512 KB). {advice}",
            local as f64 / 1024.0,
            reserved as f64 / 1e9,
            total as f64 / 1e9
        )));
    }
    Ok(())
}

//! The thin layer between R and the engine: converts R objects, calls the engine, and reports
//! failures as a `list(error = message, kind, arg)` that the R side turns into a classed R error
//! (see error.rs). No panic and no R longjmp crosses the engine.

mod batch;
mod clustering;
mod error;
mod gradient;
mod knn;
mod optimise;
mod plan;
mod program;
mod progress;
mod results;
mod seeding;
mod shards;
mod sitrep;

use std::collections::HashMap;
use std::sync::{Arc, Mutex, OnceLock};

use engine::api::KeptMatrix;
use engine::cuda::resident::DeviceMatrix;
use engine::{Backend, BlockRanges, Input, Operator, Precision, Ranges, RunOptions, SumScheme};
use extendr_api::prelude::*;

pub(crate) use error::{guarded, Fallible, OrInput, RError};

/// Parsed operators by (formula, args), so that calling the same operator again, or rebuilding the
/// same formula in a loop, does not parse again.
fn operator(formula: &str, args: &[String]) -> engine::Result<Arc<Operator>> {
    type Parsed = HashMap<(String, Vec<String>), Arc<Operator>>;
    static CACHE: OnceLock<Mutex<Parsed>> = OnceLock::new();
    const CAPACITY: usize = 4096;
    let cache = CACHE.get_or_init(Default::default);
    let key = (formula.to_string(), args.to_vec());
    if let Some(op) = cache.lock().ok().and_then(|c| c.get(&key).cloned()) {
        return Ok(op);
    }
    let op = Arc::new(Operator::new(formula, args)?);
    if let Ok(mut c) = cache.lock() {
        if c.len() >= CAPACITY {
            c.clear();
        }
        c.insert(key, op.clone());
    }
    Ok(op)
}

extern "C" {
    /// In src/entrypoint.c.
    fn rkeops_interrupt_pending() -> std::os::raw::c_int;
}

/// Whether the user pressed Ctrl-C; called by the engine on this thread, R's, while it computes.
fn interrupt_pending() -> bool {
    // SAFETY: called on R's main thread, from within a .Call; R's jump is caught on the C side.
    unsafe { rkeops_interrupt_pending() != 0 }
}

fn strings(robj: &Robj, what: &str) -> Fallible<Vec<String>> {
    robj.as_string_vector().or_input(what, format!("'{what}' must be a character vector"))
}

/// Parses and checks a formula; returns the variables it takes, in input order, its reduction and
/// the dimension of its gradient input,
/// or `list(gradient = TRUE)` for KeOps' gradient forms (`Grad(reduction, v, e)`, `GradFromPos`),
/// whose plan `keops_gradient()` gives (gradient.rs).
#[extendr]
fn keops_parse(formula: &str, args: Robj) -> Robj {
    guarded(|| {
        if engine::formula::gradient::is_form(formula) {
            return Ok(List::from_names_and_values(["gradient"], [Robj::from(true)])?.into());
        }
        let args = strings(&args, "args")?;
        let op = operator(formula, &args)?;
        let vars = &op.formula.variables;
        let red = &op.formula.reduction;
        let names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
        let categories: Vec<String> = vars.iter().map(|v| v.category.keyword().to_string()).collect();
        let dims: Vec<i32> = vars.iter().map(|v| v.dim as i32).collect();
        Ok(List::from_names_and_values(
            ["names", "categories", "dims", "reduction", "axis", "k", "dim", "grad_dim"],
            [
                Robj::from(names),
                Robj::from(categories),
                Robj::from(dims),
                Robj::from(format!("{:?}", red.kind)),
                Robj::from(red.axis as i32),
                Robj::from(red.k as i32),
                Robj::from(op.formula.output_dim() as i32),
                // (the dimension of its gradient input: K values per component for KMin)
                Robj::from(red.kind.gradient_input_dim(red.k, op.formula.output_dim()) as i32),
            ],
        )?
        .into())
    })
}

/// Evaluates a formula on a list of numeric inputs (double vectors or matrices; the R side has
/// checked their types). Returns `list(values, indices, backend, timings)`, the results as R arrays
/// (`Output::shape`), or `list(error)`. `members` (integers, or NULL): the output rows are a batch of
/// that many members of equal size, whose results are returned as `n x ... x B` arrays, `members[m]`
/// subtracted from member `m`'s indices (see `results::r_array`).
#[extendr]
fn keops_run(formula: &str, args: Robj, inputs: Robj, options: Robj, sum_scheme: &str, ranges: Robj, members: Robj) -> Robj {
    guarded(|| {
        let members = if members.is_null() {
            None
        } else {
            Some(members.as_integer_slice().or_input("members", "'members' must be integers")?)
        };
        let args = strings(&args, "args")?;
        let op = operator(formula, &args)?;
        let list = inputs.as_list().or_input("input", "the inputs must be a list")?;
        let names = op.formula.variables.iter().map(|v| v.name.as_str());
        let robjs: Vec<Robj> = list.values().collect();
        let resident = robjs
            .iter()
            .zip(names.clone().chain(std::iter::repeat("?")))
            .map(|(x, name)| match x.is_external_pointer() {
                true => device_matrix(x, name).map(Some),
                false => Ok(None),
            })
            .collect::<Fallible<Vec<_>>>()?;
        let inputs = robjs
            .iter()
            .zip(&resident)
            .zip(names.chain(std::iter::repeat("?")))
            .map(|((x, resident), name)| match resident {
                Some(m) => Ok(Input::device(m.as_ref())),
                None => numeric_input(x, name),
            })
            .collect::<Fallible<Vec<_>>>()?;
        let mut options = run_options(&options, sum_scheme)?;
        options.ranges = block_sparse(&ranges)?;
        // (an interrupt too: R makes it an interrupt condition)
        let out = op.run(&inputs, &options)?;
        let timings = timings(&out.timings)?;
        let shape = out.shape(op.formula.reduction.kind.is_k_selection());
        let values = out.values.map_or(Ok(Robj::from(())), |v| results::r_array(&v, &shape, members, |x, _| x))?;
        let indices =
            out.indices.map_or(Ok(Robj::from(())), |v| results::r_array(&v, &shape, members, results::index_minus))?;
        Ok(List::from_names_and_values(
            ["values", "indices", "backend", "timings"],
            [values, indices, Robj::from(out.backend), timings],
        )?
        .into())
    })
}

/// A numeric vector (`n x 1`) or matrix of R as an engine input; `name` is the variable's, for errors.
fn numeric_input<'a>(x: &'a Robj, name: &str) -> Fallible<Input<'a>> {
    let data = x.as_real_slice().or_input(name, format!("input '{name}' must be a numeric vector or matrix"))?;
    let dim = x.get_attrib("dim").and_then(|d| d.as_integer_vector());
    let (nrow, ncol) = match dim.as_deref() {
        // (an n x d x 1 array is a batch of one member: that matrix)
        Some(&[nrow, ncol]) | Some(&[nrow, ncol, 1]) => (nrow.max(0) as usize, ncol.max(0) as usize),
        Some(_) => {
            return Err(RError::input(name, format!("input '{name}' must be a vector or a matrix, not an array")))
        }
        None => (data.len(), 1),
    };
    Ok(Input::host(data, nrow, ncol))
}

/// The seconds of each phase as a named double vector.
pub(crate) fn timings(phases: &[(&'static str, f64)]) -> Fallible {
    let names: Vec<&str> = phases.iter().map(|(n, _)| *n).collect();
    let mut values = Robj::from(phases.iter().map(|(_, t)| *t).collect::<Vec<f64>>());
    values.set_attrib("names", names)?;
    Ok(values)
}

fn sum_scheme(name: &str) -> Fallible<SumScheme> {
    SumScheme::from_name(name).or_input(
        "sum_scheme",
        format!("sum_scheme must be one of \"auto\", \"direct_sum\", \"block_sum\", \"kahan_scheme\", not \"{name}\""),
    )
}

/// The options of a run from R's settings, `list(precision, threads, backend, device, cache_dir,
/// progress)` (`progress`: seconds before a progress bar is made, negative for none)
/// (R's `engine_options()`; no ranges); `device`: the GPUs, as integers (several share each
/// reduction, the first alone runs loops and holds device matrices).
pub(crate) fn run_options(settings: &Robj, sum_scheme_name: &str) -> Fallible<RunOptions> {
    let settings = settings.as_list().or_input("options", "the engine's options must be a list")?;
    let field = |name: &str| element(&settings, name).filter(|x| !x.is_null());
    let text = |name: &str| -> Fallible<String> {
        field(name)
            .and_then(|x| x.as_str().map(String::from))
            .or_input(name, format!("option '{name}' must be a string"))
    };
    let (precision_name, backend, cache_dir) = (text("precision")?, text("backend")?, text("cache_dir")?);
    let threads = field("threads")
        .and_then(|x| x.as_integer().or_else(|| x.as_real().map(|t| t as i32)))
        .or_input("threads", "option 'threads' must be a whole number")?;
    let device = field("device").unwrap_or_else(|| Robj::from(()));
    let gpus: Vec<usize> = match device.as_integer_slice() {
        Some(d) if !d.is_empty() && d.iter().all(|&g| g >= 0) => d.iter().map(|&g| g as usize).collect(),
        _ => return Err(RError::input("device", "'device' must be GPU indices, whole numbers from 0")),
    };
    let device = gpus[0];
    // (absent: no bar)
    let progress = field("progress").and_then(|x| x.as_real()).unwrap_or(f64::NAN);
    Ok(RunOptions {
        precision: precision(&precision_name)?,
        sum_scheme: sum_scheme(sum_scheme_name)?,
        threads: threads.max(0) as usize,
        backend: match backend.as_str() {
            "CPU" => Backend::Cpu,
            "GPU" => Backend::Gpu(device),
            "auto" => Backend::Auto,
            _ => {
                return Err(RError::input(
                    "backend",
                    format!("backend must be \"auto\", \"CPU\" or \"GPU\", not \"{backend}\""),
                ))
            }
        },
        device,
        gpus,
        cache_dir: (!cache_dir.is_empty()).then(|| cache_dir.into()),
        gpu_memory: None,
        interrupt: Some(interrupt_pending),
        progress: progress::start(progress),
        ranges: None,
        ranges_in_any_order: false,
        // Read at each call, so that Sys.setenv() in the session takes effect (README, Options).
        tuning: engine::Tuning::from_env(),
    })
}

/// The element `name` of an R list, if it has one. Its names are read in place: iterating the list
/// made an `Robj` of every element (each one registered in extendr's table), 17-43 us of each
/// program call's options and values (this 2-core box).
pub(crate) fn element(list: &List, name: &str) -> Option<Robj> {
    use extendr_ffi::{R_NamesSymbol, Rf_getAttrib, R_CHAR, STRING_ELT, TYPEOF, VECTOR_ELT, XLENGTH};
    // SAFETY: `list` is a valid R list held by the caller; its names are a character vector of
    // its length (or NULL), each a CHARSXP whose R_CHAR is NUL-terminated.
    unsafe {
        let x = list.get();
        let names = Rf_getAttrib(x, R_NamesSymbol);
        if TYPEOF(names) != extendr_ffi::SEXPTYPE::STRSXP {
            return None;
        }
        (0..XLENGTH(names).min(XLENGTH(x)))
            .find(|&i| std::ffi::CStr::from_ptr(R_CHAR(STRING_ELT(names, i))).to_bytes() == name.as_bytes())
            .map(|i| Robj::from_sexp(VECTOR_ELT(x, i)))
    }
}

fn precision(name: &str) -> Fallible<Precision> {
    match name {
        "float16" => Ok(Precision::F16),
        "float32" => Ok(Precision::F32),
        "float64" => Ok(Precision::F64),
        _ => Err(RError::input(
            "precision",
            format!("precision must be \"float16\", \"float32\" or \"float64\", not \"{name}\""),
        )),
    }
}

/// The ranges of a block-sparse reduction from the six integer vectors of R's `ranges_for_engine()`
/// (range matrices as their 0-based starts, then their exclusive ends); `None` for NULL.
fn block_sparse(ranges: &Robj) -> Fallible<Option<Ranges>> {
    if ranges.is_null() {
        return Ok(None);
    }
    let list = ranges.as_list().or_input("ranges", "'ranges' must be a list")?;
    let parts: Vec<(String, Vec<i32>)> = list
        .iter()
        .map(|(name, x)| {
            Ok((
                name.to_string(),
                x.as_integer_vector().or_input("ranges", format!("'ranges${name}' must be integers"))?,
            ))
        })
        .collect::<Fallible<_>>()?;
    let part = |name: &str| -> Fallible<&[i32]> {
        let (_, x) =
            parts.iter().find(|(n, _)| n == name).or_input("ranges", format!("'ranges' has no element '{name}'"))?;
        match x.iter().position(|&v| v < 0) {
            Some(p) => {
                Err(RError::input("ranges", format!("'ranges${name}' holds a value below 1 (at position {})", p + 1)))
            }
            None => Ok(x),
        }
    };
    let pairs = |name: &str| -> Fallible<Vec<std::ops::Range<usize>>> {
        let x = part(name)?;
        let (starts, ends) = x.split_at(x.len() / 2);
        Ok(starts.iter().zip(ends).map(|(&s, &e)| s as usize..e as usize).collect())
    };
    let slices = |name: &str| -> Fallible<Vec<usize>> { Ok(part(name)?.iter().map(|&v| v as usize).collect()) };
    Ok(Some(Ranges {
        i: BlockRanges { blocks: pairs("ranges_i")?, slices: slices("slices_i")?, reduced: pairs("redranges_j")? },
        j: BlockRanges { blocks: pairs("ranges_j")?, slices: slices("slices_j")?, reduced: pairs("redranges_i")? },
    }))
}

/// What an R device matrix holds: the matrix, until `keops_device_free` empties it.
type DeviceSlot = Option<Arc<dyn KeptMatrix>>;

/// The matrix behind an R device matrix (an external pointer made by `keops_device_put`).
fn device_matrix(x: &Robj, name: &str) -> Fallible<Arc<dyn KeptMatrix>> {
    let slot: &ExternalPtr<DeviceSlot> = x.try_into().map_err(|_| {
        RError::input(
            name,
            format!(
                "input '{name}' is an external pointer but not a matrix kept on a GPU (or one saved and loaded again, \
                 which keeps nothing): make it with keops_device()"
            ),
        )
    })?;
    slot.as_ref()
        .clone()
        .or_input(name, format!("input '{name}' was freed by keops_device_free(): make it again with keops_device()"))
}

/// Copies a numeric matrix to GPU `device` in `precision`; returns the external pointer that holds it.
#[extendr]
fn keops_device_put(x: Robj, precision: &str, device: i32) -> Robj {
    guarded(|| {
        let data = x.as_real_slice().or_input("x", "'x' must be a numeric matrix or vector")?;
        let dim = x.get_attrib("dim").and_then(|d| d.as_integer_vector());
        let (nrow, ncol) = match dim.as_deref() {
            Some(&[nrow, ncol]) => (nrow.max(0) as usize, ncol.max(0) as usize),
            Some(_) => return Err(RError::input("x", "'x' must be a vector or a matrix, not an array")),
            None => (data.len(), 1),
        };
        let precision = crate::precision(precision)?;
        let gpu = engine::cuda::device::device(device.max(0) as usize)?;
        let m = DeviceMatrix::new(gpu, data, nrow, ncol, precision)?;
        let slot: DeviceSlot = Some(Arc::new(m));
        Ok(ExternalPtr::new(slot).into())
    })
}

/// The values of a device matrix, back in R: `list(values, nrow, ncol)`.
#[extendr]
fn keops_device_get(x: Robj) -> Robj {
    guarded(|| {
        let m = device_matrix(&x, "x")?;
        let (nrow, ncol) = m.shape();
        let values = m.to_host()?;
        Ok(List::from_names_and_values(
            ["values", "nrow", "ncol", "where"],
            [Robj::from(values), Robj::from(nrow as i32), Robj::from(ncol as i32), Robj::from(m.where_())],
        )?
        .into())
    })
}

/// Frees the device memory of a device matrix now (it is otherwise freed when R collects it).
#[extendr]
fn keops_device_free(mut x: Robj) -> Robj {
    guarded(|| {
        let slot: &mut ExternalPtr<DeviceSlot> = (&mut x)
            .try_into()
            .map_err(|_| RError::input("x", "'x' must be a matrix kept on a GPU (made by keops_device())"))?;
        // Calls in progress hold their own reference; the memory goes when the last one ends.
        *slot.as_mut() = None;
        Ok(Robj::from(true))
    })
}

/// Gives back the GPU memory the engine keeps between calls (its buffers are allocated again
/// by the next call): `list(released = TRUE)`.
#[extendr]
fn gpu_release_memory(device: i32) -> Robj {
    guarded(|| {
        if let Ok(d) = engine::cuda::device::device(device.max(0) as usize) {
            d.release_memory();
        }
        Ok(List::from_names_and_values(["released"], [Robj::from(true)])?.into())
    })
}

/// Compiles the GPU kernels of `formula` for dense calls over each of `reduced_rows` reduced rows,
/// without running them (`rkeops_precompile()`): `list(gpu)`, the GPU's index, or -1 where the
/// options choose the CPU, which compiles nothing.
#[extendr]
fn keops_precompile(formula: &str, args: Robj, reduced_rows: Robj, options: Robj) -> Robj {
    guarded(|| {
        if engine::formula::gradient::is_form(formula) {
            let why = "'formula' must be reductions: compile a gradient's kernels with keops_grad() and one call";
            return Err(RError::input("formula", why));
        }
        let args = strings(&args, "args")?;
        let rows = reduced_rows
            .as_real_slice()
            .filter(|r| !r.is_empty() && r.iter().all(|&n| n.is_finite() && n >= 1.0))
            .or_input("reduced_rows", "'reduced_rows' must be numbers of rows, at least 1")?;
        let gpu = operator(formula, &args)?.precompile(&run_options(&options, "auto")?, rows)?;
        Ok(List::from_names_and_values(["gpu"], [Robj::from(gpu.map_or(-1, |g| g as i32))])?.into())
    })
}

/// Waits (at most 2 minutes) for the optimised kernels still compiling in the background; R calls
/// it as it exits, so that they reach the kernel cache: `list(done)`.
#[extendr]
fn wait_for_kernel_builds() -> Robj {
    guarded(|| {
        let done = engine::cuda::builds::wait_for_background(std::time::Duration::from_secs(120));
        Ok(List::from_names_and_values(["done"], [Robj::from(done)])?.into())
    })
}

/// Whether GPU `device` can be used: `list(available, message)`, the message describing the
/// device or saying why it cannot be used (no driver, no NVRTC, no such device).
#[extendr]
fn gpu_status(device: i32) -> Robj {
    guarded(|| {
        let (available, message) = match engine::cuda::availability(device.max(0) as usize) {
            Ok(description) => (true, description),
            Err(engine::Error::Gpu(why)) => (false, why),
            Err(e) => (false, e.to_string()),
        };
        Ok(List::from_names_and_values(["available", "message"], [Robj::from(available), Robj::from(message)])?.into())
    })
}

/// How many GPUs the driver reports: `list(count, message)`, the message saying why it is 0.
#[extendr]
fn gpu_count() -> Robj {
    guarded(|| {
        let (count, message) = match engine::cuda::device::count() {
            Ok(n) => (n as i32, String::new()),
            Err(e) => (0, e.to_string()),
        };
        Ok(List::from_names_and_values(["count", "message"], [Robj::from(count), Robj::from(message)])?.into())
    })
}

/// A panic on purpose, for the test of what R receives from one (tests/testthat/test-conditions.R):
/// `guarded()` makes it an internal error; no input reaches a panic on purpose otherwise.
#[extendr]
fn panic_for_tests() -> Robj {
    guarded(|| panic!("a panic on purpose (for the tests)"))
}

/// Empties the kernel cache in `dir`; returns the number of files removed.
#[extendr]
fn clean_cache(dir: &str) -> Robj {
    guarded(|| {
        let removed = engine::cache::DiskCache::new(dir)
            .clear()
            .map_err(|e| RError::of_kind("cache", format!("could not empty the cache directory {dir}: {e}")))?;
        Ok(List::from_names_and_values(["removed"], [Robj::from(removed as i32)])?.into())
    })
}

extendr_module! {
    mod rkeops;
    use batch;
    use clustering;
    use gradient;
    use knn;
    use sitrep;
    use optimise;
    use plan;
    use program;
    use seeding;
    use shards;
    fn keops_parse;
    fn keops_run;
    fn gpu_status;
    fn gpu_count;
    fn panic_for_tests;
    fn clean_cache;
    fn keops_device_put;
    fn keops_device_get;
    fn keops_device_free;
    fn gpu_release_memory;
    fn wait_for_kernel_builds;
    fn keops_precompile;
}

/// Registers the package's `.Call` entries with R (src/entrypoint.c calls it when R loads the
/// package): those of `extendr_module!` less extendr's own `get_<module>_metadata` and
/// `make_<module>_wrappers`, which R code never calls and which abort the process when given
/// arguments of the wrong type (they unwrap them in a function that cannot unwind).
///
/// # Safety
/// `info` must be the `DllInfo` that R hands to the package's init function.
#[no_mangle]
pub unsafe extern "C" fn rkeops_register_routines(info: *mut extendr_api::DllInfo) {
    let mut metadata = get_rkeops_metadata();
    let generated = |name: &str| {
        (name.starts_with("get_") && name.ends_with("_metadata")) || (name.starts_with("make_") && name.ends_with("_wrappers"))
    };
    metadata.functions.retain(|f| !generated(f.rust_name));
    extendr_api::register_call_methods(info, metadata);
}

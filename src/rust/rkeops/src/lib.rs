//! The thin layer between R and the engine: converts R objects, calls the engine, and reports
//! failures as a `list(error = message)` that the R side turns into an R error. No panic and no
//! R longjmp crosses the engine.

use std::collections::HashMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Arc, Mutex, OnceLock};

use engine::{Backend, Input, Operator, Precision, RunOptions, SumScheme};
use extendr_api::prelude::*;

/// Parsed operators by (formula, args), so that calling the same operator again, or rebuilding the
/// same formula in a loop, does not parse again.
fn operator(formula: &str, args: &[String]) -> engine::Result<Arc<Operator>> {
    static CACHE: OnceLock<Mutex<HashMap<(String, Vec<String>), Arc<Operator>>>> = OnceLock::new();
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

fn error(message: impl Into<String>) -> Robj {
    List::from_names_and_values(["error"], [Robj::from(message.into())]).map_or(Robj::from(()), Robj::from)
}

/// Runs `f`, turning a panic into an error list: nothing that happens here may crash R.
fn guarded(f: impl FnOnce() -> std::result::Result<Robj, String>) -> Robj {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(robj)) => robj,
        Ok(Err(message)) => error(message),
        Err(panic) => error(format!(
            "internal error in rkeops (please report it): {}",
            engine::error::panic_message(panic.as_ref())
        )),
    }
}

fn strings(robj: &Robj, what: &str) -> std::result::Result<Vec<String>, String> {
    robj.as_string_vector().ok_or_else(|| format!("'{what}' must be a character vector"))
}

/// Parses and checks a formula; returns the variables it takes, in input order, and its reduction.
#[extendr]
fn keops_parse(formula: &str, args: Robj) -> Robj {
    guarded(|| {
        let args = strings(&args, "args")?;
        let op = operator(formula, &args).map_err(|e| e.to_string())?;
        let vars = &op.formula.variables;
        let red = &op.formula.reduction;
        let names: Vec<String> = vars.iter().map(|v| v.name.clone()).collect();
        let categories: Vec<String> = vars.iter().map(|v| v.category.keyword().to_string()).collect();
        let dims: Vec<i32> = vars.iter().map(|v| v.dim as i32).collect();
        List::from_names_and_values(
            ["names", "categories", "dims", "reduction", "axis", "k", "dim"],
            [
                Robj::from(names),
                Robj::from(categories),
                Robj::from(dims),
                Robj::from(format!("{:?}", red.kind)),
                Robj::from(red.axis as i32),
                Robj::from(red.k as i32),
                Robj::from(op.formula.output_dim() as i32),
            ],
        )
        .map(Robj::from)
        .map_err(|e| e.to_string())
    })
}

/// Evaluates a formula on a list of numeric inputs (double vectors or matrices; the R side has
/// checked their types). Returns `list(values, indices, nrow, k, dim)` or `list(error)`.
#[extendr]
#[allow(clippy::too_many_arguments)]
fn keops_run(
    formula: &str,
    args: Robj,
    inputs: Robj,
    precision: &str,
    threads: i32,
    sum_scheme: &str,
    backend: &str,
    device: i32,
    cache_dir: &str,
) -> Robj {
    guarded(|| {
        let args = strings(&args, "args")?;
        let op = operator(formula, &args).map_err(|e| e.to_string())?;
        let list = inputs.as_list().ok_or("the inputs must be a list")?;
        let names = op.formula.variables.iter().map(|v| v.name.as_str());
        let robjs: Vec<Robj> = list.values().collect();
        let inputs = robjs
            .iter()
            .zip(names.chain(std::iter::repeat("?")))
            .map(|(x, name)| {
                let data =
                    x.as_real_slice().ok_or_else(|| format!("input '{name}' must be a numeric vector or matrix"))?;
                let dim = x.get_attrib("dim").and_then(|d| d.as_integer_vector());
                let (nrow, ncol) = match dim.as_deref() {
                    Some(&[nrow, ncol]) => (nrow.max(0) as usize, ncol.max(0) as usize),
                    Some(_) => return Err(format!("input '{name}' must be a vector or a matrix, not an array")),
                    None => (data.len(), 1),
                };
                Ok(Input { data, nrow, ncol })
            })
            .collect::<std::result::Result<Vec<_>, String>>()?;
        let options = RunOptions {
            precision: match precision {
                "float16" => Precision::F16,
                "float32" => Precision::F32,
                "float64" => Precision::F64,
                _ => return Err(format!("precision must be \"float16\", \"float32\" or \"float64\", not \"{precision}\"")),
            },
            sum_scheme: SumScheme::from_name(sum_scheme).ok_or_else(|| {
                format!("sum_scheme must be one of \"auto\", \"direct_sum\", \"block_sum\", \"kahan_scheme\", not \"{sum_scheme}\"")
            })?,
            threads: threads.max(0) as usize,
            backend: match backend {
                "CPU" => Backend::Cpu,
                "GPU" => Backend::Gpu(device.max(0) as usize),
                "auto" => Backend::Auto,
                _ => return Err(format!("backend must be \"auto\", \"CPU\" or \"GPU\", not \"{backend}\"")),
            },
            device: device.max(0) as usize,
            cache_dir: (!cache_dir.is_empty()).then(|| cache_dir.into()),
            gpu_memory: None,
            interrupt: Some(interrupt_pending),
        };
        let out = match op.run(&inputs, &options) {
            // The R side turns this into an interrupt condition.
            Err(engine::Error::Interrupted) => {
                return List::from_names_and_values(
                    ["error", "interrupted"],
                    [Robj::from(engine::Error::Interrupted.to_string()), Robj::from(true)],
                )
                .map(Robj::from)
                .map_err(|e| e.to_string())
            }
            other => other.map_err(|e| e.to_string())?,
        };
        let timing_names: Vec<&str> = out.timings.iter().map(|(n, _)| *n).collect();
        let timing_values: Vec<f64> = out.timings.iter().map(|(_, t)| *t).collect();
        let mut timings = Robj::from(timing_values);
        timings.set_attrib("names", timing_names).map_err(|e| e.to_string())?;
        let values = out.values.map_or(Robj::from(()), Robj::from);
        let indices = out.indices.map_or(Robj::from(()), Robj::from);
        List::from_names_and_values(
            ["values", "indices", "nrow", "k", "dim", "backend", "timings"],
            [
                values,
                indices,
                Robj::from(out.nrow as i32),
                Robj::from(out.k as i32),
                Robj::from(out.dim as i32),
                Robj::from(out.backend),
                timings,
            ],
        )
        .map(Robj::from)
        .map_err(|e| e.to_string())
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
        List::from_names_and_values(["available", "message"], [Robj::from(available), Robj::from(message)])
            .map(Robj::from)
            .map_err(|e| e.to_string())
    })
}

/// Empties the kernel cache in `dir`; returns the number of files removed.
#[extendr]
fn clean_cache(dir: &str) -> Robj {
    guarded(|| {
        engine::cache::DiskCache::new(dir)
            .clear()
            .map_err(|e| format!("could not empty the cache directory {dir}: {e}"))
            .and_then(|n| List::from_names_and_values(["removed"], [Robj::from(n as i32)]).map_err(|e| e.to_string()))
            .map(Robj::from)
    })
}

extendr_module! {
    mod rkeops;
    fn keops_parse;
    fn keops_run;
    fn gpu_status;
    fn clean_cache;
}

//! What `rkeops_sitrep()` reports of the engine: its version and each GPU's details.

use extendr_api::prelude::*;

use crate::{guarded, Fallible};

/// The engine crate's version.
#[extendr]
fn engine_version() -> String {
    engine::VERSION.to_string()
}

/// The engine's tuning as the environment sets it now (`engine::tuning::Tuning::from_env`):
/// `list(tensor_cores, cpu_isa, gpu_scheme_1d, replay)`, so that `rkeops_sitrep()` says what the
/// engine will do rather than reading the variables again itself.
#[extendr]
fn engine_tuning() -> Robj {
    guarded(|| -> Fallible {
        let t = engine::tuning::Tuning::from_env();
        let values = [
            Robj::from(t.tensor_cores),
            Robj::from(format!("{:?}", t.cpu_isa).to_lowercase()),
            Robj::from(t.force_1d),
            Robj::from(t.replay),
        ];
        Ok(List::from_names_and_values(["tensor_cores", "cpu_isa", "gpu_scheme_1d", "replay"], values)?.into())
    })
}

/// How many GPU kernels (and CUDA graphs, each once) this process has launched, as a double:
/// benchmarks count a call's launches as the difference of two readings.
#[extendr]
fn gpu_launches() -> f64 {
    engine::cuda::primitives::launches() as f64
}

/// Device `device`'s details as `list(available, message)` when it cannot be used, else
/// `list(available = TRUE, name, compute_capability, multiprocessors, memory_total, memory_free,
/// nvrtc)` (memory in bytes, as doubles; versions as "major.minor").
#[extendr]
fn gpu_details(device: i32) -> Robj {
    guarded(|| -> Fallible {
        let d = match engine::cuda::device::details(device.max(0) as usize) {
            Ok(d) => d,
            Err(e) => {
                let why = match e {
                    engine::Error::Gpu(why) => why,
                    e => e.to_string(),
                };
                return Ok(List::from_names_and_values(
                    ["available", "message"],
                    [Robj::from(false), Robj::from(why)],
                )?
                .into());
            }
        };
        let values = [
            Robj::from(true),
            Robj::from(d.name),
            Robj::from(format!("{}.{}", d.arch.0, d.arch.1)),
            Robj::from(d.multiprocessors as i32),
            Robj::from(d.memory_total as f64),
            Robj::from(d.memory_free as f64),
            Robj::from(format!("{}.{}", d.nvrtc_version.0, d.nvrtc_version.1)),
        ];
        let names =
            ["available", "name", "compute_capability", "multiprocessors", "memory_total", "memory_free", "nvrtc"];
        Ok(List::from_names_and_values(names, values)?.into())
    })
}

extendr_module! {
    mod sitrep;
    fn engine_version;
    fn engine_tuning;
    fn gpu_launches;
    fn gpu_details;
}

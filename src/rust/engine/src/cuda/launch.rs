//! Runs a reduction on the GPU: uploads the inputs (column-major, as R stores them: each
//! component is a contiguous array, so loads are coalesced), launches the kernel with the 1D scheme
//! or, when the output rows alone cannot fill the GPU, the 2D scheme (chunks of the reduced range
//! in `gridDim.y`), and merges and finalises the states on the host.

use std::time::Instant;

use cudarc::driver::{DeviceRepr, LaunchConfig, PushKernelArg, ValidAsZeroBits};

use super::codegen::{self, Dtype};
use super::device::{guarded, Device};
use crate::cache::DiskCache;
use crate::cpu::reducers::Accumulator;
use crate::cpu::{Inputs, RowMajor};
use crate::error::{Error, Result};
use crate::formula::Formula;
use crate::real::Real;
use crate::reduction::SumScheme;

/// Resident blocks per multiprocessor we aim for before splitting the reduced range.
const BLOCKS_PER_SM: usize = 8;
/// A chunk of the 2D scheme covers at least this many tiles, so its state write is amortised.
const MIN_TILES_PER_CHUNK: usize = 4;

/// How many chunks of the reduced range to run side by side.
pub fn chunks_for(n_out: usize, n_red: usize, tile: usize, rows: usize, multiprocessors: usize) -> usize {
    let blocks = n_out.div_ceil(tile * rows);
    let wanted = (BLOCKS_PER_SM * multiprocessors).div_ceil(blocks.max(1));
    let most = n_red.div_ceil(tile * MIN_TILES_PER_CHUNK);
    wanted.min(most).max(1)
}

pub fn evaluate<T: Real + DeviceRepr + ValidAsZeroBits>(
    device: &Device,
    formula: &Formula,
    inputs: &Inputs<T>,
    scheme: SumScheme,
    cache: Option<&DiskCache>,
    timings: &mut Vec<(&'static str, f64)>,
) -> Result<RowMajor> {
    let red = &formula.reduction;
    let dtype = if std::mem::size_of::<T>() == 4 { Dtype::F32 } else { Dtype::F64 };
    let kernel = codegen::generate(formula, dtype, scheme);
    let (n_out, n_red) = if red.axis == 0 { (inputs.n_i, inputs.n_j) } else { (inputs.n_j, inputs.n_i) };
    if n_out > i32::MAX as usize || n_red > i32::MAX as usize {
        return Err(Error::Gpu(format!("at most {} rows per variable are supported on the GPU", i32::MAX)));
    }
    // RKEOPS_GPU_SCHEME=1D forces the 1D scheme (for benchmarks that compare the two).
    let force_1d = std::env::var("RKEOPS_GPU_SCHEME").is_ok_and(|s| s.eq_ignore_ascii_case("1d"));
    let chunks = if force_1d { 1 } else { chunks_for(n_out, n_red, kernel.tile, kernel.rows, device.multiprocessors) };
    let chunk = n_red.div_ceil(chunks).div_ceil(kernel.tile) * kernel.tile;
    let chunks = n_red.div_ceil(chunk);
    let clock = Instant::now();
    let function = device.function(&kernel, cache)?;
    timings.push(("compile or load", clock.elapsed().as_secs_f64()));

    let states_len = chunks * n_out * kernel.state_len;
    let input_bytes: usize = inputs.data.iter().map(|d| d.len() * std::mem::size_of::<T>()).sum();
    let needed = input_bytes + states_len * 8;
    let states = guarded("the GPU computation", || {
        let stream = &device.stream;
        let gpu_error = |what: &str, e: cudarc::driver::DriverError| {
            Error::Gpu(format!("{what} on device {} ({}): {e:?}", device.ordinal, device.name))
        };
        if let Ok((free, _)) = device.ctx.mem_get_info() {
            if needed > free {
                return Err(Error::Gpu(format!(
                    "the inputs and results need {:.1} GB on device {} ({}), which has {:.1} GB free; \
                     use the CPU (rkeops_use_cpu()) for this size",
                    needed as f64 / 1e9,
                    device.ordinal,
                    device.name,
                    free as f64 / 1e9
                )));
            }
        }
        let clock = Instant::now();
        let buffers = inputs
            .data
            .iter()
            .map(|d| stream.clone_htod(*d))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| gpu_error("copying the inputs", e))?;
        let mut states = stream.alloc_zeros::<f64>(states_len).map_err(|e| gpu_error("allocating the results", e))?;
        stream.synchronize().map_err(|e| gpu_error("copying the inputs", e))?;
        timings.push(("upload", clock.elapsed().as_secs_f64()));
        let clock = Instant::now();
        let (n_out_arg, n_red_arg, chunk_arg) = (n_out as i32, n_red as i32, chunk as i32);
        let config = LaunchConfig {
            grid_dim: (n_out.div_ceil(kernel.tile * kernel.rows) as u32, chunks as u32, 1),
            block_dim: (kernel.tile as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(&function);
        launch.arg(&n_out_arg).arg(&n_red_arg).arg(&chunk_arg);
        for b in &buffers {
            launch.arg(b);
        }
        launch.arg(&mut states);
        // SAFETY: the arguments match the generated signature: three ints, one pointer per
        // input (sized as the kernel indexes them), and the states buffer of
        // chunks * n_out * state_len doubles.
        unsafe { launch.launch(config) }.map_err(|e| gpu_error("launching the kernel", e))?;
        stream.synchronize().map_err(|e| gpu_error("running the kernel", e))?;
        timings.push(("kernel", clock.elapsed().as_secs_f64()));
        let clock = Instant::now();
        let host = stream.clone_dtoh(&states).map_err(|e| gpu_error("copying the results", e))?;
        timings.push(("download", clock.elapsed().as_secs_f64()));
        Ok(host)
    })?;

    let acc = Accumulator {
        kind: red.kind,
        scheme,
        k: red.k,
        dim: formula.graph.dim(red.f),
        gdim: red.g.map_or(0, |g| formula.graph.dim(g)),
    };
    let clock = Instant::now();
    let rows = finish::<T>(&acc, states, n_out, chunks, kernel.state_len);
    timings.push(("merge and finalise", clock.elapsed().as_secs_f64()));
    Ok(rows)
}

/// Merges the chunks of every row (in order, so ties keep the smallest index) and finalises, on
/// every core: for K-selections over millions of rows this is not negligible.
fn finish<T: Real>(acc: &Accumulator, mut states: Vec<f64>, n_out: usize, chunks: usize, state_len: usize) -> RowMajor {
    let width = acc.width();
    let mut values = vec![0.0; n_out * width];
    let mut indices = vec![0; n_out * width];
    let (first, rest) = states.split_at_mut(n_out * state_len);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows_per_thread = n_out.div_ceil(threads).max(4096);
    let rest = &*rest;
    std::thread::scope(|s| {
        let parts = first
            .chunks_mut(rows_per_thread * state_len)
            .zip(values.chunks_mut(rows_per_thread * width))
            .zip(indices.chunks_mut(rows_per_thread * width))
            .enumerate();
        for (part, ((st, vals), idx)) in parts {
            s.spawn(move || {
                for (k, state) in st.chunks_mut(state_len).enumerate() {
                    let r = part * rows_per_thread + k;
                    for c in 1..chunks {
                        let at = ((c - 1) * n_out + r) * state_len;
                        acc.merge(state, &rest[at..at + state_len]);
                    }
                    acc.finalize::<T>(state, &mut vals[k * width..(k + 1) * width], &mut idx[k * width..(k + 1) * width]);
                }
            });
        }
    });
    RowMajor { values, indices, width }
}

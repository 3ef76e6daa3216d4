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
use crate::cpu::{row_of, Inputs, RowMajor};
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::memory;
use crate::operator::RunOptions;
use crate::real::Real;

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

/// Runs the reduction with inputs stored as `S` on the device and arithmetic in `T` (f32 for
/// float16 storage, otherwise the same type).
#[allow(clippy::too_many_arguments)]
pub fn evaluate<S: DeviceRepr + ValidAsZeroBits + Copy, T: Real>(
    device: &Device,
    formula: &Formula,
    inputs: &Inputs<S>,
    dtype: Dtype,
    options: &RunOptions,
    cache: Option<&DiskCache>,
    timings: &mut Vec<(&'static str, f64)>,
) -> Result<RowMajor> {
    let (scheme, memory_limit) = (options.sum_scheme, options.gpu_memory);
    let red = &formula.reduction;
    let kernel = codegen::generate(formula, dtype, scheme);
    let (n_out, n_red) = if red.axis == 0 { (inputs.n_i, inputs.n_j) } else { (inputs.n_j, inputs.n_i) };
    if n_out > i32::MAX as usize || n_red > i32::MAX as usize {
        return Err(Error::Gpu(format!("at most {} rows per variable are supported on the GPU", i32::MAX)));
    }
    let clock = Instant::now();
    let function = device.function(&kernel, cache)?;
    timings.push(("compile or load", clock.elapsed().as_secs_f64()));
    check_resources(device, &function, &kernel)?;
    let acc = Accumulator::new(formula, scheme);
    let blocks = Blocks::new(device, formula, &kernel, n_out, n_red, std::mem::size_of::<S>(), memory_limit)?;
    let mut states = memory::zeros(n_out.saturating_mul(kernel.state_len), "the reduction states of the rows")?;
    let mut times = [0.0; 4];
    // Inputs larger than the device are processed in blocks of rows; the states of the blocks of
    // the reduced range are merged in order, as the 2D scheme's chunks are.
    for i0 in (0..n_out).step_by(blocks.rows_out) {
        let i1 = (i0 + blocks.rows_out).min(n_out);
        let rows = &mut states[i0 * kernel.state_len..i1 * kernel.state_len];
        for j0 in (0..n_red).step_by(blocks.rows_red) {
            let j1 = (j0 + blocks.rows_red).min(n_red);
            let block = Block { out: i0..i1, red: j0..j1, n_out, n_red };
            let part = run_block(device, formula, &function, &kernel, &block, inputs, &mut times)?;
            let clock = Instant::now();
            merge_block(&acc, rows, part, j0 == 0, i1 - i0, kernel.state_len);
            times[3] += clock.elapsed().as_secs_f64();
        }
    }
    timings.extend([("upload", times[0]), ("kernel", times[1]), ("download", times[2]), ("merge", times[3])]);
    let clock = Instant::now();
    let rows = finish::<T>(&acc, states, n_out, kernel.state_len)?;
    timings.push(("finalise", clock.elapsed().as_secs_f64()));
    Ok(rows)
}

/// How many output and reduced rows go to the GPU at once: everything when it fits in memory.
struct Blocks {
    rows_out: usize,
    rows_red: usize,
}

impl Blocks {
    #[allow(clippy::too_many_arguments)]
    fn new(
        device: &Device,
        formula: &Formula,
        kernel: &codegen::Kernel,
        n_out: usize,
        n_red: usize,
        elem: usize,
        limit: Option<usize>,
    ) -> Result<Blocks> {
        let free = device.ctx.mem_get_info().map(|(free, _)| free).unwrap_or(usize::MAX);
        let budget = limit.unwrap_or(usize::MAX).min(free / 10 * 8);
        let outer_category = if formula.reduction.axis == 0 { Category::I } else { Category::J };
        let width = |inner: bool| -> usize {
            let vars = formula.variables.iter().filter(|v| v.category != Category::Param);
            vars.filter(|v| (v.category == outer_category) != inner).map(|v| v.dim).sum()
        };
        let (width_out, width_red) = (width(false) * elem, width(true) * elem);
        let need = |rows_out: usize, rows_red: usize| {
            let chunks = chunks_for(rows_out, rows_red, kernel.tile, kernel.rows, device.multiprocessors);
            rows_out * width_out + rows_red * width_red + chunks * rows_out * kernel.state_len * 8
        };
        if need(n_out, n_red) <= budget {
            return Ok(Blocks { rows_out: n_out.max(1), rows_red: n_red.max(1) });
        }
        let granule = kernel.tile * kernel.rows;
        // A quarter of the budget for the reduced rows, the rest for the output rows and their states.
        let rows_red = ((budget / 4 / width_red.max(1)).min(n_red) / kernel.tile * kernel.tile).max(kernel.tile);
        let mut rows_out = (budget / 2 / (width_out + kernel.state_len * 8)).min(n_out) / granule * granule;
        while rows_out > 0 && need(rows_out, rows_red) > budget {
            rows_out = rows_out / 2 / granule * granule;
        }
        if rows_out == 0 || need(rows_out, rows_red) > budget {
            return Err(Error::Gpu(format!(
                "device {} ({}) has too little free memory ({:.2} GB) for even one block of rows; use the CPU",
                device.ordinal,
                device.name,
                budget as f64 / 1e9
            )));
        }
        Ok(Blocks { rows_out, rows_red })
    }
}

/// The rows of one launch, within the whole ranges.
struct Block {
    out: std::ops::Range<usize>,
    red: std::ops::Range<usize>,
    n_out: usize,
    n_red: usize,
}

/// Rows `rows` of a column-major matrix with `n` rows: borrowed when they are all of them.
fn rows_of<'a, T: Copy>(data: &'a [T], n: usize, rows: &std::ops::Range<usize>) -> std::borrow::Cow<'a, [T]> {
    if rows.start == 0 && rows.end == n {
        return std::borrow::Cow::Borrowed(data);
    }
    let dim = data.len() / n.max(1);
    std::borrow::Cow::Owned((0..dim).flat_map(|c| data[c * n + rows.start..c * n + rows.end].iter().copied()).collect())
}

/// Runs the kernel on one block; returns its states, `chunks` consecutive sets of one per row.
fn run_block<S: DeviceRepr + ValidAsZeroBits + Copy>(
    device: &Device,
    formula: &Formula,
    function: &cudarc::driver::CudaFunction,
    kernel: &codegen::Kernel,
    block: &Block,
    inputs: &Inputs<S>,
    times: &mut [f64; 4],
) -> Result<(Vec<f64>, usize)> {
    let (n_out, n_red) = (block.out.len(), block.red.len());
    // RKEOPS_GPU_SCHEME=1D forces the 1D scheme (for benchmarks that compare the two).
    let force_1d = std::env::var("RKEOPS_GPU_SCHEME").is_ok_and(|s| s.eq_ignore_ascii_case("1d"));
    let chunks = if force_1d { 1 } else { chunks_for(n_out, n_red, kernel.tile, kernel.rows, device.multiprocessors) };
    let chunk = n_red.div_ceil(chunks).div_ceil(kernel.tile) * kernel.tile;
    let chunks = n_red.div_ceil(chunk);
    let outer_category = if formula.reduction.axis == 0 { Category::I } else { Category::J };
    let slices: Vec<_> = formula
        .variables
        .iter()
        .zip(&inputs.data)
        .map(|(v, data)| match v.category {
            Category::Param => std::borrow::Cow::Borrowed(*data),
            c if c == outer_category => rows_of(data, block.n_out, &block.out),
            _ => rows_of(data, block.n_red, &block.red),
        })
        .collect();
    guarded("the GPU computation", || {
        let stream = &device.stream;
        let gpu_error = |what: &str, e: cudarc::driver::DriverError| {
            Error::Gpu(format!("{what} on device {} ({}): {e:?}", device.ordinal, device.name))
        };
        let clock = Instant::now();
        let buffers = slices
            .iter()
            .map(|d| stream.clone_htod(d.as_ref()))
            .collect::<std::result::Result<Vec<_>, _>>()
            .map_err(|e| gpu_error("copying the inputs", e))?;
        let mut states = stream
            .alloc_zeros::<f64>(chunks * n_out * kernel.state_len)
            .map_err(|e| gpu_error("allocating the results", e))?;
        stream.synchronize().map_err(|e| gpu_error("copying the inputs", e))?;
        times[0] += clock.elapsed().as_secs_f64();
        let clock = Instant::now();
        let (n_out_arg, n_red_arg, chunk_arg, offset_arg) =
            (n_out as i32, n_red as i32, chunk as i32, block.red.start as i32);
        let config = LaunchConfig {
            grid_dim: (n_out.div_ceil(kernel.tile * kernel.rows) as u32, chunks as u32, 1),
            block_dim: (kernel.tile as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let mut launch = stream.launch_builder(function);
        launch.arg(&n_out_arg).arg(&n_red_arg).arg(&chunk_arg).arg(&offset_arg);
        for b in &buffers {
            launch.arg(b);
        }
        launch.arg(&mut states);
        // SAFETY: the arguments match the generated signature: four ints, one pointer per input
        // (the block's rows, as the kernel indexes them), and the states buffer of
        // chunks * n_out * state_len doubles.
        unsafe { launch.launch(config) }.map_err(|e| gpu_error("launching the kernel", e))?;
        stream.synchronize().map_err(|e| gpu_error("running the kernel", e))?;
        times[1] += clock.elapsed().as_secs_f64();
        let clock = Instant::now();
        let host = stream.clone_dtoh(&states).map_err(|e| gpu_error("copying the results", e))?;
        times[2] += clock.elapsed().as_secs_f64();
        Ok((host, chunks))
    })
}

/// Merges the chunks of one block into the states of its rows (the first block of the reduced
/// range initialises them), in order, so ties keep the smallest index.
fn merge_block(
    acc: &Accumulator,
    rows: &mut [f64],
    (part, chunks): (Vec<f64>, usize),
    first: bool,
    n: usize,
    state_len: usize,
) {
    let threads = std::thread::available_parallelism().map_or(1, |t| t.get());
    let per_thread = n.div_ceil(threads).max(4096);
    let part = &part;
    std::thread::scope(|s| {
        for (t, st) in rows.chunks_mut(per_thread * state_len).enumerate() {
            s.spawn(move || {
                for (k, state) in st.chunks_mut(state_len).enumerate() {
                    let r = t * per_thread + k;
                    for c in 0..chunks {
                        let other = &part[(c * n + r) * state_len..(c * n + r + 1) * state_len];
                        if first && c == 0 {
                            state.copy_from_slice(other);
                        } else {
                            acc.merge(state, other);
                        }
                    }
                }
            });
        }
    });
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

/// Finalises every row, on every core.
fn finish<T: Real>(acc: &Accumulator, states: Vec<f64>, n_out: usize, state_len: usize) -> Result<RowMajor> {
    let width = acc.width();
    let mut out = RowMajor::new(acc.kind, n_out, width)?;
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get());
    let rows_per_thread = n_out.div_ceil(threads).max(4096);
    std::thread::scope(|s| {
        let mut values = out.values.chunks_mut(rows_per_thread * width);
        let mut indices = out.indices.chunks_mut(rows_per_thread * width);
        for st in states.chunks(rows_per_thread * state_len) {
            let (vals, idx) = (values.next().unwrap_or_default(), indices.next().unwrap_or_default());
            s.spawn(move || {
                for (k, state) in st.chunks(state_len).enumerate() {
                    acc.finalize::<T>(state, row_of(vals, k, width), row_of(idx, k, width));
                }
            });
        }
    });
    Ok(out)
}

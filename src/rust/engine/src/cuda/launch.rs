//! Runs a reduction on the GPU. The inputs are converted from R's doubles straight into
//! page-locked staging memory, in the layout of one device buffer (column-major, as R stores them:
//! each component is a contiguous array, so loads are coalesced), and copied in one asynchronous
//! transfer; the kernel runs with the 1D scheme or, when the output rows alone cannot fill the GPU,
//! the 2D scheme (chunks of the reduced range in `gridDim.y`, merged in order by a second kernel);
//! the results are finalised on the device and only they come back, in the working type, with one
//! synchronisation per call. Both buffers are the device's own, reused from call to call.

use std::ops::Range;
use std::time::Instant;

use cudarc::driver::{result, LaunchConfig};

use super::codegen;
use super::device::{guarded, Compiled, Device};
use super::primitives::{launch, view, view_mut};
use crate::real::Stored;
use super::recorded::Recorded;
use super::resident::DeviceMatrix;
use super::workspace::{Layout, Workspace};
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::memory;
use crate::api::{Input, RunOptions};
use crate::parallel;
use crate::ranges::BlockRanges;
use crate::real::Real;

/// Resident blocks per multiprocessor we aim for before splitting the reduced range.
const BLOCKS_PER_SM: usize = 8;
/// A chunk of the 2D scheme covers at least this many tiles (its states are merged on the device,
/// cheaply: small problems gain more from using more multiprocessors).
const MIN_TILES_PER_CHUNK: usize = 1;
/// The pairs of the first step of a long reduction (output rows times reduced rows); the next
/// steps are sized from its kernel time to take about STEP_SECONDS (see `evaluate`).
const FIRST_STEP_PAIRS: usize = 1 << 33;
const STEP_SECONDS: f64 = 0.25;
/// Threads per block of the kernel that prepares tensor-core dots.
const PREPARE_THREADS: usize = 128;
/// Threads per block of the merge kernel.
const MERGE_THREADS: usize = 256;

/// How many chunks of the reduced range to run side by side.
pub fn chunks_for(n_out: usize, n_red: usize, tile: usize, rows: usize, multiprocessors: usize) -> usize {
    let blocks = n_out.div_ceil(tile * rows);
    let wanted = (BLOCKS_PER_SM * multiprocessors).div_ceil(blocks.max(1));
    let most = n_red.div_ceil(tile * MIN_TILES_PER_CHUNK);
    wanted.min(most).max(1)
}

/// Results in R's order: `rows x width` column-major values and 1-based indices (each present
/// only when the reduction returns it), for the output rows of the call or of its `Part`. A part
/// of the reduced range gives `states` instead: the rows' reduction states one after the other,
/// to be merged with the other parts' (`Accumulator::merge`) and finalised.
pub struct Columns {
    pub values: Option<Vec<f64>>,
    pub indices: Option<Vec<i32>>,
    pub states: Option<Vec<f64>>,
}

/// The part of a reduction one device computes when several share it (`super::several`): these
/// output rows against this part of the reduced range. A block-sparse reduction's rows are split
/// at the boundaries of its blocks of rows (`BlockRanges::work`) and its reduced range is not.
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub out: Range<usize>,
    pub red: Range<usize>,
}

/// The work of a block-sparse reduction as the ranged kernels read it (`codegen::Variant`):
/// four ints per block of the grid (its output rows, its first and last range) and the ranges.
struct RangedWork {
    work: Vec<i32>,
    red: Vec<i32>,
}

impl RangedWork {
    /// The work on the output rows `rows` (a range of whole pieces of `BlockRanges::work`).
    fn new(ranges: &BlockRanges, n_out: usize, rows_per_block: usize, rows: &Range<usize>) -> RangedWork {
        let (mut work, mut red) = (Vec::new(), Vec::new());
        for item in ranges.work(n_out, rows_per_block).into_iter().filter(|w| rows.contains(&w.rows.start)) {
            let first = red.len() / 2;
            red.extend(item.reduced.iter().flat_map(|r| [r.start as i32, r.end as i32]));
            work.extend([item.rows.start as i32, item.rows.end as i32, first as i32, (red.len() / 2) as i32]);
        }
        RangedWork { work, red }
    }

    fn blocks(&self) -> usize {
        self.work.len() / 4
    }

    fn bytes(&self) -> usize {
        (self.work.len() + self.red.len()) * 4
    }
}

/// Where the values of a call go when they stay on the device (`crate::iterate`): into `matrix`
/// (`n_out x width`, stored as `T`), the launches queued; with `record`, the launches are also
/// recorded there, on a buffer of their own, to be issued again.
pub struct Kept<'a> {
    pub matrix: &'a DeviceMatrix,
    pub record: Option<&'a mut Option<Recorded>>,
}

/// Runs the reduction with inputs stored as `S` on the device and arithmetic and results in `T`
/// (f32 for float16 storage, otherwise the same type); over the blocks of `ranges` only, when
/// given (`compiled` is then the ranged kernel); only `part` of it, when given. With a `target`,
/// the values are written there and nothing comes back to the host: an iteration in the engine
/// feeds them to the next reduction (`crate::iterate`). `stop` is asked between the steps of a
/// long reduction: when it says so, the call returns `Error::Interrupted`.
#[allow(clippy::too_many_arguments)]
pub fn evaluate<S: Stored, T: Real>(
    device: &Device,
    compiled: &Compiled,
    formula: &Formula,
    inputs: &[Input],
    resident: &[Option<&DeviceMatrix>],
    (n_i, n_j): (usize, usize),
    part: Option<&Part>,
    options: &RunOptions,
    stop: &dyn Fn() -> bool,
    ranges: Option<&BlockRanges>,
    kept: Option<Kept>,
    timings: &mut Vec<(&'static str, f64)>,
) -> Result<Columns> {
    let (target, mut record) = match kept {
        Some(Kept { matrix, record }) => (Some(matrix), record),
        None => (None, None),
    };
    let resident: Vec<Option<&DeviceMatrix>> = (0..inputs.len()).map(|p| resident.get(p).copied().flatten()).collect();
    let kernel = &compiled.kernel;
    let red = &formula.reduction;
    let (n_out, n_red) = if red.axis == 0 { (n_i, n_j) } else { (n_j, n_i) };
    if n_out > i32::MAX as usize || n_red > i32::MAX as usize {
        return Err(Error::Gpu(format!("at most {} rows per variable are supported on the GPU", i32::MAX)));
    }
    let width = kernel.width;
    let part = part.cloned().unwrap_or(Part { out: 0..n_out, red: 0..n_red });
    let states_out = part.red != (0..n_red);
    // The kernels index a resident matrix, and a block-sparse reduction its inputs, whole: their
    // rows cannot be split into blocks.
    let whole = resident.iter().any(Option::is_some) || ranges.is_some() || target.is_some();
    // (ranges: only their rows, at the boundaries of their pieces of work)
    let splittable = resident.iter().all(Option::is_none) && target.is_none();
    let split = states_out || part.out != (0..n_out);
    if part.out.end > n_out || part.red.end > n_red || (split && !splittable) || (states_out && ranges.is_some()) {
        return Err(Error::Invalid(format!(
            "this reduction cannot be split into the part {part:?} (inputs or a result kept on a device, or ranges)"
        )));
    }
    let results = part.out.len().saturating_mul(width);
    if let Some(m) = target {
        let stored = std::mem::size_of::<S>() == std::mem::size_of::<T>();
        if !stored || (m.nrow, m.ncol) != (n_out, width) || red.kind.returns_indices() {
            return Err(Error::Invalid(format!(
                "a result kept on the device must be the values of an {n_out} x {width} reduction in float32 or float64, not {m:?}"
            )));
        }
    }
    let host_results = |wanted: bool| wanted && target.is_none() && !states_out;
    let mut columns = Columns {
        values: host_results(red.kind.returns_values())
            .then(|| memory::zeros(results, "the results"))
            .transpose()?,
        indices: host_results(red.kind.returns_indices())
            .then(|| memory::zeros(results, "the result's indices"))
            .transpose()?,
        states: states_out
            .then(|| memory::zeros(part.out.len().saturating_mul(kernel.state_len), "the reduction states"))
            .transpose()?,
    };
    let mut workspace = device.workspace.lock().map_err(|_| Error::Gpu("the GPU's workspace is unusable".into()))?;
    if workspace.is_none() {
        *workspace = Some(guarded("creating the GPU's workspace", Workspace::new)?);
    }
    let workspace = workspace.as_mut().expect("created above");
    let ranged = ranges.map(|r| RangedWork::new(r, n_out, kernel.tile * kernel.rows, &part.out));
    let mut sizes = Sizes::new::<S, T>(formula, kernel, &resident, workspace.held().0);
    sizes.fixed += ranged.as_ref().map_or(0, RangedWork::bytes);
    // The rows the kernels see: those of the part, or all of them when they index the inputs whole.
    let (span_out, span_red) = match whole {
        true => (0..n_out, 0..n_red),
        false => (part.out.clone(), part.red.clone()),
    };
    let blocks = Blocks::new(device, kernel, &sizes, span_out.len(), span_red.len(), options.gpu_memory)?;
    if (blocks.rows_out, blocks.rows_red) != (span_out.len(), span_red.len()) && whole {
        let what = match ranges {
            Some(_) => "a block-sparse reduction (ranges) in one piece; compute it on the CPU",
            None => "this reduction with inputs kept on it in one piece; pass the matrices themselves (they are then processed in blocks)",
        };
        return Err(Error::Memory(format!("GPU: device {} ({}) has too little free memory for {what}", device.ordinal, device.name)));
    }
    let mut times = Times::default();
    // Inputs larger than the device are processed in blocks of rows; the states of the blocks of
    // the reduced range are merged in order on the device, as the 2D scheme's chunks are. A long
    // reduction is cut the same way into steps of about STEP_SECONDS each, so that an interrupt,
    // asked between steps, stops it within a second (a kernel, once launched, runs to its end).
    let whole_tiles = |rows: usize| (rows / kernel.tile * kernel.tile).max(kernel.tile);
    let long = !whole && blocks.rows_out.saturating_mul(span_red.len()) > FIRST_STEP_PAIRS;
    let mut step_rows = match long {
        true => whole_tiles(FIRST_STEP_PAIRS / blocks.rows_out.max(1)).min(blocks.rows_red),
        false => blocks.rows_red,
    };
    for i0 in span_out.clone().step_by(blocks.rows_out) {
        let out = i0..(i0 + blocks.rows_out).min(span_out.end);
        let mut j0 = span_red.start;
        while j0 < span_red.end {
            let red = j0..(j0 + step_rows).min(span_red.end);
            let end = red.end == span_red.end;
            let step = Step {
                out: out.clone(),
                red: red.clone(),
                n_out,
                n_red,
                first: j0 == span_red.start,
                last: end && !states_out,
                states_out: end && states_out,
                keep: out.start.max(part.out.start)..out.end.min(part.out.end),
                part_start: part.out.start,
                rows_red: blocks.rows_red,
            };
            let data = Data { inputs, resident: &resident, ranged: ranged.as_ref(), target, force_1d: options.tuning.force_1d };
            let record = record.as_deref_mut();
            let before = times.kernel;
            run_step::<S, T>(device, compiled, formula, &data, &step, workspace, &mut columns, &mut times, record)?;
            j0 = red.end;
            if target.is_some() {
                continue; // (queued: the loop that queued it asks for interrupts)
            }
            if stop() {
                return Err(Error::Interrupted);
            }
            let took = times.kernel - before;
            if long && took > 0.0 {
                step_rows = whole_tiles((step_rows as f64 * (STEP_SECONDS / took).min(64.0)) as usize).min(blocks.rows_red);
            }
        }
    }
    timings.extend([
        ("conversion", times.convert),
        ("upload", times.upload),
        ("kernel", times.kernel),
        ("download", times.download),
        ("results", times.results),
    ]);
    Ok(columns)
}

#[derive(Default)]
struct Times {
    convert: f64,
    upload: f64,
    kernel: f64,
    download: f64,
    results: f64,
}

/// Bytes per row of the inputs and per output row of the states and results.
struct Sizes {
    /// Per row of the output index, of the reduced index, and for the parameters and numbers.
    input_out: usize,
    input_red: usize,
    fixed: usize,
    state: usize,
    results: usize,
    /// Device memory already held by this device's workspace (usable again).
    held: usize,
}

impl Sizes {
    /// (Resident inputs need no room.)
    fn new<S, T>(
        formula: &Formula,
        kernel: &codegen::Kernel,
        resident: &[Option<&DeviceMatrix>],
        held: usize,
    ) -> Sizes {
        let outer = outer_category(formula);
        let dims = |keep: &dyn Fn(Category) -> bool| -> usize {
            let uploaded = formula.variables.iter().zip(resident).filter(|(_, r)| r.is_none());
            uploaded.filter(|(v, _)| keep(v.category)).map(|(v, _)| v.dim).sum()
        };
        let (s, t) = (std::mem::size_of::<S>(), std::mem::size_of::<T>());
        let red = &formula.reduction.kind;
        // (the reduced rows of tensor-core dots, split for them: a little more for the padding)
        let prepared = kernel.prepare.map_or(0, |p| p.split_bytes + p.norm_bytes);
        Sizes {
            input_out: dims(&|c| c == outer) * s,
            input_red: dims(&|c| c != outer && c != Category::Param) * s + prepared,
            fixed: dims(&|c| c == Category::Param) * s + kernel.constants.len() * t,
            state: kernel.state_len * 8,
            results: kernel.width
                * (if red.returns_values() { t } else { 0 } + if red.returns_indices() { 4 } else { 0 }),
            held,
        }
    }
}

fn outer_category(formula: &Formula) -> Category {
    if formula.reduction.axis == 0 {
        Category::I
    } else {
        Category::J
    }
}

/// How many output and reduced rows go to the GPU at once: everything when it fits in memory.
struct Blocks {
    rows_out: usize,
    rows_red: usize,
}

impl Blocks {
    fn new(
        device: &Device,
        kernel: &codegen::Kernel,
        sizes: &Sizes,
        n_out: usize,
        n_red: usize,
        limit: Option<usize>,
    ) -> Result<Blocks> {
        let free = device.ctx.mem_get_info().map(|(free, _)| free).unwrap_or(usize::MAX);
        let budget = limit.unwrap_or(usize::MAX).min(free.saturating_add(sizes.held) / 10 * 8);
        let need = |rows_out: usize, rows_red: usize| {
            let chunks = chunks_for(rows_out, rows_red, kernel.tile, kernel.rows, device.multiprocessors);
            // (the running states of a reduction in steps, or of blocks of the reduced range, too)
            let in_steps = rows_red < n_red || rows_out.saturating_mul(n_red) > FIRST_STEP_PAIRS;
            let states = if chunks > 1 || in_steps { chunks + 1 } else { 0 };
            rows_out * (sizes.input_out + sizes.results + states * sizes.state)
                + rows_red * sizes.input_red
                + sizes.fixed
        };
        if need(n_out, n_red) <= budget {
            return Ok(Blocks { rows_out: n_out.max(1), rows_red: n_red.max(1) });
        }
        // Blocks of whole warps of rows (a block of the kernel may be partly empty): rows with
        // large states (K-selections of wide formulas) may leave room for a few hundred only.
        let granule = 32;
        // A quarter of the budget for the reduced rows, the rest for the output rows and their states.
        let rows_red = ((budget / 4 / sizes.input_red.max(1)).min(n_red) / kernel.tile * kernel.tile).max(kernel.tile);
        let per_out = sizes.input_out + sizes.results + 2 * sizes.state;
        let mut rows_out = (budget / 2 / per_out.max(1)).min(n_out) / granule * granule;
        while rows_out > 0 && need(rows_out, rows_red) > budget {
            rows_out = rows_out / 2 / granule * granule;
        }
        if rows_out == 0 || need(rows_out, rows_red) > budget {
            return Err(Error::Memory(format!(
                "GPU: device {} ({}) has too little free memory ({:.2} GB) for even one block of rows; use the CPU",
                device.ordinal,
                device.name,
                budget as f64 / 1e9
            )));
        }
        Ok(Blocks { rows_out, rows_red })
    }
}

/// The inputs of a call: from the host, or kept on the device (`resident[p]`), the work of a
/// block-sparse reduction, and where the values go when they stay on the device.
struct Data<'a> {
    inputs: &'a [Input<'a>],
    resident: &'a [Option<&'a DeviceMatrix>],
    ranged: Option<&'a RangedWork>,
    target: Option<&'a DeviceMatrix>,
    /// The 1D scheme always (`Tuning::force_1d`).
    force_1d: bool,
}

/// One launch: these output rows against these reduced rows (`first` and `last` of the reduced
/// range's blocks for these output rows, the results then finalised; `states_out`: the last
/// block of a part of the reduced range, whose states come back instead; `rows_red` rows in the
/// largest such block). The results of the rows `keep` come back, to rows `keep - part_start`
/// of the call's results.
struct Step {
    out: Range<usize>,
    red: Range<usize>,
    n_out: usize,
    n_red: usize,
    first: bool,
    last: bool,
    states_out: bool,
    keep: Range<usize>,
    part_start: usize,
    rows_red: usize,
}

/// Where each part of a step lives, in bytes from the start of the device buffer; the staging
/// buffer mirrors its first part (inputs, then results).
struct Regions {
    inputs: Vec<usize>,
    constants: usize,
    /// `RangedWork`'s blocks and ranges (empty for a dense reduction).
    work: usize,
    red: usize,
    upload_end: usize,
    values: usize,
    indices: usize,
    download: Range<usize>,
    /// The running states of the output rows, after the results (they come back for a part of
    /// the reduced range), then the states of the chunks.
    running: Range<usize>,
    states: usize,
    /// The reduced rows split for the tensor-core dots, and their norms (`Kernel::prepare`).
    split: usize,
    split_norms: usize,
    end: usize,
}

impl Regions {
    /// The layout of a step's buffer. It depends only on the output rows and the largest block of
    /// the reduced range, so the running states of a block of output rows stay where they are from
    /// one block of the reduced range to the next.
    fn new<S, T>(
        formula: &Formula,
        kernel: &codegen::Kernel,
        data: &Data,
        step: &Step,
        chunks: usize,
        one_pass: bool,
    ) -> Regions {
        let outer = outer_category(formula);
        let (s, t) = (std::mem::size_of::<S>(), std::mem::size_of::<T>());
        let rows_out = step.out.len();
        let kind = formula.reduction.kind;
        let mut layout = Layout::default();
        let inputs = formula
            .variables
            .iter()
            .zip(data.resident)
            .map(|(v, resident)| {
                let rows = match v.category {
                    _ if resident.is_some() => 0,
                    Category::Param => 1,
                    c if c == outer => rows_out,
                    _ => step.rows_red,
                };
                layout.push(rows * v.dim * s)
            })
            .collect();
        let constants = layout.push(kernel.constants.len() * t);
        let work = layout.push(data.ranged.map_or(0, |r| r.work.len() * 4));
        let red = layout.push(data.ranged.map_or(0, |r| r.red.len() * 4));
        let upload_end = layout.bytes;
        let results = rows_out * kernel.width;
        let values = layout.push(if kind.returns_values() { results * t } else { 0 });
        let indices = layout.push(if kind.returns_indices() { results * 4 } else { 0 });
        let download = values..layout.bytes;
        let running = layout.push(if one_pass { 0 } else { rows_out * kernel.state_len * 8 });
        let running = running..layout.bytes;
        let states = layout.push(if one_pass && chunks == 1 { 0 } else { chunks * rows_out * kernel.state_len * 8 });
        let prepared_rows = kernel.prepare.map_or(0, |p| p.rows(step.rows_red));
        let split = layout.push(prepared_rows * kernel.prepare.map_or(0, |p| p.split_bytes));
        let split_norms = layout.push(prepared_rows * kernel.prepare.map_or(0, |p| p.norm_bytes));
        Regions {
            inputs,
            constants,
            work,
            red,
            upload_end,
            values,
            indices,
            download,
            running,
            states,
            split,
            split_norms,
            end: layout.bytes,
        }
    }
}

/// Uploads one step's inputs, runs its kernels and, after the last block of the reduced range,
/// brings its results back into `columns`. With `record` (a queued step), its buffer is its own,
/// and its launches are recorded there.
#[allow(clippy::too_many_arguments)]
fn run_step<S: Stored, T: Real>(
    device: &Device,
    compiled: &Compiled,
    formula: &Formula,
    data: &Data,
    step: &Step,
    workspace: &mut Workspace,
    columns: &mut Columns,
    times: &mut Times,
    record: Option<&mut Option<Recorded>>,
) -> Result<()> {
    let kernel = &compiled.kernel;
    let (rows_out, rows_red) = (step.out.len(), step.red.len());
    // Tuning::force_1d (RKEOPS_GPU_SCHEME=1D: benchmarks that compare the two schemes).
    let chunks_of = |n_red: usize| match data.force_1d {
        true => 1,
        false => chunks_for(rows_out, n_red, kernel.tile, kernel.rows, device.multiprocessors),
    };
    // A block-sparse reduction is one pass of the 1D scheme (the ranges say what each block reduces).
    let chunk = match data.ranged {
        Some(_) => rows_red.max(1),
        None => rows_red.div_ceil(chunks_of(rows_red)).div_ceil(kernel.tile) * kernel.tile,
    };
    let chunks = rows_red.div_ceil(chunk);
    let one_pass = step.first && step.last;
    let finalize_here = one_pass && chunks == 1;
    let planned = if data.ranged.is_some() { 1 } else { chunks_of(step.rows_red).max(chunks) };
    let regions = Regions::new::<S, T>(formula, kernel, data, step, planned, one_pass);
    let on_device = format!("device {} ({})", device.ordinal, device.name);
    let gpu_error = |what: &str, e: result::DriverError| Error::Gpu(format!("{what} on {on_device}: {e:?}"));
    // What comes back: the results, or the running states at the end of a part of the reduced range.
    let fetch = match step.states_out {
        true => regions.running.clone(),
        false => regions.download.clone(),
    };
    let mut recorded = record.is_some().then(|| Recorded::new(device, regions.end)).transpose()?;
    let device_grows = recorded.is_none() && regions.end > workspace.held().0;
    if device_grows || fetch.end > workspace.held().1 {
        // Growing a buffer frees the old one: no queued step may still use it.
        // SAFETY: a plain wait on this device's stream.
        unsafe { result::stream::synchronize(device.stream.cu_stream()) }.map_err(|e| gpu_error("waiting for the GPU", e))?;
    }
    let base = match &recorded {
        Some(r) => r.pointer(),
        None => workspace
            .device(regions.end)
            .map_err(|e| gpu_error(&format!("allocating {:.1} MB", regions.end as f64 / 1e6), e))?,
    };
    // The output rows' inputs stay in the device buffer from the first step of a block of output
    // rows to its last (its layout does not change): the next steps bring only reduced rows.
    let outer_kept = !step.first && !device_grows && recorded.is_none() && data.target.is_none();
    let events = workspace.events;
    let host = workspace.host(fetch.end.max(regions.upload_end)).map_err(|e| {
        gpu_error(&format!("allocating {:.1} MB of page-locked host memory", regions.end as f64 / 1e6), e)
    })?;

    let clock = Instant::now();
    let outer = outer_category(formula);
    // What travels: the bytes packed (a region is sized for the largest block of reduced rows,
    // the step's may be smaller), then the numbers and the ranges.
    let mut uploads = Vec::new();
    for (p, (v, &offset)) in formula.variables.iter().zip(&regions.inputs).enumerate() {
        if data.resident[p].is_some() {
            continue;
        }
        let (n, rows) = match v.category {
            Category::Param => (1, 0..1),
            c if c == outer && outer_kept => continue,
            c if c == outer => (step.n_out, step.out.clone()),
            _ => (step.n_red, step.red.clone()),
        };
        pack::<S>(&mut host[offset..], data.inputs[p].data, n, &rows, v.dim);
        uploads.push(offset..offset + rows.len() * v.dim * std::mem::size_of::<S>());
    }
    uploads.push(regions.constants..regions.upload_end);
    let constants: Vec<T> = kernel.constants.iter().map(|&c| T::from_f64(c)).collect();
    pack_values(&mut host[regions.constants..], &constants);
    if let Some(ranged) = data.ranged {
        pack_values(&mut host[regions.work..], &ranged.work);
        pack_values(&mut host[regions.red..], &ranged.red);
    }
    times.convert += clock.elapsed().as_secs_f64();

    let stream = device.stream.cu_stream();
    // A step whose result stays on the device is queued: the loop that runs it (`crate::iterate`)
    // waits once, at its end, and its inputs are copied from ordinary memory, which the driver
    // stages before returning, so the page-locked buffer is free for the next step at once.
    let queued = data.target.is_some();
    let staged: Vec<u8> = if queued { host[..regions.upload_end].to_vec() } else { Vec::new() };
    let ran = guarded("the GPU computation", || {
        let at = |offset: usize| base + offset as u64;
        // SAFETY (all the calls below): `base` holds `regions.end` bytes and `host` at least
        // `fetch.end`; both stay untouched until the synchronisation at the end.
        unsafe {
            if queued {
                if !staged.is_empty() {
                    result::memcpy_htod_async(base, &staged, stream).map_err(|e| gpu_error("copying the inputs", e))?;
                }
            } else {
                result::event::record(events[0], stream).map_err(|e| gpu_error("timing", e))?;
                for bytes in uploads.iter().filter(|b| !b.is_empty()) {
                    result::memcpy_htod_async(at(bytes.start), &host[bytes.clone()], stream)
                        .map_err(|e| gpu_error("copying the inputs", e))?;
                }
                result::event::record(events[1], stream).map_err(|e| gpu_error("timing", e))?;
            }
        }
        let ints = [rows_out as i32, rows_red as i32, chunk as i32, step.red.start as i32, finalize_here as i32];
        let mut pointers: Vec<u64> =
            regions.inputs.iter().zip(data.resident).map(|(&o, r)| r.map_or(at(o), |m| m.pointer())).collect();
        let values = data.target.map_or(at(regions.values), DeviceMatrix::pointer);
        // (the running states of the earlier steps seed the K-selections: see codegen's Reducer::init)
        let running = if step.first { 0 } else { at(regions.running.start) };
        pointers.extend([at(regions.constants), at(regions.states), values, at(regions.indices), running]);
        let blocks = match data.ranged {
            Some(ranged) => {
                pointers.extend([at(regions.work), at(regions.red)]);
                ranged.blocks()
            }
            None => rows_out.div_ceil(kernel.tile * kernel.rows),
        };
        if let (Some(prepare), Some(function)) = (kernel.prepare, &compiled.functions.prepare) {
            let ints = [rows_out as i32, rows_red as i32];
            let split = [pointers[prepare.outer], pointers[prepare.inner], at(regions.split), at(regions.split_norms)];
            let config = LaunchConfig {
                grid_dim: (prepare.rows(rows_red).div_ceil(PREPARE_THREADS).max(1) as u32, 1, 1),
                block_dim: (PREPARE_THREADS as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: two ints, the two inputs as the reduction reads them, and the regions sized
            // for `prepare.rows(step.rows_red)` >= `prepare.rows(rows_red)` reduced rows.
            unsafe { launch(device, function, config, &ints, &split) }
                .map_err(|e| gpu_error("launching the kernel that prepares the dots", e))?;
            if let Some(r) = recorded.as_mut() {
                r.push(function, config, &ints, &split);
            }
            pointers.extend([at(regions.split), at(regions.split_norms)]);
        }
        let config = LaunchConfig {
            grid_dim: (blocks as u32, chunks as u32, 1),
            block_dim: (kernel.tile as u32, 1, 1),
            shared_mem_bytes: kernel.dynamic_shared as u32,
        };
        // SAFETY: the arguments match the generated signature: five ints, one pointer per input
        // (the step's rows, as the kernel indexes them), the numbers, the states of `chunks` x
        // `rows_out` rows, the results of `rows_out` rows and their running states or null (then
        // the ranges', then the prepared dots').
        unsafe { launch(device, &compiled.functions.reduce, config, &ints, &pointers) }
            .map_err(|e| gpu_error("launching the kernel", e))?;
        if let Some(r) = recorded.as_mut() {
            r.push(&compiled.functions.reduce, config, &ints, &pointers);
        }
        if !finalize_here {
            let ints = [rows_out as i32, chunks as i32, step.first as i32, step.last as i32];
            let pointers = [at(regions.states), at(regions.running.start), values, at(regions.indices)];
            let config = LaunchConfig {
                grid_dim: (rows_out.div_ceil(MERGE_THREADS) as u32, 1, 1),
                block_dim: (MERGE_THREADS as u32, 1, 1),
                shared_mem_bytes: 0,
            };
            // SAFETY: four ints, then the chunk states, running states and results as above.
            unsafe { launch(device, &compiled.functions.merge, config, &ints, &pointers) }
                .map_err(|e| gpu_error("launching the merge kernel", e))?;
            if let Some(r) = recorded.as_mut() {
                r.push(&compiled.functions.merge, config, &ints, &pointers);
            }
        }
        if queued {
            return Ok(());
        }
        unsafe {
            result::event::record(events[2], stream).map_err(|e| gpu_error("timing", e))?;
            if (step.last || step.states_out) && !fetch.is_empty() && data.target.is_none() {
                result::memcpy_dtoh_async(&mut host[fetch.clone()], at(fetch.start), stream)
                    .map_err(|e| gpu_error("copying the results", e))?;
            }
            result::event::record(events[3], stream).map_err(|e| gpu_error("timing", e))?;
            result::stream::synchronize(stream).map_err(|e| gpu_error("running the kernel", e))?;
            let elapsed =
                |a: usize, b: usize| result::event::elapsed(events[a], events[b]).map_or(0.0, |ms| ms as f64 / 1e3);
            times.upload += elapsed(0, 1);
            times.kernel += elapsed(1, 2);
            times.download += elapsed(2, 3);
        }
        Ok(())
    });
    if ran.is_err() {
        // Nothing queued before the failure may still use the buffers when the next call fills them.
        // SAFETY: a plain wait on this device's stream.
        let _ = unsafe { result::stream::synchronize(stream) };
    }
    ran?;
    if let Some(slot) = record {
        *slot = recorded;
    }

    let clock = Instant::now();
    // The kept rows, in the step's results and in the call's.
    let (from, to) = (step.keep.start - step.out.start, step.keep.start - step.part_start);
    if step.last {
        let results = rows_out * kernel.width;
        if let Some(values) = columns.values.as_mut() {
            let got: &[T] = view(&host[regions.values..], results);
            let n = values.len() / kernel.width.max(1);
            unpack(got, rows_out, from..from + step.keep.len(), values, n, to, |x| x.to_f64());
        }
        if let Some(indices) = columns.indices.as_mut() {
            let got: &[i32] = view(&host[regions.indices..], results);
            let n = indices.len() / kernel.width.max(1);
            unpack(got, rows_out, from..from + step.keep.len(), indices, n, to, |i| i);
        }
    }
    if let Some(states) = columns.states.as_mut().filter(|_| step.states_out) {
        // (row-major: the kept rows are contiguous)
        let len = kernel.state_len;
        let got: &[f64] = view(&host[regions.running.start..], rows_out * len);
        states[to * len..(to + step.keep.len()) * len].copy_from_slice(&got[from * len..(from + step.keep.len()) * len]);
    }
    times.results += clock.elapsed().as_secs_f64();
    Ok(())
}

/// Rows `rows` of the column-major `n x dim` matrix `data`, as `S`, at the start of `bytes`.
fn pack<S: Stored>(bytes: &mut [u8], data: &[f64], n: usize, rows: &Range<usize>, dim: usize) {
    let len = rows.len();
    let dst: &mut [S] = view_mut(bytes, len * dim);
    if len == n {
        // (all the rows: one conversion, as in `unpack`)
        parallel::map(&data[..n * dim], dst, S::from_f64);
        return;
    }
    for (c, column) in dst.chunks_mut(len.max(1)).enumerate() {
        parallel::map(&data[c * n + rows.start..c * n + rows.end], column, S::from_f64);
    }
}

fn pack_values<X: Copy>(bytes: &mut [u8], values: &[X]) {
    view_mut(bytes, values.len()).copy_from_slice(values);
}

/// The rows `keep` of the column-major `rows x width` results of a block of rows into rows
/// `start..` of the column-major `n x width` matrix `dst`.
fn unpack<X: Copy + Sync, Y: Send>(
    got: &[X],
    rows: usize,
    keep: Range<usize>,
    dst: &mut [Y],
    n: usize,
    start: usize,
    f: impl Fn(X) -> Y + Sync,
) {
    if rows == n && keep == (0..rows) {
        // All the rows: the same layout, one conversion (not one per column: a K-selection's
        // results have K columns, and each conversion starts its threads).
        parallel::map(got, &mut dst[..got.len()], &f);
        return;
    }
    for (c, column) in got.chunks(rows.max(1)).enumerate() {
        parallel::map(&column[keep.clone()], &mut dst[c * n + start..c * n + start + keep.len()], &f);
    }
}

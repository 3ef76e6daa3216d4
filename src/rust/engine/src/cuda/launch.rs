//! Runs a reduction on the GPU. The inputs are converted from R's doubles straight into
//! page-locked staging memory, in the layout of one device buffer (column-major, as R stores them:
//! each component is a contiguous array, so loads are coalesced), and copied in one asynchronous
//! transfer; the kernel runs with the 1D scheme or, when the output rows alone cannot fill the GPU,
//! the 2D scheme (chunks of the reduced range in `gridDim.y`, merged in order by a second kernel);
//! the results are finalised on the device and only they come back, in the working type, with one
//! synchronisation per call. Both buffers are the device's own, reused from call to call.

use std::ops::Range;
use std::time::Instant;

use cudarc::driver::{result, sys, CudaFunction, LaunchConfig};

use super::codegen;
use super::finish::MERGE_THREADS;
use super::device::{guarded, Compiled, Device};
use super::primitives::{launch, view, view_mut};
use super::recorded::Recorded;
use super::resident::DeviceMatrix;
use super::workspace::{Layout, Workspace};
use crate::api::Input;
use crate::precision::Precision;
use crate::backend::{Call, Columns, Part};
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::memory;
use crate::parallel;
use crate::ranges::BlockRanges;
use crate::schedule::steps::{self, chunks_for, Blocks, Geometry, Sizes, StepRows};
use crate::schedule::work::pieces;
use crate::real::Real;
use crate::real::Stored;

/// Threads per block of the kernel that prepares tensor-core dots.
const PREPARE_THREADS: usize = 128;

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
        for item in pieces(ranges, n_out, rows_per_block).into_iter().filter(|w| rows.contains(&w.rows.start)) {
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

/// Runs the reduction of `call` with inputs stored as `S` on the device and arithmetic and results
/// in `T` (f32 for float16 storage, otherwise the same type); with ranges, `compiled` is the ranged
/// kernel. With `kept`, the values are written into its matrix and nothing comes back to the host:
/// an iteration in the engine feeds them to the next reduction (`crate::iterate`). `stop` is asked
/// between the steps of a long reduction: when it says so, the call returns `Error::Interrupted`.
pub fn evaluate<S: Stored, T: Real>(
    device: &Device,
    compiled: &Compiled,
    call: &Call,
    poll: &dyn Fn(u64, u64) -> bool,
    kept: Option<Kept>,
    timings: &mut Vec<(&'static str, f64)>,
) -> Result<Columns> {
    let (target, record) = match kept {
        Some(Kept { matrix, record }) => (Some(matrix), record),
        None => (None, None),
    };
    let inputs = call.inputs;
    let resident: Vec<Option<&DeviceMatrix>> = inputs.iter().map(Input::kept_as::<DeviceMatrix>).collect();
    let extent = Extent::new(call, &resident, target)?;
    check_target::<S, T>(&extent, compiled.kernel.width, target)?;
    // (the room for the results, first touched here, counted with them)
    let room = std::time::Instant::now();
    let mut columns = Columns::for_part(call.formula, &compiled.kernel, &extent.part, extent.states_out, target)?;
    let room = room.elapsed().as_secs_f64();
    let mut workspace = device.workspace.lock().map_err(|_| Error::Gpu("the GPU's workspace is unusable".into()))?;
    if workspace.is_none() {
        *workspace = Some(guarded("creating the GPU's workspace", Workspace::new)?);
    }
    let workspace = workspace.as_mut().expect("created above");
    let kernel = &compiled.kernel;
    let ranged = call.ranges.map(|r| RangedWork::new(r, extent.n_out, kernel.tile * kernel.rows, &extent.part.out));
    let mut sizes = device_sizes::<S, T>(call.formula, kernel, &resident);
    sizes.fixed += ranged.as_ref().map_or(0, RangedWork::bytes);
    let (span_out, span_red) = extent.spans();
    let blocks = fit_blocks(device, kernel, &sizes, (span_out.len(), span_red.len()), workspace.held().0, call.options)?;
    if (blocks.rows_out, blocks.rows_red) != (span_out.len(), span_red.len()) && extent.whole {
        let what = match call.ranges {
            Some(_) => "a block-sparse reduction (ranges) in one piece; compute it on the CPU",
            None => "this reduction with inputs kept on it in one piece; pass the matrices themselves (they are then processed in blocks)",
        };
        return Err(Error::Memory(format!(
            "GPU: device {} ({}) has too little free memory for {what}",
            device.ordinal, device.name
        )));
    }
    let force_1d = call.options.tuning.force_1d;
    let formula = call.formula;
    let geometry = Geometry { granule: blocks.granule, ..geometry(device, kernel) };
    let data = Data {
        device,
        compiled,
        formula,
        inputs,
        resident: &resident,
        ranged: ranged.as_ref(),
        target,
        force_1d,
        geometry,
    };
    let mut times = Times { results: room, ..Times::default() };
    let steps = Steps { data: &data, extent: &extent, blocks: &blocks, poll };
    steps.run::<S, T>(workspace, &mut columns, &mut times, record)?;
    timings.extend([
        ("conversion", times.convert),
        ("upload", times.upload),
        ("kernel", times.kernel),
        ("download", times.download),
        ("results", times.results),
    ]);
    Ok(columns)
}

/// The rows a call reduces: `part` of the `n_out` output rows against the `n_red` reduced rows;
/// `states_out` when its part of the reduced range is not all of it (states come back, not results);
/// `whole` when the kernels index the inputs whole (inputs or a result kept on the device, ranges).
struct Extent {
    n_out: usize,
    n_red: usize,
    part: Part,
    states_out: bool,
    whole: bool,
}

impl Extent {
    fn new(call: &Call, resident: &[Option<&DeviceMatrix>], target: Option<&DeviceMatrix>) -> Result<Extent> {
        let (n_i, n_j) = call.sizes;
        let (n_out, n_red) = if call.formula.reduction.axis == 0 { (n_i, n_j) } else { (n_j, n_i) };
        if n_out > i32::MAX as usize || n_red > i32::MAX as usize {
            return Err(Error::Gpu(format!("at most {} rows per variable are supported on the GPU", i32::MAX)));
        }
        let part = call.part.cloned().unwrap_or(Part { out: 0..n_out, red: 0..n_red });
        let states_out = part.red != (0..n_red);
        // The kernels index a resident matrix, and a block-sparse reduction its inputs, whole: their
        // rows cannot be split into blocks.
        let whole = resident.iter().any(Option::is_some) || call.ranges.is_some() || target.is_some();
        // (ranges: only their rows, at the boundaries of their pieces of work)
        let splittable = resident.iter().all(Option::is_none) && target.is_none();
        let split = states_out || part.out != (0..n_out);
        if part.out.end > n_out
            || part.red.end > n_red
            || (split && !splittable)
            || (states_out && call.ranges.is_some())
        {
            return Err(Error::Invalid(format!(
                "this reduction cannot be split into the part {part:?} (inputs or a result kept on a device, or ranges)"
            )));
        }
        Ok(Extent { n_out, n_red, part, states_out, whole })
    }

    /// The rows the kernels see: those of the part, or all of them when they index the inputs whole.
    fn spans(&self) -> (Range<usize>, Range<usize>) {
        match self.whole {
            true => (0..self.n_out, 0..self.n_red),
            false => (self.part.out.clone(), self.part.red.clone()),
        }
    }
}

/// A result kept on the device holds the values of the whole reduction (its indices when it returns
/// only those), in the arithmetic type.
fn check_target<S, T>(extent: &Extent, width: usize, target: Option<&DeviceMatrix>) -> Result<()> {
    let Some(m) = target else { return Ok(()) };
    let stored = std::mem::size_of::<S>() == std::mem::size_of::<T>();
    if !stored || (m.nrow, m.ncol) != (extent.n_out, width) {
        let n_out = extent.n_out;
        return Err(Error::Invalid(format!(
            "a result kept on the device must be the values (or the indices, as numbers) of an {n_out} x {width} reduction in float32 or float64, not {m:?}"
        )));
    }
    Ok(())
}

impl Columns {
    /// Room for what comes back to the host for `part`: its results (none when they stay on the
    /// device), or its reduction states.
    fn for_part(
        formula: &Formula,
        kernel: &codegen::Kernel,
        part: &Part,
        states_out: bool,
        target: Option<&DeviceMatrix>,
    ) -> Result<Columns> {
        let kind = formula.reduction.kind;
        let results = part.out.len().saturating_mul(kernel.width);
        let host_results = |wanted: bool| wanted && target.is_none() && !states_out;
        Ok(Columns {
            values: host_results(kind.returns_values()).then(|| memory::zeros(results, "the results")).transpose()?,
            indices: host_results(kind.returns_indices())
                .then(|| memory::zeros(results, "the result's indices"))
                .transpose()?,
            states: states_out
                .then(|| memory::zeros(part.out.len().saturating_mul(kernel.state_len), "the reduction states"))
                .transpose()?,
        })
    }
}

/// The steps of a call (`schedule::steps`), run one after the other; `poll` is told the pairs (i, j)
/// reduced so far and in all after each step, and says whether to stop (an interrupt: a kernel, once
/// launched, runs to its end).
struct Steps<'a> {
    data: &'a Data<'a>,
    extent: &'a Extent,
    blocks: &'a Blocks,
    poll: &'a dyn Fn(u64, u64) -> bool,
}

impl Steps<'_> {
    fn run<S: Stored, T: Real>(
        &self,
        workspace: &mut Workspace,
        columns: &mut Columns,
        times: &mut Times,
        mut record: Option<&mut Option<Recorded>>,
    ) -> Result<()> {
        let data = self.data;
        let (span_out, span_red) = self.extent.spans();
        let tile = data.compiled.kernel.tile;
        let mut schedule =
            steps::Steps::new(span_out.clone(), span_red.clone(), self.blocks.clone(), tile, !self.extent.whole);
        while let Some(rows) = schedule.next() {
            // (the rows before this block of output rows, all reduced, then this block's so far)
            let done = (rows.out.start - span_out.start) as u64 * span_red.len() as u64
                + (rows.red.end - span_red.start) as u64 * rows.out.len() as u64;
            let step = self.step(rows);
            let before = times.kernel;
            run_step::<S, T>(data, &step, workspace, columns, times, record.as_deref_mut())?;
            if data.target.is_some() {
                continue; // (queued: the loop that queued it asks for interrupts)
            }
            if (self.poll)(done, span_out.len() as u64 * span_red.len() as u64) {
                return Err(Error::Interrupted);
            }
            schedule.took(times.kernel - before);
        }
        Ok(())
    }

    /// The step of these output rows against these reduced rows.
    fn step(&self, rows: StepRows) -> Step {
        let (extent, part) = (self.extent, &self.extent.part);
        let StepRows { out, red, first, last: end } = rows;
        Step {
            keep: out.start.max(part.out.start)..out.end.min(part.out.end),
            out,
            red,
            n_out: extent.n_out,
            n_red: extent.n_red,
            first,
            last: end && !extent.states_out,
            states_out: end && extent.states_out,
            part_start: part.out.start,
            rows_red: self.blocks.rows_red,
        }
    }
}

#[derive(Default)]
struct Times {
    convert: f64,
    upload: f64,
    kernel: f64,
    download: f64,
    results: f64,
}

/// The bytes each row takes on the device (inputs kept on it need no room).
fn device_sizes<S, T>(formula: &Formula, kernel: &codegen::Kernel, resident: &[Option<&DeviceMatrix>]) -> Sizes {
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
        results: kernel.width * (if red.returns_values() { t } else { 0 } + if red.returns_indices() { 4 } else { 0 }),
    }
}

/// The kernel's geometry on this device.
fn geometry(device: &Device, kernel: &codegen::Kernel) -> Geometry {
    let granule = if kernel.prepare.is_some() { kernel.tile } else { steps::WARP };
    Geometry { tile: kernel.tile, rows: kernel.rows, multiprocessors: device.multiprocessors, granule }
}

/// The blocks of `n_out x n_red` that fit in the call's budget of device memory: 80% of what is
/// free (with what this device's workspace already holds, `held`), or `RunOptions::gpu_memory`.
fn fit_blocks(
    device: &Device,
    kernel: &codegen::Kernel,
    sizes: &Sizes,
    rows: (usize, usize),
    held: usize,
    options: &crate::api::RunOptions,
) -> Result<Blocks> {
    let free = device.ctx.mem_get_info().map(|(free, _)| free).unwrap_or(usize::MAX);
    let budget = options.gpu_memory.unwrap_or(usize::MAX).min(free.saturating_add(held) / 10 * 8);
    Blocks::fit(geometry(device, kernel), sizes, rows, budget).ok_or_else(|| {
        Error::Memory(format!(
            "GPU: device {} ({}) has too little free memory ({:.2} GB) for even one block of rows; use the CPU",
            device.ordinal,
            device.name,
            budget as f64 / 1e9
        ))
    })
}

fn outer_category(formula: &Formula) -> Category {
    if formula.reduction.axis == 0 {
        Category::I
    } else {
        Category::J
    }
}

/// A call on a device: its compiled kernels, its inputs (from the host, or kept on the device:
/// `resident[p]`), the work of a block-sparse reduction, and where the values go when they stay on
/// the device.
struct Data<'a> {
    device: &'a Device,
    compiled: &'a Compiled,
    formula: &'a Formula,
    inputs: &'a [Input<'a>],
    resident: &'a [Option<&'a DeviceMatrix>],
    ranged: Option<&'a RangedWork>,
    target: Option<&'a DeviceMatrix>,
    /// The 1D scheme always (`Tuning::force_1d`).
    force_1d: bool,
    /// How the kernel fills the device, with the chunks' granule of the call's blocks.
    geometry: Geometry,
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

/// A step's geometry and buffer layout: the reduced rows in `chunks` chunks of `chunk` rows (the
/// 2D scheme when more than one), finalised by the reduction kernel itself or by the merge kernel,
/// and what comes back (`fetch`: the results, or the running states at the end of a part of the
/// reduced range).
struct StepPlan {
    chunk: usize,
    chunks: usize,
    finalize_here: bool,
    regions: Regions,
    fetch: Range<usize>,
}

impl StepPlan {
    fn new<S, T>(data: &Data, step: &Step) -> StepPlan {
        let kernel = &data.compiled.kernel;
        let (rows_out, rows_red) = (step.out.len(), step.red.len());
        // Tuning::force_1d (RKEOPS_GPU_SCHEME=1D: benchmarks that compare the two schemes).
        let chunks_of = |n_red: usize| match data.force_1d {
            true => 1,
            false => chunks_for(rows_out, n_red, data.geometry),
        };
        // A block-sparse reduction is one pass of the 1D scheme (the ranges say what each block reduces).
        let chunk = match data.ranged {
            Some(_) => rows_red.max(1),
            None => rows_red.div_ceil(chunks_of(rows_red)).div_ceil(data.geometry.granule) * data.geometry.granule,
        };
        let chunks = rows_red.div_ceil(chunk);
        let one_pass = step.first && step.last;
        let planned = if data.ranged.is_some() { 1 } else { chunks_of(step.rows_red).max(chunks) };
        let regions = Regions::new::<S, T>(data.formula, kernel, data, step, planned, one_pass);
        let fetch = match step.states_out {
            true => regions.running.clone(),
            false => regions.download.clone(),
        };
        StepPlan { chunk, chunks, finalize_here: one_pass && chunks == 1, regions, fetch }
    }
}

/// A failed driver call on `device`, said with what was being done.
pub(super) fn gpu_error(device: &Device, what: &str, e: result::DriverError) -> Error {
    Error::Gpu(format!("{what} on device {} ({}): {e:?}", device.ordinal, device.name))
}

/// Uploads one step's inputs, runs its kernels and, after the last block of the reduced range,
/// brings its results back into `columns`. With `record` (a queued step), its buffer is its own,
/// and its launches are recorded there.
fn run_step<S: Stored, T: Real>(
    data: &Data,
    step: &Step,
    workspace: &mut Workspace,
    columns: &mut Columns,
    times: &mut Times,
    record: Option<&mut Option<Recorded>>,
) -> Result<()> {
    let device = data.device;
    let plan = StepPlan::new::<S, T>(data, step);
    let regions = &plan.regions;
    let mut recorded = record.is_some().then(|| Recorded::new(device, regions.end)).transpose()?;
    let device_grows = recorded.is_none() && regions.end > workspace.held().0;
    if device_grows || plan.fetch.end > workspace.held().1 {
        // Growing a buffer frees the old one: no queued step may still use it.
        // SAFETY: a plain wait on this device's stream.
        unsafe { result::stream::synchronize(device.stream.cu_stream()) }
            .map_err(|e| gpu_error(device, "waiting for the GPU", e))?;
    }
    let base = match &recorded {
        Some(r) => r.pointer(),
        None => workspace
            .device(regions.end)
            .map_err(|e| gpu_error(device, &format!("allocating {:.1} MB", regions.end as f64 / 1e6), e))?,
    };
    // The output rows' inputs stay in the device buffer from the first step of a block of output
    // rows to its last (its layout does not change): the next steps bring only reduced rows.
    let outer_kept = !step.first && !device_grows && recorded.is_none() && data.target.is_none();
    let events = workspace.events;
    let host = workspace.host(plan.fetch.end.max(regions.upload_end)).map_err(|e| {
        gpu_error(device, &format!("allocating {:.1} MB of page-locked host memory", regions.end as f64 / 1e6), e)
    })?;
    let clock = Instant::now();
    let uploads = pack_step::<S, T>(data, step, regions, outer_kept, host);
    times.convert += clock.elapsed().as_secs_f64();
    // A queued step's inputs are copied from ordinary memory (see `Issue::run`).
    let staged: Vec<u8> = match data.target {
        Some(_) => host[..regions.upload_end].to_vec(),
        None => Vec::new(),
    };
    let issue = Issue { data, step, plan: &plan, base, events };
    let ran = guarded("the GPU computation", || issue.run(host, &uploads, &staged, recorded.as_mut(), times));
    if ran.is_err() {
        // Nothing queued before the failure may still use the buffers when the next call fills them.
        // SAFETY: a plain wait on this device's stream.
        let _ = unsafe { result::stream::synchronize(device.stream.cu_stream()) };
    }
    ran?;
    if let Some(slot) = record {
        *slot = recorded;
    }
    let clock = Instant::now();
    collect_results::<T>(&data.compiled.kernel, step, regions, host, columns);
    times.results += clock.elapsed().as_secs_f64();
    Ok(())
}

/// Packs what a step uploads into the staging buffer `host`: the inputs from the host (the bytes
/// of the step's rows: a region is sized for the largest block of reduced rows), then the numbers
/// and the ranges. Returns the byte ranges to copy.
fn pack_step<S: Stored, T: Real>(
    data: &Data,
    step: &Step,
    regions: &Regions,
    outer_kept: bool,
    host: &mut [u8],
) -> Vec<Range<usize>> {
    let outer = outer_category(data.formula);
    let mut uploads = Vec::new();
    for (p, (v, &offset)) in data.formula.variables.iter().zip(&regions.inputs).enumerate() {
        if data.resident[p].is_some() {
            continue;
        }
        let (n, rows) = match v.category {
            Category::Param => (1, 0..1),
            c if c == outer && outer_kept => continue,
            c if c == outer => (step.n_out, step.out.clone()),
            _ => (step.n_red, step.red.clone()),
        };
        let values = data.inputs[p].host_data().expect("an input not kept on the device is on the host");
        pack::<S>(&mut host[offset..], values, n, &rows, v.dim);
        uploads.push(offset..offset + rows.len() * v.dim * std::mem::size_of::<S>());
    }
    uploads.push(regions.constants..regions.upload_end);
    let constants: Vec<T> = data.compiled.kernel.constants.iter().map(|&c| T::from_f64(c)).collect();
    pack_values(&mut host[regions.constants..], &constants);
    if let Some(ranged) = data.ranged {
        pack_values(&mut host[regions.work..], &ranged.work);
        pack_values(&mut host[regions.red..], &ranged.red);
    }
    uploads
}

/// What one step issues on the device's stream, from its buffer at `base`.
struct Issue<'a> {
    data: &'a Data<'a>,
    step: &'a Step,
    plan: &'a StepPlan,
    base: sys::CUdeviceptr,
    events: [sys::CUevent; 4],
}

impl Issue<'_> {
    fn at(&self, offset: usize) -> u64 {
        self.base + offset as u64
    }

    /// `map_err` of a failed driver call: the message is written only on failure.
    fn error<'s>(&'s self, what: &'s str) -> impl Fn(result::DriverError) -> Error + 's {
        move |e| gpu_error(self.data.device, what, e)
    }

    /// Uploads, launches and, unless the step is queued, brings back and times the step.
    fn run(
        &self,
        host: &mut [u8],
        uploads: &[Range<usize>],
        staged: &[u8],
        mut recorded: Option<&mut Recorded>,
        times: &mut Times,
    ) -> Result<()> {
        // A step whose result stays on the device is queued: the loop that runs it (`crate::iterate`)
        // waits once, at its end, and its inputs are copied from ordinary memory, which the driver
        // stages before returning, so the page-locked buffer is free for the next step at once.
        let queued = self.data.target.is_some();
        let stream = self.data.device.stream.cu_stream();
        let events = self.events;
        // SAFETY (all the calls below): the buffer at `base` holds `regions.end` bytes and `host` at
        // least `fetch.end`; both stay untouched until the synchronisation at the end.
        unsafe {
            if queued {
                if !staged.is_empty() {
                    result::memcpy_htod_async(self.base, staged, stream).map_err(self.error("copying the inputs"))?;
                }
            } else {
                result::event::record(events[0], stream).map_err(self.error("timing"))?;
                for bytes in uploads.iter().filter(|b| !b.is_empty()) {
                    result::memcpy_htod_async(self.at(bytes.start), &host[bytes.clone()], stream)
                        .map_err(self.error("copying the inputs"))?;
                }
                result::event::record(events[1], stream).map_err(self.error("timing"))?;
            }
        }
        self.launch_kernels(&mut recorded)?;
        self.indices_as_values(&mut recorded)?;
        if queued {
            return Ok(());
        }
        let fetch = &self.plan.fetch;
        unsafe {
            result::event::record(events[2], stream).map_err(self.error("timing"))?;
            if (self.step.last || self.step.states_out) && !fetch.is_empty() {
                result::memcpy_dtoh_async(&mut host[fetch.clone()], self.at(fetch.start), stream)
                    .map_err(self.error("copying the results"))?;
            }
            result::event::record(events[3], stream).map_err(self.error("timing"))?;
            result::stream::synchronize(stream).map_err(self.error("running the kernel"))?;
            let elapsed =
                |a: usize, b: usize| result::event::elapsed(events[a], events[b]).map_or(0.0, |ms| ms as f64 / 1e3);
            times.upload += elapsed(0, 1);
            times.kernel += elapsed(1, 2);
            times.download += elapsed(2, 3);
        }
        Ok(())
    }

    /// Launches the preparation of the tensor-core dots (if any), the reduction and, unless the
    /// reduction finalises its rows itself, the merge of its chunks; each recorded when asked.
    fn launch_kernels(&self, recorded: &mut Option<&mut Recorded>) -> Result<()> {
        let (data, step, plan, regions) = (self.data, self.step, self.plan, &self.plan.regions);
        let (kernel, functions) = (&data.compiled.kernel, &data.compiled.functions);
        let (rows_out, rows_red) = (step.out.len(), step.red.len());
        let mut launch_and_record =
            |function: &CudaFunction, config: LaunchConfig, ints: &[i32], pointers: &[u64], what: &str| {
                // SAFETY: each caller passes the arguments of the kernel's generated signature (below).
                unsafe { launch(data.device, function, config, ints, pointers) }.map_err(self.error(what))?;
                if let Some(r) = recorded.as_mut() {
                    r.push(function, config, ints, pointers);
                }
                Ok::<(), Error>(())
            };
        let ints =
            [rows_out as i32, rows_red as i32, plan.chunk as i32, step.red.start as i32, plan.finalize_here as i32];
        let mut pointers: Vec<u64> =
            regions.inputs.iter().zip(data.resident).map(|(&o, r)| r.map_or(self.at(o), |m| m.pointer())).collect();
        let values = data.target.map_or(self.at(regions.values), DeviceMatrix::pointer);
        // (the running states of the earlier steps seed the K-selections: see codegen's Reducer::init)
        let running = if step.first { 0 } else { self.at(regions.running.start) };
        pointers.extend([
            self.at(regions.constants),
            self.at(regions.states),
            values,
            self.at(regions.indices),
            running,
        ]);
        let blocks = match data.ranged {
            Some(ranged) => {
                pointers.extend([self.at(regions.work), self.at(regions.red)]);
                ranged.blocks()
            }
            None => rows_out.div_ceil(kernel.tile * kernel.rows),
        };
        if let (Some(prepare), Some(function)) = (kernel.prepare, &functions.prepare) {
            // Two ints, the two inputs as the reduction reads them, and the regions sized for
            // `prepare.rows(step.rows_red)` >= `prepare.rows(rows_red)` reduced rows.
            let split = [
                pointers[prepare.outer],
                pointers[prepare.inner],
                self.at(regions.split),
                self.at(regions.split_norms),
            ];
            let grid = prepare.rows(rows_red).div_ceil(PREPARE_THREADS).max(1) as u32;
            let config =
                LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (PREPARE_THREADS as u32, 1, 1), shared_mem_bytes: 0 };
            let ints = [rows_out as i32, rows_red as i32];
            launch_and_record(function, config, &ints, &split, "launching the kernel that prepares the dots")?;
            pointers.extend([self.at(regions.split), self.at(regions.split_norms)]);
        }
        // Five ints, one pointer per input (the step's rows, as the kernel indexes them), the
        // numbers, the states of `chunks` x `rows_out` rows, the results of `rows_out` rows and
        // their running states or null (then the ranges', then the prepared dots').
        let config = LaunchConfig {
            grid_dim: (blocks as u32, plan.chunks as u32, 1),
            block_dim: (kernel.tile as u32, 1, 1),
            shared_mem_bytes: kernel.dynamic_shared as u32,
        };
        launch_and_record(&functions.reduce, config, &ints, &pointers, "launching the kernel")?;
        if !plan.finalize_here {
            // Four ints, then the chunk states, running states and results as above.
            let ints = [rows_out as i32, plan.chunks as i32, step.first as i32, step.last as i32];
            let pointers = [self.at(regions.states), self.at(regions.running.start), values, self.at(regions.indices)];
            let grid = super::finish::merge_blocks(data.formula.reduction.kind, rows_out, kernel.state_len) as u32;
            let config =
                LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (MERGE_THREADS as u32, 1, 1), shared_mem_bytes: 0 };
            launch_and_record(&functions.merge, config, &ints, &pointers, "launching the merge kernel")?;
        }
        Ok(())
    }
}

impl Issue<'_> {
    /// A selection that returns indices only, its result kept on the device: the indices written
    /// into the kept matrix as numbers (`crate::program` uses them as values), once the results are
    /// final.
    fn indices_as_values(&self, recorded: &mut Option<&mut Recorded>) -> Result<()> {
        let (data, step) = (self.data, self.step);
        let kind = data.formula.reduction.kind;
        let Some(target) = data.target.filter(|_| kind.returns_indices() && !kind.returns_values() && step.last) else {
            return Ok(());
        };
        let name = match target.precision {
            Precision::F64 => "rkeops_indices_as_f64",
            _ => "rkeops_indices_as_f32",
        };
        let function = data.device.utility(name)?;
        let n = step.out.len() * data.compiled.kernel.width;
        let config = LaunchConfig {
            grid_dim: (n.div_ceil(MERGE_THREADS).max(1) as u32, 1, 1),
            block_dim: (MERGE_THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ints, pointers) = ([n as i32], [self.at(self.plan.regions.indices), target.pointer()]);
        // SAFETY: the kernel takes an int and two pointers: `n` ints in the indices region, and the
        // kept matrix of `n` values (checked by `check_target`).
        unsafe { launch(data.device, &function, config, &ints, &pointers) }
            .map_err(self.error("launching the kernel that writes indices as numbers"))?;
        if let Some(r) = recorded.as_mut() {
            r.push(&function, config, &ints, &pointers);
        }
        Ok(())
    }
}

/// Copies the kept rows of a step's results (after the last block of the reduced range), or its
/// running states (at the end of a part of the reduced range), from the staging buffer into the
/// call's `columns`.
fn collect_results<T: Real>(
    kernel: &codegen::Kernel,
    step: &Step,
    regions: &Regions,
    host: &[u8],
    columns: &mut Columns,
) {
    let rows_out = step.out.len();
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
        states[to * len..(to + step.keep.len()) * len]
            .copy_from_slice(&got[from * len..(from + step.keep.len()) * len]);
    }
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

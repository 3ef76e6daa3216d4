//! Runs a reduction on the GPU. The inputs are converted from R's doubles straight into
//! page-locked staging memory, in the layout of one device buffer (column-major, as R stores them:
//! each component is a contiguous array, so loads are coalesced), and copied in one asynchronous
//! transfer; the kernel runs with the 1D scheme or, when the output rows alone cannot fill the GPU,
//! the 2D scheme (chunks of the reduced range in `gridDim.y`, merged in order by a second kernel);
//! the results are finalised on the device and only they come back, in the working type, with one
//! synchronisation per call. Both buffers are the device's own, reused from call to call.
//!
//! The parts: `extent` (the rows a call covers, what comes back), `fit` (the blocks of rows that
//! fit in the device's memory), `ranged` (the work of a block-sparse reduction), `steps` (the
//! steps of a call, one after the other), `plan` (a step's chunks, 1D or 2D, and its buffer's
//! regions), `pack` (the step's inputs into the staging buffer, its results out of it) and
//! `issue` (a step's copies and launches on the stream).

mod extent;
mod fit;
mod issue;
mod pack;
mod plan;
mod ranged;
mod steps;

use cudarc::driver::result;

use super::device::{Compiled, Device};
use super::guard::guarded;
use super::recorded::Recorded;
use super::resident::DeviceMatrix;
use super::workspace::Workspace;
use crate::api::Input;
use crate::backend::{Call, Columns};
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::real::{Real, Stored};
use crate::schedule::steps::Geometry;
use extent::{check_target, Extent};
use fit::{device_sizes, fit_blocks, geometry};
use ranged::RangedWork;
use steps::Steps;

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
    let blocks =
        fit_blocks(device, kernel, &sizes, (span_out.len(), span_red.len()), workspace.held().0, call.options)?;
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

#[derive(Default)]
struct Times {
    convert: f64,
    upload: f64,
    kernel: f64,
    download: f64,
    results: f64,
}

fn outer_category(formula: &Formula) -> Category {
    if formula.reduction.axis == 0 {
        Category::I
    } else {
        Category::J
    }
}

/// A failed driver call on `device`, said with what was being done.
pub(super) fn gpu_error(device: &Device, what: &str, e: result::DriverError) -> Error {
    Error::Gpu(format!("{what} on device {} ({}): {e:?}", device.ordinal, device.name))
}

//! The steps of a call (`schedule::steps`), run one after the other, each uploaded, launched and
//! brought back (`run_step`).

use std::time::Instant;

use super::extent::Extent;
use super::issue::Issue;
use super::pack::{collect_results, pack_step};
use super::plan::{Step, StepPlan};
use super::{gpu_error, Data, Times};
use crate::backend::Columns;
use crate::cuda::guard::guarded;
use crate::cuda::recorded::Recorded;
use crate::cuda::workspace::Workspace;
use crate::error::{Error, Result};
use crate::real::{Real, Stored};
use crate::schedule::steps::{self, Blocks, StepRows};
use cudarc::driver::result;

/// The steps of a call (`schedule::steps`), run one after the other; `poll` is told the pairs (i, j)
/// reduced so far and in all after each step, and says whether to stop (an interrupt: a kernel, once
/// launched, runs to its end).
pub(super) struct Steps<'a> {
    pub(super) data: &'a Data<'a>,
    pub(super) extent: &'a Extent,
    pub(super) blocks: &'a Blocks,
    pub(super) poll: &'a dyn Fn(u64, u64) -> bool,
}

impl Steps<'_> {
    pub(super) fn run<S: Stored, T: Real>(
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

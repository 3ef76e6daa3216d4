//! One step of a call (`Step`: its output and reduced rows), its geometry (the reduced rows in
//! chunks: the 1D scheme with one, the 2D scheme with several) and the regions of its device
//! buffer (`Regions`).

use std::ops::Range;

use super::{outer_category, Data};
use crate::cuda::codegen;
use crate::cuda::workspace::Layout;
use crate::formula::{Category, Formula};
use crate::schedule::steps::chunks_for;

/// One launch: these output rows against these reduced rows (`first` and `last` of the reduced
/// range's blocks for these output rows, the results then finalised; `states_out`: the last
/// block of a part of the reduced range, whose states come back instead; `rows_red` rows in the
/// largest such block). The results of the rows `keep` come back, to rows `keep - part_start`
/// of the call's results.
pub(super) struct Step {
    pub(super) out: Range<usize>,
    pub(super) red: Range<usize>,
    pub(super) n_out: usize,
    pub(super) n_red: usize,
    pub(super) first: bool,
    pub(super) last: bool,
    pub(super) states_out: bool,
    pub(super) keep: Range<usize>,
    pub(super) part_start: usize,
    pub(super) rows_red: usize,
}

/// Where each part of a step lives, in bytes from the start of the device buffer; the staging
/// buffer mirrors its first part (inputs, then results).
pub(super) struct Regions {
    pub(super) inputs: Vec<usize>,
    pub(super) constants: usize,
    /// `RangedWork`'s blocks and ranges (empty for a dense reduction).
    pub(super) work: usize,
    pub(super) red: usize,
    pub(super) upload_end: usize,
    pub(super) values: usize,
    pub(super) indices: usize,
    pub(super) download: Range<usize>,
    /// The running states of the output rows, after the results (they come back for a part of
    /// the reduced range), then the states of the chunks.
    pub(super) running: Range<usize>,
    pub(super) states: usize,
    /// The reduced rows split for the tensor-core dots, and their norms (`Kernel::prepare`).
    pub(super) split: usize,
    pub(super) split_norms: usize,
    pub(super) end: usize,
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
pub(super) struct StepPlan {
    pub(super) chunk: usize,
    pub(super) chunks: usize,
    pub(super) finalize_here: bool,
    pub(super) regions: Regions,
    pub(super) fetch: Range<usize>,
}

impl StepPlan {
    pub(super) fn new<S, T>(data: &Data, step: &Step) -> StepPlan {
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

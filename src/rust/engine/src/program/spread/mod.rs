//! A program spread over several devices (the GPUs of `RunOptions::gpus`): the rows of its largest
//! i-axis are shared out, each device keeping its part for the whole program, one host thread per
//! device running the program's loop (`program::forward`) on its part (`memory`). Steps whose
//! i-axis is that one compute their rows on each device; steps that reduce over it give each
//! device's result for all their output rows, merged between the devices (`exchange`) in the
//! devices' order, so that the result depends on the number of devices only through the order of
//! the sums, and never from run to run; the other steps (over j-variables, parameters, smaller
//! i-axes) are computed whole by every device. A matrix of the split rows that a step reads whole
//! (as a j-variable, or as a result) is gathered from the parts, once per value.
//!
//! A program spreads when it can and it pays: every device gets at least `Tuning::spread_rows` rows,
//! no step reduces over the split rows with a reduction whose parts cannot be merged
//! (`ReductionKind::merges_results`: indices, soft-max weights, K-selections) or over block-sparse
//! ranges, and no initial value is kept on a device. Elsewhere it runs on the first device.

mod exchange;
mod memory;

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Mutex;

use crate::api::{RunOptions, Values};
use crate::buffers::{Buffers, HostMemory};
use crate::error::{Error, Result};
use crate::formula::Category;
use super::{CheckedRun, Program, ProgramResult};
use crate::schedule::devices::proportional;
use exchange::Exchange;
use memory::PartMemory;

/// The rows shared out: `rows` of them, `parts[p]` those of device p.
#[derive(Debug, Clone, PartialEq)]
pub struct Split {
    pub rows: usize,
    pub parts: Vec<Range<usize>>,
}

/// Parts' ends are multiples of this many rows (a GPU kernel's block of rows).
const GRANULE: usize = 256;

/// How the checked program `p` (its buffers' `shapes`) is spread over devices of these `weights`
/// (their relative speeds), each given at least `min_rows` rows; None where it cannot be, or
/// there is one device.
pub fn split_rows(p: &Program, shapes: &[(usize, usize)], weights: &[f64], min_rows: usize) -> Option<Split> {
    let kept = p.buffers.iter().any(|b| b.initial.is_some_and(|x| matches!(x.values, Values::Device(_))));
    if weights.len() < 2 || kept {
        return None;
    }
    // Each step's i-axis: the rows of its i-variables.
    let n_i = |s: usize| {
        let step = &p.steps[s];
        let vars = &step.operator.formula.variables;
        vars.iter().zip(&step.inputs).find(|(v, _)| v.category == Category::I).map(|(_, &b)| shapes[b].0)
    };
    let rows = (0..p.steps.len()).filter_map(n_i).max()?;
    for (s, step) in p.steps.iter().enumerate() {
        let reduction = &step.operator.formula.reduction;
        let unmerged = reduction.axis == 1 && reduction.kind.merges_results(reduction.g.is_some()).is_none();
        if n_i(s) == Some(rows) && (step.ranges.is_some() || unmerged) {
            return None;
        }
    }
    let parts = proportional(rows, weights, GRANULE);
    parts.iter().all(|r| r.len() >= min_rows.max(1)).then_some(Split { rows, parts })
}

/// The options of the parts' threads, and of their steps: the program's without what only R's
/// thread may call (the user's interruptions, the progress report), and one device each.
pub(crate) struct PartOptions {
    options: RunOptions,
    steps: Vec<RunOptions>,
}

impl PartOptions {
    pub(crate) fn new(p: &Program, options: &RunOptions) -> PartOptions {
        let options = RunOptions { interrupt: None, progress: None, gpus: Vec::new(), ..options.clone() };
        PartOptions { steps: p.step_options(&options), options }
    }
}

/// Runs the checked program of `run` over `split`'s parts, part p on the memory `open(p)` (made on
/// the part's own thread) with the options `parts`, `description` saying what computes. The user's
/// interruptions and the progress report are asked on this thread (R's) only.
pub(crate) fn run<'a, M: Buffers<'a>>(
    (run, parts_options): (&CheckedRun<'a>, &'a PartOptions),
    split: &Split,
    description: &str,
    open: &(dyn Fn(usize) -> Result<M> + Sync),
) -> Result<ProgramResult> {
    let parts = split.parts.len();
    let quiet = CheckedRun { options: &parts_options.options, step_options: &parts_options.steps, ..*run };
    let exchange = Exchange::new(parts);
    let stop = AtomicBool::new(false);
    let results: Vec<Mutex<Option<Result<ProgramResult>>>> = (0..parts).map(|_| Mutex::new(None)).collect();
    let work = |part: usize| {
        let done = open(part).and_then(|inner| {
            let memory = PartMemory { inner, part, split, exchange: &exchange, stop: &stop, description };
            super::forward_run(&quiet, memory)
        });
        if done.is_err() {
            // (the others leave at their next step or exchange)
            stop.store(true, Relaxed);
            exchange.end();
        }
        if let Ok(mut slot) = results[part].lock() {
            *slot = Some(done);
        }
    };
    let interrupt = run.options.interrupt;
    crate::parallel::run_polling(parts, work, || interrupt.is_some_and(|asked| asked()), &stop);
    let mut first: Option<ProgramResult> = None;
    let mut failure: Option<Error> = None;
    for slot in results {
        match slot.into_inner().ok().flatten() {
            Some(Ok(result)) => {
                first.get_or_insert(result);
            }
            Some(Err(e)) if failure.as_ref().is_none_or(|f| matches!(f, Error::Interrupted)) => failure = Some(e),
            Some(Err(_)) => {}
            None => failure = failure.or(Some(Error::Invalid("a device's thread stopped without a result".into()))),
        }
    }
    match (failure, first) {
        (Some(e), _) => Err(e),
        (None, Some(result)) => {
            run.report(run.program.iterations);
            Ok(result)
        }
        (None, None) => Err(Error::Invalid("no device ran the program".into())),
    }
}

/// `p` spread over parts of these `weights` in host memory, each part a thread computing on the CPU
/// as each GPU computes on its own: how the tests check the spreading where there is no GPU. None
/// where `p` does not spread (`split_rows`, with `options.tuning.spread_rows`).
pub fn run_on_host_parts(p: &Program, options: &RunOptions, weights: &[f64]) -> Result<Option<ProgramResult>> {
    let shapes = super::check(p)?;
    let Some(split) = split_rows(p, &shapes, weights, options.tuning.spread_rows) else { return Ok(None) };
    let step_options = p.step_options(options);
    let run = CheckedRun { program: p, shapes: &shapes, step_options: &step_options, options, passes: 1 };
    let parts_options = PartOptions::new(p, options);
    self::run((&run, &parts_options), &split, "CPU parts", &|_| Ok(HostMemory::default())).map(Some)
}

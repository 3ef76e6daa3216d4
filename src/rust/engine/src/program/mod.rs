//! Programs: whole algorithms in one engine call. A program is an ordered list of steps over named
//! buffers (matrices indexed by i or j, or parameters), each step a reduction whose result is
//! assigned to a buffer (a map is a reduction over an index with no variable: one term per row);
//! the steps run in a loop, a fixed number of times or until a buffer's values drop below a
//! tolerance, with parameters that follow a schedule (one value per iteration) and a trace of chosen
//! buffers after each iteration. Results that are indices (ArgMin, ArgKMin) are stored as values
//! (1-based, as R numbers them), usable by later steps.
//!
//! The loop (`forward`) is written once for wherever the buffers are kept (`crate::buffers`): on a
//! GPU every buffer stays on the device for the whole program, and each step's launches are recorded
//! and issued again; elsewhere (the CPU; float16, whose results are float32; a program of one
//! iteration) each step is a plain run on host data, with no R in the loop; on several GPUs
//! (`RunOptions::gpus`) the rows of its points are shared out (`spread`). Before it runs (or is
//! differentiated), a program's consecutive sums over the same pairs become one reduction (`fuse`).

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::api::{Input, RunOptions};
use crate::backend::Timings;
use crate::error::{Error, Result};
use crate::choose::{choose, ForBuffers, ForSpread};
use crate::buffers::Buffers;
use crate::operator::Operator;
use crate::precision::Precision;
use crate::ranges::Ranges;
use crate::reduction::SumScheme;

mod forward;
mod fuse;
pub mod spread;
pub(crate) use forward::{run as forward_run, Forward, State};
use fuse::Fusion;

/// A named matrix of the program: its value before the first step that reads it (none when a step
/// writes it first), and the values it takes at each iteration when it follows a `Schedule`.
#[derive(Debug, Clone)]
pub struct Buffer<'a> {
    pub name: String,
    pub initial: Option<Input<'a>>,
    pub schedule: Option<Schedule<'a>>,
}

/// The values of a buffer, iteration after iteration: `rows` values one after the other (each
/// column-major, of the buffer's shape); iteration t (from 0) takes value `min(t, rows - 1)`.
#[derive(Debug, Clone, Copy)]
pub struct Schedule<'a> {
    pub values: &'a [f64],
    pub rows: usize,
}

/// One step: the reduction of `operator` on the buffers `inputs` (one per variable, in order), its
/// result assigned to the buffer `output` (its values, or its indices when it returns only those).
#[derive(Debug, Clone)]
pub struct Step<'a> {
    pub name: String,
    pub operator: &'a Operator,
    pub inputs: Vec<usize>,
    pub output: usize,
    pub sum_scheme: SumScheme,
    pub ranges: Option<Ranges>,
}

/// Stop after an iteration whose number is a multiple of `every` when every value of `buffer` is
/// below `tol` in absolute value.
#[derive(Debug, Clone, Copy)]
pub struct Stop {
    pub buffer: usize,
    pub tol: f64,
    pub every: usize,
}

#[derive(Debug, Clone)]
pub struct Program<'a> {
    pub buffers: Vec<Buffer<'a>>,
    pub steps: Vec<Step<'a>>,
    /// The most iterations (all of them without a stopping rule).
    pub iterations: usize,
    pub stop: Option<Stop>,
    /// Buffers whose values are recorded after each iteration.
    pub trace: Vec<usize>,
    /// Buffers whose final values come back.
    pub outputs: Vec<usize>,
}

/// What a program computed: the final values of its outputs (column-major, of `shapes`), the
/// iterations run, the traced values (per traced buffer, its values after each iteration one after
/// the other), what computed it and the seconds of each phase summed over the program.
#[derive(Debug, Clone)]
pub struct ProgramResult {
    pub outputs: Vec<Vec<f64>>,
    pub shapes: Vec<(usize, usize)>,
    pub iterations: usize,
    pub trace: Vec<Vec<f64>>,
    /// The values of each traced buffer (per iteration).
    pub trace_widths: Vec<usize>,
    pub backend: String,
    pub timings: Timings,
}

/// How often a loop on the GPU asks `RunOptions::interrupt` whether to stop.
pub(crate) const INTERRUPT_EVERY: Duration = Duration::from_millis(10);

/// Runs `program` on the backend `options` choose (the ranges and sum scheme of each step replace
/// those of `options`).
pub fn run(program: &Program, options: &RunOptions) -> Result<ProgramResult> {
    with_fused(program, &[], options, |program, shapes| run_checked(program, &shapes, options))
}

fn run_checked(program: &Program, shapes: &[(usize, usize)], options: &RunOptions) -> Result<ProgramResult> {
    let step_options = program.step_options(options);
    let run = CheckedRun { program, shapes, step_options: &step_options, options, passes: 1 };
    // float16 storage computes in float32: its results cannot be stored back in float16 on the
    // device without a rounding that a plain call would not make, so that program runs on host data;
    // so does a program of one iteration, which has nothing to keep on the device from one iteration
    // to the next (its steps are plain calls, which reuse the device's buffers).
    let on_device = options.precision != Precision::F16 && program.iterations > 1;
    let chosen = choose(options)?;
    if on_device && options.gpus.len() > 1 {
        let parts_options = spread::PartOptions::new(program, options);
        if let Some(result) = chosen.with_spread(options, Spread(&run, &parts_options))?.transpose()?.flatten() {
            return Ok(result);
        }
    }
    chosen.with_buffers(options.precision, on_device, Looped(&run))
}

/// `f` of the checked program `p`, fused where the options allow (`fuse`; `keep`: buffers read
/// after the loop besides its outputs), with its buffers' shapes. Errors of the check name `p`'s
/// own steps.
pub(crate) fn with_fused<R>(
    p: &Program,
    keep: &[usize],
    options: &RunOptions,
    f: impl FnOnce(&Program, Vec<(usize, usize)>) -> Result<R>,
) -> Result<R> {
    let shapes = check(p)?;
    match fusion(p, &shapes, keep, options) {
        Some(fusion) => {
            let fused = fusion.apply(p);
            let shapes = check(&fused)?;
            f(&fused, shapes)
        }
        None => f(p, shapes),
    }
}

/// The groups of steps (consecutive numbers) that `run` fuses into one reduction each, where the
/// options allow (`fuse`); `keep`: as for `with_fused`.
pub fn fused_groups(p: &Program, keep: &[usize], options: &RunOptions) -> Result<Vec<std::ops::Range<usize>>> {
    let shapes = check(p)?;
    Ok(fusion(p, &shapes, keep, options).map_or(Vec::new(), |f| f.groups.clone()))
}

/// How the checked program `p` is fused, where the options allow and something fuses.
fn fusion(p: &Program, shapes: &[(usize, usize)], keep: &[usize], options: &RunOptions) -> Option<Arc<Fusion>> {
    options.tuning.fuse_steps.then(|| Fusion::of(p, shapes, keep)).flatten()
}

/// A checked program, run wherever its buffers are kept.
struct Looped<'r, 'a>(&'r CheckedRun<'a>);

impl<'a> ForBuffers<'a> for Looped<'_, 'a> {
    type Output = Result<ProgramResult>;

    fn run<B: Buffers<'a>>(self, memory: B) -> Result<ProgramResult> {
        forward::run(self.0, memory)
    }
}

/// A checked program, spread over several devices where it can be (`spread`), and the options of
/// the devices' threads.
struct Spread<'r, 'a>(&'r CheckedRun<'a>, &'a spread::PartOptions);

impl<'a> ForSpread<'a> for Spread<'_, 'a> {
    type Output = Result<Option<ProgramResult>>;

    fn run<B: Buffers<'a>>(
        self,
        weights: &[f64],
        description: &str,
        open: &(dyn Fn(usize) -> Result<B> + Sync),
    ) -> Result<Option<ProgramResult>> {
        let run = self.0;
        let min_rows = run.options.tuning.spread_rows;
        match spread::split_rows(run.program, run.shapes, weights, min_rows) {
            Some(split) => spread::run((run, self.1), &split, description, open).map(Some),
            None => Ok(None),
        }
    }
}

impl Program<'_> {
    /// Checks that buffer `b` (a valid number) has values once the loop has run: a program of 0
    /// iterations runs no step, so only the buffers given initial values have any.
    pub(crate) fn check_valued_after_loop(&self, b: usize) -> Result<()> {
        match self.iterations == 0 && self.buffers[b].initial.is_none() {
            true => Err(Error::Input {
                name: "iterations".into(),
                what: format!(
                    "0 iterations run no step, and buffer '{}' has no initial value: give it one, or run at least 1 iteration",
                    self.buffers[b].name
                ),
            }),
            false => Ok(()),
        }
    }

    /// The buffers that follow a schedule, with their value at iteration `t`.
    pub(crate) fn scheduled(&self, t: usize) -> impl Iterator<Item = (usize, &[f64])> + '_ {
        self.buffers.iter().enumerate().filter_map(move |(b, x)| Some((b, x.schedule.as_ref()?.at(t))))
    }

    /// The options of each step: `options` with the step's sum scheme and ranges (and no progress
    /// report: the program reports its iterations).
    pub(crate) fn step_options(&self, options: &RunOptions) -> Vec<RunOptions> {
        let with = |s: &Step| RunOptions {
            sum_scheme: s.sum_scheme,
            ranges: s.ranges.clone(),
            progress: None,
            ..options.clone()
        };
        self.steps.iter().map(with).collect()
    }
}

impl Stop {
    /// Whether the rule ends the loop after `done` iterations; `values` (the rule's buffer) is
    /// asked only after the iterations the rule tests.
    pub(crate) fn ends(&self, done: usize, values: impl FnOnce() -> Result<Vec<f64>>) -> Result<bool> {
        match done.is_multiple_of(self.every) {
            true => Ok(values()?.iter().all(|v| v.abs() < self.tol)),
            false => Ok(false),
        }
    }
}

/// The width of the buffer a step's result fills: its values per row (K of them per component for
/// the K-selections).
fn result_width(op: &Operator) -> usize {
    let red = &op.formula.reduction;
    if red.kind.is_k_selection() {
        red.k * op.formula.output_dim()
    } else {
        op.formula.output_dim()
    }
}

/// Checks the program before anything runs; returns the shape of every buffer ((0, 0) for one that
/// nothing reads or writes and that has no value).
pub(crate) fn check(p: &Program) -> Result<Vec<(usize, usize)>> {
    let buffer_name = |b: usize| p.buffers.get(b).map_or("?", |x| x.name.as_str());
    let mut shapes: Vec<Option<(usize, usize)>> =
        p.buffers.iter().map(|b| b.initial.map(|x| (x.nrow, x.ncol))).collect();
    for b in &p.buffers {
        check_buffer(b)?;
    }
    for (s, step) in p.steps.iter().enumerate() {
        let fail = |what: String| Error::Invalid(format!("step {} ('{}'): {what}", s + 1, step.name));
        let vars = &step.operator.formula.variables;
        if step.inputs.len() != vars.len() || step.inputs.iter().chain([&step.output]).any(|&b| b >= p.buffers.len()) {
            return Err(fail(format!(
                "it needs {} buffers, one per variable, among the {} of the program",
                vars.len(),
                p.buffers.len()
            )));
        }
        let mut given = Vec::with_capacity(vars.len());
        for (var, &b) in vars.iter().zip(&step.inputs) {
            let shape = shapes[b].ok_or_else(|| {
                fail(format!(
                    "'{}' reads buffer '{}', which has no value yet: give it an initial value, or compute it in an earlier step",
                    var.name,
                    buffer_name(b)
                ))
            })?;
            given.push(shape);
        }
        let (n_i, n_j) = step.operator.sizes(&given).map_err(|e| fail(e.to_string()))?;
        if let Some(ranges) = &step.ranges {
            ranges.validate(n_i, n_j).map_err(|e| fail(e.to_string()))?;
        }
        let red = &step.operator.formula.reduction;
        let result = (if red.axis == 0 { n_i } else { n_j }, result_width(step.operator));
        let out = &p.buffers[step.output];
        if out.schedule.is_some() {
            return Err(fail(format!("buffer '{}' follows a schedule: no step may write it", out.name)));
        }
        match shapes[step.output] {
            Some(shape) if shape != result => {
                return Err(fail(format!(
                    "its result is {} x {}, but buffer '{}' is {} x {}",
                    result.0, result.1, out.name, shape.0, shape.1
                )))
            }
            _ => shapes[step.output] = Some(result),
        }
    }
    let named = p.stop.iter().map(|s| (s.buffer, "the stopping rule")).chain(p.trace.iter().map(|&b| (b, "the trace")));
    for (b, what) in named.chain(p.outputs.iter().map(|&b| (b, "the outputs"))) {
        if shapes.get(b).copied().flatten().is_none() {
            return Err(Error::Invalid(format!(
                "{what}: buffer '{}' has no value (no initial value, and no step writes it)",
                buffer_name(b)
            )));
        }
    }
    for &b in &p.outputs {
        p.check_valued_after_loop(b)?;
    }
    if let Some(stop) = p.stop {
        if stop.every == 0 || stop.tol.is_nan() || stop.tol < 0.0 {
            return Err(Error::Invalid(format!(
                "the stopping rule: every = {} and tol = {} (a positive whole number and a number >= 0 expected)",
                stop.every, stop.tol
            )));
        }
    }
    Ok(shapes.into_iter().map(|s| s.unwrap_or((0, 0))).collect())
}

/// A buffer's own checks: its initial data, and its schedule (values of its shape).
fn check_buffer(b: &Buffer) -> Result<()> {
    let fail = |what: String| Error::Input { name: b.name.clone(), what };
    // (a matrix kept on a device has its shape by construction)
    if let Some(x) = b.initial {
        if let Some(data) = x.host_data().filter(|data| data.len() != x.nrow * x.ncol) {
            return Err(fail(format!("holds {} values, not {} x {}", data.len(), x.nrow, x.ncol)));
        }
    }
    if let Some(schedule) = b.schedule {
        let Some(x) = b.initial else {
            return Err(fail("follows a schedule but has no initial value (its shape)".into()));
        };
        if schedule.rows == 0 || schedule.values.len() != schedule.rows * x.nrow * x.ncol {
            return Err(fail(format!(
                "its schedule holds {} values: not a whole number (at least 1) of values of {} x {}",
                schedule.values.len(),
                x.nrow,
                x.ncol
            )));
        }
    }
    Ok(())
}

impl Buffer<'_> {
    /// The error of a buffer kept on a device or in a precision other than the program's.
    pub(crate) fn kept_elsewhere(&self, kept_on: String, runs_on: &str, precision: Precision) -> Error {
        Error::Input {
            name: self.name.clone(),
            what: format!(
                "is kept on {kept_on}, the program runs on {runs_on} in {}: make it with keops_device() with the options of the call",
                precision.name()
            ),
        }
    }
}

impl Schedule<'_> {
    /// The value of iteration `t`.
    fn at(&self, t: usize) -> &[f64] {
        let len = self.values.len() / self.rows;
        let row = t.min(self.rows - 1);
        &self.values[row * len..(row + 1) * len]
    }
}

/// A checked program (`shapes` from `check`) and the options of its steps.
pub(crate) struct CheckedRun<'a> {
    pub program: &'a Program<'a>,
    pub shapes: &'a [(usize, usize)],
    pub step_options: &'a [RunOptions],
    pub options: &'a RunOptions,
    /// Passes over the iterations that the progress report counts: 1, 2 for a gradient (forward
    /// and backward).
    pub passes: usize,
}

impl CheckedRun<'_> {
    /// Whether to stop after iteration `t` (from 0), given the stopping buffer's values.
    pub(crate) fn stops(&self, t: usize, values: impl FnOnce() -> Result<Vec<f64>>) -> Result<bool> {
        self.program.stop.map_or(Ok(false), |stop| stop.ends(t + 1, values))
    }

    /// Tells `RunOptions::progress` that `done` iterations have run (all of them when the stopping
    /// rule ended the loop), out of `passes` times the program's iterations.
    pub(crate) fn report(&self, done: usize) {
        report(self.options, done, self.program.iterations * self.passes);
    }

    pub(crate) fn result(
        &self,
        outputs: Vec<Vec<f64>>,
        done: usize,
        trace: Vec<Vec<f64>>,
        backend: String,
        timings: PhaseTotals,
    ) -> ProgramResult {
        let shapes = self.program.outputs.iter().map(|&b| self.shapes[b]).collect();
        let trace_widths = self.program.trace.iter().map(|&b| self.shapes[b].0 * self.shapes[b].1).collect();
        ProgramResult { outputs, shapes, iterations: done, trace, trace_widths, backend, timings: timings.0 }
    }
}

/// Err(Interrupted) when the user asked `options.interrupt` to stop; asked at most every
/// `INTERRUPT_EVERY` since `asked`, which it sets when it asks.
pub(crate) fn interrupted(options: &RunOptions, asked: &mut Instant) -> Result<()> {
    if let Some(interrupted) = options.interrupt.filter(|_| asked.elapsed() >= INTERRUPT_EVERY) {
        if interrupted() {
            return Err(Error::Interrupted);
        }
        *asked = Instant::now();
    }
    Ok(())
}

/// Tells `options.progress`, if any, that `done` of `total` iterations have run.
pub(crate) fn report(options: &RunOptions, done: usize, total: usize) {
    if let Some(report) = options.progress {
        report(done.min(total) as u64, total as u64);
    }
}

/// Seconds per phase, summed over the steps, in the order the phases first appear.
#[derive(Default)]
pub(crate) struct PhaseTotals(pub Timings);

impl PhaseTotals {
    pub(crate) fn add(&mut self, phases: &[(&'static str, f64)]) {
        for &(name, seconds) in phases {
            match self.0.iter_mut().find(|(n, _)| *n == name) {
                Some((_, total)) => *total += seconds,
                None => self.0.push((name, seconds)),
            }
        }
    }
}

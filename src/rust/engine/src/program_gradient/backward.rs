//! The gradient of a program, written once for wherever its matrices are kept (`Buffers`): the
//! forward pass is the program's loop (`program::Forward`), which copies, before each step, the
//! value its result replaces (when a gradient reads it) to the end of one matrix, the tape; the
//! backward pass restores those values in reverse order into the same matrices, so each step's
//! gradient reductions and the sums of their results into the adjoints read and write the same
//! memory at every iteration: their work, recorded at the first visit of the step (where the memory
//! records: a GPU), is issued again at the next ones. The host waits once, at the end (and where a
//! gradient is a plan of several runs, such as a log-sum-exp's: it runs on host data).

use std::time::Instant;

use super::step::{Group, How};
use super::{Backward, Gradients};
use crate::api::Input;
use crate::buffers::{Buffers, Sum};
use crate::error::{Error, Result};
use crate::formula::Category;
use crate::program::{self, CheckedRun, Forward, PhaseTotals, State};

pub(super) fn gradient<'a, M: Buffers<'a>>(b: &'a Backward<'a>, memory: M) -> Result<Gradients> {
    let p = b.program;
    // (the progress report counts the iterations forward, then backward)
    let run = CheckedRun { program: p, shapes: &b.shapes, step_options: &b.step_options, options: b.options, passes: 2 };
    let mut timings = PhaseTotals::default();
    let clock = Instant::now();
    let mut state = State::new(&run, &memory)?;
    let mut pass = Pass::new(b, &memory)?;
    timings.add(&[("upload once", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let mut keep = |s: usize, m: &M::Buffer| pass.keep(s, m);
    let forward = Forward { run: &run, memory: &memory }.run(&mut state, &mut timings, Some(&mut keep));
    // (the outputs' final values, copied before the backward pass restores earlier ones)
    let outputs = forward.and_then(|(done, _)| Ok((done, pass.copies(&state.current, &p.outputs)?)));
    let backward =
        outputs.and_then(|(done, outputs)| pass.backward(&mut state, done, &mut timings).map(|()| (done, outputs)));
    // Nothing queued may still use the matrices when they are read or freed.
    let waited = memory.synchronize();
    let (done, outputs) = backward?;
    waited?;
    timings.add(&[("forward and backward", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let adjoint = |x: usize| pass.adjoint[x].as_ref().expect("kept for wrt");
    let values = b.wrt.iter().map(|&x| memory.read(adjoint(x))).collect::<Result<_>>()?;
    let outputs = outputs.iter().map(|m| memory.read(m)).collect::<Result<_>>()?;
    timings.add(&[("download once", clock.elapsed().as_secs_f64())]);
    let backend = memory.describe();
    Ok(Gradients { values, outputs, shapes: b.output_shapes(), iterations: done, backend, timings: timings.0 })
}

/// The matrices of the backward pass and its recorded work.
struct Pass<'p, 'a, M: Buffers<'a>> {
    b: &'p Backward<'a>,
    memory: &'p M,
    /// Whether each step's replaced value is kept (`Backward::restores`).
    restores: Vec<bool>,
    /// The kept values, one after the other, and where each starts (in values).
    tape: M::Buffer,
    kept: Vec<(usize, usize)>,
    /// The adjoint of each buffer whose gradient is needed (of `of` and of `wrt`, of those the
    /// steps write).
    adjoint: Vec<Option<M::Buffer>>,
    /// Each step's gradient groups' results.
    results: Vec<Vec<M::Buffer>>,
    /// Each step's gradient reductions, recorded at its first visit when each of them can be.
    recorded: Vec<Option<Vec<M::Record>>>,
    /// Each step's sums of its gradients into the adjoints, its output's set (to zero, or to its
    /// own shares), the others' added to.
    sums: Vec<M::Record>,
}

impl<'p, 'a, M: Buffers<'a>> Pass<'p, 'a, M> {
    fn new(b: &'p Backward<'a>, memory: &'p M) -> Result<Self> {
        let p = b.program;
        let restores: Vec<bool> = (0..p.steps.len()).map(|s| b.restores(s)).collect();
        let per_iteration: usize =
            p.steps.iter().zip(&restores).filter(|(_, &r)| r).map(|(s, _)| b.len(s.output)).sum();
        let taped = per_iteration.saturating_mul(p.iterations);
        crate::memory::check_fits(
            taped.saturating_mul(8),
            "the gradient of the program, which keeps the values its steps replace",
        )?;
        let tape = memory.zeros(taped, 1).map_err(|e| {
            Error::Gpu(format!(
                "the gradient of the program keeps the values its steps replace ({per_iteration} values per iteration, {} iterations): {e}",
                p.iterations
            ))
        })?;
        let needed = |x: usize| x == b.of || b.wrt.contains(&x) || p.steps.iter().any(|s| s.output == x);
        let mut adjoint = Vec::with_capacity(p.buffers.len());
        for x in 0..p.buffers.len() {
            let (nrow, ncol) = b.shapes[x];
            adjoint.push(needed(x).then(|| memory.zeros(nrow, ncol)).transpose()?);
        }
        memory.write(adjoint[b.of].as_ref().expect("needed"), &b.seed)?;
        let results = (0..p.steps.len())
            .map(|s| b.steps[s].groups.iter().map(|g| memory.zeros(result_rows(b, s, g), g.width)).collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        let sums = (0..p.steps.len())
            .map(|s| memory.record_sums(&step_sums(b, s, &adjoint, &results[s])?))
            .collect::<Result<_>>()?;
        let recorded = p.steps.iter().map(|_| None).collect();
        Ok(Pass { b, memory, restores, tape, kept: Vec::new(), adjoint, results, recorded, sums })
    }

    /// Before step `s`: copies the value `m` it is about to replace to the end of the tape, when
    /// the backward pass restores it.
    fn keep(&mut self, s: usize, m: &M::Buffer) -> Result<()> {
        if !self.restores[s] {
            return Ok(());
        }
        let start = self.kept.last().map_or(0, |&(at, n)| at + n);
        let n = self.b.len(self.b.program.steps[s].output);
        self.memory.copy((m, 0), (&self.tape, start), n)?;
        self.kept.push((start, n));
        Ok(())
    }

    /// Copies of the matrices `which` of `current`.
    fn copies(&self, current: &[M::Buffer], which: &[usize]) -> Result<Vec<M::Buffer>> {
        let copied = |x: usize| {
            let (nrow, ncol) = self.b.shapes[x];
            let to = self.memory.zeros(nrow, ncol)?;
            self.memory.copy((&current[x], 0), (&to, 0), nrow * ncol)?;
            Ok(to)
        };
        which.iter().map(|&x| copied(x)).collect()
    }

    /// The backward pass over the `done` iterations of the forward pass.
    fn backward(&mut self, state: &mut State<M::Buffer>, done: usize, timings: &mut PhaseTotals) -> Result<()> {
        let (b, p) = (self.b, self.b.program);
        let mut live = b.live();
        let mut asked = Instant::now();
        for t in (0..done).rev() {
            for (x, value) in p.scheduled(t) {
                self.memory.write(&state.current[x], value)?;
            }
            for s in (0..p.steps.len()).rev() {
                if self.restores[s] {
                    let (at, n) = self.kept.pop().expect("one value kept per step that restores it");
                    self.memory.copy((&self.tape, at), (&state.current[p.steps[s].output], 0), n)?;
                }
                if b.visits(s, &mut live) {
                    self.step(s, state, timings)?;
                }
                program::interrupted(b.options, &mut asked)?;
            }
            // (queued, as forward)
            program::report(b.options, p.iterations + done - t, 2 * p.iterations);
        }
        program::report(b.options, 2 * p.iterations, 2 * p.iterations);
        Ok(())
    }

    /// The backward pass of step `s`: its gradient reductions (recorded the first time, where
    /// each can be and the options allow, and issued again since), then the sums into the adjoints.
    fn step(&mut self, s: usize, state: &State<M::Buffer>, timings: &mut PhaseTotals) -> Result<()> {
        match &self.recorded[s] {
            Some(records) => records.iter().try_for_each(|r| self.memory.replay(r))?,
            None => {
                let (b, step) = (self.b, &self.b.program.steps[s]);
                let options = &b.step_options[s];
                let e = self.adjoint[step.output].as_ref().expect("an adjoint for every output");
                let mut inputs: Vec<&M::Buffer> = step.inputs.iter().map(|&x| &state.current[x]).collect();
                inputs.push(e);
                let mut records = Some(Vec::new());
                for (group, result) in b.steps[s].groups.iter().zip(&self.results[s]) {
                    let record = match &group.how {
                        How::Fused(op) => {
                            let (phases, record) =
                                self.memory.evaluate_into(op, &inputs, options, result, options.tuning.replay)?;
                            timings.add(&phases);
                            record
                        }
                        How::Plan(_) => self.planned(s, group, &inputs, result).map(|()| None)?,
                    };
                    match (record, records.as_mut()) {
                        (Some(r), Some(all)) => all.push(r),
                        _ => records = None,
                    }
                }
                self.recorded[s] = records;
            }
        }
        self.memory.replay(&self.sums[s])
    }

    /// A gradient that is a plan of several runs (`How::Plan`), on host data: its result written
    /// into `result`.
    fn planned(&self, s: usize, group: &Group, inputs: &[&M::Buffer], result: &M::Buffer) -> Result<()> {
        let How::Plan(plan) = &group.how else { return Ok(()) };
        let step = &self.b.program.steps[s];
        let shapes: Vec<(usize, usize)> =
            step.inputs.iter().chain([&step.output]).map(|&x| self.b.shapes[x]).collect();
        let host: Vec<Vec<f64>> = inputs.iter().map(|&x| self.memory.read(x)).collect::<Result<_>>()?;
        let host: Vec<Input> = host.iter().zip(&shapes).map(|(v, &(nrow, ncol))| Input::host(v, nrow, ncol)).collect();
        let (values, _) = plan.evaluate(&host, &self.b.step_options[s])?;
        self.memory.write(result, &values)
    }
}

/// Whether step `s`'s input at `position` is a parameter (`Pm`).
fn is_parameter(b: &Backward, s: usize, position: usize) -> bool {
    b.program.steps[s].operator.formula.variables[position].category == Category::Param
}

/// The rows of the result of a group of step `s`'s gradients: those of its inputs' buffers, or one
/// for a parameter's (a sum over all the pairs).
fn result_rows(b: &Backward, s: usize, g: &Group) -> usize {
    let input = g.parts[0].input;
    match is_parameter(b, s, input) {
        true => 1,
        false => b.shapes[b.program.steps[s].inputs[input]].0,
    }
}

/// The sums of step `s`'s gradients (`results`, a block of columns per input) into the adjoints:
/// its output's adjoint is set (it holds no share of the earlier values), the others added to.
fn step_sums<'m, B>(b: &Backward, s: usize, adjoint: &'m [Option<B>], results: &'m [B]) -> Result<Vec<Sum<'m, B>>> {
    let step = &b.program.steps[s];
    let matrix = |x: usize| adjoint[x].as_ref().ok_or_else(|| Error::Invalid(format!("no adjoint for buffer {x}")));
    let mut sums = vec![Sum { to: matrix(step.output)?, set: true, from: vec![] }];
    let mut targets = vec![step.output];
    for (group, result) in b.steps[s].groups.iter().zip(results) {
        let rows = result_rows(b, s, group);
        for part in &group.parts {
            let x = step.inputs[part.input];
            // (each block of columns is added to an adjoint of as many values: a parameter's
            // values are those of its buffer, column-major)
            let fits = match is_parameter(b, s, part.input) {
                true => b.len(x) == part.dim,
                false => b.shapes[x] == (rows, part.dim),
            };
            if !fits {
                return Err(Error::Invalid(format!(
                    "step {}: a gradient of {rows} x {} for buffer '{}'",
                    s + 1,
                    part.dim,
                    b.program.buffers[x].name
                )));
            }
            let from = (result, part.column * rows);
            match targets.iter().position(|&t| t == x) {
                Some(k) => sums[k].from.push(from),
                None => {
                    targets.push(x);
                    sums.push(Sum { to: matrix(x)?, set: false, from: vec![from] });
                }
            }
        }
    }
    Ok(sums)
}

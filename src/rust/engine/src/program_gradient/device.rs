//! The gradient of a program on a GPU: the forward pass is the program's device loop, which copies,
//! before each step, the value its result replaces (when a gradient reads it) to the end of one
//! matrix, the tape; the backward pass restores those values in reverse order into the same
//! matrices, so each step's gradient reductions and the sums of their results into the adjoints
//! read and write the same memory at every iteration: their launches, recorded at the first visit
//! of the step, are issued again at the next ones. The host waits once, at the end.

use std::sync::Arc;
use std::time::Instant;

use super::step::How;
use super::{Backward, Gradients};
use crate::api::Input;
use crate::cuda::device::Device;
use crate::cuda::elementwise::{self, copy, Sum};
use crate::cuda::recorded::Recorded;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};
use crate::program::{self, DeviceLoop, DeviceState, CheckedRun, PhaseTotals, INTERRUPT_EVERY};

/// Whether the device path can run the backward pass of `b`: every step's gradients are fused
/// reductions, and no adjoint receives more shares from one step than one launch of sums takes.
pub(super) fn fits(b: &Backward) -> bool {
    b.program.steps.iter().zip(&b.steps).all(|(step, g)| {
        let shares = |x: usize| g.groups.iter().flat_map(|g| &g.parts).filter(|p| step.inputs[p.input] == x).count();
        g.fused() && step.inputs.iter().all(|&x| shares(x) <= elementwise::SOURCES)
    })
}

pub(super) fn gradient(b: &Backward, device: Arc<Device>) -> Result<Gradients> {
    let p = b.program;
    // (the progress report counts the iterations forward, then backward)
    let run = CheckedRun { program: p, shapes: &b.shapes, step_options: &b.step_options, options: b.options, passes: 2 };
    let mut timings = PhaseTotals::default();
    let clock = Instant::now();
    let mut state = DeviceState::new(&run, &device)?;
    let mut pass = Pass::new(b, &device)?;
    timings.add(&[("upload once", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let mut keep = |s: usize, m: &DeviceMatrix| pass.keep(s, m);
    let forward = DeviceLoop { run: &run, device: &device }.run(&mut state, &mut timings, Some(&mut keep));
    // (the outputs' final values, copied before the backward pass restores earlier ones)
    let outputs = forward.and_then(|(done, _)| Ok((done, pass.copies(&state.current, &p.outputs)?)));
    let backward = outputs.and_then(|(done, outputs)| pass.backward(&mut state, done).map(|()| (done, outputs)));
    // Nothing queued may still use the matrices when they are read or freed.
    let waited = device.synchronize();
    let (done, outputs) = backward?;
    waited?;
    timings.add(&[("forward and backward on the GPU", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let values =
        b.wrt.iter().map(|&x| pass.adjoint[x].as_ref().expect("kept for wrt").to_host()).collect::<Result<_>>()?;
    let outputs = outputs.iter().map(DeviceMatrix::to_host).collect::<Result<_>>()?;
    timings.add(&[("download once", clock.elapsed().as_secs_f64())]);
    let backend = format!("GPU {} ({})", device.ordinal, device.name);
    Ok(Gradients { values, outputs, shapes: b.output_shapes(), iterations: done, backend, timings: timings.0 })
}

/// The matrices of the backward pass and its recorded launches.
struct Pass<'a> {
    b: &'a Backward<'a>,
    device: &'a Arc<Device>,
    /// Whether each step's replaced value is kept (`Backward::restores`).
    restores: Vec<bool>,
    /// The kept values, one after the other, and where each starts (in values).
    tape: DeviceMatrix,
    kept: Vec<(usize, usize)>,
    /// The adjoint of each buffer whose gradient is needed (of `of` and of `wrt`, of those the
    /// steps write).
    adjoint: Vec<Option<DeviceMatrix>>,
    /// Each step's gradient groups' results.
    results: Vec<Vec<DeviceMatrix>>,
    /// Each step's gradient reductions, recorded at its first visit.
    recorded: Vec<Option<Vec<Recorded>>>,
    /// Each step's sums of its gradients into the adjoints, its output's set (to zero, or to its
    /// own shares), the others' added to.
    sums: Vec<Recorded>,
}

impl<'a> Pass<'a> {
    fn new(b: &'a Backward<'a>, device: &'a Arc<Device>) -> Result<Pass<'a>> {
        let p = b.program;
        let precision = b.options.precision;
        let zeros = |nrow: usize, ncol: usize| DeviceMatrix::zeros(device.clone(), nrow.max(1), ncol.max(1), precision);
        let restores: Vec<bool> = (0..p.steps.len()).map(|s| b.restores(s)).collect();
        let per_iteration: usize =
            p.steps.iter().zip(&restores).filter(|(_, &r)| r).map(|(s, _)| b.len(s.output)).sum();
        let tape = zeros(per_iteration.saturating_mul(p.iterations), 1).map_err(|e| {
            Error::Gpu(format!(
                "the gradient of the program keeps the values its steps replace ({per_iteration} values per iteration, {} iterations): {e}",
                p.iterations
            ))
        })?;
        let needed = |x: usize| x == b.of || b.wrt.contains(&x) || p.steps.iter().any(|s| s.output == x);
        let mut adjoint = Vec::with_capacity(p.buffers.len());
        for x in 0..p.buffers.len() {
            let (nrow, ncol) = b.shapes[x];
            adjoint.push(match needed(x) {
                true if x == b.of => Some(DeviceMatrix::new(device.clone(), &b.seed, nrow, ncol, precision)?),
                true => Some(zeros(nrow, ncol)?),
                false => None,
            });
        }
        let rows = |s: usize, g: &super::step::Group| b.shapes[p.steps[s].inputs[g.parts[0].input]].0;
        let results = (0..p.steps.len())
            .map(|s| b.steps[s].groups.iter().map(|g| zeros(rows(s, g), g.width)).collect::<Result<Vec<_>>>())
            .collect::<Result<Vec<_>>>()?;
        let sums = (0..p.steps.len())
            .map(|s| elementwise::sums(device, &step_sums(b, s, &adjoint, &results[s])?, precision))
            .collect::<Result<_>>()?;
        let recorded = p.steps.iter().map(|_| None).collect();
        Ok(Pass { b, device, restores, tape, kept: Vec::new(), adjoint, results, recorded, sums })
    }

    /// Before step `s`: copies the value `m` it is about to replace to the end of the tape, when
    /// the backward pass restores it.
    fn keep(&mut self, s: usize, m: &DeviceMatrix) -> Result<()> {
        if !self.restores[s] {
            return Ok(());
        }
        let start = self.kept.last().map_or(0, |&(at, n)| at + n);
        let n = m.nrow * m.ncol;
        copy(self.device, n, m.pointer(), self.tape.pointer_at(start), m.precision)?;
        self.kept.push((start, n));
        Ok(())
    }

    /// Copies of the matrices `which` of `current`.
    fn copies(&self, current: &[DeviceMatrix], which: &[usize]) -> Result<Vec<DeviceMatrix>> {
        let copied = |m: &DeviceMatrix| {
            let to = DeviceMatrix::zeros(self.device.clone(), m.nrow, m.ncol, m.precision)?;
            copy(self.device, m.nrow * m.ncol, m.pointer(), to.pointer(), m.precision)?;
            Ok(to)
        };
        which.iter().map(|&x| copied(&current[x])).collect()
    }

    /// The backward pass over the `done` iterations of the forward pass.
    fn backward(&mut self, state: &mut DeviceState, done: usize) -> Result<()> {
        let (b, p) = (self.b, self.b.program);
        let mut live = b.live();
        let mut asked = Instant::now();
        for t in (0..done).rev() {
            for (x, value) in p.scheduled(t) {
                state.current[x].write(value)?;
            }
            for s in (0..p.steps.len()).rev() {
                if self.restores[s] {
                    let (at, n) = self.kept.pop().expect("one value kept per step that restores it");
                    let restored = &state.current[p.steps[s].output];
                    copy(self.device, n, self.tape.pointer_at(at), restored.pointer(), restored.precision)?;
                }
                if b.visits(s, &mut live) {
                    self.step(s, state)?;
                }
                if let Some(interrupted) = b.options.interrupt.filter(|_| asked.elapsed() >= INTERRUPT_EVERY) {
                    if interrupted() {
                        return Err(Error::Interrupted);
                    }
                    asked = Instant::now();
                }
            }
            // (queued, as forward)
            program::report(b.options, p.iterations + done - t, 2 * p.iterations);
        }
        program::report(b.options, 2 * p.iterations, 2 * p.iterations);
        Ok(())
    }

    /// The backward pass of step `s`: its gradient reductions (recorded the first time, when the
    /// options allow, and issued again since), then the sums into the adjoints.
    fn step(&mut self, s: usize, state: &DeviceState) -> Result<()> {
        match &self.recorded[s] {
            Some(records) => records.iter().try_for_each(|r| r.replay(self.device))?,
            None => {
                let (b, step) = (self.b, &self.b.program.steps[s]);
                let options = &b.step_options[s];
                let record = options.tuning.replay;
                let e = self.adjoint[step.output].as_ref().expect("an adjoint for every output");
                let mut inputs: Vec<Input> = step.inputs.iter().map(|&x| Input::device(&state.current[x])).collect();
                inputs.push(Input::device(e));
                let mut records = Vec::new();
                for (group, result) in b.steps[s].groups.iter().zip(&self.results[s]) {
                    let How::Fused(op) = &group.how else { unreachable!("checked by fits()") };
                    let mut launches = None;
                    op.run_into(&inputs, options, result, record.then_some(&mut launches))?;
                    records.extend(launches);
                }
                if record {
                    self.recorded[s] = Some(records);
                }
            }
        }
        self.sums[s].replay(self.device)
    }
}

/// The sums of step `s`'s gradients (`results`, a block of columns per input) into the adjoints:
/// its output's adjoint is set (it holds no share of the earlier values), the others added to.
fn step_sums(b: &Backward, s: usize, adjoint: &[Option<DeviceMatrix>], results: &[DeviceMatrix]) -> Result<Vec<Sum>> {
    let step = &b.program.steps[s];
    let matrix = |x: usize| adjoint[x].as_ref().ok_or_else(|| Error::Invalid(format!("no adjoint for buffer {x}")));
    let out = matrix(step.output)?;
    let mut sums = vec![Sum { to: out.pointer(), n: out.nrow * out.ncol, set: true, from: vec![] }];
    for (group, result) in b.steps[s].groups.iter().zip(results) {
        for part in &group.parts {
            let to = matrix(step.inputs[part.input])?;
            // (each block of columns is added to an adjoint of as many values)
            if to.ncol != part.dim || to.nrow != result.nrow {
                return Err(Error::Invalid(format!(
                    "step {}: a gradient of {} x {} for buffer '{}'",
                    s + 1,
                    result.nrow,
                    part.dim,
                    b.program.buffers[step.inputs[part.input]].name
                )));
            }
            let from = result.pointer_at(part.column * result.nrow);
            match sums.iter_mut().find(|sum| sum.to == to.pointer()) {
                Some(sum) => sum.from.push(from),
                None => sums.push(Sum { to: to.pointer(), n: to.nrow * to.ncol, set: false, from: vec![from] }),
            }
        }
    }
    Ok(sums)
}

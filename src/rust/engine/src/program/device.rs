//! A program on a GPU: every buffer on the device for the whole program (see the module's notes).
//! The gradient of a program (`crate::program_gradient`) runs its forward pass with this loop too,
//! keeping the value each step replaces.

use std::sync::Arc;
use std::time::Instant;

use super::{ProgramResult, CheckedRun, PhaseTotals, INTERRUPT_EVERY};
use crate::api::{Input, Values};
use crate::cuda::device::Device;
use crate::cuda::elementwise;
use crate::cuda::recorded::Recorded;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};

/// The buffers of a program on the device: the current value of each, and for each buffer that a
/// step writes, a second matrix that receives the step's result before it becomes the current one
/// (a kernel may read the value it replaces).
pub(crate) struct DeviceState {
    pub current: Vec<DeviceMatrix>,
    next: Vec<Option<DeviceMatrix>>,
}

/// Called before each step with its number and the value its result is about to replace.
pub(crate) type Keep<'k> = &'k mut dyn FnMut(usize, &DeviceMatrix) -> Result<()>;

impl DeviceState {
    /// The buffers of `run`'s program on `device`, from their initial values (zeros for the others).
    /// An initial value kept on the device is copied there (the program writes its buffers).
    pub(crate) fn new(run: &CheckedRun, device: &Arc<Device>) -> Result<DeviceState> {
        let p = run.program;
        let precision = run.options.precision;
        let zeros = |b: usize| {
            let (nrow, ncol) = run.shapes[b];
            DeviceMatrix::zeros(device.clone(), nrow.max(1), ncol.max(1), precision)
        };
        let initial = |b: usize| match p.buffers[b].initial.map(|x| x.values) {
            Some(Values::Host(d)) => DeviceMatrix::new(device.clone(), d, run.shapes[b].0, run.shapes[b].1, precision),
            Some(Values::Device(kept)) => {
                if kept.ordinal() != device.ordinal || kept.precision != precision {
                    return Err(p.buffers[b].kept_elsewhere(kept.where_(), &format!("GPU {}", device.ordinal), precision));
                }
                let copy = zeros(b)?;
                elementwise::copy(device, kept.nrow * kept.ncol, kept.pointer(), copy.pointer(), precision)?;
                Ok(copy)
            }
            None => zeros(b),
        };
        let written = |b: usize| p.steps.iter().any(|s| s.output == b);
        let current = (0..p.buffers.len()).map(initial).collect::<Result<_>>()?;
        let next = (0..p.buffers.len()).map(|b| written(b).then(|| zeros(b)).transpose()).collect::<Result<_>>()?;
        Ok(DeviceState { current, next })
    }
}

impl CheckedRun<'_> {
    /// Every buffer on the device for the whole program (see the module's notes).
    pub(super) fn on_device(&self, device: Arc<Device>) -> Result<ProgramResult> {
        let clock = Instant::now();
        let mut state = DeviceState::new(self, &device)?;
        let mut timings = PhaseTotals::default();
        timings.add(&[("upload once", clock.elapsed().as_secs_f64())]);
        let clock = Instant::now();
        let looped = DeviceLoop { run: self, device: &device }.run(&mut state, &mut timings, None);
        // Nothing queued may still use the buffers when they are read or freed.
        let waited = device.synchronize();
        let (done, trace) = looped?;
        waited?;
        timings.add(&[("loop on the GPU", clock.elapsed().as_secs_f64())]);
        let clock = Instant::now();
        let outputs = self.program.outputs.iter().map(|&b| state.current[b].to_host()).collect::<Result<_>>()?;
        timings.add(&[("download once", clock.elapsed().as_secs_f64())]);
        Ok(self.result(outputs, done, trace, format!("GPU {} ({})", device.ordinal, device.name), timings))
    }
}

/// The loop of a program on the device.
pub(crate) struct DeviceLoop<'a> {
    pub run: &'a CheckedRun<'a>,
    pub device: &'a Device,
}

impl DeviceLoop<'_> {
    /// Runs the iterations (queued: wait for the device before reading or freeing `state`), with
    /// `keep` called before each step; returns how many ran and the trace.
    pub(crate) fn run(
        &self,
        state: &mut DeviceState,
        timings: &mut PhaseTotals,
        mut keep: Option<Keep>,
    ) -> Result<(usize, Vec<Vec<f64>>)> {
        let CheckedRun { program: p, options, .. } = *self.run;
        // Each step's launches, recorded in the first two iterations (its output buffer alternates
        // between two matrices), are issued again from the third on.
        let mut recorded: Vec<[Option<Recorded>; 2]> = p.steps.iter().map(|_| [None, None]).collect();
        let mut asked = Instant::now();
        let mut trace: Vec<Vec<f64>> = vec![Vec::new(); p.trace.len()];
        let mut done = 0;
        while done < p.iterations {
            for (b, value) in p.scheduled(done) {
                state.current[b].write(value)?;
            }
            for (s, records) in recorded.iter_mut().enumerate() {
                if let Some(keep) = keep.as_mut() {
                    keep(s, &state.current[p.steps[s].output])?;
                }
                self.step(s, state, &mut records[done % 2], timings)?;
                if let Some(interrupted) = options.interrupt.filter(|_| asked.elapsed() >= INTERRUPT_EVERY) {
                    if interrupted() {
                        return Err(Error::Interrupted);
                    }
                    asked = Instant::now();
                }
            }
            if !p.trace.is_empty() {
                self.device.synchronize()?;
                for (t, &b) in trace.iter_mut().zip(&p.trace) {
                    t.extend(state.current[b].to_host()?);
                }
            }
            done += 1;
            let stop_values = || {
                self.device.synchronize()?;
                p.stop.map_or(Ok(Vec::new()), |s| state.current[s.buffer].to_host())
            };
            if self.run.stops(done - 1, stop_values)? {
                break;
            }
            // (queued: the bar can run ahead of the device by the launches queued)
            self.run.report(done);
        }
        self.run.report(p.iterations);
        Ok((done, trace))
    }

    /// Step `s`: its result into the `next` matrix of its output, which then becomes the current one.
    fn step(
        &self,
        s: usize,
        state: &mut DeviceState,
        record: &mut Option<Recorded>,
        timings: &mut PhaseTotals,
    ) -> Result<()> {
        let step = &self.run.program.steps[s];
        let options = &self.run.step_options[s];
        let target = state.next[step.output].take().expect("allocated for every output");
        let issued = match record.as_ref() {
            Some(launches) => launches.replay(self.device),
            None => {
                let inputs: Vec<Input> = step.inputs.iter().map(|&b| Input::device(&state.current[b])).collect();
                let replay = options.tuning.replay;
                step.operator
                    .run_into(&inputs, options, &target, replay.then_some(record))
                    .map(|out| timings.add(&out.timings))
            }
        };
        state.next[step.output] = Some(std::mem::replace(&mut state.current[step.output], target));
        issued
    }
}

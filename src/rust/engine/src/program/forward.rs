//! The loop of a program, written once for wherever its matrices are kept (`Buffers`: on one GPU,
//! or in host memory with each step a plain call). Every buffer is a matrix of that memory for the
//! whole program: each step writes its result into a second matrix (a kernel may read the value it
//! replaces), which then becomes the current one; its work, recorded in the first two iterations
//! where the memory records (the GPU), is issued again from the third on, with no checks, packing or
//! waits. The host waits only to test the stopping rule, to trace (where work is queued, for the
//! iteration before the one just queued: `Tuning::late_checks`), and at the end. The gradient of a
//! program (`crate::program_gradient`) runs its forward pass with this loop too, keeping the value
//! each step replaces.

use std::time::Instant;

use super::{CheckedRun, PhaseTotals, ProgramResult};
use crate::api::Values;
use crate::buffers::Buffers;
use crate::error::Result;

/// The buffers of a program: the current value of each, and for each buffer that a step writes, a
/// second matrix that receives the step's result before it becomes the current one.
pub(crate) struct State<B> {
    pub current: Vec<B>,
    next: Vec<Option<B>>,
}

/// Called before each step with its number and the value its result is about to replace.
pub(crate) type Keep<'k, B> = &'k mut dyn FnMut(usize, &B) -> Result<()>;

impl<B> State<B> {
    /// The buffers of `run`'s program in `memory`, from their initial values (zeros for the
    /// others). An initial value kept on a device is copied (the program writes its buffers).
    pub(crate) fn new<'a, M: Buffers<'a, Buffer = B>>(run: &CheckedRun<'a>, memory: &M) -> Result<State<B>> {
        let p = run.program;
        let precision = run.options.precision;
        let zeros = |b: usize| memory.zeros(run.shapes[b].0, run.shapes[b].1);
        let initial = |b: usize| match p.buffers[b].initial.map(|x| x.values) {
            Some(Values::Host(d)) => memory.put(d, run.shapes[b].0, run.shapes[b].1),
            Some(Values::Device(kept)) if kept.precision() != precision || !memory.reads(kept) => {
                Err(p.buffers[b].kept_elsewhere(kept.where_(), &memory.describe(), precision))
            }
            Some(Values::Device(kept)) => memory.adopt(kept),
            None => zeros(b),
        };
        let written = |b: usize| p.steps.iter().any(|s| s.output == b);
        let current = (0..p.buffers.len()).map(initial).collect::<Result<_>>()?;
        let next = (0..p.buffers.len()).map(|b| written(b).then(|| zeros(b)).transpose()).collect::<Result<_>>()?;
        Ok(State { current, next })
    }

    /// The matrix that received a step's result becomes the current value of `output`.
    fn advance(&mut self, output: usize) {
        let target = self.next[output].take().expect("allocated for every output");
        self.next[output] = Some(std::mem::replace(&mut self.current[output], target));
    }
}

/// Iterations left when an iteration is joined into one record: each parity's runs at least twice
/// (making a graph costs about as much as issuing its launches once).
const JOINED_AFTER: usize = 4;

/// Runs a checked program with its matrices in `memory`.
pub(crate) fn run<'a, M: Buffers<'a>>(run: &CheckedRun<'a>, memory: M) -> Result<ProgramResult> {
    let clock = Instant::now();
    let mut state = State::new(run, &memory)?;
    let mut timings = PhaseTotals::default();
    timings.add(&[("upload once", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let looped = Forward { run, memory: &memory }.run(&mut state, &mut timings, None);
    // Nothing queued may still use the buffers when they are read or freed.
    let waited = memory.synchronize();
    let (done, trace) = looped?;
    waited?;
    timings.add(&[("loop", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let outputs = run.program.outputs.iter().map(|&b| memory.read(&state.current[b])).collect::<Result<_>>()?;
    timings.add(&[("download once", clock.elapsed().as_secs_f64())]);
    Ok(run.result(outputs, done, trace, memory.describe(), timings))
}

/// The values an iteration's checks read, on their way to the host: each traced buffer's, and the
/// stopping rule's where it tests iteration `t`.
struct Checks<F> {
    t: usize,
    traced: Vec<F>,
    stop: Option<F>,
}

/// The loop of a program.
pub(crate) struct Forward<'r, 'a, M> {
    pub run: &'r CheckedRun<'a>,
    pub memory: &'r M,
}

impl<'a, M: Buffers<'a>> Forward<'_, 'a, M> {
    /// Runs the iterations (queued: wait before reading or freeing `state`), with `keep` called
    /// before each step; returns how many ran and the trace.
    pub(crate) fn run(
        &self,
        state: &mut State<M::Buffer>,
        timings: &mut PhaseTotals,
        mut keep: Option<Keep<M::Buffer>>,
    ) -> Result<(usize, Vec<Vec<f64>>)> {
        let CheckedRun { program: p, options, .. } = *self.run;
        // Each step's work, recorded in the first two iterations (its output buffer alternates
        // between two matrices), is issued again from the third on.
        let mut recorded: Vec<[Option<M::Record>; 2]> = p.steps.iter().map(|_| [None, None]).collect();
        // From then on, each parity's iteration as one record where the memory joins them (a CUDA
        // graph); declared after `recorded`, so dropped before the records it issues.
        let mut joined: [Option<M::Record>; 2] = [None, None];
        let mut join = keep.is_none() && options.tuning.graphs;
        let mut asked = Instant::now();
        let mut trace: Vec<Vec<f64>> = vec![Vec::new(); p.trace.len()];
        // With late checks, an iteration's trace and stopping rule are read once the next iteration
        // is queued (the device stays busy while the host reads); that iteration is undone when the
        // rule ends the loop.
        let late = keep.is_none() && options.tuning.late_checks.unwrap_or(self.memory.queues()) && self.undoable();
        let mut unread: Option<Checks<M::Fetch>> = None;
        let mut done = 0;
        while done < p.iterations {
            for (b, value) in p.scheduled(done) {
                self.memory.write(&state.current[b], value)?;
            }
            let parity = done % 2;
            let ready = recorded.iter().all(|r| r[parity].is_some());
            if join && joined[parity].is_none() && ready && p.iterations - done >= JOINED_AFTER {
                let parts: Vec<&M::Record> = recorded.iter().filter_map(|r| r[parity].as_ref()).collect();
                // (an optimisation: where it fails, the steps are replayed one by one)
                joined[parity] = self.memory.join(&parts).unwrap_or(None);
                join = joined[parity].is_some();
            }
            match &joined[parity] {
                Some(iteration) => {
                    self.memory.replay(iteration)?;
                    p.steps.iter().for_each(|step| state.advance(step.output));
                    super::interrupted(options, &mut asked)?;
                }
                None => {
                    for (s, records) in recorded.iter_mut().enumerate() {
                        if let Some(keep) = keep.as_mut() {
                            keep(s, &state.current[p.steps[s].output])?;
                        }
                        self.step(s, state, &mut records[parity], timings)?;
                        super::interrupted(options, &mut asked)?;
                    }
                }
            }
            let checks = self.fetch_checks(state, done)?;
            done += 1;
            let ready = if late { unread.replace(checks) } else { Some(checks) };
            if let Some(checks) = ready {
                if self.read_checks(checks, &mut trace)? {
                    if unread.take().is_some() {
                        // (the iteration after the one that ended the loop)
                        p.steps.iter().rev().for_each(|step| state.advance(step.output));
                        done -= 1;
                    }
                    break;
                }
            }
            // (queued: the bar can run ahead of the device by the work queued)
            self.run.report(done);
        }
        if let Some(checks) = unread {
            self.read_checks(checks, &mut trace)?;
        }
        self.run.report(p.iterations);
        Ok((done, trace))
    }

    /// Whether an iteration can be undone once queued: each buffer written by one step only (so
    /// that its value before the iteration stays in its other matrix, which `State::advance` swaps
    /// back) and no buffer the program returns given a schedule (whose next value would be written).
    fn undoable(&self) -> bool {
        let p = self.run.program;
        let mut written = vec![false; p.buffers.len()];
        let once = p.steps.iter().all(|s| !std::mem::replace(&mut written[s.output], true));
        once && p.outputs.iter().all(|&b| p.buffers[b].schedule.is_none())
    }

    /// Queues the reads of iteration `t`'s checks: its traced buffers, and the stopping rule's
    /// buffer where the rule tests this iteration.
    fn fetch_checks(&self, state: &State<M::Buffer>, t: usize) -> Result<Checks<M::Fetch>> {
        let p = self.run.program;
        let traced = p.trace.iter().map(|&b| self.memory.fetch(&state.current[b])).collect::<Result<_>>()?;
        let stop = match p.stop.filter(|s| (t + 1).is_multiple_of(s.every)) {
            Some(s) => Some(self.memory.fetch(&state.current[s.buffer])?),
            None => None,
        };
        Ok(Checks { t, traced, stop })
    }

    /// Adds the checks' traced values to `trace`; whether the stopping rule ends the loop there.
    fn read_checks(&self, checks: Checks<M::Fetch>, trace: &mut [Vec<f64>]) -> Result<bool> {
        for (t, fetch) in trace.iter_mut().zip(checks.traced) {
            t.extend(self.memory.fetched(fetch)?);
        }
        let mut stop = checks.stop.map(|f| self.memory.fetched(f));
        self.run.stops(checks.t, || stop.take().unwrap_or_else(|| Ok(Vec::new())))
    }

    /// Step `s`: its result into the `next` matrix of its output, which then becomes the current one.
    fn step(
        &self,
        s: usize,
        state: &mut State<M::Buffer>,
        record: &mut Option<M::Record>,
        timings: &mut PhaseTotals,
    ) -> Result<()> {
        let step = &self.run.program.steps[s];
        let options = &self.run.step_options[s];
        let issued = match record.as_ref() {
            Some(work) => self.memory.replay(work),
            None => {
                let target = state.next[step.output].as_ref().expect("allocated for every output");
                let inputs: Vec<&M::Buffer> = step.inputs.iter().map(|&b| &state.current[b]).collect();
                self.memory.evaluate_into(step.operator, &inputs, options, target, options.tuning.replay).map(
                    |(phases, work)| {
                        timings.add(&phases);
                        *record = work;
                    },
                )
            }
        };
        state.advance(step.output);
        issued
    }
}

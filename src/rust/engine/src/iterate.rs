//! Loops of reductions run in the engine. Fixed-point algorithms such as log-domain Sinkhorn
//! alternate reductions, each result an input of the next (a potential is a LogSumExp over the
//! other). Called once per reduction from R, every step pays a call's fixed costs (R, conversion,
//! transfers, a synchronisation), which on small problems are most of the time. Here the whole
//! loop is one call: on a GPU every input is uploaded once and the iterated values stay on the
//! device from one reduction to the next; elsewhere each step is a plain run on host data.

use std::time::{Duration, Instant};

use crate::api::{Input, RunOptions};
use crate::precision::Precision;
use crate::cuda;
use crate::cuda::recorded::Recorded;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};
use crate::operator::Operator;
use crate::ranges::Ranges;
use crate::reduction::SumScheme;

/// Where an input of a step comes from.
#[derive(Debug, Clone, Copy)]
pub enum Source<'a> {
    /// Data that does not change during the loop.
    Host(Input<'a>),
    /// The current value of an iterated variable (an index into the states).
    State(usize),
}

/// One reduction of the loop: its result replaces the state `output`.
#[derive(Debug, Clone)]
pub struct Step<'a> {
    pub operator: &'a Operator,
    pub inputs: Vec<Source<'a>>,
    pub output: usize,
    pub sum_scheme: SumScheme,
    pub ranges: Option<Ranges>,
}

/// The final values of the states (column-major, shaped as given), what computed them and the
/// seconds of each phase summed over the loop.
#[derive(Debug, Clone)]
pub struct Iterated {
    pub states: Vec<Vec<f64>>,
    pub backend: String,
    pub timings: Vec<(&'static str, f64)>,
}

/// How often a loop on the GPU asks `RunOptions::interrupt` whether to stop.
const INTERRUPT_EVERY: Duration = Duration::from_millis(10);

/// Runs the steps in order, `iterations` times, from the initial values `states` (the ranges and
/// sum scheme of each step replace those of `options`). Each step's reduction must return values
/// only (no indices, no K-selection) of the shape of the state it replaces.
pub fn iterate(steps: &[Step], states: &[Input], iterations: usize, options: &RunOptions) -> Result<Iterated> {
    check(steps, states)?;
    let step_options: Vec<RunOptions> = steps
        .iter()
        .map(|s| RunOptions { sum_scheme: s.sum_scheme, ranges: s.ranges.clone(), ..options.clone() })
        .collect();
    let gpu = crate::operator::chosen_gpu(options)?;
    // float16 storage computes in float32: its results cannot be stored back in float16 on the
    // device without a rounding that a plain call would not make, so that loop runs on host data.
    match gpu {
        Some(device) if options.precision != Precision::F16 => {
            on_device(steps, &step_options, states, iterations, options, device)
        }
        _ => on_host(steps, &step_options, states, iterations),
    }
}

/// The checks that do not need the data: sources, shapes, reductions.
fn check(steps: &[Step], states: &[Input]) -> Result<()> {
    let invalid = |s: usize, what: String| Err(Error::Invalid(format!("step {} of the loop: {what}", s + 1)));
    for (s, step) in steps.iter().enumerate() {
        let red = &step.operator.formula.reduction;
        if !red.kind.returns_values() || red.kind.returns_indices() || red.kind.is_k_selection() {
            return invalid(
                s,
                format!(
                    "{:?} cannot be iterated: only reductions that return one value per row (or vector) can",
                    red.kind
                ),
            );
        }
        let Some(out) = states.get(step.output) else {
            return invalid(s, format!("it replaces state {} of {}", step.output + 1, states.len()));
        };
        let inputs = step
            .inputs
            .iter()
            .map(|source| match *source {
                Source::Host(x) => Ok(x),
                Source::State(k) => states.get(k).copied().ok_or(()),
            })
            .collect::<std::result::Result<Vec<Input>, ()>>();
        let Ok(inputs) = inputs else {
            return invalid(s, format!("an input is a state that does not exist ({} states)", states.len()));
        };
        let (n_i, n_j) = step.operator.check_inputs(&inputs)?;
        if let Some(ranges) = &step.ranges {
            ranges.validate(n_i, n_j)?;
        }
        let shape = (if red.axis == 0 { n_i } else { n_j }, step.operator.formula.output_dim());
        if (out.nrow, out.ncol) != shape {
            return invalid(
                s,
                format!(
                    "its result is {} x {}, but the value it replaces is {} x {}",
                    shape.0, shape.1, out.nrow, out.ncol
                ),
            );
        }
    }
    Ok(())
}

/// Each step a plain run on host data (the CPU, or a GPU in float16).
fn on_host(steps: &[Step], step_options: &[RunOptions], states: &[Input], iterations: usize) -> Result<Iterated> {
    let mut values: Vec<Vec<f64>> = states.iter().map(|x| host(x).map(<[f64]>::to_vec)).collect::<Result<_>>()?;
    let mut timings = Timings::default();
    let mut backend = "CPU".to_string();
    for _ in 0..iterations {
        for (step, options) in steps.iter().zip(step_options) {
            let inputs: Vec<Input> = step
                .inputs
                .iter()
                .map(|source| match *source {
                    Source::Host(x) => x,
                    Source::State(k) => Input::host(&values[k], states[k].nrow, states[k].ncol),
                })
                .collect();
            let out = step.operator.run(&inputs, options)?;
            timings.add(&out.timings);
            backend = out.backend;
            values[step.output] = out.values.expect("checked: the reduction returns values");
        }
    }
    Ok(Iterated { states: values, backend, timings: timings.0 })
}

/// Every input uploaded once, the states kept on the device; each step writes its result into a
/// second buffer of its state, then the two are swapped (a kernel may read the state it replaces).
/// The steps are queued on the device's stream without waiting for one another: one wait at the
/// end (a step's kernels take microseconds, as long as a wait).
fn on_device(
    steps: &[Step],
    step_options: &[RunOptions],
    states: &[Input],
    iterations: usize,
    options: &RunOptions,
    device: std::sync::Arc<cuda::device::Device>,
) -> Result<Iterated> {
    let clock = Instant::now();
    let keep = |x: &Input| DeviceMatrix::new(device.clone(), host(x)?, x.nrow, x.ncol, options.precision);
    let kept_inputs: Vec<Vec<Option<DeviceMatrix>>> = steps
        .iter()
        .map(|step| {
            step.inputs
                .iter()
                .map(|source| match source {
                    Source::Host(x) => keep(x).map(Some),
                    Source::State(_) => Ok(None),
                })
                .collect()
        })
        .collect::<Result<_>>()?;
    let mut current: Vec<DeviceMatrix> = states.iter().map(keep).collect::<Result<_>>()?;
    let mut next: Vec<Option<DeviceMatrix>> = (0..states.len())
        .map(|k| match steps.iter().any(|s| s.output == k) {
            true => keep(&Input::host(&vec![0.0; states[k].nrow * states[k].ncol], states[k].nrow, states[k].ncol)).map(Some),
            false => Ok(None),
        })
        .collect::<Result<_>>()?;
    let mut timings = Timings::default();
    timings.add(&[("upload once", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    // Each step's launches of the first two iterations, recorded: the buffers of the iterated
    // values are swapped at every step that replaces one, so that every later iteration issues the
    // launches of the one two before it, on the same buffers. Freed only after the wait below.
    let mut recorded: Vec<[Option<Recorded>; 2]> = steps.iter().map(|_| [None, None]).collect();
    let device_loop =
        DeviceLoop { steps, step_options, iterations, options, kept_inputs: &kept_inputs, device: &device };
    let looped = device_loop.run((&mut current[..], &mut next[..]), &mut recorded);
    // Nothing queued may still use the buffers when they are read or freed.
    let waited = device.synchronize();
    looped?;
    waited?;
    timings.add(&[("loop on the GPU", clock.elapsed().as_secs_f64())]);
    let clock = Instant::now();
    let values = current.iter().map(DeviceMatrix::to_host).collect::<Result<_>>()?;
    timings.add(&[("download once", clock.elapsed().as_secs_f64())]);
    Ok(Iterated { states: values, backend: format!("GPU {} ({})", device.ordinal, device.name), timings: timings.0 })
}

/// The loop of `on_device`: its steps, their options, the number of iterations, the inputs each
/// step keeps on the device.
struct DeviceLoop<'a> {
    steps: &'a [Step<'a>],
    step_options: &'a [RunOptions],
    iterations: usize,
    options: &'a RunOptions,
    kept_inputs: &'a [Vec<Option<DeviceMatrix>>],
    device: &'a cuda::device::Device,
}

impl DeviceLoop<'_> {
    /// Queues the loop's steps, each writing the `next` buffer of its output, which then becomes
    /// the `current` one; each step's launches of the first two iterations are recorded, and
    /// replayed by the later ones.
    fn run(
        &self,
        (current, next): (&mut [DeviceMatrix], &mut [Option<DeviceMatrix>]),
        recorded: &mut [[Option<Recorded>; 2]],
    ) -> Result<()> {
        let DeviceLoop { steps, step_options, iterations, options, kept_inputs, device } = *self;
        let mut asked = Instant::now();
        // Tuning::replay false (RKEOPS_GPU_REPLAY=0) runs every step as a call, as before the records
        // (for benchmarks).
        let replay = options.tuning.replay;
        for iteration in 0..iterations {
            let steps = steps.iter().zip(step_options).zip(kept_inputs).zip(recorded.iter_mut());
            for (((step, step_options), kept), recorded) in steps {
                let record = &mut recorded[iteration % 2];
                if let Some(launches) = record.as_ref() {
                    launches.replay(device)?;
                } else {
                    let inputs: Vec<Input> = step
                        .inputs
                        .iter()
                        .zip(kept)
                        .map(|(source, kept)| match *source {
                            Source::Host(_) => Input::device(kept.as_ref().expect("kept for every host input")),
                            Source::State(k) => Input::device(&current[k]),
                        })
                        .collect();
                    let target = next[step.output].as_ref().expect("allocated for every output");
                    step.operator.run_into(&inputs, step_options, target, replay.then_some(record))?;
                }
                // The value replaced: its new buffer becomes the current one.
                let replaced = next[step.output].take().expect("allocated for every output");
                next[step.output] = Some(std::mem::replace(&mut current[step.output], replaced));
                if let Some(interrupted) = options.interrupt.filter(|_| asked.elapsed() >= INTERRUPT_EVERY) {
                    if interrupted() {
                        return Err(Error::Interrupted);
                    }
                    asked = Instant::now();
                }
            }
        }
        Ok(())
    }
}

/// The host data of a state's initial value or of a step's input (a loop takes them from R).
fn host<'a>(x: &Input<'a>) -> Result<&'a [f64]> {
    x.host_data().ok_or_else(|| Error::Invalid("the inputs and initial values of a loop are host data".into()))
}

/// Seconds per phase, summed over the steps, in the order the phases first appear.
#[derive(Default)]
struct Timings(Vec<(&'static str, f64)>);

impl Timings {
    fn add(&mut self, phases: &[(&'static str, f64)]) {
        for &(name, seconds) in phases {
            match self.0.iter_mut().find(|(n, _)| *n == name) {
                Some((_, total)) => *total += seconds,
                None => self.0.push((name, seconds)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Backend;

    fn col(data: &[f64]) -> Input<'_> {
        Input::host(data, data.len(), 1)
    }

    /// Log-domain Sinkhorn between two histograms on a line, written with the raw LogSumExp
    /// outputs f and g as the iterated values, against the same iterations in plain f64.
    #[test]
    fn sinkhorn_matches_a_plain_loop() {
        let (n, m) = (37usize, 23usize);
        let x: Vec<f64> = (0..n).map(|i| i as f64 / n as f64).collect();
        let y: Vec<f64> = (0..m).map(|j| (j as f64 + 0.3) / m as f64).collect();
        let lmu: Vec<f64> = (0..n).map(|i| -((i as f64 - 10.0).powi(2) / 50.0) - 3.0).collect();
        let lnu: Vec<f64> = (0..m).map(|j| -((j as f64 - 15.0).powi(2) / 30.0) - 3.0).collect();
        let s = 20.0;
        let f_op = Operator::new(
            "LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
            &["x = Vi(1)", "y = Vj(1)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"].map(String::from),
        )
        .unwrap();
        let g_op = Operator::new(
            "LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
            &["x = Vi(1)", "y = Vj(1)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"].map(String::from),
        )
        .unwrap();
        let (f0, g0) = (vec![0.0; n], vec![0.0; m]);
        let sv = [s];
        let par = Input::host(&sv, 1, 1);
        let steps = [
            Step {
                operator: &g_op,
                inputs: vec![
                    Source::Host(col(&x)),
                    Source::Host(col(&y)),
                    Source::Host(col(&lmu)),
                    Source::State(0),
                    Source::Host(par),
                ],
                output: 1,
                sum_scheme: SumScheme::default(),
                ranges: None,
            },
            Step {
                operator: &f_op,
                inputs: vec![
                    Source::Host(col(&x)),
                    Source::Host(col(&y)),
                    Source::Host(col(&lnu)),
                    Source::State(1),
                    Source::Host(par),
                ],
                output: 0,
                sum_scheme: SumScheme::default(),
                ranges: None,
            },
        ];
        let options = RunOptions { precision: Precision::F64, backend: Backend::Cpu, ..Default::default() };
        let got = iterate(&steps, &[col(&f0), col(&g0)], 7, &options).unwrap();
        let lse = |v: &mut dyn Iterator<Item = f64>| {
            let v: Vec<f64> = v.collect();
            let top = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            top + v.iter().map(|a| (a - top).exp()).sum::<f64>().ln()
        };
        let c = |i: usize, j: usize| (x[i] - y[j]).powi(2) * s;
        let (mut f, mut g) = (f0.clone(), g0.clone());
        for _ in 0..7 {
            g = (0..m).map(|j| lse(&mut (0..n).map(|i| lmu[i] - f[i] - c(i, j)))).collect();
            f = (0..n).map(|i| lse(&mut (0..m).map(|j| lnu[j] - g[j] - c(i, j)))).collect();
        }
        let err = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
        assert!(err(&got.states[0], &f) < 1e-10, "f differs by {}", err(&got.states[0], &f));
        assert!(err(&got.states[1], &g) < 1e-10, "g differs by {}", err(&got.states[1], &g));
        assert_eq!(got.backend, "CPU");
    }

    #[test]
    fn shapes_and_reductions_are_checked() {
        let op = Operator::new("Sum_Reduction(x * y, 0)", &["x = Vi(1)", "y = Vj(1)"].map(String::from)).unwrap();
        let knn = Operator::new("ArgKMin_Reduction(SqDist(x, y), 2, 0)", &["x = Vi(1)", "y = Vj(1)"].map(String::from))
            .unwrap();
        let (a, b) = (vec![1.0; 5], vec![2.0; 4]);
        let step = |operator, output| Step {
            operator,
            inputs: vec![Source::State(0), Source::Host(col(&b))],
            output,
            sum_scheme: SumScheme::default(),
            ranges: None,
        };
        let options = RunOptions { backend: Backend::Cpu, ..Default::default() };
        // x (5 rows) replaced by a sum over j of x_i y_j: 5 x 1, fine; twice: 5 * 8 * 8.
        let got = iterate(&[step(&op, 0)], &[col(&a)], 2, &options).unwrap();
        assert_eq!(got.states[0], vec![64.0; 5]);
        let wrong_shape = iterate(&[step(&op, 1)], &[col(&a), col(&b)], 1, &options).unwrap_err();
        assert!(
            wrong_shape.to_string().contains("its result is 5 x 1, but the value it replaces is 4 x 1"),
            "{wrong_shape}"
        );
        let indices = iterate(&[step(&knn, 0)], &[col(&a)], 1, &options).unwrap_err();
        assert!(indices.to_string().contains("cannot be iterated"), "{indices}");
        let missing = iterate(&[step(&op, 3)], &[col(&a)], 1, &options).unwrap_err();
        assert!(missing.to_string().contains("replaces state 4 of 1"), "{missing}");
    }
}

//! Loops of reductions run in the engine. Fixed-point algorithms such as log-domain Sinkhorn
//! alternate reductions, each result an input of the next (a potential is a LogSumExp over the
//! other). Called once per reduction from R, every step pays a call's fixed costs (R, conversion,
//! transfers, a synchronisation), which on small problems are most of the time. Here the whole
//! loop is one call, a `crate::program` whose buffers are the inputs and the iterated values: on a
//! GPU every input is uploaded once and the iterated values stay on the device from one reduction
//! to the next; elsewhere each step is a plain run on host data.

use crate::api::{Input, RunOptions};
use crate::error::{Error, Result};
use crate::operator::Operator;
use crate::program::{self, Program};
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

/// Runs the steps in order, `iterations` times, from the initial values `states` (the ranges and
/// sum scheme of each step replace those of `options`). Each step's reduction must return values
/// only (no indices, no K-selection) of the shape of the state it replaces.
pub fn iterate(steps: &[Step], states: &[Input], iterations: usize, options: &RunOptions) -> Result<Iterated> {
    check(steps, states)?;
    let mut buffers: Vec<program::Buffer> = states
        .iter()
        .enumerate()
        .map(|(k, x)| program::Buffer { name: format!("state {}", k + 1), initial: Some(*x), schedule: None })
        .collect();
    let mut program_steps = Vec::with_capacity(steps.len());
    for (s, step) in steps.iter().enumerate() {
        let mut inputs = Vec::with_capacity(step.inputs.len());
        for (p, source) in step.inputs.iter().enumerate() {
            inputs.push(match *source {
                Source::State(k) => k,
                Source::Host(x) => {
                    let name = format!("input {} of step {}", p + 1, s + 1);
                    buffers.push(program::Buffer { name, initial: Some(x), schedule: None });
                    buffers.len() - 1
                }
            });
        }
        program_steps.push(program::Step {
            name: format!("step {}", s + 1),
            operator: step.operator,
            inputs,
            output: step.output,
            sum_scheme: step.sum_scheme,
            ranges: step.ranges.clone(),
        });
    }
    let outputs = (0..states.len()).collect();
    let program = Program { buffers, steps: program_steps, iterations, stop: None, trace: vec![], outputs };
    let ran = program::run(&program, options)?;
    Ok(Iterated { states: ran.outputs, backend: ran.backend, timings: ran.timings })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Backend;
    use crate::precision::Precision;

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

//! Reverse-mode gradients of a program (`crate::program`): the gradient of `sum(seed * buffer)`
//! for one buffer after the last iteration, with respect to the initial values of chosen buffers,
//! through every step of every iteration. The forward pass runs as `program::run` does on host
//! data and keeps, before each step, the value its result replaces (memory: one copy of each
//! step's result per iteration); the backward pass then visits the steps in reverse, restores
//! each replaced value and adds each input's share of the gradient, given by the engine's gradient
//! of the step's reduction (`differentiate`). Index results (ArgMin) pass no gradient.

use crate::api::{Input, RunOptions};
use crate::backend::Timings;
use crate::differentiate::GradientRun;
use crate::error::{Error, Result};
use crate::program::{self, Program};

/// The gradients with respect to the initial values of `wrt` (column-major, of the buffers'
/// shapes), and the iterations run.
#[derive(Debug, Clone)]
pub struct Gradients {
    pub values: Vec<Vec<f64>>,
    pub iterations: usize,
    pub timings: Timings,
}

/// The gradient of `sum(seed * of)` (`seed` all ones when `None`) after the program's iterations,
/// with respect to the initial values of the buffers `wrt`.
pub fn gradient(
    p: &Program,
    of: usize,
    seed: Option<&[f64]>,
    wrt: &[usize],
    options: &RunOptions,
) -> Result<Gradients> {
    let shapes = program::check(p)?;
    let len = |b: usize| shapes[b].0 * shapes[b].1;
    for &b in wrt.iter().chain([&of]) {
        if b >= p.buffers.len() {
            return Err(Error::Invalid(format!("the gradient names buffer {} of {}", b + 1, p.buffers.len())));
        }
    }
    if let Some(b) = wrt.iter().find(|&&b| p.buffers[b].initial.is_none()) {
        return Err(Error::Invalid(format!("buffer '{}' has no initial value to differentiate", p.buffers[*b].name)));
    }
    let seed: Vec<f64> = match seed {
        Some(s) if s.len() != len(of) => {
            return Err(Error::Invalid(format!(
                "the seed has {} values, buffer '{}' {}",
                s.len(),
                p.buffers[of].name,
                len(of)
            )))
        }
        Some(s) => s.to_vec(),
        None => vec![1.0; len(of)],
    };
    let runs = p
        .steps
        .iter()
        .map(|s| (0..s.inputs.len()).map(|v| GradientRun::new(s.operator, v)).collect::<Result<Vec<_>>>())
        .collect::<Result<Vec<_>>>()?;
    let step_options = p.step_options(options);
    let (mut values, mut tape, done) = forward(p, &shapes, &step_options)?;
    let mut adjoint: Vec<Vec<f64>> = (0..p.buffers.len()).map(|b| vec![0.0; len(b)]).collect();
    adjoint[of] = seed;
    // An input's share of the gradient is needed where it can reach `wrt`: for a buffer of `wrt`,
    // or one that a step writes (its gradient goes on to that step's inputs).
    let needed: Vec<bool> =
        (0..p.buffers.len()).map(|b| wrt.contains(&b) || p.steps.iter().any(|s| s.output == b)).collect();
    for t in (0..done).rev() {
        for (b, value) in p.scheduled(t) {
            values[b] = value.to_vec();
        }
        for (s, step) in p.steps.iter().enumerate().rev() {
            values[step.output] = tape.pop().expect("one value kept per step");
            let e = std::mem::replace(&mut adjoint[step.output], vec![0.0; len(step.output)]);
            if e.iter().all(|&x| x == 0.0) {
                continue;
            }
            let mut inputs: Vec<Input> =
                step.inputs.iter().map(|&b| Input::host(&values[b], shapes[b].0, shapes[b].1)).collect();
            inputs.push(Input::host(&e, shapes[step.output].0, shapes[step.output].1));
            for (v, &b) in step.inputs.iter().enumerate().filter(|(_, &b)| needed[b]) {
                let (g, _) = runs[s][v].evaluate(&inputs, &step_options[s])?;
                for (a, x) in adjoint[b].iter_mut().zip(g) {
                    *a += x;
                }
            }
        }
    }
    Ok(Gradients { values: wrt.iter().map(|&b| adjoint[b].clone()).collect(), iterations: done, timings: Vec::new() })
}

type Forward = (Vec<Vec<f64>>, Vec<Vec<f64>>, usize);

/// The forward pass on host data: the final values, the tape (the value each step replaced, in
/// order) and the iterations run.
fn forward(p: &Program, shapes: &[(usize, usize)], step_options: &[RunOptions]) -> Result<Forward> {
    let mut values: Vec<Vec<f64>> = p
        .buffers
        .iter()
        .zip(shapes)
        .map(|(b, &(nrow, ncol))| b.initial.and_then(|x| x.host_data()).map_or(vec![0.0; nrow * ncol], <[f64]>::to_vec))
        .collect();
    let mut tape = Vec::with_capacity(p.iterations * p.steps.len());
    let mut done = 0;
    while done < p.iterations {
        for (b, value) in p.scheduled(done) {
            values[b] = value.to_vec();
        }
        for (step, options) in p.steps.iter().zip(step_options) {
            let inputs: Vec<Input> =
                step.inputs.iter().map(|&b| Input::host(&values[b], shapes[b].0, shapes[b].1)).collect();
            let out = step.operator.run(&inputs, options)?;
            let result = program::result_values(out.values, out.indices);
            tape.push(std::mem::replace(&mut values[step.output], result));
        }
        done += 1;
        if let Some(stop) = p.stop {
            if stop.ends(done, || Ok(values[stop.buffer].clone()))? {
                break;
            }
        }
    }
    Ok((values, tape, done))
}

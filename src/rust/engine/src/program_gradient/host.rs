//! The gradient of a program on host data: each reduction, forward and backward, a plain run.

use super::{Backward, Gradients};
use crate::api::{Input, RunOptions};
use crate::error::Result;
use crate::program::{self, Program, PhaseTotals};

pub(super) fn gradient(b: &Backward) -> Result<Gradients> {
    let p = b.program;
    let restores: Vec<bool> = (0..p.steps.len()).map(|s| b.restores(s)).collect();
    let mut timings = PhaseTotals::default();
    let (mut values, mut tape, done, backend) =
        forward(p, &b.shapes, &b.step_options, &restores, &mut timings, b.options)?;
    let outputs = p.outputs.iter().map(|&x| values[x].clone()).collect();
    let mut adjoint: Vec<Vec<f64>> = (0..p.buffers.len()).map(|x| vec![0.0; b.len(x)]).collect();
    adjoint[b.of] = b.seed.clone();
    let mut live = b.live();
    for t in (0..done).rev() {
        for (x, value) in p.scheduled(t) {
            values[x] = value.to_vec();
        }
        for (s, step) in p.steps.iter().enumerate().rev() {
            if restores[s] {
                values[step.output] = tape.pop().expect("one value kept per step that restores it");
            }
            if !b.visits(s, &mut live) {
                continue;
            }
            let e = std::mem::replace(&mut adjoint[step.output], vec![0.0; b.len(step.output)]);
            let mut inputs: Vec<Input> =
                step.inputs.iter().map(|&x| Input::host(&values[x], b.shapes[x].0, b.shapes[x].1)).collect();
            inputs.push(Input::host(&e, b.shapes[step.output].0, b.shapes[step.output].1));
            for group in &b.steps[s].groups {
                let (g, rows, phases) = group.evaluate(&inputs, &b.step_options[s])?;
                timings.add(&phases);
                for part in &group.parts {
                    let share = &g[part.column * rows..(part.column + part.dim) * rows];
                    for (a, x) in adjoint[step.inputs[part.input]].iter_mut().zip(share) {
                        *a += x;
                    }
                }
            }
        }
        program::report(b.options, p.iterations + done - t, 2 * p.iterations);
    }
    program::report(b.options, 2 * p.iterations, 2 * p.iterations);
    let values = b.wrt.iter().map(|&x| std::mem::take(&mut adjoint[x])).collect();
    Ok(Gradients { values, outputs, shapes: b.output_shapes(), iterations: done, backend, timings: timings.0 })
}

type Forward = (Vec<Vec<f64>>, Vec<Vec<f64>>, usize, String);

/// The forward pass: the final values, the tape (the value each step that `restores` replaced, in
/// order), the iterations run and the backend that ran them.
fn forward(
    p: &Program,
    shapes: &[(usize, usize)],
    step_options: &[RunOptions],
    restores: &[bool],
    timings: &mut PhaseTotals,
    options: &RunOptions,
) -> Result<Forward> {
    let mut values: Vec<Vec<f64>> = p
        .buffers
        .iter()
        .zip(shapes)
        .map(|(b, &(nrow, ncol))| {
            Ok(match b.initial {
                Some(_) => b.initial_values(options.precision)?.into_owned(),
                None => vec![0.0; nrow * ncol],
            })
        })
        .collect::<Result<_>>()?;
    // (the tape grows with the iterations that run: a stopping rule may end them early)
    let per_iteration: usize =
        p.steps.iter().zip(restores).filter(|(_, &r)| r).map(|(s, _)| shapes[s.output].0 * shapes[s.output].1).sum();
    crate::memory::check_fits(
        per_iteration.saturating_mul(p.iterations).saturating_mul(8),
        "the gradient of the program, which keeps the values its steps replace",
    )?;
    let mut tape = Vec::new();
    let mut backend = "CPU".to_string();
    let mut done = 0;
    while done < p.iterations {
        for (b, value) in p.scheduled(done) {
            values[b] = value.to_vec();
        }
        for ((step, options), &restored) in p.steps.iter().zip(step_options).zip(restores) {
            let inputs: Vec<Input> =
                step.inputs.iter().map(|&b| Input::host(&values[b], shapes[b].0, shapes[b].1)).collect();
            let out = step.operator.run(&inputs, options)?;
            timings.add(&out.timings);
            backend = out.backend;
            let result = program::result_values(out.values, out.indices);
            let replaced = std::mem::replace(&mut values[step.output], result);
            if restored {
                tape.push(replaced);
            }
        }
        done += 1;
        if let Some(stop) = p.stop {
            if stop.ends(done, || Ok(values[stop.buffer].clone()))? {
                break;
            }
        }
        // (the progress report counts the iterations forward, then backward)
        program::report(options, done, 2 * p.iterations);
    }
    Ok((values, tape, done, backend))
}

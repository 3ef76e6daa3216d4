//! `keops_program()`: a program of reductions run by the engine in one call (`engine::program`).

use std::sync::Arc;

use engine::program::{self, Buffer, Program, Schedule, Step, Stop};
use engine::program_gradient::gradient;
use engine::{Input, Operator};
use extendr_api::prelude::*;

use crate::{
    block_sparse, device_matrix, element, guarded, numeric_input, operator, run_options, strings, sum_scheme, timings,
};
use crate::{results, Fallible, OrInput, RError};

/// An element of an R list by name (an error naming `what` when it is missing).
fn field(list: &List, name: &str, what: &str) -> Fallible<Robj> {
    element(list, name).ok_or_else(|| RError::input("program", format!("{what} has no '{name}'")))
}

/// 0-based buffer numbers from R's integers.
fn ids(x: &Robj, what: &str) -> Fallible<Vec<usize>> {
    let v = x.as_integer_vector().or_input("program", format!("{what} must be integers"))?;
    Ok(v.into_iter().map(|i| i.max(0) as usize).collect())
}

/// A step's parts as R gives them: its operator, buffers, output, sum scheme and ranges.
struct StepParts {
    name: String,
    op: Arc<Operator>,
    inputs: Vec<usize>,
    output: usize,
    scheme: String,
    ranges: Robj,
}

fn step_parts(step: Robj) -> Fallible<StepParts> {
    let step = step.as_list().or_input("program", "each step must be a list")?;
    let text = |name: &str| -> Fallible<String> {
        let x = field(&step, name, "a step")?;
        x.as_str().map(String::from).or_input("program", format!("a step's {name} must be a string"))
    };
    let op = operator(&text("formula")?, &strings(&field(&step, "args", "a step")?, "args")?)?;
    let output = ids(&field(&step, "output", "a step")?, "a step's output")?;
    Ok(StepParts {
        name: text("name")?,
        op,
        inputs: ids(&field(&step, "inputs", "a step")?, "a step's inputs")?,
        output: output.first().copied().or_input("program", "a step's output must be one integer")?,
        scheme: text("sum_scheme")?,
        ranges: field(&step, "ranges", "a step")?,
    })
}

/// Builds the engine's program from R's description, `list(buffers = list(names, initial,
/// schedule), steps, iterations, until, tol, every, trace, outputs)` (R/program.R makes it: buffer
/// numbers are 0-based, `until` -1 for none; `initial[[b]]` a matrix or NULL, `schedule[[b]]` NULL or
/// the values of each iteration one after the other), and runs `work` on it.
fn with_program<R>(program: &Robj, work: impl FnOnce(&Program) -> Fallible<R>) -> Fallible<R> {
    let p = program.as_list().or_input("program", "the program must be a list")?;
    let buffers = field(&p, "buffers", "the program")?.as_list().or_input("program", "buffers must be a list")?;
    let names = strings(&field(&buffers, "names", "buffers")?, "names")?;
    let list = |name: &str| -> Fallible<Vec<Robj>> {
        let x = field(&buffers, name, "buffers")?;
        Ok(x.as_list().or_input("program", format!("buffers' {name} must be a list"))?.values().collect())
    };
    let (initial, schedules) = (list("initial")?, list("schedule")?);
    if initial.len() != names.len() || schedules.len() != names.len() {
        return Err(RError::input("program", "one initial value and one schedule per buffer"));
    }
    // (matrices kept on a GPU, held here while the program borrows them)
    let resident = initial
        .iter()
        .zip(&names)
        .map(|(x, name)| x.is_external_pointer().then(|| device_matrix(x, name)).transpose())
        .collect::<Fallible<Vec<_>>>()?;
    let mut built = Vec::with_capacity(names.len());
    for (((name, x), s), resident) in names.iter().zip(&initial).zip(&schedules).zip(&resident) {
        let initial = match resident {
            Some(m) => Some(Input::device(m.as_ref())),
            None => (!x.is_null()).then(|| numeric_input(x, name)).transpose()?,
        };
        let schedule = match s.is_null() {
            true => None,
            false => {
                let values = s.as_real_slice().or_input(name, format!("the schedule of '{name}' must be numbers"))?;
                let len = initial.map_or(1, |x: Input| (x.nrow * x.ncol).max(1));
                Some(Schedule { values, rows: values.len() / len })
            }
        };
        built.push(Buffer { name: name.clone(), initial, schedule });
    }
    let parts = field(&p, "steps", "the program")?
        .as_list()
        .or_input("program", "steps must be a list")?
        .values()
        .map(step_parts)
        .collect::<Fallible<Vec<_>>>()?;
    let steps = parts
        .iter()
        .map(|s| {
            Ok(Step {
                name: s.name.clone(),
                operator: s.op.as_ref(),
                inputs: s.inputs.clone(),
                output: s.output,
                sum_scheme: sum_scheme(&s.scheme)?,
                ranges: block_sparse(&s.ranges)?,
            })
        })
        .collect::<Fallible<Vec<_>>>()?;
    let number = |name: &str| -> Fallible<f64> {
        field(&p, name, "the program")?.as_real().or_input("program", format!("'{name}' must be a number"))
    };
    let until = number("until")?;
    let stop = match until >= 0.0 {
        true => Some(Stop { buffer: until as usize, tol: number("tol")?, every: number("every")?.max(0.0) as usize }),
        false => None,
    };
    let program = Program {
        buffers: built,
        steps,
        iterations: number("iterations")?.max(0.0) as usize,
        stop,
        trace: ids(&field(&p, "trace", "the program")?, "trace")?,
        outputs: ids(&field(&p, "outputs", "the program")?, "outputs")?,
    };
    work(&program)
}

/// An R list of column-major matrices of these shapes.
fn matrices(values: Vec<Vec<f64>>, shapes: &[(usize, usize)]) -> Fallible<Robj> {
    let matrices = values
        .into_iter()
        .zip(shapes)
        .map(|(v, &(nrow, ncol))| results::with_dim(Robj::from(v), &results::dims(nrow, ncol)?))
        .collect::<Fallible<Vec<Robj>>>()?;
    Ok(Robj::from(List::from_values(matrices)))
}

/// Runs the program (see `with_program`). Returns `list(outputs, iterations, trace, trace_widths, backend,
/// timings)`.
#[extendr]
fn keops_program_run(program: Robj, options: Robj) -> Robj {
    guarded(|| {
        let options = run_options(&options, "auto")?;
        // (an interrupt too: R makes it an interrupt condition)
        let ran = with_program(&program, |p| Ok(program::run(p, &options)?))?;
        let outputs = matrices(ran.outputs, &ran.shapes)?;
        let trace: Vec<Robj> = ran.trace.into_iter().map(Robj::from).collect();
        let trace_widths: Vec<f64> = ran.trace_widths.iter().map(|&w| w as f64).collect();
        Ok(List::from_names_and_values(
            ["outputs", "iterations", "trace", "trace_widths", "backend", "timings"],
            [
                outputs,
                Robj::from(ran.iterations as i32),
                Robj::from(List::from_values(trace)),
                Robj::from(trace_widths),
                Robj::from(ran.backend),
                timings(&ran.timings)?,
            ],
        )?
        .into())
    })
}

/// The gradient of `sum(seed * of)` after the program's iterations (`of` a 0-based buffer number,
/// `seed` NULL for ones) with respect to the initial values of the buffers `wrt` (0-based). Returns
/// `list(gradients, outputs, iterations, backend, timings)`, the gradients as plain vectors in the
/// buffers' order, the outputs as `keops_program_run()`'s.
#[extendr]
fn keops_program_gradient(program: Robj, of: i32, seed: Robj, wrt: Robj, options: Robj) -> Robj {
    guarded(|| {
        let options = run_options(&options, "auto")?;
        let wrt = ids(&wrt, "wrt")?;
        let seed = match seed.is_null() {
            true => None,
            false => Some(seed.as_real_slice().or_input("weight", "'weight' must be numbers")?),
        };
        let got = with_program(&program, |p| Ok(gradient(p, of.max(0) as usize, seed, &wrt, &options)?))?;
        let values: Vec<Robj> = got.values.into_iter().map(Robj::from).collect();
        Ok(List::from_names_and_values(
            ["gradients", "outputs", "iterations", "backend", "timings"],
            [
                Robj::from(List::from_values(values)),
                matrices(got.outputs, &got.shapes)?,
                Robj::from(got.iterations as i32),
                Robj::from(got.backend),
                timings(&got.timings)?,
            ],
        )?
        .into())
    })
}

extendr_module! {
    mod program;
    fn keops_program_run;
    fn keops_program_gradient;
}

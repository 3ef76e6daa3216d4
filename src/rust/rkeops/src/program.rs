//! `keops_program()`: a program of reductions run by the engine in one call (`engine::program`).

use std::borrow::Cow;
use std::sync::Arc;

use engine::program::{self, Buffer, Program, Schedule, Step, Stop};
use engine::program_gradient::gradient;
use engine::{Input, Operator, Ranges, SumScheme};
use extendr_api::prelude::*;
use extendr_ffi::{SEXP, SEXPTYPE};

use crate::{block_sparse, device_matrix, element, guarded, operator, run_options, strings, sum_scheme, timings};
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

/// A step as the plan keeps it: its operator, buffers, output, sum scheme and ranges.
#[derive(Debug)]
struct PlanStep {
    name: String,
    op: Arc<Operator>,
    inputs: Vec<usize>,
    output: usize,
    sum_scheme: SumScheme,
    ranges: Option<Ranges>,
}

fn plan_step(step: Robj) -> Fallible<PlanStep> {
    let step = step.as_list().or_input("program", "each step must be a list")?;
    let text = |name: &str| -> Fallible<String> {
        let x = field(&step, name, "a step")?;
        x.as_str().map(String::from).or_input("program", format!("a step's {name} must be a string"))
    };
    let op = operator(&text("formula")?, &strings(&field(&step, "args", "a step")?, "args")?)?;
    let output = ids(&field(&step, "output", "a step")?, "a step's output")?;
    Ok(PlanStep {
        name: text("name")?,
        op,
        inputs: ids(&field(&step, "inputs", "a step")?, "a step's inputs")?,
        output: output.first().copied().or_input("program", "a step's output must be one integer")?,
        sum_scheme: sum_scheme(&text("sum_scheme")?)?,
        ranges: block_sparse(&field(&step, "ranges", "a step")?)?,
    })
}

/// A program less its values, read from R's description: once for a program whose layout R keeps
/// (an external pointer, `keops_program_plan()`), each call then only converts its values
/// (`Plan::with_values`).
#[derive(Debug)]
struct Plan {
    names: Vec<String>,
    steps: Vec<PlanStep>,
    iterations: usize,
    stop: Option<Stop>,
    trace: Vec<usize>,
    outputs: Vec<usize>,
}

impl Plan {
    /// From R's description, `list(buffers = list(names, ...), steps, iterations, until, tol,
    /// every, trace, outputs)` (R/program.R makes it: buffer numbers are 0-based, `until` -1 for
    /// none); the buffers' values, if there, are not read.
    fn new(program: &Robj) -> Fallible<Plan> {
        let p = program.as_list().or_input("program", "the program must be a list")?;
        let buffers = field(&p, "buffers", "the program")?.as_list().or_input("program", "buffers must be a list")?;
        let names = strings(&field(&buffers, "names", "buffers")?, "names")?;
        let steps = field(&p, "steps", "the program")?
            .as_list()
            .or_input("program", "steps must be a list")?
            .values()
            .map(plan_step)
            .collect::<Fallible<Vec<_>>>()?;
        let number = |name: &str| -> Fallible<f64> {
            field(&p, name, "the program")?.as_real().or_input("program", format!("'{name}' must be a number"))
        };
        let until = number("until")?;
        let stop = match until >= 0.0 {
            true => {
                Some(Stop { buffer: until as usize, tol: number("tol")?, every: number("every")?.max(0.0) as usize })
            }
            false => None,
        };
        Ok(Plan {
            names,
            steps,
            iterations: number("iterations")?.max(0.0) as usize,
            stop,
            trace: ids(&field(&p, "trace", "the program")?, "trace")?,
            outputs: ids(&field(&p, "outputs", "the program")?, "outputs")?,
        })
    }

    /// Runs `work` on the program with these values: `initial[b]` buffer b's initial value (a
    /// matrix, a vector, a matrix kept on a GPU, or NULL), `schedules[b]` NULL or its values at each
    /// iteration (see `schedule_values`; `schedules` may be empty: no schedule). R's doubles are read
    /// in place, not copied; integers and logicals are converted.
    fn with_values<R>(
        &self,
        owner: &Robj,
        initial: &[SEXP],
        schedules: &[SEXP],
        work: impl FnOnce(&Program) -> Fallible<R>,
    ) -> Fallible<R> {
        let names = &self.names;
        if initial.len() != names.len() || (schedules.len() != names.len() && !schedules.is_empty()) {
            return Err(RError::input("program", "one initial value and one schedule per buffer"));
        }
        let given = |x: &SEXP| raw::type_of(*x) != SEXPTYPE::NILSXP;
        let schedule_of = |b: usize| schedules.get(b).filter(|s| given(s));
        // (matrices kept on a GPU, held here while the program borrows them)
        let resident = initial
            .iter()
            .zip(names)
            .map(|(&x, name)| match raw::type_of(x) {
                // SAFETY: an element of the call's arguments, which R keeps for the call.
                SEXPTYPE::EXTPTRSXP => device_matrix(&unsafe { Robj::from_sexp(x) }, name).map(Some),
                _ => Ok(None),
            })
            .collect::<Fallible<Vec<_>>>()?;
        // host values, and the initial values of the buffers given a schedule only (its first row)
        let host = (0..names.len())
            .map(|b| match (&resident[b], given(&initial[b]), schedule_of(b)) {
                (Some(_), _, _) | (None, false, None) => Ok(None),
                (None, false, Some(&s)) => first_row(owner, s).map(Some),
                (None, true, _) => host_value(owner, initial[b], &names[b]).map(Some),
            })
            .collect::<Fallible<Vec<_>>>()?;
        let inputs: Vec<Option<Input>> = (0..names.len())
            .map(|b| match (&resident[b], &host[b]) {
                (Some(m), _) => Some(Input::device(m.as_ref())),
                (None, Some(v)) => Some(Input::host(v.values.as_ref(), v.nrow, v.ncol)),
                (None, None) => None,
            })
            .collect();
        let schedules = (0..names.len())
            .map(|b| {
                let len = inputs[b].map_or(1, |x| x.nrow * x.ncol);
                schedule_of(b).map(|&s| schedule_values(owner, s, &names[b], len)).transpose()
            })
            .collect::<Fallible<Vec<_>>>()?;
        let built = (0..names.len())
            .map(|b| Buffer {
                name: names[b].clone(),
                initial: inputs[b],
                schedule: schedules[b].as_ref().map(|(values, rows)| Schedule { values: values.as_ref(), rows: *rows }),
            })
            .collect();
        let steps = self
            .steps
            .iter()
            .map(|s| Step {
                name: s.name.clone(),
                operator: s.op.as_ref(),
                inputs: s.inputs.clone(),
                output: s.output,
                sum_scheme: s.sum_scheme,
                ranges: s.ranges.clone(),
            })
            .collect();
        let program = Program {
            buffers: built,
            steps,
            iterations: self.iterations,
            stop: self.stop,
            trace: self.trace.clone(),
            outputs: self.outputs.clone(),
        };
        work(&program)
    }
}

/// A buffer's values from R: its doubles, read in place, or integers and logicals converted.
struct HostValue<'a> {
    values: Cow<'a, [f64]>,
    nrow: usize,
    ncol: usize,
}

/// R's values read in place, without `Robj`s: each `Robj` made registers its value in extendr's
/// global table (a lock and a hash), and a call reads tens of them. The values read are elements
/// of the call's arguments (the lifetime `'a` of `owner`), which R keeps alive and unchanged for
/// the call.
mod raw {
    use super::*;
    use extendr_ffi::{R_DimSymbol, Rf_getAttrib, INTEGER, LOGICAL, REAL, SEXP, SEXPTYPE, TYPEOF, VECTOR_ELT, XLENGTH};

    /// The elements of an R list (none for NULL); `None` for another type.
    pub fn elements(x: &Robj) -> Option<Vec<SEXP>> {
        // SAFETY: `x` is a valid R value; VECTOR_ELT reads the elements of a list.
        unsafe {
            let x = x.get();
            match TYPEOF(x) {
                SEXPTYPE::NILSXP => Some(Vec::new()),
                SEXPTYPE::VECSXP => Some((0..XLENGTH(x)).map(|i| VECTOR_ELT(x, i)).collect()),
                _ => None,
            }
        }
    }

    /// The type of an element.
    pub fn type_of(x: SEXP) -> SEXPTYPE {
        // SAFETY: `x` is an element of a list of the call's arguments.
        unsafe { TYPEOF(x) }
    }

    /// An R vector's elements as a slice that lives as long as `owner` (which holds it).
    ///
    /// SAFETY: `x` is held by `owner` and of the type of `T` (`data` its data pointer).
    unsafe fn slice<T>(_owner: &Robj, x: SEXP, data: *mut T) -> &[T] {
        match XLENGTH(x) {
            0 => &[],
            n => std::slice::from_raw_parts(data, n as usize),
        }
    }

    /// An element's numbers as doubles (read in place when they are), NA as NaN; `None` for
    /// other types.
    pub fn doubles<'a>(owner: &'a Robj, x: SEXP) -> Option<Cow<'a, [f64]>> {
        let na = |v: i32| if v == i32::MIN { f64::NAN } else { f64::from(v) };
        // SAFETY: each branch reads the data of its type.
        unsafe {
            match TYPEOF(x) {
                SEXPTYPE::REALSXP => Some(Cow::Borrowed(slice(owner, x, REAL(x)))),
                SEXPTYPE::INTSXP => Some(Cow::Owned(slice(owner, x, INTEGER(x)).iter().map(|&v| na(v)).collect())),
                SEXPTYPE::LGLSXP => Some(Cow::Owned(
                    slice(owner, x, LOGICAL(x))
                        .iter()
                        .map(|&v| if v == i32::MIN { f64::NAN } else { f64::from(v != 0) })
                        .collect(),
                )),
                _ => None,
            }
        }
    }

    /// An element's dimensions, empty for a vector.
    pub fn dims(x: SEXP) -> Vec<usize> {
        // SAFETY: Rf_getAttrib returns the attribute R holds (no allocation for `dim`).
        unsafe {
            let d = Rf_getAttrib(x, R_DimSymbol);
            match TYPEOF(d) {
                SEXPTYPE::INTSXP => (0..XLENGTH(d) as usize).map(|k| (*INTEGER(d).add(k)).max(0) as usize).collect(),
                _ => Vec::new(),
            }
        }
    }
}

/// Input `name` (not a matrix kept on a GPU): a numeric matrix, or a vector as one column.
fn host_value<'a>(owner: &'a Robj, x: SEXP, name: &str) -> Fallible<HostValue<'a>> {
    let values = raw::doubles(owner, x).or_input(name, format!("input '{name}' must be numeric"))?;
    let (nrow, ncol) = match raw::dims(x)[..] {
        [] => (values.len(), 1),
        [nrow] => (nrow, 1),
        [nrow, ncol] => (nrow, ncol),
        _ => {
            return Err(RError::input(
                name,
                format!("input '{name}': a program takes matrices, vectors, numbers or matrices kept on a GPU (keops_device()), not batches"),
            ))
        }
    };
    Ok(HostValue { values, nrow, ncol })
}

/// The error of a schedule that is not one row per iteration of a buffer of `len` values.
fn schedule_error(name: &str, len: usize) -> RError {
    let s = if len > 1 { "s" } else { "" };
    RError::input(
        "schedule",
        format!("schedule${name}: a matrix with one row per iteration and {len} column{s} (the values of '{name}') expected"),
    )
}

/// The values of a schedule, iteration after iteration, and the number of iterations: a matrix of
/// one row per iteration and `len` columns (transposed here), or for a buffer of one value a vector.
fn schedule_values<'a>(owner: &'a Robj, s: SEXP, name: &str, len: usize) -> Fallible<(Cow<'a, [f64]>, usize)> {
    let values = match raw::type_of(s) {
        SEXPTYPE::REALSXP | SEXPTYPE::INTSXP => raw::doubles(owner, s),
        _ => None,
    }
    .ok_or_else(|| schedule_error(name, len))?;
    match raw::dims(s)[..] {
        [] if len == 1 && !values.is_empty() => {
            let rows = values.len();
            Ok((values, rows))
        }
        [rows, ncol] if ncol == len && rows > 0 => {
            let t: Vec<f64> = (0..rows * len).map(|k| values[k / len + rows * (k % len)]).collect();
            Ok((Cow::Owned(t), rows))
        }
        _ => Err(schedule_error(name, len)),
    }
}

/// The initial value of a buffer that a schedule gives: its first row, as a column.
fn first_row(owner: &Robj, s: SEXP) -> Fallible<HostValue<'static>> {
    let values = raw::doubles(owner, s).or_input("schedule", "a schedule must be numbers")?;
    let first: Vec<f64> = match raw::dims(s)[..] {
        [rows, ncol] => (0..ncol).map(|k| values.get(rows * k).copied().unwrap_or(f64::NAN)).collect(),
        _ => values.first().copied().into_iter().collect(),
    };
    let nrow = first.len();
    Ok(HostValue { values: Cow::Owned(first), nrow, ncol: 1 })
}

/// Builds the engine's program from R's description and runs `work` on it. The description is
/// `list(plan, buffers = list(names, initial, schedule), steps, iterations, until, tol, every, trace,
/// outputs)` (see `Plan::new` and `Plan::with_values`): `plan`, made by `keops_program_plan()` and
/// kept by R, spares reading the steps again; without it (NULL, or a program saved and loaded
/// again, whose pointer is empty) they are read from the description.
pub(crate) fn with_program<R>(program: &Robj, work: impl FnOnce(&Program) -> Fallible<R>) -> Fallible<R> {
    let p = program.as_list().or_input("program", "the program must be a list")?;
    let kept = element(&p, "plan");
    let made;
    let plan = match kept.as_ref().and_then(|x| <&ExternalPtr<Plan>>::try_from(x).ok()) {
        Some(ptr) => ptr.as_ref(),
        None => {
            made = Plan::new(program)?;
            &made
        }
    };
    let buffers = field(&p, "buffers", "the program")?;
    let buffers = buffers.as_list().or_input("program", "buffers must be a list")?;
    let list = |name: &str| -> Fallible<Vec<_>> {
        raw::elements(&field(&buffers, name, "buffers")?).or_input("program", format!("buffers' {name} must be a list"))
    };
    plan.with_values(program, &list("initial")?, &list("schedule")?, work)
}

/// An R list of column-major matrices of these shapes (written on every core: 1e8 K-means labels
/// took ~0.35 s on one).
fn matrices(values: Vec<Vec<f64>>, shapes: &[(usize, usize)]) -> Fallible<Robj> {
    let matrices = values
        .iter()
        .zip(shapes)
        .map(|(v, &(nrow, ncol))| results::r_array(v, &[nrow, ncol], None, |v, _| v))
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
        ran_list(with_program(&program, |p| Ok(program::run(p, &options)?))?)
    })
}

/// The plan of a program (its description less its values, see `Plan::new`), kept by R as an
/// external pointer: `keops_program_run()` and `keops_program_gradient()` then read only the values
/// of each call (see `with_program`).
#[extendr]
fn keops_program_plan(program: Robj) -> Robj {
    guarded(|| Ok(ExternalPtr::new(Plan::new(&program)?).into()))
}

/// `list(outputs, iterations, trace, trace_widths, backend, timings)` of a run.
fn ran_list(ran: program::ProgramResult) -> Fallible {
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
    fn keops_program_plan;
}

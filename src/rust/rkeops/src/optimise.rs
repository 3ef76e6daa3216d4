//! `keops_program_optim()` (R/program-optim.R): the L-BFGS minimisation of a program's one-number
//! buffer over the initial value of another, run by the engine in one call
//! (`engine::program_gradient::optimise`).

use engine::program_gradient::lbfgs::Control;
use engine::program_gradient::optimise::minimise;
use extendr_api::prelude::*;

use crate::program::with_program;
use crate::{element, guarded, results, run_options, timings, Fallible, OrInput, RError};

/// The control of the minimiser from R's `list(maxit, factr, pgtol, m)` (numbers; R has checked
/// them, these checks keep hostile values out: NaN fails `>=`).
fn control(control: &Robj) -> Fallible<Control> {
    let list = control.as_list().or_input("control", "'control' must be a list")?;
    let number = |name: &str, least: f64| -> Fallible<f64> {
        element(&list, name)
            .and_then(|x| x.as_real().or_else(|| x.as_integer().map(f64::from)))
            .filter(|v| *v >= least)
            .or_input("control", format!("control${name} must be a number >= {least}"))
    };
    Ok(Control {
        maxit: number("maxit", 0.0)? as usize,
        factr: number("factr", 0.0)?,
        pgtol: number("pgtol", 0.0)?,
        m: number("m", 1.0)? as usize,
    })
}

/// The engine's errors about `of` or `wrt` (their messages start with the name quoted) as input
/// errors naming that argument.
fn naming_argument(e: engine::Error) -> RError {
    let message = e.to_string();
    for arg in ["of", "wrt"] {
        if message.starts_with(&format!("'{arg}'")) {
            return RError::input(arg, message);
        }
    }
    e.into()
}

/// Minimises the final value of the buffer `of` (0-based, one value) of the program (as
/// `keops_program_run()` takes it) over the initial value of the buffer `wrt` (0-based), from that
/// value, with `control = list(maxit, factr, pgtol, m)`. Returns `list(par` (a matrix of the shape of
/// `wrt`)`, value, gradient, evaluations, iterations, convergence, message, trace, backend,
/// timings)`, `trace` the value at each evaluation.
#[extendr]
fn keops_program_optimise(program: Robj, of: i32, wrt: i32, control_list: Robj, options: Robj) -> Robj {
    guarded(|| {
        let options = run_options(&options, "auto")?;
        let control = control(&control_list)?;
        let (of, wrt) = (of.max(0) as usize, wrt.max(0) as usize);
        let got = with_program(&program, |p| minimise(p, of, wrt, &control, &options).map_err(naming_argument))?;
        let min = got.minimum;
        let par = results::with_dim(Robj::from(min.par), &results::dims(got.shape.0, got.shape.1)?)?;
        Ok(List::from_names_and_values(
            [
                "par",
                "value",
                "gradient",
                "evaluations",
                "iterations",
                "convergence",
                "message",
                "trace",
                "backend",
                "timings",
            ],
            [
                par,
                Robj::from(min.value),
                Robj::from(min.gradient),
                Robj::from(min.evaluations as f64),
                Robj::from(min.iterations as f64),
                Robj::from(min.convergence),
                Robj::from(min.message),
                Robj::from(min.trace),
                Robj::from(got.backend),
                timings(&got.timings)?,
            ],
        )?
        .into())
    })
}

extendr_module! {
    mod optimise;
    fn keops_program_optimise;
}

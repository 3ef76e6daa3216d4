//! Gradients (R/keops_grad.R): the engine's plan of a gradient (`engine::formula::gradient`), as
//! an R list that R runs with its operators (the forward steps, then the gradient's reduction).

use engine::formula::gradient::{GradientOutput, GradientPlan, Step, StepSource};
use engine::formula::Variable;
use extendr_api::prelude::*;

use crate::{guarded, strings, Fallible, OrInput};

/// `keops_gradient(formula, args, var)`: the plan of the gradient form `formula` (`Grad(reduction,
/// v, e)` or `GradFromPos(reduction, v, I)`) when `var` is NULL, else of the gradient of the
/// reduction `formula` in its variable at 1-based position `var`, the gradient input last. Returns
/// `list(names, categories, dims` (the gradient's inputs)`, variable, input` (1-based positions of
/// the variable and the gradient input)`, forward = list(formula, args), steps, formula, args,
/// sum_rows, plain, zero)`: see `plan_list`.
#[extendr]
fn keops_gradient(formula: &str, args: Robj, var: Robj) -> Robj {
    guarded(|| {
        let args = strings(&args, "args")?;
        let plan = if var.is_null() {
            GradientPlan::parse(formula, &args)?
        } else {
            let v = var.as_integer().filter(|&v| v >= 1).or_input("var", "'var' must be a position from 1")?;
            GradientPlan::of_variable(formula, &args, v as usize - 1)?
        };
        plan_list(&plan)
    })
}

/// The plan as R reads it: positions 1-based; `formula`, `args` and `sum_rows` the gradient's
/// reduction (NULL for a zero gradient, then `zero = list(rows_of, dim)`, `rows_of` NA for one row).
fn plan_list(plan: &GradientPlan) -> Fallible {
    let (formula, args, sum_rows, zero) = match &plan.output {
        GradientOutput::Formula { formula, args, sum_rows } => {
            (Robj::from(formula.as_str()), Robj::from(args.clone()), *sum_rows, Robj::from(()))
        }
        GradientOutput::Zero { rows_of, dim } => {
            let zero = List::from_names_and_values(["rows_of", "dim"], [position(*rows_of), Robj::from(*dim as i32)])?;
            (Robj::from(()), Robj::from(()), false, zero.into())
        }
    };
    let forward = List::from_names_and_values(
        ["formula", "args"],
        [Robj::from(plan.forward.0.as_str()), Robj::from(plan.forward.1.clone())],
    )?;
    let steps = plan.steps.iter().map(step_list).collect::<Fallible<Vec<Robj>>>()?;
    let (names, categories, dims) = described(&plan.inputs);
    Ok(List::from_names_and_values(
        [
            "names",
            "categories",
            "dims",
            "variable",
            "input",
            "forward",
            "steps",
            "formula",
            "args",
            "sum_rows",
            "plain",
            "zero",
        ],
        [
            names,
            categories,
            dims,
            Robj::from(plan.variable as i32 + 1),
            Robj::from(plan.grad_input as i32 + 1),
            forward.into(),
            List::from_values(steps).into(),
            formula,
            args,
            Robj::from(sum_rows),
            Robj::from(plan.is_plain()),
            zero,
        ],
    )?
    .into())
}

/// A step: `list(name, category, dim, formula, args, inputs, indices)` for a forward reduction run
/// on the inputs at positions `inputs` (1-based; its 0-based indices wanted if `indices`), or
/// `list(name, category, dim, rows_of)` for the 0-based index of each row of input `rows_of`.
fn step_list(step: &Step) -> Fallible {
    let v = &step.input;
    let head = [Robj::from(v.name.as_str()), Robj::from(v.category.keyword()), Robj::from(v.dim as i32)];
    let list = match &step.source {
        StepSource::Reduction { formula, args, inputs, indices } => {
            let inputs: Vec<i32> = inputs.iter().map(|&p| p as i32 + 1).collect();
            let tail =
                [Robj::from(formula.as_str()), Robj::from(args.clone()), Robj::from(inputs), Robj::from(*indices)];
            let values: Vec<Robj> = head.into_iter().chain(tail).collect();
            List::from_names_and_values(["name", "category", "dim", "formula", "args", "inputs", "indices"], values)?
        }
        StepSource::RowIndex(rows_of) => {
            let values: Vec<Robj> = head.into_iter().chain([position(*rows_of)]).collect();
            List::from_names_and_values(["name", "category", "dim", "rows_of"], values)?
        }
    };
    Ok(list.into())
}

/// A 1-based position, NA for none.
fn position(p: Option<usize>) -> Robj {
    Robj::from(p.map_or(Rint::na(), |p| Rint::from(p as i32 + 1)))
}

/// Names, categories and dimensions of variables, as `keops_parse()` describes them.
fn described(vars: &[Variable]) -> (Robj, Robj, Robj) {
    let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
    let categories: Vec<&str> = vars.iter().map(|v| v.category.keyword()).collect();
    let dims: Vec<i32> = vars.iter().map(|v| v.dim as i32).collect();
    (Robj::from(names), Robj::from(categories), Robj::from(dims))
}

extendr_module! {
    mod gradient;
    fn keops_gradient;
}

//! Gradients against central finite differences in float64, for i-, j- and parameter variables:
//! S(v) = sum_i <Sum_Reduction(F, 0)_i, e_i> and dS/dv from `Grad(F, v, e)`.

use crate::common_formulas::{DIFFERENTIABLE as FORMULAS, GRADIENT_ARGS as ARGS};
use engine::formula::gradient::{GradientOutput, GradientPlan, StepSource};
use engine::formula::Category;
use engine::{Backend, Input, Operator, Precision, RunOptions};

use crate::common;
use common::random;

const N: usize = 7;
const M: usize = 11;

struct Case {
    inputs: Vec<Vec<f64>>,
}

impl Case {
    fn new() -> Case {
        let mut inputs = vec![random(3 * N, 11), random(3 * M, 12), random(2 * M, 13), random(6, 14), random(9, 15)];
        inputs.push(vec![0.7]);
        Case { inputs }
    }
    fn rows(k: usize) -> usize {
        [N, M, M, 1, 1, 1][k]
    }
    fn view<'a>(data: &'a [Vec<f64>], extra: Option<&'a [f64]>, e_rows: usize) -> Vec<Input<'a>> {
        let mut v: Vec<Input> = data
            .iter()
            .enumerate()
            .map(|(k, d)| Input::host(d, Case::rows(k), d.len() / Case::rows(k)))
            .collect();
        if let Some(e) = extra {
            v.push(Input::host(e, e_rows, e.len() / e_rows));
        }
        v
    }
}

fn options() -> RunOptions {
    RunOptions { precision: Precision::F64, backend: Backend::Cpu, ..Default::default() }
}

fn args(extra: &str) -> Vec<String> {
    let mut a: Vec<String> = ARGS.iter().map(|s| s.to_string()).collect();
    a.push(extra.to_string());
    a
}

/// Checks d/dv of sum_i <F_i, e_i> for the variable at `position` against finite differences.
fn check(formula: &str, case: &Case, position: usize, name: &str) {
    let forward = Operator::new(&format!("Sum_Reduction({formula}, 0)"), &args("e = Vi(1)")[..6]).unwrap();
    let dim = forward.formula.output_dim();
    let e = random(N * dim, 99);
    let objective = |inputs: &[Vec<f64>]| -> f64 {
        let out = forward.run(&Case::view(inputs, None, 0), &options()).unwrap();
        out.values.unwrap().iter().zip(&e).map(|(a, b)| a * b).sum()
    };
    // The gradient operator: i-variables and parameters reduce over j (axis 0), j-variables over i.
    let axis = if position == 1 || position == 2 { 1 } else { 0 };
    let text = format!("Sum_Reduction(Grad({formula}, {name}, e), {axis})");
    let grad = Operator::new(&text, &args(&format!("e = Vi({dim})"))).unwrap_or_else(|e| panic!("{text}: {e}"));
    let out = grad.run(&Case::view(&case.inputs, Some(&e), N), &options()).unwrap();
    let mut got = out.values.unwrap();
    let len = case.inputs[position].len();
    if position >= 3 {
        // A parameter: the gradient sums over the rows i.
        got = (0..len).map(|c| (0..N).map(|i| got[i + N * c]).sum()).collect();
    }
    assert_eq!(got.len(), len, "{text}");
    let h = 1e-6;
    for k in 0..len {
        let mut plus = case.inputs.clone();
        plus[position][k] += h;
        let mut minus = case.inputs.clone();
        minus[position][k] -= h;
        let fd = (objective(&plus) - objective(&minus)) / (2.0 * h);
        let err = (got[k] - fd).abs() / (1.0 + fd.abs());
        assert!(err < 1e-6, "{text}: component {k}: gradient {} vs finite differences {fd}", got[k]);
    }
}

#[test]
fn gradients_match_finite_differences() {
    let case = Case::new();
    for formula in FORMULAS {
        check(formula, &case, 0, "x");
        check(formula, &case, 1, "y");
        if formula.contains('b') {
            check(formula, &case, 2, "b");
        }
        for (position, name) in [(3, "A"), (4, "S"), (5, "p")] {
            if formula.contains(name) {
                check(formula, &case, position, name);
            }
        }
    }
}

#[test]
fn second_order_and_zero_gradients() {
    let case = Case::new();
    // The gradient of a gradient (Hessian-vector products): d/dx <Grad(F, x, e), e2>.
    check("Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", &case, 0, "x");
    check("Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", &case, 1, "y");
    check("Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", &case, 5, "p");
    check("Grad(SqDist(x,y)*(x|y), y, p)", &case, 0, "x");
    // A formula that does not depend on the variable has a zero gradient of its dimension.
    let grad = Operator::new("Sum_Reduction(Grad(Concat(y,y), x, e), 0)", &args("e = Vi(6)")).unwrap();
    let e = random(6 * N, 5);
    let out = grad.run(&Case::view(&case.inputs, Some(&e), N), &options()).unwrap();
    assert_eq!((out.nrow, out.dim), (N, 3));
    assert!(out.values.unwrap().iter().all(|&v| v == 0.0));
}

#[test]
fn gradient_of_the_gaussian_kernel_stays_small() {
    let text = "Sum_Reduction(Grad(Exp(-p*SqDist(x,y))*b, x, e), 0)";
    let op = Operator::new(text, &args("e = Vi(2)")).unwrap();
    let plan = engine::plan::Plan::new(&op.formula);
    let computed = plan.pair.len() + plan.inner.len() + plan.outer.len() + plan.constant.len();
    // The forward formula computes 6 nodes (Neg, Sub, SqNorm2, Mul, Exp, Mul); its gradient reuses 5
    // of them and adds 7 (the adjoint chain and the 2 of the square): 12, and nothing for zeros.
    assert_eq!(computed, 12, "the simplified gradient: {:?}", op.formula.graph.nodes);
}

// ---- Gradients of reductions: the engine's plans (formula::gradient, reduction::gradient) ----

/// The rows of an input of each category.
fn rows_of(category: Category) -> usize {
    match category {
        Category::I => N,
        Category::J => M,
        Category::Param => 1,
    }
}

/// The inputs at `positions` of `data` (whose rows are `rows`).
fn inputs_at<'a>(data: &'a [Vec<f64>], rows: &[usize], positions: impl Iterator<Item = usize>) -> Vec<Input<'a>> {
    positions.map(|p| Input::host(&data[p], rows[p], data[p].len() / rows[p])).collect()
}

/// Runs a gradient plan as R runs it (R/keops_grad.R): its forward steps, each result a new
/// input, then the gradient's reduction (its rows summed for a parameter), on `data`, the plan's
/// inputs in order.
fn run_plan(plan: &GradientPlan, data: &[Vec<f64>]) -> Vec<f64> {
    let mut data = data.to_vec();
    let mut rows: Vec<usize> = plan.inputs.iter().map(|v| rows_of(v.category)).collect();
    for step in &plan.steps {
        let values = match &step.source {
            StepSource::Reduction { formula, args, inputs, indices } => {
                let op = Operator::new(formula, args).unwrap_or_else(|e| panic!("{formula}: {e}"));
                let out = op.run(&inputs_at(&data, &rows, inputs.iter().copied()), &options()).unwrap();
                match indices {
                    true => out.indices.unwrap().iter().map(|&i| (i - 1) as f64).collect(),
                    false => out.values.unwrap(),
                }
            }
            StepSource::RowIndex(of) => (0..of.map_or(1, |p| rows[p])).map(|j| j as f64).collect(),
        };
        rows.push(values.len() / step.input.dim);
        data.push(values);
    }
    match &plan.output {
        GradientOutput::Zero { rows_of, dim } => vec![0.0; rows_of.map_or(1, |p| rows[p]) * dim],
        GradientOutput::Formula { formula, args, sum_rows } => {
            let op = Operator::new(formula, args).unwrap_or_else(|e| panic!("{formula}: {e}"));
            let out = op.run(&inputs_at(&data, &rows, 0..data.len()), &options()).unwrap();
            let values = out.values.unwrap();
            match sum_rows {
                true => (0..out.dim).map(|c| values[c * out.nrow..(c + 1) * out.nrow].iter().sum()).collect(),
                false => values,
            }
        }
    }
}

/// sum <R(data), e> for the reduction R of the plan (its values), `data` its inputs.
fn objective(plan: &GradientPlan, data: &[Vec<f64>], e: &[f64]) -> f64 {
    let (text, args) = &plan.forward;
    let op = Operator::new(text, args).unwrap();
    let rows: Vec<usize> = op.formula.variables.iter().map(|v| rows_of(v.category)).collect();
    let out = op.run(&inputs_at(data, &rows, 0..data.len()), &options()).unwrap();
    out.values.unwrap().iter().zip(e).map(|(a, b)| a * b).sum()
}

/// Checks the gradient of the reduction `text` of ARGS in its variable at `v` (the plan of
/// `keops_grad()`) against central finite differences of sum <R, e>.
fn check_reduction(text: &str, case: &Case, v: usize) -> GradientPlan {
    let plan = GradientPlan::of_variable(text, &args("")[..6], v).unwrap_or_else(|err| panic!("{text}: {err}"));
    let e_var = &plan.inputs[plan.grad_input];
    let e = random(rows_of(e_var.category) * e_var.dim, 97);
    let mut data = case.inputs.clone();
    data.push(e.clone());
    let got = run_plan(&plan, &data);
    assert_eq!(got.len(), case.inputs[v].len(), "{text} in {}", plan.inputs[v].name);
    let h = 1e-6;
    for c in 0..case.inputs[v].len() {
        let (mut plus, mut minus) = (case.inputs.clone(), case.inputs.clone());
        plus[v][c] += h;
        minus[v][c] -= h;
        let fd = (objective(&plan, &plus, &e) - objective(&plan, &minus, &e)) / (2.0 * h);
        let err = (got[c] - fd).abs() / (1.0 + fd.abs());
        assert!(err < 1e-6, "{text} in {}, component {c}: {} vs {fd}", plan.inputs[v].name, got[c]);
    }
    plan
}

/// Values (F, of dimension 1, and V, of dimension 3) and weights (G, of dimension 2, a sum: it
/// is an operand in the gradients) of the reductions below, using every variable.
const F: &str = "-p*SqDist(x,y) + Elem(b, 0) + Elem(A, 1)";
const V: &str = "x*Extract(A, 0, 3) - y + Elem(b, 1)";
const G: &str = "b*b + Elem(x, 1)*Elem(S, 2)";

/// Every reduction with a gradient, both axes, in each variable (i, j, parameters): the engine's
/// rules (forward steps, then a Sum reduction of Grad terms) against finite differences.
#[test]
fn every_reduction_in_every_variable_matches_finite_differences() {
    let case = Case::new();
    let templates = [
        "Sum_Reduction(Exp(-p*SqDist(x,y))*b*Elem(S, 0), AXIS)".to_string(),
        format!("LogSumExp_Reduction({F}, AXIS)"),
        format!("LogSumExp_Reduction({F}, AXIS, {G})"),
        format!("LogSumExpWeight_Reduction({F}, {G}, AXIS)"),
        format!("SumSoftMaxWeight_Reduction({F}, {G}, AXIS)"),
        format!("Min_Reduction({V}, AXIS)"),
        format!("Max_Reduction({V}, AXIS)"),
        format!("Min_ArgMin_Reduction({V}, AXIS)"),
        format!("Max_ArgMax_Reduction({V}, AXIS)"),
        format!("KMin_Reduction({V}, 3, AXIS)"),
        format!("KMin_ArgKMin_Reduction({V}, 3, AXIS)"),
    ];
    for axis in ["0", "1"] {
        for template in &templates {
            let text = template.replace("AXIS", axis);
            for v in 0..6 {
                let plan = check_reduction(&text, &case, v);
                let sum_rows = matches!(plan.output, GradientOutput::Formula { sum_rows: true, .. });
                assert_eq!(sum_rows, v >= 3, "{text}: a parameter's gradient sums the rows");
            }
        }
    }
}

#[test]
fn what_each_reduction_runs_first() {
    let steps = |text: &str, v: usize| -> Vec<String> {
        let plan = GradientPlan::of_variable(text, &args("")[..6], v).unwrap();
        plan.steps
            .iter()
            .map(|s| format!("{} = {}({})", s.input.name, s.input.category.keyword(), s.input.dim))
            .collect()
    };
    assert!(steps("Sum_Reduction(x*y, 0)", 0).is_empty());
    assert_eq!(steps(&format!("LogSumExp_Reduction({F}, 1)"), 0), ["lse = Vj(1)"]);
    assert_eq!(steps(&format!("SumSoftMaxWeight_Reduction({F}, {G}, 0)"), 1), ["lse = Vi(1)", "out = Vi(2)"]);
    assert_eq!(steps(&format!("LogSumExpWeight_Reduction({F}, {G}, 0)"), 1), ["out = Vi(2)"]);
    // Selections: the selected indices (K per coordinate) and the index of each reduced row.
    assert_eq!(steps(&format!("KMin_Reduction({V}, 3, 1)"), 2), ["sel = Vj(9)", "jj = Vi(1)"]);
    assert_eq!(steps(&format!("Max_ArgMax_Reduction({V}, 0)"), 5), ["sel = Vi(3)", "jj = Vj(1)"]);
}

#[test]
fn indices_have_a_zero_gradient_of_the_variables_shape() {
    for (text, v, want) in [
        (format!("ArgMin_Reduction({V}, 0)"), 1, (Some(1), 3)),
        (format!("ArgMax_Reduction({V}, 1)"), 0, (Some(0), 3)),
        (format!("ArgKMin_Reduction({V}, 3, 0)"), 3, (None, 6)),
    ] {
        let plan = GradientPlan::of_variable(&text, &args("")[..6], v).unwrap();
        assert_eq!(plan.output, GradientOutput::Zero { rows_of: want.0, dim: want.1 }, "{text}");
        assert!(plan.steps.is_empty());
    }
}

/// KeOps' forms in the formula language: `Grad(reduction, v, e)` with `e` declared anywhere,
/// `GradFromPos(reduction, v, I)`, nested forms, and a form that is one reduction as a formula.
#[test]
fn gradient_forms_are_the_plans_of_their_reduction() {
    let case = Case::new();
    let red = format!("SumSoftMaxWeight_Reduction({F}, {G}, 1)");
    let e = random(M * 2, 31);
    let mut want_data = case.inputs.clone();
    want_data.push(e.clone());
    let want = run_plan(&GradientPlan::of_variable(&red, &args("")[..6], 0).unwrap(), &want_data);
    // e declared first: the gradient's inputs in the order of the declarations.
    let mut a = vec!["e = Vj(2)".to_string()];
    a.extend(args("")[..6].iter().cloned());
    let plan = GradientPlan::parse(&format!("Grad({red}, x, e)"), &a).unwrap();
    assert_eq!((plan.grad_input, plan.variable, plan.inputs[1].position), (0, 1, 1));
    let mut data = vec![e.clone()];
    data.extend(case.inputs.iter().cloned());
    assert_eq!(run_plan(&plan, &data), want);
    // GradFromPos: the gradient input inserted at position 2, named "eta".
    let plan = GradientPlan::parse(&format!("GradFromPos({red}, x, 2)"), &args("")[..6]).unwrap();
    assert_eq!((plan.grad_input, plan.inputs[2].name.as_str()), (2, "eta"));
    let mut data = case.inputs.clone();
    data.insert(2, e.clone());
    assert_eq!(run_plan(&plan, &data), want);
    // A Sum in an i- or j-variable is one reduction: a formula of the language.
    let form = "Grad(Sum_Reduction(Exp(-p*SqDist(x,y))*b, 0), y, e)";
    let op = Operator::new(form, &args("e = Vi(2)")).unwrap();
    let plan = GradientPlan::parse(form, &args("e = Vi(2)")).unwrap();
    assert!(plan.is_plain());
    let e = random(N * 2, 32);
    let mut data = case.inputs.clone();
    data.push(e.clone());
    let out = op.run(&Case::view(&case.inputs, Some(&e), N), &options()).unwrap();
    assert_eq!(out.values.unwrap(), run_plan(&plan, &data));
    // ... and can be differentiated again: d/dx <Grad(R, y, e), u>.
    let mut a = args("e = Vi(2)");
    a.push("u = Vj(3)".into());
    let nested = GradientPlan::parse(&format!("Grad({form}, x, u)"), &a).unwrap();
    let GradientOutput::Formula { formula, .. } = nested.output else { panic!("{nested:?}") };
    assert_eq!(formula, "Sum_Reduction(Grad(Grad(Exp(-p*SqDist(x,y))*b, y, e), x, u), 0)");
}

#[test]
fn gradient_forms_that_cannot_be_gradients_say_why() {
    let a = args("e = Vi(1)");
    let mut eu = a.clone();
    eu.push("u = Vi(3)".into());
    let red = "Sum_Reduction(SqDist(x, y), 0)";
    for (form, args, needle) in [
        (format!("Grad({red}, x)"), &a, "Grad() takes 3 arguments: Grad(reduction, variable, gradient input), not 2"),
        (format!("GradFromPos({red}, x)"), &a, "GradFromPos(reduction, variable, position of the gradient input)"),
        (format!("Grad({red}, x, 2*e)"), &a, "the gradient input \"2*e\" must be the name of a variable"),
        (format!("Grad({red}, x, f)"), &a, "the gradient input 'f' is not declared in 'args' (declared: x, y, b,"),
        (format!("Grad({red}, z, e)"), &a, "\"z\" is not a variable of the reduction (x, y, b, A, S, p)"),
        (
            format!("Grad({red}, y, b)"),
            &a,
            "'b' must be declared b = Vi(1), shaped like the result of the reduction \
             (axis 0: one row per i), not Vj(2)",
        ),
        (format!("GradFromPos({red}, x, 8)"), &a, "from 0 to 7 (0-based, among the inputs), not \"8\""),
        (format!("GradFromPos({red}, x, e)"), &a, "must be a whole number"),
        ("Grad(Grad(LogSumExp_Reduction(Elem(x, 0), 0), x, e), y, u)".into(), &eu, "only gradients of Sum"),
        ("Grad(Sum_Reduction(SqDist(x, y) * e, 0), x, e)".into(), &a, "unknown variable 'e'"),
    ] {
        let err = GradientPlan::parse(&form, args).unwrap_err();
        assert!(err.to_string().contains(needle), "{form}: {err}");
        assert_eq!(err.kind(), "formula", "{form}");
    }
    // A gradient that needs forward results is not one formula.
    let err = Operator::new("Grad(LogSumExp_Reduction(Elem(x, 0), 0), x, e)", &a).unwrap_err();
    assert!(err.to_string().contains("is not one reduction"), "{err}");
}

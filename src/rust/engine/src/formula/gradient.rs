//! The gradient of a reduction as a plan of engine runs, for KeOps' forms `Grad(reduction, v, e)`
//! (`e` declared in `args`) and `GradFromPos(reduction, v, I)` (`e` not declared, inserted at
//! 0-based input position I), and for a reduction and one of its variables (R's `keops_grad()`).
//! Each reduction's rule is `reduction::gradient`'s; this module resolves the names and positions
//! of the inputs, checks the forms, and writes the declarations of each run.

use super::ast::{Ast, Node};
use super::variables::{parse_declarations, Category, Variable};
use super::{parser, Formula};
use crate::error::{Error, Result};
use crate::reduction::gradient::{Differentiate, Rule, Saved, Source};

/// How to compute a gradient: forward runs whose results are new inputs, then one reduction.
#[derive(Debug, Clone, PartialEq)]
pub struct GradientPlan {
    /// The gradient's inputs in order: the reduction's, with the gradient input among them.
    pub inputs: Vec<Variable>,
    /// Positions among `inputs` of the variable and of the gradient input.
    pub variable: usize,
    pub grad_input: usize,
    /// The reduction differentiated and its declarations (its inputs: `inputs` without `e`).
    pub forward: (String, Vec<String>),
    /// Results computed first, in order; the gradient formula takes them after `inputs`.
    pub steps: Vec<Step>,
    pub output: GradientOutput,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    /// The input of the gradient formula that it gives (its position is after the plan's inputs).
    pub input: Variable,
    pub source: StepSource,
}

#[derive(Debug, Clone, PartialEq)]
pub enum StepSource {
    /// The values (or the 0-based indices) of the reduction `formula` of `args`, run on the inputs
    /// at positions `inputs` of the plan's inputs.
    Reduction { formula: String, args: Vec<String>, inputs: Vec<usize>, indices: bool },
    /// 0, 1, ... for each row of the input at this position (one row if none).
    RowIndex(Option<usize>),
}

#[derive(Debug, Clone, PartialEq)]
pub enum GradientOutput {
    /// The reduction `formula` of `args` (the inputs, then the steps' results); for a parameter,
    /// the sum of its rows (the formula computes the gradient of each row i).
    Formula { formula: String, args: Vec<String>, sum_rows: bool },
    /// Zero: `dim` columns and the rows of the input at this position (one row if none).
    Zero { rows_of: Option<usize>, dim: usize },
}

/// Whether `text` is a gradient form: the outermost call is `Grad` or `GradFromPos`.
pub fn is_form(text: &str) -> bool {
    // (a test of the first word before parsing: formulas of 100 KB are not parsed twice)
    text.trim_start().starts_with("Grad")
        && parser::parse(text).is_ok_and(|t| matches!(&t.ast, Ast::Call(name, _) if is_form_name(name)))
}

fn is_form_name(name: &str) -> bool {
    name == "Grad" || name == "GradFromPos"
}

impl GradientPlan {
    /// The plan of a gradient form (see `is_form`), whose inputs are those of `args` in their
    /// order (`e` among them), or for `GradFromPos` the reduction's with `e` inserted.
    pub fn parse(text: &str, args: &[String]) -> Result<GradientPlan> {
        let tree = parser::parse(text)?;
        let parts = match &tree.ast {
            Ast::Call(name, parts) if is_form_name(name) => Form { text, name, parts },
            _ => return Err(Error::Gradient(format!("{text} is not Grad(reduction, variable, gradient input)"))),
        };
        parts.arity()?;
        let (forward_args, declared_e) = match parts.name {
            "Grad" => parts.declared_input(args)?,
            _ => (args.to_vec(), None),
        };
        let forward = parts.reduction(&forward_args)?;
        let e = match declared_e {
            Some(e) => e,
            None => parts.inserted_input(&forward)?,
        };
        let v = parts.variable(&forward)?;
        parts.check_input(&forward, &e)?;
        build(&forward, &forward_args, v, e)
    }

    /// The plan of the gradient of the reduction `text` of `args` in its variable at 0-based
    /// position `v`, the gradient input (named "eta", or "eta_", ... if taken) after its inputs.
    pub fn of_variable(text: &str, args: &[String], v: usize) -> Result<GradientPlan> {
        let forward = Formula::parse(text, args)?;
        let n = forward.variables.len();
        if v >= n {
            return Err(Error::Invalid(format!("no variable at 0-based position {v}: the reduction has {n} inputs")));
        }
        let mut taken: Vec<String> = forward.variables.iter().map(|x| x.name.clone()).collect();
        let (category, dim) = expected_input(&forward);
        let e = Variable { name: fresh("eta", &mut taken), category, dim, position: n };
        build(&forward, args, v, e)
    }

    /// Whether the gradient is one reduction of the inputs, with nothing to run before or after:
    /// a formula like any other, which can be differentiated again.
    pub fn is_plain(&self) -> bool {
        self.steps.is_empty() && matches!(self.output, GradientOutput::Formula { sum_rows: false, .. })
    }
}

/// The category and the dimension of the gradient input of `forward`: those of its result.
fn expected_input(forward: &Formula) -> (Category, usize) {
    let red = &forward.reduction;
    let category = if red.axis == 0 { Category::I } else { Category::J };
    (category, red.kind.gradient_input_dim(red.k, forward.output_dim()))
}

/// A name no variable has, from `base` and underscores; taken from now on.
fn fresh(base: &str, taken: &mut Vec<String>) -> String {
    let mut name = base.to_string();
    while taken.contains(&name) {
        name.push('_');
    }
    taken.push(name.clone());
    name
}

/// A variable of a formula written as `Var(pos, dim, cat)` without a declaration.
fn is_inline(v: &Variable) -> bool {
    v.name.starts_with("Var(")
}

/// How a formula names `v`: its name, or `Var(pos, dim, cat)`.
fn reference(v: &Variable) -> String {
    let code = match v.category {
        Category::I => 0,
        Category::J => 1,
        Category::Param => 2,
    };
    if is_inline(v) {
        format!("Var({}, {}, {code})", v.position, v.dim)
    } else {
        v.name.clone()
    }
}

/// The declarations of `vars` (in input order), positions implicit unless a `Var(pos, dim, cat)`
/// of the formula takes a position without a declaration.
pub fn declarations(vars: &[Variable]) -> Vec<String> {
    let explicit = vars.iter().any(is_inline);
    let declare = |v: &Variable| match explicit {
        true => format!("{} = {}({}, {})", v.name, v.category.keyword(), v.position, v.dim),
        false => format!("{} = {}({})", v.name, v.category.keyword(), v.dim),
    };
    vars.iter().filter(|v| !is_inline(v)).map(declare).collect()
}

/// The plan of the gradient of `forward` (declared by `forward_args`) in its variable at position
/// `v`, with the gradient input `e` at position `e.position` of the gradient's inputs.
fn build(forward: &Formula, forward_args: &[String], v: usize, e: Variable) -> Result<GradientPlan> {
    let at = e.position;
    let inputs = inputs_with(forward, e)?;
    let variable = if v >= at { v + 1 } else { v };
    let (var, v_name) = (&inputs[variable], reference(&inputs[variable]));
    let red = &forward.reduction;
    let rule = Differentiate {
        kind: red.kind,
        text: &forward.text,
        f: &red.f_text,
        g: red.g_text.as_deref(),
        axis: red.axis,
        k: red.k,
        dim: forward.output_dim(),
        v: &v_name,
        e: &inputs[at].name,
        v_axis: if var.category == Category::J { 1 } else { 0 },
    };
    let mut taken: Vec<String> = inputs.iter().map(|x| x.name.clone()).collect();
    let (output, steps) = match rule.rule(&mut |base| fresh(base, &mut taken)) {
        Rule::Zero => {
            let rows_of = (var.category != Category::Param).then_some(variable);
            (GradientOutput::Zero { rows_of, dim: var.dim }, vec![])
        }
        Rule::Formula { saved, formula } => {
            let steps = Steps { forward, forward_args, inputs: &inputs, at };
            let steps: Vec<Step> = saved.into_iter().enumerate().map(|(s, saved)| steps.step(s, saved)).collect();
            let all: Vec<Variable> = inputs.iter().cloned().chain(steps.iter().map(|s| s.input.clone())).collect();
            let sum_rows = var.category == Category::Param;
            (GradientOutput::Formula { formula, args: declarations(&all), sum_rows }, steps)
        }
    };
    let forward = (forward.text.clone(), forward_args.to_vec());
    Ok(GradientPlan { inputs, variable, grad_input: at, forward, steps, output })
}

/// The variables of `forward` with `e` inserted at its position, those after it moved by one.
fn inputs_with(forward: &Formula, e: Variable) -> Result<Vec<Variable>> {
    let at = e.position;
    let mut inputs = forward.variables.clone();
    // (a Var(pos, dim, cat) of the formula text refers to its position: it cannot move)
    if let Some(x) = inputs.iter().find(|x| is_inline(x) && x.position >= at) {
        return Err(Error::Gradient(format!(
            "in the gradient of {}: {} would move to make room for the gradient input at position {at}; \
             declare it in args",
            forward.text,
            reference(x)
        )));
    }
    inputs.iter_mut().filter(|x| x.position >= at).for_each(|x| x.position += 1);
    inputs.insert(at, e);
    Ok(inputs)
}

/// What the steps of a plan share: the forward reduction and the gradient's inputs (`e` at `at`).
struct Steps<'a> {
    forward: &'a Formula,
    forward_args: &'a [String],
    inputs: &'a [Variable],
    at: usize,
}

impl Steps<'_> {
    /// Step `s`, which computes `saved`, an input of the gradient formula after the plan's inputs.
    fn step(&self, s: usize, saved: Saved) -> Step {
        let output = if self.forward.reduction.axis == 0 { Category::I } else { Category::J };
        let reduced = if output == Category::I { Category::J } else { Category::I };
        let run = |formula: String, indices: bool| StepSource::Reduction {
            formula,
            args: self.forward_args.to_vec(),
            inputs: (0..self.inputs.len()).filter(|&p| p != self.at).collect(),
            indices,
        };
        let (category, source) = match saved.source {
            Source::Values(formula) => (output, run(formula, false)),
            Source::Indices(formula) => (output, run(formula, true)),
            Source::ReducedIndex => {
                (reduced, StepSource::RowIndex(self.inputs.iter().position(|x| x.category == reduced)))
            }
        };
        let position = self.inputs.len() + s;
        Step { input: Variable { name: saved.name, category, dim: saved.dim, position }, source }
    }
}

/// The parts of a gradient form, for the checks of each and their messages (which quote the form).
struct Form<'a> {
    text: &'a str,
    name: &'a str,
    parts: &'a [Node],
}

impl Form<'_> {
    fn fail(&self, what: impl std::fmt::Display) -> Error {
        Error::Gradient(format!("in {}: {what}", self.text))
    }

    /// The text of the argument `k`.
    fn source(&self, k: usize) -> &str {
        &self.text[self.parts[k].span.clone()]
    }

    fn arity(&self) -> Result<()> {
        if self.parts.len() == 3 {
            return Ok(());
        }
        let (form, third) = match self.name {
            "Grad" => ("Grad", "gradient input"),
            _ => ("GradFromPos", "position of the gradient input"),
        };
        Err(Error::Gradient(format!(
            "{form}() takes 3 arguments: {form}(reduction, variable, {third}), not {}",
            self.parts.len()
        )))
    }

    /// `Grad(reduction, v, e)`: the declarations of the reduction's inputs (those of `args` but
    /// `e`, in order) and `e`, at its position among the inputs.
    fn declared_input(&self, args: &[String]) -> Result<(Vec<String>, Option<Variable>)> {
        let Ast::Name(e) = &self.parts[2].ast else {
            let what =
                format!("the gradient input \"{}\" must be the name of a variable declared in 'args'", self.source(2));
            return Err(self.fail(what));
        };
        let mut declared = parse_declarations(args)?;
        declared.sort_by_key(|x| x.position);
        let Some(at) = declared.iter().position(|x| &x.name == e) else {
            let names: Vec<&str> = declared.iter().map(|x| x.name.as_str()).collect();
            let what = format!("the gradient input '{e}' is not declared in 'args' (declared: {})", names.join(", "));
            return Err(self.fail(what));
        };
        let mut input = declared.remove(at);
        input.position = at;
        declared.iter_mut().enumerate().for_each(|(p, x)| x.position = p);
        Ok((declarations(&declared), Some(input)))
    }

    /// The reduction differentiated: a reduction, or a gradient form that is one.
    fn reduction(&self, args: &[String]) -> Result<Formula> {
        let text = self.source(0);
        if is_form(text) && !GradientPlan::parse(text, args)?.is_plain() {
            return Err(self.fail("only gradients of Sum reductions can be differentiated again"));
        }
        Formula::parse(text, args)
    }

    /// `GradFromPos(reduction, v, I)`: the gradient input, at input position I.
    fn inserted_input(&self, forward: &Formula) -> Result<Variable> {
        let n = forward.variables.len();
        let at = match self.parts[2].ast {
            Ast::Int(i) => usize::try_from(i).ok(),
            Ast::Float(x) if x.fract() == 0.0 && x >= 0.0 => Some(x as usize),
            _ => None,
        };
        let Some(at) = at.filter(|&at| at <= n) else {
            let what = format!(
                "the position of the gradient input must be a whole number from 0 to {n} (0-based, among the \
                 inputs), not \"{}\"",
                self.source(2)
            );
            return Err(self.fail(what));
        };
        let mut taken: Vec<String> = forward.variables.iter().map(|x| x.name.clone()).collect();
        let (category, dim) = expected_input(forward);
        Ok(Variable { name: fresh("eta", &mut taken), category, dim, position: at })
    }

    /// The position of the variable among the reduction's inputs.
    fn variable(&self, forward: &Formula) -> Result<usize> {
        let names: Vec<&str> = forward.variables.iter().map(|x| x.name.as_str()).collect();
        match &self.parts[1].ast {
            Ast::Name(v) if names.contains(&v.as_str()) => Ok(names.iter().position(|n| n == v).unwrap_or(0)),
            _ => Err(self.fail(format!(
                "\"{}\" is not a variable of the reduction ({})",
                self.source(1),
                names.join(", ")
            ))),
        }
    }

    /// A declared gradient input is shaped like the result of the reduction.
    fn check_input(&self, forward: &Formula, e: &Variable) -> Result<()> {
        let (category, dim) = expected_input(forward);
        if (e.category, e.dim) == (category, dim) {
            return Ok(());
        }
        let (axis, index) = if category == Category::I { (0, "i") } else { (1, "j") };
        Err(self.fail(format!(
            "the gradient input '{}' must be declared {} = {}({dim}), shaped like the result of the reduction \
             (axis {axis}: one row per {index}), not {}({})",
            e.name,
            e.name,
            category.keyword(),
            e.category.keyword(),
            e.dim
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn strings(v: &[&str]) -> Vec<String> {
        v.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn a_sum_in_a_variable_is_one_reduction() {
        let args = strings(&["x = Vi(3)", "y = Vj(3)", "eta = Vj(1)"]);
        let plan = GradientPlan::of_variable("Sum_Reduction(Exp(-SqDist(x, y)) + x, 0)", &args, 1).unwrap();
        // ("eta" is taken: the gradient input is "eta_", after the inputs)
        assert_eq!((plan.inputs[3].name.as_str(), plan.grad_input, plan.variable), ("eta_", 3, 1));
        let formula = "Sum_Reduction(Grad((Exp(-SqDist(x, y)) + x), y, eta_), 1)".to_string();
        let args = strings(&["x = Vi(3)", "y = Vj(3)", "eta = Vj(1)", "eta_ = Vi(3)"]);
        assert_eq!(plan.output, GradientOutput::Formula { formula, args, sum_rows: false });
        assert!(plan.is_plain());
    }

    #[test]
    fn forward_steps_run_on_the_reductions_inputs() {
        let args = strings(&["e = Vi(1)", "x = Vi(2)", "y = Vj(2)", "s = Pm(1)"]);
        let plan = GradientPlan::parse("Grad(Min_Reduction(s * SqDist(x, y), 0), s, e)", &args).unwrap();
        assert_eq!((plan.grad_input, plan.variable), (0, 3));
        assert_eq!(plan.forward, ("Min_Reduction(s * SqDist(x, y), 0)".into(), args[1..].to_vec()));
        let run = StepSource::Reduction {
            formula: "ArgMin_Reduction(s * SqDist(x, y), 0)".into(),
            args: args[1..].to_vec(),
            inputs: vec![1, 2, 3],
            indices: true,
        };
        assert_eq!(plan.steps[0].source, run);
        // the index of each j, as many as the rows of y (input 2)
        assert_eq!(plan.steps[1].source, StepSource::RowIndex(Some(2)));
        let (sel, jj) = (&plan.steps[0].input, &plan.steps[1].input);
        assert_eq!((sel.category, sel.position, jj.category, jj.position), (Category::I, 4, Category::J, 5));
        let GradientOutput::Formula { args, sum_rows, .. } = &plan.output else { panic!("{plan:?}") };
        assert_eq!(args[4..], strings(&["sel = Vi(1)", "jj = Vj(1)"]));
        assert!(sum_rows, "a parameter's gradient sums the rows");
        assert!(!plan.is_plain());
    }

    #[test]
    fn undeclared_variables_keep_their_positions() {
        let args = strings(&["x = Vi(0, 2)"]);
        let plan = GradientPlan::of_variable("Sum_Reduction(SqDist(x, Var(1, 2, 1)), 0)", &args, 1).unwrap();
        let GradientOutput::Formula { formula, args, .. } = &plan.output else { panic!("{plan:?}") };
        assert_eq!(formula, "Sum_Reduction(Grad(SqDist(x, Var(1, 2, 1)), Var(1, 2, 1), eta), 1)");
        assert_eq!(args, &strings(&["x = Vi(0, 2)", "eta = Vi(2, 1)"]));
        let err = GradientPlan::parse("GradFromPos(Sum_Reduction(SqDist(x, Var(1, 2, 1)), 0), x, 1)", &args[..1]);
        assert!(err.unwrap_err().to_string().contains("Var(1, 2, 1) would move"));
    }

    #[test]
    fn forms_are_recognised_by_their_outermost_call() {
        assert!(is_form(" Grad(Sum_Reduction(x, 0), x, e)"));
        assert!(is_form("GradFromPos(Sum_Reduction(x, 0), x, 1)"));
        assert!(!is_form("Grad(Sum_Reduction(x, 0), x, e) + 1"));
        assert!(!is_form("Sum_Reduction(Grad(x, x, e), 0)"));
        assert!(!is_form("Gradient(x)"));
    }
}

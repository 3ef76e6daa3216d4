//! Runs the plan of a reduction's gradient (`formula::gradient::GradientPlan`) in the engine: its
//! forward reductions, then the gradient's reduction, then, for a parameter, the sum of its rows
//! (R runs the same plans for `keops_grad()`; a program's gradient runs them at every step).

use crate::api::{Input, RunOptions};
use crate::error::Result;
use crate::formula::gradient::{declarations, GradientOutput, GradientPlan, StepSource};
use crate::operator::Operator;

/// A gradient plan with its operators parsed once.
pub struct GradientRun {
    plan: GradientPlan,
    steps: Vec<Option<Operator>>,
    output: Option<Operator>,
}

impl GradientRun {
    /// The gradient of the reduction `op` in its variable at position `v`; its inputs are `op`'s,
    /// then the gradient input (of the shape of `op`'s result).
    pub fn new(op: &Operator, v: usize) -> Result<GradientRun> {
        let args = declarations(&op.formula.variables);
        let plan = GradientPlan::of_variable(&op.formula.text, &args, v)?;
        let steps = plan
            .steps
            .iter()
            .map(|s| match &s.source {
                StepSource::Reduction { formula, args, .. } => Operator::new(formula, args).map(Some),
                StepSource::RowIndex(_) => Ok(None),
            })
            .collect::<Result<_>>()?;
        let output = match &plan.output {
            GradientOutput::Formula { formula, args, .. } => Some(Operator::new(formula, args)?),
            GradientOutput::Zero { .. } => None,
        };
        Ok(GradientRun { plan, steps, output })
    }

    /// The gradient for `inputs` (host data: the reduction's inputs, then the gradient input), its
    /// values column-major, with their shape.
    pub fn evaluate(&self, inputs: &[Input], options: &RunOptions) -> Result<(Vec<f64>, (usize, usize))> {
        let mut saved: Vec<(Vec<f64>, (usize, usize))> = Vec::with_capacity(self.steps.len());
        for (step, op) in self.plan.steps.iter().zip(&self.steps) {
            saved.push(match (&step.source, op) {
                (StepSource::Reduction { inputs: at, indices, .. }, Some(op)) => {
                    let given: Vec<Input> = at.iter().map(|&p| inputs[p]).collect();
                    let out = op.run(&given, options)?;
                    let values: Vec<f64> = match indices {
                        // (0-based, as the gradient's formula compares them)
                        true => out.indices.unwrap_or_default().into_iter().map(|i| f64::from(i - 1)).collect(),
                        false => out.values.unwrap_or_default(),
                    };
                    let width = values.len() / out.nrow.max(1);
                    (values, (out.nrow, width))
                }
                (StepSource::RowIndex(at), _) => {
                    let rows = at.map_or(1, |p| inputs[p].nrow);
                    ((0..rows).map(|r| r as f64).collect(), (rows, 1))
                }
                (StepSource::Reduction { .. }, None) => unreachable!("parsed in new()"),
            });
        }
        let mut all: Vec<Input> = inputs.to_vec();
        all.extend(saved.iter().map(|(v, (nrow, ncol))| Input::host(v, *nrow, *ncol)));
        match (&self.plan.output, &self.output) {
            (GradientOutput::Formula { sum_rows, .. }, Some(op)) => {
                let out = op.run(&all, options)?;
                let (nrow, dim) = (out.nrow, out.dim);
                let values = out.values.unwrap_or_default();
                match sum_rows {
                    true => Ok(((0..dim).map(|c| values[c * nrow..(c + 1) * nrow].iter().sum()).collect(), (1, dim))),
                    false => Ok((values, (nrow, dim))),
                }
            }
            (GradientOutput::Zero { rows_of, dim }, _) => {
                let rows = rows_of.map_or(1, |p| inputs[p].nrow);
                Ok((vec![0.0; rows * dim], (rows, *dim)))
            }
            (GradientOutput::Formula { .. }, None) => unreachable!("parsed in new()"),
        }
    }
}

//! The backward pass of one step of a program: the gradients of its reduction with respect to the
//! inputs that need one, from the engine's rules (`formula::gradient`). The gradients that are one
//! sum each (those of sums, and of maps) are fused by the axis they reduce: one reduction of the
//! concatenated formulas gives them all, in blocks of columns (the pairs' common work, such as a
//! kernel's exponential, is then done once, and a GPU launches one kernel instead of several).
//! The others (log-sum-exp, min, ...: forward runs first) each run their own plan.

use std::sync::{Arc, OnceLock};

use crate::differentiate::GradientRun;
use crate::error::Result;
use crate::formula::gradient::{declarations, GradientOutput, GradientPlan};
use crate::formula::graph::{NodeId, Op};
use crate::memo::{kept_or_made, Memo};
use crate::operator::Operator;
use crate::reduction::ReductionKind;

/// The gradients of a step's reduction with respect to the inputs asked, in groups computed
/// together.
pub(crate) struct StepGradient {
    pub groups: Vec<Group>,
    /// Whether the gradients read the value of the reduction's input at each position (those of
    /// `x + h * k` read neither `x` nor `k`): the backward pass restores only the values read.
    pub reads: Vec<bool>,
}

/// Gradients computed together: one result of `width` columns, a block of columns per input.
pub(crate) struct Group {
    pub how: How,
    pub parts: Vec<Part>,
    pub width: usize,
}

pub(crate) enum How {
    /// One reduction (a sum) whose result is the gradients side by side.
    Fused(Operator),
    /// The plan of one input's gradient (forward runs, then a reduction).
    Plan(GradientRun),
}

/// An input's gradient: the columns `column..column + dim` of its group's result.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Part {
    /// The input's position among the reduction's variables.
    pub input: usize,
    pub column: usize,
    pub dim: usize,
}

/// Gradients that are sums, by the axis they reduce and their declarations (each group one
/// reduction): the inputs' positions with their gradient's formula.
type Sums = (usize, Vec<String>, Vec<(usize, String)>);

/// Most step gradients kept parsed: a program's gradient is often asked again and again with
/// other values (an optimiser's loop), and parsing the formulas of second derivatives costs more
/// than running them on small problems.
const KEPT: usize = 256;

impl StepGradient {
    /// The gradients of `op` with respect to its variables at the positions where `wanted` is true
    /// (parsed once per formula and `wanted`).
    pub fn of(op: &Operator, wanted: &[bool]) -> Result<Arc<StepGradient>> {
        static KEPT_GRADIENTS: Memo<(Arc<str>, Vec<bool>), Arc<StepGradient>> = OnceLock::new();
        let key = (op.formula.identity.clone(), wanted.to_vec());
        kept_or_made(&KEPT_GRADIENTS, KEPT, key, || StepGradient::new(op, wanted).map(Arc::new))
    }

    fn new(op: &Operator, wanted: &[bool]) -> Result<StepGradient> {
        let vars = &op.formula.variables;
        let args = declarations(vars);
        let mut sums: Vec<Sums> = Vec::new();
        let mut groups = Vec::new();
        for v in (0..vars.len()).filter(|&v| wanted[v]) {
            let plan = GradientPlan::of_variable(&op.formula.text, &args, v)?;
            let GradientOutput::Formula { formula, args: gradient_args, .. } = &plan.output else {
                continue; // a zero gradient: nothing to add
            };
            let parsed = Operator::new(formula, gradient_args)?;
            let red = &parsed.formula.reduction;
            match plan.is_plain() && red.kind == ReductionKind::Sum {
                true => match sums.iter_mut().find(|(axis, a, _)| *axis == red.axis && a == gradient_args) {
                    Some((_, _, members)) => members.push((v, red.f_text.clone())),
                    None => sums.push((red.axis, gradient_args.clone(), vec![(v, red.f_text.clone())])),
                },
                false => {
                    let part = Part { input: v, column: 0, dim: vars[v].dim };
                    groups.push(Group { how: How::Plan(GradientRun::new(op, v)?), parts: vec![part], width: part.dim });
                }
            }
        }
        for (axis, gradient_args, members) in sums {
            let mut parts = Vec::with_capacity(members.len());
            let mut width = 0;
            for &(v, _) in &members {
                parts.push(Part { input: v, column: width, dim: vars[v].dim });
                width += vars[v].dim;
            }
            let f = members.iter().rev().map(|(_, f)| f.clone()).reduce(|inner, f| format!("Concat({f}, {inner})"));
            let fused = format!("Sum_Reduction({}, {axis})", f.expect("a group has a member"));
            groups.push(Group { how: How::Fused(Operator::new(&fused, &gradient_args)?), parts, width });
        }
        let mut reads = vec![false; vars.len()];
        for group in &groups {
            match &group.how {
                How::Fused(op) => {
                    for (r, used) in reads.iter_mut().zip(inputs_read(op)) {
                        *r |= used;
                    }
                }
                How::Plan(_) => reads.iter_mut().for_each(|r| *r = true),
            }
        }
        Ok(StepGradient { groups, reads })
    }
}

/// Whether the formula of `op` reads its input at each position (from its reduction's terms).
fn inputs_read(op: &Operator) -> Vec<bool> {
    let (graph, red) = (&op.formula.graph, &op.formula.reduction);
    let mut read = vec![false; op.formula.variables.len()];
    let mut seen = vec![false; graph.nodes.len()];
    let mut stack: Vec<NodeId> = std::iter::once(red.f).chain(red.g).collect();
    while let Some(id) = stack.pop() {
        if std::mem::replace(&mut seen[id], true) {
            continue;
        }
        let node = &graph.nodes[id];
        if let Op::Input(p) = node.op {
            read[p] = true;
        }
        stack.extend(&node.args);
    }
    read
}

//! Steps fused: consecutive sums over the same pairs (same axis, same i and j rows, no ranges,
//! none reading another's result) become one reduction of their terms side by side (`Concat`),
//! whose result is a new buffer holding theirs in blocks of columns; every step that reads one of
//! those results reads its block (`Extract`). The pairs' common work (a kernel's exponential) is
//! then done once, and a GPU launches one reduction (and its merge) instead of one per step. A
//! program is fused before it runs, forward or differentiated: the fused program is a program like
//! any other, so its gradient is that of the fused steps (fewer reductions there too).
//!
//! A result is fused only when nothing outside the loop names it (no initial value, schedule,
//! trace, stopping rule or output, not what a gradient is of) and one step writes it.

use std::collections::HashMap;
use std::convert::Infallible;
use std::ops::Range;
use std::sync::{Arc, OnceLock};

use super::{Buffer, Program, Step};
use crate::error::Result;
use crate::formula::gradient::is_form;
use crate::formula::lexer::{tokenize, Tok};
use crate::formula::{Category, Variable};
use crate::memo::{kept_or_made, Memo};
use crate::operator::Operator;
use crate::reduction::ReductionKind;

/// How a program is fused: the groups of steps (consecutive numbers of the program's steps), and
/// the fused program's steps.
pub struct Fusion {
    pub groups: Vec<Range<usize>>,
    steps: Vec<Planned>,
}

enum Planned {
    /// A step of the program, unchanged.
    Kept(usize),
    /// A group fused (`first` its first step), or a step that reads a fused result.
    New { name: String, operator: Box<Operator>, inputs: Vec<usize>, output: usize, first: usize },
}

/// Where a fused step's result lives: columns `column..column + dim` of buffer `buffer`, `width`
/// columns wide.
#[derive(Clone, Copy)]
struct Home {
    buffer: usize,
    column: usize,
    dim: usize,
    width: usize,
}

impl Fusion {
    /// How `p` (checked: `shapes` from `program::check`) is fused, where it can be; `keep`:
    /// buffers read after the loop besides the program's outputs (what a gradient is of). Planned
    /// once per program's structure (parsing the fused formulas costs more than a small step).
    pub fn of(p: &Program, shapes: &[(usize, usize)], keep: &[usize]) -> Option<Arc<Fusion>> {
        static PLANNED: Memo<String, Option<Arc<Fusion>>> = OnceLock::new();
        // (an optimisation: a program whose fused form cannot be made runs its steps apart)
        let plan = || Ok::<_, Infallible>(Fusion::plan(p, shapes, keep).ok().flatten().map(Arc::new));
        let Ok(fusion) = kept_or_made(&PLANNED, 64, structure(p, shapes, keep), plan);
        fusion
    }

    fn plan(p: &Program, shapes: &[(usize, usize)], keep: &[usize]) -> Result<Option<Fusion>> {
        let groups = groups(p, shapes, keep);
        if groups.is_empty() {
            return Ok(None);
        }
        // Each group's result: a buffer after the program's.
        let mut homes: Vec<Option<Home>> = vec![None; p.buffers.len()];
        for (g, group) in groups.iter().enumerate() {
            let width: usize = group.clone().map(|s| shapes[p.steps[s].output].1).sum();
            let mut column = 0;
            for s in group.clone() {
                let dim = shapes[p.steps[s].output].1;
                homes[p.steps[s].output] = Some(Home { buffer: p.buffers.len() + g, column, dim, width });
                column += dim;
            }
        }
        let mut steps = Vec::with_capacity(p.steps.len());
        let mut s = 0;
        while s < p.steps.len() {
            match groups.iter().find(|g| g.start == s) {
                Some(group) => {
                    steps.push(fused(p, group.clone(), &homes)?);
                    s = group.end;
                }
                None => {
                    let step = &p.steps[s];
                    let reads_fused = step.inputs.iter().any(|&b| homes[b].is_some());
                    steps.push(match reads_fused {
                        true => reading_fused(step, s, &homes)?,
                        false => Planned::Kept(s),
                    });
                    s += 1;
                }
            }
        }
        Ok(Some(Fusion { groups, steps }))
    }

    /// The fused program: `p`'s buffers and one more per group (its steps' results side by side).
    pub fn apply<'f>(&'f self, p: &Program<'f>) -> Program<'f> {
        let mut buffers = p.buffers.clone();
        for group in &self.groups {
            let names: Vec<&str> = group.clone().map(|s| p.steps[s].name.as_str()).collect();
            buffers.push(Buffer { name: names.join("+"), initial: None, schedule: None });
        }
        let step = |planned: &'f Planned| match planned {
            Planned::Kept(s) => p.steps[*s].clone(),
            Planned::New { name, operator, inputs, output, first } => Step {
                name: name.clone(),
                operator,
                inputs: inputs.clone(),
                output: *output,
                sum_scheme: p.steps[*first].sum_scheme,
                ranges: None,
            },
        };
        Program {
            buffers,
            steps: self.steps.iter().map(step).collect(),
            iterations: p.iterations,
            stop: p.stop,
            trace: p.trace.clone(),
            outputs: p.outputs.clone(),
        }
    }
}

/// The groups of consecutive steps that can be fused (two or more each).
fn groups(p: &Program, shapes: &[(usize, usize)], keep: &[usize]) -> Vec<Range<usize>> {
    let named_after_loop: Vec<usize> =
        keep.iter().chain(&p.outputs).chain(&p.trace).copied().chain(p.stop.map(|s| s.buffer)).collect();
    let alone = |s: usize| {
        let step = &p.steps[s];
        let red = &step.operator.formula.reduction;
        let out = &p.buffers[step.output];
        red.kind == ReductionKind::Sum
            && red.g.is_none()
            && step.ranges.is_none()
            && rewritable(step.operator)
            && out.initial.is_none()
            && out.schedule.is_none()
            && !named_after_loop.contains(&step.output)
            && p.steps.iter().filter(|t| t.output == step.output).count() == 1
    };
    let sizes = |s: usize| {
        let step = &p.steps[s];
        let given: Vec<(usize, usize)> = step.inputs.iter().map(|&b| shapes[b]).collect();
        step.operator.sizes(&given).ok()
    };
    let joins = |group: Range<usize>, s: usize| {
        let (a, b) = (&p.steps[group.start], &p.steps[s]);
        a.operator.formula.reduction.axis == b.operator.formula.reduction.axis
            && a.sum_scheme == b.sum_scheme
            && sizes(group.start).is_some()
            && sizes(group.start) == sizes(s)
            && !group.clone().any(|t| b.inputs.contains(&p.steps[t].output))
    };
    let mut groups = Vec::new();
    let mut s = 0;
    while s < p.steps.len() {
        let mut end = s + 1;
        if alone(s) {
            while end < p.steps.len() && alone(end) && joins(s..end, end) {
                end += 1;
            }
        }
        if end - s >= 2 {
            groups.push(s..end);
        }
        s = end;
    }
    // A group whose results some step reads in a formula that cannot be rewritten stays apart.
    groups.retain(|g| {
        let outputs: Vec<usize> = g.clone().map(|s| p.steps[s].output).collect();
        p.steps.iter().all(|step| rewritable(step.operator) || !step.inputs.iter().any(|b| outputs.contains(b)))
    });
    groups
}

/// Whether a formula's text can be rewritten by its variables' names: not a gradient's form (whose
/// arguments name variables) and no `Var(...)` reference by position.
fn rewritable(op: &Operator) -> bool {
    let text = &op.formula.text;
    let by_position = tokenize(text).map_or(true, |tokens| {
        tokens.windows(2).any(|w| matches!(&w[0].tok, Tok::Ident(n) if n == "Var") && w[1].tok == Tok::LParen)
    });
    !by_position && !is_form(text)
}

/// A variable of a step after fusion: the buffer it reads, its dimension there, and the expression
/// of the step's value (its name, or a block of a fused result) under `name`.
struct Read {
    buffer: usize,
    dim: usize,
    expression: String,
}

/// Variable `var` of a step, reading buffer `b`, named `name` after fusion.
fn read(var: &Variable, b: usize, homes: &[Option<Home>], name: &str) -> Read {
    match homes[b] {
        // (a parameter holds all the rows of its buffer: `rows` values per column)
        Some(h) => {
            let rows = var.dim / h.dim;
            let expression = format!("Extract({name}, {}, {})", rows * h.column, var.dim);
            Read { buffer: h.buffer, dim: rows * h.width, expression }
        }
        None => Read { buffer: b, dim: var.dim, expression: name.to_string() },
    }
}

/// A group of steps as one: the sum of their terms side by side, with one variable per buffer
/// and category read.
fn fused(p: &Program, group: Range<usize>, homes: &[Option<Home>]) -> Result<Planned> {
    let mut union: Vec<(usize, Category, usize)> = Vec::new();
    let mut terms = Vec::with_capacity(group.len());
    for s in group.clone() {
        let step = &p.steps[s];
        let formula = &step.operator.formula;
        let mut expressions = HashMap::new();
        for (var, &b) in formula.variables.iter().zip(&step.inputs) {
            let buffer = homes[b].map_or(b, |h| h.buffer);
            let u = match union.iter().position(|&(ub, c, _)| ub == buffer && c == var.category) {
                Some(u) => u,
                None => {
                    let r = read(var, b, homes, "");
                    union.push((buffer, var.category, r.dim));
                    union.len() - 1
                }
            };
            expressions.insert(var.name.clone(), read(var, b, homes, &format!("fused{u}")).expression);
        }
        terms.push(renamed(&formula.reduction.f_text, &expressions)?);
    }
    let concat = terms.into_iter().rev().reduce(|inner, f| format!("Concat({f}, {inner})")).expect("two or more steps");
    let axis = p.steps[group.start].operator.formula.reduction.axis;
    let args: Vec<String> =
        union.iter().enumerate().map(|(u, (_, c, dim))| format!("fused{u} = {}({dim})", c.keyword())).collect();
    let operator = Operator::new(&format!("Sum_Reduction({concat}, {axis})"), &args)?;
    let output = homes[p.steps[group.start].output].expect("a fused result").buffer;
    let names: Vec<&str> = group.clone().map(|s| p.steps[s].name.as_str()).collect();
    let inputs = union.iter().map(|&(b, _, _)| b).collect();
    Ok(Planned::New { name: names.join("+"), operator: Box::new(operator), inputs, output, first: group.start })
}

/// Step `s`, which reads a fused result: the same formula, reading its block.
fn reading_fused(step: &Step, s: usize, homes: &[Option<Home>]) -> Result<Planned> {
    let formula = &step.operator.formula;
    let reads: Vec<Read> = formula.variables.iter().zip(&step.inputs).map(|(v, &b)| read(v, b, homes, &v.name)).collect();
    let expressions: HashMap<String, String> =
        formula.variables.iter().zip(&reads).map(|(v, r)| (v.name.clone(), r.expression.clone())).collect();
    let args: Vec<String> =
        formula.variables.iter().zip(&reads).map(|(v, r)| format!("{} = {}({})", v.name, v.category.keyword(), r.dim)).collect();
    let operator = Operator::new(&renamed(&formula.text, &expressions)?, &args)?;
    let inputs = reads.iter().map(|r| r.buffer).collect();
    Ok(Planned::New { name: step.name.clone(), operator: Box::new(operator), inputs, output: step.output, first: s })
}

/// `text` with each variable named in `expressions` replaced by its expression (a name followed by
/// `(` is a function's).
fn renamed(text: &str, expressions: &HashMap<String, String>) -> Result<String> {
    let tokens = tokenize(text)?;
    let mut out = String::with_capacity(text.len() * 2);
    let mut copied = 0;
    for (k, token) in tokens.iter().enumerate() {
        let Tok::Ident(name) = &token.tok else { continue };
        let called = tokens.get(k + 1).is_some_and(|t| t.tok == Tok::LParen);
        if let Some(e) = expressions.get(name).filter(|_| !called) {
            out.push_str(&text[copied..token.pos]);
            out.push_str(&format!("({e})"));
            copied = token.pos + name.len();
        }
    }
    out.push_str(&text[copied..]);
    Ok(out)
}

/// What a fusion depends on, as a key: each step's formula, buffers and options, each buffer's
/// shape and whether it has an initial value or a schedule, and the buffers read after the loop.
fn structure(p: &Program, shapes: &[(usize, usize)], keep: &[usize]) -> String {
    let mut key = String::new();
    for s in &p.steps {
        let (identity, scheme) = (&s.operator.formula.identity, s.sum_scheme);
        key += &format!("{identity}|{:?}>{}|{scheme:?}|{};", s.inputs, s.output, s.ranges.is_some());
    }
    for (b, shape) in p.buffers.iter().zip(shapes) {
        key += &format!("{shape:?}{}{};", b.initial.is_some() as u8, b.schedule.is_some() as u8);
    }
    key + &format!("{keep:?}{:?}{:?}{:?}", p.outputs, p.trace, p.stop.map(|s| s.buffer))
}

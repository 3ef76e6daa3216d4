//! Grouped sums on the CPU in O(N): `Sum_Reduction(Equal(l, g) * F, axis)`, where `l` is a label
//! (dimension 1) of the reduced index, `g` a group value (dimension 1) of the output index and `F`
//! reads only the reduced index's variables and parameters, adds `F` of each reduced row to the
//! outputs whose group equals its label: K-means' sums and counts per cluster, segment sums. As a
//! reduction it costs N x K terms; here, a map of `F` over the N rows (one term a row) and one pass
//! that adds each row to its groups (`Operator` runs both). The result is the reduction's, summed
//! in float64 (the terms are those of the call's precision). A term that is not finite sends the
//! call the usual way: there, `0 * Inf` makes the other groups NaN.

use std::collections::HashMap;
use std::sync::Mutex;

use crate::formula::ast::{Ast, BinOp, Node};
use crate::formula::{parser, Category, Formula};
use crate::precision::Precision;
use crate::reduction::ReductionKind;

/// A formula of this form: the map of its term `F` (a formula and its declarations), and where its
/// label and group inputs are. `Operator` runs it: the map, then `add_by_group`.
#[derive(Debug, Clone)]
pub struct GroupedSum {
    /// `F` over the reduced index's rows (a reduction over the output index, which it does not read).
    pub map_formula: String,
    pub map_args: Vec<String>,
    /// The positions, among the formula's inputs, of the map's inputs (in its order).
    pub map_inputs: Vec<usize>,
    pub label: usize,
    pub group: usize,
}

impl GroupedSum {
    /// The grouped sum that `formula` is, if it is one (the map may still fail to parse: a term
    /// that names the label or the group is not one).
    pub fn of(formula: &Formula) -> Option<GroupedSum> {
        let red = &formula.reduction;
        if red.kind != ReductionKind::Sum || red.g.is_some() {
            return None;
        }
        let tree = parser::parse(&red.f_text).ok()?;
        let Ast::Binary(BinOp::Mul, a, b) = &tree.ast else { return None };
        let (equal, term) = match (equal_names(a), equal_names(b)) {
            (Some(names), None) => (names, b),
            (None, Some(names)) => (names, a),
            _ => return None,
        };
        let (reduced, out) = if red.axis == 0 { (Category::J, Category::I) } else { (Category::I, Category::J) };
        let find = |name: &str| formula.variables.iter().find(|v| v.name == name && v.dim == 1);
        let (x, y) = (find(equal.0)?, find(equal.1)?);
        let (label, group) = match (x.category, y.category) {
            (c, d) if c == reduced && d == out => (x.position, y.position),
            (c, d) if c == out && d == reduced => (y.position, x.position),
            _ => return None,
        };
        // The term's variables: every other one, none of the output index, some of the reduced one.
        let others: Vec<_> = formula.variables.iter().filter(|v| v.position != label && v.position != group).collect();
        if others.iter().any(|v| v.category == out) || !others.iter().any(|v| v.category == reduced) {
            return None;
        }
        Some(GroupedSum {
            map_formula: format!("Sum_Reduction({}, {})", &red.f_text[term.span.clone()], 1 - red.axis),
            map_args: others.iter().map(|v| format!("{} = {}({})", v.name, v.category.keyword(), v.dim)).collect(),
            map_inputs: others.iter().map(|v| v.position).collect(),
            label,
            group,
        })
    }
}

/// The sums, for each group value of `groups`, of the rows of `terms` (`dim` columns of
/// `labels.len()` rows, column-major, finite) whose label equals it, as the call's `precision`
/// compares and returns values: `groups.len() x dim`, column-major.
pub fn add_by_group(labels: &[f64], groups: &[f64], terms: &[f64], dim: usize, precision: Precision) -> Vec<f64> {
    let round = |x: f64| rounded(x, precision);
    let outputs_of = Groups::new(groups, round);
    let (rows, n_out) = (labels.len(), groups.len());
    // Rows in parts on every core, each part's sums its own, added in order.
    let parts = crate::parallel::cores().min(rows / ROWS_PER_PART + 1);
    let per_part = rows.div_ceil(parts);
    let partial: Vec<Mutex<Vec<f64>>> = (0..parts).map(|_| Mutex::new(Vec::new())).collect();
    crate::pool::run_parts(parts, &|t| {
        let mut sums = vec![0.0; n_out * dim];
        for r in t * per_part..((t + 1) * per_part).min(rows) {
            for &k in outputs_of.of(round(labels[r])) {
                for c in 0..dim {
                    sums[k as usize + c * n_out] += terms[r + c * rows];
                }
            }
        }
        *partial[t].lock().unwrap_or_else(|e| e.into_inner()) = sums;
    });
    let mut sums = vec![0.0; n_out * dim];
    for part in partial {
        let part = part.into_inner().unwrap_or_else(|e| e.into_inner());
        sums.iter_mut().zip(part).for_each(|(s, p)| *s += p);
    }
    rounded_all(sums, precision)
}

/// Rows below this are added on one core.
const ROWS_PER_PART: usize = 1 << 16;

/// The outputs of each group value: a table for whole numbers from 0 (cluster numbers, labels),
/// else a hash map.
enum Groups {
    Table(Vec<Vec<u32>>),
    Hash(HashMap<u64, Vec<u32>>),
}

impl Groups {
    fn new(groups: &[f64], round: impl Fn(f64) -> f64) -> Groups {
        let values: Vec<f64> = groups.iter().map(|&g| round(g)).collect();
        let whole = |g: f64| g >= 0.0 && g.fract() == 0.0 && g < (4 * groups.len() + 1024) as f64;
        if values.iter().all(|&g| whole(g) || g.is_nan()) {
            let len = values.iter().filter(|g| !g.is_nan()).fold(0.0, |m: f64, &g| m.max(g + 1.0)) as usize;
            let mut table = vec![Vec::new(); len];
            for (k, &g) in values.iter().enumerate().filter(|(_, g)| !g.is_nan()) {
                table[g as usize].push(k as u32);
            }
            return Groups::Table(table);
        }
        let mut hash: HashMap<u64, Vec<u32>> = HashMap::new();
        for (k, &g) in values.iter().enumerate().filter(|(_, g)| !g.is_nan()) {
            hash.entry(key(g)).or_default().push(k as u32);
        }
        Groups::Hash(hash)
    }

    /// The outputs whose group equals `label` (none for NaN: Equal says so).
    fn of(&self, label: f64) -> &[u32] {
        match self {
            Groups::Table(table) if label >= 0.0 && label.fract() == 0.0 => {
                table.get(label as usize).map_or(&[][..], Vec::as_slice)
            }
            Groups::Table(_) => &[],
            Groups::Hash(hash) => hash.get(&key(label)).map_or(&[][..], Vec::as_slice),
        }
    }
}

/// The two names of `Equal(a, b)`, if `node` is that call.
fn equal_names(node: &Node) -> Option<(&str, &str)> {
    match &node.ast {
        Ast::Call(name, args) if name == "Equal" && args.len() == 2 => match (&args[0].ast, &args[1].ast) {
            (Ast::Name(a), Ast::Name(b)) => Some((a, b)),
            _ => None,
        },
        _ => None,
    }
}

/// `x` as the call's precision holds it (float16 storage, float32 or float64).
fn rounded(x: f64, precision: Precision) -> f64 {
    match precision {
        Precision::F64 => x,
        Precision::F32 => x as f32 as f64,
        Precision::F16 => half::f16::from_f64(x).to_f64(),
    }
}

/// The sums as the call's precision returns them (float32 for float32 and float16).
fn rounded_all(sums: Vec<f64>, precision: Precision) -> Vec<f64> {
    match precision {
        Precision::F64 => sums,
        _ => sums.into_iter().map(|s| s as f32 as f64).collect(),
    }
}

/// A hash key of a value, -0 and 0 alike (Equal says they are equal).
fn key(x: f64) -> u64 {
    if x == 0.0 {
        0
    } else {
        x.to_bits()
    }
}

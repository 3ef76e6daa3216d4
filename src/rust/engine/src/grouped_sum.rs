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
use crate::formula::{parser, Category, Formula, Op};
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
    /// The map's inputs that are variables of the output index: each row reads the row of the
    /// output whose group equals its label (K-means' `SqDist(x, c)`: a point and its centre).
    pub gathered: Vec<usize>,
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
        // The term's variables: every other one, some of the reduced index. One of the output index
        // is read at the row of the output whose group is the label: gathered, a variable of the
        // reduced index for the map.
        let others: Vec<_> = formula.variables.iter().filter(|v| v.position != label && v.position != group).collect();
        if !others.iter().any(|v| v.category == reduced) {
            return None;
        }
        let as_map = |c: Category| if c == out { reduced } else { c };
        Some(GroupedSum {
            map_formula: format!("Sum_Reduction({}, {})", &red.f_text[term.span.clone()], 1 - red.axis),
            map_args: others.iter().map(|v| format!("{} = {}({})", v.name, as_map(v.category).keyword(), v.dim)).collect(),
            map_inputs: others.iter().map(|v| v.position).collect(),
            gathered: others.iter().enumerate().filter(|(_, v)| v.category == out).map(|(m, _)| m).collect(),
            label,
            group,
        })
    }
}

/// Where a component of the term comes from when the term is made of inputs and constants only
/// (`x`, `Concat(x, IntCst(1))`: K-means' sums and counts): then no map is evaluated (a third of the
/// time went to transposing its row-major results), the rows are added from the inputs themselves.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Source {
    /// Component `c` of the map's input `p` (a parameter where `param`: the same value for every row).
    Input { p: usize, c: usize, param: bool },
    Constant(f64),
}

/// The sources of the components of the term of `map` (the map of a grouped sum), if all are
/// inputs or constants.
pub fn direct_sources(map: &Formula) -> Option<Vec<Source>> {
    fn walk(map: &Formula, id: usize, out: &mut Vec<Source>) -> Option<()> {
        let node = &map.graph.nodes[id];
        match node.op {
            Op::Input(p) => {
                let param = map.variables[p].category == Category::Param;
                out.extend((0..node.dim).map(|c| Source::Input { p, c, param }));
            }
            Op::Constant(_) if node.dim == 1 => out.push(Source::Constant(node.op.constant_value()?)),
            Op::Concat => {
                for &a in &node.args {
                    walk(map, a, out)?;
                }
            }
            _ => return None,
        }
        Some(())
    }
    let mut out = Vec::new();
    walk(map, map.reduction.f, &mut out)?;
    Some(out)
}

/// A column of terms: `rows` values, or one value for every row.
#[derive(Clone, Copy)]
pub enum Column<'a> {
    Values(&'a [f64]),
    Same(f64),
}

impl Column<'_> {
    #[inline(always)]
    fn at(&self, r: usize) -> f64 {
        match self {
            Column::Values(v) => v[r],
            Column::Same(x) => *x,
        }
    }
}

/// The columns of the terms of `rows` rows, from `sources` and the map's inputs `data` (each
/// column-major, `rows` rows, or a parameter); constants rounded to the call's precision.
pub fn direct_columns<'a>(sources: &[Source], data: &[&'a [f64]], rows: usize, precision: Precision) -> Vec<Column<'a>> {
    let column = |source: &Source| match *source {
        Source::Constant(x) => Column::Same(rounded(x, precision)),
        Source::Input { p, c, param: true } => Column::Same(rounded(data[p][c], precision)),
        Source::Input { p, c, param: false } => Column::Values(&data[p][c * rows..(c + 1) * rows]),
    };
    sources.iter().map(column).collect()
}

/// The sums, for each group value of `groups`, of the rows of the terms `columns` (one per
/// component, `labels.len()` rows) whose label equals it, the terms rounded to the call's
/// `precision` (as its map computes them), compared and returned as that precision does:
/// `groups.len() x columns.len()`, column-major. None where a term is not finite (or a sum
/// overflows): the reduction over every pair says then what each group is (0 * Inf is NaN).
pub fn add_by_group(labels: &[f64], groups: &[f64], columns: &[Column], precision: Precision) -> Option<Vec<f64>> {
    let round = |x: f64| rounded(x, precision);
    let outputs_of = Groups::new(groups, round);
    let (rows, n_out, dim) = (labels.len(), groups.len(), columns.len());
    // Rows in parts on every core, each part's sums its own, added in order.
    let parts = crate::parallel::cores().min(rows / ROWS_PER_PART + 1);
    let per_part = rows.div_ceil(parts);
    let partial: Vec<Mutex<Vec<f64>>> = (0..parts).map(|_| Mutex::new(Vec::new())).collect();
    let single = outputs_of.single();
    let finite = std::sync::atomic::AtomicBool::new(true);
    crate::pool::run_parts(parts, &|t| {
        let rows = t * per_part..((t + 1) * per_part).min(rows);
        let mut sums = vec![0.0; n_out * dim];
        if let Some(single) = &single {
            // The rounding chosen once, outside the loops (it is on every term).
            let ok = match precision {
                Precision::F64 => single.add(labels, rows, columns, &mut sums, |x| x),
                Precision::F32 => single.add(labels, rows, columns, &mut sums, |x| x as f32 as f64),
                Precision::F16 => single.add(labels, rows, columns, &mut sums, |x| rounded(x, Precision::F16)),
            };
            // A term that is not finite makes its group's sum so.
            if !ok || !sums.iter().all(|s| s.is_finite()) {
                finite.store(false, std::sync::atomic::Ordering::Relaxed);
            }
        } else {
            for r in rows {
                if !columns.iter().all(|column| round(column.at(r)).is_finite()) {
                    finite.store(false, std::sync::atomic::Ordering::Relaxed);
                }
                for &k in outputs_of.of(round(labels[r])) {
                    for (c, column) in columns.iter().enumerate() {
                        sums[k as usize + c * n_out] += round(column.at(r));
                    }
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
    finite.into_inner().then(|| rounded_all(sums, precision))
}

/// The rows of `values` (a column-major matrix of `groups.len()` rows) of the output of each label,
/// as a column-major matrix of `labels.len()` rows: the term of a grouped sum that reads a variable
/// of the output index. None unless each label is the group of exactly one output (each row then
/// has one term, not one per output).
pub fn gather_by_group(labels: &[f64], groups: &[f64], values: &[f64], precision: Precision) -> Option<Vec<f64>> {
    let single = Groups::new(groups, |g| rounded(g, precision)).single()?;
    let (n, k) = (labels.len(), groups.len());
    let outputs: Vec<i32> = labels.iter().map(|&l| single.of(rounded(l, precision))).collect();
    if outputs.iter().any(|&g| g < 0) {
        return None;
    }
    let mut out = vec![0.0; values.len() / k.max(1) * n];
    crate::parallel::for_each_row_block(&mut out, n, ROWS_PER_PART, |b, columns| {
        let rows = &outputs[b * ROWS_PER_PART..];
        for (c, column) in columns.iter_mut().enumerate() {
            let from = &values[c * k..(c + 1) * k];
            column.iter_mut().zip(rows).for_each(|(x, &g)| *x = from[g as usize]);
        }
    });
    Some(out)
}

/// Running sums per output and column in `Single::add`.
const WAYS: usize = 4;

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

    /// The output of each whole number, where the groups are whole numbers from 0, each at most
    /// once.
    fn single(&self) -> Option<Single> {
        let Groups::Table(table) = self else { return None };
        let one = |outputs: &Vec<u32>| match outputs[..] {
            [] => Some(-1),
            [k] => i32::try_from(k).ok(),
            _ => None,
        };
        table.iter().map(one).collect::<Option<Vec<i32>>>().map(Single)
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

/// The output of each whole number (-1: none), from `Groups::single`.
struct Single(Vec<i32>);

impl Single {
    /// The output whose group equals `label`, -1 where none does (NaN included; -0 is 0).
    #[inline(always)]
    fn of(&self, label: f64) -> i32 {
        // (a saturating cast to i32 and back, no call to trunc() and none of the long conversions
        // of usize: NaN gives 0, not equal to it; negative numbers are past the table as u32)
        let k = label as i32;
        match k as f64 == label && (k as u32 as usize) < self.0.len() {
            true => self.0[k as usize],
            false => -1,
        }
    }

    /// Adds the rows `rows` of `columns`, each term rounded by `round`, to the `sums` of their
    /// label's output (`sums`: one column after the other), in one pass over the rows: each row's
    /// output found once, its terms added to WAYS running sums per output (row r into way r % WAYS:
    /// consecutive rows of one output, as in sorted data, do not wait for each other's addition),
    /// each output's rows counted for the columns that are the same in every row. False where a term
    /// of a row of no output is not finite (those of the others show in their sums).
    #[inline(always)]
    fn add(&self, labels: &[f64], rows: std::ops::Range<usize>, columns: &[Column], sums: &mut [f64], round: impl Fn(f64) -> f64) -> bool {
        let n_out = sums.len() / columns.len().max(1);
        let values: Vec<&[f64]> = columns
            .iter()
            .filter_map(|column| match column {
                Column::Values(v) => Some(&v[rows.clone()]),
                Column::Same(_) => None,
            })
            .collect();
        let width = values.len();
        // (way, output, value column), the columns of one row side by side
        let mut ways = vec![0.0; WAYS * n_out * width];
        let mut counts = vec![0u64; n_out];
        let labels = &labels[rows];
        // (the common widths with a loop the compiler unrolls)
        let mut finite = match width {
            1 => self.add_rows::<1>(labels, &values, &mut ways, &mut counts, &round),
            2 => self.add_rows::<2>(labels, &values, &mut ways, &mut counts, &round),
            3 => self.add_rows::<3>(labels, &values, &mut ways, &mut counts, &round),
            _ => self.add_rows::<0>(labels, &values, &mut ways, &mut counts, &round),
        };
        let mut value_column = 0;
        for (column, sums) in columns.iter().zip(sums.chunks_exact_mut(n_out.max(1))) {
            match *column {
                Column::Values(_) => {
                    for (k, s) in sums.iter_mut().enumerate() {
                        *s = (0..WAYS).fold(*s, |s, w| s + ways[(w * n_out + k) * width + value_column]);
                    }
                    value_column += 1;
                }
                Column::Same(x) => {
                    // (each count is exact; its product with x rounded once)
                    finite &= x.is_finite();
                    for (s, &count) in sums.iter_mut().zip(&counts) {
                        *s += count as f64 * x;
                    }
                }
            }
        }
        finite
    }

    /// `add`'s pass over the rows, for `W` value columns (0: any number).
    #[inline(always)]
    fn add_rows<const W: usize>(&self, labels: &[f64], values: &[&[f64]], ways: &mut [f64], counts: &mut [u64], round: &impl Fn(f64) -> f64) -> bool {
        let width = if W == 0 { values.len() } else { W };
        let n_out = counts.len();
        let mut finite = true;
        for (r, &label) in labels.iter().enumerate() {
            let k = self.of(round(label));
            if k < 0 {
                finite &= values.iter().all(|v| round(v[r]).is_finite());
                continue;
            }
            counts[k as usize] += 1;
            let at = ((r % WAYS) * n_out + k as usize) * width;
            for (s, v) in ways[at..at + width].iter_mut().zip(&values[..width]) {
                *s += round(v[r]);
            }
        }
        finite
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
#[inline(always)]
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

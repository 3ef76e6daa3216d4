//! Reductions over a short range (a K-means assignment to a few centroids, the E-step of a mixture
//! of a few components, predictions at a few points). Row at a time, the evaluator pays a fixed
//! cost per output row (walking the formula graph, starting and finishing the reduction: ~170
//! cycles) that a short range does not amortise: 10 centroids in D = 5 took 140 ns per row. Here the
//! two indices swap roles: a tile runs along a block of output rows, the graph is walked once per
//! reduced index for the whole block, and the block's terms are reduced across its rows at once
//! (`columns`), with the same results.
//!
//! Block-sparse reductions with many rows per block and few reduced indices per row (a batch of
//! small problems: B Sinkhorn problems of 100 bins are 100 x 100 diagonal blocks) go the same way,
//! each block of rows against its ranges, a piece of at most `LONGEST` indices at a time.

use super::columns::Columns;
use super::lanes::Arg;
use super::{view, Context, Frame, Workspace};
use crate::formula::{Formula, Op};
use crate::plan::{Plan, Role};
use crate::ranges::BlockRanges;
use crate::schedule::work::Work;
use crate::real::Real;
use crate::reduction::Accumulator;

/// Longest reduced range evaluated this way, and longest piece of a range reduced at once. The cost
/// per row of the other path, spread over its terms, is then at most a few cycles per term.
const LONGEST: usize = 64;
/// With ranges: most reduced indices per row, on average over the rows in blocks. A row of the other
/// path costs its fixed cost once per range, and a batch of 100 x 100 problems spent more than half of
/// its time there (2.0 ns per pair on one thread, against 0.8 ns for one dense 25 600^2 problem).
const LONGEST_RANGED: usize = 4 * LONGEST;
/// Most rows per block: enough to spread the walk of the graph (a few hundred cycles) thin.
const MOST_ROWS: usize = 256;
/// Fewest rows per block worth the swap, and the multiple of rows blocks are made of.
const FEWEST_ROWS: usize = 16;
/// K-selections of at least this K are reduced row at a time.
const KEEPS_ROWS_FROM_K: usize = 4;
/// Most bytes of values a block holds (node values, terms, working columns): about L2.
const BLOCK_BYTES: usize = 512 << 10;

/// Rows per block where `formula` is best reduced a block of rows at a time, `None` where row at a
/// time. `plan` is the plan of row-at-a-time evaluation.
pub fn rows_per_block<T: Real>(
    formula: &Formula,
    plan: &Plan,
    acc: &Accumulator,
    n_out: usize,
    n_red: usize,
    threads: usize,
    ranges: Option<&BlockRanges>,
) -> Option<usize> {
    let red = &formula.reduction;
    // The terms must vary along the reduced index, as the reducers take them row at a time (a term
    // that does not, e.g. Sum_Reduction(x_i, 0), is summed as a product there).
    // A map (one reduced index, e.g. no variable on that axis: Sum_Reduction(x_i * 2, 0)) has terms
    // that vary along the output index only, which a block of rows takes as they come; row at a
    // time, it cost ~250 ns a row (10^6 rows: 0.25 s for what a copy does in 15 ms).
    let varies = |id: usize| plan.roles[id].is_some_and(Role::varies_in_tile);
    let varies_by_row = |id: usize| plan.roles[id].is_some_and(|r| matches!(r, Role::Outer | Role::Pair));
    let terms_fit = (varies(red.f) && red.g.is_none_or(varies))
        || (n_red == 1 && varies_by_row(red.f) && red.g.is_none_or(varies_by_row));
    let short = match ranges {
        None => (1..=LONGEST).contains(&n_red) && n_red < n_out,
        Some(ranges) => short_blocks(ranges),
    };
    // K-selections of K >= 4 insert each term into the rows' lists, which row at a time keeps in
    // registers: there the other path wins (1e6 rows against 50 points in D = 3, K = 5: 0.19 s
    // against 0.34; the pruned 10-NN of 10^6 points in D = 2, cells of 24 points: 0.73 against
    // 2.54 s; K = 2 or 3 against 10 points still gain here: 0.037 against 0.063 s at K = 2).
    if !short || !terms_fit || (acc.kind.is_k_selection() && acc.k >= KEEPS_ROWS_FROM_K) {
        return None;
    }
    let n_red = n_red.min(LONGEST);
    // The values of a row: the nodes that vary along the output index, the terms and working columns.
    let graph = &formula.graph;
    let nodes: usize = (0..graph.nodes.len())
        .filter(|&id| matches!(plan.roles[id], Some(Role::Outer | Role::Pair)) && !matches!(graph.nodes[id].op, Op::Input(_)))
        .map(|id| graph.dim(id))
        .sum();
    let values = nodes + Columns::<T>::values_per_row(acc, n_red);
    let bytes = values * std::mem::size_of::<T>() + acc.state_len() * std::mem::size_of::<f64>();
    let fit = BLOCK_BYTES / bytes;
    // Blocks for every thread to the end: several per thread.
    let spread = n_out.div_ceil(threads * 4).next_multiple_of(FEWEST_ROWS);
    let rows = fit.min(MOST_ROWS).min(spread) / FEWEST_ROWS * FEWEST_ROWS;
    (rows >= FEWEST_ROWS).then_some(rows)
}

/// Whether the blocks of `ranges` are worth reducing a block of rows at a time: on average, at most
/// `LONGEST_RANGED` reduced indices per row and at least `FEWEST_ROWS` rows per block (blocks that
/// reduce over nothing left out: they cost nothing either way).
fn short_blocks(ranges: &BlockRanges) -> bool {
    let (mut rows, mut pairs, mut blocks) = (0, 0, 0);
    let mut first = 0;
    for (block, &end) in ranges.blocks.iter().zip(&ranges.slices) {
        let reduced: usize = ranges.reduced[first..end].iter().map(|r| r.len()).sum();
        first = end;
        if !block.is_empty() && reduced > 0 {
            rows += block.len();
            pairs += block.len() * reduced;
            blocks += 1;
        }
    }
    rows > 0 && pairs <= rows * LONGEST_RANGED && rows >= blocks * FEWEST_ROWS
}

/// The plan of the evaluation along the rows: what depends on the output index alone varies along
/// the tile, what depends on the reduced index alone is one value per frame.
pub fn transpose(plan: &Plan) -> Plan {
    let swap = |role: Role| match role {
        Role::Outer => Role::Inner,
        Role::Inner => Role::Outer,
        role => role,
    };
    Plan {
        roles: plan.roles.iter().map(|r| r.map(swap)).collect(),
        constant: plan.constant.clone(),
        outer: plan.inner.clone(),
        inner: plan.outer.clone(),
        pair: plan.pair.clone(),
    }
}

impl<T: Real> Workspace<T> {
    /// Reduces the rows of `work` over its ranges of the reduced index (the whole range, without
    /// ranges): a frame is one reduced index, its tile the block of rows (`Context::transposed`).
    /// Each range goes in pieces of at most `LONGEST` indices, of equal lengths, each reduced into
    /// the states as a tile of the row-at-a-time path is.
    #[inline(always)]
    pub(super) fn reduce_block(
        &mut self,
        ctx: &Context<T>,
        work: &Work,
        values: &mut [f64],
        indices: &mut [i32],
        fma: bool,
    ) {
        let (acc, plan, red) = (ctx.acc, ctx.plan, &ctx.formula.reduction);
        let rows = work.rows.len();
        let state_len = acc.state_len();
        // Every row starts from the state of the first (no dispatch on the kind per row).
        let (first_state, others) = self.states[..rows * state_len].split_at_mut(state_len);
        acc.init(first_state);
        for state in others.chunks_exact_mut(state_len) {
            state.copy_from_slice(first_state);
        }
        let block = Frame { row: 0, j0: work.rows.start, len: rows };
        if work.reduced.iter().any(|r| !r.is_empty()) {
            for &id in &plan.inner {
                self.compute(ctx, id, &block, fma);
            }
        }
        for range in work.reduced {
            let pieces = range.len().div_ceil(LONGEST);
            for piece in 0..pieces {
                let j0 = range.start + piece * range.len() / pieces;
                let len = range.start + (piece + 1) * range.len() / pieces - j0;
                for t in 0..len {
                    let frame = Frame { row: j0 + t, ..block };
                    for &id in &plan.outer {
                        self.compute(ctx, id, &Frame { len: 1, ..frame }, fma);
                    }
                    for &id in &plan.pair {
                        self.compute(ctx, id, &frame, fma);
                    }
                    let f = view(ctx, &self.buffers, red.f, &frame);
                    let g = red.g.map_or(Arg::EMPTY, |g| view(ctx, &self.buffers, g, &frame));
                    self.columns.store(t, &f, &g, rows);
                }
                self.columns.reduce(acc, rows, len, j0, &mut self.states[..rows * state_len], fma);
            }
        }
        acc.finalize_rows::<T>(&self.states[..rows * state_len], values, indices);
    }
}

/// The columns a worker needs for `ctx`: none unless it reduces blocks of rows.
pub fn columns<T: Real>(ctx: &Context<T>) -> Columns<T> {
    if ctx.transposed {
        Columns::new(ctx.acc, ctx.n_red.min(LONGEST), ctx.rows_per_block)
    } else {
        Columns::default()
    }
}

#[cfg(test)]
#[path = "../../tests/common/mod.rs"]
mod test_common;

#[cfg(test)]
mod tests {
    use super::super::{evaluate_with, Inputs, RowMajor};
    use super::*;
    use crate::reduction::SumScheme;

    use super::test_common::random as uniform;

    /// The inputs x, a (`n_out` rows), y, b, w (`n_red` rows) of `args`: coordinates on a coarse
    /// grid (distances tie), a row of NaN terms, a row of +inf and -inf terms, a row of -inf terms and
    /// a row with a single NaN term (inf - inf, at the reduced index 2).
    fn data(n_out: usize, n_red: usize) -> Vec<Vec<f64>> {
        let grid = |len: usize, seed: u64| -> Vec<f64> { uniform(len, seed).iter().map(|t| (t * 4.0).floor() / 2.0).collect() };
        let (mut x, mut a, mut y) = (grid(3 * n_out, 1), uniform(n_out, 2), grid(3 * n_red, 3));
        a.iter_mut().for_each(|a| *a -= 0.5);
        for (row, value) in [(3, f64::INFINITY), (5, f64::NAN), (7, f64::NEG_INFINITY)] {
            if let Some(a) = a.get_mut(row) {
                *a = value;
            }
        }
        if n_out > 9 && n_red > 2 {
            x[9] = f64::INFINITY;
            y[2] = f64::INFINITY;
        }
        // Weights of either sign, never 0 (a 0 times an infinite a would be NaN).
        let w: Vec<f64> = uniform(n_red, 4).iter().enumerate().map(|(j, t)| (0.1 + t) * if j % 2 == 0 { 1.0 } else { -1.0 }).collect();
        vec![x, a, y, uniform(2 * n_red, 5), w]
    }

    /// The variables: x and a vary along the output index, y, b and w along the reduced one.
    fn args(axis: usize) -> Vec<String> {
        let (out, red) = if axis == 0 { ("Vi", "Vj") } else { ("Vj", "Vi") };
        vec![format!("x = {out}(3)"), format!("a = {out}(1)"), format!("y = {red}(3)"), format!("b = {red}(2)"), format!("w = {red}(1)")]
    }

    fn run<T: Real>(
        formula: &Formula,
        data: &[Vec<f64>],
        n_out: usize,
        n_red: usize,
        scheme: SumScheme,
        ranges: Option<&BlockRanges>,
        short: bool,
    ) -> RowMajor {
        let converted: Vec<Vec<T>> = data.iter().map(|v| v.iter().map(|&x| T::from_f64(x)).collect()).collect();
        let (n_i, n_j) = if formula.reduction.axis == 0 { (n_out, n_red) } else { (n_red, n_out) };
        let inputs = Inputs { data: converted.iter().map(|v| v.as_slice()).collect(), n_i, n_j };
        let settings = super::super::Settings { scheme, threads: 2, interrupt: None, progress: None, isa: Default::default() };
        evaluate_with(formula, &inputs, &settings, ranges, short).unwrap()
    }

    fn same_bits(a: &[f64], b: &[f64]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
    }

    /// Every reduction (its text with AXIS for the axis, and its K).
    fn reductions() -> Vec<(String, usize)> {
        let selections = ["Min", "Max", "ArgMin", "ArgMax", "Min_ArgMin", "Max_ArgMax"];
        let mut reductions: Vec<(String, usize)> = Vec::new();
        for f in ["SqDist(x,y) + a*w", "x - y*w"] {
            reductions.extend(selections.iter().map(|s| (format!("{s}_Reduction({f}, AXIS)"), 1)));
            reductions.extend(["KMin", "ArgKMin", "KMin_ArgKMin"].iter().map(|s| (format!("{s}_Reduction({f}, 3, AXIS)"), 3)));
            reductions.push((format!("Sum_Reduction({f}, AXIS)"), 1));
        }
        let lse = "a*w - SqDist(x,y)";
        reductions.push((format!("LogSumExp_Reduction({lse}, AXIS)"), 1));
        reductions.push((format!("LogSumExp_Reduction({lse}, AXIS, 1 + b*b)"), 1));
        reductions.push((format!("SumSoftMaxWeight_Reduction({lse}, b, AXIS)"), 1));
        reductions
    }

    /// The sum schemes worth comparing for `text`.
    fn schemes(text: &str) -> &'static [SumScheme] {
        if text.starts_with("Sum_") {
            &[SumScheme::Auto, SumScheme::DirectSum, SumScheme::BlockSum, SumScheme::KahanScheme]
        } else {
            &[SumScheme::Auto]
        }
    }

    /// Every reduction over ranges of 1 to `LONGEST` indices, on both axes and in both precisions,
    /// gives to the bit what the row-at-a-time path gives: ties, NaN and infinities included, for a
    /// number of rows that is not a multiple of the blocks.
    #[test]
    fn blocks_of_rows_equal_rows_one_at_a_time() {
        let reductions = reductions();
        let rows = 1001;
        for len in [1, 2, 3, 7, 16, 17, 50, LONGEST] {
            let data = data(rows, len);
            for axis in [0, 1] {
                for (text, k) in &reductions {
                    let formula = Formula::parse(&text.replace("AXIS", &axis.to_string()), &args(axis)).unwrap();
                    if *k > len {
                        continue;
                    }
                    let plan = Plan::new(&formula);
                    let acc = formula.accumulator(SumScheme::Auto);
                    assert!(rows_per_block::<f32>(&formula, &plan, &acc, rows, len, 2, None).is_some(), "{text}: not by blocks");
                    for &scheme in schemes(text) {
                        let case = format!("{text}, axis {axis}, {len} indices, {scheme:?}");
                        let run64 = |short| run::<f64>(&formula, &data, rows, len, scheme, None, short);
                        let (blocks, single) = (run64(true), run64(false));
                        assert!(same_bits(&blocks.values, &single.values), "{case}, f64");
                        assert_eq!(blocks.indices, single.indices, "{case}, f64");
                        let run32 = |short| run::<f32>(&formula, &data, rows, len, scheme, None, short);
                        let (blocks, single) = (run32(true), run32(false));
                        assert!(same_bits(&blocks.values, &single.values), "{case}, f32");
                        assert_eq!(blocks.indices, single.indices, "{case}, f32");
                    }
                }
            }
        }
    }

    /// Maps (one reduced index, terms of the output index only: `keops_map()`) go by blocks of rows,
    /// and give to the bit what rows one at a time give.
    #[test]
    fn maps_by_blocks_of_rows_equal_rows_one_at_a_time() {
        let (rows, data) = (1001, data(1001, 1));
        for axis in [0, 1] {
            for text in ["Sum_Reduction(Exp(-x) * a + 1, AXIS)", "Min_ArgMin_Reduction(x - a, AXIS)", "LogSumExp_Reduction(a * a, AXIS)"] {
                let formula = Formula::parse(&text.replace("AXIS", &axis.to_string()), &args(axis)).unwrap();
                let (plan, acc) = (Plan::new(&formula), formula.accumulator(SumScheme::Auto));
                assert!(rows_per_block::<f32>(&formula, &plan, &acc, rows, 1, 2, None).is_some(), "{text}: not by blocks");
                let run64 = |short| run::<f64>(&formula, &data, rows, 1, SumScheme::Auto, None, short);
                let (blocks, single) = (run64(true), run64(false));
                assert!(same_bits(&blocks.values, &single.values) && blocks.indices == single.indices, "{text}, axis {axis}");
                let run32 = |short| run::<f32>(&formula, &data, rows, 1, SumScheme::Auto, None, short);
                let (blocks, single) = (run32(true), run32(false));
                assert!(same_bits(&blocks.values, &single.values) && blocks.indices == single.indices, "{text}, axis {axis}, f32");
            }
        }
    }

    /// Blocks of 17 to 130 rows (a gap before some), each against 0 to 3 sorted ranges of 0 to
    /// `LONGEST` indices: what a batch of small problems gives, with empty ranges and blocks that
    /// reduce over nothing.
    fn short_ranges(n_out: usize, n_red: usize, seed: u64) -> BlockRanges {
        let mut u = uniform(10_000, seed).into_iter();
        let mut next = move || u.next().expect("enough random numbers");
        let mut ranges = BlockRanges::default();
        let mut row = 0;
        while row < n_out {
            let start = (row + (next() * 3.0) as usize).min(n_out);
            let end = (start + 17 + (next() * 114.0) as usize).min(n_out);
            ranges.blocks.push(start..end);
            let mut j = 0;
            for _ in 0..(next() * 4.0) as usize {
                let first = (j + (next() * 20.0) as usize).min(n_red);
                let last = (first + (next() * (LONGEST + 1) as f64) as usize).min(n_red);
                ranges.reduced.push(first..last);
                j = last;
            }
            ranges.slices.push(ranges.reduced.len());
            row = end;
        }
        ranges
    }

    /// With ranges, blocks of rows give to the bit what rows one at a time give (one piece per range
    /// of at most `LONGEST` indices, as the other path reduces one tile per range): every reduction,
    /// both axes, both precisions, selections that start from the state of an earlier range, and
    /// the identity for rows in no block or against no range.
    #[test]
    fn ranged_blocks_of_rows_equal_rows_one_at_a_time() {
        let (rows, n_red) = (1001, 203);
        let data = data(rows, n_red);
        let ranges = short_ranges(rows, n_red, 7);
        assert!(short_blocks(&ranges), "the ranges are reduced by blocks of rows");
        assert!(ranges.slices.windows(2).any(|s| s[1] - s[0] >= 2), "some blocks reduce over several ranges");
        for axis in [0, 1] {
            for (text, _) in reductions() {
                let formula = Formula::parse(&text.replace("AXIS", &axis.to_string()), &args(axis)).unwrap();
                let plan = Plan::new(&formula);
                let acc = formula.accumulator(SumScheme::Auto);
                let by_blocks = rows_per_block::<f32>(&formula, &plan, &acc, rows, n_red, 2, Some(&ranges));
                assert!(by_blocks.is_some(), "{text}: not by blocks");
                for &scheme in schemes(&text) {
                    let case = format!("{text}, axis {axis}, {scheme:?}");
                    let run64 = |short| run::<f64>(&formula, &data, rows, n_red, scheme, Some(&ranges), short);
                    let (blocks, single) = (run64(true), run64(false));
                    assert!(same_bits(&blocks.values, &single.values), "{case}, f64");
                    assert_eq!(blocks.indices, single.indices, "{case}, f64");
                    let run32 = |short| run::<f32>(&formula, &data, rows, n_red, scheme, Some(&ranges), short);
                    let (blocks, single) = (run32(true), run32(false));
                    assert!(same_bits(&blocks.values, &single.values), "{case}, f32");
                    assert_eq!(blocks.indices, single.indices, "{case}, f32");
                }
            }
        }
    }

    /// Long ranges, and blocks of few rows, stay row at a time.
    #[test]
    fn long_ranges_or_small_blocks_stay_row_at_a_time() {
        let n_out = 1000;
        let diagonal = |rows: usize, len: usize| BlockRanges {
            blocks: (0..n_out / rows).map(|b| b * rows..(b + 1) * rows).collect(),
            slices: (1..=n_out / rows).collect(),
            reduced: (0..n_out / rows).map(|b| b * len..(b + 1) * len).collect(),
        };
        assert!(short_blocks(&diagonal(100, 100)));
        assert!(short_blocks(&diagonal(20, 4 * LONGEST)));
        assert!(!short_blocks(&diagonal(100, 4 * LONGEST + 1)));
        assert!(!short_blocks(&diagonal(10, 100)));
        assert!(!short_blocks(&BlockRanges { blocks: vec![0..100], slices: vec![0], reduced: vec![] }));
    }
}

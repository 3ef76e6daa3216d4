//! Block-sparse reductions (ranges) against the dense reduction restricted to the same blocks: for
//! each block of output rows, the dense operator on those rows and on the reduced rows its ranges
//! keep (indices mapped back), the K-selections against a sort, and empty blocks against the
//! reduction's identity. Odd block sizes, gaps, empty blocks and ranges, both axes, three precisions.

use std::ops::Range;

use engine::{Backend, BlockRanges, Input, Operator, Output, Precision, Ranges, RunOptions};

use crate::common;
use crate::common_ranges;
use common::random;
use common_ranges::random_ranges;

/// The reduced indices of each output row (empty for rows in no block).
fn kept(ranges: &BlockRanges, n_out: usize) -> Vec<Vec<usize>> {
    let mut kept = vec![Vec::new(); n_out];
    let mut first = 0;
    for (block, &end) in ranges.blocks.iter().zip(&ranges.slices) {
        let reduced: Vec<usize> = ranges.reduced[first..end].iter().flat_map(Range::clone).collect();
        for row in block.clone() {
            kept[row] = reduced.clone();
        }
        first = end;
    }
    kept
}

/// Column-major `rows` of an `n x d` matrix.
fn gather(data: &[f64], n: usize, d: usize, rows: &[usize]) -> Vec<f64> {
    (0..d).flat_map(|c| rows.iter().map(move |&r| data[c * n + r])).collect()
}

struct Problem {
    /// Per variable: data, rows, columns, whether it varies along the output index.
    vars: Vec<(Vec<f64>, usize, usize, bool)>,
    args: Vec<String>,
    n_out: usize,
    n_red: usize,
}

impl Problem {
    /// x, a along the output index (3 and 1 columns), y, b along the reduced one (3 and 2), s a parameter.
    fn new(axis: usize, n_out: usize, n_red: usize) -> Problem {
        let (out, red) = if axis == 0 { ("Vi", "Vj") } else { ("Vj", "Vi") };
        let centred = |v: Vec<f64>| v.iter().map(|x| 2.0 * x - 1.0).collect();
        Problem {
            vars: vec![
                (random(3 * n_out, 1), n_out, 3, true),
                (centred(random(n_out, 2)), n_out, 1, true),
                (random(3 * n_red, 3), n_red, 3, false),
                (centred(random(2 * n_red, 4)), n_red, 2, false),
                (vec![0.7], 1, 1, false),
            ],
            args: vec![
                format!("x = {out}(3)"),
                format!("a = {out}(1)"),
                format!("y = {red}(3)"),
                format!("b = {red}(2)"),
                "s = Pm(1)".into(),
            ],
            n_out,
            n_red,
        }
    }

    fn run(&self, op: &Operator, vars: &[(Vec<f64>, usize, usize, bool)], options: &RunOptions) -> Output {
        let inputs: Vec<Input> = vars.iter().map(|(d, n, c, _)| Input::host(d, *n, *c)).collect();
        op.run(&inputs, options).unwrap()
    }

    /// The variables restricted to these output rows and reduced rows.
    fn restricted(&self, out: &[usize], red: &[usize]) -> Vec<(Vec<f64>, usize, usize, bool)> {
        self.vars
            .iter()
            .map(|(d, n, c, along_out)| match (*n, along_out) {
                (1, false) => (d.clone(), 1, *c, false),
                (_, true) => (gather(d, *n, *c, out), out.len(), *c, true),
                _ => (gather(d, *n, *c, red), red.len(), *c, false),
            })
            .collect()
    }

    fn sq_dist(&self, o: usize, r: usize) -> f64 {
        let (x, y) = (&self.vars[0].0, &self.vars[2].0);
        (0..3).map(|c| (x[c * self.n_out + o] - y[c * self.n_red + r]).powi(2)).sum()
    }
}

fn options(precision: Precision, ranges: Option<Ranges>) -> RunOptions {
    RunOptions { precision, threads: 3, backend: Backend::Cpu, ranges, ..Default::default() }
}

/// Both parts of `Ranges` hold `part`; the other axis gets ranges that would fail if used.
fn on_axis(axis: usize, part: BlockRanges) -> Ranges {
    let unused = BlockRanges { blocks: vec![0..1], slices: vec![0], reduced: vec![] };
    if axis == 0 {
        Ranges { i: part, j: unused }
    } else {
        Ranges { i: unused, j: part }
    }
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    got == want || (got - want).abs() <= tol * (1.0 + want.abs()) || got.is_nan() && want.is_nan()
}

/// Every reduction but the K-selections: each block against the dense reduction of its rows over
/// the reduced rows it keeps; rows that keep nothing against the identity.
#[test]
fn every_reduction_equals_the_dense_one_on_the_kept_blocks() {
    let (n_out, n_red) = (613, 1777);
    let part = |axis: usize| random_ranges(n_out, n_red, 10 + axis as u64);
    for axis in [0, 1] {
        let kept = kept(&part(axis), n_out);
        assert!(kept.iter().any(Vec::is_empty) && kept.iter().any(|k| k.len() > 1000), "the ranges test both cases");
    }
    every_reduction_against_the_dense_one(n_out, n_red, part);
}

/// Like a batch of small problems: blocks of 17 to 150 rows (a gap before some), each against 0 to
/// 3 sorted ranges of 0 to 150 indices (some empty). The CPU reduces these a block of rows at a
/// time (many rows per block, few reduced indices per row), ranges longer than its pieces of 64
/// indices included.
fn batch_like_ranges(n_out: usize, n_red: usize, seed: u64) -> BlockRanges {
    let mut u = random(10_000, seed).into_iter();
    let mut next = move || u.next().expect("enough random numbers");
    let mut ranges = BlockRanges::default();
    let mut row = 0;
    while row < n_out {
        let start = (row + if next() < 0.3 { (next() * 5.0) as usize } else { 0 }).min(n_out);
        let end = (start + 17 + (next() * 134.0) as usize).min(n_out);
        ranges.blocks.push(start..end);
        let mut j = 0;
        for _ in 0..(next() * 4.0) as usize {
            let first = (j + (next() * 40.0) as usize).min(n_red);
            let len = if next() < 0.2 { 0 } else { (next() * 151.0) as usize };
            let last = (first + len).min(n_red);
            ranges.reduced.push(first..last);
            j = last;
        }
        ranges.slices.push(ranges.reduced.len());
        row = end;
    }
    ranges
}

/// Batch-like ranges (reduced a block of rows at a time on the CPU): every reduction against the
/// dense one on each block, the K-selections against a sort, on odd sizes, both axes.
#[test]
fn batch_like_ranges_equal_the_dense_reduction_on_each_block() {
    let (n_out, n_red) = (1009, 1201);
    let part = |axis: usize| batch_like_ranges(n_out, n_red, 30 + axis as u64);
    for axis in [0, 1] {
        let kept = kept(&part(axis), n_out);
        let in_blocks: Vec<&Vec<usize>> = kept.iter().filter(|k| !k.is_empty()).collect();
        let pairs: usize = in_blocks.iter().map(|k| k.len()).sum();
        // What `cpu::short_range` asks of ranges to take them by blocks of rows (at most 256
        // indices per row on average), and the cases worth testing.
        assert!(pairs <= 256 * in_blocks.len(), "few reduced indices per row");
        assert!(kept.iter().any(Vec::is_empty) && kept.iter().any(|k| k.len() > 64), "rows in no block, and long ranges");
        assert!(kept.iter().any(|k| !k.is_empty() && k.len() < 5), "rows with fewer indices than K");
    }
    every_reduction_against_the_dense_one(n_out, n_red, part);
    k_selections_against_a_sort(n_out, n_red, 5, part);
}

/// For both axes, each reduction over the ranges `part(axis)` against the dense reduction of each
/// block of rows over the reduced rows it keeps, and the identity for rows that keep nothing.
fn every_reduction_against_the_dense_one(n_out: usize, n_red: usize, part: impl Fn(usize) -> BlockRanges) {
    let reductions = [
        ("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, AXIS)", None),
        ("Min_Reduction(SqDist(x, y) + a, AXIS)", Some(f64::INFINITY)),
        ("Max_Reduction(a - SqDist(x, y), AXIS)", Some(f64::NEG_INFINITY)),
        ("ArgMin_Reduction(SqDist(x, y) + a, AXIS)", None),
        ("ArgMax_Reduction(a - SqDist(x, y), AXIS)", None),
        ("Min_ArgMin_Reduction(SqDist(x, y) + a, AXIS)", Some(f64::INFINITY)),
        ("Max_ArgMax_Reduction(x - y, AXIS)", Some(f64::NEG_INFINITY)),
        ("LogSumExp_Reduction(a - SqDist(x, y) / s, AXIS)", Some(f64::NEG_INFINITY)),
        ("LogSumExp_Reduction(a - SqDist(x, y), AXIS, 1 + b * b)", Some(f64::NEG_INFINITY)),
        ("SumSoftMaxWeight_Reduction(a - SqDist(x, y), b, AXIS)", Some(f64::NAN)),
    ];
    for axis in [0, 1] {
        let problem = Problem::new(axis, n_out, n_red);
        let part = part(axis);
        let kept = kept(&part, n_out);
        let ranges = on_axis(axis, part.clone());
        for (text, identity) in reductions {
            let op = Operator::new(&text.replace("AXIS", &axis.to_string()), &problem.args).unwrap();
            for precision in [Precision::F64, Precision::F32, Precision::F16] {
                let case = format!("{text}, axis {axis}, {precision:?}");
                let got = problem.run(&op, &problem.vars, &options(precision, Some(ranges.clone())));
                let width = got.k * got.dim;
                let tol = if precision == Precision::F64 { 1e-12 } else { 1e-5 };
                // Rows with the same kept indices: one dense call.
                let mut row = 0;
                while row < n_out {
                    let end = (row..n_out).find(|&r| kept[r] != kept[row]).unwrap_or(n_out);
                    let rows: Vec<usize> = (row..end).collect();
                    let red = &kept[row];
                    let want = (!red.is_empty())
                        .then(|| problem.run(&op, &problem.restricted(&rows, red), &options(precision, None)));
                    for (q, &r) in rows.iter().enumerate() {
                        for c in 0..width {
                            if let Some(values) = &got.values {
                                let g = values[c * n_out + r];
                                let w = match &want {
                                    Some(want) => want.values.as_ref().unwrap()[c * rows.len() + q],
                                    None => identity.unwrap_or(0.0),
                                };
                                assert!(close(g, w, tol), "{case}: row {r}, column {c}: {g} vs {w}");
                            }
                            // Indices where the values decide them exactly (float16 rounding ties some).
                            if let (Some(indices), true) = (&got.indices, precision != Precision::F16) {
                                let g = indices[c * n_out + r];
                                let w = match &want {
                                    Some(want) => {
                                        red[want.indices.as_ref().unwrap()[c * rows.len() + q] as usize - 1] as i32 + 1
                                    }
                                    None => 0,
                                };
                                assert_eq!(g, w, "{case}: index of row {r}, column {c}");
                            }
                        }
                    }
                    row = end;
                }
            }
        }
    }
}

/// The K-selections against a sort of the kept distances, padded with +inf and index 0 where a
/// row keeps fewer than K indices.
#[test]
fn k_selections_against_a_sort_of_the_kept_indices() {
    let (n_out, n_red, k) = (301, 1203, 5);
    let part = |axis: usize| random_ranges(n_out, n_red, 20 + axis as u64);
    for axis in [0, 1] {
        let kept = kept(&part(axis), n_out);
        assert!(kept.iter().any(|r| !r.is_empty() && r.len() < k), "some rows keep fewer than K indices");
    }
    k_selections_against_a_sort(n_out, n_red, k, part);
}

/// For both axes, KMin_ArgKMin over the ranges `part(axis)` against a sort of each row's kept
/// distances.
fn k_selections_against_a_sort(n_out: usize, n_red: usize, k: usize, part: impl Fn(usize) -> BlockRanges) {
    for axis in [0, 1] {
        let problem = Problem::new(axis, n_out, n_red);
        let part = part(axis);
        let kept = kept(&part, n_out);
        let text = format!("KMin_ArgKMin_Reduction(SqDist(x, y), {k}, {axis})");
        let op = Operator::new(&text, &problem.args).unwrap();
        for precision in [Precision::F64, Precision::F32] {
            let got = problem.run(&op, &problem.vars, &options(precision, Some(on_axis(axis, part.clone()))));
            let (values, indices) = (got.values.unwrap(), got.indices.unwrap());
            for (r, red) in kept.iter().enumerate() {
                let mut want: Vec<(f64, usize)> = red.iter().map(|&j| (problem.sq_dist(r, j), j)).collect();
                want.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
                for slot in 0..k {
                    let (g, gi) = (values[slot * n_out + r], indices[slot * n_out + r]);
                    match want.get(slot) {
                        Some(&(w, wi)) => {
                            let tol = if precision == Precision::F64 { 1e-12 } else { 1e-5 };
                            assert!(close(g, w, tol), "{text}, {precision:?}: row {r}, slot {slot}: {g} vs {w}");
                            // The kept distance at the index found is the value found.
                            assert!(
                                red.contains(&(gi as usize - 1)) && close(problem.sq_dist(r, gi as usize - 1), g, tol),
                                "{text}, {precision:?}: row {r}, slot {slot}: index {gi} (want {})",
                                wi + 1
                            );
                            if precision == Precision::F64 {
                                assert_eq!(gi as usize, wi + 1, "{text}: row {r}, slot {slot}");
                            }
                        }
                        None => assert!(g == f64::INFINITY && gi == 0, "{text}: row {r}, slot {slot}: {g}, {gi}"),
                    }
                }
            }
        }
    }
}

/// Ranges that keep every block give the bits of the dense reduction.
#[test]
fn ranges_that_keep_everything_are_the_dense_reduction() {
    let (n_out, n_red) = (1031, 5003);
    for axis in [0, 1] {
        let problem = Problem::new(axis, n_out, n_red);
        let blocks: Vec<Range<usize>> = (0..n_out).step_by(97).map(|s| s..(s + 97).min(n_out)).collect();
        let part = BlockRanges { slices: (1..=blocks.len()).collect(), reduced: vec![0..n_red; blocks.len()], blocks };
        for text in ["Sum_Reduction(Exp(-s * SqDist(x, y)) * b, AXIS)", "ArgKMin_Reduction(SqDist(x, y), 4, AXIS)"] {
            let op = Operator::new(&text.replace("AXIS", &axis.to_string()), &problem.args).unwrap();
            let dense = problem.run(&op, &problem.vars, &options(Precision::F32, None));
            let sparse = problem.run(&op, &problem.vars, &options(Precision::F32, Some(on_axis(axis, part.clone()))));
            assert_eq!((dense.values, dense.indices), (sparse.values, sparse.indices), "{text}, axis {axis}");
        }
    }
}

/// Bad ranges are errors that say which part is wrong and why.
#[test]
fn invalid_ranges_are_named_errors() {
    let problem = Problem::new(0, 50, 40);
    let op = Operator::new("Sum_Reduction(SqDist(x, y), 0)", &problem.args).unwrap();
    let good = || BlockRanges { blocks: vec![0..20, 20..50], slices: vec![1, 2], reduced: vec![0..10, 10..40] };
    let cases: Vec<(BlockRanges, bool, &str)> = vec![
        (BlockRanges { blocks: vec![0..30, 20..50], ..good() }, true, "row 2 of `ranges_i` (21, 50 in R's 1-based inclusive terms) overlaps"),
        (BlockRanges { blocks: vec![20..50, 0..20], ..good() }, true, "row 2 of `ranges_i` (1, 20"),
        (BlockRanges { blocks: vec![0..20, 20..51], ..good() }, true, "goes past the last index; there are 50"),
        (BlockRanges { slices: vec![1], ..good() }, true, "`slices_i` has 1 values, one per block of `ranges_i` (2)"),
        (BlockRanges { slices: vec![2, 1], ..good() }, true, "`slices_i` must be non-decreasing"),
        (BlockRanges { slices: vec![1, 1], ..good() }, true, "the last value of `slices_i` must be the number of rows of `redranges_j` (2)"),
        (BlockRanges { reduced: vec![0..10, 10..41], ..good() }, true, "row 2 of `redranges_j` (a range of block 2 of `ranges_i`) (11, 41 in R's 1-based inclusive terms) goes past"),
        (BlockRanges { slices: vec![2, 2], reduced: vec![5..10, 0..4], ..good() }, true, "row 2 of `redranges_j` (a range of block 1 of `ranges_i`) (1, 4"),
        (BlockRanges { blocks: vec![0..20, 20..50], slices: vec![0, 0], reduced: vec![] }, false, "row 1 of `ranges_j`"),
    ];
    for (part, on_i, message) in cases {
        let ranges = if on_i {
            Ranges { i: part, j: BlockRanges::default() }
        } else {
            // The transpose: blocks of j (40 of them) each with ranges of i.
            Ranges { i: good(), j: BlockRanges { blocks: vec![0..41], slices: vec![0], reduced: vec![] } }
        };
        let inputs: Vec<Input> =
            problem.vars.iter().map(|(d, n, c, _)| Input::host(d, *n, *c)).collect();
        let err = op.run(&inputs, &options(Precision::F64, Some(ranges))).unwrap_err().to_string();
        assert!(err.contains(message), "{err}\n  does not say: {message}");
    }
}

/// `RunOptions::ranges_in_any_order` (the K-NN search on the CPU lists the nearest cells first):
/// a K-selection on the CPU takes a block's ranges in any order, with the results of the sorted
/// ranges; overlapping ranges are still refused, and so are unsorted ones for a sum or on a GPU.
#[test]
fn k_selections_on_the_cpu_take_ranges_in_any_order() {
    let problem = Problem::new(0, 53, 47);
    let inputs: Vec<Input> = problem.vars.iter().map(|(d, n, c, _)| Input::host(d, *n, *c)).collect();
    let sorted = BlockRanges { blocks: vec![0..20, 20..53], slices: vec![3, 5], reduced: vec![0..9, 12..30, 33..47, 0..20, 25..47] };
    let shuffled = BlockRanges { reduced: vec![33..47, 0..9, 12..30, 25..47, 0..20], ..sorted.clone() };
    let any_order = |part: BlockRanges| RunOptions { ranges_in_any_order: true, ..options(Precision::F64, Some(on_axis(0, part))) };
    let knn = Operator::new("ArgKMin_Reduction(SqDist(x, y), 5, 0)", &problem.args).unwrap();
    let want = knn.run(&inputs, &options(Precision::F64, Some(on_axis(0, sorted.clone())))).unwrap();
    assert_eq!(knn.run(&inputs, &any_order(shuffled.clone())).unwrap().indices, want.indices);
    // Refused: without the option, overlapping, for a sum, or where the backend is not the CPU.
    let unsorted = knn.run(&inputs, &options(Precision::F64, Some(on_axis(0, shuffled.clone())))).unwrap_err().to_string();
    assert!(unsorted.contains("ranges must be sorted and disjoint"), "{unsorted}");
    let overlapping = BlockRanges { reduced: vec![33..47, 0..9, 5..30, 25..47, 0..20], ..sorted.clone() };
    let err = knn.run(&inputs, &any_order(overlapping)).unwrap_err().to_string();
    assert!(err.contains("overlaps or precedes"), "{err}");
    let sum = Operator::new("Sum_Reduction(SqDist(x, y), 0)", &problem.args).unwrap();
    let err = sum.run(&inputs, &any_order(shuffled.clone())).unwrap_err().to_string();
    assert!(err.contains("ranges must be sorted and disjoint"), "{err}");
    let auto = RunOptions { backend: Backend::Auto, ..any_order(shuffled) };
    let err = knn.run(&inputs, &auto).unwrap_err().to_string();
    assert!(err.contains("ranges must be sorted and disjoint"), "{err}");
}

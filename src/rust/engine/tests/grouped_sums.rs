//! Grouped sums (`Sum_Reduction(Equal(l, g) * F, axis)`), computed on the CPU as a map of F and one
//! pass over the rows (`engine::grouped_sum`), against a plain float64 loop and against the same
//! reduction over every pair (the path taken with ranges): both axes, groups that repeat a value or
//! that no label names, labels no group has, -0 and 0, a term that is not finite (0 * Inf: NaN in
//! the other groups, as the reduction over the pairs gives).

use engine::{Backend, BlockRanges, Input, Operator, Precision, Ranges, RunOptions};

use crate::common::random;

fn operator(formula: &str, args: &[&str]) -> Operator {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    Operator::new(formula, &args).unwrap_or_else(|e| panic!("{formula}: {e}"))
}

fn options(precision: Precision, ranges: Option<Ranges>) -> RunOptions {
    RunOptions { precision, backend: Backend::Cpu, ranges, ..Default::default() }
}

/// Every pair, as block-sparse ranges: the reduction over the pairs, not the grouped path.
fn all_pairs(n_i: usize, n_j: usize) -> Ranges {
    Ranges { i: BlockRanges::dense(n_i, n_j), j: BlockRanges::dense(n_j, n_i) }
}

/// sum over rows r with labels[r] == groups[k] of (x[r, 0], x[r, 1], 2 x[r, 0] + 1), column-major.
fn plain(labels: &[f64], groups: &[f64], x: &[f64]) -> Vec<f64> {
    let (n, k) = (labels.len(), groups.len());
    let mut out = vec![0.0; 3 * k];
    for r in 0..n {
        for (g, &group) in groups.iter().enumerate() {
            if labels[r] == group {
                out[g] += x[r];
                out[g + k] += x[r + n];
                out[g + 2 * k] += 2.0 * x[r] + 1.0;
            }
        }
    }
    out
}

#[test]
fn grouped_sums_equal_a_plain_loop_and_the_reduction_over_every_pair() {
    let n = 1037;
    let x = random(2 * n, 5);
    // labels 1..=9, and some that no group names (10, 11); -0 where a group is 0
    let labels: Vec<f64> = random(n, 6).iter().map(|u| (u * 12.0).floor() - 0.0 * u).collect();
    let labels: Vec<f64> = labels.iter().map(|&l| if l == 0.0 { -0.0 } else { l }).collect();
    let groups = [0.0, 1.0, 2.0, 3.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 42.0];
    let want = plain(&labels, &groups, &x);
    let formula = "Sum_Reduction(Equal(l, g) * Concat(x, 2 * Elem(x, 0) + w), 1)";
    let op = operator(formula, &["l = Vi(1)", "x = Vi(2)", "g = Vj(1)", "w = Pm(1)"]);
    let inputs = [Input::host(&labels, n, 1), Input::host(&x, n, 2), Input::host(&groups, 12, 1), Input::host(&[1.0], 1, 1)];
    let got = op.run(&inputs, &options(Precision::F64, None)).unwrap();
    assert_eq!((got.nrow, got.dim), (12, 3));
    let values = got.values.unwrap();
    let err = values.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(err < 1e-10, "float64 against the plain loop: {err}");
    assert_eq!(values[11], 0.0, "a group no label names");
    assert_eq!(values[3], values[4], "groups of one value");
    // float32: the reduction over every pair, to float32's rounding of the sums
    let grouped = op.run(&inputs, &options(Precision::F32, None)).unwrap().values.unwrap();
    let pairs = op.run(&inputs, &options(Precision::F32, Some(all_pairs(n, 12)))).unwrap().values.unwrap();
    for ((a, b), w) in grouped.iter().zip(&pairs).zip(&want) {
        assert!((a - b).abs() <= 1e-5 * w.abs().max(1.0), "float32: grouped {a}, pairs {b}, float64 {w}");
    }
    // labels and groups shifted by -0.5, not whole numbers (a hash of the values, not a table): the
    // same groups, the same sums
    let (half_labels, half_groups): (Vec<f64>, Vec<f64>) =
        (labels.iter().map(|l| l - 0.5).collect(), groups.iter().map(|g| g - 0.5).collect());
    let inputs_h = [Input::host(&half_labels, n, 1), Input::host(&x, n, 2), Input::host(&half_groups, 12, 1), Input::host(&[1.0], 1, 1)];
    let got_h = op.run(&inputs_h, &options(Precision::F64, None)).unwrap().values.unwrap();
    assert_eq!(got_h, values);
    // the same on the other axis: groups of i, labels of j
    let op0 = operator("Sum_Reduction(Concat(x, 2 * Elem(x, 0) + w) * Equal(g, l), 0)",
                       &["g = Vi(1)", "l = Vj(1)", "x = Vj(2)", "w = Pm(1)"]);
    let inputs0 = [Input::host(&groups, 12, 1), Input::host(&labels, n, 1), Input::host(&x, n, 2), Input::host(&[1.0], 1, 1)];
    let got0 = op0.run(&inputs0, &options(Precision::F64, None)).unwrap().values.unwrap();
    let err = got0.iter().zip(&want).map(|(a, b)| (a - b).abs()).fold(0.0, f64::max);
    assert!(err < 1e-10, "axis 0: {err}");
}

#[test]
fn a_term_that_is_not_finite_gives_what_the_pairs_give() {
    let n = 77;
    let mut x = random(n, 9);
    x[13] = f64::INFINITY;
    let labels: Vec<f64> = (0..n).map(|r| (r % 3) as f64 + 1.0).collect();
    let groups = [1.0, 2.0, 3.0];
    let op = operator("Sum_Reduction(Equal(l, g) * x, 1)", &["l = Vi(1)", "x = Vi(1)", "g = Vj(1)"]);
    let inputs = [Input::host(&labels, n, 1), Input::host(&x, n, 1), Input::host(&groups, 3, 1)];
    let got = op.run(&inputs, &options(Precision::F64, None)).unwrap().values.unwrap();
    let pairs = op.run(&inputs, &options(Precision::F64, Some(all_pairs(n, 3)))).unwrap().values.unwrap();
    // row 13 (label 2) is infinite: its group sums to inf, the others to 0 * inf
    let same = |a: &f64, b: &f64| a == b || (a.is_nan() && b.is_nan());
    assert!(got.iter().zip(&pairs).all(|(a, b)| same(a, b)), "{got:?} {pairs:?}");
    assert!(got[0].is_nan() && got[1] == f64::INFINITY && got[2].is_nan(), "{got:?}");
}

#[test]
fn formulas_that_are_not_grouped_sums_reduce_as_before() {
    // the term reads the group's index (j): not a grouped sum; the reduction's own result
    let n = 101;
    let x = random(n, 3);
    let labels: Vec<f64> = (0..n).map(|r| (r % 4) as f64).collect();
    let groups = [0.0, 1.0, 2.0, 3.0];
    let op = operator("Sum_Reduction(Equal(l, g) * (x + g), 1)", &["l = Vi(1)", "x = Vi(1)", "g = Vj(1)"]);
    let inputs = [Input::host(&labels, n, 1), Input::host(&x, n, 1), Input::host(&groups, 4, 1)];
    let got = op.run(&inputs, &options(Precision::F64, None)).unwrap().values.unwrap();
    for (k, &g) in groups.iter().enumerate() {
        let want: f64 = (0..n).filter(|&r| labels[r] == g).map(|r| x[r] + g).sum();
        assert!((got[k] - want).abs() < 1e-12, "group {g}: {} vs {want}", got[k]);
    }
}

/// A term made of inputs and constants (`Concat(x, IntCst(1), w)`: K-means' sums and counts) is added
/// from the inputs themselves, with no map: the same bits as the map of an equal term (`x * 1`),
/// in both precisions, with labels no group names, a group no label names and a float16-like
/// large value that float32 rounds; a term that is not finite, in a row of a group or of none,
/// gives what the pairs give (NaN where 0 * Inf).
#[test]
fn terms_taken_from_the_inputs_equal_the_map_of_the_same_term() {
    let n = 1037;
    let mut x = random(2 * n, 11);
    x[5] = 1e30 + 1.0;
    let labels: Vec<f64> = random(n, 12).iter().map(|u| (u * 9.0).floor()).collect();
    let groups = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 42.0];
    let args = ["l = Vi(1)", "x = Vi(2)", "g = Vj(1)", "w = Pm(1)"];
    let direct = operator("Sum_Reduction(Equal(l, g) * Concat(Concat(x, IntCst(1)), w), 1)", &args);
    let mapped = operator("Sum_Reduction(Equal(l, g) * Concat(Concat(x * 1, IntCst(1)), w), 1)", &args);
    let w = [0.25];
    fn inputs<'a>(labels: &'a [f64], x: &'a [f64], groups: &'a [f64], w: &'a [f64]) -> Vec<Input<'a>> {
        vec![Input::host(labels, labels.len(), 1), Input::host(x, labels.len(), 2), Input::host(groups, 8, 1), Input::host(w, 1, 1)]
    }
    for precision in [Precision::F64, Precision::F32] {
        let a = direct.run(&inputs(&labels, &x, &groups, &w), &options(precision, None)).unwrap().values.unwrap();
        let b = mapped.run(&inputs(&labels, &x, &groups, &w), &options(precision, None)).unwrap().values.unwrap();
        assert_eq!(a.len(), 8 * 4);
        assert!(a.iter().zip(&b).all(|(a, b)| a.to_bits() == b.to_bits()), "{precision:?}: {a:?} {b:?}");
        // the counts and the weights' sums against a plain loop
        for (k, &g) in groups.iter().enumerate() {
            let count = labels.iter().filter(|&&l| l == g).count() as f64;
            assert_eq!((a[k + 16], a[k + 24]), (count, 0.25 * count), "{precision:?}: group {g}");
        }
    }
    // not finite: in a row of group 3, then in a row of label 8 (no group)
    for label in [3.0, 8.0] {
        let row = labels.iter().position(|&l| l == label).unwrap();
        let mut bad = x.clone();
        bad[row + n] = f64::NAN;
        let got = direct.run(&inputs(&labels, &bad, &groups, &w), &options(Precision::F64, None)).unwrap().values.unwrap();
        let pairs = direct.run(&inputs(&labels, &bad, &groups, &w), &options(Precision::F64, Some(all_pairs(n, 8)))).unwrap().values.unwrap();
        let same = |a: &f64, b: &f64| a == b || (a.is_nan() && b.is_nan());
        assert!(got.iter().zip(&pairs).all(|(a, b)| same(a, b)), "label {label}: {got:?} {pairs:?}");
        assert!(got[8..16].iter().all(|v| v.is_nan()), "label {label}: the second column is NaN everywhere");
    }
}

/// A term that reads a variable of the output index (`SqDist(x, c)`: K-means' sums of squares, each
/// point against its own centre) gathers its row by label, O(N): against a plain float64 loop and
/// the reduction over every pair (float32), and where a label has no group or two groups share a
/// value (then the reduction over the pairs, the same sums).
#[test]
fn terms_that_read_the_output_row_of_their_label() {
    let (n, k, d) = (1019, 7, 3);
    let x = random(n * d, 21);
    let c = random(k * d, 22);
    let plain = |labels: &[f64], groups: &[f64]| -> Vec<f64> {
        let mut out = vec![0.0; groups.len()];
        for r in 0..n {
            for (g, &group) in groups.iter().enumerate() {
                if labels[r] == group {
                    out[g] += (0..d).map(|a| (x[r + a * n] - c[g + a * groups.len()]).powi(2)).sum::<f64>();
                }
            }
        }
        out
    };
    let op = operator("Sum_Reduction(Equal(l, j) * SqDist(x, c), 1)", &["l = Vi(1)", "x = Vi(3)", "j = Vj(1)", "c = Vj(3)"]);
    let labels: Vec<f64> = random(n, 23).iter().map(|u| (u * k as f64).floor()).collect();
    let run = |labels: &[f64], groups: &[f64], precision, ranges| {
        let inputs = [Input::host(labels, n, 1), Input::host(&x, n, d), Input::host(groups, k, 1), Input::host(&c, k, d)];
        op.run(&inputs, &options(precision, ranges)).unwrap().values.unwrap()
    };
    let groups: Vec<f64> = (0..k).map(|g| g as f64).collect();
    let close = |a: &[f64], b: &[f64], tol: f64| a.iter().zip(b).all(|(a, b)| (a - b).abs() <= tol * b.abs().max(1.0));
    let want = plain(&labels, &groups);
    let got = run(&labels, &groups, Precision::F64, None);
    assert!(close(&got, &want, 1e-12), "float64: {got:?} vs {want:?}");
    let pairs = run(&labels, &groups, Precision::F32, Some(all_pairs(n, k)));
    assert!(close(&run(&labels, &groups, Precision::F32, None), &pairs, 1e-5), "float32 against the pairs");
    // a label no group names (7), and two groups of one value (3): the reduction over the pairs
    let mut odd = labels.clone();
    odd[5] = 7.0;
    let twice = [0.0, 1.0, 2.0, 3.0, 3.0, 5.0, 6.0];
    for (labels, groups) in [(&odd, &groups), (&labels, &twice.to_vec())] {
        let got = run(labels, groups, Precision::F64, None);
        let want = plain(labels, groups);
        assert!(close(&got, &want, 1e-12), "fallback: {got:?} vs {want:?}");
    }
}

//! The nearest of a few centres (`Min`, `ArgMin`, `Min_ArgMin` of `SqDist(x, c)`, `Sum((x - c)^2)`,
//! `Norm2(x - c)`), which the CPU computes with its lanes along the points (`cpu::nearest_centre`),
//! against the general path (the same reduction over every pair given as ranges: bit for bit) and a
//! brute-force float64 loop: both axes, both precisions, numbers of points and centres that are not
//! multiples of the lanes, tied distances (coordinates on a grid), duplicated centres, points with
//! NaN or infinite coordinates.

use engine::{Backend, BlockRanges, Input, Operator, Precision, Ranges, RunOptions};

use crate::common::random;

fn operator(formula: &str, args: &[String]) -> Operator {
    Operator::new(formula, args).unwrap_or_else(|e| panic!("{formula}: {e}"))
}

fn options(precision: Precision, ranges: Option<Ranges>) -> RunOptions {
    RunOptions { precision, backend: Backend::Cpu, ranges, ..Default::default() }
}

/// Points (`n` x `d`) and centres (`k` x `d`), column-major: on a coarse grid where `grid` (ties),
/// the last centre a copy of the first (a duplicate), and some points not finite.
fn data(n: usize, k: usize, d: usize, grid: bool, seed: u64) -> (Vec<f64>, Vec<f64>) {
    let coarse = |v: Vec<f64>| if grid { v.iter().map(|t| (t * 4.0).floor()).collect() } else { v };
    let mut x = coarse(random(n * d, seed));
    let mut c = coarse(random(k * d, seed + 1));
    if k > 1 {
        for comp in 0..d {
            c[comp * k + k - 1] = c[comp * k];
        }
    }
    for (row, value) in [(3, f64::NAN), (5, f64::INFINITY), (8, f64::NEG_INFINITY)] {
        if row < n {
            x[row] = value;
        }
    }
    (x, c)
}

/// The best (distance, 1-based index) of each point, in float64, first index on ties, NaN first.
fn brute_force(x: &[f64], c: &[f64], n: usize, k: usize, d: usize, sqrt: bool) -> Vec<(f64, i32)> {
    (0..n)
        .map(|i| {
            let mut best = (f64::NAN, 0);
            for j in 0..k {
                let s: f64 = (0..d).map(|m| (x[m * n + i] - c[m * k + j]).powi(2)).sum();
                let s = if sqrt { s.sqrt() } else { s };
                let enters = j == 0 || s < best.0 || s.is_nan() && !best.0.is_nan();
                if enters {
                    best = (s, j as i32 + 1);
                }
            }
            best
        })
        .collect()
}

fn same_bits(a: &[f64], b: &[f64]) -> bool {
    a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits() || x.is_nan() && y.is_nan())
}

/// One case: every distance and reduction on both axes and precisions, against the general path to
/// the bit and, in float64, against the brute force (indices exactly on a grid, where distances
/// are exact; else the distance of the index found within rounding of the least one).
fn check(n: usize, k: usize, d: usize, grid: bool) {
    let (x, c) = data(n, k, d, grid, (n * 31 + k * 7 + d) as u64);
    let want = |sqrt: bool| brute_force(&x, &c, n, k, d, sqrt);
    let (plain, rooted) = (want(false), want(true));
    for axis in [0, 1] {
        let (pi, ci) = if axis == 0 { ("Vi", "Vj") } else { ("Vj", "Vi") };
        let args = vec![format!("c = {ci}({d})"), format!("x = {pi}({d})")];
        let (n_i, n_j) = if axis == 0 { (n, k) } else { (k, n) };
        let inputs = [Input::host(&c, k, d), Input::host(&x, n, d)];
        let every_pair = Ranges { i: BlockRanges::dense(n_i, n_j), j: BlockRanges::dense(n_j, n_i) };
        for (distance, sqrt) in [("SqDist(x, c)", false), ("Sum(Square(c - x))", false), ("Norm2(x - c)", true)] {
            for kind in ["Min", "ArgMin", "Min_ArgMin"] {
                let formula = format!("{kind}_Reduction({distance}, {axis})");
                let op = operator(&formula, &args);
                for precision in [Precision::F64, Precision::F32] {
                    let case = format!("{formula}, n {n}, k {k}, d {d}, grid {grid}, {precision:?}");
                    let got = op.run(&inputs, &options(precision, None)).unwrap();
                    let general = op.run(&inputs, &options(precision, Some(every_pair.clone()))).unwrap();
                    assert_eq!(got.nrow, n, "{case}");
                    assert_eq!(got.indices, general.indices, "{case}: indices");
                    let (v, g) = (got.values.clone().unwrap_or_default(), general.values.unwrap_or_default());
                    assert!(same_bits(&v, &g), "{case}: values");
                    if precision != Precision::F64 {
                        continue;
                    }
                    let want = if sqrt { &rooted } else { &plain };
                    for (i, &(best, at)) in want.iter().enumerate() {
                        let (value, index) = (v.get(i).copied(), got.indices.as_ref().map(|ix| ix[i]));
                        if let Some(value) = value {
                            let close = (value - best).abs() <= 1e-12 * best.abs() || value == best;
                            assert!(close || value.is_nan() && best.is_nan(), "{case}: point {i}: {value} vs {best}");
                        }
                        let Some(index) = index else { continue };
                        if grid || best.is_nan() {
                            assert_eq!(index, at, "{case}: point {i}");
                        } else {
                            let found: f64 = (0..d).map(|m| (x[m * n + i] - c[m * k + index as usize - 1]).powi(2)).sum();
                            let found = if sqrt { found.sqrt() } else { found };
                            assert!(found == best || (found - best).abs() <= 1e-12 * best.abs(), "{case}: point {i}");
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn nearest_centres_equal_the_general_path_and_a_brute_force() {
    for (n, k, d) in [(1, 1, 1), (7, 3, 2), (1037, 1, 2), (1037, 13, 2), (2051, 50, 2), (1037, 9, 3), (517, 17, 4)] {
        check(n, k, d, false);
        check(n, k, d, true);
    }
    for (n, k, d) in [(301, 7, 5), (259, 33, 7), (131, 5, 16), (4099, 257, 3), (97, 1024, 2)] {
        check(n, k, d, false);
        check(n, k, d, true);
    }
}

/// Beyond the path's limits (more centres, more components, a weighted distance), the general path
/// gives the same as a brute force.
#[test]
fn beyond_the_nearest_centre_path_the_general_one_still_answers() {
    for (n, k, d) in [(203, 1025, 2), (103, 5, 17)] {
        let (x, c) = data(n, k, d, false, 3);
        let want = brute_force(&x, &c, n, k, d, false);
        let args = vec![format!("x = Vi({d})"), format!("c = Vj({d})")];
        let op = operator("ArgMin_Reduction(SqDist(x, c), 0)", &args);
        let got = op.run(&[Input::host(&x, n, d), Input::host(&c, k, d)], &options(Precision::F64, None)).unwrap();
        let got = got.indices.unwrap();
        for (i, &(best, at)) in want.iter().enumerate() {
            if best.is_nan() {
                assert_eq!(got[i], at, "n {n} k {k} d {d}: point {i}");
                continue;
            }
            let found: f64 = (0..d).map(|m| (x[m * n + i] - c[m * k + got[i] as usize - 1]).powi(2)).sum();
            assert!(found == best || (found - best).abs() <= 1e-12 * best.abs(), "n {n} k {k} d {d}: point {i}");
        }
    }
}

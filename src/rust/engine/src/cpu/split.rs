//! Few output rows over a long reduced range (a total over every point, K-means' count of changed
//! labels): row at a time, one thread per output row, so that one row left every other core idle
//! (10^6 terms: 3.5 ms on one of two cores). Here the range is cut into parts of a fixed length,
//! each reduced over all the rows by whichever thread takes it, and the parts' states are merged in
//! order: the same bits on any number of threads.

use std::ops::Range;

use super::{row_of, Block, Dest, RowMajor};
use crate::schedule::work::Work;
use crate::real::Real;
use crate::reduction::Accumulator;

/// Reduced indices per part: long enough that a part's start and its merge cost nothing next to it.
const PART: usize = 1 << 16;

/// The parts of the reduced range `0..n_red` when `n_out` rows (at least one) would leave some of the `threads`
/// idle and the range is long enough to share; None otherwise.
pub fn parts(n_out: usize, n_red: usize, threads: usize) -> Option<Vec<Range<usize>>> {
    ((1..threads).contains(&n_out) && n_red >= 2 * PART).then(|| (0..n_red).step_by(PART).map(|s| s..(s + PART).min(n_red)).collect())
}

/// The blocks of `parts`: all `n_out` rows over each part, writing their states in `states` (one part
/// after the other).
pub fn blocks<'r, 'v>(parts: &'r [Range<usize>], n_out: usize, states: &'v mut [f64]) -> Vec<Block<'r, 'v>> {
    let per_part = states.len() / parts.len().max(1);
    let block = |(part, states)| (Work { rows: 0..n_out, reduced: std::slice::from_ref(part) }, Dest::States(states));
    parts.iter().zip(states.chunks_exact_mut(per_part.max(1))).map(block).collect()
}

/// The results in `out` of the `n_out` rows whose states over each part are `states` (one part after
/// the other, each `n_out` states), the parts merged in the order of the range.
pub fn finish<T: Real>(acc: &Accumulator, states: &[f64], n_out: usize, out: &mut RowMajor) {
    let (state_len, width) = (acc.state_len(), acc.width());
    let parts: Vec<&[f64]> = states.chunks_exact(n_out * state_len).collect();
    for r in 0..n_out {
        let row = r * state_len..(r + 1) * state_len;
        let mut state = parts[0][row.clone()].to_vec();
        for part in &parts[1..] {
            acc.merge(&mut state, &part[row.clone()]);
        }
        acc.finalize::<T>(&state, row_of(&mut out.values, r, width), row_of(&mut out.indices, r, width));
    }
}

#[cfg(test)]
mod tests {
    use super::super::{evaluate, Inputs, RowMajor, Settings};
    use super::*;
    use crate::formula::Formula;
    use crate::reduction::SumScheme;

    /// `len` numbers in [0, 1), the same on every run.
    fn uniform(len: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len).map(|_| { s ^= s << 13; s ^= s >> 7; s ^= s << 17; (s >> 11) as f64 / (1u64 << 53) as f64 }).collect()
    }

    fn run(text: &str, data: &[Vec<f64>], n_red: usize, threads: usize, scheme: SumScheme) -> RowMajor {
        let args = ["x = Vj(2)", "y = Vi(2)", "w = Vi(1)"].map(String::from);
        let formula = Formula::parse(text, &args).unwrap();
        let inputs = Inputs { data: data.iter().map(|v| v.as_slice()).collect(), n_i: n_red, n_j: 2 };
        let settings = Settings { scheme, threads, interrupt: None, progress: None, isa: Default::default() };
        evaluate::<f64>(&formula, &inputs, &settings, None).unwrap()
    }

    /// Two output rows over 2 parts and a bit (not a multiple of a part, nor of a tile), with ties
    /// (coordinates on a coarse grid) and an infinite weight: the parts merged give the row-at-a-time
    /// results (the same bits where the reduction selects; sums to float64's rounding), and the same
    /// bits on 3 threads as on 4 (both split).
    #[test]
    fn parts_of_a_long_range_merge_to_the_whole() {
        let n_red = 2 * PART + 12345;
        let grid = |len, seed| -> Vec<f64> { uniform(len, seed).iter().map(|t| (t * 8.0).floor()).collect() };
        let y = grid(2 * n_red, 2);
        let mut w: Vec<f64> = uniform(n_red, 3).iter().map(|t| t - 0.5).collect();
        w[PART + 7] = f64::INFINITY;
        let data = vec![grid(4, 1), y, w];
        let f = "SqDist(x, y) * w";
        let texts = [
            format!("Sum_Reduction({f}, 1)"),
            format!("Min_ArgMin_Reduction({f}, 1)"),
            format!("Max_ArgMax_Reduction({f}, 1)"),
            format!("KMin_ArgKMin_Reduction({f}, 5, 1)"),
            "LogSumExp_Reduction(w - SqDist(x, y) / 100, 1)".to_string(),
            "SumSoftMaxWeight_Reduction(w - SqDist(x, y) / 100, y, 1)".to_string(),
        ];
        for text in &texts {
            for scheme in [SumScheme::BlockSum, SumScheme::KahanScheme] {
                // one thread: no parts (2 rows, 1 thread)
                let whole = run(text, &data, n_red, 1, scheme);
                let (three, four) = (run(text, &data, n_red, 3, scheme), run(text, &data, n_red, 4, scheme));
                assert!(parts(2, n_red, 3).is_some() && parts(2, n_red, 1).is_none() && parts(0, n_red, 3).is_none());
                let bits = |r: &RowMajor| r.values.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(&three), bits(&four), "{text}: 3 and 4 threads");
                assert_eq!(three.indices, whole.indices, "{text}: indices");
                let exact = !text.starts_with("Sum") && !text.starts_with("Log");
                for (a, b) in three.values.iter().zip(&whole.values) {
                    let close = a == b || (a.is_nan() && b.is_nan()) || (a - b).abs() <= 1e-12 * b.abs().max(1.0);
                    assert!(if exact { a.to_bits() == b.to_bits() } else { close }, "{text}: split {a}, whole {b}");
                }
            }
        }
    }
}

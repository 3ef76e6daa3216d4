//! CPU timings of batches (issue 17): B log-domain Sinkhorn problems of n bins in one call with
//! block-diagonal ranges, against the dense reduction of one problem and of the whole batch, in ns per
//! pair: `cargo bench -p rkeops-engine --bench batch [-- words]`, the words filtering the case names
//! (e.g. `ranged F32 axis 1`). Prints medians of several runs after a warm-up.

use std::ops::Range;

use engine::{Backend, Input, Operator, Precision, Ranges, RunOptions};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{median_time, random};

/// Problems of a batch, and bins per problem.
const B: usize = 256;
const N: usize = 100;

fn main() {
    let words: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| words.iter().all(|w| name.contains(w.as_str()));
    // Member b's rows b N .. (b + 1) N against its own rows only, on both axes.
    let blocks: Vec<Range<usize>> = (0..B).map(|b| b * N..(b + 1) * N).collect();
    let pairs: Vec<(usize, usize)> = (0..B).map(|b| (b, b)).collect();
    let diagonal = Ranges::from_block_pairs(&blocks, &blocks, &pairs).unwrap();
    for axis in [0, 1] {
        // A half iteration of Sinkhorn: the potential of the reduced side enters the terms.
        let potential = if axis == 0 { "lv = Vj(1)" } else { "lu = Vi(1)" };
        let text = format!("LogSumExp_Reduction({} - SqDist(x, y) * s, {axis})", &potential[..2]);
        let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)", potential, "s = Pm(1)"].iter().map(|s| s.to_string()).collect();
        let op = Operator::new(&text, &args).unwrap();
        let n_all = B * N;
        // As in bench/batch.R: every member on the grid of [0, 1], s = 1 / lambda = 1000, so that
        // most terms lie 87 to 1000 below their row's largest and their exponentials underflow.
        let grid: Vec<f64> = (0..n_all).map(|k| (k % N) as f64 / (N - 1) as f64).collect();
        let (x, y, s) = (&grid, &grid, [1000.0]);
        let p: Vec<f64> = random(n_all, 3).iter().map(|r| 5.0 * r - (N as f64).ln()).collect();
        let inputs = |n: usize| {
            vec![
                Input::host(&x[..n], n, 1),
                Input::host(&y[..n], n, 1),
                Input::host(&p[..n], n, 1),
                Input::host(&s, 1, 1),
            ]
        };
        // (name, rows each side, ranges, repetitions)
        let cases = [
            (format!("ranged {B} x {N}^2"), n_all, Some(diagonal.clone()), 9),
            (format!("dense {N}^2"), N, None, 201),
            (format!("dense {n_all}^2"), n_all, None, 3),
        ];
        for (name, n, ranges, reps) in cases {
            let pairs = match ranges {
                Some(_) => (B * N * N) as f64,
                None => (n * n) as f64,
            };
            for precision in [Precision::F32, Precision::F64] {
                for threads in [2, 1] {
                    let case = format!("{name} {precision:?} axis {axis} threads {threads}");
                    if !wanted(&case) {
                        continue;
                    }
                    let opts = RunOptions { precision, threads, backend: Backend::Cpu, ranges: ranges.clone(), ..Default::default() };
                    let t = median_time(reps, || {
                        op.run(&inputs(n), &opts).unwrap();
                    });
                    println!("{case:<44} {:>10.3} ms, {:>6.2} ns per pair", t * 1e3, t / pairs * 1e9);
                }
            }
        }
    }
}

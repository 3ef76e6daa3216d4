//! CPU timings of reductions over a short range (K-means assignments, GMM E-steps, predictions on a
//! few points), where the cost per output row, not per pair, sets the time:
//! `cargo bench -p rkeops-engine --bench short_range [-- words]`, the words filtering the case names
//! (e.g. `argmin F32`). Prints medians of several runs after a warm-up, and the time per output row.

use engine::{Backend, Input, Operator, Precision, RunOptions};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{median_time, random};

/// A case: its name, the formula, its variables (`Vi` ones have `n` rows, `Vj` ones `m`), `n`, `m`.
type Case = (&'static str, &'static str, &'static [&'static str], usize, usize);

const CASES: &[Case] = &[
    ("argmin K=10 D=5 N=5e6", "ArgMin_Reduction(SqDist(x,c),0)", &["x = Vi(5)", "c = Vj(5)"], 5_000_000, 10),
    ("argmin K=50 D=2 N=1e6", "ArgMin_Reduction(SqDist(x,c),0)", &["x = Vi(2)", "c = Vj(2)"], 1_000_000, 50),
    ("argmin K=1 D=2 N=1e6", "ArgMin_Reduction(SqDist(x,c),0)", &["x = Vi(2)", "c = Vj(2)"], 1_000_000, 1),
    (
        "gmm logsumexp K=10 D=5 N=1e6",
        "LogSumExp_Reduction(w - 0.5 * WeightedSqDist(s, x, m), 0)",
        &["x = Vi(5)", "w = Vj(1)", "s = Vj(5)", "m = Vj(5)"],
        1_000_000,
        10,
    ),
    (
        "gmm softmax K=10 D=5 N=1e6",
        "SumSoftMaxWeight_Reduction(w - 0.5 * WeightedSqDist(s, x, m), m, 0)",
        &["x = Vi(5)", "w = Vj(1)", "s = Vj(5)", "m = Vj(5)"],
        1_000_000,
        10,
    ),
    ("argkmin 3 of K=20 D=3 N=1e6", "ArgKMin_Reduction(SqDist(x,c),3,0)", &["x = Vi(3)", "c = Vj(3)"], 1_000_000, 20),
    ("gauss sum M=50 D=3 N=1e6", "Sum_Reduction(Exp(-SqDist(x,c))*b, 0)", &["x = Vi(3)", "c = Vj(3)", "b = Vj(1)"], 1_000_000, 50),
];

fn main() {
    let words: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let wanted = |name: &str| words.iter().all(|w| name.contains(w.as_str()));
    for &(name, formula, vars, n, m) in CASES {
        let args: Vec<String> = vars.iter().map(|s| s.to_string()).collect();
        let op = Operator::new(formula, &args).unwrap();
        let data: Vec<(Vec<f64>, usize, usize)> = vars
            .iter()
            .enumerate()
            .map(|(k, v)| {
                let rows = if v.contains("Vi") { n } else { m };
                let dim: usize = v[v.find('(').unwrap() + 1..v.find(')').unwrap()].parse().unwrap();
                (random(rows * dim, k as u64 + 1), rows, dim)
            })
            .collect();
        let inputs: Vec<Input> = data.iter().map(|(x, nrow, ncol)| Input::host(x, *nrow, *ncol)).collect();
        for precision in [Precision::F32, Precision::F64] {
            if !wanted(&format!("{name} {precision:?}")) {
                continue;
            }
            let opts = RunOptions { precision, backend: Backend::Cpu, ..Default::default() };
            let t = median_time(5, || {
                op.run(&inputs, &opts).unwrap();
            });
            println!("{name:<30} {precision:?}: {t:.4} s, {:.1} ns per row", t / n as f64 * 1e9);
        }
    }
}

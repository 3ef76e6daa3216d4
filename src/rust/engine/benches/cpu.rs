//! CPU timings of the engine alone (no R): `cargo bench -p rkeops-engine --bench cpu [-- N]`.
//! Prints medians of several runs after a warm-up, in seconds and pairs per second.

use engine::{Backend, Input, Operator, Precision, RunOptions};

#[path = "../tests/common/mod.rs"]
mod common;
use common::{median_time, random};

fn main() {
    // Arguments: N, and optionally words that the case names must contain (e.g. `gauss F32`).
    let args: Vec<String> = std::env::args().skip(1).filter(|a| !a.starts_with("--")).collect();
    let n: usize = args.iter().find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let words: Vec<&String> = args.iter().filter(|a| a.parse::<usize>().is_err()).collect();
    let wanted = |name: &str| words.iter().all(|w| name.contains(w.as_str()));
    let cases: [(&str, &str, &[&str], usize); 5] = [
        ("gauss sum D=3", "Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"], 3),
        ("gauss sum D=64", "Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(64)", "y = Vj(64)", "b = Vj(1)"], 64),
        ("argkmin K=10 D=3", "ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(3)", "y = Vj(3)"], 3),
        ("logsumexp D=3", "LogSumExp_Reduction(-SqDist(x,y) + b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"], 3),
        // The gradient in x of the Gaussian sum (issue 4: at most 2 x the forward time).
        (
            "gauss grad_x D=3",
            "Sum_Reduction(Grad(Exp(-SqDist(x,y))*b, x, e), 0)",
            &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "e = Vi(1)"],
            3,
        ),
    ];
    for (name, formula, args, d) in cases {
        let (x, y, b) = (random(n * d, 1), random(n * d, 2), random(n, 3));
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let op = Operator::new(formula, &args).unwrap();
        let mut inputs = vec![Input::host(&x, n, d), Input::host(&y, n, d)];
        if args.len() >= 3 {
            inputs.push(Input::host(&b, n, 1));
        }
        if args.len() == 4 {
            inputs.push(Input::host(&b, n, 1));
        }
        for precision in [Precision::F32, Precision::F64] {
            if !wanted(&format!("{name} {precision:?}")) {
                continue;
            }
            let opts = RunOptions { precision, backend: Backend::Cpu, ..Default::default() };
            let t = median_time(3, || {
                op.run(&inputs, &opts).unwrap();
            });
            println!("{name:<18} {precision:?} N = M = {n}: {t:.3} s, {:.2} Gpairs/s", (n * n) as f64 / t / 1e9);
        }
    }
}

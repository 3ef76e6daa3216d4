//! GPU timings of the engine alone (no R), for bench/gpu.sh which runs the torch/Triton peers in
//! the same call: `cargo bench -p rkeops-engine --bench gpu`. Medians after a warm-up; "kernel"
//! is the kernel alone, "total" includes conversion, transfers and the host-side finalisation.

use engine::{Backend, Input, Operator, Output, Precision, RunOptions, Tuning};
use std::time::Instant;

#[path = "../tests/common/mod.rs"]
mod common;
use common::random;

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Median total and kernel times of `reps` runs after one warm-up; prints the phases of the last.
fn time(op: &Operator, inputs: &[Input], options: &RunOptions, reps: usize) -> (f64, f64) {
    let run = || -> (f64, Output) {
        let clock = Instant::now();
        let out = op.run(inputs, options).unwrap_or_else(|e| panic!("{e}"));
        (clock.elapsed().as_secs_f64(), out)
    };
    let (_, out) = run();
    assert!(out.backend.starts_with("GPU"), "ran on {}", out.backend);
    let mut totals = vec![];
    let mut kernels = vec![];
    let mut phases = String::new();
    for _ in 0..reps {
        let (t, out) = run();
        totals.push(t);
        kernels.push(out.timings.iter().filter(|(n, _)| *n == "kernel").map(|(_, t)| t).sum());
        phases = out.timings.iter().map(|(n, t)| format!("{n} {:.1} ms", t * 1e3)).collect::<Vec<_>>().join(", ");
    }
    println!("    phases: {phases}");
    (median(totals), median(kernels))
}

struct Case {
    name: &'static str,
    formula: &'static str,
    n: usize,
    m: usize,
    d: usize,
    precision: Precision,
    reps: usize,
}

fn main() {
    let gpu = engine::cuda::availability(0).unwrap_or_else(|e| panic!("{e}"));
    println!("rkeops GPU benchmark on {gpu}");
    let gauss = "Sum_Reduction(Exp(-SqDist(x,y))*b, 0)";
    let cases = [
        Case { name: "gauss_f32", formula: gauss, n: 10_000, m: 10_000, d: 3, precision: Precision::F32, reps: 7 },
        Case { name: "gauss_f32", formula: gauss, n: 100_000, m: 100_000, d: 3, precision: Precision::F32, reps: 5 },
        Case {
            name: "gauss_f32",
            formula: gauss,
            n: 1_000_000,
            m: 1_000_000,
            d: 3,
            precision: Precision::F32,
            reps: 3,
        },
        Case { name: "gauss_f64", formula: gauss, n: 100_000, m: 100_000, d: 3, precision: Precision::F64, reps: 3 },
        Case { name: "gauss64_f32", formula: gauss, n: 100_000, m: 100_000, d: 64, precision: Precision::F32, reps: 3 },
        // Tensor-core dot products (issue 19); RKEOPS_GPU_TENSOR=off for the FP32 kernel.
        Case {
            name: "argkmin10_d100_f32",
            formula: "ArgKMin_Reduction(SqDist(x,y), 10, 0)",
            n: 1_000_000,
            m: 1_000_000,
            d: 100,
            precision: Precision::F32,
            reps: 1,
        },
        Case {
            name: "argkmin10_d100_small_f32",
            formula: "ArgKMin_Reduction(SqDist(x,y), 10, 0)",
            n: 200_000,
            m: 200_000,
            d: 100,
            precision: Precision::F32,
            reps: 3,
        },
        Case {
            name: "argkmin10_d784_f32",
            formula: "ArgKMin_Reduction(SqDist(x,y), 10, 0)",
            n: 60_000,
            m: 60_000,
            d: 784,
            precision: Precision::F32,
            reps: 3,
        },
        Case {
            name: "argkmin10_f32",
            formula: "ArgKMin_Reduction(SqDist(x,y), 10, 0)",
            n: 1_000_000,
            m: 1_000_000,
            d: 3,
            precision: Precision::F32,
            reps: 3,
        },
        Case {
            name: "argkmin10_d10_f32",
            formula: "ArgKMin_Reduction(SqDist(x,y), 10, 0)",
            n: 1_000_000,
            m: 1_000_000,
            d: 10,
            precision: Precision::F32,
            reps: 3,
        },
        Case {
            name: "logsumexp_f32",
            formula: "LogSumExp_Reduction(b - SqDist(x,y) * 10, 0)",
            n: 1_000_000,
            m: 1_000_000,
            d: 3,
            precision: Precision::F32,
            reps: 3,
        },
        Case { name: "gauss_2d_f32", formula: gauss, n: 100, m: 10_000_000, d: 3, precision: Precision::F32, reps: 5 },
    ];
    // An argument keeps only the cases whose `name@N` contains it (`logsumexp` or `gauss_f32@1000000`
    // for a profile).
    let only = std::env::args().skip(1).find(|a| !a.starts_with('-'));
    let wanted = |c: &&Case| only.as_ref().is_none_or(|o| format!("{}@{}", c.name, c.n).contains(o.as_str()));
    for case in cases.iter().filter(wanted) {
        let args: Vec<String> =
            [format!("x = Vi({})", case.d), format!("y = Vj({})", case.d), "b = Vj(1)".into()].into();
        let op = Operator::new(case.formula, &args).unwrap();
        let args_used = if case.formula.contains('b') { 3 } else { 2 };
        let (x, y, b) = (random(case.n * case.d, 1), random(case.m * case.d, 2), random(case.m, 3));
        let inputs = [Input::host(&x, case.n, case.d), Input::host(&y, case.m, case.d), Input::host(&b, case.m, 1)];
        let inputs = &inputs[..args_used.max(op.formula.variables.len())];
        // The environment's tuning (RKEOPS_GPU_TENSOR=off: the FP32 kernel).
        let tuning = Tuning::from_env();
        let options = RunOptions { precision: case.precision, backend: Backend::Gpu(0), tuning, ..Default::default() };
        let (total, kernel) = time(&op, inputs, &options, case.reps);
        println!(
            "rkeops {:<14} N={:>8} M={:>9} D={:>3}  kernel {:>10.3} ms  total {:>10.3} ms  {:>8.1} Gpairs/s (kernel)",
            case.name,
            case.n,
            case.m,
            case.d,
            kernel * 1e3,
            total * 1e3,
            (case.n * case.m) as f64 / kernel / 1e9
        );
        if case.name == "gauss_2d_f32" {
            let force_1d =
                RunOptions { tuning: Tuning { force_1d: true, ..options.tuning.clone() }, ..options.clone() };
            let (total_1d, kernel_1d) = time(&op, inputs, &force_1d, case.reps);
            println!(
                "rkeops {:<14} N={:>8} M={:>9} D={:>3}  kernel {:>10.3} ms  total {:>10.3} ms  (1D scheme forced: 2D is {:.1} x faster)",
                "gauss_1d_f32", case.n, case.m, case.d, kernel_1d * 1e3, total_1d * 1e3, kernel_1d / kernel
            );
        }
    }
    if only.is_some() {
        return;
    }
    // The first call of a formula never seen (compile + load), then cached calls at N = 1000.
    let dir = std::env::temp_dir().join(format!("rkeops-bench-cache-{}", std::process::id()));
    let args: Vec<String> = ["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let formula = format!("Sum_Reduction(Exp(-{}*SqDist(x,y))*b, 0)", 1.0 + std::process::id() as f64 / 1e7);
    let op = Operator::new(&formula, &args).unwrap();
    let (x, y, b) = (random(3000, 1), random(3000, 2), random(1000, 3));
    let inputs = [Input::host(&x, 1000, 3), Input::host(&y, 1000, 3), Input::host(&b, 1000, 1)];
    let options = RunOptions { backend: Backend::Gpu(0), cache_dir: Some(dir.clone()), ..Default::default() };
    let clock = Instant::now();
    op.run(&inputs, &options).unwrap();
    let first = clock.elapsed().as_secs_f64();
    println!("rkeops first call of a new formula (NVRTC compile + load, N = 1000): {:.1} ms", first * 1e3);
    // Cached calls of the engine alone: what an iterative algorithm pays per reduction.
    for n in [1000, 10_000] {
        let (x, y, b) = (random(3 * n, 1), random(3 * n, 2), random(n, 3));
        let inputs = [Input::host(&x, n, 3), Input::host(&y, n, 3), Input::host(&b, n, 1)];
        op.run(&inputs, &options).unwrap();
        let cached: Vec<f64> = (0..200)
            .map(|_| {
                let clock = Instant::now();
                op.run(&inputs, &options).unwrap();
                clock.elapsed().as_secs_f64()
            })
            .collect();
        let phases = op.run(&inputs, &options).unwrap().timings;
        let phases: Vec<String> = phases.iter().map(|(n, t)| format!("{n} {:.3}", t * 1e3)).collect();
        println!(
            "rkeops cached call, N = M = {n}: {:.3} ms (median of 200); phases (ms): {}",
            median(cached) * 1e3,
            phases.join(", ")
        );
    }
    let _ = std::fs::remove_dir_all(dir);
}

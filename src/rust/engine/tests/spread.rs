//! Programs spread over parts (`engine::program::spread`) in host memory, each part a thread computing on the
//! CPU as each GPU does on its own (`spread::run_on_host_parts`), against the same programs run
//! whole: K-means (rows, merged sums, a map), Sinkhorn with a schedule (log-sum-exps merged), a
//! split result read as a j-variable (gathered), a stopping rule; and the programs that do not
//! spread. On several GPUs: `gpu_steps.rs`.

use engine::program::{self, Buffer, Program, Schedule, Step, Stop};
use engine::program::spread::run_on_host_parts;
use engine::{Backend, Input, Precision, Ranges, RunOptions, Tuning};

use super::program::{buffer, max_diff, op, sinkhorn_operators, step};
use crate::common::random;

fn options() -> RunOptions {
    let tuning = Tuning { spread_rows: 1, ..Tuning::default() };
    RunOptions { precision: Precision::F64, backend: Backend::Cpu, threads: 1, tuning, ..Default::default() }
}

/// `p` run whole on the CPU, and spread over parts of these `weights`.
fn whole_and_spread(p: &Program, weights: &[f64]) -> (program::ProgramResult, program::ProgramResult) {
    let whole = program::run(p, &options()).unwrap();
    let spread = run_on_host_parts(p, &options(), weights).unwrap().expect("a program that spreads");
    (whole, spread)
}

#[test]
fn kmeans_spread_over_parts_equals_kmeans_whole() {
    let (n, d, k) = (1013, 2, 9);
    let x = random(n * d, 3);
    let c0: Vec<f64> = (0..d).flat_map(|a| x[a * n..a * n + k].to_vec()).collect();
    let j: Vec<f64> = (1..=k).map(|v| v as f64).collect();
    let labels = op("ArgMin_Reduction(SqDist(x, c), 0)", &["x = Vi(2)", "c = Vj(2)"]);
    let sums = op("Sum_Reduction(Equal(l, j) * Concat(x, IntCst(1)), 1)", &["l = Vi(1)", "x = Vi(2)", "j = Vj(1)"]);
    let centres = op("Sum_Reduction(IfElse(Elem(s, 2) - 0.5, Extract(s, 0, 2) / Elem(s, 2), c), 1)", &["s = Vj(3)", "c = Vj(2)"]);
    let buffers = vec![
        buffer("x", Some(Input::host(&x, n, d))),
        buffer("c", Some(Input::host(&c0, k, d))),
        buffer("labels", None),
        buffer("j", Some(Input::host(&j, k, 1))),
        buffer("sums", None),
    ];
    let steps =
        vec![step("labels", &labels, &[0, 1], 2), step("sums", &sums, &[2, 0, 3], 4), step("c", &centres, &[4, 1], 1)];
    let p = Program { buffers, steps, iterations: 7, stop: None, trace: vec![4], outputs: vec![2, 1] };
    // (two parts of 512 and 501 rows; three of 256, 512 and 245)
    for weights in [vec![1.0, 1.0], vec![1.0, 2.0, 1.0]] {
        let (whole, spread) = whole_and_spread(&p, &weights);
        assert_eq!(spread.outputs[0], whole.outputs[0], "labels, {weights:?}");
        assert!(max_diff(&spread.outputs[1], &whole.outputs[1]) < 1e-12, "centres, {weights:?}");
        assert!(max_diff(&spread.trace[0], &whole.trace[0]) < 1e-9, "sums and counts, traced");
        assert_eq!((spread.iterations, spread.backend.as_str()), (7, "CPU parts"));
    }
}

/// Sinkhorn (g by log-sum-exps over the split rows, merged; f on each part's rows; a temperature
/// that follows a schedule), then h = sum_j exp(-|x_i - x_j|^2) f_j, which reads x both as rows and
/// whole and f gathered from the parts; the loop stops when the change of g drops below a tolerance.
#[test]
fn sinkhorn_spread_over_parts_equals_sinkhorn_whole() {
    let (n, m) = (1500, 700);
    let x = random(n, 1);
    let y = random(m, 2);
    let (lmu, lnu) = (vec![-(n as f64).ln(); n], vec![-(m as f64).ln(); m]);
    let schedule = [2.0, 5.0, 10.0, 20.0];
    let (f_op, g_op) = sinkhorn_operators();
    let h_op = op("Sum_Reduction(Exp(-SqDist(x, xj)) * f, 0)", &["x = Vi(1)", "xj = Vj(1)", "f = Vj(1)"]);
    let copy = op("Sum_Reduction(g, 0)", &["g = Vi(1)"]);
    let change_op = op("Max_Reduction(Abs(g - h), 0)", &["g = Vj(1)", "h = Vj(1)"]);
    let (f0, g0, s0) = (vec![0.0; n], vec![0.0; m], [schedule[0]]);
    let schedule = Some(Schedule { values: &schedule, rows: 4 });
    let buffers = vec![
        buffer("x", Some(Input::host(&x, n, 1))),
        buffer("y", Some(Input::host(&y, m, 1))),
        buffer("lmu", Some(Input::host(&lmu, n, 1))),
        buffer("lnu", Some(Input::host(&lnu, m, 1))),
        buffer("f", Some(Input::host(&f0, n, 1))),
        buffer("g", Some(Input::host(&g0, m, 1))),
        Buffer { name: "s".into(), initial: Some(Input::host(&s0, 1, 1)), schedule },
        buffer("h", None),
        buffer("g before", Some(Input::host(&g0, m, 1))),
        buffer("change", None),
    ];
    let steps: Vec<Step> = vec![
        step("g before", &copy, &[5], 8),
        step("g", &g_op, &[0, 1, 2, 4, 6], 5),
        step("f", &f_op, &[0, 1, 3, 5, 6], 4),
        step("h", &h_op, &[0, 0, 4], 7),
        step("change", &change_op, &[5, 8], 9),
    ];
    let stop = Some(Stop { buffer: 9, tol: 1e-3, every: 1 });
    let p = Program { buffers, steps, iterations: 200, stop, trace: vec![6], outputs: vec![4, 5, 7] };
    let (whole, spread) = whole_and_spread(&p, &[1.0, 1.0]);
    assert!(whole.iterations > 4 && whole.iterations < 200, "{} iterations", whole.iterations);
    assert_eq!((spread.iterations, &spread.trace), (whole.iterations, &whole.trace));
    for (o, name) in ["f", "g", "h"].iter().enumerate() {
        let diff = max_diff(&spread.outputs[o], &whole.outputs[o]);
        assert!(diff < 1e-10, "{name} differs by {diff}");
    }
}

#[test]
fn programs_that_cannot_be_spread_run_whole() {
    let n = 2000;
    let x = random(n, 5);
    let k = op("Sum_Reduction(Exp(-SqDist(x, y)), 1)", &["x = Vi(1)", "y = Vj(1)"]);
    let nearest = op("ArgMin_Reduction(SqDist(x, y), 1)", &["x = Vi(1)", "y = Vj(1)"]);
    let make = |operator, ranges: Option<Ranges>| {
        let steps = vec![Step { ranges, ..step("r", operator, &[0, 0], 1) }];
        let buffers = vec![buffer("x", Some(Input::host(&x, n, 1))), buffer("r", None)];
        Program { buffers, steps, iterations: 2, stop: None, trace: vec![], outputs: vec![1] }
    };
    let spreads = |p: &Program, weights: &[f64], spread_rows| {
        let options = RunOptions { tuning: Tuning { spread_rows, ..Tuning::default() }, ..options() };
        run_on_host_parts(p, &options, weights).unwrap().is_some()
    };
    assert!(spreads(&make(&k, None), &[1.0, 1.0], 1));
    assert!(!spreads(&make(&k, None), &[1.0], 1), "one device");
    assert!(!spreads(&make(&k, None), &[1.0, 1.0], 1001), "too few rows for each device");
    assert!(!spreads(&make(&nearest, None), &[1.0, 1.0], 1), "indices over the split rows");
    let ranges = Ranges::from_block_pairs(&[0..n], &[0..n], &[(0, 0)]).unwrap();
    assert!(!spreads(&make(&k, Some(ranges)), &[1.0, 1.0], 1), "block-sparse");
}

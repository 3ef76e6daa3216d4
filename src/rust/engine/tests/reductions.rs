//! Every reduction against a direct double loop, on sizes that are not multiples of the tile (more
//! than two CPU tiles, of 256 to 4096 indices, along the reduced index for the first tests), on both
//! axes, in float64 and float32.

use engine::tuning::IsaCap;
use engine::{Backend, Input, Operator, Output, Precision, RunOptions, SumScheme, Tuning};

use crate::common;
use common::random;

struct Data {
    x: Vec<f64>,
    y: Vec<f64>,
    b: Vec<f64>,
    n: usize,
    m: usize,
    d: usize,
}

impl Data {
    fn new(n: usize, m: usize, d: usize) -> Data {
        Data {
            x: random(n * d, 1),
            y: random(m * d, 2),
            b: random(m * 2, 3).iter().map(|v| v - 0.5).collect(),
            n,
            m,
            d,
        }
    }
    fn sqdist(&self, i: usize, j: usize) -> f64 {
        (0..self.d).map(|k| (self.x[i + self.n * k] - self.y[j + self.m * k]).powi(2)).sum()
    }
}

fn run(formula: &str, args: &[&str], inputs: &[Input], precision: Precision, threads: usize) -> Output {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let op = Operator::new(formula, &args).unwrap();
    op.run(inputs, &RunOptions { precision, threads, backend: Backend::Cpu, ..Default::default() }).unwrap()
}

fn close(got: f64, want: f64, tol: f64) -> bool {
    (got - want).abs() <= tol * (1.0 + want.abs())
}

fn assert_close(got: &[f64], want: &[f64], tol: f64, what: &str) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    for (k, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(close(*g, *w, tol), "{what}: element {k}: got {g}, want {w}");
    }
}

fn tolerance(p: Precision) -> f64 {
    if p == Precision::F64 {
        1e-12
    } else {
        2e-5
    }
}

#[test]
fn gaussian_sum_both_axes() {
    let data = Data::new(301, 9517, 3);
    let args = ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)"];
    let s = [0.7];
    let inputs = [
        Input::host(&data.x, data.n, 3),
        Input::host(&data.y, data.m, 3),
        Input::host(&data.b, data.m, 2),
        Input::host(&s, 1, 1),
    ];
    let mut want = vec![0.0; data.n * 2];
    for i in 0..data.n {
        for j in 0..data.m {
            let k = (-0.7 * data.sqdist(i, j)).exp();
            want[i] += k * data.b[j];
            want[i + data.n] += k * data.b[j + data.m];
        }
    }
    for p in [Precision::F64, Precision::F32] {
        for threads in [1, 3] {
            let out = run("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", &args, &inputs, p, threads);
            assert_eq!((out.nrow, out.dim, out.k), (data.n, 2, 1));
            assert_close(out.values.as_ref().unwrap(), &want, tolerance(p), "gaussian axis 0");
        }
    }
    // Axis 1: sum over i of exp(-s |x_i - y_j|^2) for each j.
    let out = run("Sum_Reduction(Exp(-s*SqDist(x,y)), 1)", &args, &inputs, Precision::F64, 2);
    let want: Vec<f64> = (0..data.m).map(|j| (0..data.n).map(|i| (-0.7 * data.sqdist(i, j)).exp()).sum()).collect();
    assert_close(out.values.as_ref().unwrap(), &want, 1e-12, "gaussian axis 1");
}

fn select(data: &Data, axis: usize, k: usize, max: bool) -> (Vec<f64>, Vec<i32>) {
    let (n_out, n_red) = if axis == 0 { (data.n, data.m) } else { (data.m, data.n) };
    let mut values = vec![0.0; n_out * k];
    let mut indices = vec![0; n_out * k];
    for r in 0..n_out {
        let mut terms: Vec<(f64, usize)> =
            (0..n_red).map(|t| (if axis == 0 { data.sqdist(r, t) } else { data.sqdist(t, r) }, t)).collect();
        terms.sort_by(|a, b| if max { b.0.total_cmp(&a.0) } else { a.0.total_cmp(&b.0) }.then(a.1.cmp(&b.1)));
        for p in 0..k {
            values[r + n_out * p] = terms[p].0;
            indices[r + n_out * p] = terms[p].1 as i32 + 1;
        }
    }
    (values, indices)
}

#[test]
fn selections_both_axes() {
    let data = Data::new(263, 9389, 2);
    let args = ["x = Vi(2)", "y = Vj(2)"];
    let inputs = [Input::host(&data.x, data.n, 2), Input::host(&data.y, data.m, 2)];
    for axis in [0, 1] {
        for p in [Precision::F64, Precision::F32] {
            let tol = tolerance(p);
            let (v1, i1) = select(&data, axis, 1, false);
            let out = run(&format!("Min_ArgMin_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 2);
            assert_close(out.values.as_ref().unwrap(), &v1, tol, "min");
            assert_eq!(out.indices.as_ref().unwrap(), &i1, "argmin axis {axis}");
            let out = run(&format!("ArgMin_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 2);
            assert!(out.values.is_none());
            assert_eq!(out.indices.as_ref().unwrap(), &i1);
            let (vmax, imax) = select(&data, axis, 1, true);
            let out = run(&format!("Max_ArgMax_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 2);
            assert_close(out.values.as_ref().unwrap(), &vmax, tol, "max");
            assert_eq!(out.indices.as_ref().unwrap(), &imax);
            let out = run(&format!("Max_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 1);
            assert_close(out.values.as_ref().unwrap(), &vmax, tol, "max");
            assert!(out.indices.is_none());
            let out = run(&format!("ArgMax_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 1);
            assert_eq!(out.indices.as_ref().unwrap(), &imax);
            let out = run(&format!("Min_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 1);
            assert_close(out.values.as_ref().unwrap(), &v1, tol, "min");
            let (vk, ik) = select(&data, axis, 7, false);
            let out = run(&format!("KMin_ArgKMin_Reduction(SqDist(x,y), 7, {axis})"), &args, &inputs, p, 2);
            assert_eq!(out.k, 7);
            assert_close(out.values.as_ref().unwrap(), &vk, tol, "kmin");
            assert_eq!(out.indices.as_ref().unwrap(), &ik, "argkmin axis {axis}");
            let out = run(&format!("KMin_Reduction(SqDist(x,y), 7, {axis})"), &args, &inputs, p, 2);
            assert_close(out.values.as_ref().unwrap(), &vk, tol, "kmin");
            let out = run(&format!("ArgKMin_Reduction(SqDist(x,y), 7, {axis})"), &args, &inputs, p, 2);
            assert_eq!(out.indices.as_ref().unwrap(), &ik, "argkmin axis {axis}");
        }
    }
}

#[test]
fn vector_valued_selection_is_per_component() {
    // Min over j of (x_i - y_j) per component: two components, two independent answers.
    let data = Data::new(37, 300, 2);
    let args = ["x = Vi(2)", "y = Vj(2)"];
    let inputs = [Input::host(&data.x, data.n, 2), Input::host(&data.y, data.m, 2)];
    let out = run("KMin_ArgKMin_Reduction(x-y, 3, 0)", &args, &inputs, Precision::F64, 2);
    let values = out.values.unwrap();
    let indices = out.indices.unwrap();
    for i in 0..data.n {
        for c in 0..2 {
            let mut t: Vec<(f64, usize)> =
                (0..data.m).map(|j| (data.x[i + data.n * c] - data.y[j + data.m * c], j)).collect();
            t.sort_by(|a, b| a.0.total_cmp(&b.0));
            for (p, &(value, j)) in t.iter().enumerate().take(3) {
                let at = i + data.n * (p + 3 * c);
                assert!(close(values[at], value, 1e-14));
                assert_eq!(indices[at], j as i32 + 1);
            }
        }
    }
}

#[test]
fn log_sum_exp_and_soft_max() {
    let data = Data::new(129, 8300, 3);
    let args = ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)"];
    let inputs = [
        Input::host(&data.x, data.n, 3),
        Input::host(&data.y, data.m, 3),
        Input::host(&data.b, data.m, 2),
    ];
    // Values around 1000: exp overflows unless shifted.
    let f = |i: usize, j: usize| 1000.0 - 3.0 * data.sqdist(i, j);
    let mut lse = vec![0.0; data.n];
    let mut soft = vec![0.0; data.n * 2];
    let mut weighted = vec![0.0; data.n * 2];
    for i in 0..data.n {
        let m = (0..data.m).map(|j| f(i, j)).fold(f64::NEG_INFINITY, f64::max);
        let s: f64 = (0..data.m).map(|j| (f(i, j) - m).exp()).sum();
        lse[i] = m + s.ln();
        for c in 0..2 {
            let num: f64 = (0..data.m).map(|j| (f(i, j) - m).exp() * data.b[j + data.m * c]).sum();
            soft[i + data.n * c] = num / s;
            // Positive weights for the log: 1 + b.
            let w: f64 = (0..data.m).map(|j| (f(i, j) - m).exp() * (1.0 + data.b[j + data.m * c])).sum();
            weighted[i + data.n * c] = m + w.ln();
        }
    }
    for p in [Precision::F64, Precision::F32] {
        let tol = tolerance(p);
        let out = run("LogSumExp_Reduction(1000 - 3*SqDist(x,y), 0)", &args, &inputs, p, 2);
        assert_close(out.values.as_ref().unwrap(), &lse, tol, "logsumexp");
        let out = run("SumSoftMaxWeight_Reduction(1000 - 3*SqDist(x,y), b, 0)", &args, &inputs, p, 2);
        assert_close(out.values.as_ref().unwrap(), &soft, tol * 10.0, "softmax");
        let out = run("LogSumExpWeight_Reduction(1000 - 3*SqDist(x,y), 1 + b, 0)", &args, &inputs, p, 2);
        assert_close(out.values.as_ref().unwrap(), &weighted, tol, "logsumexp weight");
        let out = run("LogSumExp_Reduction(1000 - 3*SqDist(x,y), 0, 1 + b)", &args, &inputs, p, 2);
        assert_close(out.values.as_ref().unwrap(), &weighted, tol, "logsumexp, KeOps' weighted form");
    }
}

#[test]
fn sum_schemes_and_float32_accuracy() {
    // 10^6 terms k / 1024, exactly representable in float32, so the float64 sum is the reference.
    let m = 1_000_000;
    let b: Vec<f64> = (0..m).map(|k| ((k * 7919) % 1000 + 1) as f64 / 1024.0).collect();
    let want: f64 = b.iter().sum();
    let x = [0.0, 1.0];
    let inputs = [Input::host(&x, 2, 1), Input::host(&b, m, 1)];
    let args: Vec<String> = ["x = Vi(1)", "b = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let op = Operator::new("Sum_Reduction(b + 0*x, 0)", &args).unwrap();
    let rel = |scheme| {
        let options = RunOptions {
            precision: Precision::F32,
            sum_scheme: scheme,
            threads: 2,
            backend: Backend::Cpu,
            ..Default::default()
        };
        let out = op.run(&inputs, &options).unwrap();
        (out.values.unwrap()[0] - want).abs() / want
    };
    assert!(rel(SumScheme::Auto) < 1e-6);
    assert!(rel(SumScheme::BlockSum) < 1e-6);
    assert!(rel(SumScheme::KahanScheme) < 1e-6);
    // A single running float32 sum is what the other schemes improve on.
    assert!(rel(SumScheme::DirectSum) < 1e-2);
}

#[test]
fn nan_propagates() {
    let x = [0.0, f64::NAN, 2.0];
    let y = [1.0, 2.0, 3.0, 4.0];
    let inputs = [Input::host(&x, 3, 1), Input::host(&y[..4], 4, 1)];
    let args = ["x = Vi(1)", "y = Vj(1)"];
    let out = run("Sum_Reduction(x*y, 0)", &args, &inputs, Precision::F64, 1);
    let v = out.values.unwrap();
    assert_eq!(v[0], 0.0);
    assert!(v[1].is_nan());
    assert_eq!(v[2], 20.0);
    for red in ["Min_Reduction", "Max_Reduction", "LogSumExp_Reduction"] {
        let out = run(&format!("{red}(x-y, 0)"), &args, &inputs, Precision::F32, 1);
        let v = out.values.unwrap();
        assert!(v[1].is_nan() && !v[0].is_nan(), "{red}: {v:?}");
    }
}

#[test]
fn input_errors_name_the_variable() {
    let args: Vec<String> = ["x = Vi(3)", "y = Vj(3)", "s = Pm(2)"].iter().map(|s| s.to_string()).collect();
    let op = Operator::new("Sum_Reduction(SqDist(x,y)*s, 0)", &args).unwrap();
    let (x, y, s) = (vec![0.0; 30], vec![0.0; 12], vec![1.0, 2.0]);
    let opts = RunOptions { backend: Backend::Cpu, ..Default::default() };
    let ok = [
        Input::host(&x, 10, 3),
        Input::host(&y, 4, 3),
        Input::host(&s, 2, 1),
    ];
    assert!(op.run(&ok, &opts).is_ok());
    let e = op.run(&ok[..2], &opts).unwrap_err().to_string();
    assert!(e.contains("expected 3 inputs (x, y, s), got 2"), "{e}");
    let bad = [ok[0], Input::host(&x, 15, 2), ok[2]];
    let e = op.run(&bad, &opts).unwrap_err().to_string();
    assert!(e.contains("'y'") && e.contains("3 columns") && e.contains("got 2"), "{e}");
    let bad = [ok[0], ok[1], Input::host(&x[..3], 3, 1)];
    let e = op.run(&bad, &opts).unwrap_err().to_string();
    assert!(e.contains("'s'") && e.contains("length 2"), "{e}");
    let args: Vec<String> = ["x = Vi(1)", "z = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let op = Operator::new("KMin_Reduction(x+z-y, 5, 0)", &args).unwrap();
    let bad = [
        Input::host(&x[..5], 5, 1),
        Input::host(&x[..6], 6, 1),
        Input::host(&y[..4], 4, 1),
    ];
    let e = op.run(&bad, &opts).unwrap_err().to_string();
    assert!(e.contains("'z': has 6 rows, but 'x' has 5"), "{e}");
    let bad = [
        Input::host(&x[..5], 5, 1),
        Input::host(&x[..5], 5, 1),
        Input::host(&y[..4], 4, 1),
    ];
    let e = op.run(&bad, &opts).unwrap_err().to_string();
    assert!(e.contains("K = 5 is larger"), "{e}");
}

#[test]
fn float16_storage_is_float32_arithmetic_on_rounded_inputs() {
    let data = Data::new(301, 9517, 3);
    let round = |v: &[f64]| -> Vec<f64> { v.iter().map(|&x| half::f16::from_f64(x).to_f64()).collect() };
    let (xr, yr, br) = (round(&data.x), round(&data.y), round(&data.b));
    let args = ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)"];
    let formula = "Sum_Reduction(Exp(-SqDist(x,y))*b, 0)";
    let run3 = |x: &[f64], y: &[f64], b: &[f64], precision: Precision| -> Output {
        let inputs = [
            Input::host(x, data.n, 3),
            Input::host(y, data.m, 3),
            Input::host(b, data.m, 2),
        ];
        run(formula, &args, &inputs, precision, 2)
    };
    let half = run3(&data.x, &data.y, &data.b, Precision::F16);
    let single = run3(&xr, &yr, &br, Precision::F32);
    assert_eq!(half.values, single.values);
    // And the rounding is real: float16 differs from float32 on the original inputs.
    let direct = run3(&data.x, &data.y, &data.b, Precision::F32);
    assert_ne!(half.values, direct.values);
}

/// The evaluator is compiled for several instruction sets and picks one at run time: each one the
/// machine has must give the same results (`Tuning::cpu_isa`, RKEOPS_CPU_ISA, caps the choice).
#[test]
fn every_instruction_set() {
    let data = Data::new(97, 9300, 3);
    let args = ["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"];
    let inputs = [
        Input::host(&data.x, data.n, 3),
        Input::host(&data.y, data.m, 3),
        Input::host(&data.b[..data.m], data.m, 1),
    ];
    let gauss: Vec<f64> =
        (0..data.n).map(|i| (0..data.m).map(|j| (-data.sqdist(i, j)).exp() * data.b[j]).sum()).collect();
    let lse: Vec<f64> =
        (0..data.n).map(|i| (0..data.m).map(|j| (data.b[j] - data.sqdist(i, j)).exp()).sum::<f64>().ln()).collect();
    let (_, nearest) = select(&data, 0, 4, false);
    for isa in [IsaCap::Baseline, IsaCap::Avx2, IsaCap::Best] {
        let tuning = Tuning { cpu_isa: isa, ..Tuning::default() };
        for p in [Precision::F64, Precision::F32] {
            let run = |formula: &str| {
                let op = Operator::new(formula, &args.map(String::from)).unwrap();
                let options = RunOptions { precision: p, threads: 2, backend: Backend::Cpu, tuning: tuning.clone(), ..Default::default() };
                op.run(&inputs, &options).unwrap()
            };
            let out = run("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)");
            assert_close(out.values.as_ref().unwrap(), &gauss, tolerance(p), &format!("gaussian, {isa:?}"));
            let out = run("LogSumExp_Reduction(b - SqDist(x,y), 0)");
            assert_close(out.values.as_ref().unwrap(), &lse, tolerance(p), &format!("log-sum-exp, {isa:?}"));
            let out = run("ArgKMin_Reduction(SqDist(x,y), 4, 0)");
            assert_eq!(out.indices.as_ref().unwrap(), &nearest, "4 nearest, {isa:?}");
        }
    }
}

#[test]
fn large_dimensions_group_rows() {
    // D >= 16: the squared distances of several rows are computed together (cpu/row_block.rs), for
    // row counts that are not multiples of the group and tiles that are not multiples of its lanes.
    let data = Data::new(203, 9300, 37);
    let args = ["x = Vi(37)", "y = Vj(37)", "b = Vj(1)", "s = Pm(1)"];
    let s = [0.1];
    let inputs = [
        Input::host(&data.x, data.n, 37),
        Input::host(&data.y, data.m, 37),
        Input::host(&data.b[..data.m], data.m, 1),
        Input::host(&s, 1, 1),
    ];
    let k = |i: usize, j: usize| (-0.1 * data.sqdist(i, j)).exp();
    let by_row: Vec<f64> = (0..data.n).map(|i| (0..data.m).map(|j| k(i, j) * data.b[j]).sum()).collect();
    let by_column: Vec<f64> = (0..data.m).map(|j| (0..data.n).map(|i| k(i, j)).sum()).collect();
    let (_, nearest) = select(&data, 0, 5, false);
    let (_, nearest_rows) = select(&data, 1, 3, false);
    for p in [Precision::F64, Precision::F32] {
        for threads in [1, 2] {
            let out = run("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", &args, &inputs, p, threads);
            let grouped = out.values.unwrap();
            assert_close(&grouped, &by_row, tolerance(p), "gaussian, D = 37");
            // -(-x) is not an input: its rows are computed one at a time, with the same sums.
            let out = run("Sum_Reduction(Exp(-s*SqDist(-(-x),y))*b, 0)", &args, &inputs, p, threads);
            assert_eq!(out.values.unwrap(), grouped, "grouped rows differ from single rows");
        }
        let out = run("Sum_Reduction(Exp(-s*SqDist(x,y)), 1)", &args, &inputs, p, 2);
        assert_close(out.values.as_ref().unwrap(), &by_column, tolerance(p), "gaussian axis 1, D = 37");
        let out = run("ArgKMin_Reduction(SqDist(x,y), 5, 0)", &args, &inputs, p, 2);
        assert_eq!(out.indices.unwrap(), nearest, "5 nearest, D = 37");
        let out = run("ArgKMin_Reduction(SqDist(y,x), 3, 1)", &args, &inputs, p, 2);
        assert_eq!(out.indices.unwrap(), nearest_rows, "3 nearest along i, D = 37");
    }
}

/// Intermediate values of 2 x 10^5 components: the tile shrinks so that a worker's buffers stay
/// small (they would be 400 MB per thread at the usual 256 indices), and the result is right.
#[test]
fn wide_intermediate_values_use_short_tiles() {
    let (n, m) = (7, 1003);
    let y = random(m, 4);
    let x = random(n, 5);
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let op = Operator::new("Sum_Reduction(Extract(OneHot(Floor(4*y), 200000), 0, 4) * x, 0)", &args).unwrap();
    let inputs = [Input::host(&x, n, 1), Input::host(&y, m, 1)];
    for threads in [1, 2] {
        let options = RunOptions { threads, precision: Precision::F64, backend: Backend::Cpu, ..Default::default() };
        let v = op.run(&inputs, &options).unwrap().values.unwrap();
        for k in 0..4 {
            let count = y.iter().filter(|&&t| (4.0 * t).floor() as usize == k).count() as f64;
            for i in 0..n {
                let got = v[i + n * k];
                assert!((got - count * x[i]).abs() <= 1e-12 * count, "row {i}, component {k}: {got} vs {}", count * x[i]);
            }
        }
    }
}

/// A formula whose intermediate values would take gigabytes for a single reduced index is an error
/// that says so, before anything large is allocated.
#[test]
fn intermediate_values_too_large_for_memory_are_an_error() {
    let terms: Vec<String> = (0..130).map(|k| format!("OneHot(y + {k}, 1048576)")).collect();
    let formula = format!("Sum_Reduction({}, 0)", terms.join(" + "));
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let op = Operator::new(&formula, &args).unwrap();
    let (x, y) = (vec![0.0; 3], vec![0.0; 5]);
    let inputs = [Input::host(&x, 3, 1), Input::host(&y, 5, 1)];
    let e = op.run(&inputs, &RunOptions { backend: Backend::Cpu, ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("intermediate values take") && e.contains("MB for one reduced index"), "{e}");
}

/// A result larger than memory is an error that says how large, not an abort of the process.
#[test]
fn results_larger_than_memory_are_an_error() {
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let op = Operator::new("Sum_Reduction(OneHot(x + y, 1048576), 0)", &args).unwrap();
    // 10^6 rows of 2^20 values: 8.4 TB.
    let (x, y) = (vec![0.0; 1_000_000], vec![0.0; 1]);
    let inputs = [Input::host(&x, x.len(), 1), Input::host(&y, 1, 1)];
    let e = op.run(&inputs, &RunOptions { backend: Backend::Cpu, ..Default::default() }).unwrap_err().to_string();
    assert!(e.contains("the result (1000000 rows of 1048576 values) needs 8388.61 GB of memory"), "{e}");
}

/// The K-min selections that compute their squared distances as they select (`fusion::select_dist`)
/// give exactly what the general path gives (forced here by a product with 1): the same values and
/// indices for every dimension it takes, both axes, ties, NaN and lengths around its blocks of 128.
#[test]
fn fused_distance_selections_equal_the_general_path() {
    for d in 1..=4 {
        for (n, m) in [(3, 1), (5, 127), (4, 128), (6, 129), (7, 1000)] {
            // Values on a coarse grid, so that many distances tie; one NaN in each.
            let grid = |len: usize, seed: u64| -> Vec<f64> {
                let mut v: Vec<f64> = random(len * d, seed).iter().map(|t| (t * 4.0).floor()).collect();
                v[len * d / 2] = f64::NAN;
                v
            };
            let (x, y) = (grid(n, 7), grid(m, 8));
            let args = [format!("x = Vi({d})"), format!("y = Vj({d})")];
            let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
            let inputs = [Input::host(&x, n, d), Input::host(&y, m, d)];
            for p in [Precision::F64, Precision::F32] {
                for (red, k, axis) in [("KMin_ArgKMin_Reduction", "3, ", 0), ("Min_ArgMin_Reduction", "", 1), ("ArgKMin_Reduction", "2, ", 1)] {
                    let range = if axis == 0 { m } else { n };
                    if k.starts_with(|c: char| c.to_digit(10).is_some_and(|k| k as usize > range)) {
                        continue;
                    }
                    let fused = run(&format!("{red}(SqDist(x,y), {k}{axis})"), &args, &inputs, p, 2);
                    let general = run(&format!("{red}(SqDist(x,y) * 1, {k}{axis})"), &args, &inputs, p, 2);
                    let same = |a: &Option<Vec<f64>>, b: &Option<Vec<f64>>| match (a, b) {
                        (Some(a), Some(b)) => a.iter().zip(b).all(|(u, v)| u.to_bits() == v.to_bits() || u.is_nan() && v.is_nan()),
                        (a, b) => a.is_none() && b.is_none(),
                    };
                    let case = format!("{red}, {k}{axis}, D = {d}, n = {n}, m = {m}, {p:?}");
                    assert!(same(&fused.values, &general.values), "{case}: {:?} vs {:?}", fused.values, general.values);
                    assert_eq!(fused.indices, general.indices, "{case}");
                }
            }
        }
    }
}

/// Short reduced ranges (K-means assignments, mixtures of a few components, predictions at a few
/// points), which the CPU reduces a block of rows at a time (cpu/short_range.rs): against double
/// loops, on both axes, in both precisions, for ranges of 1 to 64 indices and a number of rows that
/// is not a multiple of the blocks.
#[test]
fn short_ranges_against_double_loops() {
    let d = 3;
    for len in [1, 10, 37, 64] {
        let data = Data::new(1003, len, d);
        let (n, m) = (data.n, data.m);
        let f = |r: usize, t: usize| data.b[t] - data.sqdist(r, t);
        let mut lse = vec![0.0; n];
        let mut soft = vec![0.0; n * 2];
        let mut gauss = vec![0.0; n * 2];
        for r in 0..n {
            let top = (0..m).map(|t| f(r, t)).fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = (0..m).map(|t| (f(r, t) - top).exp()).sum();
            lse[r] = top + s.ln();
            for c in 0..2 {
                let weight = |t: usize| data.b[t + m * c];
                soft[r + n * c] = (0..m).map(|t| (f(r, t) - top).exp() * weight(t)).sum::<f64>() / s;
                gauss[r + n * c] = (0..m).map(|t| (-data.sqdist(r, t)).exp() * weight(t)).sum();
            }
        }
        for axis in [0, 1] {
            // x holds the output rows, y and b the reduced ones, whichever the axis.
            let (out, red) = if axis == 0 { ("Vi", "Vj") } else { ("Vj", "Vi") };
            let args = [format!("x = {out}({d})"), format!("y = {red}({d})"), format!("b = {red}(2)")];
            let args: Vec<&str> = args.iter().map(|s| s.as_str()).collect();
            let inputs = [
                Input::host(&data.x, n, d),
                Input::host(&data.y, m, d),
                Input::host(&data.b, m, 2),
            ];
            for p in [Precision::F64, Precision::F32] {
                let (tol, case) = (tolerance(p), format!("{len} indices, axis {axis}, {p:?}"));
                let out = run(&format!("ArgMin_Reduction(SqDist(x,y), {axis})"), &args, &inputs, p, 2);
                assert_eq!(out.indices.unwrap(), select(&data, 0, 1, false).1, "argmin, {case}");
                if len >= 3 {
                    let (v, i) = select(&data, 0, 3, false);
                    let out = run(&format!("KMin_ArgKMin_Reduction(SqDist(x,y), 3, {axis})"), &args, &inputs, p, 2);
                    assert_close(out.values.as_ref().unwrap(), &v, tol, &format!("3-min, {case}"));
                    assert_eq!(out.indices.unwrap(), i, "3-argmin, {case}");
                }
                let out = run(&format!("LogSumExp_Reduction(Elem(b,0) - SqDist(x,y), {axis})"), &args, &inputs, p, 2);
                assert_close(out.values.as_ref().unwrap(), &lse, tol, &format!("logsumexp, {case}"));
                let out = run(&format!("SumSoftMaxWeight_Reduction(Elem(b,0) - SqDist(x,y), b, {axis})"), &args, &inputs, p, 2);
                assert_close(out.values.as_ref().unwrap(), &soft, tol * 10.0, &format!("softmax, {case}"));
                let out = run(&format!("Sum_Reduction(Exp(-SqDist(x,y)) * b, {axis})"), &args, &inputs, p, 2);
                assert_close(out.values.as_ref().unwrap(), &gauss, tol, &format!("gaussian sum, {case}"));
            }
        }
    }
}

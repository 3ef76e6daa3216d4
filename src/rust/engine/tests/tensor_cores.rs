//! Dot products and squared distances on the tensor cores (`cuda::dot_tiles`) against float64
//! brute force, with the FP32 kernel held to the same tolerances: K-NN (values, and indices up to
//! near-ties), Gaussian sums and dot-product sums, on uniform, clustered, far-from-origin and nearly
//! tied points, in dimensions that are not multiples of the tiles. Needs a GPU of compute
//! capability >= 8.0; elsewhere the test says why and checks nothing else.

use engine::cuda::codegen::Variant;
use engine::cuda::dtype::Dtype;
use engine::cuda::device;
use engine::formula::Formula;
use engine::{Backend, Input, Operator, RunOptions, Tuning};

use crate::common;
use common::random;

const ARGS: [&str; 4] = ["x = Vi(D)", "y = Vj(D)", "b = Vj(1)", "g = Pm(1)"];

fn args(d: usize) -> Vec<String> {
    ARGS.iter().map(|a| a.replace('D', &d.to_string())).collect()
}

/// Points as float32 numbers (the data the GPU sees), column-major `n x d`.
pub struct Cloud {
    pub values: Vec<f64>,
    pub n: usize,
    pub d: usize,
}

impl Cloud {
    fn at(&self, i: usize, k: usize) -> f64 {
        self.values[i + self.n * k]
    }
}

fn to_f32(v: f64) -> f64 {
    v as f32 as f64
}

/// `kind`: uniform in [0, 1)^d; 8 clusters of radius ~0.05 in [0, 10)^d; uniform shifted by 1000;
/// or `of` again (its points in turn), every other copy moved by ~1e-6 (nearly tied distances).
pub fn cloud(kind: &str, n: usize, d: usize, seed: u64, of: &Cloud) -> Cloud {
    let u = random(n * d, seed);
    let centres = random(8 * d, 99);
    let values = (0..n * d)
        .map(|p| {
            let (i, k) = (p % n, p / n);
            let v = match kind {
                "uniform" => u[p],
                "clustered" => 10.0 * centres[(i * 7 % 8) * d + k] + 0.05 * u[p],
                "far" => 1000.0 + u[p],
                _ => of.at(i % of.n, k) + if (i / of.n) % 2 == 1 { 1e-6 * u[p] } else { 0.0 },
            };
            to_f32(v)
        })
        .collect();
    Cloud { values, n, d }
}

pub fn sqdist(a: &Cloud, i: usize, b: &Cloud, j: usize) -> f64 {
    (0..a.d).map(|k| (a.at(i, k) - b.at(j, k)).powi(2)).sum()
}

fn dot(a: &Cloud, i: usize, b: &Cloud, j: usize) -> f64 {
    (0..a.d).map(|k| a.at(i, k) * b.at(j, k)).sum()
}

/// The tensor-core kernel and the FP32 kernel of `text` on the GPU.
fn both(text: &str, d: usize, inputs: &[Input]) -> [(&'static str, engine::Output); 2] {
    let op = Operator::new(text, &args(d)).unwrap();
    let dev = device::device(0).unwrap();
    let formula = Formula::parse(text, &args(d)).unwrap();
    assert_eq!(Variant::choose(&formula, Dtype::F32, None, dev.arch, &Tuning::default()), Variant::DotTiles, "{text}");
    let run = |tensor_cores| {
        let tuning = Tuning { tensor_cores, ..Tuning::default() };
        let options = RunOptions { backend: Backend::Gpu(0), tuning, ..Default::default() };
        op.run(inputs, &options).unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    [("tensor cores", run(true)), ("FP32", run(false))]
}

/// K-NN of each point of `a` among `b` (reduced over `b`): every returned value within 2e-5 (relative)
/// of the float64 K smallest distances, and the float64 distance of every returned index too.
pub fn check_knn(what: &str, out: &engine::Output, a: &Cloud, b: &Cloud, k: usize) {
    let (values, indices) = (out.values.as_ref().unwrap(), out.indices.as_ref().unwrap());
    for i in 0..a.n {
        let mut all: Vec<f64> = (0..b.n).map(|j| sqdist(a, i, b, j)).collect();
        all.sort_by(f64::total_cmp);
        for s in 0..k {
            let (want, tol) = (all[s], 2e-5 * all[s] + 1e-30);
            let (value, index) = (values[i + a.n * s], indices[i + a.n * s]);
            assert!((value - want).abs() <= tol, "{what}: row {i}, rank {s}: value {value}, float64 {want}");
            let of_index = sqdist(a, i, b, index as usize - 1);
            assert!((of_index - want).abs() <= tol, "{what}: row {i}, rank {s}: index {index} at {of_index}, float64 {want}");
        }
    }
}

/// `sum_j exp(-g |x_i - y_j|^2) b_j` within 2e-5 of its float64 value plus its sensitivity to the
/// distances (`sum_j g d e^(-g d) b_j`, the error that relative errors of the distances give).
fn check_gaussian(what: &str, out: &engine::Output, x: &Cloud, y: &Cloud, b: &[f64], g: f64) {
    let values = out.values.as_ref().unwrap();
    for (i, &value) in values.iter().enumerate().take(x.n) {
        let (mut want, mut sensitivity) = (0.0, 0.0);
        for (j, &bj) in b.iter().enumerate().take(y.n) {
            let gd = g * sqdist(x, i, y, j);
            want += (-gd).exp() * bj;
            sensitivity += gd * (-gd).exp() * bj;
        }
        let tol = 2e-5 * (want + sensitivity) + 1e-30;
        assert!((value - want).abs() <= tol, "{what}: row {i}: {value} against float64 {want} (tolerance {tol})");
    }
}

#[test]
fn tensor_core_dots_match_float64() {
    let arch = match device::availability(0).and_then(|_| device::device(0)) {
        Ok(dev) => dev.arch,
        Err(why) => {
            println!("NO GPU: tensor-core dot products are not tested here ({why})");
            return;
        }
    };
    if arch.0 < 8 {
        println!("compute capability {}.{}: no TF32 tensor cores, their dot products are not tested here", arch.0, arch.1);
        return;
    }
    let none = Cloud { values: vec![], n: 0, d: 0 };
    for (n, m, d) in [(1031, 2017, 16), (1031, 2017, 37), (1031, 2017, 100), (37, 20011, 100), (500, 700, 128), (300, 1000, 784)] {
        for kind in ["uniform", "clustered", "far", "tied"] {
            let x = cloud(if kind == "tied" { "uniform" } else { kind }, n, d, 1, &none);
            let y = cloud(kind, m, d, 2, &x);
            let b = random(m, 3);
            let nearest: f64 = (0..n.min(50)).map(|i| (0..m).map(|j| sqdist(&x, i, &y, j)).fold(f64::INFINITY, f64::min)).sum();
            let g = [1.0 / (nearest / n.min(50) as f64).max(1e-6)];
            let inputs = [
                Input::host(&x.values, n, d),
                Input::host(&y.values, m, d),
                Input::host(&b, m, 1),
                Input::host(&g, 1, 1),
            ];
            let case = format!("{kind}, N = {n}, M = {m}, D = {d}");
            for (path, out) in both("KMin_ArgKMin_Reduction(SqDist(x, y), 7, 0)", d, &inputs) {
                check_knn(&format!("{case}, K-NN of x ({path})"), &out, &x, &y, 7);
            }
            if n > 100 {
                for (path, out) in both("KMin_ArgKMin_Reduction(SqDist(y, x), 5, 1)", d, &inputs) {
                    check_knn(&format!("{case}, K-NN of y ({path})"), &out, &y, &x, 5);
                }
            }
            for (path, out) in both("Sum_Reduction(Exp(-g * SqDist(x, y)) * b, 0)", d, &inputs) {
                check_gaussian(&format!("{case}, Gaussian sum ({path})"), &out, &x, &y, &b, g[0]);
            }
            for (path, out) in both("Sum_Reduction((y | x), 1)", d, &inputs) {
                let values = out.values.as_ref().unwrap();
                for (j, &value) in values.iter().enumerate().take(m) {
                    let want: f64 = (0..n).map(|i| dot(&x, i, &y, j)).sum();
                    let scale: f64 = (0..n).map(|i| dot(&x, i, &x, i).sqrt() * dot(&y, j, &y, j).sqrt()).sum();
                    let tol = 1e-5 * scale;
                    assert!((value - want).abs() <= tol, "{case}, dot sum ({path}): column {j}: {value} against float64 {want}");
                }
            }
        }
    }
}

/// The tensor-core dots where the launcher splits the work: inputs larger than the device memory
/// given (blocks of output and reduced rows, each block's reduced rows prepared again), inputs kept
/// on the device, and a loop in the engine (its launches, the preparation's included, recorded and
/// issued again); with rows kept in shared memory (D = 40) and streamed (D = 200).
#[test]
fn tensor_core_dots_in_blocks_on_the_device_and_in_loops() {
    use engine::cuda::resident::DeviceMatrix;
    use engine::iterate::{iterate, Source, Step};
    use engine::{Precision, SumScheme};
    let dev = match device::availability(0).and_then(|_| device::device(0)) {
        Ok(dev) if dev.arch.0 >= 8 => dev,
        Ok(dev) => {
            println!("compute capability {}.{}: no TF32 tensor cores, not tested here", dev.arch.0, dev.arch.1);
            return;
        }
        Err(why) => {
            println!("NO GPU: tensor-core dots in blocks, on the device and in loops are not tested here ({why})");
            return;
        }
    };
    let none = Cloud { values: vec![], n: 0, d: 0 };
    for d in [40, 200] {
        let (n, m) = (3001, 2049);
        let x = cloud("clustered", n, d, 5, &none);
        let y = cloud("clustered", m, d, 6, &none);
        let b = random(m, 7);
        let g = [0.5];
        let inputs = [
            Input::host(&x.values, n, d),
            Input::host(&y.values, m, d),
            Input::host(&b, m, 1),
            Input::host(&g, 1, 1),
        ];
        let knn = Operator::new("KMin_ArgKMin_Reduction(SqDist(x, y), 7, 0)", &args(d)).unwrap();
        let gauss = Operator::new("Sum_Reduction(Exp(-g * SqDist(x, y)) * b, 0)", &args(d)).unwrap();
        // 1 MB: a few blocks of rows on both sides.
        let blocked = RunOptions { backend: Backend::Gpu(0), gpu_memory: Some(1_000_000), ..Default::default() };
        check_knn(&format!("D = {d}, K-NN in blocks"), &knn.run(&inputs, &blocked).unwrap(), &x, &y, 7);
        check_gaussian(&format!("D = {d}, Gaussian sum in blocks"), &gauss.run(&inputs, &blocked).unwrap(), &x, &y, &b, g[0]);
        let kept_x = DeviceMatrix::new(dev.clone(), &x.values, n, d, Precision::F32).unwrap();
        let kept_y = DeviceMatrix::new(dev.clone(), &y.values, m, d, Precision::F32).unwrap();
        let mut on_device = inputs;
        on_device[0] = Input::device(&kept_x);
        on_device[1] = Input::device(&kept_y);
        let options = RunOptions { backend: Backend::Gpu(0), ..Default::default() };
        let kept = knn.run(&on_device, &options).unwrap();
        check_knn(&format!("D = {d}, K-NN of inputs kept on the device"), &kept, &x, &y, 7);
    }
    // Log-domain Sinkhorn iterations in D = 20, on the GPU and on the CPU in float64.
    let (n, m, d) = (537, 1999, 20);
    let x = cloud("uniform", n, d, 8, &none);
    let y = cloud("uniform", m, d, 9, &none);
    let declare = |names: [&str; 5]| names.map(|a| a.replace('D', &d.to_string()));
    let f_op = Operator::new(
        "LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
        &declare(["x = Vi(D)", "y = Vj(D)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"]),
    )
    .unwrap();
    let g_op = Operator::new(
        "LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
        &declare(["x = Vi(D)", "y = Vj(D)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"]),
    )
    .unwrap();
    let (lmu, lnu) = (vec![-(n as f64).ln(); n], vec![-(m as f64).ln(); m]);
    let (s, f0, g0) = ([0.5], vec![0.0; n], vec![0.0; m]);
    fn input(data: &[f64], ncol: usize) -> Input<'_> {
        Input::host(data, data.len() / ncol, ncol)
    }
    let (xi, yi, par) = (input(&x.values, d), input(&y.values, d), input(&s, 1));
    let steps = [
        Step {
            operator: &g_op,
            inputs: vec![Source::Host(xi), Source::Host(yi), Source::Host(input(&lmu, 1)), Source::State(0), Source::Host(par)],
            output: 1,
            sum_scheme: SumScheme::Auto,
            ranges: None,
        },
        Step {
            operator: &f_op,
            inputs: vec![Source::Host(xi), Source::Host(yi), Source::Host(input(&lnu, 1)), Source::State(1), Source::Host(par)],
            output: 0,
            sum_scheme: SumScheme::Auto,
            ranges: None,
        },
    ];
    let states = [input(&f0, 1), input(&g0, 1)];
    let on = |backend, precision| RunOptions { precision, backend, ..Default::default() };
    let gpu = iterate(&steps, &states, 5, &on(Backend::Gpu(0), Precision::F32)).unwrap();
    let cpu = iterate(&steps, &states, 5, &on(Backend::Cpu, Precision::F64)).unwrap();
    for (k, (a, b)) in gpu.states.iter().zip(&cpu.states).enumerate() {
        let err = a.iter().zip(b).map(|(p, q)| (p - q).abs() / (1.0 + q.abs())).fold(0.0, f64::max);
        assert!(err < 1e-4, "Sinkhorn state {k} after 5 iterations, tensor cores against float64: differs by {err}");
    }
}

//! Dot products and squared distances on the tensor cores (`cuda::dot_tiles`) against float64
//! brute force, with the FP32 kernel held to the same tolerances: K-NN (values, and indices up to
//! near-ties), Gaussian sums and dot-product sums, on uniform, clustered, far-from-origin and nearly
//! tied points, in dimensions that are not multiples of the tiles. Needs a GPU of compute
//! capability >= 8.0; elsewhere the test says why and checks nothing else.

use engine::cuda::codegen::{Dtype, Variant};
use engine::cuda::device;
use engine::formula::Formula;
use engine::{Backend, Input, Operator, RunOptions};

mod common;
use common::random;

const ARGS: [&str; 4] = ["x = Vi(D)", "y = Vj(D)", "b = Vj(1)", "g = Pm(1)"];

fn args(d: usize) -> Vec<String> {
    ARGS.iter().map(|a| a.replace('D', &d.to_string())).collect()
}

/// Points as float32 numbers (the data the GPU sees), column-major `n x d`.
struct Cloud {
    values: Vec<f64>,
    n: usize,
    d: usize,
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
fn cloud(kind: &str, n: usize, d: usize, seed: u64, of: &Cloud) -> Cloud {
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

fn sqdist(a: &Cloud, i: usize, b: &Cloud, j: usize) -> f64 {
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
    assert_eq!(Variant::choose(&formula, Dtype::F32, None, dev.arch, true), Variant::DotTiles, "{text}");
    let run = |no_tensor_cores| {
        let options = RunOptions { backend: Backend::Gpu(0), no_tensor_cores, ..Default::default() };
        op.run(inputs, &options).unwrap_or_else(|e| panic!("{text}: {e}"))
    };
    [("tensor cores", run(false)), ("FP32", run(true))]
}

/// K-NN of each point of `a` among `b` (reduced over `b`): every returned value within 2e-5 (relative)
/// of the float64 K smallest distances, and the float64 distance of every returned index too.
fn check_knn(what: &str, out: &engine::Output, a: &Cloud, b: &Cloud, k: usize) {
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
    for i in 0..x.n {
        let (mut want, mut sensitivity) = (0.0, 0.0);
        for j in 0..y.n {
            let gd = g * sqdist(x, i, y, j);
            want += (-gd).exp() * b[j];
            sensitivity += gd * (-gd).exp() * b[j];
        }
        let tol = 2e-5 * (want + sensitivity) + 1e-30;
        assert!((values[i] - want).abs() <= tol, "{what}: row {i}: {} against float64 {want} (tolerance {tol})", values[i]);
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
    for (n, m, d) in [(1031, 2017, 16), (1031, 2017, 37), (1031, 2017, 100), (37, 20011, 100), (300, 1000, 784)] {
        for kind in ["uniform", "clustered", "far", "tied"] {
            let x = cloud(if kind == "tied" { "uniform" } else { kind }, n, d, 1, &none);
            let y = cloud(kind, m, d, 2, &x);
            let b = random(m, 3);
            let nearest: f64 = (0..n.min(50)).map(|i| (0..m).map(|j| sqdist(&x, i, &y, j)).fold(f64::INFINITY, f64::min)).sum();
            let g = [1.0 / (nearest / n.min(50) as f64).max(1e-6)];
            let inputs = [
                Input { data: &x.values, nrow: n, ncol: d },
                Input { data: &y.values, nrow: m, ncol: d },
                Input { data: &b, nrow: m, ncol: 1 },
                Input { data: &g, nrow: 1, ncol: 1 },
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
                for j in 0..m {
                    let want: f64 = (0..n).map(|i| dot(&x, i, &y, j)).sum();
                    let scale: f64 = (0..n).map(|i| dot(&x, i, &x, i).sqrt() * dot(&y, j, &y, j).sqrt()).sum();
                    let tol = 1e-5 * scale;
                    assert!((values[j] - want).abs() <= tol, "{case}, dot sum ({path}): column {j}: {} against float64 {want}", values[j]);
                }
            }
        }
    }
}

//! Sifted K-selections on the GPU (`Selection::Filtered`: candidates marked 32 indices at a time,
//! nearest neighbours sifted with the expanded distance): the same values and indices as the
//! unsifted kernel (`Local`), bit for bit, with the lists in local memory and in registers, and K-NN within float32 of float64 brute force; on
//! uniform, clustered, far-from-origin and nearly tied points, with NaN and infinite coordinates,
//! both axes, K = 1 to 10, ties of equal values (`Floor`), sizes that are not multiples of the
//! tiles or of the groups of 32, maxima and other formulas (sifted with their own value), float32
//! (at D = 40, with the tensor-core dots), float16 storage and float64. Needs a GPU; elsewhere the
//! test says so and checks nothing else.

use engine::cuda::device;
use engine::tuning::SelectionOverride;
use engine::{Backend, Input, Operator, Precision, RunOptions, Tuning};

use crate::tensor_cores::{check_knn, cloud, Cloud};

fn args(d: usize) -> Vec<String> {
    [format!("x = Vi({d})"), format!("y = Vj({d})")].into()
}

/// `text` with the selection forced to `selection`.
fn run(text: &str, d: usize, inputs: &[Input], precision: Precision, selection: SelectionOverride) -> engine::Output {
    let op = Operator::new(text, &args(d)).unwrap();
    let tuning = Tuning { gpu_selection: Some(selection), ..Tuning::default() };
    let options = RunOptions { precision, backend: Backend::Gpu(0), tuning, ..Default::default() };
    let out = op.run(inputs, &options).unwrap_or_else(|e| panic!("{text}: {e}"));
    assert!(out.backend.starts_with("GPU"), "{text} ran on {}", out.backend);
    out
}

/// The same numbers, NaN included (compared by their bits, after the conversion to f64).
fn assert_same(what: &str, a: &Option<Vec<f64>>, b: &Option<Vec<f64>>) {
    let (a, b) = (a.as_deref().unwrap_or(&[]), b.as_deref().unwrap_or(&[]));
    assert_eq!(a.len(), b.len(), "{what}");
    for (p, (x, y)) in a.iter().zip(b).enumerate() {
        assert!(
            x.to_bits() == y.to_bits() || (x.is_nan() && y.is_nan()),
            "{what}: entry {p}: sifted {x}, unsifted {y}"
        );
    }
}

/// `x` with NaN, +inf and -inf coordinates in a few rows (and a huge finite one, whose square
/// overflows float32).
fn with_specials(c: &Cloud) -> Cloud {
    let mut values = c.values.clone();
    for (row, v) in [(3, f64::NAN), (40, f64::INFINITY), (41, f64::NEG_INFINITY), (77, 2e19)] {
        if row < c.n {
            values[row] = v;
        }
    }
    Cloud { values, n: c.n, d: c.d }
}

#[test]
fn sifted_selections_equal_the_unsifted_kernel_and_float64() {
    if let Err(why) = device::availability(0) {
        println!("NO GPU: sifted selections are not checked here ({why})");
        return;
    }
    let none = Cloud { values: vec![], n: 0, d: 0 };
    let knn_formulas = [
        "KMin_ArgKMin_Reduction(SqDist(x, y), 7, 0)",
        "ArgKMin_Reduction(SqDist(y, x), 10, 0)",
        "Min_ArgMin_Reduction(SqDist(x, y), 0)",
        "KMin_ArgKMin_Reduction(SqDist(y, x), 5, 1)",
    ];
    let other_formulas = [
        "Max_ArgMax_Reduction(SqDist(x, y), 0)",
        "KMin_ArgKMin_Reduction(Sum(x * y), 4, 0)",
        "Max_ArgMax_Reduction(Sum(x - y), 1)",
        "ArgKMin_Reduction(Floor(8 * SqDist(x, y)), 6, 1)",
    ];
    for (n, m, d) in [(1031, 20011, 3), (517, 7001, 10), (300, 4099, 1), (70, 33, 3), (300, 5003, 40)] {
        for kind in ["uniform", "clustered", "far", "tied"] {
            let x = cloud(if kind == "tied" { "uniform" } else { kind }, n, d, 1, &none);
            let y = cloud(kind, m, d, 2, &x);
            for special in [false, true] {
                let copy = |c: &Cloud| Cloud { values: c.values.clone(), n: c.n, d: c.d };
                let (xs, ys) = if special { (with_specials(&x), with_specials(&y)) } else { (copy(&x), copy(&y)) };
                let inputs = [Input::host(&xs.values, n, d), Input::host(&ys.values, m, d)];
                // Every formula and precision in D = 3; elsewhere (each dimension compiles its own
                // kernels), float32 and the nearest neighbours.
                let (formulas, precisions) = match d {
                    3 => (
                        knn_formulas.iter().chain(&other_formulas).collect::<Vec<_>>(),
                        &[Precision::F32, Precision::F16, Precision::F64][..],
                    ),
                    _ => (knn_formulas.iter().collect(), &[Precision::F32][..]),
                };
                for text in formulas {
                    for &precision in precisions {
                        let case = format!(
                            "{text}, {kind}{}, N = {n}, M = {m}, D = {d}, {precision:?}",
                            if special { " with NaN and infinities" } else { "" }
                        );
                        let local = run(text, d, &inputs, precision, SelectionOverride::Local);
                        let in_registers = run(text, d, &inputs, precision, SelectionOverride::FilteredRegisters);
                        let sifted = run(text, d, &inputs, precision, SelectionOverride::Filtered);
                        for (lists, out) in [("local memory", &sifted), ("registers", &in_registers)] {
                            assert_same(&format!("{case}, lists in {lists}, values"), &out.values, &local.values);
                            assert_eq!(out.indices, local.indices, "{case}, lists in {lists}, indices");
                        }
                        if !special
                            && precision == Precision::F32
                            && text.starts_with("KMin_ArgKMin")
                            && text.contains("SqDist")
                        {
                            let (k, of_x) = if text.contains(", 7, 0)") { (7, true) } else { (5, false) };
                            let (a, b) = if of_x { (&xs, &ys) } else { (&ys, &xs) };
                            check_knn(&format!("{case}, against float64"), &sifted, a, b, k.min(b.n));
                        }
                    }
                }
            }
        }
    }
}

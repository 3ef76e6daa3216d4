//! The CUDA backend against the CPU evaluator: every operation and every reduction, both axes,
//! float32 and float64, the 1D and 2D schemes. These tests need NVRTC (compilation) and a GPU
//! (execution); where either is missing they say so, and check that the reason given is the
//! right one, instead of comparing results.

use std::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::common_formulas::{GPU_ARGS as ARGS, OPERATIONS, REDUCTIONS};
use engine::cuda::codegen::{self, KernelOptions, Selection, Variant};
use engine::cuda::dtype::Dtype;
use engine::cuda::device;
use engine::formula::Formula;
use engine::{Backend, BlockRanges, Input, Operator, Precision, Ranges, RunOptions, SumScheme};

use crate::common;
use crate::common_ranges;
use common::random;
use common_ranges::random_ranges;

/// The test that takes (nearly) all the device's memory holds this for writing, so that it runs
/// alone; the other tests that use the GPU hold it for reading, and run side by side as before.
static GPU_MEMORY: RwLock<()> = RwLock::new(());

fn sharing_the_gpu() -> RwLockReadGuard<'static, ()> {
    GPU_MEMORY.read().unwrap_or_else(|poisoned| poisoned.into_inner())
}

fn alone_on_the_gpu() -> RwLockWriteGuard<'static, ()> {
    GPU_MEMORY.write().unwrap_or_else(|poisoned| poisoned.into_inner())
}


fn args() -> Vec<String> {
    ARGS.iter().map(|s| s.to_string()).collect()
}

/// Every reduction of REDUCTIONS on both axes: its text and operator.
fn each_reduction(mut f: impl FnMut(&str, &Operator)) {
    for formula in REDUCTIONS {
        for axis in ["0", "1"] {
            let text = formula.replace("AXIS", axis);
            f(&text, &Operator::new(&text, &args()).unwrap());
        }
    }
}

fn all_formulas() -> Vec<String> {
    let mut v: Vec<String> = OPERATIONS.iter().map(|op| format!("Sum_Reduction({op}, AXIS)")).collect();
    v.extend(REDUCTIONS.iter().map(|r| r.to_string()));
    v
}

struct Data {
    values: Vec<Vec<f64>>,
    n: usize,
    m: usize,
}

impl Data {
    fn new(n: usize, m: usize) -> Data {
        let mut values = vec![random(3 * n, 1), random(3 * m, 2), random(2 * m, 3).iter().map(|v| v - 0.5).collect()];
        values.push(random(n, 4));
        values.push(random(m, 5));
        values.push(vec![0.3, 0.7]);
        values.push(random(6, 6));
        values.push(random(9, 7));
        values.push(vec![2.5]);
        Data { values, n, m }
    }

    fn inputs(&self) -> Vec<Input<'_>> {
        let rows = [self.n, self.m, self.m, self.n, self.m, 1, 1, 1, 1];
        self.values.iter().zip(rows).map(|(v, nrow)| Input::host(v, nrow, v.len() / nrow)).collect()
    }
}

#[test]
fn generated_kernels_compile_with_nvrtc() {
    if let Err(why) = device::nvrtc_present() {
        println!("NVRTC NOT FOUND: the generated CUDA sources are not compiled here ({why})");
        assert!(why.to_string().contains("NVRTC"), "{why}");
        return;
    }
    // Every source first (what it is, its text), then compiled on every core: one after the other
    // they took 457 s on an H200 host, more than a device call may run.
    let mut sources: Vec<(String, String)> = Vec::new();
    let mut merges = std::collections::HashSet::new();
    for formula in all_formulas() {
        for axis in ["0", "1"] {
            let text = formula.replace("AXIS", axis);
            let f = Formula::parse(&text, &args()).unwrap();
            for dtype in [Dtype::F16, Dtype::F32, Dtype::F64] {
                for scheme in [SumScheme::Auto, SumScheme::DirectSum, SumScheme::KahanScheme] {
                    if scheme != SumScheme::Auto && !text.starts_with("Sum_") {
                        continue;
                    }
                    let kernel = codegen::generate(&f, dtype, scheme);
                    // The merge's program, which depends on the reduction only: each one once.
                    if merges.insert(kernel.merge_source.clone()) {
                        sources.push((format!("{text} ({dtype:?}, {scheme:?}): the merge"), kernel.merge_source.clone()));
                    }
                    sources.push((format!("{text} ({dtype:?}, {scheme:?})"), kernel.source));
                    // The block-sparse kernels of every reduction.
                    if REDUCTIONS.contains(&formula.as_str()) && scheme == SumScheme::Auto {
                        // (and the selections in registers, sifted)
                        let variants = [Variant::Dense, Variant::Ranged, Variant::RangedNarrow];
                        let selections = [Selection::Local, Selection::Registers, Selection::Filtered, Selection::FilteredRegisters];
                        for (variant, selection) in variants.into_iter().flat_map(|v| selections.map(|s| (v, s))) {
                            if (variant, selection) == (Variant::Dense, Selection::Local) {
                                continue;
                            }
                            let kernel = codegen::generate_variant(&f, &KernelOptions::new(dtype, scheme, variant, selection));
                            sources.push((format!("{text} ({dtype:?}, {variant:?}, {selection:?})"), kernel.source));
                        }
                    }
                }
            }
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(32);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some((what, source)) = sources.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) else { return };
                if let Err(e) = device::compile_cubin(source, "sm_90") {
                    panic!("{what} does not compile:\n{e}\n{source}");
                }
            });
        }
    });
    println!("NVRTC compiled {} generated kernels for sm_90 on {threads} threads", sources.len());
}

fn run(op: &Operator, inputs: &[Input], precision: Precision, backend: Backend, scheme: SumScheme) -> engine::Output {
    let options = RunOptions { precision, sum_scheme: scheme, backend, ..Default::default() };
    op.run(inputs, &options).unwrap_or_else(|e| panic!("{}: {e}", op.formula.text))
}

/// Values: |gpu - cpu| <= tol * max(1, largest |cpu| of the output). Indices: identical in
/// float64; in float32 a few near-ties may resolve differently.
fn compare(text: &str, gpu: &engine::Output, cpu: &engine::Output, precision: Precision) {
    let tol = if precision == Precision::F64 { 1e-12 } else { 1e-5 };
    assert_eq!((gpu.nrow, gpu.k, gpu.dim), (cpu.nrow, cpu.k, cpu.dim), "{text}: shapes");
    if let (Some(g), Some(c)) = (&gpu.values, &cpu.values) {
        let scale = c.iter().filter(|v| v.is_finite()).fold(1.0f64, |m, v| m.max(v.abs()));
        for (k, (a, b)) in g.iter().zip(c).enumerate() {
            let same = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= tol * scale;
            assert!(same, "{text} ({precision:?}): value {k}: GPU {a} vs CPU {b} (scale {scale})");
        }
    }
    if let (Some(g), Some(c)) = (&gpu.indices, &cpu.indices) {
        let differ = g.iter().zip(c).filter(|(a, b)| a != b).count();
        let allowed = if precision == Precision::F64 { 0 } else { g.len() / 200 };
        assert!(differ <= allowed, "{text} ({precision:?}): {differ} of {} indices differ", g.len());
    }
}

#[test]
fn gpu_equals_cpu_for_every_operation_and_reduction() {
    let _gpu = sharing_the_gpu();
    let gpu = match device::availability(0) {
        Ok(description) => description,
        Err(why) => {
            println!("NO GPU: the GPU is not compared with the CPU here ({why})");
            let why = why.to_string();
            assert!(why.contains("driver") || why.contains("NVRTC") || why.contains("device"), "{why}");
            return;
        }
    };
    println!("comparing {gpu} with the CPU");
    // 1D scheme (many output rows) and 2D scheme (few rows, a long reduced range), sizes that
    // are not multiples of any tile.
    for (n, m) in [(1031, 517), (37, 20011)] {
        let data = Data::new(n, m);
        let inputs = data.inputs();
        for formula in all_formulas() {
            for axis in ["0", "1"] {
                let text = formula.replace("AXIS", axis);
                let op = Operator::new(&text, &args()).unwrap();
                for precision in [Precision::F64, Precision::F32, Precision::F16] {
                    let g = run(&op, &inputs, precision, Backend::Gpu(0), SumScheme::Auto);
                    let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
                    assert!(g.backend.starts_with("GPU"), "{text} ran on {}", g.backend);
                    compare(&text, &g, &c, precision);
                }
            }
        }
        for scheme in [SumScheme::DirectSum, SumScheme::BlockSum, SumScheme::KahanScheme] {
            let op = Operator::new("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", &args()).unwrap();
            for precision in [Precision::F64, Precision::F32] {
                let g = run(&op, &inputs, precision, Backend::Gpu(0), scheme);
                let c = run(&op, &inputs, precision, Backend::Cpu, scheme);
                compare(&format!("{scheme:?}"), &g, &c, precision);
            }
        }
    }
}

/// Block-sparse reductions: every reduction, both axes, three precisions, the same ranges on the
/// GPU and the CPU (blocks of odd sizes, gaps, empty blocks and ranges, rows that keep fewer
/// indices than K); and ranges that keep everything against the dense GPU reduction.
#[test]
fn gpu_block_sparse_equals_cpu() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: block-sparse reductions are not compared with the CPU here ({why})");
        return;
    }
    let (n, m) = (1031, 2017);
    let data = Data::new(n, m);
    let inputs = data.inputs();
    let ranges = Ranges { i: random_ranges(n, m, 31), j: random_ranges(m, n, 32) };
    each_reduction(|text, op| {
        for precision in [Precision::F64, Precision::F32, Precision::F16] {
            let options = |backend| RunOptions { precision, backend, ranges: Some(ranges.clone()), ..Default::default() };
            let g = op.run(&inputs, &options(Backend::Gpu(0))).unwrap_or_else(|e| panic!("{text}: {e}"));
            let c = op.run(&inputs, &options(Backend::Cpu)).unwrap();
            assert!(g.backend.starts_with("GPU"), "{text} ran on {}", g.backend);
            compare(&format!("{text} with ranges"), &g, &c, precision);
        }
    });
    // Ranges that keep everything, with small blocks of rows (the narrow kernel) and large ones (the
    // wide kernel): every reduction as the dense one.
    let (n, m) = (1031, 20011);
    let data = Data::new(n, m);
    let inputs = data.inputs();
    let everything = |n_out: usize, n_red: usize, rows: usize| {
        let blocks: Vec<_> = (0..n_out).step_by(rows).map(|s| s..(s + rows).min(n_out)).collect();
        BlockRanges { slices: (1..=blocks.len()).collect(), reduced: vec![0..n_red; blocks.len()], blocks }
    };
    for rows in [97, 600] {
        let ranges = Ranges { i: everything(n, m, rows), j: everything(m, n, rows) };
        let variant = Variant::for_ranges(Some(&ranges.i), None);
        assert_eq!(variant, if rows < 512 { Variant::RangedNarrow } else { Variant::Ranged });
        each_reduction(|text, op| {
            let dense = run(op, &inputs, Precision::F64, Backend::Gpu(0), SumScheme::Auto);
            let options =
                RunOptions { precision: Precision::F64, backend: Backend::Gpu(0), ranges: Some(ranges.clone()), ..Default::default() };
            let sparse = op.run(&inputs, &options).unwrap();
            compare(&format!("{text}, ranges keeping everything ({variant:?})"), &sparse, &dense, Precision::F64);
        });
    }
}

/// The GPUs that share a reduction in the tests: `RKEOPS_TEST_GPUS` (ordinals separated by
/// commas: "0,0,0,0" splits into 4 parts on one GPU), else every GPU found where there are
/// several, else GPU 0 twice (its parts then share it: the splitting and merging are the same).
fn several_gpus() -> Vec<usize> {
    if let Ok(list) = std::env::var("RKEOPS_TEST_GPUS") {
        let gpus: Vec<usize> = list.split(',').map(|d| d.trim().parse().expect("RKEOPS_TEST_GPUS: ordinals, e.g. 0,1")).collect();
        assert!(gpus.len() >= 2, "RKEOPS_TEST_GPUS lists {gpus:?}: at least two");
        return gpus;
    }
    match device::count() {
        Ok(n) if n >= 2 => (0..n).collect(),
        _ => vec![0, 0],
    }
}

/// A reduction shared by several GPUs (`several_gpus`) equals the same on one: every reduction, both axes, long outputs
/// (blocks of rows) and short ones (parts of the reduced range, states merged), float64 and
/// float32, the summation schemes, and block-sparse reductions (split at their blocks).
#[test]
fn several_gpus_equal_one_gpu() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: several GPUs are not compared with one here ({why})");
        return;
    }
    let gpus = several_gpus();
    println!("sharing reductions between GPUs {gpus:?}");
    let on = |gpus: Vec<usize>, precision, sum_scheme, ranges: Option<Ranges>| RunOptions {
        precision,
        sum_scheme,
        backend: Backend::Gpu(0),
        gpus,
        ranges,
        ..Default::default()
    };
    let check = |op: &Operator, inputs: &[Input], options: RunOptions, what: &str| {
        let one = op.run(inputs, &RunOptions { gpus: vec![], ..options.clone() }).unwrap();
        let shared = op.run(inputs, &options).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert!(shared.backend.starts_with("GPUs"), "{what} ran on {}", shared.backend);
        compare(what, &shared, &one, options.precision);
    };
    // (600011 rows: more than one GPU can fill, so split into blocks of rows; 1003 or 37 rows:
    // parts of the reduced range; 20011 against 37: too short a reduced range to cut)
    for (n, m) in [(600_011, 1_003), (37, 20_011)] {
        let data = Data::new(n, m);
        let inputs = data.inputs();
        each_reduction(|text, op| {
            for precision in [Precision::F64, Precision::F32] {
                let what = format!("{text} ({n} x {m}) on GPUs {gpus:?}");
                check(op, &inputs, on(gpus.clone(), precision, SumScheme::Auto, None), &what);
            }
        });
        let op = Operator::new("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 1)", &args()).unwrap();
        for scheme in [SumScheme::DirectSum, SumScheme::BlockSum, SumScheme::KahanScheme] {
            check(&op, &inputs, on(gpus.clone(), Precision::F32, scheme, None), &format!("{scheme:?} ({n} x {m})"));
        }
    }
    let (n, m) = (1031, 2017);
    let data = Data::new(n, m);
    let inputs = data.inputs();
    let ranges = Ranges { i: random_ranges(n, m, 31), j: random_ranges(m, n, 32) };
    each_reduction(|text, op| {
        let options = on(gpus.clone(), Precision::F64, SumScheme::Auto, Some(ranges.clone()));
        check(op, &inputs, options, &format!("{text} with ranges on GPUs {gpus:?}"));
    });
}

#[test]
fn gpu_propagates_nan_and_survives_bad_launches() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: NaN propagation on the GPU is not checked here ({why})");
        return;
    }
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let x = [0.0, f64::NAN, 2.0];
    let y: Vec<f64> = (0..1000).map(|j| j as f64).collect();
    let inputs = [Input::host(&x, 3, 1), Input::host(&y, 1000, 1)];
    for red in
        ["Sum_Reduction(x*y, 0)", "Min_Reduction(x-y, 0)", "LogSumExp_Reduction(x-y, 0)", "KMin_Reduction(x-y, 3, 0)"]
    {
        let op = Operator::new(red, &args).unwrap();
        let out = run(&op, &inputs, Precision::F32, Backend::Gpu(0), SumScheme::Auto);
        let v = out.values.unwrap();
        assert!(v[1].is_nan() && !v[0].is_nan(), "{red}: {v:?}");
    }
    // A device that does not exist is an error that names it, and the GPU keeps working after it.
    let op = Operator::new("Sum_Reduction(x*y, 0)", &args).unwrap();
    let options = RunOptions { backend: Backend::Gpu(99), ..Default::default() };
    let e = op.run(&inputs, &options).unwrap_err().to_string();
    assert!(e.contains("no device 99"), "{e}");
    let out = run(&op, &inputs, Precision::F64, Backend::Gpu(0), SumScheme::Auto);
    assert_eq!(out.values.unwrap()[2], 2.0 * 999.0 * 1000.0 / 2.0);
}

/// The float32 exponential of a kernel, one term per row: within 1e-6 + 8e-8 |x| (relative) of
/// float64's, as CUDA's `__expf` (the rounding of x log2(e) costs 6e-8 |x|), subnormal results
/// kept (to that and their spacing, 2^-149), 0 below them, +inf past float32's largest number,
/// NaN and the infinities as IEEE says.
#[test]
fn gpu_float_exponentials_keep_subnormal_results() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the float32 exponential is not checked here ({why})");
        return;
    }
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let mut x: Vec<f64> = (0..20011).map(|i| -110.0 + 200.0 * i as f64 / 20010.0).collect();
    x.extend([f64::NEG_INFINITY, f64::INFINITY, f64::NAN, 88.72, 88.73, -87.33, -103.27, -103.28, 0.0]);
    let y = [0.0];
    let inputs = [Input::host(&x, x.len(), 1), Input::host(&y, 1, 1)];
    let op = Operator::new("Sum_Reduction(Exp(x - y), 0)", &args).unwrap();
    let g = run(&op, &inputs, Precision::F32, Backend::Gpu(0), SumScheme::Auto).values.unwrap();
    let (mut subnormal, mut normal) = (0, 0);
    for (v, got) in x.iter().zip(&g) {
        // The exponential of the float32 argument, rounded to float32 (0, a subnormal or +inf).
        let want = ((*v as f32) as f64).exp() as f32 as f64;
        let ok = match want {
            w if w.is_nan() => got.is_nan(),
            w if w.is_infinite() || w == 0.0 => *got == w || (w == 0.0 && *got <= f64::from(f32::from_bits(1))),
            w => {
                let tol = (1e-6 + 8e-8 * v.abs()) * w;
                match w < f32::MIN_POSITIVE as f64 {
                    true => subnormal += 1,
                    false => normal += 1,
                }
                // (a subnormal result is also rounded to its spacing)
                (got - w).abs() <= tol + f64::from(f32::from_bits(1))
            }
        };
        assert!(ok, "exp({v}) in float32: GPU {got} vs {want}");
    }
    assert!(subnormal > 1500 && normal > 17000, "{subnormal} subnormal and {normal} normal results checked");
}

/// The log-sum-exp reductions rescale their sums only when a value passes the row's reference
/// maximum (kept from one tile to the next) by a margin: values that climb by steps below and above that margin, a first value far
/// below the rest, infinities of both signs (several +inf in a row) and NaN give the CPU's results.
#[test]
fn gpu_log_sum_exp_rescales_lazily_and_keeps_infinities() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the log-sum-exp rescaling on the GPU is not checked here ({why})");
        return;
    }
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)", "w = Vj(2)"].iter().map(|s| s.to_string()).collect();
    let x = [0.0, -1e30, 1e30, f64::NEG_INFINITY, 3.5, f64::INFINITY, f64::NAN];
    let m = 1337;
    let climbs = |step: f64| -> Vec<f64> { (0..m).map(|j| -900.0 + step * j as f64 + (j % 7) as f64 * 0.3).collect() };
    let mut spiky: Vec<f64> = (0..m).map(|j| ((j * 7919) % 101) as f64 * 0.37 - 20.0).collect();
    spiky[0] = -1e20;
    spiky[400] = f64::NEG_INFINITY;
    let mut with_inf = spiky.clone();
    for j in [5, 6, 7, 700] {
        with_inf[j] = f64::INFINITY;
    }
    let w: Vec<f64> = (0..2 * m).map(|k| (k % 13) as f64 * 0.25 - 1.0).collect();
    for (name, y) in [("climbs by 0.7", climbs(0.7)), ("climbs by 9", climbs(9.0)), ("spiky", spiky), ("with +inf", with_inf)] {
        let inputs = [
            Input::host(&x, x.len(), 1),
            Input::host(&y, m, 1),
            Input::host(&w, m, 2),
        ];
        for red in ["LogSumExp_Reduction(x + y, 0)", "LogSumExpWeight_Reduction(x + y, w, 0)", "SumSoftMaxWeight_Reduction(x + y, w, 0)"] {
            let op = Operator::new(red, &args).unwrap();
            for precision in [Precision::F64, Precision::F32] {
                let g = run(&op, &inputs, precision, Backend::Gpu(0), SumScheme::Auto);
                let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
                let tol = if precision == Precision::F64 { 1e-12 } else { 1e-5 };
                for (k, (a, b)) in g.values.unwrap().iter().zip(c.values.unwrap()).enumerate() {
                    let same = (a.is_nan() && b.is_nan()) || *a == b || (a - b).abs() <= tol * b.abs().max(1.0);
                    assert!(same, "{red}, y {name} ({precision:?}), value {k}: GPU {a} vs CPU {b}");
                }
            }
        }
    }
}

#[test]
fn gpu_processes_inputs_larger_than_its_memory_in_blocks() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the blocked GPU path is not checked here ({why})");
        return;
    }
    // 300 kB of "device memory" for 4 x 5000 i-values and 6 x 3001 j-values (float64): blocks
    // of rows on both sides.
    let data = Data::new(5000, 3001);
    let inputs = data.inputs();
    for formula in [
        "Sum_Reduction(Exp(-s*SqDist(x,y))*b, AXIS)",
        "KMin_ArgKMin_Reduction(x - y, 5, AXIS)",
        "ArgMin_Reduction(SqDist(x,y), AXIS)",
        "LogSumExp_Reduction(100 - 20*SqDist(x,y), AXIS)",
        "SumSoftMaxWeight_Reduction(100 - 20*SqDist(x,y), b, AXIS)",
    ] {
        for axis in ["0", "1"] {
            let text = formula.replace("AXIS", axis);
            let op = Operator::new(&text, &args()).unwrap();
            let options = RunOptions {
                precision: Precision::F64,
                backend: Backend::Gpu(0),
                gpu_memory: Some(300_000),
                ..Default::default()
            };
            let g = op.run(&inputs, &options).unwrap_or_else(|e| panic!("{text}: {e}"));
            let c = run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto);
            compare(&text, &g, &c, Precision::F64);
        }
    }
}

/// A reduction of more pairs than a first launch takes runs in steps over the reduced range,
/// the output rows' inputs uploaded at the first step only, the K-selections of a step starting
/// from the K-th best value of the earlier ones: equal to the CPU on blocks of its output rows
/// (computed there alone), both axes, float64, selections in local memory and in registers, and
/// values that tie across the steps (integers).
#[test]
fn gpu_long_reductions_in_steps_equal_the_cpu() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: long reductions in steps are not checked here ({why})");
        return;
    }
    // 3e10 pairs: more than the 2^33 of a first step.
    let (n, m) = (100_003usize, 300_007usize);
    let (x, a, y, b) = (random(3 * n, 41), random(2 * n, 42), random(3 * m, 43), random(m, 44));
    let args: Vec<String> = ["x = Vi(3)", "a = Vi(2)", "y = Vj(3)", "b = Vj(1)"].map(String::from).to_vec();
    // The rows `rows` of the column-major `n x d` matrix `v`, column-major.
    fn rows_of<X: Copy>(v: &[X], n: usize, d: usize, rows: &std::ops::Range<usize>) -> Vec<X> {
        (0..d).flat_map(|c| v[c * n + rows.start..c * n + rows.end].to_vec()).collect()
    }
    for text in [
        "Sum_Reduction(Exp(-SqDist(x,y)) * (b + Sum(a)), 0)",
        "ArgKMin_Reduction(SqDist(x,y) + Elem(a,1), 3, 0)",
        "LogSumExp_Reduction(Sum(a) * b - SqDist(x,y), 1)",
        // (registers: 100003 reduced rows <= 16384 per value)
        "KMin_ArgKMin_Reduction(SqDist(x,y) - b, 7, 1)",
        "Max_ArgMax_Reduction(x - y, 0)",
        "ArgKMin_Reduction(Floor(8 * SqDist(x,y)), 6, 0)",
    ] {
        let op = Operator::new(text, &args).unwrap();
        let inputs = [
            Input::host(&x, n, 3),
            Input::host(&a, n, 2),
            Input::host(&y, m, 3),
            Input::host(&b, m, 1),
        ];
        let g = run(&op, &inputs, Precision::F64, Backend::Gpu(0), SumScheme::Auto);
        let outer_i = op.formula.reduction.axis == 0;
        let n_out = if outer_i { n } else { m };
        for rows in [0..1000, n_out / 2..n_out / 2 + 1000, n_out - 1000..n_out] {
            let mut some = inputs;
            let picked: Vec<Vec<f64>> = inputs
                .iter()
                .map(|input| match (input.nrow == n) == outer_i {
                    true => rows_of(input.host_data().unwrap(), input.nrow, input.ncol, &rows),
                    false => input.host_data().unwrap().to_vec(),
                })
                .collect();
            // (the output rows' inputs cut to `rows`; n != m tells the variables apart)
            for (input, data) in some.iter_mut().zip(&picked) {
                if (input.nrow == n) == outer_i {
                    *input = Input::host(data, rows.len(), input.ncol);
                }
            }
            let c = run(&op, &some, Precision::F64, Backend::Cpu, SumScheme::Auto);
            let width = g.k * g.dim;
            let part = engine::Output {
                values: g.values.as_ref().map(|v| rows_of(v, n_out, width, &rows)),
                indices: g.indices.as_ref().map(|v| rows_of(v, n_out, width, &rows)),
                nrow: rows.len(),
                k: g.k,
                dim: g.dim,
                backend: g.backend.clone(),
                timings: Vec::new(),
            };
            compare(&format!("{text}, output rows {rows:?}"), &part, &c, Precision::F64);
        }
    }
}

/// Takes device memory in decreasing pieces until at most `leave` bytes are free (or nothing more
/// can be had); the memory is given back when the returned buffers are dropped.
fn occupy(dev: &device::Device, leave: usize) -> Vec<cudarc::driver::CudaSlice<u8>> {
    let mut held = Vec::new();
    let mut piece = 1usize << 30;
    while piece >= 1 << 16 {
        let free = dev.ctx.mem_get_info().expect("querying the free device memory").0;
        if free <= leave {
            break;
        }
        match dev.stream.alloc_zeros::<u8>(piece.min(free - leave)) {
            Ok(buffer) => held.push(buffer),
            Err(_) => piece /= 2,
        }
    }
    dev.stream.synchronize().expect("synchronizing after taking the memory");
    held
}

/// Gives the memory back, and waits until the driver sees it free again (the stream's memory
/// pool returns freed memory to the device when the stream synchronises).
fn release(dev: &device::Device, held: Vec<cudarc::driver::CudaSlice<u8>>) {
    drop(held);
    dev.stream.synchronize().expect("synchronizing after giving the memory back");
}

/// Reliability of the GPU path when it fails: (a) a device whose memory is taken by someone else
/// (here: this test, through cudarc) either gets the work done in smaller blocks, or fails with an
/// error that names the device and says it is out of memory; (b) kernels that need more than a
/// GPU thread can have are computed correctly or refused with a GPU error. After each failure
/// the same device, context and operators must keep working: a CUDA error that poisoned the
/// context (or a buffer left allocated) would fail every later run of the R session.
#[test]
fn gpu_out_of_memory_and_failed_launches_leave_it_usable() {
    let _gpu = alone_on_the_gpu();
    let description = match device::availability(0) {
        Ok(description) => description,
        Err(why) => {
            println!("NO GPU: running out of device memory and oversized kernels are not checked here ({why})");
            let why = why.to_string();
            assert!(why.contains("driver") || why.contains("NVRTC") || why.contains("device"), "{why}");
            return;
        }
    };
    let dev = device::device(0).unwrap();
    let name = format!("device 0 ({})", dev.name);
    let clock = std::time::Instant::now();

    // (a) Out of memory. 20 million i-rows (80 MB of float32 inputs, 160 MB of float64 states)
    // against a short reduced range, so that the CPU checks it in well under a second.
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let (n, m) = (20_000_003, 37);
    let (x, y) = (random(n, 21), random(m, 22));
    let inputs = [Input::host(&x, n, 1), Input::host(&y, m, 1)];
    let op = Operator::new("Sum_Reduction(Exp(-3*Square(x - y)), 0)", &args).unwrap();
    let cpu = run(&op, &inputs, Precision::F32, Backend::Cpu, SumScheme::Auto);
    let gpu_run = || {
        let options = RunOptions { precision: Precision::F32, backend: Backend::Gpu(0), ..Default::default() };
        op.run(&inputs, &options)
    };
    // Compiled and loaded before the memory is taken: what is short below is the memory of the
    // reduction itself, not that of its code.
    compare("before", &gpu_run().unwrap(), &cpu, Precision::F32);
    let (free, total) = dev.ctx.mem_get_info().unwrap();

    // 256 MB left, less than the 240 MB the run needs plus the 20% the engine leaves free: it
    // sizes its blocks of rows to the memory it finds free, so this succeeds (in blocks). The
    // memory the device keeps between calls is given back first, so that the run must find its own.
    dev.release_memory();
    let held = occupy(&dev, 256 << 20);
    let sliver = dev.ctx.mem_get_info().unwrap().0;
    let blocked = gpu_run();
    release(&dev, held);
    assert!(n * (4 + 8) > sliver / 10 * 8, "{sliver} bytes free: the inputs fit, no blocks were needed");
    let blocked = blocked.unwrap_or_else(|e| panic!("{sliver} bytes free: {e}"));
    compare("in blocks", &blocked, &cpu, Precision::F32);

    // Nothing left that can be allocated (the driver may still report a few MB free, which the
    // engine believes): the run either fits its blocks of rows in what is left and equals the CPU,
    // or is refused with an error that names the device and says that its memory is short, from
    // the driver ("out of memory") or from the engine's own estimate.
    dev.release_memory();
    let held = occupy(&dev, 0);
    let none_left = dev.ctx.mem_get_info().unwrap().0;
    let full = gpu_run();
    release(&dev, held);
    let e = match full {
        Ok(out) => {
            compare("with almost no memory", &out, &cpu, Precision::F32);
            "computed in small blocks".to_string()
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.starts_with("GPU: ") && e.contains(&name), "{e}");
            assert!(e.contains("out of memory") || e.contains("too little free memory"), "{e}");
            e
        }
    };

    // The memory given back, the same operator runs again, correctly.
    assert!(dev.ctx.mem_get_info().unwrap().0 >= free / 10 * 9, "the memory taken was not given back");
    compare("after", &gpu_run().unwrap(), &cpu, Precision::F32);
    println!(
        "out of memory on {description}: {:.1} of {:.1} GB free; with {:.0} MB free: computed in blocks; \
         with {:.1} MB free: {e}; then usable again ({:.1} s)",
        free as f64 / 1e9,
        total as f64 / 1e9,
        sliver as f64 / 1e6,
        none_left as f64 / 1e6,
        clock.elapsed().as_secs_f64()
    );

    // (b) Kernels that need more than a GPU thread has: a 300 x 300 tensor product per pair
    // (90000 values per thread for the term, as many for the sum), and a pair term of 100000
    // values. The local memory they ask for may exceed what a thread may have (the launch is
    // refused) or what the device has for all resident threads.
    let small_args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let (sx, sy) = (random(37, 23), random(41, 24));
    let small_inputs = [Input::host(&sx, 37, 1), Input::host(&sy, 41, 1)];
    let small = Operator::new("Sum_Reduction(Exp(-Square(x - y))*y, 0)", &small_args).unwrap();
    for (text, decl, dims, rows) in [
        ("Sum_Reduction(TensorProd(u, v), 0)", ["u = Vi(300)", "v = Vj(300)"], [300, 300], [7, 11]),
        ("Sum_Reduction(Sum(u*v), 0)", ["u = Vi(100000)", "v = Vj(1)"], [100_000, 1], [5, 3]),
    ] {
        let clock = std::time::Instant::now();
        let decl: Vec<String> = decl.iter().map(|s| s.to_string()).collect();
        let (u, v) = (random(rows[0] * dims[0], 25), random(rows[1] * dims[1], 26));
        let big_inputs =
            [Input::host(&u, rows[0], dims[0]), Input::host(&v, rows[1], dims[1])];
        let big = Operator::new(text, &decl).unwrap();
        for precision in [Precision::F32, Precision::F64] {
            let options = RunOptions { precision, backend: Backend::Gpu(0), ..Default::default() };
            let outcome = match big.run(&big_inputs, &options) {
                Ok(g) => {
                    let c = run(&big, &big_inputs, precision, Backend::Cpu, SumScheme::Auto);
                    compare(text, &g, &c, precision);
                    "computed, equal to the CPU".to_string()
                }
                Err(e) => {
                    // Compilation errors come from NVRTC (no device yet); the others name the device
                    // and say which resource is short, before any launch.
                    let e = e.to_string();
                    let said = e.contains("local memory") || e.contains("registers per thread");
                    assert!(e.starts_with("GPU: ") && (e.contains(&name) && said || e.contains("NVRTC")), "{e}");
                    e
                }
            };
            // The device still computes a small, normal reduction correctly.
            let g = run(&small, &small_inputs, precision, Backend::Gpu(0), SumScheme::Auto);
            let c = run(&small, &small_inputs, precision, Backend::Cpu, SumScheme::Auto);
            compare(&format!("after {text}"), &g, &c, precision);
            println!("{text} ({precision:?}): {outcome}; then usable again ({:.1} s)", clock.elapsed().as_secs_f64());
        }
    }
}

/// The device keeps its buffers between calls: calls of growing and shrinking sizes, in every
/// precision, with one output row per thread or chunks of the reduced range (2D, merged on the
/// device), must each equal the CPU, whatever an earlier call left in the buffers.
#[test]
fn gpu_reuses_its_buffers_across_sizes_and_precisions() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: buffer reuse between calls is not checked here ({why})");
        return;
    }
    let formulas = [
        "Sum_Reduction(Exp(-s*SqDist(x,y))*b, AXIS)",
        "KMin_ArgKMin_Reduction(SqDist(x,y), 3, AXIS)",
        "ArgMin_Reduction(SqDist(x,y), AXIS)",
        "SumSoftMaxWeight_Reduction(10 - 2*SqDist(x,y), b, AXIS)",
    ];
    let mut calls = 0;
    for (n, m) in [(20011, 3001), (5, 7), (37, 100003), (4099, 3), (3, 65537), (20011, 3001)] {
        let data = Data::new(n, m);
        let inputs = data.inputs();
        for formula in formulas {
            for axis in ["0", "1"] {
                let text = formula.replace("AXIS", axis);
                let op = Operator::new(&text, &args()).unwrap();
                for precision in [Precision::F32, Precision::F64, Precision::F16] {
                    let g = run(&op, &inputs, precision, Backend::Gpu(0), SumScheme::Auto);
                    let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
                    compare(&format!("{text} N = {n}, M = {m}"), &g, &c, precision);
                    calls += 1;
                }
            }
        }
    }
    let held = device::device(0).unwrap().workspace.lock().unwrap().as_ref().map(|w| w.held());
    println!("{calls} calls of 6 sizes, each equal to the CPU; buffers held afterwards (device, host): {held:?}");
}

/// The numbers of a formula are arguments of its kernel: formulas that differ only by a number
/// have the same source (checked everywhere, NVRTC or not), and on a GPU a loop over 20 values
/// compiles and loads one kernel, each value giving the CPU's result.
#[test]
fn numbers_do_not_make_new_kernels() {
    let source = |eps: f64, dtype| {
        let text = format!("Sum_Reduction(Exp(-SqDist(x,y)/{eps:?} + 0.5)*b, 0)");
        codegen::generate(&Formula::parse(&text, &args()).unwrap(), dtype, SumScheme::Auto)
    };
    for dtype in [Dtype::F16, Dtype::F32, Dtype::F64] {
        let (a, b) = (source(0.1, dtype), source(2.75, dtype));
        assert_eq!(a.source, b.source, "{dtype:?}: the numbers are in the source");
        assert!(a.constants.contains(&0.1) && b.constants.contains(&2.75) && a.constants.contains(&0.5));
        assert!(!a.source.contains("0.1") && !b.source.contains("2.75"));
    }
    // Alone: the count of loaded kernels must not include those of tests running beside it.
    let _gpu = alone_on_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the same sources were checked, not run ({why})");
        return;
    }
    let dev = device::device(0).unwrap();
    let data = Data::new(1031, 517);
    let inputs = data.inputs();
    let loaded = dev.loaded_kernels();
    for k in 0..20 {
        // Values no other test uses, so that the kernel is new to this process.
        let eps = 0.0123 + k as f64 * 0.37;
        let text = format!("LogSumExp_Reduction(-SqDist(x,y)/{eps:?} + 0.123457, 1)");
        let op = Operator::new(&text, &args()).unwrap();
        for precision in [Precision::F32, Precision::F64] {
            let g = run(&op, &inputs, precision, Backend::Gpu(0), SumScheme::Auto);
            let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
            compare(&text, &g, &c, precision);
        }
    }
    let new = dev.loaded_kernels() - loaded;
    assert!(new <= 2, "20 values of a number loaded {new} kernels (one per precision expected)");
    println!("20 values of a number, float32 and float64: {new} kernels compiled or loaded");
}

/// Inputs kept on the device: the same results as the host data, in both schemes and every
/// precision; a matrix made again from changed data gives the new results (nothing is cached
/// behind the user's back); a precision other than the matrix's is an error naming the input; the
/// CPU reads the matrix back; dropping it frees its memory.
#[test]
fn inputs_kept_on_the_device() {
    use engine::cuda::resident::DeviceMatrix;
    // Alone: it measures the free memory around one allocation.
    let _gpu = alone_on_the_gpu();
    let dev = match device::device(0) {
        Ok(dev) => dev,
        Err(why) => {
            println!("NO GPU: inputs kept on the device are not checked here ({why})");
            return;
        }
    };
    for (n, m) in [(20011, 517), (37, 100003)] {
        let data = Data::new(n, m);
        let inputs = data.inputs();
        for precision in [Precision::F32, Precision::F64, Precision::F16] {
            // x (0) and y (1) on the device, the other inputs from the host.
            let x = DeviceMatrix::new(dev.clone(), &data.values[0], n, 3, precision).unwrap();
            let y = DeviceMatrix::new(dev.clone(), &data.values[1], m, 3, precision).unwrap();
            let mut kept = inputs.clone();
            kept[0] = Input::device(&x);
            kept[1] = Input::device(&y);
            for text in ["Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", "ArgKMin_Reduction(SqDist(x,y), 4, 1)"] {
                let op = Operator::new(text, &args()).unwrap();
                let options = RunOptions { precision, backend: Backend::Gpu(0), ..Default::default() };
                let g = op.run(&kept, &options).unwrap_or_else(|e| panic!("{text}: {e}"));
                let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
                compare(&format!("{text} kept on the device"), &g, &c, precision);
                // The CPU backend reads the kept matrices back.
                let options = RunOptions { precision, backend: Backend::Cpu, ..Default::default() };
                let back = op.run(&kept, &options).unwrap();
                assert_eq!(back.values, c.values, "{text}: CPU from kept matrices");
                assert_eq!(back.indices, c.indices, "{text}: CPU from kept matrices");
            }
        }
    }
    // Changed data, kept again: the results follow the new values.
    let data = Data::new(1031, 517);
    let mut inputs = data.inputs();
    let op = Operator::new("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", &args()).unwrap();
    let options = RunOptions { precision: Precision::F64, backend: Backend::Gpu(0), ..Default::default() };
    let shifted: Vec<f64> = data.values[0].iter().map(|v| v + 0.25).collect();
    let before = DeviceMatrix::new(dev.clone(), &data.values[0], 1031, 3, Precision::F64).unwrap();
    let after = DeviceMatrix::new(dev.clone(), &shifted, 1031, 3, Precision::F64).unwrap();
    let (mut kept_before, mut kept_after) = (inputs.clone(), inputs.clone());
    kept_before[0] = Input::device(&before);
    kept_after[0] = Input::device(&after);
    let g0 = op.run(&kept_before, &options).unwrap();
    let g1 = op.run(&kept_after, &options).unwrap();
    compare(
        "before the change",
        &g0,
        &run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto),
        Precision::F64,
    );
    inputs[0] = Input::host(&shifted, 1031, 3);
    compare("after the change", &g1, &run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto), Precision::F64);
    assert_ne!(g0.values, g1.values);
    // Another precision than the kept one: an error that names the input and both precisions.
    let options32 = RunOptions { precision: Precision::F32, ..options.clone() };
    let e = op.run(&kept_after, &options32).unwrap_err().to_string();
    assert!(e.contains("'x'") && e.contains("float64") && e.contains("float32"), "{e}");
    // Dropping a kept matrix gives its memory back.
    let free = dev.ctx.mem_get_info().unwrap().0;
    let big = DeviceMatrix::new(dev.clone(), &vec![1.0; 64 << 20], 64 << 20, 1, Precision::F64).unwrap();
    let with = dev.ctx.mem_get_info().unwrap().0;
    drop(big);
    let without = dev.ctx.mem_get_info().unwrap().0;
    assert!(free - with >= 500 << 20 && without - with >= 500 << 20, "{free} {with} {without}");
}

/// A loop in the engine on the GPU (its steps' launches recorded in the first two iterations and
/// issued again after) against the same loop on the CPU: log-domain Sinkhorn between point clouds
/// of odd sizes, one direction in the 1D scheme and the other in the 2D scheme (its merge launch
/// recorded too), dense and block-sparse (two problems side by side), 1, 2, 3 and 8 iterations.
#[test]
fn gpu_loops_equal_the_cpu_loop() {
    use engine::iterate::{iterate, Source, Step};
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::device(0) {
        println!("NO GPU: loops in the engine are not checked here ({why})");
        return;
    }
    let (n, m) = (37usize, 2999usize);
    let x = random(n * 2, 11);
    let y = random(m * 2, 12);
    let lmu: Vec<f64> = (0..n).map(|i| -(n as f64).ln() - 0.01 * i as f64).collect();
    let lnu: Vec<f64> = (0..m).map(|j| -(m as f64).ln() + 0.001 * j as f64).collect();
    let s = [3.0];
    let declare = |names: [&str; 5]| names.map(String::from);
    let f_op = Operator::new(
        "LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
        &declare(["x = Vi(2)", "y = Vj(2)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"]),
    )
    .unwrap();
    let g_op = Operator::new(
        "LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
        &declare(["x = Vi(2)", "y = Vj(2)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"]),
    )
    .unwrap();
    fn input(data: &[f64], ncol: usize) -> Input<'_> {
        Input::host(data, data.len() / ncol, ncol)
    }
    let (xi, yi, par) = (input(&x, 2), input(&y, 2), input(&s, 1));
    let (f0, g0) = (vec![0.0; n], vec![0.0; m]);
    // Two problems: rows 0..20 of x against 0..1500 of y, and the rest against the rest.
    let split = Ranges::from_block_pairs(&[0..20, 20..n], &[0..1500, 1500..m], &[(0, 0), (1, 1)]).unwrap();
    for ranges in [None, Some(split)] {
        let steps = [
            Step {
                operator: &g_op,
                inputs: vec![Source::Host(xi), Source::Host(yi), Source::Host(input(&lmu, 1)), Source::State(0), Source::Host(par)],
                output: 1,
                sum_scheme: SumScheme::Auto,
                ranges: ranges.clone(),
            },
            Step {
                operator: &f_op,
                inputs: vec![Source::Host(xi), Source::Host(yi), Source::Host(input(&lnu, 1)), Source::State(1), Source::Host(par)],
                output: 0,
                sum_scheme: SumScheme::Auto,
                ranges: ranges.clone(),
            },
        ];
        let states = [input(&f0, 1), input(&g0, 1)];
        for precision in [Precision::F64, Precision::F32] {
            for iterations in [1, 2, 3, 8] {
                let on = |backend| RunOptions { precision, backend, ..Default::default() };
                let gpu = iterate(&steps, &states, iterations, &on(Backend::Gpu(0))).unwrap();
                let cpu = iterate(&steps, &states, iterations, &on(Backend::Cpu)).unwrap();
                let tolerance = if precision == Precision::F64 { 1e-10 } else { 1e-4 };
                for (k, (a, b)) in gpu.states.iter().zip(&cpu.states).enumerate() {
                    let err = a.iter().zip(b).map(|(p, q)| (p - q).abs()).fold(0.0, f64::max);
                    assert!(
                        err < tolerance,
                        "state {k} after {iterations} iterations ({precision:?}, ranges: {}): differs by {err}",
                        ranges.is_some()
                    );
                }
            }
        }
    }
}

/// An interrupt asked during a long reduction (minutes of kernel time in one piece) stops it within
/// a second: the reduction runs in steps of a fraction of a second, the interrupt asked between
/// them; the device then computes the next call right.
#[test]
fn gpu_long_reductions_stop_when_interrupted() {
    use std::sync::Mutex;
    use std::time::{Duration, Instant};
    let _gpu = alone_on_the_gpu();
    if let Err(why) = device::device(0) {
        println!("NO GPU: interrupting a GPU reduction is not checked here ({why})");
        return;
    }
    static ASKED_FROM: Mutex<Option<Instant>> = Mutex::new(None);
    fn after_half_a_second() -> bool {
        ASKED_FROM.lock().unwrap().is_some_and(|t| t.elapsed() > Duration::from_millis(500))
    }
    // 1e13 pairs of a float64 Gaussian sum: a minute or more on an H100, unless interrupted.
    let (n, m) = (1_000_000usize, 10_000_000usize);
    let x = random(3 * n, 21);
    let y = random(3 * m, 22);
    let b = random(m, 23);
    let op = Operator::new("Sum_Reduction(Exp(-SqDist(x,y))*w, 0)", &["x = Vi(3)", "y = Vj(3)", "w = Vj(1)"].map(String::from))
        .unwrap();
    let inputs = [Input::host(&x, n, 3), Input::host(&y, m, 3), Input::host(&b, m, 1)];
    // On one GPU and shared by several (blocks of rows), then by several with a shorter output (parts of
    // the reduced range: 1e12 pairs, seconds).
    for (gpus, n) in [(vec![], n), (several_gpus(), n), (several_gpus(), 100_000)] {
        let options = RunOptions {
            precision: Precision::F64,
            backend: Backend::Gpu(0),
            gpus: gpus.clone(),
            interrupt: Some(after_half_a_second),
            ..Default::default()
        };
        let inputs = [Input::host(&x[..3 * n], n, inputs[0].ncol), inputs[1], inputs[2]];
        let start = Instant::now();
        *ASKED_FROM.lock().unwrap() = Some(start);
        let got = op.run(&inputs, &options);
        let took = start.elapsed();
        let what = format!("GPUs {gpus:?}, {n} x {m}");
        assert!(matches!(got, Err(engine::Error::Interrupted)), "{what}: not interrupted: {:?}", got.map(|o| o.timings));
        assert!(took < Duration::from_millis(1500), "{what}: interrupted after {took:?} (asked at 0.5 s)");
        // The next call, small, is right.
        let (xs, ys, bs) = (&x[..3 * 7], &y[..3 * 29], &b[..29]);
        let small = [Input::host(xs, 7, 3), Input::host(ys, 29, 3), Input::host(bs, 29, 1)];
        let g = op.run(&small, &RunOptions { interrupt: None, ..options.clone() }).unwrap();
        let c = run(&op, &small, Precision::F64, Backend::Cpu, SumScheme::Auto);
        compare(&format!("{what}: after an interrupt"), &g, &c, Precision::F64);
    }
}

//! The CUDA backend against the CPU evaluator: every operation and every reduction, both axes,
//! float32 and float64, the 1D and 2D schemes. These tests need NVRTC (compilation) and a GPU
//! (execution); where either is missing they say so, and check that the reason given is the
//! right one, instead of comparing results.
//!
//! The other GPU tests are in modules of this one (so that the filter `gpu::` still runs them
//! all, and they share its lock on the device's memory): `gpu_memory.rs` (blocks, out of memory,
//! buffers reused, inputs kept on the device) and `gpu_steps.rs` (long reductions in steps,
//! several GPUs, loops in the engine, interrupts).

#[path = "gpu_memory.rs"]
mod memory;
#[path = "gpu_steps.rs"]
mod steps;

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
    if let Err(why) = engine::cuda::builds::nvrtc_present() {
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
    // Log-sum-exps of long pairs, whose groups are unrolled less (`codegen::exponentials`).
    let long: Vec<String> = ["x = Vi(64)", "y = Vj(64)", "b = Vj(1)"].map(String::from).to_vec();
    for text in ["LogSumExp_Reduction(b - SqDist(x, y), 0)", "SumSoftMaxWeight_Reduction(b - SqDist(x, y), y, 1)"] {
        for dtype in [Dtype::F32, Dtype::F64] {
            let kernel = codegen::generate(&Formula::parse(text, &long).unwrap(), dtype, SumScheme::Auto);
            sources.push((format!("{text} D = 64 ({dtype:?})"), kernel.source));
        }
    }
    let next = std::sync::atomic::AtomicUsize::new(0);
    let threads = std::thread::available_parallelism().map_or(1, |n| n.get()).min(32);
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let Some((what, source)) = sources.get(next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)) else { return };
                if let Err(e) = engine::cuda::builds::compile_cubin(source, "sm_90") {
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
        // A power of two divides by its inverse (in the source: one kernel for 2, 0.5, 1024, ...),
        // other numbers through rk_div_fixed.
        let (half, quarter, third) = (source(2.0, dtype), source(0.25, dtype), source(3.0, dtype));
        assert_eq!(half.source, quarter.source, "{dtype:?}: powers of two");
        assert!(!half.source.contains("= rk_div_fixed(") && half.source.contains("* ((T)1 / "));
        assert!(third.source.contains("= rk_div_fixed(") && third.source == a.source);
    }
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the same sources were checked, not run ({why})");
        return;
    }
    let data = Data::new(1031, 517);
    let inputs = data.inputs();
    let loaded = device::Device::loaded_by_this_thread();
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
    let new = device::Device::loaded_by_this_thread() - loaded;
    assert!(new <= 2, "20 values of a number loaded {new} kernels (one per precision expected)");
    // Dividing by a power of two gives the CPU's bits (the same real number as x * (1 / c)).
    for c in ["2.0", "0.125", "3.0"] {
        let text = format!("Sum_Reduction((x - y) / {c} + Exp(-SqDist(x, y) / {c}) * w, 0)");
        let op = Operator::new(&text, &args()).unwrap();
        let g = run(&op, &inputs, Precision::F64, Backend::Gpu(0), SumScheme::Auto);
        let c = run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto);
        compare(&text, &g, &c, Precision::F64);
    }
    println!("20 values of a number, float32 and float64: {new} kernels compiled or loaded");
}

/// With `Tuning::fast_compile`, a new kernel's first calls of little work run its fast build
/// (`cuda::builds`), then, once the background thread has swapped it in, its optimised build: both
/// agree with the CPU, and with each other bit for bit.
#[test]
fn a_new_kernel_runs_fast_built_then_optimised() {
    use engine::cuda::builds::{self, Build};
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the fast and optimised builds are not compared ({why})");
        return;
    }
    let data = Data::new(1031, 517);
    let inputs = data.inputs();
    let tuning = engine::Tuning { fast_compile: true, ..Default::default() };
    let sifted = engine::Tuning { gpu_selection: Some(engine::tuning::SelectionOverride::Filtered), ..tuning.clone() };
    let on_gpu = |op: &Operator, precision, tuning: &engine::Tuning| {
        let options = RunOptions { precision, backend: Backend::Gpu(0), tuning: tuning.clone(), ..Default::default() };
        op.run(&inputs, &options).unwrap_or_else(|e| panic!("{}: {e}", op.formula.text))
    };
    // Formulas no other test uses, so that their kernels are new to this process. A fast build
    // runs the kernel written for one row per thread (`codegen::generate_one_row`), an optimised
    // one that of several rows: the same bits all the same.
    let formulas = [
        ("Sum_Reduction(Exp(-SqDist(x,y) * Sqrt(SqNorm2(x) + IntCst(3))) * b, 0)", &tuning),
        ("LogSumExp_Reduction(Sin((x|y)) - SqDist(x,y) * Abs(w) * IntCst(7), 1)", &tuning),
        ("Min_ArgMin_Reduction(SqDist(x * IntCst(5), y) + Cos(u * w), 0)", &tuning),
        ("SumSoftMaxWeight_Reduction(u - SqDist(x,y) * IntCst(3), b, 0)", &tuning),
        ("KMin_ArgKMin_Reduction(SqDist(x,y) * IntCst(3), 4, 0)", &sifted),
    ];
    for (text, tuning) in formulas {
        let op = Operator::new(text, &args()).unwrap();
        for precision in [Precision::F32, Precision::F64] {
            let swaps = builds::optimised_swaps();
            let fast = on_gpu(&op, precision, tuning);
            assert!(builds::wait_for_background(std::time::Duration::from_secs(300)), "{text}: builds still pending");
            if Build::first(true) == Build::Fast {
                assert!(builds::optimised_swaps() > swaps, "{text}: no optimised build replaced a fast one");
            }
            let optimised = on_gpu(&op, precision, tuning);
            let cpu = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
            compare(text, &fast, &cpu, precision);
            compare(text, &optimised, &cpu, precision);
            // Compiled without contraction, with their fused multiply-adds written: the same bits.
            let bits = |o: &engine::Output| o.values.as_ref().map(|v| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>());
            assert!(bits(&fast) == bits(&optimised) && fast.indices == optimised.indices, "{text} {precision:?}: fast and optimised builds differ");
        }
    }
    // A call of much work (4e8 pairs of 28 input components) on a kernel still fast waits for its
    // optimised build; a first call of much work compiles the optimised build at once.
    let big = Data::new(20_011, 20_023);
    let big_inputs = big.inputs();
    let op = Operator::new("Sum_Reduction(Exp(-SqDist(x,y) * IntCst(11)) * b + (x|y) * b, 0)", &args()).unwrap();
    let options = RunOptions { precision: Precision::F32, backend: Backend::Gpu(0), tuning: tuning.clone(), ..Default::default() };
    let swaps = builds::optimised_swaps();
    on_gpu(&op, Precision::F32, &tuning);
    op.run(&big_inputs, &options).unwrap();
    if Build::first(true) == Build::Fast {
        assert!(builds::optimised_swaps() > swaps, "the call of much work did not wait for the optimised build");
    }
    let op = Operator::new("Sum_Reduction(Exp(-SqDist(x,y) * IntCst(13)) * b, 0)", &args()).unwrap();
    let swaps = builds::optimised_swaps();
    op.run(&big_inputs, &options).unwrap();
    assert!(builds::wait_for_background(std::time::Duration::from_secs(300)));
    assert_eq!(builds::optimised_swaps(), swaps, "a first call of much work ran a fast build");
}

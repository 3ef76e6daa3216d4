//! Reductions in steps and in parts: long reductions in steps over the reduced range, a reduction
//! shared by several GPUs, loops in the engine (launches recorded and issued again), and
//! interrupts between the steps.

use super::{alone_on_the_gpu, args, compare, each_reduction, run, sharing_the_gpu, Data};
use crate::common::random;
use crate::common_ranges::random_ranges;
use engine::cuda::device;
use engine::{Backend, Input, Operator, Precision, Ranges, RunOptions, SumScheme};

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

/// A program spread over several GPUs (`engine::program::spread`: the points' rows shared out, the sums over
/// them merged) equals the same on one GPU: K-means (labels on each GPU's rows, sums and counts
/// merged, the centres' map on each) and Sinkhorn (log-sum-exps over the split rows merged), in
/// float64 and float32, the same bits from run to run.
#[test]
fn programs_spread_over_gpus_equal_one_gpu() {
    use engine::program::{self, Buffer, Program, Step};
    use engine::Tuning;
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: programs spread over GPUs are not compared with one here ({why})");
        return;
    }
    let gpus = several_gpus();
    let (n, m, d, k) = (100_003usize, 4_099usize, 3usize, 37usize);
    let x = random(n * d, 31);
    let y = random(m * d, 32);
    let c0: Vec<f64> = (0..d).flat_map(|a| x[a * n..a * n + k].to_vec()).collect();
    let j: Vec<f64> = (1..=k).map(|v| v as f64).collect();
    let op = |f: &str, args: &[&str]| Operator::new(f, &args.iter().map(|a| a.to_string()).collect::<Vec<_>>()).unwrap();
    let labels = op("ArgMin_Reduction(SqDist(x, c), 0)", &["x = Vi(3)", "c = Vj(3)"]);
    let sums = op("Sum_Reduction(Equal(l, j) * Concat(x, IntCst(1)), 1)", &["l = Vi(1)", "x = Vi(3)", "j = Vj(1)"]);
    let centres = op("Sum_Reduction(IfElse(Elem(s, 3) - 0.5, Extract(s, 0, 3) / Elem(s, 3), c), 1)", &["s = Vj(4)", "c = Vj(3)"]);
    let f_op = op("LogSumExp_Reduction(-g - SqDist(x, y) * 4, 0)", &["x = Vi(3)", "y = Vj(3)", "g = Vj(1)"]);
    let g_op = op("LogSumExp_Reduction(-f - SqDist(x, y) * 4, 1)", &["x = Vi(3)", "y = Vj(3)", "f = Vi(1)"]);
    let (f0, g0) = (vec![0.0; n], vec![0.0; m]);
    let buffer = |name: &str, initial| Buffer { name: name.into(), initial, schedule: None };
    let step = |operator, inputs: &[usize], output| Step {
        name: "step".into(),
        operator,
        inputs: inputs.to_vec(),
        output,
        sum_scheme: SumScheme::Auto,
        ranges: None,
    };
    let kmeans = Program {
        buffers: vec![
            buffer("x", Some(Input::host(&x, n, d))),
            buffer("c", Some(Input::host(&c0, k, d))),
            buffer("labels", None),
            buffer("j", Some(Input::host(&j, k, 1))),
            buffer("sums", None),
        ],
        steps: vec![step(&labels, &[0, 1], 2), step(&sums, &[2, 0, 3], 4), step(&centres, &[4, 1], 1)],
        iterations: 6,
        stop: None,
        trace: vec![],
        outputs: vec![2, 1],
    };
    let sinkhorn = Program {
        buffers: vec![
            buffer("x", Some(Input::host(&x, n, d))),
            buffer("y", Some(Input::host(&y, m, d))),
            buffer("f", Some(Input::host(&f0, n, 1))),
            buffer("g", Some(Input::host(&g0, m, 1))),
        ],
        steps: vec![step(&g_op, &[0, 1, 2], 3), step(&f_op, &[0, 1, 3], 2)],
        iterations: 5,
        stop: None,
        trace: vec![],
        outputs: vec![2, 3],
    };
    let spread_rows = Tuning { spread_rows: 1000, ..Tuning::default() };
    for precision in [Precision::F64, Precision::F32] {
        let one = RunOptions { precision, backend: Backend::Gpu(0), tuning: spread_rows.clone(), ..Default::default() };
        let several = RunOptions { gpus: gpus.clone(), ..one.clone() };
        for (name, p) in [("K-means", &kmeans), ("Sinkhorn", &sinkhorn)] {
            let alone = program::run(p, &one).unwrap();
            let shared = program::run(p, &several).unwrap();
            let again = program::run(p, &several).unwrap();
            let what = format!("{name} on GPUs {gpus:?}, {precision:?}");
            assert!(shared.backend.starts_with("GPUs"), "{what}: ran on {}", shared.backend);
            assert_eq!(shared.outputs, again.outputs, "{what}: the same bits from run to run");
            let tolerance = if precision == Precision::F64 { 1e-10 } else { 2e-3 };
            for (o, (a, b)) in alone.outputs.iter().zip(&shared.outputs).enumerate() {
                let differ = a.iter().zip(b).filter(|(u, v)| (*u - *v).abs() > tolerance * (1.0 + u.abs())).count();
                // (float32 labels: a point at nearly equal distances of two centres may change)
                let allowed = if name == "K-means" && o == 0 && precision == Precision::F32 { n / 1000 } else { 0 };
                assert!(differ <= allowed, "{what}: output {o}: {differ} of {} values differ", a.len());
            }
        }
    }
}

//! Programs (`engine::program`) against the same algorithms written as plain loops in float64:
//! K-means (Lloyd: labels as indices, then sums and counts), Sinkhorn with a schedule of its
//! temperature, a stopping rule with a trace, and the errors that name the step and the buffer. On
//! the CPU always; on a GPU where one is found, against the CPU.

use engine::cuda::device;
use engine::program::{self, Buffer, Program, Schedule, Step, Stop};
use engine::{Backend, Input, Operator, Precision, RunOptions, SumScheme, Tuning};

use crate::common::random;

pub(crate) fn op(formula: &str, args: &[&str]) -> Operator {
    let args: Vec<String> = args.iter().map(|a| a.to_string()).collect();
    Operator::new(formula, &args).unwrap_or_else(|e| panic!("{formula}: {e}"))
}

pub(crate) fn buffer<'a>(name: &str, initial: Option<Input<'a>>) -> Buffer<'a> {
    Buffer { name: name.into(), initial, schedule: None }
}

pub(crate) fn step<'a>(name: &str, operator: &'a Operator, inputs: &[usize], output: usize) -> Step<'a> {
    Step {
        name: name.into(),
        operator,
        inputs: inputs.to_vec(),
        output,
        sum_scheme: SumScheme::default(),
        ranges: None,
    }
}

fn options(backend: Backend) -> RunOptions {
    RunOptions { precision: Precision::F64, backend, ..Default::default() }
}

pub(crate) fn max_diff(a: &[f64], b: &[f64]) -> f64 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f64::max)
}

/// Lloyd's K-means in float64: the labels (1-based) and centres (column-major) after `iterations`.
fn lloyd(x: &[f64], n: usize, d: usize, c0: &[f64], k: usize, iterations: usize) -> (Vec<f64>, Vec<f64>) {
    let (mut c, mut labels) = (c0.to_vec(), vec![0.0; n]);
    for _ in 0..iterations {
        for i in 0..n {
            let dist = |j: usize| (0..d).map(|a| (x[i + a * n] - c[j + a * k]).powi(2)).sum::<f64>();
            let best = (0..k).fold(0, |b, j| if dist(j) < dist(b) { j } else { b });
            labels[i] = (best + 1) as f64;
        }
        let mut sums = vec![0.0; k * d];
        let mut counts = vec![0.0; k];
        for i in 0..n {
            let j = labels[i] as usize - 1;
            counts[j] += 1.0;
            for a in 0..d {
                sums[j + a * k] += x[i + a * n];
            }
        }
        for j in 0..k {
            for a in 0..d {
                if counts[j] > 0.0 {
                    c[j + a * k] = sums[j + a * k] / counts[j];
                }
            }
        }
    }
    (labels, c)
}

struct Kmeans {
    labels: Operator,
    sums: Operator,
    counts: Operator,
    centres: Operator,
}

impl Kmeans {
    fn new(d: usize) -> Kmeans {
        let dim = |a: &str| a.replace('D', &d.to_string());
        Kmeans {
            labels: op("ArgMin_Reduction(SqDist(x, c), 0)", &[&dim("x = Vi(D)"), &dim("c = Vj(D)")]),
            sums: op("Sum_Reduction(Equal(l, j) * x, 1)", &["l = Vi(1)", &dim("x = Vi(D)"), "j = Vj(1)"]),
            counts: op("Sum_Reduction(Equal(l, j), 1)", &["l = Vi(1)", "j = Vj(1)"]),
            // A map over j (no i-variable): an empty cluster keeps its centre.
            centres: op(
                "Sum_Reduction(IfElse(m - 0.5, s / m, c), 1)",
                &[&dim("s = Vj(D)"), "m = Vj(1)", &dim("c = Vj(D)")],
            ),
        }
    }

    /// Buffers: 0 x, 1 c, 2 labels, 3 j (1..K), 4 sums, 5 counts.
    fn program<'a>(&'a self, x: Input<'a>, c0: Input<'a>, j: Input<'a>, iterations: usize) -> Program<'a> {
        let buffers = vec![
            buffer("x", Some(x)),
            buffer("c", Some(c0)),
            buffer("labels", None),
            buffer("j", Some(j)),
            buffer("sums", None),
            buffer("counts", None),
        ];
        let steps = vec![
            step("labels", &self.labels, &[0, 1], 2),
            step("sums", &self.sums, &[2, 0, 3], 4),
            step("counts", &self.counts, &[2, 3], 5),
            step("c", &self.centres, &[4, 5, 1], 1),
        ];
        Program { buffers, steps, iterations, stop: None, trace: vec![], outputs: vec![2, 1] }
    }
}

#[test]
fn kmeans_program_equals_a_plain_lloyd_loop() {
    let (n, d, k) = (1013, 3, 7);
    let x = random(n * d, 11);
    // Starting centres: the first k points.
    let c0: Vec<f64> = (0..d).flat_map(|a| x[a * n..a * n + k].to_vec()).collect();
    let j: Vec<f64> = (1..=k).map(|v| v as f64).collect();
    let km = Kmeans::new(d);
    let (want_labels, want_c) = lloyd(&x, n, d, &c0, k, 6);
    let program = km.program(Input::host(&x, n, d), Input::host(&c0, k, d), Input::host(&j, k, 1), 6);
    let ran = program::run(&program, &options(Backend::Cpu)).unwrap();
    assert_eq!(ran.outputs[0], want_labels, "labels");
    assert!(max_diff(&ran.outputs[1], &want_c) < 1e-12, "centres differ by {}", max_diff(&ran.outputs[1], &want_c));
    assert_eq!((ran.iterations, ran.shapes.clone()), (6, vec![(n, 1), (k, d)]));
    match device::device(0) {
        Err(why) => println!("NO GPU: programs are checked on the CPU only ({why})"),
        Ok(_) => {
            let gpu = program::run(&program, &options(Backend::Gpu(0))).unwrap();
            assert!(gpu.backend.starts_with("GPU"), "{}", gpu.backend);
            assert_eq!(gpu.outputs[0], want_labels, "labels on the GPU");
            assert!(max_diff(&gpu.outputs[1], &want_c) < 1e-12, "centres on the GPU");
        }
    }
}

/// Log-domain Sinkhorn's updates of f (over j) and g (over i) on a line, at the temperature 1 / s:
/// their inputs x, y, lnu (log b), g, s and x, y, lmu (log a), f, s.
pub(crate) fn sinkhorn_operators() -> (Operator, Operator) {
    let f_op = op(
        "LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
        &["x = Vi(1)", "y = Vj(1)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"],
    );
    let g_op = op(
        "LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
        &["x = Vi(1)", "y = Vj(1)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"],
    );
    (f_op, g_op)
}

/// Log-domain Sinkhorn between two point clouds on a line whose temperature follows a schedule (one
/// value per iteration, the last repeated), traced, against the same loop in float64.
#[test]
fn sinkhorn_with_a_schedule_equals_a_plain_loop() {
    let (n, m, iterations) = (37usize, 23usize, 9usize);
    let x = random(n, 1);
    let y = random(m, 2);
    let (lmu, lnu) = (vec![-(n as f64).ln(); n], vec![-(m as f64).ln(); m]);
    let schedule = [2.0, 5.0, 10.0, 20.0, 40.0];
    let (f_op, g_op) = sinkhorn_operators();
    let (f0, g0, s0) = (vec![0.0; n], vec![0.0; m], [schedule[0]]);
    let col = |v: &[f64]| v.len();
    let buffers = vec![
        buffer("x", Some(Input::host(&x, col(&x), 1))),
        buffer("y", Some(Input::host(&y, col(&y), 1))),
        buffer("lmu", Some(Input::host(&lmu, n, 1))),
        buffer("lnu", Some(Input::host(&lnu, m, 1))),
        buffer("f", Some(Input::host(&f0, n, 1))),
        buffer("g", Some(Input::host(&g0, m, 1))),
        Buffer {
            name: "s".into(),
            initial: Some(Input::host(&s0, 1, 1)),
            schedule: Some(Schedule { values: &schedule, rows: 5 }),
        },
    ];
    let steps = vec![step("g", &g_op, &[0, 1, 2, 4, 6], 5), step("f", &f_op, &[0, 1, 3, 5, 6], 4)];
    let program = Program { buffers, steps, iterations, stop: None, trace: vec![6, 4], outputs: vec![4, 5] };
    let lse = |v: Vec<f64>| {
        let top = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
        top + v.iter().map(|a| (a - top).exp()).sum::<f64>().ln()
    };
    let (mut f, mut g) = (f0.clone(), g0.clone());
    let mut traced_f = Vec::new();
    for t in 0..iterations {
        let s = schedule[t.min(4)];
        g = (0..m).map(|j| lse((0..n).map(|i| lmu[i] - f[i] - (x[i] - y[j]).powi(2) * s).collect())).collect();
        f = (0..n).map(|i| lse((0..m).map(|j| lnu[j] - g[j] - (x[i] - y[j]).powi(2) * s).collect())).collect();
        traced_f.extend(&f);
    }
    let want_s: Vec<f64> = (0..iterations).map(|t| schedule[t.min(4)]).collect();
    let mut backends = vec![Backend::Cpu];
    match device::device(0) {
        Ok(_) => backends.push(Backend::Gpu(0)),
        Err(why) => println!("NO GPU: the schedule is checked on the CPU only ({why})"),
    }
    for backend in backends {
        let ran = program::run(&program, &options(backend)).unwrap();
        assert!(max_diff(&ran.outputs[0], &f) < 1e-10 && max_diff(&ran.outputs[1], &g) < 1e-10, "{backend:?}");
        assert_eq!(ran.trace[0], want_s, "{backend:?}: the schedule's values, traced");
        assert!(max_diff(&ran.trace[1], &traced_f) < 1e-10, "{backend:?}: f after each iteration");
        if backend != Backend::Cpu {
            // With graphs, iterations 2..5 run as CUDA graphs (one per parity): the very values of
            // the launches one by one.
            let graphs = RunOptions { tuning: Tuning { graphs: true, ..Tuning::default() }, ..options(backend) };
            let in_graphs = program::run(&program, &graphs).unwrap();
            assert_eq!((&ran.outputs, &ran.trace), (&in_graphs.outputs, &in_graphs.trace), "graphs or not");
        }
    }
}

/// x halved at each iteration (or quartered by two steps), its sum of absolute values computed by a
/// reduction over all rows (one output row: a 1 x 1 buffer), the loop stopped when it drops below
/// the tolerance, asked every second iteration; the rule and the trace read at once or one
/// iteration late (the next iteration queued, then undone: `Tuning::late_checks`, the GPU's
/// default), with the same iterations, trace and result.
#[test]
fn programs_stop_when_a_buffer_drops_below_the_tolerance() {
    let x: Vec<f64> = (0..101).map(|i| (i as f64 - 50.0) * 0.37).collect();
    let total: f64 = x.iter().map(|v| v.abs()).sum();
    let half = op("Sum_Reduction(x * 0.5, 0)", &["x = Vi(1)"]);
    let norm = op("Sum_Reduction(Abs(x), 1)", &["x = Vi(1)"]);
    let tol = 1e-3;
    let mut backends = vec![Backend::Cpu];
    if device::device(0).is_ok() {
        backends.push(Backend::Gpu(0));
    }
    // (halved once an iteration; quartered by two steps writing x: an iteration that cannot be undone)
    for halvings in [1, 2] {
        let buffers = vec![buffer("x", Some(Input::host(&x, 101, 1))), buffer("err", None)];
        let mut steps = vec![step("x", &half, &[0], 0); halvings];
        steps.push(step("err", &norm, &[0], 1));
        let stop = Some(Stop { buffer: 1, tol, every: 2 });
        let program = Program { buffers, steps, iterations: 1000, stop, trace: vec![1], outputs: vec![0] };
        // After t iterations the sum is total / 2^(halvings t); asked at even t only.
        let after = |t: usize| total / 2f64.powi((halvings * t) as i32);
        let expected = (1..).find(|t| t % 2 == 0 && after(*t) < tol).unwrap();
        for backend in backends.clone() {
            for late_checks in [None, Some(true), Some(false)] {
                let tuning = Tuning { late_checks, ..Tuning::default() };
                let ran = program::run(&program, &RunOptions { tuning, ..options(backend) }).unwrap();
                let case = format!("{backend:?}, {halvings} halving(s), late checks {late_checks:?}");
                assert_eq!(ran.iterations, expected, "{case}");
                let want: Vec<f64> = (1..=expected).map(after).collect();
                assert!(max_diff(&ran.trace[0], &want) < 1e-12 * total, "{case}");
                let scale = after(expected) / total;
                assert!(max_diff(&ran.outputs[0], &x.iter().map(|v| v * scale).collect::<Vec<_>>()) < 1e-15, "{case}");
            }
        }
    }
}

#[test]
fn program_errors_name_the_step_and_the_buffer() {
    let (x, c) = (random(20, 1), random(6, 2));
    let km = Kmeans::new(2);
    let j = [1.0, 2.0, 3.0];
    let run = |p: &Program| program::run(p, &options(Backend::Cpu)).unwrap_err().to_string();
    // counts read before any step writes them, and no initial value
    let mut p = km.program(Input::host(&x, 10, 2), Input::host(&c, 3, 2), Input::host(&j, 3, 1), 1);
    p.steps.swap(0, 3);
    let e = run(&p);
    assert!(e.contains("step 1 ('c')") && e.contains("buffer 'sums', which has no value yet"), "{e}");
    // a result of another shape than its buffer's
    let c4 = random(8, 3);
    let p = km.program(Input::host(&x, 10, 2), Input::host(&c4, 4, 2), Input::host(&j, 3, 1), 1);
    let e = run(&p);
    assert!(e.contains("step 4 ('c')") && e.contains("has 4 rows, but 's' has 3"), "{e}");
    // a step that writes a buffer with a schedule
    let mut p = km.program(Input::host(&x, 10, 2), Input::host(&c, 3, 2), Input::host(&j, 3, 1), 1);
    p.buffers[1].schedule = Some(Schedule { values: &c, rows: 1 });
    let e = run(&p);
    assert!(e.contains("step 4 ('c')") && e.contains("buffer 'c' follows a schedule"), "{e}");
    // a schedule that is not whole values of its buffer
    p.buffers[1].schedule = Some(Schedule { values: &c[..5], rows: 1 });
    p.steps.pop();
    let e = run(&p);
    assert!(e.contains("'c'") && e.contains("its schedule holds 5 values"), "{e}");
    // an output that nothing gives a value
    let mut p = km.program(Input::host(&x, 10, 2), Input::host(&c, 3, 2), Input::host(&j, 3, 1), 1);
    p.buffers.push(buffer("nothing", None));
    p.outputs.push(6);
    let e = run(&p);
    assert!(e.contains("the outputs: buffer 'nothing' has no value"), "{e}");
}

/// A program of 0 iterations runs no step: it returns the initial values of its outputs (and an
/// empty trace), and refuses, naming `iterations`, an output or a gradient's buffer that only a
/// step gives values (it aborted R: an output of no values shaped as its buffer).
#[test]
fn programs_of_zero_iterations_return_their_initial_values() {
    let (x, c) = (random(20, 1), random(6, 2));
    let km = Kmeans::new(2);
    let j = [1.0, 2.0, 3.0];
    let mut p = km.program(Input::host(&x, 10, 2), Input::host(&c, 3, 2), Input::host(&j, 3, 1), 0);
    p.outputs = vec![1, 0];
    p.trace = vec![1];
    let ran = program::run(&p, &options(Backend::Cpu)).unwrap();
    assert_eq!((ran.iterations, ran.outputs.clone(), ran.shapes), (0, vec![c.clone(), x.clone()], vec![(3, 2), (10, 2)]));
    assert_eq!(ran.trace, vec![Vec::<f64>::new()]);
    let gradient = engine::program_gradient::gradient(&p, 1, None, &[1], &options(Backend::Cpu)).unwrap();
    assert_eq!(gradient.values, vec![vec![1.0; 6]]);
    // the labels (output 2) and the sums (the gradient's buffer 4) have no value before a step runs
    p.outputs = vec![2, 1];
    let e = program::run(&p, &options(Backend::Cpu)).unwrap_err();
    assert!(matches!(&e, engine::Error::Input { name, .. } if name == "iterations"), "{e}");
    assert!(e.to_string().contains("buffer 'labels' has no initial value"), "{e}");
    p.outputs = vec![1];
    let e = engine::program_gradient::gradient(&p, 4, None, &[1], &options(Backend::Cpu)).unwrap_err();
    assert!(e.to_string().contains("buffer 'sums' has no initial value"), "{e}");
}

/// A matrix kept on the GPU in float32 is refused, naming its buffer, by every path of a float64
/// program: one iteration and float16 run on host data, which read it back silently before; several
/// iterations on the device; the gradient. (On the GPU only: nothing is kept elsewhere.)
#[test]
fn programs_refuse_a_kept_matrix_in_another_precision() {
    let Ok(dev) = device::device(0) else {
        println!("NO GPU: kept matrices exist only on a GPU");
        return;
    };
    let x: Vec<f64> = (0..37).map(|i| i as f64 * 0.25).collect();
    let kept = engine::cuda::resident::DeviceMatrix::new(dev, &x, 37, 1, Precision::F32).unwrap();
    let half = op("Sum_Reduction(x * 0.5, 0)", &["x = Vi(1)"]);
    for (iterations, precision) in [(1, Precision::F64), (3, Precision::F64), (2, Precision::F16)] {
        let program = Program {
            buffers: vec![buffer("x", Some(Input::device(&kept)))],
            steps: vec![step("x", &half, &[0], 0)],
            iterations,
            stop: None,
            trace: vec![],
            outputs: vec![0],
        };
        let options = RunOptions { precision, backend: Backend::Gpu(0), ..Default::default() };
        let e = program::run(&program, &options).unwrap_err();
        assert!(matches!(&e, engine::Error::Input { name, .. } if name == "x"), "{iterations} {precision:?}: {e}");
        let e = engine::program_gradient::gradient(&program, 0, None, &[0], &options).unwrap_err();
        assert!(e.to_string().contains("is kept on"), "gradient, {iterations} {precision:?}: {e}");
    }
}

/// The gradient of a program (`program_gradient`) against central finite differences in float64:
/// three Sinkhorn-like iterations with a map that scales f by a parameter, differentiated in the
/// points x and y, the parameter s, the weights' parameter w and the initial g.
#[test]
fn program_gradients_match_finite_differences() {
    use engine::program_gradient::gradient;
    let (n, m) = (13usize, 11usize);
    let (x, y) = (random(2 * n, 31), random(2 * m, 32));
    let (lmu, lnu) = (random(n, 33), random(m, 34));
    let (f0, g0, s, w) = (vec![0.0; n], random(m, 35), [2.5], [0.7]);
    let seed = random(n, 36);
    let f_op = op(
        "LogSumExp_Reduction(lnu - g - SqDist(x, y) * s, 0)",
        &["x = Vi(2)", "y = Vj(2)", "lnu = Vj(1)", "g = Vj(1)", "s = Pm(1)"],
    );
    let g_op = op(
        "LogSumExp_Reduction(lmu - f - SqDist(x, y) * s, 1)",
        &["x = Vi(2)", "y = Vj(2)", "lmu = Vi(1)", "f = Vi(1)", "s = Pm(1)"],
    );
    let scale = op("Sum_Reduction(f * w + Sin(f), 0)", &["f = Vi(1)", "w = Pm(1)"]);
    let program = |x: &[f64], y: &[f64], s: &[f64], w: &[f64], g: &[f64]| -> Vec<Buffer<'static>> {
        let keep = |v: &[f64]| -> &'static [f64] { Box::leak(v.to_vec().into_boxed_slice()) };
        vec![
            buffer("x", Some(Input::host(keep(x), n, 2))),
            buffer("y", Some(Input::host(keep(y), m, 2))),
            buffer("lmu", Some(Input::host(keep(&lmu), n, 1))),
            buffer("lnu", Some(Input::host(keep(&lnu), m, 1))),
            buffer("f", Some(Input::host(keep(&f0), n, 1))),
            buffer("g", Some(Input::host(keep(g), m, 1))),
            buffer("s", Some(Input::host(keep(s), 1, 1))),
            buffer("w", Some(Input::host(keep(w), 1, 1))),
        ]
    };
    let steps = vec![
        step("g", &g_op, &[0, 1, 2, 4, 6], 5),
        step("f", &f_op, &[0, 1, 3, 5, 6], 4),
        step("f", &scale, &[4, 7], 4),
    ];
    let make =
        |buffers| Program { buffers, steps: steps.clone(), iterations: 3, stop: None, trace: vec![], outputs: vec![4] };
    let loss = |buffers| {
        let ran = program::run(&make(buffers), &options(Backend::Cpu)).unwrap();
        ran.outputs[0].iter().zip(&seed).map(|(a, b)| a * b).sum::<f64>()
    };
    let wrt = [0, 1, 6, 7, 5];
    let got = gradient(&make(program(&x, &y, &s, &w, &g0)), 4, Some(&seed), &wrt, &options(Backend::Cpu)).unwrap();
    assert_eq!(got.iterations, 3);
    match device::device(0) {
        Err(why) => println!("NO GPU: program gradients are checked on the CPU only ({why})"),
        Ok(_) => {
            let gpu = gradient(&make(program(&x, &y, &s, &w, &g0)), 4, Some(&seed), &wrt, &options(Backend::Gpu(0)));
            for (a, b) in gpu.unwrap().values.iter().zip(&got.values) {
                assert!(max_diff(a, b) < 1e-10 * (1.0 + b.iter().map(|v| v.abs()).fold(0.0, f64::max)), "GPU gradient");
            }
        }
    }
    let base: [Vec<f64>; 5] = [x.clone(), y.clone(), s.to_vec(), w.to_vec(), g0.clone()];
    for (k, want_len) in [2 * n, 2 * m, 1, 1, m].into_iter().enumerate() {
        assert_eq!(got.values[k].len(), want_len);
        for c in 0..want_len {
            let h = 1e-6;
            let at = |delta: f64| {
                let mut v = base.clone();
                v[k][c] += delta;
                loss(program(&v[0], &v[1], &v[2], &v[3], &v[4]))
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let err = (got.values[k][c] - fd).abs();
            assert!(err < 1e-6 * (1.0 + fd.abs()), "buffer {} component {c}: {} vs {fd}", wrt[k], got.values[k][c]);
        }
    }
}

/// Geodesic shooting of landmarks (forward Euler, the Hamiltonian flow of a Gaussian kernel), as
/// the landmarks vignette writes it: two sums and two maps per iteration. Its gradient with
/// respect to the initial momentum and positions (the sums' gradients fused by axis) against
/// central finite differences in float64 on the CPU, and on a GPU (where the backward pass runs on
/// the device) against the CPU in float64 and float32.
#[test]
fn shooting_gradients_match_finite_differences_and_the_gpu() {
    use engine::program_gradient::gradient;
    let n = 23usize;
    let (q0, p0, w) = (random(2 * n, 41), random(2 * n, 42), random(2 * n, 43));
    let args = ["qi = Vi(2)", "qj = Vj(2)", "pi = Vi(2)", "pj = Vj(2)", "s = Pm(1)"];
    let dq_op = op("Sum_Reduction(Exp(-s * SqDist(qi, qj)) * pj, 0)", &args[..5]);
    let dp_op = op("Sum_Reduction(2 * s * Exp(-s * SqDist(qi, qj)) * (pi | pj) * (qi - qj), 0)", &args);
    let q_map = op("Sum_Reduction(q + dt * dq, 0)", &["q = Vi(2)", "dt = Pm(1)", "dq = Vi(2)"]);
    let (s, dt) = ([1.7], [0.2]);
    // buffers: 0 q, 1 p, 2 s, 3 dt, 4 dq, 5 dp
    let steps = vec![
        step("dq", &dq_op, &[0, 0, 1, 1, 2], 4),
        step("dp", &dp_op, &[0, 0, 1, 1, 2], 5),
        step("q", &q_map, &[0, 3, 4], 0),
        step("p", &q_map, &[1, 3, 5], 1),
    ];
    let buffers = |q: &[f64], p: &[f64]| -> Vec<Buffer<'static>> {
        let keep = |v: &[f64]| -> &'static [f64] { Box::leak(v.to_vec().into_boxed_slice()) };
        vec![
            buffer("q", Some(Input::host(keep(q), n, 2))),
            buffer("p", Some(Input::host(keep(p), n, 2))),
            buffer("s", Some(Input::host(keep(&s), 1, 1))),
            buffer("dt", Some(Input::host(keep(&dt), 1, 1))),
            buffer("dq", None),
            buffer("dp", None),
        ]
    };
    let make = |q: &[f64], p: &[f64]| Program {
        buffers: buffers(q, p),
        steps: steps.clone(),
        iterations: 5,
        stop: None,
        trace: vec![],
        outputs: vec![0],
    };
    let loss = |q: &[f64], p: &[f64]| {
        let ran = program::run(&make(q, p), &options(Backend::Cpu)).unwrap();
        ran.outputs[0].iter().zip(&w).map(|(a, b)| a * b).sum::<f64>()
    };
    let got = gradient(&make(&q0, &p0), 0, Some(&w), &[1, 0], &options(Backend::Cpu)).unwrap();
    assert_eq!(got.iterations, 5);
    for (k, base) in [&p0, &q0].into_iter().enumerate() {
        for c in 0..2 * n {
            let h = 1e-6;
            let at = |delta: f64| {
                let mut v = base.clone();
                v[c] += delta;
                if k == 0 { loss(&q0, &v) } else { loss(&v, &p0) }
            };
            let fd = (at(h) - at(-h)) / (2.0 * h);
            let err = (got.values[k][c] - fd).abs();
            assert!(err < 1e-6 * (1.0 + fd.abs()), "wrt {k} component {c}: {} vs {fd}", got.values[k][c]);
        }
    }
    match device::device(0) {
        Err(why) => println!("NO GPU: shooting gradients are checked on the CPU only ({why})"),
        Ok(_) => {
            let scale = |g: &[f64]| 1.0 + g.iter().map(|v| v.abs()).fold(0.0, f64::max);
            let gpu = gradient(&make(&q0, &p0), 0, Some(&w), &[1, 0], &options(Backend::Gpu(0))).unwrap();
            assert!(gpu.backend.starts_with("GPU"), "{}", gpu.backend);
            for (a, b) in gpu.values.iter().zip(&got.values) {
                assert!(max_diff(a, b) < 1e-10 * scale(b), "GPU gradient in float64: {}", max_diff(a, b));
            }
            let f32 = RunOptions { precision: Precision::F32, ..options(Backend::Gpu(0)) };
            let gpu = gradient(&make(&q0, &p0), 0, Some(&w), &[1, 0], &f32).unwrap();
            for (a, b) in gpu.values.iter().zip(&got.values) {
                assert!(max_diff(a, b) < 1e-4 * scale(b), "GPU gradient in float32: {}", max_diff(a, b));
            }
        }
    }
}

/// A program whose sums over the same pairs are fused (`program::fuse`): two groups, the second
/// reading the first's results, steps reading fused results as rows and as a parameter, against
/// the same program unfused (forward and gradient), in float64; and the steps that must stay apart.
#[test]
fn fused_steps_give_the_results_of_the_steps_apart() {
    use engine::program_gradient::gradient;
    let (n, m) = (37usize, 29usize);
    let (x, y, b, s) = (random(2 * n, 61), random(2 * m, 62), random(m, 63), [0.8]);
    let xy = ["x = Vi(2)", "y = Vj(2)", "s = Pm(1)"];
    let with = |more: &[&str]| -> Vec<String> { xy.iter().chain(more).map(|a| a.to_string()).collect() };
    let parse = |f: &str, args: Vec<String>| Operator::new(f, &args).unwrap_or_else(|e| panic!("{f}: {e}"));
    let ops = [
        parse("Sum_Reduction(Exp(-s * SqDist(x, y)) * b, 0)", with(&["b = Vj(1)"])),
        parse("Sum_Reduction(Exp(-s * SqDist(x, y)) * (y - x), 0)", with(&[])),
        parse("Sum_Reduction(Exp(-s * SqDist(x, y)) * u * v, 1)", with(&["u = Vi(1)", "v = Vi(2)"])),
        parse("Sum_Reduction(Exp(-s * SqDist(x, y)) * u, 1)", with(&["u = Vi(1)"])),
        op("Sum_Reduction(x + 0.01 * v, 0)", &["x = Vi(2)", "v = Vi(2)"]),
        op("Sum_Reduction(y + 0.01 * w / (1 + t), 1)", &["y = Vj(2)", "w = Vj(2)", "t = Vj(1)"]),
        op(&format!("Sum_Reduction(Sum(tp) * x / {m}, 0)"), &[&format!("tp = Pm({m})"), "x = Vi(2)"]),
    ];
    // buffers: 0 x, 1 y, 2 b, 3 s, 4 u, 5 v, 6 w, 7 t, 8 q
    let buffers = |x: &[f64], y: &[f64]| -> Vec<Buffer<'static>> {
        let keep = |v: &[f64]| -> &'static [f64] { Box::leak(v.to_vec().into_boxed_slice()) };
        let mut all = vec![
            buffer("x", Some(Input::host(keep(x), n, 2))),
            buffer("y", Some(Input::host(keep(y), m, 2))),
            buffer("b", Some(Input::host(keep(&b), m, 1))),
            buffer("s", Some(Input::host(keep(&s), 1, 1))),
        ];
        all.extend(["u", "v", "w", "t", "q"].map(|name| buffer(name, None)));
        all
    };
    let steps = vec![
        step("u", &ops[0], &[0, 1, 3, 2], 4),
        step("v", &ops[1], &[0, 1, 3], 5),
        step("w", &ops[2], &[0, 1, 3, 4, 5], 6),
        step("t", &ops[3], &[0, 1, 3, 4], 7),
        step("x", &ops[4], &[0, 5], 0),
        step("y", &ops[5], &[1, 6, 7], 1),
        step("q", &ops[6], &[7, 0], 8),
    ];
    let make = |trace: Vec<usize>| Program {
        buffers: buffers(&x, &y),
        steps: steps.clone(),
        iterations: 3,
        stop: None,
        trace,
        outputs: vec![0, 1, 8],
    };
    let fused = options(Backend::Cpu);
    let apart = RunOptions { tuning: Tuning { fuse_steps: false, ..Tuning::default() }, ..options(Backend::Cpu) };
    assert_eq!(program::fused_groups(&make(vec![]), &[], &fused).unwrap(), vec![0..2, 2..4]);
    assert_eq!(program::fused_groups(&make(vec![]), &[], &apart).unwrap(), vec![]);
    // A traced result, or a result named by the gradient, stays apart; so does a step that reads
    // the result of the step before it.
    assert_eq!(program::fused_groups(&make(vec![4]), &[], &fused).unwrap(), vec![2..4]);
    assert_eq!(program::fused_groups(&make(vec![]), &[7], &fused).unwrap(), vec![0..2]);
    let mut chained = make(vec![]);
    chained.steps[1] = step("v", &ops[2], &[0, 1, 3, 4, 0], 5);
    chained.steps.truncate(2);
    chained.outputs = vec![5];
    assert_eq!(program::fused_groups(&chained, &[], &fused).unwrap(), vec![]);

    let close = |a: &[f64], b: &[f64], what: &str| {
        let scale = 1.0 + b.iter().map(|v| v.abs()).fold(0.0, f64::max);
        assert!(max_diff(a, b) <= 1e-12 * scale, "{what}: fused and apart differ by {}", max_diff(a, b));
    };
    let check = |on: &RunOptions, off: &RunOptions, device: &str| {
        let (got, want) = (program::run(&make(vec![]), on).unwrap(), program::run(&make(vec![]), off).unwrap());
        for (k, (a, b)) in got.outputs.iter().zip(&want.outputs).enumerate() {
            close(a, b, &format!("{device} output {k}"));
        }
        let want = gradient(&make(vec![]), 8, None, &[0, 1], off).unwrap();
        let got = gradient(&make(vec![]), 8, None, &[0, 1], on).unwrap();
        for (k, (a, b)) in got.values.iter().zip(&want.values).enumerate() {
            close(a, b, &format!("{device} gradient {k}"));
        }
    };
    check(&fused, &apart, "CPU");
    // and the gradient against finite differences (a few components of x and y)
    let make_at = |x: &[f64], y: &[f64]| Program { buffers: buffers(x, y), ..make(vec![]) };
    let sum_q = |x: &[f64], y: &[f64]| program::run(&make_at(x, y), &fused).unwrap().outputs[2].iter().sum::<f64>();
    let got = gradient(&make(vec![]), 8, None, &[0, 1], &fused).unwrap();
    for (k, c) in [(0, 0), (0, 2 * n - 1), (1, 3), (1, m + 5)] {
        let h = 1e-6;
        let at = |delta: f64| {
            let (mut xs, mut ys) = (x.clone(), y.clone());
            if k == 0 { xs[c] += delta } else { ys[c] += delta }
            sum_q(&xs, &ys)
        };
        let fd = (at(h) - at(-h)) / (2.0 * h);
        assert!((got.values[k][c] - fd).abs() < 1e-6 * (1.0 + fd.abs()), "wrt {k}[{c}]: {} vs {fd}", got.values[k][c]);
    }
    match device::device(0) {
        Err(why) => println!("NO GPU: fused steps are checked on the CPU only ({why})"),
        Ok(_) => {
            let gpu = |o: &RunOptions| RunOptions { backend: Backend::Gpu(0), ..o.clone() };
            check(&gpu(&fused), &apart, "GPU");
        }
    }
}

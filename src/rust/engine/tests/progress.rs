//! `RunOptions::progress`: on the CPU, the report is called on the calling thread with `done`
//! increasing up to `total` (the blocks of output rows), and the results do not change; a program
//! reports its iterations, its steps nothing; its gradient twice its iterations (forward, backward).

use std::sync::Mutex;

use engine::program::{self, Buffer, Program, Step};
use engine::program_gradient::gradient;
use engine::{Backend, Input, Operator, Precision, RunOptions, SumScheme};

use crate::common::random;

/// What `record` was told, and on which thread.
static SEEN: Mutex<Vec<(u64, u64, std::thread::ThreadId)>> = Mutex::new(Vec::new());
/// One test at a time uses `SEEN`.
static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

fn record(done: u64, total: u64) {
    SEEN.lock().unwrap().push((done, total, std::thread::current().id()));
}

fn taken() -> Vec<(u64, u64, std::thread::ThreadId)> {
    std::mem::take(&mut *SEEN.lock().unwrap())
}

fn operator(formula: &str, args: &[&str]) -> Operator {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    Operator::new(formula, &args).unwrap()
}

fn options(progress: Option<fn(u64, u64)>) -> RunOptions {
    RunOptions { precision: Precision::F64, threads: 2, backend: Backend::Cpu, progress, ..Default::default() }
}

/// Increasing `done`, one `total`, ending at `total`, all on this thread.
fn check_reports(seen: &[(u64, u64, std::thread::ThreadId)]) -> u64 {
    assert!(!seen.is_empty(), "no progress report");
    let total = seen[0].1;
    assert!(seen.iter().all(|&(_, t, _)| t == total), "totals differ: {seen:?}");
    assert!(seen.windows(2).all(|w| w[0].0 <= w[1].0), "done decreases: {seen:?}");
    assert!(seen.iter().all(|&(_, _, id)| id == std::thread::current().id()), "reported from another thread");
    assert_eq!(seen.last().unwrap().0, total, "the last report is not the total: {seen:?}");
    total
}

#[test]
fn the_cpu_reports_its_blocks_of_rows_up_to_the_total() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    // Long enough for several polls (10 ms each) and many blocks of rows.
    let (n, m) = (20_000, 20_000);
    let (x, y, b) = (random(3 * n, 1), random(3 * m, 2), random(m, 3));
    let inputs = [Input::host(&x, n, 3), Input::host(&y, m, 3), Input::host(&b, m, 1)];
    let op = operator("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"]);
    taken();
    let with = op.run(&inputs, &options(Some(record))).unwrap();
    let seen = taken();
    let total = check_reports(&seen);
    assert!(total > 1, "one block only: {seen:?}");
    assert!(seen.len() >= 2, "a single report: {seen:?}");
    println!("{} reports, {total} blocks", seen.len());
    let without = op.run(&inputs, &options(None)).unwrap();
    assert_eq!(with.values, without.values);
    assert!(taken().is_empty(), "reported without a report");
}

#[test]
fn a_program_reports_its_iterations_not_its_steps() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let (n, iterations) = (300, 7);
    let x = random(n, 4);
    let v0 = vec![1.0; n];
    // v <- sum_j exp(-(x_i - x_j)^2) v_j / n
    let op = operator("Sum_Reduction(Exp(-SqDist(x,y))*v / 300, 0)", &["x = Vi(1)", "y = Vj(1)", "v = Vj(1)"]);
    let buffers = vec![
        Buffer { name: "x".into(), initial: Some(Input::host(&x, n, 1)), schedule: None },
        Buffer { name: "v".into(), initial: Some(Input::host(&v0, n, 1)), schedule: None },
    ];
    let steps = vec![Step {
        name: "v".into(),
        operator: &op,
        inputs: vec![0, 0, 1],
        output: 1,
        sum_scheme: SumScheme::default(),
        ranges: None,
    }];
    let program = Program { buffers, steps, iterations, stop: None, trace: vec![], outputs: vec![1] };
    taken();
    let with = program::run(&program, &options(Some(record))).unwrap();
    let seen = taken();
    assert_eq!(check_reports(&seen), iterations as u64);
    let done: Vec<u64> = seen.iter().map(|s| s.0).collect();
    // (each iteration, then the end)
    assert_eq!(done, (1..=iterations as u64).chain([iterations as u64]).collect::<Vec<_>>());
    let without = program::run(&program, &options(None)).unwrap();
    assert_eq!(with.outputs, without.outputs);
    // Its gradient: the iterations forward, then backward.
    let with = gradient(&program, 1, None, &[1], &options(Some(record))).unwrap();
    let seen = taken();
    assert_eq!(check_reports(&seen), 2 * iterations as u64);
    assert!(seen.len() >= 2 * iterations, "{seen:?}");
    let without = gradient(&program, 1, None, &[1], &options(None)).unwrap();
    assert_eq!(with.values, without.values);
}

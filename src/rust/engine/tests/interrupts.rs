//! `RunOptions::interrupt`: a long CPU computation stops soon after the check says so, a check that
//! never fires changes nothing, and the operator works again after an interrupt.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use engine::{Backend, Error, Input, Operator, Precision, RunOptions};

use crate::common;
use common::random;

const GAUSS: &str = "Sum_Reduction(Exp(-SqDist(x,y))*b, 0)";

fn operator() -> Operator {
    let args: Vec<String> = ["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"].iter().map(|s| s.to_string()).collect();
    Operator::new(GAUSS, &args).unwrap()
}

fn options(threads: usize, interrupt: Option<fn() -> bool>) -> RunOptions {
    RunOptions { precision: Precision::F64, threads, backend: Backend::Cpu, interrupt, ..Default::default() }
}

/// When `after_deadline` starts saying to stop.
static DEADLINE: Mutex<Option<Instant>> = Mutex::new(None);

fn after_deadline() -> bool {
    DEADLINE.lock().unwrap().is_some_and(|d| Instant::now() >= d)
}

fn never() -> bool {
    false
}

#[test]
fn a_long_computation_stops_within_a_second_and_the_operator_still_works() {
    // About 1e11 pairs: minutes on any CPU, unless interrupted.
    let (n, m) = (50_000, 2_000_000);
    let (x, y, b) = (random(3 * n, 1), random(3 * m, 2), random(m, 3));
    let inputs = [
        Input::host(&x, n, 3),
        Input::host(&y, m, 3),
        Input::host(&b, m, 1),
    ];
    let op = operator();
    for threads in [1, 2] {
        let deadline = Instant::now() + Duration::from_millis(300);
        *DEADLINE.lock().unwrap() = Some(deadline);
        let got = op.run(&inputs, &options(threads, Some(after_deadline)));
        let latency = deadline.elapsed().as_secs_f64();
        assert!(matches!(got, Err(Error::Interrupted)), "{threads} threads: {:?}", got.map(|o| o.nrow));
        assert!(latency < 1.0, "{threads} threads: stopped {latency:.3} s after the interrupt");
        println!("{threads} threads: stopped {:.1} ms after the interrupt", latency * 1e3);
    }
    // The same operator, on a small problem, after the interrupts: right, and the same as without
    // a check.
    let small = [
        Input::host(&x[..30], 10, 3),
        Input::host(&y[..300], 100, 3),
        Input::host(&b[..100], 100, 1),
    ];
    let (with, without) = (op.run(&small, &options(2, Some(never))).unwrap(), op.run(&small, &options(2, None)).unwrap());
    assert_eq!(with.values, without.values);
    let values = with.values.unwrap();
    for (i, &v) in values.iter().enumerate() {
        let want: f64 = (0..100)
            .map(|j| {
                let d2: f64 = (0..3).map(|k| (x[i + 10 * k] - y[j + 100 * k]).powi(2)).sum();
                (-d2).exp() * b[j]
            })
            .sum();
        assert!((v - want).abs() <= 1e-12 * want.abs().max(1.0), "row {i}: {v} vs {want}");
    }
}

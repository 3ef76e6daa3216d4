//! L-BFGS: the minimiser of a smooth function of many variables from its values and gradients, with
//! the last `m` steps and gradient changes as a model of the inverse Hessian (the two-loop
//! recursion) and a strong Wolfe line search (`line_search`). Its stopping rules and results are
//! those of R's `optim(method = "L-BFGS-B")` without bounds, which it replaces when the objective
//! is a program (`optimise`): the relative reduction of f below `factr` times the machine epsilon,
//! the largest gradient component below `pgtol`, or `maxit` iterations. Its state is float64,
//! whatever the precision the objective is computed in.

use std::collections::VecDeque;

use super::line_search::{self, Point};
use crate::error::{Error, Result};

/// The stopping rules and the memory, as `optim()`'s `control`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Control {
    /// The most iterations (line searches).
    pub maxit: usize,
    /// Stop when `(f_old - f) <= factr * EPSILON * max(|f_old|, |f|, 1)`.
    pub factr: f64,
    /// Stop when the largest component of the gradient is at most `pgtol` (0: never).
    pub pgtol: f64,
    /// The pairs of the inverse Hessian's model.
    pub m: usize,
}

impl Default for Control {
    /// `optim()`'s defaults for L-BFGS-B.
    fn default() -> Control {
        Control { maxit: 100, factr: 1e7, pgtol: 0.0, m: 5 }
    }
}

/// What the minimiser found: the point, its value and gradient, the evaluations (value and
/// gradient together) and iterations made, `optim()`'s convergence code (0 converged, 1 `maxit`
/// reached, 52 the line search failed) and message, and the value at each evaluation in order.
#[derive(Debug, Clone)]
pub struct Minimum {
    pub par: Vec<f64>,
    pub value: f64,
    pub gradient: Vec<f64>,
    pub evaluations: usize,
    pub iterations: usize,
    pub convergence: i32,
    pub message: String,
    pub trace: Vec<f64>,
}

const REDUCTION: &str = "CONVERGENCE: REL_REDUCTION_OF_F <= FACTR*EPSMCH";
const GRADIENT: &str = "CONVERGENCE: NORM OF PROJECTED GRADIENT <= PGTOL";
/// (`optim()`'s message when `maxit` is reached)
const MAXIT: &str = "NEW_X";
const LINE_SEARCH: &str = "ERROR: ABNORMAL_TERMINATION_IN_LNSRCH";

/// Minimises `f` (which gives the value and the gradient at a point) from `x0`; `progress` is told
/// the iterations done after each one. An error of `f` stops the minimisation and is returned; a
/// value or gradient that is not finite at `x0` is an error.
pub fn minimise(
    x0: Vec<f64>,
    control: &Control,
    mut f: impl FnMut(&[f64]) -> Result<(f64, Vec<f64>)>,
    mut progress: impl FnMut(usize),
) -> Result<Minimum> {
    let mut trace = Vec::new();
    let mut evaluate = |x: Vec<f64>| -> Result<(f64, Vec<f64>, Vec<f64>)> {
        let (value, g) = f(&x)?;
        if g.len() != x.len() {
            return Err(Error::Invalid(format!("the gradient has {} values, the point {}", g.len(), x.len())));
        }
        trace.push(value);
        Ok((value, g, x))
    };
    let (f0, g0, x0) = evaluate(x0)?;
    if !f0.is_finite() || g0.iter().any(|v| !v.is_finite()) {
        return Err(Error::Invalid("the objective or its gradient is not finite at the start".into()));
    }
    let mut at = Point { a: 0.0, f: f0, slope: 0.0, x: x0, g: g0 };
    let mut history = History::new(control.m);
    let (mut iterations, mut convergence, mut message) = (0, 1, MAXIT);
    if largest(&at.g) <= control.pgtol {
        (convergence, message) = (0, GRADIENT);
    }
    while convergence == 1 && iterations < control.maxit {
        let Some(next) = step(&at, &mut history, &mut evaluate)? else {
            (convergence, message) = (52, LINE_SEARCH);
            break;
        };
        iterations += 1;
        progress(iterations);
        let reduction = at.f - next.f;
        at = next;
        if reduction <= control.factr * f64::EPSILON * (at.f + reduction).abs().max(at.f.abs()).max(1.0) {
            (convergence, message) = (0, REDUCTION);
        } else if largest(&at.g) <= control.pgtol {
            (convergence, message) = (0, GRADIENT);
        }
    }
    let evaluations = trace.len();
    Ok(Minimum {
        par: at.x,
        value: at.f,
        gradient: at.g,
        evaluations,
        iterations,
        convergence,
        message: message.into(),
        trace,
    })
}

/// One iteration from `at`: the model's direction, then a line search along it (again along the
/// steepest descent, the history forgotten, when that search fails). Adds the step to `history`
/// when its curvature is positive. `None` when every step raised the value.
fn step(
    at: &Point,
    history: &mut History,
    evaluate: &mut impl FnMut(Vec<f64>) -> Result<(f64, Vec<f64>, Vec<f64>)>,
) -> Result<Option<Point>> {
    loop {
        let mut d = history.direction(&at.g);
        let mut slope = dot(&d, &at.g);
        if slope.is_nan() || slope >= 0.0 {
            // (not a descent direction: rounding in the model)
            history.clear();
            d = at.g.iter().map(|v| -v).collect();
            slope = dot(&d, &at.g);
        }
        if slope == 0.0 {
            return Ok(None);
        }
        // The first step of a fresh model: length 1 (as L-BFGS-B); otherwise the model's step.
        let first = if history.is_empty() { 1.0 / dot(&d, &d).sqrt() } else { 1.0 };
        let start = Point { a: 0.0, slope, ..at.clone() };
        let mut phi = |a: f64| -> Result<Point> {
            let x: Vec<f64> = at.x.iter().zip(&d).map(|(x, d)| x + a * d).collect();
            let (f, g, x) = evaluate(x)?;
            Ok(Point { a, f, slope: dot(&g, &d), x, g })
        };
        match line_search::search(&start, first, &mut phi)? {
            Some(next) => {
                history.push(&at.x, &at.g, &next.x, &next.g);
                return Ok(Some(next));
            }
            None if history.is_empty() => return Ok(None),
            None => history.clear(),
        }
    }
}

/// The last `m` pairs (step s, gradient change y, 1 / y.s), oldest first.
struct History {
    m: usize,
    pairs: VecDeque<(Vec<f64>, Vec<f64>, f64)>,
}

impl History {
    fn new(m: usize) -> History {
        History { m: m.max(1), pairs: VecDeque::new() }
    }

    fn is_empty(&self) -> bool {
        self.pairs.is_empty()
    }

    fn clear(&mut self) {
        self.pairs.clear();
    }

    /// Adds the step from `x` to `x1` when its curvature y.s is positive (beyond rounding: as
    /// L-BFGS-B, which skips a pair with y.s <= EPSILON y.y), forgetting the oldest pair.
    fn push(&mut self, x: &[f64], g: &[f64], x1: &[f64], g1: &[f64]) {
        let s: Vec<f64> = x1.iter().zip(x).map(|(a, b)| a - b).collect();
        let y: Vec<f64> = g1.iter().zip(g).map(|(a, b)| a - b).collect();
        let ys = dot(&y, &s);
        if ys.is_nan() || ys <= f64::EPSILON * dot(&y, &y) {
            return;
        }
        if self.pairs.len() == self.m {
            self.pairs.pop_front();
        }
        self.pairs.push_back((s, y, 1.0 / ys));
    }

    /// -H g, H the model of the inverse Hessian (the two-loop recursion), scaled by the last pair's
    /// s.y / y.y; -g with no pair.
    fn direction(&self, g: &[f64]) -> Vec<f64> {
        let mut q: Vec<f64> = g.to_vec();
        let mut alpha = vec![0.0; self.pairs.len()];
        for (k, (s, y, rho)) in self.pairs.iter().enumerate().rev() {
            alpha[k] = rho * dot(s, &q);
            axpy(-alpha[k], y, &mut q);
        }
        if let Some((_, y, rho)) = self.pairs.back() {
            let gamma = 1.0 / (rho * dot(y, y));
            q.iter_mut().for_each(|v| *v *= gamma);
        }
        for (k, (s, y, rho)) in self.pairs.iter().enumerate() {
            let beta = rho * dot(y, &q);
            axpy(alpha[k] - beta, s, &mut q);
        }
        q.iter_mut().for_each(|v| *v = -*v);
        q
    }
}

fn dot(a: &[f64], b: &[f64]) -> f64 {
    a.iter().zip(b).map(|(a, b)| a * b).sum()
}

/// y += a x
fn axpy(a: f64, x: &[f64], y: &mut [f64]) {
    y.iter_mut().zip(x).for_each(|(y, x)| *y += a * x);
}

/// The largest component of `g` in absolute value (L-BFGS-B's projected gradient without bounds).
fn largest(g: &[f64]) -> f64 {
    g.iter().fold(0.0, |m: f64, v| m.max(v.abs()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The extended Rosenbrock function of `n` (even) variables and its gradient.
    fn rosenbrock(x: &[f64]) -> Result<(f64, Vec<f64>)> {
        let mut g = vec![0.0; x.len()];
        let mut f = 0.0;
        for i in (0..x.len()).step_by(2) {
            let (a, b) = (1.0 - x[i], x[i + 1] - x[i] * x[i]);
            f += a * a + 100.0 * b * b;
            g[i] = -2.0 * a - 400.0 * x[i] * b;
            g[i + 1] = 200.0 * b;
        }
        Ok((f, g))
    }

    #[test]
    fn minimises_rosenbrock() {
        let x0: Vec<f64> = (0..10).map(|i| if i % 2 == 0 { -1.2 } else { 1.0 }).collect();
        let control = Control { maxit: 500, factr: 10.0, pgtol: 0.0, m: 7 };
        let mut reported = 0;
        let min = minimise(x0, &control, rosenbrock, |i| reported = i).unwrap();
        assert_eq!(min.convergence, 0, "{min:?}");
        assert!(min.par.iter().all(|v| (v - 1.0).abs() < 1e-5), "{:?}", min.par);
        assert_eq!(min.trace.len(), min.evaluations);
        assert_eq!(reported, min.iterations);
        assert_eq!(min.trace.last().copied(), Some(min.value));
    }

    #[test]
    fn stops_at_maxit_and_at_pgtol() {
        let x0 = vec![-1.2, 1.0];
        let few = minimise(x0.clone(), &Control { maxit: 3, ..Control::default() }, rosenbrock, |_| ()).unwrap();
        assert_eq!((few.convergence, few.iterations, few.message.as_str()), (1, 3, MAXIT));
        let control = Control { maxit: 1000, factr: 0.0, pgtol: 1e-3, m: 5 };
        let flat = minimise(x0, &control, rosenbrock, |_| ()).unwrap();
        assert_eq!((flat.convergence, flat.message.as_str()), (0, GRADIENT));
        assert!(largest(&flat.gradient) <= 1e-3);
    }

    #[test]
    fn a_quadratic_in_a_few_iterations_and_errors_passed_on() {
        // f = sum_i c_i (x_i - i)^2: the minimiser is (0, 1, 2, ...)
        let c = [1.0, 10.0, 0.5, 3.0];
        let f = |x: &[f64]| -> Result<(f64, Vec<f64>)> {
            let f = (0..4).map(|i| c[i] * (x[i] - i as f64).powi(2)).sum();
            Ok((f, (0..4).map(|i| 2.0 * c[i] * (x[i] - i as f64)).collect()))
        };
        let min =
            minimise(vec![0.0; 4], &Control { factr: 0.0, pgtol: 1e-10, ..Control::default() }, f, |_| ()).unwrap();
        assert!(min.par.iter().enumerate().all(|(i, v)| (v - i as f64).abs() < 1e-9), "{min:?}");
        let failing = |_: &[f64]| -> Result<(f64, Vec<f64>)> { Err(Error::Interrupted) };
        assert_eq!(minimise(vec![0.0], &Control::default(), failing, |_| ()).unwrap_err(), Error::Interrupted);
        let nan = |_: &[f64]| -> Result<(f64, Vec<f64>)> { Ok((f64::NAN, vec![0.0])) };
        assert!(minimise(vec![0.0], &Control::default(), nan, |_| ()).is_err());
    }
}

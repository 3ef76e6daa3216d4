//! A program as the objective of the L-BFGS minimiser (`lbfgs`): the value of a one-number buffer
//! `of` after the program, as a function of the initial value of the buffer `wrt`, and its
//! gradient, both from one run of the program's gradient (`gradient`: its forward pass gives the
//! value, its reverse pass the gradient). The whole minimisation is one engine call: nothing goes
//! back to the caller between evaluations.

use super::gradient;
use super::lbfgs::{self, Control, Minimum};
use crate::api::{Input, RunOptions};
use crate::backend::Timings;
use crate::error::{Error, Result};
use crate::program::{self, PhaseTotals, Program};

/// The minimum found, what computed it and the seconds of each phase summed over the evaluations.
#[derive(Debug, Clone)]
pub struct Optimised {
    pub minimum: Minimum,
    /// The shape of `wrt` (that of `minimum.par`).
    pub shape: (usize, usize),
    pub backend: String,
    pub timings: Timings,
}

/// Minimises the final value of buffer `of` (one value) over the initial value of buffer `wrt`,
/// from the initial value the program gives it. `options.progress`, if any, is told the iterations
/// done of `control.maxit` (the program's own runs report nothing).
pub fn minimise(p: &Program, of: usize, wrt: usize, control: &Control, options: &RunOptions) -> Result<Optimised> {
    let (shape, x0) = start(p, of, wrt)?;
    let inner = RunOptions { progress: None, ..options.clone() };
    let mut timings = PhaseTotals(Timings::new());
    let mut backend = String::new();
    let objective = |x: &[f64]| -> Result<(f64, Vec<f64>)> {
        let mut at = p.clone();
        at.buffers[wrt].initial = Some(Input::host(x, shape.0, shape.1));
        at.outputs = vec![of];
        let got = gradient(&at, of, None, &[wrt], &inner)?;
        timings.add(&got.timings);
        backend = got.backend;
        let value = got.outputs.first().and_then(|v| v.first()).copied();
        let value = value.ok_or_else(|| Error::Invalid("the program gave no value of 'of'".into()))?;
        Ok((value, got.values.into_iter().next().unwrap_or_default()))
    };
    let report = |done: usize| {
        if let Some(report) = options.progress {
            report(done as u64, control.maxit as u64);
        }
    };
    let minimum = lbfgs::minimise(x0, control, objective, report)?;
    Ok(Optimised { minimum, shape, backend, timings: timings.0 })
}

/// Checks `of` and `wrt` (buffer numbers of the program `p`): `of` one value, `wrt` with an initial
/// value and no schedule. Returns the shape and the initial value of `wrt`.
fn start(p: &Program, of: usize, wrt: usize) -> Result<((usize, usize), Vec<f64>)> {
    let shapes = program::check(p)?;
    for (b, what) in [(of, "of"), (wrt, "wrt")] {
        if b >= p.buffers.len() {
            return Err(Error::Invalid(format!("'{what}' names buffer {} of {}", b + 1, p.buffers.len())));
        }
    }
    if shapes[of] != (1, 1) {
        let (r, c) = shapes[of];
        let name = &p.buffers[of].name;
        return Err(Error::Invalid(format!("'of' must be a buffer of one value; '{name}' is {r} x {c}")));
    }
    let buffer = &p.buffers[wrt];
    let Some(initial) = buffer.initial else {
        return Err(Error::Invalid(format!("'wrt': buffer '{}' has no initial value to start from", buffer.name)));
    };
    if buffer.schedule.is_some() {
        return Err(Error::Invalid(format!("'wrt': buffer '{}' follows a schedule", buffer.name)));
    }
    let x0 = match (initial.host_data(), initial.kept()) {
        (Some(x), _) => x.to_vec(),
        (None, Some(m)) => m.to_host()?,
        (None, None) => unreachable!("an input is on the host or on a device"),
    };
    Ok(((initial.nrow, initial.ncol), x0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operator::Operator;
    use crate::program::{Buffer, Step};
    use crate::reduction::SumScheme;

    /// A program whose loss is sum_i w_i |x_i - c_i|^2 + (1/2) sum_ij exp(-|c_i - c_j|^2) <x_i, x_j>:
    /// one iteration, two steps.
    #[test]
    fn minimises_a_kernel_quadratic_as_the_closed_form() {
        let n = 7;
        let c: Vec<f64> = (0..2 * n).map(|k| ((k * 37 % 11) as f64) / 5.0).collect();
        let w: Vec<f64> = (0..n).map(|k| 1.0 + k as f64 / 3.0).collect();
        let kx = Operator::new(
            "Sum_Reduction(Exp(-SqDist(ci, cj)) * xj, 0)",
            &["ci = Vi(2)", "cj = Vj(2)", "xj = Vj(2)"].map(String::from),
        )
        .unwrap();
        let loss = Operator::new(
            "Sum_Reduction(w * SqDist(x, c) + (x | kx) / 2, 1)",
            &["w = Vi(1)", "x = Vi(2)", "c = Vi(2)", "kx = Vi(2)"].map(String::from),
        )
        .unwrap();
        let x0 = vec![0.0; 2 * n];
        fn buffer<'a>(name: &str, v: Option<&'a [f64]>, nrow: usize, ncol: usize) -> Buffer<'a> {
            Buffer { name: name.into(), initial: v.map(|v| Input::host(v, nrow, ncol)), schedule: None }
        }
        let step = |name: &str, op, inputs, output| Step {
            name: name.into(),
            operator: op,
            inputs,
            output,
            sum_scheme: SumScheme::Auto,
            ranges: None,
        };
        // buffers: 0 x, 1 c, 2 w, 3 kx, 4 loss
        let p = Program {
            buffers: vec![
                buffer("x", Some(&x0), n, 2),
                buffer("c", Some(&c), n, 2),
                buffer("w", Some(&w), n, 1),
                buffer("kx", None, n, 2),
                buffer("loss", None, 1, 1),
            ],
            steps: vec![step("kx", &kx, vec![1, 1, 0], 3), step("loss", &loss, vec![2, 0, 1, 3], 4)],
            iterations: 1,
            stop: None,
            trace: vec![],
            outputs: vec![4],
        };
        let options = RunOptions {
            precision: crate::precision::Precision::F64,
            backend: crate::api::Backend::Cpu,
            ..Default::default()
        };
        let control = Control { factr: 0.0, pgtol: 1e-12, maxit: 200, m: 5 };
        let got = minimise(&p, 4, 0, &control, &options).unwrap();
        // the gradient 2 W (x - c) + K x = 0: (2 W + K) x = 2 W c, per coordinate, K the kernel matrix
        let k = |i: usize, j: usize| (-((c[i] - c[j]).powi(2) + (c[n + i] - c[n + j]).powi(2))).exp();
        for d in 0..2 {
            let x = &got.minimum.par[d * n..(d + 1) * n];
            for i in 0..n {
                let r: f64 = (0..n).map(|j| k(i, j) * x[j]).sum::<f64>() + 2.0 * w[i] * (x[i] - c[d * n + i]);
                assert!(r.abs() < 1e-7, "{d} {i}: residual {r}");
            }
        }
        assert_eq!(got.shape, (n, 2));
        assert!(got.minimum.trace.len() == got.minimum.evaluations);
        assert!(minimise(&p, 3, 0, &control, &options)
            .unwrap_err()
            .to_string()
            .contains("'of' must be a buffer of one value"));
        assert!(minimise(&p, 4, 3, &control, &options).unwrap_err().to_string().contains("no initial value"));
    }
}

//! Gradients against central finite differences in float64, for i-, j- and parameter variables:
//! S(v) = sum_i <Sum_Reduction(F, 0)_i, e_i> and dS/dv from `Grad(F, v, e)`.

use engine::{Backend, Input, Operator, Precision, RunOptions};

use crate::common;
use common::random;

const ARGS: [&str; 6] = ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "A = Pm(6)", "S = Pm(9)", "p = Pm(1)"];
const N: usize = 7;
const M: usize = 11;

/// Formulas covering the differentiable operations (inputs in [0, 1), away from kinks).
const FORMULAS: [&str; 42] = [
    "Exp(-p*SqDist(x,y))*b",
    "x*y",
    "x/(y+0.5)",
    "Log(x+y+0.1)",
    "Sin(x)*Cos(y)",
    "Sqrt(x+y+0.1)",
    "Rsqrt(x+y+0.1)",
    "Inv(x+y+0.1)",
    "Square(x-y)",
    "Pow(x-y, 3)",
    "Pow(x+y, -2)",
    "Powf(x+1, y)",
    "Abs(x-y)",
    "ReLU(x-y)",
    "Atan(x*y)",
    "Asin(0.5*x*y)",
    "Acos(0.5*x*y)",
    "Atan2(x, y+0.1)",
    "XLogX(x+y)",
    "SinXDivX(x+y+0.1)",
    "Clamp(x-y, -0.2, 0.3)",
    "IfElse(x-y, x*y, x+y)",
    "Mod(3*x, y+1, 0.1)",
    "Sum(x*y)",
    "SumT(Sum(x), 3)*y",
    "SqNorm2(x-y)",
    "(x|y)",
    "Max(x*y)",
    "Min(x-y)",
    "Elem(x,1)*y",
    "ElemT(Elem(x,0)*Elem(y,2), 4, 2)",
    "Extract(Concat(x,y), 1, 4)",
    "ExtractT(x*y, 1, 5)",
    "Concat(x*y, x)",
    "MatVecMult(A, x*y)",
    "VecMatMult(x+y, A)",
    "TensorProd(x, y)",
    "Normalize(x-y+0.1)",
    "Norm2(x-y)",
    "WeightedSqDist(S, x, y)",
    "x*p - y",
    "Exp(x)*Exp(-y) + x*x*y",
];

struct Case {
    inputs: Vec<Vec<f64>>,
}

impl Case {
    fn new() -> Case {
        let mut inputs = vec![random(3 * N, 11), random(3 * M, 12), random(2 * M, 13), random(6, 14), random(9, 15)];
        inputs.push(vec![0.7]);
        Case { inputs }
    }
    fn rows(k: usize) -> usize {
        [N, M, M, 1, 1, 1][k]
    }
    fn view<'a>(data: &'a [Vec<f64>], extra: Option<&'a [f64]>, e_rows: usize) -> Vec<Input<'a>> {
        let mut v: Vec<Input> = data
            .iter()
            .enumerate()
            .map(|(k, d)| Input { data: d, nrow: Case::rows(k), ncol: d.len() / Case::rows(k) })
            .collect();
        if let Some(e) = extra {
            v.push(Input { data: e, nrow: e_rows, ncol: e.len() / e_rows });
        }
        v
    }
}

fn options() -> RunOptions {
    RunOptions { precision: Precision::F64, backend: Backend::Cpu, ..Default::default() }
}

fn args(extra: &str) -> Vec<String> {
    let mut a: Vec<String> = ARGS.iter().map(|s| s.to_string()).collect();
    a.push(extra.to_string());
    a
}

/// Checks d/dv of sum_i <F_i, e_i> for the variable at `position` against finite differences.
fn check(formula: &str, case: &Case, position: usize, name: &str) {
    let forward = Operator::new(&format!("Sum_Reduction({formula}, 0)"), &args("e = Vi(1)")[..6]).unwrap();
    let dim = forward.formula.output_dim();
    let e = random(N * dim, 99);
    let objective = |inputs: &[Vec<f64>]| -> f64 {
        let out = forward.run(&Case::view(inputs, None, 0), &options()).unwrap();
        out.values.unwrap().iter().zip(&e).map(|(a, b)| a * b).sum()
    };
    // The gradient operator: i-variables and parameters reduce over j (axis 0), j-variables over i.
    let axis = if position == 1 || position == 2 { 1 } else { 0 };
    let text = format!("Sum_Reduction(Grad({formula}, {name}, e), {axis})");
    let grad = Operator::new(&text, &args(&format!("e = Vi({dim})"))).unwrap_or_else(|e| panic!("{text}: {e}"));
    let out = grad.run(&Case::view(&case.inputs, Some(&e), N), &options()).unwrap();
    let mut got = out.values.unwrap();
    let len = case.inputs[position].len();
    if position >= 3 {
        // A parameter: the gradient sums over the rows i.
        got = (0..len).map(|c| (0..N).map(|i| got[i + N * c]).sum()).collect();
    }
    assert_eq!(got.len(), len, "{text}");
    let h = 1e-6;
    for k in 0..len {
        let mut plus = case.inputs.clone();
        plus[position][k] += h;
        let mut minus = case.inputs.clone();
        minus[position][k] -= h;
        let fd = (objective(&plus) - objective(&minus)) / (2.0 * h);
        let err = (got[k] - fd).abs() / (1.0 + fd.abs());
        assert!(err < 1e-6, "{text}: component {k}: gradient {} vs finite differences {fd}", got[k]);
    }
}

#[test]
fn gradients_match_finite_differences() {
    let case = Case::new();
    for formula in FORMULAS {
        check(formula, &case, 0, "x");
        check(formula, &case, 1, "y");
        if formula.contains('b') {
            check(formula, &case, 2, "b");
        }
        for (position, name) in [(3, "A"), (4, "S"), (5, "p")] {
            if formula.contains(name) {
                check(formula, &case, position, name);
            }
        }
    }
}

#[test]
fn second_order_and_zero_gradients() {
    let case = Case::new();
    // The gradient of a gradient (Hessian-vector products): d/dx <Grad(F, x, e), e2>.
    check("Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", &case, 0, "x");
    check("Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", &case, 1, "y");
    check("Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", &case, 5, "p");
    check("Grad(SqDist(x,y)*(x|y), y, p)", &case, 0, "x");
    // A formula that does not depend on the variable has a zero gradient of its dimension.
    let grad = Operator::new("Sum_Reduction(Grad(Concat(y,y), x, e), 0)", &args("e = Vi(6)")).unwrap();
    let e = random(6 * N, 5);
    let out = grad.run(&Case::view(&case.inputs, Some(&e), N), &options()).unwrap();
    assert_eq!((out.nrow, out.dim), (N, 3));
    assert!(out.values.unwrap().iter().all(|&v| v == 0.0));
}

#[test]
fn gradient_of_the_gaussian_kernel_stays_small() {
    let text = "Sum_Reduction(Grad(Exp(-p*SqDist(x,y))*b, x, e), 0)";
    let op = Operator::new(text, &args("e = Vi(2)")).unwrap();
    let plan = engine::plan::Plan::new(&op.formula);
    let computed = plan.pair.len() + plan.inner.len() + plan.outer.len() + plan.constant.len();
    // The forward formula computes 6 nodes (Neg, Sub, SqNorm2, Mul, Exp, Mul); its gradient reuses 5
    // of them and adds 7 (the adjoint chain and the 2 of the square): 12, and nothing for zeros.
    assert_eq!(computed, 12, "the simplified gradient: {:?}", op.formula.graph.nodes);
}

/// Gradients of the other reductions, built from the forward results as `keops_grad()` builds them
/// in R (`r`: the reduction's result, `l`: its log-sum-exp; for selections `r` holds the 0-based
/// indices of the selected j and `jj` the index of each j), against finite differences.
#[test]
fn reductions_through_their_forward_results() {
    let case = Case::new();
    let f = "(-p*SqDist(x,y) + Elem(b, 0))";
    let g = "(b*b)";
    // (forward, its dimension per row, gradient weight or terms, K)
    let cases = [
        (format!("LogSumExp_Reduction({f}, 0)"), 1, format!("Grad({f}, V, e * Exp({f} - l))"), 1),
        (format!("Min_Reduction({f}, 0)"), 1, format!("Grad({f}, V, e * Equal(jj, r))"), 1),
        (format!("Max_Reduction({f}, 0)"), 1, format!("Grad({f}, V, e * Equal(jj, r))"), 1),
        (
            format!("SumSoftMaxWeight_Reduction({f}, {g}, 0)"),
            2,
            format!("Grad({g}, V, e * Exp({f} - l)) + Grad({f}, V, Exp({f} - l) * (e | {g} - r))"),
            1,
        ),
        (
            format!("LogSumExpWeight_Reduction({f}, {g}, 0)"),
            2,
            format!("Grad({f}, V, Sum(e * Exp({f} - r) * {g})) + Grad({g}, V, e * Exp({f} - r))"),
            1,
        ),
        (
            format!("KMin_Reduction({f}, 3, 0)"),
            1,
            format!(
                "Grad({f}, V, Elem(e, 0) * Equal(jj, Elem(r, 0)) + Elem(e, 1) * Equal(jj, Elem(r, 1)) + \
                 Elem(e, 2) * Equal(jj, Elem(r, 2)))"
            ),
            3,
        ),
    ];
    let lse = Operator::new(&format!("LogSumExp_Reduction({f}, 0)"), &args("e = Vi(1)")[..6]).unwrap();
    let l = lse.run(&Case::view(&case.inputs, None, 0), &options()).unwrap().values.unwrap();
    for (text, dim, terms, k) in cases {
        let forward = Operator::new(&text, &args("e = Vi(1)")[..6]).unwrap();
        let out = forward.run(&Case::view(&case.inputs, None, 0), &options()).unwrap();
        let selection = ["Min", "Max", "KMin"].iter().any(|s| text.starts_with(&format!("{s}_")));
        let r: Vec<f64> = if selection {
            let index_text =
                text.replacen("Min_", "ArgMin_", 1).replacen("Max_", "ArgMax_", 1).replacen("KArgMin_", "ArgKMin_", 1);
            let index_op = Operator::new(&index_text, &args("e = Vi(1)")[..6]).unwrap();
            let indices = index_op.run(&Case::view(&case.inputs, None, 0), &options()).unwrap().indices.unwrap();
            indices.iter().map(|&i| (i - 1) as f64).collect()
        } else {
            out.values.unwrap()
        };
        let jj: Vec<f64> = (0..M).map(|j| j as f64).collect();
        let e = random(N * dim * k, 98);
        let objective = |inputs: &[Vec<f64>]| -> f64 {
            let out = forward.run(&Case::view(inputs, None, 0), &options()).unwrap().values.unwrap();
            out.iter().zip(&e).map(|(a, b)| a * b).sum()
        };
        for (position, name, axis) in [(0, "x", 0), (1, "y", 1), (2, "b", 1), (5, "p", 0)] {
            let grad_text = format!("Sum_Reduction({}, {axis})", terms.replace('V', name));
            let mut a = args(&format!("e = Vi({})", dim * k));
            a.push(format!("r = Vi({})", dim * k));
            a.push("l = Vi(1)".into());
            a.push("jj = Vj(1)".into());
            let grad = Operator::new(&grad_text, &a).unwrap_or_else(|err| panic!("{grad_text}: {err}"));
            let mut inputs = Case::view(&case.inputs, Some(&e), N);
            inputs.push(Input { data: &r, nrow: N, ncol: dim * k });
            inputs.push(Input { data: &l, nrow: N, ncol: 1 });
            inputs.push(Input { data: &jj, nrow: M, ncol: 1 });
            let mut got = grad.run(&inputs, &options()).unwrap().values.unwrap();
            if position == 5 {
                got = vec![got.iter().sum()];
            }
            let h = 1e-6;
            for c in 0..case.inputs[position].len() {
                let (mut plus, mut minus) = (case.inputs.clone(), case.inputs.clone());
                plus[position][c] += h;
                minus[position][c] -= h;
                let fd = (objective(&plus) - objective(&minus)) / (2.0 * h);
                let err = (got[c] - fd).abs() / (1.0 + fd.abs());
                assert!(err < 1e-6, "{text} in {name}, component {c}: {} vs {fd}", got[c]);
            }
        }
    }
}

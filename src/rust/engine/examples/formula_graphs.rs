//! Prints, for a broad corpus of formulas, the lowered graph (`Formula`'s text, variables,
//! reduction and the graph's nodes, in Debug form) or the error's message and position: every
//! operation and reduction of the language (the lists of tests/gpu.rs, tests/autodiff.rs,
//! tests/fuzz.rs's seeds, the code generator's tests and kernel_list), `Grad(...)` of each in each
//! variable, second-order gradients, the gradient plans of the reductions, and a grid of every
//! function of the language with 0 to 3 arguments of several kinds (most of them invalid: the error
//! messages). A refactor of the lowering or of autodiff leaves this output byte-identical (issue
//! 36): `cargo run --example formula_graphs > a.txt` at two revisions, then `cmp`.
use engine::formula::gradient::{GradientOutput, GradientPlan};
use engine::formula::Formula;

#[path = "../tests/common/formulas.rs"]
mod formulas;
use formulas::{DIFFERENTIABLE, GPU_ARGS, GRADIENT_ARGS as AD_ARGS, OPERATIONS, REDUCTIONS, SEEDS};

/// Second-order and zero-gradient cases of tests/autodiff.rs, after `DIFFERENTIABLE`.
const AD_EXTRA: &[&str] = &["Grad(Exp(-p*SqDist(x,y))*b, x, b*b)", "Grad(SqDist(x,y)*(x|y), y, p)", "Concat(y,y)"];

/// Formulas of the code generator's tests and of examples/kernel_list.rs, with their arguments.
const KERNELS: &[(&str, &[&str])] = &[
    ("ArgKMin_Reduction(SqDist(Normalize(x), Normalize(y)), 10, 0)", &["x = Vi(10)", "y = Vj(10)"]),
    ("Sum_Reduction((y | x) * b, 1)", &["x = Vi(40)", "y = Vj(40)", "b = Vi(1)"]),
    ("Sum_Reduction(SqDist(x, p) * b, 0)", &["x = Vi(40)", "y = Vj(40)", "b = Vj(1)", "p = Pm(40)"]),
    ("LogSumExp_Reduction(-SqDist(Normalize(x), 2 * y), 1)", &["x = Vi(10)", "y = Vj(10)"]),
    ("LogSumExp_Reduction(-SqDist(x,y) / 2 + SqNorm2(Normalize(y)), 0)", &["x = Vi(64)", "y = Vj(64)"]),
    ("LogSumExp_Reduction(-SqDist(x,y), 0, 1.5 + b)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"]),
    ("LogSumExpWeight_Reduction(1000 - 3*SqDist(x,y), 1 + b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"]),
    ("SumSoftMaxWeight_Reduction(-SqDist(x,y), y, 0)", &["x = Vi(3)", "y = Vj(3)"]),
    ("Sum_Reduction(Grad(Exp(-SqDist(x,y))*b, x, s), 0)", KL_ALL),
    ("Sum_Reduction(Grad(SqDist(x,y)*(x|y), y, s), 1)", KL_ALL),
    (
        "Sum_Reduction(Abs(x) + Acos(y) + Asin(x) * Atan(y) - Cos(x) / Sin(y) + Exp(x) * Log(y) + Floor(x) + Sqrt(y) + Inv(x) + Square(y) + ReLU(x) + Rsqrt(y) + Sign(x) + Step(y) + SinXDivX(x) + XLogX(y) + Round(x, 0) + Round(y, 2) + Pow(x, 3) + Pow(y, -2) + ClampInt(y, -1, 2) + Minus(x), 0)",
        KL_ALL,
    ),
    (
        "Sum_Reduction(Concat(Atan2(x, y) + Powf(x, y) + Equal(x, y) + NotEqual(x, y) + LessThan(x, y) + LessOrEqual(x, y) + Clamp(x, y, x) + IfElse(x, y, x) + Mod(x, y, x) + x / p + x / s + y / 2 + x / y, Sum(x) + SqNorm2(y) + (x | y) + Max(x) + Min(y) + ArgMax(x) + ArgMin(y) + Elem(x, 1)), 0)",
        KL_ALL,
    ),
    (
        "Sum_Reduction(Concat(ElemT(b, 3, 1) + Extract(Concat(x, y), 2, 3) + ExtractT(b, 1, 3) + OneHot(b, 3) + SumT(b, 3) + MatVecMult(m, x) + VecMatMult(y, m), TensorProd(x, y)), 0)",
        KL_ALL,
    ),
];
const KL_ALL: &[&str] = &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "p = Pm(1)", "s = Vi(1)", "m = Vj(9)"];

/// Every function name of the language (and an unknown one, and a reduction inside a formula).
const NAMES: &[&str] = &[
    "Abs",
    "Acos",
    "Asin",
    "Atan",
    "Cos",
    "Sin",
    "Exp",
    "Log",
    "Floor",
    "Inv",
    "ReLU",
    "Rsqrt",
    "Sign",
    "SinXDivX",
    "Sqrt",
    "Square",
    "Step",
    "XLogX",
    "Minus",
    "Add",
    "Subtract",
    "Mult",
    "Divide",
    "Atan2",
    "Powf",
    "Equal",
    "NotEqual",
    "LessThan",
    "LessOrEqual",
    "Clamp",
    "IfElse",
    "Mod",
    "Sum",
    "SqNorm2",
    "Max",
    "Min",
    "ArgMax",
    "ArgMin",
    "Var",
    "Grad",
    "IntCst",
    "Pow",
    "Round",
    "ClampInt",
    "Norm2",
    "Normalize",
    "SqDist",
    "SqNormIso",
    "SqNormDiag",
    "SymSqNorm",
    "WeightedSqNorm",
    "WeightedSqDist",
    "Elem",
    "ElemT",
    "Extract",
    "ExtractT",
    "Concat",
    "OneHot",
    "SumT",
    "MatVecMult",
    "VecMatMult",
    "TensorProd",
    "Sum_Reduction",
    "Foo",
];

/// Arguments of the grid: vectors of dimension 3, 1, 9 (a variable and an expression), integers
/// (in and out of range), a negative one, a float, an unknown name.
const GRID_ARGS: &[&str] = &["x", "u", "S", "x-y", "2", "-1", "0.5", "1000000", "z"];

fn strings(args: &[&str]) -> Vec<String> {
    args.iter().map(|s| s.to_string()).collect()
}

/// Prints the formula lowered from `text` (or the error), and returns it.
fn show(text: &str, args: &[String]) -> Option<Formula> {
    println!("== {text} {args:?}");
    match Formula::parse(text, args) {
        Ok(f) => {
            // (not the graph's hash index, printed in no fixed order: it is derived from the nodes)
            println!("text: {:?}\nvariables: {:?}\nreduction: {:?}", f.text, f.variables, f.reduction);
            for (id, node) in f.graph.nodes.iter().enumerate() {
                println!("{id}: {node:?}");
            }
            Some(f)
        }
        Err(e) => {
            println!("error: {e}\n{e:?}");
            None
        }
    }
}

/// The names of the declared variables of `args` (`"x = Vi(3)"` -> `x`).
fn names(args: &[&str]) -> Vec<String> {
    args.iter().map(|a| a.split('=').next().unwrap().trim().to_string()).collect()
}

/// `body` in a Sum reduction, then `Grad(body, v, e)` in each variable v, then
/// `Grad(Grad(body, v, e), v2, e2)` in each pair when `second`.
fn with_gradients(body: &str, args: &[&str], second: bool) {
    let args_s = strings(args);
    let Some(f) = show(&format!("Sum_Reduction({body}, 0)"), &args_s) else { return };
    let dim = f.output_dim();
    for v in names(args) {
        let mut a = args_s.clone();
        a.push(format!("e = Vi({dim})"));
        let grad = format!("Grad({body}, {v}, e)");
        let Some(g) = show(&format!("Sum_Reduction({grad}, 0)"), &a) else { continue };
        if !second {
            continue;
        }
        let gdim = g.output_dim();
        for v2 in names(args) {
            let mut a2 = a.clone();
            a2.push(format!("e2 = Vi({gdim})"));
            show(&format!("Sum_Reduction(Grad({grad}, {v2}, e2), 1)"), &a2);
        }
    }
}

/// The gradient plan of `text` in each variable: its Debug form, and its output's formula lowered.
fn plans(text: &str, args: &[&str]) {
    let args_s = strings(args);
    for v in 0..args.len() {
        println!("== plan of {text} in {v}");
        match GradientPlan::of_variable(text, &args_s, v) {
            Ok(plan) => {
                println!("{plan:?}");
                if let GradientOutput::Formula { formula, args, .. } = &plan.output {
                    show(formula, args);
                }
            }
            Err(e) => println!("error: {e}\n{e:?}"),
        }
    }
}

fn main() {
    let gpu = strings(&GPU_ARGS);
    for op in OPERATIONS {
        for axis in ["0", "1"] {
            show(&format!("Sum_Reduction({op}, {axis})"), &gpu);
        }
        with_gradients(op, &GPU_ARGS, true);
    }
    for r in REDUCTIONS {
        for axis in ["0", "1"] {
            let text = r.replace("AXIS", axis);
            show(&text, &gpu);
            plans(&text, &GPU_ARGS);
        }
    }
    for f in DIFFERENTIABLE.iter().chain(AD_EXTRA) {
        with_gradients(f, &AD_ARGS, true);
    }
    // Third order, and gradients of every reduction (tests/autodiff.rs's templates).
    with_gradients("Grad(Grad(Exp(-p*SqDist(x,y))*b, x, b), y, x)", &AD_ARGS, true);
    with_gradients("Pow(x*y, 1) + Pow(x, 2) + Pow(y, 0) + Pow(x, -1)", &AD_ARGS, true);
    let (f, v, g) = (
        "-p*SqDist(x,y) + Elem(b, 0) + Elem(A, 1)",
        "x*Extract(A, 0, 3) - y + Elem(b, 1)",
        "b*b + Elem(x, 1)*Elem(S, 2)",
    );
    let templates = [
        "Sum_Reduction(Exp(-p*SqDist(x,y))*b*Elem(S, 0), AXIS)".to_string(),
        format!("LogSumExp_Reduction({f}, AXIS)"),
        format!("LogSumExp_Reduction({f}, AXIS, {g})"),
        format!("LogSumExpWeight_Reduction({f}, {g}, AXIS)"),
        format!("SumSoftMaxWeight_Reduction({f}, {g}, AXIS)"),
        format!("Min_Reduction({v}, AXIS)"),
        format!("Max_Reduction({v}, AXIS)"),
        format!("Min_ArgMin_Reduction({v}, AXIS)"),
        format!("Max_ArgMax_Reduction({v}, AXIS)"),
        format!("KMin_Reduction({v}, 3, AXIS)"),
        format!("KMin_ArgKMin_Reduction({v}, 3, AXIS)"),
        format!("ArgMin_Reduction({v}, AXIS)"),
        format!("ArgKMin_Reduction({v}, 3, AXIS)"),
    ];
    for axis in ["0", "1"] {
        for t in &templates {
            let text = t.replace("AXIS", axis);
            show(&text, &strings(&AD_ARGS));
            plans(&text, &AD_ARGS);
        }
    }
    for (text, args) in SEEDS.iter().chain(KERNELS) {
        show(text, &strings(args));
    }
    for (text, args) in SEEDS {
        plans(text, args);
    }
    invalid();
    grid();
}

/// Formulas with errors of every kind the lowering reports, some nested (their positions).
fn invalid() {
    let args = strings(&GPU_ARGS);
    for body in [
        "x + b",
        "x * Elem(b, 1) + (x | b)",
        "Exp(x) - Concat(x, x)",
        "Exp(Log(Elem(x, 5)))",
        "Pow(x, 3000000000)",
        "Pow(x, y)",
        "Round(x, 301)",
        "Round(x, -301)",
        "Round(x, 1.5)",
        "ElemT(x, 3, 1)",
        "ElemT(u, 3, 3)",
        "ElemT(u, 0, 0)",
        "Extract(x, 2, 2)",
        "Extract(x, -1, 2)",
        "ExtractT(x, 1, 3)",
        "Concat(Concat(S, S), Concat(Concat(S, S), S))",
        "TensorProd(TensorProd(S, S), TensorProd(S, S))",
        "TensorProd(S, S)",
        "Concat(Var(9, 1048576, 2), x)",
        "TensorProd(Var(9, 2000, 2), Var(10, 1000, 2))",
        "OneHot(u, 2000000)",
        "ExtractT(x, 0, 1048576)",
        "OneHot(x, 3)",
        "OneHot(u, 0)",
        "SumT(x, 3)",
        "MatVecMult(A, x)",
        "VecMatMult(x, S)",
        "MatVecMult(S, x)",
        "SqNormIso(x, x)",
        "SqNormDiag(u, x)",
        "SymSqNorm(x, x)",
        "WeightedSqNorm(b, x)",
        "WeightedSqDist(S, x, b)",
        "WeightedSqDist(x, x, y)",
        "SqDist(x, b)",
        "Clamp(x, b, y)",
        "IfElse(b, x, y)",
        "Grad(x, x + y, x)",
        "Grad(x, x, u + b)",
        "Grad(x, z, x)",
        "Grad(Elem(x, 0), y, u)",
        "Grad(x, y, x)",
        "Grad(x*y, 2, x)",
        "Var(9, 2, 0)",
        "Var(0, 3, 1)",
        "Var(0, 2, 0)",
        "Var(1, 3, 3)",
        "Var(1, 3)",
        "Var(x, 3, 0)",
        "Var(20, 0, 0)",
        "IntCst(x)",
        "IntCst(--3)",
        "ClampInt(x, 0.5, 2)",
        "Exp(Sum_Reduction(x, 0))",
        "Foo(x) + Bar(y)",
        "z + x",
        "Exp()",
        "Exp(x, y)",
        "x + Sqrt(Elem(x, 3))",
    ] {
        for axis in ["0", "1"] {
            show(&format!("Sum_Reduction({body}, {axis})"), &args);
        }
    }
    for text in [
        "Exp(x)",
        "Sum_Reduction(x, 2)",
        "Sum_Reduction(x)",
        "KMin_Reduction(x, 0, 0)",
        "KMin_Reduction(x, y, 0)",
        "KMin_Reduction(x, 99999999999999999999, 0)",
        "LogSumExp_Reduction(b, 0)",
        "Sum_Reduction(Var(12, 1, 0), 0)",
        "Grad(LogSumExp_Reduction(Elem(x, 0), 0), x, u)",
    ] {
        show(text, &args);
    }
    show("Sum_Reduction(Var(0, 2, 0) + Var(1, 2, 1), 0)", &[]);
    show("Sum_Reduction(x, 0)", &[]);
}

/// Every function of the language with 0 to 3 arguments from GRID_ARGS (most of them invalid),
/// and the gradients in x and u of those that lower.
fn grid() {
    let args = strings(&GPU_ARGS);
    let mut lists: Vec<Vec<&str>> = vec![vec![]];
    for n in 1..=3 {
        let mut next = vec![];
        for l in lists.iter().filter(|l| l.len() == n - 1) {
            for a in GRID_ARGS {
                let mut l = l.clone();
                l.push(a);
                next.push(l);
            }
        }
        lists.extend(next);
    }
    for name in NAMES {
        for list in &lists {
            let body = format!("{name}({})", list.join(", "));
            let Some(f) = show(&format!("Sum_Reduction({body}, 0)"), &args) else { continue };
            let mut a = args.clone();
            a.push(format!("e = Vi({})", f.output_dim()));
            for v in ["x", "u", "S"] {
                show(&format!("Sum_Reduction(Grad({body}, {v}, e), 0)"), &a);
            }
        }
    }
    // Four arguments.
    for name in ["Var", "Grad", "ElemT", "Clamp", "Exp", "Extract"] {
        show(&format!("Sum_Reduction({name}(x, 1, 2, 0), 0)"), &args);
    }
}

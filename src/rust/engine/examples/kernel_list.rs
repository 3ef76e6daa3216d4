//! Prints the generated CUDA of a fixed list of kernels (Gaussian sum, log-sum-exp, 10-NN in D = 3
//! and 100, Max_ArgMax, ranged, float16, tensor cores; then every other reduction and sum scheme,
//! axis 1, float64, gradients, every operation of the code generator, wide variables, hoisted terms,
//! the other tensor-core paths): a refactor of the code generator leaves this output byte-identical
//! (issue 36). `cargo run --example kernel_list > a.txt` at two revisions, then `cmp`.
use engine::cuda::codegen::{generate_variant, KernelOptions, Selection, Variant};
use engine::cuda::dtype::Dtype;
use engine::formula::Formula;
use engine::SumScheme;

fn main() {
    let cases: &[(&str, &[&str], Variant, Selection, Dtype)] = &[
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"], Variant::Dense, Selection::Local, Dtype::F32),
        ("LogSumExp_Reduction(b - SqDist(x,y), 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"], Variant::Dense, Selection::Local, Dtype::F32),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(3)", "y = Vj(3)"], Variant::Dense, Selection::Local, Dtype::F32),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(3)", "y = Vj(3)"], Variant::Dense, Selection::Registers, Dtype::F32),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(100)", "y = Vj(100)"], Variant::Dense, Selection::Local, Dtype::F32),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(100)", "y = Vj(100)"], Variant::DotTiles, Selection::Local, Dtype::F32),
        ("Max_ArgMax_Reduction(x*y, 1)", &["x = Vi(2)", "y = Vj(2)"], Variant::Dense, Selection::Local, Dtype::F64),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"], Variant::Ranged, Selection::Local, Dtype::F32),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"], Variant::RangedNarrow, Selection::Local, Dtype::F16),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(64)", "y = Vj(64)", "b = Vj(1)"], Variant::DotTiles, Selection::Local, Dtype::F32),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(784)", "y = Vj(784)", "b = Vj(1)"], Variant::StreamedDotTiles, Selection::Local, Dtype::F32),
    ];
    for (text, args, variant, selection, dtype) in cases {
        print_kernel(text, args, *variant, *selection, *dtype, SumScheme::Auto, "");
    }
    for (text, args, variant, selection, dtype, scheme) in more_cases() {
        print_kernel(text, args, variant, selection, dtype, scheme, &format!(" {scheme:?}"));
    }
}

/// (The first cases print no scheme: their lines are those of the first version of this list.)
fn print_kernel(text: &str, args: &[&str], variant: Variant, selection: Selection, dtype: Dtype, scheme: SumScheme, shown: &str) {
    let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
    let f = Formula::parse(text, &args).unwrap();
    let k = generate_variant(&f, &KernelOptions::new(dtype, scheme, variant, selection));
    println!("==== {text} {args:?} {variant:?} {selection:?} {dtype:?}{shown} tile={} rows={}\n{}", k.tile, k.rows, k.source);
}

type Case = (&'static str, &'static [&'static str], Variant, Selection, Dtype, SumScheme);

/// The other reductions and sum schemes, axis 1, float64 and float16, gradients, every operation,
/// wide variables (no shared tile), hoisted terms of the reduced index, numbers and divisions by
/// fixed values, the other tensor-core paths (a dot product, a streamed distance, axis 1).
fn more_cases() -> Vec<Case> {
    use Dtype::*;
    use Selection::*;
    use SumScheme::*;
    use Variant::*;
    const XYB: &[&str] = &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)"];
    const XY: &[&str] = &["x = Vi(3)", "y = Vj(3)"];
    const ALL: &[&str] = &["x = Vi(3)", "y = Vj(3)", "b = Vj(1)", "p = Pm(1)", "s = Vi(1)", "m = Vj(9)"];
    vec![
        ("LogSumExp_Reduction(-SqDist(x,y), 0, 1.5 + b)", XYB, Dense, Local, F32, Auto),
        ("LogSumExpWeight_Reduction(1000 - 3*SqDist(x,y), 1 + b, 0)", XYB, Dense, Local, F32, Auto),
        ("SumSoftMaxWeight_Reduction(-SqDist(x,y), y, 0)", XY, Dense, Local, F32, Auto),
        ("SumSoftMaxWeight_Reduction(-SqDist(x,y), b, 1)", XYB, Dense, Local, F64, Auto),
        ("KMin_ArgKMin_Reduction(SqDist(x,y), 5, 0)", XY, Dense, Registers, F32, Auto),
        ("KMin_ArgKMin_Reduction(x - y, 3, 1)", XY, Dense, Registers, F64, Auto),
        ("KMin_Reduction(SqDist(x,y), 4, 0)", XY, Dense, Local, F32, Auto),
        ("Min_Reduction(SqDist(x,y), 0)", XY, Dense, Local, F32, Auto),
        ("ArgMin_Reduction(x - y, 1)", XY, Dense, Registers, F32, Auto),
        ("Min_ArgMin_Reduction(SqDist(x,y), 0)", XY, Dense, Local, F16, Auto),
        ("Max_Reduction(x * y, 0)", XY, Dense, Local, F32, Auto),
        ("ArgMax_Reduction(x * y, 0)", XY, Ranged, Local, F32, Auto),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", XYB, Dense, Local, F32, KahanScheme),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 1)", XYB, Dense, Local, F32, DirectSum),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 1)", XYB, Dense, Local, F64, BlockSum),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", XYB, RangedNarrow, Local, F32, KahanScheme),
        ("Sum_Reduction(Grad(Exp(-SqDist(x,y))*b, x, s), 0)", ALL, Dense, Local, F32, Auto),
        ("Sum_Reduction(Grad(SqDist(x,y)*(x|y), y, s), 1)", ALL, Dense, Local, F64, Auto),
        (
            "Sum_Reduction(Abs(x) + Acos(y) + Asin(x) * Atan(y) - Cos(x) / Sin(y) + Exp(x) * Log(y) + Floor(x) + Sqrt(y) + Inv(x) + Square(y) + ReLU(x) + Rsqrt(y) + Sign(x) + Step(y) + SinXDivX(x) + XLogX(y) + Round(x, 0) + Round(y, 2) + Pow(x, 3) + Pow(y, -2) + ClampInt(y, -1, 2) + Minus(x), 0)",
            ALL, Dense, Local, F32, Auto,
        ),
        (
            "Sum_Reduction(Concat(Atan2(x, y) + Powf(x, y) + Equal(x, y) + NotEqual(x, y) + LessThan(x, y) + LessOrEqual(x, y) + Clamp(x, y, x) + IfElse(x, y, x) + Mod(x, y, x) + x / p + x / s + y / 2 + x / y, Sum(x) + SqNorm2(y) + (x | y) + Max(x) + Min(y) + ArgMax(x) + ArgMin(y) + Elem(x, 1)), 0)",
            ALL, Dense, Local, F64, Auto,
        ),
        (
            "Sum_Reduction(Concat(ElemT(b, 3, 1) + Extract(Concat(x, y), 2, 3) + ExtractT(b, 1, 3) + OneHot(b, 3) + SumT(b, 3) + MatVecMult(m, x) + VecMatMult(y, m), TensorProd(x, y)), 0)",
            ALL, Dense, Local, F16, Auto,
        ),
        ("ArgKMin_Reduction(SqDist(Normalize(x), Normalize(y)), 10, 0)", &["x = Vi(10)", "y = Vj(10)"], Dense, Local, F32, Auto),
        ("LogSumExp_Reduction(-SqDist(Normalize(x), 2 * y), 1)", &["x = Vi(10)", "y = Vj(10)"], Ranged, Local, F32, Auto),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(1000)", "y = Vj(1000)", "b = Vj(1)"], Dense, Local, F32, Auto),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 1)", &["x = Vi(300)", "y = Vj(300)"], Dense, Local, F64, Auto),
        ("Sum_Reduction((y | x) * b, 1)", &["x = Vi(40)", "y = Vj(40)", "b = Vi(1)"], DotTiles, Local, F32, Auto),
        ("Sum_Reduction((x | y) * b, 0)", &["x = Vi(200)", "y = Vj(200)", "b = Vj(1)"], DotTiles, Local, F32, Auto),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(784)", "y = Vj(784)"], StreamedDotTiles, Registers, F32, Auto),
        ("ArgKMin_Reduction(SqDist(x,y), 10, 0)", &["x = Vi(40)", "y = Vj(40)"], StreamedDotTiles, Local, F32, Auto),
        ("LogSumExp_Reduction(-SqDist(x,y) / 2 + SqNorm2(Normalize(y)), 0)", &["x = Vi(64)", "y = Vj(64)"], DotTiles, Local, F32, Auto),
        ("Sum_Reduction(Exp(-SqDist(x,y))*b, 0)", &["x = Vi(64)", "y = Vj(64)", "b = Vj(1)"], DotTiles, Local, F32, KahanScheme),
    ]
}

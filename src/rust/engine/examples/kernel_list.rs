//! Prints the generated CUDA of a fixed list of kernels (Gaussian sum, log-sum-exp, 10-NN in D = 3
//! and 100, Max_ArgMax, ranged, float16, tensor cores): a refactor of the code generator leaves this
//! output byte-identical (issue 36). `cargo run --example kernel_list > a.txt` at two revisions, then
//! `cmp`.
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
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let f = Formula::parse(text, &args).unwrap();
        let k = generate_variant(&f, &KernelOptions::new(*dtype, SumScheme::Auto, *variant, *selection));
        println!("==== {text} {args:?} {variant:?} {selection:?} {dtype:?} tile={} rows={}\n{}", k.tile, k.rows, k.source);
    }
}

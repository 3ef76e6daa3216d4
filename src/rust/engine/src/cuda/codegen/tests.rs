//! The code generator's tests: the choice of a selection's storage, sifted selections, log-sum-exp
//! groups, terms of one index hoisted, tensor-core dots.

use super::Selection;
use crate::formula::Formula;
use crate::ranges::Ranges;
use crate::tuning::SelectionOverride;

#[test]
fn selections_go_to_registers_on_short_reduced_ranges_only() {
    let args = ["x = Vi(3)".to_string(), "y = Vj(3)".to_string()];
    let knn = |k: usize| Formula::parse(&format!("ArgKMin_Reduction(SqDist(x, y), {k}, 0)"), &args).unwrap();
    assert_eq!(Selection::for_rows(&knn(40), 2048.0, None), Selection::Registers);
    assert_eq!(Selection::for_rows(&knn(10), 1e6, None), Selection::Filtered);
    // Too many values for registers: sifted; a reduction that selects nothing; selections of
    // several components (not sifted), and forced choices.
    assert_eq!(Selection::for_rows(&knn(100), 2048.0, None), Selection::Filtered);
    let sum = Formula::parse("Sum_Reduction(SqDist(x, y), 0)", &args).unwrap();
    assert_eq!(Selection::for_rows(&sum, 10.0, None), Selection::Local);
    let wide = Formula::parse("KMin_Reduction(x - y, 3, 0)", &args).unwrap();
    assert_eq!(Selection::for_rows(&wide, 1e6, None), Selection::Local);
    assert_eq!(Selection::for_rows(&wide, 1e6, Some(SelectionOverride::Filtered)), Selection::Local);
    assert_eq!(Selection::for_rows(&knn(10), 1e6, Some(SelectionOverride::Local)), Selection::Local);
    assert_eq!(Selection::for_rows(&knn(10), 1e6, Some(SelectionOverride::Registers)), Selection::Registers);
    assert_eq!(Selection::for_rows(&knn(10), 100.0, Some(SelectionOverride::Filtered)), Selection::Filtered);
    // Nearest neighbours in 8 to 15 dimensions keep their lists in registers.
    let args10 = ["x = Vi(10)".to_string(), "y = Vj(10)".to_string()];
    let knn10 = Formula::parse("ArgKMin_Reduction(SqDist(x, y), 10, 0)", &args10).unwrap();
    assert_eq!(Selection::for_rows(&knn10, 1e6, None), Selection::FilteredRegisters);
    assert_eq!(Selection::for_rows(&knn10, 1e6, Some(SelectionOverride::Filtered)), Selection::Filtered);
    // Two blocks of 2 and 3 rows against 10 and 4 reduced rows: (2 * 10 + 3 * 4) / 5.
    let ranges = Ranges::from_block_pairs(&[0..2, 2..5], &[0..10, 10..14], &[(0, 0), (1, 1)]).unwrap();
    assert!((ranges.i.mean_reduced() - 6.4).abs() < 1e-12);
}

/// Sifted selections: nearest neighbours (either axis, float32 and float16 storage) sifted
/// with the expanded distance of centred points, other minima and maxima (and float64) with
/// their own value; candidates marked by a predicated OR, inserted by one function (lists in
/// local memory) or by the network of selects (lists in registers).
#[test]
fn sifted_selections_mark_candidates_then_insert_them() {
    use super::{generate_variant, KernelOptions, Variant};
    use crate::cuda::dtype::Dtype;
    use crate::reduction::SumScheme;
    let args = ["x = Vi(3)".to_string(), "y = Vj(3)".to_string(), "b = Vj(1)".to_string()];
    let source = |text: &str, dtype: Dtype, selection: Selection| {
        let f = Formula::parse(text, &args).unwrap();
        generate_variant(&f, &KernelOptions::new(dtype, SumScheme::Auto, Variant::Dense, selection)).source
    };
    for (text, dtype) in [
        ("ArgKMin_Reduction(SqDist(x, y), 10, 0)", Dtype::F32),
        ("KMin_ArgKMin_Reduction(SqDist(y, x), 4, 1)", Dtype::F32),
        ("Min_ArgMin_Reduction(SqDist(x, y), 0)", Dtype::F16),
    ] {
        let src = source(text, dtype, Selection::Filtered);
        let (_, kernel) = src.split_once("void __launch_bounds__").unwrap();
        assert!(
            src.contains("__device__ __noinline__ T rk_insert(") && src.contains("rk_sift_threshold(float worst"),
            "{src}"
        );
        assert!(
            kernel.contains("rk_yc[k * TILE + threadIdx.x] = v;") && kernel.contains("rk_ny[threadIdx.x] ="),
            "{text}: {kernel}"
        );
        assert!(kernel.contains("e = fmaf(a_0[k], yv[k], e); rk_mark(bits_0, e, thr_0, 1u << ji);"), "{text}: {kernel}");
        assert!(kernel.contains("thr_3 = rk_insert(best_3, best_j_3, v"), "{kernel}");
        // The insertion is not written out in the kernel, and no pair is computed in full before
        // it is marked.
        assert!(!kernel.contains("while (p > 0") && !kernel.contains("bool c0"), "{kernel}");
        let (sift, insert) = kernel.split_once("mask_0 &= valid;").unwrap();
        assert!(!sift.contains("SqNorm2") && insert.contains("SqNorm2"), "{kernel}");
        // Lists in registers: the network in the kernel, no function.
        let src = source(text, dtype, Selection::FilteredRegisters);
        let (_, insert) = src.split_once("mask_0 &= valid;").unwrap();
        assert!(!src.contains("rk_insert") && insert.contains("bool c0"), "{src}");
        assert!(insert.contains("thr_0 = rk_sift_threshold(best_0["), "{src}");
    }
    for (text, dtype, compare) in [
        ("Max_ArgMax_Reduction(SqDist(x, y), 0)", Dtype::F32, "setp.le.f32"),
        ("ArgKMin_Reduction(SqDist(x, y) * b, 3, 0)", Dtype::F32, "setp.ge.f32"),
        ("ArgKMin_Reduction(SqDist(x, y), 3, 0)", Dtype::F64, "setp.ge.f64"),
    ] {
        let src = source(text, dtype, Selection::Filtered);
        assert!(src.contains(compare) && !src.contains("rk_ny"), "{text}: {src}");
        assert!(src.contains("{ return full ? worst : __int_as_float(0x7fc00000); }"), "{text}: {src}");
        assert!(
            src.contains("rk_mark(bits_0, v") && src.contains("thr_0 = rk_insert(best_0, best_j_0, v"),
            "{text}: {src}"
        );
    }
}

/// Log-sum-exp reductions add a group's terms without a test, then take the group again with
/// the exact online step where a term was too large; the end of a tile takes the exact step.
#[test]
fn log_sum_exps_take_groups_of_terms_then_check_them() {
    use super::{generate_variant, KernelOptions, Variant};
    use crate::cuda::dtype::Dtype;
    use crate::reduction::SumScheme;
    let args = ["x = Vi(3)".to_string(), "y = Vj(3)".to_string(), "b = Vj(2)".to_string()];
    let source = |text: &str| {
        let f = Formula::parse(text, &args).unwrap();
        generate_variant(&f, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local)).source
    };
    let src = source("LogSumExp_Reduction(-SqDist(x, y), 0)");
    let (group, checks) = src.split_once("if (!(gs_0[0] <= (T)32 * (T)2981)) {").expect("a check of the group");
    // (float: log2(e) folded into one multiply-add with the reference's product, at least -RK_MAX)
    assert!(group.contains("const T mtl_0 = fmaxf(mt_0 * 1.4426950408889634f, -RK_MAX);"), "{group}");
    assert!(
        group.contains("{ T e = rk_ex2_ftz(fmaf(v4_0[0], 1.4426950408889634f, -mtl_0)); gs_0[0] += e; }"),
        "{group}"
    );
    assert!(!group.split_once("for (int jb = 0; jb < 32; jb++)").unwrap().1.contains("RK_LAZY"), "{group}");
    assert!(checks.contains("if (dx <= (T)RK_LAZY)") && checks.contains("ts_0[k] += gs_0[k];"), "{checks}");
    assert!(checks.contains("for (int jb = 0; jb < len - g0; jb++)"), "{checks}");
    // Weights: their sums too; without the plain sum, the largest exponent is checked.
    let src = source("SumSoftMaxWeight_Reduction(-SqDist(x, y), b, 0)");
    assert!(src.contains("gs_0[0] += e; gs_0[1] = fmaf(e, v") && src.contains("gs_0[2] = fmaf(e, v"), "{src}");
    // More than 4 weights: a loop (written out, the fast build's source was 5 x longer).
    let src = source("SumSoftMaxWeight_Reduction(-SqDist(x, y), Concat(y, b), 0)");
    assert!(src.contains("_Pragma(\"unroll\") for (int c = 0; c < 5; c++) gs_0[1 + c] = fmaf(e, v"), "{src}");
    let src = source("LogSumExpWeight_Reduction(-SqDist(x, y), b, 0)");
    assert!(src.contains("T e = rk_exp(dx); gs_0[0] = fmaf(e, v") && src.contains("gm_0 = fmaxf(gm_0, dx);"), "{src}");
    assert!(!src.contains("mtl_0"), "{src}");
    // The exponential that keeps subnormal results squares that of half the exponent.
    assert!(src.contains("const float y = rk_ex2_ftz(x * 0.7213475204444817f); return y * y; }"), "{src}");
    assert!(src.contains("if (!(gm_0 <= (T)RK_LAZY)) {"), "{src}");
    assert!(src.contains("#pragma unroll\n      for (int jb = 0; jb < 32; jb++)"), "small pairs: groups unrolled whole");
}

/// A log-sum-exp whose pairs are long (D = 64) unrolls its groups `unroll` times and its exact step
/// not at all (NVRTC took seconds on 32 copies of the pair); `group_work` decides where.
#[test]
fn long_pairs_of_log_sum_exps_unroll_their_groups_less() {
    use super::{generate_variant, KernelOptions, Variant};
    use crate::cuda::dtype::Dtype;
    use crate::reduction::SumScheme;
    let args = ["x = Vi(64)".to_string(), "y = Vj(64)".to_string(), "b = Vj(1)".to_string()];
    let f = Formula::parse("LogSumExp_Reduction(b - SqDist(x, y), 0)", &args).unwrap();
    let options = KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local);
    let src = generate_variant(&f, &options).source;
    assert!(src.contains("#pragma unroll 4\n      for (int jb = 0; jb < 32; jb++)"), "{src}");
    assert!(src.contains("#pragma unroll 1\n      for (int jb = 0; jb < 32; jb++)"), "{src}");
    let whole = generate_variant(&f, &KernelOptions { group_work: 1 << 20, ..options }).source;
    assert!(whole.contains("#pragma unroll\n      for (int jb = 0; jb < 32; jb++)") && !whole.contains("#pragma unroll 1\n"), "{whole}");
    // On the tensor cores, the recheck of close pairs is a call in the 32 copies of a pair of a
    // log-sum-exp, inlined in the 4 of a sum.
    let dots = |text: &str| {
        let f = Formula::parse(text, &args).unwrap();
        generate_variant(&f, &KernelOptions { variant: Variant::DotTiles, ..options }).source
    };
    assert!(dots("LogSumExp_Reduction(b - SqDist(x, y), 0)").contains("__device__ __noinline__ float rk_sqdist("));
    assert!(dots("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)").contains("__device__ __forceinline__ float rk_sqdist("));
}

/// Terms of the reduced index alone are computed where the tile is loaded, once per index, and
/// the pairs read them from the tile; the rows' terms stay out of the loop too.
/// Kernels are compiled without contraction (`builds::BASE_OPTIONS`): each product added where
/// the compiler fused one is a written `fma`, in both precisions, so that the fast and optimised
/// builds compute the same bits at the optimised build's speed.
#[test]
fn products_added_are_written_fused() {
    use super::{generate_variant, KernelOptions, Variant};
    use crate::cuda::dtype::Dtype;
    use crate::reduction::SumScheme;
    let args = ["x = Vi(3)".to_string(), "y = Vj(3)".to_string(), "b = Vj(1)".to_string()];
    let text = "Sum_Reduction((b - (x | y) * 2.5) * Exp(-SqDist(x, y)) + MatVecMult(y * y, b), 0)";
    let f = Formula::parse(text, &args).unwrap();
    let source = |dtype| generate_variant(&f, &KernelOptions::new(dtype, SumScheme::Auto, Variant::Dense, Selection::Local)).source;
    let (float, double) = (source(Dtype::F32), source(Dtype::F64));
    let (load, pairs) = float.split_once("for (int jj = 0; jj < len; jj++)").expect("a loop over the tile");
    // Dot, SqNorm2, a difference with a product on its right, an Add of a product, and
    // MatVecMult (a term of the index alone, in the tile's load).
    for fused in [
        "v3_0[0] = fmaf(v1_0[k], v2[k], v3_0[0]);",
        "v8_0[0] = fmaf(v7_0[k], v7_0[k], v8_0[0]);",
        "v6_0[k] = fmaf(-v3_0[0], v4[0], v0[0]);",
        "v14_0[k] = fmaf(v6_0[0], v10_0[0], v13[k]);",
    ] {
        assert!(pairs.contains(fused), "{fused}: {pairs}");
    }
    assert!(load.contains("v13[k] = fmaf(v12[k + 3 * l], v0[0], v13[k]);"), "{load}");
    assert!(double.contains("v3_0[0] = fma(v1_0[k], v2[k], v3_0[0]);") && !double.contains("fmaf("), "{double}");
    // The sum of products accumulates fused.
    let dot = Formula::parse("Sum_Reduction(b * x, 0)", &args).unwrap();
    let src = generate_variant(&dot, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local)).source;
    assert!(src.contains("part_0[k] = fmaf(v0[0], v1_0[k], part_0[k]);"), "{src}");
    // A product of the reduced index alone is read from the tile, without its factors.
    let inner = Formula::parse("Sum_Reduction(b * y, 0)", &args).unwrap();
    let src = generate_variant(&inner, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local)).source;
    assert!(src.contains("part_0[k] = part_0[k] + v2[k];"), "{src}");
}

#[test]
fn terms_of_one_index_are_computed_once_per_index() {
    use super::{generate_variant, KernelOptions, Variant};
    use crate::cuda::dtype::Dtype;
    use crate::reduction::SumScheme;
    let args = ["x = Vi(10)".to_string(), "y = Vj(10)".to_string()];
    let cosine = Formula::parse("ArgKMin_Reduction(SqDist(Normalize(x), Normalize(y)), 10, 0)", &args).unwrap();
    let source = |f: &Formula| {
        generate_variant(f, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local)).source
    };
    let src = source(&cosine);
    let (load, pairs) = src.split_once("for (int jj = 0; jj < len; jj++)").expect("a loop over the tile");
    // Normalize's Rsqrt for x before the loop, for y in the tile load, never per pair.
    assert_eq!(pairs.matches("Rsqrt").count(), 0, "{pairs}");
    assert!(load.matches("Rsqrt").count() >= 2, "{load}");
    assert!(load.contains("__shared__ T tile[TILE * 10]"), "{load}");
    // Without such terms, the tile holds the inputs, read in the loop as before.
    let gauss = Formula::parse("Sum_Reduction(Exp(-SqDist(x, y)), 0)", &args).unwrap();
    let (_, pairs) = source(&gauss)
        .split_once("for (int jj = 0; jj < len; jj++)")
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .unwrap();
    assert!(pairs.contains("= tile[(0 + k) * TILE + jj]"), "{pairs}");
}

#[test]
fn large_dot_products_go_to_the_tensor_cores() {
    use super::{generate_variant, KernelOptions, Variant};
    use crate::cuda::dot_tiles::DotTile;
    use crate::cuda::dtype::Dtype;
    use crate::plan::Plan;
    use crate::reduction::SumScheme;
    use crate::tuning::Tuning;
    let parse = |text: &str, d: usize| {
        let args = [format!("x = Vi({d})"), format!("y = Vj({d})"), "b = Vj(1)".into(), "p = Pm(40)".into()];
        Formula::parse(text, &args).unwrap()
    };
    let find = |f: &Formula| DotTile::find(f, &Plan::new(f), Dtype::F32);
    let knn = parse("ArgKMin_Reduction(SqDist(x, y), 10, 0)", 40);
    assert!(matches!(find(&knn), Some(DotTile { outer: 0, inner: 1, dim: 40, squared: true, .. })));
    // Either order, either axis; a dot product; none below 16 dimensions, with a parameter, or
    // in float64 and float16.
    let dot = parse("Sum_Reduction((y | x) * b, 1)", 40);
    assert!(matches!(find(&dot), Some(DotTile { outer: 1, inner: 0, squared: false, .. })));
    assert!(find(&parse("ArgKMin_Reduction(SqDist(x, y), 10, 0)", 15)).is_none());
    assert!(find(&parse("Sum_Reduction(SqDist(x, p) * b, 0)", 40)).is_none());
    assert_eq!(DotTile::find(&knn, &Plan::new(&knn), Dtype::F64), None);
    assert_eq!(DotTile::find(&knn, &Plan::new(&knn), Dtype::F16), None);
    // TF32 needs compute capability 8.0; block-sparse reductions and the switch keep FP32.
    assert_eq!(Variant::choose(&knn, Dtype::F32, None, (9, 0), &Tuning::default()), Variant::DotTiles);
    assert_eq!(Variant::choose(&knn, Dtype::F32, None, (7, 5), &Tuning::default()), Variant::Dense);
    assert_eq!(
        Variant::choose(&knn, Dtype::F32, None, (9, 0), &Tuning { tensor_cores: false, ..Tuning::default() }),
        Variant::Dense
    );
    // The pairs read the dots (NaN, for a distance below 1/8 of the norms: computed again), and y is
    // neither loaded into the tile nor into registers per pair.
    let src =
        generate_variant(&knn, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local))
            .source;
    let (load, pairs) = src.split_once("for (int jj = 0; jj < len; jj++)").expect("a loop over the tile");
    assert!(load.contains("rk_dot_tile(rk_split, rk_split_norms, j0, rk_dynamic, rk_smem, rk_norms);"), "{load}");
    assert!(pairs.contains("= rk_smem[threadIdx.x * (64 + 1) + jj];"), "{pairs}");
    assert!(pairs.contains("if (rk_isnan(v3_0[0])) v3_0[0] = rk_sqdist(in0, in1, n_out, n_red, r_0, j);"), "{pairs}");
    assert!(!src.contains("T v1[40]") && !src.contains("__shared__ T tile"), "{src}");
    // Other terms of j still go through the shared tile, of the dots' 64 columns.
    let gauss = parse("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", 40);
    let src =
        generate_variant(&gauss, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local))
            .source;
    assert!(src.contains("__shared__ T tile[RK_COLUMNS * 1]") && src.contains("threadIdx.x < RK_COLUMNS"), "{src}");
    // Up to 128 dimensions, the block's rows stay in shared memory and a kernel run first splits
    // y for the tensor cores; above, both are staged per tile.
    let kernel =
        generate_variant(&knn, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local));
    let prepare = kernel.prepare.expect("a preparation");
    assert_eq!((prepare.outer, prepare.inner, prepare.split_bytes, prepare.rows(65)), (0, 1, 40 * 8, 128));
    assert!(kernel.source.contains("rk_split, const float* __restrict__ rk_split_norms) {"));
    assert_eq!(kernel.dynamic_shared, (40 * 128 + 128 * 65) * 4);
    let wide = parse("ArgKMin_Reduction(SqDist(x, y), 10, 0)", 129);
    let kernel =
        generate_variant(&wide, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local));
    assert!(kernel.prepare.is_none() && kernel.dynamic_shared == 0);
    assert!(kernel
        .source
        .contains("rk_dot_tile(in0, in1, n_out, n_red, blockIdx.x * 128, j0, j_end, rk_smem, rk_norms, rk_centre);"));
    // The streamed variant (for GPUs whose blocks cannot hold resident rows) at any dimension.
    let kernel = generate_variant(
        &knn,
        &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::StreamedDotTiles, Selection::Local),
    );
    assert!(kernel.prepare.is_none() && kernel.dynamic_shared == 0 && kernel.static_shared > 30_000);
    assert!(kernel
        .source
        .contains("rk_dot_tile(in0, in1, n_out, n_red, blockIdx.x * 128, j0, j_end, rk_smem, rk_norms, rk_centre);"));
    let kernel =
        generate_variant(&gauss, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local));
    assert_eq!(kernel.static_shared, (128 + 64) * 4);
}

/// Fast builds compile the dense kernel written for one row per thread (`generate_one_row`): the
/// same per-row code as the kernel of several rows, once; none where the kernel already takes one
/// row (wide rows, tensor-core dots) or for block-sparse kernels, whose blocks of rows are planned.
#[test]
fn fast_builds_take_the_kernel_of_one_row_per_thread() {
    use super::{generate_one_row, generate_variant, KernelOptions, Variant};
    use crate::cuda::dtype::Dtype;
    use crate::reduction::SumScheme;
    let args = |d: usize| [format!("x = Vi({d})"), format!("y = Vj({d})"), "b = Vj(1)".to_string()];
    let options = |variant, selection| KernelOptions::new(Dtype::F32, SumScheme::Auto, variant, selection);
    for (text, d, selection) in [
        ("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", 3, Selection::Local),
        ("LogSumExp_Reduction(b - Norm2(x - y), 1)", 2, Selection::Local),
        ("SumSoftMaxWeight_Reduction(b - SqDist(x, y), y, 0)", 3, Selection::Local),
        ("KMin_ArgKMin_Reduction(SqDist(x, y), 10, 0)", 3, Selection::Filtered),
        ("Max_ArgMax_Reduction((x | y), 1)", 4, Selection::Local),
    ] {
        let f = Formula::parse(text, &args(d)).unwrap();
        let several = generate_variant(&f, &options(Variant::Dense, selection));
        assert!(several.rows > 1, "{text}: {} rows", several.rows);
        let one = generate_one_row(&f, &options(Variant::Dense, selection)).unwrap_or_else(|| panic!("{text}"));
        assert_eq!(one.rows, 1, "{text}");
        assert!(one.source.contains("#define ROWS 1\n"), "{text}");
        // (written once: the source of several rows less the other rows' copies)
        assert!(one.source.len() * 3 < several.source.len() * 2, "{text}: {} vs {}", one.source.len(), several.source.len());
        // Everything but the rows per block is the same: the launches' chunks, the merge, the numbers.
        assert_eq!(
            (one.tile, one.state_len, one.width, &one.merge_source, &one.constants, one.static_shared),
            (several.tile, several.state_len, several.width, &several.merge_source, &several.constants, several.static_shared),
            "{text}"
        );
        assert!(generate_one_row(&f, &options(Variant::Ranged, selection)).is_none(), "{text}");
    }
    // A kernel of one row already, and the tensor cores' (one row per thread), have no other.
    let f = Formula::parse("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", &args(64)).unwrap();
    for variant in [Variant::Dense, Variant::DotTiles] {
        assert_eq!(generate_variant(&f, &options(variant, Selection::Local)).rows, 1);
        assert!(generate_one_row(&f, &options(variant, Selection::Local)).is_none());
    }
}

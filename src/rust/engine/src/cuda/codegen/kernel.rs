//! The generated kernel of a formula (`generate_variant`): the parts of its source in order
//! (`body`), and what its launches need (`Kernel`).

use super::gen::Gen;
use super::layout::Layout;
use super::reducer::Reducer;
use super::selection::Selection;
use super::variant::{KernelOptions, Variant};
use crate::cuda::dot_tiles;
use crate::cuda::dtype::Dtype;
use crate::cuda::finish;
use crate::formula::{Formula, NodeId, Op};
use crate::plan::Plan;
use crate::reduction::SumScheme;

/// A generated kernel and the launch geometry it was written for.
#[derive(Clone)]
pub struct Kernel {
    pub source: String,
    pub name: &'static str,
    /// The kernel that merges the states of several chunks (or blocks) and finalises them, in a
    /// program of its own (compiled beside the reduction's, on another thread: the two take about
    /// as long).
    pub merge_name: &'static str,
    pub merge_source: String,
    /// The numbers of the formula, in the order of the kernel's `rk_consts` argument.
    pub constants: Vec<f64>,
    /// Threads per block = reduced indices per shared-memory tile.
    pub tile: usize,
    /// Output rows per thread: each value of the reduced index read from shared memory serves
    /// them all. A block covers `tile * rows` output rows.
    pub rows: usize,
    /// Number of f64 per output row in the states written by the kernel.
    pub state_len: usize,
    /// Values (and indices) per output row of the final results.
    pub width: usize,
    /// Bytes of static and of dynamic shared memory per block (dynamic: tensor-core dots whose rows
    /// stay there).
    pub static_shared: usize,
    pub dynamic_shared: usize,
    /// The kernel to run before the reduction, and the memory it fills (tensor-core dots).
    pub prepare: Option<dot_tiles::Prepare>,
}

pub const KERNEL_NAME: &str = "rkeops_reduce";

pub fn generate(formula: &Formula, dtype: Dtype, scheme: SumScheme) -> Kernel {
    generate_variant(formula, &KernelOptions::new(dtype, scheme, Variant::Dense, Selection::Local))
}

/// The kernel of `variant`. A block-sparse one (`ranges`): block `b` of the grid reduces the output
/// rows `rk_work[4b] .. rk_work[4b + 1]` (at most TILE x ROWS) over the ranges of the reduced
/// index `rk_red[2r] .. rk_red[2r + 1]` for `r` in `rk_work[4b + 2] .. rk_work[4b + 3]`, and
/// finalises them (the 1D scheme).
pub fn generate_variant(formula: &Formula, options: &KernelOptions) -> Kernel {
    written(formula, options, Layout::new(formula, options))
}

/// The dense kernel of `options` written for one output row per thread, where it would take
/// several (`None` otherwise): the program of a fast build (`cuda::builds`), which compiles in less
/// than half the time of the several rows' (each row's code is written out once per row) and
/// computes each row with the same operations in the same order, so the same bits. Its launches
/// cover `tile` rows a block; everything else (the chunks of the reduced range, the merge) is the
/// same as for the kernel of several rows.
pub fn generate_one_row(formula: &Formula, options: &KernelOptions) -> Option<Kernel> {
    if options.variant != Variant::Dense {
        return None;
    }
    let mut layout = Layout::new(formula, options);
    if layout.rows == 1 {
        return None;
    }
    layout.rows = 1;
    Some(written(formula, options, layout))
}

/// The kernel of `layout`.
fn written(formula: &Formula, options: &KernelOptions, layout: Layout) -> Kernel {
    let (acc, dots) = (&layout.acc, layout.dots);
    let ranged = matches!(options.variant, Variant::Ranged | Variant::RangedNarrow);
    let constant_nodes = number_nodes(formula, &layout.plan);
    let constants = constant_nodes
        .iter()
        .map(|&id| match formula.graph.nodes[id].op {
            Op::Constant(bits) => f64::from_bits(bits),
            _ => unreachable!("number_nodes keeps numbers only"),
        })
        .collect();
    let mut g = Gen { formula, dtype: options.dtype, layout: &layout, src: String::new(), q: 0, constant_nodes };
    let red = &formula.reduction;
    let reducer = Reducer { acc, f: red.f, g: red.g, fdim: acc.dim, selection: options.selection };
    g.functions_and_signature(ranged);
    g.block_start(ranged);
    g.rows_start(&reducer);
    g.reduced_ranges_start(ranged);
    g.load_tile();
    g.loop_over_tile(&reducer, options);
    g.reduced_ranges_end();
    g.store_rows(&reducer);
    Kernel {
        source: g.src,
        name: KERNEL_NAME,
        merge_name: finish::MERGE_NAME,
        merge_source: finish::merge_source(acc, options.dtype),
        constants,
        tile: layout.tile,
        rows: layout.rows,
        state_len: acc.state_len(),
        width: acc.width(),
        static_shared: layout.dots_shared_bytes()
            + if layout.shared { layout.tile_len * layout.shared_width * options.dtype.size() } else { 0 },
        dynamic_shared: dots.map_or(0, |dots| dots.dynamic_shared_bytes()),
        prepare: dots.and_then(|dots| dots.prepare()),
    }
}

/// The number nodes of the formula, in the order of `rk_consts`.
fn number_nodes(formula: &Formula, plan: &Plan) -> Vec<NodeId> {
    plan.constant.iter().copied().filter(|&id| matches!(formula.graph.nodes[id].op, Op::Constant(_))).collect()
}

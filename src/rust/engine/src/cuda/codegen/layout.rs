//! What a kernel computes and where (`Layout`): the nodes it computes, the size of its blocks and
//! of its tile of the reduced index, what the tile holds in shared memory (inputs, or terms of the
//! reduced index hoisted out of the loop), the rows per thread, and how a selection sifts.

use super::selection::Selection;
use super::sift::Filter;
use super::variant::{KernelOptions, Variant};
use crate::cuda::dot_tiles::{self, DotTile};
use crate::cuda::dtype::Dtype;
use crate::formula::{Formula, NodeId, Op};
use crate::plan::{Plan, Role};
use crate::reduction::Accumulator;

/// Static shared memory available to a block without opting in to more.
const SHARED_BYTES: usize = 48 * 1024;

/// What a kernel computes and where: its plan, the tensor-core dots, the size of its blocks and
/// of its tile of the reduced index, and what that tile holds in shared memory.
pub(super) struct Layout {
    pub(super) plan: Plan,
    pub(super) acc: Accumulator,
    /// The node computed on the tensor cores, read from `rk_smem`.
    pub(super) dots: Option<DotTile>,
    /// Whether a node is computed (not when only tensor-core dots read it).
    pub(super) live: Vec<bool>,
    /// Positions of the inputs of the reduced index that the kernel reads.
    pub(super) inner_vars: Vec<usize>,
    /// Threads per block, and output rows per thread.
    pub(super) tile: usize,
    pub(super) rows: usize,
    /// The length of a tile of the reduced index, and its name in the source.
    pub(super) tile_len: usize,
    pub(super) tile_name: &'static str,
    /// Whether the tile goes through shared memory, and its values per index of the reduced index.
    pub(super) shared: bool,
    pub(super) shared_width: usize,
    /// Where the shared tile holds each input of the reduced index (when it holds the inputs).
    pub(super) shared_offsets: Vec<Option<usize>>,
    /// Where it holds each hoisted term of the reduced index (node, offset), when it holds them.
    pub(super) hoisted_offsets: Vec<(NodeId, usize)>,
    /// How a sifted selection (`Selection::Filtered`) sifts its pairs, and where its lists live.
    pub(super) filter: Option<Filter>,
    pub(super) lists_in_registers: bool,
}

impl Layout {
    pub(super) fn new(formula: &Formula, options: &KernelOptions) -> Layout {
        let KernelOptions { dtype, scheme, variant, .. } = *options;
        let narrow = variant == Variant::RangedNarrow;
        let plan = Plan::new(formula);
        let acc = formula.accumulator(scheme);
        let dots = match variant {
            Variant::DotTiles => DotTile::find(formula, &plan, dtype),
            Variant::StreamedDotTiles => DotTile::find(formula, &plan, dtype).map(DotTile::streamed),
            _ => None,
        };
        // The nodes to compute: with tensor-core dots, not those only the dots read.
        let live = match &dots {
            Some(dots) => dots.live(formula),
            None => vec![true; formula.graph.nodes.len()],
        };
        let inner_vars = inner_inputs(formula, &plan, &live);
        // Terms of the reduced index alone (Normalize(y), 2 * y, ...) are computed once per value of the
        // index, by the thread that loads it into the shared tile, which then holds those of them that
        // the pairs (or the reduction) read: `hoisted`, when they fit; else the tile holds the inputs.
        let hoisted = inner_frontier(formula, &plan, &live);
        let width_of = |nodes: &[NodeId]| nodes.iter().map(|&id| formula.graph.dim(id)).sum::<usize>();
        let inner_width: usize = inner_vars.iter().map(|&p| formula.variables[p].dim).sum();
        // The tensor-core dots take their part of the shared memory first.
        let free_bytes = SHARED_BYTES - dots.map_or(0, |dots| dots.shared_floats() * 4);
        let fits_width = |t: usize, width: usize| t * width * dtype.size() <= free_bytes;
        let hoisted = match plan.inner.iter().any(|&id| live[id])
            && fits_width(if narrow { 64 } else { 128 }, width_of(&hoisted))
        {
            true => hoisted,
            false => vec![],
        };
        let shared_width = if hoisted.is_empty() { inner_width } else { width_of(&hoisted) };
        // The largest tile whose shared memory fits; wide variables read global memory directly. With
        // tensor-core dots, a tile has `dot_tiles::COLUMNS` indices, and each of the 128 threads one row.
        let fits = |t: usize| fits_width(t, shared_width);
        let tile = match (narrow, dots.is_some()) {
            (true, _) => 64,
            (_, true) => dot_tiles::ROWS,
            _ => [256, 128, 64].into_iter().find(|&t| fits(t)).unwrap_or(64),
        };
        let (tile_len, tile_name) = if dots.is_some() { (dot_tiles::COLUMNS, "RK_COLUMNS") } else { (tile, "TILE") };
        let shared = fits(tile_len) && shared_width > 0;
        let (shared_offsets, hoisted_offsets) = match shared {
            true => tile_offsets(formula, &inner_vars, &hoisted),
            false => (vec![None; formula.variables.len()], vec![]),
        };
        let (filter, lists_in_registers) =
            sifting(formula, &plan, options, dots.is_some(), &shared_offsets, &hoisted_offsets);
        let rows = match (narrow || dots.is_some(), &filter) {
            (true, _) => 1,
            (false, Some(filter)) => sifted_rows_per_thread(formula, &plan, &acc, filter, lists_in_registers, dtype),
            (false, None) => rows_per_thread(formula, &plan, &acc, dtype),
        };
        Layout {
            plan,
            acc,
            dots,
            live,
            inner_vars,
            tile,
            rows,
            tile_len,
            tile_name,
            shared,
            shared_width,
            shared_offsets,
            hoisted_offsets,
            filter,
            lists_in_registers,
        }
    }

    /// Bytes of static shared memory the tensor-core dots declare.
    pub(super) fn dots_shared_bytes(&self) -> usize {
        self.dots.map_or(0, |dots| dots.shared_floats() * 4)
    }
}

/// How a sifted selection sifts (`Filter`) and whether its lists are in registers; `None` for
/// the other selections (and for a sifted one of several components, or a reduction that selects
/// nothing). The expanded distance reads `y` from the tile (a tile of TILE indices: not with the
/// tensor-core dots).
fn sifting(
    formula: &Formula,
    plan: &Plan,
    options: &KernelOptions,
    dots: bool,
    shared_offsets: &[Option<usize>],
    hoisted_offsets: &[(NodeId, usize)],
) -> (Option<Filter>, bool) {
    let selection = options.selection;
    let sifted = matches!(selection, Selection::Filtered | Selection::FilteredRegisters)
        && formula.reduction.kind.selects()
        && formula.output_dim() == 1;
    let y_offset = |y: NodeId| match (&formula.graph.nodes[y].op, dots) {
        (Op::Input(p), false) => {
            hoisted_offsets.iter().find(|&&(id, _)| id == y).map(|&(_, off)| off).or(shared_offsets[*p])
        }
        _ => None,
    };
    let filter = sifted.then(|| Filter::choose(formula, plan, options.dtype, y_offset));
    (filter, sifted && selection == Selection::FilteredRegisters)
}

/// The positions of the inputs of the reduced index that the kernel reads.
fn inner_inputs(formula: &Formula, plan: &Plan, live: &[bool]) -> Vec<usize> {
    formula
        .graph
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(id, n)| match n.op {
            Op::Input(p) if plan.roles[id] == Some(Role::Inner) && live[id] => Some(p),
            _ => None,
        })
        .collect()
}

/// The offsets in the shared tile of the inputs of the reduced index (when nothing is hoisted),
/// then of the hoisted terms.
fn tile_offsets(
    formula: &Formula,
    inner_vars: &[usize],
    hoisted: &[NodeId],
) -> (Vec<Option<usize>>, Vec<(NodeId, usize)>) {
    let mut shared_offsets = vec![None; formula.variables.len()];
    let mut hoisted_offsets = Vec::new();
    let mut offset = 0;
    if hoisted.is_empty() {
        for &p in inner_vars {
            shared_offsets[p] = Some(offset);
            offset += formula.variables[p].dim;
        }
    }
    for &id in hoisted {
        hoisted_offsets.push((id, offset));
        offset += formula.graph.dim(id);
    }
    (shared_offsets, hoisted_offsets)
}

/// The nodes of the reduced index alone (inputs included) whose values the pairs or the reduction
/// itself read, in the order of the graph.
fn inner_frontier(formula: &Formula, plan: &Plan, live: &[bool]) -> Vec<NodeId> {
    let red = &formula.reduction;
    let inner = |id: NodeId| plan.roles[id] == Some(Role::Inner);
    let mut read = vec![false; formula.graph.nodes.len()];
    for &id in plan.pair.iter().filter(|&&id| live[id]) {
        for &a in &formula.graph.nodes[id].args {
            read[a] = true;
        }
    }
    for root in std::iter::once(red.f).chain(red.g) {
        read[root] = true;
    }
    (0..read.len()).filter(|&id| read[id] && inner(id)).collect()
}

/// Rows per thread: as many as the registers allow (the state and the per-row values of every
/// row stay in registers), at most 4.
fn rows_per_thread(formula: &Formula, plan: &Plan, acc: &Accumulator, dtype: Dtype) -> usize {
    let words = dtype.size() / 4;
    let per_row: usize = plan.outer.iter().chain(&plan.pair).map(|&id| formula.graph.dim(id)).sum::<usize>() * words
        + 2 * acc.state_len();
    match per_row {
        0..=24 => 4,
        25..=64 => 2,
        _ => 1,
    }
}

/// Rows per thread of a sifted selection: as many as the registers of the rows' values, of their
/// sifting (and of their lists, in registers) allow, at most 4.
fn sifted_rows_per_thread(
    formula: &Formula,
    plan: &Plan,
    acc: &Accumulator,
    filter: &Filter,
    lists_in_registers: bool,
    dtype: Dtype,
) -> usize {
    let words = dtype.size() / 4;
    let lists = if lists_in_registers { 2 * acc.state_len() } else { 0 };
    let per_row: usize = plan.outer.iter().chain(&plan.pair).map(|&id| formula.graph.dim(id)).sum::<usize>() * words
        + filter.row_registers()
        + lists;
    match per_row {
        0..=24 => 4,
        25..=64 => 2,
        _ => 1,
    }
}

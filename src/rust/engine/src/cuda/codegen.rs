//! CUDA source for one reduction of one formula (1D and 2D schemes share one kernel).
//!
//! Each thread owns one output row: its variables of the output index and its reduction state live
//! in registers; tiles of the reduced index's variables go through shared memory, loaded once per
//! block and read by every thread. Block `(bx, by)` reduces rows `bx*TILE ..` over the chunk
//! `by*chunk ..` of the reduced range (gridDim.y = 1 is the 1D scheme). With one chunk it writes
//! the final results (column-major, in the working type, 1-based int indices); otherwise it writes
//! its states, in the layout of the CPU accumulator, and a second kernel (`rkeops_merge`) merges
//! the chunks in order and finalises them on the device.
//!
//! The numbers of the formula are not in the source: they are read from an array argument, so that
//! formulas that differ only by their numbers (a loop over a bandwidth) share one compiled kernel.

mod candidates;
mod exponentials;

use std::fmt::Write;

use super::dot_tiles::{self, DotTile, MIN_DIM};
use super::dtype::Dtype;
use super::finish;
use crate::formula::{Category, Formula, Node, NodeId, Op};
use crate::plan::{Plan, Role};
use crate::ranges::BlockRanges;
use crate::reduction::Accumulator;
use crate::reduction::{ReductionKind, SumScheme};
use crate::tuning::{RangedOverride, SelectionOverride, Tuning};
use candidates::Filter;

/// How far above a log-sum-exp row's reference maximum a value may be before its sums are
/// rescaled (`RK_LAZY` in the kernels).
const LAZY: u32 = 8;

/// Static shared memory available to a block without opting in to more.
const SHARED_BYTES: usize = 48 * 1024;

/// A generated kernel and the launch geometry it was written for.
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

/// What a generated kernel depends on besides its formula: the key of its compiled code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelOptions {
    pub dtype: Dtype,
    pub scheme: SumScheme,
    pub variant: Variant,
    pub selection: Selection,
    /// `#pragma unroll` of the loop over a tile (`Tuning::unroll`).
    pub unroll: usize,
}

impl KernelOptions {
    /// These choices, with the default tuning's unrolling.
    pub fn new(dtype: Dtype, scheme: SumScheme, variant: Variant, selection: Selection) -> KernelOptions {
        KernelOptions { dtype, scheme, variant, selection, unroll: Tuning::default().unroll }
    }
}

/// Where a K-selection (Min, ArgKMin, ...) keeps its K best values of a row while it reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Selection {
    /// Arrays in local memory, a sorted insertion that shifts the values it passes: cheap when
    /// values seldom enter (long reduced ranges: after the first rows, a value enters with
    /// probability ~K / j), and light on registers.
    Local,
    /// Registers, the insertion a network of selects written out (`selection_network`): a warp
    /// pays the whole network whenever one of its rows takes a value, but no memory access; pays
    /// when values enter often, on short reduced ranges (batches of small clouds).
    Registers,
    /// `Local`, the pairs first sifted 32 indices at a time: one comparison per pair marks the
    /// candidates, which are then computed again and inserted (`candidates`); a nearest-neighbour
    /// search sifts with the expanded squared distance. For long reduced ranges of a selection of
    /// one component.
    Filtered,
    /// `Filtered`, the lists in registers as `Registers` keeps them.
    FilteredRegisters,
}

/// Above this many reduced rows per output row and per selected value (K), selections stay in
/// local memory. On an H100 (2026-11-24, K-NN graphs of N uniform points in D = 3, kernel times in
/// registers / local memory): K = 10, N / K = 205: 0.14 / 0.26 ms, 2000: 1.2 / 3.7 ms, 10^4: 10.4 /
/// 13.5 ms, 4 x 10^4: 134 / 105 ms, 10^5: 805 / 607 ms; K = 40, N / K = 51: 0.30 / 0.66 ms, 500:
/// 4.8 / 40 ms, 10^4: 220 / 293 ms.
const REGISTERS_UP_TO_ROWS_PER_VALUE: f64 = 16384.0;

impl Selection {
    /// The storage for `formula`'s reduction when each output row reduces over `reduced` rows
    /// (a mean, with ranges), unless `forced` (`Tuning::gpu_selection`, for benchmarks). `Local`
    /// for the reductions that select nothing (one kernel for them).
    pub fn for_rows(formula: &Formula, reduced: f64, forced: Option<SelectionOverride>) -> Selection {
        let red = &formula.reduction;
        if !red.kind.selects() {
            return Selection::Local;
        }
        let k = red.k.max(1);
        let in_registers = formula.output_dim() * k <= REGISTER_SELECTION;
        let sifted = if formula.output_dim() == 1 { Selection::Filtered } else { Selection::Local };
        match forced {
            Some(SelectionOverride::Local) => Selection::Local,
            Some(SelectionOverride::Registers) if in_registers => Selection::Registers,
            Some(SelectionOverride::Filtered) => sifted,
            Some(SelectionOverride::FilteredRegisters) if in_registers && sifted == Selection::Filtered => {
                Selection::FilteredRegisters
            }
            _ if in_registers && reduced <= REGISTERS_UP_TO_ROWS_PER_VALUE * k as f64 => Selection::Registers,
            // Where a pair costs more than the shared loads that four rows per thread save (on an
            // H200, 10-NN of 1e6 points: D = 10 602 against 645 ms; D = 3 240 against 230 ms).
            _ if sifted == Selection::Filtered
                && k <= 16
                && candidates::distance_dim(formula).is_some_and(|d| (8..MIN_DIM).contains(&d)) =>
            {
                Selection::FilteredRegisters
            }
            _ => sifted,
        }
    }
}

/// Which kernel of a formula: the dense one (1D and 2D schemes), or a block-sparse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Dense,
    /// Block-sparse, as many rows per block of the grid as the dense kernel (up to TILE x ROWS).
    Ranged,
    /// Block-sparse, 64 rows per block of the grid, one per thread: for ranges whose blocks of
    /// rows are small, where a wide block would leave most of its threads without a row.
    RangedNarrow,
    /// Dense, the formula's dot product or squared distance of large vectors computed on the
    /// tensor cores (`dot_tiles`).
    DotTiles,
    /// `DotTiles` with the rows staged per tile, not kept in shared memory: for GPUs that cannot
    /// give a block the shared memory of resident rows.
    StreamedDotTiles,
}

/// Below this mean number of rows per (non-empty) block, ranges run the narrow kernel.
const NARROW_BELOW_ROWS: usize = 512;

impl Variant {
    /// The kernel for these ranges of the output rows (none: dense), unless `forced`
    /// (`Tuning::gpu_ranged`, for benchmarks).
    pub fn for_ranges(ranges: Option<&BlockRanges>, forced: Option<RangedOverride>) -> Variant {
        let Some(ranges) = ranges else { return Variant::Dense };
        match forced {
            Some(RangedOverride::Narrow) => return Variant::RangedNarrow,
            Some(RangedOverride::Wide) => return Variant::Ranged,
            None => {}
        }
        let (rows, blocks) = ranges
            .blocks
            .iter()
            .filter(|b| !b.is_empty())
            .fold((0, 0), |(rows, blocks), b| (rows + b.len(), blocks + 1));
        if blocks > 0 && rows < NARROW_BELOW_ROWS * blocks {
            Variant::RangedNarrow
        } else {
            Variant::Ranged
        }
    }

    /// The kernel for `formula` on a device of compute capability `arch`: `for_ranges`, or
    /// `DotTiles` for a dense reduction that has a dot product to give to the tensor cores
    /// (TF32 `mma.sync` needs 8.0), unless the tuning turns the tensor cores off.
    pub fn choose(
        formula: &Formula,
        dtype: Dtype,
        ranges: Option<&BlockRanges>,
        arch: (i32, i32),
        tuning: &Tuning,
    ) -> Variant {
        let variant = Variant::for_ranges(ranges, tuning.gpu_ranged);
        let allowed = tuning.tensor_cores && arch.0 >= 8;
        match variant == Variant::Dense && allowed && DotTile::find(formula, &Plan::new(formula), dtype).is_some() {
            true => Variant::DotTiles,
            false => variant,
        }
    }
}

/// The kernel of `variant`. A block-sparse one (`ranges`): block `b` of the grid reduces the output
/// rows `rk_work[4b] .. rk_work[4b + 1]` (at most TILE x ROWS) over the ranges of the reduced
/// index `rk_red[2r] .. rk_red[2r + 1]` for `r` in `rk_work[4b + 2] .. rk_work[4b + 3]`, and
/// finalises them (the 1D scheme).
pub fn generate_variant(formula: &Formula, options: &KernelOptions) -> Kernel {
    let layout = Layout::new(formula, options);
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
    g.loop_over_tile(&reducer, options.unroll);
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

/// What a kernel computes and where: its plan, the tensor-core dots, the size of its blocks and
/// of its tile of the reduced index, and what that tile holds in shared memory.
struct Layout {
    plan: Plan,
    acc: Accumulator,
    /// The node computed on the tensor cores, read from `rk_smem`.
    dots: Option<DotTile>,
    /// Whether a node is computed (not when only tensor-core dots read it).
    live: Vec<bool>,
    /// Positions of the inputs of the reduced index that the kernel reads.
    inner_vars: Vec<usize>,
    /// Threads per block, and output rows per thread.
    tile: usize,
    rows: usize,
    /// The length of a tile of the reduced index, and its name in the source.
    tile_len: usize,
    tile_name: &'static str,
    /// Whether the tile goes through shared memory, and its values per index of the reduced index.
    shared: bool,
    shared_width: usize,
    /// Where the shared tile holds each input of the reduced index (when it holds the inputs).
    shared_offsets: Vec<Option<usize>>,
    /// Where it holds each hoisted term of the reduced index (node, offset), when it holds them.
    hoisted_offsets: Vec<(NodeId, usize)>,
    /// How a sifted selection (`Selection::Filtered`) sifts its pairs, and where its lists live.
    filter: Option<Filter>,
    lists_in_registers: bool,
}

impl Layout {
    fn new(formula: &Formula, options: &KernelOptions) -> Layout {
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
    fn dots_shared_bytes(&self) -> usize {
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

/// The number nodes of the formula, in the order of `rk_consts`.
fn number_nodes(formula: &Formula, plan: &Plan) -> Vec<NodeId> {
    plan.constant.iter().copied().filter(|&id| matches!(formula.graph.nodes[id].op, Op::Constant(_))).collect()
}

/// The parts of the reduction kernel, in the order of its source.
impl Gen<'_> {
    /// The helper functions (the tensor-core dots', the finalisation's), then the kernel's signature.
    fn functions_and_signature(&mut self, ranged: bool) {
        let layout = self.layout;
        self.prelude(layout.tile, layout.rows);
        if let Some(dots) = &layout.dots {
            dots.functions(&mut self.src);
        }
        finish::functions(&mut self.src, &layout.acc, self.dtype.c_type());
        if let Some(filter) = &layout.filter {
            filter.functions(&mut self.src, &layout.acc, self.dtype, layout.lists_in_registers);
        }
        self.signature(ranged);
    }

    /// The block's output rows (each thread's, per row slot), its tensor-core dots' set-up and its
    /// shared tile.
    fn block_start(&mut self, ranged: bool) {
        let layout = self.layout;
        if ranged {
            self.line("  const int* work = rk_work + 4 * blockIdx.x;");
            self.line("  const int row0 = work[0] + threadIdx.x;\n  const int row_end = work[1];");
        } else {
            self.line("  const int row0 = blockIdx.x * (TILE * ROWS) + threadIdx.x;\n  const int row_end = n_out;");
        }
        for q in 0..layout.rows {
            self.line(&format!(
                "  const int row_{q} = row0 + {q} * TILE; const int r_{q} = row_{q} < row_end ? row_{q} : 0;"
            ));
        }
        if let Some(dots) = &layout.dots {
            self.src.push_str(&dots.block_start());
        }
        if layout.shared {
            let _ = writeln!(self.src, "  __shared__ T tile[{} * {}];", layout.tile_name, layout.shared_width);
        }
        if let Some(filter) = &layout.filter {
            filter.block_start(self);
        }
    }

    /// Per row slot: the registers of the row's inputs and parameters, the numbers (once), the
    /// terms of the row alone, and the reduction's state.
    fn rows_start(&mut self, reducer: &Reducer) {
        let (formula, layout) = (self.formula, self.layout);
        let (plan, live) = (&layout.plan, &layout.live);
        for q in 0..layout.rows {
            self.q = q;
            for (id, node) in formula.graph.nodes.iter().enumerate().filter(|&(id, _)| live[id]) {
                match (node.op, plan.roles[id]) {
                    (Op::Input(p), Some(Role::Outer)) => self.input_registers(id, p),
                    (Op::Input(p), Some(Role::Constant)) if q == 0 => self.input_registers(id, p),
                    _ => {}
                }
            }
            if q == 0 {
                for &id in &plan.constant {
                    self.node(id);
                }
            }
            for &id in plan.outer.iter().filter(|&&id| live[id]) {
                self.node(id);
            }
            reducer.init(self);
            if let Some(filter) = &layout.filter {
                filter.row_start(self);
            }
        }
    }

    /// Opens the loop over the ranges of the reduced index (block-sparse) or the block's one chunk,
    /// and the loop over its tiles.
    fn reduced_ranges_start(&mut self, ranged: bool) {
        if ranged {
            self.line("  for (int range = work[2]; range < work[3]; range++) {");
            self.line("  const int j_begin = rk_red[2 * range];\n  const int j_end = rk_red[2 * range + 1];");
        } else {
            self.line("  {");
            self.line("  const int j_begin = blockIdx.y * chunk;\n  const int j_end = min(n_red, j_begin + chunk);");
        }
        self.line(&format!("  for (int j0 = j_begin; j0 < j_end; j0 += {}) {{", self.layout.tile_name));
    }

    /// Each thread loads one index of the tile into shared memory: its inputs, or the hoisted terms
    /// computed from them; then the tensor-core dots of the tile.
    fn load_tile(&mut self) {
        let (formula, layout) = (self.formula, self.layout);
        let tile_name = layout.tile_name;
        if layout.shared {
            self.line("    {");
            self.line("      const int j = j0 + threadIdx.x;");
            self.line(if layout.dots.is_some() {
                "      if (j < j_end && threadIdx.x < RK_COLUMNS) {"
            } else {
                "      if (j < j_end) {"
            });
            if layout.hoisted_offsets.is_empty() {
                for &p in &layout.inner_vars {
                    let off = layout.shared_offsets[p].unwrap_or(0);
                    let d = formula.variables[p].dim;
                    self.line(&format!("        for (int k = 0; k < {d}; k++) tile[({off} + k) * {tile_name} + threadIdx.x] = rk_load(in{p}[j + (long long)n_red * k]);"));
                }
            } else {
                self.inner_terms();
                for &(id, off) in &layout.hoisted_offsets {
                    let d = formula.graph.dim(id);
                    self.line(&format!("        for (int k = 0; k < {d}; k++) tile[({off} + k) * {tile_name} + threadIdx.x] = v{id}[k];"));
                }
            }
            if let Some(filter) = &layout.filter {
                filter.load_tile(self);
            }
            self.line("      }");
            self.line("    }");
            self.line("    __syncthreads();");
        }
        if let Some(dots) = &layout.dots {
            self.line(&dots.tile());
        }
    }

    /// The loop over the indices of the tile: the terms of the index (from the tile, or computed),
    /// then per row slot the pairs' terms and the reduction's step.
    fn loop_over_tile(&mut self, reducer: &Reducer, unroll: usize) {
        let layout = self.layout;
        if let Some(filter) = &layout.filter {
            return filter.loop_over_tile(self, reducer);
        }
        if matches!(
            reducer.acc.kind,
            ReductionKind::LogSumExp | ReductionKind::LogSumExpWeight | ReductionKind::SumSoftMaxWeight
        ) {
            return exponentials::loop_over_tile(self, reducer);
        }
        self.line("    if (row0 < row_end) {");
        self.line(&format!("      const int len = min({}, j_end - j0);", layout.tile_name));
        for q in 0..layout.rows {
            self.q = q;
            reducer.tile_begin(self);
        }
        // Four iterations unrolled. For K-selections in local memory, not unrolling compiles 2 to 3 x
        // faster (10-NN, D = 100: 0.22 against 0.62 s with NVRTC 12.9) but the kernels were slower on an
        // H100 (10-NN, N = 1e6: +16 % at D = 3, +10 % at D = 10; 32-NN D = 64: -13 %): kept.
        // Tuning::unroll (RKEOPS_GPU_UNROLL=n) forces n (benchmarks).
        self.line(&format!("      #pragma unroll {unroll}\n      for (int jj = 0; jj < len; jj++) {{"));
        self.line("        const int j = j0 + jj;");
        self.index_terms();
        for q in 0..layout.rows {
            self.q = q;
            self.pair_nodes();
            reducer.accumulate(self);
        }
        self.line("      }");
        for q in 0..layout.rows {
            self.q = q;
            reducer.tile_end(self);
        }
        self.line("    }");
    }

    /// The terms of the reduced index `j` (tile index `jj`): computed from its inputs, or read
    /// from the tile that holds them.
    fn index_terms(&mut self) {
        let layout = self.layout;
        if layout.hoisted_offsets.is_empty() {
            self.inner_terms();
        }
        for &(id, off) in &layout.hoisted_offsets {
            let d = self.formula.graph.dim(id);
            self.line(&format!(
                "        T v{id}[{d}]; for (int k = 0; k < {d}; k++) v{id}[k] = tile[({off} + k) * {} + jj];",
                layout.tile_name
            ));
        }
    }

    /// The terms of the pair (row slot `q`, index `j`).
    fn pair_nodes(&mut self) {
        let layout = self.layout;
        for &id in layout.plan.pair.iter().filter(|&&id| layout.live[id]) {
            self.node(id);
        }
    }

    /// Closes the loops over the tiles and over the ranges (or the chunk).
    fn reduced_ranges_end(&mut self) {
        if self.layout.shared {
            self.line("    __syncthreads();");
        }
        self.line("  }");
        self.line("  }");
    }

    /// The state of a row, either finalised here (one chunk) or stored for rkeops_merge.
    fn store_rows(&mut self, reducer: &Reducer) {
        let state_len = self.layout.acc.state_len();
        for q in 0..self.layout.rows {
            self.q = q;
            self.line(&format!("  if (row_{q} < row_end) {{"));
            self.line(&format!("    if (finalize) {{\n    double out[{state_len}];"));
            reducer.store(self);
            self.line(&format!("    rk_finalize(out, out_values, out_indices, row_{q}, n_out);\n    }} else {{"));
            self.line(&format!("    double* out = states + ((long long)blockIdx.y * n_out + row_{q}) * {state_len};"));
            reducer.store(self);
            self.line("    }\n  }");
        }
        self.line("}");
    }
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

struct Gen<'a> {
    formula: &'a Formula,
    dtype: Dtype,
    layout: &'a Layout,
    src: String,
    /// The row slot being emitted.
    q: usize,
    /// The number nodes, in the order of `rk_consts`.
    constant_nodes: Vec<NodeId>,
}

impl Gen<'_> {
    /// The register array of node `id`: one per row slot for values that depend on the row.
    fn name(&self, id: NodeId) -> String {
        match self.layout.plan.roles[id] {
            Some(Role::Outer | Role::Pair) => format!("v{id}_{}", self.q),
            _ => format!("v{id}"),
        }
    }

    fn line(&mut self, s: &str) {
        self.src.push_str(s);
        self.src.push('\n');
    }

    fn prelude(&mut self, tile: usize, rows: usize) {
        let t = self.dtype.c_type();
        // float: the hardware ex2 with log2(e) folded in (relative error about 2^-22 plus 6e-8 |x|);
        // rk_exp_ftz is the bare multiply and MUFU instruction, which flushes results below 2^-126
        // to 0; rk_exp keeps them as ex2(x log2(e) / 2)^2, the square of a normal number rounded
        // to the subnormal result, at about twice ex2's relative error (three instructions where
        // __expf's test and predicated multiplies took four to five: a Gaussian sum of 10^6 x 10^6
        // pairs 436 -> 400 ms on an H100). double: the correctly rounded exp.
        let exp = match self.dtype {
            Dtype::F16 | Dtype::F32 => "__device__ __forceinline__ float rk_ex2_ftz(float x) { float y; asm(\"ex2.approx.ftz.f32 %0, %1;\" : \"=f\"(y) : \"f\"(x)); return y; }\n\
                __device__ __forceinline__ float rk_exp(float x) { const float y = rk_ex2_ftz(x * 0.7213475204444817f); return y * y; }\n\
                __device__ __forceinline__ float rk_exp_ftz(float x) { return rk_ex2_ftz(x * 1.4426950408889634f); }",
            Dtype::F64 => "__device__ __forceinline__ double rk_exp(double x) { return exp(x); }\n\
                __device__ __forceinline__ double rk_exp_ftz(double x) { return exp(x); }",
        };
        // A power of two whose inverse is a normal number: x * (1 / b) is then the same real number
        // as x / b, so it rounds to the same result (infinities, NaN and subnormals included).
        let pow2 = match self.dtype {
            Dtype::F16 | Dtype::F32 => "__device__ __forceinline__ bool rk_pow2(float b) { int u = __float_as_int(b), e = (u >> 23) & 0xff; return (u & 0x7fffff) == 0 && e > 0 && e < 253; }",
            Dtype::F64 => "__device__ __forceinline__ bool rk_pow2(double b) { long long u = __double_as_longlong(b); int e = (int)((u >> 52) & 0x7ff); return (u & 0xfffffffffffffLL) == 0 && e > 0 && e < 2045; }",
        };
        let (inf, max) = self.dtype.infinity_and_max();
        // Inputs are read through rk_load: float16 bits are widened to float32 (PTX cvt, no header).
        let load = match self.dtype {
            Dtype::F16 => "__device__ __forceinline__ float rk_load(unsigned short h) { float f; asm(\"cvt.f32.f16 %0, %1;\" : \"=f\"(f) : \"h\"(h)); return f; }",
            _ => "__device__ __forceinline__ T rk_load(T x) { return x; }",
        };
        let storage = self.dtype.storage_type();
        let _ = write!(
            self.src,
            "// Generated by rkeops (the formula's numbers are in rk_consts).\n\
             typedef {t} T;\n\
             typedef {storage} S;\n\
             #define TILE {tile}\n\
             #define ROWS {rows}\n\
             #define RK_INF {inf}\n\
             #define RK_MAX {max}\n\
             // How far above the reference maximum of a log-sum-exp row a value may be before its\n\
             // sums are rescaled.\n\
             #define RK_LAZY {LAZY}\n\
             // Integer power by repeated squaring, as the CPU evaluator computes it.\n\
             __device__ __forceinline__ T rk_powi(T x, int n) {{\n\
             \x20 bool inv = n < 0; unsigned int e = inv ? -(unsigned int)n : n; T r = 1;\n\
             \x20 while (true) {{ if (e & 1) r *= x; e >>= 1; if (e == 0) break; x *= x; }}\n\
             \x20 return inv ? (T)1 / r : r;\n\
             }}\n\
             __device__ __forceinline__ bool rk_isnan(T x) {{ return x != x; }}\n\
             {exp}\n\
             {pow2}\n\
             // Division by a value fixed in the loop over the reduced index: the test and the\n\
             // inverse are hoisted out of the loop, so that dividing by a power of two (x / 2) costs\n\
             // a multiplication, as when the number was compiled in; other divisors divide.\n\
             __device__ __forceinline__ T rk_div_fixed(T a, T b) {{ return rk_pow2(b) ? a * ((T)1 / b) : a / b; }}\n\
             {load}\n"
        );
    }

    /// (The block-sparse variants also take their work and ranges.)
    fn signature(&mut self, ranged: bool) {
        let mut params = vec![
            "const int n_out".to_string(),
            "const int n_red".into(),
            "const int chunk".into(),
            "const int j_offset".into(),
            "const int finalize".into(),
        ];
        for v in &self.formula.variables {
            params.push(format!("const S* __restrict__ in{}", v.position));
        }
        params.push("const T* __restrict__ rk_consts".into());
        params.push("double* __restrict__ states".into());
        params.push("T* __restrict__ out_values".into());
        params.push("int* __restrict__ out_indices".into());
        params.push("const double* __restrict__ rk_running".into());
        if ranged {
            params.push("const int* __restrict__ rk_work".into());
            params.push("const int* __restrict__ rk_red".into());
        }
        params.extend(self.layout.dots.iter().flat_map(DotTile::parameters));
        let _ = writeln!(
            self.src,
            "extern \"C\" __global__ void __launch_bounds__(TILE) {KERNEL_NAME}({}) {{",
            params.join(", ")
        );
    }

    /// The terms of the reduced index alone for its index `j`: its inputs, from the shared tile
    /// when it holds them, else from global memory, then the nodes computed from them.
    fn inner_terms(&mut self) {
        let layout = self.layout;
        let live = &layout.live;
        for (id, node) in self.formula.graph.nodes.iter().enumerate().filter(|&(id, _)| live[id]) {
            if let (Op::Input(p), Some(Role::Inner)) = (node.op, layout.plan.roles[id]) {
                let d = node.dim;
                let line = match layout.shared_offsets[p] {
                    Some(off) => format!("        T v{id}[{d}]; for (int k = 0; k < {d}; k++) v{id}[k] = tile[({off} + k) * {} + jj];", layout.tile_name),
                    None => format!("        T v{id}[{d}]; for (int k = 0; k < {d}; k++) v{id}[k] = rk_load(in{p}[j + (long long)n_red * k]);"),
                };
                self.line(&line);
            }
        }
        for &id in layout.plan.inner.iter().filter(|&&id| live[id]) {
            self.node(id);
        }
    }

    /// Registers of an input that does not vary with the reduced index (parameter or output row).
    fn input_registers(&mut self, id: NodeId, p: usize) {
        let d = self.formula.graph.dim(id);
        let index = match self.formula.variables[p].category {
            Category::Param => "k".to_string(),
            _ => format!("r_{} + (long long)n_out * k", self.q),
        };
        let v = self.name(id);
        self.line(&format!("  T {v}[{d}]; for (int k = 0; k < {d}; k++) {v}[k] = rk_load(in{p}[{index}]);"));
    }

    fn math(&self, name: &str) -> String {
        self.dtype.math(name)
    }

    /// Emits `T v{id}[dim]` computed from its arguments.
    fn node(&mut self, id: NodeId) {
        let (formula, layout) = (self.formula, self.layout);
        let node = &formula.graph.nodes[id];
        let o = Operands {
            out: self.name(id),
            d: node.dim,
            args: node.args.iter().map(|&x| (self.name(x), formula.graph.dim(x))).collect(),
        };
        let body = match node.op {
            _ if layout.dots.is_some_and(|dots| dots.node == id) => {
                layout.dots.map(|dots| dots.read(&o.out)).unwrap_or_default()
            }
            Op::Input(_) => return,
            Op::Constant(_) => {
                let slot = self.constant_nodes.iter().position(|&c| c == id).expect("every number has a slot");
                format!("{}[0] = rk_consts[{slot}];", o.out)
            }
            Op::Neg
            | Op::Abs
            | Op::Acos
            | Op::Asin
            | Op::Atan
            | Op::Cos
            | Op::Sin
            | Op::Exp
            | Op::Log
            | Op::Floor
            | Op::Sqrt
            | Op::Inv
            | Op::Square
            | Op::ReLU
            | Op::Rsqrt
            | Op::Sign
            | Op::Step
            | Op::SinXDivX
            | Op::XLogX
            | Op::Round(_)
            | Op::Pow(_)
            | Op::ClampInt(..) => self.one_argument(node, &o),
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Atan2
            | Op::Powf
            | Op::Equal
            | Op::NotEqual
            | Op::LessThan
            | Op::LessOrEqual
            | Op::Clamp
            | Op::IfElse
            | Op::Mod => self.several_arguments(node, &o),
            Op::Sum | Op::SqNorm2 | Op::Dot | Op::Max | Op::Min | Op::ArgMax | Op::ArgMin => {
                Gen::over_components(node, &o)
            }
            Op::Elem(_)
            | Op::ElemT(..)
            | Op::Extract(..)
            | Op::ExtractT(..)
            | Op::Concat
            | Op::OneHot(_)
            | Op::SumT(_)
            | Op::MatVecMult
            | Op::VecMatMult
            | Op::TensorProd => self.reshaping(node, &o),
        };
        let indent = if matches!(layout.plan.roles[id], Some(Role::Inner | Role::Pair)) { "        " } else { "  " };
        // A number's value stays out of the source (it is in rk_consts).
        let what = match node.op {
            Op::Constant(_) => "number".to_string(),
            op => format!("{op:?}"),
        };
        self.line(&format!("{indent}// node {id}: {what}\n{indent}T {}[{}]; {body}", o.out, o.d));
    }

    /// The body of an element-wise operation of one argument.
    fn one_argument(&self, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let m = |f: &str| self.math(f);
        let elementwise = |expr: String| o.elementwise(expr);
        match node.op {
            Op::Neg => elementwise(format!("-{}", at(0, "k"))),
            Op::Abs => elementwise(format!("{}({})", m("fabs"), at(0, "k"))),
            Op::Acos => elementwise(format!("{}({})", m("acos"), at(0, "k"))),
            Op::Asin => elementwise(format!("{}({})", m("asin"), at(0, "k"))),
            Op::Atan => elementwise(format!("{}({})", m("atan"), at(0, "k"))),
            Op::Cos => elementwise(format!("{}({})", m("cos"), at(0, "k"))),
            Op::Sin => elementwise(format!("{}({})", m("sin"), at(0, "k"))),
            Op::Exp => elementwise(format!("rk_exp({})", at(0, "k"))),
            Op::Log => elementwise(format!("{}({})", m("log"), at(0, "k"))),
            Op::Floor => elementwise(format!("{}({})", m("floor"), at(0, "k"))),
            Op::Sqrt => elementwise(format!("{}({})", m("sqrt"), at(0, "k"))),
            Op::Inv => elementwise(format!("(T)1 / {}", at(0, "k"))),
            Op::Square => elementwise(format!("{0} * {0}", at(0, "k"))),
            Op::ReLU => elementwise(format!("({0} < (T)0) ? (T)0 : {0}", at(0, "k"))),
            Op::Rsqrt => elementwise(format!("({0} == (T)0) ? (T)0 : (T)1 / {1}({0})", at(0, "k"), m("sqrt"))),
            Op::Sign => elementwise(format!("({0} > (T)0) ? (T)1 : (({0} < (T)0) ? (T)-1 : {0})", at(0, "k"))),
            Op::Step => elementwise(format!("({0} >= (T)0) ? (T)1 : (({0} < (T)0) ? (T)0 : {0})", at(0, "k"))),
            Op::SinXDivX => elementwise(format!("({0} == (T)0) ? (T)1 : {1}({0}) / {0}", at(0, "k"), m("sin"))),
            Op::XLogX => elementwise(format!("({0} == (T)0) ? (T)0 : {0} * {1}({0})", at(0, "k"), m("log"))),
            Op::Round(0) => elementwise(format!("{}({})", m("round"), at(0, "k"))),
            Op::Round(digits) => {
                let p = format!("((T){:?})", 10f64.powi(digits));
                elementwise(format!("{}({} * {p}) / {p}", m("round"), at(0, "k")))
            }
            Op::Pow(n) => elementwise(format!("rk_powi({}, {n})", at(0, "k"))),
            Op::ClampInt(lo, hi) => {
                elementwise(format!("({0} < (T){lo}) ? (T){lo} : (({0} > (T){hi}) ? (T){hi} : {0})", at(0, "k")))
            }
            op => unreachable!("{op:?} is not an operation of one argument"),
        }
    }

    /// The body of an element-wise operation of two or three arguments (a dimension-1 argument is
    /// broadcast).
    fn several_arguments(&self, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let m = |f: &str| self.math(f);
        let elementwise = |expr: String| o.elementwise(expr);
        match node.op {
            Op::Add => elementwise(format!("{} + {}", at(0, "k"), at(1, "k"))),
            Op::Sub => elementwise(format!("{} - {}", at(0, "k"), at(1, "k"))),
            Op::Mul => elementwise(format!("{} * {}", at(0, "k"), at(1, "k"))),
            // A divisor that does not vary in the loop over the reduced index (a number of the
            // formula, now a kernel argument, or a value of the row) goes through rk_div_fixed.
            Op::Div if matches!(self.layout.plan.roles[node.args[1]], Some(Role::Constant | Role::Outer)) => {
                elementwise(format!("rk_div_fixed({}, {})", at(0, "k"), at(1, "k")))
            }
            Op::Div => elementwise(format!("{} / {}", at(0, "k"), at(1, "k"))),
            Op::Atan2 => elementwise(format!("{}({}, {})", m("atan2"), at(0, "k"), at(1, "k"))),
            Op::Powf => elementwise(format!("{}({}, {})", m("pow"), at(0, "k"), at(1, "k"))),
            Op::Equal => elementwise(format!("({} == {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::NotEqual => elementwise(format!("({} != {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::LessThan => elementwise(format!("({} < {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::LessOrEqual => elementwise(format!("({} <= {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::Clamp => elementwise(format!(
                "({0} < {1}) ? {1} : (({0} > {2}) ? {2} : {0})",
                at(0, "k"),
                at(1, "k"),
                at(2, "k")
            )),
            Op::IfElse => elementwise(format!("({} >= (T)0) ? {} : {}", at(0, "k"), at(1, "k"), at(2, "k"))),
            Op::Mod => elementwise(format!(
                "{0} - {1} * {3}(({0} - {2}) / {1})",
                at(0, "k"),
                at(1, "k"),
                at(2, "k"),
                m("floor")
            )),
            op => unreachable!("{op:?} is not an element-wise operation of several arguments"),
        }
    }

    /// The body of a reduction over the components of a vector (of dimension 1).
    fn over_components(node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let (out, a) = (&o.out, &o.args);
        match node.op {
            Op::Sum => {
                format!("{out}[0] = {}; for (int k = 1; k < {}; k++) {out}[0] += {};", at(0, "0"), a[0].1, at(0, "k"))
            }
            Op::SqNorm2 => {
                format!("{out}[0] = (T)0; for (int k = 0; k < {}; k++) {out}[0] += {1} * {1};", a[0].1, at(0, "k"))
            }
            Op::Dot => format!(
                "{out}[0] = (T)0; for (int k = 0; k < {}; k++) {out}[0] += {} * {};",
                a[0].1.max(a[1].1),
                at(0, "k"),
                at(1, "k")
            ),
            Op::Max | Op::Min => {
                let cmp = if node.op == Op::Max { ">" } else { "<" };
                format!(
                    "{out}[0] = {0}; for (int k = 1; k < {1}; k++) {{ T x = {2}; if (x {cmp} {out}[0] || rk_isnan(x)) {out}[0] = x; }}",
                    at(0, "0"),
                    a[0].1,
                    at(0, "k")
                )
            }
            Op::ArgMax | Op::ArgMin => {
                let cmp = if node.op == Op::ArgMax { ">" } else { "<" };
                format!(
                    "{{ T best = {0}; {out}[0] = (T)0; for (int k = 1; k < {1}; k++) {{ T x = {2}; \
                     if (x {cmp} best || (rk_isnan(x) && !rk_isnan(best))) {{ best = x; {out}[0] = (T)k; }} }} }}",
                    at(0, "0"),
                    a[0].1,
                    at(0, "k")
                )
            }
            op => unreachable!("{op:?} is not a reduction over the components"),
        }
    }

    /// The body of a reshaping (elements, extraction, concatenation, ...) or of a product of
    /// matrices and vectors.
    fn reshaping(&self, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let m = |f: &str| self.math(f);
        let elementwise = |expr: String| o.elementwise(expr);
        let (out, d, a) = (&o.out, o.d, &o.args);
        match node.op {
            Op::Elem(p) => format!("{out}[0] = {};", at(0, &p.to_string())),
            Op::ElemT(_, p) => format!("for (int k = 0; k < {d}; k++) {out}[k] = (T)0; {out}[{p}] = {};", at(0, "0")),
            Op::Extract(start, _) => format!("for (int k = 0; k < {d}; k++) {out}[k] = {};", at(0, &format!("{start} + k"))),
            Op::ExtractT(start, _) => format!(
                "for (int k = 0; k < {d}; k++) {out}[k] = (T)0; for (int k = 0; k < {}; k++) {out}[{start} + k] = {};",
                a[0].1,
                at(0, "k")
            ),
            Op::Concat => format!(
                "for (int k = 0; k < {0}; k++) {out}[k] = {1}; for (int k = 0; k < {2}; k++) {out}[{0} + k] = {3};",
                a[0].1,
                at(0, "k"),
                a[1].1,
                at(1, "k")
            ),
            Op::OneHot(_) => format!("for (int k = 0; k < {d}; k++) {out}[k] = ({}({}) == (T)k) ? (T)1 : (T)0;", m("round"), at(0, "0")),
            Op::SumT(_) => elementwise(at(0, "0")),
            Op::MatVecMult => format!(
                "for (int k = 0; k < {d}; k++) {{ {out}[k] = (T)0; for (int l = 0; l < {}; l++) {out}[k] += {} * {}; }}",
                a[1].1,
                at(0, &format!("k + {d} * l")),
                at(1, "l")
            ),
            Op::VecMatMult => format!(
                "for (int l = 0; l < {d}; l++) {{ {out}[l] = (T)0; for (int k = 0; k < {0}; k++) {out}[l] += {1} * {2}; }}",
                a[0].1,
                at(0, "k"),
                at(1, &format!("k + {} * l", a[0].1))
            ),
            Op::TensorProd => format!(
                "for (int l = 0; l < {}; l++) for (int k = 0; k < {1}; k++) {out}[k + {1} * l] = {2} * {3};",
                a[1].1,
                a[0].1,
                at(0, "k"),
                at(1, "l")
            ),
            op => unreachable!("{op:?} is not a reshaping"),
        }
    }
}

/// The register arrays of a node and of its arguments, as `Gen::node` writes its body.
struct Operands {
    /// The node's array, and its dimension.
    out: String,
    d: usize,
    /// Each argument's array and its dimension.
    args: Vec<(String, usize)>,
}

impl Operands {
    /// Component `k` of argument `i`, broadcasting dimension 1.
    fn at(&self, i: usize, k: &str) -> String {
        let (name, dim) = &self.args[i];
        if *dim == 1 {
            format!("{name}[0]")
        } else {
            format!("{name}[{k}]")
        }
    }

    /// Every component of the node set to `expr` (of `k`).
    fn elementwise(&self, expr: String) -> String {
        format!("for (int k = 0; k < {d}; k++) {out}[k] = {expr};", d = self.d, out = self.out)
    }
}

/// Selections of at most this many values per row (K times the dimension) keep them in registers:
/// their insertion is written out with every index known when compiling. Larger ones index arrays
/// in local memory, with less code (compile time grows with the network).
const REGISTER_SELECTION: usize = 64;

/// The insertion of `fv[c]`, the value of the reduced index `j`, into the sorted list of the `k`
/// best values of component `c` (`best@`, `best_j@` from `c * k`), as the CPU accumulator does it
/// (NaN wins, equal values keep index order, an empty slot, of index -1, takes any value, a marker
/// of the earlier blocks' K-th value, of index -2, is a value that comes after its equals), written
/// as selects on registers: slot `s` takes the value of slot `s - 1` if the new value goes before
/// that one, the new value if it goes before slot `s` only, else keeps its own. Values that are
/// neither infinite nor NaN compare with one comparison (an empty slot holds the infinity that any
/// of them passes, a NaN slot stays ahead of them), which a warp takes unless one of its rows holds
/// an infinite or NaN value.
fn selection_network(fv: &str, c: usize, k: usize, cmp: &str, fabs: &str) -> String {
    let (first, last) = (c * k, c * k + k - 1);
    let general =
        |s: usize| format!("(best_j@[{s}] == -1 || x {cmp} best@[{s}] || (rk_isnan(x) && !rk_isnan(best@[{s}])))");
    let plain = |s: usize| format!("(x {cmp} best@[{s}])");
    let network = |goes_before: &dyn Fn(usize) -> String| {
        let mut code = format!("            bool c{last} = true;\n");
        for s in (first + 1..=last).rev() {
            let _ = writeln!(
                code,
                "            bool c{p} = {before}; best@[{s}] = c{p} ? best@[{p}] : c{s} ? x : best@[{s}]; best_j@[{s}] = c{p} ? best_j@[{p}] : c{s} ? j : best_j@[{s}];",
                p = s - 1,
                before = goes_before(s - 1)
            );
        }
        let _ = writeln!(code, "            if (c{first}) {{ best@[{first}] = x; best_j@[{first}] = j; }}");
        code
    };
    format!(
        "        {{ T x = {fv}[{c}];\n\
         \x20         if ({enters}) {{\n\
         \x20           if ({fabs}(x) < RK_INF) {{\n{plain}\x20           }} else {{\n{general}\x20           }}\n\
         \x20         }}\n\
         \x20       }}",
        enters = general(last),
        plain = network(&plain),
        general = network(&general),
    )
}

/// The insertion of `x`, of index `j`, into the sorted list `b`, `bj` of `k` values and indices,
/// as the CPU accumulator does it: NaN wins, equal values keep index order. A value that does not
/// enter (`worst` is the last of the list and `full` whether it holds `k`) does `skip`.
fn sorted_insertion(k: usize, cmp: &str, worst: &str, full: &str, skip: &str) -> String {
    let last = k - 1;
    format!(
        "          if ({full} && !(x {cmp} {worst} || (rk_isnan(x) && !rk_isnan({worst})))) {skip};\n\
         \x20         int p = {last};\n\
         \x20         while (p > 0 && (bj[p - 1] == -1 || x {cmp} b[p - 1] || (rk_isnan(x) && !rk_isnan(b[p - 1])))) {{ b[p] = b[p - 1]; bj[p] = bj[p - 1]; p--; }}\n\
         \x20         b[p] = x; bj[p] = j;\n\
         \x20         {worst} = b[{last}]; {full} = bj[{last}] != -1;\n"
    )
}

/// Emits a line of the reducer with its registers (`name@`) named for the current row slot.
fn emit(g: &mut Gen, code: &str) {
    let line = code.replace('@', &format!("_{}", g.q));
    g.line(&line);
}

/// Emits the reduction's registers, tile loop hooks and the final store of the state.
struct Reducer<'a> {
    acc: &'a Accumulator,
    f: NodeId,
    g: Option<NodeId>,
    fdim: usize,
    selection: Selection,
}

impl Reducer<'_> {
    fn init(&self, g: &mut Gen) {
        use ReductionKind::*;
        let (d, k) = (self.fdim, self.acc.k);
        match self.acc.kind {
            Sum => match self.acc.scheme {
                SumScheme::KahanScheme => emit(g, &format!("  T acc@[{d}], comp@[{d}]; for (int k = 0; k < {d}; k++) {{ acc@[k] = (T)0; comp@[k] = (T)0; }}")),
                SumScheme::DirectSum => emit(g, &format!("  T acc@[{d}]; for (int k = 0; k < {d}; k++) acc@[k] = (T)0;")),
                SumScheme::Auto | SumScheme::BlockSum => emit(g, &format!("  double acc@[{d}]; for (int k = 0; k < {d}; k++) acc@[k] = 0.0;")),
            },
            Min | ArgMin | MinArgMin | KMin | ArgKMin | KMinArgKMin | Max | ArgMax | MaxArgMax => {
                let n = d * k;
                let init = if self.acc.kind.keeps_maxima() { "-RK_INF" } else { "RK_INF" };
                // (unrolled: the selection networks keep these arrays in registers)
                emit(g, &format!("  T best@[{n}]; int best_j@[{n}];\n  #pragma unroll\n  for (int k = 0; k < {n}; k++) {{ best@[k] = {init}; best_j@[k] = -1; }}"));
                // The last of the K best of each component and whether there are K, in registers:
                // the test that rejects most values reads no local memory (see accumulate).
                emit(g, &format!("  T worst@[{d}]; bool full@[{d}];\n  #pragma unroll\n  for (int c = 0; c < {d}; c++) {{ worst@[c] = {init}; full@[c] = false; }}"));
                // A later block of the reduced range (a step of a long reduction) starts from the
                // K-th best value of the earlier ones, where there are K: a value that does not pass
                // it cannot enter the row's list, so that the list starts full of markers of that
                // value (index -2, stored as empty slots; the merge keeps the K best of both lists).
                // Without it, each step filled its list again (10-NN of 1e7 points on an H200: 61.1
                // against 46.3 s of kernel).
                let (half, len) = (n, self.acc.state_len());
                emit(g, &format!(
                    "  if (rk_running != 0 && row@ < row_end) {{\n\
                     \x20   const double* s = rk_running + (long long)row@ * {len};\n\
                     \x20   #pragma unroll\n\
                     \x20   for (int c = 0; c < {d}; c++) {{\n\
                     \x20     if (s[{half} + c * {k} + {last}] < 0.0) continue;\n\
                     \x20     const T seed = (T)s[c * {k} + {last}];\n\
                     \x20     #pragma unroll\n\
                     \x20     for (int p = 0; p < {k}; p++) {{ best@[c * {k} + p] = seed; best_j@[c * {k} + p] = -2; }}\n\
                     \x20     worst@[c] = seed; full@[c] = true;\n\
                     \x20   }}\n\
                     \x20 }}",
                    last = k - 1
                ));
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                let sums = self.acc.state_len() - 1;
                // mt@, the reference maximum of the float sums ts@ of each tile, is kept from one
                // tile to the next, so that they are rescaled only when a value passes it (see
                // accumulate). Its finite start (the lowest finite value) makes x - mt@ exact for
                // x = -inf.
                emit(g, &format!("  double m@ = -(double)RK_INF; double s@[{sums}]; for (int k = 0; k < {sums}; k++) s@[k] = 0.0; T mt@ = -RK_MAX;"));
            }
        }
    }

    fn tile_begin(&self, g: &mut Gen) {
        use ReductionKind::*;
        let d = self.fdim;
        match self.acc.kind {
            Sum if matches!(self.acc.scheme, SumScheme::Auto | SumScheme::BlockSum) => {
                emit(g, &format!("      T part@[{d}]; for (int k = 0; k < {d}; k++) part@[k] = (T)0;"));
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                let sums = self.acc.state_len() - 1;
                emit(g, &format!("      T ts@[{sums}]; for (int k = 0; k < {sums}; k++) ts@[k] = (T)0;"));
            }
            _ => {}
        }
    }

    fn accumulate(&self, g: &mut Gen) {
        use ReductionKind::*;
        let (d, kk, fv) = (self.fdim, self.acc.k, g.name(self.f));
        match self.acc.kind {
            Sum => match self.acc.scheme {
                SumScheme::KahanScheme => emit(g, &format!(
                    "        for (int k = 0; k < {d}; k++) {{ T y = {fv}[k] - comp@[k]; T t = acc@[k] + y; comp@[k] = (t - acc@[k]) - y; acc@[k] = t; }}"
                )),
                SumScheme::DirectSum => emit(g, &format!("        for (int k = 0; k < {d}; k++) acc@[k] += {fv}[k];")),
                SumScheme::Auto | SumScheme::BlockSum => emit(g, &format!("        for (int k = 0; k < {d}; k++) part@[k] += {fv}[k];")),
            },
            Min | ArgMin | MinArgMin | KMin | ArgKMin | KMinArgKMin | Max | ArgMax | MaxArgMax => {
                let cmp = if self.acc.kind.keeps_maxima() { ">" } else { "<" };
                if matches!(self.selection, Selection::Registers | Selection::FilteredRegisters) && d * kk <= REGISTER_SELECTION {
                    let fabs = g.math("fabs");
                    for c in 0..d {
                        emit(g, &selection_network(&fv, c, kk, cmp, &fabs));
                    }
                    return;
                }
                emit(g, &format!(
                    "        #pragma unroll\n\
                     \x20       for (int c = 0; c < {d}; c++) {{\n\
                     \x20         T x = {fv}[c]; T* b = best@ + c * {kk}; int* bj = best_j@ + c * {kk};\n\
                     {insertion}\
                     \x20       }}",
                    insertion = sorted_insertion(kk, cmp, "worst@[c]", "full@[c]", "continue")
                ));
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                // mt is a reference, not the exact maximum: a value up to RK_LAZY above it adds a
                // term of at most exp(RK_LAZY), so the sums are rescaled only when a value passes it by
                // more (a few times per row) and the usual step is a subtraction, one ex2 and the
                // adds. The other step is the exact online maximum: it also takes infinities (x - mt
                // is NaN for x = mt = +inf) and NaN, which never compares larger, so that exp(NaN)
                // carries it into the sums. (`exponentials` takes most values a group at a time.)
                let (e, add, grow) = self.log_sum_exp_terms(g, "ts@");
                emit(g, &format!(
                    "        {{ T x = {fv}[0]; T dx = x - mt@;\n\
                     \x20         if (dx <= (T)RK_LAZY) {{ T e = {e}(dx); {add}}}\n\
                     \x20         else if (x > mt@) {{ T sc = {e}(mt@ - x); {grow}mt@ = x; }}\n\
                     \x20         else {{ T e = (x == mt@) ? (T)1 : {e}(x - mt@); {add}}} }}"
                ));
            }
        }
    }

    /// The exponential of a log-sum-exp step, and the code that adds its term `e` to the sums
    /// `sums` (and that rescales them by `sc` for a new reference, adding the term 1). Terms below
    /// 2^-126 (values more than 87 below the reference, whose term is 1) are flushed to 0 but for
    /// LogSumExpWeight, whose weights may be 0 at every larger term.
    fn log_sum_exp_terms(&self, g: &Gen, sums: &str) -> (&'static str, String, String) {
        let plain = self.acc.kind != ReductionKind::LogSumExpWeight;
        let e = if plain { "rk_exp_ftz" } else { "rk_exp" };
        let gdim = self.acc.gdim;
        let mut grow = String::new();
        let mut add = String::new();
        let mut slot = 0;
        if plain {
            let _ = write!(grow, "{sums}[0] = {sums}[0] * sc + (T)1; ");
            let _ = write!(add, "{sums}[0] += e; ");
            slot = 1;
        }
        if let Some(gid) = self.g {
            let gv = g.name(gid);
            let w = |c: usize| if gdim == 1 { format!("{gv}[0]") } else { format!("{gv}[{c}]") };
            for c in 0..gdim {
                let _ = write!(grow, "{sums}[{}] = {sums}[{}] * sc + {}; ", slot + c, slot + c, w(c));
                let _ = write!(add, "{sums}[{}] += e * {}; ", slot + c, w(c));
            }
        }
        (e, add, grow)
    }

    fn tile_end(&self, g: &mut Gen) {
        use ReductionKind::*;
        let d = self.fdim;
        match self.acc.kind {
            Sum if matches!(self.acc.scheme, SumScheme::Auto | SumScheme::BlockSum) => {
                emit(g, &format!("      for (int k = 0; k < {d}; k++) acc@[k] += (double)part@[k];"));
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                let sums = self.acc.state_len() - 1;
                emit(g, &format!(
                    "      {{\n\
                     \x20       double mn = fmax(m@, (double)mt@);\n\
                     \x20       double so = (m@ == mn) ? 1.0 : exp(m@ - mn), sn = ((double)mt@ == mn) ? 1.0 : exp((double)mt@ - mn);\n\
                     \x20       for (int k = 0; k < {sums}; k++) s@[k] = s@[k] * so + (double)ts@[k] * sn;\n\
                     \x20       m@ = mn;\n\
                     \x20     }}"
                ));
            }
            _ => {}
        }
    }

    fn store(&self, g: &mut Gen) {
        use ReductionKind::*;
        let d = self.fdim;
        match self.acc.kind {
            Sum => {
                emit(g, &format!("    for (int k = 0; k < {d}; k++) out[k] = (double)acc@[k];"));
                if self.acc.scheme == SumScheme::KahanScheme {
                    emit(g, &format!("    for (int k = 0; k < {d}; k++) out[{d} + k] = (double)comp@[k];"));
                }
            }
            Min | ArgMin | MinArgMin | KMin | ArgKMin | KMinArgKMin | Max | ArgMax | MaxArgMax => {
                let n = d * self.acc.k;
                emit(g, &format!("    #pragma unroll\n    for (int k = 0; k < {n}; k++) {{ out[k] = (double)best@[k]; out[{n} + k] = best_j@[k] >= 0 ? (double)best_j@[k] + j_offset : -1.0; }}"));
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                let sums = self.acc.state_len() - 1;
                emit(g, &format!("    out[0] = m@; for (int k = 0; k < {sums}; k++) out[1 + k] = s@[k];"));
            }
        }
    }
}

#[cfg(test)]
mod tests {
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
            assert!(
                kernel.contains("e = a_0[k] * yv[k] + e; rk_mark(bits_0, e, thr_0, 1u << ji);"),
                "{text}: {kernel}"
            );
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
            generate_variant(&f, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local))
                .source
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
        assert!(src.contains("gs_0[0] += e; gs_0[1] += e * v") && src.contains("gs_0[2] += e * v"), "{src}");
        let src = source("LogSumExpWeight_Reduction(-SqDist(x, y), b, 0)");
        assert!(src.contains("T e = rk_exp(dx); gs_0[0] += e * v") && src.contains("gm_0 = fmaxf(gm_0, dx);"), "{src}");
        assert!(!src.contains("mtl_0"), "{src}");
        // The exponential that keeps subnormal results squares that of half the exponent.
        assert!(src.contains("const float y = rk_ex2_ftz(x * 0.7213475204444817f); return y * y; }"), "{src}");
        assert!(src.contains("if (!(gm_0 <= (T)RK_LAZY)) {"), "{src}");
    }

    /// Terms of the reduced index alone are computed where the tile is loaded, once per index, and
    /// the pairs read them from the tile; the rows' terms stay out of the loop too.
    #[test]
    fn terms_of_one_index_are_computed_once_per_index() {
        use super::{generate_variant, KernelOptions, Variant};
        use crate::cuda::dtype::Dtype;
        use crate::reduction::SumScheme;
        let args = ["x = Vi(10)".to_string(), "y = Vj(10)".to_string()];
        let cosine = Formula::parse("ArgKMin_Reduction(SqDist(Normalize(x), Normalize(y)), 10, 0)", &args).unwrap();
        let source = |f: &Formula| {
            generate_variant(f, &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::Dense, Selection::Local))
                .source
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
        let src = generate_variant(
            &knn,
            &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local),
        )
        .source;
        let (load, pairs) = src.split_once("for (int jj = 0; jj < len; jj++)").expect("a loop over the tile");
        assert!(load.contains("rk_dot_tile(rk_split, rk_split_norms, j0, rk_dynamic, rk_smem, rk_norms);"), "{load}");
        assert!(pairs.contains("= rk_smem[threadIdx.x * (64 + 1) + jj];"), "{pairs}");
        assert!(
            pairs.contains("if (rk_isnan(v3_0[0])) v3_0[0] = rk_sqdist(in0, in1, n_out, n_red, r_0, j);"),
            "{pairs}"
        );
        assert!(!src.contains("T v1[40]") && !src.contains("__shared__ T tile"), "{src}");
        // Other terms of j still go through the shared tile, of the dots' 64 columns.
        let gauss = parse("Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)", 40);
        let src = generate_variant(
            &gauss,
            &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local),
        )
        .source;
        assert!(src.contains("__shared__ T tile[RK_COLUMNS * 1]") && src.contains("threadIdx.x < RK_COLUMNS"), "{src}");
        // Up to 128 dimensions, the block's rows stay in shared memory and a kernel run first splits
        // y for the tensor cores; above, both are staged per tile.
        let kernel = generate_variant(
            &knn,
            &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local),
        );
        let prepare = kernel.prepare.expect("a preparation");
        assert_eq!((prepare.outer, prepare.inner, prepare.split_bytes, prepare.rows(65)), (0, 1, 40 * 8, 128));
        assert!(kernel.source.contains("rk_split, const float* __restrict__ rk_split_norms) {"));
        assert_eq!(kernel.dynamic_shared, (40 * 128 + 128 * 65) * 4);
        let wide = parse("ArgKMin_Reduction(SqDist(x, y), 10, 0)", 129);
        let kernel = generate_variant(
            &wide,
            &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local),
        );
        assert!(kernel.prepare.is_none() && kernel.dynamic_shared == 0);
        assert!(kernel.source.contains(
            "rk_dot_tile(in0, in1, n_out, n_red, blockIdx.x * 128, j0, j_end, rk_smem, rk_norms, rk_centre);"
        ));
        // The streamed variant (for GPUs whose blocks cannot hold resident rows) at any dimension.
        let kernel = generate_variant(
            &knn,
            &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::StreamedDotTiles, Selection::Local),
        );
        assert!(kernel.prepare.is_none() && kernel.dynamic_shared == 0 && kernel.static_shared > 30_000);
        assert!(kernel.source.contains(
            "rk_dot_tile(in0, in1, n_out, n_red, blockIdx.x * 128, j0, j_end, rk_smem, rk_norms, rk_centre);"
        ));
        let kernel = generate_variant(
            &gauss,
            &KernelOptions::new(Dtype::F32, SumScheme::Auto, Variant::DotTiles, Selection::Local),
        );
        assert_eq!(kernel.static_shared, (128 + 64) * 4);
    }
}

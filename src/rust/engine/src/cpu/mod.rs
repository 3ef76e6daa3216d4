//! The CPU evaluator: tiles of (one output row) x (`tile_len` reduced indices), every operation one tight
//! loop over the tile in structure-of-arrays layout, threads over blocks of output rows. Memory is
//! O(inputs + outputs + threads x tile), never N x M. Over a short reduced range the tiles run along
//! the output rows instead (`short_range`).

mod backend;
mod columns;
#[cfg(target_arch = "x86_64")]
mod fusion;
pub(crate) mod isa;
mod lanes;
mod nearest_centre;
mod ops;
mod row_block;
mod short_range;
mod split;

pub mod reducers;

pub use backend::Cpu;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use crate::error::{Error, Result};
use crate::formula::{Category, Formula, Op};
use crate::memory;
use crate::plan::{Plan, Role};
use crate::ranges::BlockRanges;
use crate::schedule::work::{cpu_piece_rows, pieces, Work};
use crate::real::Real;
use crate::reduction::{Accumulator, ReductionKind, SumScheme};
use crate::tuning::IsaCap;
use lanes::Arg;
use reducers::Span;

/// Most memory one thread takes for its tile buffers and the reduction states of its block of rows:
/// the tile and the block shrink to fit (intermediate values of 10^5 components, K-selections with a
/// large K), so that memory does not grow with the number of cores times those sizes.
const THREAD_BUDGET: usize = 64 << 20;

/// The shortest tile: a few SIMD vectors of the widest lanes.
const SHORTEST_TILE: usize = 64;

/// Terms (output rows x reduced rows) up to which a reduction runs on the caller's thread alone.
const TINY_WORK: u64 = 1 << 16;

/// Reduced indices per tile: long tiles spread the cost of walking the formula graph, short ones
/// keep the tile's buffers in L1 (16 KiB each) and the inputs it reads in L2 (1 MiB at most). Measured
/// on a Zen CPU: 4096 is best for D = 3 in float32, 1024 for D = 64 in float64. Shorter where the
/// buffers of one reduced index are large (see `THREAD_BUDGET`); an error where even one index
/// would take more than 16 times that.
fn tile_len<T>(formula: &Formula, plan: &Plan, fusions: &fusion::Fusions) -> Result<usize> {
    let size = std::mem::size_of::<T>();
    let reduced = if formula.reduction.axis == 0 { Category::J } else { Category::I };
    let input_dims: usize = formula.variables.iter().filter(|v| v.category == reduced).map(|v| v.dim).sum();
    let fit = (16 << 10) / size;
    let fit = fit.min((1 << 20) / (size * input_dims.max(1)));
    // A power of two between 256 and 4096.
    let tile = (1usize << fit.max(1).ilog2()).clamp(256, 4096);
    // What `Workspace::new` allocates per reduced index of a tile.
    let graph = &formula.graph;
    let mut values = 2;
    for (id, role) in plan.roles.iter().enumerate() {
        if role.is_some_and(Role::varies_in_tile) && !matches!(graph.nodes[id].op, Op::Input(_)) {
            values += graph.dim(id);
        }
    }
    if let Some((_, x, _)) = fusions.row_block {
        values += row_block::ROWS + graph.dim(x);
    }
    let per_index = values.saturating_mul(size);
    if per_index > 16 * THREAD_BUDGET {
        return Err(Error::Invalid(format!(
            "the formula's intermediate values take {:.1} MB for one reduced index (each worker \
             holds them at once); at most {} MB: use fewer or smaller intermediate dimensions",
            per_index as f64 / 1e6,
            (16 * THREAD_BUDGET) >> 20
        )));
    }
    let fit = (THREAD_BUDGET / per_index).max(1);
    Ok(tile.min(1 << fit.ilog2()))
}

/// What the evaluator returns: `width` values and indices per output row, rows one after the other;
/// `values` or `indices` is empty when the reduction does not return it.
pub struct RowMajor {
    pub values: Vec<f64>,
    pub indices: Vec<i32>,
    pub width: usize,
}

impl RowMajor {
    /// Room for `n_out` rows of what `kind` returns, and nothing for what it does not (an ArgKMin of
    /// 10^6 rows needs no 80 MB of values); an error where that does not fit in memory.
    pub fn new(kind: ReductionKind, n_out: usize, width: usize) -> Result<RowMajor> {
        let len = |wanted: bool| if wanted { n_out.saturating_mul(width) } else { 0 };
        let what = format!("the result ({n_out} rows of {width} values)");
        let values = memory::zeros(len(kind.returns_values()), &what)?;
        let indices = memory::zeros(len(kind.returns_indices()), &what)?;
        Ok(RowMajor { values, indices, width })
    }
}

/// Row `r` of a row-major buffer of `width` columns; empty when the buffer is (an output not wanted).
pub fn row_of<X>(buf: &mut [X], r: usize, width: usize) -> &mut [X] {
    buf.get_mut(r * width..(r + 1) * width).unwrap_or_default()
}

/// The inputs of one call, in the working precision, with the sizes of the two indices.
pub struct Inputs<'a, T> {
    pub data: Vec<&'a [T]>,
    pub n_i: usize,
    pub n_j: usize,
}

/// How the CPU evaluates: the sum scheme, on how many threads, the interrupt check and the progress
/// report (`RunOptions::progress`: blocks of output rows done; both called on the caller's thread
/// while the workers compute) and the most capable instruction set allowed.
#[derive(Clone, Copy)]
pub struct Settings {
    pub scheme: SumScheme,
    pub threads: usize,
    pub interrupt: Option<fn() -> bool>,
    pub progress: Option<fn(u64, u64)>,
    pub isa: IsaCap,
}

/// Evaluates the reduction of `formula` over the blocks of `ranges` (checked by the caller) or the
/// whole matrix; `Error::Interrupted` when the interrupt check said to stop.
pub fn evaluate<T: Real>(
    formula: &Formula,
    inputs: &Inputs<T>,
    settings: &Settings,
    ranges: Option<&BlockRanges>,
) -> Result<RowMajor> {
    evaluate_with(formula, inputs, settings, ranges, true)
}

/// `evaluate`, reducing short ranges a block of rows at a time only where `short_ranges` (the tests
/// compare both ways).
fn evaluate_with<T: Real>(
    formula: &Formula,
    inputs: &Inputs<T>,
    settings: &Settings,
    ranges: Option<&BlockRanges>,
    short_ranges: bool,
) -> Result<RowMajor> {
    let red = &formula.reduction;
    let (n_out, n_red) = if red.axis == 0 { (inputs.n_i, inputs.n_j) } else { (inputs.n_j, inputs.n_i) };
    // A reduction of few terms runs on this thread alone, unpolled: starting threads and polling
    // the interrupt check cost more than it (a program's reductions of 20 x 20 points: 0.2 ms a
    // reduction with two threads).
    let alone = Settings { threads: 1, interrupt: None, progress: None, ..*settings };
    let settings = if (n_out as u64).saturating_mul(n_red as u64) <= TINY_WORK { &alone } else { settings };
    let Settings { scheme, threads, isa, .. } = *settings;
    let acc = formula.accumulator(scheme);
    let mut plan = Plan::new(formula);
    let width = acc.width();
    let mut out = RowMajor::new(red.kind, n_out, width)?;
    if let Some(nearest) = nearest_centre::NearestCentre::of(formula, n_red).filter(|_| ranges.is_none()) {
        nearest.evaluate(inputs, settings, red.axis, &mut out)?;
        return Ok(out);
    }

    let cores = threads;
    let threads = threads.clamp(1, n_out.max(1));
    let short =
        short_range::rows_per_block::<T>(formula, &plan, &acc, n_out, n_red, threads, ranges).filter(|_| short_ranges);
    let (fusions, tile, rows_per_block) = match short {
        // A tile is a block of rows.
        Some(rows) => {
            plan = short_range::transpose(&plan);
            (fusion::fuse_elementwise(formula, &mut plan), rows, rows)
        }
        None => {
            let fusions = fusion::fuse(formula, &mut plan, scheme);
            let state_bytes = acc.state_len().max(1) * std::mem::size_of::<f64>();
            let rows_per_block = cpu_piece_rows(n_out, threads, state_bytes, THREAD_BUDGET);
            // (no longer than the reduced range: a tile's buffers are zeroed at every call, which
            // was a tenth of a small program's time at 20 points)
            let tile = tile_len::<T>(formula, &plan, &fusions)?.min(n_red.next_power_of_two().max(SHORTEST_TILE));
            (fusions, tile, rows_per_block)
        }
    };
    let dense = BlockRanges::dense(n_out, n_red);
    let parts = split::parts(n_out, n_red, cores).filter(|_| short.is_none() && ranges.is_none());
    let mut part_states = vec![0.0; parts.as_ref().map_or(0, |p| p.len() * n_out * acc.state_len())];
    let (blocks, threads, rows_per_block): (Vec<Block>, _, _) = match &parts {
        Some(parts) => (split::blocks(parts, n_out, &mut part_states), cores.clamp(1, parts.len()), n_out),
        None => (result_blocks(pieces(ranges.unwrap_or(&dense), n_out, rows_per_block), width, &mut out), threads, rows_per_block),
    };
    let total = blocks.len() as u64;
    let blocks = Mutex::new(blocks.into_iter());
    let ctx = Context {
        formula,
        plan: &plan,
        fusions: &fusions,
        tile,
        acc: &acc,
        inputs,
        n_out,
        n_red,
        rows_per_block,
        transposed: short.is_some(),
        level: isa::Level::detect(isa),
        stop: AtomicBool::new(false),
        done: AtomicUsize::new(0),
    };
    let progress = (&ctx.stop, &ctx.done);
    run_workers(threads, settings, progress, total, || isa::run(ctx.level, Worker { ctx: &ctx, blocks: &blocks }))?;
    drop(blocks);
    if parts.is_some() {
        split::finish::<T>(&acc, &part_states, n_out, &mut out);
    }
    Ok(out)
}

/// Runs `work` on `threads` threads; where `settings` ask for progress reports or interrupts, the
/// caller's thread asks them while the others work (`total` pieces, `done` of them done; `stop` set
/// tells the workers to leave).
fn run_workers(
    threads: usize,
    settings: &Settings,
    (stop, done): (&AtomicBool, &AtomicUsize),
    total: u64,
    work: impl Fn() + Sync,
) -> Result<()> {
    let Settings { interrupt, progress, .. } = *settings;
    if interrupt.is_none() && progress.is_none() {
        match threads {
            1 => work(),
            _ => std::thread::scope(|s| {
                for _ in 0..threads {
                    s.spawn(&work);
                }
            }),
        }
    } else {
        let poll = || {
            if let Some(report) = progress {
                report(done.load(Relaxed) as u64, total);
            }
            interrupt.is_some_and(|interrupted| interrupted())
        };
        crate::parallel::run_polling(threads, |_| work(), poll, stop);
    }
    if stop.load(Relaxed) {
        return Err(Error::Interrupted);
    }
    if let Some(report) = progress {
        report(total, total);
    }
    Ok(())
}

/// The blocks of `work`, each writing its rows' results in `out` (`width` values per row).
fn result_blocks<'r, 'v>(work: Vec<Work<'r>>, width: usize, out: &'v mut RowMajor) -> Vec<Block<'r, 'v>> {
    let (mut values, mut indices) = (&mut out.values[..], &mut out.indices[..]);
    let block = |work: Work<'r>| {
        let len = work.rows.len() * width;
        (work, Dest::Results(split_front(&mut values, len), split_front(&mut indices, len)))
    };
    work.into_iter().map(block).collect()
}

/// The first `len` values of `buf` (nothing when `buf` is empty: an output not wanted), leaving it
/// the rest.
fn split_front<'v, X>(buf: &mut &'v mut [X], len: usize) -> &'v mut [X] {
    let len = len.min(buf.len());
    let (front, rest) = std::mem::take(buf).split_at_mut(len);
    *buf = rest;
    front
}

struct Context<'a, T> {
    formula: &'a Formula,
    plan: &'a Plan,
    fusions: &'a fusion::Fusions,
    tile: usize,
    acc: &'a Accumulator,
    inputs: &'a Inputs<'a, T>,
    n_out: usize,
    n_red: usize,
    rows_per_block: usize,
    /// Whether the tiles run along the output rows, a frame being one reduced index (`short_range`):
    /// `plan` is then transposed, and a tile is a block of `rows_per_block` rows.
    transposed: bool,
    level: isa::Level,
    /// Set when the computation is interrupted: the workers leave at their next tile.
    stop: AtomicBool,
    /// Blocks of output rows reduced (for `Settings::progress`).
    done: AtomicUsize,
}

/// Where the results of a block of output rows go: their values and indices (empty when not
/// wanted), or, for a part of a split reduced range (`split`), their states, merged after.
enum Dest<'v> {
    Results(&'v mut [f64], &'v mut [i32]),
    States(&'v mut [f64]),
}

/// A block of output rows with the ranges it reduces over, and where its results go.
type Block<'r, 'v> = (Work<'r>, Dest<'v>);

/// The queue of blocks the threads take from.
type Blocks<'r, 'v> = std::vec::IntoIter<Block<'r, 'v>>;

/// One thread's work: blocks of output rows taken from the shared queue until none is left.
struct Worker<'a, 'r, 'v, T> {
    ctx: &'a Context<'a, T>,
    blocks: &'a Mutex<Blocks<'r, 'v>>,
}

impl<T: Real> isa::Kernel for Worker<'_, '_, '_, T> {
    #[inline(always)]
    fn run(self, fma: bool) {
        let mut ws = Workspace::new(self.ctx);
        loop {
            let next = self.blocks.lock().map(|mut it| it.next()).unwrap_or(None);
            let Some((work, dest)) = next.filter(|_| !self.ctx.stop.load(Relaxed)) else { break };
            match dest {
                Dest::Results(vals, idx) if self.ctx.transposed => ws.reduce_block(self.ctx, &work, vals, idx, fma),
                Dest::Results(vals, idx) => {
                    ws.reduce_rows(self.ctx, &work, fma);
                    ws.finalize_rows(self.ctx, work.rows.len(), vals, idx);
                }
                Dest::States(states) => {
                    ws.reduce_rows(self.ctx, &work, fma);
                    states.copy_from_slice(&ws.states[..states.len()]);
                }
            }
            self.ctx.done.fetch_add(1, Relaxed);
        }
    }
}

/// One thread's buffers: a tile of values for every computed node, the reduction states of a block
/// of rows, and scratch space. Allocated once per thread and call.
struct Workspace<T> {
    buffers: Vec<Vec<T>>,
    states: Vec<f64>,
    scratch: Vec<T>,
    /// For `fusions.row_block`: the squared distances of a group of rows, the group's first row, its
    /// x values, and the tile's y values packed.
    group: Vec<T>,
    group_first: usize,
    group_x: Vec<T>,
    packed_y: Vec<T>,
    /// The terms of a block of rows, where they are reduced so (`short_range`).
    columns: columns::Columns<T>,
}

impl<T: Real> Workspace<T> {
    fn new(ctx: &Context<T>) -> Self {
        let graph = &ctx.formula.graph;
        let buffers = (0..graph.nodes.len())
            .map(|id| match ctx.plan.roles[id] {
                Some(role) if !matches!(graph.nodes[id].op, Op::Input(_)) => {
                    vec![T::ZERO; graph.dim(id) * if role.varies_in_tile() { ctx.tile } else { 1 }]
                }
                _ => Vec::new(),
            })
            .collect();
        let mut ws = Workspace {
            buffers,
            states: vec![0.0; ctx.rows_per_block * ctx.acc.state_len()],
            scratch: vec![T::ZERO; 2 * ctx.tile],
            group: Vec::new(),
            group_first: 0,
            group_x: Vec::new(),
            packed_y: Vec::new(),
            columns: short_range::columns(ctx),
        };
        if let Some((_, x, _)) = ctx.fusions.row_block {
            ws.group = vec![T::ZERO; row_block::ROWS * ctx.tile];
            ws.group_x = vec![T::ZERO; row_block::ROWS * graph.dim(x)];
            ws.packed_y = vec![T::ZERO; ctx.tile * graph.dim(x)];
        }
        let frame = Frame { row: 0, j0: 0, len: 1 };
        for &id in &ctx.plan.constant {
            ws.compute(ctx, id, &frame, false);
        }
        ws
    }

    /// Reduces the rows of `work` over its ranges of the reduced index, into the workspace's `states`.
    #[inline(always)]
    fn reduce_rows(&mut self, ctx: &Context<T>, work: &Work, fma: bool) {
        let (acc, plan, red) = (ctx.acc, ctx.plan, &ctx.formula.reduction);
        let (first, rows) = (work.rows.start, work.rows.len());
        let state_len = acc.state_len();
        for r in 0..rows {
            acc.init(&mut self.states[r * state_len..(r + 1) * state_len]);
        }
        let tiles = work.reduced.iter().flat_map(|range| range.clone().step_by(ctx.tile).map(|j0| (j0, range.end)));
        for (j0, end) in tiles {
            if ctx.stop.load(Relaxed) {
                return;
            }
            let len = ctx.tile.min(end - j0);
            let tile = Frame { row: first, j0, len };
            for &id in &plan.inner {
                self.compute(ctx, id, &tile, fma);
            }
            if let Some((_, _, y)) = ctx.fusions.row_block {
                row_block::pack(&view(ctx, &self.buffers, y, &tile), len, &mut self.packed_y);
            }
            for r in 0..rows {
                let frame = Frame { row: first + r, j0, len };
                if let Some((_, x, y)) = ctx.fusions.row_block.filter(|_| r % row_block::ROWS == 0) {
                    let (x, y) = (view(ctx, &self.buffers, x, &frame), view(ctx, &self.buffers, y, &frame));
                    let group = row_block::ROWS.min(rows - r);
                    let (out, xs) = (&mut self.group, &mut self.group_x);
                    row_block::sq_dists((&x, &y), &self.packed_y, group, len, (out, xs), fma);
                    self.group_first = first + r;
                }
                for &id in &plan.outer {
                    self.compute(ctx, id, &Frame { len: 1, ..frame }, fma);
                }
                for &id in &plan.pair {
                    self.compute(ctx, id, &frame, fma);
                }
                let state = &mut self.states[r * state_len..(r + 1) * state_len];
                let span = Span { j0, len, fma };
                if let Some([a, b]) = ctx.fusions.product_sum {
                    let (a, b) = (view(ctx, &self.buffers, a, &frame), view(ctx, &self.buffers, b, &frame));
                    acc.accumulate_product_sum(state, (&a, &b), span, &mut self.scratch);
                } else if let Some([a, b]) = ctx.fusions.select_dist {
                    let (a, b) = (view(ctx, &self.buffers, a, &frame), view(ctx, &self.buffers, b, &frame));
                    acc.accumulate_select_dist(state, (&a, &b), span);
                } else {
                    let f = view(ctx, &self.buffers, red.f, &frame);
                    let g = red.g.map_or(Arg::EMPTY, |g| view(ctx, &self.buffers, g, &frame));
                    acc.accumulate(state, &f, &g, span, &mut self.scratch);
                }
            }
        }
    }

    /// The results of the first `rows` rows of `states`.
    fn finalize_rows(&self, ctx: &Context<T>, rows: usize, values: &mut [f64], indices: &mut [i32]) {
        let (state_len, width) = (ctx.acc.state_len(), ctx.acc.width());
        for r in 0..rows {
            let state = &self.states[r * state_len..(r + 1) * state_len];
            ctx.acc.finalize::<T>(state, row_of(values, r, width), row_of(indices, r, width));
        }
    }

    /// Computes node `id` over `frame` with the instruction set of the call, in a function of its
    /// own: inlined into every loop that computes nodes, the whole evaluator was one function per
    /// instruction set and precision, which LLVM took minutes to optimise. A call per node and tile
    /// costs nothing next to the tile's work. `fma` false (the constant nodes, computed by
    /// `Workspace::new` outside the instruction sets' copies, without fused multiply-adds) runs the
    /// baseline's copy, whose `fma` is false too.
    #[inline(always)]
    fn compute(&mut self, ctx: &Context<T>, id: usize, frame: &Frame, fma: bool) {
        let level = if fma { ctx.level } else { isa::Level::Baseline };
        isa::run(level, Compute { ws: self, ctx, id, frame });
    }

    #[inline(always)]
    fn compute_here(&mut self, ctx: &Context<T>, id: usize, frame: &Frame, fma: bool) {
        let node = &ctx.formula.graph.nodes[id];
        let mut out = std::mem::take(&mut self.buffers[id]);
        let len = if ctx.plan.roles[id].is_some_and(Role::varies_in_tile) { frame.len } else { 1 };
        if ctx.fusions.row_block.is_some_and(|(node, _, _)| node == id) {
            let q = frame.row - self.group_first;
            out[..len].copy_from_slice(&self.group[q * len..(q + 1) * len]);
        } else if let Some([a, b]) = ctx.fusions.sq_dists[id] {
            let (a, b) = (view(ctx, &self.buffers, a, frame), view(ctx, &self.buffers, b, frame));
            ops::sq_dist(&a, &b, &mut out, len, fma);
        } else if let Some((a, s)) = ctx.fusions.scaled_exps[id] {
            let a = view(ctx, &self.buffers, a, frame);
            let s = s.map(|s| view(ctx, &self.buffers, s, frame));
            ops::scaled_exp(&a, s.as_ref(), &mut out, len, fma, ctx.level.has_avx512());
        } else {
            let mut args = [Arg::EMPTY; 3];
            for (slot, &a) in args.iter_mut().zip(&node.args) {
                *slot = view(ctx, &self.buffers, a, frame);
            }
            ops::eval(node.op, &args, &mut out, node.dim, len, &mut self.scratch, fma);
        }
        self.buffers[id] = out;
    }
}

/// `Workspace::compute` as a kernel of its own.
struct Compute<'w, 'c, T> {
    ws: &'w mut Workspace<T>,
    ctx: &'w Context<'c, T>,
    id: usize,
    frame: &'w Frame,
}

impl<T: Real> isa::Kernel for Compute<'_, '_, T> {
    #[inline(always)]
    fn run(self, fma: bool) {
        self.ws.compute_here(self.ctx, self.id, self.frame, fma);
    }
}

/// The values of node `id` over the current tile: inputs in place, other nodes from their buffer.
#[inline(always)]
fn view<'a, T: Real>(ctx: &'a Context<T>, buffers: &'a [Vec<T>], id: usize, frame: &Frame) -> Arg<'a, T> {
    let node = &ctx.formula.graph.nodes[id];
    let role = ctx.plan.roles[id].expect("only needed nodes are viewed");
    match node.op {
        Op::Input(p) => {
            let data = ctx.inputs.data[p];
            // Rows of the input that is one value per frame, and of the one along the tile.
            let (fixed, tiled) = if ctx.transposed { (ctx.n_red, ctx.n_out) } else { (ctx.n_out, ctx.n_red) };
            match (ctx.formula.variables[p].category, role) {
                (Category::Param, _) => Arg { data, dim: node.dim, stride: 1, vector: false },
                (_, Role::Outer) => Arg { data: &data[frame.row..], dim: node.dim, stride: fixed, vector: false },
                _ => Arg { data: &data[frame.j0..], dim: node.dim, stride: tiled, vector: true },
            }
        }
        _ => {
            let vector = role.varies_in_tile();
            let stride = if vector { frame.len } else { 1 };
            Arg { data: &buffers[id], dim: node.dim, stride, vector }
        }
    }
}

/// Where the evaluator is: the output row, the first reduced index of the tile and the tile length
/// (in a transposed context: the reduced index, the first output row of the tile and its length).
#[derive(Clone, Copy)]
struct Frame {
    row: usize,
    j0: usize,
    len: usize,
}

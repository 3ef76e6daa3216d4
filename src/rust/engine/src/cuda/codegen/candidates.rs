//! Sifted K-selections (`Selection::Filtered`): the loop over a tile takes its indices 32 at a
//! time; for each it computes a value and compares it once with a threshold of the row, setting a
//! bit of a mask per row where the index may enter the row's K best (no branch, no divergence);
//! then each marked index is computed again exactly and inserted as `Selection::Local` does, in
//! the order of the indices. The results are the same as the unsifted kernel's, bit for bit: the
//! threshold only ever lets through more indices than enter.
//!
//! Two ways to sift:
//! - `Exact`: the formula's own value against the row's K-th best (NaN while the row has fewer
//!   than K, so that everything passes: `!(v >= NaN)`; NaN values always pass, as they must, since
//!   NaN wins).
//! - `Expanded`: a nearest-neighbour search (`SqDist(x, y)` of a row input and a reduced-index
//!   input, minima), sifted with `|y|^2 - 2 x.y` (three fused multiply-adds in D = 3 against six
//!   operations for the distance) against `worst - |x|^2`, both points first moved by the same
//!   centre `c` (the block's first row), since the expansion cancels far from the origin. Both sides
//!   carry a margin that covers the rounding: with `u = 2^-24` and `m = (4 D + 16) u`, the tile holds
//!   `y' = fl(y - c)` and `ny = fl(|y'|^2) (1 - m)`, and the row compares with
//!   `thr = worst (1 + m) - fl(|x'|^2) (1 - m)` rounded up. The errors of the fused chain and of
//!   `fl(|y'|^2)` are below `2.1 D u (|x'|^2 + |y'|^2)`, the centring's below `4.2 u (|x'|^2 + |y'|^2)`
//!   and those of the direct distance below `1.1 (D + 2) u d`, so any pair whose distance computed
//!   directly is below `worst` passes (`the_expanded_distance_lets_every_entering_pair_through`
//!   checks it in the kernel's arithmetic); an absolute margin covers the rounding of subnormal
//!   numbers. Where the points are far apart against their distances to the centre, more pairs
//!   pass and are computed again: the sifting costs time there, never exactness. A row or a point
//!   with a non-finite (or overflowing) square norm sifts nothing out (NaN threshold, NaN `ny`).

use super::{emit, selection_network, sorted_insertion, Gen, Reducer, REGISTER_SELECTION};
use crate::cuda::dtype::Dtype;
use crate::formula::{Category, Formula, NodeId, Op};
use crate::plan::{Plan, Role};
use crate::reduction::Accumulator;

/// Indices sifted per mask.
const GROUP: usize = 32;
/// Indices of a group unrolled together: each marks a bit known when compiling in a mask of its
/// own, shifted into the group's after (unrolling the whole group took 0.35 s of NVRTC's time for a
/// 10-NN kernel, this 0.29 s, for two instructions per 16 indices and row).
const UNROLLED: usize = 16;
/// Largest dimension sifted with the expanded distance (the tile then holds `y'` beside `y`).
const MAX_DIM: usize = 16;

/// How a sifted selection sifts its pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Filter {
    Exact,
    Expanded(Expanded),
}

/// The squared distance `SqNorm2(x - y)` (or `y - x`) that a nearest-neighbour search reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expanded {
    /// The input node of the row (`x`), its position among the inputs, and the dimension.
    pub x: NodeId,
    pub x_input: usize,
    pub dim: usize,
    /// Where the shared tile holds `y`.
    pub y_offset: usize,
}

/// The two vectors of the squared distance `SqNorm2(a - b)` that the reduction reduces, if it
/// reduces one (whatever the roles of `a` and `b`).
fn distance_operands(formula: &Formula) -> Option<(NodeId, NodeId)> {
    let graph = &formula.graph;
    let node = &graph.nodes[formula.reduction.f];
    let sub = &graph.nodes[*node.args.first()?];
    let (a, b) = (*sub.args.first()?, *sub.args.get(1)?);
    (node.op == Op::SqNorm2 && sub.op == Op::Sub && graph.dim(a) == graph.dim(b)).then_some((a, b))
}

/// The dimension of the points of that squared distance.
pub(super) fn distance_dim(formula: &Formula) -> Option<usize> {
    distance_operands(formula).map(|(a, _)| formula.graph.dim(a))
}

impl Filter {
    /// `Expanded` where the reduction is a minimum (K-th, arg, ...) of such a distance, in float32
    /// (or float16 storage) with `y` in the shared tile at `y_offset(y)`; else `Exact`.
    pub(super) fn choose(
        formula: &Formula,
        plan: &Plan,
        dtype: Dtype,
        y_offset: impl Fn(NodeId) -> Option<usize>,
    ) -> Filter {
        let kind = formula.reduction.kind;
        let minimum = kind.selects() && !kind.keeps_maxima();
        let graph = &formula.graph;
        let input = |id: NodeId, role: Role| matches!(graph.nodes[id].op, Op::Input(p) if plan.roles[id] == Some(role) && formula.variables[p].category != Category::Param);
        let expanded = || {
            let (a, b) = distance_operands(formula)?;
            let (x, y) = if input(a, Role::Outer) && input(b, Role::Inner) { (a, b) } else { (b, a) };
            let dim = graph.dim(x);
            if !(input(x, Role::Outer) && input(y, Role::Inner)) || dim > MAX_DIM {
                return None;
            }
            let Op::Input(x_input) = graph.nodes[x].op else { return None };
            Some(Expanded { x, x_input, dim, y_offset: y_offset(y)? })
        };
        match (minimum && dtype != Dtype::F64).then(expanded).flatten() {
            Some(e) => Filter::Expanded(e),
            None => Filter::Exact,
        }
    }

    /// Registers a row holds besides its inputs and its selection (for the rows per thread).
    pub(super) fn row_registers(&self) -> usize {
        match self {
            Filter::Exact => 2,
            Filter::Expanded(e) => 3 + e.dim,
        }
    }

    /// The relative margin `m` of the expanded distance (see the module's notes).
    fn margin(dim: usize) -> f64 {
        (4 * dim + 16) as f64 * f64::powi(2.0, -24)
    }

    /// The absolute margin that covers the rounding of subnormal numbers (at most 2^-150 an
    /// operation, which relative margins do not bound).
    fn underflow(dim: usize) -> f64 {
        (8 * dim + 32) as f64 * f64::powi(2.0, -149)
    }

    /// The row's threshold from its K-th best (`rk_sift_threshold`), the mark of a candidate and,
    /// for lists in local memory, the insertion (one function, called from every row slot: each
    /// inlined copy would cost compile time and nothing at run time, insertions being rare).
    pub(super) fn functions(&self, src: &mut String, acc: &Accumulator, dtype: Dtype, lists_in_registers: bool) {
        let maximum = acc.kind.keeps_maxima();
        let nan = "__int_as_float(0x7fc00000)";
        match self {
            Filter::Exact => src.push_str(&format!(
                "// The threshold of a row whose K-th best is worst (NaN, letting everything through,\n\
                 // while the row has fewer than K).\n\
                 __device__ __forceinline__ T rk_sift_threshold(T worst, bool full, T x2) {{ return full ? worst : {nan}; }}\n"
            )),
            Filter::Expanded(e) => {
                let m = Filter::margin(e.dim);
                src.push_str(&format!(
                    "// The threshold of the expanded distance |y'|^2 - 2 x'.y' of a row whose K-th best is worst\n\
                     // (NaN, letting everything through, while the row has fewer than K or |x'|^2 is not finite).\n\
                     __device__ __forceinline__ float rk_sift_threshold(float worst, bool full, float x2) {{\n\
                     \x20 if (!full || !(x2 < RK_INF)) return {nan};\n\
                     \x20 return __double2float_ru((double)worst * {up:?} - (double)x2 * {down:?} + {tiny:?});\n\
                     }}\n",
                    up = 1.0 + m,
                    down = 1.0 - m,
                    tiny = Filter::underflow(e.dim),
                ));
            }
        }
        // `!(v >= thr)` (`<=` for maxima: NaN passes) as a compare and a predicated OR, which the
        // compiler writes as selects and adds otherwise.
        let (passes, (ptx, reg)) =
            (if maximum { "le" } else { "ge" }, if dtype == Dtype::F64 { ("f64", "d") } else { ("f32", "f") });
        src.push_str(&format!(
            "__device__ __forceinline__ void rk_mark(unsigned& mask, T v, T thr, unsigned bit) {{\n\
             \x20 asm(\"{{ .reg .pred p; setp.{passes}.{ptx} p, %1, %2; @!p or.b32 %0, %0, %3; }}\" : \"+r\"(mask) : \"{reg}\"(v), \"{reg}\"(thr), \"r\"(bit));\n\
             }}\n"
        ));
        if !lists_in_registers {
            src.push_str(&insert_function(acc.k, if maximum { ">" } else { "<" }, dtype));
        }
    }

    /// The shared array of the tile's `ny` (expanded distances).
    pub(super) fn block_start(&self, g: &mut Gen) {
        if let Filter::Expanded(e) = self {
            let (d, p) = (e.dim, e.x_input);
            g.line(&format!(
                "  __shared__ T rk_yc[{d} * TILE]; __shared__ T rk_ny[TILE];\n\
                 \x20 const int rk_centre_row = min(row0 - (int)threadIdx.x, n_out - 1);\n\
                 \x20 T rk_c[{d}]; for (int k = 0; k < {d}; k++) rk_c[k] = rk_load(in{p}[rk_centre_row + (long long)n_out * k]);"
            ));
        }
    }

    /// Where the tile is loaded (thread `threadIdx.x`, index `j` of the tile, `y` just stored):
    /// its `y'` and `ny`.
    pub(super) fn load_tile(&self, g: &mut Gen) {
        if let Filter::Expanded(e) = self {
            let scale = (1.0 - Filter::margin(e.dim)) as f32;
            g.line(&format!(
                "        {{ T s = (T)0;\n\
                 \x20         for (int k = 0; k < {d}; k++) {{ const T v = tile[({off} + k) * TILE + threadIdx.x] - rk_c[k]; rk_yc[k * TILE + threadIdx.x] = v; s += v * v; }}\n\
                 \x20         rk_ny[threadIdx.x] = (s < RK_INF) ? s * {scale:?}f : __int_as_float(0x7fc00000); }}",
                d = e.dim,
                off = e.y_offset,
            ));
        }
    }

    /// After the row's selection is set up: its threshold (and for `Expanded`, `-2 x'` and `|x'|^2`).
    pub(super) fn row_start(&self, g: &mut Gen) {
        match self {
            Filter::Exact => emit(g, "  const T x2@ = (T)0; T thr@ = rk_sift_threshold(worst@[0], full@[0], x2@);"),
            Filter::Expanded(e) => {
                let x = g.name(e.x);
                emit(g, &format!(
                    "  T a@[{d}]; T x2@ = (T)0;\n\
                     \x20 for (int k = 0; k < {d}; k++) {{ const T v = {x}[k] - rk_c[k]; a@[k] = (T)-2 * v; x2@ += v * v; }}\n\
                     \x20 T thr@ = rk_sift_threshold(worst@[0], full@[0], x2@);",
                    d = e.dim
                ));
            }
        }
    }

    /// The loop over a tile: masks of candidates, 32 indices at a time, then their insertions.
    pub(super) fn loop_over_tile(&self, g: &mut Gen, reducer: &Reducer) {
        let rows = g.layout.rows;
        g.line("    if (row0 < row_end) {");
        g.line(&format!("      const int len = min({}, j_end - j0);", g.layout.tile_name));
        g.line(&format!("      for (int g0 = 0; g0 < len; g0 += {GROUP}) {{"));
        for q in 0..rows {
            g.q = q;
            emit(g, "      unsigned mask@ = 0u;");
        }
        // Always a whole group, every bit known when compiling (a predicated OR per pair); the
        // bits past the tile's end are cleared after (the tile holds TILE indices, a multiple of 32).
        // (lists in registers: half as many indices at a time, their values' registers for the lists)
        let unrolled = if g.layout.lists_in_registers { UNROLLED / 2 } else { UNROLLED };
        g.line(&format!("      for (int jo = 0; jo < {GROUP}; jo += {unrolled}) {{"));
        for q in 0..rows {
            g.q = q;
            emit(g, "      unsigned bits@ = 0u;");
        }
        g.line(&format!(
            "      #pragma unroll\n      for (int ji = 0; ji < {unrolled}; ji++) {{\n        const int jb = jo + ji;"
        ));
        self.mark(g, reducer);
        g.line("      }");
        for q in 0..rows {
            g.q = q;
            emit(g, "      mask@ |= bits@ << jo;");
        }
        g.line("      }");
        g.line(&format!("      const unsigned valid = len - g0 >= {GROUP} ? ~0u : (1u << (len - g0)) - 1u;"));
        for q in 0..rows {
            g.q = q;
            emit(g, "      mask@ &= valid;\n      while (mask@ != 0u) {\n        const int jb = __ffs(mask@) - 1; mask@ &= mask@ - 1u;");
            g.line("        const int jj = g0 + jb; const int j = j0 + jj;");
            g.index_terms();
            g.pair_nodes();
            match g.layout.lists_in_registers {
                // (the network of selects, on the row's registers)
                true => {
                    reducer.accumulate(g);
                    let last = reducer.acc.k - 1;
                    emit(g, &format!("        thr@ = rk_sift_threshold(best@[{last}], best_j@[{last}] != -1, x2@);"));
                }
                false => {
                    let f = g.name(reducer.f);
                    emit(g, &format!("        thr@ = rk_insert(best@, best_j@, {f}[0], j, x2@);"));
                }
            }
            g.line("      }");
        }
        g.line("      }");
        g.line("    }");
    }

    /// The body of the sifting loop: index `jb` of the group marked in each row's mask (bit `ji` of
    /// its bits) where it may enter.
    fn mark(&self, g: &mut Gen, reducer: &Reducer) {
        match self {
            Filter::Exact => {
                // (past the end of the range, the index of the last: inputs read from global memory)
                g.line("        const int jj = g0 + jb; const int j = min(j0 + jj, j_end - 1);");
                g.index_terms();
                for q in 0..g.layout.rows {
                    g.q = q;
                    g.pair_nodes();
                    let f = g.name(reducer.f);
                    emit(g, &format!("        rk_mark(bits@, {f}[0], thr@, 1u << ji);"));
                }
            }
            Filter::Expanded(e) => {
                let d = e.dim;
                g.line(&format!(
                    "        const int jj = g0 + jb;\n\
                     \x20       T yv[{d}]; for (int k = 0; k < {d}; k++) yv[k] = rk_yc[k * TILE + jj]; const T ny = rk_ny[jj];"
                ));
                for q in 0..g.layout.rows {
                    g.q = q;
                    emit(g, &format!("        {{ T e = ny; for (int k = 0; k < {d}; k++) e = a@[k] * yv[k] + e; rk_mark(bits@, e, thr@, 1u << ji); }}"));
                }
            }
        }
    }
}

/// `rk_insert`: the insertion of `x`, of index `j`, into a row's sorted list in local memory, and
/// the row's new threshold. Up to REGISTER_SELECTION values, the list is read into registers at
/// once and the value put in place by the network of selects of `Selection::Registers` (the loads
/// overlap; a shifting loop waits on each of its loads and stores: on an H200 it was 45 % of the
/// stall samples of a 10-NN search, the other warps of the block waiting at its barriers).
fn insert_function(k: usize, cmp: &str, dtype: Dtype) -> String {
    let last = k - 1;
    let body = if k <= REGISTER_SELECTION {
        format!(
            "  T best_[{k}]; int best_j_[{k}];\n\
             \x20 #pragma unroll\n\
             \x20 for (int p = 0; p < {k}; p++) {{ best_[p] = b[p]; best_j_[p] = bj[p]; }}\n\
             \x20 const T xv[1] = {{x}};\n\
             {network}\n\
             \x20 #pragma unroll\n\
             \x20 for (int p = 0; p < {k}; p++) {{ b[p] = best_[p]; bj[p] = best_j_[p]; }}\n\
             \x20 return rk_sift_threshold(best_[{last}], best_j_[{last}] != -1, x2);\n",
            network = selection_network("xv", 0, k, cmp, &dtype.math("fabs")).replace('@', "_"),
        )
    } else {
        format!(
            "  T worst = b[{last}]; bool full = bj[{last}] != -1;\n{insertion}\x20 return rk_sift_threshold(worst, full, x2);\n",
            insertion = sorted_insertion(k, cmp, "worst", "full", "return rk_sift_threshold(worst, full, x2)")
        )
    };
    format!(
        "// Inserts x, of index j, into the row's sorted list of its {k} best; returns its threshold.\n\
         __device__ __noinline__ T rk_insert(T* b, int* bj, T x, int j, T x2) {{\n{body}}}\n"
    )
}

#[cfg(test)]
mod tests {
    use super::Filter;

    /// The nearest float32 at or above `t` (`__double2float_ru`).
    fn round_up(t: f64) -> f32 {
        let f = t as f32;
        if (f as f64) < t {
            f32::from_bits(if f >= 0.0 { f.to_bits() + 1 } else { f.to_bits() - 1 })
        } else {
            f
        }
    }

    /// The kernel's arithmetic in float32, fused as NVRTC fuses it: the direct distance, and the
    /// sifting value and threshold of a row whose K-th best is `worst`.
    fn direct(x: &[f32], y: &[f32]) -> f32 {
        x.iter().zip(y).fold(0.0f32, |s, (a, b)| (a - b).mul_add(a - b, s))
    }
    /// Whether the kernel marks the pair (`!(e >= thr)`: NaN passes).
    fn passes(e: f32, thr: f32) -> bool {
        e.partial_cmp(&thr).is_none_or(|o| o == std::cmp::Ordering::Less)
    }

    fn sifted(x: &[f32], y: &[f32], centre: &[f32], worst: f32) -> (f32, f32) {
        let m = Filter::margin(x.len());
        let moved = |v: &[f32]| v.iter().zip(centre).map(|(a, b)| a - b).collect::<Vec<f32>>();
        let (x, y) = (moved(x), moved(y));
        let ny = y.iter().fold(0.0f32, |s, v| v.mul_add(*v, s)) * (1.0 - m) as f32;
        let x2 = x.iter().fold(0.0f32, |s, v| v.mul_add(*v, s));
        let e = x.iter().zip(&y).fold(ny, |e, (a, b)| (-2.0 * a).mul_add(*b, e));
        (e, round_up(worst as f64 * (1.0 + m) - x2 as f64 * (1.0 - m) + Filter::underflow(x.len())))
    }

    /// Every pair whose direct distance is below the row's K-th best passes the sifting, for
    /// K-th bests just above that distance, in clouds near and far from the origin, nearly tied,
    /// in 1 to 100 dimensions; and far from the origin, most pairs far from the K-th best do not.
    #[test]
    fn the_expanded_distance_lets_every_entering_pair_through() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut passed_far = 0;
        for d in [1, 2, 3, 10, 37, 100] {
            for (shift, scale) in [(0.0f32, 1.0f32), (1000.0, 1.0), (1e6, 1.0), (-3e4, 1e-3), (0.0, 1e-20), (0.0, 1e15)]
            {
                for _ in 0..2000 {
                    let x: Vec<f32> = (0..d).map(|_| shift + scale * uniform()).collect();
                    // y near x (nearly tied: a relative 1e-6 away), or anywhere in the cloud.
                    let near = uniform() < 0.5;
                    let y: Vec<f32> = x
                        .iter()
                        .map(|&v| if near { v + scale * 1e-6 * uniform() } else { shift + scale * uniform() })
                        .collect();
                    let centre: Vec<f32> = (0..d).map(|_| shift + scale * uniform()).collect();
                    let dist = direct(&x, &y);
                    let worst = f32::from_bits(dist.to_bits() + 1);
                    let (e, thr) = sifted(&x, &y, &centre, worst);
                    assert!(
                        passes(e, thr),
                        "D = {d}, shift {shift}, scale {scale}: d = {dist}, worst = {worst}, e = {e} >= thr = {thr}"
                    );
                    // A K-th best 100 x smaller than the distance, far from the origin (the centre a
                    // point of the cloud): sifted out.
                    if shift == 1000.0 && !near && dist > 1e-3 {
                        let (e, thr) = sifted(&x, &y, &centre, dist / 100.0);
                        passed_far += usize::from(passes(e, thr));
                    }
                }
            }
        }
        assert!(passed_far < 100, "{passed_far} pairs far from the K-th best passed");
    }
}

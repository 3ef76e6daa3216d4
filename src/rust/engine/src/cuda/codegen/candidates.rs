//! Sifted K-selections (`Selection::Filtered`): the loop over a tile takes its indices 32 at a
//! time; for each it computes a value and compares it once with a threshold of the row, setting a
//! bit of a mask per row where the index may enter the row's K best (no branch, no divergence);
//! then each marked index is computed again exactly and inserted as `Selection::Local` does, in
//! the order of the indices. The results are the same as the unsifted kernel's, bit for bit: the
//! threshold only ever lets through more indices than enter.
//!
//! How the pairs are sifted, and the margins that keep the results exact: `sift`.

use super::gen::Gen;
use super::insertion::{selection_network, sorted_insertion, REGISTER_SELECTION};
use super::reducer::{emit, Reducer};
use super::sift::Filter;
use crate::cuda::dtype::Dtype;
use crate::reduction::Accumulator;

/// Indices sifted per mask.
const GROUP: usize = 32;
/// Indices of a group unrolled together: each marks a bit known when compiling in a mask of its
/// own, shifted into the group's after (unrolling the whole group took 0.35 s of NVRTC's time for a
/// 10-NN kernel, this 0.29 s, for two instructions per 16 indices and row).
const UNROLLED: usize = 16;

impl Filter {
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
                 \x20         for (int k = 0; k < {d}; k++) {{ const T v = tile[({off} + k) * TILE + threadIdx.x] - rk_c[k]; rk_yc[k * TILE + threadIdx.x] = v; s = fmaf(v, v, s); }}\n\
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
                     \x20 for (int k = 0; k < {d}; k++) {{ const T v = {x}[k] - rk_c[k]; a@[k] = (T)-2 * v; x2@ = fmaf(v, v, x2@); }}\n\
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
                    emit(g, &format!("        {{ T e = ny; for (int k = 0; k < {d}; k++) e = fmaf(a@[k], yv[k], e); rk_mark(bits@, e, thr@, 1u << ji); }}"));
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

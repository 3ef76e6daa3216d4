//! Log-sum-exp reductions (LogSumExp, SumSoftMaxWeight, LogSumExpWeight) a group of 32 indices at
//! a time: each pair adds its term `exp(x - mt)`, against the row's reference `mt` (fixed for the
//! group), to the group's own sums, with no test and no branch. After the group, its sums go into
//! the tile's if no term was too large (the group's plain sum at most 32 exp(RK_LAZY), or where
//! there is no plain sum, every `x - mt` at most RK_LAZY); else the group is taken again with the
//! exact online step (`Reducer::accumulate`), which moves the reference: at the first group of a
//! row, and when a value passes the reference by more than RK_LAZY (a few times per row). NaN
//! values reach the sums either way (NaN terms, which no test catches); infinite ones make the
//! group be taken again. The end of a tile (fewer than 32 indices) takes the exact step.

use super::gen::Gen;
use super::variant::KernelOptions;
use super::reducer::{emit, Reducer, LAZY};
use crate::cuda::dtype::Dtype;
use crate::reduction::ReductionKind;

/// Whether reductions of this kind go a group of indices at a time (here).
pub(super) fn in_groups(kind: ReductionKind) -> bool {
    matches!(kind, ReductionKind::LogSumExp | ReductionKind::LogSumExpWeight | ReductionKind::SumSoftMaxWeight)
}

/// log2(e), as the float exponentials write it (rounded to float32 when compiled).
const LOG2_E: &str = "1.4426950408889634";

/// Indices per group.
const GROUP: usize = 32;

/// The loop over a tile of a log-sum-exp reduction.
///
/// A group's loop is unrolled whole where the pairs' values and their sums have at most
/// `options.group_work` components (all row slots together). Past it, NVRTC spent seconds on 32
/// copies of a long pair (float64 LogSumExp in D = 64: 9.2 s, 0.7 s now), for a loop whose body is
/// long enough to hide its own branch: it is unrolled `options.unroll` times (as the other loops),
/// the exact step not at all.
pub(super) fn loop_over_tile(g: &mut Gen, reducer: &Reducer, options: &KernelOptions) {
    let (rows, unroll) = (g.layout.rows, options.unroll);
    let sums = reducer.acc.state_len() - 1;
    let (group_unroll, exact_unroll) = match pair_work(g, sums) <= options.group_work {
        true => (String::new(), String::new()),
        false => (format!(" {unroll}"), " 1".to_string()),
    };
    let plain = reducer.acc.kind != ReductionKind::LogSumExpWeight;
    g.line("    if (row0 < row_end) {");
    g.line(&format!("      const int len = min({}, j_end - j0);", g.layout.tile_name));
    for q in 0..rows {
        g.q = q;
        reducer.tile_begin(g);
    }
    g.line(&format!("      for (int g0 = 0; g0 < len; g0 += {GROUP}) {{\n      if (g0 + {GROUP} <= len) {{"));
    // float: each term is ex2(x log2(e) - mt log2(e)), one fused multiply-add before the MUFU
    // instruction (x - mt, then its product by log2(e), took two: a tenth of a pair's instructions).
    // The reference's product, at least -RK_MAX (-inf - -inf would be NaN), is the group's.
    let folded = plain && g.dtype != Dtype::F64;
    for q in 0..rows {
        g.q = q;
        emit(g, &format!("      T gs@[{sums}]; for (int k = 0; k < {sums}; k++) gs@[k] = (T)0;"));
        if !plain {
            emit(g, "      T gm@ = -RK_INF;");
        }
        if folded {
            emit(g, &format!("      const T mtl@ = fmaxf(mt@ * {LOG2_E}f, -RK_MAX);"));
        }
    }
    g.line(&format!("      #pragma unroll{group_unroll}\n      for (int jb = 0; jb < {GROUP}; jb++) {{"));
    g.line("        const int jj = g0 + jb; const int j = j0 + jj;");
    g.index_terms();
    for q in 0..rows {
        g.q = q;
        g.pair_nodes();
        let (e, add, _) = reducer.log_sum_exp_terms(g, "gs@");
        let f = g.name(reducer.f);
        if folded {
            emit(g, &format!("        {{ T e = rk_ex2_ftz(fmaf({f}[0], {LOG2_E}f, -mtl@)); {add}}}"));
        } else {
            let largest = if plain { String::new() } else { format!("gm@ = {}(gm@, dx); ", g.math("fmax")) };
            emit(g, &format!("        {{ T dx = {f}[0] - mt@; T e = {e}(dx); {add}{largest}}}"));
        }
    }
    g.line("      }");
    // 32 terms of at most exp(RK_LAZY) (a single larger term passes it too, as +inf does).
    let limit = (LAZY as f64).exp().ceil();
    let too_large = if plain { format!("!(gs@[0] <= (T){GROUP} * (T){limit})") } else { "!(gm@ <= (T)RK_LAZY)".into() };
    for q in 0..rows {
        g.q = q;
        let pragma = if exact_unroll.is_empty() { String::new() } else { format!("      #pragma unroll{exact_unroll}\n") };
        emit(g, &format!("      if ({too_large}) {{\n{pragma}      for (int jb = 0; jb < {GROUP}; jb++) {{"));
        exact_step(g, reducer);
        emit(
            g,
            &format!(
                "      }}\n      }} else {{\n        for (int k = 0; k < {sums}; k++) ts@[k] += gs@[k];\n      }}"
            ),
        );
    }
    g.line("      } else {\n      for (int jb = 0; jb < len - g0; jb++) {");
    g.line("        const int jj = g0 + jb; const int j = j0 + jj;");
    g.index_terms();
    for q in 0..rows {
        g.q = q;
        g.pair_nodes();
        reducer.accumulate(g);
    }
    g.line("      }\n      }\n      }");
    for q in 0..rows {
        g.q = q;
        reducer.tile_end(g);
    }
    g.line("    }");
}

/// The components of the pairs' values computed per index and of the sums they are added to (a
/// SumSoftMaxWeight of 64-dimensional weights adds 65), over all row slots: what a copy of the
/// group's loop body computes.
fn pair_work(g: &Gen, sums: usize) -> usize {
    let layout = g.layout;
    let per_row: usize = layout.plan.pair.iter().filter(|&&id| layout.live[id]).map(|&id| g.formula.graph.dim(id)).sum();
    (per_row + sums) * layout.rows
}

/// Index `g0 + jb` of the tile for row slot `g.q`, with the exact online step.
fn exact_step(g: &mut Gen, reducer: &Reducer) {
    g.line("        const int jj = g0 + jb; const int j = j0 + jj;");
    g.index_terms();
    g.pair_nodes();
    reducer.accumulate(g);
}

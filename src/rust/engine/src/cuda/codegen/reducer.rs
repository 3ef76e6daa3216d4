//! The reduction's part of the kernel (`Reducer`): a row's registers, the hooks of the loop over a
//! tile (its start, each pair's step, its end) and the store of the row's state, per kind of
//! reduction (sums, K-selections, log-sum-exps).

use std::fmt::Write;

use super::gen::Gen;
use super::insertion::{selection_network, sorted_insertion, REGISTER_SELECTION};
use super::selection::Selection;
use crate::formula::NodeId;
use crate::plan::Role;
use crate::reduction::Accumulator;
use crate::reduction::{ReductionKind, SumScheme};

/// How far above a log-sum-exp row's reference maximum a value may be before its sums are
/// rescaled (`RK_LAZY` in the kernels).
pub(super) const LAZY: u32 = 8;

/// Most weights of a log-sum-exp whose terms are written out one statement each (more go in a
/// loop: `Reducer::log_sum_exp_terms`).
const WRITTEN_OUT: usize = 4;

/// Emits a line of the reducer with its registers (`name@`) named for the current row slot.
pub(super) fn emit(g: &mut Gen, code: &str) {
    let line = code.replace('@', &format!("_{}", g.q));
    g.line(&line);
}

/// Emits the reduction's registers, tile loop hooks and the final store of the state.
pub(super) struct Reducer<'a> {
    pub(super) acc: &'a Accumulator,
    pub(super) f: NodeId,
    pub(super) g: Option<NodeId>,
    pub(super) fdim: usize,
    pub(super) selection: Selection,
}

impl Reducer<'_> {
    pub(super) fn init(&self, g: &mut Gen) {
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

    pub(super) fn tile_begin(&self, g: &mut Gen) {
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

    pub(super) fn accumulate(&self, g: &mut Gen) {
        use ReductionKind::*;
        let (d, kk, fv) = (self.fdim, self.acc.k, g.name(self.f));
        // A product's terms are added fused (as the compiler's contraction did), but for a term of
        // the reduced index alone, read from the tile without its factors.
        let in_tile = g.layout.plan.roles[self.f] == Some(Role::Inner);
        let plus = |sum: &str| match g.factors(self.f, "k").filter(|_| !in_tile) {
            Some((a, b)) => g.fma(&a, &b, sum),
            None => format!("{sum} + {fv}[k]"),
        };
        match self.acc.kind {
            Sum => match self.acc.scheme {
                SumScheme::KahanScheme => emit(g, &format!(
                    "        for (int k = 0; k < {d}; k++) {{ T y = {}; T t = acc@[k] + y; comp@[k] = (t - acc@[k]) - y; acc@[k] = t; }}",
                    plus("-comp@[k]")
                )),
                SumScheme::DirectSum => emit(g, &format!("        for (int k = 0; k < {d}; k++) acc@[k] = {};", plus("acc@[k]"))),
                SumScheme::Auto | SumScheme::BlockSum => {
                    emit(g, &format!("        for (int k = 0; k < {d}; k++) part@[k] = {};", plus("part@[k]")))
                }
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
    pub(super) fn log_sum_exp_terms(&self, g: &Gen, sums: &str) -> (&'static str, String, String) {
        let plain = self.acc.kind != ReductionKind::LogSumExpWeight;
        let e = if plain { "rk_exp_ftz" } else { "rk_exp" };
        let gdim = self.acc.gdim;
        let mut grow = String::new();
        let mut add = String::new();
        let mut slot = 0;
        if plain {
            let _ = write!(grow, "{sums}[0] = {}; ", g.fma(&format!("{sums}[0]"), "sc", "(T)1"));
            let _ = write!(add, "{sums}[0] += e; ");
            slot = 1;
        }
        if let Some(gid) = self.g {
            let gv = g.name(gid);
            let w = |c: &str| if gdim == 1 { format!("{gv}[0]") } else { format!("{gv}[{c}]") };
            if gdim <= WRITTEN_OUT {
                for c in 0..gdim {
                    let sum = format!("{sums}[{}]", slot + c);
                    let _ = write!(grow, "{sum} = {}; ", g.fma(&sum, "sc", &w(&c.to_string())));
                    let _ = write!(add, "{sum} = {}; ", g.fma("e", &w(&c.to_string()), &sum));
                }
            } else {
                // A loop the optimised build unrolls as it did the statements written out, and the
                // fast build does not (64 weights, float64: its NVRTC compilation 0.50 -> 0.10 s).
                let sum = format!("{sums}[{slot} + c]");
                let each = |body: String| format!("_Pragma(\"unroll\") for (int c = 0; c < {gdim}; c++) {sum} = {body}; ");
                grow.push_str(&each(g.fma(&sum, "sc", &w("c"))));
                add.push_str(&each(g.fma("e", &w("c"), &sum)));
            }
        }
        (e, add, grow)
    }

    pub(super) fn tile_end(&self, g: &mut Gen) {
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
                     \x20       for (int k = 0; k < {sums}; k++) s@[k] = fma(s@[k], so, (double)ts@[k] * sn);\n\
                     \x20       m@ = mn;\n\
                     \x20     }}"
                ));
            }
            _ => {}
        }
    }

    pub(super) fn store(&self, g: &mut Gen) {
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

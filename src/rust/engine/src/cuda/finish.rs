//! The end of a reduction in CUDA: merging the states of two parts of the reduced range and
//! turning a state into the row's results. The same semantics as `Accumulator::merge` and
//! `Accumulator::finalize` on the CPU (states in f64, the same layout), written for the device so
//! that only the results travel back: `width` values in the working type and `width` int32
//! indices per row, column-major (`values[c * n + row]`), as R stores them.

use std::fmt::Write;

use super::dtype::Dtype;
use crate::reduction::Accumulator;
use crate::reduction::ReductionKind::{self, *};

/// The name of the merge kernel, in the program that goes with every generated kernel.
pub const MERGE_NAME: &str = "rkeops_merge";

fn is_selection(kind: ReductionKind) -> bool {
    matches!(kind, Min | Max | ArgMin | ArgMax | MinArgMin | MaxArgMax | KMin | ArgKMin | KMinArgKMin)
}

/// `rk_finalize(state, values, indices, row, n)` and `rk_merge(state, other)` for `acc`'s reduction;
/// `t` is the C type of the results (`float` or `double`).
pub fn functions(src: &mut String, acc: &Accumulator, t: &str) {
    let len = acc.state_len();
    let kind = acc.kind;
    let mut fin = String::new();
    if kind == Sum {
        let _ = write!(fin, "  for (int c = 0; c < {}; c++) values[c * n + row] = ({t})s[c];", acc.dim);
    } else if is_selection(kind) {
        let half = len / 2;
        if kind.returns_values() {
            let _ = writeln!(fin, "  for (int c = 0; c < {half}; c++) values[c * n + row] = ({t})s[c];");
        }
        if kind.returns_indices() {
            // A slot no index reached (-1) becomes 0, as on the CPU.
            let _ = write!(fin, "  for (int c = 0; c < {half}; c++) indices[c * n + row] = (int)s[{half} + c] + 1;");
        }
    } else if kind == LogSumExp {
        let _ = write!(fin, "  values[row] = ({t})(s[0] + log(s[1]));");
    } else if kind == LogSumExpWeight {
        let _ =
            write!(fin, "  for (int c = 0; c < {}; c++) values[c * n + row] = ({t})(s[0] + log(s[1 + c]));", acc.gdim);
    } else {
        let _ = write!(fin, "  for (int c = 0; c < {}; c++) values[c * n + row] = ({t})(s[2 + c] / s[1]);", acc.gdim);
    }
    let _ = writeln!(
        src,
        "// The results of one row from its state.\n\
         __device__ __forceinline__ void rk_finalize(const double* s, {t}* values, int* indices, long long row, long long n) {{\n\
         {fin}\n}}"
    );
    let merge = if kind == Sum {
        // Kahan states hold the sums then their compensations: both add up.
        format!("  for (int k = 0; k < {len}; k++) s[k] += o[k];")
    } else if is_selection(kind) {
        let (k, half) = (acc.k, len / 2);
        let max = kind.keeps_maxima();
        let (cmp, empty) = if max { (">", "-RK_INF") } else { ("<", "RK_INF") };
        // Two sorted lists merged into the first; on ties `s` wins: it covers the earlier indices.
        format!(
            "  for (int c = 0; c < {dim}; c++) {{\n\
             \x20   double* va = s + c * {k}; double* ia = s + {half} + c * {k};\n\
             \x20   const double* vb = o + c * {k}; const double* ib = o + {half} + c * {k};\n\
             \x20   double mv[{k}], mi[{k}]; int a = 0, b = 0;\n\
             \x20   for (int p = 0; p < {k}; p++) {{\n\
             \x20     bool a_ok = a < {k} && ia[a] >= 0.0, b_ok = b < {k} && ib[b] >= 0.0;\n\
             \x20     if (b_ok && (!a_ok || vb[b] {cmp} va[a] || (vb[b] != vb[b] && va[a] == va[a]))) {{ mv[p] = vb[b]; mi[p] = ib[b]; b++; }}\n\
             \x20     else if (a_ok) {{ mv[p] = va[a]; mi[p] = ia[a]; a++; }}\n\
             \x20     else {{ mv[p] = (double){empty}; mi[p] = -1.0; }}\n\
             \x20   }}\n\
             \x20   for (int p = 0; p < {k}; p++) {{ va[p] = mv[p]; ia[p] = mi[p]; }}\n\
             \x20 }}",
            dim = acc.dim
        )
    } else {
        format!(
            "  if (o[0] == -(double)RK_INF) return;\n\
             \x20 double m = fmax(s[0], o[0]);\n\
             \x20 double sa = (s[0] == m) ? 1.0 : exp(s[0] - m), sb = (o[0] == m) ? 1.0 : exp(o[0] - m);\n\
             \x20 s[0] = m;\n\
             \x20 for (int k = 1; k < {len}; k++) s[k] = fma(s[k], sa, o[k] * sb);"
        )
    };
    let _ = writeln!(
        src,
        "// Merges the state of a later part of the reduced range into s.\n\
         __device__ __forceinline__ void rk_merge(double* s, const double* o) {{\n{merge}\n}}"
    );
}

/// Threads per block of `rkeops_merge`.
pub const MERGE_THREADS: usize = 256;
/// A sum's merge: each block takes 32 values of the states, each warp of the block every 8th chunk.
const SUM_VALUES_PER_BLOCK: usize = 32;
/// The other merges: each block takes 32 rows, each of its 8 warps a run of consecutive states,
/// when the 8 warps' states of 32 rows fit in 16 KB of shared memory.
const ROWS_PER_BLOCK: usize = 32;
const LANES: usize = MERGE_THREADS / ROWS_PER_BLOCK;
const MOST_SHARED_STATE: usize = 8;

/// Whether the merge of states of `state_len` values shares a row between the warps of a block.
fn rows_shared(kind: ReductionKind, state_len: usize) -> bool {
    kind != Sum && state_len <= MOST_SHARED_STATE
}

/// `rkeops_merge`: merges the states of `chunks` parts of the reduced range, in order, into the
/// rows' running states (`first`: there are none yet), then stores those states back or (`finalize`)
/// writes the rows' results. Every merge spreads a row's states over the 8 warps of a block, so that
/// a small problem's merge (a few thousand rows, tens of chunks) uses the whole device and has its
/// loads in flight together: a sum's states add up value by value (a block takes 32 values of the
/// `n_out x len` states, its warps every 8th chunk of them); the other reductions' states (a
/// log-sum-exp's, a selection's) merge in order (a block takes 32 rows, each warp a run of
/// consecutive states, then the runs merge in order: ties keep the earlier index). Each sums or
/// merges in a fixed order: the result is deterministic. States too large for the block's shared
/// memory (K-selections) take one thread per row.
pub fn merge_source(acc: &Accumulator, dtype: Dtype) -> String {
    let (inf, _) = dtype.infinity_and_max();
    let mut src = format!(
        "// Generated by rkeops: the merge of {:?} states.\ntypedef {} T;\n#define RK_INF {inf}\n",
        acc.kind,
        dtype.c_type()
    );
    functions(&mut src, acc, dtype.c_type());
    merge_kernel(&mut src, acc);
    src
}

fn merge_kernel(src: &mut String, acc: &Accumulator) {
    let len = acc.state_len();
    let signature = format!(
        "extern \"C\" __global__ void {MERGE_NAME}(const int n_out, const int chunks, const int first, const int finalize,\n\
         \x20   const double* __restrict__ parts, double* __restrict__ running, T* __restrict__ out_values, int* __restrict__ out_indices) {{"
    );
    let body = if acc.kind == Sum {
        let lanes = MERGE_THREADS / SUM_VALUES_PER_BLOCK;
        format!(
            "  const int lane = threadIdx.x / {per}, x = threadIdx.x % {per};\n\
             \x20 const long long all = (long long)n_out * {len}, e = (long long)blockIdx.x * {per} + x;\n\
             \x20 __shared__ double sums[{lanes}][{per}];\n\
             \x20 double s = 0.0;\n\
             \x20 if (e < all) {{\n\
             \x20   #pragma unroll 4\n\
             \x20   for (int c = (first ? 1 : 0) + lane; c < chunks; c += {lanes}) s += parts[c * all + e];\n\
             \x20 }}\n\
             \x20 sums[lane][x] = s;\n\
             \x20 __syncthreads();\n\
             \x20 if (lane != 0 || e >= all) return;\n\
             \x20 s = first ? parts[e] : running[e];\n\
             \x20 for (int l = 0; l < {lanes}; l++) s += sums[l][x];\n\
             \x20 const long long row = e / {len}, k = e % {len};\n\
             \x20 if (!finalize) running[e] = s;\n\
             \x20 else if (k < {dim}) out_values[k * n_out + row] = (T)s;",
            per = SUM_VALUES_PER_BLOCK,
            dim = acc.dim
        )
    } else if rows_shared(acc.kind, len) {
        rows_shared_body(len)
    } else {
        format!(
            "  const int row = blockIdx.x * blockDim.x + threadIdx.x;\n\
             \x20 if (row >= n_out) return;\n\
             \x20 double s[{len}];\n\
             \x20 int c0 = 0;\n\
             \x20 if (first) {{ for (int k = 0; k < {len}; k++) s[k] = parts[(long long)row * {len} + k]; c0 = 1; }}\n\
             \x20 else {{ for (int k = 0; k < {len}; k++) s[k] = running[(long long)row * {len} + k]; }}\n\
             \x20 for (int c = c0; c < chunks; c++) rk_merge(s, parts + ((long long)c * n_out + row) * {len});\n\
             \x20 if (finalize) rk_finalize(s, out_values, out_indices, row, n_out);\n\
             \x20 else for (int k = 0; k < {len}; k++) running[(long long)row * {len} + k] = s[k];"
        )
    };
    let _ = writeln!(src, "{signature}\n{body}\n}}");
}

/// The merge of `len`-value states that shares each row between the warps of a block: the states in
/// order (the running one unless `first`, then the chunks') cut into 8 runs, warp `l` merging run
/// `l` in order, then the first warp merging the runs in order.
fn rows_shared_body(len: usize) -> String {
    format!(
        "  const int lane = threadIdx.x / {rows}, x = threadIdx.x % {rows};\n\
         \x20 const long long row = (long long)blockIdx.x * {rows} + x;\n\
         \x20 __shared__ double runs[{lanes}][{len}][{rows}];\n\
         \x20 const int states = chunks + (first ? 0 : 1);\n\
         \x20 // state i: the running one (i = 0 unless first), else chunk i (or i - 1)\n\
         \x20 #define RK_STATE(i) ((!first && (i) == 0) ? running + row * {len} : parts + ((long long)((i) - (first ? 0 : 1)) * n_out + row) * {len})\n\
         \x20 const int lo = lane * states / {lanes}, hi = (lane + 1) * states / {lanes};\n\
         \x20 if (row < n_out && lo < hi) {{\n\
         \x20   double s[{len}];\n\
         \x20   const double* p = RK_STATE(lo);\n\
         \x20   for (int k = 0; k < {len}; k++) s[k] = p[k];\n\
         \x20   for (int i = lo + 1; i < hi; i++) rk_merge(s, RK_STATE(i));\n\
         \x20   for (int k = 0; k < {len}; k++) runs[lane][k][x] = s[k];\n\
         \x20 }}\n\
         \x20 #undef RK_STATE\n\
         \x20 __syncthreads();\n\
         \x20 if (lane != 0 || row >= n_out) return;\n\
         \x20 double s[{len}], o[{len}];\n\
         \x20 bool have = false;\n\
         \x20 for (int l = 0; l < {lanes}; l++) {{\n\
         \x20   if (l * states / {lanes} == (l + 1) * states / {lanes}) continue;\n\
         \x20   for (int k = 0; k < {len}; k++) o[k] = runs[l][k][x];\n\
         \x20   if (have) rk_merge(s, o);\n\
         \x20   else for (int k = 0; k < {len}; k++) s[k] = o[k];\n\
         \x20   have = true;\n\
         \x20 }}\n\
         \x20 if (finalize) rk_finalize(s, out_values, out_indices, row, n_out);\n\
         \x20 else for (int k = 0; k < {len}; k++) running[row * {len} + k] = s[k];",
        rows = ROWS_PER_BLOCK,
        lanes = LANES
    )
}

/// The blocks of `MERGE_THREADS` that `rkeops_merge` takes for `n_out` rows of states of
/// `state_len` values.
pub fn merge_blocks(kind: ReductionKind, n_out: usize, state_len: usize) -> usize {
    match kind {
        Sum => (n_out * state_len).div_ceil(SUM_VALUES_PER_BLOCK),
        _ if rows_shared(kind, state_len) => n_out.div_ceil(ROWS_PER_BLOCK),
        _ => n_out.div_ceil(MERGE_THREADS),
    }
}

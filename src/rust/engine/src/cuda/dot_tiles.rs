//! Tensor-core dot products: where a formula's pairs read the squared distance or the dot product
//! of an output-row vector `x` and a reduced-index vector `y` of dimension >= 16, the kernel
//! computes the dots of a block's rows with a tile of the reduced index as a small matrix product
//! on the tensor cores (`mma.sync` m16n8k8, TF32), and each pair reads its value from shared memory;
//! the rest of the formula and the reduction are unchanged.
//!
//! Accuracy: each float is split into two TF32 numbers (`x = big + small`, 21 of its 24 bits) and a
//! dot is `big.big + big.small + small.big` ("3xTF32"), accumulated in float32: its error is of the
//! order of float32 arithmetic's, relative to |x| |y|. A squared distance is
//! `|x - c|^2 + |y - c|^2 - 2 (x - c).(y - c)` with `c` the block's first row (translation leaves
//! it unchanged; centring keeps clouds far from the origin from cancelling), clamped at 0: its error
//! is relative to `|x - c|^2 + |y - c|^2`, which for close points (a cluster far from `c`) is far
//! larger than their distance. So a pair whose distance is below 1/8 of that sum (or NaN) is
//! computed again term by term in float32, as the FP32 kernel does: every distance is within
//! about 8 x 2^-21 of its own value, and selections (K-NN) differ from the FP32 kernel's only at
//! near-ties.

use std::fmt::Write;

use super::codegen::Dtype;
use crate::formula::{Category, Formula, NodeId, Op};
use crate::plan::{Plan, Role};

/// Smallest dimension worth the tensor cores (below, the FP32 loop is as fast).
pub const MIN_DIM: usize = 16;
/// Largest dimension: the block's centre stays in shared memory.
pub const MAX_DIM: usize = 1024;
/// Threads per block, and rows of the block (one per thread): four warps of 32 rows.
pub const ROWS: usize = 128;
/// Reduced indices per tile.
pub const COLUMNS: usize = 64;
/// Dimensions staged in shared memory at a time.
const DEPTH: usize = 32;
/// Padding of the staged arrays and of the dots, which keeps the accesses of a warp on distinct banks.
const PAD: usize = 8;
/// A squared distance below 1 / RECHECK of the centred norms it came from is computed again.
const RECHECK: f32 = 8.0;

/// Floats of `rk_smem`: the staged inputs (x as floats, y as pairs of TF32 numbers), then the dots.
const SMEM_FLOATS: usize = {
    let staging = DEPTH * (ROWS + PAD) + 2 * DEPTH * (COLUMNS + 4);
    let dots = ROWS * (COLUMNS + 1);
    if staging > dots { staging } else { dots }
};
/// Floats of `rk_norms`: the rows' norms, then two partial norms per column.
const NORM_FLOATS: usize = ROWS + 2 * COLUMNS;

/// A dot product or squared distance between an output-row input and a reduced-index input.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DotTile {
    /// The node whose value the pairs read (`SqNorm2(x - y)` or `Dot(x, y)`).
    pub node: NodeId,
    /// Positions of the inputs of the output row and of the reduced index.
    pub outer: usize,
    pub inner: usize,
    pub dim: usize,
    pub squared: bool,
}

impl DotTile {
    /// The first such node of the pairs of `formula`, for float32 (not float16 storage: untested).
    pub fn find(formula: &Formula, plan: &Plan, dtype: Dtype) -> Option<DotTile> {
        if dtype != Dtype::F32 {
            return None;
        }
        let graph = &formula.graph;
        let input = |id: NodeId, role: Role| match graph.nodes[id].op {
            Op::Input(p) if plan.roles[id] == Some(role) && formula.variables[p].category != Category::Param => Some(p),
            _ => None,
        };
        // (outer, inner) inputs of a pair of nodes, in either order.
        let pair = |a: NodeId, b: NodeId| match (input(a, Role::Outer), input(b, Role::Inner)) {
            (Some(x), Some(y)) => Some((x, y)),
            _ => Some((input(b, Role::Outer)?, input(a, Role::Inner)?)),
        };
        plan.pair.iter().find_map(|&id| {
            let node = &graph.nodes[id];
            let (args, squared) = match node.op {
                Op::Dot => (node.args.clone(), false),
                Op::SqNorm2 if graph.nodes[node.args[0]].op == Op::Sub => (graph.nodes[node.args[0]].args.clone(), true),
                _ => return None,
            };
            let dim = graph.dim(args[0]);
            if !(MIN_DIM..=MAX_DIM).contains(&dim) || graph.dim(args[1]) != dim {
                return None;
            }
            let (outer, inner) = pair(args[0], args[1])?;
            Some(DotTile { node: id, outer, inner, dim, squared })
        })
    }

    /// Which nodes the kernel still computes: those the reduction reads other than through `node`.
    pub fn live(&self, formula: &Formula) -> Vec<bool> {
        let red = &formula.reduction;
        let roots: Vec<NodeId> = std::iter::once(red.f).chain(red.g).collect();
        formula.graph.reachable_above(&roots, Some(self.node))
    }

    /// The statement that sets `out[0]` to the value of the node for the thread's row `r_0` and
    /// the reduced index `j`, column `jj` of the tile.
    pub fn read(&self, out: &str) -> String {
        let (x, y, cols) = (self.outer, self.inner, COLUMNS);
        let mut s = format!("{out}[0] = rk_smem[threadIdx.x * ({cols} + 1) + jj];");
        if self.squared {
            // NaN: computed again (see `functions`).
            let _ = write!(s, " if (rk_isnan({out}[0])) {out}[0] = rk_sqdist(in{x}, in{y}, n_out, n_red, r_0, j);");
        }
        s
    }

    /// Floats of shared memory the kernel declares for the dots: the staged inputs or the dots
    /// (in turn), the norms, and the centre.
    pub fn shared_floats(&self) -> usize {
        SMEM_FLOATS + NORM_FLOATS + if self.squared { self.dim } else { 0 }
    }

    /// The kernel's declarations and first statements: shared memory, then (distances) the
    /// block's centre and its rows' norms.
    pub fn block_start(&self) -> String {
        let mut s = format!("  __shared__ __align__(16) float rk_smem[{SMEM_FLOATS}];\n  __shared__ float rk_norms[{NORM_FLOATS}];\n");
        if self.squared {
            let _ = write!(
                s,
                "  __shared__ float rk_centre[{}];\n  rk_block_start(in{}, n_out, blockIdx.x * {ROWS}, r_0, rk_centre, rk_norms);\n",
                self.dim, self.outer
            );
        } else {
            s.push_str("  float* rk_centre = 0;\n");
        }
        s
    }

    /// The statement that computes the dots of the tile from `j0`.
    pub fn tile(&self) -> String {
        format!(
            "    rk_dot_tile(in{}, in{}, n_out, n_red, blockIdx.x * {ROWS}, j0, j_end, rk_smem, rk_norms, rk_centre);",
            self.outer, self.inner
        )
    }

    /// `rk_dot_tile`, which fills `rk_smem[r * (COLUMNS + 1) + c]` with the value of the node for
    /// the block's row `r` and the tile's column `c`; `rk_block_start`.
    pub fn functions(&self, src: &mut String) {
        let (d, depth, rows, cols, pad) = (self.dim, DEPTH, ROWS, COLUMNS, PAD);
        // (a stride of 4 mod 16 pairs keeps the 64-bit reads of a half-warp on distinct banks)
        let (xs_stride, ys_stride) = (rows + pad, cols + 4);
        // x and y staged at dimension k0 + k, centred for distances.
        let centre = if self.squared { " - rk_centre[k0 + k]" } else { "" };
        let value = match self.squared {
            true => format!(
                "rk_distance(rk_norms[rr] + rk_norms[{rows} + cc] + rk_norms[{} + cc], v)",
                rows + cols
            ),
            false => "v".to_string(),
        };
        let _ = write!(
            src,
            "#define RK_COLUMNS {cols}\n\
             // Tensor cores. The TF32 numbers of a float: big, its 10 leading bits of mantissa rounded (to\n\
             // nearest, ties away), and small = x - big (exact), whose bits below TF32's the MMA ignores.\n\
             __device__ __forceinline__ unsigned rk_big(float x) {{ return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }}\n\
             __device__ __forceinline__ void rk_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {{\n\
             \x20 asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\"\n\
             \x20   : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n\
             }}\n\
             // |x - c|^2 + |y - c|^2 - 2 (x - c).(y - c) from the sum of the norms and the dot, or NaN where\n\
             // the distance is below 1/{RECHECK} of the norms (or NaN): then computed again, term by term.\n\
             __device__ __forceinline__ float rk_distance(float norms, float dot) {{\n\
             \x20 const float d = fmaxf(norms - 2.f * dot, 0.f);\n\
             \x20 return norms <= {RECHECK:.1}f * d ? d : __int_as_float(0x7fffffff);\n\
             }}\n\
             // A squared distance term by term, as the FP32 kernel computes it.\n\
             __device__ __forceinline__ float rk_sqdist(const S* __restrict__ x, const S* __restrict__ y, int n_out, int n_red, int r, int j) {{\n\
             \x20 float s = 0.f;\n\
             \x20 for (int k = 0; k < {d}; k++) {{ float v = rk_load(x[r + (long long)n_out * k]) - rk_load(y[j + (long long)n_red * k]); s += v * v; }}\n\
             \x20 return s;\n\
             }}\n\
             // The block's centre (its first row) and the squared norm of the thread's row r, centred.\n\
             __device__ __forceinline__ void rk_block_start(const S* __restrict__ x, int n_out, int row_base, int r, float* rk_centre, float* rk_norms) {{\n\
             \x20 for (int k = threadIdx.x; k < {d}; k += {rows}) rk_centre[k] = rk_load(x[row_base + (long long)n_out * k]);\n\
             \x20 __syncthreads();\n\
             \x20 float s = 0.f;\n\
             \x20 for (int k = 0; k < {d}; k++) {{ float v = rk_load(x[r + (long long)n_out * k]) - rk_centre[k]; s = fmaf(v, v, s); }}\n\
             \x20 rk_norms[threadIdx.x] = s;\n\
             }}\n\
             // Dots of the block's {rows} rows with the {cols} columns from j0, staged {depth} dimensions at a\n\
             // time (x as floats, y split in TF32 numbers); warp w computes rows 32 w .. 32 w + 31, each\n\
             // kstep in two 16-row by eight 8-column tiles. rk_norms: rows' norms, then two partial norms\n\
             // per column.\n\
             __device__ __forceinline__ void rk_dot_tile(const S* __restrict__ x, const S* __restrict__ y, int n_out, int n_red,\n\
             \x20   int row_base, int j0, int j_end, float* rk_smem, float* rk_norms, const float* rk_centre) {{\n\
             \x20 float* xs = rk_smem;\n\
             \x20 uint2* ys = (uint2*)(rk_smem + {depth} * {xs_stride});\n\
             \x20 const int warp = threadIdx.x >> 5, g = (threadIdx.x & 31) >> 2, t = threadIdx.x & 3;\n\
             \x20 const int c = threadIdx.x % {cols}, h = threadIdx.x / {cols};\n\
             \x20 const bool column = j0 + c < j_end;\n\
             \x20 const S* px = x + min(row_base + (int)threadIdx.x, n_out - 1);\n\
             \x20 const S* py = y + (column ? j0 + c : 0) + (long long)n_red * h;\n\
             \x20 const long long x_step = n_out, y_step = 2 * (long long)n_red;\n\
             \x20 float acc[2][8][4];\n\
             \x20 #pragma unroll\n\
             \x20 for (int m = 0; m < 2; m++)\n\
             \x20   #pragma unroll\n\
             \x20   for (int n = 0; n < 8; n++) {{ acc[m][n][0] = 0.f; acc[m][n][1] = 0.f; acc[m][n][2] = 0.f; acc[m][n][3] = 0.f; }}\n\
             \x20 float y_norm = 0.f;\n\
             \x20 for (int k0 = 0; k0 < {d}; k0 += {depth}) {{\n\
             \x20   const int kn = min({depth}, {d} - k0);\n\
             \x20   __syncthreads();\n\
             \x20   #pragma unroll 8\n\
             \x20   for (int k = 0; k < kn; k++, px += x_step) xs[k * {xs_stride} + threadIdx.x] = rk_load(*px){centre};\n\
             \x20   for (int k = kn; k < {depth}; k++) xs[k * {xs_stride} + threadIdx.x] = 0.f;\n\
             \x20   #pragma unroll 8\n\
             \x20   for (int k = h; k < {depth}; k += 2, py += y_step) {{\n\
             \x20     const float v = (column && k < kn) ? rk_load(*py){centre} : 0.f;\n\
             \x20     const unsigned big = rk_big(v);\n\
             \x20     ys[k * {ys_stride} + c] = make_uint2(big, __float_as_uint(v - __uint_as_float(big)));\n\
             \x20     y_norm = fmaf(v, v, y_norm);\n\
             \x20   }}\n\
             \x20   __syncthreads();\n\
             \x20   #pragma unroll\n\
             \x20   for (int kk = 0; kk < {depth}; kk += 8) {{\n\
             \x20     if (kk >= kn) break;\n\
             \x20     unsigned a_big[2][4], a_small[2][4];\n\
             \x20     #pragma unroll\n\
             \x20     for (int m = 0; m < 2; m++)\n\
             \x20       #pragma unroll\n\
             \x20       for (int e = 0; e < 4; e++) {{\n\
             \x20         const float v = xs[(kk + t + (e >> 1) * 4) * {xs_stride} + warp * 32 + m * 16 + g + (e & 1) * 8];\n\
             \x20         a_big[m][e] = rk_big(v); a_small[m][e] = __float_as_uint(v - __uint_as_float(a_big[m][e]));\n\
             \x20       }}\n\
             \x20     #pragma unroll\n\
             \x20     for (int n = 0; n < 8; n++) {{\n\
             \x20       const uint2 b0 = ys[(kk + t) * {ys_stride} + n * 8 + g], b1 = ys[(kk + t + 4) * {ys_stride} + n * 8 + g];\n\
             \x20       #pragma unroll\n\
             \x20       for (int m = 0; m < 2; m++) {{\n\
             \x20         rk_mma(acc[m][n], a_small[m], b0.x, b1.x);\n\
             \x20         rk_mma(acc[m][n], a_big[m], b0.y, b1.y);\n\
             \x20         rk_mma(acc[m][n], a_big[m], b0.x, b1.x);\n\
             \x20       }}\n\
             \x20     }}\n\
             \x20   }}\n\
             \x20 }}\n\
             \x20 rk_norms[{rows} + threadIdx.x] = y_norm;\n\
             \x20 __syncthreads();\n\
             \x20 #pragma unroll\n\
             \x20 for (int m = 0; m < 2; m++)\n\
             \x20   #pragma unroll\n\
             \x20   for (int n = 0; n < 8; n++)\n\
             \x20     #pragma unroll\n\
             \x20     for (int e = 0; e < 4; e++) {{\n\
             \x20       const int rr = warp * 32 + m * 16 + g + (e >> 1) * 8, cc = n * 8 + 2 * t + (e & 1);\n\
             \x20       const float v = acc[m][n][e];\n\
             \x20       rk_smem[rr * ({cols} + 1) + cc] = {value};\n\
             \x20     }}\n\
             \x20 __syncthreads();\n\
             }}\n"
        );
    }
}

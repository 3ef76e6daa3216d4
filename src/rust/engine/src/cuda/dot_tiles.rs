//! Tensor-core dot products: where a formula's pairs read the squared distance or the dot product
//! of an output-row vector `x` and a reduced-index vector `y` of dimension >= 16, the kernel
//! computes the dots of a block's rows with a tile of the reduced index as a small matrix product
//! on the tensor cores (`mma.sync` m16n8k8, TF32), and each pair reads its value from shared memory;
//! the rest of the formula and the reduction are unchanged.
//!
//! Two ways to feed the tensor cores, by dimension:
//! - `resident` (D <= 128): a block keeps its rows of `x` in shared memory for the whole reduction,
//!   and a kernel run before the reduction (`rkeops_prepare_dots`) lays `y` out as the tensor cores
//!   read it, split in TF32 numbers, so that a tile is one asynchronous copy;
//! - `streamed` (larger D): `x` and `y` are staged and split a few dimensions at a time, per tile.
//!
//! Accuracy: each float is split into two TF32 numbers (`x = big + small`, 21 of its 24 bits) and a
//! dot is `big.big + big.small + small.big` ("3xTF32"), accumulated in float32: its error is of the
//! order of float32 arithmetic's, relative to |x| |y|. A squared distance is
//! `|x - c|^2 + |y - c|^2 - 2 (x - c).(y - c)` with `c` a row of `x` (translation leaves it
//! unchanged; centring keeps clouds far from the origin from cancelling), clamped at 0: its error
//! is relative to `|x - c|^2 + |y - c|^2`, which for close points (a cluster far from `c`) is far
//! larger than their distance. So a pair whose distance is below 1/8 of that sum (or NaN) is
//! computed again term by term in float32, as the FP32 kernel does: every distance is within
//! about 8 x 2^-21 of its own value, and selections (K-NN) differ from the FP32 kernel's only at
//! near-ties.

mod resident;
mod streamed;

use std::fmt::Write;

use super::dtype::Dtype;
use crate::formula::{Category, Formula, NodeId, Op};
use crate::plan::{Plan, Role};

/// Smallest dimension worth the tensor cores (below, the FP32 loop is as fast).
pub const MIN_DIM: usize = 16;
/// Largest dimension: the streamed path keeps the block's centre in shared memory.
pub const MAX_DIM: usize = 1024;
/// Largest dimension whose rows stay in shared memory (two blocks per multiprocessor up to here).
const RESIDENT_MAX_DIM: usize = 128;
/// Threads per block, and rows of the block (one per thread): four warps of 32 rows.
pub const ROWS: usize = 128;
/// Reduced indices per tile.
pub const COLUMNS: usize = 64;
/// A squared distance below 1 / RECHECK of the centred norms it came from is computed again.
const RECHECK: f32 = 8.0;
/// Floats of the dots of a tile, `rk_smem[r * (COLUMNS + 1) + c]` (the padding keeps a warp's
/// accesses on distinct banks).
const DOT_FLOATS: usize = ROWS * (COLUMNS + 1);

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
    /// Whether the block's rows stay in shared memory (and `y` is prepared for the tensor cores),
    /// or are staged per tile with `y` (`streamed`).
    pub resident: bool,
}

/// The kernel that lays the reduced-index input of resident dots out for the tensor cores, which
/// the launcher runs before the reduction, and the device memory it fills.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prepare {
    pub name: &'static str,
    /// Positions of the inputs it reads (the output row's, for the centre, and the reduced index's).
    pub outer: usize,
    pub inner: usize,
    /// Bytes per reduced row of the split vectors, then of their norms (rows padded to `COLUMNS`).
    pub split_bytes: usize,
    pub norm_bytes: usize,
}

impl Prepare {
    /// Rows of the prepared arrays for `n_red` reduced rows: whole tiles.
    pub fn rows(&self, n_red: usize) -> usize {
        n_red.div_ceil(COLUMNS) * COLUMNS
    }
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
            Some(DotTile { node: id, outer, inner, dim, squared, resident: dim <= RESIDENT_MAX_DIM })
        })
    }

    /// Which nodes the kernel still computes: those the reduction reads other than through `node`.
    pub fn live(&self, formula: &Formula) -> Vec<bool> {
        let red = &formula.reduction;
        let roots: Vec<NodeId> = std::iter::once(red.f).chain(red.g).collect();
        formula.graph.reachable_above(&roots, Some(self.node))
    }

    /// The same dots with the rows staged per tile.
    pub fn streamed(self) -> DotTile {
        DotTile { resident: false, ..self }
    }

    /// The preparation the launcher runs first, for resident dots.
    pub fn prepare(&self) -> Option<Prepare> {
        self.resident.then(|| Prepare {
            name: resident::PREPARE_NAME,
            outer: self.outer,
            inner: self.inner,
            split_bytes: resident::padded(self.dim) * 8,
            norm_bytes: 4,
        })
    }

    /// The kernel's parameters after the results: the prepared `y` and its norms.
    pub fn parameters(&self) -> Vec<String> {
        match self.resident {
            true => vec!["const uint4* __restrict__ rk_split".into(), "const float* __restrict__ rk_split_norms".into()],
            false => vec![],
        }
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

    /// Floats of static shared memory the kernel declares for the dots.
    pub fn shared_floats(&self) -> usize {
        match self.resident {
            true => resident::STATIC_FLOATS,
            false => streamed::shared_floats(self),
        }
    }

    /// Bytes of dynamic shared memory the kernel needs.
    pub fn dynamic_shared_bytes(&self) -> usize {
        match self.resident {
            true => resident::dynamic_floats(self.dim) * 4,
            false => 0,
        }
    }

    /// The kernel's declarations and first statements: shared memory, the block's rows (resident)
    /// or centre (streamed), their norms.
    pub fn block_start(&self) -> String {
        match self.resident {
            true => resident::block_start(self),
            false => streamed::block_start(self),
        }
    }

    /// The statement that computes the dots of the tile from `j0`.
    pub fn tile(&self) -> String {
        match self.resident {
            true => resident::tile(),
            false => streamed::tile(self),
        }
    }

    /// The functions the kernel calls: `rk_dot_tile`, which fills
    /// `rk_smem[r * (COLUMNS + 1) + c]` with the value of the node for the block's row `r` and the
    /// tile's column `c`, `rk_block_start` and (resident) the preparation kernel. `unrolled_pairs`: the
    /// kernel unrolls its pairs 32 times (log-sum-exps' groups), and calls the recheck of close pairs
    /// rather than inlining its loop into every copy: NVRTC took 7.7 s for a LogSumExp in D = 64 and
    /// 24.8 s for a SumSoftMaxWeight, and the call ran faster on an H200 (SumSoftMaxWeight 2e5^2,
    /// D = 64: 1700 -> 593 ms); a Gaussian sum (4 copies) ran 10 % slower with the call.
    pub fn functions(&self, src: &mut String, unrolled_pairs: bool) {
        let d = self.dim;
        let (recheck_inline, recheck_comment) = match unrolled_pairs {
            true => ("__noinline__", "// (a call: not inlined into each of the 32 copies of a pair)\n"),
            false => ("__forceinline__", ""),
        };
        let _ = write!(
            src,
            "#define RK_COLUMNS {COLUMNS}\n\
             // Tensor cores. The TF32 numbers of a float: big, its 10 leading bits of mantissa rounded (to\n\
             // nearest, ties away), and small = x - big (exact), whose bits below TF32's the MMA ignores.\n\
             __device__ __forceinline__ unsigned rk_big(float x) {{ return (__float_as_uint(x) + 0x1000u) & 0xffffe000u; }}\n\
             __device__ __forceinline__ void rk_mma(float* c, const unsigned* a, unsigned b0, unsigned b1) {{\n\
             \x20 asm volatile(\"mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {{%0,%1,%2,%3}}, {{%4,%5,%6,%7}}, {{%8,%9}}, {{%0,%1,%2,%3}};\"\n\
             \x20   : \"+f\"(c[0]), \"+f\"(c[1]), \"+f\"(c[2]), \"+f\"(c[3]) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b0), \"r\"(b1));\n\
             }}\n\
             // c += a.b in 3xTF32, a and b given as (big, small): small.big + big.small + big.big.\n\
             __device__ __forceinline__ void rk_mma3(float* c, const unsigned* a_big, const unsigned* a_small, unsigned b0_big, unsigned b1_big,\n\
             \x20   unsigned b0_small, unsigned b1_small) {{\n\
             \x20 rk_mma(c, a_small, b0_big, b1_big);\n\
             \x20 rk_mma(c, a_big, b0_small, b1_small);\n\
             \x20 rk_mma(c, a_big, b0_big, b1_big);\n\
             }}\n\
             // |x - c|^2 + |y - c|^2 - 2 (x - c).(y - c) from the sum of the norms and the dot, or NaN where\n\
             // the distance is below 1/{RECHECK} of the norms (or NaN): then computed again, term by term.\n\
             __device__ __forceinline__ float rk_distance(float norms, float dot) {{\n\
             \x20 const float d = fmaxf(fmaf(-2.f, dot, norms), 0.f);\n\
             \x20 return norms <= {RECHECK:.1}f * d ? d : __int_as_float(0x7fffffff);\n\
             }}\n\
             // A squared distance term by term, as the FP32 kernel computes it.\n\
             {recheck_comment}\
             __device__ {recheck_inline} float rk_sqdist(const S* __restrict__ x, const S* __restrict__ y, int n_out, int n_red, int r, int j) {{\n\
             \x20 float s = 0.f;\n\
             \x20 for (int k = 0; k < {d}; k++) {{ float v = rk_load(x[r + (long long)n_out * k]) - rk_load(y[j + (long long)n_red * k]); s = fmaf(v, v, s); }}\n\
             \x20 return s;\n\
             }}\n"
        );
        match self.resident {
            true => resident::functions(self, src),
            false => streamed::functions(self, src),
        }
    }
}

/// The statements that end `rk_dot_tile`: each value `v` of a warp's fragments (`acc`, two 16-row by
/// eight 8-column tiles, rows 32 w .. 32 w + 31 of warp w) written as `value` (an expression of `v`,
/// `rr`, `cc`) where `DotTile::read` finds it, `rk_smem[rr * (COLUMNS + 1) + cc]`.
fn store_dots(value: &str) -> String {
    format!(
        "\x20 #pragma unroll\n\
         \x20 for (int m = 0; m < 2; m++)\n\
         \x20   #pragma unroll\n\
         \x20   for (int n = 0; n < 8; n++)\n\
         \x20     #pragma unroll\n\
         \x20     for (int e = 0; e < 4; e++) {{\n\
         \x20       const int rr = warp * 32 + m * 16 + g + (e >> 1) * 8, cc = n * 8 + 2 * t + (e & 1);\n\
         \x20       const float v = acc[m][n][e];\n\
         \x20       rk_smem[rr * ({COLUMNS} + 1) + cc] = {value};\n\
         \x20     }}\n\
         \x20 __syncthreads();\n"
    )
}

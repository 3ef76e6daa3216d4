//! The resident tensor-core dots (dimensions up to `RESIDENT_MAX_DIM`): a block keeps its rows of
//! `x` in shared memory, in the order of the MMA's A fragments, for the whole reduction; a kernel
//! run once before the reduction lays `y` out in the order of the B fragments, already split in
//! TF32 numbers, with its norms. A tile is then copied asynchronously (`cp.async`), a chunk of
//! dimensions in flight while the previous one is multiplied, and nothing is split or staged twice.
//! On an H100 this took the Gaussian sum N = M = 1e5, D = 64 from 47.7 to 27.8 ms and the 10-NN
//! of 2e5 points in D = 100 from 282 to 218 ms (kernel) against the streamed dots (bench/RESULTS.md).
//! Distances are centred on the first row of `x` of the launch.

use std::fmt::Write;

use super::{DotTile, COLUMNS, DOT_FLOATS, ROWS};

pub const PREPARE_NAME: &str = "rkeops_prepare_dots";
/// 16-byte vectors of a tile's columns per 8-dimension step: one per lane of each 8-column MMA tile.
const STEP_VECTORS: usize = COLUMNS / 8 * 32;
/// 8-dimension steps per chunk copied at a time; two chunks are in flight.
const CHUNK_STEPS: usize = 4;
/// Floats of static shared memory: the rows' norms.
pub const STATIC_FLOATS: usize = ROWS;

/// The dimension padded to the MMA's 8.
pub fn padded(dim: usize) -> usize {
    dim.div_ceil(8) * 8
}

/// Floats of dynamic shared memory: the block's rows, then two chunks of the tile or its dots.
pub fn dynamic_floats(dim: usize) -> usize {
    padded(dim) * ROWS + (2 * CHUNK_STEPS * STEP_VECTORS * 4).max(DOT_FLOATS)
}

/// Shared memory, the block's rows and their norms.
pub fn block_start(dots: &DotTile) -> String {
    format!(
        "  extern __shared__ __align__(16) float rk_dynamic[];\n  float* rk_smem = rk_dynamic + {};\n  \
         __shared__ float rk_norms[{ROWS}];\n  rk_block_start(in{}, n_out, blockIdx.x * {ROWS}, rk_dynamic, rk_norms);\n",
        padded(dots.dim) * ROWS,
        dots.outer
    )
}

/// The statement that computes the dots of the tile from `j0`.
pub fn tile() -> String {
    "    rk_dot_tile(rk_split, rk_split_norms, j0, rk_dynamic, rk_smem, rk_norms);".into()
}

/// The preparation kernel, `rk_block_start` and `rk_dot_tile`.
pub fn functions(dots: &DotTile, src: &mut String) {
    prepare_kernel(dots, src);
    block_start_function(dots, src);
    copy_functions(dots, src);
    dot_tile_function(dots, src);
}

/// Distances: x and y centred on x's first row (`k`: the dimension).
fn centre(dots: &DotTile) -> &'static str {
    if dots.squared { " - rk_load(x[(long long)n_out * k])" } else { "" }
}

/// `rkeops_prepare_dots`, which lays `y` out for the tensor cores, split in TF32 numbers, with its norms.
fn prepare_kernel(dots: &DotTile, src: &mut String) {
    let (d, cols, vectors, steps, centre) = (dots.dim, COLUMNS, STEP_VECTORS, padded(dots.dim) / 8, centre(dots));
    let _ = write!(
        src,
        "// The reduced-index vectors laid out for rk_dot_tile, and their squared norms. Per tile of {cols} columns\n\
         // and step of 8 dimensions, {vectors} vectors: lane 4 g + t of the 8-column MMA tile n holds\n\
         // dimensions t and t + 4 of column 8 n + g, as TF32 numbers (big, big, small, small); columns are\n\
         // padded with zeros to whole tiles.\n\
         extern \"C\" __global__ void {name}(const int n_out, const int n_red, const S* __restrict__ x, const S* __restrict__ y,\n\
         \x20   uint4* __restrict__ split, float* __restrict__ split_norms) {{\n\
         \x20 const int j = blockIdx.x * blockDim.x + threadIdx.x;\n\
         \x20 if (j >= (n_red + {cols} - 1) / {cols} * {cols}) return;\n\
         \x20 const bool column = j < n_red;\n\
         \x20 uint4* to = split + (long long)(j / {cols}) * {steps} * {vectors} + (j % {cols}) / 8 * 32 + (j % 8) * 4;\n\
         \x20 float s = 0.f;\n\
         \x20 for (int st = 0; st < {steps}; st++) {{\n\
         \x20   float v[8];\n\
         \x20   #pragma unroll\n\
         \x20   for (int i = 0; i < 8; i++) {{\n\
         \x20     const int k = st * 8 + i;\n\
         \x20     v[i] = column && k < {d} ? rk_load(y[j + (long long)n_red * k]){centre} : 0.f;\n\
         \x20     s = fmaf(v[i], v[i], s);\n\
         \x20   }}\n\
         \x20   #pragma unroll\n\
         \x20   for (int t = 0; t < 4; t++) {{\n\
         \x20     const unsigned b0 = rk_big(v[t]), b1 = rk_big(v[t + 4]);\n\
         \x20     to[st * {vectors} + t] = make_uint4(b0, b1, __float_as_uint(v[t] - __uint_as_float(b0)), __float_as_uint(v[t + 4] - __uint_as_float(b1)));\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 split_norms[j] = s;\n\
         }}\n",
        name = PREPARE_NAME,
    );
}

/// `rk_block_start`, which keeps the block's rows in shared memory as the MMA's A fragments.
fn block_start_function(dots: &DotTile, src: &mut String) {
    let (d, dp, warps, centre) = (dots.dim, padded(dots.dim), ROWS / 32, centre(dots));
    let _ = write!(
        src,
        "// The block's rows (centred for distances), kept in shared memory as the A fragments of the MMA:\n\
         // dimensions t and t + 4 of step st of row 32 w + 16 m + 8 u + g are elements u and u + 2 of the\n\
         // float4 xs[((st * {warps} + w) * 2 + m) * 32 + 4 g + t]; and their squared norms.\n\
         __device__ __forceinline__ void rk_block_start(const S* __restrict__ x, int n_out, int row_base, float* xs, float* rk_norms) {{\n\
         \x20 const int r = threadIdx.x, row = min(row_base + r, n_out - 1);\n\
         \x20 const int warp = r >> 5, m = (r >> 4) & 1, u = (r >> 3) & 1, g = r & 7;\n\
         \x20 float s = 0.f;\n\
         \x20 for (int k = 0; k < {dp}; k++) {{\n\
         \x20   const float v = k < {d} ? rk_load(x[row + (long long)n_out * k]){centre} : 0.f;\n\
         \x20   s = fmaf(v, v, s);\n\
         \x20   xs[((((k >> 3) * {warps} + warp) * 2 + m) * 32 + g * 4 + (k & 3)) * 4 + u + 2 * ((k >> 2) & 1)] = v;\n\
         \x20 }}\n\
         \x20 rk_norms[r] = s;\n\
         }}\n"
    );
}

/// `rk_copy16` and `rk_copy_chunk`, the asynchronous copies of a tile's chunks (`cp.async`).
fn copy_functions(dots: &DotTile, src: &mut String) {
    let (rows, vectors, chunk, steps) = (ROWS, STEP_VECTORS, CHUNK_STEPS, padded(dots.dim) / 8);
    let _ = write!(
        src,
        "__device__ __forceinline__ void rk_copy16(void* to, const void* from) {{\n\
         \x20 asm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\" :: \"r\"((unsigned)__cvta_generic_to_shared(to)), \"l\"(from));\n\
         }}\n\
         // Copies chunk c of the tile's {steps} steps (of {chunk}) into buffer c % 2 of rk_smem, as one group of copies.\n\
         __device__ __forceinline__ void rk_copy_chunk(const uint4* __restrict__ tile, int c, uint4* buffers) {{\n\
         \x20 const int n = min({chunk}, {steps} - c * {chunk}) * {vectors};\n\
         \x20 uint4* to = buffers + (c & 1) * {chunk} * {vectors};\n\
         \x20 const uint4* from = tile + c * {chunk} * {vectors};\n\
         \x20 for (int i = threadIdx.x; i < n; i += {rows}) rk_copy16(to + i, from + i);\n\
         \x20 asm volatile(\"cp.async.commit_group;\" ::: \"memory\");\n\
         }}\n"
    );
}

/// For distances, the norms of the thread's rows and columns in the fragments (declared and read
/// before the dots are stored), and the value stored for a dot `v`.
fn norms_and_value(dots: &DotTile) -> (String, &'static str) {
    match dots.squared {
        true => (
            String::from(
                "\x20 float row_norm[2][2], column_norm[8][2];\n\
                 \x20 #pragma unroll\n\
                 \x20 for (int m = 0; m < 2; m++)\n\
                 \x20   #pragma unroll\n\
                 \x20   for (int u = 0; u < 2; u++) row_norm[m][u] = rk_norms[warp * 32 + m * 16 + g + u * 8];\n\
                 \x20 #pragma unroll\n\
                 \x20 for (int n = 0; n < 8; n++)\n\
                 \x20   #pragma unroll\n\
                 \x20   for (int u = 0; u < 2; u++) column_norm[n][u] = split_norms[j0 + n * 8 + 2 * t + u];\n"
            ),
            "rk_distance(row_norm[m][e >> 1] + column_norm[n][e & 1], v)",
        ),
        false => (String::new(), "v"),
    }
}

/// `rk_dot_tile`: the dots of the block's rows with a tile's columns, one chunk of the tile
/// multiplied while the next is copied, then stored in `rk_smem`.
fn dot_tile_function(dots: &DotTile, src: &mut String) {
    let (rows, cols, vectors, chunk) = (ROWS, COLUMNS, STEP_VECTORS, CHUNK_STEPS);
    let (steps, warps) = (padded(dots.dim) / 8, rows / 32);
    let (norms, value) = norms_and_value(dots);
    let store = super::store_dots(value);
    let _ = write!(
        src,
        "// Dots of the block's {rows} rows with the {cols} columns from j0: warp w computes rows 32 w .. 32 w + 31,\n\
         // each step in two 16-row by eight 8-column tiles, while the next chunk of the tile is copied.\n\
         __device__ __forceinline__ void rk_dot_tile(const uint4* __restrict__ split, const float* __restrict__ split_norms, int j0,\n\
         \x20   const float* xs, float* rk_smem, const float* rk_norms) {{\n\
         \x20 constexpr int chunks = ({steps} + {chunk} - 1) / {chunk};\n\
         \x20 const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;\n\
         \x20 const uint4* tile = split + (long long)(j0 / {cols}) * {steps} * {vectors};\n\
         \x20 uint4* buffers = (uint4*)rk_smem;\n\
         \x20 // (the pairs of the previous tile have read its dots, where the chunks go)\n\
         \x20 __syncthreads();\n\
         \x20 rk_copy_chunk(tile, 0, buffers);\n\
         \x20 if (chunks > 1) rk_copy_chunk(tile, 1, buffers);\n\
         \x20 float acc[2][8][4];\n\
         \x20 #pragma unroll\n\
         \x20 for (int m = 0; m < 2; m++)\n\
         \x20   #pragma unroll\n\
         \x20   for (int n = 0; n < 8; n++) {{ acc[m][n][0] = 0.f; acc[m][n][1] = 0.f; acc[m][n][2] = 0.f; acc[m][n][3] = 0.f; }}\n\
         \x20 const float4* xa = (const float4*)xs + warp * 64 + lane;\n\
         \x20 #pragma unroll 1\n\
         \x20 for (int c = 0; c < chunks; c++) {{\n\
         \x20   if (c + 1 < chunks) asm volatile(\"cp.async.wait_group 1;\" ::: \"memory\");\n\
         \x20   else asm volatile(\"cp.async.wait_group 0;\" ::: \"memory\");\n\
         \x20   __syncthreads();\n\
         \x20   const uint4* yb = buffers + (c & 1) * {chunk} * {vectors} + lane;\n\
         \x20   const int st_end = min({steps}, (c + 1) * {chunk});\n\
         \x20   #pragma unroll 2\n\
         \x20   for (int st = c * {chunk}; st < st_end; st++, yb += {vectors}) {{\n\
         \x20     unsigned a_big[2][4], a_small[2][4];\n\
         \x20     #pragma unroll\n\
         \x20     for (int m = 0; m < 2; m++) {{\n\
         \x20       const float4 x4 = xa[st * {warps} * 64 + m * 32];\n\
         \x20       const float v[4] = {{x4.x, x4.y, x4.z, x4.w}};\n\
         \x20       #pragma unroll\n\
         \x20       for (int e = 0; e < 4; e++) {{ a_big[m][e] = rk_big(v[e]); a_small[m][e] = __float_as_uint(v[e] - __uint_as_float(a_big[m][e])); }}\n\
         \x20     }}\n\
         \x20     #pragma unroll\n\
         \x20     for (int n = 0; n < 8; n++) {{\n\
         \x20       const uint4 b = yb[n * 32];\n\
         \x20       #pragma unroll\n\
         \x20       for (int m = 0; m < 2; m++) rk_mma3(acc[m][n], a_big[m], a_small[m], b.x, b.y, b.z, b.w);\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20   // (every warp is done with buffer c % 2 before chunk c + 2 goes there)\n\
         \x20   __syncthreads();\n\
         \x20   if (c + 2 < chunks) rk_copy_chunk(tile, c + 2, buffers);\n\
         \x20 }}\n\
         {norms}\
         {store}\
         }}\n"
    );
}

//! The streamed tensor-core dots (dimensions above `RESIDENT_MAX_DIM`): per tile, the block's
//! rows and the tile's columns are staged in shared memory a few dimensions at a time (x as
//! floats, y split in TF32 numbers), both centred on the block's first row.

use std::fmt::Write;

use super::{DotTile, COLUMNS, ROWS};

/// Dimensions staged in shared memory at a time.
const DEPTH: usize = 32;
/// Padding of the staged arrays and of the dots, which keeps the accesses of a warp on distinct banks.
const PAD: usize = 8;
/// Strides of the staged x and y, in floats and in pairs (a stride of 4 mod 16 pairs keeps the
/// 64-bit reads of a half-warp on distinct banks).
const XS_STRIDE: usize = ROWS + PAD;
const YS_STRIDE: usize = COLUMNS + 4;

/// Floats of `rk_smem`: the staged inputs (x as floats, y as pairs of TF32 numbers), then the dots.
const SMEM_FLOATS: usize = {
    let staging = DEPTH * XS_STRIDE + 2 * DEPTH * YS_STRIDE;
    let dots = super::DOT_FLOATS;
    if staging > dots { staging } else { dots }
};
/// Floats of `rk_norms`: the rows' norms, then two partial norms per column.
const NORM_FLOATS: usize = ROWS + 2 * COLUMNS;

/// Floats of shared memory: the staged inputs or the dots (in turn), the norms, and the centre.
pub fn shared_floats(dots: &DotTile) -> usize {
    SMEM_FLOATS + NORM_FLOATS + if dots.squared { dots.dim } else { 0 }
}

/// Shared memory, then (distances) the block's centre and its rows' norms.
pub fn block_start(dots: &DotTile) -> String {
    let mut s = format!("  __shared__ __align__(16) float rk_smem[{SMEM_FLOATS}];\n  __shared__ float rk_norms[{NORM_FLOATS}];\n");
    if dots.squared {
        let _ = write!(
            s,
            "  __shared__ float rk_centre[{}];\n  rk_block_start(in{}, n_out, blockIdx.x * {ROWS}, r_0, rk_centre, rk_norms);\n",
            dots.dim, dots.outer
        );
    } else {
        s.push_str("  float* rk_centre = 0;\n");
    }
    s
}

/// The statement that computes the dots of the tile from `j0`.
pub fn tile(dots: &DotTile) -> String {
    format!(
        "    rk_dot_tile(in{}, in{}, n_out, n_red, blockIdx.x * {ROWS}, j0, j_end, rk_smem, rk_norms, rk_centre);",
        dots.outer, dots.inner
    )
}

/// `rk_block_start` and `rk_dot_tile`.
pub fn functions(dots: &DotTile, src: &mut String) {
    block_start_function(dots, src);
    dot_tile_function(dots, src);
}

/// `rk_block_start`: the block's centre, and the centred norm of each thread's row.
fn block_start_function(dots: &DotTile, src: &mut String) {
    let (d, rows) = (dots.dim, ROWS);
    let _ = write!(
        src,
        "// The block's centre (its first row) and the squared norm of the thread's row r, centred.\n\
         __device__ __forceinline__ void rk_block_start(const S* __restrict__ x, int n_out, int row_base, int r, float* rk_centre, float* rk_norms) {{\n\
         \x20 for (int k = threadIdx.x; k < {d}; k += {rows}) rk_centre[k] = rk_load(x[row_base + (long long)n_out * k]);\n\
         \x20 __syncthreads();\n\
         \x20 float s = 0.f;\n\
         \x20 for (int k = 0; k < {d}; k++) {{ float v = rk_load(x[r + (long long)n_out * k]) - rk_centre[k]; s = fmaf(v, v, s); }}\n\
         \x20 rk_norms[threadIdx.x] = s;\n\
         }}\n"
    );
}

/// `rk_dot_tile`: the dots of the block's rows with a tile's columns, both staged a few dimensions
/// at a time, then stored in `rk_smem`.
fn dot_tile_function(dots: &DotTile, src: &mut String) {
    let (d, depth, rows, cols, xs_stride, ys_stride) = (dots.dim, DEPTH, ROWS, COLUMNS, XS_STRIDE, YS_STRIDE);
    let stage = stage_inputs(dots);
    let value = match dots.squared {
        true => format!(
            "rk_distance(rk_norms[rr] + rk_norms[{rows} + cc] + rk_norms[{} + cc], v)",
            rows + cols
        ),
        false => "v".to_string(),
    };
    let store = super::store_dots(&value);
    let _ = write!(
        src,
        "// Dots of the block's {rows} rows with the {cols} columns from j0, staged {depth} dimensions at a\n\
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
         {stage}\
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
         \x20       for (int m = 0; m < 2; m++) rk_mma3(acc[m][n], a_big[m], a_small[m], b0.x, b1.x, b0.y, b1.y);\n\
         \x20     }}\n\
         \x20   }}\n\
         \x20 }}\n\
         \x20 rk_norms[{rows} + threadIdx.x] = y_norm;\n\
         \x20 __syncthreads();\n\
         {store}\
         }}\n"
    );
}

/// The statements of `rk_dot_tile` that stage the dimensions `k0 ..` of the block's rows and of
/// the tile's columns in shared memory (x as floats, y split in TF32 numbers), centred for
/// distances, and add the columns' to their partial norms.
fn stage_inputs(dots: &DotTile) -> String {
    let (d, depth, xs_stride, ys_stride) = (dots.dim, DEPTH, XS_STRIDE, YS_STRIDE);
    let centre = if dots.squared { " - rk_centre[k0 + k]" } else { "" };
    format!(
        "\x20   const int kn = min({depth}, {d} - k0);\n\
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
         \x20   __syncthreads();\n"
    )
}

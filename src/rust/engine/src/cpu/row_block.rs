//! Squared distances |x_i - y_j|^2 of a group of output rows at once, for large dimensions.
//!
//! One row at a time, every component of every y_j of the tile is read again from L2 for each row:
//! with D = 64 in float32 that is 256 bytes per pair, and the distance runs at the speed of L2, not
//! of the arithmetic. Here y is first packed, once per tile, in chunks of `LANES` indices j with all
//! their components together (16 KiB for D = 64, one run of memory rather than D pages); a chunk
//! stays in L1 while the `ROWS` rows of the group use it. The sums are those of the row-at-a-time
//! pass, in the same order (component 0 first): the results are the same to the bit.

use super::lanes::Arg;
use crate::real::Real;

/// Rows that share each chunk of y (measured on a Zen 5 with D = 64: 4 to 16 are within noise).
pub const ROWS: usize = 8;
/// Indices j per chunk: as many independent sums as hide the latency of the multiply-adds.
const LANES: usize = 128;

/// Smallest dimension worth grouping rows for: below it, a row's pass is cheap next to the rest of
/// the formula, and the group's buffer would cost more than it saves.
pub const MIN_DIM: usize = 16;

/// The full chunks of `LANES` indices of the tile, component by component within a chunk; `packed`
/// holds at least `len x dim` values.
#[inline(always)]
pub fn pack<T: Real>(y: &Arg<T>, len: usize, packed: &mut [T]) {
    let dim = y.dim;
    for (k, chunk) in packed.chunks_exact_mut(dim * LANES).take(len / LANES).enumerate() {
        for (c, lanes) in chunk.chunks_exact_mut(LANES).enumerate() {
            let start = c * y.stride + k * LANES;
            lanes.copy_from_slice(&y.data[start..start + LANES]);
        }
    }
}

/// `out[q * len + t] = |x_(row + q) - y_(j0 + t)|^2` for `q < rows <= ROWS` and `t < len`. `x` is the
/// output-index input viewed at its row `row` (components `x.stride` apart), `y` the reduced-index
/// input over the tile and `packed` its chunks (`pack`); `xs` holds at least `ROWS x dim` values.
#[inline(always)]
pub fn sq_dists<T: Real>(
    (x, y): (&Arg<T>, &Arg<T>),
    packed: &[T],
    rows: usize,
    len: usize,
    (out, xs): (&mut [T], &mut [T]),
    fma: bool,
) {
    let dim = y.dim;
    for q in 0..rows {
        for c in 0..dim {
            xs[q * dim + c] = x.data[c * x.stride + q];
        }
    }
    let column = |c: usize| &y.data[c * y.stride..c * y.stride + len];
    let full = len - len % LANES;
    for (chunk, t0) in packed.chunks_exact(dim * LANES).zip((0..full).step_by(LANES)) {
        for (q, x) in xs.chunks_exact(dim).take(rows).enumerate() {
            let mut acc = [T::ZERO; LANES];
            for (&x, y) in x.iter().zip(chunk.chunks_exact(LANES)) {
                for (a, &y) in acc.iter_mut().zip(y) {
                    let d = x - y;
                    *a = d.madd(d, *a, fma);
                }
            }
            out[q * len + t0..q * len + t0 + LANES].copy_from_slice(&acc);
        }
    }
    for t in full..len {
        for (q, x) in xs.chunks_exact(dim).take(rows).enumerate() {
            let mut s = T::ZERO;
            for (c, &x) in x.iter().enumerate() {
                let d = x - column(c)[t];
                s = d.madd(d, s, fma);
            }
            out[q * len + t] = s;
        }
    }
}

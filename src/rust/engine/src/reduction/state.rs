//! The state of a reduction, whatever the backend: its layout (f64 values per output row), its
//! identity, how the states of two parts of the reduced range merge, and how a state becomes the
//! row's values and indices. The CPU accumulates terms into it in Rust (`cpu::reducers`), the GPU in
//! the CUDA that `cuda::codegen` writes from the same layout. States are kept in f64: every f32
//! value is exactly representable there, and sums across tiles gain precision for free.

use crate::real::Real;
use crate::reduction::{ReductionKind, SumScheme};

pub struct Accumulator {
    pub kind: ReductionKind,
    pub scheme: SumScheme,
    pub k: usize,
    /// Dimension of the values f.
    pub dim: usize,
    /// Dimension of the weights g (0 without weights).
    pub gdim: usize,
}

/// Whether `x` should replace `best` in a min (`max = false`) or max selection. NaN wins, so that
/// it propagates to the result.
#[inline(always)]
pub fn better<T: Real>(x: T, best: T, max: bool) -> bool {
    (if max { x > best } else { x < best }) || (x.is_nan() && !best.is_nan())
}

impl Accumulator {
    /// The accumulator of a reduction of values of dimension `dim` (weights of dimension `gdim`, 0
    /// when unweighted); `Formula::accumulator` gives that of a formula.
    pub fn new(kind: ReductionKind, scheme: SumScheme, k: usize, dim: usize, gdim: usize) -> Accumulator {
        Accumulator { kind, scheme, k, dim, gdim }
    }

    /// Number of f64 values in the state of one output row.
    pub fn state_len(&self) -> usize {
        use ReductionKind::*;
        match self.kind {
            Sum if self.scheme == SumScheme::KahanScheme => 2 * self.dim,
            Sum => self.dim,
            Min | Max | ArgMin | ArgMax | MinArgMin | MaxArgMax => 2 * self.dim,
            KMin | ArgKMin | KMinArgKMin => 2 * self.k * self.dim,
            LogSumExp => 2,
            LogSumExpWeight => 1 + self.gdim,
            SumSoftMaxWeight => 2 + self.gdim,
        }
    }

    /// Number of values (and of indices) per output row.
    pub fn width(&self) -> usize {
        self.k * if self.gdim > 0 { self.gdim } else { self.dim }
    }

    // Inlined: the evaluator of short ranges calls it for every row.
    #[inline(always)]
    pub fn init(&self, state: &mut [f64]) {
        use ReductionKind::*;
        match self.kind {
            Sum => state.fill(0.0),
            Min | ArgMin | MinArgMin | KMin | ArgKMin | KMinArgKMin => {
                let (v, i) = state.split_at_mut(state.len() / 2);
                v.fill(f64::INFINITY);
                i.fill(-1.0);
            }
            Max | ArgMax | MaxArgMax => {
                let (v, i) = state.split_at_mut(state.len() / 2);
                v.fill(f64::NEG_INFINITY);
                i.fill(-1.0);
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                state.fill(0.0);
                state[0] = f64::NEG_INFINITY;
            }
        }
    }

    /// Merges `other`, the state of the same row over a later part of the reduced range, into
    /// `state` (the GPU's 2D scheme reduces chunks of the range separately).
    pub fn merge(&self, state: &mut [f64], other: &[f64]) {
        use ReductionKind::*;
        match self.kind {
            Sum => {
                for (s, o) in state.iter_mut().zip(other) {
                    *s += o;
                }
            }
            Min | Max | ArgMin | ArgMax | MinArgMin | MaxArgMax | KMin | ArgKMin | KMinArgKMin => {
                let max = self.kind.keeps_maxima();
                let empty = if max { f64::NEG_INFINITY } else { f64::INFINITY };
                let (k, half) = (self.k, state.len() / 2);
                let mut merged = vec![(empty, -1.0); k];
                for c in 0..self.dim {
                    let range = c * k..(c + 1) * k;
                    let (va, ia) = (&state[range.clone()], &state[half + c * k..half + (c + 1) * k]);
                    let (vb, ib) = (&other[range.clone()], &other[half + c * k..half + (c + 1) * k]);
                    let (mut a, mut b) = (0, 0);
                    for slot in merged.iter_mut() {
                        let a_ok = a < k && ia[a] >= 0.0;
                        let b_ok = b < k && ib[b] >= 0.0;
                        // On ties `state` wins: it covers the earlier part of the range.
                        *slot = if b_ok && (!a_ok || better(vb[b], va[a], max)) {
                            b += 1;
                            (vb[b - 1], ib[b - 1])
                        } else if a_ok {
                            a += 1;
                            (va[a - 1], ia[a - 1])
                        } else {
                            (empty, -1.0)
                        };
                    }
                    for (p, &(v, i)) in merged.iter().enumerate() {
                        state[c * k + p] = v;
                        state[half + c * k + p] = i;
                    }
                }
            }
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => {
                let (ma, mb) = (state[0], other[0]);
                if mb == f64::NEG_INFINITY {
                    return;
                }
                let m = ma.max(mb);
                let scale = |x: f64| if x == m { 1.0 } else { (x - m).exp() };
                let (sa, sb) = (scale(ma), scale(mb));
                state[0] = m;
                for (s, o) in state[1..].iter_mut().zip(&other[1..]) {
                    *s = *s * sa + o * sb;
                }
            }
        }
    }

    /// Writes the results of one row: `width()` values and indices, ordered `k + K c` (so that the
    /// R array has dimensions n x K x dim). An empty `values` or `indices` is one the caller does not want.
    #[inline(always)]
    pub fn finalize<T: Real>(&self, state: &[f64], values: &mut [f64], indices: &mut [i32]) {
        self.finalize_rows::<T>(state, values, indices);
    }

    /// `finalize` for consecutive rows: `states` holds their states one after the other, `values`
    /// and `indices` their results, `width()` per row (or nothing). One dispatch on the kind for all
    /// the rows: the evaluator of short ranges finalises blocks of rows that cost a few cycles each.
    #[inline(always)]
    pub fn finalize_rows<T: Real>(&self, states: &[f64], values: &mut [f64], indices: &mut [i32]) {
        use ReductionKind::*;
        let round = |x: f64| T::from_f64(x).to_f64();
        let (len, width) = (self.state_len(), self.width());
        let rows = states.chunks_exact(len);
        let values = values.chunks_exact_mut(width.max(1));
        match self.kind {
            Sum => {
                for (state, values) in rows.zip(values) {
                    for c in 0..self.dim {
                        values[c] = round(state[c]);
                    }
                }
            }
            Min | Max | ArgMin | ArgMax | MinArgMin | MaxArgMax | KMin | ArgKMin | KMinArgKMin => {
                let half = len / 2;
                for (state, values) in rows.clone().zip(values) {
                    values.copy_from_slice(&state[..half]);
                }
                for (state, indices) in rows.zip(indices.chunks_exact_mut(width.max(1))) {
                    for (i, s) in indices.iter_mut().zip(&state[half..]) {
                        *i = *s as i32 + 1;
                    }
                }
            }
            LogSumExp => {
                for (state, values) in rows.zip(values) {
                    values[0] = round(state[0] + state[1].ln());
                }
            }
            LogSumExpWeight => {
                for (state, values) in rows.zip(values) {
                    for c in 0..self.gdim {
                        values[c] = round(state[0] + state[1 + c].ln());
                    }
                }
            }
            SumSoftMaxWeight => {
                for (state, values) in rows.zip(values) {
                    for c in 0..self.gdim {
                        values[c] = round(state[2 + c] / state[1]);
                    }
                }
            }
        }
    }
}

//! How the CPU adds a tile of terms to the state of one output row (the state itself, its identity,
//! merge and finalisation: `reduction::state`).

use super::lanes::{Arg, Lane};
use crate::real::Real;
use crate::reduction::{better, Accumulator, ReductionKind, SumScheme};

/// The values of a lane as a slice, materialising a lane that is constant over the tile.
#[inline(always)]
fn as_slice<'a, T: Real>(lane: Lane<'a, T>, len: usize, scratch: &'a mut [T]) -> &'a [T] {
    match lane {
        Lane::Vector(x) => x,
        Lane::Scalar(x) => {
            scratch[..len].fill(x);
            &scratch[..len]
        }
    }
}

/// Sum of a tile by halves: each level adds the upper half onto the lower one in a single
/// vectorised pass, into `buf` (at least half as long as `x`). Pairwise summation: more accurate
/// than a running sum, and no horizontal reduction for the compiler to get wrong.
#[inline(always)]
pub fn tile_sum<T: Real>(x: &[T], buf: &mut [T]) -> T {
    let (lo, hi) = x.split_at(x.len() - x.len() / 2);
    if lo.is_empty() {
        return T::ZERO;
    }
    let buf = &mut buf[..lo.len()];
    buf.copy_from_slice(lo);
    for (b, &h) in buf.iter_mut().zip(hi) {
        *b = *b + h;
    }
    fold_halves(buf)
}

/// Sum of `x[t] * y[t]` over a tile, by halves like `tile_sum`.
#[inline(always)]
fn tile_dot<T: Real>(x: &[T], y: &[T], buf: &mut [T], fma: bool) -> T {
    let n = x.len().min(y.len());
    let m = n - n / 2;
    if m == 0 {
        return T::ZERO;
    }
    let buf = &mut buf[..m];
    for ((b, &x), &y) in buf.iter_mut().zip(&x[..m]).zip(&y[..m]) {
        *b = x * y;
    }
    for ((b, &x), &y) in buf.iter_mut().zip(&x[m..n]).zip(&y[m..n]) {
        *b = x.madd(y, *b, fma);
    }
    fold_halves(buf)
}

/// The pairwise sum of `tile_sum` without its first level (which is the first step of the fold).
#[inline(always)]
fn fold_halves<T: Real>(buf: &mut [T]) -> T {
    let mut n = buf.len();
    while n > 1 {
        let h = n / 2;
        let (lo, hi) = buf[..n].split_at_mut(n - h);
        for (l, &h) in lo.iter_mut().zip(&*hi) {
            *l = *l + h;
        }
        n -= h;
    }
    buf[0]
}

/// Terms per chunk in the selections' first, vectorised look (at most 64: one bit each).
const SCAN: usize = 32;
/// Terms per block ruled out at once when none of them may enter the selection, as most blocks of a
/// long reduction are.
const BLOCK: usize = 256;

/// Whether `x` may beat `worst`: `!(x >= worst)` is `better(x, worst)` when `worst` is a number (NaN
/// included, which must win), and true when `worst` is NaN.
#[inline(always)]
#[allow(clippy::neg_cmp_op_on_partial_ord)] // the negation is what lets NaN through
fn may_beat<T: Real>(x: T, worst: T, max: bool) -> bool {
    if max {
        !(x <= worst)
    } else {
        !(x >= worst)
    }
}

/// The terms of `chunk` that may beat `worst`, one bit each.
#[inline(always)]
fn candidate_mask<T: Real>(chunk: &[T], worst: T, max: bool) -> u64 {
    chunk.iter().enumerate().fold(0, |mask, (u, &x)| mask | (u64::from(may_beat(x, worst, max)) << u))
}

/// Whether any term of `block` may beat `worst`.
#[inline(always)]
fn any_candidate<T: Real>(block: &[T], worst: T, max: bool) -> bool {
    block.iter().fold(false, |any, &x| any | may_beat(x, worst, max))
}

/// The largest value of `x`, NaN if one is NaN: what a fold of `Real::max` gives, in a form that
/// vectorises (independent running maxima, NaN tracked apart; the fold is a scalar chain).
#[inline(always)]
fn nan_or_max<T: Real>(x: &[T]) -> T {
    const LANES: usize = 16;
    let (mut m, mut nan) = ([T::NEG_INFINITY; LANES], false);
    let chunks = x.chunks_exact(LANES);
    let rest = chunks.remainder();
    for chunk in chunks {
        for (m, &v) in m.iter_mut().zip(chunk) {
            *m = if v > *m { v } else { *m };
            nan |= v.is_nan();
        }
    }
    for (m, &v) in m.iter_mut().zip(rest) {
        *m = if v > *m { v } else { *m };
        nan |= v.is_nan();
    }
    if nan {
        return T::from_f64(f64::NAN);
    }
    m.iter().fold(T::NEG_INFINITY, |a, &b| a.max(b))
}

/// Inserts the terms of `chunk` flagged in `candidates` (those that may beat `worst`) into the
/// sorted selection `v`, `ix` (indices from `first`), and updates `worst`, its last value.
#[inline(always)]
fn insert<T: Real>(
    chunk: &[T],
    mut candidates: u64,
    first: usize,
    v: &mut [f64],
    ix: &mut [f64],
    max: bool,
    worst: &mut T,
) {
    let k = v.len();
    while candidates != 0 {
        let u = candidates.trailing_zeros() as usize;
        candidates &= candidates - 1;
        let Some(&xt) = chunk.get(u) else { break };
        if ix[k - 1] >= 0.0 && !better(xt, *worst, max) {
            continue;
        }
        let mut p = k - 1;
        while p > 0 && (ix[p - 1] < 0.0 || better(xt, T::from_f64(v[p - 1]), max)) {
            v[p] = v[p - 1];
            ix[p] = ix[p - 1];
            p -= 1;
        }
        v[p] = xt.to_f64();
        ix[p] = (first + u) as f64;
        *worst = T::from_f64(v[k - 1]);
    }
}

/// Most components of the distances that `Accumulator::accumulate_select_dist` computes itself.
pub const SELECT_DIST_DIM: usize = 4;

/// `Accumulator::accumulate_select_dist` for `D` components: `point` one value per component for the
/// tile, `points` the tile's values.
#[inline(always)]
fn select_dist<T: Real, const D: usize>(
    state: &mut [f64],
    point: &Arg<T>,
    points: &Arg<T>,
    len: usize,
    j0: usize,
    fma: bool,
) {
    let k = state.len() / 2;
    let (v, ix) = state.split_at_mut(k);
    let mut worst = T::from_f64(v[k - 1]);
    let columns: [(T, &[T]); D] = std::array::from_fn(|c| match (point.lane(c, len), points.lane(c, len)) {
        (Lane::Scalar(p), Lane::Vector(q)) => (p, q),
        _ => unreachable!("fusion::select_dist pairs a value per row with values per index"),
    });
    let distances = |t: usize| {
        let mut s = T::ZERO;
        for (p, q) in &columns {
            s = (*p - q[t]).madd(*p - q[t], s, fma);
        }
        s
    };
    // Blocks of distances, ruled out at once when none may enter; the rest by chunks of SCAN.
    const DIST_BLOCK: usize = 128;
    let mut block = [T::ZERO; DIST_BLOCK];
    let full = len - len % DIST_BLOCK;
    for start in (0..full).step_by(DIST_BLOCK) {
        let cols: [(T, &[T; DIST_BLOCK]); D] =
            columns.map(|(p, q)| (p, q[start..start + DIST_BLOCK].try_into().unwrap()));
        // Whether any may enter, found with the distances still in registers (reading the block
        // back right after storing it would stall).
        let mut any = false;
        for (t, d) in block.iter_mut().enumerate() {
            let mut s = T::ZERO;
            for (p, q) in &cols {
                s = (*p - q[t]).madd(*p - q[t], s, fma);
            }
            *d = s;
            any |= may_beat(s, worst, false);
        }
        if ix[k - 1] >= 0.0 && !any {
            continue;
        }
        select_from(&block, j0 + start, v, ix, &mut worst);
    }
    let tail = &mut block[..len - full];
    for (t, d) in tail.iter_mut().enumerate() {
        *d = distances(full + t);
    }
    select_from(tail, j0 + full, v, ix, &mut worst);
}

/// Inserts the terms of `x` (indices from `first`) that enter the K-min selection `v`, `ix`, looking
/// at chunks of SCAN terms at once.
#[inline(always)]
fn select_from<T: Real>(x: &[T], first: usize, v: &mut [f64], ix: &mut [f64], worst: &mut T) {
    let k = v.len();
    for (start, chunk) in (0..x.len()).step_by(SCAN).zip(x.chunks(SCAN)) {
        let candidates = if ix[k - 1] >= 0.0 { candidate_mask(chunk, *worst, false) } else { u64::MAX };
        insert(chunk, candidates, first + start, v, ix, false, worst);
    }
}

/// How a tile whose largest term is `tile_max` enters a log-sum-exp state (running maximum, then
/// sums relative to it): the factors that the state's sums and the tile's sums (relative to
/// `tile_max`) take, with the state's maximum updated; `None` where the tile leaves nothing to add,
/// because its terms are all -inf or because one is NaN (the state is then NaN).
#[inline(always)]
pub(super) fn exp_tile_scales(state: &mut [f64], tile_max: f64) -> Option<(f64, f64)> {
    if tile_max.is_nan() {
        state.fill(f64::NAN);
        return None;
    }
    if tile_max == f64::NEG_INFINITY {
        return None;
    }
    let m_old = state[0];
    let m_new = m_old.max(tile_max);
    let scale = |m: f64| if m == m_new { 1.0 } else { (m - m_new).exp() };
    state[0] = m_new;
    Some((scale(m_old), scale(tile_max)))
}

/// `exp(d)` for a term `d = x - max <= 0` of a log-sum-exp, 0 where it would fall below the normal
/// range (d < -87 in f32, -708 in f64). Why: on x86 every multiplication that gives a subnormal (or
/// underflows to 0) takes a microcode assist of ~150 cycles, and in a log-domain Sinkhorn step most
/// terms lie hundreds below their row's largest: those assists took more than half of the time. The
/// largest term adds exactly 1 to the sum, so what is dropped (under 2e-38 per term, relatively) is
/// far below its rounding. The argument is clamped before the exponential, which then never leaves
/// the normal range; a NaN passes both comparisons unchanged.
#[inline(always)]
pub(super) fn exp_below_max<T: Real>(d: T, fma: bool) -> T {
    let lo = T::from_f64(if std::mem::size_of::<T>() == 4 { -87.0 } else { -708.0 });
    let e = (if d < lo { lo } else { d }).exp(fma);
    if d < lo {
        T::ZERO
    } else {
        e
    }
}

/// The terms of a tile: the reduced indices `j0 .. j0 + len`, and whether multiply-adds are fused
/// (the instruction set's).
#[derive(Debug, Clone, Copy)]
pub struct Span {
    pub j0: usize,
    pub len: usize,
    pub fma: bool,
}

impl Accumulator {
    /// Adds the terms `span` of one output row to its state.
    #[inline(always)]
    pub fn accumulate<T: Real>(&self, state: &mut [f64], f: &Arg<T>, g: &Arg<T>, span: Span, scratch: &mut [T]) {
        use ReductionKind::*;
        let len = span.len;
        match self.kind {
            Sum => self.accumulate_sum(state, f, len, scratch),
            Min | ArgMin | MinArgMin => self.accumulate_select(state, f, span, (1, false), scratch),
            Max | ArgMax | MaxArgMax => self.accumulate_select(state, f, span, (1, true), scratch),
            KMin | ArgKMin | KMinArgKMin => self.accumulate_select(state, f, span, (self.k, false), scratch),
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => self.accumulate_exp(state, f, g, span, scratch),
        }
    }

    #[inline(always)]
    fn accumulate_sum<T: Real>(&self, state: &mut [f64], f: &Arg<T>, len: usize, scratch: &mut [T]) {
        for c in 0..self.dim {
            let lane = f.lane(c, len);
            match (self.scheme, lane) {
                (SumScheme::Auto | SumScheme::BlockSum, Lane::Vector(x)) => state[c] += tile_sum(x, scratch).to_f64(),
                (SumScheme::Auto | SumScheme::BlockSum, Lane::Scalar(x)) => state[c] += x.to_f64() * len as f64,
                (SumScheme::DirectSum, lane) => {
                    let mut s = T::from_f64(state[c]);
                    for t in 0..len {
                        s = s + super::lanes::at(lane, t);
                    }
                    state[c] = s.to_f64();
                }
                (SumScheme::KahanScheme, lane) => {
                    let (mut s, mut comp) = (T::from_f64(state[c]), T::from_f64(state[self.dim + c]));
                    for t in 0..len {
                        let y = super::lanes::at(lane, t) - comp;
                        let next = s + y;
                        comp = (next - s) - y;
                        s = next;
                    }
                    state[c] = s.to_f64();
                    state[self.dim + c] = comp.to_f64();
                }
            }
        }
    }

    /// Adds the terms of a Sum reduction of `a * b` (see `fusion`), by blocks like `accumulate_sum`.
    #[inline(always)]
    pub fn accumulate_product_sum<T: Real>(
        &self,
        state: &mut [f64],
        (a, b): (&Arg<T>, &Arg<T>),
        span: Span,
        scratch: &mut [T],
    ) {
        let Span { len, fma, .. } = span;
        for (c, s) in state[..self.dim].iter_mut().enumerate() {
            let term = match (a.lane(c, len), b.lane(c, len)) {
                (Lane::Vector(x), Lane::Vector(y)) => tile_dot(x, y, scratch, fma),
                (Lane::Scalar(s), Lane::Vector(v)) | (Lane::Vector(v), Lane::Scalar(s)) => s * tile_sum(v, scratch),
                (Lane::Scalar(x), Lane::Scalar(y)) => x * y * T::from_f64(len as f64),
            };
            *s += term.to_f64();
        }
    }

    /// The `k` smallest (or largest) values of each component with their indices, kept sorted;
    /// equal values keep the order of their indices.
    #[inline(always)]
    fn accumulate_select<T: Real>(
        &self,
        state: &mut [f64],
        f: &Arg<T>,
        span: Span,
        (k, max): (usize, bool),
        scratch: &mut [T],
    ) {
        let Span { j0, len, .. } = span;
        let half = state.len() / 2;
        let (vals, idx) = state.split_at_mut(half);
        for c in 0..self.dim {
            let x = as_slice(f.lane(c, len), len, scratch);
            let (v, ix) = (&mut vals[c * k..(c + 1) * k], &mut idx[c * k..(c + 1) * k]);
            let mut worst = T::from_f64(v[k - 1]);
            // Most terms lose to the current k-th best: a block, then a chunk, is ruled out by
            // vectorised comparisons, and only the candidates are looked at one by one.
            for (block_start, block) in (0..len).step_by(BLOCK).zip(x.chunks(BLOCK)) {
                if ix[k - 1] >= 0.0 && !any_candidate(block, worst, max) {
                    continue;
                }
                for (chunk_start, chunk) in (block_start..len).step_by(SCAN).zip(block.chunks(SCAN)) {
                    let candidates = if ix[k - 1] >= 0.0 { candidate_mask(chunk, worst, max) } else { u64::MAX };
                    insert(chunk, candidates, j0 + chunk_start, v, ix, max, &mut worst);
                }
            }
        }
    }

    /// A K-min selection of squared distances SqNorm2(a - b), one of a and b per row and the other per
    /// reduced index, of at most `SELECT_DIST_DIM` components (`fusion::select_dist`): the distances of
    /// a chunk are computed (the same bits as `ops::sq_dist`), compared at once with the current k-th
    /// smallest, and stored in the state only where they may enter it; no tile buffer is written.
    #[inline(always)]
    pub fn accumulate_select_dist<T: Real>(&self, state: &mut [f64], (a, b): (&Arg<T>, &Arg<T>), span: Span) {
        let Span { j0, len, fma } = span;
        let (point, points) = if a.vector { (b, a) } else { (a, b) };
        match a.dim.max(b.dim) {
            1 => select_dist::<T, 1>(state, point, points, len, j0, fma),
            2 => select_dist::<T, 2>(state, point, points, len, j0, fma),
            3 => select_dist::<T, 3>(state, point, points, len, j0, fma),
            4 => select_dist::<T, 4>(state, point, points, len, j0, fma),
            d => unreachable!("fusion::select_dist takes at most {SELECT_DIST_DIM} components, not {d}"),
        }
    }

    /// Online log-sum-exp: the state keeps a running maximum m and sums of exp(f - m) (times the
    /// weights), rescaled whenever m grows, so nothing overflows.
    #[inline(always)]
    fn accumulate_exp<T: Real>(&self, state: &mut [f64], f: &Arg<T>, g: &Arg<T>, span: Span, scratch: &mut [T]) {
        let Span { len, fma, .. } = span;
        let (e, rest) = scratch.split_at_mut(len);
        let fx = as_slice(f.lane(0, len), len, rest);
        let tile_max = nan_or_max(fx);
        let Some((old_scale, tile_scale)) = exp_tile_scales(state, tile_max.to_f64()) else { return };
        if tile_max == T::INFINITY {
            for (e, &x) in e.iter_mut().zip(fx) {
                *e = if x == T::INFINITY { T::ONE } else { T::ZERO };
            }
        } else {
            for (e, &x) in e.iter_mut().zip(fx) {
                *e = exp_below_max(x - tile_max, fma);
            }
        }
        let sums = &mut state[1..];
        let mut slot = 0;
        if self.kind != ReductionKind::LogSumExpWeight {
            // The plain sum: the result of LogSumExp, the denominator of SumSoftMaxWeight.
            sums[0] = sums[0] * old_scale + tile_sum(e, rest).to_f64() * tile_scale;
            slot = 1;
        }
        for c in 0..self.gdim {
            let s = match g.lane(c, len) {
                Lane::Vector(w) => tile_dot(e, w, rest, fma),
                Lane::Scalar(w) => tile_sum(e, rest) * w,
            };
            sums[slot + c] = sums[slot + c] * old_scale + s.to_f64() * tile_scale;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `nan_or_max` is the fold of `Real::max` it replaces, on every length around its 16 lanes,
    /// with infinities and NaN at every place.
    #[test]
    fn nan_or_max_is_the_fold_of_max() {
        for len in 0..40 {
            let base: Vec<f32> = (0..len).map(|i| ((i * 7919) % 37) as f32 - 18.0).collect();
            for special in [None, Some(f32::NAN), Some(f32::INFINITY), Some(f32::NEG_INFINITY)] {
                for at in 0..len.max(1) {
                    let mut x = base.clone();
                    if let (Some(v), Some(slot)) = (special, x.get_mut(at)) {
                        *slot = v;
                    }
                    let want = x.iter().fold(f32::NEG_INFINITY, |m, &v| Real::max(m, v));
                    let got = nan_or_max(&x);
                    assert!(got == want || got.is_nan() && want.is_nan(), "{x:?}: {got} vs {want}");
                }
            }
        }
    }
}

//! The reduction of a block of output rows over a short reduced range (see `short_range`), vectorised
//! across the rows: the terms of the block are stored as columns (one vector of the block's rows per
//! component and reduced index), and each step that `reducers::Accumulator::accumulate` takes on the
//! tile of one row is taken here on all the rows at once. The steps are the same, in the same order,
//! so the states are those of the row-at-a-time path over a single tile, to the bit: what follows
//! mirrors `reducers.rs` and changes with it.

use super::lanes::{copy, Arg};
use super::reducers::{exp_below_max, exp_tile_scales};
use crate::real::Real;
use crate::reduction::Accumulator;
use crate::reduction::{ReductionKind, SumScheme};

/// The terms of a block of rows, and room to reduce them.
#[derive(Default)]
pub struct Columns<T> {
    /// Rows a column holds (the block's most).
    rows: usize,
    /// Reduced indices it holds at most (a piece of the reduced range is reduced at a time).
    len: usize,
    /// The values f: component c of term j of row r at `(c * len + j) * rows + r`.
    f: Vec<T>,
    /// The weights g, the same way.
    g: Vec<T>,
    /// Working columns: running sums, the selections, the exponentials.
    work: Vec<T>,
    /// For the log-sum-exps: whether a row's terms hold a NaN, and the factors of its state.
    nan: Vec<bool>,
    scales: Vec<Option<(f64, f64)>>,
}

/// Whether the term `x` enters a selection at a place holding `kept` (index `index`, -1 where
/// empty): `index < 0 || better(x, kept, max)`, without the branches of `||`.
#[inline(always)]
fn enters<T: Real>(x: T, kept: T, index: T, max: bool) -> bool {
    let beats = if max { x > kept } else { x < kept };
    (index < T::ZERO) | beats | (x.is_nan() & !kept.is_nan())
}

/// Working columns that a reduction of `kind` over `len` indices takes.
fn work_columns(acc: &Accumulator, len: usize) -> usize {
    use ReductionKind::*;
    match acc.kind {
        Sum => 2,
        Min | Max | ArgMin | ArgMax | MinArgMin | MaxArgMax | KMin | ArgKMin | KMinArgKMin => 2 * acc.k,
        // The maxima, the exponentials, and the first level of a dot product.
        LogSumExp | LogSumExpWeight | SumSoftMaxWeight => 1 + len + len.div_ceil(2),
    }
}

/// Pairwise sum of the first `n` rows of the `len` columns of `x` (`rows` apart), into column 0, as
/// `reducers::tile_sum` sums a tile: each step adds the upper half of the columns onto the lower
/// one, the middle column staying where their number is odd.
#[inline(always)]
fn fold_columns<T: Real>(x: &mut [T], len: usize, rows: usize, n: usize) {
    let mut m = len;
    while m > 1 {
        let h = m / 2;
        let (lo, hi) = x.split_at_mut((m - h) * rows);
        for l in 0..h {
            let (lo, hi) = (&mut lo[l * rows..l * rows + n], &hi[l * rows..l * rows + n]);
            for (a, &b) in lo.iter_mut().zip(hi) {
                *a = *a + b;
            }
        }
        m -= h;
    }
}

impl<T: Real> Columns<T> {
    pub fn new(acc: &Accumulator, len: usize, rows: usize) -> Self {
        Columns {
            rows,
            len,
            f: vec![T::ZERO; acc.dim * len * rows],
            g: vec![T::ZERO; acc.gdim * len * rows],
            work: vec![T::ZERO; work_columns(acc, len) * rows],
            nan: vec![false; rows],
            scales: vec![None; rows],
        }
    }

    /// Values (of the working type) per row of a block: what sizes the block.
    pub fn values_per_row(acc: &Accumulator, len: usize) -> usize {
        (acc.dim + acc.gdim) * len + work_columns(acc, len)
    }

    /// Stores the terms `f` and `g` of reduced index `j` for the block's first `n` rows.
    #[inline(always)]
    pub fn store(&mut self, j: usize, f: &Arg<T>, g: &Arg<T>, n: usize) {
        let (len, rows) = (self.len, self.rows);
        for c in 0..f.dim {
            copy(&mut self.f[(c * len + j) * rows..], n, f.lane(c, n));
        }
        for c in 0..g.dim {
            copy(&mut self.g[(c * len + j) * rows..], n, g.lane(c, n));
        }
    }

    /// Adds the first `len` stored terms of the block's first `n` rows, those of the reduced indices
    /// `j0 .. j0 + len`, to their states (`state_len` values per row, one after the other), as
    /// `Accumulator::accumulate` would over one tile.
    #[inline(always)]
    pub fn reduce(&mut self, acc: &Accumulator, n: usize, len: usize, j0: usize, states: &mut [f64], fma: bool) {
        use ReductionKind::*;
        match acc.kind {
            Sum => self.sum(acc, n, len, states),
            Min | ArgMin | MinArgMin => self.select(acc, n, (len, j0), states, (1, false)),
            Max | ArgMax | MaxArgMax => self.select(acc, n, (len, j0), states, (1, true)),
            KMin | ArgKMin | KMinArgKMin => self.select(acc, n, (len, j0), states, (acc.k, false)),
            LogSumExp | LogSumExpWeight | SumSoftMaxWeight => self.exp(acc, n, len, states, fma),
        }
    }

    /// `Accumulator::accumulate_sum`, per component, for every scheme.
    #[inline(always)]
    fn sum(&mut self, acc: &Accumulator, n: usize, len: usize, states: &mut [f64]) {
        let (cap, rows, width, dim) = (self.len, self.rows, acc.state_len(), acc.dim);
        let (sums, comps) = self.work.split_at_mut(rows);
        let (sums, comps) = (&mut sums[..n], &mut comps[..n]);
        for c in 0..dim {
            let terms = &mut self.f[c * cap * rows..(c + 1) * cap * rows];
            let column = |j: usize| j * rows..j * rows + n;
            match acc.scheme {
                SumScheme::Auto | SumScheme::BlockSum => {
                    fold_columns(terms, len, rows, n);
                    for (state, &s) in state_rows(states, width, n).zip(&terms[column(0)]) {
                        state[c] += s.to_f64();
                    }
                }
                SumScheme::DirectSum => {
                    for (s, state) in sums.iter_mut().zip(state_rows(states, width, n)) {
                        *s = T::from_f64(state[c]);
                    }
                    for j in 0..len {
                        for (s, &x) in sums.iter_mut().zip(&terms[column(j)]) {
                            *s = *s + x;
                        }
                    }
                    for (state, s) in state_rows(states, width, n).zip(&*sums) {
                        state[c] = s.to_f64();
                    }
                }
                SumScheme::KahanScheme => {
                    for ((s, comp), state) in sums.iter_mut().zip(comps.iter_mut()).zip(state_rows(states, width, n)) {
                        *s = T::from_f64(state[c]);
                        *comp = T::from_f64(state[dim + c]);
                    }
                    for j in 0..len {
                        for ((s, comp), &x) in sums.iter_mut().zip(comps.iter_mut()).zip(&terms[column(j)]) {
                            let y = x - *comp;
                            let next = *s + y;
                            *comp = (next - *s) - y;
                            *s = next;
                        }
                    }
                    for ((state, s), comp) in state_rows(states, width, n).zip(&*sums).zip(&*comps) {
                        state[c] = s.to_f64();
                        state[dim + c] = comp.to_f64();
                    }
                }
            }
        }
    }

    /// `Accumulator::accumulate_select`: the `k` best terms of each component, sorted, ties in the
    /// order of their indices. Each term goes through the selection as an insertion does: at the
    /// first place where it is better than the kept term (or the place is empty), the kept terms
    /// from there on moving down by one. That place is where "better or empty" first holds, and it
    /// holds from there on (the kept terms are sorted), so each place is updated from itself and the
    /// place above it, with no branch, for all rows at once. The selection starts from the state's.
    #[inline(always)]
    fn select(
        &mut self,
        acc: &Accumulator,
        n: usize,
        (len, j0): (usize, usize),
        states: &mut [f64],
        (k, max): (usize, bool),
    ) {
        let (cap, rows, width) = (self.len, self.rows, acc.state_len());
        let half = width / 2;
        // The kept values and their indices (-1 where empty), place p at `p * rows`. Terms of this
        // piece hold their index in it (below `cap`), terms kept from the state `cap` plus their
        // place there: small integers, exact in float32 whatever the reduced index.
        let (v, ix) = self.work.split_at_mut(k * rows);
        for c in 0..acc.dim {
            for (r, state) in state_rows(states, width, n).enumerate() {
                for p in 0..k {
                    v[p * rows + r] = T::from_f64(state[c * k + p]);
                    let kept = state[half + c * k + p] >= 0.0;
                    ix[p * rows + r] = if kept { T::from_f64((cap + p) as f64) } else { -T::ONE };
                }
            }
            for j in 0..len {
                let x = &self.f[(c * cap + j) * rows..][..n];
                let jt = T::from_f64(j as f64);
                // Indexed loops of selects over slices of one length: they vectorise.
                for p in (1..k).rev() {
                    let (v_above, v_here) = v.split_at_mut(p * rows);
                    let (i_above, i_here) = ix.split_at_mut(p * rows);
                    let (va, ia) = (&v_above[(p - 1) * rows..][..n], &i_above[(p - 1) * rows..][..n]);
                    let (vh, ih) = (&mut v_here[..n], &mut i_here[..n]);
                    for r in 0..n {
                        let from_above = enters(x[r], va[r], ia[r], max);
                        let (nv, ni) = (if from_above { va[r] } else { x[r] }, if from_above { ia[r] } else { jt });
                        let here = enters(x[r], vh[r], ih[r], max);
                        vh[r] = if here { nv } else { vh[r] };
                        ih[r] = if here { ni } else { ih[r] };
                    }
                }
                let (v0, i0) = (&mut v[..n], &mut ix[..n]);
                for r in 0..n {
                    let here = enters(x[r], v0[r], i0[r], max);
                    v0[r] = if here { x[r] } else { v0[r] };
                    i0[r] = if here { jt } else { i0[r] };
                }
            }
            for (r, state) in state_rows(states, width, n).enumerate() {
                // From the last place up: a kept term only moves down, so its old place is read
                // before it is written.
                for p in (0..k).rev() {
                    let i = ix[p * rows + r].to_f64();
                    state[c * k + p] = v[p * rows + r].to_f64();
                    state[half + c * k + p] = match i {
                        _ if i < 0.0 => -1.0,
                        _ if i >= cap as f64 => state[half + c * k + (i as usize - cap)],
                        _ => (j0 + i as usize) as f64,
                    };
                }
            }
        }
    }

    /// `Accumulator::accumulate_exp`: the largest term of each row, the exponentials relative to it,
    /// their sum and their dot products with the weights, pairwise, entering the state as there.
    #[inline(always)]
    fn exp(&mut self, acc: &Accumulator, n: usize, len: usize, states: &mut [f64], fma: bool) {
        let (cap, rows, width) = (self.len, self.rows, acc.state_len());
        let (maxima, rest) = self.work.split_at_mut(rows);
        let (e, dot) = rest.split_at_mut(cap * rows);
        let (maxima, nan) = (&mut maxima[..n], &mut self.nan[..n]);
        maxima.fill(T::NEG_INFINITY);
        nan.fill(false);
        for j in 0..len {
            for ((m, nan), &x) in maxima.iter_mut().zip(nan.iter_mut()).zip(&self.f[j * rows..j * rows + n]) {
                *m = if x > *m { x } else { *m };
                *nan |= x.is_nan();
            }
        }
        for j in 0..len {
            let column = j * rows..j * rows + n;
            for ((e, &x), &m) in e[column.clone()].iter_mut().zip(&self.f[column]).zip(&*maxima) {
                // Rows whose maximum is NaN or -inf get values here that no one reads.
                *e = if m == T::INFINITY {
                    if x == T::INFINITY {
                        T::ONE
                    } else {
                        T::ZERO
                    }
                } else {
                    exp_below_max(x - m, fma)
                };
            }
        }
        for ((scales, state), (&m, &nan)) in
            self.scales.iter_mut().zip(state_rows(states, width, n)).zip(maxima.iter().zip(&*nan))
        {
            *scales = exp_tile_scales(state, if nan { f64::NAN } else { m.to_f64() });
        }
        let scales = &self.scales[..n];
        let add = |states: &mut [f64], slot: usize, sums: &[T]| {
            for ((state, scales), &s) in state_rows(states, width, n).zip(scales).zip(sums) {
                if let Some((old, tile)) = scales {
                    state[1 + slot] = state[1 + slot] * old + s.to_f64() * tile;
                }
            }
        };
        // The plain sum (the result of LogSumExp, the denominator of SumSoftMaxWeight) goes first in
        // the state, but is folded last: its fold overwrites the exponentials.
        let first = usize::from(acc.kind != ReductionKind::LogSumExpWeight);
        let m = len - len / 2;
        for c in 0..acc.gdim {
            let w = &self.g[c * cap * rows..(c + 1) * cap * rows];
            let column = |j: usize| j * rows..j * rows + n;
            for t in 0..m {
                for ((d, &x), &y) in dot[column(t)].iter_mut().zip(&e[column(t)]).zip(&w[column(t)]) {
                    *d = x * y;
                }
            }
            for t in 0..len / 2 {
                for ((d, &x), &y) in dot[column(t)].iter_mut().zip(&e[column(m + t)]).zip(&w[column(m + t)]) {
                    *d = x.madd(y, *d, fma);
                }
            }
            fold_columns(dot, m, rows, n);
            add(states, first + c, &dot[..n]);
        }
        if first == 1 {
            fold_columns(e, len, rows, n);
            add(states, 0, &e[..n]);
        }
    }
}

/// The states of the first `n` rows.
#[inline(always)]
fn state_rows(states: &mut [f64], width: usize, n: usize) -> impl Iterator<Item = &mut [f64]> {
    states.chunks_exact_mut(width).take(n)
}

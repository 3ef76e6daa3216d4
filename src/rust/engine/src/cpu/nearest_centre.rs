//! The nearest of a few centres: `Min`, `ArgMin` or `Min_ArgMin` of the distance between a point of
//! the output index and a centre of the reduced index (`SqDist(x, c)`, `Sum((x - c)^2)`,
//! `Norm2(x - c)`), with at most `MOST_CENTRES` centres of at most `MOST_DIM` components: K-means'
//! assignment step, `predict`, the k-means++ distances.
//!
//! The general path computes a tile of distances, stores it and reduces it, then does it again for
//! the next row: ~1.7 ns per pair for 50 centres in D = 2. Here the SIMD lanes run along the points
//! (`W` consecutive points, read straight from the column-major input), each lane keeping its best
//! distance and index while the centres go by one at a time, their coordinates broadcast. A pair
//! costs a few instructions per `W` lanes, and no tile is stored. Each lane meets the centres in
//! order and keeps a centre only where it is strictly better, or NaN where the kept one is not (the
//! engine's selection rule): the same results, to the bit, as the general path, whose distances
//! are computed the same way (component 0 first, fused multiply-adds where the call fuses them).

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::Mutex;

use super::{isa, split_front, Inputs, RowMajor, Settings};
use crate::error::Result;
use crate::formula::{Category, Formula, Op};
use crate::real::Real;
use crate::reduction::ReductionKind;

/// Most centres: beyond, the centres' coordinates no longer stay in L1 and the general path's
/// tiles are long enough to pay for themselves.
pub const MOST_CENTRES: usize = 1024;
/// Most components of a point.
pub const MOST_DIM: usize = 16;
/// Points per block of work (a multiple of every `W`): enough to spread the taking of a block.
const BLOCK: usize = 2048;

/// How the distance is computed, as the general path computes it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Distance {
    /// `SqNorm2(x - c)`: multiply-adds (fused where the call fuses them).
    SqNorm2,
    /// `Sum(Square(x - c))`: each square rounded, then added.
    SumOfSquares,
    /// `Sqrt(SqNorm2(x - c))` (`Norm2`).
    Norm2,
}

/// A reduction this path computes: where the points and the centres are among the inputs.
#[derive(Debug)]
pub struct NearestCentre {
    points: usize,
    centres: usize,
    dim: usize,
    distance: Distance,
}

impl NearestCentre {
    /// The nearest-centre reduction that `formula` is over `n_red` reduced indices, if it is one.
    pub fn of(formula: &Formula, n_red: usize) -> Option<NearestCentre> {
        let red = &formula.reduction;
        if !matches!(red.kind, ReductionKind::Min | ReductionKind::ArgMin | ReductionKind::MinArgMin)
            || red.g.is_some()
            || n_red > MOST_CENTRES
        {
            return None;
        }
        let nodes = &formula.graph.nodes;
        let arg = |id: usize| nodes[id].args.first().copied();
        let (distance, diff) = match nodes[red.f].op {
            Op::SqNorm2 => (Distance::SqNorm2, arg(red.f)?),
            Op::Sqrt if nodes[arg(red.f)?].op == Op::SqNorm2 => (Distance::Norm2, arg(arg(red.f)?)?),
            Op::Sum if matches!(nodes[arg(red.f)?].op, Op::Square | Op::Pow(2)) => {
                (Distance::SumOfSquares, arg(arg(red.f)?)?)
            }
            _ => return None,
        };
        let Node2 { op: Op::Sub, args: [a, b] } = Node2::of(&nodes[diff])? else { return None };
        let input = |id: usize| match nodes[id].op {
            Op::Input(p) => Some(&formula.variables[p]),
            _ => None,
        };
        let (a, b) = (input(a)?, input(b)?);
        let (out, reduced) = if red.axis == 0 { (Category::I, Category::J) } else { (Category::J, Category::I) };
        let (points, centres) = match (a.category, b.category) {
            (p, c) if p == out && c == reduced => (a, b),
            (c, p) if p == out && c == reduced => (b, a),
            _ => return None,
        };
        (points.dim == centres.dim && points.dim <= MOST_DIM).then_some(NearestCentre {
            points: points.position,
            centres: centres.position,
            dim: points.dim,
            distance,
        })
    }

    /// The reduction of `inputs` into `out` (`RowMajor::new` of the reduction, width 1).
    pub fn evaluate<T: Real>(&self, inputs: &Inputs<T>, settings: &Settings, axis: usize, out: &mut RowMajor) -> Result<()> {
        let (n_out, n_red) = if axis == 0 { (inputs.n_i, inputs.n_j) } else { (inputs.n_j, inputs.n_i) };
        let (points, centres) = (inputs.data[self.points], inputs.data[self.centres]);
        // The centres one after the other (each one's components together), read once per lane group.
        let mut by_centre = vec![T::ZERO; n_red * self.dim];
        for (j, centre) in by_centre.chunks_exact_mut(self.dim).enumerate() {
            for (c, v) in centre.iter_mut().enumerate() {
                *v = centres[c * n_red + j];
            }
        }
        let blocks = n_out.div_ceil(BLOCK);
        let (mut values, mut indices) = (&mut out.values[..], &mut out.indices[..]);
        let queue = Mutex::new((0..blocks).map(move |b| {
            let len = BLOCK.min(n_out - b * BLOCK);
            (b * BLOCK, split_front(&mut values, len), split_front(&mut indices, len))
        }));
        let (stop, done) = (AtomicBool::new(false), AtomicUsize::new(0));
        let level = isa::Level::detect(settings.isa);
        let threads = settings.threads.clamp(1, blocks.max(1));
        let centres = Centres { values: &by_centre, finite: by_centre.iter().all(|&v| finite(v)) };
        let work = Work { this: self, points, n_out, centres, queue: &queue, stop: &stop, done: &done };
        super::run_workers(threads, settings, (&stop, &done), blocks as u64, || isa::run(level, work.clone()))
    }
}

/// Whether `v` is a number, not infinite (comparisons with NaN are false).
#[inline(always)]
fn finite<T: Real>(v: T) -> bool {
    v > T::NEG_INFINITY && v < T::INFINITY
}

/// A node of two arguments, for matching.
struct Node2 {
    op: Op,
    args: [usize; 2],
}

impl Node2 {
    fn of(node: &crate::formula::Node) -> Option<Node2> {
        Some(Node2 { op: node.op, args: node.args.clone().try_into().ok()? })
    }
}

/// A block of points: its first one, and where its values and indices go (empty when not wanted).
type Block<'v> = (usize, &'v mut [f64], &'v mut [i32]);

/// One thread's work: blocks of points taken from the queue until none is left.
struct Work<'a, T, Q> {
    this: &'a NearestCentre,
    points: &'a [T],
    n_out: usize,
    centres: Centres<'a, T>,
    queue: &'a Mutex<Q>,
    stop: &'a AtomicBool,
    done: &'a AtomicUsize,
}

impl<T, Q> Clone for Work<'_, T, Q> {
    fn clone(&self) -> Self {
        Work { ..*self }
    }
}

impl<'v, T: Real, Q: Iterator<Item = Block<'v>>> isa::Kernel for Work<'_, T, Q> {
    #[inline(always)]
    fn run(self, fma: bool) {
        loop {
            let next = self.queue.lock().map(|mut q| q.next()).unwrap_or(None);
            let Some((first, values, indices)) = next.filter(|_| !self.stop.load(Relaxed)) else { break };
            let len = values.len().max(indices.len());
            let block = Points { data: self.points, stride: self.n_out, first, len };
            // Lanes of 32 bytes for f32, 64 for f64: two or four AVX2 registers per running value.
            if std::mem::size_of::<T>() == 4 {
                by_dim::<T, 16>(self.this, &block, self.centres, (values, indices), fma);
            } else {
                by_dim::<T, 8>(self.this, &block, self.centres, (values, indices), fma);
            }
            self.done.fetch_add(1, Relaxed);
        }
    }
}

/// The centres one after the other, and whether all are finite.
struct Centres<'a, T> {
    values: &'a [T],
    finite: bool,
}

impl<T> Clone for Centres<'_, T> {
    fn clone(&self) -> Self {
        *self
    }
}

impl<T> Copy for Centres<'_, T> {}

/// Points `first .. first + len` of a column-major input of `stride` rows.
struct Points<'a, T> {
    data: &'a [T],
    stride: usize,
    first: usize,
    len: usize,
}

/// The distances as constants of the compiled copies (no test in the loop over the centres).
const SQ_NORM2: u8 = 0;
const SUM_OF_SQUARES: u8 = 1;
const NORM2: u8 = 2;

/// `nearest` with the distance, and the dimension of a squared distance of few components, known
/// at compile time (the coordinates of a group of points stay in registers).
#[inline(always)]
fn by_dim<T: Real, const W: usize>(
    nc: &NearestCentre,
    points: &Points<T>,
    centres: Centres<T>,
    out: (&mut [f64], &mut [i32]),
    fma: bool,
) {
    match (nc.distance, nc.dim) {
        (Distance::SqNorm2, 1) => nearest::<T, W, 1, SQ_NORM2>(nc, points, centres, out, fma),
        (Distance::SqNorm2, 2) => nearest::<T, W, 2, SQ_NORM2>(nc, points, centres, out, fma),
        (Distance::SqNorm2, 3) => nearest::<T, W, 3, SQ_NORM2>(nc, points, centres, out, fma),
        (Distance::SqNorm2, 4) => nearest::<T, W, 4, SQ_NORM2>(nc, points, centres, out, fma),
        (Distance::SqNorm2, _) => nearest::<T, W, 0, SQ_NORM2>(nc, points, centres, out, fma),
        (Distance::SumOfSquares, _) => nearest::<T, W, 0, SUM_OF_SQUARES>(nc, points, centres, out, fma),
        (Distance::Norm2, _) => nearest::<T, W, 0, NORM2>(nc, points, centres, out, fma),
    }
}

/// The nearest centre of each point of `points`, `W` points at a time (the last group padded with
/// copies of its first point, whose results are not kept). `D` is the dimension, or 0 where it is
/// `nc.dim` (at most `MOST_DIM`); `DIST` the distance.
#[inline(always)]
fn nearest<T: Real, const W: usize, const D: usize, const DIST: u8>(
    nc: &NearestCentre,
    points: &Points<T>,
    Centres { values: centres, finite: finite_centres }: Centres<T>,
    (values, indices): (&mut [f64], &mut [i32]),
    fma: bool,
) {
    let dim = if D > 0 { D } else { nc.dim };
    let mut x = [[T::ZERO; W]; MOST_DIM];
    for g in (0..points.len).step_by(W) {
        let n = W.min(points.len - g);
        for (c, lanes) in x.iter_mut().enumerate().take(dim) {
            let column = &points.data[c * points.stride + points.first + g..][..n];
            lanes[..n].copy_from_slice(column);
            lanes[n..].fill(column[0]);
        }
        let all_finite = finite_centres && x.iter().take(dim).all(|lanes| lanes.iter().all(|&v| finite(v)));
        let (best, at) = match all_finite {
            true => group::<T, W, D, DIST, true>(&x, centres, dim, fma),
            false => group::<T, W, D, DIST, false>(&x, centres, dim, fma),
        };
        if !values.is_empty() {
            for (v, b) in values[g..g + n].iter_mut().zip(best) {
                *v = b.to_f64();
            }
        }
        if !indices.is_empty() {
            for (i, a) in indices[g..g + n].iter_mut().zip(at) {
                *i = a.to_f64() as i32 + 1;
            }
        }
    }
}

/// The best distance of each of `W` points (`x`, component by component) to the centres and the
/// centre's 0-based index (exact in `T`: fewer than 2^24 centres). `FINITE`: the points and centres
/// are finite, so no distance is NaN, and one comparison says whether a centre enters (with NaN,
/// the kept distance must stay where it is NaN, and a NaN enter where it is not: three comparisons,
/// which cost half the time again).
#[inline(always)]
fn group<T: Real, const W: usize, const D: usize, const DIST: u8, const FINITE: bool>(
    x: &[[T; W]; MOST_DIM],
    centres: &[T],
    dim: usize,
    fma: bool,
) -> ([T; W], [T; W]) {
    let dim = if D > 0 { D } else { dim };
    let dist = |centre: &[T]| {
        let mut s = [T::ZERO; W];
        for (lanes, &c) in x.iter().zip(centre).take(dim) {
            for (s, &x) in s.iter_mut().zip(lanes) {
                let d = x - c;
                *s = if DIST == SUM_OF_SQUARES { *s + d * d } else { d.madd(d, *s, fma) };
            }
        }
        if DIST == NORM2 {
            s.iter_mut().for_each(|s| *s = s.sqrt());
        }
        s
    };
    let mut centres = centres.chunks_exact(dim);
    let mut best = dist(centres.next().expect("at least one centre"));
    let (mut at, mut j) = ([T::ZERO; W], T::ZERO);
    for centre in centres {
        j = j + T::ONE;
        let s = dist(centre);
        for ((b, a), &s) in best.iter_mut().zip(at.iter_mut()).zip(&s) {
            // Strictly better, or NaN where the kept one is not (no branch: it vectorises).
            let enters = if FINITE { s < *b } else { (s < *b) | (s.is_nan() & !b.is_nan()) };
            *b = if enters { s } else { *b };
            *a = if enters { j } else { *a };
        }
    }
    (best, at)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn of(text: &str, n_red: usize) -> Option<NearestCentre> {
        let args: Vec<String> = ["x = Vi(3)", "c = Vj(3)", "y = Vi(3)", "w = Pm(3)"].iter().map(|a| a.to_string()).collect();
        NearestCentre::of(&Formula::parse(text, &args).unwrap(), n_red)
    }

    /// The reductions recognised, with their distance, and some that look alike but are not.
    #[test]
    fn recognises_the_nearest_centre_reductions_only() {
        let found = |text: &str| of(text, 50).map(|nc| (nc.points, nc.centres, nc.distance));
        assert_eq!(found("ArgMin_Reduction(SqDist(x, c), 0)"), Some((0, 1, Distance::SqNorm2)));
        assert_eq!(found("Min_ArgMin_Reduction(SqNorm2(c - x), 0)"), Some((0, 1, Distance::SqNorm2)));
        assert_eq!(found("Min_Reduction(SqDist(x, c), 1)"), Some((1, 0, Distance::SqNorm2)));
        assert_eq!(found("ArgMin_Reduction(Sum(Square(x - c)), 0)"), Some((0, 1, Distance::SumOfSquares)));
        assert_eq!(found("ArgMin_Reduction(Norm2(x - c), 0)"), Some((0, 1, Distance::Norm2)));
        for text in [
            "ArgMax_Reduction(SqDist(x, c), 0)",
            "ArgMin_Reduction(SqDist(x, y), 0)",
            "ArgMin_Reduction(SqDist(x, w), 0)",
            "ArgMin_Reduction(SqDist(x, c) + 1, 0)",
            "ArgKMin_Reduction(SqDist(x, c), 2, 0)",
            "ArgMin_Reduction(Sum(Abs(x - c)), 0)",
        ] {
            assert!(found(text).is_none(), "{text}");
        }
        assert!(of("ArgMin_Reduction(SqDist(x, c), 0)", MOST_CENTRES + 1).is_none());
    }
}

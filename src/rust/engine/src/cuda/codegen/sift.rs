//! How a sifted K-selection (`Selection::Filtered`, its loop in `candidates`) compares each pair
//! with a threshold of its row (`Filter`), chosen from the formula; the margins of the expanded
//! distance, which make the sifting let through every pair that enters.
//!
//! Two ways to sift:
//! - `Exact`: the formula's own value against the row's K-th best (NaN while the row has fewer
//!   than K, so that everything passes: `!(v >= NaN)`; NaN values always pass, as they must, since
//!   NaN wins).
//! - `Expanded`: a nearest-neighbour search (`SqDist(x, y)` of a row input and a reduced-index
//!   input, minima), sifted with `|y|^2 - 2 x.y` (three fused multiply-adds in D = 3 against six
//!   operations for the distance) against `worst - |x|^2`, both points first moved by the same
//!   centre `c` (the block's first row), since the expansion cancels far from the origin. Both sides
//!   carry a margin that covers the rounding: with `u = 2^-24` and `m = (4 D + 16) u`, the tile holds
//!   `y' = fl(y - c)` and `ny = fl(|y'|^2) (1 - m)`, and the row compares with
//!   `thr = worst (1 + m) - fl(|x'|^2) (1 - m)` rounded up. The errors of the fused chain and of
//!   `fl(|y'|^2)` are below `2.1 D u (|x'|^2 + |y'|^2)`, the centring's below `4.2 u (|x'|^2 + |y'|^2)`
//!   and those of the direct distance below `1.1 (D + 2) u d`, so any pair whose distance computed
//!   directly is below `worst` passes (`the_expanded_distance_lets_every_entering_pair_through`
//!   checks it in the kernel's arithmetic); an absolute margin covers the rounding of subnormal
//!   numbers. Where the points are far apart against their distances to the centre, more pairs
//!   pass and are computed again: the sifting costs time there, never exactness. A row or a point

use crate::cuda::dtype::Dtype;
use crate::formula::{Category, Formula, NodeId, Op};
use crate::plan::{Plan, Role};

/// Largest dimension sifted with the expanded distance (the tile then holds `y'` beside `y`).
const MAX_DIM: usize = 16;

/// How a sifted selection sifts its pairs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Filter {
    Exact,
    Expanded(Expanded),
}

/// The squared distance `SqNorm2(x - y)` (or `y - x`) that a nearest-neighbour search reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Expanded {
    /// The input node of the row (`x`), its position among the inputs, and the dimension.
    pub x: NodeId,
    pub x_input: usize,
    pub dim: usize,
    /// Where the shared tile holds `y`.
    pub y_offset: usize,
}

/// The two vectors of the squared distance `SqNorm2(a - b)` that the reduction reduces, if it
/// reduces one (whatever the roles of `a` and `b`).
fn distance_operands(formula: &Formula) -> Option<(NodeId, NodeId)> {
    let graph = &formula.graph;
    let node = &graph.nodes[formula.reduction.f];
    let sub = &graph.nodes[*node.args.first()?];
    let (a, b) = (*sub.args.first()?, *sub.args.get(1)?);
    (node.op == Op::SqNorm2 && sub.op == Op::Sub && graph.dim(a) == graph.dim(b)).then_some((a, b))
}

/// The dimension of the points of that squared distance.
pub(super) fn distance_dim(formula: &Formula) -> Option<usize> {
    distance_operands(formula).map(|(a, _)| formula.graph.dim(a))
}

impl Filter {
    /// `Expanded` where the reduction is a minimum (K-th, arg, ...) of such a distance, in float32
    /// (or float16 storage) with `y` in the shared tile at `y_offset(y)`; else `Exact`.
    pub(super) fn choose(
        formula: &Formula,
        plan: &Plan,
        dtype: Dtype,
        y_offset: impl Fn(NodeId) -> Option<usize>,
    ) -> Filter {
        let kind = formula.reduction.kind;
        let minimum = kind.selects() && !kind.keeps_maxima();
        let graph = &formula.graph;
        let input = |id: NodeId, role: Role| matches!(graph.nodes[id].op, Op::Input(p) if plan.roles[id] == Some(role) && formula.variables[p].category != Category::Param);
        let expanded = || {
            let (a, b) = distance_operands(formula)?;
            let (x, y) = if input(a, Role::Outer) && input(b, Role::Inner) { (a, b) } else { (b, a) };
            let dim = graph.dim(x);
            if !(input(x, Role::Outer) && input(y, Role::Inner)) || dim > MAX_DIM {
                return None;
            }
            let Op::Input(x_input) = graph.nodes[x].op else { return None };
            Some(Expanded { x, x_input, dim, y_offset: y_offset(y)? })
        };
        match (minimum && dtype != Dtype::F64).then(expanded).flatten() {
            Some(e) => Filter::Expanded(e),
            None => Filter::Exact,
        }
    }

    /// Registers a row holds besides its inputs and its selection (for the rows per thread).
    pub(super) fn row_registers(&self) -> usize {
        match self {
            Filter::Exact => 2,
            Filter::Expanded(e) => 3 + e.dim,
        }
    }

    /// The relative margin `m` of the expanded distance (see the module's notes).
    pub(super) fn margin(dim: usize) -> f64 {
        (4 * dim + 16) as f64 * f64::powi(2.0, -24)
    }

    /// The absolute margin that covers the rounding of subnormal numbers (at most 2^-150 an
    /// operation, which relative margins do not bound).
    pub(super) fn underflow(dim: usize) -> f64 {
        (8 * dim + 32) as f64 * f64::powi(2.0, -149)
    }
}

#[cfg(test)]
mod tests {
    use super::Filter;

    /// The nearest float32 at or above `t` (`__double2float_ru`).
    fn round_up(t: f64) -> f32 {
        let f = t as f32;
        if (f as f64) < t {
            f32::from_bits(if f >= 0.0 { f.to_bits() + 1 } else { f.to_bits() - 1 })
        } else {
            f
        }
    }

    /// The kernel's arithmetic in float32, fused as NVRTC fuses it: the direct distance, and the
    /// sifting value and threshold of a row whose K-th best is `worst`.
    fn direct(x: &[f32], y: &[f32]) -> f32 {
        x.iter().zip(y).fold(0.0f32, |s, (a, b)| (a - b).mul_add(a - b, s))
    }
    /// Whether the kernel marks the pair (`!(e >= thr)`: NaN passes).
    fn passes(e: f32, thr: f32) -> bool {
        e.partial_cmp(&thr).is_none_or(|o| o == std::cmp::Ordering::Less)
    }

    fn sifted(x: &[f32], y: &[f32], centre: &[f32], worst: f32) -> (f32, f32) {
        let m = Filter::margin(x.len());
        let moved = |v: &[f32]| v.iter().zip(centre).map(|(a, b)| a - b).collect::<Vec<f32>>();
        let (x, y) = (moved(x), moved(y));
        let ny = y.iter().fold(0.0f32, |s, v| v.mul_add(*v, s)) * (1.0 - m) as f32;
        let x2 = x.iter().fold(0.0f32, |s, v| v.mul_add(*v, s));
        let e = x.iter().zip(&y).fold(ny, |e, (a, b)| (-2.0 * a).mul_add(*b, e));
        (e, round_up(worst as f64 * (1.0 + m) - x2 as f64 * (1.0 - m) + Filter::underflow(x.len())))
    }

    /// Every pair whose direct distance is below the row's K-th best passes the sifting, for
    /// K-th bests just above that distance, in clouds near and far from the origin, nearly tied,
    /// in 1 to 100 dimensions; and far from the origin, most pairs far from the K-th best do not.
    #[test]
    fn the_expanded_distance_lets_every_entering_pair_through() {
        let mut s = 0x2545_f491_4f6c_dd1du64;
        let mut uniform = || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 40) as f32 / (1u64 << 24) as f32
        };
        let mut passed_far = 0;
        for d in [1, 2, 3, 10, 37, 100] {
            for (shift, scale) in [(0.0f32, 1.0f32), (1000.0, 1.0), (1e6, 1.0), (-3e4, 1e-3), (0.0, 1e-20), (0.0, 1e15)]
            {
                for _ in 0..2000 {
                    let x: Vec<f32> = (0..d).map(|_| shift + scale * uniform()).collect();
                    // y near x (nearly tied: a relative 1e-6 away), or anywhere in the cloud.
                    let near = uniform() < 0.5;
                    let y: Vec<f32> = x
                        .iter()
                        .map(|&v| if near { v + scale * 1e-6 * uniform() } else { shift + scale * uniform() })
                        .collect();
                    let centre: Vec<f32> = (0..d).map(|_| shift + scale * uniform()).collect();
                    let dist = direct(&x, &y);
                    let worst = f32::from_bits(dist.to_bits() + 1);
                    let (e, thr) = sifted(&x, &y, &centre, worst);
                    assert!(
                        passes(e, thr),
                        "D = {d}, shift {shift}, scale {scale}: d = {dist}, worst = {worst}, e = {e} >= thr = {thr}"
                    );
                    // A K-th best 100 x smaller than the distance, far from the origin (the centre a
                    // point of the cloud): sifted out.
                    if shift == 1000.0 && !near && dist > 1e-3 {
                        let (e, thr) = sifted(&x, &y, &centre, dist / 100.0);
                        passed_far += usize::from(passes(e, thr));
                    }
                }
            }
        }
        assert!(passed_far < 100, "{passed_far} pairs far from the K-th best passed");
    }
}

//! The planning of the two-scale Sinkhorn solver (R/sinkhorn-multiscale.R): both clouds sorted by
//! the cells of a grid and summarised by cell, then, for potentials f and g, the block-sparse
//! ranges of the pairs of cells where the plan may exceed exp(-tau) times its largest value. Here
//! rather than in R: at 10^6 points R's sorts, per-cell maxima and lists of cell pairs took 1.1 s
//! of the solver's 1.6 s on a GPU.

use std::ops::Range;

use crate::clustering::{check_totals, check_weights, column_bounds, order_by_label, ClusterSummary, Grid, Points};
use crate::error::{Error, Result};
use crate::parallel;
use crate::ranges::{BlockRanges, Ranges};

/// A cloud sorted by the cells of a grid, and its cells.
#[derive(Debug, Clone, PartialEq)]
pub struct SortedCells {
    /// `order[r]` is the point at sorted row `r`: the cells in the order of `grid_cells`' labels,
    /// the points of a cell consecutive and in their first order (a stable sort).
    pub order: Vec<usize>,
    /// The points in that order, column-major.
    pub sorted: Vec<f64>,
    /// The log-weights in that order.
    pub log_weights: Vec<f64>,
    /// The sorted rows of each cell (none is empty).
    pub blocks: Vec<Range<usize>>,
    /// The cells' centroids (weighted by the points' weights), total weights and radii.
    pub summary: ClusterSummary,
    /// The smallest and largest value of each column of the points (the grid's box).
    pub bounds: Vec<(f64, f64)>,
}

/// `x` (with log-weights `log_weights`) sorted by the cells of side `size` of `grid_cells`, and
/// the summary of each cell (as `cluster_summary` of the sorted points, weights exp(log_weights)).
pub fn sorted_cells(x: Points, size: &[f64], log_weights: &[f64]) -> Result<SortedCells> {
    if log_weights.len() != x.n {
        return Err(Error::Invalid(format!("'log_weights' must have {} values, not {}", x.n, log_weights.len())));
    }
    let bounds = column_bounds(x, "x")?;
    let cells = Grid::with_bounds(x, size, &bounds)?.cells();
    let (order, counts) = order_by_label(&cells.labels, cells.count);
    let sorted = x.rows_in_order(&order);
    let mut sorted_log_weights = vec![0.0; x.n];
    parallel::map(&order, &mut sorted_log_weights, |i| log_weights[i]);
    let mut weights = vec![0.0; x.n];
    parallel::map(&sorted_log_weights, &mut weights, f64::exp);
    let mut blocks = Vec::with_capacity(counts.len());
    for &count in &counts {
        let first = blocks.last().map_or(0, |b: &Range<usize>| b.end);
        blocks.push(first..first + count);
    }
    let summary = block_summary(Points::new(&sorted, x.n, x.d)?, &blocks, &weights)?;
    Ok(SortedCells { order, sorted, log_weights: sorted_log_weights, blocks, summary, bounds })
}

/// What `cluster_summary` says of sorted points whose clusters are the consecutive, non-empty
/// `blocks` (the same sums in the same order, so the same numbers), the cells on every core.
fn block_summary(x: Points, blocks: &[Range<usize>], weights: &[f64]) -> Result<ClusterSummary> {
    const CELLS: usize = 64;
    check_weights(weights, x.n)?;
    // Per cell: its centroid (d values), its total weight, its radius.
    let (cells, d, width) = (blocks.len(), x.d, x.d + 2);
    let mut per_cell = vec![0.0; cells * width];
    parallel::for_each_block_of_work(&mut per_cell, CELLS * width, x.n * d, |b, part| {
        for (cell, rows) in part.chunks_mut(width).zip(&blocks[b * CELLS..]) {
            let total = rows.clone().fold(0.0, |t, i| t + weights[i]);
            for (k, centroid) in cell[..d].iter_mut().enumerate() {
                let column = x.column(k);
                *centroid = rows.clone().fold(0.0, |s, i| s + column[i] * weights[i]) / total;
            }
            let far = |m: f64, i: usize| m.max((0..d).map(|k| (x.values[k * x.n + i] - cell[k]).powi(2)).sum());
            let farthest = rows.clone().fold(0.0f64, far);
            cell[d] = total;
            cell[d + 1] = farthest.sqrt();
        }
    });
    let column = |k: usize| per_cell.chunks(width).map(move |cell| cell[k]);
    let (counts, weights): (Vec<usize>, Vec<f64>) = (blocks.iter().map(|b| b.len()).collect(), column(d).collect());
    check_totals(&weights, &counts)?;
    Ok(ClusterSummary { counts, centroids: (0..d).flat_map(column).collect(), weights, radii: column(d + 1).collect() })
}

/// One cloud of the bound of `cell_pair_ranges`: its points sorted by cell and their cells, where
/// the coarse plan sends the mass of each cell (x) or where it gets it from (y), and a potential.
#[derive(Debug, Clone, Copy)]
pub struct CellSide<'a> {
    /// The sorted points.
    pub points: Points<'a>,
    /// The rows of each cell: sorted, disjoint, within the points.
    pub blocks: &'a [Range<usize>],
    /// The cells' centroids, column-major `cells x d`.
    pub centroids: &'a [f64],
    /// The cells' radii.
    pub radii: &'a [f64],
    /// Where each cell's mass goes (or comes from) in the coarse plan, column-major `cells x d`.
    pub target: &'a [f64],
    /// The potential at each sorted point.
    pub potential: &'a [f64],
}

impl CellSide<'_> {
    fn cells(&self) -> usize {
        self.blocks.len()
    }

    /// An error naming `name` (the side) when the parts do not fit together.
    fn check(&self, name: &str) -> Result<()> {
        let (n, d, cells) = (self.points.n, self.points.d, self.cells());
        let bad = |what: String| Err(Error::Invalid(format!("{name}: {what}")));
        if self.potential.len() != n {
            return bad(format!("the potential has {} values for {n} points", self.potential.len()));
        }
        if !parallel::fold(self.potential, || true, |finite, v| finite && v.is_finite(), |a, b| a && b) {
            return bad("the potential must be finite (no NA, NaN or infinite value)".into());
        }
        if self.centroids.len() != cells * d || self.target.len() != cells * d || self.radii.len() != cells {
            return bad(format!("centroids, targets ({cells} x {d}) and radii ({cells}) do not match the cells"));
        }
        let mut end = 0;
        for b in self.blocks {
            if b.start < end || b.end < b.start || b.end > n {
                return bad(format!("the cells' rows must be sorted, disjoint and within the {n} points"));
            }
            end = b.end;
        }
        Ok(())
    }

    /// `max_{i in I} (potential_i - <p_i - c_I, c_I - t_I>)` for each cell `I` (-inf when empty).
    fn cell_maxima(&self) -> Vec<f64> {
        let (p, cells) = (self.points, self.cells());
        let mut maxima = vec![f64::NEG_INFINITY; cells];
        parallel::for_each_block_of_work(&mut maxima, 64, p.n * p.d, |b, part| {
            for (m, cell) in part.iter_mut().zip(b * 64..) {
                for i in self.blocks[cell].clone() {
                    let slope: f64 = (0..p.d)
                        .map(|k| {
                            let c = self.centroids[k * cells + cell];
                            (p.values[k * p.n + i] - c) * (c - self.target[k * cells + cell])
                        })
                        .sum();
                    *m = m.max(self.potential[i] - slope);
                }
            }
        });
        maxima
    }
}

/// The block-sparse ranges (blocks: the cells of `x` and `y`) of the pairs of cells (I, J) whose
/// margin
///   F_I + G_J - |x_I - y_J|^2 / 2 + r_I |y_J - t_I| + r_J |x_I - s_J| + slack
/// is not negative (F, G `CellSide::cell_maxima`; x_I, y_J the centroids, r the radii, t and s the
/// targets), with each cell of x and each cell of y kept with its best partner (the largest margin,
/// the first one of equal margins): for any f_i + g_j - C_ij >= -slack, (I, J) is kept (appendix C
/// of Feydy et al., vignette("sinkhorn-multiscale")). Every pair of cells is tested, on every
/// core: chunks of cells of y far from a cell of x at once (`Chunks`), the others one by one.
pub fn cell_pair_ranges(x: CellSide, y: CellSide, slack: f64) -> Result<Ranges> {
    x.check("x")?;
    y.check("y")?;
    if x.points.d != y.points.d {
        return Err(Error::Invalid(format!("x and y must have one dimension, not {} and {}", x.points.d, y.points.d)));
    }
    if !slack.is_finite() {
        return Err(Error::Invalid("'slack' must be a finite number".into()));
    }
    let pairs = kept_pairs(&x, &y, &x.cell_maxima(), &y.cell_maxima(), slack);
    // (both axes at once: each is a sort of the pairs, on one core)
    let mut sides: Vec<Option<Result<BlockRanges>>> = vec![None, None];
    parallel::for_each_block_of_work(&mut sides, 1, pairs.len(), |b, side| {
        side[0] = Some(match b {
            0 => BlockRanges::from_block_pairs(x.blocks, y.blocks, pairs.iter().copied()),
            _ => BlockRanges::from_block_pairs(y.blocks, x.blocks, pairs.iter().map(|&(k, l)| (l, k))),
        });
    });
    let mut sides = sides.into_iter().map(|s| s.expect("each axis is made"));
    Ok(Ranges { i: sides.next().expect("axis i")?, j: sides.next().expect("axis j")? })
}

/// The pairs of `cell_pair_ranges`, from the cell maxima `fx` and `gy`.
fn kept_pairs(x: &CellSide, y: &CellSide, fx: &[f64], gy: &[f64], slack: f64) -> Vec<(usize, usize)> {
    let (cx, cy) = (x.cells(), y.cells());
    if cx == 0 || cy == 0 {
        return Vec::new();
    }
    let chunks = Chunks::new(y, gy);
    // (parts of consecutive rows, each with its kept pairs and its best row for each column)
    let parts = (4 * parallel::cores()).min(cx);
    let per_part = cx.div_ceil(parts);
    let mut found: Vec<PartPairs> = vec![PartPairs::default(); parts];
    parallel::for_each_block_of_work(&mut found, 1, cx * cy * 4 * x.points.d, |p, part| {
        let part = &mut part[0];
        (part.best_margin, part.best_row) = (vec![f64::NEG_INFINITY; cy], vec![0; cy]);
        let mut margins = Margins::new(CHUNK);
        let rows = (p * per_part).min(cx)..((p + 1) * per_part).min(cx);
        for (i, &f) in rows.clone().zip(&fx[rows]) {
            let kept = part.pairs.len();
            let a = f + x.radii[i] * distance(x.centroids, cx, i, x.target, cx, i) + slack;
            for (c, js) in chunks.ranges.iter().enumerate() {
                if chunks.below_zero(x, i, a, c) {
                    continue; // (every margin of the chunk is negative)
                }
                let margin = margins.row(x, y, i, f, gy, slack, js.clone());
                for ((j, &m), (best, row)) in js
                    .clone()
                    .zip(margin)
                    .zip(part.best_margin[js.clone()].iter_mut().zip(&mut part.best_row[js.clone()]))
                {
                    if m >= 0.0 {
                        part.pairs.push((i, j));
                    }
                    if m > *best {
                        (*best, *row) = (m, i);
                    }
                }
            }
            if part.pairs.len() == kept {
                // (nothing kept: the best partner, from all the margins; else kept already)
                let margin = Margins::new(cy).row(x, y, i, f, gy, slack, 0..cy).to_vec();
                part.pairs.push((i, first_largest(margin.iter().copied())));
            }
        }
    });
    let (mut best_margin, mut best_row) = (vec![f64::NEG_INFINITY; cy], vec![0; cy]);
    let mut pairs = Vec::with_capacity(found.iter().map(|p| p.pairs.len()).sum::<usize>() + cy);
    for part in found {
        pairs.extend(part.pairs);
        for j in 0..cy {
            if part.best_margin[j] > best_margin[j] {
                // (parts in order: the first row of equal margins stays)
                (best_margin[j], best_row[j]) = (part.best_margin[j], part.best_row[j]);
            }
        }
    }
    // (the columns that keep nothing: their best partner from all their margins, after the others)
    let mut margins = Margins::new(1);
    pairs.extend(
        (0..cy)
            .filter(|&j| best_margin[j] < 0.0)
            .map(|j| (first_largest((0..cx).map(|i| margins.row(x, y, i, fx[i], gy, slack, j..j + 1)[0])), j)),
    );
    pairs
}

/// The position of the first largest value (0 when none is larger than -inf).
fn first_largest(values: impl Iterator<Item = f64>) -> usize {
    values.enumerate().fold((0, f64::NEG_INFINITY), |best, (k, v)| if v > best.1 { (k, v) } else { best }).0
}

/// |a_I - b_J| for the rows `i` of `a` (`na` rows) and `j` of `b` (`nb` rows), column-major.
fn distance(a: &[f64], na: usize, i: usize, b: &[f64], nb: usize, j: usize) -> f64 {
    let d = a.len() / na.max(1);
    (0..d).map(|k| (a[k * na + i] - b[k * nb + j]).powi(2)).sum::<f64>().sqrt()
}

/// Cells of y in chunks of `CHUNK` consecutive ones, with what bounds their margins from above: as
/// |y_J - t_I| <= d_IJ + |x_I - t_I| and |x_I - s_J| <= d_IJ + |y_J - s_J| (d_IJ = |x_I - y_J|),
///   margin(I, J) <= A_I + B_J + (r_I + r_J) d_IJ - d_IJ^2 / 2,
/// A_I = F_I + r_I |x_I - t_I| + slack, B_J = G_J + r_J |y_J - s_J|; over a chunk, B_J and r_J are
/// at most their largest and d_IJ at least the distance from x_I to the chunk's box.
struct Chunks {
    ranges: Vec<Range<usize>>,
    /// The box of the chunk's centroids: lowest and highest coordinates, chunk-major.
    low: Vec<f64>,
    high: Vec<f64>,
    b_max: Vec<f64>,
    r_max: Vec<f64>,
}

/// Cells of y per chunk: consecutive cells are close (sorted by coordinates), so that whole chunks
/// far from the transport map are left out at once.
const CHUNK: usize = 16;

impl Chunks {
    fn new(y: &CellSide, gy: &[f64]) -> Chunks {
        let (cy, d) = (y.cells(), y.points.d);
        let ranges: Vec<Range<usize>> = (0..cy).step_by(CHUNK).map(|j| j..(j + CHUNK).min(cy)).collect();
        let (mut low, mut high) = (vec![f64::INFINITY; ranges.len() * d], vec![f64::NEG_INFINITY; ranges.len() * d]);
        let (mut b_max, mut r_max) = (vec![f64::NEG_INFINITY; ranges.len()], vec![0.0f64; ranges.len()]);
        for (c, js) in ranges.iter().enumerate() {
            for j in js.clone() {
                for k in 0..d {
                    low[c * d + k] = low[c * d + k].min(y.centroids[k * cy + j]);
                    high[c * d + k] = high[c * d + k].max(y.centroids[k * cy + j]);
                }
                let b = gy[j] + y.radii[j] * distance(y.centroids, cy, j, y.target, cy, j);
                (b_max[c], r_max[c]) = (b_max[c].max(b), r_max[c].max(y.radii[j]));
            }
        }
        Chunks { ranges, low, high, b_max, r_max }
    }

    /// Whether every margin of the cell `i` of x (A_I = `a`) against the chunk `c` is negative,
    /// by more than the rounding of the margins.
    fn below_zero(&self, x: &CellSide, i: usize, a: f64, c: usize) -> bool {
        let (cx, d) = (x.cells(), x.points.d);
        let gap2: f64 = (0..d)
            .map(|k| {
                let v = x.centroids[k * cx + i];
                (self.low[c * d + k] - v).max(v - self.high[c * d + k]).max(0.0).powi(2)
            })
            .sum();
        let (gap, rho) = (gap2.sqrt(), x.radii[i] + self.r_max[c]);
        // (the largest of rho d - d^2 / 2 over d >= gap)
        let h = if gap > rho { rho * gap - gap2 / 2.0 } else { rho * rho / 2.0 };
        let bound = a + self.b_max[c] + h;
        bound < -1e-9 * (a.abs() + self.b_max[c].abs() + gap2 + rho * rho + 1.0)
    }
}

/// What a part of the rows of `kept_pairs` finds.
#[derive(Debug, Clone, Default)]
struct PartPairs {
    pairs: Vec<(usize, usize)>,
    /// The largest margin in each column, and its first row.
    best_margin: Vec<f64>,
    best_row: Vec<usize>,
}

/// The margins of a cell of x against cells of y, in buffers kept from row to row.
struct Margins {
    /// |x_I - y_J|^2, |y_J - t_I|^2, |x_I - s_J|^2, then the margins.
    d2: Vec<f64>,
    e2: Vec<f64>,
    h2: Vec<f64>,
}

impl Margins {
    fn new(cells_y: usize) -> Self {
        Margins { d2: vec![0.0; cells_y], e2: vec![0.0; cells_y], h2: vec![0.0; cells_y] }
    }

    /// The margins of the cell `i` of x (its maximum `f`) against the cells `js` of y (maxima `gy`),
    /// summed in the order of the bound's formula (the same values whatever `js`).
    #[allow(clippy::too_many_arguments)]
    fn row(
        &mut self,
        x: &CellSide,
        y: &CellSide,
        i: usize,
        f: f64,
        gy: &[f64],
        slack: f64,
        js: Range<usize>,
    ) -> &[f64] {
        let (cx, cy, n) = (x.cells(), y.cells(), js.len());
        let (d2, e2, h2) = (&mut self.d2[..n], &mut self.e2[..n], &mut self.h2[..n]);
        for v in [&mut *d2, &mut *e2, &mut *h2] {
            v.fill(0.0);
        }
        for k in 0..x.points.d {
            let (xc, t) = (x.centroids[k * cx + i], x.target[k * cx + i]);
            let (yc, s) = (&y.centroids[k * cy..][js.clone()], &y.target[k * cy..][js.clone()]);
            for j in 0..n {
                d2[j] += (xc - yc[j]) * (xc - yc[j]);
                e2[j] += (yc[j] - t) * (yc[j] - t);
                h2[j] += (xc - s[j]) * (xc - s[j]);
            }
        }
        let (r, gy, ry) = (x.radii[i], &gy[js.clone()], &y.radii[js]);
        for j in 0..n {
            d2[j] = f + gy[j] - d2[j] / 2.0 + r * e2[j].sqrt() + ry[j] * h2[j].sqrt() + slack;
        }
        d2
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn side<'a>(points: Points<'a>, cells: &'a SortedCells, target: &'a [f64], potential: &'a [f64]) -> CellSide<'a> {
        CellSide {
            points,
            blocks: &cells.blocks,
            centroids: &cells.summary.centroids,
            radii: &cells.summary.radii,
            target,
            potential,
        }
    }

    #[test]
    fn sorted_cells_sort_stably_and_summarise() {
        // 1-D points in cells of side 1 from the smallest, 0.2: [0.2, 1.2), [1.2, 2.2), [2.2, 3.2), [3.2, 4.2)
        let x = [3.5, 0.2, 1.5, 0.7, 3.1];
        let lw = [0.0, 0.0, (2.0f64).ln(), (3.0f64).ln(), 0.0];
        let c = sorted_cells(Points::new(&x, 5, 1).unwrap(), &[1.0], &lw).unwrap();
        assert_eq!(c.order, vec![1, 3, 2, 4, 0]);
        assert_eq!(c.sorted, vec![0.2, 0.7, 1.5, 3.1, 3.5]);
        assert_eq!(c.log_weights[1], lw[3]);
        assert_eq!(c.blocks, vec![0..2, 2..3, 3..4, 4..5]);
        assert!((c.summary.centroids[0] - (0.2 + 3.0 * 0.7) / 4.0).abs() < 1e-12);
        assert!((c.summary.weights[1] - 2.0).abs() < 1e-12);
        assert!((c.summary.radii[0] - (0.2 + 3.0 * 0.7) / 4.0 + 0.2).abs() < 1e-12);
        assert!(sorted_cells(Points::new(&x, 5, 1).unwrap(), &[1.0], &lw[..4]).is_err());
    }

    /// The pairs of `cell_pair_ranges` by brute force, as a matrix of kept cells.
    fn kept_by_brute_force(x: &CellSide, y: &CellSide, slack: f64) -> Vec<Vec<bool>> {
        let (fx, gy) = (x.cell_maxima(), y.cell_maxima());
        let (cx, cy) = (x.cells(), y.cells());
        let mut margins = Margins::new(cy);
        let m: Vec<Vec<f64>> = (0..cx).map(|i| margins.row(x, y, i, fx[i], &gy, slack, 0..cy).to_vec()).collect();
        let mut keep: Vec<Vec<bool>> = m.iter().map(|row| row.iter().map(|&v| v >= 0.0).collect()).collect();
        for i in 0..cx {
            keep[i][first_largest(m[i].iter().copied())] = true;
        }
        for j in 0..cy {
            keep[first_largest(m.iter().map(|row| row[j]))][j] = true;
        }
        keep
    }

    #[test]
    fn cell_pairs_are_the_brute_force_ones() {
        let (n, m) = (203, 157);
        let wave = |k: usize, a: f64| ((k as f64) * a).sin() * 2.0;
        let x: Vec<f64> = (0..2 * n).map(|k| wave(k, 1.3)).collect();
        let y: Vec<f64> = (0..2 * m).map(|k| wave(k, 0.7) + 0.3).collect();
        // (few cells, and many: chunks of cells of y left out)
        for side_len in [0.7, 0.12] {
            let (cx, cy) = (
                sorted_cells(Points::new(&x, n, 2).unwrap(), &[side_len, side_len], &vec![0.0; n]).unwrap(),
                sorted_cells(Points::new(&y, m, 2).unwrap(), &[side_len, side_len], &vec![0.0; m]).unwrap(),
            );
            let f: Vec<f64> = (0..n).map(|k| wave(k, 2.1) * 0.2).collect();
            let g: Vec<f64> = (0..m).map(|k| wave(k, 1.1) * 0.2).collect();
            let t: Vec<f64> = cx.summary.centroids.iter().map(|c| c * 0.9 + 0.1).collect();
            let s: Vec<f64> = cy.summary.centroids.iter().map(|c| c * 1.1 - 0.1).collect();
            let (px, py) = (Points::new(&cx.sorted, n, 2).unwrap(), Points::new(&cy.sorted, m, 2).unwrap());
            let (sx, sy) = (side(px, &cx, &t, &f), side(py, &cy, &s, &g));
            // (a negative slack: rows and columns that keep only their best partner)
            for slack in [-0.3, 0.01, 0.5, 3.0] {
                let keep = kept_by_brute_force(&sx, &sy, slack);
                let mut pairs = Vec::new();
                for (i, row) in keep.iter().enumerate() {
                    pairs.extend(row.iter().enumerate().filter(|(_, &k)| k).map(|(j, _)| (i, j)));
                }
                let expected = Ranges::from_block_pairs(sx.blocks, sy.blocks, &pairs).unwrap();
                assert_eq!(cell_pair_ranges(sx, sy, slack).unwrap(), expected);
            }
            let short = CellSide { potential: &f[1..], ..sx };
            assert!(cell_pair_ranges(short, sy, 0.1).is_err());
            assert!(cell_pair_ranges(sx, sy, f64::NAN).is_err());
        }
    }
}

//! Grid clustering of points, the first step towards the ranges of a block-sparse reduction
//! (KeOps' `grid_cluster` and `cluster_ranges_centroids`). Here rather than in R because sorting
//! millions of points in R costs more than the block-sparse reduction they prepare.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use crate::error::{Error, Result};
use crate::parallel;

/// Points as a column-major `n x d` matrix (R's layout).
#[derive(Debug, Clone, Copy)]
pub struct Points<'a> {
    pub values: &'a [f64],
    pub n: usize,
    pub d: usize,
}

impl<'a> Points<'a> {
    /// Whether `other` is these very points (the same memory and shape), not only equal ones.
    pub fn same_as(&self, other: Points) -> bool {
        std::ptr::eq(self.values, other.values) && self.n == other.n && self.d == other.d
    }

    pub fn new(values: &'a [f64], n: usize, d: usize) -> Result<Self> {
        if values.len() != n * d {
            return Err(Error::Invalid(format!("points: {} values for {n} x {d}", values.len())));
        }
        Ok(Points { values, n, d })
    }

    pub(crate) fn column(&self, k: usize) -> &'a [f64] {
        &self.values[k * self.n..(k + 1) * self.n]
    }

    /// The rows `order` of these points, column-major (a column at a time, on every core: its
    /// random reads stay within one column).
    pub fn rows_in_order(&self, order: &[usize]) -> Vec<f64> {
        self.rows_in_order_less(order, &vec![0.0; self.d])
    }

    /// The rows `order` of these points less `centre` (a value per column), column-major: the
    /// subtraction comes free with the gather, which is bound by its random reads.
    pub fn rows_in_order_less(&self, order: &[usize], centre: &[f64]) -> Vec<f64> {
        const BLOCK: usize = 1 << 14;
        assert_eq!(centre.len(), self.d, "rows_in_order_less needs a centre of {} values", self.d);
        let mut rows = vec![0.0; order.len() * self.d];
        for (c, column) in rows.chunks_mut(order.len().max(1)).enumerate() {
            let (values, centre) = (self.column(c), centre[c]);
            parallel::for_each_block(column, BLOCK, |b, block| {
                block.iter_mut().zip(&order[b * BLOCK..]).for_each(|(v, &i)| *v = values[i] - centre);
            });
        }
        rows
    }

    /// These points less `centre` (a value per column), column-major, on every core.
    pub fn less(&self, centre: &[f64]) -> Vec<f64> {
        assert_eq!(centre.len(), self.d, "Points::less needs a centre of {} values", self.d);
        let mut shifted = vec![0.0; self.values.len()];
        for (c, column) in shifted.chunks_mut(self.n.max(1)).enumerate() {
            let centre = centre[c];
            parallel::map(self.column(c), column, |v| v - centre);
        }
        shifted
    }
}

/// The cells of a regular grid that hold points: `labels[i]` (0-based) numbers the cell of point
/// `i` among the non-empty cells, `count` of them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GridCells {
    pub labels: Vec<u32>,
    pub count: usize,
}

/// Puts point `i` in the cell of coordinates `floor((x[i, k] - min_k x[, k]) / size[k])` and numbers
/// the non-empty cells in the lexicographic order of their coordinates, first dimension slowest.
pub fn grid_cells(x: Points, size: &[f64]) -> Result<GridCells> {
    Ok(Grid::new(x, size)?.cells())
}

/// A regular grid over points.
pub(crate) struct Grid<'a> {
    x: Points<'a>,
    /// The sides of the cells.
    pub size: Vec<f64>,
    /// Cells per dimension.
    pub extent: Vec<f64>,
    /// The grid's origin, the smallest coordinate of the points in each dimension.
    pub mins: Vec<f64>,
}

impl<'a> Grid<'a> {
    pub fn new(x: Points<'a>, size: &[f64]) -> Result<Grid<'a>> {
        Grid::with_bounds(x, size, &column_bounds(x, "x")?)
    }

    /// The grid of `x` whose columns' smallest and largest values are `bounds` (`column_bounds`).
    pub fn with_bounds(x: Points<'a>, size: &[f64], bounds: &[(f64, f64)]) -> Result<Grid<'a>> {
        if size.len() != x.d || size.iter().any(|s| !(s.is_finite() && *s > 0.0)) {
            return Err(Error::Invalid(format!("'size' must be {} positive finite numbers", x.d)));
        }
        let mins = bounds.iter().map(|b| b.0).collect();
        let mut grid = Grid { x, size: size.to_vec(), extent: Vec::new(), mins };
        // (the largest coordinate is the largest value's: each step of `coordinate` is non-decreasing)
        grid.extent = (0..x.d).map(|k| if x.n == 0 { 0.0 } else { grid.coordinate(k, bounds[k].1) + 1.0 }).collect();
        if grid.extent.iter().any(|e| !e.is_finite()) {
            return Err(Error::Invalid("'size' is too small for the spread of 'x' (cell coordinates overflow)".into()));
        }
        Ok(grid)
    }

    /// The cell coordinate of the value `v` along dimension `k`: a whole number, computed as R
    /// would (the same cells whoever computes them).
    pub fn coordinate(&self, k: usize, v: f64) -> f64 {
        ((v - self.mins[k]) / self.size[k]).floor()
    }

    /// The cell coordinate of point `i` along dimension `k`.
    pub fn coordinate_of(&self, k: usize, i: usize) -> f64 {
        self.coordinate(k, self.x.values[k * self.x.n + i])
    }

    /// The non-empty cells, numbered as `grid_cells` says.
    pub fn cells(&self) -> GridCells {
        if self.x.n == 0 {
            return GridCells { labels: Vec::new(), count: 0 };
        }
        match exact_cell_count(&self.extent) {
            Some(cells) => self.labels_by_key(cells),
            None => self.labels_by_coordinates(),
        }
    }

    /// Labels from one integer key per cell (mixed radix, first dimension slowest, so keys sort
    /// as the coordinates do): a table over the whole grid when it is not much larger than the
    /// points, else the sorted distinct keys.
    fn labels_by_key(&self, cells: u64) -> GridCells {
        const BLOCK: usize = 1 << 14;
        let n = self.x.n;
        let mut keys = vec![0u64; n];
        parallel::for_each_block(&mut keys, BLOCK, |b, block| {
            for k in 0..self.x.d {
                let (min, side, extent) = (self.mins[k], self.size[k], self.extent[k] as u64);
                let values = &self.x.column(k)[b * BLOCK..][..block.len()];
                // (`coordinate`, truncated rather than floored: the quotient is never negative, and
                // `floor` is a call into the C library where the CPU baseline has no instruction for it)
                block.iter_mut().zip(values).for_each(|(key, &v)| *key = *key * extent + ((v - min) / side) as u64);
            }
        });
        if cells <= (4 * n as u64).max(1 << 20) {
            // The cells that hold points marked (on every core: written only where not yet marked,
            // so that cores mostly read the table), then numbered in order.
            let label_of_cell: Vec<AtomicU32> = (0..cells).map(|_| AtomicU32::new(u32::MAX)).collect();
            let mark = |key: u64| {
                let label = &label_of_cell[key as usize];
                if label.load(Relaxed) != 0 {
                    label.store(0, Relaxed);
                }
            };
            parallel::fold(&keys, || (), |(), &key| mark(key), |(), ()| ());
            let mut count = 0;
            for label in label_of_cell.iter().filter(|l| l.load(Relaxed) == 0) {
                label.store(count as u32, Relaxed);
                count += 1;
            }
            let mut labels = vec![0u32; n];
            parallel::map(&keys, &mut labels, |key| label_of_cell[key as usize].load(Relaxed));
            return GridCells { labels, count };
        }
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        let labels = keys.iter().map(|key| distinct.binary_search(key).unwrap_or(0) as u32).collect();
        GridCells { labels, count: distinct.len() }
    }

    /// Labels from the coordinates themselves, for grids of 2^64 cells or more.
    fn labels_by_coordinates(&self) -> GridCells {
        let (n, d) = (self.x.n, self.x.d);
        let cell = |i: usize| (0..d).map(move |k| self.coordinate_of(k, i));
        let mut order: Vec<usize> = (0..n).collect();
        order.sort_by(|&a, &b| cell(a).partial_cmp(cell(b)).unwrap_or(std::cmp::Ordering::Equal));
        let mut labels = vec![0u32; n];
        let mut label = 0;
        for w in 1..n {
            if cell(order[w]).ne(cell(order[w - 1])) {
                label += 1;
            }
            labels[order[w]] = label;
        }
        GridCells { labels, count: label as usize + 1 }
    }
}

/// The sum of each column of `x`, on every core (R's `sum()` and `colMeans()` take one: 1 s each
/// for 1e9 values); not finite where a value is not (or the sum overflows).
pub fn column_sums(x: Points) -> Vec<f64> {
    (0..x.d).map(|k| parallel::sum_by(x.column(k), |v| v)).collect()
}

/// The sums of the squared deviations of each column of `x` from its value in `m`, sum((x - m)^2),
/// on every core (the total sum of squares of K-means, the spread of GMM's standardisation).
pub fn column_squares(x: Points, m: &[f64]) -> Vec<f64> {
    assert_eq!(m.len(), x.d, "column_squares: a value of m per column");
    (0..x.d).map(|k| parallel::sum_by(x.column(k), |v| (v - m[k]) * (v - m[k]))).collect()
}

/// The sums, cluster by cluster, of the squared distances of the points `x` to their cluster's
/// centre: `labels[r]` the cluster (1 to K) of row r, `centers` the K x D centres (column-major);
/// on every core, in an order that does not depend on the cores (blocks of rows, their sums added
/// in order). An error where a label is not a whole number from 1 to K.
pub fn cluster_squares(x: Points, labels: &[f64], centers: &[f64]) -> Result<Vec<f64>> {
    let k = centers.len().checked_div(x.d).unwrap_or(0);
    if labels.len() != x.n || k * x.d != centers.len() {
        return Err(Error::Invalid(format!("cluster_squares: {} labels and {} centre values for {} x {} points", labels.len(), centers.len(), x.n, x.d)));
    }
    const ROWS: usize = 1 << 16;
    let mut blocks = vec![0.0; x.n.div_ceil(ROWS) * k];
    let unlabelled = std::sync::atomic::AtomicBool::new(false);
    parallel::for_each_block_of_work(&mut blocks, k.max(1), x.values.len(), |b, sums| {
        let first = b * ROWS;
        for (r, &l) in labels.iter().enumerate().take(((b + 1) * ROWS).min(x.n)).skip(first) {
            if !(l >= 1.0 && l <= k as f64 && l.fract() == 0.0) {
                unlabelled.store(true, std::sync::atomic::Ordering::Relaxed);
                continue;
            }
            let l = l as usize - 1;
            sums[l] += (0..x.d).map(|c| x.values[c * x.n + r] - centers[c * k + l]).map(|v| v * v).sum::<f64>();
        }
    });
    if unlabelled.into_inner() {
        return Err(Error::Invalid(format!("cluster_squares: the labels must be whole numbers from 1 to {k}")));
    }
    Ok((0..k).map(|l| blocks.iter().skip(l).step_by(k).sum()).collect())
}

/// `(x - shift) * scale` (a value of each per column of `x`), written column-major into `out` (as
/// many values as `x`) on every core: points centred or standardised in float64 with no temporary.
pub fn moved_columns(x: Points, shift: &[f64], scale: &[f64], out: &mut [f64]) {
    assert!(shift.len() == x.d && scale.len() == x.d && out.len() == x.values.len(), "moved_columns: shapes");
    const BLOCK: usize = 1 << 16;
    parallel::for_each_block(out, BLOCK, |b, block| {
        for (e, out) in (b * BLOCK..).zip(block) {
            let k = e / x.n;
            *out = (x.values[e] - shift[k]) * scale[k];
        }
    });
}

/// The smallest and largest value of each column of `x` (on every core), or an error naming the
/// input (`name`) if a value is not finite.
pub fn column_bounds(x: Points, name: &str) -> Result<Vec<(f64, f64)>> {
    let bounds: Vec<(f64, f64, bool)> = (0..x.d)
        .map(|k| {
            parallel::fold(
                x.column(k),
                || (f64::INFINITY, f64::NEG_INFINITY, true),
                |(lo, hi, finite), &v| (lo.min(v), hi.max(v), finite && v.is_finite()),
                |a, b| (a.0.min(b.0), a.1.max(b.1), a.2 && b.2),
            )
        })
        .collect();
    if bounds.iter().any(|b| !b.2) {
        return Err(Error::Invalid(format!("'{name}' must not contain NA, NaN or infinite values")));
    }
    Ok(bounds.into_iter().map(|(lo, hi, _)| (lo, hi)).collect())
}

/// The permutation that sorts points by label, stable (a counting sort, in parts on every core):
/// `order[r]` is the point at sorted row `r`; and the points of each label (`label_counts`).
pub fn order_by_label(labels: &[u32], count: usize) -> (Vec<usize>, Vec<usize>) {
    let (n, parts) = (labels.len(), parts(labels.len(), count));
    // The first sorted row of each part's points of each label: labels in order, parts in order within.
    let mut next = part_counts(labels, count, parts);
    let mut counts = vec![0; count];
    let mut row = 0;
    for (l, label_points) in counts.iter_mut().enumerate() {
        let first = row;
        for p in 0..parts {
            let points = next[p * count + l];
            next[p * count + l] = row;
            row += points;
        }
        *label_points = row - first;
    }
    let mut order = vec![0usize; n];
    let scatter = parallel::Scatter::new(&mut order);
    let per_part = n.div_ceil(parts);
    parallel::for_each_block_of_work(&mut next, count, n, |p, next| {
        let first = (p * per_part).min(n);
        for (i, &l) in (first..).zip(&labels[first..(first + per_part).min(n)]) {
            // SAFETY: the rows of each (label, part) are its own, and each of its points takes the next.
            unsafe { scatter.write(next[l as usize], i) };
            next[l as usize] += 1;
        }
    });
    (order, counts)
}

/// The points of each label (in parts on every core).
pub fn label_counts(labels: &[u32], count: usize) -> Vec<usize> {
    let parts = part_counts(labels, count, parts(labels.len(), count));
    let mut counts = vec![0; count];
    for part in parts.chunks(count.max(1)) {
        counts.iter_mut().zip(part).for_each(|(total, c)| *total += c);
    }
    counts
}

/// In how many parts labels are counted: one per core, fewer for short lists or many labels (a
/// part's counts take `count` words).
fn parts(n: usize, count: usize) -> usize {
    parallel::cores().min(16).min(n >> 16).min(4 * n / count.max(1)).max(1)
}

/// The points of each label in each of `parts` consecutive parts of `labels` of equal length
/// (the last shorter), part-major.
fn part_counts(labels: &[u32], count: usize, parts: usize) -> Vec<usize> {
    let (n, per_part) = (labels.len(), labels.len().div_ceil(parts));
    let mut counts = vec![0usize; parts * count];
    parallel::for_each_block_of_work(&mut counts, count, n, |p, counts| {
        let first = (p * per_part).min(n);
        labels[first..(first + per_part).min(n)].iter().for_each(|&l| counts[l as usize] += 1);
    });
    counts
}

/// The number of cells of the grid, when it fits a `u64` (each cell then has one integer key) and
/// every extent is exact (below 2^53, `coordinate + 1` may round to the coordinate itself, and two
/// cells share a key).
fn exact_cell_count(extent: &[f64]) -> Option<u64> {
    extent.iter().try_fold(1u64, |cells, &e| if e < 2f64.powi(53) { cells.checked_mul(e as u64) } else { None })
}

/// What a reduction over clusters needs to know of them.
#[derive(Debug, Clone, PartialEq)]
pub struct ClusterSummary {
    /// Points per cluster.
    pub counts: Vec<usize>,
    /// Weighted means, a column-major `clusters x d` matrix (NaN for an empty cluster).
    pub centroids: Vec<f64>,
    /// Total weight per cluster.
    pub weights: Vec<f64>,
    /// Largest distance from a point to its centroid (NaN for an empty cluster).
    pub radii: Vec<f64>,
}

/// `n` weights of points, non-negative finite numbers (checked on every core), or an error.
pub(crate) fn check_weights(weights: &[f64], n: usize) -> Result<()> {
    let fine = parallel::fold(weights, || true, |ok, w| ok && w.is_finite() && *w >= 0.0, |a, b| a && b);
    match weights.len() == n && fine {
        true => Ok(()),
        false => Err(Error::Invalid(format!("'weights' must be {n} non-negative finite numbers"))),
    }
}

/// An error for the first cluster with points (`counts`) whose weights sum to 0 (`totals`).
pub(crate) fn check_totals(totals: &[f64], counts: &[usize]) -> Result<()> {
    match (0..totals.len()).find(|&c| counts[c] > 0 && totals[c] <= 0.0) {
        Some(c) => Err(Error::Invalid(format!("'weights' sum to 0 in cluster {}: its centroid is not defined", c + 1))),
        None => Ok(()),
    }
}

/// Counts, weighted centroids, total weights and radii of the clusters `0..clusters`, point `i`
/// being in cluster `labels[i]`; every point weighs 1 when `weights` is `None`.
pub fn cluster_summary(x: Points, labels: &[u32], clusters: usize, weights: Option<&[f64]>) -> Result<ClusterSummary> {
    if labels.len() != x.n || labels.iter().any(|&l| l as usize >= clusters) {
        return Err(Error::Invalid(format!("'labels' must be {} cluster numbers below {clusters}", x.n)));
    }
    if let Some(w) = weights {
        check_weights(w, x.n)?;
    }
    // (clusters may be more than the points: labels need not be consecutive; but a summary of
    // mostly empty clusters, 64 per point and 2^20 beyond, is a mistake that would fill the memory)
    let most = x.n.saturating_mul(64).max(1 << 20);
    if clusters > most {
        return Err(Error::Invalid(format!(
            "'labels' go up to {clusters}: at most {most} clusters are summarised for {} points (number the clusters 1, 2, ...)",
            x.n
        )));
    }
    let words = clusters.saturating_mul(x.d.saturating_add(4));
    crate::memory::check_fits(words.saturating_mul(8), "the summary of the clusters")?;
    let weight = |i: usize| weights.map_or(1.0, |w| w[i]);
    let counts = label_counts(labels, clusters);
    let total: Vec<f64> = match weights {
        None => counts.iter().map(|&c| c as f64).collect(),
        Some(w) => labels.iter().zip(w).fold(vec![0.0; clusters], |mut total, (&l, &v)| {
            total[l as usize] += v;
            total
        }),
    };
    let mut centroids = vec![0.0; clusters * x.d];
    check_totals(&total, &counts)?;
    for k in 0..x.d {
        let sums = &mut centroids[k * clusters..(k + 1) * clusters];
        for (i, (&l, &v)) in labels.iter().zip(x.column(k)).enumerate() {
            sums[l as usize] += v * weight(i);
        }
        for (sum, (&t, &count)) in sums.iter_mut().zip(total.iter().zip(&counts)) {
            *sum = if count > 0 { *sum / t } else { f64::NAN };
        }
    }
    let mut farthest = vec![0.0f64; clusters];
    for (i, &l) in labels.iter().enumerate() {
        let l = l as usize;
        let d2: f64 = (0..x.d).map(|k| (x.values[k * x.n + i] - centroids[k * clusters + l]).powi(2)).sum();
        farthest[l] = farthest[l].max(d2);
    }
    let radii =
        farthest.iter().zip(&counts).map(|(&d2, &count)| if count > 0 { d2.sqrt() } else { f64::NAN }).collect();
    Ok(ClusterSummary { counts, centroids, weights: total, radii })
}

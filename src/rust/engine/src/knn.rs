//! The plan of an exact K-nearest-neighbour search pruned with grid cells (a block-sparse ArgKMin,
//! seed 004 section 4): both clouds sorted by cell and, for each cell of queries, the ranges of
//! sorted data that may hold a neighbour of one of its points. Any point of box `a` is within
//! `far(a, b)` of every point of box `b`: with `b` among the cells of at least `k` points, the k-th
//! neighbour of every query of `a` is within `bound_a = min_b far(a, b)`, and a cell `b` with
//! `near(a, b) > bound_a` holds none. The search is then exact whatever the data.

use std::collections::HashMap;
use std::ops::Range;

use crate::clustering::{order_by_label, Grid, GridCells, Points};
use crate::error::{Error, Result};
use crate::parallel;
use crate::ranges::BlockRanges;

/// How distances between points are measured (cosine: euclidean on rows scaled to norm 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Metric {
    /// Compared squared: the norm of the per-dimension gaps, squared.
    Euclidean,
    /// The sum of the per-dimension gaps.
    Manhattan,
}

impl Metric {
    fn norm(self, gaps: impl Iterator<Item = f64>) -> f64 {
        match self {
            Metric::Euclidean => gaps.map(|g| g * g).sum(),
            Metric::Manhattan => gaps.sum(),
        }
    }

    /// The largest gap per dimension that a bound on `norm` allows.
    fn radius(self, bound: f64) -> f64 {
        match self {
            Metric::Euclidean => bound.sqrt(),
            Metric::Manhattan => bound,
        }
    }
}

/// Which data each cell of queries searches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Search {
    /// The data cells around it: the answer of most queries, to be certified (`KnnPlan::reach`).
    Neighbourhood,
    /// The data cells within its bound: the answer of every query.
    Bounded,
}

/// The search the plan describes.
#[derive(Debug, Clone, PartialEq)]
pub struct KnnPlan {
    /// `sorted_data[r] = data[data_order[r]]`.
    pub data_order: Vec<usize>,
    /// `sorted_queries[r] = queries[query_order[r]]`.
    pub query_order: Vec<usize>,
    /// Blocks of sorted queries (their cells), each with its ranges of sorted data.
    pub ranges: BlockRanges,
    /// The (query, data) pairs the search visits.
    pub pairs: f64,
    /// Per query (in the order of `queries`), the distance beyond which all the data it did not
    /// search lie (infinite for a bounded search): its K nearest found are its K nearest if the
    /// K-th is nearer than that.
    pub reach: Vec<f64>,
    /// The largest absolute coordinate of the data and the queries (the rounding of the computed
    /// distances, against which `reach` is compared, grows with it).
    pub largest: f64,
}

/// A query cell with more candidate cells than this is searched by brute force.
const MOST_KEPT_CELLS: usize = 4096;
/// Runs of kept data less than this many rows apart are searched as one range: a range costs the
/// engine about as much per query as that many more pairs.
const MERGE_GAP_ROWS: usize = 1024;

/// The plan for the `k` nearest rows of `data` to each row of `queries`, with cells of about
/// `cell_points` data points; `None` where pruning would not pay (no cell with `k` points, a
/// query cell keeping too many cells, or most pairs kept unless `force`).
pub fn knn_plan(
    data: Points,
    queries: Points,
    k: usize,
    metric: Metric,
    cell_points: f64,
    search: Search,
    force: bool,
) -> Result<Option<KnnPlan>> {
    if data.d != queries.d || data.d == 0 || k == 0 || k > data.n || cell_points.is_nan() || cell_points <= 0.0 {
        return Err(Error::Invalid("knn: data and queries of one dimension, 1 <= k <= rows of data".into()));
    }
    if queries.n == 0 {
        return Ok(None);
    }
    let (size, data_grid, data_labels) = cell_sizes(data, cell_points)?;
    let magnitude = |x: Points| x.values.iter().fold(0.0f64, |m, v| m.max(v.abs()));
    let largest = magnitude(data).max(magnitude(queries));
    let margin = 1e-9 * (largest + size.iter().fold(0.0f64, |m, &s| m.max(s)));
    let data_cells = Cells::new(data, data_grid, data_labels, &size, margin);
    // The queries are often the data themselves (keops_knn(x)): their cells are then the data's.
    let query_cells = match data.same_as(queries) {
        true => data_cells.clone(),
        false => {
            let grid = Grid::new(queries, &size)?;
            let labels = grid.cells();
            Cells::new(queries, grid, labels, &size, margin)
        }
    };
    let full: Vec<bool> = data_cells.rows.iter().map(|r| r.len() >= k).collect();
    if !full.iter().any(|&f| f) {
        return Ok(None);
    }
    let Some(searched) = searched_ranges(&data_cells, &query_cells, &full, metric, search) else { return Ok(None) };
    if !force && searched.pairs > 0.5 * data.n as f64 * queries.n as f64 {
        return Ok(None);
    }
    const BLOCK: usize = 1 << 14;
    let mut reach = vec![f64::INFINITY; queries.n];
    if search == Search::Neighbourhood {
        parallel::for_each_block(&mut reach, BLOCK, |b, block| {
            for (q, reach) in (b * BLOCK..).zip(block) {
                let window = &searched.windows[query_cells.label[q] as usize];
                *reach = data_cells.distance_outside(window, |c| queries.values[c * queries.n + q]) - margin;
            }
        });
    }
    Ok(Some(KnnPlan {
        data_order: data_cells.order,
        query_order: query_cells.order,
        ranges: BlockRanges { blocks: query_cells.rows, slices: searched.slices, reduced: searched.reduced },
        pairs: searched.pairs,
        reach,
        largest,
    }))
}

/// The sides of cells of about `cell_points` data points: as if the data filled its bounding box,
/// then shrunk for clustered data, which fill few cells of its bounding box, each with many more
/// points, until a point's cell holds about `cell_points` points (on average over the points);
/// and the grid of the data for those sides, with its cells.
fn cell_sizes(data: Points, cell_points: f64) -> Result<(Vec<f64>, Grid, GridCells)> {
    let span: Vec<f64> = (0..data.d)
        .map(|c| {
            let col = data.column(c);
            let (lo, hi) = col.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
            (hi - lo).max(1e-300)
        })
        .collect();
    let side = (span.iter().product::<f64>() * cell_points / data.n as f64).powf(1.0 / data.d as f64);
    let mut size: Vec<f64> = span.iter().map(|&s| side.max(s / 1e6).min(s)).collect();
    for _ in 0..3 {
        let grid = Grid::new(data, &size)?;
        let cells = grid.cells();
        let mut counts = vec![0.0f64; cells.count];
        cells.labels.iter().for_each(|&l| counts[l as usize] += 1.0);
        let seen = counts.iter().map(|c| c * c).sum::<f64>() / data.n as f64;
        if seen <= 2.0 * cell_points {
            return Ok((size, grid, cells));
        }
        let shrink = (cell_points / seen).powf(1.0 / data.d as f64);
        size.iter_mut().zip(&span).for_each(|(s, &sp)| *s = (*s * shrink).max(sp / 1e6));
    }
    let grid = Grid::new(data, &size)?;
    let cells = grid.cells();
    Ok((size, grid, cells))
}

/// What each query cell searches: ranges of the sorted data (`reduced`, those of query cell `a`
/// ending at `slices[a]`), the pairs that makes, and each cell's window of neighbouring cells
/// (`Search::Neighbourhood` only).
struct Searched {
    reduced: Vec<Range<usize>>,
    slices: Vec<usize>,
    pairs: f64,
    windows: Vec<(Vec<i64>, Vec<i64>)>,
}

/// The data each query cell searches; `None` when a query cell would keep more than
/// `MOST_KEPT_CELLS` cells (brute force is then better).
fn searched_ranges(
    data_cells: &Cells,
    query_cells: &Cells,
    full: &[bool],
    metric: Metric,
    search: Search,
) -> Option<Searched> {
    let mut searched = Searched {
        reduced: Vec::new(),
        slices: Vec::with_capacity(query_cells.rows.len()),
        pairs: 0.0,
        windows: Vec::new(),
    };
    let mut kept = Vec::new();
    for a in 0..query_cells.rows.len() {
        let (lo, hi) = (query_cells.lo(a), query_cells.hi(a));
        kept.clear();
        if search == Search::Neighbourhood {
            let window = data_cells.window(lo, hi, 1);
            data_cells.visit(&window, |b| kept.push(b));
            searched.windows.push(window);
        } else {
            bounded_cells(data_cells, full, metric, lo, hi, &mut kept);
        }
        if kept.len() > MOST_KEPT_CELLS {
            return None;
        }
        let rows = query_cells.rows[a].len() as f64;
        let reduced = &mut searched.reduced;
        let first = reduced.len();
        for &b in &kept {
            let r = data_cells.rows[b].clone();
            match reduced[first..].last_mut() {
                Some(last) if r.start < last.end + MERGE_GAP_ROWS => last.end = r.end,
                _ => reduced.push(r),
            }
        }
        searched.pairs += rows * reduced[first..].iter().map(|r| r.len() as f64).sum::<f64>();
        searched.slices.push(reduced.len());
    }
    Some(searched)
}

/// The data cells that may hold one of the K nearest neighbours of a point of the box `lo..hi`.
fn bounded_cells(data_cells: &Cells, full: &[bool], metric: Metric, lo: &[f64], hi: &[f64], kept: &mut Vec<usize>) {
    let far = |b: usize| {
        let (blo, bhi) = (data_cells.lo(b), data_cells.hi(b));
        metric.norm((0..lo.len()).map(|c| (hi[c] - blo[c]).max(bhi[c] - lo[c])))
    };
    let near = |b: usize| {
        let (blo, bhi) = (data_cells.lo(b), data_cells.hi(b));
        metric.norm((0..lo.len()).map(|c| (blo[c] - hi[c]).max(0.0) + (lo[c] - bhi[c]).max(0.0)))
    };
    // The full cells around the box (a valid bound whichever full cells are taken; near ones are tight).
    let mut bound = f64::INFINITY;
    data_cells.visit(&data_cells.window(lo, hi, 1), |b| {
        if full[b] {
            bound = bound.min(far(b))
        }
    });
    if bound == f64::INFINITY {
        bound = (0..full.len()).filter(|&b| full[b]).map(far).fold(f64::INFINITY, f64::min);
    }
    bound *= 1.0 + 1e-9; // (rounding)
    let reach = metric.radius(bound);
    let wide_lo: Vec<f64> = lo.iter().map(|v| v - reach).collect();
    let wide_hi: Vec<f64> = hi.iter().map(|v| v + reach).collect();
    data_cells.visit(&data_cells.window(&wide_lo, &wide_hi, 1), |b| {
        if near(b) <= bound {
            kept.push(b)
        }
    });
}

/// The cells of one cloud: its points sorted by cell, and the box of each cell.
#[derive(Clone)]
struct Cells {
    order: Vec<usize>,
    /// The cell of each point.
    label: Vec<u32>,
    /// Sorted rows of each cell, cells in the lexicographic order of their coordinates.
    rows: Vec<Range<usize>>,
    d: usize,
    /// Per cell, its integer coordinates (cell-major).
    coords: Vec<i64>,
    /// Per cell, the corners of the box of its points, a little wider for rounding.
    corners: (Vec<f64>, Vec<f64>),
    origin: Vec<f64>,
    size: Vec<f64>,
    extent: Vec<i64>,
    /// Cell number by coordinates.
    by_coords: HashMap<Vec<i64>, usize>,
}

impl Cells {
    /// The cells of `x` on `grid` (of cells of sides `size`), numbered `cells`.
    fn new(x: Points, grid: Grid, cells: GridCells, size: &[f64], margin: f64) -> Cells {
        let order = order_by_label(&cells.labels, cells.count);
        // Per cell (in one pass over the points in their order: reading them by cell would miss
        // the cache at every point): its integer coordinates, and the box of its points, tighter
        // than the cell.
        let mut coords = vec![0i64; cells.count * x.d];
        let mut lo = vec![f64::INFINITY; cells.count * x.d];
        let mut hi = vec![f64::NEG_INFINITY; cells.count * x.d];
        let mut counts = vec![0usize; cells.count];
        for c in 0..x.d {
            for (i, (&l, &v)) in cells.labels.iter().zip(x.column(c)).enumerate() {
                let at = l as usize * x.d + c;
                coords[at] = grid.coords[c * x.n + i] as i64;
                lo[at] = lo[at].min(v);
                hi[at] = hi[at].max(v);
            }
        }
        for &l in &cells.labels {
            counts[l as usize] += 1;
        }
        lo.iter_mut().for_each(|v| *v -= margin);
        hi.iter_mut().for_each(|v| *v += margin);
        let mut start = 0;
        let rows = counts
            .iter()
            .map(|&count| {
                start += count;
                start - count..start
            })
            .collect();
        let by_coords = coords.chunks(x.d.max(1)).enumerate().map(|(b, c)| (c.to_vec(), b)).collect();
        Cells {
            order,
            label: cells.labels,
            rows,
            d: x.d,
            coords,
            corners: (lo, hi),
            origin: grid.mins,
            size: size.to_vec(),
            extent: grid.extent.iter().map(|&e| e as i64).collect(),
            by_coords,
        }
    }

    fn lo(&self, b: usize) -> &[f64] {
        &self.corners.0[b * self.d..(b + 1) * self.d]
    }

    fn hi(&self, b: usize) -> &[f64] {
        &self.corners.1[b * self.d..(b + 1) * self.d]
    }

    /// The cells whose coordinates are those of the points of the box `lo..hi`, `slack` more on
    /// each side, as the first and last coordinates (within the grid; empty when first > last).
    fn window(&self, lo: &[f64], hi: &[f64], slack: i64) -> (Vec<i64>, Vec<i64>) {
        let cell = |v: f64, c: usize| ((v - self.origin[c]) / self.size[c]).floor().clamp(-1.0, self.extent[c] as f64);
        let first = (0..self.d).map(|c| (cell(lo[c], c) as i64 - slack).max(0)).collect();
        let last = (0..self.d).map(|c| (cell(hi[c], c) as i64 + slack).min(self.extent[c] - 1)).collect();
        (first, last)
    }

    /// The distance from the point `x(c), c = 0..d`, of the window to any point of the cloud
    /// outside it (in any metric, at least the gap along one coordinate).
    fn distance_outside(&self, (first, last): &(Vec<i64>, Vec<i64>), x: impl Fn(usize) -> f64) -> f64 {
        (0..self.d)
            .map(|c| {
                // (No point lies beyond the grid.)
                let below = if first[c] == 0 {
                    f64::INFINITY
                } else {
                    x(c) - (self.origin[c] + first[c] as f64 * self.size[c])
                };
                let above = if last[c] == self.extent[c] - 1 {
                    f64::INFINITY
                } else {
                    self.origin[c] + (last[c] + 1) as f64 * self.size[c] - x(c)
                };
                below.min(above)
            })
            .fold(f64::INFINITY, f64::min)
    }

    /// Calls `f` on the cells of `window`, in increasing order.
    fn visit(&self, (first, last): &(Vec<i64>, Vec<i64>), mut f: impl FnMut(usize)) {
        if first.iter().zip(last).any(|(f, l)| f > l) {
            return;
        }
        let window = first.iter().zip(last).map(|(f, l)| (l - f + 1) as f64).product::<f64>();
        if window >= self.rows.len() as f64 {
            let inside = |b: usize| (0..self.d).all(|c| (first[c]..=last[c]).contains(&self.coords[b * self.d + c]));
            (0..self.rows.len()).filter(|&b| inside(b)).for_each(f);
            return;
        }
        // Odometer over the window, last dimension fastest: the cells come in increasing order.
        let mut at = first.clone();
        loop {
            if let Some(&b) = self.by_coords.get(&at) {
                f(b);
            }
            let mut c = self.d;
            loop {
                if c == 0 {
                    return;
                }
                c -= 1;
                if at[c] < last[c] {
                    at[c] += 1;
                    break;
                }
                at[c] = first[c];
            }
        }
    }
}

//! The plan of an exact K-nearest-neighbour search pruned with grid cells (a block-sparse ArgKMin,
//! seed 004 section 4): both clouds sorted by cell and, for each cell of queries, the ranges of
//! sorted data that may hold a neighbour of one of its points. Any point of box `a` is within
//! `far(a, b)` of every point of box `b`: with `b` among the cells of at least `k` points, the k-th
//! neighbour of every query of `a` is within `bound_a = min_b far(a, b)`, and a cell `b` with
//! `near(a, b) > bound_a` holds none. The search is then exact whatever the data.
//!
//! Both sorted clouds are translated by one centre, that of the data's bounding box (`centre`):
//! the distances of every metric here are unchanged by a translation, and coordinates near 0 keep
//! their precision in float32 (uniform points near 1e6, whose float32 spacing is 0.0625, found the
//! float64 neighbours of 1 query in 2000 uncentred). All the plan's geometry is in those coordinates.

use std::ops::Range;

use crate::clustering::{column_bounds, label_counts, order_by_label, Grid, GridCells, Points};
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

/// Points sorted by cell.
#[derive(Debug, Clone, PartialEq)]
pub struct Sorted {
    /// The point at each sorted row.
    pub order: Vec<usize>,
    /// The sorted points less the plan's `centre`, column-major.
    pub values: Vec<f64>,
}

/// The search the plan describes.
#[derive(Debug, Clone, PartialEq)]
pub struct KnnPlan {
    pub data: Sorted,
    /// The queries sorted by cell; `None` when they are the data (sorted the same way).
    pub queries: Option<Sorted>,
    /// Blocks of sorted queries (their cells), each with its ranges of sorted data.
    pub ranges: BlockRanges,
    /// The (query, data) pairs the search visits.
    pub pairs: f64,
    /// Per sorted query, the distance beyond which all the data it did not search lie (infinite
    /// for a bounded search): its K nearest found are its K nearest if the K-th is nearer than that.
    pub reach: Vec<f64>,
    /// The largest absolute coordinate of the data and the queries, centred (the rounding of the
    /// computed distances, against which `reach` is compared, grows with it).
    pub largest: f64,
    /// What was subtracted from every point, data and queries (a value per column).
    pub centre: Vec<f64>,
    /// Whether each block's ranges list the nearest data first, not in order (`CellSettings`).
    pub nearest_first: bool,
}

/// The centre of the bounding box `bounds` (`column_bounds`), which the search subtracts from the
/// data and the queries (halves first: no overflow).
pub fn centre(bounds: &[(f64, f64)]) -> Vec<f64> {
    bounds.iter().map(|&(lo, hi)| lo / 2.0 + hi / 2.0).collect()
}

/// A query cell with more candidate cells than this is searched by brute force.
const MOST_KEPT_CELLS: usize = 4096;
/// Runs of kept data less than this many cells' points apart are searched as one range: a range
/// costs the engine about as much per query as that many more pairs (1024 rows on a GPU's cells of
/// 128 points; 192 on the CPU's cells of 24, where 1024 rows merged the runs of a window's rows
/// with the cells between them: 10-NN of 10^6 points, 2 cores, evaluation 1.30 -> 1.21 s).
const MERGE_GAP_CELLS: f64 = 8.0;

/// The grid's cells of a plan.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CellSettings {
    /// Data points per cell, about.
    pub points: f64,
    /// Each query cell's ranges list the data nearest to it first, not in order: for a search on
    /// the CPU (`RunOptions::ranges_in_any_order`), where its rows' K-th best then falls sooner.
    pub nearest_first: bool,
}

/// How the data cells a query cell searches become its ranges.
#[derive(Clone, Copy)]
struct Listing {
    /// Runs of cells less than this many rows apart are one range (`MERGE_GAP_CELLS`).
    merge_gap: usize,
    /// The runs nearest to the query cell first (`CellSettings::nearest_first`).
    nearest_first: bool,
}

/// The plan for the `k` nearest rows of `data` to each row of `queries`, with cells of about
/// `cell_points` data points; `None` where pruning would not pay (no cell with `k` points, a
/// query cell keeping too many cells, or most pairs kept unless `force`).
pub fn knn_plan(
    data: Points,
    queries: Points,
    k: usize,
    metric: Metric,
    cells: CellSettings,
    search: Search,
    force: bool,
) -> Result<Option<KnnPlan>> {
    let cell_points = cells.points;
    if data.d != queries.d || data.d == 0 || k == 0 || k > data.n || cell_points.is_nan() || cell_points <= 0.0 {
        return Err(Error::Invalid("knn: data and queries of one dimension, 1 <= k <= rows of data".into()));
    }
    if queries.n == 0 {
        return Ok(None);
    }
    let data_bounds = column_bounds(data, "x")?;
    // The queries are often the data themselves (keops_knn(x)): their cells are then the data's.
    let query_bounds = match data.same_as(queries) {
        true => None,
        false => Some(column_bounds(queries, "y")?),
    };
    let (data_grid, data_labels) = cell_sizes(data, &data_bounds, cell_points)?;
    let size = data_grid.size.clone();
    let centre = centre(&data_bounds);
    let magnitude = |b: &[(f64, f64)]| {
        b.iter().zip(&centre).fold(0.0f64, |m, (&(lo, hi), &c)| m.max((lo - c).abs()).max((hi - c).abs()))
    };
    let largest = magnitude(&data_bounds).max(query_bounds.as_deref().map_or(0.0, magnitude));
    // (the boxes' and windows' rounding in float64, computed on centred points: relative to `largest`)
    let margin = 1e-9 * (largest + size.iter().fold(0.0f64, |m, &s| m.max(s)));
    let data_cells = Cells::new(data, data_grid, data_labels, &centre, margin);
    let query_cells = match &query_bounds {
        None => None,
        Some(bounds) => {
            let grid = Grid::with_bounds(queries, &size, bounds)?;
            let labels = grid.cells();
            Some(Cells::new(queries, grid, labels, &centre, margin))
        }
    };
    let queried = query_cells.as_ref().unwrap_or(&data_cells);
    let full: Vec<bool> = data_cells.rows.iter().map(|r| r.len() >= k).collect();
    if !full.iter().any(|&f| f) {
        return Ok(None);
    }
    let listing = Listing { merge_gap: (MERGE_GAP_CELLS * cell_points) as usize, nearest_first: cells.nearest_first };
    let Some(searched) = searched_ranges(&data_cells, queried, &full, metric, search, listing) else { return Ok(None) };
    if !force && searched.pairs > 0.5 * data.n as f64 * queries.n as f64 {
        return Ok(None);
    }
    const BLOCK: usize = 1 << 14;
    let mut reach = vec![f64::INFINITY; queries.n];
    if search == Search::Neighbourhood {
        let (rows, d) = (&queried.rows, queries.d);
        let x = |c: usize, r: usize| queried.sorted.values[c * queries.n + r];
        parallel::for_each_block(&mut reach, BLOCK, |b, block| {
            let first = b * BLOCK;
            let mut a = rows.partition_point(|rows| rows.end <= first);
            for (r, reach) in (first..).zip(block) {
                while rows[a].end <= r {
                    a += 1;
                }
                let (below, above) = searched.inner[2 * d * a..2 * d * (a + 1)].split_at(d);
                let outside = (0..d).map(|c| (x(c, r) - below[c]).min(above[c] - x(c, r))).fold(f64::INFINITY, f64::min);
                *reach = outside - margin;
            }
        });
    }
    let blocks = queried.rows.clone();
    Ok(Some(KnnPlan {
        data: data_cells.sorted,
        queries: query_cells.map(|cells| cells.sorted),
        ranges: BlockRanges { blocks, slices: searched.slices, reduced: searched.reduced },
        pairs: searched.pairs,
        reach,
        largest,
        centre,
        nearest_first: cells.nearest_first,
    }))
}

/// The sides of cells of about `cell_points` data points: as if the data filled its bounding box,
/// then shrunk for clustered data, which fill few cells of its bounding box, each with many more
/// points, until a point's cell holds about `cell_points` points (on average over the points);
/// and the grid of the data for those sides, with its cells.
fn cell_sizes<'a>(data: Points<'a>, bounds: &[(f64, f64)], cell_points: f64) -> Result<(Grid<'a>, GridCells)> {
    let span: Vec<f64> = bounds.iter().map(|&(lo, hi)| (hi - lo).max(1e-300)).collect();
    let side = (span.iter().product::<f64>() * cell_points / data.n as f64).powf(1.0 / data.d as f64);
    let mut size: Vec<f64> = span.iter().map(|&s| side.max(s / 1e6).min(s)).collect();
    for _ in 0..3 {
        let grid = Grid::with_bounds(data, &size, bounds)?;
        let cells = grid.cells();
        let counts = label_counts(&cells.labels, cells.count);
        let seen = counts.iter().map(|&c| (c * c) as f64).sum::<f64>() / data.n as f64;
        if seen <= 2.0 * cell_points {
            return Ok((grid, cells));
        }
        let shrink = (cell_points / seen).powf(1.0 / data.d as f64);
        size.iter_mut().zip(&span).for_each(|(s, &sp)| *s = (*s * shrink).max(sp / 1e6));
    }
    let grid = Grid::with_bounds(data, &size, bounds)?;
    let cells = grid.cells();
    Ok((grid, cells))
}

/// What each query cell searches: ranges of the sorted data (`reduced`, those of query cell `a`
/// ending at `slices[a]`), the pairs that makes, and (`Search::Neighbourhood` only) the box
/// inside which all the data lie that it searches, per cell its lower then upper corner
/// (infinite where no data lie beyond).
#[derive(Default)]
struct Searched {
    reduced: Vec<Range<usize>>,
    slices: Vec<usize>,
    pairs: f64,
    inner: Vec<f64>,
}

/// The data each query cell searches; `None` when a query cell would keep more than
/// `MOST_KEPT_CELLS` cells (brute force is then better). Groups of cells on every core.
fn searched_ranges(
    data_cells: &Cells,
    query_cells: &Cells,
    full: &[bool],
    metric: Metric,
    search: Search,
    listing: Listing,
) -> Option<Searched> {
    const GROUP: usize = 64;
    let cells = query_cells.rows.len();
    let mut groups: Vec<Option<Searched>> = (0..cells.div_ceil(GROUP)).map(|_| None).collect();
    // (a cell's search costs about as much as converting a few hundred numbers)
    parallel::for_each_block_of_work(&mut groups, 1, cells * 256, |g, group| {
        let cells = g * GROUP..(g * GROUP + GROUP).min(cells);
        group[0] = search_cells(data_cells, query_cells, cells, full, metric, search, listing);
    });
    let mut searched = Searched::default();
    for group in groups {
        let group = group?;
        let before = searched.reduced.len();
        searched.slices.extend(group.slices.iter().map(|s| s + before));
        searched.reduced.extend(group.reduced);
        searched.inner.extend(group.inner);
        searched.pairs += group.pairs;
    }
    Some(searched)
}

/// `searched_ranges` of the query cells `cells`.
fn search_cells(
    data_cells: &Cells,
    query_cells: &Cells,
    cells: Range<usize>,
    full: &[bool],
    metric: Metric,
    search: Search,
    listing: Listing,
) -> Option<Searched> {
    let mut searched = Searched { slices: Vec::with_capacity(cells.len()), ..Searched::default() };
    let (mut kept, mut runs) = (Vec::new(), Vec::new());
    for a in cells {
        let (lo, hi) = (query_cells.lo(a), query_cells.hi(a));
        kept.clear();
        if search == Search::Neighbourhood {
            let window = data_cells.window(lo, hi, 1);
            data_cells.visit(&window, |b| kept.push(b));
            data_cells.inside(&window, &mut searched.inner);
        } else {
            bounded_cells(data_cells, full, metric, lo, hi, &mut kept);
        }
        if kept.len() > MOST_KEPT_CELLS {
            return None;
        }
        let rows = query_cells.rows[a].len() as f64;
        let first = searched.reduced.len();
        list_runs(data_cells, &kept, (lo, hi), listing, &mut runs);
        searched.reduced.extend(runs.iter().map(|(r, _)| r.clone()));
        let reduced = &searched.reduced;
        searched.pairs += rows * reduced[first..].iter().map(|r| r.len() as f64).sum::<f64>();
        searched.slices.push(reduced.len());
    }
    Some(searched)
}

/// The runs of the data cells `kept` (in the order of their rows) that the query cell `lo..hi`
/// searches, each with how far its nearest cell's centre is from the query cell's (the squared
/// offset of the boxes' sums: an order), nearest first where `listing` says so.
fn list_runs(data_cells: &Cells, kept: &[usize], (lo, hi): (&[f64], &[f64]), listing: Listing, runs: &mut Vec<(Range<usize>, f64)>) {
    runs.clear();
    for &b in kept {
        let r = data_cells.rows[b].clone();
        let near = match listing.nearest_first {
            true => {
                let (blo, bhi) = (data_cells.lo(b), data_cells.hi(b));
                (0..lo.len()).map(|c| (blo[c] + bhi[c] - lo[c] - hi[c]).powi(2)).sum()
            }
            false => 0.0,
        };
        match runs.last_mut() {
            Some((last, nearest)) if r.start < last.end + listing.merge_gap => {
                last.end = r.end;
                *nearest = nearest.min(near);
            }
            _ => runs.push((r, near)),
        }
    }
    if listing.nearest_first {
        // (stable: runs as near as each other stay in order)
        runs.sort_by(|a, b| a.1.total_cmp(&b.1));
    }
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
    // The full cells around the box (a valid bound whichever full cells are taken; near ones are
    // tight), in windows twice as wide each time until one holds a full cell: a cell far from the
    // others (an outlier between clusters) no longer scans every cell of the grid (at 10^6 points
    // in 100 blobs, cells of 16 points: a plan of 9.5 s).
    let mut bound = f64::INFINITY;
    let mut slack = 1;
    while bound == f64::INFINITY {
        let window = data_cells.window(lo, hi, slack);
        data_cells.visit(&window, |b| {
            if full[b] {
                bound = bound.min(far(b))
            }
        });
        if data_cells.covers(&window) {
            break;
        }
        slack *= 2;
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

/// The cells of one cloud: its points sorted by cell, and the box of each cell, all less the
/// plan's centre.
struct Cells {
    sorted: Sorted,
    /// Sorted rows of each cell, cells in the lexicographic order of their coordinates.
    rows: Vec<Range<usize>>,
    d: usize,
    /// Per cell, its integer coordinates (cell-major).
    coords: Vec<i64>,
    /// Per cell, the lower then the upper corner of the box of its points, a little wider for
    /// rounding.
    boxes: Vec<f64>,
    origin: Vec<f64>,
    size: Vec<f64>,
    extent: Vec<i64>,
}

impl Cells {
    /// The cells of `x` on `grid`, numbered `cells`, translated by `-centre`.
    fn new(x: Points, grid: Grid, cells: GridCells, centre: &[f64], margin: f64) -> Cells {
        let (n, d) = (x.n, x.d);
        let (order, counts) = order_by_label(&cells.labels, cells.count);
        let values = x.rows_in_order_less(&order, centre);
        let mut start = 0;
        let rows: Vec<Range<usize>> = counts
            .iter()
            .map(|&count| {
                start += count;
                start - count..start
            })
            .collect();
        // Per cell: its integer coordinates (its first point's), and the box of its points (its
        // sorted rows, groups of cells on every core), tighter than the cell.
        let coords = rows.iter().flat_map(|r| (0..d).map(|c| grid.coordinate_of(c, order[r.start]) as i64)).collect();
        const GROUP: usize = 64;
        let mut boxes = vec![0.0; cells.count * 2 * d];
        parallel::for_each_block_of_work(&mut boxes, GROUP * 2 * d, n * d, |g, group| {
            for (cell, rows) in group.chunks_mut(2 * d).zip(&rows[g * GROUP..]) {
                for c in 0..d {
                    let column = &values[c * n..(c + 1) * n][rows.clone()];
                    let (lo, hi) = column.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &v| (lo.min(v), hi.max(v)));
                    cell[c] = lo - margin;
                    cell[d + c] = hi + margin;
                }
            }
        });
        Cells {
            sorted: Sorted { order, values },
            rows,
            d,
            coords,
            boxes,
            origin: grid.mins.iter().zip(centre).map(|(m, c)| m - c).collect(),
            size: grid.size,
            extent: grid.extent.iter().map(|&e| e as i64).collect(),
        }
    }

    /// The integer coordinates of cell `b`.
    fn cell(&self, b: usize) -> &[i64] {
        &self.coords[b * self.d..(b + 1) * self.d]
    }

    /// The first cell whose coordinates are not below `at` (lexicographically: the cells' order).
    fn first_from(&self, at: &[i64]) -> usize {
        let (mut lo, mut hi) = (0, self.rows.len());
        while lo < hi {
            let mid = lo + (hi - lo) / 2;
            match self.cell(mid) < at {
                true => lo = mid + 1,
                false => hi = mid,
            }
        }
        lo
    }

    fn lo(&self, b: usize) -> &[f64] {
        &self.boxes[2 * self.d * b..(2 * b + 1) * self.d]
    }

    fn hi(&self, b: usize) -> &[f64] {
        &self.boxes[(2 * b + 1) * self.d..2 * self.d * (b + 1)]
    }

    /// The cells whose coordinates are those of the points of the box `lo..hi`, `slack` more on
    /// each side, as the first and last coordinates (within the grid; empty when first > last).
    fn window(&self, lo: &[f64], hi: &[f64], slack: i64) -> (Vec<i64>, Vec<i64>) {
        let cell = |v: f64, c: usize| ((v - self.origin[c]) / self.size[c]).floor().clamp(-1.0, self.extent[c] as f64);
        let first = (0..self.d).map(|c| (cell(lo[c], c) as i64 - slack).max(0)).collect();
        let last = (0..self.d).map(|c| (cell(hi[c], c) as i64 + slack).min(self.extent[c] - 1)).collect();
        (first, last)
    }

    /// Pushes the lower, then the upper corner of the box of the cells of the window: every point
    /// of the cloud outside the window lies outside it (a point of the box is then at least its
    /// gap to the nearest side from them, in any metric). Infinite where the window reaches the
    /// grid's side (no point lies beyond the grid).
    fn inside(&self, (first, last): &(Vec<i64>, Vec<i64>), corners: &mut Vec<f64>) {
        corners.extend((0..self.d).map(|c| match first[c] {
            0 => f64::NEG_INFINITY,
            f => self.origin[c] + f as f64 * self.size[c],
        }));
        corners.extend((0..self.d).map(|c| match last[c] == self.extent[c] - 1 {
            true => f64::INFINITY,
            false => self.origin[c] + (last[c] + 1) as f64 * self.size[c],
        }));
    }

    /// Whether `window` is the whole grid.
    fn covers(&self, (first, last): &(Vec<i64>, Vec<i64>)) -> bool {
        first.iter().zip(last).zip(&self.extent).all(|((&f, &l), &e)| f == 0 && l == e - 1)
    }

    /// Calls `f` on the cells of `window`, in increasing order.
    fn visit(&self, (first, last): &(Vec<i64>, Vec<i64>), mut f: impl FnMut(usize)) {
        if first.iter().zip(last).any(|(f, l)| f > l) {
            return;
        }
        let window = first.iter().zip(last).map(|(f, l)| (l - f + 1) as f64).product::<f64>();
        if window >= self.rows.len() as f64 {
            let inside = |b: usize| (0..self.d).all(|c| (first[c]..=last[c]).contains(&self.cell(b)[c]));
            (0..self.rows.len()).filter(|&b| inside(b)).for_each(f);
            return;
        }
        // Odometer over the rows of the window along the last dimension, whose cells are
        // consecutive in the lexicographic order: the cells come in increasing order.
        let (d, mut at) = (self.d, first.clone());
        loop {
            let mut b = self.first_from(&at);
            while b < self.rows.len() && self.cell(b)[..d - 1] == at[..d - 1] && self.cell(b)[d - 1] <= last[d - 1] {
                f(b);
                b += 1;
            }
            let mut c = d - 1;
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

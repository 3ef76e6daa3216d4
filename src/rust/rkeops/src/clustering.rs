//! The engine's clustering helpers for R/clustering.R: R's 1-based labels and inclusive block
//! matrices to the engine's 0-based, half-open ones, and back. R checks the arguments' types.

use std::ops::Range;

use engine::clustering::{cluster_squares, cluster_summary, column_squares, column_sums, grid_cells, moved_columns, Points};
use engine::two_scale::{cell_pair_ranges, sorted_cells, CellSide};
use engine::{BlockRanges, Ranges};
use extendr_api::prelude::*;

use crate::results::r_vector_with;
use crate::{element, guarded, Fallible, OrInput, RError};

/// A double matrix (or vector: one column) named `name` as points.
pub(crate) fn points<'a>(x: &'a Robj, name: &str) -> Fallible<Points<'a>> {
    let values = x.as_real_slice().or_input(name, format!("'{name}' must be a double matrix"))?;
    let (n, d) = match x.get_attrib("dim").and_then(|d| d.as_integer_vector()).as_deref() {
        Some(&[n, d]) => (n.max(0) as usize, d.max(0) as usize),
        _ => (values.len(), 1),
    };
    Ok(Points::new(values, n, d)?)
}

/// `robj` (a vector nothing else refers to yet) with the dimensions `nrow x ncol`.
pub(crate) fn matrix(robj: Robj, nrow: usize, ncol: usize) -> Fallible {
    crate::results::with_dim(robj, &crate::results::dims(nrow, ncol)?)
}

/// A C x 2 integer matrix of 1-based inclusive blocks as 0-based half-open ranges.
fn blocks(r: &Robj, name: &str) -> Fallible<Vec<Range<usize>>> {
    let v = r.as_integer_slice().or_input(name, format!("'{name}' must be an integer matrix"))?;
    let (first, last) = v.split_at(v.len() / 2);
    Ok(first.iter().zip(last).map(|(&f, &l)| (f.max(1) - 1) as usize..l.max(0) as usize).collect())
}

/// 0-based half-open ranges as a C x 2 integer matrix of 1-based inclusive ones.
pub(crate) fn block_matrix(ranges: &[Range<usize>]) -> Fallible {
    let mut v: Vec<i32> = ranges.iter().map(|r| r.start as i32 + 1).collect();
    v.extend(ranges.iter().map(|r| r.end as i32));
    matrix(Robj::from(v), ranges.len(), 2)
}

/// `grid_cluster()`: the 1-based label of each point's cell.
#[extendr]
fn keops_grid_labels(x: Robj, size: Robj) -> Robj {
    guarded(|| {
        let size = size.as_real_slice().or_input("size", "'size' must be a double vector")?;
        let cells = grid_cells(points(&x, "x")?, size)?;
        Ok(Robj::from(cells.labels.iter().map(|&l| l as i32 + 1).collect::<Vec<i32>>()))
    })
}

/// The sums of the columns of the double matrix (or vector) `x`, on every core.
#[extendr]
fn keops_column_sums(x: Robj) -> Robj {
    guarded(|| Ok(Robj::from(column_sums(points(&x, "x")?))))
}

/// The doubles `r` (named `name`), one per column of the points `p`.
fn per_column<'a>(r: &'a Robj, name: &str, p: Points) -> Fallible<&'a [f64]> {
    match r.as_real_slice() {
        Some(v) if v.len() == p.d => Ok(v),
        _ => Err(RError::input(name, format!("'{name}' must be {} doubles, one per column of 'x'", p.d))),
    }
}

/// `column_squares()`: the sums of the squared deviations of the columns of the double matrix `x`
/// from `m` (a value per column), on every core.
#[extendr]
fn keops_column_squares(x: Robj, m: Robj) -> Robj {
    guarded(|| {
        let p = points(&x, "x")?;
        Ok(Robj::from(column_squares(p, per_column(&m, "m", p)?)))
    })
}

/// `kmeans_withinss()`: the clusters' sums of squared distances of the points `x` to their centre
/// (`labels` 1 to K, `centers` K x D), on every core.
#[extendr]
fn keops_cluster_squares(x: Robj, labels: Robj, centers: Robj) -> Robj {
    guarded(|| {
        let p = points(&x, "x")?;
        let labels = labels.as_real_slice().or_input("labels", "'labels' must be doubles")?;
        let centers = centers.as_real_slice().or_input("centers", "'centers' must be a double matrix")?;
        Ok(Robj::from(cluster_squares(p, labels, centers)?))
    })
}

/// `labels_as_integers()`: the doubles `x` (labels, indices) as R integers, on every core; NA where
/// a value is not a whole number within R's integers.
#[extendr]
fn keops_labels_as_integers(x: Robj) -> Robj {
    guarded(|| {
        let values = x.as_real_slice().or_input("x", "'x' must be doubles")?;
        // (`as` saturates and takes NaN to 0: a value that does not come back is not a whole number
        // in range; i32::MIN is R's NA_integer_)
        let whole = |v: f64| match v as i32 {
            i if i as f64 == v => i,
            _ => i32::MIN,
        };
        r_vector_with(values.len(), |out: &mut [i32]| engine::parallel::map(values, out, whole))
    })
}

/// `zero_matrix()`: an `nrow x ncol` matrix of zeros, written on every core.
#[extendr]
fn keops_zero_matrix(nrow: f64, ncol: f64) -> Robj {
    guarded(|| {
        let (n, d) = (nrow.max(0.0) as usize, ncol.max(0.0) as usize);
        // (room for twice the matrix: what R cannot allocate would be an R error here, which must
        // never be raised inside the binding)
        engine::memory::check_fits(n.saturating_mul(d).saturating_mul(16), "a matrix of zeros")?;
        let zeros = r_vector_with(n.saturating_mul(d), |out: &mut [f64]| {
            engine::parallel::for_each_block(out, 1 << 20, |_, block| block.fill(0.0))
        })?;
        matrix(zeros, n, d)
    })
}

/// `columns_moved()`: the double matrix `x` moved by `-shift` and scaled by `scale` (a value of
/// each per column), a new matrix, on every core.
#[extendr]
fn keops_columns_moved(x: Robj, shift: Robj, scale: Robj) -> Robj {
    guarded(|| {
        let p = points(&x, "x")?;
        let (shift, scale) = (per_column(&shift, "m", p)?, per_column(&scale, "s", p)?);
        let moved = r_vector_with(p.values.len(), |out: &mut [f64]| moved_columns(p, shift, scale, out))?;
        matrix(moved, p.n, p.d)
    })
}

/// `cluster_ranges_centroids()`: counts, centroids, total weights and radii of the clusters
/// `1..=clusters` (`weights` NULL: each point weighs 1).
#[extendr]
fn keops_cluster_summary(x: Robj, labels: Robj, clusters: i32, weights: Robj) -> Robj {
    guarded(|| {
        let x = points(&x, "x")?;
        let labels: Vec<u32> = labels
            .as_integer_slice()
            .or_input("labels", "'labels' must be integers")?
            .iter()
            .map(|&l| (l.max(1) - 1) as u32)
            .collect();
        let weights = match weights.is_null() {
            true => None,
            false => Some(weights.as_real_slice().or_input("weights", "'weights' must be doubles")?),
        };
        let clusters = clusters.max(0) as usize;
        let s = cluster_summary(x, &labels, clusters, weights)?;
        Ok(List::from_names_and_values(
            ["counts", "centroids", "weights", "radii"],
            [
                Robj::from(s.counts.iter().map(|&c| c as i32).collect::<Vec<i32>>()),
                matrix(Robj::from(s.centroids), clusters, x.d)?,
                Robj::from(s.weights),
                Robj::from(s.radii),
            ],
        )?
        .into())
    })
}

/// `from_pairs()`: the reduced ranges of both axes for the kept pairs (k, l) of 1-based blocks.
#[extendr]
fn keops_ranges_of_pairs(ranges_i: Robj, ranges_j: Robj, k: Robj, l: Robj) -> Robj {
    guarded(|| {
        let (blocks_i, blocks_j) = (blocks(&ranges_i, "ranges_i")?, blocks(&ranges_j, "ranges_j")?);
        let k = k.as_integer_slice().or_input("pairs", "'pairs' must be integers")?;
        let l = l.as_integer_slice().or_input("pairs", "'pairs' must be integers")?;
        let pairs: Vec<(usize, usize)> =
            k.iter().zip(l).map(|(&k, &l)| ((k.max(1) - 1) as usize, (l.max(1) - 1) as usize)).collect();
        ranges_sides(&Ranges::from_block_pairs(&blocks_i, &blocks_j, &pairs)?)
    })
}

/// The slices and reduced ranges of both axes, as R's from_pairs() reads them.
fn ranges_sides(ranges: &Ranges) -> Fallible {
    let side = |b: &BlockRanges| -> Fallible {
        Ok(List::from_names_and_values(
            ["slices", "red"],
            [Robj::from(b.slices.iter().map(|&s| s as i32).collect::<Vec<i32>>()), block_matrix(&b.reduced)?],
        )?
        .into())
    };
    Ok(List::from_names_and_values(["i", "j"], [side(&ranges.i)?, side(&ranges.j)?])?.into())
}

/// The two-scale solver's cells (R/sinkhorn-multiscale.R): `x` sorted by the grid cells of side
/// `size`, the 1-based permutation `perm` (x[perm, ]), its log-weights `la` in that order, each cell's rows (`ranges`,
/// 1-based inclusive), weighted centroid, total weight and radius, and the points' `bounds` (2 x d:
/// the smallest and the largest value of each column).
#[extendr]
fn keops_two_scale_cells(x: Robj, size: Robj, la: Robj) -> Robj {
    guarded(|| {
        let size = size.as_real_slice().or_input("size", "'size' must be a double vector")?;
        let la = la.as_real_slice().or_input("la", "'la' must be a double vector")?;
        let x = points(&x, "x")?;
        let c = sorted_cells(x, size, la)?;
        let cells = c.blocks.len();
        Ok(List::from_names_and_values(
            ["x", "perm", "la", "ranges", "centroids", "weights", "radii", "bounds"],
            [
                matrix(Robj::from(c.sorted), x.n, x.d)?,
                Robj::from(c.order.iter().map(|&i| i as i32 + 1).collect::<Vec<i32>>()),
                Robj::from(c.log_weights),
                block_matrix(&c.blocks)?,
                matrix(Robj::from(c.summary.centroids), cells, x.d)?,
                Robj::from(c.summary.weights),
                Robj::from(c.summary.radii),
                matrix(Robj::from(c.bounds.iter().flat_map(|&(lo, hi)| [lo, hi]).collect::<Vec<f64>>()), 2, x.d)?,
            ],
        )?
        .into())
    })
}

/// The parts of one side of `keops_cell_pair_ranges` (a list, `name`): the sorted points `x`, the
/// cells' `ranges`, `centroids`, `radii` and `target`, and the `potential`.
const SIDE: [&str; 6] = ["x", "ranges", "centroids", "radii", "target", "potential"];

fn side_parts(side: &Robj, name: &str) -> Fallible<Vec<Robj>> {
    let side = side.as_list().or_input(name, format!("'{name}' must be a list"))?;
    SIDE.iter().map(|part| element(&side, part).or_input(name, format!("'{name}' has no element '{part}'"))).collect()
}

fn cell_side<'a>(parts: &'a [Robj], name: &str, blocks: &'a [Range<usize>]) -> Fallible<CellSide<'a>> {
    let real = |k: usize| -> Fallible<&'a [f64]> {
        parts[k].as_real_slice().or_input(name, format!("'{name}${}' must be doubles", SIDE[k]))
    };
    Ok(CellSide {
        points: points(&parts[0], name)?,
        blocks,
        centroids: real(2)?,
        radii: real(3)?,
        target: real(4)?,
        potential: real(5)?,
    })
}

/// `cell_pair_ranges()`: the slices and reduced ranges (as from_pairs()) of the pairs of cells
/// kept by the two-scale solver's bound, for the sides `x` and `y` (lists, `side_parts`).
#[extendr]
fn keops_cell_pair_ranges(x: Robj, y: Robj, slack: f64) -> Robj {
    guarded(|| {
        // (named as cell_pair_ranges() names them)
        let (x, y) = (side_parts(&x, "cx")?, side_parts(&y, "cy")?);
        let (blocks_x, blocks_y) = (blocks(&x[1], "cx")?, blocks(&y[1], "cy")?);
        let ranges = cell_pair_ranges(cell_side(&x, "cx", &blocks_x)?, cell_side(&y, "cy", &blocks_y)?, slack)?;
        ranges_sides(&ranges)
    })
}

extendr_module! {
    mod clustering;
    fn keops_grid_labels;
    fn keops_column_sums;
    fn keops_column_squares;
    fn keops_cluster_squares;
    fn keops_columns_moved;
    fn keops_labels_as_integers;
    fn keops_zero_matrix;
    fn keops_cluster_summary;
    fn keops_ranges_of_pairs;
    fn keops_two_scale_cells;
    fn keops_cell_pair_ranges;
}

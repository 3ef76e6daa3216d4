//! The engine's clustering helpers for R/clustering.R: R's 1-based labels and inclusive block
//! matrices to the engine's 0-based, half-open ones, and back. R checks the arguments' types.

use std::ops::Range;

use engine::clustering::{cluster_summary, grid_cells, Points};
use engine::{BlockRanges, Ranges};
use extendr_api::prelude::*;

use crate::{guarded, Fallible, OrInput};

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
        let ranges = Ranges::from_block_pairs(&blocks_i, &blocks_j, &pairs)?;
        let side = |b: &BlockRanges| -> Fallible {
            Ok(List::from_names_and_values(
                ["slices", "red"],
                [Robj::from(b.slices.iter().map(|&s| s as i32).collect::<Vec<i32>>()), block_matrix(&b.reduced)?],
            )?
            .into())
        };
        Ok(List::from_names_and_values(["i", "j"], [side(&ranges.i)?, side(&ranges.j)?])?.into())
    })
}

extendr_module! {
    mod clustering;
    fn keops_grid_labels;
    fn keops_cluster_summary;
    fn keops_ranges_of_pairs;
}

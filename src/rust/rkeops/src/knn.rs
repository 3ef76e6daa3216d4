//! The pruned K-nearest-neighbour search for R/knn.R: the engine's plan (clouds sorted by cell,
//! ranges of the block-sparse ArgKMin), and the results put back in the user's order.

use engine::clustering::Points;
use engine::knn::{knn_plan, Metric, Search};
use extendr_api::prelude::*;

use crate::clustering::{block_matrix, matrix, points};
use crate::{guarded, Fallible, OrInput, RError};

/// The rows of `x` in `order` (0-based), as a matrix.
fn sorted_rows(x: Points, order: &[usize]) -> Fallible {
    let values: Vec<f64> = (0..x.d).flat_map(|c| order.iter().map(move |&i| x.values[c * x.n + i])).collect();
    matrix(Robj::from(values), x.n, x.d)
}

fn one_based(v: impl Iterator<Item = usize>) -> Robj {
    Robj::from(v.map(|i| i as i32 + 1).collect::<Vec<i32>>())
}

/// NULL where pruning would not pay, else `list(x, y, x_order, y_order, ranges_i, slices_i,
/// redranges_j, reach)`: the sorted clouds, their permutations (1-based), the ranges of the search
/// of the rows of `y` (queries) among the rows of `x` (data), 1-based and inclusive, and the reach
/// of each query in the user's order (see `KnnPlan::reach`).
#[extendr]
fn keops_knn_plan(
    x: Robj,
    y: Robj,
    k: i32,
    manhattan: bool,
    cell_points: f64,
    neighbourhood: bool,
    force: bool,
) -> Robj {
    guarded(|| {
        let (data, queries) = (points(&x, "x")?, points(&y, "y")?);
        let metric = if manhattan { Metric::Manhattan } else { Metric::Euclidean };
        let search = if neighbourhood { Search::Neighbourhood } else { Search::Bounded };
        let Some(plan) = knn_plan(data, queries, k.max(0) as usize, metric, cell_points, search, force)? else {
            return Ok(Robj::from(()));
        };
        let r = &plan.ranges;
        Ok(List::from_names_and_values(
            ["x", "y", "x_order", "y_order", "ranges_i", "slices_i", "redranges_j", "reach"],
            [
                sorted_rows(data, &plan.data_order)?,
                sorted_rows(queries, &plan.query_order)?,
                one_based(plan.data_order.iter().copied()),
                one_based(plan.query_order.iter().copied()),
                block_matrix(&r.blocks)?,
                Robj::from(r.slices.iter().map(|&s| s as i32).collect::<Vec<i32>>()),
                block_matrix(&r.reduced)?,
                Robj::from(plan.reach),
            ],
        )?
        .into())
    })
}

/// The results of the search on the sorted clouds (`values`, `indices`: queries x k, indices
/// 1-based into the sorted data, 0 for none) in the order of the user's queries and data.
#[extendr]
fn keops_knn_restore(values: Robj, indices: Robj, x_order: Robj, y_order: Robj) -> Robj {
    guarded(|| {
        let values = values.as_real_slice().or_input("values", "'values' must be doubles")?;
        let indices = indices.as_integer_slice().or_input("indices", "'indices' must be integers")?;
        let x_order = x_order.as_integer_slice().or_input("x_order", "'x_order' must be integers")?;
        let y_order = y_order.as_integer_slice().or_input("y_order", "'y_order' must be integers")?;
        let n = y_order.len();
        if n == 0 || values.len() != indices.len() || values.len() % n != 0 {
            return Err(RError::unnamed_input("keops_knn_restore: results and orders do not match"));
        }
        let k = values.len() / n;
        let mut out_values = vec![0.0; n * k];
        let mut out_indices = vec![0i32; n * k];
        for c in 0..k {
            for (r, &row) in y_order.iter().enumerate() {
                let at = c * n + (row - 1) as usize;
                out_values[at] = values[c * n + r];
                let found = indices[c * n + r];
                // (0: fewer than k data searched, the reduction's identity)
                out_indices[at] = match found {
                    0 => 0,
                    _ => x_order
                        .get((found - 1) as usize)
                        .copied()
                        .or_input("indices", "keops_knn_restore: index out of range")?,
                };
            }
        }
        Ok(List::from_names_and_values(
            ["values", "indices"],
            [matrix(Robj::from(out_values), n, k)?, matrix(Robj::from(out_indices), n, k)?],
        )?
        .into())
    })
}

extendr_module! {
    mod knn;
    fn keops_knn_plan;
    fn keops_knn_restore;
}

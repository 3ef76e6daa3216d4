//! The pruned K-nearest-neighbour search for R/knn.R: the engine's plan (clouds sorted by cell,
//! ranges of the block-sparse ArgKMin), and the results put back in the user's order.

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use engine::clustering::Points;
use engine::knn::{knn_plan, Metric, Search};
use engine::parallel;
use extendr_api::prelude::*;

use crate::clustering::{block_matrix, matrix, points};
use crate::results::r_vector_with;
use crate::{guarded, Fallible, OrInput, RError};

/// The rows of `x` in `order` (0-based), as a matrix (written once into R's vector, column by
/// column on every core).
fn sorted_rows(x: Points, order: &[usize]) -> Fallible {
    let values = r_vector_with(x.n * x.d, |values: &mut [f64]| {
        parallel::for_each_block(values, x.n, |c, column| {
            for (v, &i) in column.iter_mut().zip(order) {
                *v = x.values[c * x.n + i];
            }
        })
    })?;
    matrix(values, x.n, x.d)
}

/// 0-based positions as R's 1-based integers.
fn one_based(v: &[usize]) -> Fallible {
    r_vector_with(v.len(), |ints: &mut [i32]| parallel::map(v, ints, |i| i as i32 + 1))
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
        let sorted_data = sorted_rows(data, &plan.data_order)?;
        // (the queries being the data, sorted the same way: one R matrix for both)
        let sorted_queries =
            if data.same_as(queries) { sorted_data.clone() } else { sorted_rows(queries, &plan.query_order)? };
        Ok(List::from_names_and_values(
            ["x", "y", "x_order", "y_order", "ranges_i", "slices_i", "redranges_j", "reach"],
            [
                sorted_data,
                sorted_queries,
                one_based(&plan.data_order)?,
                one_based(&plan.query_order)?,
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
        // Where each query of the user's order sits in the plan's: the results are then gathered
        // column by column into R's vectors (written once, in order, on every core).
        let mut sorted_at = vec![usize::MAX; n];
        for (r, &row) in y_order.iter().enumerate() {
            let slot = (row as usize).wrapping_sub(1);
            *sorted_at
                .get_mut(slot)
                .or_input("y_order", "keops_knn_restore: 'y_order' is not an order of the queries")? = r;
        }
        if sorted_at.contains(&usize::MAX) {
            return Err(RError::unnamed_input("keops_knn_restore: 'y_order' is not an order of the queries"));
        }
        let out_values = r_vector_with(n * k, |ov: &mut [f64]| {
            parallel::for_each_block(ov, n, |c, column| {
                for (v, &r) in column.iter_mut().zip(&sorted_at) {
                    *v = values[c * n + r];
                }
            })
        })?;
        let out_of_range = AtomicBool::new(false);
        let out_indices = r_vector_with(n * k, |oi: &mut [i32]| {
            parallel::for_each_block(oi, n, |c, column| {
                for (v, &r) in column.iter_mut().zip(&sorted_at) {
                    // (0: fewer than k data searched, the reduction's identity)
                    *v = match indices[c * n + r] {
                        0 => 0,
                        found => x_order.get((found as usize).wrapping_sub(1)).copied().unwrap_or_else(|| {
                            out_of_range.store(true, Relaxed);
                            0
                        }),
                    };
                }
            })
        })?;
        if out_of_range.load(Relaxed) {
            return Err(RError::unnamed_input("keops_knn_restore: index out of range"));
        }
        Ok(List::from_names_and_values(["values", "indices"], [matrix(out_values, n, k)?, matrix(out_indices, n, k)?])?
            .into())
    })
}

extendr_module! {
    mod knn;
    fn keops_knn_plan;
    fn keops_knn_restore;
}

//! The exact K-nearest-neighbour search for R/knn.R, run by the engine (`engine::knn_search`) in
//! one call, its results written once into R's matrices.

use engine::clustering::Points;
use engine::knn::Metric;
use engine::knn_search::{KnnSearch, Pruning};
use engine::parallel;
use extendr_api::prelude::*;

use crate::clustering::{matrix, points};
use crate::results::r_vector_with;
use crate::{guarded, run_options, timings, Fallible, RError};

/// The `k` nearest rows of `x` (data) to each row of `y` (queries) by `keops_knn()`:
/// `list(index, distance, pruned, redone, backend, timings)`: `nrow(y) x k` matrices in the user's
/// order, whether the search was pruned and how many queries it searched again. `prune`: NA (where
/// it pays), TRUE or FALSE; `metric`: "euclidean", "manhattan" or "cosine" (rows of norm 1 already:
/// 1 - cos is half their squared distance); `cell_points`: NaN for the backend's default;
/// `options`: `engine_options()`.
#[extendr]
fn keops_knn_search(x: Robj, y: Robj, k: i32, metric: &str, cell_points: f64, prune: Robj, options: Robj) -> Robj {
    guarded(|| {
        let data = finite_points(&x, "x")?;
        // (the queries being the data, keops_knn(x): checked once)
        let queries = match points(&y, "y")? {
            same if same.same_as(data) => same,
            _ => finite_points(&y, "y")?,
        };
        let pruning = match prune.as_logical_slice() {
            Some([l]) if l.is_na() => Pruning::WherePays,
            Some([l]) if l.is_true() => Pruning::Always,
            Some([_]) => Pruning::Never,
            _ => return Err(RError::input("prune", "'prune' must be NA, TRUE or FALSE")),
        };
        // The metric searched, and the distance from the reduction's value (one closure, not a
        // function pointer, so that it is inlined into the loop over 10^7 results).
        let (metric, sqrt, half) = match metric {
            "euclidean" => (Metric::Euclidean, true, false),
            "manhattan" => (Metric::Manhattan, false, false),
            "cosine" => (Metric::Euclidean, false, true),
            _ => return Err(RError::input("metric", "'metric' must be \"euclidean\", \"manhattan\" or \"cosine\"")),
        };
        let distance = move |v: f64| match (sqrt, half) {
            (true, _) => v.sqrt(),
            (_, true) => v / 2.0,
            _ => v,
        };
        let cell_points = Some(cell_points).filter(|p| !p.is_nan());
        let search = KnnSearch { data, queries, k: k.max(0) as usize, metric, cell_points, pruning };
        let mut found = search.run(&run_options(&options, "auto")?)?;
        let (n, k) = (queries.n, search.k);
        let start = std::time::Instant::now();
        let distances = r_vector_with(n * k, |v: &mut [f64]| found.write_distances(v, distance))?;
        let indices = r_vector_with(n * k, |v: &mut [i32]| found.write_indices(v))?;
        found.timings.push(("results in R", start.elapsed().as_secs_f64()));
        let list = List::from_names_and_values(
            ["index", "distance", "pruned", "redone", "backend", "timings"],
            [
                matrix(indices, n, k)?,
                matrix(distances, n, k)?,
                Robj::from(found.pruned),
                Robj::from(found.redone() as i32),
                Robj::from(found.backend.as_str()),
                timings(&found.timings)?,
            ],
        )?;
        // The engine's copies of the results (10^7 values and indices: 10-15 ms of unmapping) freed
        // off R's thread (here if no thread can be started).
        let _ = std::thread::Builder::new().name("rkeops-free".into()).spawn(move || drop(found));
        Ok(list.into())
    })
}

/// The points of `x`, which must be finite (the plan's cells, and a distance to NaN, would mean
/// nothing).
fn finite_points<'a>(x: &'a Robj, name: &str) -> Fallible<Points<'a>> {
    let p = points(x, name)?;
    if !parallel::fold(p.values, || true, |finite, v| finite && v.is_finite(), |a, b| a && b) {
        return Err(RError::input(name, format!("'{name}' must not hold NA, NaN or infinite values")));
    }
    Ok(p)
}

extendr_module! {
    mod knn;
    fn keops_knn_search;
}

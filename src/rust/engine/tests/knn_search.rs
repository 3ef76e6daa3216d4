//! `keops_knn()`'s search end to end on the CPU (`engine::knn_search`), against brute force in
//! float64: pruned or not, queries that are the data or not, clustered clouds whose queries the
//! pruned search must search again, both metrics; the results in the user's order. The GPU test
//! needs a GPU; elsewhere it says so and checks nothing.

use engine::clustering::Points;
use engine::knn::Metric;
use engine::knn_search::{KnnSearch, Pruning};
use engine::cuda::device;
use engine::{Backend, Precision, RunOptions};

use crate::clustering::Rng;

/// `n` points in `d` dimensions, column-major: uniform, or in 7 tight blobs far apart.
fn cloud(rng: &mut Rng, n: usize, d: usize, blobs: bool) -> Vec<f64> {
    let centres: Vec<f64> = (0..7 * d).map(|_| 100.0 * rng.unif()).collect();
    let mut x = vec![0.0; n * d];
    for i in 0..n {
        let b = (rng.unif() * 7.0) as usize;
        for c in 0..d {
            x[c * n + i] = if blobs { centres[b * d + c] + 0.01 * rng.unif() } else { rng.unif() };
        }
    }
    x
}

/// The distance from query `q` to data point `i`, in float64.
fn distance(data: Points, i: usize, queries: Points, q: usize, metric: Metric) -> f64 {
    let gaps = (0..data.d).map(|c| queries.values[c * queries.n + q] - data.values[c * data.n + i]);
    match metric {
        Metric::Euclidean => gaps.map(|g| g * g).sum::<f64>().sqrt(),
        Metric::Manhattan => gaps.map(f64::abs).sum(),
    }
}

/// The `k` smallest distances from each query to the data, by brute force (rows).
fn brute(data: Points, queries: Points, k: usize, metric: Metric) -> Vec<Vec<f64>> {
    (0..queries.n)
        .map(|q| {
            let mut d: Vec<f64> = (0..data.n).map(|i| distance(data, i, queries, q, metric)).collect();
            d.sort_by(f64::total_cmp);
            d.truncate(k);
            d
        })
        .collect()
}

/// Searches every case with `options` and checks it against float64 brute force within `tol`
/// (relative); returns how many queries the pruned searches searched again.
fn check_searches(options: &RunOptions, tol: f64) -> usize {
    let mut rng = Rng(7);
    let mut redone = 0;
    for (d, blobs, metric) in [(3, false, Metric::Euclidean), (2, true, Metric::Euclidean), (3, true, Metric::Manhattan)] {
        let (n, m, k) = (3001, 517, 5);
        let data_values = cloud(&mut rng, n, d, blobs);
        let query_values = cloud(&mut rng, m, d, blobs);
        let data = Points::new(&data_values, n, d).unwrap();
        for queries in [data, Points::new(&query_values, m, d).unwrap()] {
            let want = brute(data, queries, k, metric);
            for pruning in [Pruning::Never, Pruning::Always] {
                let search = KnnSearch { data, queries, k, metric, cell_points: Some(16.0), pruning };
                let found = search.run(options).unwrap();
                assert_eq!(found.pruned, pruning == Pruning::Always);
                redone += found.redone();
                let root = |v: f64| if metric == Metric::Euclidean { v.sqrt() } else { v };
                let (mut distances, mut indices) = (vec![0.0; queries.n * k], vec![0; queries.n * k]);
                found.write_distances(&mut distances, root);
                found.write_indices(&mut indices);
                let case = format!("{}: D = {d}, blobs {blobs}, {metric:?}, {} queries, {pruning:?}", found.backend, queries.n);
                for (q, want) in want.iter().enumerate() {
                    for (c, &w) in want.iter().enumerate() {
                        let (got, i) = (distances[c * queries.n + q], indices[c * queries.n + q]);
                        assert!((got - w).abs() <= tol * (1.0 + w), "{case}: query {q}, neighbour {c}: {got} != {w}");
                        // the index is of a point at that distance (ties in any order)
                        let at = distance(data, i as usize - 1, queries, q, metric);
                        assert!((at - w).abs() <= tol * (1.0 + w), "{case}: query {q}, index {i}");
                    }
                }
            }
        }
    }
    redone
}

#[test]
fn the_search_finds_the_brute_force_neighbours_in_the_users_order() {
    let options = RunOptions { backend: Backend::Cpu, precision: Precision::F64, threads: 2, ..Default::default() };
    assert!(check_searches(&options, 1e-12) > 0, "no query was searched again: that path went untested");
}

/// The same on a GPU, in float32 (coordinates near 100 rounded to float32 move distances by ~2e-5).
#[test]
fn the_search_on_a_gpu_finds_the_brute_force_neighbours() {
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the K-NN search is not checked on a GPU here ({why})");
        return;
    }
    let options = RunOptions { backend: Backend::Gpu(0), precision: Precision::F32, ..Default::default() };
    assert!(check_searches(&options, 1e-4) > 0, "no query was searched again: that path went untested");
}

/// A pruned search of data or queries that are not finite is an error naming the input (`x` the
/// data, `y` the queries: the plan's bounds check them).
#[test]
fn pruned_searches_of_values_that_are_not_finite_name_the_input() {
    let options = RunOptions { backend: Backend::Cpu, precision: Precision::F64, threads: 2, ..Default::default() };
    let finite: Vec<f64> = (0..300).map(|v| (v * 37 % 101) as f64).collect();
    let mut bad = finite.clone();
    bad[77] = f64::NAN;
    for (data, queries, name) in [(&bad, &finite, "'x'"), (&finite, &bad, "'y'")] {
        let (data, queries) = (Points::new(data, 100, 3).unwrap(), Points::new(queries, 100, 3).unwrap());
        let search = KnnSearch { data, queries, k: 3, metric: Metric::Euclidean, cell_points: Some(4.0), pruning: Pruning::Always };
        let e = search.run(&options).map(|_| ()).unwrap_err().to_string();
        assert!(e.contains(name) && e.contains("NaN"), "{name}: {e}");
    }
}

/// Uniform points far from the origin, in float32: the search centres them (one centre for the
/// data and the queries) before they are rounded to float32, so that at 1e6 (float32 spacing
/// 0.0625) it finds the float64 neighbours of nearly every query, as near the origin; uncentred, it
/// found those of 1 query in 2000. Pruned or not, queries that are the data or not.
fn check_offsets(options: &RunOptions) {
    let mut rng = Rng(11);
    let (n, m, d, k) = (3001, 517, 3, 5);
    for offset in [1e3, 1e6, 1e7] {
        let shifted = |v: Vec<f64>| v.into_iter().map(|v| v + offset).collect::<Vec<f64>>();
        let data_values = shifted(cloud(&mut rng, n, d, false));
        let query_values = shifted(cloud(&mut rng, m, d, false));
        let data = Points::new(&data_values, n, d).unwrap();
        for queries in [data, Points::new(&query_values, m, d).unwrap()] {
            let want = brute(data, queries, k, Metric::Euclidean);
            for pruning in [Pruning::Never, Pruning::Always] {
                let search = KnnSearch { data, queries, k, metric: Metric::Euclidean, cell_points: Some(16.0), pruning };
                let found = search.run(options).unwrap();
                let (mut distances, mut indices) = (vec![0.0; queries.n * k], vec![0; queries.n * k]);
                found.write_distances(&mut distances, f64::sqrt);
                found.write_indices(&mut indices);
                let case = format!("{}: offset {offset}, {} queries, {pruning:?}", found.backend, queries.n);
                let mut same = 0;
                for (q, want) in want.iter().enumerate() {
                    // the true distances of the neighbours found: the k smallest, up to float32's
                    // rounding of the centred points (|x| < 1: ~1e-7)
                    let index = |c: usize| indices[c * queries.n + q] as usize - 1;
                    let at: Vec<f64> = (0..k).map(|c| distance(data, index(c), queries, q, Metric::Euclidean)).collect();
                    for c in 0..k {
                        let (got, w) = (at[c], want[c]);
                        assert!((got - w).abs() <= 1e-6, "{case}: query {q}, neighbour {c}: {got} != {w}");
                        let reported = distances[c * queries.n + q];
                        assert!((reported - w).abs() <= 1e-5, "{case}: query {q}, distance {c}: {reported} != {w}");
                    }
                    same += usize::from(at == *want);
                }
                let all = queries.n;
                assert!(same as f64 >= 0.99 * all as f64, "{case}: {same} of {all} queries with the float64 neighbours");
            }
        }
    }
}

#[test]
fn points_far_from_the_origin_find_the_float64_neighbours_in_float32() {
    check_offsets(&RunOptions { backend: Backend::Cpu, precision: Precision::F32, threads: 2, ..Default::default() });
}

#[test]
fn points_far_from_the_origin_find_the_float64_neighbours_in_float32_on_a_gpu() {
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the K-NN search of points far from the origin is not checked on a GPU here ({why})");
        return;
    }
    check_offsets(&RunOptions { backend: Backend::Gpu(0), precision: Precision::F32, ..Default::default() });
}

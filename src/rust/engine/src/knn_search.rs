//! The exact K-nearest-neighbour search of R's `keops_knn()`, end to end in one call: brute force,
//! or the search pruned by grid cells (`knn::knn_plan`) run as a block-sparse KMin_ArgKMin on the
//! sorted clouds, the queries it cannot certify searched again within a sure bound, and the results
//! written once, in the user's order, by the caller (`Neighbours::write`: into R's vectors). On a
//! GPU the pruned kernel takes milliseconds; the sorted copies, the restoring of the order and R's
//! passes over 10^7 results took most of the call when R drove these steps (bench/RESULTS.md).

use std::time::Instant;

use crate::api::{Input, Output, RunOptions};
use crate::clustering::Points;
use crate::error::{Error, Result};
use crate::knn::{knn_plan, KnnPlan, Metric, Search};
use crate::operator::Operator;
use crate::parallel;
use crate::precision::Precision;
use crate::ranges::{BlockRanges, Ranges};

/// Whether the search prunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pruning {
    /// Brute force.
    Never,
    /// Where the plan keeps at most half of the pairs.
    WherePays,
    /// Whenever a plan can be made.
    Always,
}

/// The `k` nearest rows of `data` to each row of `queries`, with grid cells of about `cell_points`
/// data points.
#[derive(Debug, Clone, Copy)]
pub struct KnnSearch<'a> {
    pub data: Points<'a>,
    pub queries: Points<'a>,
    pub k: usize,
    pub metric: Metric,
    pub cell_points: f64,
    pub pruning: Pruning,
}

/// The neighbours found, to be written in the user's order by `write`.
pub struct Neighbours {
    found: Found,
    /// Queries that the pruned search could not certify (in the user's numbering), and their
    /// neighbours, searched again (rows of `again`, in that order).
    redone: Vec<usize>,
    again: Option<Found>,
    /// Whether the search was pruned.
    pub pruned: bool,
    /// What computed it, and the seconds of each phase (the plans', then the runs' summed).
    pub backend: String,
    pub timings: Vec<(&'static str, f64)>,
}

/// The results of one run, in the order it computed them.
struct Found {
    /// `nrow x k` values and 1-based indices into the data it searched, column-major.
    output: Output,
    /// The row of the output of each query (`None`: the query's own row).
    row_of_query: Option<Vec<usize>>,
    /// The user's number of each data row the run searched (`None`: the same).
    data_order: Option<Vec<usize>>,
}

impl Found {
    fn row(&self, q: usize) -> usize {
        self.row_of_query.as_ref().map_or(q, |rows| rows[q])
    }

    /// The value of the `c`-th neighbour of the run's query `q`.
    fn value(&self, q: usize, c: usize) -> f64 {
        let out = &self.output;
        out.values.as_ref().map_or(f64::NAN, |v| v[c * out.nrow + self.row(q)])
    }

    /// The 1-based index in the user's data of the `c`-th neighbour of query `q`, 0 for none.
    fn index(&self, q: usize, c: usize) -> i32 {
        let out = &self.output;
        let found = out.indices.as_ref().map_or(0, |v| v[c * out.nrow + self.row(q)]);
        match (found, &self.data_order) {
            (i, Some(order)) if i > 0 => order[i as usize - 1] as i32 + 1,
            (i, _) => i,
        }
    }
}

impl KnnSearch<'_> {
    /// Runs the search with `options` (backend, precision; ranges are its own).
    pub fn run(&self, options: &RunOptions) -> Result<Neighbours> {
        let (data, queries, k) = (self.data, self.queries, self.k);
        if data.d != queries.d || data.d == 0 || k == 0 || k > data.n {
            return Err(Error::Invalid("knn: data and queries of one dimension, 1 <= k <= rows of data".into()));
        }
        let op = self.operator()?;
        let mut timings = Vec::new();
        let mut plan = self.plan(queries, Search::Neighbourhood, self.pruning, &mut timings)?;
        let pruned = plan.is_some();
        // (what certifies the results, taken before the search consumes the plan)
        let bounds = plan.as_mut().map(|p| (std::mem::take(&mut p.reach), p.largest));
        let found = self.find(&op, queries, plan, options)?;
        add_timings(&mut timings, &found.output.timings);
        let start = Instant::now();
        let redone = match bounds {
            Some((reach, largest)) => self.uncertified(&found, &reach, largest, options.precision),
            None => Vec::new(),
        };
        add_timings(&mut timings, &[("certification", start.elapsed().as_secs_f64())]);
        let again = match redone.is_empty() {
            true => None,
            false => {
                let points = rows_in_order(queries, &redone);
                let redo = Points::new(&points, redone.len(), queries.d)?;
                let plan = self.plan(redo, Search::Bounded, Pruning::Always, &mut timings)?;
                let again = self.find(&op, redo, plan, options)?;
                add_timings(&mut timings, &again.output.timings);
                Some(again)
            }
        };
        let backend = found.output.backend.clone();
        Ok(Neighbours { found, redone, again, pruned, backend, timings })
    }

    /// The reduction: KMin_ArgKMin of the metric's distance (squared for euclidean).
    fn operator(&self) -> Result<Operator> {
        let distance = match self.metric {
            Metric::Euclidean => "SqDist(q, p)",
            Metric::Manhattan => "Sum(Abs(q - p))",
        };
        let d = self.data.d;
        Operator::new(
            &format!("KMin_ArgKMin_Reduction({distance}, {}, 0)", self.k),
            &[format!("q = Vi({d})"), format!("p = Vj({d})")],
        )
    }

    /// The plan of a search of `queries`, if pruning is asked and pays.
    fn plan(&self, queries: Points, search: Search, pruning: Pruning, timings: &mut Vec<(&'static str, f64)>) -> Result<Option<KnnPlan>> {
        if pruning == Pruning::Never {
            return Ok(None);
        }
        let start = Instant::now();
        let plan = knn_plan(self.data, queries, self.k, self.metric, self.cell_points, search, pruning == Pruning::Always)?;
        add_timings(timings, &[("plan", start.elapsed().as_secs_f64())]);
        Ok(plan)
    }

    /// The `k` nearest data of each of `queries`: by brute force, or over the plan's ranges of the
    /// sorted clouds.
    fn find(&self, op: &Operator, queries: Points, plan: Option<KnnPlan>, options: &RunOptions) -> Result<Found> {
        let (data, d) = (self.data, self.data.d);
        let Some(plan) = plan else {
            let inputs = [Input::host(queries.values, queries.n, d), Input::host(data.values, data.n, d)];
            return Ok(Found { output: op.run(&inputs, options)?, row_of_query: None, data_order: None });
        };
        let start = Instant::now();
        let sorted_data = rows_in_order(data, &plan.data_order);
        // (the queries being the data, sorted the same way: one copy for both)
        let sorted_queries = match data.same_as(queries) {
            true => None,
            false => Some(rows_in_order(queries, &plan.query_order)),
        };
        let mut row_of_query = vec![0; queries.n];
        for (r, &q) in plan.query_order.iter().enumerate() {
            row_of_query[q] = r;
        }
        let sorting = start.elapsed().as_secs_f64();
        let none = BlockRanges { blocks: Vec::new(), slices: Vec::new(), reduced: Vec::new() };
        let options = RunOptions { ranges: Some(Ranges { i: plan.ranges, j: none }), ..options.clone() };
        let inputs = [
            Input::host(sorted_queries.as_deref().unwrap_or(&sorted_data), queries.n, d),
            Input::host(&sorted_data, data.n, d),
        ];
        let mut output = op.run(&inputs, &options)?;
        output.timings.insert(0, ("sorting", sorting));
        Ok(Found { output, row_of_query: Some(row_of_query), data_order: Some(plan.data_order) })
    }

    /// The queries whose K-th neighbour found is not surely nearer than the data left out (their
    /// `reach`), up to the rounding of the computed distances (coordinates up to `largest`).
    fn uncertified(&self, found: &Found, reach: &[f64], largest: f64, precision: Precision) -> Vec<usize> {
        let eps = match precision {
            Precision::F16 => f64::powi(2.0, -10),
            Precision::F32 => f64::powi(2.0, -23),
            Precision::F64 => f64::powi(2.0, -52),
        };
        let rounding = 8.0 * self.data.d as f64 * eps * largest;
        const BLOCK: usize = 1 << 14;
        let mut redo = vec![false; self.queries.n];
        parallel::for_each_block(&mut redo, BLOCK, |b, block| {
            for (q, redo) in (b * BLOCK..).zip(block) {
                let kth = found.value(q, self.k - 1);
                let kth = if self.metric == Metric::Euclidean { kth.max(0.0).sqrt() } else { kth };
                // (a NaN distance is not certified either)
                let certified = kth * (1.0 + 16.0 * eps) + rounding < reach[q];
                *redo = !certified;
            }
        });
        (0..redo.len()).filter(|&q| redo[q]).collect()
    }
}

/// The rows `order` of `x`, column-major (column by column on every core).
fn rows_in_order(x: Points, order: &[usize]) -> Vec<f64> {
    let mut rows = vec![0.0; order.len() * x.d];
    parallel::for_each_block(&mut rows, order.len(), |c, column| {
        column.iter_mut().zip(order).for_each(|(v, &i)| *v = x.values[c * x.n + i]);
    });
    rows
}

/// Adds each phase's seconds to its total, in the order phases first come.
fn add_timings(totals: &mut Vec<(&'static str, f64)>, phases: &[(&'static str, f64)]) {
    for &(name, t) in phases {
        match totals.iter_mut().find(|(n, _)| *n == name) {
            Some((_, total)) => *total += t,
            None => totals.push((name, t)),
        }
    }
}

impl Neighbours {
    /// How many queries the pruned search could not certify and searched again.
    pub fn redone(&self) -> usize {
        self.redone.len()
    }

    /// The number of queries.
    fn queries(&self) -> usize {
        self.found.row_of_query.as_ref().map_or(self.found.output.nrow, Vec::len)
    }

    /// Writes the `queries x k` distances, `distance(value)` of the reduction's values (squared
    /// for euclidean), column-major in the user's order, each element once, on every core.
    pub fn write_distances(&self, distances: &mut [f64], distance: impl Fn(f64) -> f64 + Sync) {
        self.write(distances, |found, q, c| distance(found.value(q, c)));
    }

    /// Writes the `queries x k` 1-based indices of the neighbours (0 for none) in the same way.
    pub fn write_indices(&self, indices: &mut [i32]) {
        self.write(indices, Found::index);
    }

    fn write<T: Send>(&self, out: &mut [T], element: impl Fn(&Found, usize, usize) -> T + Sync) {
        let (n, k) = (self.queries(), self.found.output.k);
        assert_eq!(out.len(), n * k, "Neighbours::write needs queries x k elements");
        parallel::for_each_block(out, n, |c, column| {
            column.iter_mut().enumerate().for_each(|(q, v)| *v = element(&self.found, q, c));
        });
        if let Some(again) = &self.again {
            for (r, &q) in self.redone.iter().enumerate() {
                (0..k).for_each(|c| out[c * n + q] = element(again, r, c));
            }
        }
    }
}

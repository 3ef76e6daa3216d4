//! The exact K-nearest-neighbour search of R's `keops_knn()`, end to end in one call: brute force,
//! or the search pruned by grid cells (`knn::knn_plan`) run as a block-sparse KMin_ArgKMin on the
//! sorted clouds, the queries it cannot certify searched again within a sure bound, and the results
//! written once, in the user's order, by the caller (`Neighbours::write`: into R's vectors). Every
//! run, pruned or not, on any backend, gets the data and the queries less one centre (`knn::centre`,
//! the data's): their float32 copies then keep the precision of points near the origin. On a
//! GPU the pruned kernel takes milliseconds; the sorted copies, the restoring of the order and R's
//! passes over 10^7 results took most of the call when R drove these steps (bench/RESULTS.md).

use std::time::Instant;

use crate::api::{Backend, Input, Output, RunOptions};
use crate::clustering::{column_bounds, Points};
use crate::error::{Error, Result};
use crate::knn::{centre, knn_plan, CellSettings, KnnPlan, Metric, Search};
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
/// data points (`None`: `CELL_POINTS` for the backend that searches).
#[derive(Debug, Clone, Copy)]
pub struct KnnSearch<'a> {
    pub data: Points<'a>,
    pub queries: Points<'a>,
    pub k: usize,
    pub metric: Metric,
    pub cell_points: Option<f64>,
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
    /// `nrow x k` values and 1-based indices into the data it searched (0 for none), column-major
    /// (`nrow` and `k` those of `output`).
    values: Vec<f64>,
    indices: Vec<i32>,
    /// The run's shape, phases and backend (its values and indices taken out).
    output: Output,
    /// The query of each row (`None`: the row's own).
    query_order: Option<Vec<usize>>,
    /// The user's number of each data row the run searched (`None`: the same).
    data_order: Option<Vec<usize>>,
}

impl Found {
    /// The results of a KMin_ArgKMin run (its values and indices taken out of `output`).
    fn new(mut output: Output, query_order: Option<Vec<usize>>, data_order: Option<Vec<usize>>) -> Result<Found> {
        let (Some(values), Some(indices)) = (output.values.take(), output.indices.take()) else {
            return Err(Error::Invalid("knn: the search returned no values or no indices".into()));
        };
        Ok(Found { values, indices, output, query_order, data_order })
    }

    /// The value of the `c`-th neighbour of row `r`.
    fn value(&self, r: usize, c: usize) -> f64 {
        self.values[c * self.output.nrow + r]
    }

    /// Calls `f(q, r)` for the query `q` of each row `r`.
    fn for_each_query(&self, mut f: impl FnMut(usize, usize)) {
        match &self.query_order {
            Some(order) => order.iter().enumerate().for_each(|(r, &q)| f(q, r)),
            None => (0..self.output.nrow).for_each(|r| f(r, r)),
        }
    }

    /// The values of the `c`-th neighbours of all rows.
    fn values_column(&self, c: usize) -> &[f64] {
        &self.values[c * self.output.nrow..(c + 1) * self.output.nrow]
    }

    /// The indices of the `c`-th neighbours of all rows (into the data searched: see `user_index`).
    fn indices_column(&self, c: usize) -> &[i32] {
        &self.indices[c * self.output.nrow..(c + 1) * self.output.nrow]
    }

    /// The 1-based index in the user's data of `found`, a 1-based index into the data searched.
    fn user_index(&self, found: i32) -> i32 {
        match &self.data_order {
            Some(order) if found > 0 => order[found as usize - 1] as i32 + 1,
            _ => found,
        }
    }
}

/// Data points per grid cell by default, on a GPU and on the CPU. A GPU's blocks take 64 to 256
/// query rows; on the CPU smaller cells prune more than they cost to plan (10-NN of 10^6 points on 2
/// cores, 128 -> 24 points: uniform in D = 3 2.04 -> 1.50 s, D = 2 1.32 -> 0.89 s, 100 blobs in
/// D = 3 2.20 -> 1.99 s; bench/RESULTS.md, 2026-11-29).
pub const CELL_POINTS: (f64, f64) = (128.0, 24.0);

impl KnnSearch<'_> {
    /// Runs the search with `options` (backend, precision; ranges are its own).
    pub fn run(&self, options: &RunOptions) -> Result<Neighbours> {
        let (data, queries, k) = (self.data, self.queries, self.k);
        if data.d != queries.d || data.d == 0 || k == 0 || k > data.n {
            return Err(Error::Invalid("knn: data and queries of one dimension, 1 <= k <= rows of data".into()));
        }
        let op = self.operator()?;
        let on_gpu = crate::choose::choose(options)?.gpu().is_some();
        let cells = CellSettings {
            points: self.cell_points.unwrap_or(if on_gpu { CELL_POINTS.0 } else { CELL_POINTS.1 }),
            nearest_first: !on_gpu,
        };
        let mut timings = Vec::new();
        let mut plan = self.plan(queries, Search::Neighbourhood, self.pruning, cells, &mut timings)?;
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
                let points = queries.rows_in_order(&redone);
                let redo = Points::new(&points, redone.len(), queries.d)?;
                let plan = self.plan(redo, Search::Bounded, Pruning::Always, cells, &mut timings)?;
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

    /// The plan of a search of `queries` with `cells`, if pruning is asked and pays.
    fn plan(
        &self,
        queries: Points,
        search: Search,
        pruning: Pruning,
        cells: CellSettings,
        timings: &mut Vec<(&'static str, f64)>,
    ) -> Result<Option<KnnPlan>> {
        if pruning == Pruning::Never {
            return Ok(None);
        }
        let start = Instant::now();
        let plan = knn_plan(self.data, queries, self.k, self.metric, cells, search, pruning == Pruning::Always)?;
        add_timings(timings, &[("plan", start.elapsed().as_secs_f64())]);
        Ok(plan)
    }

    /// The `k` nearest data of each of `queries`: by brute force, or over the plan's ranges of the
    /// sorted clouds; both less one centre (the plan's sorted copies are already), before the
    /// backend converts them.
    fn find(&self, op: &Operator, queries: Points, plan: Option<KnnPlan>, options: &RunOptions) -> Result<Found> {
        let (data, d) = (self.data, self.data.d);
        let Some(plan) = plan else {
            let centre = centre(&column_bounds(data, "x")?);
            let data_values = data.less(&centre);
            // (the queries being the data: one copy for both)
            let query_values = if queries.same_as(data) { None } else { Some(queries.less(&centre)) };
            let query_values = query_values.as_deref().unwrap_or(&data_values);
            let inputs = [Input::host(query_values, queries.n, d), Input::host(&data_values, data.n, d)];
            return Found::new(op.run(&inputs, options)?, None, None);
        };
        let none = BlockRanges { blocks: Vec::new(), slices: Vec::new(), reduced: Vec::new() };
        // (ranges listing the nearest data first run on the CPU: `RunOptions::ranges_in_any_order`)
        let backend = if plan.nearest_first { Backend::Cpu } else { options.backend };
        let ranges = Some(Ranges { i: plan.ranges, j: none });
        // On the first GPU alone: a pruned search reduces a few hundred pairs per query, a kernel
        // shorter than putting several GPUs' results together (10-NN of 1e7 points, two H200s:
        // kernel 41 -> 20 ms, their results stacked in 136 ms; the call 1.15 -> 1.28 s).
        let options =
            RunOptions { ranges, ranges_in_any_order: plan.nearest_first, backend, gpus: Vec::new(), ..options.clone() };
        // (the queries being the data, sorted the same way: one copy for both)
        let sorted_queries = plan.queries.as_ref().unwrap_or(&plan.data);
        let inputs = [Input::host(&sorted_queries.values, queries.n, d), Input::host(&plan.data.values, data.n, d)];
        let output = op.run(&inputs, &options)?;
        let query_order = plan.queries.map_or_else(|| plan.data.order.clone(), |q| q.order);
        Found::new(output, Some(query_order), Some(plan.data.order))
    }

    /// The queries whose K-th neighbour found is not surely nearer than the data left out (`reach`,
    /// of each row found), up to the rounding of the computed distances (coordinates up to `largest`).
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
            for (r, redo) in (b * BLOCK..).zip(block) {
                let kth = found.value(r, self.k - 1);
                let kth = if self.metric == Metric::Euclidean { kth.max(0.0).sqrt() } else { kth };
                // (a NaN distance is not certified either)
                let certified = kth * (1.0 + 16.0 * eps) + rounding < reach[r];
                *redo = !certified;
            }
        });
        let mut redone = Vec::new();
        found.for_each_query(|q, r| if redo[r] { redone.push(q) });
        redone
    }
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

    /// Writes the `queries x k` distances, `distance(value)` of the reduction's values (squared
    /// for euclidean), column-major in the user's order, each element once, on every core.
    pub fn write_distances(&self, distances: &mut [f64], distance: impl Fn(f64) -> f64 + Sync) {
        self.write(distances, Found::values_column, |_, v| distance(v));
    }

    /// Writes the `queries x k` 1-based indices of the neighbours (0 for none) in the same way.
    pub fn write_indices(&self, indices: &mut [i32]) {
        self.write(indices, Found::indices_column, Found::user_index);
    }

    /// Writes `convert(run, v)` of the values `v` of each run's `column(run, c)` (its `c`-th
    /// neighbours, by row) into the user's `c`-th column at their queries' rows, a column on each core.
    fn write<S: Copy, T: Send>(
        &self,
        out: &mut [T],
        column: fn(&Found, usize) -> &[S],
        convert: impl Fn(&Found, S) -> T + Sync,
    ) {
        let (n, k) = (self.found.output.nrow, self.found.output.k);
        assert_eq!(out.len(), n * k, "Neighbours::write needs queries x k elements");
        parallel::for_each_block(out, n, |c, out| {
            let (found, values) = (&self.found, column(&self.found, c));
            found.for_each_query(|q, r| out[q] = convert(found, values[r]));
            if let Some(again) = &self.again {
                let values = column(again, c);
                again.for_each_query(|q, r| out[self.redone[q]] = convert(again, values[r]));
            }
        });
    }
}

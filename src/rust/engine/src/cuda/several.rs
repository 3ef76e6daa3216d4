//! One reduction shared by several GPUs of this machine (`RunOptions::gpus`): one host thread per
//! device, each with the device's own context, stream, kernels and buffers (`Device`), computes
//! its `Part` with `launch::evaluate`; the parts are put together here. Long outputs are split
//! into blocks of output rows, in proportion to each device's multiprocessors (a block-sparse
//! reduction at the boundaries of its pieces of work, in proportion to their pairs); short ones,
//! which would not fill the devices, into parts of the reduced range whose states are merged in
//! order, as the 2D scheme merges its chunks, with the reduction's own merge (`Accumulator`).
//! Ctrl-C is asked on the calling thread (R's) and passed to the devices, which stop between steps.

use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::device::{self, Compiled, Device};
use super::launch;
use crate::api::RunOptions;
use crate::backend::{BackendDevice, Call, Columns, Part, Timings};
use crate::error::{Error, Result};
use crate::formula::Formula;
use crate::memory;
use crate::ranges::BlockRanges;
use crate::real::Real;
use crate::real::Stored;

/// What each device computes, and how to put the parts together.
#[derive(Debug, PartialEq)]
pub enum Split {
    /// Blocks of output rows, against the whole reduced range.
    Rows(Vec<Part>),
    /// Parts of the reduced range for all the output rows: their states are merged.
    Reduced(Vec<Part>),
}

impl Split {
    fn parts(&self) -> &[Part] {
        match self {
            Split::Rows(p) | Split::Reduced(p) => p,
        }
    }
}

/// How the reduction is split over devices of these `weights` (their relative speeds): `granule`
/// output rows make one block of the kernel, `tile` reduced rows one tile, and a device needs
/// `fill` blocks of rows to be busy. Empty parts are left out.
pub fn plan(
    (n_out, n_red): (usize, usize),
    weights: &[f64],
    (granule, tile, fill): (usize, usize, usize),
    ranges: Option<&BlockRanges>,
) -> Split {
    let nonempty = |parts: Vec<Part>| parts.into_iter().filter(|p| !p.out.is_empty() && !p.red.is_empty()).collect();
    if let Some(ranges) = ranges {
        // At the boundaries of the pieces of work of the kernels (blocks of rows of the ranges, cut
        // into blocks of the grid), in proportion to the pairs they reduce (a row with nothing to
        // reduce still costs its write).
        let work = ranges.work(n_out, granule);
        let costs: Vec<f64> = work
            .iter()
            .map(|w| w.rows.len() as f64 * (1 + w.reduced.iter().map(|r| r.len()).sum::<usize>()) as f64)
            .collect();
        let ends: Vec<usize> = work.iter().map(|w| w.rows.end).collect();
        let cuts = cut_at(&costs, weights);
        let mut start = 0;
        let parts = cuts
            .iter()
            .map(|&items| {
                let end = if items == 0 { 0 } else { ends[items - 1] }.max(start);
                let part = Part { out: start..end, red: 0..n_red };
                start = end;
                part
            })
            .collect();
        return Split::Rows(nonempty(parts));
    }
    let devices = weights.len().max(1);
    let short = n_out.div_ceil(devices) < granule * fill && n_red >= devices * tile;
    match short {
        true => Split::Reduced(nonempty(
            proportional(n_red, weights, tile).into_iter().map(|red| Part { out: 0..n_out, red }).collect(),
        )),
        false => Split::Rows(nonempty(
            proportional(n_out, weights, granule).into_iter().map(|out| Part { out, red: 0..n_red }).collect(),
        )),
    }
}

/// `0..n` in consecutive ranges in proportion to `weights`, their ends multiples of `granule`
/// (but the last).
fn proportional(n: usize, weights: &[f64], granule: usize) -> Vec<Range<usize>> {
    let total: f64 = weights.iter().sum();
    let granule = granule.max(1);
    let mut sum = 0.0;
    let mut start = 0;
    weights
        .iter()
        .enumerate()
        .map(|(k, w)| {
            sum += w;
            let end = match k + 1 == weights.len() {
                true => n,
                false => ((n as f64 * sum / total / granule as f64).round() as usize * granule).clamp(start, n),
            };
            let range = start..end;
            start = end;
            range
        })
        .collect()
}

/// The number of items before each cut (the last: all of them) so that the items' `costs` are
/// shared in proportion to `weights`.
fn cut_at(costs: &[f64], weights: &[f64]) -> Vec<usize> {
    let (total, weight): (f64, f64) = (costs.iter().sum(), weights.iter().sum());
    let mut cuts = Vec::with_capacity(weights.len());
    let (mut items, mut done, mut share) = (0, 0.0, 0.0);
    for (k, w) in weights.iter().enumerate() {
        share += w / weight * total;
        if k + 1 == weights.len() {
            items = costs.len();
        }
        // Take an item while that brings the sum closer to this device's share.
        while items < costs.len() && (done + costs[items] - share).abs() <= (done - share).abs() {
            done += costs[items];
            items += 1;
        }
        cuts.push(items);
    }
    cuts
}

/// GPUs of this machine sharing each reduction (a GPU listed twice gets two parts, one after the
/// other: only useful to test the splitting on one GPU).
pub struct Several {
    devices: Vec<Arc<Device>>,
}

impl Several {
    /// The GPUs `ordinals`, opened.
    pub fn open(ordinals: &[usize]) -> Result<Several> {
        Ok(Several { devices: ordinals.iter().map(|&d| device::device(d)).collect::<Result<_>>()? })
    }
}

impl BackendDevice for Several {
    fn describe(&self) -> String {
        let mut names: Vec<&str> = self.devices.iter().map(|d| d.name.as_str()).collect();
        names.dedup();
        let list: Vec<String> = self.devices.iter().map(|d| d.ordinal.to_string()).collect();
        format!("GPUs {} ({})", list.join(", "), names.join(", "))
    }

    /// Runs the reduction of `call` (whole: no part, no input kept on a device) over the GPUs.
    fn evaluate<S: Stored, T: Real>(&self, call: &Call, timings: &mut Timings) -> Result<Columns> {
        let devices = &self.devices;
        let clock = Instant::now();
        let compiled = compile_on_each(devices, call)?;
        timings.push(("compile or load", clock.elapsed().as_secs_f64()));
        let (n_out, n_red) = call.out_and_reduced();
        let kernel = &compiled[0].kernel;
        let weights: Vec<f64> = devices.iter().map(|d| d.multiprocessors as f64).collect();
        // A device whose share of the rows is not a block per multiprocessor is better given a part
        // of the reduced range (it would cut its rows' reductions into chunks anyway: the 2D scheme).
        let fill = devices[0].multiprocessors;
        let split = plan((n_out, n_red), &weights, (kernel.tile * kernel.rows, kernel.tile, fill), call.ranges);
        let done = run_parts::<S, T>(devices, &compiled, split.parts(), call)?;
        // Each phase as long as on the slowest device (they run side by side).
        for (_, times) in &done {
            for &(phase, t) in times {
                match timings.iter_mut().find(|(p, _)| *p == phase) {
                    Some(slot) => slot.1 = slot.1.max(t),
                    None => timings.push((phase, t)),
                }
            }
        }
        let clock = Instant::now();
        let width = kernel.width;
        let columns: Vec<Columns> = done.into_iter().map(|(c, _)| c).collect();
        let columns = match &split {
            Split::Rows(parts) => stack_rows(parts, columns, n_out, width)?,
            Split::Reduced(_) => merge_states::<T>(call.formula, call.options, columns, n_out, width)?,
        };
        timings.push(("merge", clock.elapsed().as_secs_f64()));
        Ok(columns)
    }
}

/// Each device's kernels, compiled (or loaded) one device after the other: a kernel compiled for
/// the first is loaded from the disk cache for the next ones of the same architecture.
fn compile_on_each(devices: &[Arc<Device>], call: &Call) -> Result<Vec<Arc<Compiled>>> {
    devices
        .iter()
        .map(|d| {
            d.ctx.bind_to_thread().map_err(|e| Error::Gpu(format!("binding the CUDA context: {e:?}")))?;
            d.kernels_for(call)
        })
        .collect()
}

type PartDone = (Columns, Timings);

/// Runs part `t` on device `t`, one host thread each; the first failure stops the others at their
/// next step, and is the error returned (unless it is only the interruption another one caused).
fn run_parts<S: Stored, T: Real>(
    devices: &[Arc<Device>],
    compiled: &[Arc<Compiled>],
    parts: &[Part],
    call: &Call,
) -> Result<Vec<PartDone>> {
    let results: Vec<Mutex<Option<Result<PartDone>>>> = parts.iter().map(|_| Mutex::new(None)).collect();
    let stop = AtomicBool::new(false);
    let work = |t: usize| {
        let (device, compiled) = (&devices[t], &compiled[t]);
        let mut times = Vec::new();
        let done =
            device.ctx.bind_to_thread().map_err(|e| Error::Gpu(format!("binding the CUDA context: {e:?}"))).and_then(
                |_| {
                    let stopped = || stop.load(Relaxed);
                    let call = Call { part: Some(&parts[t]), ..*call };
                    launch::evaluate::<S, T>(device, compiled, &call, &stopped, None, &mut times)
                },
            );
        if done.is_err() {
            // The other devices leave at their next step.
            stop.store(true, Relaxed);
        }
        if let Ok(mut slot) = results[t].lock() {
            *slot = Some(done.map(|c| (c, times)));
        }
    };
    match call.options.interrupt {
        Some(interrupted) => crate::parallel::run_polling(parts.len(), work, interrupted, &stop),
        None => std::thread::scope(|s| {
            for t in 0..parts.len() {
                let work = &work;
                s.spawn(move || work(t));
            }
        }),
    }
    let mut done = Vec::with_capacity(parts.len());
    let mut failure: Option<Error> = None;
    for slot in results {
        let e = match slot.into_inner().ok().flatten() {
            Some(Ok(d)) => {
                done.push(d);
                continue;
            }
            Some(Err(e)) => e,
            None => Error::Gpu("a device's thread stopped without a result".into()),
        };
        if failure.as_ref().is_none_or(|f| matches!(f, Error::Interrupted)) {
            failure = Some(e);
        }
    }
    match failure {
        Some(e) => Err(e),
        None => Ok(done),
    }
}

/// The results of blocks of output rows, column-major, into those of all the rows.
fn stack_rows(parts: &[Part], columns: Vec<Columns>, n_out: usize, width: usize) -> Result<Columns> {
    fn stack<X: Copy + Default>(
        parts: &[Part],
        got: Vec<Option<Vec<X>>>,
        n: usize,
        width: usize,
    ) -> Result<Option<Vec<X>>> {
        if got.iter().any(Option::is_none) {
            return Ok(None);
        }
        let mut all = memory::zeros(n * width, "the results")?;
        for (part, got) in parts.iter().zip(got.into_iter().flatten()) {
            let rows = part.out.len();
            for c in 0..width {
                all[c * n + part.out.start..c * n + part.out.end].copy_from_slice(&got[c * rows..(c + 1) * rows]);
            }
        }
        Ok(Some(all))
    }
    let (values, indices): (Vec<_>, Vec<_>) = columns.into_iter().map(|c| (c.values, c.indices)).unzip();
    Ok(Columns {
        values: stack(parts, values, n_out, width)?,
        indices: stack(parts, indices, n_out, width)?,
        states: None,
    })
}

/// The states of the parts of the reduced range merged in order, finalised into column-major results.
fn merge_states<T: Real>(
    formula: &Formula,
    options: &RunOptions,
    columns: Vec<Columns>,
    n_out: usize,
    width: usize,
) -> Result<Columns> {
    let acc = formula.accumulator(options.sum_scheme);
    let len = acc.state_len();
    let mut parts =
        columns.into_iter().map(|c| c.states.ok_or_else(|| Error::Gpu("a part's states are missing".into())));
    let mut states = parts.next().ok_or_else(|| Error::Gpu("no part of the reduced range was computed".into()))??;
    for other in parts {
        let other = other?;
        for (s, o) in states.chunks_exact_mut(len).zip(other.chunks_exact(len)) {
            acc.merge(s, o);
        }
    }
    let kind = formula.reduction.kind;
    let mut values = vec![0.0; if kind.returns_values() { n_out * width } else { 0 }];
    let mut indices = vec![0; if kind.returns_indices() { n_out * width } else { 0 }];
    acc.finalize_rows::<T>(&states, &mut values, &mut indices);
    Ok(Columns {
        values: kind.returns_values().then(|| transpose(&values, n_out, width)),
        indices: kind.returns_indices().then(|| transpose(&indices, n_out, width)),
        states: None,
    })
}

/// Row-major `n x width` to column-major.
fn transpose<X: Copy + Default>(rows: &[X], n: usize, width: usize) -> Vec<X> {
    let mut out = vec![X::default(); n * width];
    for (r, row) in rows.chunks_exact(width.max(1)).enumerate() {
        for (c, &x) in row.iter().enumerate() {
            out[c * n + r] = x;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(parts: &[Range<usize>], n: usize) -> bool {
        parts.first().map_or(n == 0, |p| p.start == 0)
            && parts.last().map_or(n == 0, |p| p.end == n)
            && parts.windows(2).all(|w| w[0].end == w[1].start)
    }

    #[test]
    fn long_outputs_are_split_into_blocks_of_rows_in_proportion() {
        let split = plan((100_003, 5_000), &[132.0, 132.0, 66.0], (256, 128, 100), None);
        let Split::Rows(parts) = split else { panic!("expected blocks of rows, got {split:?}") };
        let rows: Vec<Range<usize>> = parts.iter().map(|p| p.out.clone()).collect();
        assert!(covers(&rows, 100_003), "{rows:?}");
        assert!(parts.iter().all(|p| p.red == (0..5_000)));
        assert!(rows[..2].iter().all(|r| r.end % 256 == 0), "{rows:?}");
        // 2 : 2 : 1 up to a block of rows
        for (r, share) in rows.iter().zip([0.4, 0.4, 0.2]) {
            assert!((r.len() as f64 - share * 100_003.0).abs() <= 256.0, "{rows:?}");
        }
    }

    #[test]
    fn short_outputs_are_split_over_the_reduced_range() {
        let split = plan((100, 10_000_001), &[1.0, 1.0], (256, 128, 1056), None);
        let Split::Reduced(parts) = split else { panic!("expected parts of the reduced range, got {split:?}") };
        let red: Vec<Range<usize>> = parts.iter().map(|p| p.red.clone()).collect();
        assert!(covers(&red, 10_000_001) && red[0].end.is_multiple_of(128), "{red:?}");
        assert!((red[0].len() as f64 - 5e6).abs() <= 128.0 && parts.iter().all(|p| p.out == (0..100)));
        // Too short a reduced range to share: one part, nothing empty.
        let split = plan((100, 200), &[1.0, 1.0], (256, 128, 1056), None);
        assert_eq!(split, Split::Rows(vec![Part { out: 0..100, red: 0..200 }]));
    }

    #[test]
    fn block_sparse_reductions_are_split_at_their_blocks_in_proportion_to_their_pairs() {
        // Rows 0..10 reduce 1000 indices, rows 10..1000 reduce 10 each, rows 1000..1010 nothing.
        let ranges = BlockRanges { blocks: vec![0..10, 10..1000], slices: vec![1, 2], reduced: vec![0..1000, 5..15] };
        let split = plan((1010, 2000), &[1.0, 1.0], (256, 128, 1056), Some(&ranges));
        let Split::Rows(parts) = split else { panic!("expected blocks of rows, got {split:?}") };
        let rows: Vec<Range<usize>> = parts.iter().map(|p| p.out.clone()).collect();
        // 10 x 1001 against 990 x 11 + 10: the first block alone, the rest to the other device.
        assert_eq!(rows, vec![0..10, 10..1010]);
    }

    #[test]
    fn cuts_share_costs_as_the_weights_say() {
        assert_eq!(cut_at(&[1.0; 10], &[1.0, 1.0]), vec![5, 10]);
        assert_eq!(cut_at(&[1.0; 10], &[3.0, 1.0]), vec![8, 10]);
        assert_eq!(cut_at(&[9.0, 1.0], &[1.0, 1.0]), vec![1, 2]);
        assert_eq!(cut_at(&[], &[1.0, 1.0]), vec![0, 0]);
        assert_eq!(proportional(10, &[1.0, 1.0, 1.0], 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(proportional(3, &[1.0, 1.0], 256), vec![0..0, 0..3]);
    }
}

//! One reduction shared by several GPUs of this machine (`RunOptions::gpus`): one host thread per
//! device, each with the device's own context, stream, kernels and buffers (`Device`), computes
//! its `Part` with `launch::evaluate` (the parts: `schedule::devices`); they are put together here:
//! blocks of output rows stacked, parts of the reduced range merged in order, as the 2D scheme
//! merges its chunks, with the reduction's own merge (`Accumulator`).
//! Ctrl-C is asked on the calling thread (R's) and passed to the devices, which stop between steps.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use super::device::{self, Compiled, Device};
use super::launch;
use super::OnDevice;
use crate::api::RunOptions;
use crate::backend::{BackendDevice, Call, Columns, Part, Timings};
use crate::error::{Error, Result};
use crate::formula::Formula;
use crate::memory;
use crate::precision::Precision;
use crate::schedule::devices::{plan, Split};
use crate::real::Real;
use crate::real::Stored;

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

    /// Each device's relative speed: its multiprocessors.
    pub fn weights(&self) -> Vec<f64> {
        self.devices.iter().map(|d| d.multiprocessors as f64).collect()
    }

    /// A loop's matrices on device `t` in `precision`'s storage, for this thread (its context bound).
    pub fn buffers(&self, t: usize, precision: Precision) -> Result<OnDevice> {
        let device = &self.devices[t];
        device.ctx.bind_to_thread().map_err(|e| Error::Gpu(format!("binding the CUDA context: {e:?}")))?;
        Ok(OnDevice::new(device.clone(), precision))
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
    // The pairs (i, j) each part has reduced, and has in all: summed for `RunOptions::progress` on
    // the calling thread.
    let progress: Vec<[AtomicU64; 2]> = parts.iter().map(|_| [AtomicU64::new(0), AtomicU64::new(0)]).collect();
    let work = |t: usize| {
        let (device, compiled) = (&devices[t], &compiled[t]);
        let mut times = Vec::new();
        let done =
            device.ctx.bind_to_thread().map_err(|e| Error::Gpu(format!("binding the CUDA context: {e:?}"))).and_then(
                |_| {
                    let poll = |done, total| {
                        progress[t][0].store(done, Relaxed);
                        progress[t][1].store(total, Relaxed);
                        stop.load(Relaxed)
                    };
                    let call = Call { part: Some(&parts[t]), ..*call };
                    launch::evaluate::<S, T>(device, compiled, &call, &poll, None, &mut times)
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
    let (interrupt, report) = (call.options.interrupt, call.options.progress);
    // (a part's total is known after its first step: reported once every part has one)
    let sum = |i: usize| progress.iter().map(|p| p[i].load(Relaxed)).sum::<u64>();
    let started = || progress.iter().all(|p| p[1].load(Relaxed) > 0);
    if interrupt.is_none() && report.is_none() {
        std::thread::scope(|s| {
            for t in 0..parts.len() {
                let work = &work;
                s.spawn(move || work(t));
            }
        });
    } else {
        let poll = || {
            if let Some(report) = report {
                if started() {
                    let total = sum(1);
                    report(sum(0).min(total), total);
                }
            }
            interrupt.is_some_and(|interrupted| interrupted())
        };
        crate::parallel::run_polling(parts.len(), work, poll, &stop);
        if let Some(report) = report.filter(|_| !stop.load(Relaxed) && started()) {
            report(sum(1), sum(1));
        }
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
    fn stack<X: Copy + Default + Send + Sync>(
        parts: &[Part],
        got: Vec<Option<Vec<X>>>,
        n: usize,
        width: usize,
    ) -> Result<Option<Vec<X>>> {
        if got.iter().any(Option::is_none) {
            return Ok(None);
        }
        let got: Vec<Vec<X>> = got.into_iter().flatten().collect();
        let mut all = memory::zeros(n * width, "the results")?;
        // (a column per thread: 10-NN of 1e7 points, 0.34 s of copies on one)
        crate::parallel::for_each_block(&mut all, n.max(1), |c, column| {
            for (part, got) in parts.iter().zip(&got) {
                let rows = part.out.len();
                column[part.out.clone()].copy_from_slice(&got[c * rows..(c + 1) * rows]);
            }
        });
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

//! What one step issues on the device's stream: the copies of its inputs, the launches of its
//! kernels (the preparation of tensor-core dots, the reduction, the merge of its chunks; each
//! recorded when asked) and the copy of its results back, timed.

use std::ops::Range;

use cudarc::driver::{result, sys, CudaFunction, LaunchConfig};

use super::plan::{Step, StepPlan};
use super::{gpu_error, Data, Times};
use crate::cuda::finish::{self, MERGE_THREADS};
use crate::cuda::primitives::launch;
use crate::cuda::recorded::Recorded;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Threads per block of the kernel that prepares tensor-core dots.
const PREPARE_THREADS: usize = 128;

/// What one step issues on the device's stream, from its buffer at `base`.
pub(super) struct Issue<'a> {
    pub(super) data: &'a Data<'a>,
    pub(super) step: &'a Step,
    pub(super) plan: &'a StepPlan,
    pub(super) base: sys::CUdeviceptr,
    pub(super) events: [sys::CUevent; 4],
}

impl Issue<'_> {
    fn at(&self, offset: usize) -> u64 {
        self.base + offset as u64
    }

    /// `map_err` of a failed driver call: the message is written only on failure.
    fn error<'s>(&'s self, what: &'s str) -> impl Fn(result::DriverError) -> Error + 's {
        move |e| gpu_error(self.data.device, what, e)
    }

    /// Uploads, launches and, unless the step is queued, brings back and times the step.
    pub(super) fn run(
        &self,
        host: &mut [u8],
        uploads: &[Range<usize>],
        staged: &[u8],
        mut recorded: Option<&mut Recorded>,
        times: &mut Times,
    ) -> Result<()> {
        // A step whose result stays on the device is queued: the loop that runs it (`crate::iterate`)
        // waits once, at its end, and its inputs are copied from ordinary memory, which the driver
        // stages before returning, so the page-locked buffer is free for the next step at once.
        let queued = self.data.target.is_some();
        let stream = self.data.device.stream.cu_stream();
        let events = self.events;
        // SAFETY (all the calls below): the buffer at `base` holds `regions.end` bytes and `host` at
        // least `fetch.end`; both stay untouched until the synchronisation at the end.
        unsafe {
            if queued {
                if !staged.is_empty() {
                    result::memcpy_htod_async(self.base, staged, stream).map_err(self.error("copying the inputs"))?;
                }
            } else {
                result::event::record(events[0], stream).map_err(self.error("timing"))?;
                for bytes in uploads.iter().filter(|b| !b.is_empty()) {
                    result::memcpy_htod_async(self.at(bytes.start), &host[bytes.clone()], stream)
                        .map_err(self.error("copying the inputs"))?;
                }
                result::event::record(events[1], stream).map_err(self.error("timing"))?;
            }
        }
        self.launch_kernels(&mut recorded)?;
        self.indices_as_values(&mut recorded)?;
        if queued {
            return Ok(());
        }
        let fetch = &self.plan.fetch;
        unsafe {
            result::event::record(events[2], stream).map_err(self.error("timing"))?;
            if (self.step.last || self.step.states_out) && !fetch.is_empty() {
                result::memcpy_dtoh_async(&mut host[fetch.clone()], self.at(fetch.start), stream)
                    .map_err(self.error("copying the results"))?;
            }
            result::event::record(events[3], stream).map_err(self.error("timing"))?;
            result::stream::synchronize(stream).map_err(self.error("running the kernel"))?;
            let elapsed =
                |a: usize, b: usize| result::event::elapsed(events[a], events[b]).map_or(0.0, |ms| ms as f64 / 1e3);
            times.upload += elapsed(0, 1);
            times.kernel += elapsed(1, 2);
            times.download += elapsed(2, 3);
        }
        Ok(())
    }

    /// Launches the preparation of the tensor-core dots (if any), the reduction and, unless the
    /// reduction finalises its rows itself, the merge of its chunks; each recorded when asked.
    fn launch_kernels(&self, recorded: &mut Option<&mut Recorded>) -> Result<()> {
        let (data, step, plan, regions) = (self.data, self.step, self.plan, &self.plan.regions);
        let (kernel, functions) = (&data.compiled.kernel, &data.compiled.functions());
        let (rows_out, rows_red) = (step.out.len(), step.red.len());
        let mut launch_and_record =
            |function: &CudaFunction, config: LaunchConfig, ints: &[i32], pointers: &[u64], what: &str| {
                // SAFETY: each caller passes the arguments of the kernel's generated signature (below).
                unsafe { launch(data.device, function, config, ints, pointers) }.map_err(self.error(what))?;
                if let Some(r) = recorded.as_mut() {
                    r.push(function, config, ints, pointers);
                }
                Ok::<(), Error>(())
            };
        let ints =
            [rows_out as i32, rows_red as i32, plan.chunk as i32, step.red.start as i32, plan.finalize_here as i32];
        let mut pointers: Vec<u64> =
            regions.inputs.iter().zip(data.resident).map(|(&o, r)| r.map_or(self.at(o), |m| m.pointer())).collect();
        let values = data.target.map_or(self.at(regions.values), DeviceMatrix::pointer);
        // (the running states of the earlier steps seed the K-selections: see codegen's Reducer::init)
        let running = if step.first { 0 } else { self.at(regions.running.start) };
        pointers.extend([
            self.at(regions.constants),
            self.at(regions.states),
            values,
            self.at(regions.indices),
            running,
        ]);
        let blocks = match data.ranged {
            Some(ranged) => {
                pointers.extend([self.at(regions.work), self.at(regions.red)]);
                ranged.blocks()
            }
            // (the build launched may cover fewer rows a block than the chunks were planned for)
            None => rows_out.div_ceil(kernel.tile * functions.rows),
        };
        if let (Some(prepare), Some(function)) = (kernel.prepare, &functions.prepare) {
            // Two ints, the two inputs as the reduction reads them, and the regions sized for
            // `prepare.rows(step.rows_red)` >= `prepare.rows(rows_red)` reduced rows.
            let split = [
                pointers[prepare.outer],
                pointers[prepare.inner],
                self.at(regions.split),
                self.at(regions.split_norms),
            ];
            let grid = prepare.rows(rows_red).div_ceil(PREPARE_THREADS).max(1) as u32;
            let config =
                LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (PREPARE_THREADS as u32, 1, 1), shared_mem_bytes: 0 };
            let ints = [rows_out as i32, rows_red as i32];
            launch_and_record(function, config, &ints, &split, "launching the kernel that prepares the dots")?;
            pointers.extend([self.at(regions.split), self.at(regions.split_norms)]);
        }
        // Five ints, one pointer per input (the step's rows, as the kernel indexes them), the
        // numbers, the states of `chunks` x `rows_out` rows, the results of `rows_out` rows and
        // their running states or null (then the ranges', then the prepared dots').
        let config = LaunchConfig {
            grid_dim: (blocks as u32, plan.chunks as u32, 1),
            block_dim: (kernel.tile as u32, 1, 1),
            shared_mem_bytes: kernel.dynamic_shared as u32,
        };
        launch_and_record(&functions.reduce, config, &ints, &pointers, "launching the kernel")?;
        if !plan.finalize_here {
            // Four ints, then the chunk states, running states and results as above.
            let ints = [rows_out as i32, plan.chunks as i32, step.first as i32, step.last as i32];
            let pointers = [self.at(regions.states), self.at(regions.running.start), values, self.at(regions.indices)];
            let grid = finish::merge_blocks(data.formula.reduction.kind, rows_out, kernel.state_len) as u32;
            let config =
                LaunchConfig { grid_dim: (grid, 1, 1), block_dim: (MERGE_THREADS as u32, 1, 1), shared_mem_bytes: 0 };
            launch_and_record(&functions.merge, config, &ints, &pointers, "launching the merge kernel")?;
        }
        Ok(())
    }
}

impl Issue<'_> {
    /// A selection that returns indices only, its result kept on the device: the indices written
    /// into the kept matrix as numbers (`crate::program` uses them as values), once the results are
    /// final.
    fn indices_as_values(&self, recorded: &mut Option<&mut Recorded>) -> Result<()> {
        let (data, step) = (self.data, self.step);
        let kind = data.formula.reduction.kind;
        let Some(target) = data.target.filter(|_| kind.returns_indices() && !kind.returns_values() && step.last) else {
            return Ok(());
        };
        let name = match target.precision {
            Precision::F64 => "rkeops_indices_as_f64",
            _ => "rkeops_indices_as_f32",
        };
        let function = data.device.utility(name)?;
        let n = step.out.len() * data.compiled.kernel.width;
        let config = LaunchConfig {
            grid_dim: (n.div_ceil(MERGE_THREADS).max(1) as u32, 1, 1),
            block_dim: (MERGE_THREADS as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let (ints, pointers) = ([n as i32], [self.at(self.plan.regions.indices), target.pointer()]);
        // SAFETY: the kernel takes an int and two pointers: `n` ints in the indices region, and the
        // kept matrix of `n` values (checked by `check_target`).
        unsafe { launch(data.device, &function, config, &ints, &pointers) }
            .map_err(self.error("launching the kernel that writes indices as numbers"))?;
        if let Some(r) = recorded.as_mut() {
            r.push(&function, config, &ints, &pointers);
        }
        Ok(())
    }
}

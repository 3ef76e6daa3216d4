//! One CUDA device as a backend: the kernels a call needs, from the device's own cache, then the
//! call's launches (`launch`). A call whose result stays on the device (`crate::iterate`) runs
//! here too.

use std::sync::Arc;

use super::builds;
use super::codegen::{KernelOptions, Selection, Variant};
use super::device::{Compiled, Device};
use super::dtype::Dtype;
use super::launch::{self, Kept};
use crate::api::RunOptions;
use crate::backend::{BackendDevice, Call, Columns, Timings};
use crate::error::Result;
use crate::formula::Formula;
use crate::precision::ForPrecision;
use crate::ranges::BlockRanges;
use crate::real::{Real, Stored};

/// The most work (`call_work`) of a call that a kernel's fast build runs. A fast build runs up to
/// ~40 x slower than the optimised one: about 1-3e11 units of work a second (H200, 2e5 x 2e5 points,
/// D = 3 to 64, 2026-11-29), so at most ~0.1 s here, against the 0.2-2 s of compilation it saves; a
/// larger first call compiles the optimised build and runs it.
const FAST_BUILD_WORK: f64 = 1e10;

/// A call's work: its pairs of rows times the components of the inputs (and 1).
fn call_work(call: &Call, mean_reduced: f64) -> f64 {
    let components: usize = call.formula.variables.iter().map(|v| v.dim).sum();
    call.out_and_reduced().0 as f64 * mean_reduced * (1 + components) as f64
}

impl Device {
    /// The kernels of `call` on this device (its variant for this device's architecture, its
    /// storage of selections for the call's mean reduced range), compiled on first use.
    pub fn kernels_for(&self, call: &Call) -> Result<Arc<Compiled>> {
        let (_, n_red) = call.out_and_reduced();
        let mean_reduced = call.ranges.map_or(n_red as f64, |b| b.mean_reduced());
        let little = call_work(call, mean_reduced) <= FAST_BUILD_WORK;
        let fast_first = call.options.tuning.fast_compile && little;
        let compiled = self.kernels_of(call.formula, call.options, mean_reduced, call.ranges, fast_first)?;
        if !little && compiled.is_fast_build() {
            // (a call of much work on a kernel whose optimised build is still compiling waits for it,
            // or for the builds queued to end if it could not be swapped in)
            builds::wait_until(std::time::Duration::from_secs(300), || !compiled.is_fast_build());
        }
        Ok(compiled)
    }

    /// The kernels of `formula` with `options` for a mean reduced range of `mean_reduced` rows (and
    /// `ranges`, if block-sparse), compiled on first use (a fast build first where `fast_first`).
    fn kernels_of(
        &self,
        formula: &Formula,
        options: &RunOptions,
        mean_reduced: f64,
        ranges: Option<&BlockRanges>,
        fast_first: bool,
    ) -> Result<Arc<Compiled>> {
        let dtype = Dtype::of(options.precision);
        let tuning = &options.tuning;
        let selection = Selection::for_rows(formula, mean_reduced, tuning.gpu_selection);
        let variant = Variant::choose(formula, dtype, ranges, self.arch, tuning);
        let kernel = KernelOptions {
            unroll: tuning.unroll,
            group_work: tuning.group_work,
            ..KernelOptions::new(dtype, options.sum_scheme, variant, selection)
        };
        self.kernels(formula, kernel, options.cache_dir.as_deref(), fast_first)
    }

    /// Compiles the optimised kernels of dense calls of `formula` with `options` over each of
    /// `reduced_rows` reduced rows (which choose how a selection is kept), into the disk cache,
    /// without running them (`rkeops_precompile()`); those already built are loaded.
    pub fn precompile(&self, formula: &Formula, options: &RunOptions, reduced_rows: &[f64]) -> Result<()> {
        for &rows in reduced_rows {
            self.kernels_of(formula, options, rows.max(1.0), None, false)?;
        }
        Ok(())
    }

    /// `evaluate`, the values written into `kept`'s matrix on this device and its launches only
    /// queued (`OnDevice::evaluate_into`: a loop's step).
    pub fn evaluate_into(&self, call: &Call, kept: Kept, timings: &mut Timings) -> Result<()> {
        call.options.precision.dispatch(KeptCall { device: self, call, kept, timings })
    }

    fn compile_timed(&self, call: &Call, timings: &mut Timings) -> Result<Arc<Compiled>> {
        let clock = std::time::Instant::now();
        let compiled = self.kernels_for(call)?;
        timings.push(("compile or load", clock.elapsed().as_secs_f64()));
        Ok(compiled)
    }
}

impl BackendDevice for Device {
    fn describe(&self) -> String {
        format!("GPU {} ({})", self.ordinal, self.name)
    }

    fn evaluate<S: Stored, T: Real>(&self, call: &Call, timings: &mut Timings) -> Result<Columns> {
        let compiled = self.compile_timed(call, timings)?;
        let options = call.options;
        let poll = |done, total| {
            if let Some(report) = options.progress {
                report(done, total);
            }
            options.interrupt.is_some_and(|interrupted| interrupted())
        };
        launch::evaluate::<S, T>(self, &compiled, call, &poll, None, timings)
    }
}

/// A call whose values stay on the device, in the types of its precision.
struct KeptCall<'a> {
    device: &'a Device,
    call: &'a Call<'a>,
    kept: Kept<'a>,
    timings: &'a mut Timings,
}

impl ForPrecision for KeptCall<'_> {
    type Output = Result<()>;

    fn run<S: Stored, T: Real>(self) -> Result<()> {
        let KeptCall { device, call, kept, timings } = self;
        let compiled = device.compile_timed(call, timings)?;
        // (queued: the loop that queues it asks for interrupts)
        launch::evaluate::<S, T>(device, &compiled, call, &|_, _| false, Some(kept), timings).map(|_| ())
    }
}

//! The rows a call reduces (`Extent`: its part of the output and reduced rows, whether they come
//! back as results or states, whether the kernels index the inputs whole), the check of a result
//! kept on the device, and the room for what comes back.

use std::ops::Range;

use crate::backend::{Call, Columns, Part};
use crate::cuda::codegen;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};
use crate::formula::Formula;
use crate::memory;

/// The rows a call reduces: `part` of the `n_out` output rows against the `n_red` reduced rows;
/// `states_out` when its part of the reduced range is not all of it (states come back, not results);
/// `whole` when the kernels index the inputs whole (inputs or a result kept on the device, ranges).
pub(super) struct Extent {
    pub(super) n_out: usize,
    pub(super) n_red: usize,
    pub(super) part: Part,
    pub(super) states_out: bool,
    pub(super) whole: bool,
}

impl Extent {
    pub(super) fn new(
        call: &Call,
        resident: &[Option<&DeviceMatrix>],
        target: Option<&DeviceMatrix>,
    ) -> Result<Extent> {
        let (n_i, n_j) = call.sizes;
        let (n_out, n_red) = if call.formula.reduction.axis == 0 { (n_i, n_j) } else { (n_j, n_i) };
        if n_out > i32::MAX as usize || n_red > i32::MAX as usize {
            return Err(Error::Gpu(format!("at most {} rows per variable are supported on the GPU", i32::MAX)));
        }
        let part = call.part.cloned().unwrap_or(Part { out: 0..n_out, red: 0..n_red });
        let states_out = part.red != (0..n_red);
        // The kernels index a resident matrix, and a block-sparse reduction its inputs, whole: their
        // rows cannot be split into blocks.
        let whole = resident.iter().any(Option::is_some) || call.ranges.is_some() || target.is_some();
        // (ranges: only their rows, at the boundaries of their pieces of work)
        let splittable = resident.iter().all(Option::is_none) && target.is_none();
        let split = states_out || part.out != (0..n_out);
        if part.out.end > n_out
            || part.red.end > n_red
            || (split && !splittable)
            || (states_out && call.ranges.is_some())
        {
            return Err(Error::Invalid(format!(
                "this reduction cannot be split into the part {part:?} (inputs or a result kept on a device, or ranges)"
            )));
        }
        Ok(Extent { n_out, n_red, part, states_out, whole })
    }

    /// The rows the kernels see: those of the part, or all of them when they index the inputs whole.
    pub(super) fn spans(&self) -> (Range<usize>, Range<usize>) {
        match self.whole {
            true => (0..self.n_out, 0..self.n_red),
            false => (self.part.out.clone(), self.part.red.clone()),
        }
    }
}

/// A result kept on the device holds the values of the whole reduction (its indices when it returns
/// only those), in the arithmetic type.
pub(super) fn check_target<S, T>(extent: &Extent, width: usize, target: Option<&DeviceMatrix>) -> Result<()> {
    let Some(m) = target else { return Ok(()) };
    let stored = std::mem::size_of::<S>() == std::mem::size_of::<T>();
    if !stored || (m.nrow, m.ncol) != (extent.n_out, width) {
        let n_out = extent.n_out;
        return Err(Error::Invalid(format!(
            "a result kept on the device must be the values (or the indices, as numbers) of an {n_out} x {width} reduction in float32 or float64, not {m:?}"
        )));
    }
    Ok(())
}

impl Columns {
    /// Room for what comes back to the host for `part`: its results (none when they stay on the
    /// device), or its reduction states.
    pub(super) fn for_part(
        formula: &Formula,
        kernel: &codegen::Kernel,
        part: &Part,
        states_out: bool,
        target: Option<&DeviceMatrix>,
    ) -> Result<Columns> {
        let kind = formula.reduction.kind;
        let results = part.out.len().saturating_mul(kernel.width);
        let host_results = |wanted: bool| wanted && target.is_none() && !states_out;
        Ok(Columns {
            values: host_results(kind.returns_values()).then(|| memory::zeros(results, "the results")).transpose()?,
            indices: host_results(kind.returns_indices())
                .then(|| memory::zeros(results, "the result's indices"))
                .transpose()?,
            states: states_out
                .then(|| memory::zeros(part.out.len().saturating_mul(kernel.state_len), "the reduction states"))
                .transpose()?,
        })
    }
}

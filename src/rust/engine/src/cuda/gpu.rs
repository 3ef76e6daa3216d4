//! The GPU backend as the engine's factory (`crate::choose`) sees it: a device opened by its
//! ordinal, the GPUs a call may share with it (`RunOptions::gpus`), and a loop's matrices kept in
//! its memory. What a device is and how several share a call stay behind this type.

use std::sync::Arc;

use super::device::{self, Device};
use super::several::Several;
use super::OnDevice;
use crate::api::RunOptions;
use crate::backend::{evaluate_in_precision, BackendDevice, Call, Columns, Timings};
use crate::error::Result;
use crate::formula::Formula;
use crate::precision::Precision;

pub struct Gpu(Arc<Device>);

impl Gpu {
    /// GPU `ordinal`, or an error saying why it cannot be used.
    pub fn open(ordinal: usize) -> Result<Gpu> {
        device::device(ordinal).map(Gpu)
    }

    pub fn ordinal(&self) -> usize {
        self.0.ordinal
    }

    /// `call` on this GPU, or on the GPUs of `RunOptions::gpus` when they can share it; its
    /// results and what computed them.
    pub fn evaluate(&self, call: &Call, timings: &mut Timings) -> Result<(Columns, String)> {
        match self.shared_gpus(call)? {
            Some(several) => Ok((evaluate_in_precision(&several, call, timings)?, several.describe())),
            None => Ok((evaluate_in_precision(&*self.0, call, timings)?, self.0.describe())),
        }
    }

    /// Compiles the kernels of dense calls of `formula` (`Device::precompile`) on this GPU and the
    /// other GPUs of `options.gpus` (a call may share them).
    pub fn precompile(&self, formula: &Formula, options: &RunOptions, reduced_rows: &[f64]) -> Result<()> {
        self.0.precompile(formula, options, reduced_rows)?;
        for &g in options.gpus.iter().filter(|&&g| g != self.0.ordinal) {
            device::device(g)?.precompile(formula, options, reduced_rows)?;
        }
        Ok(())
    }

    /// A loop's matrices kept on this GPU in `precision`'s storage (`crate::buffers::Buffers`).
    pub fn buffers(&self, precision: Precision) -> OnDevice {
        OnDevice::new(self.0.clone(), precision)
    }

    /// The GPUs of `RunOptions::gpus` (this one first) when they can share `call`: its inputs
    /// from the host, not empty.
    fn shared_gpus(&self, call: &Call) -> Result<Option<Several>> {
        let alone = call.inputs.iter().any(|x| x.kept().is_some()) || call.sizes.0 == 0 || call.sizes.1 == 0;
        match alone {
            true => Ok(None),
            false => self.several(&call.options.gpus),
        }
    }

    /// The GPUs of `gpus` (this one first), where it lists more than one.
    pub fn several(&self, gpus: &[usize]) -> Result<Option<Several>> {
        if gpus.len() <= 1 {
            return Ok(None);
        }
        let mut ordinals = vec![self.0.ordinal];
        ordinals.extend(&gpus[1..]);
        Several::open(&ordinals).map(Some)
    }
}

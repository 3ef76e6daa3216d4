//! Which backend computes: the one place outside `cpu` and `cuda` that names them. A call runs on
//! the CPU or on a GPU (`cuda::Gpu`, which may share it with other GPUs); a loop's matrices stay
//! on that GPU or in host memory. Everything else reaches a backend through its traits (`backend`,
//! `buffers`), as the precision becomes types once (`backend::evaluate_in_precision`).

use crate::api::{Backend, RunOptions};
use crate::backend::{evaluate_in_precision, BackendDevice, Call, Columns, Timings};
use crate::buffers::{Buffers, HostMemory};
use crate::cpu::Cpu;
use crate::cuda::Gpu;
use crate::error::Result;
use crate::precision::Precision;

/// The backend of a call, from its options.
pub(crate) enum Chosen {
    Cpu,
    Gpu(Gpu),
}

/// Work that runs with a loop's matrices wherever they are kept (`Chosen::with_buffers`).
pub(crate) trait ForBuffers<'a> {
    type Output;
    fn run<B: Buffers<'a>>(self, buffers: B) -> Self::Output;
}

/// Work that runs with a loop's rows spread over several devices (`Chosen::with_spread`): given
/// the devices' relative speeds, what computes, and `open(t)`, device t's memory for the thread
/// that calls it.
pub(crate) trait ForSpread<'a> {
    type Output;
    fn run<B: Buffers<'a>>(
        self,
        weights: &[f64],
        description: &str,
        open: &(dyn Fn(usize) -> Result<B> + Sync),
    ) -> Self::Output;
}

/// The backend `options` choose: the GPU asked for, or an error saying why it cannot be used;
/// with `Backend::Auto`, the option's device where one can be used, the CPU otherwise.
pub(crate) fn choose(options: &RunOptions) -> Result<Chosen> {
    Ok(match options.backend {
        Backend::Cpu => Chosen::Cpu,
        Backend::Gpu(d) => Chosen::Gpu(Gpu::open(d)?),
        Backend::Auto => Gpu::open(options.device).map_or(Chosen::Cpu, Chosen::Gpu),
    })
}

impl Chosen {
    /// The GPU, if it is one.
    pub(crate) fn gpu(&self) -> Option<usize> {
        match self {
            Chosen::Cpu => None,
            Chosen::Gpu(gpu) => Some(gpu.ordinal()),
        }
    }

    /// `call` in the types of its precision, on this backend; returns its results and what
    /// computed them.
    pub(crate) fn evaluate(&self, call: &Call, timings: &mut Timings) -> Result<(Columns, String)> {
        match self {
            Chosen::Cpu => Ok((evaluate_in_precision(&Cpu, call, timings)?, Cpu.describe())),
            Chosen::Gpu(gpu) => gpu.evaluate(call, timings),
        }
    }

    /// `work` over the GPUs of `options.gpus` (this one first) in the precision's storage; None
    /// where the options name one device (the CPU, or one GPU).
    pub(crate) fn with_spread<'a, W: ForSpread<'a>>(&self, options: &RunOptions, work: W) -> Result<Option<W::Output>> {
        let Chosen::Gpu(gpu) = self else { return Ok(None) };
        let Some(several) = gpu.several(&options.gpus)? else { return Ok(None) };
        let precision = options.precision;
        let open = |t: usize| several.buffers(t, precision);
        Ok(Some(work.run(&several.weights(), &several.describe(), &open)))
    }

    /// `work` with a loop's matrices on this GPU when `on_device` (in `precision`'s storage),
    /// in host memory otherwise.
    pub(crate) fn with_buffers<'a, W: ForBuffers<'a>>(&self, precision: Precision, on_device: bool, work: W) -> W::Output {
        match self {
            Chosen::Gpu(gpu) if on_device => work.run(gpu.buffers(precision)),
            _ => work.run(HostMemory::default()),
        }
    }
}

//! Which backend computes: the one place outside `cpu` and `cuda` that names them. A call runs on
//! the CPU, one GPU, or several GPUs sharing it; a loop's matrices stay on one GPU or in host
//! memory. Everything else reaches a backend through its traits (`backend`, `buffers`), as the
//! precision becomes types once (`Precision::dispatch`).

use std::sync::Arc;

use crate::api::{Backend, RunOptions};
use crate::backend::{BackendDevice, Call, Columns, Timings};
use crate::buffers::{Buffers, HostMemory};
use crate::cpu::Cpu;
use crate::cuda::several::Several;
use crate::cuda::{Device, OnDevice};
use crate::error::Result;
use crate::precision::{ForPrecision, Precision};
use crate::real::{Real, Stored};

/// The backend of a call, from its options.
pub(crate) enum Chosen {
    Cpu,
    Gpu(Arc<Device>),
}

/// Work that runs with a loop's matrices wherever they are kept (`Chosen::with_buffers`).
pub(crate) trait ForBuffers<'a> {
    type Output;
    fn run<B: Buffers<'a>>(self, buffers: B) -> Self::Output;
}

/// The backend `options` choose: the GPU asked for, or an error saying why it cannot be used;
/// with `Backend::Auto`, the option's device where one can be used, the CPU otherwise.
pub(crate) fn choose(options: &RunOptions) -> Result<Chosen> {
    Ok(match options.backend {
        Backend::Cpu => Chosen::Cpu,
        Backend::Gpu(d) => Chosen::Gpu(crate::cuda::device::device(d)?),
        Backend::Auto => crate::cuda::device::device(options.device).map_or(Chosen::Cpu, Chosen::Gpu),
    })
}

impl Chosen {
    /// The GPU, if it is one.
    pub(crate) fn gpu(&self) -> Option<usize> {
        match self {
            Chosen::Cpu => None,
            Chosen::Gpu(d) => Some(d.ordinal),
        }
    }

    /// `call` in the types of its precision, on this backend (on the GPUs of `RunOptions::gpus`
    /// when they can share it); returns its results and what computed them.
    pub(crate) fn evaluate(&self, call: &Call, timings: &mut Timings) -> Result<(Columns, String)> {
        match self {
            Chosen::Cpu => Ok((on(&Cpu, call, timings)?, Cpu.describe())),
            Chosen::Gpu(device) => match shared_gpus(device, call)? {
                Some(several) => Ok((on(&several, call, timings)?, several.describe())),
                None => Ok((on(&**device, call, timings)?, device.describe())),
            },
        }
    }

    /// `work` with a loop's matrices on this GPU when `on_device` (in `precision`'s storage),
    /// in host memory otherwise.
    pub(crate) fn with_buffers<'a, W: ForBuffers<'a>>(&self, precision: Precision, on_device: bool, work: W) -> W::Output {
        match self {
            Chosen::Gpu(device) if on_device => work.run(OnDevice { device: device.clone(), precision }),
            _ => work.run(HostMemory::default()),
        }
    }
}

/// The GPUs of `RunOptions::gpus` (the call's device first) when they can share this call: its
/// inputs from the host, not empty.
fn shared_gpus(device: &Device, call: &Call) -> Result<Option<Several>> {
    let gpus = &call.options.gpus;
    let alone = call.inputs.iter().any(|x| x.kept().is_some()) || call.sizes.0 == 0 || call.sizes.1 == 0;
    if gpus.len() <= 1 || alone {
        return Ok(None);
    }
    let mut ordinals = vec![device.ordinal];
    ordinals.extend(&gpus[1..]);
    Several::open(&ordinals).map(Some)
}

/// `call` on `device`, in the types of the call's precision: the one place a precision becomes
/// types for a run.
fn on<B: BackendDevice>(device: &B, call: &Call, timings: &mut Timings) -> Result<Columns> {
    call.options.precision.dispatch(TypedCall { device, call, timings })
}

struct TypedCall<'a, B> {
    device: &'a B,
    call: &'a Call<'a>,
    timings: &'a mut Timings,
}

impl<B: BackendDevice> ForPrecision for TypedCall<'_, B> {
    type Output = Result<Columns>;

    fn run<S: Stored, T: Real>(self) -> Result<Columns> {
        self.device.evaluate::<S, T>(self.call, self.timings)
    }
}

//! The bytes a row of a call takes on the device, the kernel's geometry there, and the blocks of
//! rows that fit in the call's budget of device memory.

use super::outer_category;
use crate::api::RunOptions;
use crate::cuda::codegen;
use crate::cuda::device::Device;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::schedule::steps::{self, Blocks, Geometry, Sizes};

/// The bytes each row takes on the device (inputs kept on it need no room).
pub(super) fn device_sizes<S, T>(
    formula: &Formula,
    kernel: &codegen::Kernel,
    resident: &[Option<&DeviceMatrix>],
) -> Sizes {
    let outer = outer_category(formula);
    let dims = |keep: &dyn Fn(Category) -> bool| -> usize {
        let uploaded = formula.variables.iter().zip(resident).filter(|(_, r)| r.is_none());
        uploaded.filter(|(v, _)| keep(v.category)).map(|(v, _)| v.dim).sum()
    };
    let (s, t) = (std::mem::size_of::<S>(), std::mem::size_of::<T>());
    let red = &formula.reduction.kind;
    // (the reduced rows of tensor-core dots, split for them: a little more for the padding)
    let prepared = kernel.prepare.map_or(0, |p| p.split_bytes + p.norm_bytes);
    Sizes {
        input_out: dims(&|c| c == outer) * s,
        input_red: dims(&|c| c != outer && c != Category::Param) * s + prepared,
        fixed: dims(&|c| c == Category::Param) * s + kernel.constants.len() * t,
        state: kernel.state_len * 8,
        results: kernel.width * (if red.returns_values() { t } else { 0 } + if red.returns_indices() { 4 } else { 0 }),
    }
}

/// The kernel's geometry on this device.
pub(super) fn geometry(device: &Device, kernel: &codegen::Kernel) -> Geometry {
    let granule = if kernel.prepare.is_some() { kernel.tile } else { steps::WARP };
    Geometry { tile: kernel.tile, rows: kernel.rows, multiprocessors: device.multiprocessors, granule }
}

/// The blocks of `n_out x n_red` that fit in the call's budget of device memory: 80% of what is
/// free (with what this device's workspace already holds, `held`), or `RunOptions::gpu_memory`.
pub(super) fn fit_blocks(
    device: &Device,
    kernel: &codegen::Kernel,
    sizes: &Sizes,
    rows: (usize, usize),
    held: usize,
    options: &RunOptions,
) -> Result<Blocks> {
    let free = device.ctx.mem_get_info().map(|(free, _)| free).unwrap_or(usize::MAX);
    let budget = options.gpu_memory.unwrap_or(usize::MAX).min(free.saturating_add(held) / 10 * 8);
    Blocks::fit(geometry(device, kernel), sizes, rows, budget).ok_or_else(|| {
        Error::Memory(format!(
            "GPU: device {} ({}) has too little free memory ({:.2} GB) for even one block of rows; use the CPU",
            device.ordinal,
            device.name,
            budget as f64 / 1e9
        ))
    })
}

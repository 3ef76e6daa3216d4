//! Values copied, and matrices summed into others, on the device: the gradient of a program keeps
//! its forward trajectory with copies and adds each step's gradients to its inputs' adjoints with
//! one launch of sums (`crate::program_gradient`).

use cudarc::driver::{result, LaunchConfig};

use super::device::Device;
use super::launch::gpu_error;
use super::recorded::Recorded;
use crate::error::{Error, Result};
use crate::precision::Precision;

const THREADS: usize = 256;
/// The most matrices summed into one (`RKEOPS_SOURCES` of the utility kernels).
pub const SOURCES: usize = 8;

fn config(n: usize, rows: usize) -> LaunchConfig {
    LaunchConfig {
        grid_dim: (n.div_ceil(THREADS).max(1) as u32, rows as u32, 1),
        block_dim: (THREADS as u32, 1, 1),
        shared_mem_bytes: 0,
    }
}

/// Queues the copy of the `n` values at `from` to `to` (float32, or float64 for `Precision::F64`)
/// on the stream of `device`.
pub fn copy(device: &Device, n: usize, from: u64, to: u64, precision: Precision) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    let name = if precision == Precision::F64 { "rkeops_copy_f64" } else { "rkeops_copy_f32" };
    let function = device.utility(name)?;
    // SAFETY: the kernel takes an int and two pointers, each to `n` values of the precision's type.
    unsafe { super::primitives::launch(device, &function, config(n, 1), &[n as i32], &[from, to]) }
        .map_err(|e| gpu_error(device, "launching a copy", e))
}

/// A matrix of `n` values at `to` that receives the sum of the matrices at `from` (as many values
/// each): added to its values, or replacing them when `set` (then with no `from`, it is set to 0).
#[derive(Debug, Clone)]
pub struct Sum {
    pub to: u64,
    pub n: usize,
    pub set: bool,
    pub from: Vec<u64>,
}

/// The launch of the sums `sums` (at most `SOURCES` matrices each, distinct `to`), recorded with
/// their table on the device: `replay` queues them.
pub fn sums(device: &Device, sums: &[Sum], precision: Precision) -> Result<Recorded> {
    let row = 4 + SOURCES;
    let mut table = vec![0i64; row * sums.len()];
    for (d, sum) in sums.iter().enumerate() {
        if sum.from.len() > SOURCES {
            return Err(Error::Invalid(format!("{} matrices summed into one: at most {SOURCES}", sum.from.len())));
        }
        let t = &mut table[d * row..(d + 1) * row];
        t[..4].copy_from_slice(&[sum.to as i64, sum.n as i64, sum.set as i64, sum.from.len() as i64]);
        for (slot, &from) in t[4..].iter_mut().zip(&sum.from) {
            *slot = from as i64;
        }
    }
    let mut recorded = Recorded::new(device, table.len() * 8)?;
    if sums.is_empty() {
        return Ok(recorded);
    }
    // SAFETY: the record's buffer holds the table's bytes; the copy completes before returning.
    unsafe { result::memcpy_htod_sync(recorded.pointer(), &table) }
        .map_err(|e| gpu_error(device, "copying a table of sums", e))?;
    let name = if precision == Precision::F64 { "rkeops_sums_f64" } else { "rkeops_sums_f32" };
    let n = sums.iter().map(|s| s.n).max().unwrap_or(0);
    recorded.push(&device.utility(name)?, config(n, sums.len()), &[sums.len() as i32], &[recorded.pointer()]);
    Ok(recorded)
}

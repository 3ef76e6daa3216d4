//! What every part of the CUDA backend that moves data or launches kernels shares: the raw launch
//! of a kernel, and typed views of byte regions of the page-locked buffers.

use std::sync::atomic::{AtomicU64, Ordering};

use cudarc::driver::{result, CudaFunction, LaunchConfig, PushKernelArg};

use super::device::Device;

/// Kernels and graphs launched by this process (`launches`).
static LAUNCHES: AtomicU64 = AtomicU64::new(0);

/// How many kernels (and CUDA graphs, each counted once) this process has launched: benchmarks
/// count a loop's launches as the difference of two readings.
pub fn launches() -> u64 {
    LAUNCHES.load(Ordering::Relaxed)
}

/// Counts one launch (`launches`).
pub(crate) fn count_launch() {
    LAUNCHES.fetch_add(1, Ordering::Relaxed);
}

/// Launches `function` with these int arguments, then these device pointers.
///
/// # Safety
/// The arguments must be those of the kernel's signature, the pointers valid for what it accesses.
pub unsafe fn launch(
    device: &Device,
    function: &CudaFunction,
    config: LaunchConfig,
    ints: &[i32],
    pointers: &[u64],
) -> std::result::Result<(), result::DriverError> {
    count_launch();
    let mut builder = device.stream.launch_builder(function);
    for i in ints {
        builder.arg(i);
    }
    for p in pointers {
        builder.arg(p);
    }
    builder.launch(config).map(|_| ())
}

/// `len` values of type `X` at the start of `bytes` (a region of the page-locked buffer, whose
/// offsets are aligned to 256 bytes).
pub fn view<X>(bytes: &[u8], len: usize) -> &[X] {
    assert!(
        bytes.len() >= len * std::mem::size_of::<X>() && bytes.as_ptr().align_offset(std::mem::align_of::<X>()) == 0
    );
    // SAFETY: in bounds and aligned (checked above); X is a plain number type.
    unsafe { std::slice::from_raw_parts(bytes.as_ptr().cast(), len) }
}

pub fn view_mut<X>(bytes: &mut [u8], len: usize) -> &mut [X] {
    assert!(
        bytes.len() >= len * std::mem::size_of::<X>() && bytes.as_ptr().align_offset(std::mem::align_of::<X>()) == 0
    );
    // SAFETY: as in `view`, and borrowed mutably.
    unsafe { std::slice::from_raw_parts_mut(bytes.as_mut_ptr().cast(), len) }
}

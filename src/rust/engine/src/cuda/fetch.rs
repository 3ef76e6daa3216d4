//! Values of a matrix kept on a GPU on their way to the host (`Buffers::fetch`): a copy into
//! page-locked memory queued on the device's stream and an event recorded after it, so that the
//! host waits for the copy and the work queued before it, not for the work queued after (a
//! program's next iteration, queued before the host reads the last one's checks).

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};

use super::device::Device;
use super::guard::guarded;
use super::resident::{bytes_per_value, DeviceMatrix};
use crate::error::{Error, Result};
use crate::precision::Precision;

/// Page-locked host memory and the event after the copy into it; reused from fetch to fetch.
pub struct Staging {
    ctx: Arc<CudaContext>,
    host: *mut u8,
    bytes: usize,
    event: sys::CUevent,
}

impl Staging {
    fn new(ctx: Arc<CudaContext>, bytes: usize) -> std::result::Result<Staging, result::DriverError> {
        ctx.bind_to_thread()?;
        let bytes = bytes.max(1).div_ceil(4096) * 4096;
        let event = result::event::create(sys::CUevent_flags::CU_EVENT_DISABLE_TIMING)?;
        // SAFETY: page-locked memory of `bytes` bytes, freed in `drop`.
        match unsafe { result::malloc_host(bytes, 0) } {
            Ok(host) => Ok(Staging { ctx, host: host.cast(), bytes, event }),
            Err(e) => {
                // SAFETY: just created, never recorded.
                let _ = unsafe { result::event::destroy(event) };
                Err(e)
            }
        }
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: ours; a copy still queued into `host` is waited for before it is freed.
        unsafe {
            let _ = result::event::synchronize(self.event);
            let _ = result::event::destroy(self.event);
            let _ = result::free_host(self.host.cast());
        }
    }
}

/// A matrix's values on their way to the host.
pub struct Fetch {
    staging: Staging,
    len: usize,
    precision: Precision,
}

impl Fetch {
    /// Queues the copy of `m`'s values (a matrix of `device`) into `spare` when it is large enough,
    /// else into new memory.
    pub fn queue(device: &Device, m: &DeviceMatrix, spare: Option<Staging>) -> Result<Fetch> {
        let (len, precision) = (m.nrow * m.ncol, m.precision);
        let bytes = len * bytes_per_value(precision);
        let failed = |e| Error::Gpu(format!("copying a matrix from GPU {}: {e:?}", device.ordinal));
        guarded("copying a matrix from the GPU", || {
            let staging = match spare.filter(|s| s.bytes >= bytes) {
                Some(s) => s,
                None => Staging::new(device.ctx.clone(), bytes).map_err(failed)?,
            };
            device.ctx.bind_to_thread().map_err(failed)?;
            let stream = device.stream.cu_stream();
            // SAFETY: `host` holds at least `bytes` bytes, page-locked, kept (and waited for before
            // being freed) by `staging`; the matrix holds `len` values of `precision`.
            unsafe {
                let host = std::slice::from_raw_parts_mut(staging.host, bytes);
                result::memcpy_dtoh_async(host, m.pointer(), stream).map_err(failed)?;
                result::event::record(staging.event, stream).map_err(failed)?;
            }
            Ok(Fetch { staging, len, precision })
        })
    }

    /// Waits for the copy: the values, and the memory they came through, to reuse.
    pub fn values(self) -> Result<(Vec<f64>, Staging)> {
        let Fetch { staging, len, precision } = self;
        guarded("copying a matrix from the GPU", || {
            // SAFETY: an event of this context, recorded after the copy.
            unsafe { result::event::synchronize(staging.event) }
                .map_err(|e| Error::Gpu(format!("waiting for a copy from the GPU: {e:?}")))?;
            // SAFETY: the copy into `host` is done: `len` values of `precision`, aligned (page-locked
            // memory starts on a page).
            let values = unsafe {
                match precision {
                    Precision::F16 => {
                        let h = std::slice::from_raw_parts(staging.host as *const u16, len);
                        h.iter().map(|&b| half::f16::from_bits(b).to_f64()).collect()
                    }
                    Precision::F32 => {
                        std::slice::from_raw_parts(staging.host as *const f32, len).iter().map(|&x| x as f64).collect()
                    }
                    Precision::F64 => std::slice::from_raw_parts(staging.host as *const f64, len).to_vec(),
                }
            };
            Ok(values)
        })
        .map(|values| (values, staging))
    }
}

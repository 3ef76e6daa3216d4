//! The memory a device keeps between calls: one device buffer that holds everything a reduction
//! needs (inputs, states, results), one page-locked host buffer through which inputs and results
//! travel asynchronously, and the events that time the phases. Both buffers only grow, so that an
//! iterative algorithm allocates nothing after its first call; `release` gives them back.

use std::os::raw::c_void;

use cudarc::driver::{result, sys};

use crate::error::{Error, Result};

/// Offsets within a buffer are aligned to this (the driver's own allocation granule).
pub const ALIGN: usize = 256;
/// Buffers grow by whole multiples of this.
const GRANULE: usize = 1 << 20;

/// Byte offsets of consecutive regions, each aligned to `ALIGN`.
#[derive(Default)]
pub struct Layout {
    pub bytes: usize,
}

impl Layout {
    /// Reserves `bytes` (nothing for 0) and returns the region's offset.
    pub fn push(&mut self, bytes: usize) -> usize {
        let offset = self.bytes.div_ceil(ALIGN) * ALIGN;
        self.bytes = offset + bytes;
        offset
    }
}

pub struct Workspace {
    device: sys::CUdeviceptr,
    device_bytes: usize,
    host: *mut u8,
    host_bytes: usize,
    /// Recorded around the upload, the kernels and the download, in that order.
    pub events: [sys::CUevent; 4],
}

// SAFETY: the raw pointers are owned by the workspace, which its device keeps behind a mutex.
unsafe impl Send for Workspace {}

impl Workspace {
    pub fn new() -> Result<Workspace> {
        let mut events = [std::ptr::null_mut(); 4];
        for e in &mut events {
            *e = result::event::create(sys::CUevent_flags::CU_EVENT_DEFAULT)
                .map_err(|e| Error::Gpu(format!("creating an event: {e:?}")))?;
        }
        Ok(Workspace { device: 0, device_bytes: 0, host: std::ptr::null_mut(), host_bytes: 0, events })
    }

    /// Bytes held on the device and in page-locked host memory.
    pub fn held(&self) -> (usize, usize) {
        (self.device_bytes, self.host_bytes)
    }

    /// A device buffer of at least `bytes`, reused when the one held is large enough. Growing
    /// frees the old buffer first, so that the device never holds both.
    pub fn device(&mut self, bytes: usize) -> std::result::Result<sys::CUdeviceptr, result::DriverError> {
        if bytes > self.device_bytes {
            self.release_device();
            // Whole megabytes, so that sizes growing by a few rows do not reallocate at each call;
            // no more, since the caller sized its blocks to the memory it found free.
            let size = bytes.div_ceil(GRANULE) * GRANULE;
            // SAFETY: a plain allocation in the current context, freed in release_device.
            self.device = unsafe { result::malloc_sync(size) }?;
            self.device_bytes = size;
        }
        Ok(self.device)
    }

    /// A page-locked host buffer of at least `bytes`.
    pub fn host(&mut self, bytes: usize) -> std::result::Result<&mut [u8], result::DriverError> {
        if bytes > self.host_bytes {
            self.release_host();
            let size = bytes.div_ceil(GRANULE) * GRANULE;
            // SAFETY: page-locked memory of `size` bytes, freed in release_host.
            self.host = unsafe { result::malloc_host(size, 0) }?.cast();
            self.host_bytes = size;
        }
        // SAFETY: `host` points to `host_bytes` bytes owned by the workspace.
        Ok(unsafe { std::slice::from_raw_parts_mut(self.host, self.host_bytes) })
    }

    fn release_device(&mut self) {
        if self.device != 0 {
            // SAFETY: allocated by malloc_sync; no work that uses it is pending (callers synchronise).
            let _ = unsafe { result::free_sync(self.device) };
            self.device = 0;
            self.device_bytes = 0;
        }
    }

    fn release_host(&mut self) {
        if !self.host.is_null() {
            // SAFETY: allocated by malloc_host; no copy from or to it is pending.
            let _ = unsafe { result::free_host(self.host as *mut c_void) };
            self.host = std::ptr::null_mut();
            self.host_bytes = 0;
        }
    }

    /// Gives both buffers back (the next call allocates them again).
    pub fn release(&mut self) {
        self.release_device();
        self.release_host();
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        self.release();
        for &e in &self.events {
            // SAFETY: created in `new`, destroyed once.
            let _ = unsafe { result::event::destroy(e) };
        }
    }
}

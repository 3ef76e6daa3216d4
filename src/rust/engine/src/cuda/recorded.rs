//! The launches of a step of a loop in the engine (`crate::iterate`), recorded the first time it
//! runs and issued again as they are: the step owns its device buffer (its numbers and ranges,
//! copied once, and its scratch states), so that running it again costs its launches alone, not the
//! checks, the packing and the copy of a call (~25 us a step on the GPU host, against a few us of
//! GPU time for the small problems such loops often solve).

use std::ffi::c_void;
use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext, CudaFunction, LaunchConfig};

use super::device::Device;
use super::graph::Graph;
use crate::error::{Error, Result};

/// One kernel launch: its function, grid and arguments (ints, then device pointers).
struct Launch {
    function: CudaFunction,
    config: LaunchConfig,
    ints: Vec<i32>,
    pointers: Vec<u64>,
}

pub struct Recorded {
    ctx: Arc<CudaContext>,
    /// The step's own device buffer (0 when it needs none).
    buffer: sys::CUdeviceptr,
    launches: Vec<Launch>,
    /// The launches of other records, joined into one graph (`Recorded::joined`).
    graph: Option<Graph>,
}

impl Recorded {
    /// A record whose step's buffer holds `bytes`.
    pub fn new(device: &Device, bytes: usize) -> Result<Recorded> {
        let buffer = match bytes {
            0 => 0,
            // SAFETY: a plain allocation, owned by the record and freed in `drop`.
            _ => unsafe { result::malloc_sync(bytes) }.map_err(|e| {
                Error::Gpu(format!(
                    "allocating {:.1} MB on device {} ({}): {e:?}",
                    bytes as f64 / 1e6,
                    device.ordinal,
                    device.name
                ))
            })?,
        };
        Ok(Recorded { ctx: device.ctx.clone(), buffer, launches: Vec::new(), graph: None })
    }

    /// Where the step's buffer starts.
    pub fn pointer(&self) -> sys::CUdeviceptr {
        self.buffer
    }

    pub fn push(&mut self, function: &CudaFunction, config: LaunchConfig, ints: &[i32], pointers: &[u64]) {
        self.launches.push(Launch { function: function.clone(), config, ints: ints.to_vec(), pointers: pointers.to_vec() });
    }

    /// The launches of `parts`, in order, as one graph: they must outlive it (their buffers).
    pub fn joined(device: &Device, parts: &[&Recorded]) -> Result<Recorded> {
        let launches = parts.iter().flat_map(|r| &r.launches);
        let graph = Graph::capture(device, |stream| launches.into_iter().try_for_each(|l| l.issue_on(stream)))?;
        Ok(Recorded { ctx: device.ctx.clone(), buffer: 0, launches: Vec::new(), graph: Some(graph) })
    }

    /// Queues the recorded launches again on the stream of `device`, the one they were recorded on.
    pub fn replay(&self, device: &Device) -> Result<()> {
        if let Some(graph) = &self.graph {
            return graph.launch(device);
        }
        for l in &self.launches {
            // SAFETY: the arguments were those of a launch that ran, and every pointer still
            // refers to memory that the loop keeps (its inputs, values and this buffer).
            unsafe { super::primitives::launch(device, &l.function, l.config, &l.ints, &l.pointers) }.map_err(|e| {
                Error::Gpu(format!("launching a kernel on device {} ({}): {e:?}", device.ordinal, device.name))
            })?;
        }
        Ok(())
    }
}

impl Launch {
    /// Queues the launch on `stream` (a raw one: a capture).
    fn issue_on(&self, stream: sys::CUstream) -> std::result::Result<(), result::DriverError> {
        let LaunchConfig { grid_dim, block_dim, shared_mem_bytes } = self.config;
        let mut params = parameters(&self.ints, &self.pointers);
        // SAFETY: the arguments of a launch that ran, read by the driver before this returns.
        unsafe { result::launch_kernel(self.function.cu_function(), grid_dim, block_dim, shared_mem_bytes, stream, &mut params) }
    }
}

impl Drop for Recorded {
    fn drop(&mut self) {
        if self.buffer != 0 {
            // SAFETY: allocated in `new`; the loop waits for its stream before dropping the records.
            let _ = self.ctx.bind_to_thread();
            let _ = unsafe { result::free_sync(self.buffer) };
        }
    }
}

/// Raw kernel parameters: one pointer to each argument (ints, then device pointers), as
/// `cuLaunchKernel` takes them.
fn parameters(ints: &[i32], pointers: &[u64]) -> Vec<*mut c_void> {
    let ints = ints.iter().map(|i| i as *const i32 as *mut c_void);
    ints.chain(pointers.iter().map(|p| p as *const u64 as *mut c_void)).collect()
}

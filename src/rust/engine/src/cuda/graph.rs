//! Several recorded steps issued as one CUDA graph: an iteration of a program, whose launches are
//! the same every other iteration, costs one graph launch instead of one launch per kernel (a few
//! microseconds each, the bound of loops over small data).

use std::sync::Arc;

use cudarc::driver::{result, sys, CudaContext};

use super::device::Device;
use crate::error::{Error, Result};

pub struct Graph {
    ctx: Arc<CudaContext>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
}

impl Graph {
    /// The graph of what `issue` queues on the stream it is given: captured on a stream of its own
    /// (the device's stream, the legacy one, cannot be captured); nothing runs until `launch`.
    pub fn capture(device: &Device, issue: impl FnOnce(sys::CUstream) -> DriverResult) -> Result<Graph> {
        let failed = |what: &str, e: result::DriverError| {
            Error::Gpu(format!("{what} on device {} ({}): {e:?}", device.ordinal, device.name))
        };
        device.ctx.bind_to_thread().map_err(|e| failed("binding the context", e))?;
        let stream = result::stream::create(result::stream::StreamKind::NonBlocking)
            .map_err(|e| failed("creating a stream to capture a graph", e))?;
        let captured = capture_on(stream, issue);
        // SAFETY: created above; the capture has ended (or never began) whatever happened.
        let destroyed = unsafe { result::stream::destroy(stream) };
        let graph = captured.map_err(|e| failed("capturing a graph", e))?;
        destroyed.map_err(|e| failed("destroying a capture stream", e))?;
        // SAFETY: a graph just captured; destroyed with its executable in `drop`.
        match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
            Ok(exec) => Ok(Graph { ctx: device.ctx.clone(), graph, exec }),
            Err(e) => {
                // SAFETY: ours, not instantiated.
                let _ = unsafe { result::graph::destroy(graph) };
                Err(failed("instantiating a graph", e))
            }
        }
    }

    /// Queues the graph on the device's stream, after the work queued before.
    pub fn launch(&self, device: &Device) -> Result<()> {
        super::primitives::count_launch();
        // SAFETY: the executable graph is alive; its kernels read memory that the loop keeps.
        unsafe { result::graph::launch(self.exec, device.stream.cu_stream()) }
            .map_err(|e| Error::Gpu(format!("launching a graph on device {} ({}): {e:?}", device.ordinal, device.name)))
    }
}

type DriverResult = std::result::Result<(), result::DriverError>;

/// Captures what `issue` queues on `stream` (ended even when it fails, so the stream can be destroyed).
fn capture_on(
    stream: sys::CUstream,
    issue: impl FnOnce(sys::CUstream) -> DriverResult,
) -> std::result::Result<sys::CUgraph, result::DriverError> {
    // Relaxed: other threads may allocate while this one captures (nothing else uses this stream).
    // SAFETY: a stream of this context, capturing nothing yet.
    unsafe { result::stream::begin_capture(stream, sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED) }?;
    let issued = issue(stream);
    // SAFETY: capturing since `begin_capture`.
    let ended = unsafe { result::stream::end_capture(stream) };
    issued?;
    ended
}

impl Drop for Graph {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        // SAFETY: ours; a graph still running is freed when it completes (cuGraphExecDestroy).
        let _ = unsafe { result::graph::exec_destroy(self.exec) };
        let _ = unsafe { result::graph::destroy(self.graph) };
    }
}

//! The CUDA backend: a kernel generated per formula (`codegen`, its merge and finalisation in
//! `finish`), compiled at run time by NVRTC (`builds`; optionally a fast build first, the optimised
//! one in the background) and cached on disk and in memory (`device`), launched with the 1D or 2D
//! scheme (`launch`) in memory the device keeps between calls (`workspace`);
//! data can stay on a device from call to call (`resident`), and a loop in the engine issues its
//! steps' launches again as they were recorded (`recorded`).
//! The rest of the engine opens it through `Gpu` (`gpu`).
//! The CUDA libraries are loaded at run time: without them everything else keeps working.

pub mod backend;
pub mod buffers;
pub mod builds;
pub mod codegen;
pub mod device;
pub mod dot_tiles;
pub mod dtype;
pub mod elementwise;
pub mod fetch;
pub mod finish;
pub mod gpu;
pub mod graph;
pub mod guard;
pub mod launch;
pub mod primitives;
pub mod recorded;
pub mod resident;
pub mod several;
pub mod workspace;

pub use buffers::OnDevice;
pub use device::{availability, Device};
pub use gpu::Gpu;

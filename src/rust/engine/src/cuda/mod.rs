//! The CUDA backend: a kernel generated per formula (`codegen`), compiled at run time by NVRTC
//! and cached on disk and in memory (`device`), launched with the 1D or 2D scheme (`launch`).
//! The CUDA libraries are loaded at run time: without them everything else keeps working.

pub mod codegen;
pub mod device;
pub mod launch;

pub use device::{availability, Device};

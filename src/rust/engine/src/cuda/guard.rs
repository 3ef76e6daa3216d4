//! Calls into the CUDA libraries (driver and NVRTC, loaded at run time): a panic of the bindings (a
//! missing library or symbol) becomes an error, and a driver's error says what was being done.

use std::panic::{catch_unwind, AssertUnwindSafe};

use crate::error::{Error, Result};

/// Runs `f`, turning a panic of the CUDA bindings (a missing library or symbol) into an error.
pub fn guarded<T>(what: &str, f: impl FnOnce() -> Result<T>) -> Result<T> {
    catch_unwind(AssertUnwindSafe(f)).unwrap_or_else(|panic| {
        Err(Error::Gpu(format!("{what} failed: {}", crate::error::panic_message(panic.as_ref()))))
    })
}

pub fn driver_error(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Gpu(format!("{what}: {e:?}"))
}

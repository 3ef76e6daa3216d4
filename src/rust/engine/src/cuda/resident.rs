//! Data kept on a device between calls. An iterative algorithm passes the same large matrices to
//! every reduction; a `DeviceMatrix` is one of them copied to the device once, in the storage type
//! of one precision, and passed in place of the host data: it is not converted nor uploaded again.
//!
//! It is a value the user holds (as candle's device storage is), not a cache keyed by the host
//! data: its contents are fixed when it is made, so a result can never come from a stale copy.

use std::ops::Range;
use std::sync::Arc;

use cudarc::driver::{result, sys};

use super::device::Device;
use super::guard::guarded;
use crate::api::KeptMatrix;
use crate::real::Stored;
use crate::error::{Error, Result};
use crate::precision::Precision;

pub struct DeviceMatrix {
    device: Arc<Device>,
    pub precision: Precision,
    pub nrow: usize,
    pub ncol: usize,
    ptr: sys::CUdeviceptr,
}

impl std::fmt::Debug for DeviceMatrix {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "DeviceMatrix({} x {}, {:?}, {})", self.nrow, self.ncol, self.precision, self.where_())
    }
}

pub(super) fn bytes_per_value(precision: Precision) -> usize {
    match precision {
        Precision::F16 => 2,
        Precision::F32 => 4,
        Precision::F64 => 8,
    }
}

impl DeviceMatrix {
    /// Copies the column-major `nrow x ncol` matrix `data` to `device`, rounded to `precision`'s
    /// storage type (float16 bits, float32 or float64).
    pub fn new(device: Arc<Device>, data: &[f64], nrow: usize, ncol: usize, precision: Precision) -> Result<Self> {
        DeviceMatrix::from_rows(device, (data, nrow, ncol), 0..nrow, precision)
    }

    /// Copies the rows `rows` of the column-major `nrow x ncol` matrix `data` to `device` (a
    /// `rows.len() x ncol` matrix, a GPU's part of a spread program's points), rounded to
    /// `precision`'s storage type: each column's rows converted on every core, with no copy of them
    /// in float64 first.
    pub fn from_rows(
        device: Arc<Device>,
        (data, nrow, ncol): (&[f64], usize, usize),
        rows: Range<usize>,
        precision: Precision,
    ) -> Result<Self> {
        if data.len() != nrow.saturating_mul(ncol) || rows.end > nrow || rows.start > rows.end {
            return Err(Error::Invalid(format!(
                "rows {rows:?} of a {nrow} x {ncol} matrix of {} values",
                data.len()
            )));
        }
        let matrix = DeviceMatrix::allocate(device, rows.len(), ncol, precision)?;
        guarded("copying a matrix to the GPU", || {
            fn upload<S: Stored>(
                ptr: sys::CUdeviceptr,
                (data, nrow): (&[f64], usize),
                rows: &Range<usize>,
                ncol: usize,
            ) -> std::result::Result<(), result::DriverError> {
                let n = rows.len();
                let mut host = vec![S::from_f64(0.0); n * ncol];
                for (c, column) in host.chunks_mut(n.max(1)).enumerate() {
                    crate::parallel::map(&data[c * nrow + rows.start..c * nrow + rows.end], column, S::from_f64);
                }
                // SAFETY: `ptr` holds `n * ncol` values of S; the copy completes before returning.
                unsafe { result::memcpy_htod_sync(ptr, &host) }
            }
            match precision {
                Precision::F16 => upload::<u16>(matrix.ptr, (data, nrow), &rows, ncol),
                Precision::F32 => upload::<f32>(matrix.ptr, (data, nrow), &rows, ncol),
                Precision::F64 => upload::<f64>(matrix.ptr, (data, nrow), &rows, ncol),
            }
            .map_err(|e| Error::Gpu(format!("copying a matrix to {}: {e:?}", matrix.where_())))
        })?;
        Ok(matrix)
    }

    /// A `nrow x ncol` matrix of zeros on `device`, set there (nothing copied from the host).
    pub fn zeros(device: Arc<Device>, nrow: usize, ncol: usize, precision: Precision) -> Result<Self> {
        let matrix = DeviceMatrix::allocate(device, nrow, ncol, precision)?;
        let bytes = (nrow * ncol * bytes_per_value(precision)).max(1);
        guarded("zeroing a matrix on the GPU", || {
            // SAFETY: the matrix holds `bytes` bytes (all-zero bits are 0 in every precision).
            unsafe { result::memset_d8_sync(matrix.ptr, 0, bytes) }
                .map_err(|e| Error::Gpu(format!("zeroing a matrix on {}: {e:?}", matrix.where_())))
        })?;
        Ok(matrix)
    }

    /// Room for a `nrow x ncol` matrix on `device` (its values not set).
    fn allocate(device: Arc<Device>, nrow: usize, ncol: usize, precision: Precision) -> Result<Self> {
        let bytes = (nrow * ncol * bytes_per_value(precision)).max(1);
        guarded("keeping a matrix on the GPU", || {
            let on = format!("device {} ({})", device.ordinal, device.name);
            device.ctx.bind_to_thread().map_err(|e| Error::Gpu(format!("binding the context of {on}: {e:?}")))?;
            // SAFETY: a plain allocation of `bytes`, owned by the matrix and freed in `drop`.
            let ptr = unsafe { result::malloc_sync(bytes) }.map_err(|e| {
                Error::Gpu(format!("keeping a {nrow} x {ncol} matrix ({:.1} MB) on {on}: {e:?}", bytes as f64 / 1e6))
            })?;
            Ok(DeviceMatrix { device: device.clone(), precision, nrow, ncol, ptr })
        })
    }

    /// Replaces its values by `data` (as many, column-major), rounded to its precision: the copy is
    /// queued on the device's stream after the work already there (a loop sets a parameter's value
    /// of the iteration this way, `crate::program`).
    pub fn write(&self, data: &[f64]) -> Result<()> {
        if data.len() != self.nrow * self.ncol {
            return Err(Error::Invalid(format!("{} values cannot replace those of {self:?}", data.len())));
        }
        guarded("copying values to the GPU", || {
            let failed = |e| Error::Gpu(format!("copying values to GPU {}: {e:?}", self.device.ordinal));
            self.device.ctx.bind_to_thread().map_err(failed)?;
            let stream = self.device.stream.cu_stream();
            fn queue<S: Stored>(
                ptr: sys::CUdeviceptr,
                data: &[f64],
                stream: sys::CUstream,
            ) -> std::result::Result<(), result::DriverError> {
                let mut host = vec![S::from_f64(0.0); data.len()];
                crate::parallel::map(data, &mut host, S::from_f64);
                // SAFETY: `ptr` holds `data.len()` values of S; from ordinary memory, the driver
                // stages the bytes before returning, so `host` may be freed at once.
                unsafe { result::memcpy_htod_async(ptr, &host, stream) }
            }
            match self.precision {
                Precision::F16 => queue::<u16>(self.ptr, data, stream),
                Precision::F32 => queue::<f32>(self.ptr, data, stream),
                Precision::F64 => queue::<f64>(self.ptr, data, stream),
            }
            .map_err(failed)
        })
    }

    /// The device it lives on.
    pub fn ordinal(&self) -> usize {
        self.device.ordinal
    }

    /// The address of its first value, for the kernels.
    pub fn pointer(&self) -> sys::CUdeviceptr {
        self.ptr
    }

    /// The address of its value `k` in column-major order (column c starts at `k = c * nrow`).
    pub fn pointer_at(&self, k: usize) -> sys::CUdeviceptr {
        self.ptr + (k * bytes_per_value(self.precision)) as u64
    }

    /// Its values, back on the host as doubles (exactly the stored values).
    pub fn to_host(&self) -> Result<Vec<f64>> {
        let len = self.nrow * self.ncol;
        guarded("copying a matrix from the GPU", || {
            let failed = |e| Error::Gpu(format!("copying a matrix from GPU {}: {e:?}", self.device.ordinal));
            self.device.ctx.bind_to_thread().map_err(failed)?;
            fn download<S: Copy + Default>(
                ptr: sys::CUdeviceptr,
                len: usize,
            ) -> std::result::Result<Vec<S>, result::DriverError> {
                let mut host = vec![S::default(); len];
                crate::memory::huge_pages(&mut host);
                // SAFETY: `ptr` holds `len` values of S; the copy completes before returning.
                unsafe { result::memcpy_dtoh_sync(&mut host, ptr) }?;
                Ok(host)
            }
            // (converted on every core: the labels of 1e8 points took 0.65 s on one)
            fn widened<S: Copy + Sync>(values: &[S], f: impl Fn(S) -> f64 + Sync) -> Vec<f64> {
                let mut wide = vec![0.0; values.len()];
                crate::memory::huge_pages(&mut wide);
                crate::parallel::map(values, &mut wide, f);
                wide
            }
            Ok(match self.precision {
                Precision::F16 => {
                    widened(&download::<u16>(self.ptr, len).map_err(failed)?, |h| half::f16::from_bits(h).to_f64())
                }
                Precision::F32 => widened(&download::<f32>(self.ptr, len).map_err(failed)?, f64::from),
                Precision::F64 => download::<f64>(self.ptr, len).map_err(failed)?,
            })
        })
    }
}

impl KeptMatrix for DeviceMatrix {
    fn shape(&self) -> (usize, usize) {
        (self.nrow, self.ncol)
    }

    fn precision(&self) -> Precision {
        self.precision
    }

    fn ordinal(&self) -> usize {
        self.device.ordinal
    }

    fn to_host(&self) -> Result<Vec<f64>> {
        DeviceMatrix::to_host(self)
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

impl Drop for DeviceMatrix {
    fn drop(&mut self) {
        // SAFETY: allocated in `new`; every call that read it has synchronised before returning.
        let _ = self.device.ctx.bind_to_thread();
        let _ = unsafe { result::free_sync(self.ptr) };
    }
}

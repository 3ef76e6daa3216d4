//! What the engine's callers pass and get back: inputs (as R holds them, or kept on a device),
//! where to compute, the options of a run and its results.

use crate::error::Result;
use crate::precision::Precision;
use crate::ranges::Ranges;
use crate::reduction::SumScheme;
use crate::tuning::Tuning;

/// One input: a column-major `nrow x ncol` matrix (a vector is `n x 1`), wherever it lives.
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub values: Values<'a>,
    pub nrow: usize,
    pub ncol: usize,
}

/// Where an input's values are.
#[derive(Debug, Clone, Copy)]
pub enum Values<'a> {
    /// R's doubles, column-major.
    Host(&'a [f64]),
    /// Kept on a device (`KeptMatrix`): it must be in the precision of the call, and on the
    /// call's device when it computes on a GPU; the CPU reads it back.
    Device(&'a dyn KeptMatrix),
}

/// A matrix a backend keeps on its device between calls (`keops_device()`: CUDA's
/// `DeviceMatrix`), seen from outside that backend.
pub trait KeptMatrix: std::fmt::Debug + Send + Sync {
    /// `(nrow, ncol)`.
    fn shape(&self) -> (usize, usize);
    fn precision(&self) -> Precision;
    /// The GPU it lives on.
    fn ordinal(&self) -> usize;
    /// Its values, back on the host as doubles (exactly the stored values).
    fn to_host(&self) -> Result<Vec<f64>>;
    /// For its backend, which reads it in place.
    fn as_any(&self) -> &dyn std::any::Any;

    /// "GPU 0 in float32", for messages.
    fn where_(&self) -> String {
        format!("GPU {} in {}", self.ordinal(), self.precision().name())
    }
}

impl<'a> Input<'a> {
    /// Host data, `nrow x ncol`.
    pub fn host(data: &'a [f64], nrow: usize, ncol: usize) -> Input<'a> {
        Input { values: Values::Host(data), nrow, ncol }
    }

    /// A matrix kept on a device, of its shape.
    pub fn device(matrix: &'a dyn KeptMatrix) -> Input<'a> {
        let (nrow, ncol) = matrix.shape();
        Input { values: Values::Device(matrix), nrow, ncol }
    }

    /// The host data, if it is there.
    pub fn host_data(&self) -> Option<&'a [f64]> {
        match self.values {
            Values::Host(data) => Some(data),
            Values::Device(_) => None,
        }
    }

    /// The matrix kept on a device, if it is one.
    pub fn kept(&self) -> Option<&'a dyn KeptMatrix> {
        match self.values {
            Values::Host(_) => None,
            Values::Device(m) => Some(m),
        }
    }

    /// The matrix kept on a device, if it is one of type `M` (a backend's own).
    pub fn kept_as<M: 'static>(&self) -> Option<&'a M> {
        self.kept().and_then(|m| m.as_any().downcast_ref())
    }
}

/// Where to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    Cpu,
    /// This GPU, or an error saying why it cannot be used.
    Gpu(usize),
    /// This GPU when one can be used, the CPU otherwise.
    #[default]
    Auto,
}

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub precision: Precision,
    pub sum_scheme: SumScheme,
    /// 0 means every available core.
    pub threads: usize,
    pub backend: Backend,
    /// GPU device used by `Backend::Auto`.
    pub device: usize,
    /// GPUs that share each reduction on a GPU (`cuda::several`) when it lists more than one,
    /// the call's GPU (`Backend::Gpu` or `device`) first; inputs kept on a device, results kept
    /// on a device and empty problems run on the call's GPU alone.
    pub gpus: Vec<usize>,
    /// Where compiled GPU kernels are kept between sessions (none: compiled once per process).
    pub cache_dir: Option<std::path::PathBuf>,
    /// Most bytes of GPU memory to use (default: 80% of what is free); larger inputs are
    /// processed in blocks.
    pub gpu_memory: Option<usize>,
    /// Called on the calling thread about every 10 ms while the CPU computes (R's check for
    /// Ctrl-C); when it returns true, the workers stop at their next tile and `run` returns
    /// `Error::Interrupted`. On a GPU, it is asked between the steps of a long reduction.
    pub interrupt: Option<fn() -> bool>,
    /// Told how far a long call has got, `(done, total)` in units of the call's choosing (CPU: blocks
    /// of output rows; one GPU: pairs (i, j) reduced; several GPUs: the sum of their pairs; a
    /// program: iterations), `done` never decreasing and reaching `total` when the call ends
    /// normally (not when it fails or is interrupted). Called only where `interrupt` is asked, on the
    /// calling thread (never from a worker thread): about every 10 ms on the CPU, between the steps of
    /// a long reduction on a GPU, after each iteration of a program (whose steps then report
    /// nothing; the gradient of a program counts its iterations forward, then backward: twice
    /// `iterations` in all). Not called for results kept on a device (their launches are queued). A
    /// call may report only its end: the caller decides when a report is worth showing.
    pub progress: Option<fn(done: u64, total: u64)>,
    /// Block-sparse reduction: only these blocks of the matrix are visited (`ranges`).
    pub ranges: Option<Ranges>,
    /// The reduced ranges of each block of `ranges` may come in any order (still disjoint), for
    /// K-selections on the CPU only (elsewhere they must be sorted): the K-nearest-neighbour
    /// search there lists the cells nearest to a block's first, so that its rows' K-th best falls
    /// sooner and fewer terms are inserted (10-NN of 10^6 points, 2 cores: 1.21 -> 0.80 s).
    pub ranges_in_any_order: bool,
    /// How the engine computes (never what): read from the environment by the caller
    /// (`Tuning::from_env`), the engine's defaults otherwise.
    pub tuning: Tuning,
}

/// Results in column-major order: `nrow x k x dim` (k = 1 except for the K-selections).
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub values: Option<Vec<f64>>,
    /// 1-based indices into the reduced range.
    pub indices: Option<Vec<i32>>,
    pub nrow: usize,
    pub k: usize,
    pub dim: usize,
    /// What computed it: "CPU" or the GPU's description.
    pub backend: String,
    /// Seconds spent in each phase (conversion, compilation, transfers, kernel, ...).
    pub timings: Vec<(&'static str, f64)>,
}

impl Output {
    /// The dimensions of the results as an array: `nrow x dim`, and for the K-selections
    /// `nrow x k` (one coordinate) or `nrow x k x dim`.
    pub fn shape(&self, selection: bool) -> Vec<usize> {
        match (selection, self.dim) {
            (false, _) => vec![self.nrow, self.dim],
            (true, 1) => vec![self.nrow, self.k],
            (true, _) => vec![self.nrow, self.k, self.dim],
        }
    }
}

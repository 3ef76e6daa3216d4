//! The seam between what a call asks and what computes it. A `BackendDevice` (the CPU evaluator,
//! one CUDA device, or several GPUs sharing the work) takes a checked `Call`, or a `Part` of it, and
//! returns its results in R's order or, for a part of the reduced range, its reduction states. The
//! operator chooses the backend and turns the precision into types once (`Precision::dispatch`).

use std::ops::Range;

use crate::api::{Input, Output, RunOptions};
use crate::error::Result;
use crate::formula::Formula;
use crate::precision::ForPrecision;
use crate::ranges::BlockRanges;
use crate::real::{Real, Stored};

/// Seconds spent in each phase of a call (conversion, compilation, transfers, kernel, ...).
pub type Timings = Vec<(&'static str, f64)>;

pub trait BackendDevice {
    /// What computes, as `Output::backend` reports it ("CPU", "GPU 0 (NVIDIA H100 ...)").
    fn describe(&self) -> String;

    /// The reduction of `call` with inputs stored as `S` and arithmetic and results in `T` (f32
    /// for float16 storage, otherwise the same type).
    fn evaluate<S: Stored, T: Real>(&self, call: &Call, timings: &mut Timings) -> Result<Columns>;
}

/// `call` on `device`, in the types of the call's precision: the one place a precision becomes
/// types for a run.
pub fn evaluate_in_precision<B: BackendDevice>(device: &B, call: &Call, timings: &mut Timings) -> Result<Columns> {
    call.options.precision.dispatch(TypedCall { device, call, timings })
}

struct TypedCall<'a, B> {
    device: &'a B,
    call: &'a Call<'a>,
    timings: &'a mut Timings,
}

impl<B: BackendDevice> ForPrecision for TypedCall<'_, B> {
    type Output = Result<Columns>;

    fn run<S: Stored, T: Real>(self) -> Result<Columns> {
        self.device.evaluate::<S, T>(self.call, self.timings)
    }
}

/// One checked reduction, or `part` of it: the formula, its inputs, the sizes of the i and j
/// ranges, the blocks of `ranges` of the output rows' axis only when given, and the options.
#[derive(Clone, Copy)]
pub struct Call<'a> {
    pub formula: &'a Formula,
    pub inputs: &'a [Input<'a>],
    pub sizes: (usize, usize),
    pub part: Option<&'a Part>,
    pub ranges: Option<&'a BlockRanges>,
    pub options: &'a RunOptions,
}

impl Call<'_> {
    /// The numbers of output rows and of reduced rows.
    pub fn out_and_reduced(&self) -> (usize, usize) {
        let (n_i, n_j) = self.sizes;
        if self.formula.reduction.axis == 0 {
            (n_i, n_j)
        } else {
            (n_j, n_i)
        }
    }
}

/// A piece of a reduction: these output rows against this part of the reduced range (see
/// `schedule`).
#[derive(Debug, Clone, PartialEq)]
pub struct Part {
    pub out: Range<usize>,
    pub red: Range<usize>,
}

/// Results in R's order: `rows x width` column-major values and 1-based indices (each present
/// only when the reduction returns it), for the output rows of the call or of its `Part`. A part
/// of the reduced range gives `states` instead: the rows' reduction states one after the other,
/// to be merged with the other parts' (`Accumulator::merge`) and finalised.
pub struct Columns {
    pub values: Option<Vec<f64>>,
    pub indices: Option<Vec<i32>>,
    pub states: Option<Vec<f64>>,
}

/// What a loop in the engine asks of a step's operator (`crate::operator::Operator`): a plain run,
/// or its checked call, for a backend that evaluates it into its own matrices.
pub trait Operation {
    fn formula(&self) -> &Formula;
    fn run(&self, inputs: &[Input], options: &RunOptions) -> Result<Output>;
    /// The checked reduction of `inputs` with `options` (its ranges validated).
    fn call<'c>(&'c self, inputs: &'c [Input<'c>], options: &'c RunOptions) -> Result<Call<'c>>;
}

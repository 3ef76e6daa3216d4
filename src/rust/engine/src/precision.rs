//! The precision of a call and the one place it becomes types: what inputs are stored in on the
//! device and what they are computed in.

use crate::real::{Real, Stored};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// float16 storage (inputs rounded to half precision), float32 arithmetic and results.
    F16,
    #[default]
    F32,
    F64,
}

impl Precision {
    /// Its name as R's options spell it.
    pub fn name(self) -> &'static str {
        match self {
            Precision::F16 => "float16",
            Precision::F32 => "float32",
            Precision::F64 => "float64",
        }
    }

    /// `work` for this precision: `run::<S, T>()` with `S` what inputs are stored in (`u16`: the
    /// bits of float16) and `T` what they are computed in. The one place the engine turns a
    /// precision into types.
    pub fn dispatch<W: ForPrecision>(self, work: W) -> W::Output {
        match self {
            Precision::F16 => work.run::<u16, f32>(),
            Precision::F32 => work.run::<f32, f32>(),
            Precision::F64 => work.run::<f64, f64>(),
        }
    }
}

/// Work written once for every precision (`Precision::dispatch`).
pub trait ForPrecision {
    type Output;
    fn run<S: Stored, T: Real>(self) -> Self::Output;
}

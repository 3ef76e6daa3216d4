//! The number type of a generated kernel: what it stores its inputs in and computes with.

use crate::precision::Precision;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Dtype {
    /// float16 storage, float32 arithmetic.
    F16,
    F32,
    F64,
}

impl Dtype {
    /// The kernel's type for a call in `precision`.
    pub fn of(precision: Precision) -> Dtype {
        match precision {
            Precision::F16 => Dtype::F16,
            Precision::F32 => Dtype::F32,
            Precision::F64 => Dtype::F64,
        }
    }

    /// Bytes of the arithmetic type (what the shared-memory tile holds).
    pub fn size(self) -> usize {
        match self {
            Dtype::F16 | Dtype::F32 => 4,
            Dtype::F64 => 8,
        }
    }
    pub fn c_type(self) -> &'static str {
        match self {
            Dtype::F16 | Dtype::F32 => "float",
            Dtype::F64 => "double",
        }
    }
    /// The C expressions of +infinity and of the largest finite number of the arithmetic type.
    pub(super) fn infinity_and_max(self) -> (&'static str, &'static str) {
        match self {
            Dtype::F16 | Dtype::F32 => ("__int_as_float(0x7f800000)", "3.40282347e+38f"),
            Dtype::F64 => ("__longlong_as_double(0x7ff0000000000000LL)", "1.7976931348623157e+308"),
        }
    }
    /// Type of the inputs in device memory.
    pub(super) fn storage_type(self) -> &'static str {
        match self {
            Dtype::F16 => "unsigned short",
            _ => self.c_type(),
        }
    }
    /// Name of a C math function for this type: `expf` for float, `exp` for double.
    pub(super) fn math(self, name: &str) -> String {
        match self {
            Dtype::F16 | Dtype::F32 => format!("{name}f"),
            Dtype::F64 => name.to_string(),
        }
    }
}

//! The reductions: what they compute, the shape of their output, how they are named in formulas,
//! and their gradients (`gradient`).

pub mod gradient;
mod state;

pub use state::{better, Accumulator};

/// How a reduction over j (axis 0) or i (axis 1) combines the values of the formula.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ReductionKind {
    Sum,
    Min,
    Max,
    ArgMin,
    ArgMax,
    MinArgMin,
    MaxArgMax,
    KMin,
    ArgKMin,
    KMinArgKMin,
    /// log sum_j exp(f_ij)
    LogSumExp,
    /// log sum_j exp(f_ij) g_ij
    LogSumExpWeight,
    /// sum_j exp(f_ij) g_ij / sum_j exp(f_ij)
    SumSoftMaxWeight,
}

/// The arguments a reduction takes after its formula, in the order of the formula language.
pub enum Signature {
    /// `Name_Reduction(f, axis)`
    Axis,
    /// `Name_Reduction(f, K, axis)`
    KAxis,
    /// `Name_Reduction(f, g, axis)`
    WeightAxis,
    /// `LogSumExp_Reduction(f, axis)` or KeOps' weighted form `LogSumExp_Reduction(f, axis, g)`
    AxisOptionalWeight,
}

impl ReductionKind {
    pub fn from_name(name: &str) -> Option<ReductionKind> {
        use ReductionKind::*;
        Some(match name {
            "Sum_Reduction" => Sum,
            "Min_Reduction" => Min,
            "Max_Reduction" => Max,
            "ArgMin_Reduction" => ArgMin,
            "ArgMax_Reduction" => ArgMax,
            "Min_ArgMin_Reduction" => MinArgMin,
            "Max_ArgMax_Reduction" => MaxArgMax,
            "KMin_Reduction" => KMin,
            "ArgKMin_Reduction" => ArgKMin,
            "KMin_ArgKMin_Reduction" => KMinArgKMin,
            "LogSumExp_Reduction" => LogSumExp,
            "LogSumExpWeight_Reduction" => LogSumExpWeight,
            "SumSoftMaxWeight_Reduction" => SumSoftMaxWeight,
            _ => return None,
        })
    }

    pub const NAMES: &'static str = "Sum_Reduction, Min_Reduction, Max_Reduction, ArgMin_Reduction, \
        ArgMax_Reduction, Min_ArgMin_Reduction, Max_ArgMax_Reduction, KMin_Reduction, ArgKMin_Reduction, \
        KMin_ArgKMin_Reduction, LogSumExp_Reduction, LogSumExpWeight_Reduction, SumSoftMaxWeight_Reduction";

    pub fn signature(self) -> Signature {
        use ReductionKind::*;
        match self {
            KMin | ArgKMin | KMinArgKMin => Signature::KAxis,
            LogSumExpWeight | SumSoftMaxWeight => Signature::WeightAxis,
            LogSumExp => Signature::AxisOptionalWeight,
            _ => Signature::Axis,
        }
    }

    pub fn returns_values(self) -> bool {
        !matches!(self, ReductionKind::ArgMin | ReductionKind::ArgMax | ReductionKind::ArgKMin)
    }

    pub fn returns_indices(self) -> bool {
        use ReductionKind::*;
        matches!(self, ArgMin | ArgMax | MinArgMin | MaxArgMax | ArgKMin | KMinArgKMin)
    }

    pub fn is_k_selection(self) -> bool {
        use ReductionKind::*;
        matches!(self, KMin | ArgKMin | KMinArgKMin)
    }

    /// Whether a selection keeps the largest values (not the smallest).
    pub fn keeps_maxima(self) -> bool {
        use ReductionKind::*;
        matches!(self, Max | ArgMax | MaxArgMax)
    }

    /// Whether the reduction keeps the best values of a row (minima, maxima, K-th of them).
    pub fn selects(self) -> bool {
        use ReductionKind::*;
        matches!(self, Min | ArgMin | MinArgMin | KMin | ArgKMin | KMinArgKMin | Max | ArgMax | MaxArgMax)
    }
}

/// How sums are accumulated. `Auto` is `BlockSum`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SumScheme {
    #[default]
    Auto,
    /// Every term added in the working precision, one after the other.
    DirectSum,
    /// Terms summed by tiles in the working precision, tiles combined in float64.
    BlockSum,
    /// Compensated (Kahan) summation in the working precision.
    KahanScheme,
}

impl SumScheme {
    pub fn from_name(name: &str) -> Option<SumScheme> {
        Some(match name {
            "auto" => SumScheme::Auto,
            "direct_sum" => SumScheme::DirectSum,
            "block_sum" => SumScheme::BlockSum,
            "kahan_scheme" => SumScheme::KahanScheme,
            _ => return None,
        })
    }
}

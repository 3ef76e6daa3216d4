//! The reductions: what they compute, the shape of their output, how they are named in formulas,
//! and their gradients (`gradient`).
//!
//! # Adding a reduction
//!
//! A reduction's definition is spread over the evaluators; the compiler's exhaustive `match`es on
//! `ReductionKind` find most places, but not those that test a kind with `matches!`, `==` or a
//! predicate below (a new kind silently takes their `false` branch). Every place, in order (the
//! list was checked by grepping `MaxArgMax` / `Max_ArgMax` and `SumSoftMaxWeight` across the
//! engine and the R package):
//!
//! 1. Here: the variant of `ReductionKind`, its name in `from_name` and in `NAMES` (the parser's
//!    error message lists them), its arguments in `signature` (a new form of arguments needs a
//!    new `Signature`, then `formula::lower_reduction` reads it), and the predicates
//!    `returns_values`, `returns_indices`, `is_k_selection`, `keeps_maxima`, `selects`: they
//!    decide the output's shape for R, the GPU's selection storage and sifting
//!    (`cuda::codegen::{selection, sift}`) and the finish code.
//! 2. `state.rs` (`Accumulator`): the state of a row (`state_len`), the width of the result
//!    (`width`), and `init`, `merge` (two states of the same row, in order: blocks, chunks,
//!    several GPUs) and `finalize`. The CPU and the GPU share this layout of the state.
//! 3. The CPU: `cpu/reducers.rs` (`Accumulator::accumulate`, a tile of values into a state) and
//!    `cpu/columns.rs` (`work_columns` and `Columns::reduce`, the column-wise path of short
//!    reduced ranges); `cpu/fusion.rs::fuse` lists the kinds whose distance kernels it fuses
//!    (optional).
//! 4. Gradients: `gradient.rs`: `Differentiate::rule` (the gradient as a formula of Sum
//!    reductions of saved results, or `Rule::Zero` for a result of indices only) and
//!    `gradient_input_dim` (whose `_` arm gives a new kind the result's dimension).
//! 5. The GPU kernel: `cuda/codegen/reducer.rs` (`Reducer::init`, `tile_begin`, `accumulate`,
//!    `tile_end`, `store`: the registers of a row, the steps of the loop, the state written in the
//!    layout of step 2), `cuda/codegen/body.rs::loop_over_tile` (which loop a kind takes:
//!    `exponentials` for the log-sum-exps, `candidates` for sifted selections); then
//!    `cuda/finish.rs`: `is_selection`, `functions` (the finalisation on the device), `merge_source`
//!    / `merge_kernel` (the merge of chunk states) and `merge_blocks`.
//! 6. The engine's tests: the kind in `tests/common/formulas.rs::REDUCTIONS` (it drives the GPU
//!    tests against the CPU and `examples/formula_graphs.rs`; the fuzzer's `SEEDS` are there
//!    too), a check against an independent reference in `tests/reductions.rs`, the value of an
//!    empty range in `tests/ranges.rs`, its gradient in `tests/autodiff.rs`,
//!    `tests/sifted_selections.rs` for a selection, and the list of `cpu/short_range.rs`'s tests;
//!    a case in `examples/kernel_list.rs` (the generated CUDA, compared byte for byte across
//!    refactors).
//! 7. The R package: `R/lazytensor-reduce.R` (the LazyTensor functions of the reduction, e.g.
//!    `max_argmax` and its alias `max_argmax_reduction`, with their roxygen blocks and NAMESPACE
//!    exports, the `switch` of `reduction.LazyTensor` and its error message listing the names),
//!    the documented lists in `R/keops_kernel.R` and `R/keops_grad.R`, and tests against
//!    plain R in `tests/testthat/test-reductions.R` (with `test-rkeops2-lazytensor.R`,
//!    `test-fuzz.R`, `test-batch.R`, `test-future.R`, which run every reduction along their paths).

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

impl ReductionKind {
    /// How the finished results of two parts of the reduced range make the result of both, where
    /// they can (a program spread over devices, `program::spread`, merges its parts' sums so): a
    /// sum's sum, a minimum's or maximum's, log-sum-exp's log of the sum of the exponentials. None
    /// for the others: an index is a part's own, a `weighted` log-sum-exp may be the log of a
    /// negative part, a soft-max weight has lost its normalisation, a K-selection its K best of the
    /// other.
    pub fn merges_results(self, weighted: bool) -> Option<fn(f64, f64) -> f64> {
        match (self, weighted) {
            (ReductionKind::Sum, _) => Some(|a, b| a + b),
            (ReductionKind::Min, _) => Some(|a, b| if b < a { b } else { a }),
            (ReductionKind::Max, _) => Some(|a, b| if b > a { b } else { a }),
            (ReductionKind::LogSumExp, false) => Some(log_add_exp),
            _ => None,
        }
    }
}

/// ln(e^a + e^b), with no overflow.
fn log_add_exp(a: f64, b: f64) -> f64 {
    if a.is_nan() || b.is_nan() {
        return f64::NAN;
    }
    let m = a.max(b);
    match m.is_finite() {
        true => m + (-(a - b).abs()).exp().ln_1p(),
        // (+inf, or -inf: no terms in either part)
        false => m,
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

//! Where a K-selection keeps its K best values of a row while it reduces (`Selection`), chosen
//! from the length of the reduced ranges.

use super::insertion::REGISTER_SELECTION;
use super::sift;
use crate::cuda::dot_tiles::MIN_DIM;
use crate::formula::Formula;
use crate::tuning::SelectionOverride;

/// Where a K-selection (Min, ArgKMin, ...) keeps its K best values of a row while it reduces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Selection {
    /// Arrays in local memory, a sorted insertion that shifts the values it passes: cheap when
    /// values seldom enter (long reduced ranges: after the first rows, a value enters with
    /// probability ~K / j), and light on registers.
    Local,
    /// Registers, the insertion a network of selects written out (`selection_network`): a warp
    /// pays the whole network whenever one of its rows takes a value, but no memory access; pays
    /// when values enter often, on short reduced ranges (batches of small clouds).
    Registers,
    /// `Local`, the pairs first sifted 32 indices at a time: one comparison per pair marks the
    /// candidates, which are then computed again and inserted (`candidates`); a nearest-neighbour
    /// search sifts with the expanded squared distance. For long reduced ranges of a selection of
    /// one component.
    Filtered,
    /// `Filtered`, the lists in registers as `Registers` keeps them.
    FilteredRegisters,
}

/// Above this many reduced rows per output row and per selected value (K), selections stay in
/// local memory. On an H100 (2026-11-24, K-NN graphs of N uniform points in D = 3, kernel times in
/// registers / local memory): K = 10, N / K = 205: 0.14 / 0.26 ms, 2000: 1.2 / 3.7 ms, 10^4: 10.4 /
/// 13.5 ms, 4 x 10^4: 134 / 105 ms, 10^5: 805 / 607 ms; K = 40, N / K = 51: 0.30 / 0.66 ms, 500:
/// 4.8 / 40 ms, 10^4: 220 / 293 ms.
const REGISTERS_UP_TO_ROWS_PER_VALUE: f64 = 16384.0;

impl Selection {
    /// The storage for `formula`'s reduction when each output row reduces over `reduced` rows
    /// (a mean, with ranges), unless `forced` (`Tuning::gpu_selection`, for benchmarks). `Local`
    /// for the reductions that select nothing (one kernel for them).
    pub fn for_rows(formula: &Formula, reduced: f64, forced: Option<SelectionOverride>) -> Selection {
        let red = &formula.reduction;
        if !red.kind.selects() {
            return Selection::Local;
        }
        let k = red.k.max(1);
        let in_registers = formula.output_dim() * k <= REGISTER_SELECTION;
        let sifted = if formula.output_dim() == 1 { Selection::Filtered } else { Selection::Local };
        match forced {
            Some(SelectionOverride::Local) => Selection::Local,
            Some(SelectionOverride::Registers) if in_registers => Selection::Registers,
            Some(SelectionOverride::Filtered) => sifted,
            Some(SelectionOverride::FilteredRegisters) if in_registers && sifted == Selection::Filtered => {
                Selection::FilteredRegisters
            }
            _ if in_registers && reduced <= REGISTERS_UP_TO_ROWS_PER_VALUE * k as f64 => Selection::Registers,
            // Where a pair costs more than the shared loads that four rows per thread save (on an
            // H200, 10-NN of 1e6 points: D = 10 602 against 645 ms; D = 3 240 against 230 ms).
            _ if sifted == Selection::Filtered
                && k <= 16
                && sift::distance_dim(formula).is_some_and(|d| (8..MIN_DIM).contains(&d)) =>
            {
                Selection::FilteredRegisters
            }
            _ => sifted,
        }
    }
}

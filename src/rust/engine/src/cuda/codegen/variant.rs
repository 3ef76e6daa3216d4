//! Which kernel of a formula (`Variant`: dense, block-sparse, tensor cores) and the choices its
//! source depends on (`KernelOptions`).

use super::selection::Selection;
use crate::cuda::dot_tiles::DotTile;
use crate::cuda::dtype::Dtype;
use crate::formula::Formula;
use crate::plan::Plan;
use crate::ranges::BlockRanges;
use crate::reduction::SumScheme;
use crate::tuning::{RangedOverride, Tuning};

/// What a generated kernel depends on besides its formula: the key of its compiled code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct KernelOptions {
    pub dtype: Dtype,
    pub scheme: SumScheme,
    pub variant: Variant,
    pub selection: Selection,
    /// `#pragma unroll` of the loop over a tile (`Tuning::unroll`).
    pub unroll: usize,
    /// Log-sum-exps' groups unrolled whole up to this work per index (`Tuning::group_work`).
    pub group_work: usize,
}

impl KernelOptions {
    /// These choices, with the default tuning's unrolling.
    pub fn new(dtype: Dtype, scheme: SumScheme, variant: Variant, selection: Selection) -> KernelOptions {
        let Tuning { unroll, group_work, .. } = Tuning::default();
        KernelOptions { dtype, scheme, variant, selection, unroll, group_work }
    }
}

/// Which kernel of a formula: the dense one (1D and 2D schemes), or a block-sparse one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Variant {
    Dense,
    /// Block-sparse, as many rows per block of the grid as the dense kernel (up to TILE x ROWS).
    Ranged,
    /// Block-sparse, 64 rows per block of the grid, one per thread: for ranges whose blocks of
    /// rows are small, where a wide block would leave most of its threads without a row.
    RangedNarrow,
    /// Dense, the formula's dot product or squared distance of large vectors computed on the
    /// tensor cores (`dot_tiles`).
    DotTiles,
    /// `DotTiles` with the rows staged per tile, not kept in shared memory: for GPUs that cannot
    /// give a block the shared memory of resident rows.
    StreamedDotTiles,
}

/// Below this mean number of rows per (non-empty) block, ranges run the narrow kernel.
const NARROW_BELOW_ROWS: usize = 512;

impl Variant {
    /// The kernel for these ranges of the output rows (none: dense), unless `forced`
    /// (`Tuning::gpu_ranged`, for benchmarks).
    pub fn for_ranges(ranges: Option<&BlockRanges>, forced: Option<RangedOverride>) -> Variant {
        let Some(ranges) = ranges else { return Variant::Dense };
        match forced {
            Some(RangedOverride::Narrow) => return Variant::RangedNarrow,
            Some(RangedOverride::Wide) => return Variant::Ranged,
            None => {}
        }
        let (rows, blocks) = ranges
            .blocks
            .iter()
            .filter(|b| !b.is_empty())
            .fold((0, 0), |(rows, blocks), b| (rows + b.len(), blocks + 1));
        if blocks > 0 && rows < NARROW_BELOW_ROWS * blocks {
            Variant::RangedNarrow
        } else {
            Variant::Ranged
        }
    }

    /// The kernel for `formula` on a device of compute capability `arch`: `for_ranges`, or
    /// `DotTiles` for a dense reduction that has a dot product to give to the tensor cores
    /// (TF32 `mma.sync` needs 8.0), unless the tuning turns the tensor cores off.
    pub fn choose(
        formula: &Formula,
        dtype: Dtype,
        ranges: Option<&BlockRanges>,
        arch: (i32, i32),
        tuning: &Tuning,
    ) -> Variant {
        let variant = Variant::for_ranges(ranges, tuning.gpu_ranged);
        let allowed = tuning.tensor_cores && arch.0 >= 8;
        match variant == Variant::Dense && allowed && DotTile::find(formula, &Plan::new(formula), dtype).is_some() {
            true => Variant::DotTiles,
            false => variant,
        }
    }
}

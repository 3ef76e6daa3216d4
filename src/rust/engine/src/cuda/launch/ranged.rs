//! The work of a block-sparse reduction, in the arrays its kernels read.

use std::ops::Range;

use crate::ranges::BlockRanges;
use crate::schedule::work::pieces;

/// The work of a block-sparse reduction as the ranged kernels read it (`codegen::Variant`):
/// four ints per block of the grid (its output rows, its first and last range) and the ranges.
pub(super) struct RangedWork {
    pub(super) work: Vec<i32>,
    pub(super) red: Vec<i32>,
}

impl RangedWork {
    /// The work on the output rows `rows` (a range of whole pieces of `BlockRanges::work`).
    pub(super) fn new(ranges: &BlockRanges, n_out: usize, rows_per_block: usize, rows: &Range<usize>) -> RangedWork {
        let (mut work, mut red) = (Vec::new(), Vec::new());
        for item in pieces(ranges, n_out, rows_per_block).into_iter().filter(|w| rows.contains(&w.rows.start)) {
            let first = red.len() / 2;
            red.extend(item.reduced.iter().flat_map(|r| [r.start as i32, r.end as i32]));
            work.extend([item.rows.start as i32, item.rows.end as i32, first as i32, (red.len() / 2) as i32]);
        }
        RangedWork { work, red }
    }

    pub(super) fn blocks(&self) -> usize {
        self.work.len() / 4
    }

    pub(super) fn bytes(&self) -> usize {
        (self.work.len() + self.red.len()) * 4
    }
}

//! The pieces of work of a reduction on one device: blocks of output rows, each against the
//! ranges of the reduced index it reduces over (all of it for a dense reduction), as the CPU's
//! threads and the ranged GPU kernels take them.

use std::ops::Range;

use crate::ranges::BlockRanges;

/// One piece of work: these output rows against these ranges of the reduced index (none: the
/// rows get the reduction's identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Work<'a> {
    pub rows: Range<usize>,
    pub reduced: &'a [Range<usize>],
}

/// The work of a reduction over `n_out` output rows in pieces of at most `most_rows` rows, in the
/// order of the rows and covering them all.
pub fn pieces(ranges: &BlockRanges, n_out: usize, most_rows: usize) -> Vec<Work<'_>> {
    let mut work = Vec::new();
    let mut push = |rows: Range<usize>, reduced| {
        for start in rows.clone().step_by(most_rows.max(1)) {
            work.push(Work { rows: start..(start + most_rows).min(rows.end), reduced });
        }
    };
    let mut row = 0;
    let mut first = 0;
    for (block, &end) in ranges.blocks.iter().zip(&ranges.slices) {
        // (Empty blocks may sit anywhere.)
        if !block.is_empty() {
            push(row..block.start, &[]);
            push(block.clone(), &ranges.reduced[first..end]);
            row = block.end;
        }
        first = end;
    }
    push(row..n_out, &[]);
    work
}

/// Output rows per piece on the CPU's `threads`: enough pieces to keep every thread busy to the
/// end, few enough to amortise a tile, and the states of a piece's rows (`state_bytes` each)
/// within a thread's `budget`.
pub fn cpu_piece_rows(n_out: usize, threads: usize, state_bytes: usize, budget: usize) -> usize {
    n_out.div_ceil(threads * 8).clamp(1, 64).min((budget / state_bytes.max(1)).max(1))
}

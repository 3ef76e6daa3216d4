//! How one GPU cuts a reduction: blocks of rows that fit in its memory (`Blocks`), steps of the
//! reduced range short enough that Ctrl-C stops a long reduction within a second (`Steps`), and
//! chunks of the reduced range run side by side when the output rows alone cannot fill the device
//! (the 2D scheme, `chunks_for`). Their states are merged in order on the device, as the
//! reduction's merge says (`cuda::launch` runs the steps).

use std::ops::Range;

/// Resident blocks per multiprocessor we aim for before splitting the reduced range: one per
/// REDUCED_ROWS_PER_BLOCK reduced rows, from 1 to BLOCKS_PER_SM. Merging many short chunks costs
/// more than their parallelism gives (H200, 2026-11-29, bench/RESULTS.md: a Sinkhorn program at 1e4
/// points 6.35 ms with 8, 5.10 with 2; 1847 landmarks best with 1; 1e5 and 5e6 reduced rows best
/// with 8).
const BLOCKS_PER_SM: usize = 8;
const REDUCED_ROWS_PER_BLOCK: usize = 4096;
/// The pairs of the first step of a long reduction (output rows times reduced rows); the next
/// steps are sized from its kernel time to take about STEP_SECONDS.
const FIRST_STEP_PAIRS: usize = 1 << 33;
const STEP_SECONDS: f64 = 0.25;
/// Output rows of a block come in whole warps (a block of the kernel may be partly empty).
pub const WARP: usize = 32;

/// A kernel on a device: `tile` threads per block, each computing `rows` output rows, on
/// `multiprocessors`.
#[derive(Debug, Clone, Copy)]
pub struct Geometry {
    pub tile: usize,
    pub rows: usize,
    pub multiprocessors: usize,
    /// A chunk of the 2D scheme covers a multiple of this many reduced rows: a tile for the kernels
    /// whose tiles must be whole (tensor-core dots), else a warp's width. Its states are merged on
    /// the device, cheaply: small problems (a few thousand rows) gain more from using every
    /// multiprocessor than from whole tiles (a block then loads a partial tile).
    pub granule: usize,
}

/// How many chunks of the reduced range to run side by side.
pub fn chunks_for(n_out: usize, n_red: usize, g: Geometry) -> usize {
    let blocks = n_out.div_ceil(g.tile * g.rows);
    let per_sm = (n_red / REDUCED_ROWS_PER_BLOCK).clamp(1, BLOCKS_PER_SM);
    let wanted = (per_sm * g.multiprocessors).div_ceil(blocks.max(1));
    let most = n_red.div_ceil(g.granule);
    wanted.min(most).max(1)
}

/// Bytes on the device per row of the inputs and per output row of the states and results.
pub struct Sizes {
    /// Per row of the output index, of the reduced index, and for the parameters and numbers.
    pub input_out: usize,
    pub input_red: usize,
    pub fixed: usize,
    pub state: usize,
    pub results: usize,
}

/// How many output and reduced rows go to the GPU at once: everything when it fits in memory; and
/// the granule of the chunks of the 2D scheme (`Geometry::granule` when everything fits, else a
/// tile: the states of many short chunks would take the memory of the rows).
#[derive(Debug, Clone, PartialEq)]
pub struct Blocks {
    pub rows_out: usize,
    pub rows_red: usize,
    pub granule: usize,
}

impl Blocks {
    /// The largest blocks of `n_out x n_red` whose buffers fit in `budget` bytes; `None` when not
    /// even one block of rows does.
    pub fn fit(g: Geometry, sizes: &Sizes, (n_out, n_red): (usize, usize), budget: usize) -> Option<Blocks> {
        let need = |g: Geometry, rows_out: usize, rows_red: usize| {
            let chunks = chunks_for(rows_out, rows_red, g);
            // (the running states of a reduction in steps, or of blocks of the reduced range, too)
            let in_steps = rows_red < n_red || rows_out.saturating_mul(n_red) > FIRST_STEP_PAIRS;
            let states = if chunks > 1 || in_steps { chunks + 1 } else { 0 };
            rows_out * (sizes.input_out + sizes.results + states * sizes.state)
                + rows_red * sizes.input_red
                + sizes.fixed
        };
        if need(g, n_out, n_red) <= budget {
            return Some(Blocks { rows_out: n_out.max(1), rows_red: n_red.max(1), granule: g.granule });
        }
        let g = Geometry { granule: g.tile, ..g };
        let need = |rows_out: usize, rows_red: usize| need(g, rows_out, rows_red);
        // Rows with large states (K-selections of wide formulas) may leave room for a few hundred.
        // A quarter of the budget for the reduced rows, the rest for the output rows and their states.
        let rows_red = ((budget / 4 / sizes.input_red.max(1)).min(n_red) / g.tile * g.tile).max(g.tile);
        let per_out = sizes.input_out + sizes.results + 2 * sizes.state;
        let mut rows_out = (budget / 2 / per_out.max(1)).min(n_out) / WARP * WARP;
        while rows_out > 0 && need(rows_out, rows_red) > budget {
            rows_out = rows_out / 2 / WARP * WARP;
        }
        (rows_out > 0 && need(rows_out, rows_red) <= budget).then_some(Blocks { rows_out, rows_red, granule: g.tile })
    }
}

/// One step: these output rows against these reduced rows, the `first` and/or the `last` of the
/// reduced range for these output rows.
#[derive(Debug, Clone, PartialEq)]
pub struct StepRows {
    pub out: Range<usize>,
    pub red: Range<usize>,
    pub first: bool,
    pub last: bool,
}

/// The steps of a call in order: its blocks of output rows, each against the blocks of the reduced
/// range. A long reduction (when its rows may be cut) is cut the same way into steps of about
/// STEP_SECONDS each, sized from the kernel time of the steps before (`took`).
pub struct Steps {
    span_out: Range<usize>,
    span_red: Range<usize>,
    blocks: Blocks,
    tile: usize,
    long: bool,
    step_rows: usize,
    next_out: usize,
    next_red: usize,
}

impl Steps {
    pub fn new(span_out: Range<usize>, span_red: Range<usize>, blocks: Blocks, tile: usize, cuttable: bool) -> Steps {
        let long = cuttable && blocks.rows_out.saturating_mul(span_red.len()) > FIRST_STEP_PAIRS;
        let step_rows = match long {
            true => whole_tiles(FIRST_STEP_PAIRS / blocks.rows_out.max(1), tile).min(blocks.rows_red),
            false => blocks.rows_red,
        };
        let (next_out, next_red) = (span_out.start, span_red.start);
        Steps { span_out, span_red, blocks, tile, long, step_rows, next_out, next_red }
    }

    /// The kernel of the last step took `seconds`: the next steps of a long reduction are sized to
    /// take about STEP_SECONDS.
    pub fn took(&mut self, seconds: f64) {
        if self.long && seconds > 0.0 {
            let rows = (self.step_rows as f64 * (STEP_SECONDS / seconds).min(64.0)) as usize;
            self.step_rows = whole_tiles(rows, self.tile).min(self.blocks.rows_red);
        }
    }
}

impl Iterator for Steps {
    type Item = StepRows;

    fn next(&mut self) -> Option<StepRows> {
        if self.next_red >= self.span_red.end {
            return None; // (an empty reduced range: no step)
        }
        if self.next_out >= self.span_out.end {
            return None;
        }
        let out = self.next_out..(self.next_out + self.blocks.rows_out).min(self.span_out.end);
        let red = self.next_red..(self.next_red + self.step_rows).min(self.span_red.end);
        let step = StepRows { first: red.start == self.span_red.start, last: red.end == self.span_red.end, out, red };
        self.next_red = step.red.end;
        if step.last {
            (self.next_out, self.next_red) = (step.out.end, self.span_red.start);
        }
        Some(step)
    }
}

/// `rows` down to whole tiles, at least one.
fn whole_tiles(rows: usize, tile: usize) -> usize {
    (rows / tile * tile).max(tile)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn steps_cover_each_block_of_rows_against_the_whole_reduced_range() {
        let blocks = Blocks { rows_out: 1000, rows_red: 300, granule: 256 };
        let steps: Vec<StepRows> = Steps::new(5..2500, 7..1007, blocks, 128, true).collect();
        // 3 blocks of output rows (1000, 1000, 495) x 4 blocks of reduced rows (300, 300, 300, 100).
        assert_eq!(steps.len(), 12);
        for (k, s) in steps.iter().enumerate() {
            let (b, r) = (k / 4, k % 4);
            assert_eq!(s.out, 5 + 1000 * b..(5 + 1000 * (b + 1)).min(2500));
            assert_eq!(s.red, 7 + 300 * r..(7 + 300 * (r + 1)).min(1007));
            assert_eq!((s.first, s.last), (r == 0, r == 3));
        }
        assert_eq!(Steps::new(0..10, 3..3, Blocks { rows_out: 10, rows_red: 1, granule: 256 }, 128, true).count(), 0);
    }

    #[test]
    fn long_reductions_are_cut_into_steps_sized_by_their_kernel_time() {
        let n = 1 << 20;
        let blocks = Blocks { rows_out: n, rows_red: 1 << 24, granule: 256 };
        let mut steps = Steps::new(0..n, 0..1 << 24, blocks.clone(), 256, true);
        let first = steps.next().unwrap();
        assert_eq!(first.red, 0..FIRST_STEP_PAIRS / n);
        // A step that took 1 s: the next one a quarter as long.
        steps.took(1.0);
        let second = steps.next().unwrap();
        assert_eq!(second.red.len(), first.red.len() / 4);
        // Not cuttable (inputs kept on the device): one step.
        assert_eq!(Steps::new(0..n, 0..1 << 24, blocks, 256, false).count(), 1);
    }

    #[test]
    fn blocks_fit_the_budget_or_say_none() {
        let g = Geometry { tile: 256, rows: 1, multiprocessors: 132, granule: 256 };
        let sizes = Sizes { input_out: 12, input_red: 16, fixed: 100, state: 8, results: 4 };
        assert_eq!(
            Blocks::fit(g, &sizes, (10_000, 20_000), 1 << 30),
            Some(Blocks { rows_out: 10_000, rows_red: 20_000, granule: 256 })
        );
        let b = Blocks::fit(g, &sizes, (10_000_000, 20_000_000), 100 << 20).unwrap();
        assert!(b.rows_out.is_multiple_of(WARP) && b.rows_red.is_multiple_of(256) && b.rows_out < 10_000_000, "{b:?}");
        assert_eq!(Blocks::fit(g, &sizes, (10_000_000, 20_000_000), 1000), None);
        // Chunks of a warp when everything fits at once; of whole tiles when memory is tight (the
        // states of many short chunks would not fit: 300 kB for 5000 x 3001 rows).
        let warp = Geometry { granule: WARP, ..g };
        assert_eq!(Blocks::fit(warp, &sizes, (5000, 3001), 1 << 30).unwrap().granule, WARP);
        let tight = Blocks::fit(warp, &sizes, (5000, 3001), 300_000).unwrap();
        assert_eq!(tight.granule, 256, "{tight:?}");
    }
}

//! Blocks of output rows computed apart, one per host process (R's future path): a reduction is
//! independent from one output row to the next, so each block is a whole reduction of its own,
//! sent only the rows it needs, and the blocks' results are stacked. This file decides the blocks;
//! the caller slices the data and ships it.

use std::ops::Range;

use crate::ranges::BlockRanges;

/// One block: these output rows, the reduced rows it needs, and its ranges in its own terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostBlock {
    /// Its output rows.
    pub rows: Range<usize>,
    /// The reduced rows sent to it: all of them without ranges; with ranges, from the first to the
    /// last that its ranges visit (at least one row: a reduction needs data). Indices that the block
    /// returns count from `reduced.start`.
    pub reduced: Range<usize>,
    /// With ranges: those of its rows, shifted to start at `rows.start` and `reduced.start`.
    pub ranges: Option<BlockRanges>,
}

/// `n_out` output rows (against `n_red` reduced rows) in `blocks` contiguous blocks of nearly equal
/// sizes (at least one, at most one per row); `ranges`: those of the reduction's axis, already
/// checked against `n_out` and `n_red` (`Ranges::validate`).
pub fn host_blocks(n_out: usize, n_red: usize, blocks: usize, ranges: Option<&BlockRanges>) -> Vec<HostBlock> {
    let cuts = row_cuts(n_out, blocks);
    cuts.windows(2)
        .map(|w| {
            let rows = w[0]..w[1];
            match ranges {
                None => HostBlock { rows, reduced: 0..n_red, ranges: None },
                Some(r) => {
                    let (ranges, reduced) = cut_ranges(r, rows.clone(), n_red);
                    HostBlock { rows, reduced, ranges: Some(ranges) }
                }
            }
        })
        .collect()
}

/// The block boundaries, as R's `round(seq(0, n_out, length.out = blocks + 1))` (rkeops 1.x cut
/// there, and results with ties depend on the cut): `k * (n_out / blocks)` rounded half to even.
fn row_cuts(n_out: usize, blocks: usize) -> Vec<usize> {
    let blocks = blocks.min(n_out).max(1);
    let step = n_out as f64 / blocks as f64;
    let inner = (1..blocks).map(|k| (k as f64 * step).round_ties_even() as usize);
    std::iter::once(0).chain(inner).chain(std::iter::once(n_out)).collect()
}

/// The ranges of the output rows `rows`: the blocks that meet them, cut to them, with their
/// non-empty reduced ranges, all shifted to the block's rows and to the reduced rows they span,
/// which are returned too.
fn cut_ranges(ranges: &BlockRanges, rows: Range<usize>, n_red: usize) -> (BlockRanges, Range<usize>) {
    let mut cut = BlockRanges::default();
    let mut first = 0;
    for (block, &end) in ranges.blocks.iter().zip(&ranges.slices) {
        let (start, stop) = (block.start.max(rows.start), block.end.min(rows.end));
        if start < stop {
            cut.blocks.push(start - rows.start..stop - rows.start);
            cut.reduced.extend(ranges.reduced[first..end].iter().filter(|r| r.start < r.end).cloned());
            cut.slices.push(cut.reduced.len());
        }
        first = end;
    }
    // (a block that reduces over nothing still gets one row: the engine needs data)
    let from = cut.reduced.iter().map(|r| r.start).min().unwrap_or(0);
    let to = cut.reduced.iter().map(|r| r.end).max().unwrap_or(n_red.min(1));
    for r in &mut cut.reduced {
        *r = r.start - from..r.end - from;
    }
    (cut, from..to)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ranges::Ranges;

    /// The reduced rows that output row `row` visits, in increasing order (brute force).
    fn visited(ranges: &BlockRanges, row: usize) -> Vec<usize> {
        let mut first = 0;
        for (block, &end) in ranges.blocks.iter().zip(&ranges.slices) {
            if block.contains(&row) {
                let mut rows: Vec<usize> = ranges.reduced[first..end].iter().flat_map(|r| r.clone()).collect();
                rows.sort_unstable();
                return rows;
            }
            first = end;
        }
        vec![]
    }

    /// Small deterministic pseudo-random numbers (no dependency).
    struct Lcg(u64);
    impl Lcg {
        fn below(&mut self, n: usize) -> usize {
            self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            ((self.0 >> 33) as usize) % n.max(1)
        }
    }

    /// Sorted disjoint ranges within `0..n` cut at random points, some empty, some left out.
    fn random_partition(rng: &mut Lcg, n: usize) -> Vec<Range<usize>> {
        let mut cuts: Vec<usize> = (0..rng.below(6) + 1).map(|_| rng.below(n + 1)).collect();
        cuts.extend([0, n]);
        cuts.sort_unstable();
        cuts.windows(2).filter(|_| rng.below(4) != 0).map(|w| w[0]..w[1]).collect()
    }

    #[test]
    fn cuts_are_those_of_r() {
        // R: round(seq(0, n, length.out = b + 1)); 5 / 2 = 2.5 rounds to 2 (half to even)
        assert_eq!(row_cuts(5, 2), [0, 2, 5]);
        assert_eq!(row_cuts(203, 3), [0, 68, 135, 203]);
        assert_eq!(row_cuts(4, 4), [0, 1, 2, 3, 4]);
        assert_eq!(row_cuts(10, 4), [0, 2, 5, 8, 10]);
        assert_eq!(row_cuts(7, 4), [0, 2, 4, 5, 7]);
        assert_eq!(row_cuts(3, 1000), [0, 1, 2, 3]);
        assert_eq!(row_cuts(9, 0), [0, 9]);
    }

    #[test]
    fn blocks_cover_the_rows_in_nearly_equal_parts() {
        for n in 1..60 {
            for b in 1..15 {
                let blocks = host_blocks(n, 7, b, None);
                assert_eq!(blocks.len(), b.min(n));
                assert_eq!(blocks.iter().flat_map(|h| h.rows.clone()).collect::<Vec<_>>(), (0..n).collect::<Vec<_>>());
                let sizes: Vec<usize> = blocks.iter().map(|h| h.rows.len()).collect();
                assert!(sizes.iter().max().unwrap() - sizes.iter().min().unwrap() <= 1, "{n} {b} {sizes:?}");
                assert!(blocks.iter().all(|h| h.reduced == (0..7) && h.ranges.is_none()));
            }
        }
    }

    #[test]
    fn each_row_visits_the_same_reduced_rows_as_before_the_cut() {
        let mut rng = Lcg(36);
        let mut shifted = 0; // blocks sent a part of the reduced rows that starts past row 0
        for case in 0..400 {
            let (n_out, n_red) = (rng.below(40) + 1, rng.below(30) + 1);
            let (bi, bj) = (random_partition(&mut rng, n_out), random_partition(&mut rng, n_red));
            if bi.is_empty() || bj.is_empty() {
                continue;
            }
            let pairs: Vec<(usize, usize)> =
                (0..rng.below(12)).map(|_| (rng.below(bi.len()), rng.below(bj.len()))).collect();
            let ranges = Ranges::from_block_pairs(&bi, &bj, &pairs).unwrap();
            ranges.validate(n_out, n_red).unwrap();
            for blocks in [1, 2, 3, 5, 50] {
                for h in host_blocks(n_out, n_red, blocks, Some(&ranges.i)) {
                    let cut = h.ranges.as_ref().unwrap();
                    let whole = Ranges { i: cut.clone(), j: BlockRanges::default() };
                    whole.validate(h.rows.len(), h.reduced.len()).unwrap();
                    let mut seen = vec![];
                    for row in h.rows.clone() {
                        let here: Vec<usize> =
                            visited(cut, row - h.rows.start).iter().map(|r| r + h.reduced.start).collect();
                        assert_eq!(here, visited(&ranges.i, row), "case {case}, row {row}");
                        seen.extend(here);
                    }
                    // the reduced rows sent are exactly those visited (one row when none is)
                    let (lo, hi) = (seen.iter().min().copied(), seen.iter().max().map(|m| m + 1));
                    assert_eq!(h.reduced, lo.unwrap_or(0)..hi.unwrap_or(1), "case {case}");
                    shifted += usize::from(h.reduced.start > 0 && h.rows.start > 0);
                    assert!(cut.reduced.iter().all(|r| !r.is_empty()) && cut.blocks.iter().all(|r| !r.is_empty()));
                }
            }
        }
        assert!(shifted > 100, "{shifted}");
    }
}

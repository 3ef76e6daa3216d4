//! Which part of a reduction each of several GPUs computes (`cuda::several` runs them). Long outputs
//! are split into blocks of output rows, in proportion to each device's multiprocessors (a
//! block-sparse reduction at the boundaries of its pieces of work, in proportion to their pairs);
//! short ones, which would not fill the devices, into parts of the reduced range whose states are
//! merged.

use std::ops::Range;

use super::work::pieces;
use crate::backend::Part;
use crate::ranges::BlockRanges;

/// What each device computes, and how to put the parts together.
#[derive(Debug, PartialEq)]
pub enum Split {
    /// Blocks of output rows, against the whole reduced range.
    Rows(Vec<Part>),
    /// Parts of the reduced range for all the output rows: their states are merged.
    Reduced(Vec<Part>),
}

impl Split {
    pub fn parts(&self) -> &[Part] {
        match self {
            Split::Rows(p) | Split::Reduced(p) => p,
        }
    }
}

/// How the reduction is split over devices of these `weights` (their relative speeds): `granule`
/// output rows make one block of the kernel, `tile` reduced rows one tile, and a device needs
/// `fill` blocks of rows to be busy. Empty parts are left out.
pub fn plan(
    (n_out, n_red): (usize, usize),
    weights: &[f64],
    (granule, tile, fill): (usize, usize, usize),
    ranges: Option<&BlockRanges>,
) -> Split {
    let nonempty = |parts: Vec<Part>| parts.into_iter().filter(|p| !p.out.is_empty() && !p.red.is_empty()).collect();
    if let Some(ranges) = ranges {
        // At the boundaries of the pieces of work of the kernels (blocks of rows of the ranges, cut
        // into blocks of the grid), in proportion to the pairs they reduce (a row with nothing to
        // reduce still costs its write).
        let work = pieces(ranges, n_out, granule);
        let costs: Vec<f64> = work
            .iter()
            .map(|w| w.rows.len() as f64 * (1 + w.reduced.iter().map(|r| r.len()).sum::<usize>()) as f64)
            .collect();
        let ends: Vec<usize> = work.iter().map(|w| w.rows.end).collect();
        let cuts = cut_at(&costs, weights);
        let mut start = 0;
        let parts = cuts
            .iter()
            .map(|&items| {
                let end = if items == 0 { 0 } else { ends[items - 1] }.max(start);
                let part = Part { out: start..end, red: 0..n_red };
                start = end;
                part
            })
            .collect();
        return Split::Rows(nonempty(parts));
    }
    let devices = weights.len().max(1);
    let short = n_out.div_ceil(devices) < granule * fill && n_red >= devices * tile;
    match short {
        true => Split::Reduced(nonempty(
            proportional(n_red, weights, tile).into_iter().map(|red| Part { out: 0..n_out, red }).collect(),
        )),
        false => Split::Rows(nonempty(
            proportional(n_out, weights, granule).into_iter().map(|out| Part { out, red: 0..n_red }).collect(),
        )),
    }
}

/// `0..n` in consecutive ranges in proportion to `weights`, their ends multiples of `granule`
/// (but the last).
pub(crate) fn proportional(n: usize, weights: &[f64], granule: usize) -> Vec<Range<usize>> {
    let total: f64 = weights.iter().sum();
    let granule = granule.max(1);
    let mut sum = 0.0;
    let mut start = 0;
    weights
        .iter()
        .enumerate()
        .map(|(k, w)| {
            sum += w;
            let end = match k + 1 == weights.len() {
                true => n,
                false => ((n as f64 * sum / total / granule as f64).round() as usize * granule).clamp(start, n),
            };
            let range = start..end;
            start = end;
            range
        })
        .collect()
}

/// The number of items before each cut (the last: all of them) so that the items' `costs` are
/// shared in proportion to `weights`.
fn cut_at(costs: &[f64], weights: &[f64]) -> Vec<usize> {
    let (total, weight): (f64, f64) = (costs.iter().sum(), weights.iter().sum());
    let mut cuts = Vec::with_capacity(weights.len());
    let (mut items, mut done, mut share) = (0, 0.0, 0.0);
    for (k, w) in weights.iter().enumerate() {
        share += w / weight * total;
        if k + 1 == weights.len() {
            items = costs.len();
        }
        // Take an item while that brings the sum closer to this device's share.
        while items < costs.len() && (done + costs[items] - share).abs() <= (done - share).abs() {
            done += costs[items];
            items += 1;
        }
        cuts.push(items);
    }
    cuts
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers(parts: &[Range<usize>], n: usize) -> bool {
        parts.first().map_or(n == 0, |p| p.start == 0)
            && parts.last().map_or(n == 0, |p| p.end == n)
            && parts.windows(2).all(|w| w[0].end == w[1].start)
    }

    #[test]
    fn long_outputs_are_split_into_blocks_of_rows_in_proportion() {
        let split = plan((100_003, 5_000), &[132.0, 132.0, 66.0], (256, 128, 100), None);
        let Split::Rows(parts) = split else { panic!("expected blocks of rows, got {split:?}") };
        let rows: Vec<Range<usize>> = parts.iter().map(|p| p.out.clone()).collect();
        assert!(covers(&rows, 100_003), "{rows:?}");
        assert!(parts.iter().all(|p| p.red == (0..5_000)));
        assert!(rows[..2].iter().all(|r| r.end % 256 == 0), "{rows:?}");
        // 2 : 2 : 1 up to a block of rows
        for (r, share) in rows.iter().zip([0.4, 0.4, 0.2]) {
            assert!((r.len() as f64 - share * 100_003.0).abs() <= 256.0, "{rows:?}");
        }
    }

    #[test]
    fn short_outputs_are_split_over_the_reduced_range() {
        let split = plan((100, 10_000_001), &[1.0, 1.0], (256, 128, 1056), None);
        let Split::Reduced(parts) = split else { panic!("expected parts of the reduced range, got {split:?}") };
        let red: Vec<Range<usize>> = parts.iter().map(|p| p.red.clone()).collect();
        assert!(covers(&red, 10_000_001) && red[0].end.is_multiple_of(128), "{red:?}");
        assert!((red[0].len() as f64 - 5e6).abs() <= 128.0 && parts.iter().all(|p| p.out == (0..100)));
        // Too short a reduced range to share: one part, nothing empty.
        let split = plan((100, 200), &[1.0, 1.0], (256, 128, 1056), None);
        assert_eq!(split, Split::Rows(vec![Part { out: 0..100, red: 0..200 }]));
    }

    #[test]
    fn block_sparse_reductions_are_split_at_their_blocks_in_proportion_to_their_pairs() {
        // Rows 0..10 reduce 1000 indices, rows 10..1000 reduce 10 each, rows 1000..1010 nothing.
        let ranges = BlockRanges { blocks: vec![0..10, 10..1000], slices: vec![1, 2], reduced: vec![0..1000, 5..15] };
        let split = plan((1010, 2000), &[1.0, 1.0], (256, 128, 1056), Some(&ranges));
        let Split::Rows(parts) = split else { panic!("expected blocks of rows, got {split:?}") };
        let rows: Vec<Range<usize>> = parts.iter().map(|p| p.out.clone()).collect();
        // 10 x 1001 against 990 x 11 + 10: the first block alone, the rest to the other device.
        assert_eq!(rows, vec![0..10, 10..1010]);
    }

    #[test]
    fn cuts_share_costs_as_the_weights_say() {
        assert_eq!(cut_at(&[1.0; 10], &[1.0, 1.0]), vec![5, 10]);
        assert_eq!(cut_at(&[1.0; 10], &[3.0, 1.0]), vec![8, 10]);
        assert_eq!(cut_at(&[9.0, 1.0], &[1.0, 1.0]), vec![1, 2]);
        assert_eq!(cut_at(&[], &[1.0, 1.0]), vec![0, 0]);
        assert_eq!(proportional(10, &[1.0, 1.0, 1.0], 4), vec![0..4, 4..8, 8..10]);
        assert_eq!(proportional(3, &[1.0, 1.0], 256), vec![0..0, 0..3]);
    }
}

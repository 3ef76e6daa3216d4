//! Random block-sparse ranges for the tests of `ranges` on the CPU and the GPU (included by path,
//! beside `common`, so that `common` stays free of engine types: the CPU unit tests include it too).

/// Blocks of 1 to 40 output rows with gaps between some, some empty, each reducing over 0 to 4
/// sorted disjoint ranges of the reduced index (some empty, some of 1 to 3 indices).
pub fn random_ranges(n_out: usize, n_red: usize, seed: u64) -> engine::BlockRanges {
    let mut u = super::common::random(100_000, seed).into_iter();
    let mut next = move || u.next().expect("enough random numbers");
    let mut ranges = engine::BlockRanges::default();
    let mut row = 0;
    while row < n_out {
        let start = (row + if next() < 0.2 { (next() * 5.0) as usize } else { 0 }).min(n_out);
        let len = if next() < 0.1 { 0 } else { 1 + (next() * 40.0) as usize };
        let end = (start + len).min(n_out);
        ranges.blocks.push(start..end);
        let mut j = 0;
        for _ in 0..(next() * 5.0) as usize {
            let first = j + (next() * n_red as f64 / 4.0) as usize;
            if first > n_red {
                break;
            }
            let len = if next() < 0.2 { (next() * 4.0) as usize } else { (next() * n_red as f64 / 3.0) as usize };
            let last = (first + len).min(n_red);
            ranges.reduced.push(first..last);
            j = last;
        }
        ranges.slices.push(ranges.reduced.len());
        row = end;
    }
    ranges
}

//! Block-sparse reductions (KeOps' `ranges`): which blocks of the symbolic matrix a reduction
//! visits. Each block of output rows reduces over a list of ranges of the reduced index; rows in no
//! block, and blocks with no range, get the reduction's identity. Both backends take the same
//! description of the work (`schedule::work`).

use std::ops::Range;

use crate::error::{Error, Result};

/// For one axis: blocks of the output index, each with the ranges of the reduced index it reduces
/// over (0-based, half-open). Block `b` reduces over `reduced[slices[b - 1]..slices[b]]`
/// (`slices[-1]` being 0).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct BlockRanges {
    pub blocks: Vec<Range<usize>>,
    pub slices: Vec<usize>,
    pub reduced: Vec<Range<usize>>,
}

/// Both axes, as KeOps: `i` for reductions over j (axis 0; blocks of i, ranges of j), `j` for
/// reductions over i (axis 1) and the gradients that reduce over i.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Ranges {
    pub i: BlockRanges,
    pub j: BlockRanges,
}

impl Ranges {
    /// The part that a reduction over `axis` uses.
    pub fn for_axis(&self, axis: usize) -> &BlockRanges {
        if axis == 0 {
            &self.i
        } else {
            &self.j
        }
    }

    /// Ranges that keep the pairs `(k, l)` of blocks of i and j (see `BlockRanges::from_block_pairs`).
    pub fn from_block_pairs(blocks_i: &[Range<usize>], blocks_j: &[Range<usize>], pairs: &[(usize, usize)]) -> Result<Ranges> {
        Ok(Ranges {
            i: BlockRanges::from_block_pairs(blocks_i, blocks_j, pairs.iter().copied())?,
            j: BlockRanges::from_block_pairs(blocks_j, blocks_i, pairs.iter().map(|&(k, l)| (l, k)))?,
        })
    }

    /// Checks both parts against the sizes of i and j; the error names the part and what is wrong.
    pub fn validate(&self, n_i: usize, n_j: usize) -> Result<()> {
        self.validate_in_order(n_i, n_j, true)
    }

    /// `validate`, with the reduced ranges of each block in any order (still disjoint) where not
    /// `sorted` (`RunOptions::ranges_in_any_order`).
    pub fn validate_in_order(&self, n_i: usize, n_j: usize, sorted: bool) -> Result<()> {
        self.i.validate(n_i, n_j, ("ranges_i", "slices_i", "redranges_j"), sorted)?;
        self.j.validate(n_j, n_i, ("ranges_j", "slices_j", "redranges_i"), sorted)
    }
}

impl BlockRanges {
    /// The mean number of reduced rows that an output row in a block reduces over.
    pub fn mean_reduced(&self) -> f64 {
        let (mut rows, mut pairs) = (0usize, 0usize);
        for (b, block) in self.blocks.iter().enumerate() {
            let first = if b == 0 { 0 } else { self.slices[b - 1] };
            let reduced: usize = self.reduced[first..self.slices[b]].iter().map(|r| r.len()).sum();
            rows += block.len();
            pairs += block.len() * reduced;
        }
        pairs as f64 / rows.max(1) as f64
    }

    /// Every output row against the whole reduced range (a dense reduction).
    pub fn dense(n_out: usize, n_red: usize) -> BlockRanges {
        BlockRanges { blocks: vec![0..n_out], slices: vec![1], reduced: vec![0..n_red] }
    }

    /// Block `k` of `blocks` reduces over the blocks `other[l]` of the pairs `(k, l)` (any order,
    /// repeats allowed; pairs with an empty block hold nothing and are left out): its kept blocks
    /// in increasing order, those that touch merged into one range. The blocks of each axis must
    /// be sorted and disjoint, as `validate` checks; pairs must number existing blocks.
    pub fn from_block_pairs(
        blocks: &[Range<usize>],
        other: &[Range<usize>],
        pairs: impl Iterator<Item = (usize, usize)> + Clone,
    ) -> Result<BlockRanges> {
        if let Some((k, l)) = pairs.clone().find(|&(k, l)| k >= blocks.len() || l >= other.len()) {
            return Err(Error::Invalid(format!(
                "ranges: the pair ({}, {}) names a block that does not exist ({} and {} blocks)",
                k + 1,
                l + 1,
                blocks.len(),
                other.len()
            )));
        }
        let kept = pairs.filter(|&(k, l)| !blocks[k].is_empty() && !other[l].is_empty());
        // Counting sort of the pairs by k, then each block's partners sorted on their own.
        let mut first = vec![0usize; blocks.len() + 1];
        for (k, _) in kept.clone() {
            first[k + 1] += 1;
        }
        for k in 0..blocks.len() {
            first[k + 1] += first[k];
        }
        let mut partners = vec![0usize; first[blocks.len()]];
        let mut next = first.clone();
        for (k, l) in kept {
            partners[next[k]] = l;
            next[k] += 1;
        }
        let mut reduced: Vec<Range<usize>> = Vec::new();
        let mut slices = Vec::with_capacity(blocks.len());
        for k in 0..blocks.len() {
            let mine = &mut partners[first[k]..first[k + 1]];
            mine.sort_unstable();
            let block_start = reduced.len();
            for &l in mine.iter() {
                match reduced[block_start..].last_mut() {
                    Some(last) if last.end >= other[l].start => last.end = last.end.max(other[l].end),
                    _ => reduced.push(other[l].clone()),
                }
            }
            slices.push(reduced.len());
        }
        Ok(BlockRanges { blocks: blocks.to_vec(), slices, reduced })
    }

    fn validate(&self, n_out: usize, n_red: usize, (blocks, slices, reduced): (&str, &str, &str), sorted: bool) -> Result<()> {
        let invalid = |what: String| Err(Error::Invalid(format!("ranges: {what}")));
        if self.slices.len() != self.blocks.len() {
            return invalid(format!(
                "`{slices}` has {} values, one per block of `{blocks}` ({}) expected",
                self.slices.len(),
                self.blocks.len()
            ));
        }
        check_sorted(&self.blocks, 0, n_out, &|| format!("`{blocks}`"))?;
        let (mut start, mut in_order) = (0, Vec::new());
        for (b, &end) in self.slices.iter().enumerate() {
            if end < start || end > self.reduced.len() {
                return invalid(format!(
                    "`{slices}` must be non-decreasing and at most the {} rows of `{reduced}`: value {} is {end} after {start}",
                    self.reduced.len(),
                    b + 1
                ));
            }
            // (the name is written only for an error: a batch checks thousands of blocks per call)
            let name = || format!("`{reduced}` (a range of block {} of `{blocks}`)", b + 1);
            let ranges = &self.reduced[start..end];
            if sorted {
                check_sorted(ranges, start, n_red, &name)?;
            } else {
                in_order.clear();
                in_order.extend_from_slice(ranges);
                in_order.sort_by_key(|r| r.start);
                check_sorted(&in_order, start, n_red, &name)?;
            }
            start = end;
        }
        if start != self.reduced.len() {
            return invalid(format!(
                "the last value of `{slices}` must be the number of rows of `{reduced}` ({}), not {start}",
                self.reduced.len()
            ));
        }
        Ok(())
    }
}

/// Ranges within `0..n`, sorted and not overlapping (empty ones anywhere); `ranges` are the rows
/// `offset..` of the matrix `name`.
fn check_sorted(ranges: &[Range<usize>], offset: usize, n: usize, name: &dyn Fn() -> String) -> Result<()> {
    let mut end = 0;
    for (r, range) in ranges.iter().enumerate() {
        let what = if range.start > range.end {
            "ends before it starts"
        } else if range.end > n {
            "goes past the last index"
        } else if range.start < end && !range.is_empty() {
            "overlaps or precedes the range before it (ranges must be sorted and disjoint)"
        } else {
            end = end.max(range.end);
            continue;
        };
        return Err(Error::Invalid(format!(
            "ranges: row {} of {} ({}, {} in R's 1-based inclusive terms) {what}; there are {n} indices",
            offset + r + 1,
            name(),
            range.start + 1,
            range.end
        )));
    }
    Ok(())
}

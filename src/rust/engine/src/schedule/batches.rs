//! Batches: many independent problems of one formula in one call. The members are laid end to end
//! on each index and reduced with block-diagonal ranges (member b's i-rows against member b's
//! j-rows only). This file checks that the inputs make a batch and gives its layout; the caller
//! stacks the data.

use std::ops::Range;

use crate::error::{Error, Result};
use crate::formula::Category;
use crate::ranges::{BlockRanges, Ranges};

/// What the caller has of one input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Given {
    /// Not a batch: shared by every member; its rows.
    Shared(usize),
    /// A batch: the rows of each member (a batch of one member is shared by all).
    Members(Vec<usize>),
}

/// One input of the batched call: its variable's name and category, and what was given.
#[derive(Debug, Clone)]
pub struct BatchInput<'a> {
    pub name: &'a str,
    pub category: Category,
    pub given: Given,
}

/// The layout of a batch of `members` problems.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BatchPlan {
    pub members: usize,
    /// The rows of each member, on i (`[0]`) and on j (`[1]`).
    pub rows: [Vec<usize>; 2],
    /// The first row of each member on i and on j: what indices of a member count from.
    pub starts: [Vec<usize>; 2],
    /// Which inputs are batches of `members` members (the others are shared).
    pub batched: Vec<bool>,
    /// The block-diagonal ranges of the members; none for one member.
    pub ranges: Option<Ranges>,
}

/// Checks that `inputs` make a batch (every batch of the same number of members, or of one; each
/// member of the same rows on each index in every input) and lays it out.
pub fn batch_plan(inputs: &[BatchInput]) -> Result<BatchPlan> {
    let members = member_count(inputs)?;
    let batched: Vec<bool> =
        inputs.iter().map(|x| members > 1 && matches!(&x.given, Given::Members(m) if m.len() == members)).collect();
    let rows = [side_rows(inputs, &batched, members, Category::I)?, side_rows(inputs, &batched, members, Category::J)?];
    let starts = [starts(&rows[0]), starts(&rows[1])];
    let ranges = (members > 1).then(|| {
        let blocks = |side: usize| -> Vec<Range<usize>> {
            starts[side].iter().zip(&rows[side]).map(|(&s, &r)| s..s + r).collect()
        };
        let (i, j) = (blocks(0), blocks(1));
        Ranges { i: diagonal(&i, &j), j: diagonal(&j, &i) }
    });
    Ok(BatchPlan { members, rows, starts, batched, ranges })
}

/// How an input is named in messages that name two: "input 2 ('y')".
fn label(inputs: &[BatchInput], k: usize) -> String {
    format!("input {} ('{}')", k + 1, inputs[k].name)
}

fn input_error(input: &BatchInput, what: String) -> Error {
    Error::Input { name: input.name.to_string(), what }
}

/// The number of members: that of the batches, which must agree (a batch of one is shared).
fn member_count(inputs: &[BatchInput]) -> Result<usize> {
    let counts: Vec<Option<usize>> = inputs
        .iter()
        .map(|x| match &x.given {
            Given::Members(m) => Some(m.len()),
            Given::Shared(_) => None,
        })
        .collect();
    if let Some(k) = counts.iter().position(|&c| c == Some(0)) {
        return Err(input_error(&inputs[k], "is an empty batch (a list or array of no member)".into()));
    }
    let members = counts.iter().flatten().copied().max().unwrap_or(1);
    if let Some(k) = counts.iter().position(|&c| c.is_some_and(|c| c != 1 && c != members)) {
        let most = counts.iter().position(|&c| c == Some(members)).unwrap_or(k);
        let what = format!(
            "the batched inputs must have the same number of members (or one, shared by all): {} has {}, {} has {members}",
            label(inputs, k),
            counts[k].unwrap_or(0),
            label(inputs, most)
        );
        return Err(input_error(&inputs[k], what));
    }
    Ok(members)
}

/// The rows of each member on the index of `side` (I or J): from its batched variables, which must
/// agree, else from a shared one; shared variables must have as many rows as each member.
fn side_rows(inputs: &[BatchInput], batched: &[bool], members: usize, side: Category) -> Result<Vec<usize>> {
    let on_side: Vec<usize> = (0..inputs.len()).filter(|&k| inputs[k].category == side).collect();
    if on_side.is_empty() {
        return Err(Error::Invalid(format!(
            "a batched reduction needs at least one {} variable (the members are blocks of i and j rows)",
            side.keyword()
        )));
    }
    let mut rows: Option<(Vec<usize>, usize)> = None;
    for &k in on_side.iter().filter(|&&k| batched[k]) {
        let Given::Members(mine) = &inputs[k].given else { continue };
        match &rows {
            None => rows = Some((mine.clone(), k)),
            Some((first, at)) => {
                if let Some(b) = (0..members).find(|&b| first[b] != mine[b]) {
                    let what = format!(
                        "member {} has {} rows in {} but {} in {}",
                        b + 1,
                        first[b],
                        label(inputs, *at),
                        mine[b],
                        label(inputs, k)
                    );
                    return Err(input_error(&inputs[k], what));
                }
            }
        }
    }
    let mut rows = rows.map(|(r, _)| r);
    for &k in on_side.iter().filter(|&&k| !batched[k]) {
        let r = match &inputs[k].given {
            Given::Shared(r) => *r,
            Given::Members(m) => m[0],
        };
        let each = rows.get_or_insert_with(|| vec![r; members]);
        if let Some(&other) = each.iter().find(|&&e| e != r) {
            let what = format!("is shared by every member, so it needs as many rows as each member ({other}), not {r}");
            return Err(input_error(&inputs[k], what));
        }
    }
    Ok(rows.unwrap_or_default())
}

/// Block-diagonal ranges: block b of `out` against block b of `red` only.
fn diagonal(out: &[Range<usize>], red: &[Range<usize>]) -> BlockRanges {
    BlockRanges { blocks: out.to_vec(), slices: (1..=out.len()).collect(), reduced: red.to_vec() }
}

/// The first row of each member when they are laid end to end.
fn starts(rows: &[usize]) -> Vec<usize> {
    rows.iter()
        .scan(0, |next, &r| {
            let start = *next;
            *next += r;
            Some(start)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Category::{Param, I, J};

    fn input(name: &str, category: Category, given: Given) -> BatchInput<'_> {
        BatchInput { name, category, given }
    }

    fn message(inputs: &[BatchInput]) -> String {
        batch_plan(inputs).unwrap_err().to_string()
    }

    /// The block-diagonal ranges of members of `ni` i-rows and `nj` j-rows, from the engine's
    /// general constructor: the pairs (b, b) of blocks.
    fn diagonal_pairs(ni: &[usize], nj: &[usize]) -> Ranges {
        let blocks = |n: &[usize]| -> Vec<Range<usize>> {
            n.iter()
                .scan(0, |s, &r| {
                    *s += r;
                    Some(*s - r..*s)
                })
                .collect()
        };
        let pairs: Vec<(usize, usize)> = (0..ni.len()).map(|b| (b, b)).collect();
        Ranges::from_block_pairs(&blocks(ni), &blocks(nj), &pairs).unwrap()
    }

    #[test]
    fn lays_out_members_of_unequal_sizes_with_shared_inputs() {
        let inputs = [
            input("x", I, Given::Members(vec![3, 5, 2])),
            input("y", J, Given::Members(vec![4, 1, 6])),
            input("p", Param, Given::Members(vec![1, 1, 1])),
            input("b", J, Given::Members(vec![4, 1, 6])),
            input("s", Param, Given::Shared(1)),
            input("a", I, Given::Members(vec![3, 5, 2])),
        ];
        let plan = batch_plan(&inputs).unwrap();
        assert_eq!(plan.members, 3);
        assert_eq!(plan.rows, [vec![3, 5, 2], vec![4, 1, 6]]);
        assert_eq!(plan.starts, [vec![0, 3, 8], vec![0, 4, 5]]);
        assert_eq!(plan.batched, [true, true, true, true, false, true]);
        let ranges = plan.ranges.unwrap();
        assert_eq!(ranges, diagonal_pairs(&[3, 5, 2], &[4, 1, 6]));
        assert_eq!(ranges.i.blocks, [0..3, 3..8, 8..10]);
        assert_eq!(ranges.i.reduced, [0..4, 4..5, 5..11]);
        ranges.validate(10, 11).unwrap();
    }

    #[test]
    fn shared_inputs_and_batches_of_one_set_the_rows_of_every_member() {
        let inputs = [
            input("x", I, Given::Members(vec![2; 4])),
            input("y", J, Given::Shared(7)),
            input("b", J, Given::Members(vec![7])),
        ];
        let plan = batch_plan(&inputs).unwrap();
        assert_eq!(plan.rows, [vec![2; 4], vec![7; 4]]);
        assert_eq!(plan.batched, [true, false, false]);
        assert_eq!(plan.ranges.unwrap(), diagonal_pairs(&[2; 4], &[7; 4]));
        // a batch of one member everywhere: one problem, no ranges
        let one = [input("x", I, Given::Members(vec![5])), input("y", J, Given::Shared(3))];
        let plan = batch_plan(&one).unwrap();
        assert_eq!(
            (plan.members, plan.rows, plan.batched, plan.ranges),
            (1, [vec![5], vec![3]], vec![false, false], None)
        );
    }

    #[test]
    fn bad_batches_are_input_errors_naming_the_input() {
        let x = || input("x", I, Given::Members(vec![5; 3]));
        let y = |m: Vec<usize>| input("y", J, Given::Members(m));
        let err = batch_plan(&[x(), y(vec![4; 2])]).unwrap_err();
        assert_eq!(err.kind(), "input");
        assert!(matches!(&err, Error::Input { name, .. } if name == "y"));
        assert_eq!(
            err.to_string(),
            "input 'y': the batched inputs must have the same number of members (or one, shared by all): \
             input 2 ('y') has 2, input 1 ('x') has 3"
        );
        assert_eq!(message(&[x(), y(vec![])]), "input 'y': is an empty batch (a list or array of no member)");
        let b = input("b", J, Given::Members(vec![4, 4, 5]));
        assert_eq!(
            message(&[x(), y(vec![4; 3]), b]),
            "input 'b': member 3 has 4 rows in input 2 ('y') but 5 in input 3 ('b')"
        );
        let shared = input("b", J, Given::Shared(6));
        assert_eq!(
            message(&[x(), y(vec![4; 3]), shared]),
            "input 'b': is shared by every member, so it needs as many rows as each member (4), not 6"
        );
        let p = input("p", Param, Given::Members(vec![1; 3]));
        let err = batch_plan(&[p, y(vec![4; 3])]).unwrap_err();
        assert_eq!(err.kind(), "input");
        assert_eq!(
            err.to_string(),
            "a batched reduction needs at least one Vi variable (the members are blocks of i and j rows)"
        );
    }
}

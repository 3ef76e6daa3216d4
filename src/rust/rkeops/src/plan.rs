//! Plans that R asks of the engine before it sends any data (engine/src/schedule): the blocks of
//! output rows of the future path (R/future.R) and the layout of a batch (R/batch.R). Two
//! functions rather than one with a kind: they take and return different things.

use std::ops::Range;

use engine::formula::Category;
use engine::ranges::{BlockRanges, Ranges};
use engine::schedule::batches::{batch_plan, BatchInput, Given};
use engine::schedule::host_blocks::host_blocks;
use extendr_api::prelude::*;

use crate::{guarded, Fallible, OrInput, RError};

/// `keops_future_blocks(formula, args, inputs, blocks, ranges)`: checks the shapes of `inputs`
/// (numeric vectors and matrices, in the order of the formula's variables) as one call would, and
/// cuts the output rows into `blocks` blocks. Returns `list(first, last, from, to, ranges)`: each
/// block's output rows `first + 1` to `last` and reduced rows `from + 1` to `to` (0-based starts,
/// exclusive ends), and with `ranges` (R's `ranges_for_engine()` form) each block's own, else NULL.
#[extendr]
fn keops_future_blocks(formula: &str, args: Robj, inputs: Robj, blocks: i32, ranges: Robj) -> Robj {
    guarded(|| {
        let op = crate::operator(formula, &crate::strings(&args, "args")?)?;
        let list = inputs.as_list().or_input("input", "the inputs must be a list")?;
        let names = op.formula.variables.iter().map(|v| v.name.as_str()).chain(std::iter::repeat("?"));
        let shapes = list
            .values()
            .zip(names)
            .map(|(x, name)| crate::numeric_input(&x, name).map(|i| (i.nrow, i.ncol)))
            .collect::<Fallible<Vec<_>>>()?;
        let (n_i, n_j) = op.sizes(&shapes)?;
        let ranges = crate::block_sparse(&ranges)?;
        if let Some(r) = &ranges {
            r.validate(n_i, n_j)?;
        }
        let axis = op.formula.reduction.axis;
        let (n_out, n_red) = if axis == 0 { (n_i, n_j) } else { (n_j, n_i) };
        let plan = host_blocks(n_out, n_red, blocks.max(1) as usize, ranges.as_ref().map(|r| r.for_axis(axis)));
        let block_ranges = match ranges {
            None => Robj::from(()),
            Some(_) => {
                let cuts = plan.iter().filter_map(|h| h.ranges.as_ref()).map(|cut| r_ranges(&on_axis(cut, axis)));
                List::from_values(cuts.collect::<Fallible<Vec<_>>>()?).into()
            }
        };
        Ok(List::from_names_and_values(
            ["first", "last", "from", "to", "ranges"],
            [
                ints(plan.iter().map(|h| h.rows.start))?,
                ints(plan.iter().map(|h| h.rows.end))?,
                ints(plan.iter().map(|h| h.reduced.start))?,
                ints(plan.iter().map(|h| h.reduced.end))?,
                block_ranges,
            ],
        )?
        .into())
    })
}

/// `keops_batch_plan(names, categories, members, rows)`: for each input, its variable's name and
/// category (`"Vi"`, `"Vj"`, `"Pm"`), its number of members (NA: not a batch, shared by all) and
/// its rows (one value per member; one value for an input that is not a batch). Checks that they
/// make a batch and returns `list(B, rows = list(Vi, Vj), starts = list(Vi, Vj), batched, ranges)`:
/// the rows of each member and its first row (0-based) on each index, which inputs are batches of
/// `B` members, and the block-diagonal ranges (R's `ranges_for_engine()` form; NULL for B = 1).
#[extendr]
fn keops_batch_plan(names: Robj, categories: Robj, members: Robj, rows: Robj) -> Robj {
    guarded(|| {
        let names = crate::strings(&names, "names")?;
        let categories = crate::strings(&categories, "categories")?;
        let members = members.as_integer_slice().or_input("members", "'members' must be integers")?;
        let rows: Vec<Robj> = rows.as_list().or_input("rows", "'rows' must be a list")?.values().collect();
        if categories.len() != names.len() || members.len() != names.len() || rows.len() != names.len() {
            return Err(RError::unnamed_input("keops_batch_plan(): one name, category, count and rows per input"));
        }
        let inputs = (0..names.len())
            .map(|k| {
                let r = rows[k].as_integer_vector().or_input("rows", "'rows' must hold integers")?;
                let r: Vec<usize> = r.iter().map(|&v| v.max(0) as usize).collect();
                // (NA: R's NA_integer_ is i32::MIN)
                let given = match members[k] {
                    i32::MIN => Given::Shared(r.first().copied().unwrap_or(0)),
                    _ => Given::Members(r),
                };
                Ok(BatchInput { name: &names[k], category: category(&categories[k])?, given })
            })
            .collect::<Fallible<Vec<_>>>()?;
        let plan = batch_plan(&inputs)?;
        let sides = |v: &[Vec<usize>; 2]| -> Fallible<Robj> {
            Ok(List::from_names_and_values(["Vi", "Vj"], [ints(v[0].iter().copied())?, ints(v[1].iter().copied())?])?
                .into())
        };
        Ok(List::from_names_and_values(
            ["B", "rows", "starts", "batched", "ranges"],
            [
                Robj::from(plan.members as i32),
                sides(&plan.rows)?,
                sides(&plan.starts)?,
                Robj::from(plan.batched),
                plan.ranges.as_ref().map_or(Ok(Robj::from(())), r_ranges)?,
            ],
        )?
        .into())
    })
}

/// Ranges whose part for `axis` is `cut`, the other empty (a reduction over `axis` reads no other).
fn on_axis(cut: &BlockRanges, axis: usize) -> Ranges {
    let none = BlockRanges::default();
    if axis == 0 {
        Ranges { i: cut.clone(), j: none }
    } else {
        Ranges { i: none, j: cut.clone() }
    }
}

fn category(keyword: &str) -> Fallible<Category> {
    match keyword {
        "Vi" => Ok(Category::I),
        "Vj" => Ok(Category::J),
        "Pm" => Ok(Category::Param),
        _ => Err(RError::input("categories", format!("unknown category \"{keyword}\" (Vi, Vj or Pm)"))),
    }
}

/// Counts and rows as an R integer vector (R indexes rows with integers).
fn ints(values: impl Iterator<Item = usize>) -> Fallible {
    let v = values
        .map(|x| i32::try_from(x).ok())
        .collect::<Option<Vec<i32>>>()
        .or_input("input", "more rows than R can index (2^31 - 1)")?;
    Ok(Robj::from(v))
}

/// Ranges in the form of R's `ranges_for_engine()`: six integer vectors, each range matrix as its
/// 0-based starts then its exclusive ends, of class `keops_engine_ranges`.
fn r_ranges(ranges: &Ranges) -> Fallible {
    let pairs = |r: &[Range<usize>]| ints(r.iter().map(|x| x.start).chain(r.iter().map(|x| x.end)));
    let slices = |s: &[usize]| ints(s.iter().copied());
    let mut list: Robj = List::from_names_and_values(
        ["ranges_i", "slices_i", "redranges_j", "ranges_j", "slices_j", "redranges_i"],
        [
            pairs(&ranges.i.blocks)?,
            slices(&ranges.i.slices)?,
            pairs(&ranges.i.reduced)?,
            pairs(&ranges.j.blocks)?,
            slices(&ranges.j.slices)?,
            pairs(&ranges.j.reduced)?,
        ],
    )?
    .into();
    list.set_class(["keops_engine_ranges"])?;
    Ok(list)
}

extendr_module! {
    mod plan;
    fn keops_future_blocks;
    fn keops_batch_plan;
}

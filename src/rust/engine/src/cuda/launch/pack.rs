//! A step's inputs packed into the staging buffer (converted to the stored type), and its results
//! (or running states) unpacked from it into the call's columns.

use std::ops::Range;

use super::outer_category;
use super::plan::{Regions, Step};
use super::Data;
use crate::backend::Columns;
use crate::cuda::codegen;
use crate::cuda::primitives::{view, view_mut};
use crate::formula::Category;
use crate::parallel;
use crate::real::{Real, Stored};

/// Packs what a step uploads into the staging buffer `host`: the inputs from the host (the bytes
/// of the step's rows: a region is sized for the largest block of reduced rows), then the numbers
/// and the ranges. Returns the byte ranges to copy.
pub(super) fn pack_step<S: Stored, T: Real>(
    data: &Data,
    step: &Step,
    regions: &Regions,
    outer_kept: bool,
    host: &mut [u8],
) -> Vec<Range<usize>> {
    let outer = outer_category(data.formula);
    let mut uploads = Vec::new();
    for (p, (v, &offset)) in data.formula.variables.iter().zip(&regions.inputs).enumerate() {
        if data.resident[p].is_some() {
            continue;
        }
        let (n, rows) = match v.category {
            Category::Param => (1, 0..1),
            c if c == outer && outer_kept => continue,
            c if c == outer => (step.n_out, step.out.clone()),
            _ => (step.n_red, step.red.clone()),
        };
        let values = data.inputs[p].host_data().expect("an input not kept on the device is on the host");
        pack::<S>(&mut host[offset..], values, n, &rows, v.dim);
        uploads.push(offset..offset + rows.len() * v.dim * std::mem::size_of::<S>());
    }
    uploads.push(regions.constants..regions.upload_end);
    let constants: Vec<T> = data.compiled.kernel.constants.iter().map(|&c| T::from_f64(c)).collect();
    pack_values(&mut host[regions.constants..], &constants);
    if let Some(ranged) = data.ranged {
        pack_values(&mut host[regions.work..], &ranged.work);
        pack_values(&mut host[regions.red..], &ranged.red);
    }
    uploads
}

/// Copies the kept rows of a step's results (after the last block of the reduced range), or its
/// running states (at the end of a part of the reduced range), from the staging buffer into the
/// call's `columns`.
pub(super) fn collect_results<T: Real>(
    kernel: &codegen::Kernel,
    step: &Step,
    regions: &Regions,
    host: &[u8],
    columns: &mut Columns,
) {
    let rows_out = step.out.len();
    // The kept rows, in the step's results and in the call's.
    let (from, to) = (step.keep.start - step.out.start, step.keep.start - step.part_start);
    if step.last {
        let results = rows_out * kernel.width;
        if let Some(values) = columns.values.as_mut() {
            let got: &[T] = view(&host[regions.values..], results);
            let n = values.len() / kernel.width.max(1);
            unpack(got, rows_out, from..from + step.keep.len(), values, n, to, |x| x.to_f64());
        }
        if let Some(indices) = columns.indices.as_mut() {
            let got: &[i32] = view(&host[regions.indices..], results);
            let n = indices.len() / kernel.width.max(1);
            unpack(got, rows_out, from..from + step.keep.len(), indices, n, to, |i| i);
        }
    }
    if let Some(states) = columns.states.as_mut().filter(|_| step.states_out) {
        // (row-major: the kept rows are contiguous)
        let len = kernel.state_len;
        let got: &[f64] = view(&host[regions.running.start..], rows_out * len);
        states[to * len..(to + step.keep.len()) * len]
            .copy_from_slice(&got[from * len..(from + step.keep.len()) * len]);
    }
}

/// Rows `rows` of the column-major `n x dim` matrix `data`, as `S`, at the start of `bytes`.
fn pack<S: Stored>(bytes: &mut [u8], data: &[f64], n: usize, rows: &Range<usize>, dim: usize) {
    let len = rows.len();
    let dst: &mut [S] = view_mut(bytes, len * dim);
    if len == n {
        // (all the rows: one conversion, as in `unpack`)
        parallel::map(&data[..n * dim], dst, S::from_f64);
        return;
    }
    for (c, column) in dst.chunks_mut(len.max(1)).enumerate() {
        parallel::map(&data[c * n + rows.start..c * n + rows.end], column, S::from_f64);
    }
}

fn pack_values<X: Copy>(bytes: &mut [u8], values: &[X]) {
    view_mut(bytes, values.len()).copy_from_slice(values);
}

/// The rows `keep` of the column-major `rows x width` results of a block of rows into rows
/// `start..` of the column-major `n x width` matrix `dst`.
fn unpack<X: Copy + Sync, Y: Send>(
    got: &[X],
    rows: usize,
    keep: Range<usize>,
    dst: &mut [Y],
    n: usize,
    start: usize,
    f: impl Fn(X) -> Y + Sync,
) {
    if rows == n && keep == (0..rows) {
        // All the rows: the same layout, one conversion (not one per column: a K-selection's
        // results have K columns, and each conversion starts its threads).
        parallel::map(got, &mut dst[..got.len()], &f);
        return;
    }
    for (c, column) in got.chunks(rows.max(1)).enumerate() {
        parallel::map(&column[keep.clone()], &mut dst[c * n + start..c * n + start + keep.len()], &f);
    }
}

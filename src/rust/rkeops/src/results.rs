//! The engine's results as R arrays, written in one pass (on every core for large results) into
//! vectors that R allocates without filling: a K-NN graph of a batch hands R millions of values,
//! and each extra pass over them (a fill, a copy, a reshape) costs as much as the kernel.

use extendr_api::prelude::*;
use extendr_ffi::SEXPTYPE;

use engine::parallel;

use crate::{Fallible, RError};

/// The element types of R vectors that results take.
pub trait RElement: Copy + Send + Sync {
    /// A new R vector of `len` elements, not filled.
    fn r_vector(len: usize) -> Robj;
    /// The elements of an R vector of this type.
    fn elements(x: &mut Robj) -> Option<&mut [Self]>;
}

impl RElement for f64 {
    fn r_vector(len: usize) -> Robj {
        Robj::alloc_vector(SEXPTYPE::REALSXP, len)
    }
    fn elements(x: &mut Robj) -> Option<&mut [f64]> {
        x.as_real_slice_mut()
    }
}

impl RElement for u8 {
    fn r_vector(len: usize) -> Robj {
        Robj::alloc_vector(SEXPTYPE::RAWSXP, len)
    }
    fn elements(x: &mut Robj) -> Option<&mut [u8]> {
        x.as_raw_slice_mut()
    }
}

impl RElement for i32 {
    fn r_vector(len: usize) -> Robj {
        Robj::alloc_vector(SEXPTYPE::INTSXP, len)
    }
    fn elements(x: &mut Robj) -> Option<&mut [i32]> {
        x.as_integer_slice_mut()
    }
}

/// A new R vector of `len` elements written by `fill` (once: R does not fill it first).
pub fn r_vector_with<T: RElement>(len: usize, fill: impl FnOnce(&mut [T])) -> Fallible {
    // (R's allocation failing would be an R error raised inside the binding: an error first)
    engine::memory::check_fits(len.saturating_mul(std::mem::size_of::<T>()), "the result")?;
    let mut x = T::r_vector(len);
    let elements = T::elements(&mut x).ok_or_else(|| RError::of_kind("internal", "R did not allocate the result"))?;
    engine::memory::huge_pages(elements);
    fill(elements);
    Ok(x)
}

/// `res` (`rows` rows, column-major) as an R array of dimensions `shape` (`shape[0] = rows`). With
/// `members`, the rows are B members of `n = rows / B` rows laid end to end (a batch), and the
/// array is R's `n x ... x B` one, `minus(v, members[m])` applied to member `m`'s values (its
/// offset: the first reduced row of member `m`, subtracted from indices; `minus` keeps R's NA).
pub fn r_array<T: RElement>(
    res: &[T],
    shape: &[usize],
    members: Option<&[i32]>,
    minus: impl Fn(T, i32) -> T + Sync,
) -> Fallible {
    let mut dims = shape.iter().map(|&d| i32::try_from(d)).collect::<std::result::Result<Vec<i32>, _>>().map_err(|_| {
        RError::of_kind("memory", format!("a result of dimensions {shape:?} is too large for an R array"))
    })?;
    let x = match members {
        None => r_vector_with(res.len(), |out| parallel::map(res, out, |v| v))?,
        Some(offsets) => {
            let rows = shape.first().copied().unwrap_or(0);
            let b = offsets.len();
            // (no rows for values: nothing to lay out in members)
            if b == 0 || rows % b != 0 || (rows == 0 && !res.is_empty()) {
                return Err(RError::unnamed_input(format!("{rows} result rows are not {b} members of equal size")));
            }
            dims[0] = (rows / b) as i32;
            dims.push(b as i32);
            r_vector_with(res.len(), |out| unstack(res, out, rows / b, offsets, minus))?
        }
    };
    // Set here, on a vector nothing else refers to yet: set in R, `dim<-` would copy it.
    with_dim(x, &dims)
}

/// `x` (a vector nothing else refers to yet) with the dimensions `dims`, checked first: R raises an
/// error where they do not match its length, and an R error raised inside extendr's `set_attrib`
/// aborts the process (extendr panics in a callback that cannot unwind), so it must never be asked.
pub fn with_dim(mut x: Robj, dims: &[i32]) -> Fallible {
    let product = dims.iter().try_fold(1usize, |p, &d| p.checked_mul(usize::try_from(d).ok()?));
    if product != Some(x.len()) {
        return Err(RError::of_kind(
            "internal",
            format!("internal error in rkeops (please report it): a result of {} values cannot have dimensions {dims:?}", x.len()),
        ));
    }
    x.set_attrib("dim", dims)?;
    Ok(x)
}

/// `nrow x ncol` as R dimensions, or an error where one does not fit in R's integers.
pub fn dims(nrow: usize, ncol: usize) -> Fallible<[i32; 2]> {
    match (i32::try_from(nrow), i32::try_from(ncol)) {
        (Ok(n), Ok(m)) => Ok([n, m]),
        _ => Err(RError::of_kind("memory", format!("a result of {nrow} x {ncol} values is too large for an R matrix"))),
    }
}

/// Member `m`'s row `r`, column `c` of `res` (`n * offsets.len()` rows, column-major, member `m`'s
/// rows at `m * n ..`) goes to `out[r + n * (c + cols * m)]`, as `minus(value, offsets[m])`.
pub fn unstack<T: Copy + Send + Sync>(
    res: &[T],
    out: &mut [T],
    n: usize,
    offsets: &[i32],
    minus: impl Fn(T, i32) -> T + Sync,
) {
    let rows = n * offsets.len();
    let cols = res.len().checked_div(rows).unwrap_or(0);
    parallel::for_each_block(out, n * cols, |m, member| {
        let off = offsets[m];
        for (c, column) in member.chunks_mut(n.max(1)).enumerate() {
            let from = &res[c * rows + m * n..c * rows + (m + 1) * n];
            for (o, &v) in column.iter_mut().zip(from) {
                *o = minus(v, off);
            }
        }
    });
}

/// Indices minus an offset, R's NA kept.
pub fn index_minus(x: i32, offset: i32) -> i32 {
    if x == i32::MIN {
        x
    } else {
        x - offset
    }
}

#[cfg(test)]
mod tests {
    use super::unstack;

    #[test]
    fn members_become_the_last_index() {
        // 2 members of 2 rows, 3 columns: res[(m n + r) + 4 c] = 100 m + 10 c + r
        let res: Vec<i32> =
            (0..3).flat_map(|c| (0..2).flat_map(move |m| (0..2).map(move |r| 100 * m + 10 * c + r))).collect();
        let mut out = vec![0; res.len()];
        unstack(&res, &mut out, 2, &[0, 100], |x, o| x - o);
        // out[r + 2 (c + 3 m)] = 10 c + r for both members (member 1 minus its offset 100)
        let want: Vec<i32> = (0..2).flat_map(|_| (0..3).flat_map(|c| (0..2).map(move |r| 10 * c + r))).collect();
        assert_eq!(out, want);
    }

    #[test]
    fn large_batches_are_unstacked_on_several_threads_alike() {
        // 2000 members of 7 rows, 40 columns: more than one thread's share of elements.
        let (n, b, cols) = (7usize, 2000usize, 40usize);
        let res: Vec<i32> = (0..n * b * cols).map(|k| k as i32).collect();
        let offsets: Vec<i32> = (0..b as i32).map(|m| 3 * m).collect();
        let mut out = vec![0; res.len()];
        unstack(&res, &mut out, n, &offsets, |x, o| x - o);
        for m in 0..b {
            for c in 0..cols {
                for r in 0..n {
                    assert_eq!(out[r + n * (c + cols * m)], res[c * n * b + m * n + r] - offsets[m]);
                }
            }
        }
    }
}

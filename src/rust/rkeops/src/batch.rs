//! Batches (R/batch.R): the result of one engine call over the members laid end to end, put in
//! the order of R's `n x ... x B` array in one pass (R's aperm() and arithmetic take several, each
//! allocating the whole result: too slow for selections of millions of indices).

use extendr_api::prelude::*;

use crate::guarded;

/// Member `m`'s row `r`, column `c` (of `cols`) of `res` (`n * offsets.len()` rows, column-major,
/// member `m`'s rows at `m * n ..`) goes to `r + n * (c + cols * m)`, minus `offsets[m]` (the first
/// reduced row of member `m`, for indices). R sets the dimensions.
fn unstack<T: Copy>(res: &[T], n: usize, offsets: &[i32], minus: impl Fn(T, i32) -> T) -> Vec<T> {
    let rows = n * offsets.len();
    let cols = if rows == 0 { 0 } else { res.len() / rows };
    let mut out = Vec::with_capacity(res.len());
    for (m, &off) in offsets.iter().enumerate() {
        for c in 0..cols {
            let column = &res[c * rows + m * n..c * rows + (m + 1) * n];
            out.extend(column.iter().map(|&v| minus(v, off)));
        }
    }
    out
}

/// `keops_unstack(res, n, members, offsets)`: see `unstack`; `res` doubles or integers with
/// `n * members` rows, `offsets` integers (one per member, or none).
#[extendr]
fn keops_unstack(res: Robj, n: i32, members: i32, offsets: Robj) -> Robj {
    guarded(|| {
        let (n, members) = (n.max(0) as usize, members.max(1) as usize);
        let offsets = offsets.as_integer_slice().ok_or("'offsets' must be integers")?;
        let zeros = vec![0; members];
        let offsets = if offsets.is_empty() { &zeros[..] } else { offsets };
        if offsets.len() != members || res.len() % (n * members).max(1) != 0 {
            return Err(format!("keops_unstack(): {} values are not {members} members of {n} rows", res.len()));
        }
        if let Some(v) = res.as_integer_slice() {
            // NA (i32::MIN) stays NA.
            return Ok(Robj::from(unstack(v, n, offsets, |x, o| if x == i32::MIN { x } else { x - o })));
        }
        let v = res.as_real_slice().ok_or("keops_unstack(): 'res' must be doubles or integers")?;
        Ok(Robj::from(unstack(v, n, offsets, |x, _| x)))
    })
}

extendr_module! {
    mod batch;
    fn keops_unstack;
}

#[cfg(test)]
mod tests {
    use super::unstack;

    #[test]
    fn members_become_the_last_index() {
        // 2 members of 2 rows, 3 columns: res[(m n + r) + 4 c] = 100 m + 10 c + r
        let res: Vec<i32> = (0..3).flat_map(|c| (0..2).flat_map(move |m| (0..2).map(move |r| 100 * m + 10 * c + r))).collect();
        let out = unstack(&res, 2, &[0, 100], |x, o| x - o);
        // out[r + 2 (c + 3 m)] = 10 c + r for both members (member 1 minus its offset 100)
        let want: Vec<i32> = (0..2).flat_map(|_| (0..3).flat_map(|c| (0..2).map(move |r| 10 * c + r))).collect();
        assert_eq!(out, want);
    }
}

//! Batches (R/batch.R): the result of one engine call over the members laid end to end, put in
//! the order of R's `n x ... x B` array in one pass (R's aperm() and arithmetic take several, each
//! allocating the whole result: too slow for selections of millions of indices).

use extendr_api::prelude::*;

use crate::results::{index_minus, r_array};
use crate::{guarded, OrInput, RError};

/// `keops_unstack(res, n, members, offsets)`: see `results::r_array`; `res` doubles or integers with
/// `n * members` rows, `offsets` integers (one per member, or none).
#[extendr]
fn keops_unstack(res: Robj, n: i32, members: i32, offsets: Robj) -> Robj {
    guarded(|| {
        let (n, members) = (n.max(0) as usize, members.max(1) as usize);
        let offsets = offsets.as_integer_slice().or_input("offsets", "'offsets' must be integers")?;
        let zeros = vec![0; members];
        let offsets = if offsets.is_empty() { &zeros[..] } else { offsets };
        if offsets.len() != members || !res.len().is_multiple_of((n * members).max(1)) {
            return Err(RError::input(
                "res",
                format!("keops_unstack(): {} values are not {members} members of {n} rows", res.len()),
            ));
        }
        let shape = [n * members, res.len() / (n * members).max(1)];
        if let Some(v) = res.as_integer_slice() {
            return r_array(v, &shape, Some(offsets), index_minus);
        }
        let v = res.as_real_slice().or_input("res", "keops_unstack(): 'res' must be doubles or integers")?;
        r_array(v, &shape, Some(offsets), |x, _| x)
    })
}

extendr_module! {
    mod batch;
    fn keops_unstack;
}

//! k-means++ seeding's draws and updates of the distances for R/kmeans.R's `kmeans_pp()`, with R's
//! random numbers: the engine draws what R's loop drew, from the same uniform generator, in the
//! same order.

use engine::seeding::{draw_centres, update_distances, Stale};
use extendr_api::prelude::*;
use extendr_ffi::{GetRNGstate, PutRNGstate};

use crate::clustering::points;
use crate::{guarded, Fallible, OrInput};

extern "C" {
    /// R's uniform generator (R_ext/Random.h), between GetRNGstate() and PutRNGstate().
    fn unif_rand() -> f64;
}

/// The 1-based rows `picked` of `x` followed by the centres drawn by rejection from `d2` (the
/// squared distances to the first `counted` of them; `cs` their cumulative sums), until there are
/// `k` or `tries` draws in a row were rejected.
#[extendr]
fn keops_kmeans_pp_draws(x: Robj, d2: Robj, cs: Robj, picked: Robj, counted: i32, k: i32, tries: i32) -> Robj {
    guarded(|| {
        let mut rows: Vec<usize> = picked
            .as_integer_slice()
            .or_input("picked", "'picked' must be an integer vector")?
            .iter()
            .map(|&i| if i >= 1 { i as usize - 1 } else { usize::MAX })
            .collect();
        let stale = Stale {
            x: points(&x, "x")?,
            d2: real(&d2, "d2")?,
            cumulative: real(&cs, "cs")?,
            counted: counted.max(0) as usize,
        };
        // SAFETY: R's generator, on R's thread, its state read before and saved after (as runif()).
        unsafe { GetRNGstate() };
        let drawn = draw_centres(&stale, &mut rows, k.max(0) as usize, tries.max(0) as usize, || {
            // SAFETY: as above.
            unsafe { unif_rand() }
        });
        unsafe { PutRNGstate() };
        drawn?;
        Ok(Robj::from(rows.iter().map(|&i| i as i32 + 1).collect::<Vec<i32>>()))
    })
}

/// The distances after an update (`d2` NULL before the first) with `near`, the squared distances to
/// the centres drawn since: `list(d2, cs)`, the least of both and its cumulative sums.
#[extendr]
fn keops_kmeans_pp_update(d2: Robj, near: Robj) -> Robj {
    guarded(|| {
        let d2 = if d2.is_null() { None } else { Some(real(&d2, "d2")?) };
        let (least, cumulative) = update_distances(d2, real(&near, "near")?)?;
        Ok(List::from_names_and_values(["d2", "cs"], [Robj::from(least), Robj::from(cumulative)])?.into())
    })
}

fn real<'a>(r: &'a Robj, name: &str) -> Fallible<&'a [f64]> {
    r.as_real_slice().or_input(name, format!("'{name}' must be a double vector"))
}

extendr_module! {
    mod seeding;
    fn keops_kmeans_pp_draws;
    fn keops_kmeans_pp_update;
}

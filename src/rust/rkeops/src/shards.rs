//! The rows of a matrix as the bytes that a shard of R's `future-shards.R` carries to a worker, and
//! the matrix again on the worker: written and read on every core (R's `writeBin()` and `readBin()`
//! take one: ~50 ms a shard of 2e6 x 2 doubles here, which the shards' first step waited for).

use extendr_api::prelude::*;

use engine::parallel;

use crate::clustering::{matrix, points};
use crate::error::guarded;
use crate::results::r_vector_with;
use crate::{Fallible, RError};

/// Numbers per block of work.
const BLOCK: usize = 1 << 16;

/// Rows `first + 1` to `last` of the double matrix `x`, column-major, as little-endian numbers of
/// `size` bytes (4: rounded to float32; 8: the doubles) in a raw vector.
#[extendr]
fn keops_shard_pack(x: Robj, first: i32, last: i32, size: i32) -> Robj {
    guarded(|| {
        let x = points(&x, "x")?;
        let size = number_size(size)?;
        let (first, last) = (first.max(0) as usize, last.max(0) as usize);
        if first > last || last > x.n {
            return Err(RError::input("first", format!("rows {first} to {last} are not rows of 'x' ({} rows)", x.n)));
        }
        let rows = last - first;
        r_vector_with(rows * x.d * size, |bytes: &mut [u8]| {
            parallel::for_each_block(bytes, BLOCK * size, |b, block| {
                // (the block's first number is row `r` of column `c`; the next ones follow in order)
                let (mut c, mut r) = ((b * BLOCK) / rows, (b * BLOCK) % rows);
                for out in block.chunks_exact_mut(size) {
                    let v = x.values[c * x.n + first + r];
                    match size {
                        4 => out.copy_from_slice(&(v as f32).to_le_bytes()),
                        _ => out.copy_from_slice(&v.to_le_bytes()),
                    }
                    r += 1;
                    if r == rows {
                        (c, r) = (c + 1, 0);
                    }
                }
            })
        })
    })
}

/// The `nrow x ncol` double matrix of the numbers of `size` bytes in `bytes` (`keops_shard_pack`).
#[extendr]
fn keops_shard_unpack(bytes: Robj, nrow: i32, ncol: i32, size: i32) -> Robj {
    guarded(|| {
        let bytes = bytes.as_raw_slice().ok_or_else(|| RError::input("bytes", "'bytes' must be a raw vector"))?;
        let size = number_size(size)?;
        let (nrow, ncol) = (nrow.max(0) as usize, ncol.max(0) as usize);
        if bytes.len() != nrow * ncol * size {
            return Err(RError::input("bytes", format!("{} bytes are not {nrow} x {ncol} numbers of {size} bytes", bytes.len())));
        }
        let values = r_vector_with(nrow * ncol, |out: &mut [f64]| {
            parallel::for_each_block(out, BLOCK, |b, block| {
                for (k, v) in block.iter_mut().enumerate() {
                    let at = (b * BLOCK + k) * size;
                    let number = &bytes[at..at + size];
                    *v = match size {
                        4 => f32::from_le_bytes(number.try_into().expect("4 bytes")) as f64,
                        _ => f64::from_le_bytes(number.try_into().expect("8 bytes")),
                    };
                }
            })
        })?;
        matrix(values, nrow, ncol)
    })
}

fn number_size(size: i32) -> Fallible<usize> {
    match size {
        4 | 8 => Ok(size as usize),
        _ => Err(RError::input("size", format!("'size' must be 4 or 8, not {size}"))),
    }
}

extendr_module! {
    mod shards;
    fn keops_shard_pack;
    fn keops_shard_unpack;
}

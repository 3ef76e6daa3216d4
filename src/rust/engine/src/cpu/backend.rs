//! The CPU evaluator as a backend: inputs converted from R's doubles to the working type (float16
//! rounded to the values float16 keeps, computed in float32), evaluated on the call's threads, the
//! results put back in R's order.

use std::borrow::Cow;
use std::time::Instant;

use super::{evaluate, Inputs, RowMajor, Settings};
use crate::backend::{BackendDevice, Call, Columns, Timings};
use crate::error::{Error, Result};
use crate::real::{Real, Stored};

/// The cores of this machine.
pub struct Cpu;

impl BackendDevice for Cpu {
    fn describe(&self) -> String {
        "CPU".to_string()
    }

    fn evaluate<S: Stored, T: Real>(&self, call: &Call, timings: &mut Timings) -> Result<Columns> {
        if call.part.is_some() {
            return Err(Error::Invalid("the CPU computes whole reductions, not parts of them".into()));
        }
        let options = call.options;
        let threads = match options.threads {
            0 => crate::parallel::cores(),
            n => n,
        };
        let clock = Instant::now();
        let host: Vec<&[f64]> = call
            .inputs
            .iter()
            .map(|x| x.host_data().ok_or_else(|| Error::Invalid("the CPU computes from host data".into())))
            .collect::<Result<_>>()?;
        let rounded: Vec<Vec<f64>> = match S::HALF {
            true => host.iter().map(|x| x.iter().map(|&v| half::f16::from_f64(v).to_f64()).collect()).collect(),
            false => Vec::new(),
        };
        let converted: Vec<Cow<[T]>> = match S::HALF {
            true => rounded.iter().map(|x| T::from_f64_slice(x)).collect(),
            false => host.iter().map(|x| T::from_f64_slice(x)).collect(),
        };
        let (n_i, n_j) = call.sizes;
        let inputs = Inputs { data: converted.iter().map(|c| c.as_ref()).collect(), n_i, n_j };
        let settings =
            Settings { scheme: options.sum_scheme, threads, interrupt: options.interrupt, progress: options.progress, isa: options.tuning.cpu_isa };
        let rows = evaluate(call.formula, &inputs, &settings, call.ranges)?;
        timings.push(("CPU evaluation", clock.elapsed().as_secs_f64()));
        let (n_out, _) = call.out_and_reduced();
        let clock = Instant::now();
        let (values, indices) = to_column_major(rows, n_out);
        timings.push(("results", clock.elapsed().as_secs_f64()));
        Ok(Columns { values, indices, states: None })
    }
}

/// The results in R's order, each buffer freed once transposed (what is not returned is `None`).
fn to_column_major(rows: RowMajor, nrow: usize) -> (Option<Vec<f64>>, Option<Vec<i32>>) {
    fn transpose<X: Copy + Default + Send + Sync>(rows: Vec<X>, nrow: usize, width: usize) -> Option<Vec<X>> {
        if rows.is_empty() {
            return None;
        }
        if width == 1 || nrow == 1 {
            return Some(rows); // one column (or one row) is the same in both orders
        }
        // Blocks of rows on every core, each writing its part of every column (one pass over the
        // rows: 10^7 results took ~70 ms on one thread).
        const BLOCK: usize = 4096;
        let mut columns = vec![X::default(); rows.len()];
        crate::parallel::for_each_row_block(&mut columns, nrow, BLOCK, |b, block| {
            for (r, row) in rows[b * BLOCK * width..].chunks(width).take(block[0].len()).enumerate() {
                row.iter().zip(block.iter_mut()).for_each(|(&x, column)| column[r] = x);
            }
        });
        Some(columns)
    }
    let RowMajor { values, indices, width } = rows;
    (transpose(values, nrow, width), transpose(indices, nrow, width))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn results_are_transposed_into_columns_in_blocks_of_rows() {
        // Several blocks of rows on several threads, the last one shorter; no indices.
        for (nrow, width) in [(9001, 3), (70001, 2), (5, 4), (4096, 1)] {
            let values: Vec<f64> = (0..nrow * width).map(|v| v as f64).collect();
            let (columns, indices) = to_column_major(RowMajor { values, indices: Vec::new(), width }, nrow);
            let columns = columns.unwrap();
            assert!(indices.is_none());
            for r in 0..nrow {
                for c in 0..width {
                    assert_eq!(columns[c * nrow + r], (r * width + c) as f64, "row {r} column {c} of {nrow} x {width}");
                }
            }
        }
    }
}

//! What a backend keeps for a loop that runs in the engine (a program, its gradient): matrices that
//! stay where it computes from one step to the next, steps that write their results into them, and
//! work recorded once and issued again. The loops (`crate::program`, `crate::program_gradient`) are
//! written once against `Buffers`; `HostMemory` keeps the matrices in host memory (each step a
//! plain call: on the CPU, or on a GPU where a program's matrices cannot stay there), and
//! `cuda::OnDevice` on one GPU. Work may only be queued: `read` waits for it, and so must whoever
//! frees a matrix (`synchronize`).

use std::borrow::Cow;
use std::cell::RefCell;
use std::ops::Range;
use std::rc::Rc;

use crate::api::{Input, KeptMatrix, RunOptions};
use crate::backend::{Operation, Timings};
use crate::error::{Error, Result};

pub trait Buffers<'a> {
    /// A `nrow x ncol` matrix, column-major, in the precision of the loop.
    type Buffer;
    /// Work recorded to be issued again (`replay`) as it was.
    type Record;
    /// Values on their way to the host (`fetch`).
    type Fetch;

    /// What computes, as `Output::backend` reports it (after a step: what computed it).
    fn describe(&self) -> String;
    /// The matrix `data`, `nrow x ncol` (borrowed where the backend reads it in place).
    fn put(&self, data: &'a [f64], nrow: usize, ncol: usize) -> Result<Self::Buffer>;
    fn zeros(&self, nrow: usize, ncol: usize) -> Result<Self::Buffer>;
    /// The rows `rows` of the column-major `nrow x ncol` matrix `data`, as a matrix of their own
    /// (a device's part of a program spread over several: `program::spread`).
    fn put_rows(&self, (data, nrow, ncol): (&[f64], usize, usize), rows: Range<usize>) -> Result<Self::Buffer> {
        let mut values = Vec::with_capacity(rows.len() * ncol);
        for c in 0..ncol {
            values.extend_from_slice(&data[c * nrow + rows.start..c * nrow + rows.end]);
        }
        let part = self.zeros(rows.len(), ncol)?;
        self.write(&part, &values)?;
        Ok(part)
    }
    /// Whether the backend can read `kept` (not: a matrix on another device).
    fn reads(&self, kept: &dyn KeptMatrix) -> bool;
    /// A copy of `kept` (one that `reads` accepts) that the loop may write.
    fn adopt(&self, kept: &dyn KeptMatrix) -> Result<Self::Buffer>;
    /// Its values on the host, once the work queued before has run.
    fn read(&self, b: &Self::Buffer) -> Result<Vec<f64>>;
    /// Its values once the work queued before has run, on their way to the host (`fetched`): the
    /// host then waits for them, not for the work queued after (a loop queues its next iteration
    /// before it reads the last one's checks). Where work is not queued, the values themselves.
    fn fetch(&self, b: &Self::Buffer) -> Result<Self::Fetch>;
    fn fetched(&self, fetch: Self::Fetch) -> Result<Vec<f64>>;
    /// Whether work is queued, rather than done when asked.
    fn queues(&self) -> bool;
    /// Replaces its values by `values` (as many), after the work queued before.
    fn write(&self, b: &Self::Buffer, values: &[f64]) -> Result<()>;
    /// Copies `n` values from `from.0`, from its value `from.1` (column-major), to `to.0` from `to.1`.
    fn copy(&self, from: (&Self::Buffer, usize), to: (&Self::Buffer, usize), n: usize) -> Result<()>;
    /// The reduction of `op` on `inputs`, its values (or its indices, as numbers) written into
    /// `target`, which is none of `inputs`; with `record`, also the work that issues it again with
    /// the same matrices, where the backend records (elsewhere None: it runs again).
    fn evaluate_into(
        &self,
        op: &dyn Operation,
        inputs: &[&Self::Buffer],
        options: &RunOptions,
        target: &Self::Buffer,
        record: bool,
    ) -> Result<(Timings, Option<Self::Record>)>;
    /// The sums `sums`, recorded: nothing runs before `replay`.
    fn record_sums(&self, sums: &[Sum<'_, Self::Buffer>]) -> Result<Self::Record>;
    fn replay(&self, record: &Self::Record) -> Result<()>;
    /// `records` as one record that issues them in order (a CUDA graph), where the backend can
    /// join them: elsewhere None, and each is replayed in turn. They must outlive it.
    fn join(&self, _records: &[&Self::Record]) -> Result<Option<Self::Record>> {
        Ok(None)
    }
    /// Waits for the work queued.
    fn synchronize(&self) -> Result<()>;
}

/// A matrix `to` that receives the sum of blocks of other matrices (never `to`), each block of
/// `to`'s size starting at a value of theirs: added to `to`'s values, or replacing them when `set`
/// (with no `from`: set to 0).
pub struct Sum<'b, B> {
    pub to: &'b B,
    pub set: bool,
    pub from: Vec<(&'b B, usize)>,
}

/// Matrices in host memory, each step a plain call (`Operator::run`) wherever the options say.
#[derive(Default)]
pub struct HostMemory {
    /// What computed the last step.
    ran_on: RefCell<Option<String>>,
}

/// A matrix in host memory: borrowed from the caller until a step writes it.
pub struct HostMatrix<'a> {
    values: RefCell<Cow<'a, [f64]>>,
    nrow: usize,
    ncol: usize,
}

/// A sum kept with the matrices it reads and writes (a host record runs it again).
pub struct HostSum<'a> {
    to: Rc<HostMatrix<'a>>,
    set: bool,
    from: Vec<(Rc<HostMatrix<'a>>, usize)>,
}

impl<'a> Buffers<'a> for HostMemory {
    type Buffer = Rc<HostMatrix<'a>>;
    type Record = Vec<HostSum<'a>>;
    type Fetch = Vec<f64>;

    fn describe(&self) -> String {
        self.ran_on.borrow().clone().unwrap_or_else(|| "CPU".into())
    }

    fn put(&self, data: &'a [f64], nrow: usize, ncol: usize) -> Result<Self::Buffer> {
        Ok(Rc::new(HostMatrix { values: RefCell::new(Cow::Borrowed(data)), nrow, ncol }))
    }

    fn zeros(&self, nrow: usize, ncol: usize) -> Result<Self::Buffer> {
        Ok(Rc::new(HostMatrix { values: RefCell::new(Cow::Owned(vec![0.0; nrow * ncol])), nrow, ncol }))
    }

    fn reads(&self, _: &dyn KeptMatrix) -> bool {
        true
    }

    fn adopt(&self, kept: &dyn KeptMatrix) -> Result<Self::Buffer> {
        let (nrow, ncol) = kept.shape();
        Ok(Rc::new(HostMatrix { values: RefCell::new(Cow::Owned(kept.to_host()?)), nrow, ncol }))
    }

    fn read(&self, b: &Self::Buffer) -> Result<Vec<f64>> {
        Ok(b.values.borrow().to_vec())
    }

    fn fetch(&self, b: &Self::Buffer) -> Result<Vec<f64>> {
        self.read(b)
    }

    fn fetched(&self, fetch: Vec<f64>) -> Result<Vec<f64>> {
        Ok(fetch)
    }

    fn queues(&self) -> bool {
        false
    }

    fn write(&self, b: &Self::Buffer, values: &[f64]) -> Result<()> {
        b.values.borrow_mut().to_mut().copy_from_slice(values);
        Ok(())
    }

    fn copy(&self, from: (&Self::Buffer, usize), to: (&Self::Buffer, usize), n: usize) -> Result<()> {
        if Rc::ptr_eq(from.0, to.0) {
            to.0.values.borrow_mut().to_mut().copy_within(from.1..from.1 + n, to.1);
        } else {
            to.0.values.borrow_mut().to_mut()[to.1..to.1 + n].copy_from_slice(&from.0.values.borrow()[from.1..from.1 + n]);
        }
        Ok(())
    }

    fn evaluate_into(
        &self,
        op: &dyn Operation,
        inputs: &[&Self::Buffer],
        options: &RunOptions,
        target: &Self::Buffer,
        _record: bool,
    ) -> Result<(Timings, Option<Self::Record>)> {
        let out = {
            let held: Vec<_> = inputs.iter().map(|b| b.values.borrow()).collect();
            let inputs: Vec<Input> =
                held.iter().zip(inputs).map(|(values, b)| Input::host(values, b.nrow, b.ncol)).collect();
            op.run(&inputs, options)?
        };
        let values = match (out.values, out.indices) {
            (Some(v), _) => v,
            (None, Some(i)) => i.into_iter().map(f64::from).collect(),
            (None, None) => Vec::new(),
        };
        if values.len() != target.nrow * target.ncol {
            return Err(Error::Invalid(format!(
                "a result of {} values for a {} x {} matrix",
                values.len(),
                target.nrow,
                target.ncol
            )));
        }
        *target.values.borrow_mut() = Cow::Owned(values);
        *self.ran_on.borrow_mut() = Some(out.backend);
        Ok((out.timings, None))
    }

    fn record_sums(&self, sums: &[Sum<'_, Self::Buffer>]) -> Result<Self::Record> {
        let kept = |s: &Sum<Self::Buffer>| HostSum {
            to: s.to.clone(),
            set: s.set,
            from: s.from.iter().map(|&(b, at)| (b.clone(), at)).collect(),
        };
        Ok(sums.iter().map(kept).collect())
    }

    fn replay(&self, record: &Self::Record) -> Result<()> {
        for HostSum { to, set, from } in record {
            let mut values = to.values.borrow_mut();
            let total = values.to_mut();
            if *set {
                total.fill(0.0);
            }
            for (b, at) in from {
                for (t, x) in total.iter_mut().zip(&b.values.borrow()[*at..]) {
                    *t += x;
                }
            }
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<()> {
        Ok(())
    }
}

//! A loop's matrices on one GPU (`crate::buffers`): every matrix a `DeviceMatrix` for the whole
//! loop, steps evaluated into them with their launches only queued (recorded the first time, when
//! asked, to be issued again), copies and sums by the utility kernels (`elementwise`).

use std::cell::RefCell;
use std::ops::Range;
use std::sync::Arc;

use super::device::Device;
use super::elementwise;
use super::fetch::{Fetch, Staging};
use super::launch::Kept;
use super::recorded::Recorded;
use super::resident::DeviceMatrix;
use crate::api::{Input, KeptMatrix, RunOptions};
use crate::backend::{Operation, Timings};
use crate::buffers::{Buffers, Sum};
use crate::error::{Error, Result};
use crate::precision::Precision;

pub struct OnDevice {
    pub device: Arc<Device>,
    pub precision: Precision,
    /// Page-locked memory of the fetches already read, for the next ones.
    pub spare: RefCell<Vec<Staging>>,
}

impl OnDevice {
    /// A loop's matrices on `device` in `precision`'s storage.
    pub fn new(device: Arc<Device>, precision: Precision) -> OnDevice {
        OnDevice { device, precision, spare: RefCell::new(Vec::new()) }
    }
}

impl<'a> Buffers<'a> for OnDevice {
    type Buffer = DeviceMatrix;
    type Record = Recorded;
    type Fetch = Fetch;

    fn describe(&self) -> String {
        format!("GPU {} ({})", self.device.ordinal, self.device.name)
    }

    fn put(&self, data: &'a [f64], nrow: usize, ncol: usize) -> Result<DeviceMatrix> {
        DeviceMatrix::new(self.device.clone(), data, nrow, ncol, self.precision)
    }

    fn zeros(&self, nrow: usize, ncol: usize) -> Result<DeviceMatrix> {
        DeviceMatrix::zeros(self.device.clone(), nrow.max(1), ncol.max(1), self.precision)
    }

    fn put_rows(&self, matrix: (&[f64], usize, usize), rows: Range<usize>) -> Result<DeviceMatrix> {
        DeviceMatrix::from_rows(self.device.clone(), matrix, rows, self.precision)
    }

    fn reads(&self, kept: &dyn KeptMatrix) -> bool {
        let mine = kept.as_any().downcast_ref::<DeviceMatrix>();
        mine.is_some_and(|m| m.ordinal() == self.device.ordinal)
    }

    fn adopt(&self, kept: &dyn KeptMatrix) -> Result<DeviceMatrix> {
        let kept = kept.as_any().downcast_ref::<DeviceMatrix>().ok_or_else(|| Error::Invalid("not a GPU's matrix".into()))?;
        let copy = self.zeros(kept.nrow, kept.ncol)?;
        self.copy((kept, 0), (&copy, 0), kept.nrow * kept.ncol)?;
        Ok(copy)
    }

    fn read(&self, b: &DeviceMatrix) -> Result<Vec<f64>> {
        self.device.synchronize()?;
        b.to_host()
    }

    fn fetch(&self, b: &DeviceMatrix) -> Result<Fetch> {
        Fetch::queue(&self.device, b, self.spare.borrow_mut().pop())
    }

    fn fetched(&self, fetch: Fetch) -> Result<Vec<f64>> {
        let (values, staging) = fetch.values()?;
        self.spare.borrow_mut().push(staging);
        Ok(values)
    }

    fn queues(&self) -> bool {
        true
    }

    fn write(&self, b: &DeviceMatrix, values: &[f64]) -> Result<()> {
        b.write(values)
    }

    fn copy(&self, from: (&DeviceMatrix, usize), to: (&DeviceMatrix, usize), n: usize) -> Result<()> {
        elementwise::copy(&self.device, n, from.0.pointer_at(from.1), to.0.pointer_at(to.1), self.precision)
    }

    fn evaluate_into(
        &self,
        op: &dyn Operation,
        inputs: &[&DeviceMatrix],
        options: &RunOptions,
        target: &DeviceMatrix,
        record: bool,
    ) -> Result<(Timings, Option<Recorded>)> {
        let inputs: Vec<Input> = inputs.iter().map(|&m| Input::device(m)).collect();
        let call = op.call(&inputs, options)?;
        let (mut timings, mut recorded) = (Timings::new(), None);
        let kept = Kept { matrix: target, record: record.then_some(&mut recorded) };
        self.device.evaluate_into(&call, kept, &mut timings)?;
        Ok((timings, recorded))
    }

    fn record_sums(&self, sums: &[Sum<'_, DeviceMatrix>]) -> Result<Recorded> {
        let pointers = |s: &Sum<DeviceMatrix>| elementwise::Sum {
            to: s.to.pointer(),
            n: s.to.nrow * s.to.ncol,
            set: s.set,
            from: s.from.iter().map(|&(m, at)| m.pointer_at(at)).collect(),
        };
        elementwise::sums(&self.device, &sums.iter().map(pointers).collect::<Vec<_>>(), self.precision)
    }

    fn replay(&self, record: &Recorded) -> Result<()> {
        record.replay(&self.device)
    }

    fn join(&self, records: &[&Recorded]) -> Result<Option<Recorded>> {
        Recorded::joined(&self.device, records).map(Some)
    }

    fn synchronize(&self) -> Result<()> {
        self.device.synchronize()
    }
}

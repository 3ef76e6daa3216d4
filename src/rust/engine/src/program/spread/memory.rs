//! One part's matrices of a program spread over devices (`program::spread`), on top of that device's
//! own memory (`M`: one GPU's, or host memory). A matrix of the split rows may be held whole, or
//! as this part's rows only, or both: each step asks for the form it reads (its i-variables' rows
//! when its i-axis is the split one, whole matrices otherwise) and the other form is made when
//! needed: rows copied out of the whole matrix on the device, a whole matrix gathered from every
//! part's rows. A step that reduces over the split rows gives a part's result for all its output
//! rows: the parts' results are merged (`ReductionKind::merges_results`) in the parts' order, the same
//! on every part. Every part runs the same steps on matrices of the same shapes, so all take part
//! in each exchange together.

use std::cell::{Cell, Ref, RefCell};
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::time::Instant;

use super::exchange::Exchange;
use super::Split;
use crate::api::{KeptMatrix, RunOptions};
use crate::backend::{Operation, Timings};
use crate::buffers::{Buffers, Sum};
use crate::error::{Error, Result};
use crate::formula::Category;
use crate::parallel;

/// Part `part`'s memory: `inner`, the device's own.
pub struct PartMemory<'e, M> {
    pub inner: M,
    pub part: usize,
    pub split: &'e Split,
    pub exchange: &'e Exchange,
    /// Set when a part failed or the user interrupted: the others leave at their next step.
    pub stop: &'e AtomicBool,
    pub description: &'e str,
}

/// A matrix of the program, in the forms this part holds.
pub struct PartMatrix<'a, B> {
    nrow: usize,
    ncol: usize,
    /// What it holds until a step writes it: its initial values, or zeros (None).
    initial: Cell<Option<Option<&'a [f64]>>>,
    whole: Form<B>,
    rows: Form<B>,
}

/// One form of a matrix: made when first asked, up to date or not.
struct Form<B> {
    matrix: RefCell<Option<B>>,
    current: Cell<bool>,
}

impl<B> Form<B> {
    fn new() -> Form<B> {
        Form { matrix: RefCell::new(None), current: Cell::new(false) }
    }

    fn get(&self) -> Ref<'_, B> {
        Ref::map(self.matrix.borrow(), |m| m.as_ref().expect("made before it is read"))
    }
}

/// Which form of its inputs a step reads, and where its result goes.
#[derive(Clone, Copy)]
enum Role {
    /// Every part computes the whole step (its i-axis is not the split rows).
    Whole,
    /// The result's rows are split: each part computes its own.
    Rows,
    /// The reduced rows are split: each part's result, merged.
    Merged(fn(f64, f64) -> f64),
}

impl<'a, M: Buffers<'a>> PartMemory<'_, M> {
    fn my_rows(&self) -> std::ops::Range<usize> {
        self.split.parts[self.part].clone()
    }

    fn matrix(&self, nrow: usize, ncol: usize, initial: Option<&'a [f64]>) -> PartMatrix<'a, M::Buffer> {
        PartMatrix { nrow, ncol, initial: Cell::new(Some(initial)), whole: Form::new(), rows: Form::new() }
    }

    /// Makes `form` of `m` (`nrow` rows) if it is not yet, of zeros.
    fn make(&self, m: &PartMatrix<'a, M::Buffer>, form: &Form<M::Buffer>, nrow: usize) -> Result<()> {
        if form.matrix.borrow().is_none() {
            *form.matrix.borrow_mut() = Some(self.inner.zeros(nrow, m.ncol)?);
        }
        Ok(())
    }

    /// The whole matrix `m`, up to date (gathered from the parts' rows if they hold its values).
    fn whole(&self, m: &PartMatrix<'a, M::Buffer>) -> Result<()> {
        if m.whole.current.get() {
            return Ok(());
        }
        match m.initial.get() {
            Some(Some(data)) => *m.whole.matrix.borrow_mut() = Some(self.inner.put(data, m.nrow, m.ncol)?),
            Some(None) => self.make(m, &m.whole, m.nrow)?,
            None => {
                let values = self.gathered(m)?;
                self.make(m, &m.whole, m.nrow)?;
                self.inner.write(&m.whole.get(), &values)?;
            }
        }
        m.whole.current.set(true);
        Ok(())
    }

    /// The values of `m`, whose rows the parts hold, gathered from every part (column-major).
    fn gathered(&self, m: &PartMatrix<'a, M::Buffer>) -> Result<Vec<f64>> {
        let mine = self.inner.read(&m.rows.get())?;
        let all = self.exchange.swap(self.part, mine)?;
        Ok(stack_rows(&all, &self.split.parts, m.nrow, m.ncol))
    }

    /// This part's rows of `m`, up to date (copied out of the whole matrix if it holds its values).
    fn rows(&self, m: &PartMatrix<'a, M::Buffer>) -> Result<()> {
        if m.rows.current.get() {
            return Ok(());
        }
        let range = self.my_rows();
        let n = range.len();
        match m.initial.get() {
            Some(Some(data)) => *m.rows.matrix.borrow_mut() = Some(self.inner.put_rows((data, m.nrow, m.ncol), range)?),
            Some(None) => self.make(m, &m.rows, n)?,
            None => {
                self.make(m, &m.rows, n)?;
                self.whole(m)?;
                for c in 0..m.ncol {
                    self.inner.copy((&m.whole.get(), c * m.nrow + range.start), (&m.rows.get(), c * n), n)?;
                }
            }
        }
        m.rows.current.set(true);
        Ok(())
    }

    /// `m` was written in `form` (the other one is out of date).
    fn written(&self, m: &PartMatrix<'a, M::Buffer>, rows: bool) {
        m.initial.set(None);
        m.rows.current.set(rows);
        m.whole.current.set(!rows);
    }

    /// How a step of `op` on `inputs` is shared between the parts.
    fn role(&self, op: &dyn Operation, inputs: &[&PartMatrix<'a, M::Buffer>]) -> Result<Role> {
        let formula = op.formula();
        let n_i = formula.variables.iter().zip(inputs).find(|(v, _)| v.category == Category::I).map(|(_, m)| m.nrow);
        if n_i != Some(self.split.rows) {
            return Ok(Role::Whole);
        }
        let reduction = &formula.reduction;
        match (reduction.axis, reduction.kind.merges_results(reduction.g.is_some())) {
            (0, _) => Ok(Role::Rows),
            (_, Some(merge)) => Ok(Role::Merged(merge)),
            // (`spread::split_rows` lets no such program spread)
            (_, None) => Err(Error::Invalid("a reduction over the split rows whose parts cannot be merged".into())),
        }
    }
}

impl<'a, M: Buffers<'a>> Buffers<'a> for PartMemory<'_, M> {
    type Buffer = PartMatrix<'a, M::Buffer>;
    type Record = ();
    type Fetch = M::Fetch;

    fn describe(&self) -> String {
        self.description.to_string()
    }

    fn put(&self, data: &'a [f64], nrow: usize, ncol: usize) -> Result<Self::Buffer> {
        Ok(self.matrix(nrow, ncol, Some(data)))
    }

    fn zeros(&self, nrow: usize, ncol: usize) -> Result<Self::Buffer> {
        Ok(self.matrix(nrow, ncol, None))
    }

    fn reads(&self, _: &dyn KeptMatrix) -> bool {
        false
    }

    fn adopt(&self, _: &dyn KeptMatrix) -> Result<Self::Buffer> {
        Err(Error::Invalid("a program spread over devices takes no matrix kept on a device".into()))
    }

    fn read(&self, b: &Self::Buffer) -> Result<Vec<f64>> {
        // A result of the split rows (the labels of 1e8 points) comes back without a whole copy on
        // the device, put together by the first part only: `spread::run` returns its results.
        if !b.whole.current.get() && b.rows.current.get() && b.initial.get().is_none() {
            return match self.part {
                0 => self.gathered(b),
                _ => self.exchange.swap(self.part, self.inner.read(&b.rows.get())?).map(|_| Vec::new()),
            };
        }
        self.whole(b)?;
        self.inner.read(&b.whole.get())
    }

    fn fetch(&self, b: &Self::Buffer) -> Result<M::Fetch> {
        self.whole(b)?;
        self.inner.fetch(&b.whole.get())
    }

    fn fetched(&self, fetch: M::Fetch) -> Result<Vec<f64>> {
        self.inner.fetched(fetch)
    }

    fn queues(&self) -> bool {
        self.inner.queues()
    }

    fn write(&self, b: &Self::Buffer, values: &[f64]) -> Result<()> {
        self.make(b, &b.whole, b.nrow)?;
        self.inner.write(&b.whole.get(), values)?;
        self.written(b, false);
        Ok(())
    }

    fn copy(&self, from: (&Self::Buffer, usize), to: (&Self::Buffer, usize), n: usize) -> Result<()> {
        self.whole(from.0)?;
        self.whole(to.0)?;
        self.inner.copy((&from.0.whole.get(), from.1), (&to.0.whole.get(), to.1), n)?;
        self.written(to.0, false);
        Ok(())
    }

    fn evaluate_into(
        &self,
        op: &dyn Operation,
        inputs: &[&Self::Buffer],
        options: &RunOptions,
        target: &Self::Buffer,
        _record: bool,
    ) -> Result<(Timings, Option<()>)> {
        if self.stop.load(Relaxed) {
            return Err(Error::Interrupted);
        }
        let role = self.role(op, inputs)?;
        let variables = &op.formula().variables;
        let split = |v: usize| !matches!(role, Role::Whole) && variables[v].category == Category::I;
        for (v, &m) in inputs.iter().enumerate() {
            match split(v) {
                true => self.rows(m)?,
                false => self.whole(m)?,
            }
        }
        let held: Vec<Ref<M::Buffer>> =
            inputs.iter().enumerate().map(|(v, m)| if split(v) { m.rows.get() } else { m.whole.get() }).collect();
        let inputs: Vec<&M::Buffer> = held.iter().map(|m| &**m).collect();
        let on_rows = matches!(role, Role::Rows);
        match on_rows {
            true => self.make(target, &target.rows, self.my_rows().len())?,
            false => self.make(target, &target.whole, target.nrow)?,
        }
        let form = if on_rows { &target.rows } else { &target.whole };
        let (mut timings, _) = self.inner.evaluate_into(op, &inputs, options, &form.get(), false)?;
        if let Role::Merged(merge) = role {
            let clock = Instant::now();
            let mine = self.inner.read(&form.get())?;
            let all = self.exchange.swap(self.part, mine)?;
            let mut merged = all[0].clone();
            for part in &all[1..] {
                merged.iter_mut().zip(part).for_each(|(m, &x)| *m = merge(*m, x));
            }
            self.inner.write(&form.get(), &merged)?;
            timings.push(("merge", clock.elapsed().as_secs_f64()));
        }
        self.written(target, on_rows);
        Ok((timings, None))
    }

    fn record_sums(&self, _: &[Sum<'_, Self::Buffer>]) -> Result<()> {
        Err(Error::Invalid("a program spread over devices records no work".into()))
    }

    fn replay(&self, _: &()) -> Result<()> {
        Err(Error::Invalid("a program spread over devices records no work".into()))
    }

    fn synchronize(&self) -> Result<()> {
        self.inner.synchronize()
    }
}

/// The column-major `nrow x ncol` matrix whose rows `parts[p]` are the matrix `blocks[p]`, copied on
/// every core (1e8 labels: ~0.3 s on one).
fn stack_rows(blocks: &[Vec<f64>], parts: &[Range<usize>], nrow: usize, ncol: usize) -> Vec<f64> {
    const BLOCK: usize = 1 << 18;
    let mut values = vec![0.0; nrow * ncol];
    crate::memory::huge_pages(&mut values);
    parallel::for_each_block(&mut values, BLOCK, |b, out| {
        // (runs within one column and one part's rows, copied as slices)
        let (first, mut done) = (b * BLOCK, 0);
        while done < out.len() {
            let (c, r) = ((first + done) / nrow, (first + done) % nrow);
            let p = parts.partition_point(|rows| rows.end <= r);
            let rows = &parts[p];
            let run = (rows.end - r).min(out.len() - done);
            let from = c * rows.len() + (r - rows.start);
            out[done..done + run].copy_from_slice(&blocks[p][from..from + run]);
            done += run;
        }
    });
    values
}

#[cfg(test)]
mod tests {
    use super::stack_rows;

    /// Three parts' rows of a 3-column matrix (runs crossing the copy's blocks and the columns)
    /// stacked as the whole matrix.
    #[test]
    fn stacked_rows_are_the_whole_matrix() {
        let (nrow, ncol) = (300_001, 3);
        let whole: Vec<f64> = (0..nrow * ncol).map(|e| e as f64 * 0.5 - 7.0).collect();
        let parts = [0..100_352, 100_352..100_608, 100_608..nrow];
        let blocks: Vec<Vec<f64>> = parts
            .iter()
            .map(|rows| (0..ncol).flat_map(|c| whole[c * nrow + rows.start..c * nrow + rows.end].to_vec()).collect())
            .collect();
        assert!(stack_rows(&blocks, &parts, nrow, ncol) == whole);
    }
}

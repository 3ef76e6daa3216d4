//! The public entry point: an `Operator` is a parsed formula; `run` checks the inputs against the
//! declared variables, evaluates the reduction and returns column-major results, as R stores them.

use crate::api::{Backend, ForPrecision, Input, Output, Precision, RunOptions};
use crate::cpu::{self, Inputs, RowMajor};
use crate::cuda;
use crate::cuda::codegen::{KernelOptions, Selection, Variant};
use crate::cuda::dtype::Dtype;
use crate::cuda::launch::Kept;
use crate::cuda::recorded::Recorded;
use crate::cuda::resident::DeviceMatrix;
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::ranges::BlockRanges;
use crate::real::{Real, Stored};
use crate::reduction::ReductionKind;

#[derive(Debug, Clone)]
pub struct Operator {
    pub formula: Formula,
    /// Its GPU kernels, compiled on first use.
    kernels: cuda::device::Kernels,
}

impl Operator {
    pub fn new(formula: &str, args: &[String]) -> Result<Operator> {
        Ok(Operator { formula: Formula::parse(formula, args)?, kernels: Default::default() })
    }

    pub fn reduction_kind(&self) -> ReductionKind {
        self.formula.reduction.kind
    }

    pub fn run(&self, inputs: &[Input], options: &RunOptions) -> Result<Output> {
        self.run_with(inputs, &[], options)
    }

    /// `run`, where `resident[p]`, when given, holds input `p` on a device (its `Input` gives the
    /// shape and no data): it must be in the precision of the call, and on its device when the
    /// call computes on a GPU; the CPU reads it back.
    pub fn run_with(
        &self,
        inputs: &[Input],
        resident: &[Option<&DeviceMatrix>],
        options: &RunOptions,
    ) -> Result<Output> {
        self.run_to(inputs, resident, options, None)
    }

    /// `run_with` on a GPU, the values written into `target` (a matrix of the result's shape on
    /// the device of the call, in its precision, float32 or float64) instead of coming back. The
    /// work is only queued on the device's stream: wait with `Device::synchronize` before reading
    /// `target` or freeing any input (`crate::iterate` does). The `Output` holds no results. With
    /// `record`, its launches are also recorded there, to be issued again (`Recorded::replay`) with
    /// the same inputs and target.
    pub fn run_into(
        &self,
        inputs: &[Input],
        resident: &[Option<&DeviceMatrix>],
        options: &RunOptions,
        target: &DeviceMatrix,
        record: Option<&mut Option<Recorded>>,
    ) -> Result<Output> {
        self.run_to(inputs, resident, options, Some(Kept { matrix: target, record }))
    }

    fn run_to(
        &self,
        inputs: &[Input],
        resident: &[Option<&DeviceMatrix>],
        options: &RunOptions,
        kept: Option<Kept>,
    ) -> Result<Output> {
        let resident_at = |p: usize| resident.get(p).copied().flatten();
        let (n_i, n_j) = self.check_inputs(inputs, &resident_at)?;
        if let Some(ranges) = &options.ranges {
            ranges.validate(n_i, n_j)?;
        }
        let gpu = chosen_gpu(options)?;
        self.check_residence(resident, kept.as_ref().map(|k| k.matrix), options.precision, gpu.as_deref())?;
        // The CPU computes from host data: resident inputs are read back.
        let downloaded: Vec<Option<Vec<f64>>> = match gpu {
            Some(_) => vec![],
            None => {
                (0..inputs.len()).map(|p| resident_at(p).map(|m| m.to_host()).transpose()).collect::<Result<_>>()?
            }
        };
        let host_inputs: Vec<Input> = inputs
            .iter()
            .enumerate()
            .map(|(p, x)| match downloaded.get(p).and_then(|d| d.as_deref()) {
                Some(data) => Input { data, ..*x },
                None => *x,
            })
            .collect();
        let red = &self.formula.reduction;
        let run = Run {
            op: self,
            inputs: &host_inputs,
            resident,
            options,
            sizes: (n_i, n_j),
            ranges: options.ranges.as_ref().map(|r| r.for_axis(red.axis)),
            kept,
            timings: Vec::new(),
        };
        let (done, timings) = match gpu {
            Some(device) => options.precision.dispatch(OnGpu { run, device }),
            None => options.precision.dispatch(OnCpu(run)),
        }?;
        let nrow = if red.axis == 0 { n_i } else { n_j };
        let Done { values, indices, backend } = done;
        Ok(Output { values, indices, nrow, k: red.k, dim: self.formula.output_dim(), backend, timings })
    }

    /// Checks that the inputs kept on a device, and the matrix the result is to be kept in, are in
    /// the precision of the call and on its device.
    fn check_residence(
        &self,
        resident: &[Option<&DeviceMatrix>],
        target: Option<&DeviceMatrix>,
        precision: Precision,
        gpu: Option<&cuda::Device>,
    ) -> Result<()> {
        let precision_name = format!("{precision:?}").replace('F', "float");
        let kept = self.formula.variables.iter().zip(resident).filter_map(|(v, m)| Some((v, (*m)?)));
        for (var, m) in kept {
            let bad = |what: String| Error::Input { name: var.name.clone(), what };
            if m.precision != precision {
                return Err(bad(format!(
                    "is kept on {}, but this computation is in {precision_name}: keep it again in that precision, or pass the matrix itself",
                    m.where_(),
                )));
            }
            if let Some(device) = gpu.filter(|d| d.ordinal != m.ordinal()) {
                return Err(bad(format!(
                    "is kept on {}, but this computation runs on GPU {}: keep it on that device, or pass the matrix itself",
                    m.where_(),
                    device.ordinal
                )));
            }
        }
        if let Some(m) = target {
            let on_device = gpu.is_some_and(|d| d.ordinal == m.ordinal());
            if m.precision != precision || !on_device {
                return Err(Error::Invalid(format!(
                    "the result cannot be kept on {}: this computation is in {precision_name}, on {}",
                    m.where_(),
                    gpu.map_or("the CPU".to_string(), |d| format!("GPU {}", d.ordinal))
                )));
            }
        }
        Ok(())
    }

    /// Checks the number and shapes of the inputs, and that host data holds `nrow x ncol` values;
    /// returns the sizes of the i and j ranges.
    pub(crate) fn check_inputs<'m>(
        &self,
        inputs: &[Input],
        resident: &dyn Fn(usize) -> Option<&'m DeviceMatrix>,
    ) -> Result<(usize, usize)> {
        self.check_count(inputs.len())?;
        for (p, (var, input)) in self.formula.variables.iter().zip(inputs).enumerate() {
            if resident(p).is_none() && input.data.len() != input.nrow * input.ncol {
                let what = format!("holds {} values, not {} x {}", input.data.len(), input.nrow, input.ncol);
                return Err(Error::Input { name: var.name.clone(), what });
            }
        }
        let shapes: Vec<(usize, usize)> = inputs.iter().map(|x| (x.nrow, x.ncol)).collect();
        self.sizes(&shapes)
    }

    fn check_count(&self, given: usize) -> Result<()> {
        let vars = &self.formula.variables;
        if given != vars.len() {
            let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
            return Err(Error::Invalid(format!(
                "expected {} inputs ({}), got {}",
                vars.len(),
                names.join(", "),
                given
            )));
        }
        Ok(())
    }

    /// The sizes of the i and j ranges of inputs of these `(nrow, ncol)` shapes (a parameter: any
    /// shape of `dim` values), or an error naming the first input that does not fit the formula's
    /// declarations.
    pub fn sizes(&self, shapes: &[(usize, usize)]) -> Result<(usize, usize)> {
        self.check_count(shapes.len())?;
        let vars = &self.formula.variables;
        let mut rows: [Option<(usize, &str)>; 2] = [None, None];
        for (var, &(nrow, ncol)) in vars.iter().zip(shapes) {
            let bad = |what: String| Error::Input { name: var.name.clone(), what };
            let slot = match var.category {
                Category::Param => {
                    let len = nrow * ncol;
                    if len != var.dim {
                        return Err(bad(format!(
                            "expected a parameter of length {} (Pm({})), got {} values",
                            var.dim, var.dim, len
                        )));
                    }
                    continue;
                }
                Category::I => 0,
                Category::J => 1,
            };
            let keyword = var.category.keyword();
            if ncol != var.dim {
                return Err(bad(format!(
                    "expected a matrix with {} column{} ({}({})), got {} column{}",
                    var.dim,
                    if var.dim == 1 { "" } else { "s" },
                    keyword,
                    var.dim,
                    ncol,
                    if ncol == 1 { "" } else { "s" }
                )));
            }
            if nrow == 0 {
                return Err(bad("has no rows".into()));
            }
            match rows[slot] {
                Some((n, other)) if n != nrow => {
                    let index = if slot == 0 { "i" } else { "j" };
                    return Err(bad(format!(
                        "has {nrow} rows, but '{other}' has {n}: all {index}-variables ({keyword}) must have the same number of rows"
                    )));
                }
                Some(_) => {}
                None => rows[slot] = Some((nrow, &var.name)),
            }
        }
        // Without any i- (or j-) variable, that index has a single value.
        let (n_i, n_j) = (rows[0].map_or(1, |r| r.0), rows[1].map_or(1, |r| r.0));
        let red = &self.formula.reduction;
        let range = if red.axis == 0 { n_j } else { n_i };
        if red.kind.is_k_selection() && red.k > range {
            let index = if red.axis == 0 { "j" } else { "i" };
            return Err(Error::Invalid(format!(
                "K = {} is larger than the number of {index}-rows reduced over ({range})",
                red.k
            )));
        }
        Ok((n_i, n_j))
    }
}

/// The GPU a call computes on (None: the CPU): the one asked for, or an error saying why it cannot
/// be used; with `Backend::Auto`, the option's device where one can be used.
pub(crate) fn chosen_gpu(options: &RunOptions) -> Result<Option<std::sync::Arc<cuda::Device>>> {
    Ok(match options.backend {
        Backend::Cpu => None,
        Backend::Gpu(d) => Some(cuda::device::device(d)?),
        Backend::Auto => cuda::device::device(options.device).ok(),
    })
}

/// One call, checked, with its inputs on the host (those kept on a device also in `resident`).
struct Run<'a> {
    op: &'a Operator,
    inputs: &'a [Input<'a>],
    resident: &'a [Option<&'a DeviceMatrix>],
    options: &'a RunOptions,
    /// The sizes of the i and j ranges.
    sizes: (usize, usize),
    /// The block-sparse ranges of the output rows' axis.
    ranges: Option<&'a BlockRanges>,
    kept: Option<Kept<'a>>,
    timings: Vec<(&'static str, f64)>,
}

impl<'a> Run<'a> {
    /// The whole call, as the CUDA backend takes it.
    fn call(&self, options: &'a RunOptions) -> cuda::launch::Call<'a> {
        cuda::launch::Call {
            formula: &self.op.formula,
            inputs: self.inputs,
            resident: self.resident,
            sizes: self.sizes,
            part: None,
            ranges: self.ranges,
            options,
        }
    }
}

/// What a run computed: the results in R's order and what computed them.
struct Done {
    values: Option<Vec<f64>>,
    indices: Option<Vec<i32>>,
    backend: String,
}

type Finished = Result<(Done, Vec<(&'static str, f64)>)>;

/// A run on this GPU, shared with the other GPUs of `RunOptions::gpus` where it can be.
struct OnGpu<'a> {
    run: Run<'a>,
    device: std::sync::Arc<cuda::Device>,
}

impl ForPrecision for OnGpu<'_> {
    type Output = Finished;

    fn run<S: Stored, T: Real>(self) -> Finished {
        let OnGpu { run: mut r, device } = self;
        let (op, options) = (r.op, r.options);
        let dtype = Dtype::of(options.precision);
        let nrow = if op.formula.reduction.axis == 0 { r.sizes.0 } else { r.sizes.1 };
        let mean_reduced = r.ranges.map_or((r.sizes.0 + r.sizes.1 - nrow) as f64, |b| b.mean_reduced());
        let tuning = &options.tuning;
        let selection = Selection::for_rows(&op.formula, mean_reduced, tuning.gpu_selection);
        let compile = |device: &cuda::Device| {
            let variant = Variant::choose(&op.formula, dtype, r.ranges, device.arch, tuning);
            let kernel = KernelOptions {
                unroll: tuning.unroll,
                ..KernelOptions::new(dtype, options.sum_scheme, variant, selection)
            };
            op.kernels.get(device, &op.formula, kernel, options.cache_dir.as_deref())
        };
        // Several GPUs share what they can take in parts: data from the host, not empty.
        let alone = r.resident.iter().any(Option::is_some) || r.kept.is_some() || r.sizes.0 == 0 || r.sizes.1 == 0;
        if options.gpus.len() > 1 && !alone {
            let mut gpus = vec![device.ordinal];
            gpus.extend(&options.gpus[1..]);
            let call = cuda::launch::Call { resident: &[], ..r.call(options) };
            let (columns, backend) = cuda::several::evaluate::<S, T>(&gpus, &compile, &call, &mut r.timings)?;
            return Ok((Done { values: columns.values, indices: columns.indices, backend }, r.timings));
        }
        let clock = std::time::Instant::now();
        let compiled = compile(&device)?;
        r.timings.push(("compile or load", clock.elapsed().as_secs_f64()));
        let stop = || options.interrupt.is_some_and(|interrupted| interrupted());
        let call = r.call(options);
        let columns = cuda::launch::evaluate::<S, T>(&device, &compiled, &call, &stop, r.kept, &mut r.timings)?;
        let backend = format!("GPU {} ({})", device.ordinal, device.name);
        Ok((Done { values: columns.values, indices: columns.indices, backend }, r.timings))
    }
}

/// A run on the CPU: float16 inputs rounded to the values float16 keeps, computed in float32.
struct OnCpu<'a>(Run<'a>);

impl ForPrecision for OnCpu<'_> {
    type Output = Finished;

    fn run<S: Stored, T: Real>(self) -> Finished {
        let OnCpu(mut r) = self;
        let options = r.options;
        let threads = match options.threads {
            0 => crate::parallel::cores(),
            n => n,
        };
        let clock = std::time::Instant::now();
        let rounded: Vec<Vec<f64>> = match S::HALF {
            true => r.inputs.iter().map(|x| to_f16(x.data, |h| h.to_f64())).collect(),
            false => Vec::new(),
        };
        let converted: Vec<std::borrow::Cow<[T]>> = match S::HALF {
            true => rounded.iter().map(|x| T::from_f64_slice(x)).collect(),
            false => r.inputs.iter().map(|x| T::from_f64_slice(x.data)).collect(),
        };
        let (n_i, n_j) = r.sizes;
        let inputs = Inputs { data: converted.iter().map(|c| c.as_ref()).collect(), n_i, n_j };
        let settings = cpu::Settings {
            scheme: options.sum_scheme,
            threads,
            interrupt: options.interrupt,
            isa: options.tuning.cpu_isa,
        };
        let rows = cpu::evaluate(&r.op.formula, &inputs, &settings, r.ranges)?;
        r.timings.push(("CPU evaluation", clock.elapsed().as_secs_f64()));
        let nrow = if r.op.formula.reduction.axis == 0 { n_i } else { n_j };
        let (values, indices) = to_column_major(rows, nrow);
        Ok((Done { values, indices, backend: "CPU".to_string() }, r.timings))
    }
}

/// Each value rounded to float16, then mapped by `f`.
fn to_f16<U>(x: &[f64], f: impl Fn(half::f16) -> U) -> Vec<U> {
    x.iter().map(|&v| f(half::f16::from_f64(v))).collect()
}

/// The results in R's order, each buffer freed once transposed (what is not returned is `None`).
fn to_column_major(rows: RowMajor, nrow: usize) -> (Option<Vec<f64>>, Option<Vec<i32>>) {
    fn transpose<X: Copy + Default>(rows: Vec<X>, nrow: usize, width: usize) -> Option<Vec<X>> {
        if rows.is_empty() {
            return None;
        }
        if width == 1 || nrow == 1 {
            return Some(rows); // one column (or one row) is the same in both orders
        }
        let mut columns = vec![X::default(); rows.len()];
        for (r, row) in rows.chunks(width).enumerate() {
            for (c, &x) in row.iter().enumerate() {
                columns[r + nrow * c] = x;
            }
        }
        Some(columns)
    }
    let RowMajor { values, indices, width } = rows;
    (transpose(values, nrow, width), transpose(indices, nrow, width))
}

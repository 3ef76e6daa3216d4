//! The public entry point: an `Operator` is a parsed formula; `run` checks the inputs against the
//! declared variables, evaluates the reduction and returns column-major results, as R stores them.

use crate::cache::DiskCache;
use crate::cpu::{self, Inputs, RowMajor};
use crate::cuda;
use crate::cuda::codegen::Dtype;
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::real::Real;
use crate::reduction::{ReductionKind, SumScheme};

/// One input as R holds it: a column-major `nrow x ncol` matrix of doubles (a vector is `n x 1`).
#[derive(Debug, Clone, Copy)]
pub struct Input<'a> {
    pub data: &'a [f64],
    pub nrow: usize,
    pub ncol: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// float16 storage (inputs rounded to half precision), float32 arithmetic and results.
    F16,
    #[default]
    F32,
    F64,
}

/// Where to compute.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    Cpu,
    /// This GPU, or an error saying why it cannot be used.
    Gpu(usize),
    /// This GPU when one can be used, the CPU otherwise.
    #[default]
    Auto,
}

#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    pub precision: Precision,
    pub sum_scheme: SumScheme,
    /// 0 means every available core.
    pub threads: usize,
    pub backend: Backend,
    /// GPU device used by `Backend::Auto`.
    pub device: usize,
    /// Where compiled GPU kernels are kept between sessions (none: compiled once per process).
    pub cache_dir: Option<std::path::PathBuf>,
    /// Most bytes of GPU memory to use (default: 80% of what is free); larger inputs are
    /// processed in blocks.
    pub gpu_memory: Option<usize>,
    /// Called on the calling thread about every 10 ms while the CPU computes (R's check for
    /// Ctrl-C); when it returns true, the workers stop at their next tile and `run` returns
    /// `Error::Interrupted`. GPU kernels run to their end.
    pub interrupt: Option<fn() -> bool>,
}

/// Results in column-major order: `nrow x k x dim` (k = 1 except for the K-selections).
#[derive(Debug, Clone, PartialEq)]
pub struct Output {
    pub values: Option<Vec<f64>>,
    /// 1-based indices into the reduced range.
    pub indices: Option<Vec<i32>>,
    pub nrow: usize,
    pub k: usize,
    pub dim: usize,
    /// What computed it: "CPU" or the GPU's description.
    pub backend: String,
    /// Seconds spent in each phase (conversion, compilation, transfers, kernel, ...).
    pub timings: Vec<(&'static str, f64)>,
}

#[derive(Debug, Clone)]
pub struct Operator {
    pub formula: Formula,
}

impl Operator {
    pub fn new(formula: &str, args: &[String]) -> Result<Operator> {
        Ok(Operator { formula: Formula::parse(formula, args)? })
    }

    pub fn reduction_kind(&self) -> ReductionKind {
        self.formula.reduction.kind
    }

    pub fn run(&self, inputs: &[Input], options: &RunOptions) -> Result<Output> {
        let (n_i, n_j) = self.check_inputs(inputs)?;
        let gpu = match options.backend {
            Backend::Cpu => None,
            Backend::Gpu(d) => Some(cuda::device::device(d)?),
            Backend::Auto => cuda::device::device(options.device).ok(),
        };
        let mut timings = Vec::new();
        let (rows, backend) = match gpu {
            Some(device) => {
                let cache = options.cache_dir.as_ref().map(DiskCache::open).transpose().map_err(Error::Invalid)?;
                let clock = std::time::Instant::now();
                let rows = match options.precision {
                    Precision::F16 => {
                        let bits: Vec<Vec<u16>> = inputs.iter().map(|x| to_f16(x.data, |h| h.to_bits())).collect();
                        timings.push(("conversion", clock.elapsed().as_secs_f64()));
                        let inputs = Inputs { data: bits.iter().map(|c| c.as_slice()).collect(), n_i, n_j };
                        cuda::launch::evaluate::<u16, f32>(
                            &device,
                            &self.formula,
                            &inputs,
                            Dtype::F16,
                            options,
                            cache.as_ref(),
                            &mut timings,
                        )?
                    }
                    Precision::F32 => {
                        let converted = convert::<f32>(inputs);
                        timings.push(("conversion", clock.elapsed().as_secs_f64()));
                        let inputs = Inputs { data: converted.iter().map(|c| c.as_ref()).collect(), n_i, n_j };
                        cuda::launch::evaluate::<f32, f32>(
                            &device,
                            &self.formula,
                            &inputs,
                            Dtype::F32,
                            options,
                            cache.as_ref(),
                            &mut timings,
                        )?
                    }
                    Precision::F64 => {
                        let inputs = Inputs { data: inputs.iter().map(|x| x.data).collect(), n_i, n_j };
                        cuda::launch::evaluate::<f64, f64>(
                            &device,
                            &self.formula,
                            &inputs,
                            Dtype::F64,
                            options,
                            cache.as_ref(),
                            &mut timings,
                        )?
                    }
                };
                (rows, format!("GPU {} ({})", device.ordinal, device.name))
            }
            None => {
                let threads = match options.threads {
                    0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                    n => n,
                };
                let clock = std::time::Instant::now();
                let rows = match options.precision {
                    Precision::F16 => {
                        // The values float16 storage keeps, computed as float32.
                        let rounded: Vec<Vec<f64>> = inputs.iter().map(|x| to_f16(x.data, |h| h.to_f64())).collect();
                        let inputs: Vec<Input> =
                            inputs.iter().zip(&rounded).map(|(x, r)| Input { data: r, ..*x }).collect();
                        run_cpu::<f32>(&self.formula, &inputs, n_i, n_j, options, threads)
                    }
                    Precision::F32 => run_cpu::<f32>(&self.formula, inputs, n_i, n_j, options, threads),
                    Precision::F64 => run_cpu::<f64>(&self.formula, inputs, n_i, n_j, options, threads),
                }?;
                timings.push(("CPU evaluation", clock.elapsed().as_secs_f64()));
                (rows, "CPU".to_string())
            }
        };
        let red = &self.formula.reduction;
        let nrow = if red.axis == 0 { n_i } else { n_j };
        let (values, indices) = to_column_major(rows, nrow);
        Ok(Output {
            values,
            indices,
            nrow,
            k: red.k,
            dim: self.formula.output_dim(),
            backend,
            timings,
        })
    }

    /// Checks the number and shapes of the inputs; returns the sizes of the i and j ranges.
    fn check_inputs(&self, inputs: &[Input]) -> Result<(usize, usize)> {
        let vars = &self.formula.variables;
        if inputs.len() != vars.len() {
            let names: Vec<&str> = vars.iter().map(|v| v.name.as_str()).collect();
            return Err(Error::Invalid(format!(
                "expected {} inputs ({}), got {}",
                vars.len(),
                names.join(", "),
                inputs.len()
            )));
        }
        let mut rows: [Option<(usize, &str)>; 2] = [None, None];
        for (var, input) in vars.iter().zip(inputs) {
            let bad = |what: String| Error::Input { name: var.name.clone(), what };
            if input.data.len() != input.nrow * input.ncol {
                return Err(bad(format!("holds {} values, not {} x {}", input.data.len(), input.nrow, input.ncol)));
            }
            let slot = match var.category {
                Category::Param => {
                    if input.data.len() != var.dim {
                        return Err(bad(format!(
                            "expected a parameter of length {} (Pm({})), got {} values",
                            var.dim,
                            var.dim,
                            input.data.len()
                        )));
                    }
                    continue;
                }
                Category::I => 0,
                Category::J => 1,
            };
            let keyword = var.category.keyword();
            if input.ncol != var.dim {
                return Err(bad(format!(
                    "expected a matrix with {} column{} ({}({})), got {} column{}",
                    var.dim,
                    if var.dim == 1 { "" } else { "s" },
                    keyword,
                    var.dim,
                    input.ncol,
                    if input.ncol == 1 { "" } else { "s" }
                )));
            }
            if input.nrow == 0 {
                return Err(bad("has no rows".into()));
            }
            match rows[slot] {
                Some((n, other)) if n != input.nrow => {
                    let index = if slot == 0 { "i" } else { "j" };
                    return Err(bad(format!(
                        "has {} rows, but '{other}' has {n}: all {index}-variables ({keyword}) must have the same number of rows",
                        input.nrow
                    )));
                }
                Some(_) => {}
                None => rows[slot] = Some((input.nrow, &var.name)),
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

/// The inputs in the working precision (borrowed as they are for f64).
fn convert<'a, T: Real>(inputs: &[Input<'a>]) -> Vec<std::borrow::Cow<'a, [T]>> {
    inputs.iter().map(|x| T::from_f64_slice(x.data)).collect()
}

fn run_cpu<T: Real>(
    formula: &Formula,
    inputs: &[Input],
    n_i: usize,
    n_j: usize,
    options: &RunOptions,
    threads: usize,
) -> Result<RowMajor> {
    let converted = convert::<T>(inputs);
    let inputs = Inputs { data: converted.iter().map(|c| c.as_ref()).collect(), n_i, n_j };
    cpu::evaluate(formula, &inputs, options.sum_scheme, threads, options.interrupt)
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

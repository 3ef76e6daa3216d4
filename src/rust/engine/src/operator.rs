//! The public entry point: an `Operator` is a parsed formula; `run` checks the inputs against the
//! declared variables, evaluates the reduction and returns column-major results, as R stores them.

use crate::api::{Backend, Input, Output, RunOptions, Values};
use crate::backend::{BackendDevice, Call, Columns, Timings};
use crate::cpu::Cpu;
use crate::cuda;
use crate::cuda::launch::Kept;
use crate::cuda::recorded::Recorded;
use crate::cuda::resident::DeviceMatrix;
use crate::cuda::several::Several;
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::grouped_sum::GroupedSum;
use crate::precision::{ForPrecision, Precision};
use crate::real::{Real, Stored};

#[derive(Debug, Clone)]
pub struct Operator {
    pub formula: Formula,
    /// The O(N) form of a grouped sum (`Sum_Reduction(Equal(l, g) * F, axis)`) and the map of
    /// its term, for the CPU.
    grouped: Option<Box<(GroupedSum, Operator)>>,
}

impl Operator {
    pub fn new(formula: &str, args: &[String]) -> Result<Operator> {
        let formula = Formula::parse(formula, args)?;
        let grouped = GroupedSum::of(&formula).and_then(|g| {
            let map = Operator::new(&g.map_formula, &g.map_args).ok()?;
            (map.formula.variables.len() == g.map_inputs.len()).then(|| Box::new((g, map)))
        });
        Ok(Operator { formula, grouped })
    }

    /// The reduction of `inputs` (each on the host, or kept on a device: see `Values`), on the
    /// backend `options` choose.
    pub fn run(&self, inputs: &[Input], options: &RunOptions) -> Result<Output> {
        self.run_to(inputs, options, None)
    }

    /// `run` on a GPU, the values written into `target` (a matrix of the result's shape on the
    /// device of the call, in its precision, float32 or float64) instead of coming back. The work is
    /// only queued on the device's stream: wait with `Device::synchronize` before reading `target`
    /// or freeing any input (`crate::iterate` does). The `Output` holds no results. With `record`,
    /// its launches are also recorded there, to be issued again (`Recorded::replay`) with the same
    /// inputs and target.
    pub fn run_into(
        &self,
        inputs: &[Input],
        options: &RunOptions,
        target: &DeviceMatrix,
        record: Option<&mut Option<Recorded>>,
    ) -> Result<Output> {
        self.run_to(inputs, options, Some(Kept { matrix: target, record }))
    }

    fn run_to(&self, inputs: &[Input], options: &RunOptions, kept: Option<Kept>) -> Result<Output> {
        let sizes = self.check_inputs(inputs)?;
        if let Some(ranges) = &options.ranges {
            ranges.validate(sizes.0, sizes.1)?;
        }
        let gpu = chosen_gpu(options)?;
        self.check_residence(inputs, kept.as_ref().map(|k| k.matrix), options.precision, gpu.as_deref())?;
        // The CPU computes from host data: inputs kept on a device are read back.
        let downloaded: Vec<Option<Vec<f64>>> = match gpu {
            Some(_) => vec![],
            None => inputs.iter().map(|x| x.kept().map(DeviceMatrix::to_host).transpose()).collect::<Result<_>>()?,
        };
        let inputs: Vec<Input> = inputs
            .iter()
            .enumerate()
            .map(|(p, x)| match downloaded.get(p).and_then(|d| d.as_deref()) {
                Some(data) => Input::host(data, x.nrow, x.ncol),
                None => *x,
            })
            .collect();
        if let (None, None, Some(grouped)) = (&gpu, &options.ranges, &self.grouped) {
            if let Some(out) = run_grouped(&grouped.0, &grouped.1, &inputs, options)? {
                return Ok(out);
            }
        }
        let red = &self.formula.reduction;
        let ranges = options.ranges.as_ref().map(|r| r.for_axis(red.axis));
        let call = Call { formula: &self.formula, inputs: &inputs, sizes, part: None, ranges, options };
        let mut timings = Timings::new();
        let (columns, backend) = match (gpu, kept) {
            (None, _) => (on(&Cpu, &call, &mut timings)?, Cpu.describe()),
            (Some(device), Some(kept)) => {
                device.evaluate_into(&call, kept, &mut timings)?;
                (Columns { values: None, indices: None, states: None }, device.describe())
            }
            (Some(device), None) => match shared_gpus(&device, &call)? {
                Some(several) => (on(&several, &call, &mut timings)?, several.describe()),
                None => (on(&*device, &call, &mut timings)?, device.describe()),
            },
        };
        let (nrow, _) = call.out_and_reduced();
        let Columns { values, indices, .. } = columns;
        Ok(Output { values, indices, nrow, k: red.k, dim: self.formula.output_dim(), backend, timings })
    }

    /// Checks that the inputs kept on a device, and the matrix the result is to be kept in, are in
    /// the precision of the call and on its device.
    fn check_residence(
        &self,
        inputs: &[Input],
        target: Option<&DeviceMatrix>,
        precision: Precision,
        gpu: Option<&cuda::Device>,
    ) -> Result<()> {
        let precision_name = format!("{precision:?}").replace('F', "float");
        let kept = self.formula.variables.iter().zip(inputs).filter_map(|(v, x)| Some((v, x.kept()?)));
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
    pub(crate) fn check_inputs(&self, inputs: &[Input]) -> Result<(usize, usize)> {
        self.check_count(inputs.len())?;
        for (var, input) in self.formula.variables.iter().zip(inputs) {
            let bad = |what: String| Err(Error::Input { name: var.name.clone(), what });
            match input.values {
                Values::Host(data) if data.len() != input.nrow * input.ncol => {
                    return bad(format!("holds {} values, not {} x {}", data.len(), input.nrow, input.ncol));
                }
                Values::Device(m) if (m.nrow, m.ncol) != (input.nrow, input.ncol) => {
                    return bad(format!("is kept as {} x {}, not {} x {}", m.nrow, m.ncol, input.nrow, input.ncol));
                }
                _ => {}
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

/// The GPUs of `RunOptions::gpus` (the call's device first) when they can share this call: its
/// inputs from the host, not empty.
fn shared_gpus(device: &cuda::Device, call: &Call) -> Result<Option<Several>> {
    let gpus = &call.options.gpus;
    let alone = call.inputs.iter().any(|x| x.kept().is_some()) || call.sizes.0 == 0 || call.sizes.1 == 0;
    if gpus.len() <= 1 || alone {
        return Ok(None);
    }
    let mut ordinals = vec![device.ordinal];
    ordinals.extend(&gpus[1..]);
    Several::open(&ordinals).map(Some)
}

/// The grouped sum `g` of `inputs` (on the host, checked): the rows added by group
/// (`grouped_sum`), their terms taken from the inputs where the term is made of inputs and
/// constants, else from the map of the term; None where a term is not finite (0 * Inf: the
/// reduction over every pair says what each group is).
fn run_grouped(g: &GroupedSum, map: &Operator, inputs: &[Input], options: &RunOptions) -> Result<Option<Output>> {
    use crate::grouped_sum::{add_by_group, direct_columns, direct_sources, Column};
    let map_inputs: Vec<Input> = g.map_inputs.iter().map(|&p| inputs[p]).collect();
    let (Some(labels), Some(groups)) = (inputs[g.label].host_data(), inputs[g.group].host_data()) else {
        return Ok(None);
    };
    let data: Option<Vec<&[f64]>> = map_inputs.iter().map(Input::host_data).collect();
    if let (Some(sources), Some(data)) = (direct_sources(&map.formula), data) {
        let clock = std::time::Instant::now();
        let columns = direct_columns(&sources, &data, labels.len(), options.precision);
        let Some(values) = add_by_group(labels, groups, &columns, options.precision) else { return Ok(None) };
        let timings = vec![("grouped sum", clock.elapsed().as_secs_f64())];
        let (nrow, dim) = (groups.len(), columns.len());
        return Ok(Some(Output { values: Some(values), indices: None, nrow, k: 1, dim, backend: Cpu.describe(), timings }));
    }
    let mut out = map.run(&map_inputs, options)?;
    let terms = out.values.take().unwrap_or_default();
    let columns: Vec<Column> = terms.chunks_exact(labels.len()).map(Column::Values).collect();
    let Some(values) = add_by_group(labels, groups, &columns, options.precision) else { return Ok(None) };
    out.values = Some(values);
    out.nrow = groups.len();
    Ok(Some(out))
}

/// `call` on `device`, in the types of the call's precision: the one place a precision becomes
/// types for a run.
fn on<B: BackendDevice>(device: &B, call: &Call, timings: &mut Timings) -> Result<Columns> {
    call.options.precision.dispatch(TypedCall { device, call, timings })
}

struct TypedCall<'a, B> {
    device: &'a B,
    call: &'a Call<'a>,
    timings: &'a mut Timings,
}

impl<B: BackendDevice> ForPrecision for TypedCall<'_, B> {
    type Output = Result<Columns>;

    fn run<S: Stored, T: Real>(self) -> Result<Columns> {
        self.device.evaluate::<S, T>(self.call, self.timings)
    }
}

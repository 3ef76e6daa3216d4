//! The public entry point: an `Operator` is a parsed formula; `run` checks the inputs against the
//! declared variables, evaluates the reduction and returns column-major results, as R stores them.

use crate::api::{Backend, Input, Output, RunOptions, Values};
use crate::backend::{Call, Operation, Timings};
use crate::choose::{choose, Chosen};
use crate::error::{Error, Result};
use crate::formula::{Category, Formula};
use crate::grouped_sum::GroupedSum;
use crate::precision::Precision;

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

    /// Compiles the GPU kernels of dense calls of this operator over each of `reduced_rows` reduced
    /// rows (a selection's storage depends on it), without running them, so that a later call
    /// finds them in the kernel cache (`options.cache_dir`); returns the GPU's ordinal, or `None`
    /// where `options` choose the CPU, which compiles nothing.
    pub fn precompile(&self, options: &RunOptions, reduced_rows: &[f64]) -> Result<Option<usize>> {
        match choose(options)? {
            Chosen::Cpu => Ok(None),
            Chosen::Gpu(gpu) => gpu.precompile(&self.formula, options, reduced_rows).map(|()| Some(gpu.ordinal())),
        }
    }

    /// The reduction of `inputs` (each on the host, or kept on a device: see `Values`), on the
    /// backend `options` choose.
    pub fn run(&self, inputs: &[Input], options: &RunOptions) -> Result<Output> {
        let sizes = self.check_inputs(inputs)?;
        self.check_ranges(sizes, options)?;
        let chosen = choose(options)?;
        self.check_residence(inputs, options.precision, chosen.gpu())?;
        // The CPU computes from host data: inputs kept on a device are read back.
        let downloaded: Vec<Option<Vec<f64>>> = match chosen {
            Chosen::Gpu(_) => vec![],
            Chosen::Cpu => inputs.iter().map(|x| x.kept().map(|m| m.to_host()).transpose()).collect::<Result<_>>()?,
        };
        let inputs: Vec<Input> = inputs
            .iter()
            .enumerate()
            .map(|(p, x)| match downloaded.get(p).and_then(|d| d.as_deref()) {
                Some(data) => Input::host(data, x.nrow, x.ncol),
                None => *x,
            })
            .collect();
        if let (Chosen::Cpu, None, Some(grouped)) = (&chosen, &options.ranges, &self.grouped) {
            if let Some(out) = run_grouped(&grouped.0, &grouped.1, &inputs, options)? {
                return Ok(out);
            }
        }
        let call = self.checked_call(&inputs, options, sizes);
        let mut timings = Timings::new();
        let (columns, backend) = chosen.evaluate(&call, &mut timings)?;
        let (nrow, _) = call.out_and_reduced();
        let red = &self.formula.reduction;
        Ok(Output { values: columns.values, indices: columns.indices, nrow, k: red.k, dim: self.formula.output_dim(), backend, timings })
    }

    /// Checks that the inputs kept on a device are in the precision of the call and on its GPU
    /// (`gpu`; the CPU reads them back).
    fn check_residence(&self, inputs: &[Input], precision: Precision, gpu: Option<usize>) -> Result<()> {
        let kept = self.formula.variables.iter().zip(inputs).filter_map(|(v, x)| Some((v, x.kept()?)));
        for (var, m) in kept {
            let bad = |what: String| Error::Input { name: var.name.clone(), what };
            if m.precision() != precision {
                return Err(bad(format!(
                    "is kept on {}, but this computation is in {}: keep it again in that precision, or pass the matrix itself",
                    m.where_(),
                    precision.name()
                )));
            }
            if let Some(ordinal) = gpu.filter(|&d| d != m.ordinal()) {
                return Err(bad(format!(
                    "is kept on {}, but this computation runs on GPU {ordinal}: keep it on that device, or pass the matrix itself",
                    m.where_(),
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
                Values::Device(m) if m.shape() != (input.nrow, input.ncol) => {
                    let (nrow, ncol) = m.shape();
                    return bad(format!("is kept as {nrow} x {ncol}, not {} x {}", input.nrow, input.ncol));
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

    /// Checks the block-sparse ranges of `options`, if any, against the sizes of the i and j ranges.
    fn check_ranges(&self, (n_i, n_j): (usize, usize), options: &RunOptions) -> Result<()> {
        let any_order = options.ranges_in_any_order
            && options.backend == Backend::Cpu
            && self.formula.reduction.kind.is_k_selection();
        options.ranges.as_ref().map_or(Ok(()), |ranges| ranges.validate_in_order(n_i, n_j, !any_order))
    }

    /// The call of `inputs` checked (`check_inputs`, of `sizes`, and `check_ranges`).
    fn checked_call<'c>(&'c self, inputs: &'c [Input<'c>], options: &'c RunOptions, sizes: (usize, usize)) -> Call<'c> {
        let ranges = options.ranges.as_ref().map(|r| r.for_axis(self.formula.reduction.axis));
        Call { formula: &self.formula, inputs, sizes, part: None, ranges, options }
    }
}

/// The grouped sum `g` of `inputs` (on the host, checked): the rows added by group
/// (`grouped_sum`), their terms taken from the inputs where the term is made of inputs and
/// constants, else from the map of the term; None where a term is not finite (0 * Inf: the
/// reduction over every pair says what each group is).
fn run_grouped(g: &GroupedSum, map: &Operator, inputs: &[Input], options: &RunOptions) -> Result<Option<Output>> {
    use crate::grouped_sum::{add_by_group, direct_columns, direct_sources, gather_by_group, Column};
    let (Some(labels), Some(groups)) = (inputs[g.label].host_data(), inputs[g.group].host_data()) else {
        return Ok(None);
    };
    let clock = std::time::Instant::now();
    let mut gathered = Vec::new();
    for &m in &g.gathered {
        let input = &inputs[g.map_inputs[m]];
        let Some(values) = input.host_data().and_then(|v| gather_by_group(labels, groups, v, options.precision)) else {
            return Ok(None);
        };
        gathered.push((m, values, input.ncol));
    }
    let mut map_inputs: Vec<Input> = g.map_inputs.iter().map(|&p| inputs[p]).collect();
    for (m, values, ncol) in &gathered {
        map_inputs[*m] = Input::host(values, labels.len(), *ncol);
    }
    let data: Option<Vec<&[f64]>> = map_inputs.iter().map(Input::host_data).collect();
    if let (Some(sources), Some(data)) = (direct_sources(&map.formula), data) {
        let columns = direct_columns(&sources, &data, labels.len(), options.precision);
        let Some(values) = add_by_group(labels, groups, &columns, options.precision) else { return Ok(None) };
        let timings = vec![("grouped sum", clock.elapsed().as_secs_f64())];
        let (nrow, dim) = (groups.len(), columns.len());
        return Ok(Some(Output { values: Some(values), indices: None, nrow, k: 1, dim, backend: "CPU".into(), timings }));
    }
    let gathering = clock.elapsed().as_secs_f64();
    let mut out = map.run(&map_inputs, options)?;
    let clock = std::time::Instant::now();
    let terms = out.values.take().unwrap_or_default();
    let columns: Vec<Column> = terms.chunks_exact(labels.len()).map(Column::Values).collect();
    let Some(values) = add_by_group(labels, groups, &columns, options.precision) else { return Ok(None) };
    out.timings.push(("grouped sum", gathering + clock.elapsed().as_secs_f64()));
    out.values = Some(values);
    out.nrow = groups.len();
    Ok(Some(out))
}

impl Operation for Operator {
    fn formula(&self) -> &Formula {
        &self.formula
    }

    fn run(&self, inputs: &[Input], options: &RunOptions) -> Result<Output> {
        Operator::run(self, inputs, options)
    }

    fn call<'c>(&'c self, inputs: &'c [Input<'c>], options: &'c RunOptions) -> Result<Call<'c>> {
        let sizes = self.check_inputs(inputs)?;
        self.check_ranges(sizes, options)?;
        Ok(self.checked_call(inputs, options, sizes))
    }
}

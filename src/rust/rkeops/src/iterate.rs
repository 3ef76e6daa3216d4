//! `keops_iterate()`: a loop of reductions run by the engine in one call (`engine::iterate`).

use engine::iterate::{iterate, Source, Step};
use engine::{Input, Operator};
use extendr_api::prelude::*;

use crate::{block_sparse, guarded, numeric_input, operator, run_options, strings, sum_scheme, timings};
use crate::{results, Fallible, OrInput, RError};

/// Runs the steps `iterations` times from the initial `states` (numeric matrices). Each step is
/// `list(formula, args, inputs, sources, output, sum_scheme, ranges)`: `sources[p]` is 0 where
/// input p is data (`inputs[[p]]`), k where it is the current value of state k; `output` is the
/// state its result replaces (1-based). Returns `list(states, backend, timings)`, or `list(error)`.
#[extendr]
fn keops_iterate_run(steps: Robj, states: Robj, iterations: i32, options: Robj) -> Robj {
    guarded(|| {
        let states = states.as_list().or_input("states", "'states' must be a list")?;
        let state_robjs: Vec<Robj> = states.values().collect();
        let names: Vec<String> = states.names().map(|n| n.map(String::from).collect()).unwrap_or_default();
        let state_name = |k: usize| names.get(k).cloned().unwrap_or_else(|| format!("state {}", k + 1));
        let initial: Vec<Input> =
            state_robjs.iter().enumerate().map(|(k, x)| numeric_input(x, &state_name(k))).collect::<Fallible<_>>()?;
        let step_list = steps.as_list().or_input("steps", "'steps' must be a list")?;
        // Each step's operator and R objects (kept alive while the engine reads them): inputs,
        // sources, output, sum scheme, ranges.
        type StepParts = (std::sync::Arc<Operator>, Vec<Robj>, Vec<i32>, i32, String, Robj);
        let mut parts: Vec<StepParts> = Vec::new();
        for step in step_list.values() {
            let step = step.as_list().or_input("steps", "each step must be a list")?;
            let get =
                |name: &str| step.dollar(name).map_err(|_| RError::input("steps", format!("a step has no '{name}'")));
            let formula = get("formula")?;
            let formula = formula.as_str().or_input("steps", "a step's formula must be a string")?;
            let op = operator(formula, &strings(&get("args")?, "args")?)?;
            let inputs: Vec<Robj> =
                get("inputs")?.as_list().or_input("steps", "a step's inputs must be a list")?.values().collect();
            let sources = get("sources")?.as_integer_vector().or_input("steps", "a step's sources must be integers")?;
            let output = get("output")?.as_integer().or_input("steps", "a step's output must be an integer")?;
            let scheme = get("sum_scheme")?.as_str().unwrap_or("auto").to_string();
            parts.push((op, inputs, sources, output, scheme, get("ranges")?));
        }
        let mut built = Vec::with_capacity(parts.len());
        for (op, inputs, sources, output, scheme, ranges) in &parts {
            let variables = &op.formula.variables;
            if inputs.len() != variables.len() || sources.len() != variables.len() {
                let needs = format!("a step of formula {} needs {} inputs", op.formula.text, variables.len());
                return Err(RError::input("steps", needs));
            }
            let inputs = inputs
                .iter()
                .zip(sources)
                .zip(variables)
                .map(|((x, &source), v)| match source {
                    0 => numeric_input(x, &v.name).map(Source::Host),
                    k => Ok(Source::State((k - 1).max(0) as usize)),
                })
                .collect::<Fallible<Vec<_>>>()?;
            built.push(Step {
                operator: op.as_ref(),
                inputs,
                output: (*output - 1).max(0) as usize,
                sum_scheme: sum_scheme(scheme)?,
                ranges: block_sparse(ranges)?,
            });
        }
        let options = run_options(&options, "auto")?;
        // (an interrupt too: R makes it an interrupt condition)
        let done = iterate(&built, &initial, iterations.max(0) as usize, &options)?;
        let values: Vec<Robj> = done
            .states
            .into_iter()
            .zip(&initial)
            .map(|(v, x)| results::with_dim(Robj::from(v), &results::dims(x.nrow, x.ncol)?))
            .collect::<Fallible<_>>()?;
        let mut values = List::from_values(values);
        if !names.is_empty() {
            values.set_names(names.iter().map(String::as_str))?;
        }
        Ok(List::from_names_and_values(
            ["states", "backend", "timings"],
            [Robj::from(values), Robj::from(done.backend), timings(&done.timings)?],
        )?
        .into())
    })
}

extendr_module! {
    mod iterate;
    fn keops_iterate_run;
}

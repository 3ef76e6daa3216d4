//! Reverse-mode gradients of a program (`crate::program`): the gradient of `sum(seed * buffer)`
//! for one buffer after the last iteration, with respect to the initial values of chosen buffers,
//! through every step of every iteration. The forward pass runs the program and keeps, before each
//! step, the value its result replaces when a gradient reads it (memory: at most one copy of each
//! step's result per iteration); the backward pass then visits the steps in reverse, restores each
//! kept value and adds each
//! input's share of the gradient, given by the engine's gradients of the step's reduction
//! (`step`). Index results (ArgMin) pass no gradient.
//!
//! Both passes are written once (`backward`) for wherever the matrices are kept: on a GPU they keep
//! every value on the device and issue each step's launches again as they were recorded, as a
//! program does; elsewhere (the CPU; float16) each reduction is a plain run on host data.

mod backward;
pub mod lbfgs;
mod line_search;
pub mod optimise;
mod step;

use std::sync::Arc;

use crate::api::RunOptions;
use crate::backend::Timings;
use crate::error::{Error, Result};
use crate::buffers::Buffers;
use crate::choose::{choose, ForBuffers};
use crate::precision::Precision;
use crate::program::{self, Program};
use step::StepGradient;

/// The gradients with respect to the initial values of `wrt` (column-major, of the buffers'
/// shapes), the final values of the program's outputs (as `program::run` gives them: an
/// optimiser needs the loss and its gradient), and the iterations run.
#[derive(Debug, Clone)]
pub struct Gradients {
    pub values: Vec<Vec<f64>>,
    pub outputs: Vec<Vec<f64>>,
    pub shapes: Vec<(usize, usize)>,
    pub iterations: usize,
    pub backend: String,
    pub timings: Timings,
}

/// The gradient of `sum(seed * of)` (`seed` all ones when `None`) after the program's iterations,
/// with respect to the initial values of the buffers `wrt`.
pub fn gradient(
    p: &Program,
    of: usize,
    seed: Option<&[f64]>,
    wrt: &[usize],
    options: &RunOptions,
) -> Result<Gradients> {
    program::with_fused(p, &[of], options, |p, shapes| gradient_checked(p, shapes, of, seed, wrt, options))
}

fn gradient_checked(
    p: &Program,
    shapes: Vec<(usize, usize)>,
    of: usize,
    seed: Option<&[f64]>,
    wrt: &[usize],
    options: &RunOptions,
) -> Result<Gradients> {
    let len = |b: usize| shapes[b].0 * shapes[b].1;
    for &b in wrt.iter().chain([&of]) {
        if b >= p.buffers.len() {
            return Err(Error::Invalid(format!("the gradient names buffer {} of {}", b + 1, p.buffers.len())));
        }
    }
    p.check_valued_after_loop(of)?;
    if let Some(b) = wrt.iter().find(|&&b| p.buffers[b].initial.is_none()) {
        return Err(Error::Invalid(format!("buffer '{}' has no initial value to differentiate", p.buffers[*b].name)));
    }
    let seed: Vec<f64> = match seed {
        Some(s) if s.len() != len(of) => {
            return Err(Error::Invalid(format!(
                "the seed has {} values, buffer '{}' {}",
                s.len(),
                p.buffers[of].name,
                len(of)
            )))
        }
        Some(s) => s.to_vec(),
        None => vec![1.0; len(of)],
    };
    // An input's share of the gradient is needed where it can reach `wrt`: for a buffer of `wrt`,
    // or one that a step writes (its gradient goes on to that step's inputs).
    let needed: Vec<bool> =
        (0..p.buffers.len()).map(|b| wrt.contains(&b) || p.steps.iter().any(|s| s.output == b)).collect();
    let steps = p
        .steps
        .iter()
        .map(|s| StepGradient::of(s.operator, &s.inputs.iter().map(|&b| needed[b]).collect::<Vec<_>>()))
        .collect::<Result<Vec<_>>>()?;
    let backward = Backward {
        program: p,
        shapes,
        of,
        seed,
        wrt: wrt.to_vec(),
        steps,
        step_options: p.step_options(options),
        options,
    };
    // (float16 on host data, as a program: see `program::run`)
    let on_device = options.precision != Precision::F16;
    choose(options)?.with_buffers(options.precision, on_device, Differentiated(&backward))
}

/// A checked gradient, run wherever its matrices are kept.
struct Differentiated<'a>(&'a Backward<'a>);

impl<'a> ForBuffers<'a> for Differentiated<'a> {
    type Output = Result<Gradients>;

    fn run<B: Buffers<'a>>(self, memory: B) -> Result<Gradients> {
        backward::gradient(self.0, memory)
    }
}

/// A checked program, what its gradient is of and with respect to, and each step's gradients.
struct Backward<'a> {
    program: &'a Program<'a>,
    shapes: Vec<(usize, usize)>,
    of: usize,
    seed: Vec<f64>,
    wrt: Vec<usize>,
    steps: Vec<Arc<StepGradient>>,
    step_options: Vec<RunOptions>,
    options: &'a RunOptions,
}

impl Backward<'_> {
    /// How many values buffer `b` holds.
    fn len(&self, b: usize) -> usize {
        self.shapes[b].0 * self.shapes[b].1
    }

    /// Whether the backward pass of step `s` has anything to do: whether the adjoint of its output
    /// may be non-zero (`live`, which it updates as the pass does: the output's adjoint becomes
    /// zero, and those of the inputs with a gradient may not be).
    fn visits(&self, s: usize, live: &mut [bool]) -> bool {
        let step = &self.program.steps[s];
        if !live[step.output] {
            return false;
        }
        live[step.output] = false;
        for part in self.steps[s].groups.iter().flat_map(|g| &g.parts) {
            live[step.inputs[part.input]] = true;
        }
        true
    }

    /// Whether the backward pass restores the value that step `s` replaced: whether a gradient
    /// reads the buffer it writes.
    fn restores(&self, s: usize) -> bool {
        let out = self.program.steps[s].output;
        self.program
            .steps
            .iter()
            .zip(&self.steps)
            .any(|(step, g)| step.inputs.iter().zip(&g.reads).any(|(&b, &read)| read && b == out))
    }

    /// The shapes of the program's outputs.
    fn output_shapes(&self) -> Vec<(usize, usize)> {
        self.program.outputs.iter().map(|&x| self.shapes[x]).collect()
    }

    /// The adjoints' initial liveness: only that of `of`.
    fn live(&self) -> Vec<bool> {
        (0..self.program.buffers.len()).map(|b| b == self.of).collect()
    }
}

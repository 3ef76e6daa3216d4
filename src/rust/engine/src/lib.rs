//! rkeops engine: reductions of symbolic matrices `M[i,j] = F(x_i, y_j)` without storing them.
//!
//! Pure Rust, no R types: the formula language (`formula`), the reductions (`reduction`), the CPU
//! evaluator (`cpu`) and the public entry point (`operator`).

pub mod api;
pub mod backend;
pub mod buffers;
pub mod cache;
pub(crate) mod choose;
pub mod clustering;
pub mod cpu;
pub mod cuda;
pub mod differentiate;
pub mod error;
pub mod knn;
pub mod knn_search;
pub mod formula;
pub mod grouped_sum;
pub mod iterate;
pub mod math;
pub mod memory;
pub(crate) mod memo;
pub mod operator;
pub mod parallel;
pub mod pool;
pub mod plan;
pub mod precision;
pub mod program;
pub mod program_gradient;
pub mod ranges;
pub mod real;
pub mod reduction;
pub mod seeding;
pub mod schedule;
pub mod tuning;
pub mod two_scale;

pub use error::{Error, Result};

/// The engine's version (its crate's), for bug reports.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");

pub use api::{Backend, Input, Output, RunOptions, Values};
pub use precision::Precision;
pub use operator::Operator;
pub use ranges::{BlockRanges, Ranges};
pub use reduction::{ReductionKind, SumScheme};
pub use tuning::Tuning;

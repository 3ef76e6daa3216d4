//! The engine's integration tests, in one binary: each file of this folder is a module, so that
//! `cargo test` links the engine once, not once per file. Run one file's tests with a filter:
//! `cargo test --release -p rkeops-engine --test engine_tests fuzz::` (tests/README of the
//! GPU host: the same binary with `gpu::`, `tensor_cores::`, `gpu_shared_cache::`).

mod common;
#[path = "common/formulas.rs"]
mod common_formulas;
#[path = "common/ranges.rs"]
mod common_ranges;

mod autodiff;
mod cache_processes;
mod clustering;
mod fuzz;
mod gpu;
mod gpu_shared_cache;
mod grouped_sums;
mod interrupts;
mod knn_search;
mod nearest_centres;
mod program;
mod progress;
mod ranges;
mod reductions;
mod sifted_selections;
mod spread;
mod tensor_cores;

//! CUDA source for one reduction of one formula (1D and 2D schemes share one kernel).
//!
//! Each thread owns one output row: its variables of the output index and its reduction state live
//! in registers; tiles of the reduced index's variables go through shared memory, loaded once per
//! block and read by every thread. Block `(bx, by)` reduces rows `bx*TILE ..` over the chunk
//! `by*chunk ..` of the reduced range (gridDim.y = 1 is the 1D scheme). With one chunk it writes
//! the final results (column-major, in the working type, 1-based int indices); otherwise it writes
//! its states, in the layout of the CPU accumulator, and a second kernel (`rkeops_merge`) merges
//! the chunks in order and finalises them on the device.
//!
//! The numbers of the formula are not in the source: they are read from an array argument, so that
//! formulas that differ only by their numbers (a loop over a bandwidth) share one compiled kernel.
//!
//! The generator, one concept per file: `variant` (which kernel, and the options its source
//! depends on), `selection` (where a K-selection keeps its lists), `layout` (what the kernel
//! computes and where: blocks, tile, shared memory), `kernel` (the kernel put together), `gen` (the
//! writer of the source), `prelude` (helpers and signature), `body` (the kernel's parts in
//! order), `operations` (the CUDA of each operation), `reducer` (the reduction's registers, steps
//! and store), `insertion` (insertions into sorted lists), `exponentials` (log-sum-exps a group at
//! a time), `sift` and `candidates` (sifted selections).

mod body;
mod candidates;
mod exponentials;
mod gen;
mod insertion;
mod kernel;
mod layout;
mod operations;
mod prelude;
mod reducer;
mod selection;
mod sift;
mod variant;

#[cfg(test)]
mod tests;

pub use kernel::{generate, generate_one_row, generate_variant, Kernel, KERNEL_NAME};
pub use selection::Selection;
pub use variant::{KernelOptions, Variant};

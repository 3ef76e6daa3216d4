//! Every way the engine splits a reduction, in one place; the backends only run what is planned
//! here. A piece of work is "these output rows against these ranges of the reduced index": on the
//! CPU's threads and in the ranged GPU kernels (`work`), over several GPUs (`devices`), and on one
//! GPU in memory blocks, Ctrl-C steps and 2D-scheme chunks (`steps`). Partial states always merge
//! with the reduction's own merge (`reduction::Accumulator`). Callers that split before sending any
//! data ask here too: the blocks of output rows of separate host processes (`host_blocks`) and the
//! layout of a batch (`batches`).

pub mod batches;
pub mod devices;
pub mod host_blocks;
pub mod steps;
pub mod work;

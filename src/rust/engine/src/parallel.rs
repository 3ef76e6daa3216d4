//! Work shared among the cores of the calling process, for the element-wise conversions on the
//! path of every call (R's doubles to the working type, results back to doubles).

use std::sync::OnceLock;

/// Below this many elements a conversion stays on the calling thread (starting threads costs more).
const PARALLEL_FROM: usize = 1 << 16;

/// The cores available to this process, asked once: the query reads the cgroup files, which
/// costs tens of microseconds, too much for every call.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// `dst[k] = f(src[k])`, on every core when there are many elements.
pub fn map<X: Copy + Sync, Y: Send>(src: &[X], dst: &mut [Y], f: impl Fn(X) -> Y + Sync) {
    assert_eq!(src.len(), dst.len(), "parallel::map needs slices of one length");
    // At least PARALLEL_FROM elements a thread: starting one can cost ~50 us (seen on a GPU host).
    let threads = cores().min(16).min(src.len() / PARALLEL_FROM);
    if threads <= 1 {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = f(s);
        }
        return;
    }
    let per_thread = src.len().div_ceil(threads);
    let f = &f;
    std::thread::scope(|scope| {
        for (d, s) in dst.chunks_mut(per_thread).zip(src.chunks(per_thread)) {
            scope.spawn(move || {
                for (d, &s) in d.iter_mut().zip(s) {
                    *d = f(s);
                }
            });
        }
    });
}

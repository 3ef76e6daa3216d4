//! Work shared among the cores of the calling process (the threads of `crate::pool`), for the
//! element-wise conversions on the path of every call (R's doubles to the working type, results
//! back to doubles) and the host work of a K-NN search.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::{Acquire, Relaxed, Release}};
use std::sync::{Mutex, MutexGuard};

/// Below this many elements a conversion stays on the calling thread (starting threads costs more).
const PARALLEL_FROM: usize = 1 << 16;

// (the pool's count of cores: the number of parts worth making)
pub use crate::pool::cores;

/// The number of threads for `len` elements: one per PARALLEL_FROM elements at most (waking one
/// costs microseconds), 16 at most.
fn threads_for(len: usize) -> usize {
    cores().min(16).min(len / PARALLEL_FROM)
}

/// `f(b, block)` for the blocks of `block_len` elements of `dst` (the last may be shorter), b =
/// 0, 1, ..., on every core when there are many elements.
pub fn for_each_block<Y: Send>(dst: &mut [Y], block_len: usize, f: impl Fn(usize, &mut [Y]) + Sync) {
    for_each_block_of_work(dst, block_len, dst.len(), f)
}

/// `for_each_block` where the whole costs about as much as `work` elements of a conversion (threads
/// are started for large works only).
pub fn for_each_block_of_work<Y: Send>(dst: &mut [Y], block_len: usize, work: usize, f: impl Fn(usize, &mut [Y]) + Sync) {
    let block_len = block_len.max(1);
    let blocks = dst.len().div_ceil(block_len);
    let threads = threads_for(work).min(blocks);
    if threads <= 1 {
        for (b, block) in dst.chunks_mut(block_len).enumerate() {
            f(b, block);
        }
        return;
    }
    let per_thread = blocks.div_ceil(threads);
    on_pool(dst.chunks_mut(per_thread * block_len).collect(), |t, part| {
        for (b, block) in part.chunks_mut(block_len).enumerate() {
            f(t * per_thread + b, block);
        }
    });
}

/// `f(b, columns)` for the blocks of `block_len` rows (b = 0, 1, ...) of the column-major matrix
/// `dst` of `nrow` rows, `columns` holding the block's part of each column: one pass over the rows
/// of a matrix that is written by rows, on every core when it is large.
pub fn for_each_row_block<Y: Send>(dst: &mut [Y], nrow: usize, block_len: usize, f: impl Fn(usize, &mut [&mut [Y]]) + Sync) {
    let (block_len, work) = (block_len.max(1), dst.len());
    let mut blocks: Vec<Vec<&mut [Y]>> = (0..nrow.div_ceil(block_len)).map(|_| Vec::new()).collect();
    for column in dst.chunks_mut(nrow.max(1)) {
        column.chunks_mut(block_len).zip(&mut blocks).for_each(|(part, block)| block.push(part));
    }
    for_each_block_of_work(&mut blocks, 1, work, |b, block| f(b, &mut block[0]));
}

/// A slice that several threads write at once, each at positions no other thread touches: the
/// scatter of a parallel counting sort.
pub struct Scatter<'a, T> {
    start: *mut T,
    len: usize,
    _slice: std::marker::PhantomData<&'a mut [T]>,
}

// SAFETY: the threads sharing it write disjoint positions (`write`'s contract), values that may
// move between threads.
unsafe impl<T: Send> Sync for Scatter<'_, T> {}

impl<'a, T: Copy> Scatter<'a, T> {
    pub fn new(slice: &'a mut [T]) -> Self {
        Scatter { start: slice.as_mut_ptr(), len: slice.len(), _slice: std::marker::PhantomData }
    }

    /// Writes `value` at `at`.
    ///
    /// # Safety
    /// No other thread reads or writes position `at` while the scatter lives.
    pub unsafe fn write(&self, at: usize, value: T) {
        assert!(at < self.len, "Scatter::write at {at} of {}", self.len);
        // SAFETY: in bounds (just checked), and this thread alone touches `at` (the contract).
        unsafe { self.start.add(at).write(value) }
    }
}

/// `dst[k] = f(src[k])`, on every core when there are many elements.
pub fn map<X: Copy + Sync, Y: Send>(src: &[X], dst: &mut [Y], f: impl Fn(X) -> Y + Sync) {
    assert_eq!(src.len(), dst.len(), "parallel::map needs slices of one length");
    let threads = threads_for(src.len());
    if threads <= 1 {
        for (d, &s) in dst.iter_mut().zip(src) {
            *d = f(s);
        }
        return;
    }
    let per_thread = src.len().div_ceil(threads);
    on_pool(dst.chunks_mut(per_thread).zip(src.chunks(per_thread)).collect(), |_, (d, s)| {
        for (d, &s) in d.iter_mut().zip(s) {
            *d = f(s);
        }
    });
}

/// The sum of `f(v)` over `values`, on every core when they are many, in an order that does not
/// depend on the cores: sums of blocks of 4096 values, each kept in 8 running sums (one running sum
/// waits on each addition: 4 x slower), then added in the blocks' order.
pub fn sum_by(values: &[f64], f: impl Fn(f64) -> f64 + Sync) -> f64 {
    const BLOCK: usize = 4096;
    const LANES: usize = 8;
    let mut sums = vec![0.0; values.len().div_ceil(BLOCK)];
    for_each_block_of_work(&mut sums, 1, values.len(), |b, sum| {
        let block = &values[b * BLOCK..((b + 1) * BLOCK).min(values.len())];
        let mut lanes = [0.0; LANES];
        let mut chunks = block.chunks_exact(LANES);
        for chunk in &mut chunks {
            lanes.iter_mut().zip(chunk).for_each(|(lane, &v)| *lane += f(v));
        }
        sum[0] = lanes.iter().sum::<f64>() + chunks.remainder().iter().map(|&v| f(v)).sum::<f64>();
    });
    sums.iter().sum()
}

/// `src` folded by `fold` from `init()`, in parts on every core when it is long, the parts'
/// results then combined by `combine` in order.
pub fn fold<X: Sync, A: Send>(
    src: &[X],
    init: impl Fn() -> A + Sync,
    fold: impl Fn(A, &X) -> A + Sync,
    combine: impl Fn(A, A) -> A,
) -> A {
    let threads = threads_for(src.len());
    if threads <= 1 {
        return src.iter().fold(init(), fold);
    }
    let per_thread = src.len().div_ceil(threads);
    let parts: Vec<Mutex<Option<A>>> = (0..src.len().div_ceil(per_thread)).map(|_| Mutex::new(None)).collect();
    on_pool(src.chunks(per_thread).collect(), |t, part| {
        *lock(&parts[t]) = Some(part.iter().fold(init(), &fold));
    });
    parts.into_iter().filter_map(|p| p.into_inner().unwrap_or_else(|e| e.into_inner())).reduce(combine).unwrap_or_else(init)
}

/// `f(t, parts[t])` for each part, on the pool's threads (`crate::pool`).
fn on_pool<P: Send>(parts: Vec<P>, f: impl Fn(usize, P) + Sync) {
    let parts: Vec<Mutex<Option<P>>> = parts.into_iter().map(|p| Mutex::new(Some(p))).collect();
    crate::pool::run_parts(parts.len(), &|t| {
        let part = lock(&parts[t]).take().expect("each part is taken once");
        f(t, part)
    });
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `work(t)` for t in `0..threads`, each on a new thread, while this one calls `poll` (R's check
/// for Ctrl-C, and the progress report: both may only run on R's thread) every few milliseconds and
/// sets `stop` when it says it was interrupted; the workers look at `stop` and leave early.
pub fn run_polling(threads: usize, work: impl Fn(usize) + Sync, mut poll: impl FnMut() -> bool, stop: &AtomicBool) {
    const POLL: std::time::Duration = std::time::Duration::from_millis(10);
    let caller = std::thread::current();
    // Counted before the wake-up (also when `work` panics): a thread that has unparked the caller
    // is not yet "finished" for its JoinHandle, and waiting on that would sleep a whole POLL.
    struct Finished<'a>(&'a AtomicUsize, &'a std::thread::Thread);
    impl Drop for Finished<'_> {
        fn drop(&mut self) {
            self.0.fetch_add(1, Release);
            self.1.unpark();
        }
    }
    let done = AtomicUsize::new(0);
    let (work, done_ref, caller_ref) = (&work, &done, &caller);
    std::thread::scope(|s| {
        for t in 0..threads {
            s.spawn(move || {
                let _finished = Finished(done_ref, caller_ref);
                work(t);
            });
        }
        while done.load(Acquire) < threads {
            std::thread::park_timeout(POLL);
            if !stop.load(Relaxed) && poll() {
                stop.store(true, Relaxed);
            }
        }
    });
}

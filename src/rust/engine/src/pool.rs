//! The threads that run the parallel regions of a call (`crate::parallel`), started once per
//! process. Starting 16 threads for a region cost 0.6-1.9 ms on a GPU host, and a K-NN search of
//! 10^6 points has about twenty regions: most of its host planning (bench/RESULTS.md).
//!
//! A call of `run_parts` is a task whose parts any free thread takes, the caller's included, and
//! returns once every part has finished. Parts never wait on each other, and a part that starts
//! parallel work of its own on a pool thread runs it there alone, so a task always completes. A
//! process forked from this one (R's `parallel::mclapply`, `future`'s multicore) inherits a copy of
//! the pool without its threads: it starts a pool of its own (a pool that outlived its threads
//! hangs the child: rayon-rs/rayon#708).

use std::any::Any;
use std::cell::Cell;
use std::collections::VecDeque;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};

/// The cores available to this process, asked once: the query reads the cgroup files, which
/// costs tens of microseconds, too much for every call.
pub fn cores() -> usize {
    static CORES: OnceLock<usize> = OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// One call of `run_parts`.
struct Task {
    /// The caller's closure, its lifetime erased. It lives until `run_parts` returns, which waits
    /// for every part to have finished, and no part starts after the last has been taken.
    part: *const (dyn Fn(usize) + Sync),
    parts: usize,
    /// The next part to take.
    next: AtomicUsize,
    finished: Mutex<usize>,
    all_finished: Condvar,
    /// The first panic of a part, resumed on the caller's thread.
    panic: Mutex<Option<Box<dyn Any + Send>>>,
}

// SAFETY: `part` points to a `Sync` closure, called from several threads only while it lives (see
// the field); the rest is made of thread-safe types.
unsafe impl Send for Task {}
unsafe impl Sync for Task {}

impl Task {
    /// Runs parts until none is left to take.
    fn work(&self) {
        loop {
            let t = self.next.fetch_add(1, Relaxed);
            if t >= self.parts {
                return;
            }
            // SAFETY: part `t` has not finished, so `run_parts` has not returned and the closure lives.
            let part = unsafe { &*self.part };
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| part(t))) {
                lock(&self.panic).get_or_insert(panic);
            }
            let mut finished = lock(&self.finished);
            *finished += 1;
            if *finished == self.parts {
                self.all_finished.notify_all();
            }
        }
    }
}

/// The pool's threads and the tasks they wait for.
struct Pool {
    queue: Mutex<VecDeque<Arc<Task>>>,
    ready: Condvar,
    threads: AtomicUsize,
    /// The process that started the threads.
    pid: u32,
}

thread_local! {
    /// Whether this thread is one of the pool's.
    static IN_POOL: Cell<bool> = const { Cell::new(false) };
    /// A value with a destructor, registered by each pool thread: glibc keeps a shared library
    /// mapped while a thread holds one of its pending thread-local destructors, so unloading the
    /// package's library (`pkgload`'s reloads) cannot unmap the code its threads sleep in.
    static KEEPS_LIBRARY: KeepsLibrary = const { KeepsLibrary };
}

struct KeepsLibrary;

impl Drop for KeepsLibrary {
    fn drop(&mut self) {}
}

/// This process's pool, its threads started at its first call: one per core besides the caller's
/// (a region takes 16 at most, but the threads of several GPUs convert their inputs at once). A pool
/// is never dropped: its threads live as long as the process.
fn pool() -> &'static Pool {
    static POOL: Mutex<Option<&'static Pool>> = Mutex::new(None);
    let mut current = lock(&POOL);
    if let Some(pool) = current.filter(|p| p.pid == std::process::id()) {
        return pool;
    }
    let pool: &'static Pool = Box::leak(Box::new(Pool {
        queue: Mutex::new(VecDeque::new()),
        ready: Condvar::new(),
        threads: AtomicUsize::new(0),
        pid: std::process::id(),
    }));
    let wanted = cores().min(256) - 1;
    let started =
        (0..wanted).take_while(|_| std::thread::Builder::new().name("rkeops-worker".into()).spawn(move || serve(pool)).is_ok());
    pool.threads.store(started.count(), Relaxed);
    *current = Some(pool);
    pool
}

/// A pool thread: takes the parts of the tasks queued, one task after another.
fn serve(pool: &'static Pool) {
    IN_POOL.with(|p| p.set(true));
    KEEPS_LIBRARY.with(|_| ());
    loop {
        let task = {
            let mut queue = lock(&pool.queue);
            loop {
                match queue.pop_front() {
                    Some(task) => break task,
                    None => queue = pool.ready.wait(queue).unwrap_or_else(|e| e.into_inner()),
                }
            }
        };
        task.work();
    }
}

/// `part(t)` for t in `0..parts`, on the pool's threads and this one; returns when all have run,
/// resuming the first panic of a part.
pub fn run_parts(parts: usize, part: &(dyn Fn(usize) + Sync)) {
    let pool = match parts > 1 && !IN_POOL.with(Cell::get) {
        true => Some(pool()).filter(|p| p.threads.load(Relaxed) > 0),
        false => None,
    };
    let Some(pool) = pool else {
        (0..parts).for_each(part);
        return;
    };
    // SAFETY: only the lifetime changes; `Task::part` says why the closure outlives its uses.
    let part: *const (dyn Fn(usize) + Sync + 'static) = unsafe { std::mem::transmute(part) };
    let task = Arc::new(Task {
        part,
        parts,
        next: AtomicUsize::new(0),
        finished: Mutex::new(0),
        all_finished: Condvar::new(),
        panic: Mutex::new(None),
    });
    let helpers = (parts - 1).min(pool.threads.load(Relaxed));
    lock(&pool.queue).extend((0..helpers).map(|_| task.clone()));
    (0..helpers).for_each(|_| pool.ready.notify_one());
    task.work();
    let mut finished = lock(&task.finished);
    while *finished < parts {
        finished = task.all_finished.wait(finished).unwrap_or_else(|e| e.into_inner());
    }
    drop(finished);
    let panic = lock(&task.panic).take();
    if let Some(panic) = panic {
        resume_unwind(panic);
    }
}

/// The lock of `m` (parts' panics are caught before they could poison it).
fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::run_parts;
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

    #[test]
    fn every_part_runs_once_from_several_callers_nested_or_panicking() {
        // Callers on several threads at once, each part starting parallel work of its own.
        std::thread::scope(|s| {
            for caller in 0..4 {
                s.spawn(move || {
                    for parts in [1, 2, 7, 64] {
                        let counts: Vec<AtomicUsize> = (0..parts).map(|_| AtomicUsize::new(0)).collect();
                        let inner = AtomicUsize::new(0);
                        run_parts(parts, &|t| {
                            counts[t].fetch_add(1, Relaxed);
                            run_parts(3, &|_| {
                                inner.fetch_add(1, Relaxed);
                            });
                        });
                        assert!(counts.iter().all(|c| c.load(Relaxed) == 1), "caller {caller}, {parts} parts");
                        assert_eq!(inner.load(Relaxed), 3 * parts);
                    }
                });
            }
        });
        // A panicking part: resumed on the caller's thread once every part has run.
        let ran = AtomicUsize::new(0);
        let panicked = std::panic::catch_unwind(|| {
            run_parts(8, &|t| {
                ran.fetch_add(1, Relaxed);
                assert!(t != 5, "part 5 fails");
            })
        });
        assert!(panicked.is_err());
        assert_eq!(ran.load(Relaxed), 8);
        // The pool still works after it.
        let sum = AtomicUsize::new(0);
        run_parts(16, &|t| {
            sum.fetch_add(t, Relaxed);
        });
        assert_eq!(sum.load(Relaxed), 120);
    }
}

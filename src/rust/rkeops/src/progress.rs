//! The progress bar of a long call: the engine's report (`RunOptions::progress`, on R's thread)
//! becomes a cli progress bar (src/entrypoint.c), created only once the call has run `delay`
//! seconds (creating one costs about 0.2 ms; cli shows it only after `cli.progress_show_after`)
//! and ended by `finish()` when the call returns, whatever its outcome.

use std::cell::Cell;
use std::time::Instant;

extern "C" {
    /// In src/entrypoint.c: sets the bar (creating it at the first call, or when `total` changes).
    fn rkeops_progress_set(done: f64, total: f64);
    /// Ends the bar, if there is one.
    fn rkeops_progress_done();
}

thread_local! {
    /// The start of the call and the delay before a bar, while a call that reports runs.
    static CALL: Cell<Option<(Instant, f64)>> = const { Cell::new(None) };
    /// Whether a bar was created during this call.
    static SHOWN: Cell<bool> = const { Cell::new(false) };
}

/// The report to give the engine: `delay` (R's `progress` option of `engine_options()`) negative or
/// NA means no bar.
pub(crate) fn start(delay: f64) -> Option<fn(u64, u64)> {
    if delay.is_nan() || delay < 0.0 {
        return None;
    }
    CALL.with(|c| c.set(Some((Instant::now(), delay))));
    Some(report)
}

fn report(done: u64, total: u64) {
    let Some((start, delay)) = CALL.with(Cell::get) else { return };
    if SHOWN.with(Cell::get) || start.elapsed().as_secs_f64() >= delay {
        SHOWN.with(|s| s.set(true));
        // SAFETY: called by the engine on R's main thread within a .Call (RunOptions::progress); R's
        // errors are caught on the C side.
        unsafe { rkeops_progress_set(done as f64, total as f64) }
    }
}

/// Ends the call's bar, if it made one (called when every `.Call` returns, by `guarded()`).
pub(crate) fn finish() {
    CALL.with(|c| c.set(None));
    if SHOWN.with(|s| s.replace(false)) {
        // SAFETY: on R's main thread, at the end of a .Call.
        unsafe { rkeops_progress_done() }
    }
}

// Registration entry point of the package shared object, and the services the Rust code asks of
// R's C API directly: interrupt checks and progress bars (cli's C API).
#include <Rinternals.h>
#include <R_ext/Utils.h>
#include <cli/progress.h>

// src/rust/rkeops/src/lib.rs registers the `.Call` routines (`wrap__<fn>`) of its
// `extendr_module!` block with R, less extendr's metadata routines (see there). R looks for
// `R_init_<pkgname>` when loading the DLL.
void rkeops_register_routines(void *dll);

void R_init_rkeops(void *dll) {
    rkeops_register_routines(dll);
}

static void check_interrupt(void *unused) {
    (void) unused;
    R_CheckUserInterrupt();
}

// Set when the progress bar's R code failed (1), then when an interrupt check has said so (2).
static int bar_failed;

// Whether the user pressed Ctrl-C. R_CheckUserInterrupt jumps away when so; R_ToplevelExec catches
// the jump here (and returns FALSE), so that it never crosses the Rust code that asks.
int rkeops_interrupt_pending(void) {
    // (the progress bar's R code may have caught Ctrl-C first: see below)
    if (bar_failed == 1) {
        bar_failed = 2;
        return 1;
    }
    return R_ToplevelExec(check_interrupt, NULL) == FALSE;
}

// The progress bar of a long call (src/rust/rkeops/src/progress.rs): a cli progress bar through
// cli's C API, made at the first report, kept from the garbage collector while the call runs, and
// ended by rkeops_progress_done() when the .Call returns (success, error or interrupt). cli's R
// code runs within R_ToplevelExec, so that no jump crosses the Rust code; when it fails (an
// interrupt that its R code noticed first, or an error of cli), the bar is dropped for the rest of
// the call and the next interrupt check says to stop, so that Ctrl-C is never lost.

static SEXP bar = NULL;
static double bar_total = 0;
struct progress_args { double done, total; };

static void end_bar(void) {
    if (bar == NULL) return;
    SEXP b = PROTECT(bar);
    R_ReleaseObject(b);
    bar = NULL;
    cli_progress_done(b);
    UNPROTECT(1);
}

static void progress_set(void *data) {
    struct progress_args *a = data;
    if (bar != NULL && bar_total != a->total) end_bar();
    if (bar == NULL) {
        SEXP b = PROTECT(cli_progress_bar(a->total, NULL));
        cli_progress_set_name(b, "rkeops");
        R_PreserveObject(b);
        bar = b;
        bar_total = a->total;
        UNPROTECT(1);
    }
    cli_progress_set(bar, a->done);
}

void rkeops_progress_set(double done, double total) {
    if (bar_failed) return;
    struct progress_args a = {done, total};
    if (R_ToplevelExec(progress_set, &a) == FALSE) {
        bar_failed = 1;
        if (bar != NULL) { R_ReleaseObject(bar); bar = NULL; }
    }
}

static void progress_done(void *unused) {
    (void) unused;
    end_bar();
}

void rkeops_progress_done(void) {
    if (bar != NULL && R_ToplevelExec(progress_done, NULL) == FALSE && bar != NULL) {
        R_ReleaseObject(bar);
        bar = NULL;
    }
    bar_failed = 0;
}

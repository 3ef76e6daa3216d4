// Registration entry point of the package shared object, and the one service the Rust code asks
// of R's C API directly.
#include <Rinternals.h>
#include <R_ext/Utils.h>

// extendr-api generates `R_init_rkeops_extendr()` from the `extendr_module!`
// block of src/rust/rkeops/src/lib.rs; it registers the `.Call` routines
// (`wrap__<fn>`) with R. R looks for `R_init_<pkgname>` when loading the DLL.
void R_init_rkeops_extendr(void *dll);

void R_init_rkeops(void *dll) {
    R_init_rkeops_extendr(dll);
}

static void check_interrupt(void *unused) {
    (void) unused;
    R_CheckUserInterrupt();
}

// Whether the user pressed Ctrl-C. R_CheckUserInterrupt jumps away when so; R_ToplevelExec catches
// the jump here (and returns FALSE), so that it never crosses the Rust code that asks.
int rkeops_interrupt_pending(void) {
    return R_ToplevelExec(check_interrupt, NULL) == FALSE;
}

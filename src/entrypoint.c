// Registration entry point of the package shared object.
//
// extendr-api generates `R_init_rkeops_extendr()` from the `extendr_module!`
// block of src/rust/rkeops/src/lib.rs; it registers the `.Call` routines
// (`wrap__<fn>`) with R. R looks for `R_init_<pkgname>` when loading the DLL.
void R_init_rkeops_extendr(void *dll);

void R_init_rkeops(void *dll) {
    R_init_rkeops_extendr(dll);
}

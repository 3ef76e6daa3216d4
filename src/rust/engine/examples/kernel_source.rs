//! Prints the CUDA source generated for a formula (float32, dense, local selections; the
//! tensor-core variant where it applies, unless `RKEOPS_GPU_TENSOR=off`):
//! `cargo run --release --example kernel_source -- "<formula>" "<arg>" ...`; with NVRTC on the
//! library path, also the time of its compilation for sm_90.
use engine::cuda::codegen::{generate_variant, KernelOptions, Selection, Variant};
use engine::cuda::dtype::Dtype;
use engine::formula::Formula;
use engine::{SumScheme, Tuning};

fn main() {
    let mut argv = std::env::args().skip(1);
    let formula = argv.next().expect("a formula");
    let args: Vec<String> = argv.collect();
    let formula = Formula::parse(&formula, &args).unwrap_or_else(|e| panic!("{e}"));
    let tuning = Tuning::from_env();
    let variant = Variant::choose(&formula, Dtype::F32, None, (9, 0), &tuning);
    let options = KernelOptions::new(Dtype::F32, SumScheme::Auto, variant, Selection::Local);
    let kernel = generate_variant(&formula, &KernelOptions { unroll: tuning.unroll, ..options });
    println!("{}", kernel.source);
    let clock = std::time::Instant::now();
    match engine::cuda::device::compile_cubin(&kernel.source, "sm_90") {
        Ok(cubin) => eprintln!("NVRTC: {} bytes in {:.3} s", cubin.len(), clock.elapsed().as_secs_f64()),
        Err(e) => eprintln!("not compiled: {e}"),
    }
}

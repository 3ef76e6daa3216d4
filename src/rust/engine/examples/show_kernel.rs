//! Prints the CUDA source generated for a formula: `cargo run --example show_kernel -- FORMULA ARGS...`
use engine::cuda::codegen::generate;
use engine::cuda::dtype::Dtype;
use engine::formula::Formula;
use engine::SumScheme;

fn main() {
    let mut argv = std::env::args().skip(1);
    let formula = argv.next().expect("usage: show_kernel FORMULA ARG...");
    let args: Vec<String> = argv.collect();
    let f = Formula::parse(&formula, &args).unwrap_or_else(|e| panic!("{e}"));
    print!("{}", generate(&f, Dtype::F32, SumScheme::Auto).source);
}

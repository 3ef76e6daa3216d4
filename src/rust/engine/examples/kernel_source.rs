//! Prints the CUDA source generated for a formula (float32, or float64 with `RKEOPS_KERNEL_F64=1`; dense, selections as for 10^6 reduced rows; the
//! tensor-core variant where it applies, unless `RKEOPS_GPU_TENSOR=off`):
//! `cargo run --release --example kernel_source -- "<formula>" "<arg>" ...`; with NVRTC on the
//! library path, also the time of its compilation for sm_90 (`RKEOPS_CUBIN=file` keeps the binary).
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
    let dtype = if std::env::var("RKEOPS_KERNEL_F64").is_ok_and(|v| v == "1") { Dtype::F64 } else { Dtype::F32 };
    let variant = Variant::choose(&formula, dtype, None, (9, 0), &tuning);
    // Selections as for a reduction over 10^6 rows (RKEOPS_GPU_SELECTION forces one).
    let selection = Selection::for_rows(&formula, 1e6, tuning.gpu_selection);
    let options = KernelOptions::new(dtype, SumScheme::Auto, variant, selection);
    let kernel = generate_variant(&formula, &KernelOptions { unroll: tuning.unroll, group_work: tuning.group_work, ..options });
    // (RKEOPS_KERNEL_MERGE=1: the merge's program instead)
    let merge = std::env::var("RKEOPS_KERNEL_MERGE").is_ok_and(|v| v == "1");
    println!("{}", if merge { &kernel.merge_source } else { &kernel.source });
    // The reduction's program and the merge's, on two threads as the engine compiles them.
    let clock = std::time::Instant::now();
    let compile = |source: &str| engine::cuda::builds::compile_cubin(source, "sm_90");
    let (cubin, merge) = std::thread::scope(|s| {
        let merge = s.spawn(|| compile(&kernel.merge_source));
        (compile(&kernel.source), merge.join().expect("the merge's compilation"))
    });
    match (cubin, merge) {
        (Ok(cubin), Ok(_)) => {
            eprintln!("NVRTC: {} bytes in {:.3} s", cubin.len(), clock.elapsed().as_secs_f64());
            // RKEOPS_CUBIN=file keeps the binary, for `nvdisasm` or `cuobjdump -res-usage`.
            if let Ok(path) = std::env::var("RKEOPS_CUBIN") {
                std::fs::write(&path, &cubin).unwrap_or_else(|e| panic!("{path}: {e}"));
            }
        }
        (Err(e), _) | (_, Err(e)) => eprintln!("not compiled: {e}"),
    }
}

//! NVRTC time of the kernels of the 60 probe formulas of `bench/compile_time.R` (issue 55), each
//! compiled alone, as a call on an H100/H200 would choose them (variant for sm_90, selection for 4099
//! reduced rows): the reduction's program and its merge, their source and CUBIN sizes. A binary to
//! run on the GPU host (no R, no GPU needed: NVRTC only). `RKEOPS_GPU_GROUP_WORK` and the other
//! tuning variables apply. Usage: `cargo run --release --example compile_probe [regex-free filter]`.
use std::time::Instant;

use engine::cuda::codegen::{generate_variant, KernelOptions, Selection, Variant};
use engine::cuda::device::compile_cubin;
use engine::cuda::dtype::Dtype;
use engine::formula::Formula;
use engine::{SumScheme, Tuning};

fn main() {
    let filter = std::env::args().nth(1).unwrap_or_default();
    let kinds = [
        ("gaussian", "Sum_Reduction(Exp(-SqDist(x, y)) * b, 0)"),
        ("lse", "LogSumExp_Reduction(b - SqDist(x, y), 0)"),
        ("knn", "KMin_ArgKMin_Reduction(SqDist(x, y), 10, 0)"),
        ("maxarg", "Max_ArgMax_Reduction((x | y), 0)"),
        ("softmax", "SumSoftMaxWeight_Reduction(b - SqDist(x, y), y, 0)"),
    ];
    let tuning = Tuning::from_env();
    println!("kernel | variant | selection | source KB | NVRTC s | CUBIN KB | merge NVRTC s");
    let mut times = Vec::new();
    for dtype in [Dtype::F32, Dtype::F64] {
        for (name, text) in kinds {
            for d in [3, 16, 64] {
                let label = format!("{name} D={d} {dtype:?}");
                if !label.contains(&filter) {
                    continue;
                }
                let args = [format!("x = Vi({d})"), format!("y = Vj({d})"), "b = Vj(1)".to_string()];
                let f = Formula::parse(text, &args).unwrap();
                let variant = Variant::choose(&f, dtype, None, (9, 0), &tuning);
                let selection = Selection::for_rows(&f, 4099.0, tuning.gpu_selection);
                let options = KernelOptions { unroll: tuning.unroll, group_work: tuning.group_work, ..KernelOptions::new(dtype, SumScheme::Auto, variant, selection) };
                let kernel = generate_variant(&f, &options);
                let clock = Instant::now();
                let cubin = compile_cubin(&kernel.source, "sm_90").unwrap();
                let seconds = clock.elapsed().as_secs_f64();
                let clock = Instant::now();
                compile_cubin(&kernel.merge_source, "sm_90").unwrap();
                let merge = clock.elapsed().as_secs_f64();
                times.push(seconds.max(merge));
                println!("{label} | {variant:?} | {selection:?} | {:.1} | {seconds:.3} | {:.0} | {merge:.3}", kernel.source.len() as f64 / 1e3, cubin.len() as f64 / 1e3);
            }
        }
    }
    times.sort_by(f64::total_cmp);
    if !times.is_empty() {
        println!("{} kernels: median {:.3} s, max {:.3} s, total {:.1} s (the larger of the two programs, compiled on two threads)", times.len(), times[times.len() / 2], times[times.len() - 1], times.iter().sum::<f64>());
    }
}

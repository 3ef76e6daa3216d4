//! NVRTC time of the kernels of the 60 probe formulas of `bench/compile_time.R` (issue 55), each
//! compiled alone, as a call on an H100/H200 would choose them (variant for sm_90, selection for 4099
//! reduced rows): the reduction's program and its merge, their source and CUBIN sizes. A binary to
//! run on the GPU host (no R, no GPU needed: NVRTC only). `RKEOPS_GPU_GROUP_WORK` and the other
//! tuning variables apply. Usage: `cargo run --release --example compile_probe [regex-free filter]`.
//! `RKEOPS_PROBE_SPLIT=1` also times, for each kernel, NVRTC to PTX alone (`compute_90`: the front
//! end and NVVM, without ptxas) and to a CUBIN with `-Ofast-compile=max`, `mid` and `min` (CUDA
//! 12.8+: less optimisation for a faster compilation), to tell where a compilation's time goes. Each
//! compiles a source of its own (a distinct unused variable appended), so that NVRTC's own cache
//! (12.9+) cannot return an earlier compilation.
use std::time::Instant;

use engine::cuda::codegen::{generate_variant, KernelOptions, Selection, Variant};
use cudarc::nvrtc::{compile_ptx_with_opts, CompileOptions};
use engine::cuda::builds::{compile_cubin, compile_cubin_with};
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
    let split = std::env::var("RKEOPS_PROBE_SPLIT").is_ok_and(|v| v == "1");
    print!("kernel | variant | selection | source KB | NVRTC s | CUBIN KB | merge NVRTC s");
    println!("{}", if split { " | PTX alone s | fast max s | fast mid s | fast min s" } else { "" });
    let mut fast_times = Vec::new();
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
                print!("{label} | {variant:?} | {selection:?} | {:.1} | {seconds:.3} | {:.0} | {merge:.3}", kernel.source.len() as f64 / 1e3, cubin.len() as f64 / 1e3);
                if split {
                    let split = split_times(&kernel.source);
                    fast_times.push(split[1]);
                    print!(" | {}", split.map(|t| format!("{t:.3}")).join(" | "));
                }
                println!();
            }
        }
    }
    fast_times.sort_by(f64::total_cmp);
    if !fast_times.is_empty() {
        println!("-Ofast-compile=max, the reductions' programs alone: median {:.3} s, max {:.3} s", fast_times[fast_times.len() / 2], fast_times[fast_times.len() - 1]);
    }
    times.sort_by(f64::total_cmp);
    if !times.is_empty() {
        println!("{} kernels: median {:.3} s, max {:.3} s, total {:.1} s (the larger of the two programs, compiled on two threads)", times.len(), times[times.len() / 2], times[times.len() - 1], times.iter().sum::<f64>());
    }
}

/// Seconds of NVRTC for `source` to PTX alone, and to a CUBIN with `-Ofast-compile=max`, `mid`
/// and `min`; each a source of its own.
fn split_times(source: &str) -> [f64; 4] {
    let salted = |k: usize| format!("{source}\n__device__ int rk_probe_salt_{k};\n");
    let timed = |f: &dyn Fn()| {
        let clock = Instant::now();
        f();
        clock.elapsed().as_secs_f64()
    };
    let ptx = timed(&|| {
        let options = vec!["-default-device".to_string(), "--std=c++17".to_string()];
        let opts = CompileOptions { arch: Some("compute_90"), options, ..Default::default() };
        compile_ptx_with_opts(salted(1), opts).unwrap();
    });
    let fast = |k: usize, level: &str| {
        // (spelt as nvcc's; where NVRTC takes neither spelling, NaN and its message)
        let clock = Instant::now();
        let compiled = ["--Ofast-compile", "-Ofc"].iter().find_map(|o| {
            let option = format!("{o}={level}");
            compile_cubin_with(&salted(k), "sm_90", &[&option]).map_err(|e| eprintln!("{option}: {e}")).ok()
        });
        compiled.map_or(f64::NAN, |_| clock.elapsed().as_secs_f64())
    };
    [ptx, fast(2, "max"), fast(3, "mid"), fast(4, "min")]
}

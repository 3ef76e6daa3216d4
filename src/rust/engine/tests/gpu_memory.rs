//! The GPU's memory: inputs larger than it (processed in blocks), memory taken by someone else and
//! launches that fail (the device stays usable), buffers kept between calls of changing sizes,
//! and inputs kept on the device.

use super::{alone_on_the_gpu, args, compare, run, sharing_the_gpu, Data};
use crate::common::random;
use engine::cuda::device;
use engine::{Backend, Input, Operator, Precision, RunOptions, SumScheme};

#[test]
fn gpu_processes_inputs_larger_than_its_memory_in_blocks() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: the blocked GPU path is not checked here ({why})");
        return;
    }
    // 300 kB of "device memory" for 4 x 5000 i-values and 6 x 3001 j-values (float64): blocks
    // of rows on both sides.
    let data = Data::new(5000, 3001);
    let inputs = data.inputs();
    for formula in [
        "Sum_Reduction(Exp(-s*SqDist(x,y))*b, AXIS)",
        "KMin_ArgKMin_Reduction(x - y, 5, AXIS)",
        "ArgMin_Reduction(SqDist(x,y), AXIS)",
        "LogSumExp_Reduction(100 - 20*SqDist(x,y), AXIS)",
        "SumSoftMaxWeight_Reduction(100 - 20*SqDist(x,y), b, AXIS)",
    ] {
        for axis in ["0", "1"] {
            let text = formula.replace("AXIS", axis);
            let op = Operator::new(&text, &args()).unwrap();
            let options = RunOptions {
                precision: Precision::F64,
                backend: Backend::Gpu(0),
                gpu_memory: Some(300_000),
                ..Default::default()
            };
            let g = op.run(&inputs, &options).unwrap_or_else(|e| panic!("{text}: {e}"));
            let c = run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto);
            compare(&text, &g, &c, Precision::F64);
        }
    }
}
/// Takes device memory in decreasing pieces until at most `leave` bytes are free (or nothing more
/// can be had); the memory is given back when the returned buffers are dropped.
fn occupy(dev: &device::Device, leave: usize) -> Vec<cudarc::driver::CudaSlice<u8>> {
    let mut held = Vec::new();
    let mut piece = 1usize << 30;
    while piece >= 1 << 16 {
        let free = dev.ctx.mem_get_info().expect("querying the free device memory").0;
        if free <= leave {
            break;
        }
        match dev.stream.alloc_zeros::<u8>(piece.min(free - leave)) {
            Ok(buffer) => held.push(buffer),
            Err(_) => piece /= 2,
        }
    }
    dev.stream.synchronize().expect("synchronizing after taking the memory");
    held
}

/// Gives the memory back, and waits until the driver sees it free again (the stream's memory
/// pool returns freed memory to the device when the stream synchronises).
fn release(dev: &device::Device, held: Vec<cudarc::driver::CudaSlice<u8>>) {
    drop(held);
    dev.stream.synchronize().expect("synchronizing after giving the memory back");
}

/// Reliability of the GPU path when it fails: (a) a device whose memory is taken by someone else
/// (here: this test, through cudarc) either gets the work done in smaller blocks, or fails with an
/// error that names the device and says it is out of memory; (b) kernels that need more than a
/// GPU thread can have are computed correctly or refused with a GPU error. After each failure
/// the same device, context and operators must keep working: a CUDA error that poisoned the
/// context (or a buffer left allocated) would fail every later run of the R session.
#[test]
fn gpu_out_of_memory_and_failed_launches_leave_it_usable() {
    let _gpu = alone_on_the_gpu();
    let description = match device::availability(0) {
        Ok(description) => description,
        Err(why) => {
            println!("NO GPU: running out of device memory and oversized kernels are not checked here ({why})");
            let why = why.to_string();
            assert!(why.contains("driver") || why.contains("NVRTC") || why.contains("device"), "{why}");
            return;
        }
    };
    let dev = device::device(0).unwrap();
    let name = format!("device 0 ({})", dev.name);
    let clock = std::time::Instant::now();

    // (a) Out of memory. 20 million i-rows (80 MB of float32 inputs, 160 MB of float64 states)
    // against a short reduced range, so that the CPU checks it in well under a second.
    let args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let (n, m) = (20_000_003, 37);
    let (x, y) = (random(n, 21), random(m, 22));
    let inputs = [Input::host(&x, n, 1), Input::host(&y, m, 1)];
    let op = Operator::new("Sum_Reduction(Exp(-3*Square(x - y)), 0)", &args).unwrap();
    let cpu = run(&op, &inputs, Precision::F32, Backend::Cpu, SumScheme::Auto);
    let gpu_run = || {
        let options = RunOptions { precision: Precision::F32, backend: Backend::Gpu(0), ..Default::default() };
        op.run(&inputs, &options)
    };
    // Compiled and loaded before the memory is taken: what is short below is the memory of the
    // reduction itself, not that of its code.
    compare("before", &gpu_run().unwrap(), &cpu, Precision::F32);
    let (free, total) = dev.ctx.mem_get_info().unwrap();

    // 256 MB left, less than the 240 MB the run needs plus the 20% the engine leaves free: it
    // sizes its blocks of rows to the memory it finds free, so this succeeds (in blocks). The
    // memory the device keeps between calls is given back first, so that the run must find its own.
    dev.release_memory();
    let held = occupy(&dev, 256 << 20);
    let sliver = dev.ctx.mem_get_info().unwrap().0;
    let blocked = gpu_run();
    release(&dev, held);
    assert!(n * (4 + 8) > sliver / 10 * 8, "{sliver} bytes free: the inputs fit, no blocks were needed");
    let blocked = blocked.unwrap_or_else(|e| panic!("{sliver} bytes free: {e}"));
    compare("in blocks", &blocked, &cpu, Precision::F32);

    // Nothing left that can be allocated (the driver may still report a few MB free, which the
    // engine believes): the run either fits its blocks of rows in what is left and equals the CPU,
    // or is refused with an error that names the device and says that its memory is short, from
    // the driver ("out of memory") or from the engine's own estimate.
    dev.release_memory();
    let held = occupy(&dev, 0);
    let none_left = dev.ctx.mem_get_info().unwrap().0;
    let full = gpu_run();
    release(&dev, held);
    let e = match full {
        Ok(out) => {
            compare("with almost no memory", &out, &cpu, Precision::F32);
            "computed in small blocks".to_string()
        }
        Err(e) => {
            let e = e.to_string();
            assert!(e.starts_with("GPU: ") && e.contains(&name), "{e}");
            assert!(e.contains("out of memory") || e.contains("too little free memory"), "{e}");
            e
        }
    };

    // The memory given back, the same operator runs again, correctly.
    assert!(dev.ctx.mem_get_info().unwrap().0 >= free / 10 * 9, "the memory taken was not given back");
    compare("after", &gpu_run().unwrap(), &cpu, Precision::F32);
    println!(
        "out of memory on {description}: {:.1} of {:.1} GB free; with {:.0} MB free: computed in blocks; \
         with {:.1} MB free: {e}; then usable again ({:.1} s)",
        free as f64 / 1e9,
        total as f64 / 1e9,
        sliver as f64 / 1e6,
        none_left as f64 / 1e6,
        clock.elapsed().as_secs_f64()
    );

    // (b) Kernels that need more than a GPU thread has: a 300 x 300 tensor product per pair
    // (90000 values per thread for the term, as many for the sum), and a pair term of 100000
    // values. The local memory they ask for may exceed what a thread may have (the launch is
    // refused) or what the device has for all resident threads.
    let small_args: Vec<String> = ["x = Vi(1)", "y = Vj(1)"].iter().map(|s| s.to_string()).collect();
    let (sx, sy) = (random(37, 23), random(41, 24));
    let small_inputs = [Input::host(&sx, 37, 1), Input::host(&sy, 41, 1)];
    let small = Operator::new("Sum_Reduction(Exp(-Square(x - y))*y, 0)", &small_args).unwrap();
    for (text, decl, dims, rows) in [
        ("Sum_Reduction(TensorProd(u, v), 0)", ["u = Vi(300)", "v = Vj(300)"], [300, 300], [7, 11]),
        ("Sum_Reduction(Sum(u*v), 0)", ["u = Vi(100000)", "v = Vj(1)"], [100_000, 1], [5, 3]),
    ] {
        let clock = std::time::Instant::now();
        let decl: Vec<String> = decl.iter().map(|s| s.to_string()).collect();
        let (u, v) = (random(rows[0] * dims[0], 25), random(rows[1] * dims[1], 26));
        let big_inputs =
            [Input::host(&u, rows[0], dims[0]), Input::host(&v, rows[1], dims[1])];
        let big = Operator::new(text, &decl).unwrap();
        for precision in [Precision::F32, Precision::F64] {
            let options = RunOptions { precision, backend: Backend::Gpu(0), ..Default::default() };
            let outcome = match big.run(&big_inputs, &options) {
                Ok(g) => {
                    let c = run(&big, &big_inputs, precision, Backend::Cpu, SumScheme::Auto);
                    compare(text, &g, &c, precision);
                    "computed, equal to the CPU".to_string()
                }
                Err(e) => {
                    // Compilation errors come from NVRTC (no device yet); the others name the device
                    // and say which resource is short, before any launch.
                    let e = e.to_string();
                    let said = e.contains("local memory") || e.contains("registers per thread");
                    assert!(e.starts_with("GPU: ") && (e.contains(&name) && said || e.contains("NVRTC")), "{e}");
                    e
                }
            };
            // The device still computes a small, normal reduction correctly.
            let g = run(&small, &small_inputs, precision, Backend::Gpu(0), SumScheme::Auto);
            let c = run(&small, &small_inputs, precision, Backend::Cpu, SumScheme::Auto);
            compare(&format!("after {text}"), &g, &c, precision);
            println!("{text} ({precision:?}): {outcome}; then usable again ({:.1} s)", clock.elapsed().as_secs_f64());
        }
    }
}
/// The device keeps its buffers between calls: calls of growing and shrinking sizes, in every
/// precision, with one output row per thread or chunks of the reduced range (2D, merged on the
/// device), must each equal the CPU, whatever an earlier call left in the buffers.
#[test]
fn gpu_reuses_its_buffers_across_sizes_and_precisions() {
    let _gpu = sharing_the_gpu();
    if let Err(why) = device::availability(0) {
        println!("NO GPU: buffer reuse between calls is not checked here ({why})");
        return;
    }
    let formulas = [
        "Sum_Reduction(Exp(-s*SqDist(x,y))*b, AXIS)",
        "KMin_ArgKMin_Reduction(SqDist(x,y), 3, AXIS)",
        "ArgMin_Reduction(SqDist(x,y), AXIS)",
        "SumSoftMaxWeight_Reduction(10 - 2*SqDist(x,y), b, AXIS)",
    ];
    let mut calls = 0;
    for (n, m) in [(20011, 3001), (5, 7), (37, 100003), (4099, 3), (3, 65537), (20011, 3001)] {
        let data = Data::new(n, m);
        let inputs = data.inputs();
        for formula in formulas {
            for axis in ["0", "1"] {
                let text = formula.replace("AXIS", axis);
                let op = Operator::new(&text, &args()).unwrap();
                for precision in [Precision::F32, Precision::F64, Precision::F16] {
                    let g = run(&op, &inputs, precision, Backend::Gpu(0), SumScheme::Auto);
                    let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
                    compare(&format!("{text} N = {n}, M = {m}"), &g, &c, precision);
                    calls += 1;
                }
            }
        }
    }
    let held = device::device(0).unwrap().workspace.lock().unwrap().as_ref().map(|w| w.held());
    println!("{calls} calls of 6 sizes, each equal to the CPU; buffers held afterwards (device, host): {held:?}");
}
/// Inputs kept on the device: the same results as the host data, in both schemes and every
/// precision; a matrix made again from changed data gives the new results (nothing is cached
/// behind the user's back); a precision other than the matrix's is an error naming the input; the
/// CPU reads the matrix back; dropping it frees its memory.
#[test]
fn inputs_kept_on_the_device() {
    use engine::cuda::resident::DeviceMatrix;
    // Alone: it measures the free memory around one allocation.
    let _gpu = alone_on_the_gpu();
    let dev = match device::device(0) {
        Ok(dev) => dev,
        Err(why) => {
            println!("NO GPU: inputs kept on the device are not checked here ({why})");
            return;
        }
    };
    for (n, m) in [(20011, 517), (37, 100003)] {
        let data = Data::new(n, m);
        let inputs = data.inputs();
        for precision in [Precision::F32, Precision::F64, Precision::F16] {
            // x (0) and y (1) on the device, the other inputs from the host.
            let x = DeviceMatrix::new(dev.clone(), &data.values[0], n, 3, precision).unwrap();
            let y = DeviceMatrix::new(dev.clone(), &data.values[1], m, 3, precision).unwrap();
            let mut kept = inputs.clone();
            kept[0] = Input::device(&x);
            kept[1] = Input::device(&y);
            for text in ["Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", "ArgKMin_Reduction(SqDist(x,y), 4, 1)"] {
                let op = Operator::new(text, &args()).unwrap();
                let options = RunOptions { precision, backend: Backend::Gpu(0), ..Default::default() };
                let g = op.run(&kept, &options).unwrap_or_else(|e| panic!("{text}: {e}"));
                let c = run(&op, &inputs, precision, Backend::Cpu, SumScheme::Auto);
                compare(&format!("{text} kept on the device"), &g, &c, precision);
                // The CPU backend reads the kept matrices back.
                let options = RunOptions { precision, backend: Backend::Cpu, ..Default::default() };
                let back = op.run(&kept, &options).unwrap();
                assert_eq!(back.values, c.values, "{text}: CPU from kept matrices");
                assert_eq!(back.indices, c.indices, "{text}: CPU from kept matrices");
            }
        }
    }
    // Changed data, kept again: the results follow the new values.
    let data = Data::new(1031, 517);
    let mut inputs = data.inputs();
    let op = Operator::new("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", &args()).unwrap();
    let options = RunOptions { precision: Precision::F64, backend: Backend::Gpu(0), ..Default::default() };
    let shifted: Vec<f64> = data.values[0].iter().map(|v| v + 0.25).collect();
    let before = DeviceMatrix::new(dev.clone(), &data.values[0], 1031, 3, Precision::F64).unwrap();
    let after = DeviceMatrix::new(dev.clone(), &shifted, 1031, 3, Precision::F64).unwrap();
    let (mut kept_before, mut kept_after) = (inputs.clone(), inputs.clone());
    kept_before[0] = Input::device(&before);
    kept_after[0] = Input::device(&after);
    let g0 = op.run(&kept_before, &options).unwrap();
    let g1 = op.run(&kept_after, &options).unwrap();
    compare(
        "before the change",
        &g0,
        &run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto),
        Precision::F64,
    );
    inputs[0] = Input::host(&shifted, 1031, 3);
    compare("after the change", &g1, &run(&op, &inputs, Precision::F64, Backend::Cpu, SumScheme::Auto), Precision::F64);
    assert_ne!(g0.values, g1.values);
    // Another precision than the kept one: an error that names the input and both precisions.
    let options32 = RunOptions { precision: Precision::F32, ..options.clone() };
    let e = op.run(&kept_after, &options32).unwrap_err().to_string();
    assert!(e.contains("'x'") && e.contains("float64") && e.contains("float32"), "{e}");
    // Dropping a kept matrix gives its memory back.
    let free = dev.ctx.mem_get_info().unwrap().0;
    let big = DeviceMatrix::new(dev.clone(), &vec![1.0; 64 << 20], 64 << 20, 1, Precision::F64).unwrap();
    let with = dev.ctx.mem_get_info().unwrap().0;
    drop(big);
    let without = dev.ctx.mem_get_info().unwrap().0;
    assert!(free - with >= 500 << 20 && without - with >= 500 << 20, "{free} {with} {without}");
}

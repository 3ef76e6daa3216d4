//! Several R sessions of one user share one on-disk kernel cache and may all meet the same new
//! formula at once: each compiles it and writes the same entries concurrently. This checks, on a
//! real GPU, that they all get correct results and leave only complete, loadable entries behind.
//! Where no GPU can be used the test says so and checks nothing else (the cache's concurrency
//! on its own is tested in `cache.rs`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime};

use engine::cache::DiskCache;
use engine::cuda::device;
use engine::{Backend, Input, Operator, Output, Precision, RunOptions};

use crate::common;
use common::random;

/// Set (to the cache directory) in the child processes only: the worker test does its work then.
const WORKER_ENV: &str = "RKEOPS_CACHE_WORKER";
/// Run-specific number that goes into the formulas, so that their kernels are new everywhere.
const SALT_ENV: &str = "RKEOPS_CACHE_WORKER_SALT";
/// Folder where the workers say they are ready, wait for the start signal and say they are done.
const SYNC_ENV: &str = "RKEOPS_CACHE_WORKER_SYNC";
/// Which worker this is (0..WORKERS).
const ID_ENV: &str = "RKEOPS_CACHE_WORKER_ID";
const WORKER_TEST: &str = "gpu_shared_cache::four_processes_compile_and_run_the_same_new_formulas_on_one_fresh_cache";
const WORKERS: usize = 4;
/// Sizes that are not multiples of any tile (64, 128, 256) nor of a warp.
const N: usize = 1003;
const M: usize = 2011;
const K: usize = 5;

fn args() -> Vec<String> {
    ["x = Vi(3)", "y = Vj(3)", "b = Vj(2)"].iter().map(|s| s.to_string()).collect()
}

/// The formulas every process runs: a Gaussian sum, a K-nearest-neighbour search and a
/// LogSumExp, with a constant unique to this run of the test in the first and the last.
fn formulas(salt: u32) -> Vec<String> {
    let c = 2.0 + salt as f64 / 1e5;
    vec![
        format!("Sum_Reduction(Exp(-{c:?}*SqDist(x,y))*b, 0)"),
        format!("ArgKMin_Reduction(SqDist(x,y), {K}, 0)"),
        format!("LogSumExp_Reduction(-{c:?}*SqDist(x,y), 1)"),
    ]
}

struct Data {
    x: Vec<f64>,
    y: Vec<f64>,
    b: Vec<f64>,
}

impl Data {
    fn new() -> Data {
        Data { x: random(3 * N, 11), y: random(3 * M, 12), b: random(2 * M, 13).iter().map(|v| v - 0.5).collect() }
    }

    fn inputs(&self) -> [Input<'_>; 3] {
        [
            Input::host(&self.x, N, 3),
            Input::host(&self.y, M, 3),
            Input::host(&self.b, M, 2),
        ]
    }

    /// Squared distance between x_i and y_j (0-based), in float64.
    fn sqdist(&self, i: usize, j: usize) -> f64 {
        (0..3).map(|k| (self.x[i + N * k] - self.y[j + M * k]).powi(2)).sum()
    }
}

/// Runs every formula on the GPU with the cache in `dir`, in float32 and float64, and compares
/// each result with the CPU's: values within a relative 1e-4 (float32) or 1e-10 (float64) of the
/// output's scale, ArgKMin indices identical (in float32, except between two neighbours whose
/// distances tie within float32 rounding). Panics on the first difference.
fn run_and_compare(dir: &Path, salt: u32, who: &str) {
    let data = Data::new();
    let inputs = data.inputs();
    for text in formulas(salt) {
        let op = Operator::new(&text, &args()).unwrap_or_else(|e| panic!("{text}: {e}"));
        for precision in [Precision::F32, Precision::F64] {
            let gpu = RunOptions {
                precision,
                backend: Backend::Gpu(0),
                cache_dir: Some(dir.to_path_buf()),
                ..Default::default()
            };
            let cpu = RunOptions { precision, backend: Backend::Cpu, ..Default::default() };
            let what = format!("{who}: {text} ({precision:?})");
            let g = op.run(&inputs, &gpu).unwrap_or_else(|e| panic!("{what} on the GPU: {e}"));
            let c = op.run(&inputs, &cpu).unwrap_or_else(|e| panic!("{what} on the CPU: {e}"));
            assert!(g.backend.starts_with("GPU"), "{what} ran on {}", g.backend);
            compare(&what, &g, &c, precision, &data);
        }
    }
}

fn compare(what: &str, g: &Output, c: &Output, precision: Precision, data: &Data) {
    assert_eq!((g.nrow, g.k, g.dim), (c.nrow, c.k, c.dim), "{what}: shapes");
    assert_eq!(g.values.is_some(), c.values.is_some(), "{what}: values returned");
    assert_eq!(g.indices.is_some(), c.indices.is_some(), "{what}: indices returned");
    let tol = if precision == Precision::F64 { 1e-10 } else { 1e-4 };
    if let (Some(gv), Some(cv)) = (&g.values, &c.values) {
        let scale = cv.iter().fold(1.0f64, |m, v| m.max(v.abs()));
        for (k, (a, b)) in gv.iter().zip(cv).enumerate() {
            assert!((a - b).abs() <= tol * scale, "{what}: value {k}: GPU {a} vs CPU {b} (scale {scale})");
        }
    }
    if let (Some(gi), Some(ci)) = (&g.indices, &c.indices) {
        for (k, (&a, &b)) in gi.iter().zip(ci).enumerate() {
            if a == b {
                continue;
            }
            // ArgKMin over j of SqDist(x_i, y_j): output row i = k % nrow, 1-based indices.
            let i = k % g.nrow;
            let (da, db) = (data.sqdist(i, a as usize - 1), data.sqdist(i, b as usize - 1));
            // float32 rounds each coordinate (values in [0, 1)) by up to 3e-8: distances that
            // close are a tie.
            let tie = precision == Precision::F32 && (da - db).abs() <= 1e-5 * da.max(db) + 1e-8;
            assert!(tie, "{what}: index {k} (row {i}): GPU {a} (distance {da}) vs CPU {b} (distance {db})");
        }
    }
}

/// A file's identity and last change: a rewritten entry (renamed over, or changed) differs.
fn snapshot(dir: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| {
            let e = e.unwrap();
            let meta = e.metadata().unwrap();
            #[cfg(unix)]
            let inode = std::os::unix::fs::MetadataExt::ino(&meta);
            #[cfg(not(unix))]
            let inode = meta.len();
            (e.file_name().to_string_lossy().into_owned(), (inode, meta.modified().unwrap()))
        })
        .collect()
}

/// Waits for `path` to exist, up to `limit`; false when it did not appear in time.
fn wait_for(path: &Path, limit: Duration) -> bool {
    let start = Instant::now();
    while !path.exists() {
        if start.elapsed() > limit {
            return false;
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    true
}

/// The work of a child process of the test below (the same test, run with `WORKER_ENV` set):
/// initialises the GPU, says it is ready, waits for the common start, then compiles and runs the
/// formulas against the shared cache, and says it is done (so that the parent knows it ran, and
/// was not filtered out).
fn shared_cache_worker(dir: String) {
    let env = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let salt: u32 = env(SALT_ENV).parse().unwrap();
    let sync = PathBuf::from(env(SYNC_ENV));
    let id = env(ID_ENV);
    let gpu = device::availability(0).unwrap_or_else(|e| panic!("worker {id}: {e}"));
    std::fs::write(sync.join(format!("ready-{id}")), gpu).unwrap();
    assert!(wait_for(&sync.join("go"), Duration::from_secs(120)), "worker {id}: no start signal");
    let clock = Instant::now();
    run_and_compare(Path::new(&dir), salt, &format!("worker {id}"));
    // As R does when it exits: the optimised builds still compiling reach the cache.
    assert!(engine::cuda::builds::wait_for_background(Duration::from_secs(240)), "worker {id}: builds pending");
    std::fs::write(sync.join(format!("done-{id}")), format!("{:.3}", clock.elapsed().as_secs_f64())).unwrap();
}

#[test]
fn four_processes_compile_and_run_the_same_new_formulas_on_one_fresh_cache() {
    if let Ok(dir) = std::env::var(WORKER_ENV) {
        return shared_cache_worker(dir);
    }
    let gpu = match device::availability(0) {
        Ok(description) => description,
        Err(why) => {
            println!("NO GPU: concurrent compilation into one shared kernel cache is not checked here ({why})");
            let why = why.to_string();
            assert!(why.contains("driver") || why.contains("NVRTC") || why.contains("device"), "{why}");
            return;
        }
    };
    let pid = std::process::id();
    let salt = pid % 100_000;
    let base = std::env::temp_dir();
    let dir = base.join(format!("rkeops-shared-cache-test-{pid}"));
    let sync = base.join(format!("rkeops-shared-cache-test-{pid}-sync"));
    for d in [&dir, &sync] {
        let _ = std::fs::remove_dir_all(d);
    }
    // Created as the engine creates it (private): an empty, fresh cache.
    DiskCache::open(&dir).unwrap();
    std::fs::create_dir_all(&sync).unwrap();
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..WORKERS)
        .map(|id| {
            let log = |what: &str| std::fs::File::create(sync.join(format!("{what}-{id}.log"))).unwrap();
            Command::new(&exe)
                .args(["--exact", WORKER_TEST, "--nocapture", "--test-threads=1"])
                .env(WORKER_ENV, &dir)
                .env(SALT_ENV, salt.to_string())
                .env(SYNC_ENV, &sync)
                .env(ID_ENV, id.to_string())
                .stdin(Stdio::null())
                .stdout(log("stdout"))
                .stderr(log("stderr"))
                .spawn()
                .unwrap_or_else(|e| panic!("starting worker {id} ({}): {e}", exe.display()))
        })
        .map(Some)
        .collect();
    let logs = |id: usize| {
        let read = |what: &str| std::fs::read_to_string(sync.join(format!("{what}-{id}.log"))).unwrap_or_default();
        format!("--- worker {id} stdout:\n{}--- worker {id} stderr:\n{}", read("stdout"), read("stderr"))
    };
    // Start them together once all have opened the GPU (or after 60 s, whatever is ready).
    let ready = Instant::now();
    let exited = |c: &mut Option<std::process::Child>| c.as_mut().is_some_and(|c| matches!(c.try_wait(), Ok(Some(_))));
    while (0..WORKERS).any(|id| !sync.join(format!("ready-{id}")).exists())
        && ready.elapsed().as_secs() < 60
        && !children.iter_mut().any(exited)
    {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::fs::write(sync.join("go"), "").unwrap();
    let clock = Instant::now();
    let limit = Duration::from_secs(300);
    let mut status = [None; WORKERS];
    while status.iter().any(Option::is_none) && clock.elapsed() < limit {
        for (id, child) in children.iter_mut().enumerate() {
            if let Some(c) = child {
                if let Some(s) = c.try_wait().unwrap() {
                    status[id] = Some(s);
                    *child = None;
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // Past the limit: kill those still running (our own children, by handle) and reap them.
    let mut late = Vec::new();
    for (id, child) in children.iter_mut().enumerate() {
        if let Some(c) = child.as_mut() {
            let _ = c.kill();
            let _ = c.wait();
            late.push(id);
        }
    }
    let failures: Vec<String> = (0..WORKERS)
        .filter_map(|id| match status[id] {
            Some(s) if s.success() && sync.join(format!("done-{id}")).exists() => None,
            Some(s) => Some(format!("worker {id} failed ({s}):\n{}", logs(id))),
            None => Some(format!("worker {id} was still running after {limit:?} and was killed:\n{}", logs(id))),
        })
        .collect();
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    assert!(late.is_empty());
    let seconds: Vec<String> = (0..WORKERS)
        .map(|id| std::fs::read_to_string(sync.join(format!("done-{id}"))).unwrap_or_default() + " s")
        .collect();

    // Only complete entries are left: no temporary file, every entry a `<key>.cubin` whose checksum
    // holds and whose binary is an ELF image (a CUBIN).
    let cache = DiskCache::open(&dir).unwrap();
    let names: Vec<String> = snapshot(&dir).into_keys().collect();
    // (each kernel is two CUBINs since the merge kernel: the reduction's and its merge's)
    let expected = formulas(salt).len() * 2 * 2;
    for name in &names {
        let key = name.strip_suffix(".cubin").unwrap_or_else(|| panic!("unexpected file in the cache: {name}"));
        let binary = cache.load(key).unwrap_or_else(|| panic!("entry {name} is damaged (it was removed)"));
        assert!(binary.starts_with(b"\x7fELF"), "entry {name} is not a CUBIN");
    }
    // One entry per CUBIN (formula x precision x reduction and merge): concurrent writers of one
    // kernel share one entry.
    assert_eq!(names.len(), expected, "entries: {names:?}");

    // A fifth run, in this process (which has compiled none of these kernels), gets every kernel
    // from the cache: it computes the same results and neither adds nor rewrites an entry.
    let before = snapshot(&dir);
    run_and_compare(&dir, salt, "fifth run");
    assert_eq!(snapshot(&dir), before, "the fifth run compiled a kernel again instead of loading it");

    println!(
        "{WORKERS} processes shared one fresh cache on {gpu}: {} entries, all valid (workers took {})",
        names.len(),
        seconds.join(", ")
    );
    for d in [&dir, &sync] {
        let _ = std::fs::remove_dir_all(d);
    }
}

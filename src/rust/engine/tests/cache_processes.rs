//! The kernel cache shared by several processes at once, as by several R sessions of one user
//! compiling the same new formulas: 4 processes store and load the same entries against one fresh
//! directory; every load gets either nothing or the exact bytes, and at the end every entry is whole
//! and no temporary file is left. (The same with real kernels on a GPU: tests/gpu_shared_cache.rs.)

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use engine::cache::{key, DiskCache};

const PROCESSES: usize = 4;
const KEYS: usize = 16;
const ROUNDS: usize = 60;
/// Set in the children: the directory they work on.
const WORKER: &str = "RKEOPS_CACHE_PROCESS_WORKER";

/// What entry `k` holds: 50 to 200 KB that depend on `k` only, like a kernel compiled from one
/// source.
fn content(k: usize) -> (String, Vec<u8>) {
    let len = 50_000 + 10_000 * k;
    let mut s = k as u64 * 0x9E37_79B9_7F4A_7C15 + 1;
    let bytes = (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s as u8
        })
        .collect();
    (key(&[format!("entry {k}").as_bytes()]), bytes)
}

/// One process's work: rounds over all entries, loading each and storing it when missing.
fn work(dir: &Path) -> Result<(usize, usize), String> {
    let cache = DiskCache::open(dir)?;
    let (mut loads, mut stores) = (0, 0);
    for round in 0..ROUNDS {
        for k in 0..KEYS {
            let (key, want) = content((k + round) % KEYS);
            match cache.load(&key) {
                Some(got) if got == want => loads += 1,
                Some(got) => return Err(format!("entry {k}: {} bytes, not the {} stored", got.len(), want.len())),
                None => {
                    cache.store(&key, &want).map_err(|e| format!("store {k}: {e}"))?;
                    stores += 1;
                }
            }
        }
    }
    Ok((loads, stores))
}

#[test]
fn four_processes_share_one_fresh_cache() {
    // In the children (this test run again, with WORKER set): one process's work.
    if let Ok(dir) = std::env::var(WORKER) {
        let (loads, stores) = work(Path::new(&dir)).unwrap_or_else(|e| panic!("{e}"));
        println!("worker {}: {loads} loads, {stores} stores", std::process::id());
        return;
    }
    let dir: PathBuf = std::env::temp_dir().join(format!("rkeops-cache-processes-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let exe = std::env::current_exe().unwrap();
    let mut children: Vec<_> = (0..PROCESSES)
        .map(|_| {
            Command::new(&exe)
                .args(["--exact", "cache_processes::four_processes_share_one_fresh_cache", "--nocapture", "--test-threads=1"])
                .env(WORKER, &dir)
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let deadline = Instant::now() + Duration::from_secs(120);
    while children.iter_mut().any(|c| c.try_wait().unwrap().is_none()) && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut failures = vec![];
    for mut child in children {
        if child.try_wait().unwrap().is_none() {
            let _ = child.kill();
        }
        let out = child.wait_with_output().unwrap();
        if !out.status.success() {
            failures.push(format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    let cache = DiskCache::open(&dir).unwrap();
    for k in 0..KEYS {
        let (key, want) = content(k);
        assert!(cache.load(&key).is_some_and(|got| got == want), "entry {k} is not whole at the end");
    }
    let names: Vec<String> =
        std::fs::read_dir(&dir).unwrap().map(|e| e.unwrap().file_name().to_string_lossy().into_owned()).collect();
    assert!(names.iter().all(|n| n.ends_with(".cubin")), "left in the cache: {names:?}");
    assert_eq!(names.len(), KEYS);
    println!("{PROCESSES} processes, {} loads or stores each: {KEYS} entries, all whole", ROUNDS * KEYS);
    std::fs::remove_dir_all(&dir).unwrap();
}

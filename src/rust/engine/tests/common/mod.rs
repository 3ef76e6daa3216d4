//! Helpers shared by the engine's integration tests.

/// Deterministic pseudo-random numbers in [0, 1) (xorshift), so the tests need no dependency.
pub fn random(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

/// The median of `reps` timed runs of `f`, in seconds, after one untimed warm-up run (benchmarks).
#[allow(dead_code)]
pub fn median_time(reps: usize, mut f: impl FnMut()) -> f64 {
    f();
    let mut t: Vec<f64> = (0..reps)
        .map(|_| {
            let s = std::time::Instant::now();
            f();
            s.elapsed().as_secs_f64()
        })
        .collect();
    t.sort_by(f64::total_cmp);
    t[reps / 2]
}

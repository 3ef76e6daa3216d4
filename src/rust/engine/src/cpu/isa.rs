//! Runtime choice of the instruction set. The crate is built for the baseline of the target (SSE2
//! on x86-64) so that one build runs everywhere, e.g. on a cluster whose nodes differ from the
//! machine that compiled it; the evaluator's hot loop is compiled a second and third time with
//! AVX2+FMA and AVX-512 enabled, and the best one the processor supports is run.

use crate::tuning::IsaCap;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Level {
    Baseline,
    #[cfg(target_arch = "x86_64")]
    Avx2,
    #[cfg(target_arch = "x86_64")]
    Avx512,
}

impl Level {
    pub fn has_avx512(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        return self == Level::Avx512;
        #[cfg(not(target_arch = "x86_64"))]
        false
    }

    /// The best level the processor has, at most `cap`.
    pub fn detect(cap: IsaCap) -> Level {
        #[cfg(target_arch = "x86_64")]
        {
            let avx2 = is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma");
            let avx512 = avx2
                && is_x86_feature_detected!("avx512f")
                && is_x86_feature_detected!("avx512bw")
                && is_x86_feature_detected!("avx512dq")
                && is_x86_feature_detected!("avx512vl");
            match cap {
                IsaCap::Baseline => return Level::Baseline,
                IsaCap::Avx2 if avx2 => return Level::Avx2,
                _ if avx512 => return Level::Avx512,
                _ if avx2 => return Level::Avx2,
                _ => {}
            }
        }
        Level::Baseline
    }
}

/// Work to compile for several instruction sets. `run` must be `#[inline(always)]`, and so must
/// everything it calls in its hot loop: a function that is called rather than inlined keeps the
/// baseline code. (Closures would not do: they are not inlined into the wrappers below.)
///
/// `fma` says whether the code may fuse multiply-adds: it is a constant in each compiled copy.
pub trait Kernel {
    fn run(self, fma: bool);
}

/// Runs `kernel` compiled for `level`.
pub fn run(level: Level, kernel: impl Kernel) {
    match level {
        Level::Baseline => baseline(kernel),
        // SAFETY: `Level::detect` chose these levels only where the processor has the features.
        #[cfg(target_arch = "x86_64")]
        Level::Avx2 => unsafe { with_avx2(kernel) },
        #[cfg(target_arch = "x86_64")]
        Level::Avx512 => unsafe { with_avx512(kernel) },
    }
}

// Never inlined: each kernel is one function per instruction set, called from code compiled for
// any of them (`cpu::Compute` from inside the others).
#[inline(never)]
fn baseline(kernel: impl Kernel) {
    kernel.run(false)
}

#[cfg(target_arch = "x86_64")]
#[inline(never)]
#[target_feature(enable = "avx2,fma,bmi1,bmi2,lzcnt,popcnt,f16c")]
unsafe fn with_avx2(kernel: impl Kernel) {
    kernel.run(true)
}

#[cfg(target_arch = "x86_64")]
#[inline(never)]
#[target_feature(enable = "avx512f,avx512bw,avx512dq,avx512vl,avx2,fma,bmi1,bmi2,lzcnt,popcnt,f16c")]
unsafe fn with_avx512(kernel: impl Kernel) {
    kernel.run(true)
}

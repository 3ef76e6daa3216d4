//! Settings that change how the engine computes, never what: the instruction set of the CPU
//! evaluator, the GPU kernel's choices (selection storage, ranged kernel, tensor cores, unrolling,
//! scheme, replayed loops) and programs' fused steps. Defaults are what the engine picks; the
//! environment variables below override them, for benchmarks and to work around a fault. The
//! engine reads the environment here, in `Tuning::from_env`, which its callers run once per call
//! (the R binding at each call, so that `Sys.setenv()` in a session takes effect), and, for NVRTC's
//! options of experiments only, once per process in `cuda::builds` (they are part of the kernel
//! caches' keys); each variable is documented in the README's "Options".

/// The most capable instruction set the CPU evaluator may use (`RKEOPS_CPU_ISA`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum IsaCap {
    /// The best the processor has (AVX-512, else AVX2 + FMA, else the baseline).
    #[default]
    Best,
    /// AVX2 + FMA at most (`avx2`).
    Avx2,
    /// The baseline of the target, SSE2 on x86-64 (`baseline`).
    Baseline,
}

/// Where a GPU K-selection keeps its K best (`RKEOPS_GPU_SELECTION=local|registers|filtered|filtered-registers`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectionOverride {
    Local,
    Registers,
    Filtered,
    FilteredRegisters,
}

/// Which kernel block-sparse reductions run (`RKEOPS_GPU_RANGED=narrow|wide`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RangedOverride {
    Narrow,
    Wide,
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Tuning {
    pub cpu_isa: IsaCap,
    /// None: chosen from the number of reduced rows (`cuda::codegen::Selection::for_rows`).
    pub gpu_selection: Option<SelectionOverride>,
    /// None: chosen from the sizes of the blocks (`cuda::codegen::Variant::for_ranges`).
    pub gpu_ranged: Option<RangedOverride>,
    /// Dot products and squared distances of large vectors on the tensor cores where the GPU has
    /// them (`RKEOPS_GPU_TENSOR=off`: false).
    pub tensor_cores: bool,
    /// `#pragma unroll` of the loop over a tile in generated kernels (`RKEOPS_GPU_UNROLL=n`).
    pub unroll: usize,
    /// Most components of a pair's values (all row slots) for which a log-sum-exp's group of 32
    /// indices is unrolled whole (`RKEOPS_GPU_GROUP_WORK=n`; `cuda::codegen::exponentials`).
    pub group_work: usize,
    /// A new kernel first built with NVRTC's fast-compile level and launched at once, its optimised
    /// build compiled in the background and swapped in when ready (`cuda::builds`), for calls of
    /// little work (`cuda::backend`: a fast build runs up to ~40 x slower). Both builds compute
    /// the same bits: kernels are compiled without contraction and write their fused
    /// multiply-adds (`RKEOPS_GPU_FAST_COMPILE=0`: every kernel optimised at once).
    pub fast_compile: bool,
    /// The 1D scheme always, never chunks of the reduced range (`RKEOPS_GPU_SCHEME=1D`).
    pub force_1d: bool,
    /// Loops (`crate::iterate`) replay the recorded launches of their steps (`RKEOPS_GPU_REPLAY=0`:
    /// each step runs as a call).
    pub replay: bool,
    /// Programs issue an iteration's replayed launches as one CUDA graph (`RKEOPS_GPU_GRAPHS=1`;
    /// off by default: made again at every call, the graphs cost more than the launches they save,
    /// H200, 2026-11-29: bench/RESULTS.md).
    pub graphs: bool,
    /// Programs fuse consecutive sums over the same pairs into one reduction (`program::fuse`;
    /// `RKEOPS_FUSE_STEPS=0`: each step runs on its own).
    pub fuse_steps: bool,
    /// When a program reads its stopping rule's buffer and its traces one iteration late, the next
    /// iteration queued first (`program::forward`): None, where work is queued (a GPU); `true`
    /// everywhere (`RKEOPS_LATE_CHECKS=1`: the tests' way to run it on the CPU); `false` never
    /// (`RKEOPS_LATE_CHECKS=0`: the host waits for each iteration it checks).
    pub late_checks: Option<bool>,
    /// The fewest rows each GPU gets when a program's rows are spread over the GPUs of
    /// `RunOptions::gpus` (`program::spread`; `RKEOPS_SPREAD_ROWS=n`): fewer, and it runs on the
    /// first GPU, where one exchange between the devices per iteration would cost more than it
    /// saves.
    pub spread_rows: usize,
}

impl Default for Tuning {
    fn default() -> Tuning {
        Tuning {
            cpu_isa: IsaCap::Best,
            gpu_selection: None,
            gpu_ranged: None,
            tensor_cores: true,
            unroll: 4,
            group_work: 64,
            fast_compile: true,
            force_1d: false,
            replay: true,
            graphs: false,
            fuse_steps: true,
            late_checks: None,
            spread_rows: 1 << 16,
        }
    }
}

impl Tuning {
    /// The defaults, overridden by the environment variables that are set (values not understood
    /// are ignored, as before this struct existed; `off` in any case).
    pub fn from_env() -> Tuning {
        Tuning::from_vars(|name| std::env::var(name).ok())
    }

    /// `from_env` with the variables read by `var`.
    pub fn from_vars(var: impl Fn(&str) -> Option<String>) -> Tuning {
        let default = Tuning::default();
        let var = |name: &str| var(name).unwrap_or_default();
        Tuning {
            cpu_isa: match var("RKEOPS_CPU_ISA").as_str() {
                "baseline" => IsaCap::Baseline,
                "avx2" => IsaCap::Avx2,
                _ => IsaCap::Best,
            },
            gpu_selection: match var("RKEOPS_GPU_SELECTION").as_str() {
                "local" => Some(SelectionOverride::Local),
                "registers" => Some(SelectionOverride::Registers),
                "filtered" => Some(SelectionOverride::Filtered),
                "filtered-registers" => Some(SelectionOverride::FilteredRegisters),
                _ => None,
            },
            gpu_ranged: match var("RKEOPS_GPU_RANGED").as_str() {
                "narrow" => Some(RangedOverride::Narrow),
                "wide" => Some(RangedOverride::Wide),
                _ => None,
            },
            tensor_cores: !var("RKEOPS_GPU_TENSOR").eq_ignore_ascii_case("off"),
            unroll: var("RKEOPS_GPU_UNROLL").parse().unwrap_or(default.unroll),
            group_work: var("RKEOPS_GPU_GROUP_WORK").parse().unwrap_or(default.group_work),
            fast_compile: var("RKEOPS_GPU_FAST_COMPILE") != "0",
            force_1d: var("RKEOPS_GPU_SCHEME").eq_ignore_ascii_case("1d"),
            replay: var("RKEOPS_GPU_REPLAY") != "0",
            graphs: var("RKEOPS_GPU_GRAPHS") == "1",
            fuse_steps: var("RKEOPS_FUSE_STEPS") != "0",
            late_checks: match var("RKEOPS_LATE_CHECKS").as_str() {
                "1" => Some(true),
                "0" => Some(false),
                _ => None,
            },
            spread_rows: var("RKEOPS_SPREAD_ROWS").parse().unwrap_or(default.spread_rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_override_the_defaults() {
        assert_eq!(Tuning::from_vars(|_| None), Tuning::default());
        let set = |name: &str| {
            let value = match name {
                "RKEOPS_CPU_ISA" => "avx2",
                "RKEOPS_GPU_SELECTION" => "registers",
                "RKEOPS_GPU_RANGED" => "narrow",
                "RKEOPS_GPU_TENSOR" => "off",
                "RKEOPS_GPU_UNROLL" => "1",
                "RKEOPS_GPU_GROUP_WORK" => "1000",
                "RKEOPS_GPU_FAST_COMPILE" => "0",
                "RKEOPS_GPU_SCHEME" => "1D",
                "RKEOPS_GPU_REPLAY" => "0",
                "RKEOPS_GPU_GRAPHS" => "1",
                "RKEOPS_FUSE_STEPS" => "0",
                "RKEOPS_LATE_CHECKS" => "0",
                "RKEOPS_SPREAD_ROWS" => "1000",
                _ => return None,
            };
            Some(value.to_string())
        };
        let want = Tuning {
            cpu_isa: IsaCap::Avx2,
            gpu_selection: Some(SelectionOverride::Registers),
            gpu_ranged: Some(RangedOverride::Narrow),
            tensor_cores: false,
            unroll: 1,
            group_work: 1000,
            fast_compile: false,
            force_1d: true,
            replay: false,
            graphs: true,
            fuse_steps: false,
            late_checks: Some(false),
            spread_rows: 1000,
        };
        assert_eq!(Tuning::from_vars(set), want);
        // Values not understood keep the defaults.
        assert_eq!(Tuning::from_vars(|_| Some("?".into())), Tuning::default());
    }
}

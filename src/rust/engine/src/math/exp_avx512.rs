//! Exponentials of a whole tile with AVX-512, for the kernels whose time is mostly exponentials
//! (Gaussian sums). A finer reduction than `math::exp_f64` needs fewer multiply-adds, which bound the
//! speed: exp(x) = 2^(k / 16) e^r with k = round(16 x / ln 2) and |r| <= ln(2) / 32, 2^(j / 16) for
//! j = k mod 16 from a table held in registers (one permutation), e^r - 1 by a polynomial of degree
//! 7 (f64) or 4 (f32), and 2^floor(k / 16) applied by `vscalef`, which rounds once, also into the
//! subnormal range, and gives 0 or infinity beyond it. Results are within an ulp of the exact
//! value, like the generic loop's, but not always the same bits.

// The f32 constants are written with the digits of their f64 computation.
#![allow(clippy::excessive_precision)]

use std::arch::x86_64::*;

/// 2^(j / 16), j = 0..15, rounded to nearest.
const TABLE_F64: [u64; 16] = [
    0x3ff0000000000000, 0x3ff0b5586cf9890f, 0x3ff172b83c7d517b, 0x3ff2387a6e756238,
    0x3ff306fe0a31b715, 0x3ff3dea64c123422, 0x3ff4bfdad5362a27, 0x3ff5ab07dd485429,
    0x3ff6a09e667f3bcd, 0x3ff7a11473eb0187, 0x3ff8ace5422aa0db, 0x3ff9c49182a3f090,
    0x3ffae89f995ad3ad, 0x3ffc199bdd85529c, 0x3ffd5818dcfba487, 0x3ffea4afa2a490da,
];

const TABLE_F32: [f32; 16] = {
    let mut t = [0.0; 16];
    let mut j = 0;
    while j < 16 {
        t[j] = f64::from_bits(TABLE_F64[j]) as f32;
        j += 1;
    }
    t
};

/// The constants of one precision: the bounds beyond which the result is 0 or infinity, the number
/// whose addition rounds to an integer, ln(2) / 16 in two parts (the first times k is exact), and the
/// coefficients 1 / i! of e^r - 1 from i = 1.
struct Reduction<T, const N: usize> {
    lo: T,
    hi: T,
    magic: T,
    ln2_16_hi: T,
    ln2_16_lo: T,
    coeffs: [T; N],
}

const fn inverse_factorials<const N: usize>() -> [f64; N] {
    let (mut c, mut fact, mut i) = ([0.0; N], 1.0, 0);
    while i < N {
        fact *= (i + 1) as f64;
        c[i] = 1.0 / fact;
        i += 1;
    }
    c
}

const F64: Reduction<f64, 7> = Reduction {
    lo: -746.0,
    hi: 710.0,
    magic: 6755399441055744.0,
    ln2_16_hi: 0.04332169878499658,
    ln2_16_lo: 1.4494042586539372e-18,
    coeffs: inverse_factorials(),
};

const F32: Reduction<f32, 4> = Reduction {
    lo: -104.0,
    hi: 89.0,
    magic: 12582912.0,
    ln2_16_hi: 0.043321698904037476,
    ln2_16_lo: -1.1904088825787085e-10,
    coeffs: {
        let c = inverse_factorials::<4>();
        [c[0] as f32, c[1] as f32, c[2] as f32, c[3] as f32]
    },
};

const SIXTEEN_LOG2E: f64 = 16.0 * std::f64::consts::LOG2_E;

#[inline]
#[target_feature(enable = "avx512f")]
fn exp8(v: __m512d) -> __m512d {
    let k = &F64;
    // max and min return their second operand where one is NaN: NaN goes through.
    let v = _mm512_min_pd(_mm512_set1_pd(k.hi), _mm512_max_pd(_mm512_set1_pd(k.lo), v));
    let magic = _mm512_set1_pd(k.magic);
    let t = _mm512_fmadd_pd(v, _mm512_set1_pd(SIXTEEN_LOG2E), magic);
    let n = _mm512_sub_pd(t, magic);
    let r = _mm512_fnmadd_pd(n, _mm512_set1_pd(k.ln2_16_lo), _mm512_fnmadd_pd(n, _mm512_set1_pd(k.ln2_16_hi), v));
    // The low 4 bits of t are k mod 16; the permutation reads only those.
    // SAFETY: 8 values from 0 or 8 in a table of 16.
    let table = |from: usize| unsafe { _mm512_loadu_pd(TABLE_F64[from..].as_ptr() as *const f64) };
    let s = _mm512_permutex2var_pd(table(0), _mm512_castpd_si512(t), table(8));
    let mut p = _mm512_set1_pd(k.coeffs[k.coeffs.len() - 1]);
    for &c in k.coeffs.iter().rev().skip(1) {
        p = _mm512_fmadd_pd(p, r, _mm512_set1_pd(c));
    }
    let em1 = _mm512_mul_pd(p, r);
    _mm512_scalef_pd(_mm512_fmadd_pd(s, em1, s), _mm512_mul_pd(n, _mm512_set1_pd(1.0 / 16.0)))
}

#[inline]
#[target_feature(enable = "avx512f")]
fn exp16(v: __m512) -> __m512 {
    let k = &F32;
    let v = _mm512_min_ps(_mm512_set1_ps(k.hi), _mm512_max_ps(_mm512_set1_ps(k.lo), v));
    let magic = _mm512_set1_ps(k.magic);
    let t = _mm512_fmadd_ps(v, _mm512_set1_ps(SIXTEEN_LOG2E as f32), magic);
    let n = _mm512_sub_ps(t, magic);
    let r = _mm512_fnmadd_ps(n, _mm512_set1_ps(k.ln2_16_lo), _mm512_fnmadd_ps(n, _mm512_set1_ps(k.ln2_16_hi), v));
    // SAFETY: the table has 16 values.
    let s = _mm512_permutexvar_ps(_mm512_castps_si512(t), unsafe { _mm512_loadu_ps(TABLE_F32.as_ptr()) });
    let mut p = _mm512_set1_ps(k.coeffs[k.coeffs.len() - 1]);
    for &c in k.coeffs.iter().rev().skip(1) {
        p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(c));
    }
    let em1 = _mm512_mul_ps(p, r);
    _mm512_scalef_ps(_mm512_fmadd_ps(s, em1, s), _mm512_mul_ps(n, _mm512_set1_ps(1.0 / 16.0)))
}

macro_rules! tile_exp {
    ($name:ident, $one:ident, $t:ty, $lanes:expr, $mask:ty,
     $set1:ident, $loadu:ident, $maskz_loadu:ident, $storeu:ident, $mask_storeu:ident, $mul:ident) => {
        /// `out[i] = exp(scale * x[i])` for every i of `x`.
        ///
        /// # Safety
        /// The processor must support AVX-512F.
        #[target_feature(enable = "avx512f")]
        pub unsafe fn $name(x: &[$t], scale: $t, out: &mut [$t]) {
            assert!(out.len() >= x.len());
            let (s, len) = ($set1(scale), x.len());
            let (xp, op) = (x.as_ptr(), out.as_mut_ptr());
            let mut i = 0;
            // SAFETY (all loads and stores): i + width <= len, or the mask covers only i..len.
            while i + 4 * $lanes <= len {
                let e = [0, 1, 2, 3].map(|q| $one($mul(s, $loadu(xp.add(i + q * $lanes)))));
                for (q, e) in e.into_iter().enumerate() {
                    $storeu(op.add(i + q * $lanes), e);
                }
                i += 4 * $lanes;
            }
            while i < len {
                let mask: $mask = if len - i >= $lanes { !0 } else { (1 << (len - i)) - 1 };
                let e = $one($mul(s, $maskz_loadu(mask, xp.add(i))));
                $mask_storeu(op.add(i), mask, e);
                i += $lanes;
            }
        }
    };
}

tile_exp!(
    exp_f64, exp8, f64, 8, __mmask8, _mm512_set1_pd, _mm512_loadu_pd, _mm512_maskz_loadu_pd, _mm512_storeu_pd,
    _mm512_mask_storeu_pd, _mm512_mul_pd
);
tile_exp!(
    exp_f32, exp16, f32, 16, __mmask16, _mm512_set1_ps, _mm512_loadu_ps, _mm512_maskz_loadu_ps, _mm512_storeu_ps,
    _mm512_mask_storeu_ps, _mm512_mul_ps
);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::math::tests::{check_exp_f32, check_exp_f64};

    /// Whether the processor has AVX-512; where it has not, checks that the evaluator will not use
    /// these functions (the generic exponential, tested in `math`, is the one that runs).
    fn avx512() -> bool {
        let has = is_x86_feature_detected!("avx512f");
        if !has {
            eprintln!("no AVX-512 on this processor: the AVX-512 exponential is not tested here");
            assert!(!crate::cpu::isa::Level::detect(crate::tuning::IsaCap::Best).has_avx512());
        }
        has
    }

    #[test]
    fn within_an_ulp_of_libm() {
        if avx512() {
            check_exp_f64(|x| {
                let mut out = [0.0];
                unsafe { exp_f64(&[x], 1.0, &mut out) };
                out[0]
            });
            check_exp_f32(|x| {
                let mut out = [0.0];
                unsafe { exp_f32(&[x], 1.0, &mut out) };
                out[0]
            });
        }
    }

    /// Every length (full groups of four vectors, single vectors, the masked tail) gives what each
    /// value gives alone, and the scale is applied.
    #[test]
    fn tiles_of_any_length() {
        if !avx512() {
            return;
        }
        let x64: Vec<f64> = (0..300).map(|i| -30.0 + 60.0 * (i as f64 * 0.618_034).fract()).collect();
        let x32: Vec<f32> = x64.iter().map(|&v| v as f32).collect();
        for len in [0, 1, 7, 8, 9, 15, 16, 17, 31, 33, 63, 64, 65, 300] {
            let mut out = vec![f64::NAN; len + 1];
            unsafe { exp_f64(&x64[..len], -0.37, &mut out) };
            for (i, &v) in x64[..len].iter().enumerate() {
                let mut one = [0.0];
                unsafe { exp_f64(&[-0.37 * v], 1.0, &mut one) };
                assert_eq!(out[i].to_bits(), one[0].to_bits(), "length {len}, index {i}");
            }
            assert!(out[len].is_nan(), "length {len}: wrote past the end");
            let mut out = vec![f32::NAN; len + 1];
            unsafe { exp_f32(&x32[..len], -0.37, &mut out) };
            for (i, &v) in x32[..len].iter().enumerate() {
                let mut one = [0.0];
                unsafe { exp_f32(&[-0.37 * v], 1.0, &mut one) };
                assert_eq!(out[i].to_bits(), one[0].to_bits(), "length {len}, index {i}");
            }
            assert!(out[len].is_nan(), "length {len}: wrote past the end");
        }
    }
}

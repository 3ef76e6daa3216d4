//! Branch-free exponentials that the compiler can vectorise (libm's `exp` is a call per value, which
//! stops vectorisation of the whole loop around it).
//!
//! exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r by its Taylor polynomial
//! (degree 7 for f32, 13 for f64: truncation below half an ulp), r computed with a two-part ln 2
//! (Cody-Waite) so the reduction is exact enough. 2^n is built from the exponent bits in two halves,
//! so that results near overflow and in the subnormal range come out right.

// ln 2 is given with all the digits of its two-part split.
#![allow(clippy::excessive_precision)]

pub mod exp_avx512;

/// What an exponential needs: the bounds beyond which the result is 0 or infinity, the number whose
/// addition rounds to an integer, ln 2 in two parts, and the Taylor coefficients 1 / k!.
pub struct ExpConstants<T, const N: usize> {
    pub lo: T,
    pub hi: T,
    pub magic: T,
    pub ln2_hi: T,
    pub ln2_lo: T,
    pub coeffs: [T; N],
}

macro_rules! exp_impl {
    ($name:ident, $consts:ident, $t:ty, $bits:ty, $mantissa:expr, $bias:expr, $lo:expr, $hi:expr, $magic:expr,
     $ln2_hi:expr, $ln2_lo:expr, $degree:expr) => {
        pub const $consts: ExpConstants<$t, { $degree + 1 }> = ExpConstants {
            lo: $lo,
            hi: $hi,
            magic: $magic,
            ln2_hi: $ln2_hi,
            ln2_lo: $ln2_lo,
            coeffs: {
                let (mut c, mut fact, mut k) = ([0.0; $degree + 1], 1.0f64, 0);
                while k <= $degree {
                    c[k] = (1.0 / fact) as $t;
                    k += 1;
                    fact *= k as f64;
                }
                c
            },
        };

        /// `fma`: whether to fuse multiply-adds (only where the code is compiled with FMA enabled:
        /// elsewhere each one is a slow library call).
        #[inline(always)]
        pub fn $name(x: $t, fma: bool) -> $t {
            let madd = |a: $t, b: $t, c: $t| if fma { a.mul_add(b, c) } else { a * b + c };
            let k = &$consts;
            const LOG2E: $t = std::f64::consts::LOG2_E as $t;
            // Beyond these bounds the result is 0 or infinity anyway. A NaN x passes both tests
            // unchanged, makes r and p NaN, and so the result.
            let xc = if x < k.lo { k.lo } else { x };
            let xc = if xc > k.hi { k.hi } else { xc };
            // Adding the magic number rounds to the nearest integer and leaves it in the low bits.
            let t = madd(xc, LOG2E, k.magic);
            let n = t - k.magic;
            // n ln2_hi is exact, so the first step is exact with or without fusing.
            let r = madd(n, -k.ln2_lo, madd(n, -k.ln2_hi, xc));
            // Horner's scheme.
            let mut p: $t = k.coeffs[$degree];
            let mut i = $degree;
            while i > 0 {
                i -= 1;
                p = madd(p, r, k.coeffs[i]);
            }
            // nb = n + 2 bias >= 0 for every n in range; nb >> 1 = floor(n / 2) + bias is the biased
            // exponent of the first half, nb - (nb >> 1) that of the second.
            let nb = t.to_bits().wrapping_sub(<$t>::to_bits(k.magic)).wrapping_add(2 * $bias);
            let half = nb >> 1;
            let s1 = <$t>::from_bits(half << $mantissa);
            let s2 = <$t>::from_bits((nb - half) << $mantissa);
            p * s1 * s2
        }
    };
}

exp_impl!(exp_f32, EXP_F32, f32, u32, 23, 127, -104.0, 89.0, 12582912.0, 0.693359375, -2.121944400e-4, 7);
exp_impl!(
    exp_f64,
    EXP_F64,
    f64,
    u64,
    52,
    1023,
    -746.0,
    710.0,
    6755399441055744.0,
    0.693147180369123816490,
    1.90821492927058770002e-10,
    13
);

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    fn ulps32(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    #[test]
    fn exp_f32_matches_libm() {
        for fma in [false, true] {
            check_exp_f32(|x| exp_f32(x, fma));
        }
    }

    /// Within an ulp of the correctly rounded result, and right at the edges.
    pub(crate) fn check_exp_f32(exp_f32: impl Fn(f32) -> f32) {
        let mut worst = 0;
        let mut x = -103.0f32;
        while x < 88.7 {
            let (got, want) = (exp_f32(x), (x as f64).exp() as f32);
            if want.is_normal() {
                worst = worst.max(ulps32(got, want));
            } else {
                assert!((got - want).abs() <= f32::MIN_POSITIVE, "{x}: {got} vs {want}");
            }
            x += 0.000_731;
        }
        assert!(worst <= 1, "worst error {worst} ulps");
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(f32::INFINITY), f32::INFINITY);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp_f32(-200.0), 0.0);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn exp_f64_matches_libm() {
        for fma in [false, true] {
            check_exp_f64(|x| exp_f64(x, fma));
        }
    }

    /// Within 2.5e-16 of libm's result relatively, and right at the edges.
    pub(crate) fn check_exp_f64(exp_f64: impl Fn(f64) -> f64) {
        let mut worst = 0.0f64;
        let mut x = -700.0f64;
        while x < 709.0 {
            let (got, want) = (exp_f64(x), x.exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_37;
        }
        assert!(worst <= 2.5e-16, "worst relative error {worst:e}");
        assert_eq!(exp_f64(0.0), 1.0);
        assert_eq!(exp_f64(f64::INFINITY), f64::INFINITY);
        assert_eq!(exp_f64(f64::NEG_INFINITY), 0.0);
        assert!(exp_f64(-745.0) > 0.0 && exp_f64(-745.0) < 1e-320);
        assert!(exp_f64(f64::NAN).is_nan());
    }
}

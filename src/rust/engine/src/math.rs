//! Branch-free exponentials that the compiler can vectorise (libm's `exp` is a call per value, which
//! stops vectorisation of the whole loop around it).
//!
//! exp(x) = 2^n e^r with n = round(x / ln 2) and |r| <= ln(2)/2; e^r by its Taylor polynomial
//! (degree 7 for f32, 13 for f64: truncation below half an ulp), r computed with a two-part ln 2
//! (Cody-Waite) so the reduction is exact enough. 2^n is built from the exponent bits in two halves,
//! so that results near overflow and in the subnormal range come out right.

// ln 2 is given with all the digits of its two-part split.
#![allow(clippy::excessive_precision)]

macro_rules! exp_impl {
    ($name:ident, $t:ty, $bits:ty, $mantissa:expr, $bias:expr, $lo:expr, $hi:expr, $magic:expr,
     $ln2_hi:expr, $ln2_lo:expr, $degree:expr) => {
        /// `fma`: whether to fuse multiply-adds (only where the code is compiled with FMA enabled:
        /// elsewhere each one is a slow library call).
        #[inline(always)]
        pub fn $name(x: $t, fma: bool) -> $t {
            let madd = |a: $t, b: $t, c: $t| if fma { a.mul_add(b, c) } else { a * b + c };
            const LOG2E: $t = std::f64::consts::LOG2_E as $t;
            // Beyond these bounds the result is 0 or infinity anyway. A NaN x passes both tests
            // unchanged, makes r and p NaN, and so the result.
            let xc = if x < $lo { $lo } else { x };
            let xc = if xc > $hi { $hi } else { xc };
            // Adding the magic number rounds to the nearest integer and leaves it in the low bits.
            let t = madd(xc, LOG2E, $magic);
            let n = t - $magic;
            let r = (xc - n * $ln2_hi) - n * $ln2_lo;
            // Horner's scheme on the Taylor coefficients 1 / k!.
            const COEFFS: [$t; $degree + 1] = {
                let (mut c, mut fact, mut k) = ([0.0; $degree + 1], 1.0f64, 0);
                while k <= $degree {
                    c[k] = (1.0 / fact) as $t;
                    k += 1;
                    fact *= k as f64;
                }
                c
            };
            let mut p: $t = COEFFS[$degree];
            let mut k = $degree;
            while k > 0 {
                k -= 1;
                p = madd(p, r, COEFFS[k]);
            }
            // nb = n + 2 bias >= 0 for every n in range; nb >> 1 = floor(n / 2) + bias is the biased
            // exponent of the first half, nb - (nb >> 1) that of the second.
            let nb = t.to_bits().wrapping_sub(<$t>::to_bits($magic)).wrapping_add(2 * $bias);
            let half = nb >> 1;
            let s1 = <$t>::from_bits(half << $mantissa);
            let s2 = <$t>::from_bits((nb - half) << $mantissa);
            p * s1 * s2
        }
    };
}

exp_impl!(exp_f32, f32, u32, 23, 127, -104.0, 89.0, 12582912.0, 0.693359375, -2.121944400e-4, 7);
exp_impl!(
    exp_f64,
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
mod tests {
    use super::*;

    fn ulps32(a: f32, b: f32) -> i64 {
        (a.to_bits() as i64 - b.to_bits() as i64).abs()
    }

    #[test]
    fn exp_f32_matches_libm() {
        for fma in [false, true] {
            exp_f32_case(fma);
        }
    }

    fn exp_f32_case(fma: bool) {
        let mut worst = 0;
        let mut x = -103.0f32;
        while x < 88.7 {
            let (got, want) = (exp_f32(x, fma), (x as f64).exp() as f32);
            if want.is_normal() {
                worst = worst.max(ulps32(got, want));
            } else {
                assert!((got - want).abs() <= f32::MIN_POSITIVE, "{x}: {got} vs {want}");
            }
            x += 0.000_731;
        }
        assert!(worst <= 1, "worst error {worst} ulps");
        assert_eq!(exp_f32(0.0, fma), 1.0);
        assert_eq!(exp_f32(f32::INFINITY, fma), f32::INFINITY);
        assert_eq!(exp_f32(89.0, fma), f32::INFINITY);
        assert_eq!(exp_f32(f32::NEG_INFINITY, fma), 0.0);
        assert_eq!(exp_f32(-200.0, fma), 0.0);
        assert!(exp_f32(f32::NAN, fma).is_nan());
    }

    #[test]
    fn exp_f64_matches_libm() {
        for fma in [false, true] {
            exp_f64_case(fma);
        }
    }

    fn exp_f64_case(fma: bool) {
        let mut worst = 0.0f64;
        let mut x = -700.0f64;
        while x < 709.0 {
            let (got, want) = (exp_f64(x, fma), x.exp());
            worst = worst.max(((got - want) / want).abs());
            x += 0.001_37;
        }
        assert!(worst <= 2.5e-16, "worst relative error {worst:e}");
        assert_eq!(exp_f64(0.0, fma), 1.0);
        assert_eq!(exp_f64(f64::INFINITY, fma), f64::INFINITY);
        assert_eq!(exp_f64(f64::NEG_INFINITY, fma), 0.0);
        assert!(exp_f64(-745.0, fma) > 0.0 && exp_f64(-745.0, fma) < 1e-320);
        assert!(exp_f64(f64::NAN, fma).is_nan());
    }
}

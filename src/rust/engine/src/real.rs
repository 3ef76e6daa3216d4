//! The floating-point types the evaluator is generic over (f32 and f64), with the few operations
//! the formula language needs. Written here rather than pulled from a crate: it is small and fixed.

use std::borrow::Cow;
use std::fmt::Debug;
use std::ops::{Add, Div, Mul, Neg, Sub};

/// How inputs are stored (on a device; on the CPU, float16 inputs are rounded to what it keeps):
/// R's doubles rounded to this type.
pub trait Stored: Copy + Send + Sync {
    /// float16 storage (`u16` bits), computed in float32.
    const HALF: bool = false;
    fn from_f64(x: f64) -> Self;
}

impl Stored for f64 {
    fn from_f64(x: f64) -> f64 {
        x
    }
}

impl Stored for f32 {
    fn from_f64(x: f64) -> f32 {
        x as f32
    }
}

/// float16 bits.
impl Stored for u16 {
    const HALF: bool = true;
    fn from_f64(x: f64) -> u16 {
        half::f16::from_f64(x).to_bits()
    }
}

pub trait Real:
    Copy
    + Send
    + Sync
    + Debug
    + PartialOrd
    + Default
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Div<Output = Self>
    + Neg<Output = Self>
    + 'static
{
    const ZERO: Self;
    const ONE: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    const ZERO_SLICE: &'static [Self];
    fn from_f64(x: f64) -> Self;
    fn to_f64(self) -> f64;
    /// `fma`: see `math::exp_f32`.
    fn exp(self, fma: bool) -> Self;
    /// `out[i] = exp(scale * x[i])` with AVX-512, the same bits as `exp`.
    ///
    /// # Safety
    /// The processor must support AVX-512F.
    #[cfg(target_arch = "x86_64")]
    unsafe fn exp_tile_avx512(x: &[Self], scale: Self, out: &mut [Self]);
    /// `self * a + b`, rounded once where `fma` (see `math::exp_f32`).
    fn madd(self, a: Self, b: Self, fma: bool) -> Self;
    fn ln(self) -> Self;
    fn sin(self) -> Self;
    fn cos(self) -> Self;
    fn asin(self) -> Self;
    fn acos(self) -> Self;
    fn atan(self) -> Self;
    fn atan2(self, x: Self) -> Self;
    fn sqrt(self) -> Self;
    fn abs(self) -> Self;
    fn floor(self) -> Self;
    fn round(self) -> Self;
    fn powi(self, n: i32) -> Self;
    fn powf(self, y: Self) -> Self;
    fn is_nan(self) -> bool;
    fn max(self, other: Self) -> Self;
    fn min(self, other: Self) -> Self;
    /// R hands over doubles: borrowed as they are for f64, converted for f32.
    fn from_f64_slice(x: &[f64]) -> Cow<'_, [Self]>;
}

macro_rules! impl_real {
    ($t:ty, $exp:path, $exp_tile:path, $convert:expr) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const ONE: Self = 1.0;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const ZERO_SLICE: &'static [Self] = &[0.0];
            #[inline(always)]
            fn from_f64(x: f64) -> Self {
                x as $t
            }
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn exp(self, fma: bool) -> Self {
                $exp(self, fma)
            }
            #[cfg(target_arch = "x86_64")]
            unsafe fn exp_tile_avx512(x: &[Self], scale: Self, out: &mut [Self]) {
                // SAFETY: the caller checked the processor.
                unsafe { $exp_tile(x, scale, out) }
            }
            #[inline(always)]
            fn madd(self, a: Self, b: Self, fma: bool) -> Self {
                if fma {
                    self.mul_add(a, b)
                } else {
                    self * a + b
                }
            }
            #[inline(always)]
            fn ln(self) -> Self {
                <$t>::ln(self)
            }
            #[inline(always)]
            fn sin(self) -> Self {
                <$t>::sin(self)
            }
            #[inline(always)]
            fn cos(self) -> Self {
                <$t>::cos(self)
            }
            #[inline(always)]
            fn asin(self) -> Self {
                <$t>::asin(self)
            }
            #[inline(always)]
            fn acos(self) -> Self {
                <$t>::acos(self)
            }
            #[inline(always)]
            fn atan(self) -> Self {
                <$t>::atan(self)
            }
            #[inline(always)]
            fn atan2(self, x: Self) -> Self {
                <$t>::atan2(self, x)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn floor(self) -> Self {
                <$t>::floor(self)
            }
            #[inline(always)]
            fn round(self) -> Self {
                <$t>::round(self)
            }
            #[inline(always)]
            fn powi(self, n: i32) -> Self {
                <$t>::powi(self, n)
            }
            #[inline(always)]
            fn powf(self, y: Self) -> Self {
                <$t>::powf(self, y)
            }
            #[inline(always)]
            fn is_nan(self) -> bool {
                <$t>::is_nan(self)
            }
            /// NaN-propagating, unlike `f64::max`.
            #[inline(always)]
            fn max(self, other: Self) -> Self {
                if self > other || self.is_nan() {
                    self
                } else {
                    other
                }
            }
            /// NaN-propagating, unlike `f64::min`.
            #[inline(always)]
            fn min(self, other: Self) -> Self {
                if self < other || self.is_nan() {
                    self
                } else {
                    other
                }
            }
            fn from_f64_slice(x: &[f64]) -> Cow<'_, [Self]> {
                $convert(x)
            }
        }
    };
}
impl_real!(f32, crate::math::exp_f32, crate::math::exp_avx512::exp_f32, |x: &[f64]| Cow::Owned(to_f32(x)));
impl_real!(f64, crate::math::exp_f64, crate::math::exp_avx512::exp_f64, Cow::Borrowed);

/// Rounds doubles to floats, on every core for large inputs (the conversion of R's doubles is on
/// the path of every float32 call).
fn to_f32(x: &[f64]) -> Vec<f32> {
    let mut out = vec![0f32; x.len()];
    crate::parallel::map(x, &mut out, |v| v as f32);
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn conversion_to_f32_is_the_same_in_parallel() {
        let x: Vec<f64> = (0..300_001).map(|k| (k as f64).sqrt() * 1.000_000_1).collect();
        let y = super::to_f32(&x);
        assert!(x.iter().zip(&y).all(|(&a, &b)| a as f32 == b));
    }
}

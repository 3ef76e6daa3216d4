//! One tight loop per operation of the graph, over the lanes of a tile.

use super::lanes::{at, copy, fold1, map1, map2, mul_add, sum_components, Arg, Lane};
use crate::formula::Op;
use crate::real::Real;

fn bool_to<T: Real>(b: bool) -> T {
    if b {
        T::ONE
    } else {
        T::ZERO
    }
}

/// SqNorm2(a - b) in one pass, without storing the difference.
#[inline(always)]
pub fn sq_dist<T: Real>(a: &Arg<T>, b: &Arg<T>, out: &mut [T], len: usize, fma: bool) {
    sum_components(out, len, a.dim.max(b.dim), a, b, |s, x, y| (x - y).madd(x - y, s, fma));
}

/// Exp(s * a) in one pass, with `s` one number per tile; Exp(-a) where `s` is None. `avx512`: whether
/// the processor has AVX-512 (see `math::exp_avx512`).
#[inline(always)]
pub fn scaled_exp<T: Real>(a: &Arg<T>, s: Option<&Arg<T>>, out: &mut [T], len: usize, fma: bool, avx512: bool) {
    let scale = match s.map(|s| s.lane(0, 1)) {
        None => -T::ONE,
        Some(Lane::Scalar(s)) => s,
        Some(Lane::Vector(_)) => unreachable!("the scale of a fused Exp is one number per tile"),
    };
    match a.lane(0, len) {
        // SAFETY: `avx512` says the processor has it.
        #[cfg(target_arch = "x86_64")]
        Lane::Vector(x) if avx512 => unsafe { T::exp_tile_avx512(x, scale, &mut out[..len]) },
        lane => map1(out, len, lane, |x| (scale * x).exp(fma)),
    }
}

/// Evaluates `op` on `args` into `out` (`dim` components of `len` values each, component-major).
/// `scratch` holds at least `len` values, for the operations that need a running value; `fma` says
/// whether multiply-adds may be fused. Each group of operations is a function of its own, inlined
/// (this runs once per node and tile, inside `cpu::Compute`).
#[inline(always)]
pub fn eval<T: Real>(op: Op, args: &[Arg<T>; 3], out: &mut [T], dim: usize, len: usize, scratch: &mut [T], fma: bool) {
    let [a, b, _] = args;
    match op {
        Op::Input(_) => unreachable!("inputs are viewed, not evaluated"),
        Op::Constant(bits) => out[..len].fill(T::from_f64(f64::from_bits(bits))),
        Op::Add
        | Op::Sub
        | Op::Mul
        | Op::Div
        | Op::Atan2
        | Op::Powf
        | Op::Equal
        | Op::NotEqual
        | Op::LessThan
        | Op::LessOrEqual => binary(op, a, b, out, dim, len),
        Op::Clamp | Op::IfElse | Op::Mod => ternary(op, args, out, dim, len),
        Op::Sum | Op::SqNorm2 | Op::Dot | Op::Max | Op::Min | Op::ArgMax | Op::ArgMin => {
            over_components(op, a, b, out, len, scratch, fma)
        }
        Op::Elem(..)
        | Op::ElemT(..)
        | Op::Extract(..)
        | Op::ExtractT(..)
        | Op::Concat
        | Op::OneHot(..)
        | Op::SumT(..) => reshape(op, a, b, out, dim, len),
        Op::MatVecMult | Op::VecMatMult | Op::TensorProd => linear_algebra(op, a, b, out, dim, len, fma),
        _ => unary(op, a, out, dim, len, fma),
    }
}

/// `f` of each value of `a`, component by component.
macro_rules! each_component {
    ($out:expr, $a:expr, $dim:expr, $len:expr, $f:expr) => {
        for k in 0..$dim {
            map1(&mut $out[k * $len..], $len, $a.lane(k, $len), $f)
        }
    };
}

/// The element-wise operations of one argument.
#[inline(always)]
fn unary<T: Real>(op: Op, a: &Arg<T>, out: &mut [T], dim: usize, len: usize, fma: bool) {
    macro_rules! unary {
        ($f:expr) => {
            each_component!(out, a, dim, len, $f)
        };
    }
    match op {
        Op::Neg => unary!(|x: T| -x),
        Op::Abs => unary!(|x: T| x.abs()),
        Op::Acos => unary!(|x: T| x.acos()),
        Op::Asin => unary!(|x: T| x.asin()),
        Op::Atan => unary!(|x: T| x.atan()),
        Op::Cos => unary!(|x: T| x.cos()),
        Op::Sin => unary!(|x: T| x.sin()),
        Op::Exp => unary!(|x: T| x.exp(fma)),
        Op::Log => unary!(|x: T| x.ln()),
        Op::Floor => unary!(|x: T| x.floor()),
        Op::Inv => unary!(|x: T| T::ONE / x),
        Op::ReLU => unary!(|x: T| if x < T::ZERO { T::ZERO } else { x }),
        // KeOps' convention: Rsqrt(0) = 0, which makes Normalize(0) = 0.
        Op::Rsqrt => unary!(|x: T| if x == T::ZERO { T::ZERO } else { T::ONE / x.sqrt() }),
        Op::Sign => unary!(|x: T| if x > T::ZERO {
            T::ONE
        } else if x < T::ZERO {
            -T::ONE
        } else {
            x
        }),
        Op::SinXDivX => unary!(|x: T| if x == T::ZERO { T::ONE } else { x.sin() / x }),
        Op::Sqrt => unary!(|x: T| x.sqrt()),
        Op::Square => unary!(|x: T| x * x),
        Op::Step => unary!(|x: T| if x >= T::ZERO {
            T::ONE
        } else if x < T::ZERO {
            T::ZERO
        } else {
            x
        }),
        Op::XLogX => unary!(|x: T| if x == T::ZERO { T::ZERO } else { x * x.ln() }),
        Op::Round(0) => unary!(|x: T| x.round()),
        Op::Round(d) => {
            let p = T::from_f64(10f64.powi(d));
            unary!(|x: T| (x * p).round() / p)
        }
        Op::Pow(n) => unary!(|x: T| x.powi(n)),
        Op::ClampInt(lo, hi) => {
            let (lo, hi) = (T::from_f64(lo as f64), T::from_f64(hi as f64));
            unary!(|x: T| if x < lo {
                lo
            } else if x > hi {
                hi
            } else {
                x
            })
        }
        _ => unreachable!("not an element-wise operation of one argument: {op:?}"),
    }
}

/// The element-wise operations of two arguments.
#[inline(always)]
fn binary<T: Real>(op: Op, a: &Arg<T>, b: &Arg<T>, out: &mut [T], dim: usize, len: usize) {
    macro_rules! binary {
        ($f:expr) => {
            for k in 0..dim {
                map2(&mut out[k * len..], len, a.lane(k, len), b.lane(k, len), $f)
            }
        };
    }
    match op {
        Op::Add => binary!(|x: T, y: T| x + y),
        Op::Sub => binary!(|x: T, y: T| x - y),
        Op::Mul => binary!(|x: T, y: T| x * y),
        Op::Div => binary!(|x: T, y: T| x / y),
        Op::Atan2 => binary!(|x: T, y: T| x.atan2(y)),
        Op::Powf => binary!(|x: T, y: T| x.powf(y)),
        Op::Equal => binary!(|x: T, y: T| bool_to(x == y)),
        Op::NotEqual => binary!(|x: T, y: T| bool_to(x != y)),
        Op::LessThan => binary!(|x: T, y: T| bool_to(x < y)),
        Op::LessOrEqual => binary!(|x: T, y: T| bool_to(x <= y)),
        _ => unreachable!("not an element-wise operation of two arguments: {op:?}"),
    }
}

/// The element-wise operations of three arguments (Clamp, IfElse, Mod).
#[inline(always)]
fn ternary<T: Real>(op: Op, args: &[Arg<T>; 3], out: &mut [T], dim: usize, len: usize) {
    let [a, b, c] = args;
    match op {
        Op::Clamp | Op::IfElse | Op::Mod => {
            for k in 0..dim {
                let (x, y, z) = (a.lane(k, len), b.lane(k, len), c.lane(k, len));
                for t in 0..len {
                    let (x, y, z) = (at(x, t), at(y, t), at(z, t));
                    out[k * len + t] = match op {
                        Op::Clamp => {
                            if x < y {
                                y
                            } else if x > z {
                                z
                            } else {
                                x
                            }
                        }
                        Op::IfElse => {
                            if x >= T::ZERO {
                                y
                            } else {
                                z
                            }
                        }
                        _ => x - y * ((x - z) / y).floor(),
                    };
                }
            }
        }
        _ => unreachable!("not an element-wise operation of three arguments: {op:?}"),
    }
}

/// The reductions over the components of a vector (Sum, SqNorm2, Dot, Max, Min, ArgMax, ArgMin).
#[inline(always)]
fn over_components<T: Real>(op: Op, a: &Arg<T>, b: &Arg<T>, out: &mut [T], len: usize, scratch: &mut [T], fma: bool) {
    match op {
        Op::Sum => sum_components(out, len, a.dim, a, &Arg::zero(), |s, x, _| s + x),
        Op::SqNorm2 => sum_components(out, len, a.dim, a, &Arg::zero(), |s, x, _| x.madd(x, s, fma)),
        Op::Dot => sum_components(out, len, a.dim.max(b.dim), a, b, |s, x, y| x.madd(y, s, fma)),
        Op::Max | Op::Min => {
            copy(out, len, a.lane(0, len));
            for k in 1..a.dim {
                if op == Op::Max {
                    fold1(out, len, a.lane(k, len), |m, x| m.max(x));
                } else {
                    fold1(out, len, a.lane(k, len), |m, x| m.min(x));
                }
            }
        }
        Op::ArgMax | Op::ArgMin => {
            // Position (0-based, as KeOps) of the first extreme component; NaN counts as extreme.
            let best = &mut scratch[..len];
            copy(best, len, a.lane(0, len));
            out[..len].fill(T::ZERO);
            for k in 1..a.dim {
                let l = a.lane(k, len);
                let pos = T::from_f64(k as f64);
                for t in 0..len {
                    let x = at(l, t);
                    let better = if op == Op::ArgMax { x > best[t] } else { x < best[t] };
                    if better || (x.is_nan() && !best[t].is_nan()) {
                        best[t] = x;
                        out[t] = pos;
                    }
                }
            }
        }
        _ => unreachable!("not a reduction over components: {op:?}"),
    }
}

/// The operations that move components (Elem, ElemT, Extract, ExtractT, Concat, OneHot, SumT).
#[inline(always)]
fn reshape<T: Real>(op: Op, a: &Arg<T>, b: &Arg<T>, out: &mut [T], dim: usize, len: usize) {
    match op {
        Op::Elem(m) => copy(out, len, a.lane(m, len)),
        Op::ElemT(_, m) => {
            out[..dim * len].fill(T::ZERO);
            copy(&mut out[m * len..], len, a.lane(0, len));
        }
        Op::Extract(start, _) => {
            for k in 0..dim {
                copy(&mut out[k * len..], len, a.lane(start + k, len));
            }
        }
        Op::ExtractT(start, _) => {
            out[..dim * len].fill(T::ZERO);
            for k in 0..a.dim {
                copy(&mut out[(start + k) * len..], len, a.lane(k, len));
            }
        }
        Op::Concat => {
            for k in 0..a.dim {
                copy(&mut out[k * len..], len, a.lane(k, len));
            }
            for k in 0..b.dim {
                copy(&mut out[(a.dim + k) * len..], len, b.lane(k, len));
            }
        }
        Op::OneHot(_) => {
            let x = a.lane(0, len);
            for k in 0..dim {
                let pos = T::from_f64(k as f64);
                map1(&mut out[k * len..], len, x, |v| bool_to(v.round() == pos));
            }
        }
        Op::SumT(_) => {
            for k in 0..dim {
                copy(&mut out[k * len..], len, a.lane(0, len));
            }
        }
        _ => unreachable!("not an operation on components: {op:?}"),
    }
}

/// Products of matrices and vectors, and the tensor product.
#[inline(always)]
fn linear_algebra<T: Real>(op: Op, a: &Arg<T>, b: &Arg<T>, out: &mut [T], dim: usize, len: usize, fma: bool) {
    match op {
        Op::MatVecMult => {
            // A (n x p, column-major) times x (p): out_k = sum_l A[k + n l] x_l.
            let (n, p) = (dim, b.dim);
            for k in 0..n {
                let o = &mut out[k * len..];
                o[..len].fill(T::ZERO);
                for l in 0..p {
                    mul_add(o, len, a.lane(k + n * l, len), b.lane(l, len), fma);
                }
            }
        }
        Op::VecMatMult => {
            // x (n) times A (n x p, column-major): out_l = sum_k x_k A[k + n l].
            let (n, p) = (a.dim, dim);
            for l in 0..p {
                let o = &mut out[l * len..];
                o[..len].fill(T::ZERO);
                for k in 0..n {
                    mul_add(o, len, a.lane(k, len), b.lane(k + n * l, len), fma);
                }
            }
        }
        Op::TensorProd => {
            // as.vector(outer(a, b)): out[k + n l] = a_k b_l.
            let n = a.dim;
            for l in 0..b.dim {
                for k in 0..n {
                    map2(&mut out[(k + n * l) * len..], len, a.lane(k, len), b.lane(l, len), |x, y| x * y);
                }
            }
        }

        _ => unreachable!("not a product of matrices: {op:?}"),
    }
}

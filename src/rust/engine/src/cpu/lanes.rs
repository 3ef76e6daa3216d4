//! Views of the values a node takes over a tile, in structure-of-arrays layout: component `c` of a
//! node is either one value shared by the whole tile (it does not depend on the reduced index) or a
//! contiguous run of `len` values, one per reduced index of the tile.

use crate::real::Real;

/// One component over a tile.
#[derive(Clone, Copy)]
pub enum Lane<'a, T> {
    Scalar(T),
    Vector(&'a [T]),
}

/// All components of a node over a tile.
#[derive(Clone, Copy)]
pub struct Arg<'a, T> {
    pub data: &'a [T],
    pub dim: usize,
    /// Distance between two components in `data`.
    pub stride: usize,
    /// Whether the node varies along the reduced index.
    pub vector: bool,
}

impl<'a, T: Real> Arg<'a, T> {
    pub const EMPTY: Arg<'static, T> = Arg { data: &[], dim: 0, stride: 0, vector: false };

    /// The scalar 0, for the second argument of one-argument sums.
    #[inline(always)]
    pub fn zero() -> Arg<'static, T> {
        Arg { data: T::ZERO_SLICE, dim: 1, stride: 1, vector: false }
    }

    /// Component `c`; a dimension-1 argument is broadcast to every component.
    #[inline(always)]
    pub fn lane(&self, c: usize, len: usize) -> Lane<'a, T> {
        let c = if self.dim == 1 { 0 } else { c };
        let start = c * self.stride;
        if self.vector {
            Lane::Vector(&self.data[start..start + len])
        } else {
            Lane::Scalar(self.data[start])
        }
    }
}

#[inline(always)]
pub fn map1<T: Real>(out: &mut [T], len: usize, a: Lane<T>, f: impl Fn(T) -> T) {
    match a {
        Lane::Vector(x) => {
            for (o, &x) in out[..len].iter_mut().zip(x) {
                *o = f(x);
            }
        }
        Lane::Scalar(x) => out[..len].fill(f(x)),
    }
}

#[inline(always)]
pub fn map2<T: Real>(out: &mut [T], len: usize, a: Lane<T>, b: Lane<T>, f: impl Fn(T, T) -> T) {
    let out = &mut out[..len];
    match (a, b) {
        (Lane::Vector(x), Lane::Vector(y)) => {
            for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
                *o = f(x, y);
            }
        }
        (Lane::Scalar(x), Lane::Vector(y)) => {
            for (o, &y) in out.iter_mut().zip(y) {
                *o = f(x, y);
            }
        }
        (Lane::Vector(x), Lane::Scalar(y)) => {
            for (o, &x) in out.iter_mut().zip(x) {
                *o = f(x, y);
            }
        }
        (Lane::Scalar(x), Lane::Scalar(y)) => out.fill(f(x, y)),
    }
}

/// `out = f(out, a)`, for running reductions over components.
#[inline(always)]
pub fn fold1<T: Real>(out: &mut [T], len: usize, a: Lane<T>, f: impl Fn(T, T) -> T) {
    match a {
        Lane::Vector(x) => {
            for (o, &x) in out[..len].iter_mut().zip(x) {
                *o = f(*o, x);
            }
        }
        Lane::Scalar(x) => {
            for o in out[..len].iter_mut() {
                *o = f(*o, x);
            }
        }
    }
}

/// `out += a * b`.
#[inline(always)]
pub fn mul_add<T: Real>(out: &mut [T], len: usize, a: Lane<T>, b: Lane<T>, fma: bool) {
    let out = &mut out[..len];
    match (a, b) {
        (Lane::Vector(x), Lane::Vector(y)) => {
            for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
                *o = x.madd(y, *o, fma);
            }
        }
        (Lane::Scalar(s), Lane::Vector(v)) | (Lane::Vector(v), Lane::Scalar(s)) => {
            for (o, &v) in out.iter_mut().zip(v) {
                *o = s.madd(v, *o, fma);
            }
        }
        (Lane::Scalar(x), Lane::Scalar(y)) => {
            let p = x * y;
            for o in out.iter_mut() {
                *o = *o + p;
            }
        }
    }
}

#[inline(always)]
pub fn copy<T: Real>(out: &mut [T], len: usize, a: Lane<T>) {
    match a {
        Lane::Vector(x) => out[..len].copy_from_slice(x),
        Lane::Scalar(x) => out[..len].fill(x),
    }
}

/// Value `t` of a lane (slow path for the rare three-argument operations).
#[inline(always)]
pub fn at<T: Real>(a: Lane<T>, t: usize) -> T {
    match a {
        Lane::Vector(x) => x[t],
        Lane::Scalar(x) => x,
    }
}

/// `out[t] = sum over components c of f(a_c[t], b_c[t])`, e.g. a squared distance, with `add(s, x, y)`
/// returning `s + f(x, y)`, summed in the order of the components. No intermediate vector is stored,
/// and the common case of a value per tile against a value per index (x_i - y_j) takes up to four
/// components per pass over the output.
#[inline(always)]
pub fn sum_components<T: Real>(
    out: &mut [T],
    len: usize,
    dim: usize,
    a: &Arg<T>,
    b: &Arg<T>,
    add: impl Fn(T, T, T) -> T,
) {
    let out = &mut out[..len];
    let mut c = 0;
    while c < dim {
        let first = c == 0;
        // Components c .. c + group: a value per tile against a value per index, in either order.
        let pairing = |k: usize| match (a.lane(k, len), b.lane(k, len)) {
            (Lane::Scalar(s), Lane::Vector(v)) => Some((s, v, true)),
            (Lane::Vector(v), Lane::Scalar(s)) => Some((s, v, false)),
            _ => None,
        };
        let order = pairing(c).map(|p| p.2);
        let group = (c..dim.min(c + 4)).take_while(|&k| pairing(k).map(|p| p.2) == order && order.is_some()).count();
        let column = |k: usize| pairing(c + k).map(|(s, v, _)| (s, v)).unwrap();
        let scalar_first = order == Some(true);
        match group {
            4 => pass::<T, 4>(out, first, std::array::from_fn(column), scalar_first, &add),
            3 => pass::<T, 3>(out, first, std::array::from_fn(column), scalar_first, &add),
            2 => pass::<T, 2>(out, first, std::array::from_fn(column), scalar_first, &add),
            _ => {
                one_component(out, first, a.lane(c, len), b.lane(c, len), &add);
                c += 1;
                continue;
            }
        }
        c += group;
    }
}

/// `out[t] (+)= sum over g of add(., s_g, v_g[t])` (arguments swapped unless `scalar_first`), in
/// one pass.
#[inline(always)]
fn pass<T: Real, const G: usize>(
    out: &mut [T],
    first: bool,
    columns: [(T, &[T]); G],
    scalar_first: bool,
    add: &impl Fn(T, T, T) -> T,
) {
    if scalar_first {
        pass_in_order(out, first, columns, add);
    } else {
        pass_in_order(out, first, columns, &|acc, s, v| add(acc, v, s));
    }
}

#[inline(always)]
fn pass_in_order<T: Real, const G: usize>(
    out: &mut [T],
    first: bool,
    columns: [(T, &[T]); G],
    add: &impl Fn(T, T, T) -> T,
) {
    let n = out.len();
    let s = columns.map(|(s, _)| s);
    let v = columns.map(|(_, v)| &v[..n]);
    let sum = |mut acc: T, t: usize| {
        for g in 0..G {
            acc = add(acc, s[g], v[g][t]);
        }
        acc
    };
    // Two loops rather than a test in one: each vectorises on its own.
    if first {
        for (t, o) in out.iter_mut().enumerate() {
            *o = sum(T::ZERO, t);
        }
    } else {
        for (t, o) in out.iter_mut().enumerate() {
            *o = sum(*o, t);
        }
    }
}

#[inline(always)]
fn one_component<T: Real>(out: &mut [T], first: bool, a: Lane<T>, b: Lane<T>, add: &impl Fn(T, T, T) -> T) {
    if first {
        out.fill(T::ZERO);
    }
    match (a, b) {
        (Lane::Vector(x), Lane::Vector(y)) => {
            for ((o, &x), &y) in out.iter_mut().zip(x).zip(y) {
                *o = add(*o, x, y);
            }
        }
        (Lane::Scalar(x), Lane::Vector(y)) => {
            for (o, &y) in out.iter_mut().zip(y) {
                *o = add(*o, x, y);
            }
        }
        (Lane::Vector(x), Lane::Scalar(y)) => {
            for (o, &x) in out.iter_mut().zip(x) {
                *o = add(*o, x, y);
            }
        }
        (Lane::Scalar(x), Lane::Scalar(y)) => {
            for o in out.iter_mut() {
                *o = add(*o, x, y);
            }
        }
    }
}

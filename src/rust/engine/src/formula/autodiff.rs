//! Symbolic differentiation: `Grad(F, v, e)` is the formula of d/dv <F, e>, the gradient of F
//! with respect to the variable v contracted with e (a vector-Jacobian product), built in the graph
//! by reverse accumulation over F's nodes. Zero contributions are never built (piecewise-constant
//! operations stop the flow) and products by 1 are skipped, so gradients stay close in size to F.

use super::{Graph, NodeId, Op};

/// Graph building with the dimensions of element-wise broadcasting and a little simplification.
struct Builder<'a> {
    g: &'a mut Graph,
}

impl Builder<'_> {
    fn dim(&self, a: NodeId) -> usize {
        self.g.dim(a)
    }
    fn constant_of(&self, a: NodeId) -> Option<f64> {
        self.g.nodes[a].op.constant_value()
    }
    fn c(&mut self, x: f64) -> NodeId {
        self.g.add(Op::constant(x), vec![], 1)
    }
    fn op(&mut self, op: Op, args: Vec<NodeId>) -> NodeId {
        let dim = args.iter().map(|&a| self.dim(a)).max().unwrap_or(1);
        self.g.add(op, args, dim)
    }
    fn mul(&mut self, a: NodeId, b: NodeId) -> NodeId {
        match (self.constant_of(a), self.constant_of(b)) {
            (Some(x), Some(y)) => self.c(x * y),
            (Some(1.0), _) => b,
            (_, Some(1.0)) => a,
            _ => self.op(Op::Mul, vec![a, b]),
        }
    }
    fn add(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.op(Op::Add, vec![a, b])
    }
    fn sub(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.op(Op::Sub, vec![a, b])
    }
    fn div(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.op(Op::Div, vec![a, b])
    }
    fn neg(&mut self, a: NodeId) -> NodeId {
        match (self.g.nodes[a].op, self.constant_of(a)) {
            (_, Some(x)) => self.c(-x),
            (Op::Neg, _) => self.g.nodes[a].args[0],
            _ => self.op(Op::Neg, vec![a]),
        }
    }
    fn unary(&mut self, op: Op, a: NodeId) -> NodeId {
        let d = self.dim(a);
        self.g.add(op, vec![a], d)
    }
    fn with_dim(&mut self, op: Op, args: Vec<NodeId>, dim: usize) -> NodeId {
        self.g.add(op, args, dim)
    }
    /// A contribution of dimension `d` to an argument of dimension 1 (it was broadcast): summed.
    fn fit(&mut self, contribution: NodeId, arg_dim: usize) -> NodeId {
        if arg_dim == 1 && self.dim(contribution) > 1 {
            self.with_dim(Op::Sum, vec![contribution], 1)
        } else {
            contribution
        }
    }
}

/// The node of d/dv <f, e> for the input at position `v`, or `None` when f does not depend on it
/// (a zero gradient). `e` has the dimension of `f`.
pub fn grad(graph: &mut Graph, f: NodeId, v: usize, e: NodeId) -> Option<NodeId> {
    let n = graph.nodes.len();
    // Only nodes on a path from the variable to f carry a gradient.
    let mut depends = vec![false; n];
    for id in 0..=f {
        depends[id] = match graph.nodes[id].op {
            Op::Input(p) => p == v,
            _ => graph.nodes[id].args.iter().any(|&a| depends[a]),
        };
    }
    if !depends[f] {
        return None;
    }
    let mut adjoint: Vec<Option<NodeId>> = vec![None; n];
    adjoint[f] = Some(e);
    let mut b = Builder { g: graph };
    for id in (0..=f).rev() {
        let Some(g) = adjoint[id] else { continue };
        if let Op::Input(_) = b.g.nodes[id].op {
            continue;
        }
        let node = b.g.nodes[id].clone();
        for (k, &arg) in node.args.iter().enumerate() {
            if !depends[arg] {
                continue;
            }
            let Some(c) = contribution(&mut b, id, &node.op, &node.args, k, g) else { continue };
            let c = b.fit(c, b.dim(arg));
            adjoint[arg] = Some(match adjoint[arg] {
                Some(prev) => b.add(prev, c),
                None => c,
            });
        }
    }
    b.g.nodes.iter().position(|nd| nd.op == Op::Input(v)).and_then(|input| adjoint[input])
}

/// The vector-Jacobian product of `op` (node `out`) for its argument `k`, given the adjoint `g` of
/// the output; `None` where it is zero. Each group of operations has its rules below.
fn contribution(b: &mut Builder, out: NodeId, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> Option<NodeId> {
    Some(match *op {
        Op::Input(_) | Op::Constant(_) => return None,
        // Piecewise constant: no gradient.
        Op::Floor | Op::Round(_) | Op::Sign | Op::Step | Op::Equal | Op::NotEqual | Op::LessThan | Op::LessOrEqual => {
            return None
        }
        Op::ArgMax | Op::ArgMin | Op::OneHot(_) => return None,
        Op::Neg | Op::Add | Op::Sub | Op::Mul | Op::Div => arithmetic(b, out, op, args, k, g),
        Op::Exp | Op::Log | Op::XLogX | Op::Sqrt | Op::Rsqrt | Op::Inv | Op::Square | Op::Pow(_) | Op::Powf => {
            powers_and_logarithms(b, out, op, args, k, g)
        }
        Op::Sin | Op::Cos | Op::SinXDivX | Op::Atan | Op::Asin | Op::Acos | Op::Atan2 => {
            trigonometry(b, out, op, args, k, g)
        }
        Op::Abs | Op::ReLU | Op::ClampInt(..) | Op::Clamp | Op::IfElse | Op::Mod => {
            return piecewise(b, op, args, k, g)
        }
        Op::Sum | Op::SqNorm2 | Op::Dot | Op::Max | Op::Min => component_reduction(b, op, args, k, g),
        Op::SumT(_) | Op::Elem(_) | Op::ElemT(..) | Op::Extract(..) | Op::ExtractT(..) | Op::Concat => {
            reshaping(b, op, args, k, g)
        }
        Op::MatVecMult | Op::VecMatMult | Op::TensorProd => linear_algebra(b, op, args, k, g),
    })
}

/// Neg, Add, Sub, Mul, Div.
fn arithmetic(b: &mut Builder, out: NodeId, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> NodeId {
    match *op {
        Op::Neg => b.neg(g),
        Op::Add => g,
        Op::Sub => {
            if k == 0 {
                g
            } else {
                b.neg(g)
            }
        }
        Op::Mul => b.mul(g, args[1 - k]),
        Op::Div => {
            let d = args[1];
            if k == 0 {
                b.div(g, d)
            } else {
                // -g a / d^2 = -g out / d
                let t = b.div(out, d);
                let t = b.mul(g, t);
                b.neg(t)
            }
        }
        _ => unreachable!("{op:?} is not an arithmetic operation"),
    }
}

/// Exp, Log, XLogX, Sqrt, Rsqrt, Inv, Square, Pow, Powf.
fn powers_and_logarithms(b: &mut Builder, out: NodeId, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> NodeId {
    let a = args[0];
    match *op {
        Op::Exp => b.mul(g, out),
        Op::Log => b.div(g, a),
        Op::XLogX => {
            let l = b.unary(Op::Log, a);
            let one = b.c(1.0);
            let t = b.add(l, one);
            b.mul(g, t)
        }
        Op::Sqrt => {
            let two = b.c(2.0);
            let t = b.mul(two, out);
            b.div(g, t)
        }
        Op::Rsqrt => {
            // d x^(-1/2) = -1/2 x^(-3/2) = -1/2 out / x
            let h = b.c(-0.5);
            let t = b.div(out, a);
            let t = b.mul(h, t);
            b.mul(g, t)
        }
        Op::Inv => {
            let t = b.mul(out, out);
            let t = b.mul(g, t);
            b.neg(t)
        }
        Op::Square => {
            let two = b.c(2.0);
            let t = b.mul(two, a);
            b.mul(g, t)
        }
        Op::Pow(n) => {
            let c = b.c(n as f64);
            let p = if n == 1 { b.c(1.0) } else { b.unary(Op::Pow(n - 1), a) };
            let t = b.mul(c, p);
            b.mul(g, t)
        }
        Op::Powf => {
            if k == 0 {
                // b a^(b-1)
                let one = b.c(1.0);
                let e = b.sub(args[1], one);
                let p = b.op(Op::Powf, vec![a, e]);
                let t = b.mul(args[1], p);
                b.mul(g, t)
            } else {
                let l = b.unary(Op::Log, a);
                let t = b.mul(out, l);
                b.mul(g, t)
            }
        }
        _ => unreachable!("{op:?} is not a power or a logarithm"),
    }
}

/// Sin, Cos, SinXDivX, Atan, Asin, Acos, Atan2.
fn trigonometry(b: &mut Builder, out: NodeId, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> NodeId {
    let a = args[0];
    match *op {
        Op::Sin => {
            let c = b.unary(Op::Cos, a);
            b.mul(g, c)
        }
        Op::Cos => {
            let s = b.unary(Op::Sin, a);
            let t = b.mul(g, s);
            b.neg(t)
        }
        Op::SinXDivX => {
            // (cos x - sin(x)/x) / x
            let c = b.unary(Op::Cos, a);
            let t = b.sub(c, out);
            let t = b.div(t, a);
            b.mul(g, t)
        }
        Op::Atan => {
            let one = b.c(1.0);
            let sq = b.unary(Op::Square, a);
            let d = b.add(one, sq);
            b.div(g, d)
        }
        Op::Asin | Op::Acos => {
            let one = b.c(1.0);
            let sq = b.unary(Op::Square, a);
            let d = b.sub(one, sq);
            let r = b.unary(Op::Sqrt, d);
            let t = b.div(g, r);
            if *op == Op::Asin {
                t
            } else {
                b.neg(t)
            }
        }
        Op::Atan2 => {
            // atan2(y, x): d/dy = x / (x^2 + y^2), d/dx = -y / (x^2 + y^2)
            let (y, x) = (args[0], args[1]);
            let (y2, x2) = (b.unary(Op::Square, y), b.unary(Op::Square, x));
            let r = b.add(x2, y2);
            if k == 0 {
                let t = b.div(x, r);
                b.mul(g, t)
            } else {
                let t = b.div(y, r);
                let t = b.mul(g, t);
                b.neg(t)
            }
        }
        _ => unreachable!("{op:?} is not a trigonometric operation"),
    }
}

/// Abs, ReLU, ClampInt, Clamp, IfElse, Mod: the adjoint times a mask or a step, `None` for the
/// arguments they are piecewise constant in.
fn piecewise(b: &mut Builder, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> Option<NodeId> {
    let a = args[0];
    Some(match *op {
        Op::Abs => {
            let s = b.unary(Op::Sign, a);
            b.mul(g, s)
        }
        Op::ReLU => {
            let s = b.unary(Op::Step, a);
            b.mul(g, s)
        }
        Op::ClampInt(lo, hi) => {
            let (l, h) = (b.c(lo as f64), b.c(hi as f64));
            let m1 = b.op(Op::LessOrEqual, vec![l, a]);
            let m2 = b.op(Op::LessOrEqual, vec![a, h]);
            let m = b.mul(m1, m2);
            b.mul(g, m)
        }
        Op::Clamp => {
            let (x, lo, hi) = (args[0], args[1], args[2]);
            let mask = match k {
                0 => {
                    let m1 = b.op(Op::LessOrEqual, vec![lo, x]);
                    let m2 = b.op(Op::LessOrEqual, vec![x, hi]);
                    b.mul(m1, m2)
                }
                1 => b.op(Op::LessThan, vec![x, lo]),
                _ => b.op(Op::LessThan, vec![hi, x]),
            };
            b.mul(g, mask)
        }
        Op::IfElse => {
            let f = args[0];
            match k {
                0 => return None,
                1 => {
                    let s = b.unary(Op::Step, f);
                    b.mul(g, s)
                }
                _ => {
                    let s = b.unary(Op::Step, f);
                    let one = b.c(1.0);
                    let t = b.sub(one, s);
                    b.mul(g, t)
                }
            }
        }
        Op::Mod => {
            // x - n floor((x - d) / n): 1 for x, -floor(...) for n, 0 (almost everywhere) for d.
            let (x, n, d) = (args[0], args[1], args[2]);
            match k {
                0 => g,
                1 => {
                    let t = b.sub(x, d);
                    let t = b.div(t, n);
                    let f = b.unary(Op::Floor, t);
                    let t = b.mul(g, f);
                    b.neg(t)
                }
                _ => return None,
            }
        }
        _ => unreachable!("{op:?} is not a piecewise operation"),
    })
}

/// Sum, SqNorm2, Dot, Max, Min: reductions over the components of a vector.
fn component_reduction(b: &mut Builder, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> NodeId {
    let a = args[0];
    match *op {
        Op::Sum => {
            let d = b.dim(a);
            if d == 1 {
                g
            } else {
                b.with_dim(Op::SumT(d), vec![g], d)
            }
        }
        Op::SqNorm2 => {
            let two = b.c(2.0);
            let t = b.mul(two, g);
            b.mul(t, a)
        }
        Op::Dot => b.mul(g, args[1 - k]),
        Op::Max | Op::Min => {
            let d = b.dim(a);
            let arg = b.with_dim(if *op == Op::Max { Op::ArgMax } else { Op::ArgMin }, vec![a], 1);
            let hot = b.with_dim(Op::OneHot(d), vec![arg], d);
            b.mul(g, hot)
        }
        _ => unreachable!("{op:?} is not a reduction over components"),
    }
}

/// SumT, Elem, ElemT, Extract, ExtractT, Concat: each one's adjoint is its transpose.
fn reshaping(b: &mut Builder, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> NodeId {
    let a = args[0];
    match *op {
        Op::SumT(_) => b.with_dim(Op::Sum, vec![g], 1),
        Op::Elem(m) => {
            let d = b.dim(a);
            b.with_dim(Op::ElemT(d, m), vec![g], d)
        }
        Op::ElemT(_, m) => b.with_dim(Op::Elem(m), vec![g], 1),
        Op::Extract(start, _) => {
            let d = b.dim(a);
            b.with_dim(Op::ExtractT(start, d), vec![g], d)
        }
        Op::ExtractT(start, _) => {
            let d = b.dim(a);
            b.with_dim(Op::Extract(start, d), vec![g], d)
        }
        Op::Concat => {
            let (da, db) = (b.dim(args[0]), b.dim(args[1]));
            if k == 0 {
                b.with_dim(Op::Extract(0, da), vec![g], da)
            } else {
                b.with_dim(Op::Extract(da, db), vec![g], db)
            }
        }
        _ => unreachable!("{op:?} is not a reshaping"),
    }
}

/// MatVecMult, VecMatMult, TensorProd, on column-major matrices stored in vectors.
fn linear_algebra(b: &mut Builder, op: &Op, args: &[NodeId], k: usize, g: NodeId) -> NodeId {
    match *op {
        Op::MatVecMult => {
            // out = A x (A n x p): dA = outer(g, x), dx = g A
            let (m, x) = (args[0], args[1]);
            if k == 0 {
                let d = b.dim(g) * b.dim(x);
                b.with_dim(Op::TensorProd, vec![g, x], d)
            } else {
                let d = b.dim(x);
                b.with_dim(Op::VecMatMult, vec![g, m], d)
            }
        }
        Op::VecMatMult => {
            // out = x A (A n x p): dx = A g, dA = outer(x, g)
            let (x, m) = (args[0], args[1]);
            if k == 0 {
                let d = b.dim(x);
                b.with_dim(Op::MatVecMult, vec![m, g], d)
            } else {
                let d = b.dim(x) * b.dim(g);
                b.with_dim(Op::TensorProd, vec![x, g], d)
            }
        }
        Op::TensorProd => {
            // out[k + n l] = a_k b_l: da = G b, db = a G with G = g as an n x m matrix
            let (x, y) = (args[0], args[1]);
            if k == 0 {
                let d = b.dim(x);
                b.with_dim(Op::MatVecMult, vec![g, y], d)
            } else {
                let d = b.dim(y);
                b.with_dim(Op::VecMatMult, vec![x, g], d)
            }
        }
        _ => unreachable!("{op:?} is not a product of matrices and vectors"),
    }
}

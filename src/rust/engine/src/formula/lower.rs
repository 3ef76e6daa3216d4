//! Lowers a syntax tree to the graph: resolves names, checks arities and dimensions, and rewrites
//! composite operations (SqDist, Normalize, WeightedSqNorm, ...) in terms of primitives.

use super::ast::{Ast, BinOp, Node as AstNode};
use super::graph::{Graph, NodeId, Op};
use super::variables::{Category, Variable, MAX_DIM};
use crate::error::{Error, Result};

pub struct Lowerer<'a> {
    pub graph: Graph,
    pub vars: Vec<Variable>,
    pub formula: &'a str,
}

impl<'a> Lowerer<'a> {
    pub fn new(formula: &'a str, vars: Vec<Variable>) -> Self {
        Lowerer { graph: Graph::default(), vars, formula }
    }

    pub fn error(&self, pos: usize, what: impl Into<String>) -> Error {
        Error::Formula { what: what.into(), pos, formula: self.formula.into() }
    }

    fn constant(&mut self, x: f64) -> NodeId {
        self.graph.add(Op::constant(x), vec![], 1)
    }

    fn dim(&self, id: NodeId) -> usize {
        self.graph.dim(id)
    }

    /// An integer written literally in the formula (`Elem(x, 2)`, `Pow(x, -1)`), for operations whose
    /// arguments fix the shape of the result.
    pub fn integer(&self, node: &AstNode, func: &str, which: &str) -> Result<i64> {
        match &node.ast {
            Ast::Int(n) => Ok(*n),
            Ast::Neg(inner) => match inner.ast {
                Ast::Int(n) => Ok(-n),
                _ => Err(self.error(node.pos, format!("the {which} argument of {func} must be an integer constant"))),
            },
            _ => Err(self.error(node.pos, format!("the {which} argument of {func} must be an integer constant"))),
        }
    }

    fn size(&self, node: &AstNode, func: &str, which: &str, min: i64) -> Result<usize> {
        let n = self.integer(node, func, which)?;
        if n < min || n > MAX_DIM as i64 {
            return Err(self.error(
                node.pos,
                format!("the {which} argument of {func} must be between {min} and {MAX_DIM}, not {n}"),
            ));
        }
        Ok(n as usize)
    }

    /// Element-wise operation: dimensions must agree, or be 1 (broadcast).
    fn elementwise(&mut self, op: Op, args: Vec<NodeId>, name: &str, pos: usize) -> Result<NodeId> {
        let dim = args.iter().map(|&a| self.dim(a)).max().unwrap_or(1);
        if args.iter().any(|&a| self.dim(a) != dim && self.dim(a) != 1) {
            let dims: Vec<String> = args.iter().map(|&a| self.dim(a).to_string()).collect();
            return Err(self.error(
                pos,
                format!(
                    "{name} cannot combine arguments of dimensions {} (they must be equal, or 1)",
                    dims.join(" and ")
                ),
            ));
        }
        Ok(self.graph.add(op, args, dim))
    }

    fn same_dims(&self, a: NodeId, b: NodeId, name: &str, pos: usize) -> Result<()> {
        if self.dim(a) != self.dim(b) {
            return Err(self.error(
                pos,
                format!("{name} needs two arguments of the same dimension, got {} and {}", self.dim(a), self.dim(b)),
            ));
        }
        Ok(())
    }

    fn sqnorm2(&mut self, x: NodeId) -> NodeId {
        self.graph.add(Op::SqNorm2, vec![x], 1)
    }

    fn dot(&mut self, a: NodeId, b: NodeId) -> NodeId {
        self.graph.add(Op::Dot, vec![a, b], 1)
    }

    fn variable(&mut self, name: &str, pos: usize) -> Result<NodeId> {
        let var = self.vars.iter().find(|v| v.name == name).cloned().ok_or_else(|| {
            let known: Vec<&str> = self.vars.iter().map(|v| v.name.as_str()).collect();
            self.error(
                pos,
                format!(
                    "unknown variable '{name}' (declared in args: {})",
                    if known.is_empty() { "none".into() } else { known.join(", ") }
                ),
            )
        })?;
        Ok(self.graph.add(Op::Input(var.position), vec![], var.dim))
    }

    /// `Var(pos, dim, cat)`: refers to the input at `pos`, declared in args or not.
    fn var_reference(&mut self, args: &[AstNode], pos: usize) -> Result<NodeId> {
        if args.len() != 3 {
            return Err(
                self.error(pos, format!("Var takes 3 arguments (position, dimension, category), got {}", args.len()))
            );
        }
        let position = self.size(&args[0], "Var", "first", 0)?;
        let dim = self.size(&args[1], "Var", "second", 1)?;
        let code = self.integer(&args[2], "Var", "third")?;
        let category = Category::from_code(code)
            .ok_or_else(|| self.error(args[2].pos, "the category of Var must be 0 (i), 1 (j) or 2 (parameter)"))?;
        match self.vars.iter().find(|v| v.position == position) {
            Some(v) if v.dim != dim || v.category != category => {
                return Err(self.error(
                    pos,
                    format!(
                        "Var({position}, {dim}, {code}) disagrees with '{}' = {}({}) declared at position {position}",
                        v.name,
                        v.category.keyword(),
                        v.dim
                    ),
                ))
            }
            Some(_) => {}
            None => self.vars.push(Variable { name: format!("Var({position})"), category, dim, position }),
        }
        Ok(self.graph.add(Op::Input(position), vec![], dim))
    }

    pub fn lower(&mut self, node: &AstNode) -> Result<NodeId> {
        match &node.ast {
            Ast::Int(n) => Ok(self.constant(*n as f64)),
            Ast::Float(x) => Ok(self.constant(*x)),
            Ast::Name(name) => self.variable(name, node.pos),
            Ast::Neg(inner) => {
                let a = self.lower(inner)?;
                if let Some(c) = self.graph.nodes[a].op.constant_value() {
                    return Ok(self.constant(-c));
                }
                let d = self.dim(a);
                Ok(self.graph.add(Op::Neg, vec![a], d))
            }
            Ast::Binary(op, l, r) => {
                let (a, b) = (self.lower(l)?, self.lower(r)?);
                let (op, name) = match op {
                    BinOp::Add => (Op::Add, "'+'"),
                    BinOp::Sub => (Op::Sub, "'-'"),
                    BinOp::Mul => (Op::Mul, "'*'"),
                    BinOp::Div => (Op::Div, "'/'"),
                };
                self.elementwise(op, vec![a, b], name, node.pos)
            }
            Ast::ScalarProduct(l, r) => {
                let (a, b) = (self.lower(l)?, self.lower(r)?);
                self.same_dims(a, b, "the scalar product (a|b)", node.pos)?;
                Ok(self.dot(a, b))
            }
            Ast::Call(name, args) => self.call(name, args, node.pos),
        }
    }

    fn lower_all(&mut self, args: &[AstNode]) -> Result<Vec<NodeId>> {
        args.iter().map(|a| self.lower(a)).collect()
    }

    fn arity(&self, name: &str, args: &[AstNode], n: usize, pos: usize) -> Result<()> {
        if args.len() != n {
            let plural = if n == 1 { "" } else { "s" };
            return Err(self.error(pos, format!("{name} takes {n} argument{plural}, got {}", args.len())));
        }
        Ok(())
    }

    /// A function call of the formula language: element-wise operations and reductions over the
    /// components from the tables below, the others by group.
    fn call(&mut self, name: &str, args: &[AstNode], pos: usize) -> Result<NodeId> {
        if let Some(op) = unary_elementwise(name) {
            self.arity(name, args, 1, pos)?;
            let a = self.lower(&args[0])?;
            let d = self.dim(a);
            return Ok(self.graph.add(op, vec![a], d));
        }
        if let Some(op) = binary_elementwise(name) {
            self.arity(name, args, 2, pos)?;
            let a = self.lower_all(args)?;
            return self.elementwise(op, a, name, pos);
        }
        if let Some(op) = ternary_elementwise(name) {
            self.arity(name, args, 3, pos)?;
            let a = self.lower_all(args)?;
            return self.elementwise(op, a, name, pos);
        }
        if let Some(op) = component_reduction(name) {
            self.arity(name, args, 1, pos)?;
            let a = self.lower(&args[0])?;
            return Ok(self.graph.add(op, vec![a], 1));
        }
        match name {
            "Var" => self.var_reference(args, pos),
            "Grad" => self.gradient(args, pos),
            "IntCst" | "Pow" | "Round" | "ClampInt" => self.with_integer_arguments(name, args, pos),
            "Norm2" | "Normalize" | "SqDist" | "SqNormIso" | "SqNormDiag" | "SymSqNorm" | "WeightedSqNorm"
            | "WeightedSqDist" => self.norm_or_distance(name, args, pos),
            "Elem" | "ElemT" | "OneHot" | "SumT" => self.component_or_spread(name, args, pos),
            "Extract" | "ExtractT" | "Concat" => self.slice(name, args, pos),
            "MatVecMult" | "VecMatMult" | "TensorProd" => self.linear_algebra(name, args, pos),
            _ if name.ends_with("_Reduction") => {
                Err(self.error(pos, format!("{name} can only be the outermost operation of a formula")))
            }
            _ => Err(self.error(pos, format!("unknown function '{name}'"))),
        }
    }

    /// IntCst, Pow, Round, ClampInt: integer constants written in the formula.
    fn with_integer_arguments(&mut self, name: &str, args: &[AstNode], pos: usize) -> Result<NodeId> {
        match name {
            "IntCst" => {
                self.arity(name, args, 1, pos)?;
                let n = self.integer(&args[0], name, "first")?;
                Ok(self.constant(n as f64))
            }
            "Pow" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower(&args[0])?;
                let n = self.integer(&args[1], name, "second")?;
                let n = i32::try_from(n).map_err(|_| self.error(args[1].pos, "the exponent of Pow is too large"))?;
                let d = self.dim(a);
                Ok(self.graph.add(Op::Pow(n), vec![a], d))
            }
            "Round" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower(&args[0])?;
                let n = self.integer(&args[1], name, "second")?;
                if !(-300..=300).contains(&n) {
                    return Err(self.error(args[1].pos, "the number of decimals of Round must be between -300 and 300"));
                }
                let d = self.dim(a);
                Ok(self.graph.add(Op::Round(n as i32), vec![a], d))
            }
            "ClampInt" => {
                self.arity(name, args, 3, pos)?;
                let a = self.lower(&args[0])?;
                let lo = self.integer(&args[1], name, "second")?;
                let hi = self.integer(&args[2], name, "third")?;
                let d = self.dim(a);
                Ok(self.graph.add(Op::ClampInt(lo, hi), vec![a], d))
            }
            _ => unreachable!("{name} takes no integer arguments"),
        }
    }

    /// Norm2, Normalize, SqDist, the weighted norms and WeightedSqDist, in terms of SqNorm2, Dot,
    /// Rsqrt and MatVecMult.
    fn norm_or_distance(&mut self, name: &str, args: &[AstNode], pos: usize) -> Result<NodeId> {
        match name {
            "Norm2" => {
                self.arity(name, args, 1, pos)?;
                let a = self.lower(&args[0])?;
                let s = self.sqnorm2(a);
                Ok(self.graph.add(Op::Sqrt, vec![s], 1))
            }
            "Normalize" => {
                self.arity(name, args, 1, pos)?;
                let a = self.lower(&args[0])?;
                let s = self.sqnorm2(a);
                let r = self.graph.add(Op::Rsqrt, vec![s], 1);
                let d = self.dim(a);
                Ok(self.graph.add(Op::Mul, vec![a, r], d))
            }
            "SqDist" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower_all(args)?;
                self.same_dims(a[0], a[1], name, pos)?;
                let diff = self.elementwise(Op::Sub, a, name, pos)?;
                Ok(self.sqnorm2(diff))
            }
            "SqNormIso" | "SqNormDiag" | "SymSqNorm" | "WeightedSqNorm" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower_all(args)?;
                self.weighted_sqnorm(name, a[0], a[1], pos)
            }
            "WeightedSqDist" => {
                self.arity(name, args, 3, pos)?;
                let a = self.lower_all(args)?;
                self.same_dims(a[1], a[2], name, pos)?;
                let diff = self.elementwise(Op::Sub, vec![a[1], a[2]], name, pos)?;
                self.weighted_sqnorm(name, a[0], diff, pos)
            }
            _ => unreachable!("{name} is not a norm or a distance"),
        }
    }

    /// Elem, ElemT, OneHot, SumT: one component of a vector, or a vector made from a scalar.
    fn component_or_spread(&mut self, name: &str, args: &[AstNode], pos: usize) -> Result<NodeId> {
        match name {
            "Elem" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower(&args[0])?;
                let m = self.size(&args[1], name, "second", 0)?;
                if m >= self.dim(a) {
                    return Err(self.error(
                        pos,
                        format!(
                            "Elem(x, {m}) needs x of dimension > {m} (positions are 0-based), but x has dimension {}",
                            self.dim(a)
                        ),
                    ));
                }
                Ok(self.graph.add(Op::Elem(m), vec![a], 1))
            }
            "ElemT" => {
                self.arity(name, args, 3, pos)?;
                let a = self.lower(&args[0])?;
                let n = self.size(&args[1], name, "second", 1)?;
                let m = self.size(&args[2], name, "third", 0)?;
                self.need_scalar(a, name, pos)?;
                if m >= n {
                    return Err(self
                        .error(pos, format!("ElemT(x, {n}, {m}) needs a position below {n} (positions are 0-based)")));
                }
                Ok(self.graph.add(Op::ElemT(n, m), vec![a], n))
            }
            "OneHot" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower(&args[0])?;
                let d = self.size(&args[1], name, "second", 1)?;
                self.need_scalar(a, name, pos)?;
                Ok(self.graph.add(Op::OneHot(d), vec![a], d))
            }
            "SumT" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower(&args[0])?;
                let d = self.size(&args[1], name, "second", 1)?;
                self.need_scalar(a, name, pos)?;
                Ok(self.graph.add(Op::SumT(d), vec![a], d))
            }
            _ => unreachable!("{name} is not a component or a spread"),
        }
    }

    /// Extract, ExtractT, Concat: consecutive components of a vector, placed in or joined.
    fn slice(&mut self, name: &str, args: &[AstNode], pos: usize) -> Result<NodeId> {
        match name {
            "Extract" => {
                self.arity(name, args, 3, pos)?;
                let a = self.lower(&args[0])?;
                let start = self.size(&args[1], name, "second", 0)?;
                let len = self.size(&args[2], name, "third", 1)?;
                if start + len > self.dim(a) {
                    return Err(self.error(
                        pos,
                        format!(
                            "Extract(x, {start}, {len}) needs x of dimension >= {}, but x has dimension {}",
                            start + len,
                            self.dim(a)
                        ),
                    ));
                }
                Ok(self.graph.add(Op::Extract(start, len), vec![a], len))
            }
            "ExtractT" => {
                self.arity(name, args, 3, pos)?;
                let a = self.lower(&args[0])?;
                let start = self.size(&args[1], name, "second", 0)?;
                let dim = self.size(&args[2], name, "third", 1)?;
                if start + self.dim(a) > dim {
                    return Err(self.error(pos, format!("ExtractT(x, {start}, {dim}) cannot place x of dimension {} at position {start} of a vector of dimension {dim}", self.dim(a))));
                }
                Ok(self.graph.add(Op::ExtractT(start, dim), vec![a], dim))
            }
            "Concat" => {
                self.arity(name, args, 2, pos)?;
                let a = self.lower_all(args)?;
                let d = self.dim(a[0]) + self.dim(a[1]);
                if d > MAX_DIM {
                    return Err(self.error(pos, format!("Concat would have dimension {d}, more than {MAX_DIM}")));
                }
                Ok(self.graph.add(Op::Concat, a, d))
            }
            _ => unreachable!("{name} is not a slice"),
        }
    }

    /// MatVecMult, VecMatMult, TensorProd, on column-major matrices stored in vectors.
    fn linear_algebra(&mut self, name: &str, args: &[AstNode], pos: usize) -> Result<NodeId> {
        self.arity(name, args, 2, pos)?;
        let a = self.lower_all(args)?;
        match name {
            "MatVecMult" | "VecMatMult" => {
                let (mat, vec) = if name == "MatVecMult" { (a[0], a[1]) } else { (a[1], a[0]) };
                let (dm, dv) = (self.dim(mat), self.dim(vec));
                if dm % dv != 0 {
                    return Err(self.error(pos, format!("{name}: the matrix has dimension {dm}, which is not a multiple of the vector's dimension {dv}")));
                }
                let op = if name == "MatVecMult" { Op::MatVecMult } else { Op::VecMatMult };
                Ok(self.graph.add(op, a, dm / dv))
            }
            "TensorProd" => {
                let d = self.dim(a[0]) * self.dim(a[1]);
                if d > MAX_DIM {
                    return Err(self.error(pos, format!("TensorProd would have dimension {d}, more than {MAX_DIM}")));
                }
                Ok(self.graph.add(Op::TensorProd, a, d))
            }
            _ => unreachable!("{name} is not a product of matrices and vectors"),
        }
    }

    /// `Grad(F, v, e)`: the gradient of F with respect to the variable v, contracted with e.
    fn gradient(&mut self, args: &[AstNode], pos: usize) -> Result<NodeId> {
        self.arity("Grad", args, 3, pos)?;
        let f = self.lower(&args[0])?;
        let v = self.lower(&args[1])?;
        let Op::Input(position) = self.graph.nodes[v].op else {
            return Err(self.error(args[1].pos, "the second argument of Grad must be a variable"));
        };
        let e = self.lower(&args[2])?;
        if self.dim(e) != self.dim(f) {
            return Err(self.error(
                args[2].pos,
                format!("Grad(F, v, e) needs e of the dimension of F ({}), not {}", self.dim(f), self.dim(e)),
            ));
        }
        match super::autodiff::grad(&mut self.graph, f, position, e) {
            Some(g) => Ok(g),
            None => {
                // F does not depend on v: a zero gradient of v's dimension.
                let zero = self.constant(0.0);
                let d = self.dim(v);
                Ok(if d == 1 { zero } else { self.graph.add(Op::SumT(d), vec![zero], d) })
            }
        }
    }

    fn need_scalar(&self, a: NodeId, name: &str, pos: usize) -> Result<()> {
        if self.dim(a) != 1 {
            return Err(
                self.error(pos, format!("the first argument of {name} must have dimension 1, not {}", self.dim(a)))
            );
        }
        Ok(())
    }

    /// `WeightedSqNorm(s, x)`: isotropic (dim s = 1), diagonal (dim s = D) or full (dim s = D*D, a
    /// column-major symmetric matrix); the three named variants insist on their own case.
    fn weighted_sqnorm(&mut self, name: &str, s: NodeId, x: NodeId, pos: usize) -> Result<NodeId> {
        let (ds, dx) = (self.dim(s), self.dim(x));
        let expected = match name {
            "SqNormIso" => Some(1),
            "SqNormDiag" => Some(dx),
            "SymSqNorm" => Some(dx * dx),
            _ => None,
        };
        if expected.is_some_and(|e| e != ds) || (expected.is_none() && ds != 1 && ds != dx && ds != dx * dx) {
            return Err(self.error(
                pos,
                format!(
                    "{name}: the weights have dimension {ds}, but x has dimension {dx} (expected 1, {dx} or {})",
                    dx * dx
                ),
            ));
        }
        if ds == 1 {
            let n = self.sqnorm2(x);
            Ok(self.graph.add(Op::Mul, vec![s, n], 1))
        } else if ds == dx {
            let sq = self.graph.add(Op::Square, vec![x], dx);
            Ok(self.dot(s, sq))
        } else {
            let ax = self.graph.add(Op::MatVecMult, vec![s, x], dx);
            Ok(self.dot(x, ax))
        }
    }
}

fn unary_elementwise(name: &str) -> Option<Op> {
    Some(match name {
        "Abs" => Op::Abs,
        "Acos" => Op::Acos,
        "Asin" => Op::Asin,
        "Atan" => Op::Atan,
        "Cos" => Op::Cos,
        "Sin" => Op::Sin,
        "Exp" => Op::Exp,
        "Log" => Op::Log,
        "Floor" => Op::Floor,
        "Inv" => Op::Inv,
        "ReLU" => Op::ReLU,
        "Rsqrt" => Op::Rsqrt,
        "Sign" => Op::Sign,
        "SinXDivX" => Op::SinXDivX,
        "Sqrt" => Op::Sqrt,
        "Square" => Op::Square,
        "Step" => Op::Step,
        "XLogX" => Op::XLogX,
        "Minus" => Op::Neg,
        _ => return None,
    })
}

fn binary_elementwise(name: &str) -> Option<Op> {
    Some(match name {
        "Add" => Op::Add,
        "Subtract" => Op::Sub,
        "Mult" => Op::Mul,
        "Divide" => Op::Div,
        "Atan2" => Op::Atan2,
        "Powf" => Op::Powf,
        "Equal" => Op::Equal,
        "NotEqual" => Op::NotEqual,
        "LessThan" => Op::LessThan,
        "LessOrEqual" => Op::LessOrEqual,
        _ => return None,
    })
}

fn ternary_elementwise(name: &str) -> Option<Op> {
    Some(match name {
        "Clamp" => Op::Clamp,
        "IfElse" => Op::IfElse,
        "Mod" => Op::Mod,
        _ => return None,
    })
}

fn component_reduction(name: &str) -> Option<Op> {
    Some(match name {
        "Sum" => Op::Sum,
        "SqNorm2" => Op::SqNorm2,
        "Max" => Op::Max,
        "Min" => Op::Min,
        "ArgMax" => Op::ArgMax,
        "ArgMin" => Op::ArgMin,
        _ => return None,
    })
}

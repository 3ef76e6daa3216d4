//! The intermediate representation: a graph of operations with known dimensions, shared
//! sub-expressions merged (hash-consing), in topological order (arguments before their users).

use std::collections::HashMap;

pub type NodeId = usize;

/// One operation of the formula language after lowering. Operations that are compositions of others
/// (SqDist, Normalize, WeightedSqNorm, ...) are lowered to these primitives by `lower.rs`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// The input at this position of the inputs list.
    Input(usize),
    /// A constant, stored as the bits of an f64 so the graph can be hashed.
    Constant(u64),
    // Element-wise, one argument.
    Neg,
    Abs,
    Acos,
    Asin,
    Atan,
    Cos,
    Sin,
    Exp,
    Log,
    Floor,
    Inv,
    ReLU,
    Rsqrt,
    Sign,
    SinXDivX,
    Sqrt,
    Square,
    Step,
    XLogX,
    /// Round to this many decimals.
    Round(i32),
    /// Integer power.
    Pow(i32),
    ClampInt(i64, i64),
    // Element-wise, two arguments; a dimension-1 argument is broadcast.
    Add,
    Sub,
    Mul,
    Div,
    Atan2,
    Powf,
    Equal,
    NotEqual,
    LessThan,
    LessOrEqual,
    // Element-wise, three arguments.
    Clamp,
    IfElse,
    Mod,
    // Reductions over the components of one vector: the result has dimension 1.
    Sum,
    SqNorm2,
    Max,
    Min,
    ArgMax,
    ArgMin,
    /// Scalar product of two vectors of the same dimension.
    Dot,
    // Reshaping.
    Elem(usize),
    /// ElemT(x, n, m): a vector of dimension n, x at position m, zeros elsewhere.
    ElemT(usize, usize),
    /// Extract(x, start, len).
    Extract(usize, usize),
    /// ExtractT(x, start, dim).
    ExtractT(usize, usize),
    Concat,
    OneHot(usize),
    SumT(usize),
    // Linear algebra on column-major matrices stored in vectors.
    MatVecMult,
    VecMatMult,
    TensorProd,
}

impl Op {
    pub fn constant(x: f64) -> Op {
        Op::Constant(x.to_bits())
    }

    pub fn constant_value(self) -> Option<f64> {
        match self {
            Op::Constant(bits) => Some(f64::from_bits(bits)),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Node {
    pub op: Op,
    pub args: Vec<NodeId>,
    pub dim: usize,
}

#[derive(Debug, Clone, Default)]
pub struct Graph {
    pub nodes: Vec<Node>,
    index: HashMap<Node, NodeId>,
}

impl Graph {
    /// Adds a node, or returns the identical node already in the graph.
    pub fn add(&mut self, op: Op, args: Vec<NodeId>, dim: usize) -> NodeId {
        let node = Node { op, args, dim };
        if let Some(&id) = self.index.get(&node) {
            return id;
        }
        let id = self.nodes.len();
        self.nodes.push(node.clone());
        self.index.insert(node, id);
        id
    }

    pub fn dim(&self, id: NodeId) -> usize {
        self.nodes[id].dim
    }

    /// The nodes that `roots` depend on (themselves included), as a mask over the graph.
    pub fn reachable(&self, roots: &[NodeId]) -> Vec<bool> {
        self.reachable_above(roots, None)
    }

    /// The same, not looking through the arguments of `cut` (itself included when reachable).
    pub fn reachable_above(&self, roots: &[NodeId], cut: Option<NodeId>) -> Vec<bool> {
        let mut mask = vec![false; self.nodes.len()];
        for &r in roots {
            mask[r] = true;
        }
        for id in (0..self.nodes.len()).rev() {
            if mask[id] && Some(id) != cut {
                for &a in &self.nodes[id].args {
                    mask[a] = true;
                }
            }
        }
        mask
    }
}

//! From text to a checked formula: lexer, parser, variables, lowering to the graph.

pub mod ast;
pub mod autodiff;
pub mod gradient;
pub mod graph;
pub mod lexer;
pub mod lower;
pub mod parser;
pub mod variables;

pub use graph::{Graph, Node, NodeId, Op};
pub use variables::{Category, Variable};

use crate::error::{Error, Result};
use crate::reduction::{Accumulator, ReductionKind, Signature, SumScheme};
use ast::{Ast, BinOp, Node as AstNode};
use lower::Lowerer;

/// A reduction of a formula: its kind, the axis, K for the K-selections, and the formula nodes
/// of its values `f` and, for the weighted ones, its weights `g`, with their text as written
/// (as operands: in parentheses when a sum or a difference), of which gradients are written.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reduction {
    pub kind: ReductionKind,
    pub axis: usize,
    pub k: usize,
    pub f: NodeId,
    pub g: Option<NodeId>,
    pub f_text: String,
    pub g_text: Option<String>,
}

/// A parsed, dimension-checked reduction of a formula, ready to be evaluated.
#[derive(Debug, Clone)]
pub struct Formula {
    pub text: String,
    /// The text and the variables' declarations, made once: what identifies the formula's
    /// compiled kernels (`cuda::Device::kernels`), without formatting a key at every call.
    pub identity: std::sync::Arc<str>,
    /// Sorted by position: `variables[p].position == p`.
    pub variables: Vec<Variable>,
    pub graph: Graph,
    pub reduction: Reduction,
}

/// Longest formula accepted: far beyond what anyone writes or generates (a LazyTensor sum of 10^4
/// terms is about 100 KB), short enough that an accidental huge string fails at once.
pub const MAX_FORMULA_BYTES: usize = 4 << 20;

impl Formula {
    /// The accumulator of this formula's reduction.
    pub fn accumulator(&self, scheme: SumScheme) -> Accumulator {
        let red = &self.reduction;
        let gdim = red.g.map_or(0, |g| self.graph.dim(g));
        Accumulator::new(red.kind, scheme, red.k, self.graph.dim(red.f), gdim)
    }

    pub fn parse(text: &str, args: &[String]) -> Result<Formula> {
        if text.len() > MAX_FORMULA_BYTES {
            return Err(Error::Invalid(format!(
                "the formula is {} bytes long; at most {MAX_FORMULA_BYTES} (4 MiB) are accepted",
                text.len()
            )));
        }
        if gradient::is_form(text) {
            return Formula::gradient(text, args);
        }
        let declared = variables::parse_declarations(args)?;
        let tree = parser::parse(text)?;
        let mut lowerer = Lowerer::new(text, declared);
        let reduction = lower_reduction(&mut lowerer, &tree)?;
        let mut variables = lowerer.vars;
        variables.sort_by_key(|v| v.position);
        if let Some((p, _)) = variables.iter().enumerate().find(|(p, v)| v.position != *p) {
            return Err(Error::Invalid(format!(
                "no variable is declared at position {p} (positions are 0-based and must be consecutive; \
                 declared: {})",
                variables.iter().map(|v| format!("{} at {}", v.name, v.position)).collect::<Vec<_>>().join(", ")
            )));
        }
        let mut identity = text.to_string();
        for v in &variables {
            identity.push_str(&format!("\r{}={:?}({})@{}", v.name, v.category, v.dim, v.position));
        }
        Ok(Formula { text: text.to_string(), identity: identity.into(), variables, graph: lowerer.graph, reduction })
    }

    /// KeOps' `Grad(reduction, v, e)` where the gradient is one reduction: that reduction (a Sum
    /// of `Grad(f, v, e)`, in an i- or j-variable, its inputs those of `args`). Others need forward
    /// results, or sum rows: `gradient::GradientPlan` computes them.
    fn gradient(text: &str, args: &[String]) -> Result<Formula> {
        let plan = gradient::GradientPlan::parse(text, args)?;
        match plan.output {
            gradient::GradientOutput::Formula { formula, args, sum_rows: false } if plan.steps.is_empty() => {
                Formula::parse(&formula, &args)
            }
            _ => Err(Error::Gradient(format!(
                "{text} is not one reduction (it needs forward results, sums the gradient's rows for a \
                 parameter, or is zero): compute it with its gradient plan (formula::gradient::GradientPlan)"
            ))),
        }
    }

    /// Dimension of the formula's values per output row (K excluded).
    pub fn output_dim(&self) -> usize {
        match self.reduction.g {
            Some(g) => self.graph.dim(g),
            None => self.graph.dim(self.reduction.f),
        }
    }
}

fn lower_reduction(lw: &mut Lowerer, tree: &AstNode) -> Result<Reduction> {
    let not_a_reduction =
        |lw: &Lowerer| lw.error(tree.pos, format!("the formula must be a reduction, one of {}", ReductionKind::NAMES));
    let Ast::Call(name, args) = &tree.ast else { return Err(not_a_reduction(lw)) };
    let kind = ReductionKind::from_name(name).ok_or_else(|| not_a_reduction(lw))?;
    let usage = match kind.signature() {
        Signature::Axis => format!("{name}(f, axis)"),
        Signature::KAxis => format!("{name}(f, K, axis)"),
        Signature::WeightAxis => format!("{name}(f, g, axis)"),
        Signature::AxisOptionalWeight => format!("{name}(f, axis) or {name}(f, axis, g)"),
    };
    let arity_ok = match kind.signature() {
        Signature::Axis => args.len() == 2,
        Signature::KAxis | Signature::WeightAxis => args.len() == 3,
        Signature::AxisOptionalWeight => args.len() == 2 || args.len() == 3,
    };
    if !arity_ok {
        return Err(lw.error(tree.pos, format!("{name} takes the arguments {usage}, got {} arguments", args.len())));
    }
    let (axis_node, k_node, g_node) = match kind.signature() {
        Signature::Axis => (&args[1], None, None),
        Signature::KAxis => (&args[2], Some(&args[1]), None),
        Signature::WeightAxis => (&args[2], None, Some(&args[1])),
        Signature::AxisOptionalWeight => (&args[1], None, args.get(2)),
    };
    let axis = lw.integer(axis_node, name, "axis")?;
    if axis != 0 && axis != 1 {
        return Err(lw.error(
            axis_node.pos,
            format!("the axis of {name} must be 0 (reduce over j) or 1 (reduce over i), not {axis}"),
        ));
    }
    let k = match k_node {
        Some(node) => {
            let k = lw.integer(node, name, "K")?;
            if k < 1 {
                return Err(lw.error(node.pos, format!("K must be a positive integer, not {k}")));
            }
            usize::try_from(k).map_err(|_| lw.error(node.pos, "K is too large"))?
        }
        None => 1,
    };
    let f = lw.lower(&args[0])?;
    let g = g_node.map(|n| lw.lower(n)).transpose()?;
    let (f_text, g_text) = (operand(lw.formula, &args[0]), g_node.map(|n| operand(lw.formula, n)));
    let kind = if kind == ReductionKind::LogSumExp && g.is_some() { ReductionKind::LogSumExpWeight } else { kind };
    if matches!(kind, ReductionKind::LogSumExp | ReductionKind::LogSumExpWeight | ReductionKind::SumSoftMaxWeight)
        && lw.graph.dim(f) != 1
    {
        return Err(
            lw.error(args[0].pos, format!("the formula inside {name} must have dimension 1, not {}", lw.graph.dim(f)))
        );
    }
    Ok(Reduction { kind, axis: axis as usize, k, f, g, f_text, g_text })
}

/// The text of `node` as an operand: in parentheses when it is a sum or a difference, so that a
/// gradient can write `e * g` whatever `g` is.
fn operand(text: &str, node: &AstNode) -> String {
    let written = &text[node.span.clone()];
    match node.ast {
        Ast::Binary(BinOp::Add | BinOp::Sub, ..) => format!("({written})"),
        _ => written.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str, args: &[&str]) -> Result<Formula> {
        Formula::parse(text, &args.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn gaussian_kernel() {
        let f = parse("Sum_Reduction(Exp(-s*SqDist(x,y))*b, 0)", &["x = Vi(3)", "y = Vj(3)", "b = Vj(2)", "s = Pm(1)"])
            .unwrap();
        assert_eq!(f.output_dim(), 2);
        assert_eq!(f.reduction.kind, ReductionKind::Sum);
        assert_eq!(f.variables.len(), 4);
    }

    #[test]
    fn dimension_inference() {
        let args = ["x = Vi(3)", "y = Vj(3)", "A = Pm(6)", "u = Vi(2)"];
        let dim = |body: &str| parse(&format!("Sum_Reduction({body}, 0)"), &args).map(|f| f.output_dim());
        assert_eq!(dim("x*y").unwrap(), 3);
        assert_eq!(dim("x*SqDist(x,y)").unwrap(), 3);
        assert_eq!(dim("(x|y)").unwrap(), 1);
        assert_eq!(dim("Concat(x, u)").unwrap(), 5);
        assert_eq!(dim("MatVecMult(A, x)").unwrap(), 2);
        assert_eq!(dim("VecMatMult(u, A)").unwrap(), 3);
        assert_eq!(dim("TensorProd(x, u)").unwrap(), 6);
        assert_eq!(dim("Extract(x, 1, 2)").unwrap(), 2);
        assert_eq!(dim("ExtractT(u, 1, 4)").unwrap(), 4);
        assert_eq!(dim("ElemT(Elem(x, 2), 5, 4)").unwrap(), 5);
        assert_eq!(dim("OneHot(Elem(x,0), 7)").unwrap(), 7);
        assert_eq!(dim("SumT(Norm2(x), 4)").unwrap(), 4);
        let e = dim("WeightedSqDist(u, x, y)").unwrap_err().to_string();
        assert!(e.contains("weights have dimension 2"), "{e}");
        assert_eq!(dim("WeightedSqDist(Elem(x, 0), x, y)").unwrap(), 1);
        assert_eq!(dim("Var(4, 9, 2)").unwrap(), 9);
        let e = dim("x + u").unwrap_err().to_string();
        assert!(e.contains("dimensions 3 and 2") && e.contains("position 15"), "{e}");
        let e = dim("Elem(x, 3)").unwrap_err().to_string();
        assert!(e.contains("0-based"), "{e}");
        let e = dim("MatVecMult(A, Concat(x, u))").unwrap_err().to_string();
        assert!(e.contains("not a multiple"), "{e}");
    }

    #[test]
    fn reductions_and_their_arguments() {
        let args = ["x = Vi(1)", "y = Vj(1)", "g = Vj(2)"];
        let p = |t: &str| parse(t, &args);
        assert_eq!(p("KMin_Reduction(x-y, 5, 1)").unwrap().reduction.k, 5);
        assert_eq!(p("LogSumExp_Reduction(x*y, 0, g)").unwrap().reduction.kind, ReductionKind::LogSumExpWeight);
        assert_eq!(p("SumSoftMaxWeight_Reduction(x*y, g, 1)").unwrap().output_dim(), 2);
        for (text, needle) in [
            ("Exp(x)", "must be a reduction"),
            ("Sum_Reduction(x, 2)", "axis"),
            ("Sum_Reduction(x)", "Sum_Reduction(f, axis)"),
            ("KMin_Reduction(x, 0, 0)", "positive"),
            ("KMin_Reduction(x, y, 0)", "integer constant"),
            ("LogSumExp_Reduction(g, 0)", "dimension 1"),
            ("Sum_Reduction(Foo(x), 0)", "unknown function 'Foo'"),
            ("Sum_Reduction(z, 0)", "unknown variable 'z'"),
            ("Sum_Reduction(Exp(x, y), 0)", "Exp takes 1 argument, got 2"),
            ("Sum_Reduction(Sum_Reduction(x, 0), 0)", "outermost"),
            ("Sum_Reduction(Var(5, 1, 0), 0)", "position 3"),
            ("Sum_Reduction(Var(0, 2, 0), 0)", "disagrees"),
        ] {
            let e = p(text).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
    }

    #[test]
    fn shared_subexpressions_are_merged() {
        let f = parse("Sum_Reduction(Exp(-SqDist(x,y)) + SqDist(x,y), 0)", &["x = Vi(3)", "y = Vj(3)"]).unwrap();
        let sqnorms = f.graph.nodes.iter().filter(|n| n.op == Op::SqNorm2).count();
        assert_eq!(sqnorms, 1);
    }
}

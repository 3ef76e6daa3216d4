//! Operations the CPU evaluator fuses, to save a pass over the tile and its stores:
//! - SqNorm2(a - b), the squared distance at the heart of most kernels, is computed in one pass over
//!   a and b, without storing their difference;
//! - Exp(-a) and Exp(s * a), with s one number per tile (Exp(-g * SqDist(x, y))), in one pass;
//! - a Sum reduction of a product a * b (a kernel times its weights) is accumulated as a dot product
//!   of a and b, without storing the product;
//! - the squared distance of two inputs of large dimension, one per index, is computed for a group of
//!   output rows at once (`row_block`);
//! - a K-min selection of a squared distance between a value per row and a value per reduced index
//!   (nearest neighbours) computes the distances as it selects (`select_dist`).
//!
//! A node is absorbed only where nothing else uses it.

use crate::formula::{Formula, NodeId, Op};
use super::{reducers, row_block};
use crate::formula::Category;
use crate::plan::{Plan, Role};
use crate::reduction::ReductionKind;
use crate::reduction::SumScheme;

pub struct Fusions {
    /// For every node, the arguments `[a, b]` when the node is a squared distance computed fused.
    pub sq_dists: Vec<Option<[NodeId; 2]>>,
    /// For every node, `(a, s)` when the node is Exp(s * a) computed fused (`s` None for Exp(-a)).
    pub scaled_exps: Vec<Option<(NodeId, Option<NodeId>)>>,
    /// The factors `[a, b]` when the reduction is the sum of their product.
    pub product_sum: Option<[NodeId; 2]>,
    /// A squared distance computed for groups of rows: `(node, x, y)` with `x` the input of the
    /// output index and `y` that of the reduced index.
    pub row_block: Option<(NodeId, NodeId, NodeId)>,
    /// The arguments `[a, b]` of the squared distance that a Min or K-min reduction selects from, when
    /// one is a value per row and the other a value per reduced index.
    pub select_dist: Option<[NodeId; 2]>,
}

/// Finds what can be fused and drops the nodes it absorbs from `plan`.
pub fn fuse(formula: &Formula, plan: &mut Plan, scheme: SumScheme) -> Fusions {
    let uses = uses(formula, plan);
    let Fusions { sq_dists, scaled_exps, .. } = fuse_elementwise(formula, plan);
    let nodes = &formula.graph.nodes;
    let red = &formula.reduction;
    // The other sum schemes accumulate term by term in a set order: no fused form.
    let blocked = matches!(scheme, SumScheme::Auto | SumScheme::BlockSum);
    let f = red.f;
    let product_sum = (red.kind == ReductionKind::Sum
        && blocked
        && nodes[f].op == Op::Mul
        && uses[f] == 1
        && plan.roles[f].is_some_and(|r| r.varies_in_tile()))
    .then(|| {
        plan.roles[f] = None;
        [nodes[f].args[0], nodes[f].args[1]]
    });
    let row_block = sq_dists.iter().enumerate().find_map(|(id, pair)| {
        let [a, b] = (*pair)?;
        let input = |n: NodeId| matches!(nodes[n].op, Op::Input(p) if formula.variables[p].category != Category::Param);
        let (x, y) = match (plan.roles[a]?, plan.roles[b]?) {
            (Role::Outer, Role::Inner) => (a, b),
            (Role::Inner, Role::Outer) => (b, a),
            _ => return None,
        };
        (input(x) && input(y) && nodes[x].dim == nodes[y].dim && nodes[x].dim >= row_block::MIN_DIM)
            .then_some((id, x, y))
    });
    let per_row = |r: Option<Role>| matches!(r, Some(Role::Outer | Role::Constant));
    let select_dist = sq_dists[f].filter(|&[a, b]| {
        use ReductionKind::*;
        matches!(red.kind, Min | ArgMin | MinArgMin | KMin | ArgKMin | KMinArgKMin)
            && row_block.is_none()
            && uses[f] == 1
            && nodes[a].dim.max(nodes[b].dim) <= reducers::SELECT_DIST_DIM
            && (per_row(plan.roles[a]) && plan.roles[b] == Some(Role::Inner)
                || per_row(plan.roles[b]) && plan.roles[a] == Some(Role::Inner))
    });
    if select_dist.is_some() {
        plan.roles[f] = None;
    }
    retain_computed(plan);
    Fusions { sq_dists, scaled_exps, product_sum, row_block, select_dist }
}

/// How many nodes of the plan (and the reduction) use each node: a node is absorbed only where
/// nothing else uses it.
fn uses(formula: &Formula, plan: &Plan) -> Vec<usize> {
    let red = &formula.reduction;
    let mut uses = vec![0usize; formula.graph.nodes.len()];
    uses[red.f] += 1;
    if let Some(g) = red.g {
        uses[g] += 1;
    }
    for (id, node) in formula.graph.nodes.iter().enumerate() {
        if plan.roles[id].is_some() {
            for &a in &node.args {
                uses[a] += 1;
            }
        }
    }
    uses
}

/// The fusions of element-wise operations only (squared distances, scaled exponentials), which hold
/// whichever index runs along the tile; the others depend on how the reduction walks the rows.
pub fn fuse_elementwise(formula: &Formula, plan: &mut Plan) -> Fusions {
    let nodes = &formula.graph.nodes;
    let uses = uses(formula, plan);
    let mut sq_dists = vec![None; nodes.len()];
    for (id, node) in nodes.iter().enumerate() {
        if plan.roles[id].is_none() || node.op != Op::SqNorm2 {
            continue;
        }
        let diff = node.args[0];
        if nodes[diff].op == Op::Sub && uses[diff] == 1 {
            sq_dists[id] = Some([nodes[diff].args[0], nodes[diff].args[1]]);
            plan.roles[diff] = None;
        }
    }
    let mut scaled_exps = vec![None; nodes.len()];
    for (id, node) in nodes.iter().enumerate() {
        // Element-wise operations keep the dimension: a dimension-1 Exp has dimension-1 arguments.
        if plan.roles[id].is_none() || node.op != Op::Exp || node.dim != 1 {
            continue;
        }
        let arg = node.args[0];
        let one_per_tile = |n: NodeId| nodes[n].dim == 1 && plan.roles[n].is_some_and(|r| !r.varies_in_tile());
        let fused = match (nodes[arg].op, &nodes[arg].args[..]) {
            (Op::Neg, &[a]) => Some((a, None)),
            (Op::Mul, &[s, a]) | (Op::Mul, &[a, s]) if one_per_tile(s) => Some((a, Some(s))),
            _ => None,
        };
        if uses[arg] == 1 && fused.is_some() {
            scaled_exps[id] = fused;
            plan.roles[arg] = None;
        }
    }
    retain_computed(plan);
    Fusions { sq_dists, scaled_exps, product_sum: None, row_block: None, select_dist: None }
}

/// Drops the absorbed nodes from the lists of nodes to compute.
fn retain_computed(plan: &mut Plan) {
    for list in [&mut plan.constant, &mut plan.outer, &mut plan.inner, &mut plan.pair] {
        list.retain(|&id| plan.roles[id].is_some());
    }
}

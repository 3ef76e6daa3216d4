//! Operations the CPU evaluator fuses: SqNorm2(a - b), the squared distance at the heart of most
//! kernels, is computed in one pass over a and b without storing their difference.

use crate::formula::{Formula, NodeId, Op};
use crate::plan::Plan;

/// For every node, the arguments `[a, b]` when the node is a squared distance computed fused.
pub type SqDists = Vec<Option<[NodeId; 2]>>;

/// Finds the fusable squared distances and drops the differences they absorb from `plan`.
pub fn fuse_sq_dists(formula: &Formula, plan: &mut Plan) -> SqDists {
    let nodes = &formula.graph.nodes;
    let mut uses = vec![0usize; nodes.len()];
    uses[formula.reduction.f] += 1;
    if let Some(g) = formula.reduction.g {
        uses[g] += 1;
    }
    for (id, node) in nodes.iter().enumerate() {
        if plan.roles[id].is_some() {
            for &a in &node.args {
                uses[a] += 1;
            }
        }
    }
    let mut fused = vec![None; nodes.len()];
    for (id, node) in nodes.iter().enumerate() {
        if plan.roles[id].is_none() || node.op != Op::SqNorm2 {
            continue;
        }
        let diff = node.args[0];
        if nodes[diff].op == Op::Sub && uses[diff] == 1 {
            fused[id] = Some([nodes[diff].args[0], nodes[diff].args[1]]);
            plan.roles[diff] = None;
        }
    }
    for list in [&mut plan.constant, &mut plan.outer, &mut plan.inner, &mut plan.pair] {
        list.retain(|&id| plan.roles[id].is_some());
    }
    fused
}

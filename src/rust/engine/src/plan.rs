//! Which nodes of the graph vary along which index, for one reduction axis. Both backends compute
//! each node as rarely as its dependencies allow: constants once, nodes of the output index once per
//! output row, nodes of the reduced index once per tile, and only the rest for every pair.

use crate::formula::{Category, Formula, NodeId, Op};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Depends on parameters and constants only.
    Constant,
    /// Depends on the output index (i for axis 0), not on the reduced one.
    Outer,
    /// Depends on the reduced index only.
    Inner,
    /// Depends on both.
    Pair,
}

impl Role {
    fn join(self, other: Role) -> Role {
        use Role::*;
        match (self, other) {
            (Constant, r) | (r, Constant) => r,
            (a, b) if a == b => a,
            _ => Pair,
        }
    }

    /// Whether the node has one value per reduced index of a tile (rather than one per tile).
    pub fn varies_in_tile(self) -> bool {
        matches!(self, Role::Inner | Role::Pair)
    }
}

pub struct Plan {
    /// Role of every node of the graph (`None` where the reduction does not need it).
    pub roles: Vec<Option<Role>>,
    /// Nodes to compute, in topological order, by role (inputs excluded: they are viewed in place).
    pub constant: Vec<NodeId>,
    pub outer: Vec<NodeId>,
    pub inner: Vec<NodeId>,
    pub pair: Vec<NodeId>,
}

impl Plan {
    pub fn new(formula: &Formula) -> Plan {
        let axis = formula.reduction.axis;
        let outer_category = if axis == 0 { Category::I } else { Category::J };
        let mut roots = vec![formula.reduction.f];
        roots.extend(formula.reduction.g);
        let needed = formula.graph.reachable(&roots);
        let mut roles: Vec<Option<Role>> = vec![None; formula.graph.nodes.len()];
        let mut plan = Plan { roles: vec![], constant: vec![], outer: vec![], inner: vec![], pair: vec![] };
        for (id, node) in formula.graph.nodes.iter().enumerate() {
            if !needed[id] {
                continue;
            }
            let role = match node.op {
                Op::Input(p) => match formula.variables[p].category {
                    Category::Param => Role::Constant,
                    c if c == outer_category => Role::Outer,
                    _ => Role::Inner,
                },
                _ => node.args.iter().fold(Role::Constant, |r, &a| r.join(roles[a].expect("arguments come first"))),
            };
            roles[id] = Some(role);
            if !matches!(node.op, Op::Input(_)) {
                match role {
                    Role::Constant => plan.constant.push(id),
                    Role::Outer => plan.outer.push(id),
                    Role::Inner => plan.inner.push(id),
                    Role::Pair => plan.pair.push(id),
                }
            }
        }
        plan.roles = roles;
        plan
    }
}

//! The writer of a kernel's source (`Gen`): the formula, its layout, the source so far and the
//! row slot being written. Its methods are spread by part: `prelude` (helpers and signature),
//! `body` (the kernel's parts in order), `operations` (a node's value), and the reducers
//! (`reducer`, `exponentials`, `candidates`) write through it.

use super::layout::Layout;
use crate::cuda::dtype::Dtype;
use crate::formula::{Formula, NodeId};
use crate::plan::Role;

/// The kernel's source being written, and what it is written from.
pub(super) struct Gen<'a> {
    pub(super) formula: &'a Formula,
    pub(super) dtype: Dtype,
    pub(super) layout: &'a Layout,
    pub(super) src: String,
    /// The row slot being emitted.
    pub(super) q: usize,
    /// The number nodes, in the order of `rk_consts`.
    pub(super) constant_nodes: Vec<NodeId>,
}

impl Gen<'_> {
    /// The register array of node `id`: one per row slot for values that depend on the row.
    pub(super) fn name(&self, id: NodeId) -> String {
        match self.layout.plan.roles[id] {
            Some(Role::Outer | Role::Pair) => format!("v{id}_{}", self.q),
            _ => format!("v{id}"),
        }
    }

    pub(super) fn line(&mut self, s: &str) {
        self.src.push_str(s);
        self.src.push('\n');
    }

    pub(super) fn math(&self, name: &str) -> String {
        self.dtype.math(name)
    }

    /// `a * b + c` rounded once. Kernels are compiled without contraction (`builds`), so that
    /// every build of a kernel gives the same bits: the source says where a product is fused.
    pub(super) fn fma(&self, a: &str, b: &str, c: &str) -> String {
        format!("{}({a}, {b}, {c})", self.math("fma"))
    }
}

//! A node's value in the kernel (`Gen::node`): the CUDA of each operation of the language on the
//! register arrays of its arguments (`Operands`).

use super::gen::Gen;
use crate::cuda::dtype::Dtype;
use crate::formula::{Node, NodeId, Op};
use crate::plan::Role;

impl Gen<'_> {
    /// Emits `T v{id}[dim]` computed from its arguments.
    pub(super) fn node(&mut self, id: NodeId) {
        let (formula, layout) = (self.formula, self.layout);
        let node = &formula.graph.nodes[id];
        let o = Operands {
            out: self.name(id),
            d: node.dim,
            args: node.args.iter().map(|&x| (self.name(x), formula.graph.dim(x))).collect(),
        };
        let body = match node.op {
            _ if layout.dots.is_some_and(|dots| dots.node == id) => {
                layout.dots.map(|dots| dots.read(&o.out)).unwrap_or_default()
            }
            Op::Input(_) => return,
            Op::Constant(_) => {
                let slot = self.constant_nodes.iter().position(|&c| c == id).expect("every number has a slot");
                format!("{}[0] = rk_consts[{slot}];", o.out)
            }
            Op::Neg
            | Op::Abs
            | Op::Acos
            | Op::Asin
            | Op::Atan
            | Op::Cos
            | Op::Sin
            | Op::Exp
            | Op::Log
            | Op::Floor
            | Op::Sqrt
            | Op::Inv
            | Op::Square
            | Op::ReLU
            | Op::Rsqrt
            | Op::Sign
            | Op::Step
            | Op::SinXDivX
            | Op::XLogX
            | Op::Round(_)
            | Op::Pow(_)
            | Op::ClampInt(..) => self.one_argument(node, &o),
            Op::Add
            | Op::Sub
            | Op::Mul
            | Op::Div
            | Op::Atan2
            | Op::Powf
            | Op::Equal
            | Op::NotEqual
            | Op::LessThan
            | Op::LessOrEqual
            | Op::Clamp
            | Op::IfElse
            | Op::Mod => self.several_arguments(id, node, &o),
            Op::Sum | Op::SqNorm2 | Op::Dot | Op::Max | Op::Min | Op::ArgMax | Op::ArgMin => {
                self.over_components(node, &o)
            }
            Op::Elem(_)
            | Op::ElemT(..)
            | Op::Extract(..)
            | Op::ExtractT(..)
            | Op::Concat
            | Op::OneHot(_)
            | Op::SumT(_)
            | Op::MatVecMult
            | Op::VecMatMult
            | Op::TensorProd => self.reshaping(node, &o),
        };
        let indent = if matches!(layout.plan.roles[id], Some(Role::Inner | Role::Pair)) { "        " } else { "  " };
        // A number's value stays out of the source (it is in rk_consts).
        let what = match node.op {
            Op::Constant(_) => "number".to_string(),
            op => format!("{op:?}"),
        };
        self.line(&format!("{indent}// node {id}: {what}\n{indent}T {}[{}]; {body}", o.out, o.d));
    }

    /// The body of an element-wise operation of one argument.
    fn one_argument(&self, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let m = |f: &str| self.math(f);
        let elementwise = |expr: String| o.elementwise(expr);
        match node.op {
            Op::Neg => elementwise(format!("-{}", at(0, "k"))),
            Op::Abs => elementwise(format!("{}({})", m("fabs"), at(0, "k"))),
            Op::Acos => elementwise(format!("{}({})", m("acos"), at(0, "k"))),
            Op::Asin => elementwise(format!("{}({})", m("asin"), at(0, "k"))),
            Op::Atan => elementwise(format!("{}({})", m("atan"), at(0, "k"))),
            Op::Cos => elementwise(format!("{}({})", m("cos"), at(0, "k"))),
            Op::Sin => elementwise(format!("{}({})", m("sin"), at(0, "k"))),
            Op::Exp => elementwise(format!("rk_exp({})", at(0, "k"))),
            Op::Log => elementwise(format!("{}({})", m("log"), at(0, "k"))),
            Op::Floor => elementwise(format!("{}({})", m("floor"), at(0, "k"))),
            Op::Sqrt => elementwise(format!("{}({})", m("sqrt"), at(0, "k"))),
            Op::Inv => elementwise(format!("(T)1 / {}", at(0, "k"))),
            Op::Square => elementwise(format!("{0} * {0}", at(0, "k"))),
            Op::ReLU => elementwise(format!("({0} < (T)0) ? (T)0 : {0}", at(0, "k"))),
            Op::Rsqrt => elementwise(format!("({0} == (T)0) ? (T)0 : (T)1 / {1}({0})", at(0, "k"), m("sqrt"))),
            Op::Sign => elementwise(format!("({0} > (T)0) ? (T)1 : (({0} < (T)0) ? (T)-1 : {0})", at(0, "k"))),
            Op::Step => elementwise(format!("({0} >= (T)0) ? (T)1 : (({0} < (T)0) ? (T)0 : {0})", at(0, "k"))),
            Op::SinXDivX => elementwise(format!("({0} == (T)0) ? (T)1 : {1}({0}) / {0}", at(0, "k"), m("sin"))),
            Op::XLogX => elementwise(format!("({0} == (T)0) ? (T)0 : {0} * {1}({0})", at(0, "k"), m("log"))),
            Op::Round(0) => elementwise(format!("{}({})", m("round"), at(0, "k"))),
            Op::Round(digits) => {
                let p = format!("((T){:?})", 10f64.powi(digits));
                elementwise(format!("{}({} * {p}) / {p}", m("round"), at(0, "k")))
            }
            Op::Pow(n) => elementwise(format!("rk_powi({}, {n})", at(0, "k"))),
            Op::ClampInt(lo, hi) => {
                elementwise(format!("({0} < (T){lo}) ? (T){lo} : (({0} > (T){hi}) ? (T){hi} : {0})", at(0, "k")))
            }
            op => unreachable!("{op:?} is not an operation of one argument"),
        }
    }

    /// Whether node `id` is a number of the formula that is a power of two whose inverse is a
    /// normal number in the kernel's type (as `rk_pow2` tests it).
    fn power_of_two(&self, id: NodeId) -> bool {
        let Some(c) = self.formula.graph.nodes[id].op.constant_value() else { return false };
        match self.dtype {
            Dtype::F16 | Dtype::F32 => {
                let (u, e) = ((c as f32).to_bits(), ((c as f32).to_bits() >> 23) & 0xff);
                u & 0x7f_ffff == 0 && e > 0 && e < 253
            }
            Dtype::F64 => {
                let (u, e) = (c.to_bits(), (c.to_bits() >> 52) & 0x7ff);
                u & 0xf_ffff_ffff_ffff == 0 && e > 0 && e < 2045
            }
        }
    }

    /// The body of an element-wise operation of two or three arguments (a dimension-1 argument is
    /// broadcast).
    fn several_arguments(&self, id: NodeId, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let m = |f: &str| self.math(f);
        let elementwise = |expr: String| o.elementwise(expr);
        match node.op {
            Op::Add | Op::Sub => elementwise(self.sum_or_difference(id, o)),
            Op::Mul => elementwise(format!("{} * {}", at(0, "k"), at(1, "k"))),
            // A number of the formula that is a power of two (with a normal inverse, in the
            // kernel's type) divides as a multiplication by its inverse, exactly the same number,
            // computed once: the source says so, so that a formula dividing by another number
            // gets its own kernel. (rk_div_fixed's test at run time cost 65 % of a log-sum-exp's
            // time, `(g - SqDist(x, y) / 2) * s`, H200.)
            Op::Div if self.power_of_two(node.args[1]) => {
                elementwise(format!("{} * ((T)1 / {})", at(0, "k"), at(1, "k")))
            }
            // A divisor that does not vary in the loop over the reduced index (another number of
            // the formula, now a kernel argument, or a value of the row) goes through rk_div_fixed.
            Op::Div if matches!(self.layout.plan.roles[node.args[1]], Some(Role::Constant | Role::Outer)) => {
                elementwise(format!("rk_div_fixed({}, {})", at(0, "k"), at(1, "k")))
            }
            Op::Div => elementwise(format!("{} / {}", at(0, "k"), at(1, "k"))),
            Op::Atan2 => elementwise(format!("{}({}, {})", m("atan2"), at(0, "k"), at(1, "k"))),
            Op::Powf => elementwise(format!("{}({}, {})", m("pow"), at(0, "k"), at(1, "k"))),
            Op::Equal => elementwise(format!("({} == {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::NotEqual => elementwise(format!("({} != {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::LessThan => elementwise(format!("({} < {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::LessOrEqual => elementwise(format!("({} <= {}) ? (T)1 : (T)0", at(0, "k"), at(1, "k"))),
            Op::Clamp => elementwise(format!(
                "({0} < {1}) ? {1} : (({0} > {2}) ? {2} : {0})",
                at(0, "k"),
                at(1, "k"),
                at(2, "k")
            )),
            Op::IfElse => elementwise(format!("({} >= (T)0) ? {} : {}", at(0, "k"), at(1, "k"), at(2, "k"))),
            Op::Mod => elementwise(format!(
                "{0} - {1} * {3}(({0} - {2}) / {1})",
                at(0, "k"),
                at(1, "k"),
                at(2, "k"),
                m("floor")
            )),
            op => unreachable!("{op:?} is not an element-wise operation of several arguments"),
        }
    }

    /// Component `k` of an Add or a Sub, a product among its terms fused (`a * b + c` is
    /// `fma(a, b, c)`, `c - a * b` is `fma(-a, b, c)`), as the compiler's contraction fused it.
    fn sum_or_difference(&self, id: NodeId, o: &Operands) -> String {
        let at = |i: usize| o.at(i, "k");
        let add = self.formula.graph.nodes[id].op == Op::Add;
        if let Some((a, b)) = self.product_at(id, 0) {
            let c = if add { at(1) } else { format!("-{}", at(1)) };
            return self.fma(&a, &b, &c);
        }
        if let Some((a, b)) = self.product_at(id, 1) {
            let a = if add { a } else { format!("-{a}") };
            return self.fma(&a, &b, &at(0));
        }
        format!("{} {} {}", at(0), if add { "+" } else { "-" }, at(1))
    }

    /// The factors of component `k` of argument `i` of node `id` where that argument is a
    /// product computed in the same loop as the node (so that its factors are at hand).
    fn product_at(&self, id: NodeId, i: usize) -> Option<(String, String)> {
        let arg = self.formula.graph.nodes[id].args[i];
        let roles = &self.layout.plan.roles;
        let tensor_cores = self.layout.dots.is_some_and(|dots| dots.node == arg);
        match !tensor_cores && roles[arg].is_some() && roles[arg] == roles[id] {
            true => self.factors(arg, "k"),
            false => None,
        }
    }

    /// Component `k` of the two factors of node `id` where it is a product (Mul or Square),
    /// broadcasting dimension 1.
    pub(super) fn factors(&self, id: NodeId, k: &str) -> Option<(String, String)> {
        let graph = &self.formula.graph;
        let at = |x: NodeId| match graph.dim(x) {
            1 => format!("{}[0]", self.name(x)),
            _ => format!("{}[{k}]", self.name(x)),
        };
        let node = &graph.nodes[id];
        match node.op {
            Op::Mul => Some((at(node.args[0]), at(node.args[1]))),
            Op::Square => Some((at(node.args[0]), at(node.args[0]))),
            _ => None,
        }
    }

    /// The body of a reduction over the components of a vector (of dimension 1).
    fn over_components(&self, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let (out, a) = (&o.out, &o.args);
        match node.op {
            Op::Sum => {
                format!("{out}[0] = {}; for (int k = 1; k < {}; k++) {out}[0] += {};", at(0, "0"), a[0].1, at(0, "k"))
            }
            Op::SqNorm2 => format!(
                "{out}[0] = (T)0; for (int k = 0; k < {}; k++) {out}[0] = {};",
                a[0].1,
                self.fma(&at(0, "k"), &at(0, "k"), &format!("{out}[0]"))
            ),
            Op::Dot => format!(
                "{out}[0] = (T)0; for (int k = 0; k < {}; k++) {out}[0] = {};",
                a[0].1.max(a[1].1),
                self.fma(&at(0, "k"), &at(1, "k"), &format!("{out}[0]"))
            ),
            Op::Max | Op::Min => {
                let cmp = if node.op == Op::Max { ">" } else { "<" };
                format!(
                    "{out}[0] = {0}; for (int k = 1; k < {1}; k++) {{ T x = {2}; if (x {cmp} {out}[0] || rk_isnan(x)) {out}[0] = x; }}",
                    at(0, "0"),
                    a[0].1,
                    at(0, "k")
                )
            }
            Op::ArgMax | Op::ArgMin => {
                let cmp = if node.op == Op::ArgMax { ">" } else { "<" };
                format!(
                    "{{ T best = {0}; {out}[0] = (T)0; for (int k = 1; k < {1}; k++) {{ T x = {2}; \
                     if (x {cmp} best || (rk_isnan(x) && !rk_isnan(best))) {{ best = x; {out}[0] = (T)k; }} }} }}",
                    at(0, "0"),
                    a[0].1,
                    at(0, "k")
                )
            }
            op => unreachable!("{op:?} is not a reduction over the components"),
        }
    }

    /// The body of a reshaping (elements, extraction, concatenation, ...) or of a product of
    /// matrices and vectors.
    fn reshaping(&self, node: &Node, o: &Operands) -> String {
        let at = |i: usize, k: &str| o.at(i, k);
        let m = |f: &str| self.math(f);
        let elementwise = |expr: String| o.elementwise(expr);
        let (out, d, a) = (&o.out, o.d, &o.args);
        match node.op {
            Op::Elem(p) => format!("{out}[0] = {};", at(0, &p.to_string())),
            Op::ElemT(_, p) => format!("for (int k = 0; k < {d}; k++) {out}[k] = (T)0; {out}[{p}] = {};", at(0, "0")),
            Op::Extract(start, _) => format!("for (int k = 0; k < {d}; k++) {out}[k] = {};", at(0, &format!("{start} + k"))),
            Op::ExtractT(start, _) => format!(
                "for (int k = 0; k < {d}; k++) {out}[k] = (T)0; for (int k = 0; k < {}; k++) {out}[{start} + k] = {};",
                a[0].1,
                at(0, "k")
            ),
            Op::Concat => format!(
                "for (int k = 0; k < {0}; k++) {out}[k] = {1}; for (int k = 0; k < {2}; k++) {out}[{0} + k] = {3};",
                a[0].1,
                at(0, "k"),
                a[1].1,
                at(1, "k")
            ),
            Op::OneHot(_) => format!("for (int k = 0; k < {d}; k++) {out}[k] = ({}({}) == (T)k) ? (T)1 : (T)0;", m("round"), at(0, "0")),
            Op::SumT(_) => elementwise(at(0, "0")),
            Op::MatVecMult => format!(
                "for (int k = 0; k < {d}; k++) {{ {out}[k] = (T)0; for (int l = 0; l < {}; l++) {out}[k] = {}; }}",
                a[1].1,
                self.fma(&at(0, &format!("k + {d} * l")), &at(1, "l"), &format!("{out}[k]"))
            ),
            Op::VecMatMult => format!(
                "for (int l = 0; l < {d}; l++) {{ {out}[l] = (T)0; for (int k = 0; k < {}; k++) {out}[l] = {}; }}",
                a[0].1,
                self.fma(&at(0, "k"), &at(1, &format!("k + {} * l", a[0].1)), &format!("{out}[l]"))
            ),
            Op::TensorProd => format!(
                "for (int l = 0; l < {}; l++) for (int k = 0; k < {1}; k++) {out}[k + {1} * l] = {2} * {3};",
                a[1].1,
                a[0].1,
                at(0, "k"),
                at(1, "l")
            ),
            op => unreachable!("{op:?} is not a reshaping"),
        }
    }
}

/// The register arrays of a node and of its arguments, as `Gen::node` writes its body.
struct Operands {
    /// The node's array, and its dimension.
    out: String,
    d: usize,
    /// Each argument's array and its dimension.
    args: Vec<(String, usize)>,
}

impl Operands {
    /// Component `k` of argument `i`, broadcasting dimension 1.
    fn at(&self, i: usize, k: &str) -> String {
        let (name, dim) = &self.args[i];
        if *dim == 1 {
            format!("{name}[0]")
        } else {
            format!("{name}[{k}]")
        }
    }

    /// Every component of the node set to `expr` (of `k`).
    fn elementwise(&self, expr: String) -> String {
        format!("for (int k = 0; k < {d}; k++) {out}[k] = {expr};", d = self.d, out = self.out)
    }
}

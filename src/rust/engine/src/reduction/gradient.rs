//! What each reduction's gradient is (KeOps' `DiffT`): for `Grad(reduction, v, e)`, the gradient
//! in the variable `v` of `sum <reduction, e>`, the forward results it needs and the formula that
//! consumes them, a Sum reduction over the index of `v` of `Grad(F, v, E)` terms (the engine
//! differentiates those formulas symbolically, `formula::autodiff`).
//!
//! The rules are written as formula text over the text of the reduction's own formulas: each
//! forward result and the gradient are then formulas like any other, which the engine parses,
//! compiles and caches, and which R runs with the operators it runs any formula with. No parsed
//! type appears here (reduction/ does not depend on formula/): `formula::gradient` assembles a
//! rule into a plan (inputs, declarations, the order of the forward runs).

use super::ReductionKind;

/// A reduction to differentiate, as formula text.
pub struct Differentiate<'a> {
    pub kind: ReductionKind,
    /// The reduction as written (`SumSoftMaxWeight_Reduction(f, g, 0)`).
    pub text: &'a str,
    /// Its formula and, for the weighted ones, its weights, as operands (in parentheses when a
    /// sum or a difference).
    pub f: &'a str,
    pub g: Option<&'a str>,
    pub axis: usize,
    pub k: usize,
    /// The dimension of its values (of `g` for the weighted ones), K excluded.
    pub dim: usize,
    /// The variable and the gradient input, by name.
    pub v: &'a str,
    pub e: &'a str,
    /// The axis of the gradient's Sum reduction: 0 (over j) for an i-variable or a parameter,
    /// 1 (over i) for a j-variable.
    pub v_axis: usize,
}

/// A forward result that the gradient formula takes as an input, computed first.
#[derive(Debug, Clone, PartialEq)]
pub struct Saved {
    pub name: String,
    pub dim: usize,
    pub source: Source,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Source {
    /// The values of this reduction of the same inputs: one row per output row.
    Values(String),
    /// The indices this selection of the same inputs picks, 0-based: one row per output row.
    Indices(String),
    /// The index 0, 1, ... of each row of the reduced index (a variable of the reduced category).
    ReducedIndex,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Rule {
    /// The result does not move with the inputs (indices): a zero gradient.
    Zero,
    /// The gradient is the reduction `formula` of the inputs and of the `saved` results.
    Formula { saved: Vec<Saved>, formula: String },
}

impl ReductionKind {
    /// The dimension of the gradient input `e` for a result of dimension `dim`: that of the result
    /// (K values per coordinate for KMin). ArgKMin keeps the dimension rkeops has always asked for
    /// (`dim`): its gradient is zero, `e` is not read.
    pub fn gradient_input_dim(self, k: usize, dim: usize) -> usize {
        match self {
            ReductionKind::KMin | ReductionKind::KMinArgKMin => k * dim,
            _ => dim,
        }
    }
}

impl Differentiate<'_> {
    /// The gradient of this reduction; `fresh(base)` names the saved results (a name that no
    /// variable has, nor any name it gave before).
    pub fn rule(&self, fresh: &mut dyn FnMut(&str) -> String) -> Rule {
        use ReductionKind::*;
        match self.kind {
            Sum => self.sum(vec![], vec![format!("Grad({}, {}, {})", self.f, self.v, self.e)]),
            LogSumExp | SumSoftMaxWeight => self.soft_max(fresh),
            LogSumExpWeight => self.log_sum_exp_weight(fresh),
            Min | Max | MinArgMin | MaxArgMax | KMin | KMinArgKMin => self.selection(fresh),
            ArgMin | ArgMax | ArgKMin => Rule::Zero,
        }
    }

    /// The Sum reduction over the variable's index of `terms`.
    fn sum(&self, saved: Vec<Saved>, terms: Vec<String>) -> Rule {
        Rule::Formula { saved, formula: format!("Sum_Reduction({}, {})", terms.join(" + "), self.v_axis) }
    }

    /// A forward result with the output's rows.
    fn saved(name: &str, dim: usize, source: Source) -> Saved {
        Saved { name: name.to_string(), dim, source }
    }

    /// LogSumExp and SumSoftMaxWeight: the soft-max weights exp(f - lse) of each reduced row, from
    /// the forward log-sum-exp (numerically stable: no exp(f) alone). For SumSoftMaxWeight,
    /// out = sum_j w_j g_j (its result) and d out = sum_j w_j (dg_j + (g_j - out) df_j).
    fn soft_max(&self, fresh: &mut dyn FnMut(&str) -> String) -> Rule {
        let (f, v, e) = (self.f, self.v, self.e);
        let lse = fresh("lse");
        let mut saved = vec![Self::saved(&lse, 1, Source::Values(format!("LogSumExp_Reduction({f}, {})", self.axis)))];
        let softmax = format!("Exp({f} - {lse})");
        let Some(g) = self.g else {
            return self.sum(saved, vec![format!("Grad({f}, {v}, {e} * {softmax})")]);
        };
        let out = fresh("out");
        saved.push(Self::saved(&out, self.dim, Source::Values(self.text.to_string())));
        let terms = vec![
            format!("Grad({g}, {v}, {e} * {softmax})"),
            format!("Grad({f}, {v}, {softmax} * ({e} | {g} - {out}))"),
        ];
        self.sum(saved, terms)
    }

    /// LogSumExpWeight, out_c = log sum_j exp(f_j) g_jc: weights exp(f_j - out_c) per coordinate,
    /// from its own result (d out_c = sum_j exp(f_j - out_c) (g_jc df_j + dg_jc)).
    fn log_sum_exp_weight(&self, fresh: &mut dyn FnMut(&str) -> String) -> Rule {
        let (f, g, v, e) = (self.f, self.g.unwrap_or("1"), self.v, self.e);
        let out = fresh("out");
        let saved = vec![Self::saved(&out, self.dim, Source::Values(self.text.to_string()))];
        let w = format!("Exp({f} - {out})");
        self.sum(saved, vec![format!("Grad({f}, {v}, Sum({e} * {w} * {g}))"), format!("Grad({g}, {v}, {e} * {w})")])
    }

    /// Min, Max, KMin and their Arg forms: the gradient flows to the selected rows. The forward
    /// selection's indices `sel` (column k + K c for the k-th of coordinate c) are compared with
    /// the index `jj` of each reduced row: integers compare exactly on every backend, where
    /// comparing values would depend on how each kernel rounds.
    fn selection(&self, fresh: &mut dyn FnMut(&str) -> String) -> Rule {
        let (f, axis, k) = (self.f, self.axis, self.k);
        let indices = match self.kind {
            ReductionKind::Min | ReductionKind::MinArgMin => format!("ArgMin_Reduction({f}, {axis})"),
            ReductionKind::Max | ReductionKind::MaxArgMax => format!("ArgMax_Reduction({f}, {axis})"),
            _ => format!("ArgKMin_Reduction({f}, {k}, {axis})"),
        };
        let (sel, jj) = (fresh("sel"), fresh("jj"));
        let saved =
            vec![Self::saved(&sel, k * self.dim, Source::Indices(indices)), Self::saved(&jj, 1, Source::ReducedIndex)];
        let coordinate = |c: usize| {
            let picked = (0..k).map(|i| i + k * c);
            picked.map(|at| format!("Elem({}, {at}) * Equal({jj}, Elem({sel}, {at}))", self.e)).collect::<Vec<_>>()
        };
        let weight = (1..self.dim)
            .fold(coordinate(0).join(" + "), |acc, c| format!("Concat({acc}, {})", coordinate(c).join(" + ")));
        self.sum(saved, vec![format!("Grad({f}, {}, {weight})", self.v)])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(kind: ReductionKind, g: Option<&str>, k: usize, dim: usize) -> Rule {
        let d = Differentiate { kind, text: "R", f: "F", g, axis: 1, k, dim, v: "x", e: "e", v_axis: 0 };
        let mut taken = vec!["lse".to_string()];
        d.rule(&mut |base: &str| {
            let mut name = base.to_string();
            while taken.contains(&name) {
                name.push('_');
            }
            taken.push(name.clone());
            name
        })
    }

    fn formula(r: Rule) -> (String, Vec<Source>) {
        match r {
            Rule::Formula { saved, formula } => (formula, saved.into_iter().map(|s| s.source).collect()),
            Rule::Zero => panic!("a zero gradient"),
        }
    }

    #[test]
    fn one_rule_per_reduction() {
        use ReductionKind::*;
        let sum = formula(rule(Sum, None, 1, 2));
        assert_eq!(sum, ("Sum_Reduction(Grad(F, x, e), 0)".into(), vec![]));
        // (fresh names: "lse" is taken by a variable)
        let lse = formula(rule(LogSumExp, None, 1, 1));
        let want = vec![Source::Values("LogSumExp_Reduction(F, 1)".into())];
        assert_eq!(lse, ("Sum_Reduction(Grad(F, x, e * Exp(F - lse_)), 0)".into(), want));
        let (text, saved) = formula(rule(SumSoftMaxWeight, Some("G"), 1, 2));
        assert_eq!(saved[1], Source::Values("R".into()));
        assert!(text.contains("Grad(F, x, Exp(F - lse_) * (e | G - out))"), "{text}");
        let (text, saved) = formula(rule(LogSumExpWeight, Some("G"), 1, 2));
        assert_eq!(saved, vec![Source::Values("R".into())]);
        assert!(text.contains("Grad(F, x, Sum(e * Exp(F - out) * G))"), "{text}");
        for kind in [ArgMin, ArgMax, ArgKMin] {
            assert_eq!(rule(kind, None, 3, 2), Rule::Zero);
        }
    }

    #[test]
    fn selections_compare_indices_with_each_reduced_row() {
        use ReductionKind::*;
        let (text, saved) = formula(rule(Max, None, 1, 1));
        assert_eq!(text, "Sum_Reduction(Grad(F, x, Elem(e, 0) * Equal(jj, Elem(sel, 0))), 0)");
        assert_eq!(saved, vec![Source::Indices("ArgMax_Reduction(F, 1)".into()), Source::ReducedIndex]);
        // K = 2 values of each of 2 coordinates: columns k + K c.
        let (text, saved) = formula(rule(KMinArgKMin, None, 2, 2));
        assert_eq!(saved[0], Source::Indices("ArgKMin_Reduction(F, 2, 1)".into()));
        let pick = |at: usize| format!("Elem(e, {at}) * Equal(jj, Elem(sel, {at}))");
        let want = format!("Concat({} + {}, {} + {})", pick(0), pick(1), pick(2), pick(3));
        assert_eq!(text, format!("Sum_Reduction(Grad(F, x, {want}), 0)"));
        assert_eq!(KMin.gradient_input_dim(3, 2), 6);
        assert_eq!(ArgKMin.gradient_input_dim(3, 2), 2);
    }
}

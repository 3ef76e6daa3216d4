//! Variables of a formula: `x = Vi(3)` declarations in `args` and `Var(pos, dim, cat)` inside formulas.

use crate::error::{Error, Result};

/// Which index a variable follows: i (the rows of the output for axis 0), j, or none (a parameter).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Category {
    I,
    J,
    Param,
}

impl Category {
    /// KeOps' numbering, used by `Var(pos, dim, cat)`.
    pub fn from_code(code: i64) -> Option<Category> {
        match code {
            0 => Some(Category::I),
            1 => Some(Category::J),
            2 => Some(Category::Param),
            _ => None,
        }
    }

    pub fn keyword(self) -> &'static str {
        match self {
            Category::I => "Vi",
            Category::J => "Vj",
            Category::Param => "Pm",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    pub name: String,
    pub category: Category,
    pub dim: usize,
    /// 0-based position in the list of inputs.
    pub position: usize,
}

/// Largest dimension of one variable; far beyond any real use, small enough to never overflow.
pub const MAX_DIM: usize = 1 << 20;

/// Parses the `args` declarations: `"x = Vi(3)"`, `"x=Vi(0,3)"` (position, dimension), `"p = Pm(2)"`.
pub fn parse_declarations(args: &[String]) -> Result<Vec<Variable>> {
    let mut vars: Vec<Variable> = Vec::with_capacity(args.len());
    for (index, text) in args.iter().enumerate() {
        let bad = |what: &str| Error::ArgDeclaration { index, text: text.clone(), what: what.into() };
        let (name, decl) = text
            .split_once('=')
            .ok_or_else(|| bad("expected the form 'name = Vi(dim)', 'name = Vj(dim)' or 'name = Pm(dim)'"))?;
        let name = name.trim();
        if name.is_empty()
            || !name.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
            || !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '.')
        {
            return Err(bad("the name must start with a letter and contain only letters, digits, '_' or '.'"));
        }
        let decl = decl.trim();
        let (keyword, rest) = decl.split_at(decl.find(|c: char| !c.is_ascii_alphabetic()).unwrap_or(decl.len()));
        let category = match keyword {
            "Vi" => Category::I,
            "Vj" => Category::J,
            "Pm" => Category::Param,
            _ => return Err(bad("the type must be Vi (indexed by i), Vj (indexed by j) or Pm (parameter)")),
        };
        let inner = rest
            .trim()
            .strip_prefix('(')
            .and_then(|r| r.strip_suffix(')'))
            .ok_or_else(|| bad("expected parentheses with the dimension, as in Vi(3)"))?;
        let numbers: Vec<Option<usize>> = inner.split(',').map(|s| s.trim().parse::<usize>().ok()).collect();
        let (position, dim) =
            match numbers.as_slice() {
                [Some(d)] => (index, *d),
                [Some(p), Some(d)] => (*p, *d),
                _ => return Err(bad(
                    "expected a dimension Vi(dim) or a position and a dimension Vi(pos, dim), as non-negative integers",
                )),
            };
        if dim == 0 || dim > MAX_DIM {
            return Err(bad(&format!("the dimension must be between 1 and {MAX_DIM}")));
        }
        if vars.iter().any(|v| v.name == name) {
            return Err(bad(&format!("the name '{name}' is declared twice")));
        }
        if let Some(other) = vars.iter().find(|v| v.position == position) {
            return Err(bad(&format!("position {position} is already taken by '{}'", other.name)));
        }
        vars.push(Variable { name: name.to_string(), category, dim, position });
    }
    Ok(vars)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decl(v: &[&str]) -> Result<Vec<Variable>> {
        parse_declarations(&v.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    #[test]
    fn declarations() {
        let v = decl(&["x = Vi(3)", "y=Vj(3)", " b = Vj(2) ", "s = Pm(1)"]).unwrap();
        assert_eq!(v[1], Variable { name: "y".into(), category: Category::J, dim: 3, position: 1 });
        assert_eq!(v[3].category, Category::Param);
        let v = decl(&["x = Vi(1, 3)", "y = Vj(0, 2)"]).unwrap();
        assert_eq!((v[0].position, v[0].dim, v[1].position), (1, 3, 0));
    }

    #[test]
    fn bad_declarations() {
        for (text, needle) in [
            ("x Vi(3)", "expected the form"),
            ("x = Vk(3)", "Vi (indexed by i)"),
            ("x = Vi(0)", "between 1"),
            ("x = Vi(a)", "non-negative integers"),
            ("x = Vi 3", "parentheses"),
            ("1x = Vi(3)", "must start with a letter"),
        ] {
            let e = decl(&[text]).unwrap_err().to_string();
            assert!(e.contains(needle), "{text}: {e}");
        }
        assert!(decl(&["x = Vi(3)", "x = Vj(3)"]).unwrap_err().to_string().contains("declared twice"));
        assert!(decl(&["x = Vi(0,3)", "y = Vj(0,3)"]).unwrap_err().to_string().contains("already taken"));
    }
}

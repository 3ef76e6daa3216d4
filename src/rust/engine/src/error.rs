//! The one error type of the engine. Messages are written for the R user who typed the formula or
//! passed the inputs: they say what was wrong and what was expected.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq)]
pub enum Error {
    /// The formula string could not be parsed. `pos` is a 0-based byte offset into `formula`.
    #[error("{}", parse_message(.what, .token, .pos, .formula))]
    Parse { what: String, token: String, pos: usize, formula: String },

    /// An element of `args` (`"x = Vi(3)"`) is malformed or inconsistent.
    #[error("argument declaration {} (\"{text}\"): {what}", .index + 1)]
    ArgDeclaration { index: usize, text: String, what: String },

    /// The formula is well formed but meaningless: unknown names, wrong arity, dimension mismatch.
    #[error("{}", formula_message(.what, .pos, .formula))]
    Formula { what: String, pos: usize, formula: String },

    /// A gradient form (`Grad(reduction, v, e)`, `GradFromPos(reduction, v, I)`) that cannot be a
    /// gradient; the message quotes the formula.
    #[error("{0}")]
    Gradient(String),

    /// An input passed at run time does not fit the declaration of its variable.
    #[error("input '{name}': {what}")]
    Input { name: String, what: String },

    /// The GPU cannot be used, or failed: what and why, with the device when there is one.
    #[error("GPU: {0}")]
    Gpu(String),

    /// Host or GPU memory is too small for the computation: what needs how much (the message says
    /// which memory, "GPU: device ..." for a GPU's).
    #[error("{0}")]
    Memory(String),

    /// The kernel cache directory cannot be created or used.
    #[error("{0}")]
    Cache(String),

    /// The caller's interrupt check (`RunOptions::interrupt`) asked to stop.
    #[error("interrupted by the user")]
    Interrupted,

    /// Anything else the caller asked for that cannot be done (bad option, bad K, ...).
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// The kind of failure, one word, for callers that report errors by kind (the R binding makes
    /// it the class `rkeops_error_<kind>` of the condition): a formula that cannot be used, an
    /// input or request that does not fit it, the GPU, memory, the kernel cache, an interrupt.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Parse { .. } | Error::ArgDeclaration { .. } | Error::Formula { .. } | Error::Gradient(_) => {
                "formula"
            }
            Error::Input { .. } | Error::Invalid(_) => "input",
            Error::Gpu(_) => "gpu",
            Error::Memory(_) => "memory",
            Error::Cache(_) => "cache",
            Error::Interrupted => "interrupt",
        }
    }
}

pub type Result<T> = std::result::Result<T, Error>;

/// The message a caught panic carries (panics carry a `String` or a `&str`), for error reports.
pub fn panic_message(panic: &(dyn std::any::Any + Send)) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "unknown cause".into())
}

/// The formula with a caret under the offending character, so the user sees where it went wrong.
fn pointer(formula: &str, pos: usize) -> String {
    let column = formula[..pos.min(formula.len())].chars().count();
    format!("  {formula}\n  {}^", " ".repeat(column))
}

fn parse_message(what: &str, token: &str, pos: &usize, formula: &str) -> String {
    let column = formula[..(*pos).min(formula.len())].chars().count() + 1;
    let found = if token.is_empty() { "the end of the formula".to_string() } else { format!("'{token}'") };
    format!("formula parse error at position {column}: {what}, found {found}\n{}", pointer(formula, *pos))
}

fn formula_message(what: &str, pos: &usize, formula: &str) -> String {
    let column = formula[..(*pos).min(formula.len())].chars().count() + 1;
    format!("formula error at position {column}: {what}\n{}", pointer(formula, *pos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_messages_of_the_new_variants() {
        let memory = "GPU: device 0 (X) has too little free memory";
        assert_eq!(Error::Memory(memory.into()).to_string(), memory);
        assert_eq!(Error::Cache("cannot create the kernel cache directory /x: denied".into()).kind(), "cache");
        assert_eq!(Error::Invalid("bad K".into()).kind(), "input");
        assert_eq!(Error::Interrupted.kind(), "interrupt");
        let parse = Error::Parse { what: "w".into(), token: "t".into(), pos: 0, formula: "t".into() };
        assert_eq!(parse.kind(), "formula");
    }
}

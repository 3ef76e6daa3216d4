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

    /// An input passed at run time does not fit the declaration of its variable.
    #[error("input '{name}': {what}")]
    Input { name: String, what: String },

    /// The GPU cannot be used, or failed: what and why, with the device when there is one.
    #[error("GPU: {0}")]
    Gpu(String),

    /// The caller's interrupt check (`RunOptions::interrupt`) asked to stop.
    #[error("interrupted by the user")]
    Interrupted,

    /// Anything else the caller asked for that cannot be done (bad option, bad K, ...).
    #[error("{0}")]
    Invalid(String),
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

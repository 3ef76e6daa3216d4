//! Failures on their way to R. Each keeps its kind, which R makes the class `rkeops_error_<kind>`
//! of the condition (R/checks.R), so that R code can tell a bad input from a GPU failure without
//! reading the message: the engine's kinds (`engine::Error::kind`), `input` for the checks of this
//! layer, `internal` for what can only be a bug of rkeops (a panic, R refusing a result).

use std::panic::{catch_unwind, AssertUnwindSafe};

use extendr_api::prelude::*;

/// What R reports: `list(error = message, kind = kind, arg = arg)` (no `arg` when unknown).
#[derive(Debug)]
pub struct RError {
    kind: &'static str,
    /// The R argument, or the operator's input variable, that is wrong (input errors).
    arg: Option<String>,
    message: String,
}

impl RError {
    /// A bad argument or input named `arg` (as R knows it).
    pub fn input(arg: &str, message: impl Into<String>) -> RError {
        RError { kind: "input", arg: Some(arg.to_string()), message: message.into() }
    }

    /// A bad argument or input that the message describes without one name.
    pub fn unnamed_input(message: impl Into<String>) -> RError {
        RError { kind: "input", arg: None, message: message.into() }
    }

    pub fn of_kind(kind: &'static str, message: impl Into<String>) -> RError {
        RError { kind, arg: None, message: message.into() }
    }

    /// The error as the list that R/checks.R's `rust_result()` turns into a condition.
    fn into_robj(self) -> Robj {
        let mut names = vec!["error", "kind"];
        let mut values = vec![Robj::from(self.message), Robj::from(self.kind)];
        if let Some(arg) = self.arg {
            names.push("arg");
            values.push(Robj::from(arg));
        }
        List::from_names_and_values(names, values).map_or(Robj::from(()), Robj::from)
    }
}

impl From<engine::Error> for RError {
    fn from(e: engine::Error) -> RError {
        let arg = match &e {
            engine::Error::Input { name, .. } => Some(name.clone()),
            _ => None,
        };
        RError { kind: e.kind(), arg, message: e.to_string() }
    }
}

/// extendr fails only where R does (allocating, setting an attribute): a bug of rkeops, not of
/// the caller's data.
impl From<extendr_api::Error> for RError {
    fn from(e: extendr_api::Error) -> RError {
        RError::of_kind("internal", e.to_string())
    }
}

pub type Fallible<T = Robj> = std::result::Result<T, RError>;

/// `option.or_input("x", "'x' must be ...")?`: a missing value as an input error.
pub trait OrInput<T> {
    fn or_input(self, arg: &str, message: impl Into<String>) -> Fallible<T>;
}

impl<T> OrInput<T> for Option<T> {
    fn or_input(self, arg: &str, message: impl Into<String>) -> Fallible<T> {
        self.ok_or_else(|| RError::input(arg, message))
    }
}

/// Runs `f`, turning a panic into an error list: nothing that happens here may crash R.
pub fn guarded(f: impl FnOnce() -> Fallible) -> Robj {
    // (the progress bar of the call ends with it: success, error, interrupt or panic)
    let _bar = BarEnds;
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(Ok(robj)) => robj,
        Ok(Err(e)) => e.into_robj(),
        Err(panic) => RError::of_kind(
            "internal",
            format!("internal error in rkeops (please report it): {}", engine::error::panic_message(panic.as_ref())),
        )
        .into_robj(),
    }
}

/// Ends the progress bar of a `.Call` when dropped (`progress::finish`).
struct BarEnds;

impl Drop for BarEnds {
    fn drop(&mut self) {
        crate::progress::finish();
    }
}

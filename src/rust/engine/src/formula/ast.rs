//! The syntax tree of a formula, as written: names are not resolved and dimensions not known yet.

use std::ops::Range;

#[derive(Debug, Clone, PartialEq)]
pub enum Ast {
    Int(i64),
    Float(f64),
    Name(String),
    Neg(Box<Node>),
    Binary(BinOp, Box<Node>, Box<Node>),
    /// `(a|b)`
    ScalarProduct(Box<Node>, Box<Node>),
    Call(String, Vec<Node>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinOp {
    Add,
    Sub,
    Mul,
    Div,
}

/// A syntax node with the byte offset where errors about it point in the formula, and its text,
/// `&formula[span]` (the parentheses around a parenthesised expression included), from which
/// gradients are written (`reduction::gradient`).
#[derive(Debug, Clone, PartialEq)]
pub struct Node {
    pub ast: Ast,
    pub pos: usize,
    pub span: Range<usize>,
}

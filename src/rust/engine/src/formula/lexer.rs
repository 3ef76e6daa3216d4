//! Splits a formula string into tokens, each with its byte offset for error messages.

use crate::error::{Error, Result};

#[derive(Debug, Clone, PartialEq)]
pub enum Tok {
    Ident(String),
    Int(i64),
    Float(f64),
    LParen,
    RParen,
    Comma,
    Plus,
    Minus,
    Star,
    Slash,
    Pipe,
    Equals,
    End,
}

#[derive(Debug, Clone)]
pub struct Token {
    pub tok: Tok,
    pub pos: usize,
    pub text: String,
}

pub fn tokenize(src: &str) -> Result<Vec<Token>> {
    let bytes = src.as_bytes();
    let mut tokens = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let c = bytes[i];
        let start = i;
        if c.is_ascii_whitespace() {
            i += 1;
            continue;
        }
        let single = match c {
            b'(' => Some(Tok::LParen),
            b')' => Some(Tok::RParen),
            b',' => Some(Tok::Comma),
            b'+' => Some(Tok::Plus),
            b'-' => Some(Tok::Minus),
            b'*' => Some(Tok::Star),
            b'/' => Some(Tok::Slash),
            b'|' => Some(Tok::Pipe),
            b'=' => Some(Tok::Equals),
            _ => None,
        };
        if let Some(tok) = single {
            i += 1;
            tokens.push(Token { tok, pos: start, text: (c as char).to_string() });
        } else if c.is_ascii_alphabetic() || c == b'_' {
            while i < bytes.len() && (bytes[i].is_ascii_alphanumeric() || bytes[i] == b'_' || bytes[i] == b'.') {
                i += 1;
            }
            let text = &src[start..i];
            tokens.push(Token { tok: Tok::Ident(text.to_string()), pos: start, text: text.to_string() });
        } else if c.is_ascii_digit() || c == b'.' {
            i = scan_number(bytes, i);
            let text = &src[start..i];
            let tok = number_token(text).ok_or_else(|| Error::Parse {
                what: "malformed number".into(),
                token: text.into(),
                pos: start,
                formula: src.into(),
            })?;
            tokens.push(Token { tok, pos: start, text: text.to_string() });
        } else {
            let ch = src[start..].chars().next().unwrap_or('?');
            return Err(Error::Parse {
                what: "unexpected character".into(),
                token: ch.to_string(),
                pos: start,
                formula: src.into(),
            });
        }
    }
    tokens.push(Token { tok: Tok::End, pos: src.len(), text: String::new() });
    Ok(tokens)
}

/// Digits, an optional fraction and an optional exponent (`12`, `0.5`, `.5`, `1e-3`).
fn scan_number(bytes: &[u8], mut i: usize) -> usize {
    let digits = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_digit() {
            i += 1;
        }
        i
    };
    i = digits(i);
    if i < bytes.len() && bytes[i] == b'.' {
        i = digits(i + 1);
    }
    if i < bytes.len() && (bytes[i] == b'e' || bytes[i] == b'E') {
        let mut k = i + 1;
        if k < bytes.len() && (bytes[k] == b'+' || bytes[k] == b'-') {
            k += 1;
        }
        if k < bytes.len() && bytes[k].is_ascii_digit() {
            i = digits(k);
        }
    }
    i
}

fn number_token(text: &str) -> Option<Tok> {
    if text.bytes().all(|b| b.is_ascii_digit()) {
        text.parse::<i64>().ok().map(Tok::Int)
    } else {
        text.parse::<f64>().ok().filter(|x| x.is_finite()).map(Tok::Float)
    }
}

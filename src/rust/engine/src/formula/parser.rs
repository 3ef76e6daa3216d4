//! Recursive-descent parser for the KeOps formula language:
//!
//! ```text
//! expr    := term (('+' | '-') term)*
//! term    := unary (('*' | '/') unary)*
//! unary   := '-' unary | primary
//! primary := number | name | name '(' expr (',' expr)* ')' | '(' expr ')' | '(' expr '|' expr ')'
//! ```

use super::ast::{Ast, BinOp, Node};
use super::lexer::{tokenize, Tok, Token};
use crate::error::{Error, Result};

/// Nesting deeper than this is refused with an error rather than risking the stack.
const MAX_DEPTH: usize = 500;

pub fn parse(src: &str) -> Result<Node> {
    let mut p = Parser { tokens: tokenize(src)?, at: 0, src, depth: 0 };
    let node = p.expr()?;
    p.expect(&Tok::End, "expected the end of the formula (an operator or a ',' may be missing)")?;
    Ok(node)
}

struct Parser<'a> {
    tokens: Vec<Token>,
    at: usize,
    src: &'a str,
    depth: usize,
}

impl Parser<'_> {
    fn peek(&self) -> &Token {
        &self.tokens[self.at]
    }

    fn next(&mut self) -> Token {
        let t = self.tokens[self.at].clone();
        if self.at + 1 < self.tokens.len() {
            self.at += 1;
        }
        t
    }

    fn error(&self, what: &str) -> Error {
        let t = self.peek();
        Error::Parse { what: what.into(), token: t.text.clone(), pos: t.pos, formula: self.src.into() }
    }

    fn expect(&mut self, tok: &Tok, what: &str) -> Result<()> {
        if &self.peek().tok == tok {
            self.next();
            Ok(())
        } else {
            Err(self.error(what))
        }
    }

    /// Consumes the ')' that closes a call or parentheses; returns the offset just past it.
    fn closing(&mut self, what: &str) -> Result<usize> {
        let end = self.peek().pos + 1;
        self.expect(&Tok::RParen, what)?;
        Ok(end)
    }

    /// One level deeper in the tree being built: an error past `MAX_DEPTH`, so that neither this
    /// parser nor the recursive passes over the tree (lowering, dropping it) can overflow the stack.
    fn deeper(&mut self) -> Result<()> {
        self.depth += 1;
        if self.depth > MAX_DEPTH {
            return Err(self.error(&format!(
                "the formula is nested more than {MAX_DEPTH} levels deep (each operator of a chain such as \
                 a + b + c counts as a level)"
            )));
        }
        Ok(())
    }

    fn expr(&mut self) -> Result<Node> {
        self.deeper()?;
        let mut left = self.term()?;
        // A chain a + b + c is a tree as deep as it is long.
        let mut chain = 0;
        loop {
            let op = match self.peek().tok {
                Tok::Plus => BinOp::Add,
                Tok::Minus => BinOp::Sub,
                _ => break,
            };
            self.deeper()?;
            chain += 1;
            self.next();
            let right = self.term()?;
            let (pos, span) = (left.pos, left.span.start..right.span.end);
            left = Node { ast: Ast::Binary(op, Box::new(left), Box::new(right)), pos, span };
        }
        self.depth -= 1 + chain;
        Ok(left)
    }

    fn term(&mut self) -> Result<Node> {
        let mut left = self.unary()?;
        let mut chain = 0;
        loop {
            let op = match self.peek().tok {
                Tok::Star => BinOp::Mul,
                Tok::Slash => BinOp::Div,
                _ => break,
            };
            self.deeper()?;
            chain += 1;
            self.next();
            let right = self.unary()?;
            let (pos, span) = (left.pos, left.span.start..right.span.end);
            left = Node { ast: Ast::Binary(op, Box::new(left), Box::new(right)), pos, span };
        }
        self.depth -= chain;
        Ok(left)
    }

    fn unary(&mut self) -> Result<Node> {
        if self.peek().tok == Tok::Minus {
            let pos = self.next().pos;
            self.deeper()?;
            let inner = self.unary()?;
            self.depth -= 1;
            let span = pos..inner.span.end;
            return Ok(Node { ast: Ast::Neg(Box::new(inner)), pos, span });
        }
        self.primary()
    }

    fn primary(&mut self) -> Result<Node> {
        let t = self.peek().clone();
        let span = t.pos..t.pos + t.text.len();
        match t.tok {
            Tok::Int(n) => {
                self.next();
                Ok(Node { ast: Ast::Int(n), pos: t.pos, span })
            }
            Tok::Float(x) => {
                self.next();
                Ok(Node { ast: Ast::Float(x), pos: t.pos, span })
            }
            Tok::Ident(name) => {
                self.next();
                if self.peek().tok != Tok::LParen {
                    return Ok(Node { ast: Ast::Name(name), pos: t.pos, span });
                }
                self.next();
                let mut args = vec![self.expr()?];
                while self.peek().tok == Tok::Comma {
                    self.next();
                    args.push(self.expr()?);
                }
                let end = self.closing(&format!("expected ',' or ')' in the arguments of {name}"))?;
                Ok(Node { ast: Ast::Call(name, args), pos: t.pos, span: t.pos..end })
            }
            Tok::LParen => {
                self.next();
                let inner = self.expr()?;
                match self.peek().tok {
                    Tok::RParen => {
                        let end = self.closing("")?;
                        Ok(Node { span: t.pos..end, ..inner })
                    }
                    Tok::Pipe => {
                        self.next();
                        let right = self.expr()?;
                        let end = self.closing("expected ')' to close the scalar product (a|b)")?;
                        Ok(Node {
                            ast: Ast::ScalarProduct(Box::new(inner), Box::new(right)),
                            pos: t.pos,
                            span: t.pos..end,
                        })
                    }
                    _ => Err(self.error("expected ')' or '|'")),
                }
            }
            _ => Err(self.error("expected a number, a variable, a function call or '('")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn precedence_and_unary_minus() {
        let n = parse("-a*b + c/2").unwrap();
        match n.ast {
            Ast::Binary(BinOp::Add, l, r) => {
                assert!(matches!(l.ast, Ast::Binary(BinOp::Mul, _, _)));
                assert!(matches!(r.ast, Ast::Binary(BinOp::Div, _, _)));
            }
            other => panic!("unexpected tree {other:?}"),
        }
    }

    #[test]
    fn scalar_product_and_literals() {
        let n = parse("(x|y) * 0.5 + 1e-3").unwrap();
        let text = format!("{n:?}");
        assert!(text.contains("ScalarProduct"));
        assert!(text.contains("Float(0.5)"));
        assert!(text.contains("Float(0.001)"));
    }

    #[test]
    fn nodes_know_their_text() {
        let src = "Sum_Reduction( (x|y) * 0.5 + -(a - b), 0)";
        let n = parse(src).unwrap();
        let text = |node: &Node| src[node.span.clone()].to_string();
        assert_eq!(text(&n), src);
        let Ast::Call(_, args) = &n.ast else { panic!("{n:?}") };
        assert_eq!(text(&args[0]), "(x|y) * 0.5 + -(a - b)");
        assert_eq!(text(&args[1]), "0");
        let Ast::Binary(_, l, r) = &args[0].ast else { panic!("{:?}", args[0]) };
        assert_eq!((text(l), text(r)), ("(x|y) * 0.5".into(), "-(a - b)".into()));
        let Ast::Neg(inner) = &r.ast else { panic!("{r:?}") };
        // Errors point into the parentheses, at the expression.
        assert_eq!((text(inner), inner.pos), ("(a - b)".into(), 31));
    }

    #[test]
    fn error_positions() {
        let e = parse("Sum_Reduction(Exp(-x)*, 0)").unwrap_err();
        match &e {
            Error::Parse { pos, token, .. } => {
                assert_eq!(*pos, 22);
                assert_eq!(token, ",");
            }
            other => panic!("{other:?}"),
        }
        assert!(e.to_string().contains("position 23"), "{e}");
        let e = parse("Exp(x").unwrap_err();
        assert!(matches!(e, Error::Parse { pos: 5, .. }), "{e:?}");
        let e = parse("x $ y").unwrap_err();
        assert!(matches!(e, Error::Parse { pos: 2, .. }), "{e:?}");
        let e = parse("(x|y").unwrap_err();
        assert!(e.to_string().contains("scalar product"), "{e}");
        let e = parse("x y").unwrap_err();
        assert!(matches!(e, Error::Parse { pos: 2, .. }), "{e:?}");
    }

    #[test]
    fn deep_nesting_is_an_error_not_a_crash() {
        let deep = format!("{}x{}", "Exp(".repeat(100_000), ")".repeat(100_000));
        assert!(parse(&deep).unwrap_err().to_string().contains("nested"));
        let minus = format!("{}x", "-".repeat(100_000));
        assert!(parse(&minus).is_err());
        // Long chains make trees as deep as they are long: bounded too, whatever the operator.
        for op in ["+", "-", "*", "/"] {
            let chain = format!("x{}", format!("{op}x").repeat(1_000_000));
            assert!(parse(&chain).unwrap_err().to_string().contains("nested"), "chain of {op}");
        }
        let chains_in_parentheses = format!("{}x{}", "(x+x+x+x+".repeat(200), ")".repeat(200));
        assert!(parse(&chains_in_parentheses).unwrap_err().to_string().contains("nested"));
        // What users write stays well inside the limits.
        assert!(parse(&format!("x{}", "+x".repeat(400))).is_ok());
        assert!(parse(&format!("{}x{}", "Exp(".repeat(200), ")".repeat(200))).is_ok());
    }
}

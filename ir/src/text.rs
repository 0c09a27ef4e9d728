//! The IR text form: a readable printer and a parser for it.
//!
//! ```text
//! graph {
//!   %x: f32[4, 32] = input
//!   %w: f32[64, 32] = parameter "fc1.weight"
//!   %t: f32[32, 64] = aten.permute.default(%w, dims=[1, 0])
//!   %mm: f32[4, 64] = aten.mm.default(%x, %t)
//!   max: %values: f32[4], %indices: i64[4] = aten.max.dim(%mm, dim=1)
//!   return %values, %indices
//! }
//! ```
//! Tensor arguments are positional, in schema order (`none` for an absent optional tensor);
//! other arguments are `name=value` and omitted when equal to their default. A node whose name
//! differs from its first result's is prefixed by `name:`. Ops the table does not know print as
//! `unsupported "aten.x.y"(name=value, ...)`.

use crate::arg::{Arg, ParamKind};
use crate::error::{IrError, Result};
use crate::graph::{Graph, InputKind, NodeKind, ValueRef};
use crate::read::GraphBuilder;
use crate::types::{Dim, TensorType};
use crate::DType;
use std::fmt::Write;

fn fmt_float(x: f64) -> String {
    if x.is_nan() {
        "nan".into()
    } else if x.is_infinite() {
        if x > 0.0 { "inf" } else { "-inf" }.into()
    } else {
        format!("{x:?}")
    }
}

/// A name as written in the text: bare when it is a simple identifier, quoted otherwise.
fn fmt_name(name: &str) -> String {
    let simple = name
        .chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(is_ident);
    if simple {
        name.to_string()
    } else {
        format!("{name:?}")
    }
}

fn fmt_arg(g: &Graph, a: &Arg) -> String {
    let v = |r: &ValueRef| format!("%{}", fmt_name(g.value_name(*r)));
    let join = |xs: Vec<String>| format!("[{}]", xs.join(", "));
    match a {
        Arg::None => "none".into(),
        Arg::Tensor(r) => v(r),
        Arg::Tensors(rs) => join(
            rs.iter()
                .map(|r| r.as_ref().map(v).unwrap_or_else(|| "none".into()))
                .collect(),
        ),
        Arg::Int(n) => n.to_string(),
        Arg::Float(x) => fmt_float(*x),
        Arg::Bool(b) => b.to_string(),
        Arg::Ints(xs) => join(xs.iter().map(|x| x.to_string()).collect()),
        Arg::Floats(xs) => join(xs.iter().map(|x| fmt_float(*x)).collect()),
        Arg::Bools(xs) => join(xs.iter().map(|x| x.to_string()).collect()),
        Arg::Str(s) => format!("{s:?}"),
        Arg::DType(d) => d.to_string(),
        Arg::Layout(s) => format!("layout({})", fmt_name(s)),
        Arg::Device(s) => format!("device({s:?})"),
        Arg::MemoryFormat(s) => format!("memory_format({})", fmt_name(s)),
    }
}

/// Prints a graph in the IR text form.
pub fn print_graph(g: &Graph) -> String {
    let mut out = String::from("graph {\n");
    for n in &g.nodes {
        out.push_str("  ");
        if n.result_names.first() != Some(&n.name) {
            let _ = write!(out, "{}: ", fmt_name(&n.name));
        }
        let results: Vec<String> = n
            .result_names
            .iter()
            .zip(&n.results)
            .map(|(r, t)| format!("%{}: {t}", fmt_name(r)))
            .collect();
        out.push_str(&results.join(", "));
        out.push_str(" = ");
        match &n.kind {
            NodeKind::Input { kind, target } => {
                out.push_str(kind.name());
                if let Some(t) = target {
                    let _ = write!(out, " {t:?}");
                }
            }
            NodeKind::Op(op) => {
                let info = op.info();
                let mut parts = vec![];
                // Tensor arguments are positional: print up to the last present one.
                let tensor_params: Vec<usize> = (0..info.params.len())
                    .filter(|&i| info.params[i].kind.is_tensor())
                    .collect();
                let last = tensor_params
                    .iter()
                    .rposition(|&i| {
                        !matches!(n.args[i], Arg::None)
                            || info.params[i].default == crate::arg::Default::Required
                    })
                    .map_or(0, |p| p + 1);
                for &i in &tensor_params[..last] {
                    parts.push(fmt_arg(g, &n.args[i]));
                }
                for (p, a) in info.params.iter().zip(&n.args) {
                    if !p.kind.is_tensor() && p.default.to_arg().as_ref() != Some(a) {
                        parts.push(format!("{}={}", p.name, fmt_arg(g, a)));
                    }
                }
                let _ = write!(out, "{}({})", op.aten(), parts.join(", "));
            }
            NodeKind::Unsupported { target, arg_names } => {
                let parts: Vec<String> = arg_names
                    .iter()
                    .zip(&n.args)
                    .map(|(k, a)| format!("{}={}", fmt_name(k), fmt_arg(g, a)))
                    .collect();
                let _ = write!(out, "unsupported {target:?}({})", parts.join(", "));
            }
        }
        out.push('\n');
    }
    let outs: Vec<String> = g
        .outputs
        .iter()
        .map(|o| format!("%{}", fmt_name(g.value_name(*o))))
        .collect();
    let _ = writeln!(out, "  return {}", outs.join(", "));
    out.push_str("}\n");
    out
}

// ---------------------------------------------------------------------------------------------
// parser

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Value(String),
    Ident(String),
    Num(String),
    Str(String),
    Punct(char),
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::CharIndices<'a>>,
    src: &'a str,
}

fn is_ident(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_' || c == '.'
}

fn lex_line(line: &str, lineno: usize) -> Result<Vec<Tok>> {
    let err = |msg: String| IrError::Parse { line: lineno, msg };
    let mut lx = Lexer {
        chars: line.char_indices().peekable(),
        src: line,
    };
    let mut toks = vec![];
    while let Some(&(i, c)) = lx.chars.peek() {
        if c.is_whitespace() {
            lx.chars.next();
        } else if c == '#' {
            break;
        } else if c == '%' {
            lx.chars.next();
            if let Some(&(_, '"')) = lx.chars.peek() {
                lx.chars.next();
                let s = lx
                    .string()
                    .ok_or_else(|| err("unterminated string".into()))?;
                toks.push(Tok::Value(s));
                continue;
            }
            let s = lx.take_while(is_ident);
            if s.is_empty() {
                return Err(err(format!(
                    "expected a value name after '%' at column {}",
                    i + 1
                )));
            }
            toks.push(Tok::Value(s));
        } else if c == '"' {
            lx.chars.next();
            let s = lx
                .string()
                .ok_or_else(|| err("unterminated string".into()))?;
            toks.push(Tok::Str(s));
        } else if c.is_ascii_digit() || c == '-' {
            let start = i;
            lx.chars.next();
            let mut end = start + c.len_utf8();
            while let Some(&(j, c)) = lx.chars.peek() {
                let prev = lx.src[..j].chars().last();
                if c.is_ascii_alphanumeric()
                    || c == '.'
                    || (matches!(c, '+' | '-') && matches!(prev, Some('e' | 'E')))
                {
                    lx.chars.next();
                    end = j + c.len_utf8();
                } else {
                    break;
                }
            }
            toks.push(Tok::Num(lx.src[start..end].to_string()));
        } else if is_ident(c) {
            toks.push(Tok::Ident(lx.take_while(is_ident)));
        } else if "()[],=:{}".contains(c) {
            lx.chars.next();
            toks.push(Tok::Punct(c));
        } else {
            return Err(err(format!(
                "unexpected character '{c}' at column {}",
                i + 1
            )));
        }
    }
    Ok(toks)
}

impl Lexer<'_> {
    /// Reads a string body after its opening quote (Rust escapes: `\"`, `\\`, `\n`, `\t`,
    /// `\u{..}`); `None` if it never closes.
    fn string(&mut self) -> Option<String> {
        let mut s = String::new();
        while let Some((_, c)) = self.chars.next() {
            match c {
                '"' => return Some(s),
                '\\' => match self.chars.next()?.1 {
                    'n' => s.push('\n'),
                    't' => s.push('\t'),
                    'r' => s.push('\r'),
                    '0' => s.push('\0'),
                    'u' => {
                        if self.chars.next()?.1 != '{' {
                            return None;
                        }
                        let hex = self.take_while(|c| c != '}');
                        self.chars.next();
                        s.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                    }
                    c => s.push(c),
                },
                c => s.push(c),
            }
        }
        None
    }

    fn take_while(&mut self, f: impl Fn(char) -> bool) -> String {
        let mut s = String::new();
        while let Some(&(_, c)) = self.chars.peek() {
            if !f(c) {
                break;
            }
            s.push(c);
            self.chars.next();
        }
        s
    }
}

/// A parsed argument value before binding (value names resolved).
#[derive(Clone, Debug)]
enum Val {
    Value(String),
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    DType(DType),
    Tagged(String, String),
    List(Vec<Val>),
}

struct P<'a> {
    toks: &'a [Tok],
    pos: usize,
    line: usize,
}

impl P<'_> {
    fn err(&self, msg: impl Into<String>) -> IrError {
        IrError::Parse {
            line: self.line,
            msg: msg.into(),
        }
    }
    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos)
    }
    fn next(&mut self) -> Option<Tok> {
        let t = self.toks.get(self.pos).cloned();
        self.pos += 1;
        t
    }
    fn eat(&mut self, c: char) -> bool {
        if self.peek() == Some(&Tok::Punct(c)) {
            self.pos += 1;
            true
        } else {
            false
        }
    }
    fn expect(&mut self, c: char) -> Result<()> {
        if self.eat(c) {
            Ok(())
        } else {
            Err(self.err(format!("expected '{c}', found {}", self.describe())))
        }
    }
    fn describe(&self) -> String {
        match self.peek() {
            None => "end of line".into(),
            Some(Tok::Value(s)) => format!("%{s}"),
            Some(Tok::Ident(s)) | Some(Tok::Num(s)) => format!("'{s}'"),
            Some(Tok::Str(s)) => format!("{s:?}"),
            Some(Tok::Punct(c)) => format!("'{c}'"),
        }
    }
    fn ident(&mut self) -> Result<String> {
        match self.next() {
            Some(Tok::Ident(s)) => Ok(s),
            _ => {
                self.pos -= 1;
                Err(self.err(format!("expected a name, found {}", self.describe())))
            }
        }
    }
    fn ty(&mut self) -> Result<TensorType> {
        let d = self.ident()?;
        let dtype = DType::parse(&d).ok_or_else(|| self.err(format!("unknown dtype '{d}'")))?;
        self.expect('[')?;
        let mut shape = vec![];
        if !self.eat(']') {
            loop {
                shape.push(match self.next() {
                    Some(Tok::Num(n)) => Dim::Static(
                        n.parse::<i64>()
                            .ok()
                            .filter(|&x| x >= 0)
                            .ok_or_else(|| self.err(format!("invalid dimension '{n}'")))?,
                    ),
                    Some(Tok::Ident(s)) => Dim::Sym(s),
                    _ => {
                        self.pos -= 1;
                        return Err(
                            self.err(format!("expected a dimension, found {}", self.describe()))
                        );
                    }
                });
                if self.eat(']') {
                    break;
                }
                self.expect(',')?;
            }
        }
        Ok(TensorType { dtype, shape })
    }
    fn val(&mut self) -> Result<Val> {
        Ok(match self.next() {
            Some(Tok::Value(s)) => Val::Value(s),
            Some(Tok::Str(s)) => Val::Str(s),
            Some(Tok::Num(n)) => {
                parse_num(&n).ok_or_else(|| self.err(format!("invalid number '{n}'")))?
            }
            Some(Tok::Punct('[')) => {
                let mut xs = vec![];
                if !self.eat(']') {
                    loop {
                        xs.push(self.val()?);
                        if self.eat(']') {
                            break;
                        }
                        self.expect(',')?;
                    }
                }
                Val::List(xs)
            }
            Some(Tok::Ident(s)) => match s.as_str() {
                "none" => Val::None,
                "true" => Val::Bool(true),
                "false" => Val::Bool(false),
                "inf" | "nan" => Val::Float(if s == "inf" { f64::INFINITY } else { f64::NAN }),
                "layout" | "device" | "memory_format" => {
                    self.expect('(')?;
                    let inner = match self.next() {
                        Some(Tok::Ident(x)) | Some(Tok::Str(x)) => x,
                        _ => return Err(self.err(format!("expected a {s} name"))),
                    };
                    self.expect(')')?;
                    Val::Tagged(s, inner)
                }
                _ => Val::DType(
                    DType::parse(&s).ok_or_else(|| self.err(format!("unknown value '{s}'")))?,
                ),
            },
            _ => {
                self.pos = self.pos.saturating_sub(1);
                return Err(self.err(format!("expected a value, found {}", self.describe())));
            }
        })
    }
}

fn parse_num(n: &str) -> Option<Val> {
    match n {
        "-inf" => return Some(Val::Float(f64::NEG_INFINITY)),
        "-nan" => return Some(Val::Float(f64::NAN)),
        _ => {}
    }
    if n.contains(['.', 'e', 'E']) {
        n.parse().ok().map(Val::Float)
    } else {
        n.parse().ok().map(Val::Int)
    }
}

fn to_arg(
    b: &GraphBuilder,
    v: Val,
    kind: Option<ParamKind>,
    err: &dyn Fn(String) -> IrError,
) -> Result<Arg> {
    let value = |s: &str| b.value(s).ok_or_else(|| err(format!("unknown value %{s}")));
    Ok(match v {
        Val::Value(s) => Arg::Tensor(value(&s)?),
        Val::None => Arg::None,
        Val::Bool(x) => Arg::Bool(x),
        Val::Int(x) => Arg::Int(x),
        Val::Float(x) => Arg::Float(x),
        Val::Str(s) => Arg::Str(s),
        Val::DType(d) => Arg::DType(d),
        Val::Tagged(t, s) => match t.as_str() {
            "layout" => Arg::Layout(s),
            "device" => Arg::Device(s),
            _ => Arg::MemoryFormat(s),
        },
        Val::List(xs) => {
            let tensors = xs.iter().any(|x| matches!(x, Val::Value(_)))
                || (xs.is_empty()
                    && matches!(kind, Some(ParamKind::Tensors | ParamKind::OptTensors)));
            if tensors {
                let mut out = vec![];
                for x in xs {
                    out.push(match x {
                        Val::Value(s) => Some(value(&s)?),
                        Val::None => None,
                        _ => return Err(err("a tensor list holds only values and none".into())),
                    });
                }
                Arg::Tensors(out)
            } else if xs.iter().all(|x| matches!(x, Val::Bool(_)))
                && (!xs.is_empty() || kind == Some(ParamKind::Bools))
            {
                Arg::Bools(xs.iter().map(|x| matches!(x, Val::Bool(true))).collect())
            } else if xs.iter().all(|x| matches!(x, Val::Int(_)))
                && !(xs.is_empty() && kind == Some(ParamKind::OptFloats))
            {
                Arg::Ints(
                    xs.iter()
                        .map(|x| if let Val::Int(n) = x { *n } else { 0 })
                        .collect(),
                )
            } else {
                let mut out = vec![];
                for x in xs {
                    out.push(match x {
                        Val::Int(n) => n as f64,
                        Val::Float(f) => f,
                        _ => return Err(err("a number list holds only numbers".into())),
                    });
                }
                Arg::Floats(out)
            }
        }
    })
}

/// Parses the IR text form into a verified graph (without weights).
pub fn parse_graph(text: &str) -> Result<Graph> {
    // Room for a node per line that defines values (`%name: ...`).
    let defs = text
        .lines()
        .filter(|l| l.trim_start().starts_with('%'))
        .count();
    let mut b = GraphBuilder::with_capacity(defs);
    let mut lines = text.lines().enumerate().map(|(i, l)| (i + 1, l));
    let mut started = false;
    let mut outputs = None;
    for (lineno, line) in lines.by_ref() {
        let toks = lex_line(line, lineno)?;
        if toks.is_empty() {
            continue;
        }
        let mut p = P {
            toks: &toks,
            pos: 0,
            line: lineno,
        };
        if !started {
            if p.ident()? != "graph" || !p.eat('{') || p.peek().is_some() {
                return Err(p.err("expected 'graph {'"));
            }
            started = true;
            continue;
        }
        if toks == [Tok::Punct('}')] {
            let outs = outputs.ok_or_else(|| p.err("graph has no 'return'"))?;
            return b.finish(outs);
        }
        if outputs.is_some() {
            return Err(p.err("nothing may follow 'return' but '}'"));
        }
        if toks[0] == Tok::Ident("return".into()) {
            p.pos = 1;
            let mut outs = vec![];
            while let Some(t) = p.next() {
                match t {
                    Tok::Value(s) => outs.push(
                        b.value(&s)
                            .ok_or_else(|| p.err(format!("unknown value %{s}")))?,
                    ),
                    _ => return Err(p.err("expected %value in 'return'")),
                }
                if p.peek().is_some() {
                    p.expect(',')?;
                }
            }
            outputs = Some(outs);
            continue;
        }
        parse_node(&mut p, &mut b)?;
    }
    Err(IrError::Parse {
        line: text.lines().count(),
        msg: if started {
            "missing closing '}'".into()
        } else {
            "empty input".into()
        },
    })
}

fn parse_node(p: &mut P, b: &mut GraphBuilder) -> Result<()> {
    let mut node_name = None;
    if let (Some(Tok::Ident(n) | Tok::Str(n)), Some(Tok::Punct(':'))) =
        (p.toks.first(), p.toks.get(1))
    {
        node_name = Some(n.clone());
        p.pos = 2;
    }
    let mut names = vec![];
    let mut types = vec![];
    loop {
        match p.next() {
            Some(Tok::Value(s)) => names.push(s),
            _ => return Err(p.err("expected %name: type")),
        }
        p.expect(':')?;
        types.push(p.ty()?);
        if p.eat('=') {
            break;
        }
        p.expect(',')?;
    }
    let name = node_name.unwrap_or_else(|| names[0].clone());
    let head = p.ident()?;
    let input_kind = match head.as_str() {
        "input" => Some(InputKind::User),
        "parameter" => Some(InputKind::Parameter),
        "buffer" => Some(InputKind::Buffer),
        "constant" => Some(InputKind::Constant),
        _ => None,
    };
    if let Some(kind) = input_kind {
        let target = match p.next() {
            Some(Tok::Str(s)) if kind != InputKind::User => Some(s),
            None if kind == InputKind::User => None,
            _ => return Err(p.err(format!("malformed {head} declaration"))),
        };
        if names.len() != 1 {
            return Err(p.err("an input has one result"));
        }
        b.input(&names[0], kind, target, types.remove(0))?;
        return Ok(());
    }
    let (target, known) = if head == "unsupported" {
        match p.next() {
            Some(Tok::Str(s)) => (s, false),
            _ => return Err(p.err("expected the op name as a string after 'unsupported'")),
        }
    } else {
        (head, true)
    };
    let op = if known {
        Some(crate::Op::from_aten(&target).ok_or_else(|| p.err(format!("unknown op '{target}' (write `unsupported \"{target}\"(...)` for ops outside the table)")))?)
    } else {
        None
    };
    p.expect('(')?;
    let mut positional = vec![];
    let mut named: Vec<(String, Val)> = vec![];
    if !p.eat(')') {
        loop {
            if let (Some(Tok::Ident(k) | Tok::Str(k)), Some(Tok::Punct('='))) =
                (p.peek().cloned(), p.toks.get(p.pos + 1))
            {
                p.pos += 2;
                named.push((k, p.val()?));
            } else {
                if !named.is_empty() {
                    return Err(p.err("positional arguments must come before named ones"));
                }
                positional.push(p.val()?);
            }
            if p.eat(')') {
                break;
            }
            p.expect(',')?;
        }
    }
    if p.peek().is_some() {
        return Err(p.err(format!("unexpected {} after the arguments", p.describe())));
    }
    let line = p.line;
    let err = |msg: String| IrError::Parse { line, msg };
    let mut args = vec![];
    match op {
        Some(op) => {
            let params = op.info().params;
            let tensor_params: Vec<_> = params.iter().filter(|p| p.kind.is_tensor()).collect();
            if positional.len() > tensor_params.len() {
                return Err(err(format!(
                    "{target} takes {} tensor arguments, found {}",
                    tensor_params.len(),
                    positional.len()
                )));
            }
            for (prm, v) in tensor_params.iter().zip(positional) {
                args.push((prm.name.to_string(), to_arg(b, v, Some(prm.kind), &err)?));
            }
            for (k, v) in named {
                let kind = op.param_index(&k).map(|i| params[i].kind);
                args.push((k, to_arg(b, v, kind, &err)?));
            }
        }
        None => {
            if !positional.is_empty() {
                return Err(err("arguments of an unsupported op are all named".into()));
            }
            for (k, v) in named {
                args.push((k, to_arg(b, v, None, &err)?));
            }
        }
    }
    b.op(&name, &target, args, names, Some(types))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SMALL: &str = r#"graph {
  %x: f32[4, 32] = input
  %w: f32[64, 32] = parameter "fc1.weight"
  %t: f32[32, 64] = aten.permute.default(%w, dims=[1, 0])
  %mm: f32[4, 64] = aten.mm.default(%x, %t)
  %s: f32[4, 64] = aten.mul.Scalar(%mm, other=0.5)
  max: %values: f32[4], %indices: i64[4] = aten.max.dim(%s, dim=1)
  %c: f32[4, 128] = aten.cat.default([%s, %s], dim=-1)
  %u: f32[4] = unsupported "aten.frob.default"(self=%values, k=[1.5, 2.0], mode="x")
  return %values, %indices, %c, %u
}
"#;

    #[test]
    fn round_trips() {
        let g = parse_graph(SMALL).unwrap();
        let printed = print_graph(&g);
        assert_eq!(printed, SMALL);
        assert_eq!(parse_graph(&printed).unwrap(), g);
    }

    #[test]
    fn odd_names_are_quoted() {
        let src = "graph {\n  %\"a b\": f32[2] = input\n  \"9n\": %\"x]\\\"y\": f32[2] = aten.relu.default(%\"a b\")\n  return %\"x]\\\"y\"\n}\n";
        let g = parse_graph(src).unwrap();
        assert_eq!(g.nodes[1].name, "9n");
        assert_eq!(g.nodes[1].result_names[0], "x]\"y");
        assert_eq!(print_graph(&g), src);
    }

    #[test]
    fn errors_name_the_line_and_problem() {
        let bad = SMALL.replace(
            "%mm: f32[4, 64] = aten.mm.default(%x, %t)",
            "%mm: f32[4, 64] = aten.mm.default(%t, %x)",
        );
        let e = parse_graph(&bad).unwrap_err().to_string();
        assert!(
            e.contains("aten.mm.default") && e.contains("expected [64, _]"),
            "{e}"
        );
        let e = parse_graph("graph {\n  %y: f32[2] = aten.relu.default(%nope)\n")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("line 2") && e.contains("unknown value %nope"),
            "{e}"
        );
        let e = parse_graph("graph {\n  %y: f32[2] = input\n  return %y\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("missing closing"), "{e}");
    }
}

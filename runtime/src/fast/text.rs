//! The text form of a compiled [`Program`]: printed by `fxhlo compile --print-program`, parsed
//! back by [`parse`] (`fxhlo run prog.fxp --weights ...`), `parse(print(p)) == p`.
//!
//! ```text
//! fxhlo.program v1
//! inputs %0
//! outputs %3
//! folded [1]                            ; fusion kernels of constants only, run when compiled
//! const %1 = "fc.weight"
//! %0 : [2, 4] f32 "x"                      ; input 0
//! %1 : [3, 4] f32 "p_fc_weight"            ; const
//! %2 : [2, 3] f32 "mm"                     ; in epilogue
//! %3 : [2, 3] f32 "relu"                   ; output 0
//!
//! step 0 matmul (%0, %1) -> (%2, %3) {
//!   nodes: [permute, mm, relu]
//!   kernels: [0]
//!   why: ["epilogue fused into the product: it reads the product elementwise"]
//!   grid: [1, 1]
//!   blocks: whole
//!   spec: {a: {...}, b: {...}, ...}
//!   epilogue: Some{expr: {
//!     ...
//!     insts: {
//!       r0 = load leaf0
//!       r1 = relu r0
//!     }
//!   }}
//! }
//! ```
//!
//! - Values are numbered in the program's value table; each line gives the value's shape,
//!   element type and name. A `;` starts a comment: after a value, where the memory plan
//!   ([`MemoryPlan`]) puts it (an input, a constant, an output, arena buffer `k`, a buffer of
//!   its own, or written into its step's epilogue). Comments are derived and not parsed.
//! - Constants are named: `const %1 = "fc.weight"` says that value 1 is the tensor
//!   `fc.weight` of the weights the program runs with (the artifact's constants, or a
//!   safetensors file). The text holds no tensor bytes.
//! - A step: its kernel kind, the values it reads and writes, then its fields: `nodes` (the
//!   graph nodes it computes), `kernels` and `why` (the fusion kernels it comes from and the
//!   program builder's merge/split decisions, see [`super::program::Origin`]), `grid` and
//!   `blocks` (its [`Launch`]; `whole` where every operand's block is the whole operand), and
//!   the kernel's own parameters, written as data: `{field: value, ...}` structures, `[...]`
//!   lists, `Variant(...)` / `Variant{...}` enum variants, `none`, numbers (a number written
//!   `0.1f32` is the `f32` nearest to 0.1), bare words, JSON-quoted strings, and strings of
//!   several lines (a fallback's IR graph) as the lines between two `"""` lines. An
//!   elementwise expression's instructions are written one per line, `rN = op operands`.
//! - Parsing is whitespace-insensitive (but for block strings); every error names its line.

use super::memory::{Loc, MemoryPlan};
use super::program::{BlockSpec, Kernel, Launch, Origin, Program, Step, TensorSpec, ValueId};
use fxhlo_ir::DType;
use serde_json::{Map, Number, Value};
use std::fmt::Write as _;

/// The first line of every program text.
pub const MAGIC: &str = "fxhlo.program v1";

/// An error in a program text: the line (1-based) and what is wrong there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseError {
    /// 1-based line number.
    pub line: usize,
    /// The problem.
    pub msg: String,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "program text line {}: {}", self.line, self.msg)
    }
}

impl std::error::Error for ParseError {}

/// The kernel kind names of step headers, with the [`Kernel`] variant each stands for.
const KINDS: [(&str, &str); 13] = [
    ("fallback", "Fallback"),
    ("elementwise", "Elementwise"),
    ("reduction", "RowReduce"),
    ("matmul", "Matmul"),
    ("conv", "Conv"),
    ("pool", "Pool"),
    ("gather", "Gather"),
    ("gather_nd", "GatherNd"),
    ("concat", "Concat"),
    ("argreduce", "ArgReduce"),
    ("cumsum", "Cumsum"),
    ("gather_dim", "GatherDim"),
    ("attention", "Attention"),
];

/// Field names of a step besides its kernel's own.
const STEP_FIELDS: [&str; 5] = ["nodes", "kernels", "why", "grid", "blocks"];

/// Lines longer than this are broken into blocks where they hold a structure.
const WIDTH: usize = 100;

// ---------------------------------------------------------------------------------------------
// Printing

/// The text form of `p`.
pub fn print(p: &Program) -> String {
    let mut o = String::new();
    let plan = MemoryPlan::new(p);
    let _ = writeln!(o, "{MAGIC}");
    let _ = writeln!(
        o,
        "; values: {}, steps: {}, arena buffers: {} ({} bytes), peak bytes besides the inputs: {}",
        p.values.len(),
        p.steps.len(),
        plan.buffers.len(),
        plan.arena_bytes,
        plan.peak_bytes()
    );
    let ids = |vs: &[ValueId]| {
        vs.iter()
            .map(|v| format!("%{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(o, "inputs {}", ids(&p.inputs));
    let _ = writeln!(o, "outputs {}", ids(&p.outputs));
    if !p.folded.is_empty() {
        let ks: Vec<String> = p.folded.iter().map(|k| k.to_string()).collect();
        let line = format!("folded [{}]", ks.join(", "));
        let _ = writeln!(
            o,
            "{line:<48} ; fusion kernels of constants only, run when compiled"
        );
    }
    for (v, name) in &p.constants {
        let _ = writeln!(o, "const %{v} = {}", quote(name));
    }
    let written: std::collections::HashSet<ValueId> = p
        .steps
        .iter()
        .flat_map(|s| s.dsts.iter().copied())
        .collect();
    for (i, t) in p.values.iter().enumerate() {
        let decl = format!("%{i} : {} {}", t.type_string(), quote(&t.name));
        let loc = match plan.loc.get(i) {
            Some(Loc::Input(k)) => format!("input {k}"),
            Some(Loc::Const) => "const".into(),
            Some(Loc::Output(k)) => format!("output {k}"),
            Some(Loc::Arena(b)) => {
                let (kind, n) = plan.buffers[*b];
                format!("arena {b} ({n} x {kind:?})").to_lowercase()
            }
            Some(Loc::Owned) if !written.contains(&(i as ValueId)) => "unused".into(),
            Some(Loc::Owned) => "own buffer".into(),
            Some(Loc::InEpilogue) => "in epilogue".into(),
            None => String::new(),
        };
        let _ = writeln!(o, "{decl:<48} ; {loc}");
    }
    for (i, s) in p.steps.iter().enumerate() {
        o.push('\n');
        print_step(&mut o, p, i, s);
    }
    o
}

fn print_step(o: &mut String, p: &Program, i: usize, s: &Step) {
    let ids = |vs: &[ValueId]| {
        vs.iter()
            .map(|v| format!("%{v}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let _ = writeln!(
        o,
        "step {i} {} ({}) -> ({}) {{",
        s.kernel.kind(),
        ids(&s.srcs),
        ids(&s.dsts)
    );
    let mut fields: Vec<(String, Value)> = vec![];
    let strings = |xs: &[String]| Value::Array(xs.iter().cloned().map(Value::String).collect());
    fields.push(("nodes".into(), strings(&s.nodes)));
    if !s.origin.kernels.is_empty() {
        let ks = s.origin.kernels.iter().map(|&k| Value::from(k)).collect();
        fields.push(("kernels".into(), Value::Array(ks)));
    }
    if !s.origin.decisions.is_empty() {
        fields.push(("why".into(), strings(&s.origin.decisions)));
    }
    fields.push((
        "grid".into(),
        Value::Array(s.launch.grid.iter().map(|&g| Value::from(g)).collect()),
    ));
    let blocks = if whole_blocks(p, s) {
        Value::String("whole".into())
    } else {
        serde_json::to_value(&s.launch.blocks).unwrap_or(Value::Null)
    };
    fields.push(("blocks".into(), blocks));
    // The kernel's own fields: the payload of its (externally tagged) variant.
    match serde_json::to_value(&s.kernel) {
        Ok(Value::Object(m)) => {
            for (_, payload) in m {
                match payload {
                    Value::Object(f) => fields.extend(f),
                    other => fields.push(("value".into(), other)),
                }
            }
        }
        Ok(other) => fields.push(("value".into(), other)),
        Err(e) => fields.push(("error".into(), Value::String(e.to_string()))),
    }
    for (k, v) in &fields {
        field(o, 1, k, v);
    }
    o.push_str("}\n");
}

/// Whether every block of `s`'s launch is its whole operand.
fn whole_blocks(p: &Program, s: &Step) -> bool {
    let ops: Vec<ValueId> = s.srcs.iter().chain(&s.dsts).copied().collect();
    s.launch.blocks.len() == ops.len()
        && ops.iter().zip(&s.launch.blocks).all(|(&v, b)| {
            p.values
                .get(v as usize)
                .is_some_and(|t| *b == BlockSpec::whole(&t.shape))
        })
}

fn indent(o: &mut String, depth: usize) {
    for _ in 0..depth {
        o.push_str("  ");
    }
}

/// `key: value` at `depth`, broken into a block where it is long or holds instructions.
fn field(o: &mut String, depth: usize, key: &str, v: &Value) {
    indent(o, depth);
    o.push_str(key);
    o.push_str(": ");
    block_value(o, depth, key, v);
    o.push('\n');
}

/// `v` after a `key: ` at `depth` (no final newline).
fn block_value(o: &mut String, depth: usize, key: &str, v: &Value) {
    if key == "insts" {
        if let Some(text) = insts_text(v, depth + 1) {
            o.push_str("{\n");
            o.push_str(&text);
            indent(o, depth);
            o.push('}');
            return;
        }
    }
    if let Value::String(text) = v {
        if is_block_string(text) {
            // `"""`, the lines one level deeper, and `"""` at that depth.
            o.push_str("\"\"\"\n");
            for line in text.lines() {
                if !line.is_empty() {
                    indent(o, depth + 1);
                    o.push_str(line);
                }
                o.push('\n');
            }
            indent(o, depth + 1);
            o.push_str("\"\"\"");
            return;
        }
    }
    let flat = compact(v);
    if !has_insts(v) && depth * 2 + key.len() + 2 + flat.len() <= WIDTH {
        o.push_str(&flat);
        return;
    }
    match v {
        Value::Object(m) => {
            if let Some((k, inner)) = variant(m) {
                o.push_str(k);
                if inner.is_object() {
                    block_value(o, depth, "", inner);
                } else {
                    o.push('(');
                    block_value(o, depth, "", inner);
                    o.push(')');
                }
                return;
            }
            o.push_str("{\n");
            for (k, x) in m {
                field(o, depth + 1, k, x);
            }
            indent(o, depth);
            o.push('}');
        }
        Value::Array(xs) => {
            o.push_str("[\n");
            for x in xs {
                indent(o, depth + 1);
                block_value(o, depth + 1, "", x);
                o.push('\n');
            }
            indent(o, depth);
            o.push(']');
        }
        _ => o.push_str(&flat),
    }
}

/// Whether `s` is written as a block of lines between `"""`s: several lines, each ended by a
/// newline, none holding `"""` or a carriage return (an IR graph of a fallback step).
fn is_block_string(s: &str) -> bool {
    s.ends_with('\n') && s.lines().count() > 1 && !s.contains("\"\"\"") && !s.contains('\r')
}

fn has_insts(v: &Value) -> bool {
    match v {
        Value::Object(m) => m.iter().any(|(k, x)| k == "insts" || has_insts(x)),
        Value::Array(xs) => xs.iter().any(has_insts),
        _ => false,
    }
}

/// The single key and value of an object that stands for an enum variant (`{"Slot": ...}`).
fn variant(m: &Map<String, Value>) -> Option<(&str, &Value)> {
    let (k, v) = m.iter().next()?;
    (m.len() == 1 && k.starts_with(|c: char| c.is_ascii_uppercase()) && is_word(k))
        .then_some((k.as_str(), v))
}

/// `v` on one line.
fn compact(v: &Value) -> String {
    match v {
        Value::Null => "none".into(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => number(n),
        Value::String(s) => word_or_quoted(s),
        Value::Array(xs) => format!(
            "[{}]",
            xs.iter().map(compact).collect::<Vec<_>>().join(", ")
        ),
        Value::Object(m) => {
            if let Some((k, inner)) = variant(m) {
                return match inner {
                    Value::Object(_) => format!("{k}{}", compact(inner)),
                    Value::Array(xs) if xs.len() >= 2 => format!(
                        "{k}({})",
                        xs.iter().map(compact).collect::<Vec<_>>().join(", ")
                    ),
                    _ => format!("{k}({})", compact(inner)),
                };
            }
            let fs: Vec<String> = m
                .iter()
                .map(|(k, x)| format!("{k}: {}", compact(x)))
                .collect();
            format!("{{{}}}", fs.join(", "))
        }
    }
}

/// A number as written: integers as they are; a float that is exactly an `f32` with a
/// shorter `f32` form as that form and `f32` (`0.1f32`), else its shortest `f64` form.
fn number(n: &Number) -> String {
    if let Some(u) = n.as_u64() {
        return u.to_string();
    }
    if let Some(i) = n.as_i64() {
        return i.to_string();
    }
    let x = n.as_f64().unwrap_or(f64::NAN);
    float64(x)
}

fn float64(x: f64) -> String {
    let wide = format!("{x:?}");
    let narrow = x as f32;
    if narrow as f64 == x {
        let short = format!("{narrow:?}");
        if short != wide {
            return format!("{short}f32");
        }
    }
    wide
}

fn float32(x: f32) -> String {
    if x.is_nan() {
        "nan".into()
    } else {
        format!("{x:?}")
    }
}

/// A word (`[A-Za-z_][A-Za-z0-9_]*`) that is not a keyword of the value syntax.
fn is_word(s: &str) -> bool {
    let mut cs = s.chars();
    cs.next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && cs.all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(s, "none" | "true" | "false" | "inf" | "nan")
}

fn word_or_quoted(s: &str) -> String {
    if is_word(s) {
        s.to_string()
    } else {
        quote(s)
    }
}

fn quote(s: &str) -> String {
    serde_json::to_string(s).unwrap_or_else(|_| "\"?\"".into())
}

/// `RowOut`'s `GeluErf` as `gelu_erf`.
fn snake(s: &str) -> String {
    let mut o = String::new();
    for (i, c) in s.chars().enumerate() {
        if c.is_ascii_uppercase() {
            if i > 0 {
                o.push('_');
            }
            o.push(c.to_ascii_lowercase());
        } else {
            o.push(c);
        }
    }
    o
}

fn camel(s: &str) -> String {
    s.split('_')
        .map(|w| {
            let mut cs = w.chars();
            cs.next()
                .map(|c| c.to_ascii_uppercase().to_string() + cs.as_str())
                .unwrap_or_default()
        })
        .collect()
}

fn op_name<T: serde::Serialize>(op: &T) -> String {
    match serde_json::to_value(op) {
        Ok(Value::String(s)) => snake(&s),
        _ => "?".into(),
    }
}

/// An expression's instructions, one per line at `depth`; `None` if `v` is not a list of
/// instructions.
fn insts_text(v: &Value, depth: usize) -> Option<String> {
    use super::expr::{Inst, InstOp};
    let insts: Vec<Inst> = serde_json::from_value(v.clone()).ok()?;
    let mut o = String::new();
    for inst in insts {
        indent(&mut o, depth);
        let _ = write!(o, "r{} = ", inst.dst);
        let rhs = match inst.op {
            InstOp::Load(l) => format!("load leaf{l}"),
            InstOp::Const(c) => format!("const {}", float32(c)),
            InstOp::Un(op, a) => format!("{} r{a}", op_name(&op)),
            InstOp::Bin(op, a, b) => format!("{} r{a}, r{b}", op_name(&op)),
            InstOp::BinC(op, a, c) => format!("{} r{a}, {}", op_name(&op), float32(c)),
            InstOp::CBin(op, c, b) => format!("{} {}, r{b}", op_name(&op), float32(c)),
            InstOp::Select(c, a, b) => format!("select r{c}, r{a}, r{b}"),
            InstOp::PowI(a, n) => format!("powi r{a}, {n}"),
            InstOp::Fused(f) => {
                let pre = |u: Option<super::expr::UnOp>| {
                    u.map(|u| format!("{} ", op_name(&u))).unwrap_or_default()
                };
                let mut s = format!(
                    "fused {} {}r{}, {}r{}",
                    op_name(&f.op),
                    pre(f.pa),
                    f.a,
                    pre(f.pb),
                    f.b
                );
                if let Some(c) = f.add {
                    let _ = write!(s, " + r{c}");
                }
                s
            }
        };
        o.push_str(&rhs);
        o.push('\n');
    }
    Some(o)
}

// ---------------------------------------------------------------------------------------------
// Parsing

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    /// A word: `[A-Za-z_][A-Za-z0-9_.]*`.
    Word(String),
    /// A number as written (`-3`, `0.5`, `1e-5`, `0.1f32`, `inf`, `-inf`, `nan`).
    Num(String),
    /// A JSON string, unquoted.
    Str(String),
    /// `%N`.
    Val(u64),
    /// One of `{ } [ ] ( ) , : = +`, or `->`.
    Punct(&'static str),
}

impl std::fmt::Display for Tok {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Tok::Word(w) => write!(f, "'{w}'"),
            Tok::Num(n) => write!(f, "number {n}"),
            Tok::Str(s) => write!(f, "string {}", quote(s)),
            Tok::Val(v) => write!(f, "%{v}"),
            Tok::Punct(p) => write!(f, "'{p}'"),
        }
    }
}

fn lex(text: &str) -> Result<Vec<(Tok, usize)>, ParseError> {
    let err = |line: usize, msg: String| ParseError { line, msg };
    let b = text.as_bytes();
    let mut toks = vec![];
    let (mut i, mut line) = (0usize, 1usize);
    while i < b.len() {
        let c = b[i];
        match c {
            b'\n' => {
                line += 1;
                i += 1;
            }
            b' ' | b'\t' | b'\r' => i += 1,
            b';' => {
                while i < b.len() && b[i] != b'\n' {
                    i += 1;
                }
            }
            b'"' if text[i..].starts_with("\"\"\"\n") => {
                let (s, next, lines) = block_string(text, i + 4, line)?;
                toks.push((Tok::Str(s), line));
                i = next;
                line += lines;
            }
            b'"' => {
                // A JSON string: up to the first unescaped quote.
                let start = i;
                i += 1;
                while i < b.len() && b[i] != b'"' {
                    if b[i] == b'\n' {
                        return Err(err(line, "a string runs past the end of its line".into()));
                    }
                    i += if b[i] == b'\\' { 2 } else { 1 };
                }
                if i >= b.len() {
                    return Err(err(line, "a string is not closed".into()));
                }
                i += 1;
                let s: String = serde_json::from_str(&text[start..i])
                    .map_err(|e| err(line, format!("bad string: {e}")))?;
                toks.push((Tok::Str(s), line));
            }
            b'%' => {
                let start = i + 1;
                i += 1;
                while i < b.len() && b[i].is_ascii_digit() {
                    i += 1;
                }
                let v = text[start..i]
                    .parse()
                    .map_err(|_| err(line, "'%' must be followed by a value number".into()))?;
                toks.push((Tok::Val(v), line));
            }
            b'-' if b.get(i + 1) == Some(&b'>') => {
                toks.push((Tok::Punct("->"), line));
                i += 2;
            }
            b'-' | b'0'..=b'9' => {
                let start = i;
                i += 1;
                while i < b.len()
                    && (b[i].is_ascii_alphanumeric()
                        || b[i] == b'.'
                        || ((b[i] == b'-' || b[i] == b'+') && matches!(b[i - 1], b'e' | b'E')))
                {
                    i += 1;
                }
                toks.push((Tok::Num(text[start..i].to_string()), line));
            }
            c if c.is_ascii_alphabetic() || c == b'_' => {
                let start = i;
                while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'_' || b[i] == b'.')
                {
                    i += 1;
                }
                let w = &text[start..i];
                let t = if matches!(w, "inf" | "nan") {
                    Tok::Num(w.to_string())
                } else {
                    Tok::Word(w.to_string())
                };
                toks.push((t, line));
            }
            _ => {
                let p = match c {
                    b'{' => "{",
                    b'}' => "}",
                    b'[' => "[",
                    b']' => "]",
                    b'(' => "(",
                    b')' => ")",
                    b',' => ",",
                    b':' => ":",
                    b'=' => "=",
                    b'+' => "+",
                    _ => {
                        let ch = text[i..].chars().next().unwrap_or('?');
                        return Err(err(line, format!("unexpected character {ch:?}")));
                    }
                };
                toks.push((Tok::Punct(p), line));
                i += 1;
            }
        }
    }
    Ok(toks)
}

/// A block string whose first line starts at byte `start`, its opening `"""` on line `line`:
/// its text, the position after its closing `"""` and the number of newlines up to there.
/// Each line loses the indentation of the closing `"""`.
fn block_string(
    text: &str,
    start: usize,
    line: usize,
) -> Result<(String, usize, usize), ParseError> {
    let mut lines: Vec<&str> = vec![];
    let mut pos = start;
    loop {
        let Some(rest) = text.get(pos..).filter(|r| !r.is_empty()) else {
            return Err(ParseError {
                line,
                msg: "a \"\"\" block string is not closed".into(),
            });
        };
        let l = rest.split('\n').next().unwrap_or("");
        let body = l.trim_start_matches([' ', '\t']);
        if body.starts_with("\"\"\"") {
            let prefix = &l[..l.len() - body.len()];
            let mut s = String::new();
            for (k, x) in lines.iter().enumerate() {
                if !x.is_empty() {
                    let y = x.strip_prefix(prefix).ok_or_else(|| ParseError {
                        line: line + 1 + k,
                        msg: "a line of a block string is indented less than its closing \"\"\""
                            .into(),
                    })?;
                    s.push_str(y);
                }
                s.push('\n');
            }
            return Ok((s, pos + prefix.len() + 3, lines.len() + 1));
        }
        lines.push(l);
        pos += l.len() + 1;
    }
}

struct Parser {
    toks: Vec<(Tok, usize)>,
    pos: usize,
    /// The last line (for errors at the end of the text).
    end_line: usize,
    /// Structures open around the current token (bounded: see [`MAX_DEPTH`]).
    depth: usize,
}

/// The deepest nesting of structures and lists a text may have (the printer writes at most
/// about 8; a bound keeps a hostile text from exhausting the stack).
const MAX_DEPTH: usize = 64;

type R<T> = Result<T, ParseError>;

impl Parser {
    fn line(&self) -> usize {
        self.toks.get(self.pos).map_or(self.end_line, |t| t.1)
    }

    fn err<T>(&self, msg: impl Into<String>) -> R<T> {
        Err(ParseError {
            line: self.line(),
            msg: msg.into(),
        })
    }

    fn peek(&self) -> Option<&Tok> {
        self.toks.get(self.pos).map(|t| &t.0)
    }

    fn next(&mut self, what: &str) -> R<Tok> {
        match self.toks.get(self.pos) {
            Some((t, _)) => {
                self.pos += 1;
                Ok(t.clone())
            }
            None => self.err(format!("expected {what}, found the end of the text")),
        }
    }

    fn found(&self) -> String {
        self.peek()
            .map_or("the end of the text".into(), |t| t.to_string())
    }

    fn is(&self, p: &str) -> bool {
        matches!(self.peek(), Some(Tok::Punct(q)) if *q == p)
    }

    fn is_word(&self, w: &str) -> bool {
        matches!(self.peek(), Some(Tok::Word(q)) if q == w)
    }

    fn punct(&mut self, p: &str) -> R<()> {
        if self.is(p) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(format!("expected '{p}', found {}", self.found()))
        }
    }

    fn keyword(&mut self, w: &str) -> R<()> {
        if self.is_word(w) {
            self.pos += 1;
            Ok(())
        } else {
            self.err(format!("expected '{w}', found {}", self.found()))
        }
    }

    fn word(&mut self, what: &str) -> R<String> {
        match self.peek() {
            Some(Tok::Word(w)) => {
                let w = w.clone();
                self.pos += 1;
                Ok(w)
            }
            _ => self.err(format!("expected {what}, found {}", self.found())),
        }
    }

    fn value_id(&mut self) -> R<ValueId> {
        match self.peek() {
            Some(&Tok::Val(v)) => match ValueId::try_from(v) {
                Ok(v) => {
                    self.pos += 1;
                    Ok(v)
                }
                Err(_) => self.err(format!("value %{v} is out of range")),
            },
            _ => self.err(format!("expected a value (%N), found {}", self.found())),
        }
    }

    fn uint(&mut self, what: &str) -> R<u64> {
        match self.peek() {
            Some(Tok::Num(n)) => match n.parse::<u64>() {
                Ok(x) => {
                    self.pos += 1;
                    Ok(x)
                }
                Err(_) => self.err(format!("expected {what}, found number {n}")),
            },
            _ => self.err(format!("expected {what}, found {}", self.found())),
        }
    }

    fn string(&mut self, what: &str) -> R<String> {
        match self.peek() {
            Some(Tok::Str(s)) => {
                let s = s.clone();
                self.pos += 1;
                Ok(s)
            }
            _ => self.err(format!(
                "expected {what} (a quoted string), found {}",
                self.found()
            )),
        }
    }

    /// `%a, %b, ...` (possibly none, up to a token that is not a value).
    fn value_list(&mut self) -> R<Vec<ValueId>> {
        let mut vs = vec![];
        while matches!(self.peek(), Some(Tok::Val(_))) {
            vs.push(self.value_id()?);
            if !self.is(",") {
                break;
            }
            self.pos += 1;
        }
        Ok(vs)
    }

    /// A value of the data syntax.
    fn data(&mut self) -> R<Value> {
        if self.depth >= MAX_DEPTH {
            return self.err(format!("structures nested more than {MAX_DEPTH} deep"));
        }
        self.depth += 1;
        let v = self.data_in();
        self.depth -= 1;
        v
    }

    fn data_in(&mut self) -> R<Value> {
        let line = self.line();
        match self.next("a value")? {
            Tok::Num(n) => parse_number(&n).map_err(|msg| ParseError { line, msg }),
            Tok::Str(s) => Ok(Value::String(s)),
            Tok::Val(v) => Err(ParseError {
                line,
                msg: format!("unexpected %{v} in a kernel parameter"),
            }),
            Tok::Punct("[") => {
                let mut xs = vec![];
                while !self.is("]") {
                    xs.push(self.data()?);
                    if self.is(",") {
                        self.pos += 1;
                    }
                }
                self.pos += 1;
                Ok(Value::Array(xs))
            }
            Tok::Punct("{") => self.object_rest().map(Value::Object),
            Tok::Punct(p) => Err(ParseError {
                line,
                msg: format!("expected a value, found '{p}'"),
            }),
            Tok::Word(w) => {
                match w.as_str() {
                    "none" => return Ok(Value::Null),
                    "true" => return Ok(Value::Bool(true)),
                    "false" => return Ok(Value::Bool(false)),
                    _ => {}
                }
                if self.is("(") {
                    self.pos += 1;
                    let mut xs = vec![];
                    while !self.is(")") {
                        xs.push(self.data()?);
                        if self.is(",") {
                            self.pos += 1;
                        }
                    }
                    self.pos += 1;
                    let inner = if xs.len() == 1 {
                        xs.pop().unwrap_or(Value::Null)
                    } else {
                        Value::Array(xs)
                    };
                    Ok(Value::Object(Map::from_iter([(w, inner)])))
                } else if self.is("{") {
                    self.pos += 1;
                    let inner = self.object_rest()?;
                    Ok(Value::Object(Map::from_iter([(w, Value::Object(inner))])))
                } else {
                    Ok(Value::String(w))
                }
            }
        }
    }

    /// The fields of a structure after its `{`, up to and with its `}`.
    fn object_rest(&mut self) -> R<Map<String, Value>> {
        let mut m = Map::new();
        while !self.is("}") {
            if self.peek().is_none() {
                return self.err("a '{' is not closed");
            }
            let k = self.word("a field name")?;
            self.punct(":")?;
            let v = if k == "insts" && self.is("{") {
                self.pos += 1;
                self.insts()?
            } else {
                self.data()?
            };
            if m.insert(k.clone(), v).is_some() {
                return self.err(format!("field '{k}' is given twice"));
            }
            if self.is(",") {
                self.pos += 1;
            }
        }
        self.pos += 1;
        Ok(m)
    }

    fn reg(&mut self) -> R<u32> {
        match self.peek() {
            Some(Tok::Word(w)) if w.starts_with('r') => match w[1..].parse() {
                Ok(r) => {
                    self.pos += 1;
                    Ok(r)
                }
                Err(_) => self.err(format!("expected a register (rN), found '{w}'")),
            },
            _ => self.err(format!("expected a register (rN), found {}", self.found())),
        }
    }

    fn f32_const(&mut self) -> R<f32> {
        match self.peek() {
            Some(Tok::Num(n)) => match n.parse::<f32>() {
                Ok(x) => {
                    self.pos += 1;
                    Ok(x)
                }
                Err(_) => self.err(format!("bad f32 constant {n}")),
            },
            _ => self.err(format!("expected an f32 constant, found {}", self.found())),
        }
    }

    /// An optional unary op before a fused operand's register.
    fn fused_operand(&mut self) -> R<(Option<super::expr::UnOp>, u32)> {
        if let Some(Tok::Word(w)) = self.peek() {
            if !is_reg(w) {
                let w = w.clone();
                let op = typed_op(&w)
                    .ok_or(())
                    .or_else(|_| self.err(format!("unknown unary op '{w}'")))?;
                self.pos += 1;
                return Ok((Some(op), self.reg()?));
            }
        }
        Ok((None, self.reg()?))
    }

    /// Instructions `rN = op operands` up to and with `}`, as the serialized list.
    fn insts(&mut self) -> R<Value> {
        use super::expr::{BinOp, Fused, Inst, InstOp, UnOp};
        let mut out = vec![];
        while !self.is("}") {
            if self.peek().is_none() {
                return self.err("the instruction block is not closed");
            }
            let dst = self.reg()?;
            self.punct("=")?;
            let name = self.word("an instruction")?;
            let op = match name.as_str() {
                "load" => {
                    let l = self.word("a leaf (leafN)")?;
                    let n = l
                        .strip_prefix("leaf")
                        .and_then(|n| n.parse().ok())
                        .ok_or(())
                        .or_else(|_| self.err(format!("expected a leaf (leafN), found '{l}'")))?;
                    InstOp::Load(n)
                }
                "const" => InstOp::Const(self.f32_const()?),
                "select" => {
                    let c = self.reg()?;
                    self.punct(",")?;
                    let a = self.reg()?;
                    self.punct(",")?;
                    InstOp::Select(c, a, self.reg()?)
                }
                "powi" => {
                    let a = self.reg()?;
                    self.punct(",")?;
                    let line = self.line();
                    let n = match self.next("an exponent")? {
                        Tok::Num(n) => n.parse::<i32>().ok(),
                        _ => None,
                    };
                    let n = n.ok_or(ParseError {
                        line,
                        msg: "expected an integer exponent".into(),
                    })?;
                    InstOp::PowI(a, n)
                }
                "fused" => {
                    let w = self.word("a binary op")?;
                    let op: BinOp = typed_op(&w)
                        .ok_or(())
                        .or_else(|_| self.err(format!("unknown binary op '{w}'")))?;
                    let (pa, a) = self.fused_operand()?;
                    self.punct(",")?;
                    let (pb, b) = self.fused_operand()?;
                    let add = if self.is("+") {
                        self.pos += 1;
                        Some(self.reg()?)
                    } else {
                        None
                    };
                    InstOp::Fused(Fused {
                        op,
                        a,
                        pa,
                        b,
                        pb,
                        add,
                    })
                }
                w => {
                    if let Some(u) = typed_op::<UnOp>(w) {
                        InstOp::Un(u, self.reg()?)
                    } else if let Some(b) = typed_op::<BinOp>(w) {
                        let lhs_reg = matches!(self.peek(), Some(Tok::Word(x)) if is_reg(x));
                        if lhs_reg {
                            let a = self.reg()?;
                            self.punct(",")?;
                            if matches!(self.peek(), Some(Tok::Num(_))) {
                                InstOp::BinC(b, a, self.f32_const()?)
                            } else {
                                InstOp::Bin(b, a, self.reg()?)
                            }
                        } else {
                            let c = self.f32_const()?;
                            self.punct(",")?;
                            InstOp::CBin(b, c, self.reg()?)
                        }
                    } else {
                        return self.err(format!("unknown instruction '{w}'"));
                    }
                }
            };
            let inst = Inst { dst, op };
            out.push(serde_json::to_value(inst).map_err(|e| ParseError {
                line: self.line(),
                msg: e.to_string(),
            })?);
        }
        self.pos += 1;
        Ok(Value::Array(out))
    }
}

fn is_reg(w: &str) -> bool {
    w.len() > 1 && w.starts_with('r') && w[1..].bytes().all(|c| c.is_ascii_digit())
}

/// The op named `snake_name` (`gelu_erf`) of an op enum.
fn typed_op<T: serde::de::DeserializeOwned>(snake_name: &str) -> Option<T> {
    if snake_name.chars().any(|c| c.is_ascii_uppercase()) {
        return None;
    }
    serde_json::from_value(Value::String(camel(snake_name))).ok()
}

fn parse_number(n: &str) -> Result<Value, String> {
    let bad = || format!("bad number {n}");
    if let Some(f) = n.strip_suffix("f32") {
        let x: f32 = f.parse().map_err(|_| bad())?;
        return Number::from_f64(x as f64)
            .map(Value::Number)
            .ok_or_else(|| format!("{n}: a kernel parameter must be finite"));
    }
    if n.contains(['.', 'e', 'E']) || n.contains("inf") || n.contains("nan") {
        let x: f64 = n.parse().map_err(|_| bad())?;
        return Number::from_f64(x)
            .map(Value::Number)
            .ok_or_else(|| format!("{n}: a kernel parameter must be finite"));
    }
    if n.starts_with('-') {
        n.parse::<i64>().map(Value::from).map_err(|_| bad())
    } else {
        n.parse::<u64>().map(Value::from).map_err(|_| bad())
    }
}

/// Parses a program text (see the module docs). The result is checked for references to
/// values that do not exist; [`Artifact::validate`](super::Artifact::validate) checks the rest
/// before it runs.
pub fn parse(text: &str) -> Result<Program, ParseError> {
    let first = text.lines().next().unwrap_or("").trim_end();
    if first != MAGIC {
        return Err(ParseError {
            line: 1,
            msg: format!("a program text starts with '{MAGIC}'"),
        });
    }
    let toks = lex(text)?;
    let mut p = Parser {
        toks,
        pos: 0,
        end_line: text.lines().count().max(1),
        depth: 0,
    };
    // The magic line: `fxhlo.program v1`.
    p.keyword("fxhlo.program")?;
    p.keyword("v1")?;
    let mut prog = Program::default();
    // Values named before the table that declares them: checked after it, at their line.
    let mut refs: Vec<(ValueId, usize)> = vec![];
    p.keyword("inputs")?;
    let line = p.line();
    prog.inputs = p.value_list()?;
    refs.extend(prog.inputs.iter().map(|&v| (v, line)));
    p.keyword("outputs")?;
    let line = p.line();
    prog.outputs = p.value_list()?;
    refs.extend(prog.outputs.iter().map(|&v| (v, line)));
    if p.is_word("folded") {
        p.pos += 1;
        let line = p.line();
        prog.folded = serde_json::from_value(p.data()?).map_err(|e| ParseError {
            line,
            msg: format!("folded: {e}"),
        })?;
    }
    while p.is_word("const") {
        p.pos += 1;
        let line = p.line();
        let v = p.value_id()?;
        refs.push((v, line));
        p.punct("=")?;
        let name = p.string("the constant's tensor name")?;
        prog.constants.push((v, name));
    }
    while matches!(p.peek(), Some(Tok::Val(_))) {
        let line = p.line();
        let v = p.value_id()?;
        if v as usize != prog.values.len() {
            return Err(ParseError {
                line,
                msg: format!(
                    "value %{v} declared where %{} comes next",
                    prog.values.len()
                ),
            });
        }
        p.punct(":")?;
        p.punct("[")?;
        let mut shape = vec![];
        while !p.is("]") {
            let d = p.uint("a dimension")?;
            shape.push(usize::try_from(d).or_else(|_| p.err("dimension too large"))?);
            if p.is(",") {
                p.pos += 1;
            }
        }
        p.pos += 1;
        let dt = p.word("an element type")?;
        let dtype = DType::parse(&dt)
            .ok_or(())
            .or_else(|_| p.err(format!("unknown element type '{dt}'")))?;
        let name = p.string("the value's name")?;
        prog.values.push(TensorSpec { name, dtype, shape });
    }
    if let Some((v, line)) = refs.iter().find(|r| r.0 as usize >= prog.values.len()) {
        return Err(ParseError {
            line: *line,
            msg: format!(
                "%{v} is not declared (there are {} values)",
                prog.values.len()
            ),
        });
    }
    while p.peek().is_some() {
        let n = prog.steps.len();
        let s = step(&mut p, &prog, n)?;
        prog.steps.push(s);
    }
    Ok(prog)
}

/// One step, from its `step` keyword to its `}`.
fn step(p: &mut Parser, prog: &Program, n: usize) -> R<Step> {
    let line = p.line();
    p.keyword("step")?;
    let i = p.uint("the step's number")?;
    if i != n as u64 {
        return p.err(format!("step {i} where step {n} comes next"));
    }
    let kind = p.word("a kernel kind")?;
    let Some(&(_, variant)) = KINDS.iter().find(|(k, _)| *k == kind) else {
        let known: Vec<&str> = KINDS.iter().map(|k| k.0).collect();
        return p.err(format!(
            "unknown kernel kind '{kind}' (known: {})",
            known.join(", ")
        ));
    };
    p.punct("(")?;
    let srcs = p.value_list()?;
    p.punct(")")?;
    p.punct("->")?;
    p.punct("(")?;
    let dsts = p.value_list()?;
    p.punct(")")?;
    if let Some(v) = srcs
        .iter()
        .chain(&dsts)
        .find(|&&v| v as usize >= prog.values.len())
    {
        return p.err(format!("step {n} names %{v}, which is not declared"));
    }
    p.punct("{")?;
    let mut fields = p.object_rest()?;
    let at = |msg: String| ParseError { line, msg };
    let mut take = |k: &str| fields.remove(k);
    let strings = |v: Option<Value>, what: &str| -> R<Vec<String>> {
        v.map_or(Ok(vec![]), |v| {
            serde_json::from_value(v).map_err(|e| at(format!("step {n}: {what}: {e}")))
        })
    };
    let nodes = strings(take("nodes"), "nodes")?;
    let decisions = strings(take("why"), "why")?;
    let kernels: Vec<u32> = take("kernels").map_or(Ok(vec![]), |v| {
        serde_json::from_value(v).map_err(|e| at(format!("step {n}: kernels: {e}")))
    })?;
    let grid: Vec<usize> = match take("grid") {
        Some(v) => serde_json::from_value(v).map_err(|e| at(format!("step {n}: grid: {e}")))?,
        None => return Err(at(format!("step {n}: no grid"))),
    };
    let blocks = match take("blocks") {
        Some(Value::String(w)) if w == "whole" => {
            let mut bs = vec![];
            for &v in srcs.iter().chain(&dsts) {
                let t = prog.values.get(v as usize).ok_or_else(|| {
                    at(format!(
                        "step {n} reads or writes %{v}, which is not declared"
                    ))
                })?;
                bs.push(BlockSpec::whole(&t.shape));
            }
            bs
        }
        Some(v) => serde_json::from_value(v).map_err(|e| at(format!("step {n}: blocks: {e}")))?,
        None => return Err(at(format!("step {n}: no blocks"))),
    };
    debug_assert!(STEP_FIELDS.iter().all(|f| !fields.contains_key(*f)));
    let tagged = Value::Object(Map::from_iter([(
        variant.to_string(),
        Value::Object(fields),
    )]));
    let kernel: Kernel =
        serde_json::from_value(tagged).map_err(|e| at(format!("step {n} ({kind}): {e}")))?;
    Ok(Step {
        nodes,
        srcs,
        dsts,
        launch: Launch { grid, blocks },
        kernel,
        origin: Origin { kernels, decisions },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A program whose expression uses every instruction form, a non-finite constant and a
    /// constant that is not a short `f64`.
    const TEXT: &str = r#"fxhlo.program v1
inputs %0, %1
outputs %2
%0 : [2, 3] f32 "x"
%1 : [2, 3] bool "m"
%2 : [2, 3] f32 "y"

step 0 elementwise (%0, %1) -> (%2) {
  nodes: [a, "b.c"]
  kernels: [3, 4]
  why: ["merged: a reason with \"quotes\""]
  grid: [1]
  blocks: whole
  dims: [2, 3]
  insts: {
    r0 = load leaf0
    r1 = load leaf1
    r2 = const nan
    r3 = fused mul gelu_erf r0, r0 + r2
    r4 = fused add r3, sigmoid r0
    r5 = sub 1.0, r4
    r6 = max r5, -inf
    r7 = select r1, r5, r6
    r8 = powi r7, 3
    r9 = mul r8, 0.044715
    r10 = gelu_tanh r9
    r11 = div_floor r10, r9
    r12 = add r11, r11
  }
  leaves: [
    {offset: 0, src: Slot{kind: F32, slot: 0}, strides: [3, 1]}
    {offset: 0, src: Slot{kind: Bool, slot: 1}, strides: [3, 1]}
  ]
  num_regs: 13
  outputs: [12]
  shape: [2, 3]
}

step 1 fallback (%2) -> (%2) {
  nodes: [c]
  grid: [1]
  blocks: whole
  graph: """
    graph {
      %in0: f32[2, 3] = input

      return %in0
    }
    """
  reason: "a reason"
}
"#;

    #[test]
    fn every_instruction_form_round_trips() {
        let p = parse(TEXT).unwrap();
        let printed = print(&p);
        // (Compared as JSON: the NaN constant is not equal to itself.)
        let json = |p: &Program| serde_json::to_value(p).unwrap();
        assert_eq!(json(&parse(&printed).unwrap()), json(&p));
        assert_eq!(print(&parse(&printed).unwrap()), printed);
        for line in [
            "r3 = fused mul gelu_erf r0, r0 + r2",
            "r4 = fused add r3, sigmoid r0",
            "r5 = sub 1.0, r4",
            "r6 = max r5, -inf",
            "r2 = const nan",
            "r9 = mul r8, 0.044715",
            "nodes: [a, \"b.c\"]",
            "kernels: [3, 4]",
            "  graph: \"\"\"\n    graph {\n      %in0: f32[2, 3] = input\n\n      return %in0\n    }\n    \"\"\"\n",
        ] {
            assert!(printed.contains(line), "{line} not in\n{printed}");
        }
        assert_eq!(p.steps[0].origin.kernels, vec![3, 4]);
        let Kernel::Fallback { graph, .. } = &p.steps[1].kernel else {
            panic!("not a fallback");
        };
        assert_eq!(
            graph,
            "graph {\n  %in0: f32[2, 3] = input\n\n  return %in0\n}\n"
        );
        assert_eq!(
            p.steps[0].origin.decisions,
            vec!["merged: a reason with \"quotes\"".to_string()]
        );
    }

    /// An `f32` that is not a short `f64` is written in its short `f32` form with a suffix, and
    /// reads back to the same bits; an `f64` that is no `f32` keeps all its digits.
    #[test]
    fn numbers_round_trip_exactly() {
        for x in [
            0.1f32 as f64,
            1e-5f32 as f64,
            0.1f64,
            1e-5,
            2.0,
            -3.5,
            1e300,
        ] {
            let s = float64(x);
            let v = parse_number(&s).unwrap();
            assert_eq!(v.as_f64().unwrap().to_bits(), x.to_bits(), "{x} as {s}");
        }
        assert_eq!(float64(0.1f32 as f64), "0.1f32");
        assert_eq!(float64(0.5), "0.5");
    }

    /// Every prefix of a valid text, and the text with any one byte removed, parses or fails
    /// with a line number within the text; nothing panics.
    #[test]
    fn damaged_texts_are_errors_not_panics() {
        let lines = TEXT.lines().count();
        let check = |t: &str| {
            if let Err(e) = parse(t) {
                assert!(e.line >= 1 && e.line <= lines, "{e}");
            }
        };
        for n in 0..TEXT.len() {
            check(&TEXT[..n]);
            let mut t = TEXT.to_string();
            t.remove(n);
            check(&t);
        }
    }

    #[test]
    fn deep_nesting_is_an_error() {
        let t = TEXT.replace(
            "grid: [1]\n  blocks: whole\n  dims",
            &format!(
                "grid: {}1{}\n  blocks: whole\n  dims",
                "[".repeat(100_000),
                "]".repeat(100_000)
            ),
        );
        let e = parse(&t).unwrap_err();
        assert!(e.msg.contains("nested more than 64 deep"), "{e}");
    }

    #[test]
    fn errors_name_the_line() {
        let e = parse(&TEXT.replace("r6 = max", "r6 = maxx")).unwrap_err();
        assert_eq!(e.line, 22);
        assert!(e.msg.contains("unknown instruction 'maxx'"), "{e}");
        let e = parse(&TEXT.replace("step 0", "step 1")).unwrap_err();
        assert_eq!(
            (e.line, e.msg.as_str()),
            (8, "step 1 where step 0 comes next")
        );
        let e = parse("fxhlo.program v2\n").unwrap_err();
        assert_eq!(e.line, 1);
    }
}

//! Passes over the fxhlo IR: the [`Pass`] trait, the [`PassManager`] with named pipelines,
//! the classic cleanup passes (dead code, common subexpressions, canonicalization), the
//! e-graph optimizer ([`egraph`]), composite-pattern recognition ([`composite`]) and fusion
//! planning ([`fusion`]).
#![warn(missing_docs)]

pub mod canonicalize;
pub mod composite;
pub mod conv_bn;
pub mod cse;
pub mod dce;
pub mod egraph;
pub mod fusion;
pub mod rewrite;

use fxhlo_ir::{Graph, IrError};
use std::time::{Duration, Instant};

/// Whether a pass changed the graph.
pub type Changed = bool;

/// Context shared by the passes of one pipeline run: statistics and timings.
#[derive(Debug, Default)]
pub struct Cx {
    /// `(pass name, time, changed)` for every pass run, in order.
    pub timings: Vec<(&'static str, Duration, Changed)>,
    /// The report of every `egraph` pass run, in order.
    pub egraph: Vec<egraph::EgraphReport>,
    /// Composite patterns (softmax, layer norm, GELU, SiLU, attention) of the graph, as found
    /// by the last `composites` pass run; empty if none ran.
    pub composites: Vec<composite::Composite>,
}

/// A transformation of a graph.
pub trait Pass {
    /// Short name used by `--passes`, `--print-after` and `--time-passes`.
    fn name(&self) -> &'static str;
    /// Runs the pass; reports whether anything changed.
    fn run(&self, graph: &mut Graph, cx: &mut Cx) -> Result<Changed, IrError>;
}

/// Every pass, by name.
pub fn pass_by_name(name: &str) -> Option<Box<dyn Pass>> {
    Some(match name {
        "dce" => Box::new(dce::Dce),
        "cse" => Box::new(cse::Cse),
        "canonicalize" => Box::new(canonicalize::Canonicalize),
        "egraph" => Box::new(egraph::Egraph::default()),
        "egraph-reassoc" => Box::new(egraph::Egraph::reassociating()),
        "composites" => Box::new(composite::CompositePass),
        "conv-bn" => Box::new(conv_bn::ConvBn),
        _ => return None,
    })
}

/// Names of every pass, for help texts.
pub const PASS_NAMES: &[&str] = &[
    "canonicalize",
    "composites",
    "conv-bn",
    "cse",
    "dce",
    "egraph",
    "egraph-reassoc",
];

/// Runs a sequence of passes, optionally verifying and printing after each.
pub struct PassManager {
    passes: Vec<Box<dyn Pass>>,
    /// Verify the graph after every pass (always on in debug builds).
    pub verify_each: bool,
    /// Print the IR after passes with these names (`*` for all) to standard error.
    pub print_after: Vec<String>,
}

impl PassManager {
    /// The pipeline of an optimization level: `0` runs nothing, `1` cleans up
    /// (canonicalize, cse, dce), `2` cleans up, folds inference batch norms into the
    /// convolutions before them (`conv-bn`), runs the e-graph optimizer, cleans up again and
    /// records the composite patterns of the result (`composites`, an analysis).
    pub fn for_level(level: u8) -> PassManager {
        PassManager::from_names(Self::level_names(level)).expect("built-in pipeline names exist")
    }

    /// Pass names of an optimization level's pipeline.
    pub fn level_names(level: u8) -> &'static [&'static str] {
        match level {
            0 => &[],
            1 => &["canonicalize", "cse", "dce"],
            _ => &[
                "canonicalize",
                "cse",
                "conv-bn",
                "egraph",
                "canonicalize",
                "cse",
                "dce",
                "composites",
            ],
        }
    }

    /// Replaces the passes of this pipeline named like `pass` by `pass` (e.g. an `egraph`
    /// pass with other bounds).
    pub fn with_pass(mut self, make: impl Fn() -> Box<dyn Pass>) -> PassManager {
        let name = make().name();
        for p in &mut self.passes {
            if p.name() == name {
                *p = make();
            }
        }
        self
    }

    /// A pipeline from pass names (`--passes a,b,c`).
    pub fn from_names(names: &[&str]) -> Result<PassManager, String> {
        let passes = names
            .iter()
            .map(|n| {
                pass_by_name(n).ok_or_else(|| {
                    format!("unknown pass '{n}' (passes: {})", PASS_NAMES.join(", "))
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(PassManager {
            passes,
            verify_each: cfg!(debug_assertions),
            print_after: vec![],
        })
    }

    /// Runs every pass in order. IR dumps requested by `print_after` go to `dump`.
    pub fn run(
        &self,
        graph: &mut Graph,
        cx: &mut Cx,
        dump: &mut dyn FnMut(&str, &Graph),
    ) -> Result<Changed, IrError> {
        let mut any = false;
        for p in &self.passes {
            let _span = tracing::info_span!("pass", name = p.name()).entered();
            let t = Instant::now();
            let changed = p.run(graph, cx)?;
            cx.timings.push((p.name(), t.elapsed(), changed));
            any |= changed;
            if self.verify_each {
                graph.verify().map_err(|e| {
                    IrError::Graph(format!(
                        "the graph is invalid after pass '{}': {e}",
                        p.name()
                    ))
                })?;
            }
            if self.print_after.iter().any(|n| n == "*" || n == p.name()) {
                dump(p.name(), graph);
            }
        }
        Ok(any)
    }
}

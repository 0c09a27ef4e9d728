//! Constant steps folded when an artifact is made: a step that reads only constants (a causal
//! mask built from `arange`, `full` and `index` ops, which depend on the shapes alone) is run
//! once, by the same kernels a run would use, and its results become constants of the
//! artifact. Its step is gone from the program, so a run neither computes it nor falls back to
//! the interpreter for it. Results of more than [`FOLD_MAX_ELEMS`] elements (unless no larger
//! than a constant the step reads), program outputs and steps of random ops are not folded
//! (the step stays, as it was).

use super::exec::{ExecOptions, Executor};
use super::{Artifact, ArtifactHeader, Program, Step};
use fxhlo_ir::Weights;
use std::collections::BTreeMap;

/// Most elements in a folded step's results, unless they are no more than in the largest
/// constant the step reads (convolution weights scaled by a batch norm, which replace the
/// weights): a constant is held by every executor of the artifact and written into the
/// artifact, so a result that would grow it past that is computed at run time instead.
pub const FOLD_MAX_ELEMS: usize = 1 << 20;

/// How the names of folded results begin.
pub const FOLDED_PREFIX: &str = "fxhlo.folded.";

/// Name of the constant that holds result `j` of the folded step `step` (its position in the
/// program before folding).
fn folded_name(step: usize, j: usize) -> String {
    format!("{FOLDED_PREFIX}{step}.{j}")
}

/// Folds the steps of `program` that read only constants (see the module doc), so a step
/// whose constant sources are results of folded steps folds as well; their results are added
/// to `constants`, and constants no step or output reads any more are dropped from both.
/// Returns the names of the folded steps' first nodes. The folded steps run as one program, on
/// a thread of their own (so the caller's thread keeps its own pool for the executors it
/// makes). An error means a step failed on its constant operands: the compiler reports it, as
/// the run would have.
///
/// `pure(step)` says whether a step gives the same results on every run: steps of random ops
/// (and of `empty`) must not be folded.
pub fn fold_constant_steps(
    program: &mut Program,
    constants: &mut Weights,
    pure: &dyn Fn(&Step) -> bool,
) -> Result<Vec<String>, String> {
    let n = program.values.len();
    let mut is_const = vec![false; n];
    for &(v, _) in &program.constants {
        is_const[v as usize] = true;
    }
    // The steps to fold, in order.
    let mut fold = vec![false; program.steps.len()];
    for (i, step) in program.steps.iter().enumerate() {
        let elems = step
            .dsts
            .iter()
            .map(|&v| program.values[v as usize].numel())
            .try_fold(0usize, |a, e| a.checked_add(e));
        let largest_src = (step.srcs.iter())
            .map(|&v| program.values[v as usize].numel())
            .max()
            .unwrap_or(0);
        fold[i] = step.srcs.iter().all(|&v| is_const[v as usize])
            && pure(step)
            && !step.dsts.iter().any(|v| program.outputs.contains(v))
            && elems.is_some_and(|e| e <= FOLD_MAX_ELEMS.max(largest_src));
        if fold[i] {
            step.dsts.iter().for_each(|&v| is_const[v as usize] = true);
        }
    }
    if !fold.contains(&true) {
        return Ok(vec![]);
    }
    // One program of those steps: the constants they read, their results as outputs.
    let steps: Vec<(usize, &Step)> = (program.steps.iter().enumerate())
        .filter(|&(i, _)| fold[i])
        .collect();
    let results: Vec<(u32, String)> = steps
        .iter()
        .flat_map(|&(i, s)| (s.dsts.iter().enumerate()).map(move |(j, &v)| (v, folded_name(i, j))))
        .collect();
    let mut read = vec![false; n];
    for (_, s) in &steps {
        s.srcs.iter().for_each(|&v| read[v as usize] = true);
    }
    // Constants a step left or an output reads stay; the others (a convolution's weights
    // that a batch norm scales) move into the folding run instead of being copied. One name
    // may stand for several values (tied weights).
    let mut stays = vec![false; n];
    for (s, _) in program.steps.iter().zip(&fold).filter(|(_, &f)| !f) {
        s.srcs.iter().for_each(|&v| stays[v as usize] = true);
    }
    program
        .outputs
        .iter()
        .for_each(|&v| stays[v as usize] = true);
    let kept_names: std::collections::BTreeSet<&String> = (program.constants.iter())
        .filter(|(v, _)| stays[*v as usize])
        .map(|(_, name)| name)
        .collect();
    let mut used = vec![];
    let mut weights = Weights::new();
    for (v, name) in &program.constants {
        if read[*v as usize] {
            if !weights.contains_key(name) {
                let t = if kept_names.contains(name) {
                    constants.get(name).cloned()
                } else {
                    constants.remove(name)
                };
                let t = t.ok_or_else(|| format!("constant '{name}' is missing"))?;
                weights.insert(name.clone(), t);
            }
            used.push((*v, name.clone()));
        }
    }
    let artifact = Artifact {
        header: ArtifactHeader {
            compiler_version: String::new(),
            opt_level: 0,
            program: Program {
                values: program.values.clone(),
                inputs: vec![],
                constants: used,
                outputs: results.iter().map(|(v, _)| *v).collect(),
                steps: steps.iter().map(|(_, s)| (*s).clone()).collect(),
                folded: vec![],
            },
            graph: String::new(),
            stablehlo: Err("steps of constants only".into()),
        },
        constants: weights,
    };
    let names: Vec<String> = steps.iter().map(|(_, s)| s.name().to_string()).collect();
    let tensors = std::thread::scope(|sc| {
        sc.spawn(|| {
            let opts = ExecOptions {
                threads: Some(1),
                max_memory: None,
            };
            let ex = Executor::new(artifact, &opts)?;
            ex.run(&BTreeMap::new())
        })
        .join()
    })
    .map_err(|_| "a step of constants only panicked".to_string())?
    .map_err(|e| format!("steps of constants only ({}): {e}", names.join(", ")))?;
    for ((v, name), t) in results.into_iter().zip(tensors) {
        program.constants.push((v, name.clone()));
        constants.insert(name, t);
    }
    program.folded.extend(
        steps
            .iter()
            .flat_map(|(_, s)| s.origin.kernels.iter().copied()),
    );
    program.folded.sort_unstable();
    program.folded.dedup();
    let mut folded = fold.iter();
    program.steps.retain(|_| folded.next() == Some(&false));
    // Constants only the folded steps read (`stays`: what the steps left and the outputs read).
    program.constants.retain(|(v, _)| stays[*v as usize]);
    // (Tied weights: one name may stand for several values.)
    let names_left: std::collections::BTreeSet<&String> =
        program.constants.iter().map(|(_, s)| s).collect();
    constants.retain(|name, _| names_left.contains(name));
    Ok(names)
}

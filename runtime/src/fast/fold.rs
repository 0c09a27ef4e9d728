//! Constant steps folded when an artifact is made: a step that reads only constants (a causal
//! mask built from `arange`, `full` and `index` ops, which depend on the shapes alone) is run
//! once, by the same kernels a run would use, and its results become constants of the
//! artifact. Its step is gone from the program, so a run neither computes it nor falls back to
//! the interpreter for it. Results of more than [`FOLD_MAX_ELEMS`] elements and program outputs
//! are not folded (the step stays, as it was).

use super::exec::{ExecOptions, Executor};
use super::{Artifact, ArtifactHeader, Program};
use fxhlo_ir::Weights;
use std::collections::BTreeMap;

/// Most elements in a folded step's results: a constant is held by every executor of the
/// artifact and written into the artifact, so a larger result is computed at run time instead.
pub const FOLD_MAX_ELEMS: usize = 1 << 20;

/// How the names of folded results begin.
pub const FOLDED_PREFIX: &str = "fxhlo.folded.";

/// Name of the constant that holds result `j` of the folded step `step` (its position in the
/// program before folding).
fn folded_name(step: usize, j: usize) -> String {
    format!("{FOLDED_PREFIX}{step}.{j}")
}

/// Folds the steps of `program` that read only constants (see the module doc), in order, so a
/// step whose constant sources were just folded folds as well; their results are added to
/// `constants`, and constants no step or output reads any more are dropped from both. Returns
/// the names of the folded steps' first nodes. An error means a step failed on its constant
/// operands: the compiler reports it, as the run would have.
pub fn fold_constant_steps(
    program: &mut Program,
    constants: &mut Weights,
) -> Result<Vec<String>, String> {
    let n = program.values.len();
    let mut is_const = vec![false; n];
    for &(v, _) in &program.constants {
        is_const[v as usize] = true;
    }
    let is_output = |v: u32| program.outputs.contains(&v);
    let mut folded = vec![];
    let mut kept = Vec::with_capacity(program.steps.len());
    for (i, step) in std::mem::take(&mut program.steps).into_iter().enumerate() {
        let foldable = step.srcs.iter().all(|&v| is_const[v as usize])
            && !step.dsts.iter().any(|&v| is_output(v))
            && step
                .dsts
                .iter()
                .map(|&v| program.values[v as usize].numel())
                .try_fold(0usize, |a, e| a.checked_add(e))
                .is_some_and(|e| e <= FOLD_MAX_ELEMS);
        if !foldable {
            kept.push(step);
            continue;
        }
        // A program of this step alone, its sources as constants, its results as outputs.
        let names: BTreeMap<u32, &String> =
            program.constants.iter().map(|(v, s)| (*v, s)).collect();
        let mut srcs: Vec<u32> = step.srcs.clone();
        srcs.sort_unstable();
        srcs.dedup();
        let one = Program {
            values: program.values.clone(),
            inputs: vec![],
            constants: srcs.iter().map(|&v| (v, names[&v].clone())).collect(),
            outputs: step.dsts.clone(),
            steps: vec![step.clone()],
        };
        let weights: Weights = srcs
            .iter()
            .map(|v| (names[v].clone(), constants[names[v]].clone()))
            .collect();
        let artifact = Artifact {
            header: ArtifactHeader {
                compiler_version: String::new(),
                opt_level: 0,
                program: one,
                graph: String::new(),
                stablehlo: Err("a folded step".into()),
            },
            constants: weights,
        };
        let what = |e: &dyn std::fmt::Display| {
            format!("step '{}' on its constant operands: {e}", step.name())
        };
        let opts = ExecOptions {
            threads: Some(1),
            max_memory: None,
        };
        let ex = Executor::new(artifact, &opts).map_err(|e| what(&e))?;
        let results = ex.run(&BTreeMap::new()).map_err(|e| what(&e))?;
        for (j, (&v, t)) in step.dsts.iter().zip(results).enumerate() {
            let name = folded_name(i, j);
            program.constants.push((v, name.clone()));
            constants.insert(name, t);
            is_const[v as usize] = true;
        }
        folded.push(step.name().to_string());
    }
    program.steps = kept;
    // Constants only the folded steps read.
    let mut read = vec![false; n];
    for s in &program.steps {
        for &v in &s.srcs {
            read[v as usize] = true;
        }
    }
    for &v in &program.outputs {
        read[v as usize] = true;
    }
    program.constants.retain(|(v, _)| read[*v as usize]);
    // (Tied weights: one name may stand for several values.)
    let names: std::collections::BTreeSet<&String> =
        program.constants.iter().map(|(_, s)| s).collect();
    constants.retain(|name, _| names.contains(name));
    Ok(folded)
}

//! The fast runtime end to end: every testdata model compiled to an artifact, written, read
//! back and run, matches eager at the reference interpreter's tolerance; runs are bitwise
//! identical across thread counts; corrupted artifacts and memory limits give clear errors.

use fxhlo::{check_outputs, compile, load_case, CompileOptions};
use fxhlo_runtime::fast::{Artifact, ExecOptions, Executor};
use fxhlo_runtime::RuntimeError;
mod common;

use common::testdata;

fn executor(a: Artifact, threads: usize) -> Executor {
    Executor::new(
        a,
        &ExecOptions {
            threads: Some(threads),
            max_memory: None,
        },
    )
    .expect("executor")
}

#[test]
fn models_match_eager_through_artifacts() {
    let mut failures = vec![];
    let mut checked = 0;
    for dir in testdata() {
        for file in ["graph.json", "model.pt2"] {
            let path = dir.join(file);
            if !path.exists() {
                continue;
            }
            let case = load_case(&dir, Some(&path)).unwrap();
            for level in [0, 2] {
                let opts = CompileOptions {
                    opt_level: level,
                    ..Default::default()
                };
                let a = compile(&case.model, &opts)
                    .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
                let bytes = a.to_bytes().unwrap();
                let back = Artifact::from_bytes(&bytes).unwrap();
                assert_eq!(back, a, "{}: artifact round trip", path.display());
                let outs = executor(back, 2)
                    .run(&case.inputs)
                    .unwrap_or_else(|e| panic!("{} -O{level}: {e}", path.display()));
                checked += 1;
                for c in check_outputs(&case, &outs, None).unwrap() {
                    if !c.ok() {
                        failures.push(format!(
                            "{} -O{level}: {} max_abs {:.3e} bad {}/{} {}",
                            path.display(),
                            c.name,
                            c.max_abs,
                            c.bad,
                            c.numel,
                            c.mismatch.unwrap_or_default()
                        ));
                    }
                }
            }
        }
    }
    assert!(checked >= 20, "only {checked} runs");
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn results_do_not_depend_on_the_thread_count() {
    for dir in testdata() {
        let case = load_case(&dir, None).unwrap();
        let a = compile(&case.model, &CompileOptions::default()).unwrap();
        let one = executor(a.clone(), 1).run(&case.inputs).unwrap();
        let two = executor(a.clone(), 2).run(&case.inputs).unwrap();
        let four = executor(a, 4).run(&case.inputs).unwrap();
        assert_eq!(one, two, "{}: 1 vs 2 threads", dir.display());
        assert_eq!(one, four, "{}: 1 vs 4 threads", dir.display());
    }
}

#[test]
fn repeated_runs_reuse_the_arena_and_agree() {
    let dir = testdata()
        .into_iter()
        .find(|d| d.ends_with("gpt2"))
        .unwrap();
    let case = load_case(&dir, None).unwrap();
    let ex = executor(compile(&case.model, &CompileOptions::default()).unwrap(), 2);
    let first = ex.run(&case.inputs).unwrap();
    for _ in 0..3 {
        assert_eq!(ex.run(&case.inputs).unwrap(), first);
    }
    let m = ex.memory_plan();
    assert!(
        m.arena_bytes < m.intermediate_bytes,
        "the arena ({}) should reuse buffers: intermediates {}",
        m.arena_bytes,
        m.intermediate_bytes
    );
    let stats = ex.stats();
    assert!(stats.contains("memory: peak"), "{stats}");
}

#[test]
fn raw_runs_write_outputs_in_place_and_through_unaligned_buffers() {
    let dir = testdata().into_iter().find(|d| d.ends_with("mlp")).unwrap();
    let case = load_case(&dir, None).unwrap();
    let a = compile(&case.model, &CompileOptions::default()).unwrap();
    let ex = executor(a, 2);
    let want = ex.run(&case.inputs).unwrap();
    let spec = ex.artifact().inputs()[0].clone();
    let input = &case.inputs[&spec.name];
    let n = want[0].bytes.len();
    // One buffer aligned for f32, one deliberately not.
    let mut aligned = vec![0f32; n / 4];
    let mut unaligned = vec![0u8; n + 1];
    ex.run_raw(&[&input.bytes], &mut [bytemuck_bytes(&mut aligned)])
        .unwrap();
    ex.run_raw(&[&input.bytes], &mut [&mut unaligned[1..]])
        .unwrap();
    assert_eq!(bytemuck_bytes(&mut aligned).to_vec(), want[0].bytes);
    assert_eq!(unaligned[1..].to_vec(), want[0].bytes);
    // Wrong sizes are errors.
    let err = ex.run_raw(&[&input.bytes[1..]], &mut [&mut unaligned[1..]]);
    assert!(
        matches!(err, Err(RuntimeError::InputBytes { .. })),
        "{err:?}"
    );
}

fn bytemuck_bytes(v: &mut [f32]) -> &mut [u8] {
    bytemuck::cast_slice_mut(v)
}

fn artifact_bytes() -> Vec<u8> {
    let dir = testdata().into_iter().find(|d| d.ends_with("cnn")).unwrap();
    let case = load_case(&dir, None).unwrap();
    compile(&case.model, &CompileOptions::default())
        .unwrap()
        .to_bytes()
        .unwrap()
}

fn load_err(b: &[u8]) -> String {
    match Artifact::from_bytes(b) {
        Ok(_) => panic!("a damaged artifact loaded"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn damaged_artifacts_are_refused_with_a_reason() {
    let good = artifact_bytes();
    assert!(Artifact::from_bytes(&good).is_ok());
    assert!(load_err(b"{\"format\": 1}").contains("not an fxhlo artifact"));
    let mut v = good.clone();
    let next = fxhlo_runtime::fast::artifact::FORMAT_VERSION + 1;
    v[8..12].copy_from_slice(&next.to_le_bytes());
    let e = load_err(&v);
    assert!(e.contains(&format!("format version {next}")), "{e}");
    // A flipped bit in the header JSON or in the constants (not in a length field, which is
    // checked against the file size first).
    for at in [24, good.len() - 5] {
        let mut v = good.clone();
        v[at] ^= 0x40;
        let e = load_err(&v);
        assert!(e.contains("checksum"), "{e}");
    }
    let e = load_err(&good[..good.len() - 3]);
    assert!(e.contains("truncated") || e.contains("checksum"), "{e}");
    let mut v = good.clone();
    v.extend_from_slice(b"junk");
    assert!(load_err(&v).contains("unexpected bytes"));
    // Every truncation point is an error, never a panic.
    for cut in (0..good.len()).step_by(97) {
        assert!(Artifact::from_bytes(&good[..cut]).is_err());
    }
}

#[test]
fn a_consistent_checksum_does_not_hide_an_inconsistent_program() {
    // Re-sign a header whose program reads a value that no step computes.
    let dir = testdata().into_iter().find(|d| d.ends_with("mlp")).unwrap();
    let case = load_case(&dir, None).unwrap();
    let mut a = compile(&case.model, &CompileOptions::default()).unwrap();
    let last = a.header.program.values.len() as u32;
    a.header.program.outputs.push(last + 5);
    let bytes = a.to_bytes().unwrap();
    let e = load_err(&bytes);
    assert!(e.contains("refers to value"), "{e}");
}

#[test]
fn the_memory_limit_is_enforced_before_running() {
    let dir = testdata()
        .into_iter()
        .find(|d| d.ends_with("gpt2"))
        .unwrap();
    let case = load_case(&dir, None).unwrap();
    let a = compile(&case.model, &CompileOptions::default()).unwrap();
    let e = Executor::new(
        a,
        &ExecOptions {
            threads: Some(1),
            max_memory: Some(1000),
        },
    )
    .err()
    .expect("over the limit");
    assert!(
        e.to_string().contains("more than the limit of 1000 bytes"),
        "{e}"
    );
}

fn fxhlo(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_fxhlo"))
        .args(args)
        .output()
        .expect("run fxhlo")
}

/// `fxhlo copy-peak` prints one time per copy and a bandwidth as JSON, and refuses an empty
/// size with a reason instead of timing nothing.
#[test]
fn cli_copy_peak_times_the_streaming_copy() {
    let out = fxhlo(&["copy-peak", "--mib", "4", "--iters", "3", "--threads", "2"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let times = v["times_ms"].as_array().unwrap();
    assert_eq!(times.len(), 3);
    assert!(times.iter().all(|t| t.as_f64().unwrap() > 0.0));
    assert!(v["gbs"].as_f64().unwrap() > 0.0);
    assert_eq!(
        (v["mib"].as_u64(), v["threads"].as_u64()),
        (Some(4), Some(2))
    );
    let bad = fxhlo(&["copy-peak", "--mib", "0"]);
    assert!(!bad.status.success());
    assert!(String::from_utf8_lossy(&bad.stderr).contains("the size must be 1 to 65536 MiB"));
}

#[test]
fn cli_compiles_an_artifact_and_runs_it_like_the_interpreter() {
    let dir = testdata().into_iter().find(|d| d.ends_with("cnn")).unwrap();
    let tmp = std::env::temp_dir().join(format!("fxhlo-runtime-cli-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    let fxa = tmp.join("cnn.fxa");
    let d = dir.to_str().unwrap();
    let out = fxhlo(&["compile", d, "-o", fxa.to_str().unwrap(), "--stats"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("compiled in"), "{stderr}");
    let inputs = dir.join("inputs.safetensors");
    let fast = tmp.join("fast.safetensors");
    let reference = tmp.join("ref.safetensors");
    let out = fxhlo(&[
        "run",
        fxa.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--out",
        fast.to_str().unwrap(),
        "--stats",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("memory: peak"));
    let out = fxhlo(&[
        "run",
        d,
        "--reference",
        "--inputs",
        inputs.to_str().unwrap(),
        "--out",
        reference.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let case = load_case(&dir, None).unwrap();
    let fast = fxhlo_ir::read::safetensors_io::read_safetensors(&fast).unwrap();
    let outs: Vec<_> = fast.into_values().collect();
    for c in check_outputs(&case, &outs, None).unwrap() {
        assert!(c.ok(), "{} max_abs {}", c.name, c.max_abs);
    }
    // A damaged artifact is one clear error line and exit code 2, and leaves --out alone.
    let mut bytes = std::fs::read(&fxa).unwrap();
    let mid = bytes.len() / 3;
    bytes[mid] ^= 1;
    let bad = tmp.join("bad.fxa");
    std::fs::write(&bad, &bytes).unwrap();
    let before = std::fs::read(&reference).unwrap();
    let out = fxhlo(&[
        "run",
        bad.to_str().unwrap(),
        "--inputs",
        inputs.to_str().unwrap(),
        "--out",
        reference.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.starts_with("error: artifact: checksum mismatch"),
        "{stderr}"
    );
    assert_eq!(std::fs::read(&reference).unwrap(), before);
    std::fs::remove_dir_all(&tmp).ok();
}

/// Forward and backward graphs that `torch.compile(backend="fxhlo")` handed over (aot_autograd,
/// parameters as inputs): each compiles, and the fast runtime agrees with the interpreter on
/// seeded inputs (floats random, integers zero so that saved pooling indices stay valid).
#[test]
fn aot_graphs_compile_and_agree_with_the_interpreter() {
    let root = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/aot_graphs");
    let mut files: Vec<_> = std::fs::read_dir(&root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(files.len() >= 5);
    for f in files {
        let bytes = std::fs::read(&f).unwrap();
        let model = fxhlo::model_from_fxjson(&bytes, Default::default()).unwrap();
        let a = compile(&model, &CompileOptions::default())
            .unwrap_or_else(|e| panic!("{}: {e}", f.display()));
        let mut seed = 0x9e3779b97f4a7c15u64;
        let mut inputs = std::collections::BTreeMap::new();
        for s in a.inputs() {
            let n = s.numel();
            let vals: Vec<f64> = (0..n)
                .map(|_| {
                    seed = seed
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    if s.dtype.is_float() {
                        ((seed >> 40) as f64 / (1u64 << 24) as f64) * 2.0 - 1.0
                    } else {
                        0.0
                    }
                })
                .collect();
            inputs.insert(
                s.name.clone(),
                fxhlo_ir::HostTensor::from_f64(s.dtype, s.shape.clone(), &vals),
            );
        }
        let want = fxhlo_runtime::run(&model, &inputs).unwrap();
        let got = executor(a, 2).run(&inputs).unwrap();
        assert_eq!(got.len(), want.len());
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            // resnet18's deep f32 accumulations get the atol its testdata states (1e-4, see
            // docs/numerics.md), and its gradients (sums whose terms cancel, of magnitude up
            // to 1e5) an atol of 1e-6 of the output's largest magnitude besides: the rounding
            // of f32 sums scales with their terms, not their result. Everything else the
            // per-dtype default.
            let mut tol = fxhlo::Tolerance::for_dtype(w.dtype);
            let name = f.to_string_lossy();
            if name.contains("resnet18") && w.dtype.is_float() {
                tol.atol = 1e-4;
                if name.contains("backward") {
                    let scale = w.to_f64_vec().iter().fold(0f64, |m, x| m.max(x.abs()));
                    tol.atol += 1e-6 * scale;
                }
            }
            let c = fxhlo::compare(&format!("output{i}"), g, w, tol);
            assert!(
                c.ok(),
                "{} output {i}: max_abs {:.3e} bad {}/{}",
                f.display(),
                c.max_abs,
                c.bad,
                c.numel
            );
        }
    }
}

/// The same model gives byte-identical artifacts, IR text and StableHLO across runs and thread
/// counts.
#[test]
fn compilation_is_deterministic_across_runs_and_thread_counts() {
    let tmp = std::env::temp_dir().join(format!("fxhlo-determinism-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).unwrap();
    for dir in testdata() {
        let d = dir.to_str().unwrap();
        let mut outputs: Vec<Vec<Vec<u8>>> = vec![];
        for threads in ["1", "2", "2"] {
            let fxa = tmp.join(format!("m{threads}.fxa"));
            let run = |args: &[&str]| {
                let out = std::process::Command::new(env!("CARGO_BIN_EXE_fxhlo"))
                    .args(args)
                    .env("FXHLO_NUM_THREADS", threads)
                    .output()
                    .unwrap();
                assert!(
                    out.status.success(),
                    "{args:?}: {}",
                    String::from_utf8_lossy(&out.stderr)
                );
                out.stdout
            };
            run(&["compile", d, "-o", fxa.to_str().unwrap()]);
            let ir = run(&["opt", "-O2", d]);
            let hlo = run(&["lower", "-O2", d]);
            outputs.push(vec![std::fs::read(&fxa).unwrap(), ir, hlo]);
        }
        assert!(
            outputs.windows(2).all(|w| w[0] == w[1]),
            "{d}: outputs differ"
        );
    }
    std::fs::remove_dir_all(&tmp).ok();
}

/// A testdata model and its -O2 artifact.
fn compiled(model: &str) -> (fxhlo::TestCase, Artifact) {
    let dir = testdata().into_iter().find(|d| d.ends_with(model)).unwrap();
    let case = load_case(&dir, None).unwrap();
    let a = compile(&case.model, &CompileOptions::default()).unwrap();
    (case, a)
}

/// The kinds of the steps of a testdata model's -O2 program, and how many carry a fused
/// epilogue.
fn step_kinds(model: &str) -> (Vec<&'static str>, usize) {
    step_kinds_of(&compiled(model).1)
}

/// [`step_kinds`] of an artifact.
fn step_kinds_of(a: &Artifact) -> (Vec<&'static str>, usize) {
    use fxhlo_runtime::fast::Kernel;
    let steps = &a.header.program.steps;
    let fused = steps
        .iter()
        .filter(|s| {
            matches!(
                &s.kernel,
                Kernel::Matmul {
                    epilogue: Some(_),
                    ..
                } | Kernel::Conv {
                    epilogue: Some(_),
                    ..
                }
            )
        })
        .count();
    (steps.iter().map(|s| s.kernel.kind()).collect(), fused)
}

#[test]
fn matmul_and_conv_epilogues_run_in_the_products_step() {
    // mlp: linear + GELU twice, then a linear: three steps, the GELUs fused.
    let (kinds, fused) = step_kinds("mlp");
    assert_eq!(kinds, ["matmul", "matmul", "matmul"]);
    assert_eq!(fused, 2);
    // cnn: conv + bias + relu fused into the convolutions.
    let (kinds, fused) = step_kinds("cnn");
    assert!(fused >= 2, "{kinds:?}: {fused} fused");
    assert!(!kinds.contains(&"fallback"), "{kinds:?}");
}

#[test]
fn fused_products_live_in_their_epilogue_results() {
    use fxhlo_runtime::fast::memory::Loc;
    use fxhlo_runtime::fast::Kernel;
    // mlp: the two products under GELU are read by nothing else, so they get no buffer: each
    // is computed into its epilogue's result and the epilogue runs there in place.
    for (model, want) in [("mlp", 2), ("cnn", 2)] {
        let (case, a) = compiled(model);
        let ex = executor(a, 2);
        let p = &ex.artifact().header.program;
        let plan = ex.memory_plan();
        let in_place = p
            .steps
            .iter()
            .filter(|s| plan.loc[s.dsts[0] as usize] == Loc::InEpilogue)
            .inspect(|s| {
                assert!(matches!(
                    &s.kernel,
                    Kernel::Matmul {
                        epilogue: Some(_),
                        ..
                    } | Kernel::Conv {
                        epilogue: Some(_),
                        ..
                    }
                ))
            })
            .count();
        assert!(in_place >= want, "{model}: {in_place} products in place");
        let got = ex.run(&case.inputs).unwrap();
        let cmp = check_outputs(&case, &got, None).unwrap();
        assert!(cmp.iter().all(|c| c.ok()), "{model}: {cmp:?}");
    }
}

#[test]
fn attention_runs_as_one_fused_step_with_its_guard() {
    // The encoder's attention, with the `where(all masked, 0, softmax)` guard of PyTorch's
    // decomposition, is one fused step: no row reduction of the guard or the softmax, no
    // fallback.
    let (case, a) = compiled("transformer_encoder");
    let (kinds, _) = step_kinds_of(&a);
    assert!(!kinds.contains(&"fallback"), "{kinds:?}");
    assert_eq!(
        kinds.iter().filter(|k| **k == "attention").count(),
        1,
        "{kinds:?}"
    );
    use fxhlo_runtime::fast::Kernel;
    let att = a
        .header
        .program
        .steps
        .iter()
        .find_map(|s| match &s.kernel {
            Kernel::Attention(spec) => Some(spec),
            _ => None,
        })
        .unwrap();
    assert!(att.guard && att.mask.is_none(), "{att:?}");
    let got = executor(a, 2).run(&case.inputs).unwrap();
    let cmp = check_outputs(&case, &got, None).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
}

#[test]
fn attention_reads_the_heads_of_its_projection_in_place() {
    // q, k and v are scaled views of the packed in-projection with `batch * heads` two strides
    // apart: the attention reads them in place (no copies of q, k or v), and writes its result
    // where the out-projection reads it, in rows of `heads * dim`: no copy step at all.
    let (case, a) = compiled("transformer_encoder");
    let (kinds, _) = step_kinds_of(&a);
    assert!(!kinds.contains(&"elementwise"), "{kinds:?}");
    assert_eq!(&kinds[..3], ["matmul", "attention", "matmul"], "{kinds:?}");
    // The in-projection is `bmm` then `add(bias)`: the add becomes the product's own bias,
    // so that step has no epilogue left.
    use fxhlo_runtime::fast::Kernel;
    let steps = &a.header.program.steps;
    let Kernel::Matmul { spec, epilogue } = &steps[0].kernel else {
        panic!("the first step is not a matmul");
    };
    assert!(spec.bias.is_some() && epilogue.is_none(), "{spec:?}");
    let Kernel::Attention(att) = &steps[1].kernel else {
        panic!("the second step is not an attention");
    };
    assert!(
        att.q.grouped() && att.k.grouped() && att.v.grouped(),
        "{att:?}"
    );
    // Row `s` of head `h` of sequence `b` goes to row `s * batch + b`, columns `h * dim..`,
    // of the out-projection's `[seq * batch, heads * dim]` input.
    assert_eq!(
        (att.out.row_stride, att.out.batch_stride),
        (2 * 32, 8),
        "{att:?}"
    );
    let got = executor(a, 2).run(&case.inputs).unwrap();
    let cmp = check_outputs(&case, &got, None).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
}

#[test]
fn an_executor_runs_from_other_threads_too() {
    // An executor's pool takes the thread that made it as a worker (runs started there need
    // no hand-over); runs started on other threads at the same time must still finish, with
    // the same bits, for one thread and for several.
    let (case, a) = compiled("mlp");
    for threads in [1, 2, 3] {
        let ex = executor(a.clone(), threads);
        let want = ex.run(&case.inputs).unwrap();
        std::thread::scope(|s| {
            let others: Vec<_> = (0..3)
                .map(|_| s.spawn(|| ex.run(&case.inputs).unwrap()))
                .collect();
            for _ in 0..3 {
                assert_eq!(ex.run(&case.inputs).unwrap(), want, "{threads} threads");
            }
            for h in others {
                assert_eq!(h.join().unwrap(), want, "{threads} threads");
            }
        });
    }
}

/// The GPT-2 model's causal mask and positions are built from `arange`, `full`, `cat`,
/// `cumsum` and `index` of nothing but the shapes (i64 and bool values, which the fast kernels
/// leave to the interpreter): the compiler computes them before fusion
/// (`fxhlo_lowering::constfold`), so the program reads them as constants and has no fallback
/// left. Its outputs have the bits of the program built without that folding (whose steps of
/// constants only are folded when the artifact is made instead), and match eager.
#[test]
fn values_of_the_shapes_alone_are_computed_at_compile_time() {
    use fxhlo_lowering::constfold::SHAPE_CONST_PREFIX;
    use fxhlo_runtime::fast::fold::fold_constant_steps;
    let (case, a) = compiled("gpt2");
    let (kinds, _) = step_kinds_of(&a);
    assert!(!kinds.contains(&"fallback"), "{kinds:?}");
    let p = &a.header.program;
    let shape_consts = (p.constants.iter())
        .filter(|(_, n)| n.starts_with(SHAPE_CONST_PREFIX))
        .count();
    assert!(shape_consts >= 1, "{:?}", p.constants);
    // Every constant left is read by a step or is an output.
    for v in p.constants.iter().map(|&(v, _)| v) {
        assert!(
            p.steps.iter().any(|s| s.srcs.contains(&v)) || p.outputs.contains(&v),
            "constant {v} is not read"
        );
    }
    // The program without the folding before fusion: the same passes, plan and builder.
    let mut g = case.model.graph.clone();
    let pm = fxhlo::pass_manager(&CompileOptions::default()).unwrap();
    pm.run(&mut g, &mut fxhlo_passes::Cx::default(), &mut |_, _| {})
        .unwrap();
    let plan = fxhlo_passes::fusion::plan(&g);
    let (mut unfolded, report) = fxhlo_lowering::kernels::build_program(&g, &plan).unwrap();
    assert!(
        report.fallbacks.len() >= 5,
        "{} fallbacks before folding",
        report.fallbacks.len()
    );
    let mut weights: fxhlo_ir::Weights = unfolded
        .constants
        .iter()
        .map(|(_, n)| (n.clone(), case.model.weights[n].clone()))
        .collect();
    let folded = fold_constant_steps(&mut unfolded, &mut weights, &|_| true).unwrap();
    assert!(folded.len() >= 10, "{folded:?}");
    let mut before = a.clone();
    before.header.program = unfolded;
    before.constants = weights;
    let want = executor(before, 2).run(&case.inputs).unwrap();
    let got = executor(a.clone(), 2).run(&case.inputs).unwrap();
    assert_eq!(got, want, "outputs of the program folded before fusion");
    let cmp = check_outputs(&case, &got, None).unwrap();
    assert!(cmp.iter().all(|c| c.ok()), "{cmp:?}");
    // Nothing of the program reads only constants any more.
    let (mut p2, mut w2) = (a.header.program.clone(), a.constants.clone());
    assert!(fold_constant_steps(&mut p2, &mut w2, &|_| true)
        .unwrap()
        .is_empty());
    assert_eq!(p2, a.header.program);
}

/// A random op reads no tensor, yet its step is not folded (its values belong to the run: the
/// interpreter draws them from the run's seed), while the `arange` beside it, pure, may fold.
#[test]
fn steps_of_random_ops_are_not_folded() {
    let json = br#"{
      "format": "fxhlo-graph", "version": 1,
      "inputs": [{"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [64]}}],
      "nodes": [
        {"name": "r", "op": "aten.rand.default", "args": {"size": {"ints": [64]}, "dtype": {"dtype": "f32"}},
         "results": [{"name": "r", "type": {"dtype": "f32", "shape": [64]}}]},
        {"name": "a", "op": "aten.arange.start_step", "args": {"start": {"int": 0}, "end": {"int": 64}, "dtype": {"dtype": "f32"}},
         "results": [{"name": "a", "type": {"dtype": "f32", "shape": [64]}}]},
        {"name": "y", "op": "aten.mul.Tensor", "args": {"self": {"tensor": "x"}, "other": {"tensor": "r"}},
         "results": [{"name": "y", "type": {"dtype": "f32", "shape": [64]}}]},
        {"name": "z", "op": "aten.add.Tensor", "args": {"self": {"tensor": "y"}, "other": {"tensor": "a"}},
         "results": [{"name": "z", "type": {"dtype": "f32", "shape": [64]}}]}
      ],
      "outputs": ["z"]
    }"#;
    let model = fxhlo::model_from_fxjson(json, Default::default()).unwrap();
    let c = fxhlo::compile_with(&model, &CompileOptions::default(), &mut |_, _| {}).unwrap();
    let p = &c.artifact.header.program;
    assert!(
        p.steps.iter().any(|s| s.nodes.iter().any(|n| n == "r")),
        "{:?}",
        p.steps
    );
    assert!(!c.report.folded.iter().any(|n| n == "r"), "{:?}", c.report);
    let x = fxhlo_ir::HostTensor {
        dtype: fxhlo_ir::DType::F32,
        shape: vec![64],
        bytes: [1f32; 64].iter().flat_map(|v| v.to_le_bytes()).collect(),
    };
    let inputs: fxhlo_ir::Weights = [("x".to_string(), x)].into_iter().collect();
    let got = executor(c.artifact, 1).run(&inputs).unwrap();
    // z = x * r + a with x = 1 and r in [0, 1): element i lies in [i, i + 1).
    for (i, v) in got[0].bytes.chunks_exact(4).enumerate() {
        let v = f32::from_le_bytes(v.try_into().unwrap());
        assert!((i as f32..i as f32 + 1.0).contains(&v), "z[{i}] = {v}");
    }
}

/// A folded step's results may be as large as the largest constant it reads (a batch norm's
/// scale applied to convolution weights of any size), but no larger than `FOLD_MAX_ELEMS`
/// otherwise: a constant broadcast to more elements stays a step of the run. (Both are
/// operands of a matmul, which takes neither as a prologue, so each is a step of its own.)
#[test]
fn steps_of_constants_fold_unless_they_grow_the_artifact() {
    const K: usize = 1024;
    const N: usize = fxhlo_runtime::fast::fold::FOLD_MAX_ELEMS / K + 1;
    let json = format!(
        r#"{{
      "format": "fxhlo-graph", "version": 1, "weights": "w.safetensors",
      "inputs": [{{"name": "x", "kind": "user_input", "type": {{"dtype": "f32", "shape": [1, {K}]}}}},
                 {{"name": "w", "kind": "parameter", "target": "w", "type": {{"dtype": "f32", "shape": [{K}, {N}]}}}},
                 {{"name": "c", "kind": "parameter", "target": "c", "type": {{"dtype": "f32", "shape": [{N}]}}}},
                 {{"name": "s", "kind": "parameter", "target": "s", "type": {{"dtype": "f32", "shape": [1]}}}}],
      "nodes": [
        {{"name": "scaled", "op": "aten.mul.Tensor", "args": {{"self": {{"tensor": "w"}}, "other": {{"tensor": "c"}}}},
         "results": [{{"name": "scaled", "type": {{"dtype": "f32", "shape": [{K}, {N}]}}}}]}},
        {{"name": "wide", "op": "aten.expand.default", "args": {{"self": {{"tensor": "s"}}, "size": {{"ints": [{K}, {N}]}}}},
         "results": [{{"name": "wide", "type": {{"dtype": "f32", "shape": [{K}, {N}]}}}}]}},
        {{"name": "wide1", "op": "aten.add.Scalar", "args": {{"self": {{"tensor": "wide"}}, "other": {{"float": 1.0}}}},
         "results": [{{"name": "wide1", "type": {{"dtype": "f32", "shape": [{K}, {N}]}}}}]}},
        {{"name": "y", "op": "aten.mm.default", "args": {{"self": {{"tensor": "x"}}, "mat2": {{"tensor": "scaled"}}}},
         "results": [{{"name": "y", "type": {{"dtype": "f32", "shape": [1, {N}]}}}}]}},
        {{"name": "z", "op": "aten.mm.default", "args": {{"self": {{"tensor": "x"}}, "mat2": {{"tensor": "wide1"}}}},
         "results": [{{"name": "z", "type": {{"dtype": "f32", "shape": [1, {N}]}}}}]}},
        {{"name": "out", "op": "aten.add.Tensor", "args": {{"self": {{"tensor": "y"}}, "other": {{"tensor": "z"}}}},
         "results": [{{"name": "out", "type": {{"dtype": "f32", "shape": [1, {N}]}}}}]}}
      ],
      "outputs": ["out"]
    }}"#
    );
    let f32s = |shape: Vec<usize>, f: &dyn Fn(usize) -> f32| fxhlo_ir::HostTensor {
        dtype: fxhlo_ir::DType::F32,
        bytes: (0..shape.iter().product::<usize>())
            .flat_map(|i| f(i).to_le_bytes())
            .collect(),
        shape,
    };
    // Small integers: every sum below is exact in any order.
    let weights: fxhlo_ir::Weights = [
        ("w".to_string(), f32s(vec![K, N], &|i| (i % 7) as f32)),
        ("c".to_string(), f32s(vec![N], &|_| 2.0)),
        ("s".to_string(), f32s(vec![1], &|_| 0.5)),
    ]
    .into_iter()
    .collect();
    let model = fxhlo::model_from_fxjson(json.as_bytes(), weights).unwrap();
    let c = fxhlo::compile_with(&model, &CompileOptions::default(), &mut |_, _| {}).unwrap();
    assert!(
        c.report.folded.iter().any(|f| f == "scaled"),
        "{:?}",
        c.report.folded
    );
    let p = &c.artifact.header.program;
    assert!(
        p.steps.iter().any(|s| s.nodes.iter().any(|n| n == "wide1")),
        "the broadcast of `s` was folded: {:?}",
        c.report.folded
    );
    let inputs: fxhlo_ir::Weights = [("x".to_string(), f32s(vec![1, K], &|i| (i % 3) as f32))]
        .into_iter()
        .collect();
    let got = executor(c.artifact, 1).run(&inputs).unwrap();
    for (j, v) in got[0].bytes.chunks_exact(4).enumerate() {
        let v = f32::from_le_bytes(v.try_into().unwrap());
        let want: f32 = (0..K)
            .map(|i| (i % 3) as f32 * ((i * N + j) % 7) as f32 * 2.0 + (i % 3) as f32 * 1.5)
            .sum();
        assert_eq!(v, want, "out[{j}]");
    }
}

/// Inputs for an artifact: element `i` of input `k` is `value(k, i)`, in each input's dtype.
fn inputs_of(a: &Artifact, value: impl Fn(usize, usize) -> f64) -> fxhlo_ir::Weights {
    a.inputs()
        .iter()
        .enumerate()
        .map(|(k, s)| {
            let vals: Vec<f64> = (0..s.numel()).map(|i| value(k, i)).collect();
            let t = fxhlo_ir::HostTensor::from_f64(s.dtype, s.shape.clone(), &vals);
            (s.name.clone(), t)
        })
        .collect()
}

/// The artifact's fallback steps, each with its reason.
fn fallback_steps(a: &Artifact) -> Vec<(&fxhlo_runtime::fast::Step, &str)> {
    a.header
        .program
        .steps
        .iter()
        .filter_map(|s| match &s.kernel {
            fxhlo_runtime::fast::Kernel::Fallback { reason, .. } => Some((s, reason.as_str())),
            _ => None,
        })
        .collect()
}

/// `cat` runs as a concatenation step, not on the interpreter: along a negative dimension,
/// with an input read twice, a computed input and a 1-D empty one (which `cat` skips), and of
/// i64 values; the results are the interpreter's, bit for bit. A `cat` that promotes its
/// inputs' types still falls back, with the reason.
#[test]
fn cat_runs_as_a_concatenation_step() {
    let json = br#"{
      "format": "fxhlo-graph", "version": 1,
      "inputs": [
        {"name": "a", "kind": "user_input", "type": {"dtype": "f32", "shape": [3, 2, 4]}},
        {"name": "b", "kind": "user_input", "type": {"dtype": "f32", "shape": [3, 5, 4]}},
        {"name": "e", "kind": "user_input", "type": {"dtype": "f32", "shape": [0]}},
        {"name": "i", "kind": "user_input", "type": {"dtype": "i64", "shape": [2, 3]}},
        {"name": "j", "kind": "user_input", "type": {"dtype": "i64", "shape": [2, 1]}},
        {"name": "p", "kind": "user_input", "type": {"dtype": "f32", "shape": [2, 1]}}
      ],
      "nodes": [
        {"name": "ra", "op": "aten.relu.default", "args": {"self": {"tensor": "a"}},
         "results": [{"name": "ra", "type": {"dtype": "f32", "shape": [3, 2, 4]}}]},
        {"name": "c", "op": "aten.cat.default",
         "args": {"tensors": {"tensors": ["ra", "e", "b", "ra"]}, "dim": {"int": -2}},
         "results": [{"name": "c", "type": {"dtype": "f32", "shape": [3, 9, 4]}}]},
        {"name": "ci", "op": "aten.cat.default",
         "args": {"tensors": {"tensors": ["i", "j"]}, "dim": {"int": 1}},
         "results": [{"name": "ci", "type": {"dtype": "i64", "shape": [2, 4]}}]},
        {"name": "cp", "op": "aten.cat.default",
         "args": {"tensors": {"tensors": ["j", "p"]}, "dim": {"int": 1}},
         "results": [{"name": "cp", "type": {"dtype": "f32", "shape": [2, 2]}}]}
      ],
      "outputs": ["c", "ci", "cp"]
    }"#;
    let model = fxhlo::model_from_fxjson(json, Default::default()).unwrap();
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let (kinds, _) = step_kinds_of(&a);
    assert_eq!(
        kinds.iter().filter(|k| **k == "concat").count(),
        2,
        "{kinds:?}"
    );
    let fallbacks: Vec<&str> = fallback_steps(&a)
        .into_iter()
        .map(|(_, reason)| reason)
        .collect();
    assert!(
        matches!(&fallbacks[..], [r] if r.contains("'cp'") && r.contains("input 0 has dtype i64")),
        "{fallbacks:?}"
    );
    let inputs = inputs_of(&a, |k, i| (k * 100 + i) as f64 - 7.5);
    let want = fxhlo_runtime::run(&model, &inputs).unwrap();
    for threads in [1, 2] {
        let got = executor(a.clone(), threads).run(&inputs).unwrap();
        assert_eq!(got, want, "{threads} threads");
    }
}

/// The index ops run as their own steps, not on the interpreter, with the interpreter's
/// results bit for bit on 1 and 2 threads: `argmax` over a dimension (after a fused `relu`,
/// with an `f32` epilogue), `argmin` of the flattened input (with an `i64` epilogue, which
/// alone falls back), `max.dim` (values and indices, keepdim), `cumsum` of `f32` and of
/// `i64`, `gather` along a dimension, and `x[:, idx]` with negative indices. The inputs have
/// ties (the first index must win). An index out of range at run time is an error naming it.
#[test]
fn index_ops_run_as_their_own_steps() {
    let json = br#"{
      "format": "fxhlo-graph", "version": 1,
      "inputs": [
        {"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [6, 37]}},
        {"name": "y", "kind": "user_input", "type": {"dtype": "f32", "shape": [4, 5, 3]}},
        {"name": "ix", "kind": "user_input", "type": {"dtype": "i64", "shape": [6, 4]}},
        {"name": "iv", "kind": "user_input", "type": {"dtype": "i64", "shape": [2, 3]}}
      ],
      "nodes": [
        {"name": "r", "op": "aten.relu.default", "args": {"self": {"tensor": "x"}},
         "results": [{"name": "r", "type": {"dtype": "f32", "shape": [6, 37]}}]},
        {"name": "am", "op": "aten.argmax.default", "args": {"self": {"tensor": "r"}, "dim": {"int": -1}},
         "results": [{"name": "am", "type": {"dtype": "i64", "shape": [6]}}]},
        {"name": "amf", "op": "aten._to_copy.default", "args": {"self": {"tensor": "am"}, "dtype": {"dtype": "f32"}},
         "results": [{"name": "amf", "type": {"dtype": "f32", "shape": [6]}}]},
        {"name": "amh", "op": "aten.mul.Tensor", "args": {"self": {"tensor": "amf"}, "other": {"float": 0.5}},
         "results": [{"name": "amh", "type": {"dtype": "f32", "shape": [6]}}]},
        {"name": "mn", "op": "aten.argmin.default", "args": {"self": {"tensor": "x"}, "dim": {"none": null}},
         "results": [{"name": "mn", "type": {"dtype": "i64", "shape": []}}]},
        {"name": "mn1", "op": "aten.add.Tensor", "args": {"self": {"tensor": "mn"}, "other": {"int": 1}},
         "results": [{"name": "mn1", "type": {"dtype": "i64", "shape": []}}]},
        {"name": "md", "op": "aten.max.dim", "args": {"self": {"tensor": "y"}, "dim": {"int": 1}, "keepdim": {"bool": true}},
         "results": [{"name": "mdv", "type": {"dtype": "f32", "shape": [4, 1, 3]}},
                     {"name": "mdi", "type": {"dtype": "i64", "shape": [4, 1, 3]}}]},
        {"name": "cs", "op": "aten.cumsum.default", "args": {"self": {"tensor": "y"}, "dim": {"int": 1}},
         "results": [{"name": "cs", "type": {"dtype": "f32", "shape": [4, 5, 3]}}]},
        {"name": "csi", "op": "aten.cumsum.default", "args": {"self": {"tensor": "ix"}, "dim": {"int": 0}},
         "results": [{"name": "csi", "type": {"dtype": "i64", "shape": [6, 4]}}]},
        {"name": "gd", "op": "aten.gather.default", "args": {"self": {"tensor": "x"}, "dim": {"int": 1}, "index": {"tensor": "ix"}},
         "results": [{"name": "gd", "type": {"dtype": "f32", "shape": [6, 4]}}]},
        {"name": "it", "op": "aten.index.Tensor", "args": {"self": {"tensor": "y"}, "indices": {"tensors": [null, "iv"]}},
         "results": [{"name": "it", "type": {"dtype": "f32", "shape": [4, 2, 3, 3]}}]}
      ],
      "outputs": ["am", "amh", "mn1", "mdv", "mdi", "cs", "csi", "gd", "it"]
    }"#;
    let model = fxhlo::model_from_fxjson(json, Default::default()).unwrap();
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let (kinds, _) = step_kinds_of(&a);
    let count = |k: &str| kinds.iter().filter(|&&x| x == k).count();
    assert_eq!(
        [
            count("argreduce"),
            count("cumsum"),
            count("gather_dim"),
            count("gather")
        ],
        [3, 2, 1, 1],
        "{kinds:?}"
    );
    let fallbacks: Vec<&[String]> = fallback_steps(&a)
        .into_iter()
        .map(|(s, _)| &s.nodes[..])
        .collect();
    assert!(
        matches!(&fallbacks[..], [nodes] if *nodes == ["mn1"]),
        "only the i64 epilogue falls back: {fallbacks:?}"
    );
    // Ties in x and y; ix within x's rows of 37; iv from -3 (wrapped) to 2.
    let value = |k: usize, i: usize| match k {
        0 | 1 => ((k * 131 + i * 71) % 17) as f64 - 8.0,
        2 => ((i * 7) % 37) as f64,
        _ => i as f64 - 3.0,
    };
    let inputs = inputs_of(&a, value);
    let want = fxhlo_runtime::run(&model, &inputs).unwrap();
    for threads in [1, 2] {
        let got = executor(a.clone(), threads).run(&inputs).unwrap();
        assert_eq!(got, want, "{threads} threads");
    }
    // An index of 37 into rows of 37.
    let bad = inputs_of(&a, |k, i| if k == 2 && i == 5 { 37.0 } else { value(k, i) });
    let e = executor(a, 1).run(&bad).unwrap_err().to_string();
    assert!(e.contains("index 37 is out of bounds"), "{e}");
}

/// A causal LM's padding mask as transformers builds it: the `i64` attention mask cast to
/// bool (an elementwise step that writes a bool result), then indexed by two broadcast index
/// tensors (`mask[batch[:, None, None, None], kv[None, None, None, :]]`, a `gather_nd` step),
/// then used by a `where`. No step falls back, on any thread count the bits are the
/// interpreter's, and an index out of range at run time is an error naming it.
#[test]
fn padding_masks_run_without_fallbacks() {
    let json = br#"{
      "format": "fxhlo-graph", "version": 1,
      "inputs": [
        {"name": "am", "kind": "user_input", "type": {"dtype": "i64", "shape": [3, 7]}},
        {"name": "b", "kind": "user_input", "type": {"dtype": "i64", "shape": [3, 1, 1, 1]}},
        {"name": "kv", "kind": "user_input", "type": {"dtype": "i64", "shape": [1, 1, 1, 7]}},
        {"name": "s", "kind": "user_input", "type": {"dtype": "f32", "shape": [3, 2, 5, 7]}}
      ],
      "nodes": [
        {"name": "m", "op": "aten._to_copy.default", "args": {"self": {"tensor": "am"}, "dtype": {"dtype": "bool"}},
         "results": [{"name": "m", "type": {"dtype": "bool", "shape": [3, 7]}}]},
        {"name": "ix", "op": "aten.index.Tensor", "args": {"self": {"tensor": "m"}, "indices": {"tensors": ["b", "kv"]}},
         "results": [{"name": "ix", "type": {"dtype": "bool", "shape": [3, 1, 1, 7]}}]},
        {"name": "big", "op": "aten.full.default", "args": {"size": {"ints": []}, "fill_value": {"float": -1e9}, "dtype": {"dtype": "f32"}},
         "results": [{"name": "big", "type": {"dtype": "f32", "shape": []}}]},
        {"name": "w", "op": "aten.where.self", "args": {"condition": {"tensor": "ix"}, "self": {"tensor": "s"}, "other": {"tensor": "big"}},
         "results": [{"name": "w", "type": {"dtype": "f32", "shape": [3, 2, 5, 7]}}]}
      ],
      "outputs": ["w", "ix"]
    }"#;
    let model = fxhlo::model_from_fxjson(json, Default::default()).unwrap();
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let (kinds, _) = step_kinds_of(&a);
    assert!(kinds.contains(&"gather_nd"), "{kinds:?}");
    assert!(fallback_steps(&a).is_empty(), "{kinds:?}");
    // Mask values 0, 1 and 5 (nonzero); batch indices 0, -1 (wrapped), 1; kv 0..7 reversed
    // through negative ones.
    let value = |k: usize, i: usize| match k {
        0 => [0.0, 1.0, 5.0][(i * 5) % 3],
        1 => [0.0, -1.0, 1.0][i],
        2 => i as f64 - 7.0 * (i % 2) as f64,
        _ => i as f64 * 0.25 - 3.0,
    };
    let inputs = inputs_of(&a, value);
    let want = fxhlo_runtime::run(&model, &inputs).unwrap();
    for threads in [1, 2] {
        let got = executor(a.clone(), threads).run(&inputs).unwrap();
        assert_eq!(got, want, "{threads} threads");
    }
    let bad = inputs_of(&a, |k, i| if k == 1 && i == 2 { 3.0 } else { value(k, i) });
    let e = executor(a, 1).run(&bad).unwrap_err().to_string();
    assert!(e.contains("index 3 is out of bounds"), "{e}");
}

/// The positions of a positional embedding (an `i64` `arange`, which the gather's kernel
/// only recomputes and the elementwise engine cannot write) are computed at compile time, so
/// the gather reads a constant (a Whisper encoder was refused with "step 0 reads value
/// 'arange' before it is computed").
#[test]
fn a_gather_computes_the_indices_it_only_recomputes() {
    let json = br#"{
      "format": "fxhlo-graph", "version": 1,
      "inputs": [
        {"name": "w", "kind": "user_input", "type": {"dtype": "f32", "shape": [32, 8]}},
        {"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [1, 6, 8]}}
      ],
      "nodes": [
        {"name": "pos", "op": "aten.arange.start_step", "args": {"start": {"int": 2}, "end": {"int": 14}, "step": {"int": 2}},
         "results": [{"name": "pos", "type": {"dtype": "i64", "shape": [6]}}]},
        {"name": "e", "op": "aten.embedding.default", "args": {"weight": {"tensor": "w"}, "indices": {"tensor": "pos"}},
         "results": [{"name": "e", "type": {"dtype": "f32", "shape": [6, 8]}}]},
        {"name": "y", "op": "aten.add.Tensor", "args": {"self": {"tensor": "x"}, "other": {"tensor": "e"}},
         "results": [{"name": "y", "type": {"dtype": "f32", "shape": [1, 6, 8]}}]}
      ],
      "outputs": ["y"]
    }"#;
    let model = fxhlo::model_from_fxjson(json, Default::default()).unwrap();
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let (kinds, _) = step_kinds_of(&a);
    assert_eq!(kinds, ["gather", "elementwise"], "{kinds:?}");
    let inputs = inputs_of(&a, |k, i| (k * 1000 + i) as f64);
    let want = fxhlo_runtime::run(&model, &inputs).unwrap();
    for threads in [1, 2] {
        let got = executor(a.clone(), threads).run(&inputs).unwrap();
        assert_eq!(got, want, "{threads} threads");
    }
    // y[0, j, c] = x[0, j, c] + w[2 + 2j, c], with w[r, c] = 8r + c and x[0, j, c] = 1000 + 8j + c
    let y = want[0].to_f64_vec();
    let expect: Vec<f64> = (0..48)
        .map(|i| (1000 + i) as f64 + (8 * (2 + 2 * (i / 8)) + i % 8) as f64)
        .collect();
    assert_eq!(y, expect);
}

/// A layer norm over channels written back permuted (ConvNeXt's `LayerNorm2d`: permute, layer
/// norm, permute back) cannot write its rows in place through the permutation; it runs as a
/// reduction step and an elementwise step after it instead of on the interpreter, and matches
/// the interpreter at the f32 tolerance.
#[test]
fn a_reduction_whose_epilogue_cannot_run_by_rows_runs_as_two_steps() {
    let json = br#"{
      "format": "fxhlo-graph", "version": 1,
      "inputs": [
        {"name": "x", "kind": "user_input", "type": {"dtype": "f32", "shape": [2, 8, 5, 6]}},
        {"name": "w", "kind": "user_input", "type": {"dtype": "f32", "shape": [8]}},
        {"name": "b", "kind": "user_input", "type": {"dtype": "f32", "shape": [8]}}
      ],
      "nodes": [
        {"name": "p", "op": "aten.permute.default", "args": {"self": {"tensor": "x"}, "dims": {"ints": [0, 2, 3, 1]}},
         "results": [{"name": "p", "type": {"dtype": "f32", "shape": [2, 5, 6, 8]}}]},
        {"name": "ln", "op": "aten.native_layer_norm.default",
         "args": {"input": {"tensor": "p"}, "normalized_shape": {"ints": [8]}, "weight": {"tensor": "w"},
                  "bias": {"tensor": "b"}, "eps": {"float": 1e-6}},
         "results": [{"name": "y", "type": {"dtype": "f32", "shape": [2, 5, 6, 8]}},
                     {"name": "mean", "type": {"dtype": "f32", "shape": [2, 5, 6, 1]}},
                     {"name": "rstd", "type": {"dtype": "f32", "shape": [2, 5, 6, 1]}}]},
        {"name": "q", "op": "aten.permute.default", "args": {"self": {"tensor": "y"}, "dims": {"ints": [0, 3, 1, 2]}},
         "results": [{"name": "q", "type": {"dtype": "f32", "shape": [2, 8, 5, 6]}}]}
      ],
      "outputs": ["q"]
    }"#;
    let model = fxhlo::model_from_fxjson(json, Default::default()).unwrap();
    let a = compile(&model, &CompileOptions::default()).unwrap();
    let (kinds, _) = step_kinds_of(&a);
    assert_eq!(kinds, ["reduction", "elementwise"]);
    let inputs = inputs_of(&a, |k, i| ((i * 37 + k * 11) % 23) as f64 / 7.0 - 1.5);
    let want = fxhlo_runtime::run(&model, &inputs).unwrap();
    let got = executor(a, 2).run(&inputs).unwrap();
    let c = fxhlo::compare(
        "q",
        &got[0],
        &want[0],
        fxhlo::Tolerance::for_dtype(fxhlo_ir::DType::F32),
    );
    assert!(
        c.ok(),
        "max_abs {:.3e}, bad {}/{}",
        c.max_abs,
        c.bad,
        c.numel
    );
}

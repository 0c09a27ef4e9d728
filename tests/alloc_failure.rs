//! An allocation that fails inside a run is an error (`RuntimeError::OutOfMemory` naming the
//! step or node), never an abort: one case per family of per-call allocations (a row
//! reduction's scratch rows, attention's per-worker packing buffers, the GEMM's packed blocks
//! of `A`, a multi-index gather's flat rows, the reference interpreter's tensors). Each case
//! runs in a child process (this test binary again, test `child`): it builds the graph's
//! executor and buffers, then caps its address space (`RLIMIT_AS`) at what it uses plus a
//! margin that holds the run's small allocations but not the kernel's scratch, and runs; then
//! it lifts the cap and runs again, which must succeed (a failed run leaves nothing behind that
//! breaks the next). With scratch allocated by `vec!` or `resize`, the child would abort
//! (SIGABRT, "memory allocation of N bytes failed") instead.

use fxhlo::{compile, CompileOptions};
use fxhlo_ir::{text::parse_graph, DType, Model};
use fxhlo_runtime::fast::{ExecOptions, Executor};
use std::process::Command;

/// The environment variable naming the case a child runs.
const CHILD: &str = "FXHLO_ALLOC_FAILURE_CASE";

/// Room above the address space in use when the cap is set (MiB): the run's outputs, a
/// thread's stack, the allocator's arenas; every case's scratch is larger.
const MARGIN_MIB: usize = 40;

/// A case: its name, the graph, and the step kind whose scratch must fail.
struct Case {
    name: &'static str,
    text: String,
    kind: &'static str,
}

fn cases() -> Vec<Case> {
    vec![
        Case {
            // One row of 2^25: the prologue `x * 2` is evaluated into 128 MiB of scratch rows.
            name: "row_reduce",
            text: "graph {
  %x: f32[1, 33554432] = input
  %y: f32[1, 33554432] = aten.mul.Scalar(%x, other=2)
  %s: f32[1] = aten.sum.dim_IntList(%y, dim=[1])
  return %s
}"
            .into(),
            kind: "reduction",
        },
        Case {
            // Two heads of 2^18 keys of 16 (values of 24), masked: a worker's packed keys and
            // values (16 and 24 MiB) and a block's scores and probabilities (16 to 32 MiB each).
            name: "attention",
            text: "graph {
  %q: f32[1, 2, 40, 16] = input
  %k: f32[1, 2, 262144, 16] = input
  %v: f32[1, 2, 262144, 24] = input
  %mask: f32[1, 1, 40, 262144] = input
  %qv: f32[2, 40, 16] = aten.view.default(%q, size=[2, 40, 16])
  %kt: f32[1, 2, 16, 262144] = aten.permute.default(%k, dims=[0, 1, 3, 2])
  %ktv: f32[2, 16, 262144] = aten.view.default(%kt, size=[2, 16, 262144])
  %s: f32[2, 40, 262144] = aten.bmm.default(%qv, %ktv)
  %s4: f32[1, 2, 40, 262144] = aten.view.default(%s, size=[1, 2, 40, 262144])
  %sc: f32[1, 2, 40, 262144] = aten.div.Scalar(%s4, other=4)
  %sm: f32[1, 2, 40, 262144] = aten.add.Tensor(%sc, %mask)
  %p: f32[1, 2, 40, 262144] = aten._softmax.default(%sm, dim=-1, half_to_float=false)
  %pv: f32[2, 40, 262144] = aten.view.default(%p, size=[2, 40, 262144])
  %vv: f32[2, 262144, 24] = aten.view.default(%v, size=[2, 262144, 24])
  %o: f32[2, 40, 24] = aten.bmm.default(%pv, %vv)
  return %o
}"
            .into(),
            kind: "attention",
        },
        Case {
            // Two products of 2^16 x 512: on one thread, a task packs half of a product's
            // rows of `A` for a block of `k` (64 MiB).
            name: "matmul",
            text: "graph {
  %a: f32[2, 65536, 512] = input
  %b: f32[2, 512, 16] = input
  %c: f32[2, 65536, 16] = aten.bmm.default(%a, %b)
  return %c
}"
            .into(),
            kind: "matmul",
        },
        Case {
            // 2^23 index pairs: their flat rows, 64 MiB of i64.
            name: "gather_nd",
            text: "graph {
  %x: f32[4, 4] = input
  %i: i64[8388608] = input
  %j: i64[8388608] = input
  %g: f32[8388608] = aten.index.Tensor(%x, [%i, %j])
  return %g
}"
            .into(),
            kind: "gather_nd",
        },
        Case {
            // The reference interpreter: `exp` of 2^22 values, 32 MiB of f64 results and as
            // much for the operand.
            name: "interpreter",
            text: "graph {
  %x: f32[4194304] = input
  %y: f32[4194304] = aten.exp.default(%x)
  return %y
}"
            .into(),
            kind: "",
        },
    ]
}

/// The address space this process uses now, in bytes.
fn address_space() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().next().unwrap().parse().unwrap();
    // SAFETY: sysconf has no preconditions.
    pages * unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize
}

/// Caps the address space at what is in use plus [`MARGIN_MIB`] (`lift`: removes the cap).
fn cap_address_space(lift: bool) {
    let cap = if lift {
        libc::RLIM_INFINITY
    } else {
        (address_space() + (MARGIN_MIB << 20)) as libc::rlim_t
    };
    let lim = libc::rlimit {
        rlim_cur: cap,
        rlim_max: libc::RLIM_INFINITY,
    };
    // SAFETY: a valid rlimit for this process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_AS, &lim) }, 0);
}

/// The child's work: runs case `name` under the cap, then without; prints `RESULT: ` and the
/// first run's error (or `ok`), `AGAIN: ` and the second's.
fn run_case(name: &str) {
    let case = cases().into_iter().find(|c| c.name == name).unwrap();
    let g = parse_graph(&case.text).unwrap();
    let model = Model {
        graph: g.clone(),
        weights: Default::default(),
    };
    let input_types: Vec<(String, DType, Vec<usize>)> = (g.user_inputs().into_iter())
        .map(|i| {
            let (n, t) = (&g.nodes[i], &g.nodes[i].results[0]);
            let shape = t.static_shape().unwrap().into_iter().map(|d| d as usize);
            (n.name.clone(), t.dtype, shape.collect())
        })
        .collect();
    let result = if case.kind.is_empty() {
        // The reference interpreter, on inputs made before the cap.
        let inputs = (input_types.iter())
            .map(|(name, dtype, shape)| {
                (
                    name.clone(),
                    fxhlo_runtime::Tensor::zeros(*dtype, shape.clone()),
                )
            })
            .collect();
        let opts = fxhlo_runtime::Options::default();
        cap_address_space(false);
        let r = fxhlo_runtime::eval(&model, &inputs, &opts).map(|_| ());
        cap_address_space(true);
        let again = fxhlo_runtime::eval(&model, &inputs, &opts).map(|_| ());
        (r, again)
    } else {
        let a = compile(&model, &CompileOptions::default()).unwrap();
        let kinds: Vec<&str> = (a.header.program.steps.iter())
            .map(|s| s.kernel.kind())
            .collect();
        println!("KINDS: {kinds:?}");
        assert!(kinds.contains(&case.kind), "{kinds:?}");
        let opts = ExecOptions {
            threads: Some(1),
            max_memory: None,
        };
        let exec = Executor::new(a, &opts).unwrap();
        let p = exec.artifact().header.program.clone();
        let ins: Vec<Vec<u8>> = (p.inputs.iter())
            .map(|&v| vec![0u8; p.values[v as usize].bytes()])
            .collect();
        let mut outs: Vec<Vec<u8>> = (p.outputs.iter())
            .map(|&v| vec![0u8; p.values[v as usize].bytes()])
            .collect();
        let ins: Vec<&[u8]> = ins.iter().map(|v| v.as_slice()).collect();
        let mut outs: Vec<&mut [u8]> = outs.iter_mut().map(|v| v.as_mut_slice()).collect();
        cap_address_space(false);
        let r = exec.run_raw(&ins, &mut outs);
        cap_address_space(true);
        (r, exec.run_raw(&ins, &mut outs))
    };
    match result.0 {
        Ok(()) => println!("RESULT: ok"),
        Err(e) => println!("RESULT: {e}"),
    }
    match result.1 {
        Ok(()) => println!("AGAIN: ok"),
        Err(e) => println!("AGAIN: {e}"),
    }
}

/// Where `FXHLO_ALLOC_FAILURE_CASE` is set (in a child): runs that case; else nothing.
#[test]
fn child() {
    if let Ok(name) = std::env::var(CHILD) {
        run_case(&name);
    }
}

/// Runs case `name` in a child, checks that its second run succeeded and returns the first's
/// `RESULT: ` line.
fn in_child(name: &str) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "child", "--nocapture", "--test-threads=1"])
        .env(CHILD, name)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{name}: the child failed ({}): {stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("\nAGAIN: ok"), "{name}: {stdout}");
    // (The line may follow the harness's `test child ... `.)
    let line = stdout
        .lines()
        .find_map(|l| l.find("RESULT: ").map(|at| &l[at..]));
    line.unwrap_or_else(|| panic!("{name}: no result: {stdout}"))
        .to_string()
}

/// Checks that case `name` failed with an out-of-memory error containing `want`.
fn check(name: &str, want: &str) {
    let line = in_child(name);
    assert!(
        line.starts_with("RESULT: out of memory: ") && line.contains(want),
        "{name}: {line}"
    );
}

#[test]
fn a_row_reduction_whose_scratch_rows_do_not_fit_is_an_error() {
    check("row_reduce", "scratch of 33554432 elements of 4 bytes");
}

#[test]
fn an_attention_whose_packing_buffers_do_not_fit_is_an_error() {
    check("attention", "scratch of ");
}

#[test]
fn a_product_whose_packed_rows_do_not_fit_is_an_error() {
    check("matmul", "scratch of ");
}

#[test]
fn a_gather_whose_flat_rows_do_not_fit_is_an_error() {
    check("gather_nd", "scratch of 8388608 elements of 8 bytes");
}

#[test]
fn an_interpreter_node_whose_results_do_not_fit_is_an_error() {
    check(
        "interpreter",
        "node 1 'y' (aten.exp.default): its results and a copy of its operands",
    );
}

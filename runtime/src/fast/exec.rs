//! The executor: runs a program's steps on a thread pool, with buffers from the memory plan.

use super::artifact::Artifact;
use super::expr::Expr;
use super::gemm::Tile;
#[cfg(test)]
use super::memory::grow_zeroed;
use super::memory::{
    try_collect, try_grow_zeroed, try_vec, ElemKind, KernelError, LineVec, Loc, MemoryPlan,
};
use super::program::{Epilogue, Kernel, Program, Step, TensorSpec};
use super::{Dst, Src};
use crate::interp::{self, Data, Tensor};
use crate::RuntimeError;
use fxhlo_ir::{DType, HostTensor, Model};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

/// An owned buffer (cache-line aligned; see [`LineVec`]).
#[derive(Clone, Debug)]
enum Buf {
    F32(LineVec<f32>),
    I64(LineVec<i64>),
    Bool(LineVec<bool>),
    /// Element types the fast kernels do not use, kept as interpreter tensors.
    T(Tensor),
}

impl Buf {
    fn src(&self) -> Option<Src<'_>> {
        match self {
            Buf::F32(v) => Some(Src::F32(v)),
            Buf::I64(v) => Some(Src::I64(v)),
            Buf::Bool(v) => Some(Src::Bool(v)),
            Buf::T(_) => None,
        }
    }

    fn empty(kind: ElemKind) -> Buf {
        match kind {
            ElemKind::F32 => Buf::F32(LineVec::new(64)),
            ElemKind::I64 => Buf::I64(LineVec::new(64)),
            ElemKind::Bool => Buf::Bool(LineVec::new(64)),
        }
    }

    /// A zeroed buffer for `spec`, reporting an allocation failure of the fast kinds.
    fn try_for_spec(spec: &TensorSpec) -> Result<Buf, String> {
        fn zeros<T: bytemuck::Zeroable + Copy>(n: usize) -> Result<LineVec<T>, String> {
            let mut v = LineVec::new(64);
            try_grow_zeroed(&mut v, n)?;
            Ok(v)
        }
        let n = spec.numel();
        Ok(match ElemKind::of(spec.dtype) {
            Some(ElemKind::F32) => Buf::F32(zeros(n)?),
            Some(ElemKind::I64) => Buf::I64(zeros(n)?),
            Some(ElemKind::Bool) => Buf::Bool(zeros(n)?),
            None => Buf::T(Tensor::zeros(spec.dtype, spec.shape.clone())),
        })
    }

    fn from_host(h: &HostTensor) -> Result<Buf, String> {
        Ok(match h.dtype {
            DType::F32 => Buf::F32(LineVec::from_iter(
                64,
                h.bytes
                    .chunks_exact(4)
                    .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])),
            )),
            DType::I64 => Buf::I64(LineVec::from_iter(
                64,
                h.bytes
                    .chunks_exact(8)
                    .map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8]))),
            )),
            DType::Bool => Buf::Bool(LineVec::from_iter(64, h.bytes.iter().map(|&b| b != 0))),
            d => match super::lowp::widen(d, &h.bytes) {
                Some(v) => Buf::F32(LineVec::from_slice(64, &v)),
                None => Buf::T(Tensor::from_host(h)?),
            },
        })
    }

    fn view(&self, spec: &TensorSpec) -> View<'_> {
        match self.src() {
            Some(s) => View::Src(s),
            None => match self {
                Buf::T(t) => View::T(t.clone()),
                _ => View::T(Tensor::zeros(spec.dtype, spec.shape.clone())),
            },
        }
    }
}

/// A value as read by a step.
enum View<'a> {
    Src(Src<'a>),
    T(Tensor),
}

/// Writes a value's bytes (of type `d`: bf16 and f16 narrowed from their widened `f32`s).
fn write_bytes(v: &View<'_>, d: DType, out: &mut [u8]) {
    match v {
        View::Src(Src::F32(s)) if super::lowp::narrow(d, s, out) => {}
        View::Src(Src::F32(s)) => {
            for (o, x) in out.chunks_exact_mut(4).zip(s.iter()) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        View::Src(Src::I64(s)) => {
            for (o, x) in out.chunks_exact_mut(8).zip(s.iter()) {
                o.copy_from_slice(&x.to_le_bytes());
            }
        }
        View::Src(Src::Bool(s)) => {
            for (o, x) in out.iter_mut().zip(s.iter()) {
                *o = *x as u8;
            }
        }
        View::T(t) => {
            let h = t.to_host();
            let n = out.len().min(h.bytes.len());
            out[..n].copy_from_slice(&h.bytes[..n]);
        }
    }
}

fn to_tensor(v: &View<'_>, spec: &TensorSpec) -> Result<Tensor, KernelError> {
    let shape = spec.shape.clone();
    Ok(match v {
        View::Src(Src::F32(s)) => Tensor::from_f64s(
            spec.dtype,
            shape,
            try_collect(s.len(), s.iter().map(|&x| x as f64))?,
        ),
        View::Src(Src::I64(s)) => {
            Tensor::from_i64s(spec.dtype, shape, try_collect(s.len(), s.iter().copied())?)
        }
        View::Src(Src::Bool(s)) => {
            Tensor::from_bools(spec.dtype, shape, try_collect(s.len(), s.iter().copied())?)
        }
        View::T(t) => {
            let data = match &t.data {
                Data::F(v) => Data::F(try_collect(v.len(), v.iter().copied())?),
                Data::I(v) => Data::I(try_collect(v.len(), v.iter().copied())?),
                Data::B(v) => Data::B(try_collect(v.len(), v.iter().copied())?),
            };
            Tensor {
                dtype: t.dtype,
                shape: t.shape.clone(),
                data,
            }
        }
    })
}

thread_local! {
    /// This thread's own pool and its size: the thread is the pool's first worker, so a run
    /// started here executes on it directly instead of handing the program to a sleeping
    /// worker and waiting to be woken (two context switches per run, tens of microseconds on
    /// a virtual machine: a third of a small model's time).
    static HOME_POOL: RefCell<Option<(usize, Arc<rayon::ThreadPool>)>> = const { RefCell::new(None) };
}

/// A pool of `threads` threads for an executor made on this thread: the thread's own pool
/// (made on first use, then shared by the executors of that size made here), or a pool of its
/// own where the thread's pool has another size or the thread already works for a pool. (A
/// run started on another thread finds the home pool's other workers; a pool of one thread
/// has none, and such runs go to [`Executor`]'s pool for them.)
fn pool_for(threads: usize) -> Result<Arc<rayon::ThreadPool>, rayon::ThreadPoolBuildError> {
    HOME_POOL.with(|home| {
        let mut home = home.borrow_mut();
        match &*home {
            Some((n, p)) if *n == threads => return Ok(p.clone()),
            None if rayon::current_thread_index().is_none() => {
                if let Ok(p) = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .use_current_thread()
                    .build()
                {
                    let p = Arc::new(p);
                    *home = Some((threads, p.clone()));
                    return Ok(p);
                }
            }
            _ => {}
        }
        rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .map(Arc::new)
    })
}

/// Times `reps` copies of `mib` MiB of `f32` by [`super::simd::copy_streaming`] on a pool of
/// `threads` threads (the kernels' pool), after one untimed copy that maps the pages; each
/// copy's milliseconds. The benchmark's copy-bandwidth peak beside torch's and numpy's copies,
/// which use plain stores (each destination line is read before it is written).
pub fn time_stream_copy(mib: usize, threads: usize, reps: usize) -> Result<Vec<f64>, String> {
    if !(1..=1 << 16).contains(&mib) || reps == 0 {
        return Err(format!(
            "copy of {mib} MiB, {reps} times: the size must be 1 to 65536 MiB, the repetitions \
             at least 1"
        ));
    }
    check_threads(threads)?;
    // Two buffers of `mib` MiB, checked against what the process may allocate.
    let need = (mib as u64) << 21;
    let limit = default_memory_limit();
    if need > limit {
        return Err(format!(
            "copy of {mib} MiB needs {need} bytes (source and destination), more than the \
             memory limit of {limit} bytes"
        ));
    }
    let pool = pool_for(threads).map_err(|e| e.to_string())?;
    let n = mib << 18;
    let src = vec![1.0f32; n];
    let mut dst = vec![0.0f32; n];
    Ok(pool.install(|| {
        super::simd::copy_streaming(&mut dst, &src);
        (0..reps)
            .map(|_| {
                let t = std::time::Instant::now();
                super::simd::copy_streaming(&mut dst, &src);
                t.elapsed().as_secs_f64() * 1e3
            })
            .collect()
    }))
}

/// Loads artifacts and runs them; one executor may run many times (not concurrently: runs
/// share its arena).
pub struct Executor {
    artifact: Artifact,
    plan: MemoryPlan,
    pool: Arc<rayon::ThreadPool>,
    /// For runs started on a thread that is not a worker of `pool` when `pool` has one thread
    /// (the thread that made it, which may never come back to run them): a pool of one
    /// thread of its own, made on the first such run.
    remote: std::sync::OnceLock<Arc<rayon::ThreadPool>>,
    threads: usize,
    consts: Vec<Option<Buf>>,
    fallbacks: Vec<Option<Model>>,
    /// Constant weights of matmul and convolution steps, packed when the executor was made.
    prepacked: Vec<Option<Prepacked>>,
    /// Arena buffers, and how many leading elements of each are initialized (a buffer keeps
    /// its memory between values and runs, so it is zero-filled only where it grows).
    arena: Mutex<(Vec<Buf>, Vec<usize>)>,
    /// Whether steps are timed.
    profiling: std::sync::atomic::AtomicBool,
    /// Per-step wall time in seconds, summed over the runs since profiling was turned on.
    step_secs: Mutex<Vec<f64>>,
}

/// A constant operand packed for the GEMM when the executor was made.
enum Prepacked {
    /// A matmul's right operand.
    MatmulB(super::sgemm::PackedB),
    /// A convolution's weights.
    ConvWeights(super::conv::ConvPacked),
}

/// Settings of an executor.
#[derive(Clone, Debug, Default)]
pub struct ExecOptions {
    /// Worker threads; `None`: `FXHLO_NUM_THREADS` if set, else every core.
    pub threads: Option<usize>,
    /// Refuse programs whose memory plan needs more bytes than this at peak (default: the
    /// process's allocation budget, [`fxhlo_ir::budget::limit`]).
    pub max_memory: Option<u64>,
}

/// The thread count from `FXHLO_NUM_THREADS` (at most [`max_threads`]), else the number of
/// cores.
pub fn default_threads() -> usize {
    std::env::var("FXHLO_NUM_THREADS")
        .ok()
        .and_then(|s| s.trim().parse::<usize>().ok())
        .filter(|&n| n > 0)
        .map(|n| n.min(max_threads()))
        .unwrap_or_else(cores)
}

fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// The most worker threads an executor starts: four per core, at least 64, at most 1024.
/// More only adds contention, and asking the OS for millions of threads takes tens of seconds
/// before it refuses (or aborts the process).
pub fn max_threads() -> usize {
    cores().saturating_mul(4).clamp(64, 1024)
}

/// Checks a thread count asked for: 1 to [`max_threads`].
pub fn check_threads(threads: usize) -> Result<usize, String> {
    let max = max_threads();
    if (1..=max).contains(&threads) {
        Ok(threads)
    } else {
        Err(format!(
            "{threads} worker threads asked for: the runtime starts 1 to {max} (four per core, \
             at least 64, at most 1024)"
        ))
    }
}

/// The default limit on a program's peak memory: the process's allocation budget
/// ([`fxhlo_ir::budget::limit`]: `--max-memory`, else the smallest of the address-space
/// limit, the cgroup limit and physical memory).
pub fn default_memory_limit() -> u64 {
    fxhlo_ir::budget::limit()
}

fn step_err(i: usize, s: &Step, msg: impl Into<String>) -> RuntimeError {
    RuntimeError::Step {
        step: i,
        name: s.name().to_string(),
        kernel: s.kernel.kind().to_string(),
        msg: msg.into(),
    }
}

impl Executor {
    /// Prepares `artifact` to run: converts constants, parses fallback graphs, plans memory.
    pub fn new(artifact: Artifact, opts: &ExecOptions) -> Result<Executor, RuntimeError> {
        artifact.validate()?;
        let p = &artifact.header.program;
        let plan = MemoryPlan::new(p);
        let limit = opts.max_memory.unwrap_or_else(default_memory_limit);
        if plan.peak_bytes() > limit {
            let largest = p
                .values
                .iter()
                .max_by_key(|v| v.bytes())
                .map(|v| format!("'{}' {} ({} bytes)", v.name, v.type_string(), v.bytes()))
                .unwrap_or_default();
            return Err(RuntimeError::Memory {
                largest,
                needed: plan.peak_bytes(),
                limit,
            });
        }
        let mut consts: Vec<Option<Buf>> = vec![None; p.values.len()];
        for (v, name) in &p.constants {
            // Artifact::validate established that the constant exists with the right type.
            let h = &artifact.constants[name];
            consts[*v as usize] = Some(
                Buf::from_host(h)
                    .map_err(|e| RuntimeError::Artifact(format!("constant '{name}': {e}")))?,
            );
        }
        let mut fallbacks = Vec::with_capacity(p.steps.len());
        for (i, s) in p.steps.iter().enumerate() {
            fallbacks.push(match &s.kernel {
                Kernel::Fallback { graph, .. } => {
                    let g = fxhlo_ir::text::parse_graph(graph).map_err(|e| {
                        RuntimeError::Artifact(format!("step {i}: fallback graph: {e}"))
                    })?;
                    g.verify().map_err(|e| {
                        RuntimeError::Artifact(format!("step {i}: fallback graph: {e}"))
                    })?;
                    check_fallback(&g, p, s)
                        .map_err(|e| RuntimeError::Artifact(format!("step {i}: {e}")))?;
                    Some(Model {
                        graph: g,
                        weights: Default::default(),
                    })
                }
                _ => {
                    validate_step(p, s)
                        .map_err(|e| RuntimeError::Artifact(format!("step {i}: {e}")))?;
                    None
                }
            });
        }
        // Constant right operands of matmuls, packed once for the micro-kernel.
        let prepacked = p
            .steps
            .iter()
            .map(
                |s| match (&s.kernel, s.srcs.get(1).map(|&v| &consts[v as usize])) {
                    (Kernel::Matmul { spec, .. }, Some(Some(Buf::F32(w)))) => {
                        super::gemm::prepack_b(spec, w).map(Prepacked::MatmulB)
                    }
                    (Kernel::Conv { spec, .. }, Some(Some(Buf::F32(w)))) => {
                        super::conv::prepack_weights(spec, w).map(Prepacked::ConvWeights)
                    }
                    _ => None,
                },
            )
            .collect();
        let threads = match opts.threads {
            Some(n) => check_threads(n).map_err(RuntimeError::Options)?,
            None => default_threads(),
        };
        let pool = pool_for(threads)
            .map_err(|e| RuntimeError::Graph(format!("cannot start {threads} threads: {e}")))?;
        let bufs = plan.buffers.iter().map(|(k, _)| Buf::empty(*k)).collect();
        let arena = (bufs, vec![0; plan.buffers.len()]);
        Ok(Executor {
            artifact,
            plan,
            pool,
            remote: Default::default(),
            threads,
            consts,
            fallbacks,
            prepacked,
            arena: Mutex::new(arena),
            profiling: Default::default(),
            step_secs: Mutex::new(vec![]),
        })
    }

    /// Turns per-step timing on (off by default: it adds a clock read per step).
    pub fn enable_profiling(&self) {
        if let Ok(mut v) = self.step_secs.lock() {
            *v = vec![0.0; self.program().steps.len()];
        }
        self.profiling
            .store(true, std::sync::atomic::Ordering::Relaxed);
    }

    /// Seconds spent in each step, summed over the runs since profiling was turned on (empty
    /// when it is off).
    pub fn step_seconds(&self) -> Vec<f64> {
        self.step_secs.lock().map(|v| v.clone()).unwrap_or_default()
    }

    /// The artifact.
    pub fn artifact(&self) -> &Artifact {
        &self.artifact
    }

    /// The memory plan.
    pub fn memory_plan(&self) -> &MemoryPlan {
        &self.plan
    }

    /// Worker threads.
    pub fn threads(&self) -> usize {
        self.threads
    }

    fn program(&self) -> &Program {
        &self.artifact.header.program
    }

    /// Runs on inputs keyed by name; returns the outputs in order.
    pub fn run(
        &self,
        inputs: &BTreeMap<String, HostTensor>,
    ) -> Result<Vec<HostTensor>, RuntimeError> {
        let p = self.program();
        let specs: Vec<&TensorSpec> = p.inputs.iter().map(|&v| &p.values[v as usize]).collect();
        for k in inputs.keys() {
            if !specs.iter().any(|s| &s.name == k) {
                return Err(RuntimeError::UnexpectedInput {
                    name: k.clone(),
                    expected: specs
                        .iter()
                        .map(|s| s.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", "),
                });
            }
        }
        let mut ins = Vec::with_capacity(specs.len());
        for s in &specs {
            let h = inputs
                .get(&s.name)
                .ok_or_else(|| RuntimeError::MissingInput(s.name.clone()))?;
            if h.dtype != s.dtype || h.shape != s.shape {
                return Err(RuntimeError::InputType {
                    name: s.name.clone(),
                    found: format!("{:?}", h.shape),
                    found_dtype: h.dtype.name().to_string(),
                    expected: s.type_string(),
                });
            }
            ins.push(h.bytes.as_slice());
        }
        let mut outs: Vec<Vec<u8>> = (p.outputs.iter())
            .map(|&v| try_vec(p.values[v as usize].bytes(), 0u8))
            .collect::<Result<_, _>>()
            .map_err(|e| match e {
                KernelError::OutOfMemory(m) | KernelError::Msg(m) => {
                    RuntimeError::OutOfMemory(format!("outputs: {m}"))
                }
            })?;
        {
            let mut refs: Vec<&mut [u8]> = outs.iter_mut().map(|o| o.as_mut_slice()).collect();
            self.run_raw(&ins, &mut refs)?;
        }
        Ok(p.outputs
            .iter()
            .zip(outs)
            .map(|(&v, bytes)| {
                let s = &p.values[v as usize];
                HostTensor {
                    dtype: s.dtype,
                    shape: s.shape.clone(),
                    bytes,
                }
            })
            .collect())
    }

    /// Runs on raw little-endian row-major bytes: `inputs` in the artifact's input order,
    /// `outputs` in its output order, each exactly the size of its spec. Inputs are read in
    /// place, and outputs written in place where their bytes are aligned for their element
    /// type (else through a buffer and one copy).
    pub fn run_raw(&self, inputs: &[&[u8]], outputs: &mut [&mut [u8]]) -> Result<(), RuntimeError> {
        let p = self.program();
        if inputs.len() != p.inputs.len() {
            return Err(RuntimeError::Graph(format!(
                "{} inputs passed, the program takes {}",
                inputs.len(),
                p.inputs.len()
            )));
        }
        if outputs.len() != p.outputs.len() {
            return Err(RuntimeError::Graph(format!(
                "{} output buffers passed, the program returns {}",
                outputs.len(),
                p.outputs.len()
            )));
        }
        for (k, (&v, b)) in p.inputs.iter().zip(inputs).enumerate() {
            let s = &p.values[v as usize];
            if b.len() != s.bytes() {
                return Err(RuntimeError::InputBytes {
                    name: s.name.clone(),
                    msg: format!(
                        "has {} bytes, expected {} for {} (input {k})",
                        b.len(),
                        s.bytes(),
                        s.type_string()
                    ),
                });
            }
            if s.dtype == DType::Bool && b.iter().any(|&x| x > 1) {
                return Err(RuntimeError::InputBytes {
                    name: s.name.clone(),
                    msg: "is bool but holds bytes other than 0 and 1".into(),
                });
            }
        }
        for (k, (&v, b)) in p.outputs.iter().zip(outputs.iter()).enumerate() {
            let s = &p.values[v as usize];
            if b.len() != s.bytes() {
                return Err(RuntimeError::Graph(format!(
                    "output {k} '{}' buffer has {} bytes, expected {} for {}",
                    s.name,
                    b.len(),
                    s.bytes(),
                    s.type_string()
                )));
            }
        }
        let mut arena = self
            .arena
            .lock()
            .map_err(|_| RuntimeError::Graph("a previous run panicked".into()))?;
        let (arena, high) = &mut *arena;
        let pool =
            if self.pool.current_num_threads() == 1 && self.pool.current_thread_index().is_none() {
                self.remote_pool()?
            } else {
                &self.pool
            };
        pool.install(|| self.run_steps(inputs, outputs, arena, high))
    }

    /// The pool of one thread for runs started off `pool`'s only worker (see `remote`).
    fn remote_pool(&self) -> Result<&Arc<rayon::ThreadPool>, RuntimeError> {
        if let Some(p) = self.remote.get() {
            return Ok(p);
        }
        let p = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .build()
            .map_err(|e| RuntimeError::Graph(format!("cannot start a thread: {e}")))?;
        Ok(self.remote.get_or_init(|| Arc::new(p)))
    }

    fn run_steps(
        &self,
        inputs: &[&[u8]],
        outputs: &mut [&mut [u8]],
        arena: &mut [Buf],
        high: &mut [usize],
    ) -> Result<(), RuntimeError> {
        let p = self.program();
        let n = p.values.len();
        // Inputs in place where aligned; others converted once.
        let mut input_views: Vec<Option<Src<'_>>> = Vec::with_capacity(inputs.len());
        let mut converted: Vec<Option<Buf>> = vec![None; inputs.len()];
        for (k, (&v, b)) in p.inputs.iter().zip(inputs).enumerate() {
            let s = &p.values[v as usize];
            let view = match s.dtype {
                DType::F32 => bytemuck::try_cast_slice::<u8, f32>(b).ok().map(Src::F32),
                DType::I64 => bytemuck::try_cast_slice::<u8, i64>(b).ok().map(Src::I64),
                _ => None,
            };
            if view.is_none() {
                let h = HostTensor {
                    dtype: s.dtype,
                    shape: s.shape.clone(),
                    bytes: b.to_vec(),
                };
                converted[k] =
                    Some(Buf::from_host(&h).map_err(|msg| RuntimeError::InputBytes {
                        name: s.name.clone(),
                        msg,
                    })?);
            }
            input_views.push(view);
        }
        // Outputs in place where aligned and of a kind the kernels write.
        let mut out_slots: Vec<Option<OutSlot<'_>>> = Vec::with_capacity(outputs.len());
        let mut out_written: Vec<Option<Src<'_>>> = vec![None; outputs.len()];
        let mut owned: Vec<Option<Buf>> = vec![None; n];
        for (b, &v) in outputs.iter_mut().zip(&p.outputs) {
            let s = &p.values[v as usize];
            let b: &mut [u8] = b;
            // Lengths were checked above; alignment decides whether to write in place.
            let aligned = |a: usize| (b.as_ptr() as usize).is_multiple_of(a);
            out_slots.push(Some(match s.dtype {
                DType::F32 if aligned(4) => OutSlot::F32(bytemuck::cast_slice_mut(b)),
                DType::I64 if aligned(8) => OutSlot::I64(bytemuck::cast_slice_mut(b)),
                _ => OutSlot::Bytes(b),
            }));
        }
        for (i, step) in p.steps.iter().enumerate() {
            // Take the destinations out.
            let mut dst_bufs: Vec<DstBuf<'_>> = Vec::with_capacity(step.dsts.len());
            for &v in &step.dsts {
                let spec = &p.values[v as usize];
                let d = match self.plan.loc[v as usize] {
                    Loc::Arena(b) => {
                        // Taken out with its initialized length (left 0 should the step fail).
                        let mut buf = std::mem::replace(&mut arena[b], Buf::Bool(LineVec::new(64)));
                        try_resize(&mut buf, spec.numel(), &mut high[b])
                            .map_err(RuntimeError::OutOfMemory)?;
                        DstBuf::Arena(b, buf, std::mem::take(&mut high[b]))
                    }
                    // Never written: the kernel computes it into the epilogue's result.
                    Loc::InEpilogue => DstBuf::Owned(Buf::F32(LineVec::new(64))),
                    Loc::Output(k) => match out_slots[k].take() {
                        Some(OutSlot::F32(f)) => DstBuf::OutF32(k, f),
                        Some(OutSlot::I64(f)) => DstBuf::OutI64(k, f),
                        Some(OutSlot::Bytes(b)) => DstBuf::OutBytes(
                            k,
                            b,
                            Buf::try_for_spec(spec).map_err(RuntimeError::OutOfMemory)?,
                        ),
                        None => return Err(step_err(i, step, "output written twice")),
                    },
                    _ => DstBuf::Owned(Buf::try_for_spec(spec).map_err(RuntimeError::OutOfMemory)?),
                };
                dst_bufs.push(d);
            }
            {
                let mut srcs: Vec<View<'_>> = Vec::with_capacity(step.srcs.len());
                for &v in &step.srcs {
                    let view = self
                        .resolve(v, &input_views, &converted, arena, &out_written, &owned)
                        .ok_or_else(|| step_err(i, step, "reads a value not computed yet"))?;
                    srcs.push(view);
                }
                let timed = self.profiling.load(std::sync::atomic::Ordering::Relaxed);
                let t0 = timed.then(std::time::Instant::now);
                self.run_step(i, step, &srcs, &mut dst_bufs)?;
                #[cfg(feature = "fault-injection")]
                fault_inject(p, step, &mut dst_bufs);
                if let Some(t0) = t0 {
                    if let Ok(mut v) = self.step_secs.lock() {
                        if let Some(t) = v.get_mut(i) {
                            *t += t0.elapsed().as_secs_f64();
                        }
                    }
                }
            }
            // Put the destinations back.
            for (&v, d) in step.dsts.iter().zip(dst_bufs) {
                match d {
                    DstBuf::Arena(b, buf, init) => {
                        arena[b] = buf;
                        high[b] = init;
                    }
                    DstBuf::Owned(buf) => match self.plan.loc[v as usize] {
                        Loc::InEpilogue => {}
                        _ => owned[v as usize] = Some(buf),
                    },
                    DstBuf::OutF32(k, f) => out_written[k] = Some(Src::F32(f)),
                    DstBuf::OutI64(k, f) => out_written[k] = Some(Src::I64(f)),
                    DstBuf::OutBytes(k, b, buf) => {
                        let spec = &p.values[v as usize];
                        write_bytes(&buf.view(spec), spec.dtype, b);
                        // Later readers find it in `owned`.
                        owned[v as usize] = Some(buf);
                        out_written[k] = None;
                    }
                }
            }
        }
        // Outputs that no step wrote in place: inputs, constants, repeated or owned values.
        for (k, &v) in p.outputs.iter().enumerate() {
            let spec = &p.values[v as usize];
            let Some(slot) = out_slots[k].take() else {
                continue;
            };
            let view = self
                .resolve(v, &input_views, &converted, arena, &out_written, &owned)
                .ok_or_else(|| {
                    RuntimeError::Graph(format!("output {k} '{}' was never computed", spec.name))
                })?;
            match slot {
                OutSlot::F32(f) => write_bytes(&view, spec.dtype, bytemuck::cast_slice_mut(f)),
                OutSlot::I64(f) => write_bytes(&view, spec.dtype, bytemuck::cast_slice_mut(f)),
                OutSlot::Bytes(b) => write_bytes(&view, spec.dtype, b),
            }
        }
        Ok(())
    }

    /// Where value `v` can be read now.
    #[allow(clippy::too_many_arguments)]
    fn resolve<'s>(
        &'s self,
        v: u32,
        input_views: &[Option<Src<'s>>],
        converted: &'s [Option<Buf>],
        arena: &'s [Buf],
        out_written: &[Option<Src<'s>>],
        owned: &'s [Option<Buf>],
    ) -> Option<View<'s>> {
        let spec = &self.program().values[v as usize];
        Some(match self.plan.loc[v as usize] {
            Loc::Input(k) => match (input_views[k], &converted[k]) {
                (Some(s), _) => View::Src(s),
                (None, Some(b)) => b.view(spec),
                (None, None) => return None,
            },
            Loc::Const => self.consts[v as usize].as_ref()?.view(spec),
            Loc::Arena(b) => arena[b].view(spec),
            Loc::Output(k) => match (out_written[k], &owned[v as usize]) {
                (Some(s), _) => View::Src(s),
                (None, Some(b)) => b.view(spec),
                (None, None) => return None,
            },
            Loc::Owned => owned[v as usize].as_ref()?.view(spec),
            Loc::InEpilogue => return None,
        })
    }

    fn run_step(
        &self,
        i: usize,
        step: &Step,
        srcs: &[View<'_>],
        dsts: &mut [DstBuf<'_>],
    ) -> Result<(), RuntimeError> {
        let p = self.program();
        let kernel_err = |e: KernelError| match e {
            KernelError::Msg(m) => step_err(i, step, m),
            KernelError::OutOfMemory(m) => RuntimeError::OutOfMemory(format!(
                "step {i} '{}': {m}",
                fxhlo_ir::quote_name(step.name())
            )),
        };
        match &step.kernel {
            Kernel::Fallback { .. } => {
                let Some(Some(model)) = self.fallbacks.get(i) else {
                    return Err(step_err(i, step, "fallback graph not prepared"));
                };
                let mut ins = BTreeMap::new();
                for (k, (v, &id)) in srcs.iter().zip(&step.srcs).enumerate() {
                    let t = to_tensor(v, &p.values[id as usize]).map_err(kernel_err)?;
                    ins.insert(format!("in{k}"), t);
                }
                let outs = interp::eval(model, &ins, &interp::Options::default())?;
                for (d, t) in dsts.iter_mut().zip(outs) {
                    d.store(t);
                }
                Ok(())
            }
            kernel => {
                let srcs: Vec<Src<'_>> = srcs
                    .iter()
                    .map(|v| match v {
                        View::Src(s) => Ok(*s),
                        View::T(_) => Err(step_err(i, step, "a source is not f32, i64 or bool")),
                    })
                    .collect::<Result<_, _>>()?;
                let mut ds: Vec<Dst<'_>> = dsts
                    .iter_mut()
                    .map(|d| {
                        d.dst()
                            .ok_or_else(|| step_err(i, step, "a result is not f32, i64 or bool"))
                    })
                    .collect::<Result<_, _>>()?;
                let packed = self.prepacked.get(i).and_then(Option::as_ref);
                let in_place = step
                    .dsts
                    .first()
                    .is_some_and(|&v| self.plan.loc[v as usize] == Loc::InEpilogue);
                run_kernel(kernel, &srcs, &mut ds, packed, in_place).map_err(kernel_err)?;
                // bf16 and f16 results, computed in f32: each stored value rounded once.
                for (k, (d, &v)) in ds.iter_mut().zip(&step.dsts).enumerate() {
                    let dtype = p.values[v as usize].dtype;
                    if let (true, Dst::F32(x)) = (super::lowp::is_lowp(dtype), d) {
                        let unwritten = k == 0 && in_place;
                        if !unwritten && !copies_exactly(p, step) {
                            super::lowp::round_slice(dtype, x);
                        }
                    }
                }
                Ok(())
            }
        }
    }

    /// A readable summary: steps by kind, fallbacks with their reasons, and the memory plan.
    pub fn stats(&self) -> String {
        let p = self.program();
        let mut by_kind: BTreeMap<&str, usize> = BTreeMap::new();
        let mut fallbacks = vec![];
        for s in &p.steps {
            *by_kind.entry(s.kernel.kind()).or_insert(0) += 1;
            if let Kernel::Fallback { reason, .. } = &s.kernel {
                fallbacks.push(format!(
                    "  fallback {} ({} nodes): {reason}",
                    s.name(),
                    s.nodes.len()
                ));
            }
        }
        let kinds: Vec<String> = by_kind.iter().map(|(k, n)| format!("{k} {n}")).collect();
        let m = &self.plan;
        let mut out = format!(
            "steps: {} ({})\nthreads: {}\nmemory: peak {} bytes (arena {} in {} buffers, outputs {}, constants {}, other {}); intermediates without reuse {} bytes\n",
            p.steps.len(),
            kinds.join(", "),
            self.threads,
            m.peak_bytes(),
            m.arena_bytes,
            m.buffers.len(),
            m.output_bytes,
            m.constant_bytes,
            m.owned_bytes,
            m.intermediate_bytes,
        );
        let folded = p
            .constants
            .iter()
            .filter(|(_, name)| name.starts_with(super::fold::FOLDED_PREFIX))
            .count();
        if folded > 0 {
            out.push_str(&format!(
                "constants computed at compile time (steps of constants only): {folded}\n"
            ));
        }
        if fallbacks.is_empty() {
            out.push_str("fallbacks to the reference interpreter: none\n");
        } else {
            out.push_str(&format!(
                "fallbacks to the reference interpreter: {}\n",
                fallbacks.len()
            ));
            for f in fallbacks {
                out.push_str(&f);
                out.push('\n');
            }
        }
        out
    }
}

fn f32_src<'a>(s: &[Src<'a>], k: usize) -> Result<&'a [f32], String> {
    match s.get(k) {
        Some(Src::F32(x)) => Ok(x),
        _ => Err(format!("source {k} is not an f32 buffer")),
    }
}

fn i64_src<'a>(s: &[Src<'a>], k: usize) -> Result<&'a [i64], String> {
    match s.get(k) {
        Some(Src::I64(x)) => Ok(x),
        _ => Err(format!("source {k} is not an i64 buffer")),
    }
}

/// Runs one fast kernel (sizes were validated when the executor was made). With `in_place`
/// (see [`Loc::InEpilogue`]), a matmul or convolution writes its product into its epilogue's
/// first result (its own `C` is left unwritten) and the epilogue runs there in place.
fn run_kernel(
    k: &Kernel,
    srcs: &[Src<'_>],
    dsts: &mut [Dst<'_>],
    packed: Option<&Prepacked>,
    in_place: bool,
) -> Result<(), KernelError> {
    match (k, dsts) {
        (Kernel::Elementwise(e), dsts) => {
            e.validate(srcs)?;
            // A bool result (a mask) is computed as 0/1 values into scratch, then stored.
            let n = e.numel();
            let mut scratch: Vec<Vec<f32>> = (dsts.iter())
                .filter(|d| matches!(d, Dst::Bool(_)))
                .map(|_| try_vec(n, 0f32))
                .collect::<Result<_, _>>()?;
            let mut scratch_it = scratch.iter_mut();
            let mut outs: Vec<&mut [f32]> = Vec::with_capacity(dsts.len());
            for d in dsts.iter_mut() {
                match d {
                    Dst::F32(o) if o.len() == n => outs.push(o),
                    Dst::Bool(o) if o.len() == n => {
                        outs.push(scratch_it.next().expect("one per bool result"))
                    }
                    _ => {
                        return Err(KernelError::Msg(
                            "elementwise results must be f32 or bool of the iteration size".into(),
                        ))
                    }
                }
            }
            super::expr::run_elementwise(e, srcs, &mut outs);
            let mut scratch_it = scratch.iter();
            for d in dsts.iter_mut() {
                if let Dst::Bool(o) = d {
                    let v = scratch_it.next().expect("one per bool result");
                    o.iter_mut().zip(v).for_each(|(b, &x)| *b = x != 0.0);
                }
            }
            Ok(())
        }
        (k, dsts) => run_other_kernel(k, srcs, dsts, packed, in_place),
    }
}

/// [`run_kernel`] of every kernel but the elementwise one.
fn run_other_kernel(
    k: &Kernel,
    srcs: &[Src<'_>],
    dsts: &mut [Dst<'_>],
    packed: Option<&Prepacked>,
    in_place: bool,
) -> Result<(), KernelError> {
    match (k, dsts) {
        (Kernel::Elementwise(_), _) => Err("an elementwise kernel runs through run_kernel".into()),
        (Kernel::RowReduce(r), dsts) => super::reduce::run_row_reduce(r, srcs, dsts),
        (
            Kernel::Conv {
                spec,
                bias,
                epilogue,
            },
            [Dst::F32(out), outs @ ..],
        ) => {
            let bias = if *bias { Some(f32_src(srcs, 2)?) } else { None };
            let (out, mut epi) =
                FusedEpilogue::new(epilogue.as_deref(), srcs, out, outs, in_place)?;
            let post = super::conv::Post {
                bias,
                relu: epi.take_relu(),
            };
            let packed = match packed {
                Some(Prepacked::ConvWeights(w)) => Some(w),
                _ => None,
            };
            // The only error left is the convolution's scratch memory.
            super::conv::conv2d_prepacked(
                spec,
                f32_src(srcs, 0)?,
                f32_src(srcs, 1)?,
                packed,
                post,
                out,
                &|t| epi.tile(t),
            )
            .map_err(KernelError::OutOfMemory)
        }
        (Kernel::Matmul { spec, epilogue }, [Dst::F32(c), outs @ ..]) => {
            let bias = if spec.bias.is_some() {
                Some(f32_src(srcs, 2)?)
            } else {
                None
            };
            let (c, mut epi) = FusedEpilogue::new(epilogue.as_deref(), srcs, c, outs, in_place)?;
            let packed = match packed {
                Some(Prepacked::MatmulB(b)) => Some(b),
                _ => None,
            };
            // A ReLU epilogue is applied by the GEMM as it stores each micro-tile.
            let relu = spec.k > 0 && epi.take_relu();
            super::gemm::matmul_prepacked(
                spec,
                f32_src(srcs, 0)?,
                f32_src(srcs, 1)?,
                packed,
                bias,
                c,
                relu,
                &|t| epi.tile(t),
            )?;
            Ok(())
        }
        (Kernel::Pool(spec), [Dst::F32(out)]) => {
            super::pool::pool2d(spec, f32_src(srcs, 0)?, out, None);
            Ok(())
        }
        (Kernel::Pool(spec), [Dst::F32(out), Dst::I64(idx)]) => {
            super::pool::pool2d(spec, f32_src(srcs, 0)?, out, Some(idx));
            Ok(())
        }
        (
            Kernel::Gather(_) | Kernel::GatherNd(_) | Kernel::GatherDim(_) | Kernel::Concat(_),
            [out],
        ) => match out {
            Dst::F32(o) => run_copy(k, srcs, o),
            Dst::I64(o) => run_copy(k, srcs, o),
            Dst::Bool(o) => run_copy(k, srcs, o),
        },
        (Kernel::ArgReduce(spec), [Dst::I64(idx)]) => {
            super::index::arg_reduce(spec, f32_src(srcs, 0)?, idx, None)
        }
        (Kernel::ArgReduce(spec), [Dst::F32(values), Dst::I64(idx)]) => {
            super::index::arg_reduce(spec, f32_src(srcs, 0)?, idx, Some(values))
        }
        (Kernel::Cumsum(spec), [Dst::F32(out)]) => {
            super::index::cumsum_f32(spec, f32_src(srcs, 0)?, out)
        }
        (Kernel::Cumsum(spec), [Dst::I64(out)]) => {
            super::index::cumsum_i64(spec, i64_src(srcs, 0)?, out)
        }
        (Kernel::Attention(spec), [Dst::F32(out)]) => {
            let mask = if spec.mask.is_some() {
                Some(f32_src(srcs, 3)?)
            } else {
                None
            };
            let (q, k, v) = (f32_src(srcs, 0)?, f32_src(srcs, 1)?, f32_src(srcs, 2)?);
            super::attention::attention(spec, q, k, v, mask, out)?;
            Ok(())
        }
        (k, _) => Err(format!("{} kernel with unexpected results", k.kind()).into()),
    }
}

/// An element type that the copying kernels (gathers, concatenation) move as it is.
trait Copied: Copy + Send + Sync + Sized {
    /// The source's elements, if it holds this type.
    fn of<'a>(s: &Src<'a>) -> Option<&'a [Self]>;
}

impl Copied for f32 {
    fn of<'a>(s: &Src<'a>) -> Option<&'a [f32]> {
        match *s {
            Src::F32(v) => Some(v),
            _ => None,
        }
    }
}

impl Copied for i64 {
    fn of<'a>(s: &Src<'a>) -> Option<&'a [i64]> {
        match *s {
            Src::I64(v) => Some(v),
            _ => None,
        }
    }
}

impl Copied for bool {
    fn of<'a>(s: &Src<'a>) -> Option<&'a [bool]> {
        match *s {
            Src::Bool(v) => Some(v),
            _ => None,
        }
    }
}

/// A copying kernel (a gather or a concatenation) into `out`: the sources it copies from have
/// the result's element type (a gather's second source is its `i64` indices).
fn run_copy<T: Copied>(k: &Kernel, srcs: &[Src<'_>], out: &mut [T]) -> Result<(), KernelError> {
    let src = |i: usize| {
        srcs.get(i)
            .and_then(T::of)
            .ok_or_else(|| format!("source {i} is not of the result's element type"))
    };
    match k {
        Kernel::Gather(spec) => Ok(super::gather::gather(
            spec,
            src(0)?,
            i64_src(srcs, 1)?,
            out,
        )?),
        Kernel::GatherDim(spec) => Ok(super::index::gather_dim(
            spec,
            src(0)?,
            i64_src(srcs, 1)?,
            out,
        )?),
        Kernel::GatherNd(spec) => {
            let idx = (1..srcs.len())
                .map(|i| i64_src(srcs, i))
                .collect::<Result<Vec<_>, _>>()?;
            super::gather::gather_nd(spec, src(0)?, &idx, out)
        }
        Kernel::Concat(spec) => {
            let inputs = (0..srcs.len()).map(src).collect::<Result<Vec<_>, _>>()?;
            Ok(super::concat::concat(spec, &inputs, out)?)
        }
        k => Err(format!("a {} kernel does not copy", k.kind()).into()),
    }
}

/// Whether `step` moves elements without computing them (a gather or concatenation) and
/// reads them from values of its result's type: its bf16 or f16 results need no rounding.
fn copies_exactly(p: &Program, step: &Step) -> bool {
    let dtype = |v: u32| p.values[v as usize].dtype;
    let Some(&out) = step.dsts.first() else {
        return true;
    };
    match &step.kernel {
        Kernel::Gather(_) | Kernel::GatherNd(_) | Kernel::GatherDim(_) => {
            step.srcs.first().is_some_and(|&v| dtype(v) == dtype(out))
        }
        Kernel::Concat(_) => step.srcs.iter().all(|&v| dtype(v) == dtype(out)),
        _ => false,
    }
}

/// Checks a fast step's operands against its kernel before anything runs, so that a corrupted
/// artifact is an error and never an out-of-bounds access.
fn validate_step(p: &Program, s: &Step) -> Result<(), String> {
    let spec = |v: Option<&u32>| v.map(|&v| &p.values[v as usize]);
    let len = |v: Option<&u32>| spec(v).map(|s| s.numel());
    // Types as stored: bf16 and f16 widened in f32 (`lowp`).
    let stored = |d: DType| {
        if super::lowp::is_lowp(d) {
            DType::F32
        } else {
            d
        }
    };
    let is = |v: Option<&u32>, d: DType| spec(v).is_some_and(|s| stored(s.dtype) == d);
    let all_f32 = |vs: &[u32]| vs.iter().all(|v| is(Some(v), DType::F32));
    let n_src = s.srcs.len();
    let n_dst = s.dsts.len();
    let want = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
    // A copying kernel's element type: its result's, f32, i64 or bool, which each source it
    // copies from must have.
    let copied = spec(s.dsts.first())
        .map(|t| stored(t.dtype))
        .filter(|d| matches!(d, DType::F32 | DType::I64 | DType::Bool));
    let copied_src =
        |v: Option<&u32>| copied.is_some() && spec(v).map(|t| stored(t.dtype)) == copied;
    // A gather's operand counts and types, then the lengths of its table, indices and result.
    let gather_operands = || {
        want(n_src == 2 && n_dst == 1, "gather operand count")?;
        want(
            copied_src(s.srcs.first()) && is(s.srcs.get(1), DType::I64),
            "gather takes a table of f32, i64 or bool, i64 indices and a result of the table's type",
        )?;
        Ok::<_, String>((
            len(s.srcs.first()).unwrap_or(0),
            len(s.srcs.get(1)).unwrap_or(0),
            len(s.dsts.first()).unwrap_or(0),
        ))
    };
    match &s.kernel {
        Kernel::Fallback { .. } => Ok(()),
        Kernel::Elementwise(e) => {
            e.validate_program()?;
            want(
                n_dst == e.num_outputs() && s.dsts.iter().all(|v| len(Some(v)) == Some(e.numel())),
                "elementwise results must match the expression's outputs",
            )?;
            want(
                s.dsts
                    .iter()
                    .all(|&v| is(Some(&v), DType::F32) || is(Some(&v), DType::Bool)),
                "elementwise results must be f32 or bool",
            )?;
            let kinds = e.slots();
            want(
                kinds.iter().all(|&(slot, _)| (slot as usize) < n_src),
                "elementwise expression reads a missing operand",
            )
        }
        Kernel::RowReduce(r) => r.check_structure(n_src),
        Kernel::Matmul { spec: m, epilogue } => {
            let n_op = 2 + m.bias.is_some() as usize;
            check_epilogue(p, s, n_op, epilogue.as_deref())?;
            want(
                all_f32(&s.srcs[..n_op.min(n_src)]) && all_f32(&s.dsts),
                "matmul operands must be f32",
            )?;
            m.validate(
                len(s.srcs.first()).unwrap_or(0),
                len(s.srcs.get(1)).unwrap_or(0),
                m.bias.and(len(s.srcs.get(2))),
                len(s.dsts.first()).unwrap_or(0),
            )
        }
        Kernel::Conv {
            spec: c,
            bias,
            epilogue,
        } => {
            let n_op = 2 + *bias as usize;
            check_epilogue(p, s, n_op, epilogue.as_deref())?;
            want(
                all_f32(&s.srcs[..n_op.min(n_src)]) && all_f32(&s.dsts),
                "conv operands must be f32",
            )?;
            c.validate(
                len(s.srcs.first()).unwrap_or(0),
                len(s.srcs.get(1)).unwrap_or(0),
                if *bias { len(s.srcs.get(2)) } else { None },
                len(s.dsts.first()).unwrap_or(0),
            )
        }
        Kernel::Pool(ps) => {
            want(
                n_src == 1 && (n_dst == 1 || n_dst == 2),
                "pool operand count",
            )?;
            want(
                all_f32(&s.srcs) && is(s.dsts.first(), DType::F32),
                "pool input must be f32",
            )?;
            if n_dst == 2 {
                want(is(s.dsts.get(1), DType::I64), "pool indices must be i64")?;
            }
            ps.validate(
                len(s.srcs.first()).unwrap_or(0),
                len(s.dsts.first()).unwrap_or(0),
                len(s.dsts.get(1)),
            )
        }
        Kernel::Gather(gs) => {
            let (t, i, o) = gather_operands()?;
            gs.validate(t, i, o)
        }
        Kernel::GatherNd(gs) => {
            want(
                n_dst == 1 && n_src == 1 + gs.dims.len(),
                "gather_nd operand count",
            )?;
            want(
                copied_src(s.srcs.first()) && s.srcs[1..].iter().all(|v| is(Some(v), DType::I64)),
                "gather_nd takes a table of f32, i64 or bool, i64 indices and a result of the \
                 table's type",
            )?;
            let lens: Vec<usize> = s.srcs[1..]
                .iter()
                .map(|v| len(Some(v)).unwrap_or(0))
                .collect();
            gs.validate(
                len(s.srcs.first()).unwrap_or(0),
                &lens,
                len(s.dsts.first()).unwrap_or(0),
            )
        }
        Kernel::Concat(c) => {
            want(n_dst == 1, "concatenation result count")?;
            want(
                copied.is_some() && s.srcs.iter().all(|v| copied_src(Some(v))),
                "concatenation inputs and result must share an element type (f32, i64 or bool)",
            )?;
            let lens: Vec<usize> = s.srcs.iter().map(|v| len(Some(v)).unwrap_or(0)).collect();
            c.validate(&lens, len(s.dsts.first()).unwrap_or(0))
        }
        Kernel::GatherDim(gs) => {
            let (t, i, o) = gather_operands()?;
            gs.validate(t, i, o)
        }
        Kernel::ArgReduce(a) => {
            want(
                n_src == 1 && (n_dst == 1 || n_dst == 2),
                "arg-reduction operand count",
            )?;
            let (values, idx) = match s.dsts[..] {
                [i] => (None, i),
                [v, i] => (Some(v), i),
                _ => unreachable!("one or two results, checked above"),
            };
            want(
                all_f32(&s.srcs)
                    && is(Some(&idx), DType::I64)
                    && values.is_none_or(|v| is(Some(&v), DType::F32)),
                "arg-reduction takes an f32 input and gives i64 indices (after f32 values)",
            )?;
            a.validate(
                len(s.srcs.first()).unwrap_or(0),
                len(Some(&idx)).unwrap_or(0),
                values.and_then(|v| len(Some(&v))),
            )
        }
        Kernel::Cumsum(c) => {
            want(n_src == 1 && n_dst == 1, "cumsum operand count")?;
            want(
                all_f32(&s.srcs) && all_f32(&s.dsts)
                    || is(s.srcs.first(), DType::I64) && is(s.dsts.first(), DType::I64),
                "cumsum's input and result must be both f32 or both i64",
            )?;
            c.validate(
                len(s.srcs.first()).unwrap_or(0),
                len(s.dsts.first()).unwrap_or(0),
            )
        }
        Kernel::Attention(a) => {
            let n_op = 3 + a.mask.is_some() as usize;
            want(n_src == n_op && n_dst == 1, "attention operand count")?;
            want(
                all_f32(&s.srcs) && all_f32(&s.dsts),
                "attention operands must be f32",
            )?;
            a.validate(
                len(s.srcs.first()).unwrap_or(0),
                len(s.srcs.get(1)).unwrap_or(0),
                len(s.srcs.get(2)).unwrap_or(0),
                len(s.srcs.get(3)),
                len(s.dsts.first()).unwrap_or(0),
            )
        }
    }
}

/// Checks the operand and result counts of a matmul or convolution step (`n_op` operands of
/// its own) and its fused epilogue, if any, against the step's values.
fn check_epilogue(
    p: &Program,
    s: &Step,
    n_op: usize,
    epilogue: Option<&Epilogue>,
) -> Result<(), String> {
    let (n_src, n_dst) = (s.srcs.len(), s.dsts.len());
    let Some(e) = epilogue.map(|e| &e.expr) else {
        return if n_src == n_op && n_dst == 1 {
            Ok(())
        } else {
            Err(format!(
                "{} step takes {n_op} operands and 1 result, it has {n_src} and {n_dst}",
                s.kernel.kind()
            ))
        };
    };
    e.validate_program()?;
    if n_src < n_op || n_dst != 1 + e.num_outputs() {
        return Err("epilogue operand or result count".into());
    }
    let numel = |v: u32| p.values[v as usize].numel();
    let product = numel(s.dsts[0]);
    if e.numel() != product || s.dsts.iter().any(|&v| numel(v) != product) {
        return Err("the epilogue does not iterate over the product".into());
    }
    if e.slots().iter().any(|&(slot, _)| slot as usize > n_src) {
        return Err("the epilogue reads a missing operand".into());
    }
    if !e.reads_slot_elementwise(n_src as u32) {
        return Err("the epilogue reads the product other than elementwise".into());
    }
    Ok(())
}

/// A fused epilogue during one run: evaluates the expression on each finished tile of the
/// product and writes the tile's part of every epilogue output (in place over the tile for the
/// first output, when the product lives there).
struct FusedEpilogue<'a> {
    expr: Option<&'a Expr>,
    srcs: &'a [Src<'a>],
    /// The outputs written through pointers: all of them, or all but the first when in place.
    outs: Vec<super::SendPtr>,
    /// Whether the product's tiles lie in the first output, which the epilogue overwrites.
    in_place: bool,
}

impl<'a> FusedEpilogue<'a> {
    /// The epilogue of a product `c` with results `outs`, and where the kernel must write the
    /// product: `c`, or with `in_place` the first result.
    fn new<'c>(
        epilogue: Option<&'a Epilogue>,
        srcs: &'a [Src<'a>],
        c: &'c mut [f32],
        outs: &'c mut [Dst<'_>],
        in_place: bool,
    ) -> Result<(&'c mut [f32], FusedEpilogue<'a>), String> {
        let Some(e) = epilogue.map(|e| &e.expr) else {
            if in_place {
                return Err("an in-place product without an epilogue".into());
            }
            let none = FusedEpilogue {
                expr: None,
                srcs,
                outs: vec![],
                in_place,
            };
            return Ok((c, none));
        };
        let (target, rest) = if in_place {
            match outs {
                [Dst::F32(first), rest @ ..] => (&mut **first, rest),
                _ => return Err("the epilogue's first result is not f32".into()),
            }
        } else {
            (c, outs)
        };
        let product = target.len();
        // The step's own operands are checked here; the product slot is the tile itself.
        e.validate_operands(srcs, srcs.len())?;
        if e.numel() != product || !e.reads_slot_elementwise(srcs.len() as u32) {
            return Err("the epilogue does not fit the product".into());
        }
        let mut ptrs = Vec::with_capacity(rest.len());
        for d in rest.iter_mut() {
            match d {
                Dst::F32(o) if o.len() == product => ptrs.push(super::SendPtr(o.as_mut_ptr())),
                _ => return Err("epilogue results must be f32 of the product's size".into()),
            }
        }
        if ptrs.len() + usize::from(in_place) != e.num_outputs() {
            return Err("epilogue result count".into());
        }
        // A copy of the product into the buffer the product is written to anyway: nothing
        // to do.
        let copy = in_place && ptrs.is_empty() && e.is_copy_of(srcs.len() as u32);
        let epi = FusedEpilogue {
            expr: (!copy).then_some(e),
            srcs,
            outs: ptrs,
            in_place,
        };
        Ok((target, epi))
    }

    /// When the epilogue is a ReLU of the product alone, written in place: drops it and
    /// returns `true` (the kernel applies it as it stores the product).
    fn take_relu(&mut self) -> bool {
        let ns = self.srcs.len() as u32;
        let relu =
            self.in_place && self.outs.is_empty() && self.expr.is_some_and(|e| e.is_relu_of(ns));
        if relu {
            self.expr = None;
        }
        relu
    }

    fn tile(&self, t: &mut Tile) {
        let Some(e) = self.expr else { return };
        let ns = self.srcs.len();
        // The tile's runs of the matrix, `w` elements each: one when it spans whole rows (one
        // pass of the expression, where a late convolution's 128 rows of 4 positions each cost
        // a pass of its instructions), else one per row. Each is (first flat index, elements).
        let (runs, w): (Vec<(usize, *mut f32)>, usize) = match t.as_run() {
            Some((start, run)) => (vec![(start, run.as_mut_ptr())], run.len()),
            None => {
                let (n, c0) = (t.n, t.cols.start);
                let rows = t.rows.clone();
                let runs = rows.map(|r| (r * n + c0, t.row(r).as_mut_ptr())).collect();
                (runs, t.cols.len())
            }
        };
        // In place, the tile's product is copied out before the epilogue overwrites it.
        let saved = if self.in_place {
            let mut v = Vec::with_capacity(runs.len() * w);
            for &(_, p) in &runs {
                // SAFETY: a run of this tile, which is this call's alone.
                v.extend_from_slice(unsafe { std::slice::from_raw_parts(p, w) });
            }
            v
        } else {
            vec![]
        };
        let mut product: Vec<(usize, &[f32])> = Vec::with_capacity(runs.len());
        let mut os: Vec<&mut [f32]> = Vec::with_capacity(runs.len() * e.num_outputs());
        for (i, &(start, p)) in runs.iter().enumerate() {
            if self.in_place {
                // SAFETY: the run is this call's alone (the kernels hand out every tile once)
                // and is written only through this slice; the product was saved above.
                os.push(unsafe { std::slice::from_raw_parts_mut(p, w) });
                product.push((start, &saved[i * w..(i + 1) * w]));
            } else {
                // SAFETY: the tile is only read while the epilogue runs, and outlives it.
                product.push((start, unsafe { std::slice::from_raw_parts(p, w) }));
            }
            // SAFETY: the tile's elements of each output belong to this call alone (the
            // kernels hand out every tile once), and `new` checked each output has `product`
            // elements.
            os.extend(
                self.outs
                    .iter()
                    .map(|o| unsafe { std::slice::from_raw_parts_mut(o.get().add(start), w) }),
            );
        }
        let mut ext: Vec<Src<'_>> = Vec::with_capacity(ns + 1);
        ext.extend_from_slice(self.srcs);
        ext.push(Src::F32(&[]));
        e.eval_rows(&mut e.plan(), &mut ext, ns as u32, &product, w, &mut os);
    }
}

/// Checks a fallback graph's inputs and outputs against the step's values.
fn check_fallback(g: &fxhlo_ir::Graph, p: &Program, s: &Step) -> Result<(), String> {
    let ins = g.user_inputs();
    if ins.len() != s.srcs.len() || !g.weight_inputs().is_empty() {
        return Err(format!(
            "fallback graph takes {} inputs, the step passes {}",
            ins.len(),
            s.srcs.len()
        ));
    }
    for (k, (&n, &v)) in ins.iter().zip(&s.srcs).enumerate() {
        let spec = &p.values[v as usize];
        let t = &g.nodes[n].results[0];
        if g.nodes[n].name != format!("in{k}") || !same_type(t, spec) {
            return Err(format!(
                "fallback input {k} does not match value '{}' ({})",
                spec.name,
                spec.type_string()
            ));
        }
    }
    if g.outputs.len() != s.dsts.len() {
        return Err(format!(
            "fallback graph returns {} values, the step writes {}",
            g.outputs.len(),
            s.dsts.len()
        ));
    }
    for (o, &v) in g.outputs.iter().zip(&s.dsts) {
        let spec = &p.values[v as usize];
        if !same_type(g.ty(*o), spec) {
            return Err(format!(
                "fallback output does not match value '{}' ({})",
                spec.name,
                spec.type_string()
            ));
        }
    }
    Ok(())
}

fn same_type(t: &fxhlo_ir::TensorType, s: &TensorSpec) -> bool {
    t.dtype == s.dtype
        && t.shape.len() == s.shape.len()
        && t.shape
            .iter()
            .zip(&s.shape)
            .all(|(d, &e)| d.as_static() == Some(e as i64))
}

/// Gives an arena buffer `n` elements. Its first `*init` elements hold values written before
/// (a shorter length left them in place): within them only the length changes, beyond them the
/// buffer is zero-filled and `*init` grows. Every kernel writes all of its result, so the old
/// values are never read. (Runs use [`try_resize`]; this is its infallible form for tests.)
#[cfg(test)]
fn resize(b: &mut Buf, n: usize, init: &mut usize) {
    fn set<T: bytemuck::Zeroable + Copy>(v: &mut LineVec<T>, n: usize, init: &mut usize) {
        if n <= *init && n <= v.capacity() {
            // SAFETY: the first `*init` elements were initialized by an earlier `resize`
            // (`set_len` to a shorter length leaves `Copy` elements in place), and `n` is
            // within them and within the allocation.
            unsafe { v.set_len(n) };
        } else {
            v.truncate(n);
            grow_zeroed(v, n);
            *init = n;
        }
    }
    match b {
        Buf::F32(v) => set(v, n, init),
        Buf::I64(v) => set(v, n, init),
        Buf::Bool(v) => set(v, n, init),
        Buf::T(_) => {}
    }
}

/// [`resize`] reporting an allocation failure (the arena's buffers are a run's largest
/// allocations) instead of aborting.
fn try_resize(b: &mut Buf, n: usize, init: &mut usize) -> Result<(), String> {
    fn set<T: bytemuck::Zeroable + Copy>(
        v: &mut LineVec<T>,
        n: usize,
        init: &mut usize,
    ) -> Result<(), String> {
        if n <= *init && n <= v.capacity() {
            // SAFETY: as in `resize`: the first `*init` elements were initialized before.
            unsafe { v.set_len(n) };
        } else {
            v.truncate(n);
            try_grow_zeroed(v, n)?;
            *init = n;
        }
        Ok(())
    }
    match b {
        Buf::F32(v) => set(v, n, init),
        Buf::I64(v) => set(v, n, init),
        Buf::Bool(v) => set(v, n, init),
        Buf::T(_) => Ok(()),
    }
}

enum OutSlot<'a> {
    F32(&'a mut [f32]),
    I64(&'a mut [i64]),
    Bytes(&'a mut [u8]),
}

/// A destination during a step.
/// Test builds only (cargo feature `fault-injection`): with `FXHLO_FAULT_NODE=NAME`, the step
/// that writes the `f32` value NAME adds `1e-2 * (1 + |x|)` to its first element, a kernel
/// made wrong on purpose for `fxhlo compare`'s tests.
#[cfg(feature = "fault-injection")]
fn fault_inject(p: &Program, step: &Step, dsts: &mut [DstBuf<'_>]) {
    let Ok(name) = std::env::var("FXHLO_FAULT_NODE") else {
        return;
    };
    for (&v, d) in step.dsts.iter().zip(dsts.iter_mut()) {
        if p.values[v as usize].name != name {
            continue;
        }
        if let Some(Dst::F32(v)) = d.dst() {
            if let Some(x) = v.first_mut() {
                *x += 1e-2 * (1.0 + x.abs());
            }
        }
    }
}

enum DstBuf<'a> {
    /// Arena buffer `b` and its initialized length.
    Arena(usize, Buf, usize),
    Owned(Buf),
    OutF32(usize, &'a mut [f32]),
    OutI64(usize, &'a mut [i64]),
    OutBytes(usize, &'a mut [u8], Buf),
}

impl DstBuf<'_> {
    /// The destination as a kernel result buffer, if it is of a fast kind.
    fn dst(&mut self) -> Option<Dst<'_>> {
        match self {
            DstBuf::Arena(_, b, _) | DstBuf::Owned(b) | DstBuf::OutBytes(_, _, b) => match b {
                Buf::F32(v) => Some(Dst::F32(v)),
                Buf::I64(v) => Some(Dst::I64(v)),
                Buf::Bool(v) => Some(Dst::Bool(v)),
                Buf::T(_) => None,
            },
            DstBuf::OutF32(_, f) => Some(Dst::F32(f)),
            DstBuf::OutI64(_, f) => Some(Dst::I64(f)),
        }
    }

    /// Stores an interpreter result.
    fn store(&mut self, t: Tensor) {
        let write_f32 = |d: &mut [f32], t: &Tensor| {
            if let Data::F(v) = &t.data {
                for (o, x) in d.iter_mut().zip(v) {
                    *o = *x as f32;
                }
            }
        };
        let write_i64 = |d: &mut [i64], t: &Tensor| {
            if let Data::I(v) = &t.data {
                d.copy_from_slice(&v[..d.len().min(v.len())]);
            }
        };
        match self {
            DstBuf::Arena(_, b, _) | DstBuf::Owned(b) | DstBuf::OutBytes(_, _, b) => match b {
                Buf::F32(v) => write_f32(v, &t),
                Buf::I64(v) => write_i64(v, &t),
                Buf::Bool(v) => {
                    if let Data::B(x) = &t.data {
                        let n = v.len().min(x.len());
                        v[..n].copy_from_slice(&x[..n]);
                    }
                }
                Buf::T(x) => *x = t,
            },
            DstBuf::OutF32(_, f) => write_f32(f, &t),
            DstBuf::OutI64(_, f) => write_i64(f, &t),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arena_buffers_zero_fill_only_where_they_grow() {
        let mut init = 0;
        let mut b = Buf::F32(LineVec::new(64));
        resize(&mut b, 6, &mut init);
        assert_eq!(init, 6);
        let Buf::F32(v) = &mut b else { unreachable!() };
        assert_eq!(v.as_slice(), &[0.0; 6]);
        v.iter_mut()
            .enumerate()
            .for_each(|(i, x)| *x = i as f32 + 1.0);
        // Shorter, then longer again within what was written: the old values, no fill.
        resize(&mut b, 2, &mut init);
        resize(&mut b, 5, &mut init);
        assert_eq!(init, 6);
        let Buf::F32(v) = &b else { unreachable!() };
        assert_eq!(v.as_slice(), &[1.0, 2.0, 3.0, 4.0, 5.0]);
        // Past it: zeros from the current length on, and the initialized length grows.
        resize(&mut b, 8, &mut init);
        assert_eq!(init, 8);
        let Buf::F32(v) = &b else { unreachable!() };
        assert_eq!(v.as_slice(), &[1.0, 2.0, 3.0, 4.0, 5.0, 0.0, 0.0, 0.0]);
        // Every size of buffer starts a cache line.
        for n in [100, 100_000, 3_000_000] {
            resize(&mut b, n, &mut init);
            let Buf::F32(v) = &b else { unreachable!() };
            assert_eq!((v.len(), v.as_ptr() as usize % 64), (n, 0));
        }
        // A buffer lost to a failed step comes back empty with 0 initialized: filled anew.
        let mut init = 0;
        let mut b = Buf::Bool(LineVec::new(64));
        resize(&mut b, 3, &mut init);
        assert!(matches!(&b, Buf::Bool(v) if v.as_slice() == [false; 3]));
    }
}

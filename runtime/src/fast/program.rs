//! A compiled program: value slots and the steps (kernels) that compute them.
//!
//! Every step is one kernel of the fusion plan, described the Pallas way by a [`Launch`]: a grid
//! of program instances and, per operand, a [`BlockSpec`] (the block each instance works on and
//! the map from grid index to block index). The executor runs grid points in parallel.

use fxhlo_ir::DType;
use serde::{Deserialize, Serialize};

/// Index of a value in [`Program::values`].
pub type ValueId = u32;

/// Name, dtype and static shape of a tensor.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct TensorSpec {
    /// Name (the graph's value name).
    pub name: String,
    /// Element type.
    #[serde(with = "dtype_name")]
    pub dtype: DType,
    /// Static shape.
    pub shape: Vec<usize>,
}

impl TensorSpec {
    /// Number of elements (saturating: specs are validated before use).
    pub fn numel(&self) -> usize {
        self.shape
            .iter()
            .try_fold(1usize, |a, &d| a.checked_mul(d))
            .unwrap_or(usize::MAX)
    }

    /// Size in bytes (saturating).
    pub fn bytes(&self) -> usize {
        self.numel().saturating_mul(self.dtype.size_bytes())
    }

    /// `[2, 3] f32`.
    pub fn type_string(&self) -> String {
        format!(
            "[{}] {}",
            self.shape
                .iter()
                .map(|d| d.to_string())
                .collect::<Vec<_>>()
                .join(", "),
            self.dtype.name()
        )
    }
}

/// The shape of the work of one kernel launch.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Launch {
    /// Number of program instances along each grid axis.
    pub grid: Vec<usize>,
    /// One block spec per operand (sources first, then destinations).
    pub blocks: Vec<BlockSpec>,
}

/// The block of one operand that each program instance works on.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct BlockSpec {
    /// Block shape (a full dimension where the block spans it).
    pub block_shape: Vec<usize>,
    /// For each block dimension, the grid axis whose index selects the block along it, or
    /// `None` where every instance takes block 0 (the whole dimension).
    pub index_map: Vec<Option<usize>>,
}

impl BlockSpec {
    /// The spec of an operand read whole by every instance.
    pub fn whole(shape: &[usize]) -> BlockSpec {
        BlockSpec {
            block_shape: shape.to_vec(),
            index_map: vec![None; shape.len()],
        }
    }
}

/// One step of a program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Step {
    /// The graph nodes this step computes (names), for messages and `--stats`.
    pub nodes: Vec<String>,
    /// Values read, in the kernel's operand-slot order.
    pub srcs: Vec<ValueId>,
    /// Values written, in the kernel's result order.
    pub dsts: Vec<ValueId>,
    /// Grid and block specs.
    pub launch: Launch,
    /// What runs.
    pub kernel: Kernel,
    /// Where the step comes from in the fusion plan and why it has its shape (read by the text
    /// form, never by the executor).
    #[serde(default, skip_serializing_if = "Origin::is_empty")]
    pub origin: Origin,
}

/// The fusion kernels a step computes and the decisions of the program builder
/// (`fxhlo_lowering::kernels::build_program`) that merged or split them into steps, each with
/// its reason, recorded where the decision is made (as XLA's `FusionDecision`).
#[derive(Clone, Debug, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Origin {
    /// Indices of the fusion plan's kernels (the numbering of `--print-fusion`) the step
    /// computes all or part of.
    pub kernels: Vec<u32>,
    /// The merge/split decisions that shaped the step, in the order they were made.
    pub decisions: Vec<String>,
}

impl Origin {
    /// True if nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.kernels.is_empty() && self.decisions.is_empty()
    }
}

impl Step {
    /// The step's name: its first node.
    pub fn name(&self) -> &str {
        self.nodes.first().map(String::as_str).unwrap_or("?")
    }
}

/// The kernels of the fast runtime.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum Kernel {
    /// No fast kernel covers these nodes yet: the reference interpreter runs them. `graph` is the
    /// IR text of a graph whose user inputs are the step's sources (in order) and whose outputs
    /// are its destinations.
    Fallback {
        /// IR text of the sub-graph.
        graph: String,
        /// Why no fast kernel was used.
        reason: String,
    },
    /// A fused elementwise expression: sources are its operand slots, destinations its outputs.
    Elementwise(super::expr::Expr),
    /// A row reduction (softmax, layer norm, sum/mean/max/var, ...) with its prologue and
    /// epilogue: sources are its operand slots, destinations the fusion kernel's outputs.
    RowReduce(Box<super::reduce::RowReduce>),
    /// `mm`/`bmm`/`addmm`: sources `a`, `b` and, with a bias, `bias` (then the epilogue's
    /// operands); destinations `C` (then the epilogue's outputs).
    Matmul {
        /// The product.
        spec: super::gemm::MatmulSpec,
        /// An elementwise epilogue run on each tile of `C` while it is hot: see [`Epilogue`].
        #[serde(default)]
        epilogue: Option<Box<Epilogue>>,
    },
    /// 2-D convolution: sources `x`, `w` and, when `bias`, the bias (then the epilogue's
    /// operands); destinations the output (then the epilogue's outputs).
    Conv {
        /// Geometry.
        spec: super::conv::ConvSpec,
        /// Whether a third source is the bias.
        bias: bool,
        /// An elementwise epilogue run on each tile of the output while it is hot.
        #[serde(default)]
        epilogue: Option<Box<Epilogue>>,
    },
    /// Pooling: source `x`; destinations the output and, for max pooling with indices, the
    /// indices.
    Pool(super::pool::PoolSpec),
    /// Row gather (`embedding`, `index_select`): sources the table and the indices.
    Gather(super::gather::GatherSpec),
    /// Advanced indexing with several adjacent index tensors (`x[:, i, j]`): sources the
    /// table, then one `i64` index tensor per indexed dimension.
    GatherNd(super::gather::GatherNdSpec),
    /// Concatenation (`cat`): sources the inputs, all of the destination's element type.
    Concat(super::concat::ConcatSpec),
    /// `argmax`/`argmin` (destination the `i64` indices) or `max.dim`/`min.dim` (destinations
    /// the `f32` values, then the indices): source the `f32` input.
    ArgReduce(super::index::ArgSpec),
    /// `cumsum`: source and destination both `f32` or both `i64`.
    Cumsum(super::index::ScanSpec),
    /// `gather` along a dimension: sources the input and the `i64` index; destination of the
    /// input's element type (`f32`, `i64` or `bool`).
    GatherDim(super::index::GatherDimSpec),
    /// Fused scaled dot-product attention: sources the queries, keys, values and, with a
    /// mask, the mask; destination the (possibly permuted) result.
    Attention(Box<super::attention::AttentionSpec>),
}

impl Kernel {
    /// Short kind name, for messages and statistics.
    pub fn kind(&self) -> &'static str {
        match self {
            Kernel::Fallback { .. } => "fallback",
            Kernel::Elementwise(_) => "elementwise",
            Kernel::RowReduce(_) => "reduction",
            Kernel::Matmul { .. } => "matmul",
            Kernel::Conv { .. } => "conv",
            Kernel::Pool(_) => "pool",
            Kernel::Gather(_) => "gather",
            Kernel::GatherNd(_) => "gather_nd",
            Kernel::Concat(_) => "concat",
            Kernel::ArgReduce(_) => "argreduce",
            Kernel::Cumsum(_) => "cumsum",
            Kernel::GatherDim(_) => "gather_dim",
            Kernel::Attention(_) => "attention",
        }
    }
}

/// An elementwise expression fused after a matmul or convolution (bias, activation, residual
/// add, ...). It iterates over the product's own flat index space and reads the step's sources
/// as operand slots `0..n`, the product as slot `n` (only at the element being computed, so
/// that it can run tile by tile), and writes the step's destinations after the product.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Epilogue {
    /// The expression.
    pub expr: super::expr::Expr,
}

/// A compiled program.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize, Default)]
pub struct Program {
    /// Every value the program stores: user inputs, constants, step results.
    pub values: Vec<TensorSpec>,
    /// The user inputs, in call order.
    pub inputs: Vec<ValueId>,
    /// Constants: each value and the name of its tensor in the artifact's constants.
    pub constants: Vec<(ValueId, String)>,
    /// The returned values, in order.
    pub outputs: Vec<ValueId>,
    /// Steps in execution order.
    pub steps: Vec<Step>,
    /// The fusion kernels (by [`Origin::kernels`] number) of the steps that read only
    /// constants and ran when the artifact was made (`fast::fold`), sorted.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub folded: Vec<u32>,
}

mod dtype_name {
    use fxhlo_ir::DType;
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &DType, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(d.name())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<DType, D::Error> {
        let s = String::deserialize(d)?;
        DType::parse(&s).ok_or_else(|| serde::de::Error::custom(format!("unknown dtype '{s}'")))
    }
}

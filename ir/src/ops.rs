//! The op table: every operation fxhlo knows, declared once.
//!
//! Each row gives the op's variant, its ATen overload name, its schema parameters (ATen names,
//! kinds and defaults), its result count and its type-inference rule (a function in
//! [`crate::infer`]). Readers bind arguments by these names, the printer and parser use them, the
//! verifier checks them, and every backend matches exhaustively over [`Op`].

use crate::arg::{Default as D, Param, ParamKind};
use crate::infer::{self, InferFn};
use crate::DType;

/// How many results an op produces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Results {
    /// A fixed number of results.
    Fixed(usize),
    /// A list whose length depends on the arguments (`split_with_sizes`).
    List,
}

/// Everything the table declares about one op.
#[derive(Clone, Copy)]
pub struct OpInfo {
    /// The op.
    pub op: Op,
    /// ATen overload name, `aten.<name>.<overload>`.
    pub aten: &'static str,
    /// Schema parameters, in schema order.
    pub params: &'static [Param],
    /// Result count.
    pub results: Results,
    /// Type-inference rule.
    pub infer: InferFn,
    /// Name of the type-inference rule (for docs).
    pub rule: &'static str,
}

macro_rules! results {
    (List) => {
        Results::List
    };
    ($n:literal) => {
        Results::Fixed($n)
    };
}

macro_rules! ops {
    ($( $variant:ident = $aten:literal [ $( $pname:literal $pkind:ident $(= $def:expr)? ),* ] -> $res:tt, $rule:ident; )*) => {
        /// An operation of the op table. Its discriminant indexes [`OPS`].
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[allow(missing_docs)]
        pub enum Op { $($variant),* }

        /// The op table, in [`Op`] order.
        pub static OPS: &[OpInfo] = &[ $(
            OpInfo {
                op: Op::$variant,
                aten: $aten,
                params: &[ $( Param { name: $pname, kind: ParamKind::$pkind, default: ops!(@default $($def)?) } ),* ],
                results: results!($res),
                infer: infer::$rule,
                rule: stringify!($rule),
            }
        ),* ];
    };
    (@default) => { D::Required };
    (@default $def:expr) => { $def };
}

ops! {
    AdaptiveAvgPool2d = "aten._adaptive_avg_pool2d.default" ["self" Tensor, "output_size" Ints] -> 1, adaptive_avg_pool;
    AdaptiveAvgPool2dBackward = "aten._adaptive_avg_pool2d_backward.default" ["grad_output" Tensor, "self" Tensor] -> 1, grad_like_self;
    AdaptiveAvgPool3d = "aten._adaptive_avg_pool3d.default" ["self" Tensor, "output_size" Ints] -> 1, adaptive_avg_pool;
    CdistForward = "aten._cdist_forward.default" ["x1" Tensor, "x2" Tensor, "p" Float, "compute_mode" OptInt] -> 1, cdist;
    LogSoftmax = "aten._log_softmax.default" ["self" Tensor, "dim" Int, "half_to_float" Bool] -> 1, softmax;
    NativeBatchNormLegit = "aten._native_batch_norm_legit.default" ["input" Tensor, "weight" OptTensor, "bias" OptTensor, "running_mean" Tensor, "running_var" Tensor, "training" Bool, "momentum" Float, "eps" Float] -> 3, batch_norm;
    NativeBatchNormLegitNoStats = "aten._native_batch_norm_legit.no_stats" ["input" Tensor, "weight" OptTensor, "bias" OptTensor, "training" Bool, "momentum" Float, "eps" Float] -> 3, batch_norm;
    NativeBatchNormLegitNoTraining = "aten._native_batch_norm_legit_no_training.default" ["input" Tensor, "weight" OptTensor, "bias" OptTensor, "running_mean" Tensor, "running_var" Tensor, "momentum" Float, "eps" Float] -> 3, batch_norm;
    PdistForward = "aten._pdist_forward.default" ["self" Tensor, "p" Float = D::Float(2.0)] -> 1, pdist;
    Softmax = "aten._softmax.default" ["self" Tensor, "dim" Int, "half_to_float" Bool] -> 1, softmax;
    ToCopy = "aten._to_copy.default" ["self" Tensor, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None, "non_blocking" Bool = D::Bool(false), "memory_format" MemoryFormat = D::None] -> 1, to_copy;
    Abs = "aten.abs.default" ["self" Tensor] -> 1, same;
    Acos = "aten.acos.default" ["self" Tensor] -> 1, float_unary;
    Acosh = "aten.acosh.default" ["self" Tensor] -> 1, float_unary;
    AddScalar = "aten.add.Scalar" ["self" Tensor, "other" Scalar, "alpha" Scalar = D::Int(1)] -> 1, binary_scalar;
    AddTensor = "aten.add.Tensor" ["self" Tensor, "other" Tensor, "alpha" Scalar = D::Int(1)] -> 1, binary;
    Addmm = "aten.addmm.default" ["self" Tensor, "mat1" Tensor, "mat2" Tensor, "beta" Scalar = D::Int(1), "alpha" Scalar = D::Int(1)] -> 1, addmm;
    Alias = "aten.alias.default" ["self" Tensor] -> 1, same;
    Amax = "aten.amax.default" ["self" Tensor, "dim" Ints = D::Ints(&[]), "keepdim" Bool = D::Bool(false)] -> 1, reduce_same;
    Amin = "aten.amin.default" ["self" Tensor, "dim" Ints = D::Ints(&[]), "keepdim" Bool = D::Bool(false)] -> 1, reduce_same;
    Any = "aten.any.default" ["self" Tensor] -> 1, reduce_any;
    AnyDim = "aten.any.dim" ["self" Tensor, "dim" Int, "keepdim" Bool = D::Bool(false)] -> 1, reduce_any;
    AnyDims = "aten.any.dims" ["self" Tensor, "dim" OptInts = D::None, "keepdim" Bool = D::Bool(false)] -> 1, reduce_any;
    ArangeStartStep = "aten.arange.start_step" ["start" Scalar, "end" Scalar, "step" Scalar = D::Int(1), "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, arange;
    Argmax = "aten.argmax.default" ["self" Tensor, "dim" OptInt = D::None, "keepdim" Bool = D::Bool(false)] -> 1, reduce_arg;
    Argmin = "aten.argmin.default" ["self" Tensor, "dim" OptInt = D::None, "keepdim" Bool = D::Bool(false)] -> 1, reduce_arg;
    AsStrided = "aten.as_strided.default" ["self" Tensor, "size" Ints, "stride" Ints, "storage_offset" OptInt = D::None] -> 1, as_strided;
    Asin = "aten.asin.default" ["self" Tensor] -> 1, float_unary;
    Asinh = "aten.asinh.default" ["self" Tensor] -> 1, float_unary;
    Atan = "aten.atan.default" ["self" Tensor] -> 1, float_unary;
    Atan2 = "aten.atan2.default" ["self" Tensor, "other" Tensor] -> 1, binary_float;
    Atanh = "aten.atanh.default" ["self" Tensor] -> 1, float_unary;
    AvgPool2d = "aten.avg_pool2d.default" ["self" Tensor, "kernel_size" Ints, "stride" Ints = D::Ints(&[]), "padding" Ints = D::Ints(&[0, 0]), "ceil_mode" Bool = D::Bool(false), "count_include_pad" Bool = D::Bool(true), "divisor_override" OptInt = D::None] -> 1, avg_pool;
    AvgPool2dBackward = "aten.avg_pool2d_backward.default" ["grad_output" Tensor, "self" Tensor, "kernel_size" Ints, "stride" Ints, "padding" Ints, "ceil_mode" Bool, "count_include_pad" Bool, "divisor_override" OptInt] -> 1, grad_like_self;
    AvgPool3d = "aten.avg_pool3d.default" ["self" Tensor, "kernel_size" Ints, "stride" Ints = D::Ints(&[]), "padding" Ints = D::Ints(&[0, 0, 0]), "ceil_mode" Bool = D::Bool(false), "count_include_pad" Bool = D::Bool(true), "divisor_override" OptInt = D::None] -> 1, avg_pool;
    BitwiseAndScalar = "aten.bitwise_and.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar;
    BitwiseAndTensor = "aten.bitwise_and.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary;
    BitwiseNot = "aten.bitwise_not.default" ["self" Tensor] -> 1, same;
    BitwiseOrScalar = "aten.bitwise_or.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar;
    BitwiseOrTensor = "aten.bitwise_or.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary;
    BitwiseXorScalar = "aten.bitwise_xor.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar;
    BitwiseXorTensor = "aten.bitwise_xor.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary;
    Bmm = "aten.bmm.default" ["self" Tensor, "mat2" Tensor] -> 1, bmm;
    Cat = "aten.cat.default" ["tensors" Tensors, "dim" Int = D::Int(0)] -> 1, cat;
    Ceil = "aten.ceil.default" ["self" Tensor] -> 1, same;
    ClampTensor = "aten.clamp.Tensor" ["self" Tensor, "min" OptTensor = D::None, "max" OptTensor = D::None] -> 1, clamp_tensor;
    Clamp = "aten.clamp.default" ["self" Tensor, "min" OptScalar = D::None, "max" OptScalar = D::None] -> 1, clamp;
    Clone = "aten.clone.default" ["self" Tensor, "memory_format" MemoryFormat = D::None] -> 1, same;
    Col2im = "aten.col2im.default" ["self" Tensor, "output_size" Ints, "kernel_size" Ints, "dilation" Ints, "padding" Ints, "stride" Ints] -> 1, col2im;
    ConstantPadNd = "aten.constant_pad_nd.default" ["self" Tensor, "pad" Ints, "value" Scalar = D::Int(0)] -> 1, constant_pad_nd;
    Convolution = "aten.convolution.default" ["input" Tensor, "weight" Tensor, "bias" OptTensor, "stride" Ints, "padding" Ints, "dilation" Ints, "transposed" Bool, "output_padding" Ints, "groups" Int] -> 1, convolution;
    ConvolutionBackward = "aten.convolution_backward.default" ["grad_output" Tensor, "input" Tensor, "weight" Tensor, "bias_sizes" OptInts, "stride" Ints, "padding" Ints, "dilation" Ints, "transposed" Bool, "output_padding" Ints, "groups" Int, "output_mask" Bools] -> 3, convolution_backward;
    Copy = "aten.copy.default" ["self" Tensor, "src" Tensor, "non_blocking" Bool = D::Bool(false)] -> 1, same;
    CopysignTensor = "aten.copysign.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary_float;
    Cos = "aten.cos.default" ["self" Tensor] -> 1, float_unary;
    Cosh = "aten.cosh.default" ["self" Tensor] -> 1, float_unary;
    Cummax = "aten.cummax.default" ["self" Tensor, "dim" Int] -> 2, cumulative_values_indices;
    Cummin = "aten.cummin.default" ["self" Tensor, "dim" Int] -> 2, cumulative_values_indices;
    Cumprod = "aten.cumprod.default" ["self" Tensor, "dim" Int, "dtype" DType = D::None] -> 1, cumsum;
    Cumsum = "aten.cumsum.default" ["self" Tensor, "dim" Int, "dtype" DType = D::None] -> 1, cumsum;
    Diagonal = "aten.diagonal.default" ["self" Tensor, "offset" Int = D::Int(0), "dim1" Int = D::Int(0), "dim2" Int = D::Int(1)] -> 1, diagonal;
    Digamma = "aten.digamma.default" ["self" Tensor] -> 1, float_unary;
    DivScalar = "aten.div.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar_float;
    DivScalarMode = "aten.div.Scalar_mode" ["self" Tensor, "other" Scalar, "rounding_mode" OptStr] -> 1, binary_scalar;
    DivTensor = "aten.div.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary_float;
    DivTensorMode = "aten.div.Tensor_mode" ["self" Tensor, "other" Tensor, "rounding_mode" OptStr] -> 1, binary;
    Elu = "aten.elu.default" ["self" Tensor, "alpha" Scalar = D::Int(1), "scale" Scalar = D::Int(1), "input_scale" Scalar = D::Int(1)] -> 1, same;
    Embedding = "aten.embedding.default" ["weight" Tensor, "indices" Tensor, "padding_idx" Int = D::Int(-1), "scale_grad_by_freq" Bool = D::Bool(false), "sparse" Bool = D::Bool(false)] -> 1, embedding;
    EmbeddingDenseBackward = "aten.embedding_dense_backward.default" ["grad_output" Tensor, "indices" Tensor, "num_weights" Int, "padding_idx" Int, "scale_grad_by_freq" Bool] -> 1, embedding_dense_backward;
    EmptyMemoryFormat = "aten.empty.memory_format" ["size" Ints, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None, "memory_format" MemoryFormat = D::None] -> 1, empty;
    EmptyPermuted = "aten.empty_permuted.default" ["size" Ints, "physical_layout" Ints, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, empty;
    EmptyStrided = "aten.empty_strided.default" ["size" Ints, "stride" Ints, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, empty;
    EqScalar = "aten.eq.Scalar" ["self" Tensor, "other" Scalar] -> 1, compare_scalar;
    EqTensor = "aten.eq.Tensor" ["self" Tensor, "other" Tensor] -> 1, compare;
    Erf = "aten.erf.default" ["self" Tensor] -> 1, float_unary;
    Erfc = "aten.erfc.default" ["self" Tensor] -> 1, float_unary;
    Erfinv = "aten.erfinv.default" ["self" Tensor] -> 1, float_unary;
    Exp = "aten.exp.default" ["self" Tensor] -> 1, float_unary;
    Exp2 = "aten.exp2.default" ["self" Tensor] -> 1, float_unary;
    Expand = "aten.expand.default" ["self" Tensor, "size" Ints, "implicit" Bool = D::Bool(false)] -> 1, expand;
    Expm1 = "aten.expm1.default" ["self" Tensor] -> 1, float_unary;
    FillScalar = "aten.fill.Scalar" ["self" Tensor, "value" Scalar] -> 1, same;
    Flip = "aten.flip.default" ["self" Tensor, "dims" Ints] -> 1, same;
    Floor = "aten.floor.default" ["self" Tensor] -> 1, same;
    FmodScalar = "aten.fmod.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar;
    FmodTensor = "aten.fmod.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary;
    Full = "aten.full.default" ["size" Ints, "fill_value" Scalar, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, full;
    FullLike = "aten.full_like.default" ["self" Tensor, "fill_value" Scalar, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None, "memory_format" MemoryFormat = D::None] -> 1, full_like;
    Gather = "aten.gather.default" ["self" Tensor, "dim" Int, "index" Tensor, "sparse_grad" Bool = D::Bool(false)] -> 1, gather;
    GeScalar = "aten.ge.Scalar" ["self" Tensor, "other" Scalar] -> 1, compare_scalar;
    GeTensor = "aten.ge.Tensor" ["self" Tensor, "other" Tensor] -> 1, compare;
    Gelu = "aten.gelu.default" ["self" Tensor, "approximate" Str = D::Str("none")] -> 1, same;
    GridSampler2d = "aten.grid_sampler_2d.default" ["input" Tensor, "grid" Tensor, "interpolation_mode" Int, "padding_mode" Int, "align_corners" Bool] -> 1, grid_sampler_2d;
    GtScalar = "aten.gt.Scalar" ["self" Tensor, "other" Scalar] -> 1, compare_scalar;
    GtTensor = "aten.gt.Tensor" ["self" Tensor, "other" Tensor] -> 1, compare;
    Hardtanh = "aten.hardtanh.default" ["self" Tensor, "min_val" Scalar = D::Int(-1), "max_val" Scalar = D::Int(1)] -> 1, same;
    Histc = "aten.histc.default" ["self" Tensor, "bins" Int = D::Int(100), "min" Scalar = D::Int(0), "max" Scalar = D::Int(0)] -> 1, histc;
    I0 = "aten.i0.default" ["self" Tensor] -> 1, float_unary;
    Igamma = "aten.igamma.default" ["self" Tensor, "other" Tensor] -> 1, binary_float;
    Igammac = "aten.igammac.default" ["self" Tensor, "other" Tensor] -> 1, binary_float;
    IndexTensor = "aten.index.Tensor" ["self" Tensor, "indices" OptTensors] -> 1, index;
    IndexPut = "aten.index_put.default" ["self" Tensor, "indices" OptTensors, "values" Tensor, "accumulate" Bool = D::Bool(false)] -> 1, index_put;
    IndexSelect = "aten.index_select.default" ["self" Tensor, "dim" Int, "index" Tensor] -> 1, index_select;
    Isinf = "aten.isinf.default" ["self" Tensor] -> 1, bool_unary;
    Isnan = "aten.isnan.default" ["self" Tensor] -> 1, bool_unary;
    LeScalar = "aten.le.Scalar" ["self" Tensor, "other" Scalar] -> 1, compare_scalar;
    LeTensor = "aten.le.Tensor" ["self" Tensor, "other" Tensor] -> 1, compare;
    LeakyRelu = "aten.leaky_relu.default" ["self" Tensor, "negative_slope" Scalar = D::Float(0.01)] -> 1, same;
    Lgamma = "aten.lgamma.default" ["self" Tensor] -> 1, float_unary;
    LinalgCholeskyEx = "aten.linalg_cholesky_ex.default" ["self" Tensor, "upper" Bool = D::Bool(false), "check_errors" Bool = D::Bool(false)] -> 2, linalg_cholesky;
    LinalgDet = "aten._linalg_det.default" ["A" Tensor] -> 3, linalg_det;
    LinalgEigh = "aten._linalg_eigh.default" ["A" Tensor, "UPLO" Str = D::Str("L"), "compute_v" Bool = D::Bool(true)] -> 2, linalg_eigh;
    LinalgHouseholderProduct = "aten.linalg_householder_product.default" ["input" Tensor, "tau" Tensor] -> 1, householder_product;
    LinalgInvEx = "aten.linalg_inv_ex.default" ["A" Tensor, "check_errors" Bool = D::Bool(false)] -> 2, linalg_inv;
    LinalgLdlFactorEx = "aten.linalg_ldl_factor_ex.default" ["self" Tensor, "hermitian" Bool = D::Bool(false), "check_errors" Bool = D::Bool(false)] -> 3, linalg_ldl_factor;
    LinalgLdlSolve = "aten.linalg_ldl_solve.default" ["LD" Tensor, "pivots" Tensor, "B" Tensor, "hermitian" Bool = D::Bool(false)] -> 1, linalg_ldl_solve;
    LinalgLu = "aten.linalg_lu.default" ["A" Tensor, "pivot" Bool = D::Bool(true)] -> 3, linalg_lu;
    LinalgLuFactorEx = "aten.linalg_lu_factor_ex.default" ["A" Tensor, "pivot" Bool = D::Bool(true), "check_errors" Bool = D::Bool(false)] -> 3, linalg_lu_factor;
    LinalgLuSolve = "aten.linalg_lu_solve.default" ["LU" Tensor, "pivots" Tensor, "B" Tensor, "left" Bool = D::Bool(true), "adjoint" Bool = D::Bool(false)] -> 1, linalg_lu_solve;
    LinalgMatrixExp = "aten.linalg_matrix_exp.default" ["self" Tensor] -> 1, linalg_matrix_exp;
    LinalgQr = "aten.linalg_qr.default" ["A" Tensor, "mode" Str = D::Str("reduced")] -> 2, linalg_qr;
    LinalgSlogdet = "aten._linalg_slogdet.default" ["A" Tensor] -> 4, linalg_slogdet;
    LinalgSolveEx = "aten._linalg_solve_ex.default" ["A" Tensor, "B" Tensor, "left" Bool = D::Bool(true), "check_errors" Bool = D::Bool(false)] -> 4, linalg_solve;
    LinalgSvd = "aten._linalg_svd.default" ["A" Tensor, "full_matrices" Bool = D::Bool(false), "compute_uv" Bool = D::Bool(true), "driver" OptStr = D::None] -> 3, linalg_svd;
    Geqrf = "aten.geqrf.default" ["self" Tensor] -> 2, geqrf;
    Ormqr = "aten.ormqr.default" ["self" Tensor, "input2" Tensor, "input3" Tensor, "left" Bool = D::Bool(true), "transpose" Bool = D::Bool(false)] -> 1, ormqr;
    LuUnpack = "aten.lu_unpack.default" ["LU_data" Tensor, "LU_pivots" Tensor, "unpack_data" Bool = D::Bool(true), "unpack_pivots" Bool = D::Bool(true)] -> 3, lu_unpack;
    LiftFreshCopy = "aten.lift_fresh_copy.default" ["self" Tensor] -> 1, same;
    Log = "aten.log.default" ["self" Tensor] -> 1, float_unary;
    Log10 = "aten.log10.default" ["self" Tensor] -> 1, float_unary;
    Log1p = "aten.log1p.default" ["self" Tensor] -> 1, float_unary;
    Log2 = "aten.log2.default" ["self" Tensor] -> 1, float_unary;
    LogicalAnd = "aten.logical_and.default" ["self" Tensor, "other" Tensor] -> 1, compare;
    LogicalNot = "aten.logical_not.default" ["self" Tensor] -> 1, bool_unary;
    LogicalOr = "aten.logical_or.default" ["self" Tensor, "other" Tensor] -> 1, compare;
    LogicalXor = "aten.logical_xor.default" ["self" Tensor, "other" Tensor] -> 1, compare;
    LtScalar = "aten.lt.Scalar" ["self" Tensor, "other" Scalar] -> 1, compare_scalar;
    LtTensor = "aten.lt.Tensor" ["self" Tensor, "other" Tensor] -> 1, compare;
    MaskedScatter = "aten.masked_scatter.default" ["self" Tensor, "mask" Tensor, "source" Tensor] -> 1, same;
    MaxDim = "aten.max.dim" ["self" Tensor, "dim" Int, "keepdim" Bool = D::Bool(false)] -> 2, reduce_values_indices;
    MaxPool2dWithIndices = "aten.max_pool2d_with_indices.default" ["self" Tensor, "kernel_size" Ints, "stride" Ints = D::Ints(&[]), "padding" Ints = D::Ints(&[0, 0]), "dilation" Ints = D::Ints(&[1, 1]), "ceil_mode" Bool = D::Bool(false)] -> 2, max_pool_with_indices;
    MaxPool2dWithIndicesBackward = "aten.max_pool2d_with_indices_backward.default" ["grad_output" Tensor, "self" Tensor, "kernel_size" Ints, "stride" Ints, "padding" Ints, "dilation" Ints, "ceil_mode" Bool, "indices" Tensor] -> 1, grad_like_self;
    MaxPool3dWithIndices = "aten.max_pool3d_with_indices.default" ["self" Tensor, "kernel_size" Ints, "stride" Ints = D::Ints(&[]), "padding" Ints = D::Ints(&[0, 0, 0]), "dilation" Ints = D::Ints(&[1, 1, 1]), "ceil_mode" Bool = D::Bool(false)] -> 2, max_pool_with_indices;
    Maximum = "aten.maximum.default" ["self" Tensor, "other" Tensor] -> 1, binary;
    Mean = "aten.mean.default" ["self" Tensor, "dtype" DType = D::None] -> 1, reduce_mean_all;
    MeanDim = "aten.mean.dim" ["self" Tensor, "dim" OptInts, "keepdim" Bool = D::Bool(false), "dtype" DType = D::None] -> 1, reduce_mean;
    MinDim = "aten.min.dim" ["self" Tensor, "dim" Int, "keepdim" Bool = D::Bool(false)] -> 2, reduce_values_indices;
    Minimum = "aten.minimum.default" ["self" Tensor, "other" Tensor] -> 1, binary;
    Mm = "aten.mm.default" ["self" Tensor, "mat2" Tensor] -> 1, mm;
    MulScalar = "aten.mul.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar;
    MulTensor = "aten.mul.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary;
    NativeDropout = "aten.native_dropout.default" ["input" Tensor, "p" Float, "train" OptBool] -> 2, native_dropout;
    NativeGroupNorm = "aten.native_group_norm.default" ["input" Tensor, "weight" OptTensor, "bias" OptTensor, "N" Int, "C" Int, "HxW" Int, "group" Int, "eps" Float] -> 3, group_norm;
    NativeGroupNormBackward = "aten.native_group_norm_backward.default" ["grad_out" Tensor, "input" Tensor, "mean" Tensor, "rstd" Tensor, "weight" OptTensor, "N" Int, "C" Int, "HxW" Int, "group" Int, "output_mask" Bools] -> 3, group_norm_backward;
    NativeLayerNorm = "aten.native_layer_norm.default" ["input" Tensor, "normalized_shape" Ints, "weight" OptTensor, "bias" OptTensor, "eps" Float] -> 3, layer_norm;
    NativeLayerNormBackward = "aten.native_layer_norm_backward.default" ["grad_out" Tensor, "input" Tensor, "normalized_shape" Ints, "mean" Tensor, "rstd" Tensor, "weight" OptTensor, "bias" OptTensor, "output_mask" Bools] -> 3, layer_norm_backward;
    NeScalar = "aten.ne.Scalar" ["self" Tensor, "other" Scalar] -> 1, compare_scalar;
    NeTensor = "aten.ne.Tensor" ["self" Tensor, "other" Tensor] -> 1, compare;
    Nextafter = "aten.nextafter.default" ["self" Tensor, "other" Tensor] -> 1, binary;
    Neg = "aten.neg.default" ["self" Tensor] -> 1, same;
    Permute = "aten.permute.default" ["self" Tensor, "dims" Ints] -> 1, permute;
    Polygamma = "aten.polygamma.default" ["n" Int, "self" Tensor] -> 1, float_unary;
    PowScalar = "aten.pow.Scalar" ["self" Scalar, "exponent" Tensor] -> 1, pow_scalar_base;
    PowTensorScalar = "aten.pow.Tensor_Scalar" ["self" Tensor, "exponent" Scalar] -> 1, binary_scalar;
    PowTensorTensor = "aten.pow.Tensor_Tensor" ["self" Tensor, "exponent" Tensor] -> 1, binary;
    Prod = "aten.prod.default" ["self" Tensor, "dtype" DType = D::None] -> 1, reduce_prod;
    ProdDimInt = "aten.prod.dim_int" ["self" Tensor, "dim" Int, "keepdim" Bool = D::Bool(false), "dtype" DType = D::None] -> 1, reduce_prod;
    Rand = "aten.rand.default" ["size" Ints, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, random;
    Randn = "aten.randn.default" ["size" Ints, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, random;
    Randperm = "aten.randperm.default" ["n" Int, "dtype" DType = D::DType(DType::I64), "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, randperm;
    Reciprocal = "aten.reciprocal.default" ["self" Tensor] -> 1, float_unary;
    ReflectionPad1d = "aten.reflection_pad1d.default" ["self" Tensor, "padding" Ints] -> 1, pad_nd;
    ReflectionPad2d = "aten.reflection_pad2d.default" ["self" Tensor, "padding" Ints] -> 1, pad_nd;
    ReflectionPad3d = "aten.reflection_pad3d.default" ["self" Tensor, "padding" Ints] -> 1, pad_nd;
    Relu = "aten.relu.default" ["self" Tensor] -> 1, same;
    RemainderScalar = "aten.remainder.Scalar" ["self" Tensor, "other" Scalar] -> 1, binary_scalar;
    RemainderTensor = "aten.remainder.Tensor" ["self" Tensor, "other" Tensor] -> 1, binary;
    Repeat = "aten.repeat.default" ["self" Tensor, "repeats" Ints] -> 1, repeat;
    ReplicationPad2d = "aten.replication_pad2d.default" ["self" Tensor, "padding" Ints] -> 1, pad_nd;
    ReplicationPad3d = "aten.replication_pad3d.default" ["self" Tensor, "padding" Ints] -> 1, pad_nd;
    Round = "aten.round.default" ["self" Tensor] -> 1, same;
    RoundDecimals = "aten.round.decimals" ["self" Tensor, "decimals" Int] -> 1, same;
    Rsqrt = "aten.rsqrt.default" ["self" Tensor] -> 1, float_unary;
    ScalarTensor = "aten.scalar_tensor.default" ["s" Scalar, "dtype" DType = D::None, "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, scalar_tensor;
    ScatterSrc = "aten.scatter.src" ["self" Tensor, "dim" Int, "index" Tensor, "src" Tensor] -> 1, same;
    ScatterValue = "aten.scatter.value" ["self" Tensor, "dim" Int, "index" Tensor, "value" Scalar] -> 1, same;
    ScatterAdd = "aten.scatter_add.default" ["self" Tensor, "dim" Int, "index" Tensor, "src" Tensor] -> 1, same;
    ScatterReduceTwo = "aten.scatter_reduce.two" ["self" Tensor, "dim" Int, "index" Tensor, "src" Tensor, "reduce" Str, "include_self" Bool = D::Bool(true)] -> 1, same;
    SearchsortedTensor = "aten.searchsorted.Tensor" ["sorted_sequence" Tensor, "self" Tensor, "out_int32" Bool = D::Bool(false), "right" Bool = D::Bool(false), "side" OptStr = D::None, "sorter" OptTensor = D::None] -> 1, searchsorted;
    SelectInt = "aten.select.int" ["self" Tensor, "dim" Int, "index" Int] -> 1, select;
    SelectScatter = "aten.select_scatter.default" ["self" Tensor, "src" Tensor, "dim" Int, "index" Int] -> 1, same;
    Sigmoid = "aten.sigmoid.default" ["self" Tensor] -> 1, float_unary;
    Sign = "aten.sign.default" ["self" Tensor] -> 1, same;
    Signbit = "aten.signbit.default" ["self" Tensor] -> 1, bool_unary;
    Sin = "aten.sin.default" ["self" Tensor] -> 1, float_unary;
    Sinh = "aten.sinh.default" ["self" Tensor] -> 1, float_unary;
    SliceTensor = "aten.slice.Tensor" ["self" Tensor, "dim" Int = D::Int(0), "start" OptInt = D::None, "end" OptInt = D::None, "step" Int = D::Int(1)] -> 1, slice;
    SliceScatter = "aten.slice_scatter.default" ["self" Tensor, "src" Tensor, "dim" Int = D::Int(0), "start" OptInt = D::None, "end" OptInt = D::None, "step" Int = D::Int(1)] -> 1, same;
    Sort = "aten.sort.default" ["self" Tensor, "dim" Int = D::Int(-1), "descending" Bool = D::Bool(false)] -> 2, sort;
    SortStable = "aten.sort.stable" ["self" Tensor, "stable" OptBool, "dim" Int = D::Int(-1), "descending" Bool = D::Bool(false)] -> 2, sort;
    SpecialBesselJ0 = "aten.special_bessel_j0.default" ["self" Tensor] -> 1, float_unary;
    SpecialBesselJ1 = "aten.special_bessel_j1.default" ["self" Tensor] -> 1, float_unary;
    SpecialBesselY0 = "aten.special_bessel_y0.default" ["self" Tensor] -> 1, float_unary;
    SpecialBesselY1 = "aten.special_bessel_y1.default" ["self" Tensor] -> 1, float_unary;
    SpecialChebyshevPolynomialT = "aten.special_chebyshev_polynomial_t.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialChebyshevPolynomialU = "aten.special_chebyshev_polynomial_u.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialChebyshevPolynomialV = "aten.special_chebyshev_polynomial_v.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialChebyshevPolynomialW = "aten.special_chebyshev_polynomial_w.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialHermitePolynomialH = "aten.special_hermite_polynomial_h.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialHermitePolynomialHe = "aten.special_hermite_polynomial_he.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialLaguerrePolynomialL = "aten.special_laguerre_polynomial_l.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialLegendrePolynomialP = "aten.special_legendre_polynomial_p.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialShiftedChebyshevPolynomialT = "aten.special_shifted_chebyshev_polynomial_t.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialShiftedChebyshevPolynomialU = "aten.special_shifted_chebyshev_polynomial_u.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialShiftedChebyshevPolynomialV = "aten.special_shifted_chebyshev_polynomial_v.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialShiftedChebyshevPolynomialW = "aten.special_shifted_chebyshev_polynomial_w.default" ["x" Tensor, "n" Tensor] -> 1, polynomial;
    SpecialErfcx = "aten.special_erfcx.default" ["self" Tensor] -> 1, float_unary;
    SpecialI0e = "aten.special_i0e.default" ["self" Tensor] -> 1, float_unary;
    SpecialI1 = "aten.special_i1.default" ["self" Tensor] -> 1, float_unary;
    SpecialI1e = "aten.special_i1e.default" ["self" Tensor] -> 1, float_unary;
    SpecialLogNdtr = "aten.special_log_ndtr.default" ["self" Tensor] -> 1, float_unary;
    SpecialModifiedBesselI0 = "aten.special_modified_bessel_i0.default" ["self" Tensor] -> 1, float_unary;
    SpecialModifiedBesselI1 = "aten.special_modified_bessel_i1.default" ["self" Tensor] -> 1, float_unary;
    SpecialModifiedBesselK0 = "aten.special_modified_bessel_k0.default" ["self" Tensor] -> 1, float_unary;
    SpecialModifiedBesselK1 = "aten.special_modified_bessel_k1.default" ["self" Tensor] -> 1, float_unary;
    SpecialNdtri = "aten.special_ndtri.default" ["self" Tensor] -> 1, float_unary;
    SpecialScaledModifiedBesselK0 = "aten.special_scaled_modified_bessel_k0.default" ["x" Tensor] -> 1, float_unary_x;
    SpecialScaledModifiedBesselK1 = "aten.special_scaled_modified_bessel_k1.default" ["x" Tensor] -> 1, float_unary_x;
    SpecialSphericalBesselJ0 = "aten.special_spherical_bessel_j0.default" ["x" Tensor] -> 1, float_unary_x;
    SpecialZeta = "aten.special_zeta.default" ["self" Tensor, "other" Tensor] -> 1, binary_float;
    SplitWithSizes = "aten.split_with_sizes.default" ["self" Tensor, "split_sizes" Ints, "dim" Int = D::Int(0)] -> List, split_with_sizes;
    Sqrt = "aten.sqrt.default" ["self" Tensor] -> 1, float_unary;
    SqueezeDim = "aten.squeeze.dim" ["self" Tensor, "dim" Int] -> 1, squeeze_dim;
    SqueezeDims = "aten.squeeze.dims" ["self" Tensor, "dim" Ints] -> 1, squeeze_dims;
    SubScalar = "aten.sub.Scalar" ["self" Tensor, "other" Scalar, "alpha" Scalar = D::Int(1)] -> 1, binary_scalar;
    SubTensor = "aten.sub.Tensor" ["self" Tensor, "other" Tensor, "alpha" Scalar = D::Int(1)] -> 1, binary;
    SumDimIntList = "aten.sum.dim_IntList" ["self" Tensor, "dim" OptInts, "keepdim" Bool = D::Bool(false), "dtype" DType = D::None] -> 1, reduce_sum;
    Tan = "aten.tan.default" ["self" Tensor] -> 1, float_unary;
    Tanh = "aten.tanh.default" ["self" Tensor] -> 1, float_unary;
    Topk = "aten.topk.default" ["self" Tensor, "k" Int, "dim" Int = D::Int(-1), "largest" Bool = D::Bool(true), "sorted" Bool = D::Bool(true)] -> 2, topk;
    TrilIndices = "aten.tril_indices.default" ["row" Int, "col" Int, "offset" Int = D::Int(0), "dtype" DType = D::DType(DType::I64), "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, tri_indices;
    TriuIndices = "aten.triu_indices.default" ["row" Int, "col" Int, "offset" Int = D::Int(0), "dtype" DType = D::DType(DType::I64), "layout" Layout = D::None, "device" Device = D::None, "pin_memory" OptBool = D::None] -> 1, tri_indices;
    Trunc = "aten.trunc.default" ["self" Tensor] -> 1, same;
    Unfold = "aten.unfold.default" ["self" Tensor, "dimension" Int, "size" Int, "step" Int] -> 1, unfold;
    Unsqueeze = "aten.unsqueeze.default" ["self" Tensor, "dim" Int] -> 1, unsqueeze;
    UpsampleBilinear2dVec = "aten.upsample_bilinear2d.vec" ["input" Tensor, "output_size" OptInts, "align_corners" Bool, "scale_factors" OptFloats] -> 1, upsample;
    UpsampleNearest2dVec = "aten.upsample_nearest2d.vec" ["input" Tensor, "output_size" OptInts, "scale_factors" OptFloats] -> 1, upsample;
    VarCorrection = "aten.var.correction" ["self" Tensor, "dim" OptInts = D::None, "correction" OptScalar = D::None, "keepdim" Bool = D::Bool(false)] -> 1, reduce_var;
    VarDim = "aten.var.dim" ["self" Tensor, "dim" OptInts, "unbiased" Bool = D::Bool(true), "keepdim" Bool = D::Bool(false)] -> 1, reduce_var;
    View = "aten.view.default" ["self" Tensor, "size" Ints] -> 1, view;
    WhereSelf = "aten.where.self" ["condition" Tensor, "self" Tensor, "other" Tensor] -> 1, where_self;
}

/// Core ATen overloads deliberately left out of the table, with the reason (listed in `docs/ops.md`).
pub static NOT_IN_TABLE: &[(&str, &str)] = &[
    ("aten._embedding_bag.default", "not implemented yet"),
    (
        "aten._fft_c2r.default",
        "complex results: the IR has no complex dtype yet",
    ),
    (
        "aten._fft_r2c.default",
        "complex results: the IR has no complex dtype yet",
    ),
    (
        "aten._local_scalar_dense.default",
        "returns a host Scalar, not a tensor (data-dependent control flow)",
    ),
    (
        "aten.atan2.out",
        "out= variant; functional graphs use aten.atan2.default",
    ),
    (
        "aten.nonzero.default",
        "data-dependent output shape; needs dynamic shapes",
    ),
    (
        "aten.sym_numel.default",
        "returns a SymInt; symbolic shapes are not supported yet",
    ),
    (
        "aten.sym_size.int",
        "returns a SymInt; symbolic shapes are not supported yet",
    ),
    (
        "aten.sym_storage_offset.default",
        "returns a SymInt; symbolic shapes are not supported yet",
    ),
    (
        "aten.sym_stride.int",
        "returns a SymInt; symbolic shapes are not supported yet",
    ),
];

/// Ops of the table that the StableHLO lowering refuses, with the reason (the fast runtime and
/// the reference interpreter run them; listed in `docs/ops.md`).
pub static NO_STABLEHLO: &[(Op, &str)] = &[
    (Op::SpecialBesselJ0, BESSEL_JY),
    (Op::SpecialBesselJ1, BESSEL_JY),
    (Op::SpecialBesselY0, BESSEL_JY),
    (Op::SpecialBesselY1, BESSEL_JY),
    (Op::SpecialModifiedBesselK0, BESSEL_K),
    (Op::SpecialModifiedBesselK1, BESSEL_K),
    (Op::SpecialScaledModifiedBesselK0, BESSEL_K),
    (Op::SpecialScaledModifiedBesselK1, BESSEL_K),
    (Op::SpecialNdtri, NO_CHLO),
    (Op::SpecialLogNdtr, NO_CHLO),
    (Op::SpecialErfcx, NO_CHLO),
    (Op::Igamma, NO_CHLO),
    (Op::Igammac, NO_CHLO),
    (Op::SpecialChebyshevPolynomialT, POLY),
    (Op::SpecialChebyshevPolynomialU, POLY),
    (Op::SpecialChebyshevPolynomialV, POLY),
    (Op::SpecialChebyshevPolynomialW, POLY),
    (Op::SpecialHermitePolynomialH, POLY),
    (Op::SpecialHermitePolynomialHe, POLY),
    (Op::SpecialLaguerrePolynomialL, POLY),
    (Op::SpecialLegendrePolynomialP, POLY),
    (Op::SpecialShiftedChebyshevPolynomialT, POLY),
    (Op::SpecialShiftedChebyshevPolynomialU, POLY),
    (Op::SpecialShiftedChebyshevPolynomialV, POLY),
    (Op::SpecialShiftedChebyshevPolynomialW, POLY),
    (Op::LinalgCholeskyEx, LAPACK),
    (Op::LinalgDet, LAPACK),
    (Op::LinalgEigh, LAPACK),
    (Op::LinalgHouseholderProduct, LAPACK),
    (Op::LinalgInvEx, LAPACK),
    (Op::LinalgLu, LAPACK),
    (Op::LinalgLuFactorEx, LAPACK),
    (Op::LinalgLuSolve, LAPACK),
    (Op::LinalgQr, LAPACK),
    (Op::LinalgSlogdet, LAPACK),
    (Op::LinalgSolveEx, LAPACK),
    (Op::LinalgSvd, LAPACK),
    (Op::Geqrf, LAPACK),
    (Op::Ormqr, LAPACK),
    (Op::LuUnpack, LAPACK),
    (Op::LinalgMatrixExp, EXPM),
    (Op::LinalgLdlFactorEx, LAPACK),
    (Op::LinalgLdlSolve, LAPACK),
];

const BESSEL_JY: &str = "XLA has no Bessel functions of the first or second kind";
const BESSEL_K: &str = "XLA has no modified Bessel functions of the second kind";
const NO_CHLO: &str = "XLA's CHLO has no such op; an expansion is not written yet";
const LAPACK: &str = "a matrix factorization: StableHLO has only cholesky and triangular_solve \
     (without LAPACK's info output), XLA lowers the others to LAPACK custom calls, which are not \
     emitted yet";
const EXPM: &str = "a matrix exponential (scaling and squaring) is not written in StableHLO yet";
const POLY: &str = "a recurrence as long as the degree, which is data: a while loop in \
     StableHLO, not written yet";

/// ATen overloads beyond the core set that models or PyTorch's OpInfo samples use and the table
/// lacks, with the reason (ranked by `tools/missing_ops.py`; listed in `docs/ops.md`). The
/// `torch.compile` backend decomposes some others into table ops (`fxhlo/extra_decomps.py`).
pub static MISSING: &[(&str, &str)] = &[
    ("aten._fft_c2c.default", COMPLEX),
    ("aten._conj.default", COMPLEX),
    ("aten._conj_physical.default", COMPLEX),
    ("aten.complex.default", COMPLEX),
    ("aten.polar.default", COMPLEX),
    ("aten.angle.default", COMPLEX_REAL_DECOMPOSED),
    ("aten.view_as_complex.default", COMPLEX),
    ("aten.view_as_real.default", COMPLEX),
    ("aten.linalg_eig.default", COMPLEX),
    ("aten.linalg_solve_triangular.default", LINALG_DECOMPOSED),
    ("aten.triangular_solve.default", LINALG_DECOMPOSED),
    ("aten.cholesky_solve.default", LINALG_DECOMPOSED),
    ("aten.cholesky_inverse.default", LINALG_DECOMPOSED),
    ("aten.linalg_pinv.atol_rtol_tensor", LINALG_COMPOSITE),
    ("aten.linalg_polar.default", LINALG_COMPOSITE),
    ("aten.linalg_matrix_sqrth.default", LINALG_COMPOSITE),
    ("aten.nonzero_static.default", DECOMPOSED),
    ("aten.segment_reduce.default", DECOMPOSED),
    ("aten.adaptive_max_pool2d.default", DECOMPOSED),
    ("aten.fractional_max_pool2d.default", RANDOM),
    ("aten.fractional_max_pool3d.default", RANDOM),
    ("aten.grid_sampler_3d.default", NOT_YET),
    ("aten._upsample_bilinear2d_aa.default", NOT_YET),
    ("aten._embedding_bag_forward_only.default", NOT_YET),
    ("aten._trilinear.default", DECOMPOSED),
    ("aten.median.dim", DECOMPOSED),
    ("aten.median.default", DECOMPOSED),
    ("aten.nanmedian.dim", DECOMPOSED),
    ("aten.nanmedian.default", DECOMPOSED),
    ("aten.kthvalue.default", DECOMPOSED),
    ("aten.mode.default", NOT_YET),
    ("aten.logcumsumexp.default", DECOMPOSED),
    ("aten.frexp.Tensor", DECOMPOSED),
    ("aten.diagonal_scatter.default", DECOMPOSED),
    ("aten.as_strided_scatter.default", DECOMPOSED),
    ("aten.histogram.bin_ct", NOT_YET),
    ("aten._histogramdd_bin_edges.default", NOT_YET),
    ("aten._histogramdd_from_bin_cts.default", NOT_YET),
    ("aten.special_airy_ai.default", NOT_YET),
    ("aten.cauchy.default", RANDOM),
    ("aten.exponential.default", RANDOM),
    ("aten.geometric.default", RANDOM),
    ("aten.log_normal.default", RANDOM),
    ("aten.normal.Tensor_Tensor", RANDOM),
    ("aten.normal.float_float", RANDOM),
    ("aten.normal_functional.default", RANDOM),
    ("aten.multinomial.default", RANDOM),
    ("aten.randint.default", RANDOM),
    ("aten.randint_like.default", RANDOM),
    ("aten.rrelu_with_noise_functional.default", RANDOM),
];

const COMPLEX: &str = "complex values: the IR has no complex dtype yet";
const LINALG_COMPOSITE: &str = "not in the table (the torch.compile backend decomposes it onto \
     the table's _linalg_svd or _linalg_eigh, see fxhlo/extra_decomps.py)";
const NOT_YET: &str = "not implemented yet";
const DECOMPOSED: &str = "not in the table (the torch.compile backend decomposes it into table \
     ops, see fxhlo/extra_decomps.py)";
const LINALG_DECOMPOSED: &str = "triangular solve: not in the table (the torch.compile backend \
     substitutes row by row, see fxhlo/extra_decomps.py)";
const COMPLEX_REAL_DECOMPOSED: &str = "complex values: the IR has no complex dtype yet (of a \
     real tensor, the torch.compile backend decomposes it, see fxhlo/extra_decomps.py)";
const RANDOM: &str = "random sampling beyond rand, randn, randperm and dropout: not in the \
     table (the torch.compile backend turns most into rand/randn, see fxhlo/extra_decomps.py)";

impl Op {
    /// The table row of this op.
    pub fn info(self) -> &'static OpInfo {
        &OPS[self as usize]
    }

    /// ATen overload name.
    pub fn aten(self) -> &'static str {
        self.info().aten
    }

    /// Looks an op up by ATen overload name (`aten.add.Tensor`; `aten::add.Tensor` and
    /// `torch.ops.aten.add.Tensor` are accepted too).
    pub fn from_aten(name: &str) -> Option<Op> {
        let name = name.strip_prefix("torch.ops.").unwrap_or(name);
        let owned;
        let name = if let Some(rest) = name.strip_prefix("aten::") {
            owned = if rest.contains('.') {
                format!("aten.{rest}")
            } else {
                format!("aten.{rest}.default")
            };
            owned.as_str()
        } else {
            name
        };
        index().get(name).copied()
    }

    /// Why the StableHLO lowering refuses this op, if it does ([`NO_STABLEHLO`]).
    pub fn no_stablehlo(self) -> Option<&'static str> {
        NO_STABLEHLO
            .iter()
            .find(|(o, _)| *o == self)
            .map(|(_, why)| *why)
    }

    /// Index of a parameter by schema name.
    pub fn param_index(self, name: &str) -> Option<usize> {
        self.info().params.iter().position(|p| p.name == name)
    }
}

fn index() -> &'static std::collections::HashMap<&'static str, Op> {
    static INDEX: std::sync::OnceLock<std::collections::HashMap<&'static str, Op>> =
        std::sync::OnceLock::new();
    INDEX.get_or_init(|| OPS.iter().map(|i| (i.aten, i.op)).collect())
}

impl std::fmt::Display for Op {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.aten())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_in_variant_order_and_names_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for (i, info) in OPS.iter().enumerate() {
            assert_eq!(info.op as usize, i, "{}", info.aten);
            assert!(seen.insert(info.aten), "duplicate {}", info.aten);
            assert_eq!(Op::from_aten(info.aten), Some(info.op));
        }
    }

    #[test]
    fn missing_ops_are_not_in_the_table() {
        for (name, _) in MISSING.iter().chain(NOT_IN_TABLE) {
            assert_eq!(Op::from_aten(name), None, "{name} is in the table");
        }
    }

    #[test]
    fn lookup_accepts_other_spellings() {
        assert_eq!(Op::from_aten("aten::mm"), Some(Op::Mm));
        assert_eq!(
            Op::from_aten("torch.ops.aten.add.Tensor"),
            Some(Op::AddTensor)
        );
        assert_eq!(Op::from_aten("aten.add.Frobnicate"), None);
    }
}

//! What each op of the table *is*, in one place: its kind (elementwise of which arity, view of
//! which kind, reduction, contraction, convolution, creation, other), its purity, whether the
//! fast runtime's expression engine computes it, and its cost weight. Passes (CSE, the e-graph,
//! fusion planning, composites) and the lowering ask here instead of keeping private lists.
//!
//! Every function below matches on [`Op`] exhaustively (no `_` arm), so an op added to the
//! table without its traits does not compile: it cannot silently become "other".

use crate::Op;

/// How a view re-reads its operand (all move no data in the IR's semantics; the kernels read
/// them in place or recompute them).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ViewKind {
    /// The same elements in the same order under another shape (`view`, `unsqueeze`, the
    /// squeezes, `alias`).
    Reshape,
    /// Elements repeated along new or size-1 dimensions (`expand`).
    Broadcast,
    /// A strided window of the operand: axes permuted, a range or one index taken (`permute`,
    /// `slice`, `select`); matmuls read through these in place.
    Strided,
    /// The operand's values unchanged, in a fresh buffer (`clone`).
    Copy,
    /// Each element read from the operand through an index map that is not one stride per
    /// axis (`repeat`, `flip`, `diagonal`).
    IndexMap,
}

/// The kind of computation an op is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OpKind {
    /// Each result element is a function of the same-index elements (after broadcasting) of
    /// its `arity` tensor operands and of its attributes.
    Elementwise {
        /// Tensor operands.
        arity: u8,
    },
    /// A view of its first operand.
    View(ViewKind),
    /// Reduces or normalizes along dimensions (sums, means, extrema and arg-extrema,
    /// variances, products, `any`, softmax, layer/group norm, training-mode batch norm).
    Reduction,
    /// A matrix product (`mm`, `bmm`, `addmm`).
    Contraction,
    /// A convolution.
    Convolution,
    /// Makes a tensor from its attributes alone (`full`, `arange`, `empty`, `rand`, ...).
    Creation,
    /// Anything else: indexing, scatters, scans, sorts, pools, resampling, backward ops,
    /// data movement that is not a view (`cat`, pads, `split`, `unfold`, `as_strided`).
    Other,
}

/// Whether two evaluations with the same arguments give the same result.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Purity {
    /// A function of its arguments.
    Pure,
    /// Draws random numbers.
    Random,
    /// Its result's values are unspecified (`empty*`).
    Uninitialized,
}

impl Op {
    /// The op's kind.
    pub fn kind(self) -> OpKind {
        use Op::*;
        let ew = |arity| OpKind::Elementwise { arity };
        match self {
            // metadata only
            View | Unsqueeze | SqueezeDim | SqueezeDims | Alias => OpKind::View(ViewKind::Reshape),
            Expand => OpKind::View(ViewKind::Broadcast),
            Permute | SliceTensor | SelectInt => OpKind::View(ViewKind::Strided),
            Clone => OpKind::View(ViewKind::Copy),
            Repeat | Flip | Diagonal => OpKind::View(ViewKind::IndexMap),
            // elementwise, one tensor operand
            Abs
            | Neg
            | Relu
            | Gelu
            | Sigmoid
            | Tanh
            | Exp
            | Exp2
            | Expm1
            | Log
            | Log1p
            | Log2
            | Log10
            | Sqrt
            | Rsqrt
            | Reciprocal
            | Erf
            | Erfc
            | Erfinv
            | Sin
            | Cos
            | Tan
            | Sinh
            | Cosh
            | Asin
            | Acos
            | Atan
            | Asinh
            | Acosh
            | Atanh
            | Ceil
            | Floor
            | Round
            | RoundDecimals
            | Trunc
            | Sign
            | Signbit
            | LeakyRelu
            | Elu
            | Hardtanh
            | Clamp
            | AddScalar
            | SubScalar
            | MulScalar
            | DivScalar
            | DivScalarMode
            | PowTensorScalar
            | FmodScalar
            | RemainderScalar
            | BitwiseAndScalar
            | BitwiseOrScalar
            | BitwiseXorScalar
            | EqScalar
            | NeScalar
            | LtScalar
            | LeScalar
            | GtScalar
            | GeScalar
            | LogicalNot
            | BitwiseNot
            | Isnan
            | Isinf
            | ToCopy
            | FillScalar
            | LiftFreshCopy
            | PowScalar
            | Digamma
            | Lgamma
            | I0
            | Polygamma
            | SpecialBesselJ0
            | SpecialBesselJ1
            | SpecialBesselY0
            | SpecialBesselY1
            | SpecialErfcx
            | SpecialI0e
            | SpecialI1
            | SpecialI1e
            | SpecialLogNdtr
            | SpecialModifiedBesselI0
            | SpecialModifiedBesselI1
            | SpecialModifiedBesselK0
            | SpecialModifiedBesselK1
            | SpecialNdtri
            | SpecialScaledModifiedBesselK0
            | SpecialScaledModifiedBesselK1
            | SpecialSphericalBesselJ0
            | FullLike => ew(1),
            // elementwise, two tensor operands
            AddTensor
            | SubTensor
            | MulTensor
            | DivTensor
            | DivTensorMode
            | Maximum
            | Minimum
            | EqTensor
            | NeTensor
            | LtTensor
            | LeTensor
            | GtTensor
            | GeTensor
            | LogicalAnd
            | LogicalOr
            | LogicalXor
            | PowTensorTensor
            | Atan2
            | FmodTensor
            | RemainderTensor
            | BitwiseAndTensor
            | BitwiseOrTensor
            | BitwiseXorTensor
            | CopysignTensor
            | Nextafter
            | Igamma
            | Igammac
            | SpecialZeta
            | Copy
            | SpecialChebyshevPolynomialT
            | SpecialChebyshevPolynomialU
            | SpecialChebyshevPolynomialV
            | SpecialChebyshevPolynomialW
            | SpecialHermitePolynomialH
            | SpecialHermitePolynomialHe
            | SpecialLaguerrePolynomialL
            | SpecialLegendrePolynomialP
            | SpecialShiftedChebyshevPolynomialT
            | SpecialShiftedChebyshevPolynomialU
            | SpecialShiftedChebyshevPolynomialV
            | SpecialShiftedChebyshevPolynomialW => ew(2),
            // elementwise, three tensor operands (self, min, max / condition, self, other)
            ClampTensor | WhereSelf => ew(3),
            // inference batch norm: x, weight, bias, running mean and variance per channel
            NativeBatchNormLegitNoTraining => ew(5),
            SumDimIntList
            | MeanDim
            | Mean
            | Amax
            | Amin
            | Softmax
            | LogSoftmax
            | NativeLayerNorm
            | VarCorrection
            | VarDim
            | Prod
            | ProdDimInt
            | Any
            | AnyDim
            | AnyDims
            | Argmax
            | Argmin
            | MaxDim
            | MinDim
            | NativeGroupNorm
            | NativeBatchNormLegit
            | NativeBatchNormLegitNoStats => OpKind::Reduction,
            Mm | Bmm | Addmm => OpKind::Contraction,
            Convolution => OpKind::Convolution,
            Full | ScalarTensor | ArangeStartStep | Rand | Randn | Randperm | EmptyMemoryFormat
            | EmptyStrided | EmptyPermuted | TrilIndices | TriuIndices => OpKind::Creation,
            AdaptiveAvgPool2d
            | AdaptiveAvgPool2dBackward
            | AdaptiveAvgPool3d
            | CdistForward
            | PdistForward
            | AsStrided
            | AvgPool2d
            | AvgPool2dBackward
            | AvgPool3d
            | Cat
            | Col2im
            | ConstantPadNd
            | ConvolutionBackward
            | Cummax
            | Cummin
            | Cumprod
            | Cumsum
            | Embedding
            | EmbeddingDenseBackward
            | Gather
            | GridSampler2d
            | Histc
            | IndexTensor
            | IndexPut
            | IndexSelect
            | MaskedScatter
            | MaxPool2dWithIndices
            | MaxPool2dWithIndicesBackward
            | MaxPool3dWithIndices
            | NativeDropout
            | NativeGroupNormBackward
            | NativeLayerNormBackward
            | ReflectionPad1d
            | ReflectionPad2d
            | ReflectionPad3d
            | ReplicationPad2d
            | ReplicationPad3d
            | ScatterSrc
            | ScatterValue
            | ScatterAdd
            | ScatterReduceTwo
            | SearchsortedTensor
            | SelectScatter
            | SliceScatter
            | Sort
            | SortStable
            | SplitWithSizes
            | Topk
            | Unfold
            | UpsampleBilinear2dVec
            | UpsampleNearest2dVec
            | LinalgCholeskyEx
            | LinalgDet
            | LinalgEigh
            | LinalgHouseholderProduct
            | LinalgInvEx
            | LinalgLu
            | LinalgLuFactorEx
            | LinalgLuSolve
            | LinalgQr
            | LinalgSlogdet
            | LinalgSolveEx
            | LinalgSvd
            | Geqrf
            | Ormqr
            | LuUnpack
            | LinalgMatrixExp
            | LinalgLdlFactorEx
            | LinalgLdlSolve => OpKind::Other,
        }
    }

    /// Whether the op draws random numbers or leaves its values unspecified.
    pub fn purity(self) -> Purity {
        use Op::*;
        match self {
            Rand | Randn | Randperm | NativeDropout => Purity::Random,
            EmptyMemoryFormat | EmptyStrided | EmptyPermuted => Purity::Uninitialized,
            _ => Purity::Pure,
        }
    }

    /// Whether the fast runtime's elementwise expression engine computes this op (so that
    /// fusion may put it in an elementwise kernel). A property of the runtime rather than of
    /// the op's semantics, stated here so that adding such an op is one row of this file and
    /// its arm in `lowering::kernels::expr` (docs/add-an-op.md).
    pub fn fast_elementwise(self) -> bool {
        use Op::*;
        matches!(
            self,
            Abs | Neg
                | Relu
                | Gelu
                | Sigmoid
                | Tanh
                | Exp
                | Expm1
                | Log
                | Log1p
                | Log2
                | Log10
                | Sqrt
                | Rsqrt
                | Reciprocal
                | Erf
                | Sin
                | Cos
                | Tan
                | Sinh
                | Cosh
                | Asin
                | Acos
                | Atan
                | Asinh
                | Acosh
                | Atanh
                | Ceil
                | Floor
                | Round
                | Trunc
                | Sign
                | LeakyRelu
                | Elu
                | Hardtanh
                | Clamp
                | AddScalar
                | SubScalar
                | MulScalar
                | DivScalar
                | PowTensorScalar
                | EqScalar
                | NeScalar
                | LtScalar
                | LeScalar
                | GtScalar
                | GeScalar
                | LogicalNot
                | BitwiseNot
                | Isnan
                | Isinf
                | AddTensor
                | SubTensor
                | MulTensor
                | DivTensor
                | Maximum
                | Minimum
                | EqTensor
                | NeTensor
                | LtTensor
                | LeTensor
                | GtTensor
                | GeTensor
                | LogicalAnd
                | LogicalOr
                | ToCopy
                | WhereSelf
                | ClampTensor
                | PowTensorTensor
                | PowScalar
                | Atan2
                | FmodTensor
                | FmodScalar
                | RemainderTensor
                | RemainderScalar
                | BitwiseAndTensor
                | BitwiseAndScalar
                | BitwiseOrTensor
                | BitwiseOrScalar
                | BitwiseXorTensor
                | BitwiseXorScalar
                | DivTensorMode
                | DivScalarMode
                | LogicalXor
                | NativeBatchNormLegitNoTraining
                | Full
                | FullLike
                | ScalarTensor
                | ArangeStartStep
                | FillScalar
        )
    }

    /// Estimated floating-point operations per result element of an elementwise op (1 for
    /// arithmetic, more for divisions, roots and transcendental functions): the e-graph's and
    /// the fusion planner's cost weight.
    pub fn cost_weight(self) -> f64 {
        use Op::*;
        match self {
            Exp | Expm1 | Log | Log1p | Log2 | Log10 | Tanh | Sigmoid | Erf | Sin | Cos | Tan
            | Asin | Acos | Atan | Atan2 | Sinh | Cosh | Asinh | Acosh | Atanh | Gelu | Elu => 8.0,
            PowTensorScalar | PowTensorTensor | PowScalar => 16.0,
            Sqrt | Rsqrt | Reciprocal | DivTensor | DivScalar | DivTensorMode | DivScalarMode => {
                4.0
            }
            _ => 1.0,
        }
    }

    /// Moves no data at all: the result is the operand under another shape or broadcast
    /// ([`ViewKind::Reshape`] and [`ViewKind::Broadcast`]).
    pub fn is_view(self) -> bool {
        matches!(
            self.kind(),
            OpKind::View(ViewKind::Reshape | ViewKind::Broadcast)
        )
    }

    /// A view a matmul reads through in place: metadata-only views, strided windows and
    /// copies.
    pub fn is_strided_view(self) -> bool {
        matches!(
            self.kind(),
            OpKind::View(
                ViewKind::Reshape | ViewKind::Broadcast | ViewKind::Strided | ViewKind::Copy
            )
        )
    }

    /// Not a function of its arguments alone (random, or unspecified values): never merged by
    /// CSE, folded, or duplicated.
    pub fn is_random(self) -> bool {
        self.purity() != Purity::Pure
    }

    /// An elementwise op of one tensor operand, its first parameter (`self`), that the
    /// expression engine computes: the e-graph's layout rules move these across permutes
    /// (`pow.Scalar`, whose tensor is its second parameter, is not one).
    pub fn is_unary_elementwise(self) -> bool {
        self.kind() == OpKind::Elementwise { arity: 1 }
            && self.fast_elementwise()
            && self
                .info()
                .params
                .first()
                .is_some_and(|p| p.kind == crate::ParamKind::Tensor)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::OPS;

    #[test]
    fn every_fast_elementwise_op_is_elementwise_or_creation() {
        for info in OPS {
            if info.op.fast_elementwise() {
                assert!(
                    matches!(
                        info.op.kind(),
                        OpKind::Elementwise { .. } | OpKind::Creation
                    ),
                    "{}: fast elementwise but {:?}",
                    info.aten,
                    info.op.kind()
                );
            }
        }
    }

    #[test]
    fn views_have_one_result_and_random_ops_are_creation_or_other() {
        for info in OPS {
            if let OpKind::View(_) = info.op.kind() {
                assert_eq!(info.results, crate::Results::Fixed(1), "{}", info.aten);
            }
            if info.op.is_random() {
                assert!(
                    matches!(info.op.kind(), OpKind::Creation | OpKind::Other),
                    "{}",
                    info.aten
                );
            }
        }
    }

    #[test]
    fn elementwise_arity_counts_tensor_params() {
        use crate::ParamKind;
        for info in OPS {
            if let OpKind::Elementwise { arity } = info.op.kind() {
                let tensors = info
                    .params
                    .iter()
                    .filter(|p| matches!(p.kind, ParamKind::Tensor | ParamKind::OptTensor))
                    .count();
                assert!(
                    tensors >= arity as usize,
                    "{}: arity {arity} but {tensors} tensor parameters",
                    info.aten
                );
            }
        }
    }
}

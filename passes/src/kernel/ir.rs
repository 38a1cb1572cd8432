//! The kernel IR: what every backend prints from.
//!
//! A [`Program`] is the lowered form of a whole graph: the buffers it touches and the steps
//! that run in order (fused [`Kernel`]s and library [`Gemm`] calls). Backends (LLVM for the
//! host, CUDA C, LLVM NVPTX) print kernels from this IR and never re-derive fusion or indexing.
//!
//! # A kernel
//!
//! A kernel runs a parallel loop nest over its **outer** dims (the launch domain: chunks of
//! the flattened outer index space on CPU threads, blocks/threads on a GPU). Inside one outer
//! index it runs its [`Stage`]s in order. Each stage loops sequentially over its own **inner** dims (row-major) and
//! evaluates a scalar SSA body ([`Inst`]s); a stage either
//! - **reduces** one body value over the inner loop with a [`Combiner`] into an accumulator of
//!   `acc` dtype; the result is a value visible to every later stage (loop-invariant there), or
//! - **stores** body values into output buffers.
//!
//! An elementwise kernel has every dim outer and one store stage with no inner dims. A row
//! kernel (softmax) over `[rows, n]` reducing axis 1 has `outer = [rows]` and stages
//! `max over [n]`, `sum over [n]`, `store over [n]`. A column reduction has the kept dims outer
//! and the reduced dims inner. Each output element is computed by exactly one outer index, and
//! inner loops are sequential, so results do not depend on how the outer loop is split.
//!
//! # Values and types
//!
//! SSA values ([`ValueId`]) are numbered per kernel; a value is defined once, by one `Inst` of
//! one stage's body (or as a stage's reduction result), and used only later in the same stage
//! or, for reduction results, in later stages. Every value has a dtype: an IR [`DType`] for
//! data, or [`Ty::Index`] for index arithmetic (`index_width` bits, signed). Data semantics are
//! the reference interpreter's: f16/bf16 ops compute in f32 and round to the storage type
//! after every op; integer arithmetic wraps; casts follow `smelt_ir::interp`.
//!
//! # Addressing
//!
//! Buffers are dense, typed, element-indexed. A [`Load`](InstOp::Load) or [`Store`] addresses a
//! buffer through an [`Access`]: either affine in the loop variables (`offset + Σ stride_d ·
//! var_d`, strides may be 0 for broadcasts) or an index value computed in the body (div/mod
//! arithmetic of non-strided views, gathered indices). Affine accesses are what backends
//! vectorise. `index_width` is 64 when any buffer's byte size can exceed `2^31 - 1`, else 32.

use smelt_ir::{BinaryOp, DType, HostTensor, NodeId, Scalar, UnaryOp};

/// A buffer of a [`Program`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BufferId(pub u32);

/// An SSA value of one [`Kernel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub u32);

/// Where a buffer's contents come from.
#[derive(Clone, Debug, PartialEq)]
pub enum BufferKind {
    /// A graph input, bound by name at run time.
    Input(String),
    /// A parameter, bound by name at compile or run time.
    Param(String),
    /// Constant data, known at compile time.
    Constant(HostTensor),
    /// Written by a step of the program. Its storage comes from the memory plan.
    Temp,
}

/// A dense buffer of `numel` elements of `dtype`.
#[derive(Clone, Debug, PartialEq)]
pub struct BufferDecl {
    pub id: BufferId,
    pub dtype: DType,
    pub numel: usize,
    pub kind: BufferKind,
    /// The graph value this buffer holds (for names and debugging).
    pub value: NodeId,
}

/// A lowered graph: buffers, steps in execution order, and which buffer each output is.
#[derive(Clone, Debug, PartialEq)]
pub struct Program {
    pub buffers: Vec<BufferDecl>,
    pub steps: Vec<Step>,
    /// Graph output name → buffer (an output may be an input, param or constant buffer).
    pub outputs: Vec<(String, BufferId)>,
}

impl Program {
    /// The kernel steps, in execution order (the GEMM steps left out).
    pub fn kernels(&self) -> impl Iterator<Item = &Kernel> {
        self.steps.iter().filter_map(|s| match s {
            Step::Kernel(k) => Some(k),
            Step::Gemm(_) => None,
        })
    }

    /// Whether some step provably writes every element of buffer `b`: a GEMM whose result
    /// has `b`'s element count, or a kernel store whose affine access, over the kernel's outer
    /// dims and the stage's inner dims, reaches each index `0..numel` (offset 0, and the
    /// strides of the dims longer than 1 nest densely). A computed-address store proves
    /// nothing. A backend may hand such a buffer out uninitialised before the steps run.
    pub fn writes_every_element(&self, b: BufferId) -> bool {
        let Some(decl) = self.buffers.get(b.0 as usize) else {
            return false;
        };
        self.steps.iter().any(|s| match s {
            Step::Gemm(g) => g.out == b && g.out_shape.iter().product::<usize>() == decl.numel,
            Step::Kernel(k) => k.stages.iter().any(|stage| {
                let StageEffect::Store(stores) = &stage.effect else {
                    return false;
                };
                let extents: Vec<usize> = k.outer.iter().chain(&stage.inner).copied().collect();
                stores.iter().any(|st| {
                    st.buffer == b
                        && matches!(&st.access, Access::Affine { offset: 0, strides }
                            if covers_densely(strides, &extents, decl.numel))
                })
            }),
        })
    }
}

/// Whether `Σ strides[d] · var_d` over `0 <= var_d < extents[d]` takes every value in
/// `0..numel`: the dims of extent > 1 with a nonzero stride, ordered by stride, nest densely
/// (`1`, then each stride the previous one times its extent) up to `numel`. Dims of extent 1
/// and stride-0 dims (the same elements again) add nothing.
fn covers_densely(strides: &[i64], extents: &[usize], numel: usize) -> bool {
    if strides.len() != extents.len() {
        return false;
    }
    if extents.contains(&0) {
        return numel == 0;
    }
    let mut dims: Vec<(i64, usize)> = strides
        .iter()
        .zip(extents)
        .filter(|&(&s, &e)| e > 1 && s != 0)
        .map(|(&s, &e)| (s, e))
        .collect();
    dims.sort_unstable();
    let mut next: i64 = 1;
    for (s, e) in dims {
        if s != next {
            return false;
        }
        let Some(n) = i64::try_from(e).ok().and_then(|e| s.checked_mul(e)) else {
            return false;
        };
        next = n;
    }
    usize::try_from(next) == Ok(numel)
}

/// One step of a program.
#[derive(Clone, Debug, PartialEq)]
pub enum Step {
    Kernel(Kernel),
    Gemm(Gemm),
}

impl Step {
    /// The buffers the step writes: a kernel's `writes`, a GEMM's `out`.
    pub fn writes(&self) -> &[BufferId] {
        match self {
            Step::Kernel(k) => &k.writes,
            Step::Gemm(g) => std::slice::from_ref(&g.out),
        }
    }
}

/// Index arithmetic width.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum IndexWidth {
    I32,
    I64,
}

/// The type of an SSA value.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Ty {
    Data(DType),
    /// A signed integer of the kernel's `index_width`.
    Index,
}

/// A buffer address: affine in the loop variables, or computed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Access {
    /// `offset + Σ strides[d] * var_d` over the stage's loop variables (outer dims first, then
    /// the stage's inner dims); `strides.len()` equals the number of loop variables.
    Affine { offset: i64, strides: Vec<i64> },
    /// An element index computed in the body (a value of type [`Ty::Index`]).
    Computed(ValueId),
}

/// How a reduction stage combines values.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Combiner {
    Sum,
    Prod,
    /// NaN-propagating maximum.
    Max,
    /// NaN-propagating minimum.
    Min,
    /// Index (row-major over the stage's inner dims, as i64) of the first maximum; NaN counts as
    /// the maximum (the first NaN wins).
    ArgMax,
    /// As [`Combiner::ArgMax`] for the minimum.
    ArgMin,
}

/// One SSA instruction; it defines `dst` of type `ty`.
#[derive(Clone, Debug, PartialEq)]
pub struct Inst {
    pub dst: ValueId,
    pub ty: Ty,
    pub op: InstOp,
}

/// What an instruction computes.
#[derive(Clone, Debug, PartialEq)]
pub enum InstOp {
    /// The loop variable `d` (outer dims first, then the current stage's inner dims).
    LoopVar(usize),
    /// An index constant.
    IndexConst(i64),
    /// Index arithmetic on index values: `a + b`, `a * b`, `a / b`, `a % b` (operands are
    /// non-negative, so floor and truncation agree).
    IndexAdd(ValueId, ValueId),
    IndexMul(ValueId, ValueId),
    IndexDiv(ValueId, ValueId),
    IndexRem(ValueId, ValueId),
    /// `a < b` on index values, giving a bool.
    IndexLt(ValueId, ValueId),
    /// An integer data value (i32/i64) converted to an index.
    ToIndex(ValueId),
    /// A data constant.
    Const(Scalar),
    /// Reads one element.
    Load {
        buffer: BufferId,
        access: Access,
    },
    Unary(UnaryOp, ValueId),
    Binary(BinaryOp, ValueId, ValueId),
    /// `cond ? a : b` (`cond` is bool); also selects between index values.
    Select(ValueId, ValueId, ValueId),
    /// A dtype conversion with the interpreter's cast semantics.
    Cast(ValueId),
}

/// A write of `value` to one element of `buffer`.
#[derive(Clone, Debug, PartialEq)]
pub struct Store {
    pub buffer: BufferId,
    pub access: Access,
    pub value: ValueId,
}

/// What a stage does with its body.
#[derive(Clone, Debug, PartialEq)]
pub enum StageEffect {
    /// Combine `value` (which already has dtype `acc`; for arg reductions `acc` is the
    /// value's dtype) over the inner loop; `result` (of type `acc`, or i64 for arg reductions)
    /// is defined after the loop. The accumulator starts at the combiner's
    /// identity (0, 1, -inf, +inf; the first element for arg reductions).
    Reduce {
        value: ValueId,
        combiner: Combiner,
        acc: DType,
        result: ValueId,
    },
    /// Write values.
    Store(Vec<Store>),
}

/// One stage of a kernel: a sequential loop nest over `inner` inside the outer index.
#[derive(Clone, Debug, PartialEq)]
pub struct Stage {
    pub inner: Vec<usize>,
    pub body: Vec<Inst>,
    pub effect: StageEffect,
}

/// One fused kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct Kernel {
    /// A C identifier naming the kernel and its main ops, e.g. `k3_softmax_max_exp_sum_div`.
    pub name: String,
    /// The graph ops it computes, for the comment header of generated code.
    pub origin: Vec<(NodeId, &'static str)>,
    /// Buffers read, in parameter order.
    pub reads: Vec<BufferId>,
    /// Buffers written, in parameter order (after the reads).
    pub writes: Vec<BufferId>,
    pub index_width: IndexWidth,
    /// The parallel loop dims.
    pub outer: Vec<usize>,
    pub stages: Vec<Stage>,
}

/// A matrix operand of a [`Gemm`]: `buffer` read as a tensor of `shape` through `strides` and
/// `offset` (a transposed operand is just swapped strides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GemmOperand {
    pub buffer: BufferId,
    pub shape: Vec<usize>,
    pub strides: Vec<usize>,
    pub offset: usize,
}

/// A batched matrix multiply with `torch.matmul` semantics on strided operands, written
/// contiguous into `out` (whose shape is the matmul's result shape).
#[derive(Clone, Debug, PartialEq)]
pub struct Gemm {
    pub name: String,
    pub origin: Vec<(NodeId, &'static str)>,
    pub dtype: DType,
    pub a: GemmOperand,
    pub b: GemmOperand,
    pub out: BufferId,
    pub out_shape: Vec<usize>,
}

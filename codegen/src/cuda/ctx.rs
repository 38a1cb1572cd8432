//! What every kernel printer shares: C types, parameters, constants and value types.

use smelt_ir::{DType, Scalar};
use smelt_passes::kernel::{
    Access, BufferId, IndexWidth, InstOp, Kernel, StageEffect, Ty, ValueId,
};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;

/// The register (compute) C type of a data dtype: f16/bf16 values live in `float`.
pub(super) fn compute_type(d: DType) -> &'static str {
    match d {
        DType::Bool => "bool",
        DType::I32 => "int",
        DType::I64 => "long long",
        DType::F16 | DType::BF16 | DType::F32 => "float",
        DType::F64 => "double",
    }
}

/// The in-memory C type of a buffer element (bool is a byte, read as `!= 0`).
pub(super) fn storage_type(d: DType) -> &'static str {
    match d {
        DType::Bool => "unsigned char",
        DType::F16 => "__half",
        DType::BF16 => "__nv_bfloat16",
        other => compute_type(other),
    }
}

/// A storage element `e` of dtype `d` as a compute value.
pub(super) fn load_conv(d: DType, e: &str) -> String {
    match d {
        DType::Bool => format!("({e} != 0)"),
        DType::F16 => format!("__half2float({e})"),
        DType::BF16 => format!("__bfloat162float({e})"),
        _ => e.to_string(),
    }
}

/// A compute value `v` of dtype `d` as a storage element (f16/bf16 values are already rounded,
/// so the conversion is exact).
pub(super) fn store_conv(d: DType, v: &str) -> String {
    match d {
        DType::Bool => format!("(unsigned char){v}"),
        DType::F16 => format!("__float2half_rn({v})"),
        DType::BF16 => format!("__float2bfloat16_rn({v})"),
        _ => v.to_string(),
    }
}

/// `expr` rounded to the storage precision of `d` (only f16/bf16 need it).
pub(super) fn round(d: DType, expr: String) -> String {
    match d {
        DType::F16 => format!("sm_rf16({expr})"),
        DType::BF16 => format!("sm_rbf16({expr})"),
        _ => expr,
    }
}

/// A C literal of an f32 value (exact: shortest round-trip digits, specials by bit pattern).
pub(super) fn f32_lit(x: f32) -> String {
    if x.is_finite() {
        format!("{x:?}f")
    } else {
        format!("__int_as_float(0x{:08x})", x.to_bits())
    }
}

/// A C literal of an f64 value.
pub(super) fn f64_lit(x: f64) -> String {
    if x.is_finite() {
        format!("{x:?}")
    } else {
        format!("__longlong_as_double(0x{:016x}LL)", x.to_bits())
    }
}

/// A C literal of an integer of C type `int` (`wide` false) or `long long`.
pub(super) fn int_lit(x: i64, wide: bool) -> String {
    match (wide, x) {
        (true, i64::MIN) => "(-9223372036854775807LL - 1)".into(),
        (true, x) if i32::try_from(x).is_ok() => {
            if x < 0 {
                format!("({x}LL)")
            } else {
                format!("{x}LL")
            }
        }
        (true, x) if x < 0 => format!("({x}LL)"),
        (true, x) => format!("{x}LL"),
        (false, x) if x as i32 == i32::MIN => "(-2147483647 - 1)".into(),
        (false, x) if (x as i32) < 0 => format!("({})", x as i32),
        (false, x) => format!("{}", x as i32),
    }
}

/// A constant of dtype `d` holding `s` converted like a cast (the interpreter's rules).
pub(super) fn const_lit(d: DType, s: Scalar) -> String {
    match d {
        DType::Bool => match s {
            Scalar::Bool(b) => b.to_string(),
            Scalar::Int(i) => (i != 0).to_string(),
            Scalar::Float(x) => (x != 0.0).to_string(),
        },
        DType::I32 => int_lit(s.as_i64() as i32 as i64, false),
        DType::I64 => int_lit(s.as_i64(), true),
        DType::F32 => f32_lit(scalar_f32(s)),
        DType::F16 | DType::BF16 => round(d, f32_lit(scalar_f32(s))),
        DType::F64 => f64_lit(s.as_f64()),
    }
}

fn scalar_f32(s: Scalar) -> f32 {
    match s {
        Scalar::Bool(b) => b as u8 as f32,
        Scalar::Int(i) => i as f32,
        Scalar::Float(x) => x as f32,
    }
}

/// Per-kernel facts the printers share.
pub(super) struct Ctx<'k> {
    pub k: &'k Kernel,
    /// `int` or `long long`.
    pub idx: &'static str,
    pub wide: bool,
    types: HashMap<ValueId, Ty>,
    /// Each buffer's dtype, from its loads and stores (or the program's declaration).
    pub dtypes: BTreeMap<BufferId, DType>,
    /// The parameter a buffer is read through / written through.
    pub read_param: BTreeMap<BufferId, String>,
    pub write_param: BTreeMap<BufferId, String>,
    /// Problems with the kernel IR, printed as `#error` lines so NVRTC refuses the source.
    pub errors: Vec<String>,
    /// A loop variable printed under another name (the vectorised loop's lane variable).
    pub rename: Option<(usize, String)>,
    /// Each declared buffer's element count (unknown for a kernel printed on its own).
    numel: BTreeMap<BufferId, u64>,
    /// Whether an access through a computed index was printed (range-checked, see
    /// [`Ctx::checked_load`]): the translation unit then defines the status word.
    pub checked: bool,
}

impl<'k> Ctx<'k> {
    pub fn new(k: &'k Kernel, declared: &dyn Fn(BufferId) -> Option<(DType, usize)>) -> Ctx<'k> {
        let wide = k.index_width == IndexWidth::I64;
        let mut types = HashMap::new();
        let mut dtypes = BTreeMap::new();
        let mut store_values = Vec::new();
        for stage in &k.stages {
            for inst in &stage.body {
                types.insert(inst.dst, inst.ty);
                if let (InstOp::Load { buffer, .. }, Ty::Data(d)) = (&inst.op, inst.ty) {
                    dtypes.entry(*buffer).or_insert(d);
                }
            }
            match &stage.effect {
                StageEffect::Reduce {
                    combiner,
                    acc,
                    result,
                    ..
                } => {
                    let ty = if is_arg(*combiner) { DType::I64 } else { *acc };
                    types.insert(*result, Ty::Data(ty));
                }
                StageEffect::Store(stores) => {
                    store_values.extend(stores.iter().map(|s| (s.buffer, s.value)))
                }
            }
        }
        for (buffer, value) in store_values {
            if let Some(Ty::Data(d)) = types.get(&value) {
                dtypes.entry(buffer).or_insert(*d);
            }
        }
        let mut errors = Vec::new();
        let mut numel = BTreeMap::new();
        for &b in k.reads.iter().chain(&k.writes) {
            let decl = declared(b);
            if let Some((_, n)) = decl {
                numel.insert(b, n as u64);
            }
            if let std::collections::btree_map::Entry::Vacant(e) = dtypes.entry(b) {
                match decl {
                    Some((d, _)) => {
                        e.insert(d);
                    }
                    None => errors.push(format!("the type of buffer b{} is unknown", b.0)),
                }
            }
        }
        let mut read_param = BTreeMap::new();
        for (i, b) in k.reads.iter().enumerate() {
            read_param.entry(*b).or_insert_with(|| format!("in{i}"));
        }
        let mut write_param = BTreeMap::new();
        for (i, b) in k.writes.iter().enumerate() {
            write_param.entry(*b).or_insert_with(|| format!("out{i}"));
        }
        Ctx {
            k,
            idx: if wide { "long long" } else { "int" },
            wide,
            types,
            dtypes,
            read_param,
            write_param,
            errors,
            rename: None,
            numel,
            checked: false,
        }
    }

    /// The element count bound of a computed index into `b`, as a `long long` literal: its
    /// declared length, or the largest `long long` when undeclared (then only negative
    /// indices, the lowering's mark for an out-of-range gather, are caught).
    fn bound(&self, b: BufferId) -> String {
        match self.numel.get(&b) {
            Some(&n) => format!("{n}LL"),
            None => "0x7fffffffffffffffLL".to_string(),
        }
    }

    /// Element `a` of `param` (buffer `b`) as a storage value: a plain subscript for an
    /// affine access (in range by construction), else `sm_gather`, which reads 0 and records
    /// the fault in the status word when the computed index is outside the buffer.
    pub fn checked_load(&mut self, param: &str, b: BufferId, a: &Access) -> String {
        let addr = self.address(a);
        match a {
            Access::Affine { .. } => format!("{param}[{addr}]"),
            Access::Computed(_) => {
                self.checked = true;
                format!("sm_gather({param}, {addr}, {})", self.bound(b))
            }
        }
    }

    /// The statement storing `value` into element `a` of `param` (buffer `b`), guarded like
    /// [`Ctx::checked_load`]: skipped, with the fault recorded, when a computed index is
    /// outside the buffer.
    pub fn checked_store(&mut self, param: &str, b: BufferId, a: &Access, value: &str) -> String {
        let addr = self.address(a);
        let stmt = format!("{param}[{addr}] = {value};");
        match a {
            Access::Affine { .. } => stmt,
            Access::Computed(_) => {
                self.checked = true;
                format!("if (sm_in_range({addr}, {})) {stmt}", self.bound(b))
            }
        }
    }

    /// The C name of loop variable `d`.
    pub fn var(&self, d: usize) -> String {
        match &self.rename {
            Some((r, name)) if *r == d => name.clone(),
            _ => format!("x{d}"),
        }
    }

    /// The type of value `v` (index if unknown, which the verifier rules out).
    pub fn ty(&mut self, v: ValueId) -> Ty {
        match self.types.get(&v) {
            Some(t) => *t,
            None => {
                self.errors
                    .push(format!("value v{} is used but never defined", v.0));
                Ty::Index
            }
        }
    }

    /// The compute C type of value `v`.
    pub fn value_ctype(&mut self, v: ValueId) -> &'static str {
        let t = self.ty(v);
        self.ctype(t)
    }

    pub fn ctype(&self, t: Ty) -> &'static str {
        match t {
            Ty::Data(d) => compute_type(d),
            Ty::Index => self.idx,
        }
    }

    /// Whether any buffer of the kernel is f16 / bf16 (the prelude then includes the header).
    pub fn uses(&self, d: DType) -> bool {
        self.dtypes.values().any(|&x| x == d)
            || self.types.values().any(|&t| t == Ty::Data(d))
            || self
                .k
                .stages
                .iter()
                .any(|s| matches!(s.effect, StageEffect::Reduce { acc, .. } if acc == d))
    }

    /// The C parameter list.
    pub fn params(&self) -> String {
        let both = |b: &BufferId| self.k.reads.contains(b) && self.k.writes.contains(b);
        let mut out = String::new();
        for (i, b) in self.k.reads.iter().enumerate() {
            let restrict = if both(b) { "" } else { " __restrict__" };
            let _ = writeln!(
                out,
                "    const {}*{restrict} in{i}, // b{}",
                storage_type(self.dtype(*b)),
                b.0
            );
        }
        for (i, b) in self.k.writes.iter().enumerate() {
            let restrict = if both(b) { "" } else { " __restrict__" };
            let _ = writeln!(
                out,
                "    {}*{restrict} out{i}, // b{}",
                storage_type(self.dtype(*b)),
                b.0
            );
        }
        out.push_str("    long long n)");
        out
    }

    pub fn dtype(&self, b: BufferId) -> DType {
        self.dtypes.get(&b).copied().unwrap_or(DType::Bool)
    }

    /// The element index of an access, as a C expression of the index type.
    pub fn address(&mut self, a: &Access) -> String {
        match a {
            Access::Computed(v) => format!("v{}", v.0),
            Access::Affine { offset, strides } => {
                let mut terms: Vec<String> = Vec::new();
                for (d, &s) in strides.iter().enumerate() {
                    match s {
                        0 => {}
                        1 => terms.push(self.var(d)),
                        s => terms.push(format!("{} * {}", self.var(d), self.index_lit(s))),
                    }
                }
                if *offset != 0 || terms.is_empty() {
                    terms.push(self.index_lit(*offset));
                }
                terms.join(" + ")
            }
        }
    }

    pub fn index_lit(&self, x: i64) -> String {
        if self.wide {
            int_lit(x, true)
        } else {
            int_lit(x, false)
        }
    }

    /// The `#error` block for a malformed kernel, or nothing.
    pub fn error_lines(&self) -> String {
        self.errors
            .iter()
            .map(|e| format!("#error \"smelt: kernel {}: {}\"\n", self.k.name, e))
            .collect()
    }
}

pub(super) fn is_arg(c: smelt_passes::kernel::Combiner) -> bool {
    use smelt_passes::kernel::Combiner;
    matches!(c, Combiner::ArgMax | Combiner::ArgMin)
}

/// Loop variable names: `x{d}` for dim `d` (outer dims first, then the stage's inner dims).
/// Emits the decomposition of the flat row-major index `flat` over `dims` into `x{first}..`.
pub(super) fn decompose(
    out: &mut String,
    ind: &str,
    idx: &str,
    flat: &str,
    dims: &[usize],
    first: usize,
) {
    let mut below: u128 = 1;
    let mut lines = Vec::new();
    for (i, &d) in dims.iter().enumerate().rev() {
        let var = format!("x{}", first + i);
        let expr = if d == 1 {
            "0".to_string()
        } else if i == 0 && below == 1 {
            flat.to_string()
        } else if i == 0 {
            format!("{flat} / {below}")
        } else if below == 1 {
            format!("{flat} % {d}")
        } else {
            format!("{flat} / {below} % {d}")
        };
        lines.push(format!("{ind}const {idx} {var} = {expr};\n"));
        below = below.saturating_mul(d as u128);
    }
    for l in lines.into_iter().rev() {
        out.push_str(&l);
    }
}

/// The number of elements of `dims` (saturating: sizes are verified upstream).
pub(super) fn numel(dims: &[usize]) -> u64 {
    dims.iter().fold(1u64, |a, &d| a.saturating_mul(d as u64))
}

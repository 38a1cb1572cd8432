//! The inkwell half of [`super`]: the module (CPU bodies + PTX entries), the math and `frem`
//! rewrites, libdevice, the pipeline and PTX emission.

use super::{launch_for, NvptxIr, NvptxOptions, PtxEntry, PtxModule, BLOCK, STATUS_SYMBOL};
use crate::llvm::diagnostics::Diagnostics;
use crate::llvm::error::{LlvmError, Result};
use crate::llvm::kernel::{build_kernel, kernel_extent, KernelOptions};
use crate::llvm::options::{MathMode, OptLevel};
use crate::llvm::target::llvm_opt_level;
use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{
    CodeModel, FileType, InitializationConfig, RelocMode, Target, TargetMachine, TargetTriple,
};
use inkwell::types::{BasicMetadataTypeEnum, FunctionType};
use inkwell::values::{
    BasicValue, BasicValueEnum, FunctionValue, InstructionOpcode, InstructionValue,
};
use inkwell::{AddressSpace, IntPredicate};
use smelt_passes::kernel::{BufferDecl, Kernel};
use std::collections::BTreeMap;
use std::sync::OnceLock;

const TRIPLE: &str = "nvptx64-nvidia-cuda";
/// PTX ISA 7.5, the newest LLVM 14 writes (needed for sm_86; ptxas 11.5+ reads it).
const FEATURES: &str = "+ptx75";
/// `llvm.<base>.*` intrinsics NVPTX cannot select without fast-math: mapped to libdevice.
const MATH_INTRINSICS: [&str; 10] = [
    "exp", "exp2", "exp10", "log", "log2", "log10", "sin", "cos", "pow", "powi",
];

fn nvptx_err(message: impl std::fmt::Display) -> LlvmError {
    LlvmError::Nvptx {
        message: message.to_string(),
    }
}

fn init() {
    static INIT: OnceLock<()> = OnceLock::new();
    INIT.get_or_init(|| {
        // LLVM's target registry is not synchronised: let the host target's one-time
        // initialisation finish first, so the two never register concurrently.
        let _ = crate::llvm::target::init_native();
        Target::initialize_nvptx(&InitializationConfig::default())
    });
}

fn machine(target: &str, opt: OptLevel) -> Result<TargetMachine> {
    init();
    let triple = TargetTriple::create(TRIPLE);
    let fail = |message: String| LlvmError::TargetMachine {
        triple: TRIPLE.to_string(),
        cpu: target.to_string(),
        features: FEATURES.to_string(),
        message,
    };
    let t = Target::from_triple(&triple).map_err(|e| fail(e.to_string()))?;
    t.create_target_machine(
        &triple,
        target,
        FEATURES,
        llvm_opt_level(opt),
        RelocMode::Default,
        CodeModel::Default,
    )
    .ok_or_else(|| fail("LLVMCreateTargetMachine returned null".into()))
}

/// The module with every kernel's CPU body wrapped in a PTX entry, before any rewrite.
struct Built<'ctx> {
    module: Module<'ctx>,
    entries: Vec<PtxEntry>,
    /// (entry name, body function) per kernel.
    bodies: Vec<(String, FunctionValue<'ctx>)>,
}

fn build<'ctx>(
    ctx: &'ctx Context,
    kernels: &[&Kernel],
    names: &[String],
    buffers: &[BufferDecl],
    machine: &TargetMachine,
    math: MathMode,
) -> Result<Built<'ctx>> {
    let module = ctx.create_module("smelt_ptx");
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let i32t = ctx.i32_type();
    let i64t = ctx.i64_type();
    let generic = AddressSpace::default();
    let status = module.add_global(i32t, Some(AddressSpace::from(1u16)), STATUS_SYMBOL);
    status.set_initializer(&i32t.const_zero());
    status.set_alignment(4);
    let status_ptr = status
        .as_pointer_value()
        .const_address_space_cast(i32t.ptr_type(generic));
    let sreg = |name: &str| {
        let full = format!("llvm.nvvm.read.ptx.sreg.{name}");
        module
            .get_function(&full)
            .unwrap_or_else(|| module.add_function(&full, i32t.fn_type(&[], false), None))
    };
    let (tid, ntid, ctaid, nctaid) = (
        sreg("tid.x"),
        sreg("ntid.x"),
        sreg("ctaid.x"),
        sreg("nctaid.x"),
    );
    let mut entries = Vec::new();
    let mut bodies = Vec::new();
    for (k, entry) in kernels.iter().zip(names) {
        let unsupported = |op: &str, reason: &str| LlvmError::Unsupported {
            kernel: entry.clone(),
            op: op.to_string(),
            reason: reason.to_string(),
        };
        let extent = kernel_extent(k)
            .ok_or_else(|| unsupported("its outer dims", "their product overflows i64"))?;
        // The CPU code generator, unchanged: `<cpu>(i8**, i64, i64)` and `<cpu>.body(..)`.
        let cpu = format!("{entry}.cpu");
        let body = KernelOptions {
            math,
            ..KernelOptions::default()
        };
        build_kernel(ctx, &module, k, buffers, &cpu, &body)?;
        let wrapper = module
            .get_function(&cpu)
            .ok_or_else(|| nvptx_err(format!("the CPU generator defined no {cpu}")))?;
        // SAFETY: `wrapper` is the CPU entry point just built; nothing in the module calls it
        // (only the host runtime would), so deleting it leaves no dangling use.
        unsafe { wrapper.delete() };
        let body = module
            .get_function(&format!("{cpu}.body"))
            .ok_or_else(|| nvptx_err(format!("the CPU generator defined no {cpu}.body")))?;
        let body_params = body.get_type().get_param_types();
        let n_buffers = k.reads.len() + k.writes.len();
        if body_params.len() != n_buffers + 3 {
            return Err(nvptx_err(format!(
                "{cpu}.body has {} parameters, expected {} buffers + status, start, end",
                body_params.len(),
                n_buffers
            )));
        }
        let mut params: Vec<BasicMetadataTypeEnum> = body_params[..n_buffers].to_vec();
        params.push(i64t.into());
        let f = module.add_function(entry, ctx.void_type().fn_type(&params, false), None);
        if f.get_name().to_bytes() != entry.as_bytes() {
            return Err(unsupported(
                "its name",
                "it clashes with another symbol of the module",
            ));
        }
        let b = ctx.create_builder();
        let (start, lp, done) = (
            ctx.append_basic_block(f, "entry"),
            ctx.append_basic_block(f, "loop"),
            ctx.append_basic_block(f, "done"),
        );
        b.position_at_end(start);
        let read = |func: FunctionValue<'ctx>, name: &str| -> Result<_> {
            let v = b
                .build_call(func, &[], name)?
                .try_as_basic_value()
                .basic()
                .ok_or_else(|| nvptx_err("a special register read returns nothing"))?;
            Ok(b.build_int_z_extend(v.into_int_value(), i64t, name)?)
        };
        let (t, nt, c, nc) = (
            read(tid, "tid")?,
            read(ntid, "ntid")?,
            read(ctaid, "ctaid")?,
            read(nctaid, "nctaid")?,
        );
        let i0 = b.build_int_nuw_add(b.build_int_nuw_mul(c, nt, "base")?, t, "i0")?;
        let stride = b.build_int_nuw_mul(nc, nt, "stride")?;
        let n = f
            .get_nth_param(n_buffers as u32)
            .ok_or_else(|| nvptx_err("entry has no n"))?
            .into_int_value();
        let ext = i64t.const_int(extent as u64, true);
        let small = b.build_int_compare(IntPredicate::SLT, n, ext, "small")?;
        let n = b.build_select(small, n, ext, "n")?.into_int_value();
        let any = b.build_int_compare(IntPredicate::SLT, i0, n, "any")?;
        b.build_conditional_branch(any, lp, done)?;
        b.position_at_end(lp);
        let i = b.build_phi(i64t, "i")?;
        i.add_incoming(&[(&i0, start)]);
        let iv = i.as_basic_value().into_int_value();
        let next1 = b.build_int_nsw_add(iv, i64t.const_int(1, false), "i1")?;
        let mut args: Vec<inkwell::values::BasicMetadataValueEnum> = Vec::new();
        for p in 0..n_buffers as u32 {
            args.push(
                f.get_nth_param(p)
                    .ok_or_else(|| nvptx_err("entry parameter missing"))?
                    .into(),
            );
        }
        args.extend::<[inkwell::values::BasicMetadataValueEnum; 3]>([
            status_ptr.into(),
            iv.into(),
            next1.into(),
        ]);
        b.build_call(body, &args, "")?;
        let next = b.build_int_add(iv, stride, "next")?;
        i.add_incoming(&[(&next, lp)]);
        let more = b.build_int_compare(IntPredicate::SLT, next, n, "more")?;
        b.build_conditional_branch(more, lp, done)?;
        b.position_at_end(done);
        b.build_return(None)?;
        for (key, value) in [("kernel", 1), ("maxntidx", u64::from(BLOCK))] {
            let md = ctx.metadata_node(&[
                f.as_global_value().as_pointer_value().into(),
                ctx.metadata_string(key).into(),
                i32t.const_int(value, false).into(),
            ]);
            module
                .add_global_metadata("nvvm.annotations", &md)
                .map_err(|e| nvptx_err(format!("nvvm.annotations: {e}")))?;
        }
        entries.push(PtxEntry {
            name: entry.clone(),
            launch: launch_for(extent),
            extent,
            buffers: n_buffers,
        });
        bodies.push((entry.clone(), body));
    }
    Ok(Built {
        module,
        entries,
        bodies,
    })
}

/// The libdevice function replacing a call to `callee`, if it needs one: libm names map to
/// `__nv_<name>`, math intrinsics `llvm.<base>.f32`/`.f64` to `__nv_<base>f`/`__nv_<base>`.
fn libdevice_name(callee: &str) -> Option<std::result::Result<String, String>> {
    let Some(rest) = callee.strip_prefix("llvm.") else {
        return Some(Ok(format!("__nv_{callee}")));
    };
    let mut parts = rest.split('.');
    let base = parts.next()?;
    if !MATH_INTRINSICS.contains(&base) {
        return None;
    }
    Some(match parts.next() {
        Some("f32") => Ok(format!("__nv_{base}f")),
        Some("f64") => Ok(format!("__nv_{base}")),
        other => Err(format!(
            "{callee}: no libdevice function for type {other:?}"
        )),
    })
}

/// libdevice, parsed on first need, and the `__nv_*` functions declared so far.
struct Math<'ctx, 'o> {
    ctx: &'ctx Context,
    options: &'o NvptxOptions,
    lib: Option<Module<'ctx>>,
}

impl<'ctx> Math<'ctx, '_> {
    /// Declares `nv` of type `ty` in `module` (after checking libdevice defines it so).
    fn declare(
        &mut self,
        module: &Module<'ctx>,
        kernel: &str,
        op: &str,
        nv: &str,
        ty: FunctionType<'ctx>,
    ) -> Result<FunctionValue<'ctx>> {
        let unsupported = |reason: String| LlvmError::Unsupported {
            kernel: kernel.to_string(),
            op: op.to_string(),
            reason,
        };
        if self.lib.is_none() {
            let Some(bytes) = &self.options.libdevice else {
                return Err(unsupported(format!(
                    "the LLVM NVPTX path lowers it to libdevice's {nv}, and no libdevice was \
                     given (NvptxOptions::libdevice; it ships with CUDA as {})",
                    super::LIBDEVICE_RELATIVE
                )));
            };
            let buffer = MemoryBuffer::create_from_memory_range_copy(bytes.bytes(), "libdevice");
            let lib = Module::parse_bitcode_from_buffer(&buffer, self.ctx)
                .map_err(|e| nvptx_err(format!("libdevice does not parse as bitcode: {e}")))?;
            self.lib = Some(lib);
        }
        let lib_fn = self
            .lib
            .as_ref()
            .and_then(|l| l.get_function(nv))
            .filter(|f| f.count_basic_blocks() > 0)
            .ok_or_else(|| unsupported(format!("libdevice defines no {nv}")))?;
        if lib_fn.get_type() != ty {
            return Err(unsupported(format!(
                "libdevice's {nv} has type {}, the call has {}",
                lib_fn.get_type().print_to_string(),
                ty.print_to_string()
            )));
        }
        Ok(module
            .get_function(nv)
            .unwrap_or_else(|| module.add_function(nv, ty, None)))
    }
}

/// Replaces math calls and `frem` in the bodies by libdevice calls (see the module docs).
fn rewrite<'ctx>(built: &Built<'ctx>, math: &mut Math<'ctx, '_>) -> Result<()> {
    let module = &built.module;
    let ctx = math.ctx;
    let mut replace: BTreeMap<String, FunctionValue<'ctx>> = BTreeMap::new();
    for (entry, body) in &built.bodies {
        let mut frems = Vec::new();
        for inst in instructions(*body) {
            match inst.get_opcode() {
                InstructionOpcode::FRem => frems.push(inst),
                InstructionOpcode::Call => {
                    let Ok(call) = inkwell::values::CallSiteValue::try_from(inst) else {
                        continue;
                    };
                    let Some(callee) = call.get_called_fn_value() else {
                        continue;
                    };
                    if callee.count_basic_blocks() > 0 {
                        continue;
                    }
                    let name = callee.get_name().to_string_lossy().into_owned();
                    if replace.contains_key(&name) {
                        continue;
                    }
                    let Some(nv) = libdevice_name(&name) else {
                        continue;
                    };
                    let nv = nv.map_err(|reason| LlvmError::Unsupported {
                        kernel: entry.clone(),
                        op: name.clone(),
                        reason,
                    })?;
                    let f = math.declare(module, entry, &name, &nv, callee.get_type())?;
                    replace.insert(name, f);
                }
                _ => {}
            }
        }
        for inst in frems {
            let operand = |i: u32| -> Result<BasicValueEnum<'ctx>> {
                match inst.get_operand(i) {
                    Some(inkwell::values::Operand::Value(v)) if v.is_float_value() => Ok(v),
                    _ => Err(nvptx_err(format!(
                        "{entry}: frem operand {i} is not a scalar"
                    ))),
                }
            };
            let (x, y) = (operand(0)?, operand(1)?);
            let t = x.into_float_value().get_type();
            let nv = if t == ctx.f32_type() {
                "__nv_fmodf"
            } else if t == ctx.f64_type() {
                "__nv_fmod"
            } else {
                return Err(LlvmError::Unsupported {
                    kernel: entry.clone(),
                    op: "frem".into(),
                    reason: "only f32 and f64 remainders are supported".into(),
                });
            };
            let ty = t.fn_type(&[t.into(), t.into()], false);
            let f = math.declare(module, entry, "float remainder (frem)", nv, ty)?;
            let b = ctx.create_builder();
            b.position_before(&inst);
            let call = b.build_call(f, &[x.into(), y.into()], "")?;
            let new = call
                .try_as_basic_value()
                .basic()
                .and_then(|v| v.as_instruction_value())
                .ok_or_else(|| nvptx_err("a libdevice call returns nothing"))?;
            let name = inst
                .get_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            inst.replace_all_uses_with(&new);
            inst.erase_from_basic_block();
            if !name.is_empty() {
                let _ = new.set_name(&name);
            }
        }
    }
    for (old, new) in replace {
        if let Some(f) = module.get_function(&old) {
            f.replace_all_uses_with(new);
            // SAFETY: every use of the declaration was just replaced, so deleting it leaves no
            // dangling reference.
            unsafe { f.delete() };
        }
    }
    Ok(())
}

fn instructions(f: FunctionValue<'_>) -> Vec<InstructionValue<'_>> {
    let mut out = Vec::new();
    for bb in f.get_basic_blocks() {
        let mut i = bb.get_first_instruction();
        while let Some(inst) = i {
            out.push(inst);
            i = inst.get_next_instruction();
        }
    }
    out
}

/// Links libdevice (if it was needed) and makes everything but the entries and the status word
/// internal, so unused libdevice functions are dropped and used ones inlined.
fn link<'ctx>(
    built: &Built<'ctx>,
    math: &mut Math<'ctx, '_>,
    machine: &TargetMachine,
) -> Result<()> {
    let module = &built.module;
    if let Some(lib) = math.lib.take() {
        lib.set_triple(&machine.get_triple());
        lib.set_data_layout(&machine.get_target_data().get_data_layout());
        module
            .link_in_module(lib)
            .map_err(|e| nvptx_err(format!("linking libdevice: {e}")))?;
    }
    for f in module.get_functions() {
        let name = f.get_name().to_bytes();
        let is_entry = built.entries.iter().any(|e| e.name.as_bytes() == name);
        if f.count_basic_blocks() > 0 && !is_entry {
            f.set_linkage(Linkage::Internal);
        }
    }
    let mut g = module.get_first_global();
    while let Some(global) = g {
        if global.get_name().to_bytes() != STATUS_SYMBOL.as_bytes()
            && global.get_initializer().is_some()
            && global.get_linkage() == Linkage::External
        {
            global.set_linkage(Linkage::Internal);
        }
        g = global.get_next_global();
    }
    Ok(())
}

/// After optimisation: no call may be left to a function without a body, nor to a math
/// intrinsic NVPTX cannot select (the back end would abort or ptxas would reject the PTX).
fn check_resolved(built: &Built<'_>) -> Result<()> {
    for f in built.module.get_functions() {
        let kernel = f.get_name().to_string_lossy().into_owned();
        for inst in instructions(f) {
            let Ok(call) = inkwell::values::CallSiteValue::try_from(inst) else {
                continue;
            };
            let Some(callee) = call.get_called_fn_value() else {
                continue;
            };
            if callee.count_basic_blocks() > 0 {
                continue;
            }
            let name = callee.get_name().to_string_lossy().into_owned();
            let bad = match name.strip_prefix("llvm.") {
                None => true,
                Some(rest) => rest
                    .split('.')
                    .next()
                    .is_some_and(|base| MATH_INTRINSICS.contains(&base)),
            };
            if bad {
                return Err(LlvmError::Unsupported {
                    kernel,
                    op: name,
                    reason: "a call that NVPTX cannot resolve is left after optimisation".into(),
                });
            }
        }
    }
    Ok(())
}

fn verify(module: &Module<'_>, what: &str) -> Result<()> {
    module.verify().map_err(|e| LlvmError::Verify {
        module: format!("smelt_ptx ({what})"),
        message: e.to_string(),
    })
}

pub(super) fn ptx(
    kernels: &[&Kernel],
    names: &[String],
    buffers: &[BufferDecl],
    arch: &str,
    target: &str,
    options: &NvptxOptions,
) -> Result<PtxModule> {
    let machine = machine(target, options.opt_level)?;
    let diagnostics = Diagnostics::default();
    let ctx = Context::create();
    diagnostics.install(&ctx);
    let built = build(&ctx, kernels, names, buffers, &machine, options.math)?;
    let mut math = Math {
        ctx: &ctx,
        options,
        lib: None,
    };
    rewrite(&built, &mut math)?;
    link(&built, &mut math, &machine)?;
    verify(&built.module, "built")?;
    // globaldce first: drops the libdevice functions nothing calls before the pipeline spends
    // time on them.
    let pipeline = format!("globaldce,default<{}>", options.opt_level);
    let pass_options = PassBuilderOptions::create();
    pass_options.set_loop_vectorization(false);
    pass_options.set_loop_slp_vectorization(false);
    pass_options.set_loop_unrolling(options.opt_level > OptLevel::O0);
    built
        .module
        .run_passes(&pipeline, &machine, pass_options)
        .map_err(|e| LlvmError::Optimize {
            module: "smelt_ptx".into(),
            pipeline,
            message: e.to_string(),
        })?;
    verify(&built.module, "optimised")?;
    check_resolved(&built)?;
    let ir = built.module.print_to_string().to_string();
    let buffer = machine
        .write_to_memory_buffer(&built.module, FileType::Assembly)
        .map_err(|e| nvptx_err(format!("emitting PTX: {e}")))?;
    let ptx = String::from_utf8_lossy(buffer.as_slice())
        .trim_end_matches('\0')
        .to_string();
    diagnostics.check("smelt_ptx")?;
    Ok(PtxModule {
        ptx,
        entries: built.entries,
        arch: arch.to_string(),
        target: target.to_string(),
        ir,
    })
}

pub(super) fn ir(
    kernels: &[&Kernel],
    names: &[String],
    buffers: &[BufferDecl],
    target: &str,
    options: &NvptxOptions,
) -> Result<NvptxIr> {
    let machine = machine(target, options.opt_level)?;
    let diagnostics = Diagnostics::default();
    let ctx = Context::create();
    diagnostics.install(&ctx);
    let built = build(&ctx, kernels, names, buffers, &machine, options.math)?;
    let before = built.module.print_to_string().to_string();
    let mut math = Math {
        ctx: &ctx,
        options,
        lib: None,
    };
    rewrite(&built, &mut math)?;
    diagnostics.check("smelt_ptx")?;
    Ok(NvptxIr {
        built: before,
        rewritten: built.module.print_to_string().to_string(),
    })
}

//! The JIT: verify, optimise for the host, compile with MCJIT, resolve function addresses.
//!
//! One [`JitModule`] owns one execution engine and the machine code of every function its
//! module defines; the module's IR and its LLVM context are freed once the code is loaded
//! (step 7). Compile the kernels of one graph into few modules (the CPU runtime uses one per
//! core, compiled on their own threads): each engine costs some pages of memory and a little
//! setup time.
//!
//! The pipeline, in order (see [`compile`]):
//! 1. the caller builds the module (inkwell builder) or hands over IR text;
//! 2. the module gets the host triple and data layout, and every defined function gets the
//!    `target-cpu` / `target-features` attributes (MCJIT's own target machine is generic; these
//!    attributes are what make the back end use AVX2/AVX-512/NEON);
//! 3. LLVM's verifier ([`LlvmError::Verify`] with its message);
//! 4. the new pass manager's `default<On>` pipeline, with loop and SLP vectorisation on, against a
//!    target machine for the chosen CPU (so the vectoriser's cost model knows the vector width),
//!    followed at O2 and O3 by `function(dse,instcombine)` (dead stores the vectoriser and
//!    unroller leave in split reductions' scratch arrays, see [`compile`]); then, where the
//!    kernels call functions with vector variants (AVX-512 `vscalefps`, see
//!    `kernel/scalef.rs`), `always-inline,globaldce` to inline them once the vectoriser has
//!    picked its variants;
//! 5. the optimised IR is printed (kept for snapshots and debugging);
//! 6. MCJIT compiles the module and every defined external function's address is resolved;
//! 7. the module is taken back from the engine and freed with its context (the engine keeps
//!    the loaded machine code), which saves about a third of a compiled program's memory.
//!
//! Floating-point semantics are strict: no fast-math flags are added and the back end fuses
//! only `llvm.fmuladd` (LLVM's default `FPOpFusion::Standard`), so a separate `fmul` and `fadd`
//! round twice, as in Rust. Float reductions therefore vectorise only across independent
//! outputs, never by reassociating one sum.

use super::error::{LlvmError, Result};
use super::options::{JitOptions, OptLevel};
use super::target::{cpu_and_features, llvm_opt_level, target_machine};
use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::execution_engine::ExecutionEngine;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{FileType, TargetMachine};
use inkwell::values::FunctionValue;
use std::collections::BTreeMap;

/// Machine code JIT-compiled from one LLVM module, with the optimised IR it came from.
///
/// Function addresses stay valid as long as the `JitModule` lives: whoever calls them keeps it
/// alive (e.g. in an `Arc` next to the pointers).
pub struct JitModule {
    name: String,
    options: JitOptions,
    cpu: String,
    features: String,
    ir: String,
    symbols: BTreeMap<String, usize>,
    /// The engine, which owns the machine code (its module and LLVM context are already
    /// freed, see `compile_impl`). Its `'static` lifetime is invented: it no longer refers
    /// to the context it names.
    _engine: ExecutionEngine<'static>,
}

// SAFETY: the engine's `Rc` has no clone outside this struct (the `Module` wrapper that held one
// is dropped at the end of `compile_impl`, and no `JitFunction` is ever created), so moving the
// struct moves every reference to the engine together. LLVM contexts and MCJIT engines are not
// bound to the thread that created them. After construction, `&self` methods read only
// `name`, `ir`, `symbols` and the option strings, plain Rust data; the LLVM objects are touched
// again only by `Drop`, which has exclusive access. So sharing `&JitModule` across threads
// (`Sync`) never touches LLVM concurrently.
unsafe impl Send for JitModule {}
// SAFETY: see `Send` above: `&self` never reaches LLVM.
unsafe impl Sync for JitModule {}

impl std::fmt::Debug for JitModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JitModule")
            .field("name", &self.name)
            .field("options", &self.options)
            .field("functions", &self.symbols.keys().collect::<Vec<_>>())
            .finish_non_exhaustive()
    }
}

impl JitModule {
    /// The module's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The options it was compiled with.
    pub fn options(&self) -> &JitOptions {
        &self.options
    }

    /// The CPU name and feature string the code was generated for.
    pub fn cpu(&self) -> (&str, &str) {
        (&self.cpu, &self.features)
    }

    /// The module's IR after optimisation, as LLVM prints it.
    pub fn optimized_ir(&self) -> &str {
        &self.ir
    }

    /// The external functions the module defines, by name.
    pub fn functions(&self) -> impl Iterator<Item = &str> + '_ {
        self.symbols.keys().map(String::as_str)
    }

    /// The address of the machine code of function `name`.
    pub fn address(&self, name: &str) -> Result<usize> {
        self.symbols
            .get(name)
            .copied()
            .ok_or_else(|| LlvmError::MissingSymbol {
                module: self.name.clone(),
                name: name.to_string(),
                defined: self.symbols.keys().cloned().collect(),
            })
    }

    /// Function `name` as a function pointer of type `F`.
    ///
    /// # Safety
    /// `F` must be an `unsafe extern "C" fn(..)` pointer type whose signature matches the LLVM
    /// signature of `name` under the C calling convention, and the returned pointer must not be
    /// called after this `JitModule` is dropped.
    pub unsafe fn function<F: Copy>(&self, name: &str) -> Result<F> {
        let address = self.address(name)?;
        if std::mem::size_of::<F>() != std::mem::size_of::<usize>() {
            return Err(LlvmError::NotAFunctionPointer {
                name: name.to_string(),
                size: std::mem::size_of::<F>(),
            });
        }
        // SAFETY: `F` is pointer-sized (checked above) and, by this function's contract, a
        // function pointer type matching the code at `address`, which is live while `self` is.
        Ok(unsafe { std::mem::transmute_copy::<usize, F>(&address) })
    }
}

/// Builds a module with `build`, then optimises and JIT-compiles it (see the module docs).
///
/// `build` receives a fresh context and an empty module named `name`; it adds functions with
/// the inkwell builder. Every function it defines with external linkage can be looked up in the
/// result, except the kernels' `smelt.scalef.*` helpers (`kernel/scalef.rs`), which are
/// inlined and dropped during optimisation.
pub fn compile<F>(name: &str, options: &JitOptions, build: F) -> Result<JitModule>
where
    F: for<'ctx> FnOnce(&'ctx Context, &Module<'ctx>) -> Result<()>,
{
    compile_impl(name, options, |ctx| {
        let module = ctx.create_module(name);
        build(ctx, &module)?;
        Ok(module)
    })
}

/// Parses LLVM IR text (as [`JitModule::optimized_ir`] prints it, or hand-written), then
/// optimises and JIT-compiles it like [`compile`]. IR printed for one CPU may call that CPU's
/// intrinsics (kernels built for AVX-512 call `vscalefps`): compile it for a CPU that has them.
pub fn compile_ir(name: &str, ir: &str, options: &JitOptions) -> Result<JitModule> {
    compile_impl(name, options, |ctx| parse_ir(ctx, name, ir))
}

/// Builds and optimises a module like [`compile`] but stops before machine code: returns the
/// optimised IR only. For snapshots, pass a [`super::CpuTarget::Named`] target so the text does
/// not depend on the build machine.
pub fn optimize<F>(name: &str, options: &JitOptions, build: F) -> Result<String>
where
    F: for<'ctx> FnOnce(&'ctx Context, &Module<'ctx>) -> Result<()>,
{
    Ok(optimize_impl(name, options, build, false)?.0)
}

/// Builds and optimises a module like [`compile`], then has the back end write it as assembly
/// for the target CPU instead of loading machine code: returns the optimised IR and the
/// assembly text (in LLVM's default syntax for the triple: AT&T on x86).
/// The pipeline is [`compile`]'s up to step 5, so the assembly is the code the JIT would load.
pub fn assemble<F>(name: &str, options: &JitOptions, build: F) -> Result<(String, String)>
where
    F: for<'ctx> FnOnce(&'ctx Context, &Module<'ctx>) -> Result<()>,
{
    let (ir, asm) = optimize_impl(name, options, build, true)?;
    Ok((ir, asm.unwrap_or_default()))
}

/// [`optimize`], and with `assembly` the module written as assembly text too.
fn optimize_impl<F>(
    name: &str,
    options: &JitOptions,
    build: F,
    assembly: bool,
) -> Result<(String, Option<String>)>
where
    F: for<'ctx> FnOnce(&'ctx Context, &Module<'ctx>) -> Result<()>,
{
    let context = Context::create();
    let module = context.create_module(name);
    build(&context, &module)?;
    let (cpu, features) = cpu_and_features(&options.target)?;
    let machine = target_machine(&cpu, &features, options.opt_level)?;
    let ir = prepare(&module, name, options, &machine, &cpu, &features)?;
    if !assembly {
        return Ok((ir, None));
    }
    let buffer = machine
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| LlvmError::Assembly {
            module: name.to_string(),
            message: e.to_string(),
        })?;
    Ok((
        ir,
        Some(String::from_utf8_lossy(buffer.as_slice()).into_owned()),
    ))
}

fn parse_ir<'ctx>(ctx: &'ctx Context, name: &str, ir: &str) -> Result<Module<'ctx>> {
    let buffer = MemoryBuffer::create_from_memory_range_copy(ir.as_bytes(), name);
    ctx.create_module_from_ir(buffer)
        .map_err(|e| LlvmError::ParseIr {
            module: name.to_string(),
            message: e.to_string(),
        })
}

fn compile_impl(
    name: &str,
    options: &JitOptions,
    make_module: impl FnOnce(&'static Context) -> Result<Module<'static>>,
) -> Result<JitModule> {
    let (cpu, features) = cpu_and_features(&options.target)?;
    let machine = target_machine(&cpu, &features, options.opt_level)?;
    // Declared first so that it is dropped last, after the module and engine below, on every
    // error path out of this function.
    let owned = OwnedContext::new();
    // SAFETY: `owned` keeps the context alive until it is dropped. Everything borrowing it with
    // the invented `'static` lifetime is either dropped before `owned` (the module: on error
    // paths by local drop order, on success explicitly below) or, like the engine on error
    // paths, dropped before it by local drop order. On success the engine outlives the
    // context, which is sound because by then it no longer refers to it (see below). No
    // borrow escapes: `make_module` callers are generic over the context lifetime (see
    // `compile`).
    let ctx: &'static Context = unsafe { owned.get() };
    let module = make_module(ctx)?;
    let ir = prepare(&module, name, options, &machine, &cpu, &features)?;
    let engine = module
        .create_jit_execution_engine(llvm_opt_level(options.opt_level))
        .map_err(|e| LlvmError::Jit {
            module: name.to_string(),
            message: e.to_string(),
        })?;
    let mut symbols = BTreeMap::new();
    for f in defined_functions(&module) {
        let fname = f.get_name().to_string_lossy().into_owned();
        let address = engine
            .get_function_address(&fname)
            .map_err(|e| LlvmError::Jit {
                module: name.to_string(),
                message: format!("function {fname:?} is defined but has no address: {e}"),
            })?;
        symbols.insert(fname, address);
    }
    // Every address is resolved, so the machine code is loaded and final. Take the module back
    // from the engine and free it, then free the context: MCJIT keeps the loaded code in its
    // memory manager until the engine itself is dropped and never touches the IR or the LLVM
    // context again (lookups by name are over; `symbols` has them). Keeping both would hold
    // about a third of a compiled program's memory for nothing. The wrapper's clone of the
    // engine's `Rc` goes with it (see the `Send` impl of `JitModule`).
    engine.remove_module(&module).map_err(|e| LlvmError::Jit {
        module: name.to_string(),
        message: format!("cannot release the compiled module: {e:?}"),
    })?;
    drop(module);
    drop(owned);
    Ok(JitModule {
        name: name.to_string(),
        options: options.clone(),
        cpu,
        features,
        ir,
        symbols,
        _engine: engine,
    })
}

/// Steps 2–5 of the pipeline: target attributes, verification, optimisation, printing.
fn prepare(
    module: &Module<'_>,
    name: &str,
    options: &JitOptions,
    machine: &TargetMachine,
    cpu: &str,
    features: &str,
) -> Result<String> {
    let opt = options.opt_level;
    module.set_triple(&machine.get_triple());
    module.set_data_layout(&machine.get_target_data().get_data_layout());
    let ctx = module.get_context();
    // With AVX-512, use its full width: LLVM defaults to 256-bit vectors on Intel CPUs, which
    // halves the throughput of compute-bound kernels (inline `exp`/`erf`).
    let wide = super::kernel::Scalef::for_features(features) != super::kernel::Scalef::Generic;
    for f in defined_functions(module) {
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("target-cpu", cpu),
        );
        f.add_attribute(
            AttributeLoc::Function,
            ctx.create_string_attribute("target-features", features),
        );
        if wide {
            f.add_attribute(
                AttributeLoc::Function,
                ctx.create_string_attribute("prefer-vector-width", "512"),
            );
        }
    }
    module.verify().map_err(|e| LlvmError::Verify {
        module: name.to_string(),
        message: e.to_string(),
    })?;
    // With vectorisation, dead-store elimination once more after the pipeline (which runs it
    // only before the loop vectoriser), and instcombine for what the stores kept alive: a
    // split reduction's grouped lane loop (`kernel/reduce.rs`) leaves stores into its scratch
    // whose values instcombine forwarded, and LICM then carries them through the row loop.
    let pipeline = if opt >= OptLevel::O2 {
        format!("default<{opt}>,function(dse,instcombine)")
    } else {
        format!("default<{opt}>")
    };
    let pass_options = PassBuilderOptions::create();
    let vectorise = opt >= OptLevel::O2;
    pass_options.set_loop_vectorization(vectorise);
    pass_options.set_loop_slp_vectorization(vectorise);
    pass_options.set_loop_interleaving(vectorise);
    pass_options.set_loop_unrolling(opt > OptLevel::O0);
    module
        .run_passes(&pipeline, machine, pass_options)
        .map_err(|e| LlvmError::Optimize {
            module: name.to_string(),
            pipeline,
            message: e.to_string(),
        })?;
    super::kernel::inline_after_vectorizing(module, machine)?;
    super::kernel::mark_streaming_stores(module)?;
    if let Some(distance) = options.prefetch_bytes {
        super::kernel::insert_prefetches(module, distance)?;
    }
    Ok(module.print_to_string().to_string())
}

/// Functions with a body and external linkage: the ones a caller can look up.
fn defined_functions<'ctx>(module: &Module<'ctx>) -> Vec<FunctionValue<'ctx>> {
    module
        .get_functions()
        .filter(|f| f.count_basic_blocks() > 0 && f.get_linkage() == Linkage::External)
        .collect()
}

/// A heap-allocated LLVM context freed on drop, so that borrows of it can live in the same
/// struct (its address never moves).
struct OwnedContext(*mut Context);

impl OwnedContext {
    fn new() -> OwnedContext {
        OwnedContext(Box::into_raw(Box::new(Context::create())))
    }

    /// # Safety
    /// The returned reference must not be used after `self` is dropped.
    unsafe fn get<'a>(&self) -> &'a Context {
        // SAFETY: the pointer came from `Box::into_raw` and stays valid until `drop`; the
        // caller promises not to outlive `self`.
        unsafe { &*self.0 }
    }
}

impl Drop for OwnedContext {
    fn drop(&mut self) {
        // SAFETY: the pointer came from `Box::into_raw` in `new` and is freed only here, once.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

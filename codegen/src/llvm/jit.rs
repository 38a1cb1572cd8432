//! The JIT: verify, optimise for the host, write an object file, load it with ORC, resolve
//! function addresses.
//!
//! One [`JitModule`] owns the machine code of every function its module defines (one ORC
//! `LLJIT` instance, `orc.rs`) and the object file it was loaded from, which a cache can store
//! and [`JitModule::load`] loads again without LLVM's optimiser or code generator. The module's
//! IR and its LLVM context are freed once the object is written. Compile the kernels of one
//! graph into few modules (the CPU runtime uses one per core, compiled on their own threads):
//! each instance costs some pages of memory and a little setup time.
//!
//! The pipeline, in order (see [`compile`]):
//! 1. the caller builds the module (inkwell builder) or hands over IR text;
//! 2. the module gets the host triple and data layout, and every defined function gets the
//!    `target-cpu` / `target-features` attributes (what make the back end use
//!    AVX2/AVX-512/NEON);
//! 3. LLVM's verifier ([`LlvmError::Verify`] with its message);
//! 4. the new pass manager's `default<On>` pipeline, with loop and SLP vectorisation on, against a
//!    target machine for the chosen CPU (so the vectoriser's cost model knows the vector width),
//!    followed at O2 and O3 by `function(dse,instcombine)` (dead stores the vectoriser and
//!    unroller leave in split reductions' scratch arrays, see [`compile`]); then, where the
//!    kernels call functions with vector variants (AVX-512 `vscalefps`, see
//!    `kernel/scalef.rs`), `always-inline,globaldce` to inline them once the vectoriser has
//!    picked its variants;
//! 5. the optimised IR is printed (kept for snapshots and debugging);
//! 6. the same target machine (JIT code model) writes the module as an object file, and the
//!    module and its context are freed; LLVM's remarks and warnings (a loop hint the
//!    vectoriser could not follow) are dropped, not printed, and an error it reported is an
//!    [`LlvmError::Jit`] (`diagnostics.rs`);
//! 7. ORC's LLJIT links the object and every defined external function's address is resolved.
//!
//! Floating-point semantics are strict: no fast-math flags are added and the back end fuses
//! only `llvm.fmuladd` (LLVM's default `FPOpFusion::Standard`), so a separate `fmul` and `fadd`
//! round twice, as in Rust. Float reductions therefore vectorise only across independent
//! outputs, never by reassociating one sum.

use super::diagnostics::Diagnostics;
use super::error::{LlvmError, Result};
use super::options::{JitOptions, OptLevel};
use super::orc::Loaded;
use super::target::{cpu_and_features, target_machine};
use inkwell::attributes::AttributeLoc;
use inkwell::context::Context;
use inkwell::memory_buffer::MemoryBuffer;
use inkwell::module::{Linkage, Module};
use inkwell::passes::PassBuilderOptions;
use inkwell::targets::{FileType, TargetMachine};
use inkwell::values::FunctionValue;
use std::collections::BTreeMap;

/// Machine code JIT-compiled from one LLVM module, with the optimised IR and the object file
/// it came from.
///
/// Function addresses stay valid as long as the `JitModule` lives: whoever calls them keeps it
/// alive (e.g. in an `Arc` next to the pointers).
pub struct JitModule {
    name: String,
    options: JitOptions,
    cpu: String,
    features: String,
    ir: String,
    object: Vec<u8>,
    symbols: BTreeMap<String, usize>,
    /// The LLJIT instance that owns the machine code.
    _code: Loaded,
}

// SAFETY: the LLJIT instance behind `_code` is not bound to the thread that created it, and
// nothing but `Drop` (which has exclusive access) touches it after construction: `&self`
// methods read only plain Rust data (`name`, `ir`, `object`, `symbols`, the option strings).
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

    /// The object file the machine code was loaded from (what a cache stores, see
    /// [`JitModule::load`]).
    pub fn object(&self) -> &[u8] {
        &self.object
    }

    /// Loads an object file written by [`JitModule::object`] back, without LLVM's optimiser
    /// or code generator: `functions` are the names to resolve ([`JitModule::functions`] of
    /// the module that wrote it), `ir` its optimised IR (or empty), `options` what it was
    /// compiled with. The object must be one a `JitModule` wrote for this CPU (the caller's
    /// cache key says so): its code is run as it is.
    pub fn load(
        name: &str,
        options: &JitOptions,
        ir: String,
        object: Vec<u8>,
        functions: &[String],
    ) -> Result<JitModule> {
        let (cpu, features) = cpu_and_features(&options.target)?;
        let (code, symbols) = Loaded::load(name, &object, functions)?;
        Ok(JitModule {
            name: name.to_string(),
            options: options.clone(),
            cpu,
            features,
            ir,
            object,
            symbols,
            _code: code,
        })
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
    let diagnostics = Diagnostics::default();
    let context = Context::create();
    diagnostics.install(&context);
    let module = context.create_module(name);
    build(&context, &module)?;
    let (cpu, features) = cpu_and_features(&options.target)?;
    let machine = target_machine(&cpu, &features, options.opt_level)?;
    let ir = prepare(&module, name, options, &machine, &cpu, &features)?;
    if !assembly {
        diagnostics.check(name)?;
        return Ok((ir, None));
    }
    let buffer = machine
        .write_to_memory_buffer(&module, FileType::Assembly)
        .map_err(|e| LlvmError::Assembly {
            module: name.to_string(),
            message: e.to_string(),
        })?;
    diagnostics.check(name)?;
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
    make_module: impl for<'ctx> FnOnce(&'ctx Context) -> Result<Module<'ctx>>,
) -> Result<JitModule> {
    let (cpu, features) = cpu_and_features(&options.target)?;
    let machine = target_machine(&cpu, &features, options.opt_level)?;
    let (ir, object, functions) = {
        let diagnostics = Diagnostics::default();
        let context = Context::create();
        diagnostics.install(&context);
        let module = make_module(&context)?;
        let ir = prepare(&module, name, options, &machine, &cpu, &features)?;
        let functions: Vec<String> = defined_functions(&module)
            .iter()
            .map(|f| f.get_name().to_string_lossy().into_owned())
            .collect();
        let object = machine
            .write_to_memory_buffer(&module, FileType::Object)
            .map_err(|e| LlvmError::Jit {
                module: name.to_string(),
                message: format!("cannot write the object file: {e}"),
            })?
            .as_slice()
            .to_vec();
        diagnostics.check(name)?;
        // The module and its context are freed here: the object file is all that is loaded.
        (ir, object, functions)
    };
    JitModule::load(name, options, ir, object, &functions)
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
    // AVX-512's vectors are a whole line; AVX2's half of one (`stream.rs`, step 3).
    let widest_vector = if wide { 64 } else { 32 };
    super::kernel::mark_streaming_stores(module, widest_vector)?;
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

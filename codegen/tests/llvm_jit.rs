//! The host JIT: a hand-built axpy kernel optimised at -O3 (its loop must vectorise),
//! JIT-compiled and called from Rust; typed errors; host target reporting.

#[cfg(feature = "llvm")]
mod with_llvm {
    use smelt_codegen::llvm::demo::{build_axpy, AXPY};
    use smelt_codegen::llvm::inkwell::context::Context;
    use smelt_codegen::llvm::inkwell::module::Module;
    use smelt_codegen::llvm::{
        compile, compile_ir, host_target, optimize, CpuTarget, JitModule, JitOptions, LlvmError,
        OptLevel,
    };

    type AxpyFn = unsafe extern "C" fn(*mut f32, *const f32, f32, i64);

    fn axpy_module(options: &JitOptions) -> JitModule {
        compile("axpy_test", options, build_axpy).expect("axpy compiles")
    }

    /// Runs the JIT'd axpy on `n` elements and checks every element bit for bit against the
    /// closed form `y[i] = a * x[i] + y[i]` with `x[i] = i / 2` and `y[i] = 1 - i`.
    fn check_axpy(module: &JitModule, n: usize) {
        // SAFETY: `axpy` has the LLVM signature `void (float*, float*, float, i64)`, and
        // `module` outlives every call below.
        let axpy: AxpyFn = unsafe { module.function(AXPY) }.expect("axpy is defined");
        let a = 1.75f32;
        let x: Vec<f32> = (0..n).map(|i| i as f32 * 0.5).collect();
        let mut y: Vec<f32> = (0..n).map(|i| 1.0 - i as f32).collect();
        // SAFETY: `y` and `x` hold `n` elements each and do not overlap.
        unsafe { axpy(y.as_mut_ptr(), x.as_ptr(), a, n as i64) };
        for (i, got) in y.iter().enumerate() {
            let want = a * (i as f32 * 0.5) + (1.0 - i as f32);
            assert_eq!(got.to_bits(), want.to_bits(), "n = {n}, element {i}");
        }
    }

    /// Whether the IR text has an LLVM vector of floats (`<4 x float>`, `<8 x float>` …).
    fn has_float_vectors(ir: &str) -> bool {
        ir.match_indices(" x float>").any(|(i, _)| {
            let head = &ir[..i];
            let digits = head.len() - head.trim_end_matches(|c: char| c.is_ascii_digit()).len();
            digits > 0 && head[..head.len() - digits].ends_with('<')
        })
    }

    #[test]
    fn axpy_at_o3_vectorises_and_matches_the_closed_form() {
        let module = axpy_module(&JitOptions::default());
        let ir = module.optimized_ir();
        assert!(has_float_vectors(ir), "no vectorised loop in:\n{ir}");
        assert!(ir.contains("target-cpu"), "{ir}");
        for n in [0, 1, 3, 8, 31, 64, 1000, 1027] {
            check_axpy(&module, n);
        }
        assert_eq!(module.functions().collect::<Vec<_>>(), vec![AXPY]);
    }

    /// The object file a compile wrote loads again on its own (what the CPU runtime's disk
    /// cache does), into code that computes the same bits, also once the first module is
    /// gone; garbage is a typed error.
    #[test]
    fn a_module_loads_again_from_its_object_file() {
        let options = JitOptions::default();
        let first = axpy_module(&options);
        let object = first.object().to_vec();
        assert!(object.len() > 64, "{} bytes", object.len());
        let functions: Vec<String> = first.functions().map(str::to_string).collect();
        let again = JitModule::load("axpy_again", &options, String::new(), object, &functions)
            .expect("the object loads");
        assert_eq!(again.functions().collect::<Vec<_>>(), vec![AXPY]);
        assert_eq!(again.object(), first.object());
        drop(first);
        for n in [0, 1, 31, 1027] {
            check_axpy(&again, n);
        }
        let err = JitModule::load("junk", &options, String::new(), vec![7; 100], &functions)
            .expect_err("not an object file");
        assert!(matches!(err, LlvmError::Jit { .. }), "{err}");
        let err = JitModule::load(
            "axpy_missing",
            &options,
            String::new(),
            again.object().to_vec(),
            &["no_such_function".to_string()],
        )
        .expect_err("not defined");
        assert!(err.to_string().contains("no_such_function"), "{err}");
    }

    #[test]
    fn axpy_at_o0_is_scalar_and_still_correct() {
        let options = JitOptions {
            opt_level: OptLevel::O0,
            ..JitOptions::default()
        };
        let module = axpy_module(&options);
        assert!(!has_float_vectors(module.optimized_ir()));
        check_axpy(&module, 37);
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn a_named_cpu_pins_the_target_and_vector_width() {
        let options = JitOptions {
            opt_level: OptLevel::O3,
            target: CpuTarget::Named {
                cpu: "x86-64".into(),
                features: String::new(),
            },
            ..JitOptions::default()
        };
        let ir = optimize("axpy_sse2", &options, build_axpy).unwrap();
        assert!(ir.contains("\"target-cpu\"=\"x86-64\""), "{ir}");
        assert!(ir.contains("<4 x float>"), "SSE2 vectorises by 4:\n{ir}");
        assert!(!ir.contains("<8 x float>"), "{ir}");
        check_axpy(&axpy_module(&options), 101);
    }

    #[test]
    fn optimised_ir_text_compiles_again() {
        let first = axpy_module(&JitOptions::default());
        let again = compile_ir("axpy_again", first.optimized_ir(), &JitOptions::default())
            .expect("printed IR parses and compiles");
        check_axpy(&again, 77);
    }

    #[test]
    fn the_optimised_ir_is_deterministic() {
        let a = optimize("det", &JitOptions::default(), build_axpy).unwrap();
        let b = optimize("det", &JitOptions::default(), build_axpy).unwrap();
        assert_eq!(a, b);
    }

    #[test]
    fn threads_compile_concurrently() {
        let handles: Vec<_> = (0..4)
            .map(|i| {
                std::thread::spawn(move || {
                    let module = axpy_module(&JitOptions::default());
                    check_axpy(&module, 100 + i);
                })
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
    }

    #[test]
    fn host_target_reports_llvm_version_cpu_and_features() {
        let host = host_target().unwrap();
        assert!(host.llvm_version.starts_with("14."), "{host:?}");
        assert!(!host.llvm_version.contains("unknown"), "{host:?}");
        assert!(!host.cpu.is_empty() && !host.triple.is_empty(), "{host:?}");
        assert!(host.features.contains('+'), "{host:?}");
        let key = host.cache_key();
        assert!(key.contains(&host.cpu) && key.contains(&host.features));
    }

    #[test]
    fn a_verifier_failure_is_typed_and_carries_llvms_message() {
        let err = compile(
            "broken",
            &JitOptions::default(),
            |ctx: &Context, m: &Module| {
                let f = m.add_function("no_terminator", ctx.void_type().fn_type(&[], false), None);
                ctx.append_basic_block(f, "entry");
                Ok(())
            },
        )
        .unwrap_err();
        match &err {
            LlvmError::Verify { module, message } => {
                assert_eq!(module, "broken");
                assert!(message.contains("terminator"), "{message}");
            }
            other => panic!("expected Verify, got {other:?}"),
        }
    }

    #[test]
    fn unparsable_ir_is_typed() {
        let err = compile_ir("junk", "define void @f( {", &JitOptions::default()).unwrap_err();
        assert!(matches!(err, LlvmError::ParseIr { .. }), "{err:?}");
        assert!(err.to_string().contains("junk"), "{err}");
    }

    #[test]
    fn a_missing_function_is_typed_and_lists_the_defined_ones() {
        let module = axpy_module(&JitOptions::default());
        match module.address("saxpy").unwrap_err() {
            LlvmError::MissingSymbol { name, defined, .. } => {
                assert_eq!(name, "saxpy");
                assert_eq!(defined, vec![AXPY.to_string()]);
            }
            other => panic!("expected MissingSymbol, got {other:?}"),
        }
        // SAFETY: the type is rejected before any pointer is made.
        let wide = unsafe { module.function::<[usize; 2]>(AXPY) };
        assert!(matches!(wide, Err(LlvmError::NotAFunctionPointer { .. })));
    }

    #[test]
    fn a_jit_module_moves_and_is_shared_across_threads() {
        fn send_sync<T: Send + Sync>() {}
        send_sync::<JitModule>();
        let module = std::sync::Arc::new(axpy_module(&JitOptions::default()));
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let m = module.clone();
                std::thread::spawn(move || check_axpy(&m, 513))
            })
            .collect();
        for h in handles {
            h.join().unwrap();
        }
        // Dropped on another thread than the one that compiled it.
        std::thread::spawn(move || drop(module)).join().unwrap();
    }
}

#[cfg(not(feature = "llvm"))]
#[test]
fn without_llvm_everything_says_not_compiled_in() {
    use smelt_codegen::llvm::{compile_ir, host_target, JitOptions, LlvmError, COMPILED_IN};
    const { assert!(!COMPILED_IN) };
    assert_eq!(host_target().unwrap_err(), LlvmError::NotCompiledIn);
    let err = compile_ir("m", "", &JitOptions::default()).unwrap_err();
    assert_eq!(err, LlvmError::NotCompiledIn);
    assert!(err.to_string().contains("not compiled in"));
}

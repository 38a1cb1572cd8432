//! Accuracy of the default f32 `exp`, `tanh` and `erf` ([`MathMode::Polynomial`]) against f64
//! math, the oracle: Rust's `f64::exp`/`f64::tanh` and the `libm` crate's f64 `erf` (each far
//! within an f32 ulp of the true value). The error of a result is counted in ulps of the f32
//! nearest the f64 value (for results below the smallest normal, in subnormal steps). The
//! bounds asserted are the ones documented on [`MathMode::Polynomial`].
//!
//! CI runs a sample (about 2^21 inputs per function spread over every bit pattern, a dense
//! sweep of the range where each function is not constant, and each branch threshold ±4 ulp);
//! the ignored tests run every one of the 2^32 inputs (`cargo test --release -p smelt-codegen
//! --test llvm_math -- --ignored`, about 100 s per function; measured worst: `exp` 0.894 ulp
//! at 5.201929, `tanh` 1.073 ulp at 0.19335605, `erf` 0.922 ulp at 0.72014844).

#[cfg(feature = "llvm")]
mod with_llvm {
    use smelt_codegen::llvm::kernel::{
        compile_program_kernels, kernel_extent, optimized_kernel_ir, CompiledKernels,
    };
    use smelt_codegen::llvm::{host_target, CpuTarget, JitOptions, MathMode};
    use smelt_ir::{DType, NodeId, UnaryOp};
    use smelt_passes::kernel::*;

    /// `out[i] = op(x[i])` over `n` f32s.
    fn unary_kernel(op: UnaryOp, n: usize) -> (Kernel, Vec<BufferDecl>) {
        let d = DType::F32;
        let body = vec![
            Inst {
                dst: ValueId(0),
                ty: Ty::Data(d),
                op: InstOp::Load {
                    buffer: BufferId(0),
                    access: Access::Affine {
                        offset: 0,
                        strides: vec![1],
                    },
                },
            },
            Inst {
                dst: ValueId(1),
                ty: Ty::Data(d),
                op: InstOp::Unary(op, ValueId(0)),
            },
        ];
        let stage = Stage {
            inner: vec![],
            body,
            effect: StageEffect::Store(vec![Store {
                buffer: BufferId(1),
                access: Access::Affine {
                    offset: 0,
                    strides: vec![1],
                },
                value: ValueId(1),
            }]),
        };
        let decl = |id: u32| BufferDecl {
            id: BufferId(id),
            dtype: d,
            numel: n,
            kind: BufferKind::Temp,
            value: NodeId(id),
        };
        let kernel = Kernel {
            name: format!("k_{op}"),
            origin: vec![],
            outer: vec![n],
            stages: vec![stage],
            reads: vec![BufferId(0)],
            writes: vec![BufferId(1)],
            index_width: IndexWidth::I64,
        };
        (kernel, vec![decl(0), decl(1)])
    }

    struct Unary {
        compiled: CompiledKernels,
        kernel: Kernel,
        n: usize,
    }

    impl Unary {
        fn new(op: UnaryOp, n: usize) -> Unary {
            Unary::for_target(op, n, CpuTarget::Host)
        }

        fn for_target(op: UnaryOp, n: usize, target: CpuTarget) -> Unary {
            let (kernel, decls) = unary_kernel(op, n);
            let options = JitOptions {
                math: MathMode::Polynomial,
                target,
                ..JitOptions::default()
            };
            let compiled = compile_program_kernels(&[&kernel], &decls, &options).expect("compiles");
            Unary {
                compiled,
                kernel,
                n,
            }
        }

        /// `op` of each of `xs` (at most `n` of them).
        fn eval(&self, xs: &[f32]) -> Vec<f32> {
            assert!(xs.len() <= self.n);
            let mut x = xs.to_vec();
            x.resize(self.n, 0.0);
            let mut y = vec![0f32; self.n];
            type F = unsafe extern "C" fn(*const *mut u8, i64, i64);
            // SAFETY: the code generator emits `void (i8**, i64, i64)` entry points.
            let f: F =
                unsafe { self.compiled.module.function(&self.compiled.entries[0]) }.expect("entry");
            let mut status = 0i32;
            let args: [*mut u8; 3] = [
                x.as_mut_ptr().cast(),
                y.as_mut_ptr().cast(),
                (&mut status as *mut i32).cast(),
            ];
            let extent = kernel_extent(&self.kernel).expect("extent");
            // SAFETY: both buffers hold `n` f32s, as declared; the kernel's accesses were
            // checked against the declarations at compile time.
            unsafe { f(args.as_ptr(), 0, extent) };
            assert_eq!(status, 0);
            y.truncate(xs.len());
            y
        }
    }

    /// `want` in units of the f32 ulp at `want` (subnormal steps below the normal range).
    fn ulps(got: f32, want: f64) -> f64 {
        if want.is_nan() {
            return if got.is_nan() { 0.0 } else { f64::INFINITY };
        }
        // Beyond the f32 range the result must be the overflow, ±inf.
        let w = want as f32;
        if w.is_infinite() || got.is_infinite() {
            return if got == w { 0.0 } else { f64::INFINITY };
        }
        let w = w.abs();
        let ulp = if w < f32::MIN_POSITIVE {
            f32::from_bits(1) as f64
        } else if w == f32::MAX {
            (f32::MAX - f32::from_bits(f32::MAX.to_bits() - 1)) as f64
        } else {
            (f32::from_bits(w.to_bits() + 1) - w) as f64
        };
        (got as f64 - want).abs() / ulp
    }

    /// The worst error of `f` over `xs` against `oracle`, with its input.
    fn worst(f: &Unary, xs: &[f32], oracle: fn(f64) -> f64) -> (f64, f32, f32) {
        let mut worst = (0.0f64, 0.0f32, 0.0f32);
        for chunk in xs.chunks(f.n) {
            for (&x, &y) in chunk.iter().zip(&f.eval(chunk)) {
                let e = ulps(y, oracle(x as f64));
                if e > worst.0 || e.is_nan() {
                    worst = (e, x, y);
                }
            }
        }
        worst
    }

    /// About 2^21 inputs: every bit pattern region (both signs), a dense sweep of
    /// `[-dense, dense]`, and each of `thresholds` ±4 ulp with both signs.
    fn sample(dense: f32, thresholds: &[f32]) -> Vec<f32> {
        let mut xs: Vec<f32> = (0..1u32 << 20)
            .map(|i| f32::from_bits(i.wrapping_mul(4096) ^ (i % 4093)))
            .collect();
        let m = 1 << 20;
        xs.extend((0..=m).map(|i| dense * (2.0 * i as f32 / m as f32 - 1.0)));
        let specials = [
            0.0,
            f32::from_bits(1),
            f32::MIN_POSITIVE,
            1.0,
            f32::MAX,
            f32::INFINITY,
            f32::NAN,
        ];
        for &t in thresholds.iter().chain(&specials) {
            for d in -4i32..=4 {
                let v = f32::from_bits(t.to_bits().wrapping_add(d as u32));
                xs.extend([v, -v]);
            }
        }
        xs
    }

    fn exp_oracle(x: f64) -> f64 {
        x.exp()
    }
    fn tanh_oracle(x: f64) -> f64 {
        x.tanh()
    }
    fn erf_oracle(x: f64) -> f64 {
        libm::erf(x)
    }

    /// (op, oracle, ulp bound, dense range, branch thresholds).
    type Case = (UnaryOp, fn(f64) -> f64, f64, f32, &'static [f32]);
    const CASES: [Case; 3] = [
        (
            UnaryOp::Exp,
            exp_oracle,
            1.0,
            104.0,
            &[88.722_83, 88.722_84, -87.336_54, -103.972_08, -104.0, 104.0],
        ),
        (
            UnaryOp::Tanh,
            tanh_oracle,
            1.5,
            10.0,
            &[0.173_286_8, 0.519_860_4, 9.1, 1e-20],
        ),
        (
            UnaryOp::Erf,
            erf_oracle,
            1.0,
            4.5,
            &[0.75, 1.65, 2.7, 3.9375, 1e-20],
        ),
    ];

    #[test]
    fn polynomial_math_is_within_its_bound_on_a_sample() {
        for (op, oracle, bound, dense, thresholds) in CASES {
            let f = Unary::new(op, 1 << 16);
            let (e, x, y) = worst(&f, &sample(dense, thresholds), oracle);
            eprintln!("{op}: worst {e:.3} ulp at x = {x:e} (got {y:e})");
            assert!(
                e <= bound,
                "{op}({x:e}) = {y:e}, {e:.3} ulp from {:e} (bound {bound})",
                oracle(x as f64)
            );
        }
    }

    #[test]
    fn specials() {
        let check = |op: UnaryOp, cases: &[(f32, f32)]| {
            let f = Unary::new(op, 64);
            let xs: Vec<f32> = cases.iter().map(|c| c.0).collect();
            for (&(x, want), got) in cases.iter().zip(f.eval(&xs)) {
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{op}({x:e}) = {got:e}, want {want:e}"
                );
            }
        };
        let inf = f32::INFINITY;
        check(
            UnaryOp::Exp,
            &[
                (0.0, 1.0),
                (-0.0, 1.0),
                (inf, inf),
                (-inf, 0.0),
                (f32::NAN, f32::NAN),
                (89.0, inf),
                (-200.0, 0.0),
            ],
        );
        for op in [UnaryOp::Tanh, UnaryOp::Erf] {
            check(
                op,
                &[
                    (0.0, 0.0),
                    (-0.0, -0.0),
                    (inf, 1.0),
                    (-inf, -1.0),
                    (f32::NAN, f32::NAN),
                    (50.0, 1.0),
                    (-50.0, -1.0),
                ],
            );
        }
    }

    /// JIT options for the named `cpu` with LLVM feature string `features`, polynomial math.
    fn polynomial_for(cpu: &str, features: &str) -> JitOptions {
        JitOptions {
            target: CpuTarget::Named {
                cpu: cpu.into(),
                features: features.into(),
            },
            math: MathMode::Polynomial,
            ..JitOptions::default()
        }
    }

    /// The polynomial functions have no calls and vectorise: `<8 x float>` on x86-64-v3.
    #[test]
    fn polynomial_math_vectorises() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let v3 = polynomial_for("x86-64-v3", "");
        for op in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Erf, UnaryOp::Sigmoid] {
            let (k, decls) = unary_kernel(op, 1024);
            let ir = optimized_kernel_ir(&k, &decls, &v3).unwrap();
            let calls_out = ir
                .match_indices("call float @")
                .any(|(i, m)| !ir[i + m.len()..].starts_with("llvm."));
            assert!(!calls_out, "a call to a library function in {op}:\n{ir}");
            assert!(!ir.contains("double"), "f64 arithmetic in {op}:\n{ir}");
            assert!(ir.contains("<8 x float>"), "no <8 x float> in {op}:\n{ir}");
        }
    }

    /// Named AVX-512 targets (with and without VL) build the `vscalefps` form of `exp` and
    /// `sigmoid` (`tanh` and `erf` never scale), and no `smelt.scalef` helper survives
    /// optimisation; targets without AVX-512F, including one whose feature string turns it
    /// off again, build the generic form. Only IR is built, so this runs on any x86-64 host.
    #[test]
    fn avx512_targets_build_vscalefps_and_others_do_not() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let cases = [
            ("skylake-avx512", "+avx512f,+avx512vl", true),
            ("skylake-avx512", "+avx512f,-avx512vl", true),
            ("skylake-avx512", "+avx512f,+avx512vl,-avx512f", false),
            ("x86-64-v3", "", false),
        ];
        for (cpu, features, scalef) in cases {
            let options = polynomial_for(cpu, features);
            for op in [UnaryOp::Exp, UnaryOp::Tanh, UnaryOp::Erf, UnaryOp::Sigmoid] {
                let (k, decls) = unary_kernel(op, 1024);
                let ir = optimized_kernel_ir(&k, &decls, &options).unwrap();
                let what = format!("{op} for {cpu} {features:?}");
                // `tanh` builds its `2^q` from exponent bits on every target; `erf` has none.
                assert_eq!(
                    ir.contains("@llvm.x86.avx512.mask.scalef.ps"),
                    scalef && !matches!(op, UnaryOp::Tanh | UnaryOp::Erf),
                    "{what}:\n{ir}"
                );
                assert!(
                    !ir.contains("smelt.scalef"),
                    "{what}: a helper survived:\n{ir}"
                );
                assert!(ir.contains("x float>"), "{what}: not vectorised:\n{ir}");
            }
        }
    }

    /// Every f32 input. Slow (about a minute per function in release):
    /// `cargo test --release -p smelt-codegen --test llvm_math -- --ignored`.
    fn exhaustive(op: UnaryOp) {
        let (_, oracle, bound, _, _) = CASES.iter().find(|c| c.0 == op).copied().unwrap();
        let n = 1usize << 22;
        let f = Unary::new(op, n);
        let mut all = (0.0f64, 0.0f32, 0.0f32);
        for batch in 0..(1u64 << 32) / n as u64 {
            let xs: Vec<f32> = (0..n as u64)
                .map(|i| f32::from_bits((batch * n as u64 + i) as u32))
                .collect();
            let w = worst(&f, &xs, oracle);
            if w.0 > all.0 {
                all = w;
            }
        }
        eprintln!(
            "{op}: worst {:.3} ulp at x = {:e} (got {:e})",
            all.0, all.1, all.2
        );
        assert!(all.0 <= bound, "{op}: {all:?} (bound {bound})");
    }

    #[test]
    #[ignore]
    fn exp_is_within_its_bound_for_every_f32() {
        exhaustive(UnaryOp::Exp);
    }

    #[test]
    #[ignore]
    fn tanh_is_within_its_bound_for_every_f32() {
        exhaustive(UnaryOp::Tanh);
    }

    #[test]
    #[ignore]
    fn erf_is_within_its_bound_for_every_f32() {
        exhaustive(UnaryOp::Erf);
    }

    /// `erf`'s per-lane coefficients are `vpermilps` on x86 targets whose features have AVX
    /// (8 lanes on x86-64-v3, 16 with AVX-512F), and a select chain, still vectorised, on one
    /// without (x86-64, SSE2, or AVX turned off again); no `smelt.pick4` helper survives
    /// optimisation. Only IR is built, so this
    /// runs on any x86-64 host.
    #[test]
    fn erf_picks_coefficients_with_vpermilps_where_there_is_avx() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let cases = [
            (
                "x86-64-v3",
                "+avx2,+fma,+avx",
                Some("@llvm.x86.avx.vpermilvar.ps.256"),
            ),
            (
                "skylake-avx512",
                "+avx512f",
                Some("@llvm.x86.avx512.vpermilvar.ps.512"),
            ),
            ("x86-64", "", None),
            ("x86-64-v3", "+avx2,+fma,+avx,-avx", None),
        ];
        for (cpu, features, want) in cases {
            let options = polynomial_for(cpu, features);
            let (k, decls) = unary_kernel(UnaryOp::Erf, 1024);
            let ir = optimized_kernel_ir(&k, &decls, &options).unwrap();
            let what = format!("erf for {cpu} {features:?}");
            match want {
                Some(intrinsic) => assert!(ir.contains(intrinsic), "{what}: no {intrinsic}:\n{ir}"),
                None => assert!(!ir.contains("vpermilvar"), "{what}: a vpermilps:\n{ir}"),
            }
            assert!(
                !ir.contains("smelt.pick4"),
                "{what}: a helper survived:\n{ir}"
            );
            assert!(ir.contains("x float>"), "{what}: not vectorised:\n{ir}");
        }
    }

    /// A host build and a generic one of `op` over `n` elements, where the host has AVX-512F
    /// (`None` elsewhere, with a note on stderr). The generic build is for x86-64-v3 (AVX2 and
    /// FMA: the same multiply-adds, `2^q` from exponent bits); the host build of `exp` must
    /// scale with `vscalefps` (kernel module `scalef`), checked in its IR. `tanh` and `erf`
    /// (by pieces since the forty-first session) have no `2^q` step: for them the pair checks
    /// that AVX-512 and AVX2 builds give the same bits (for `erf`, 16-lane `vpermilps`
    /// against 8-lane).
    fn host_and_generic(op: UnaryOp, n: usize) -> Option<(Unary, Unary)> {
        let host = host_target().expect("host target");
        if !cfg!(target_arch = "x86_64") || !host.features.split(',').any(|f| f == "+avx512f") {
            eprintln!("skipped: the host has no AVX-512F, so it builds the generic form only");
            return None;
        }
        let fast = Unary::new(op, n);
        assert!(
            op != UnaryOp::Exp
                || fast
                    .compiled
                    .module
                    .optimized_ir()
                    .contains("@llvm.x86.avx512.mask.scalef.ps"),
            "{op}: no vscalefps in the host build"
        );
        let generic = CpuTarget::Named {
            cpu: "x86-64-v3".into(),
            features: "".into(),
        };
        Some((fast, Unary::for_target(op, n, generic)))
    }

    fn same_bits(op: UnaryOp, fast: &Unary, generic: &Unary, xs: &[f32]) {
        for chunk in xs.chunks(fast.n) {
            for ((&x, a), b) in chunk.iter().zip(fast.eval(chunk)).zip(generic.eval(chunk)) {
                assert!(
                    a.to_bits() == b.to_bits() || (a.is_nan() && b.is_nan()),
                    "{op}({x:e}): {a:e} with vscalefps, {b:e} generic"
                );
            }
        }
    }

    /// `u·2^q` by `vscalefps` gives the generic form's bits: on the accuracy sample (which
    /// covers overflow, subnormal results and the branch thresholds), through the vector loop
    /// and, with a length that is not a multiple of the vector width, its remainder.
    #[test]
    fn avx512_scaling_gives_the_generic_bits() {
        for (op, _, _, dense, thresholds) in CASES {
            for n in [1 << 16, 1003] {
                let Some((fast, generic)) = host_and_generic(op, n) else {
                    return;
                };
                same_bits(op, &fast, &generic, &sample(dense, thresholds));
            }
        }
    }

    /// Every f32 input (about a minute per function in release).
    #[test]
    #[ignore]
    fn avx512_scaling_gives_the_generic_bits_for_every_f32() {
        for (op, ..) in CASES {
            let n = 1usize << 22;
            let Some((fast, generic)) = host_and_generic(op, n) else {
                return;
            };
            for batch in 0..(1u64 << 32) / n as u64 {
                let xs: Vec<f32> = (0..n as u64)
                    .map(|i| f32::from_bits((batch * n as u64 + i) as u32))
                    .collect();
                same_bits(op, &fast, &generic, &xs);
            }
        }
    }
}

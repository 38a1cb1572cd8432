//! Kernel IR → LLVM for the host: hand-built kernels, optimised IR checks (the elementwise loop
//! vectorises), and direct calls in the chunked calling convention with red zones after every
//! written buffer.

#[cfg(feature = "llvm")]
mod with_llvm {
    use smelt_codegen::llvm::kernel::{
        compile_program_kernels, has_plain_twin, kernel_extent, optimized_kernel_ir,
        program_listing, reduce_group, CompiledKernels,
    };
    use smelt_codegen::llvm::{
        host_target, zen3, ByCpu, CpuTarget, JitOptions, MachineSchedule, MathMode, RowPrefetch,
        MACHINE_SCHEDULE_VAR,
    };
    use smelt_ir::{BinaryOp, DType, NodeId, Scalar, UnaryOp};
    use smelt_passes::kernel::*;

    /// Builds a stage body: each `push` defines the next value.
    #[derive(Default)]
    struct Body {
        insts: Vec<Inst>,
        next: u32,
    }

    impl Body {
        fn push(&mut self, ty: Ty, op: InstOp) -> ValueId {
            let dst = ValueId(self.next);
            self.next += 1;
            self.insts.push(Inst { dst, ty, op });
            dst
        }
        fn load(&mut self, d: DType, buffer: u32, offset: i64, strides: &[i64]) -> ValueId {
            self.push(
                Ty::Data(d),
                InstOp::Load {
                    buffer: BufferId(buffer),
                    access: Access::Affine {
                        offset,
                        strides: strides.to_vec(),
                    },
                },
            )
        }
    }

    fn buf(id: u32, dtype: DType, numel: usize) -> BufferDecl {
        BufferDecl {
            id: BufferId(id),
            dtype,
            numel,
            kind: BufferKind::Temp,
            value: NodeId(id),
        }
    }

    fn affine(offset: i64, strides: &[i64]) -> Access {
        Access::Affine {
            offset,
            strides: strides.to_vec(),
        }
    }

    fn store_stage(inner: Vec<usize>, body: Body, stores: Vec<(u32, Access, ValueId)>) -> Stage {
        Stage {
            inner,
            body: body.insts,
            effect: StageEffect::Store(
                stores
                    .into_iter()
                    .map(|(b, access, value)| Store {
                        buffer: BufferId(b),
                        access,
                        value,
                    })
                    .collect(),
            ),
        }
    }

    fn kernel(
        name: &str,
        reads: &[u32],
        writes: &[u32],
        outer: &[usize],
        stages: Vec<Stage>,
    ) -> Kernel {
        Kernel {
            name: name.into(),
            origin: vec![],
            reads: reads.iter().map(|&b| BufferId(b)).collect(),
            writes: writes.iter().map(|&b| BufferId(b)).collect(),
            index_width: IndexWidth::I32,
            outer: outer.to_vec(),
            stages,
        }
    }

    const RED: usize = 1024;

    /// Byte buffers with a poisoned red zone of `RED` elements after the data.
    struct Buffers {
        data: Vec<Vec<u64>>,
        sizes: Vec<usize>,
    }

    impl Buffers {
        fn new(decls: &[BufferDecl]) -> Buffers {
            let mut data = Vec::new();
            let mut sizes = Vec::new();
            for d in decls {
                let bytes = (d.numel + RED) * d.dtype.size_bytes();
                let mut v = vec![0u64; bytes.div_ceil(8)];
                let p = v.as_mut_ptr().cast::<u8>();
                // SAFETY: `p` points to at least `bytes` bytes of `v`.
                unsafe { std::ptr::write_bytes(p, 0xA5, bytes) };
                data.push(v);
                sizes.push(d.numel * d.dtype.size_bytes());
            }
            Buffers { data, sizes }
        }
        fn bytes(&mut self, i: usize) -> &mut [u8] {
            let len = self.sizes[i];
            // SAFETY: the allocation holds at least `len` bytes.
            unsafe { std::slice::from_raw_parts_mut(self.data[i].as_mut_ptr().cast(), len) }
        }
        fn set<T: Copy>(&mut self, i: usize, vals: &[T]) {
            let b = self.bytes(i);
            assert_eq!(b.len(), std::mem::size_of_val(vals));
            // SAFETY: the sizes match (asserted) and `T` is plain data.
            unsafe {
                std::ptr::copy_nonoverlapping(vals.as_ptr().cast::<u8>(), b.as_mut_ptr(), b.len())
            };
        }
        fn get<T: Copy + Default>(&mut self, i: usize) -> Vec<T> {
            let b = self.bytes(i);
            let n = b.len() / std::mem::size_of::<T>();
            let mut out = vec![T::default(); n];
            // SAFETY: `out` holds exactly `b.len()` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(b.as_ptr(), out.as_mut_ptr().cast::<u8>(), b.len())
            };
            out
        }
        fn red_zones_intact(&self) -> bool {
            self.data.iter().zip(&self.sizes).all(|(v, &len)| {
                // SAFETY: the allocation is at least `len + RED` bytes of initialised data.
                let all =
                    unsafe { std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), v.len() * 8) };
                all[len..len + RED].iter().all(|&b| b == 0xA5)
            })
        }
    }

    /// Runs kernel `k` of `compiled` over its whole outer range in chunks of `chunk`; returns
    /// the status word.
    fn run(
        compiled: &CompiledKernels,
        k: usize,
        kern: &Kernel,
        bufs: &mut Buffers,
        chunk: i64,
    ) -> i32 {
        type F = unsafe extern "C" fn(*const *mut u8, i64, i64);
        // SAFETY: the code generator emits `void (i8**, i64, i64)` entry points.
        let f: F = unsafe { compiled.module.function(&compiled.entries[k]) }.unwrap();
        let mut status = 0i32;
        let mut args: Vec<*mut u8> = kern
            .reads
            .iter()
            .chain(&kern.writes)
            .map(|b| bufs.data[b.0 as usize].as_mut_ptr().cast())
            .collect();
        args.push((&mut status as *mut i32).cast());
        let extent = kernel_extent(kern).unwrap();
        let mut s = 0;
        while s < extent {
            let e = (s + chunk).min(extent);
            // SAFETY: every buffer is as large as its declaration (plus the red zone), the
            // kernel's accesses were checked against the declarations at compile time.
            unsafe { f(args.as_ptr(), s, e) };
            s = e;
        }
        status
    }

    /// Compiled with [`MathMode::Libm`]: these tests check f32 `exp`/`tanh` against Rust's
    /// (the C library's) bit for bit; the default polynomial math is `llvm_math.rs`'s.
    fn compile(kernels: &[&Kernel], decls: &[BufferDecl]) -> CompiledKernels {
        let options = JitOptions {
            math: MathMode::Libm,
            ..JitOptions::default()
        };
        compile_program_kernels(kernels, decls, &options).expect("compiles")
    }

    /// out[i, j] = exp(a[i, j] * b[j] + a[i, j]) over [rows, cols] (b broadcast over rows).
    fn add_mul_exp(rows: usize, cols: usize) -> (Kernel, Vec<BufferDecl>) {
        let mut body = Body::default();
        let a = body.load(DType::F32, 0, 0, &[cols as i64, 1]);
        let b = body.load(DType::F32, 1, 0, &[0, 1]);
        let m = body.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Mul, a, b));
        let s = body.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Add, m, a));
        let e = body.push(Ty::Data(DType::F32), InstOp::Unary(UnaryOp::Exp, s));
        let st = store_stage(vec![], body, vec![(2, affine(0, &[cols as i64, 1]), e)]);
        let decls = vec![
            buf(0, DType::F32, rows * cols),
            buf(1, DType::F32, cols),
            buf(2, DType::F32, rows * cols),
        ];
        (
            kernel("k0_mul_add_exp", &[0, 1], &[2], &[rows, cols], vec![st]),
            decls,
        )
    }

    #[test]
    fn elementwise_with_broadcast_matches_rust_bit_for_bit() {
        let (rows, cols) = (7, 37);
        let (k, decls) = add_mul_exp(rows, cols);
        let c = compile(&[&k], &decls);
        for chunk in [1, 5, 37, 1000] {
            let mut bufs = Buffers::new(&decls);
            let a: Vec<f32> = (0..rows * cols).map(|i| (i as f32 * 0.37).sin()).collect();
            let b: Vec<f32> = (0..cols).map(|i| i as f32 * 0.1 - 1.0).collect();
            bufs.set(0, &a);
            bufs.set(1, &b);
            assert_eq!(run(&c, 0, &k, &mut bufs, chunk), 0);
            let out: Vec<f32> = bufs.get(2);
            for i in 0..rows {
                for j in 0..cols {
                    let x = a[i * cols + j];
                    let want = (x * b[j] + x).exp();
                    assert_eq!(out[i * cols + j].to_bits(), want.to_bits(), "{i},{j}");
                }
            }
            assert!(bufs.red_zones_intact());
        }
    }

    /// Options for a named CPU (no host features): IR that does not depend on the build
    /// machine.
    fn for_cpu(cpu: &str, math: MathMode) -> JitOptions {
        JitOptions {
            target: CpuTarget::Named {
                cpu: cpu.into(),
                features: "".into(),
            },
            math,
            ..JitOptions::default()
        }
    }

    /// Whether the IR has a vector of `elem` (`<4 x float>`, `<8 x i32>` …); returns the widths.
    fn vector_widths(ir: &str, elem: &str) -> Vec<usize> {
        let pat = format!(" x {elem}>");
        ir.match_indices(&pat)
            .filter_map(|(i, _)| {
                let head = &ir[..i];
                let digits = head.trim_end_matches(|c: char| c.is_ascii_digit());
                if digits.ends_with('<') {
                    head[digits.len()..].parse().ok()
                } else {
                    None
                }
            })
            .collect()
    }

    #[test]
    fn the_elementwise_loop_vectorises() {
        let mut body = Body::default();
        let a = body.load(DType::F32, 0, 0, &[64, 1]);
        let b = body.load(DType::F32, 1, 0, &[0, 1]);
        let m = body.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Mul, a, b));
        let s = body.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Add, m, a));
        let st = store_stage(vec![], body, vec![(2, affine(0, &[64, 1]), s)]);
        let decls = vec![
            buf(0, DType::F32, 64 * 64),
            buf(1, DType::F32, 64),
            buf(2, DType::F32, 64 * 64),
        ];
        let k = kernel("k_mul_add", &[0, 1], &[2], &[64, 64], vec![st]);
        let opts = for_cpu("x86-64", MathMode::default());
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let ir = optimized_kernel_ir(&k, &decls, &opts).unwrap();
        let widths = vector_widths(&ir, "float");
        assert!(widths.contains(&4), "no <4 x float> in:\n{ir}");
        assert!(
            !ir.contains("vector.memcheck"),
            "runtime alias checks in:\n{ir}"
        );
        let v3 = for_cpu("x86-64-v3", MathMode::default());
        let ir = optimized_kernel_ir(&k, &decls, &v3).unwrap();
        assert!(
            vector_widths(&ir, "float").contains(&8),
            "no <8 x float> for AVX2:\n{ir}"
        );
    }

    /// A row sum of `exp` over a row too short to split into lanes (21 elements): the exp loop
    /// is staged apart from the in-order sum, so it vectorises, with a masked last vector
    /// instead of a scalar remainder (AVX2 and AVX-512 both have masked loads and stores).
    #[test]
    fn short_row_reductions_vectorise_their_body() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let n = 21;
        let mut b1 = Body::default();
        let x = b1.load(DType::F32, 0, 0, &[n as i64, 1]);
        let e = b1.push(Ty::Data(DType::F32), InstOp::Unary(UnaryOp::Exp, x));
        let sum = ValueId(b1.next);
        b1.next += 1;
        let reduce = Stage {
            inner: vec![n],
            body: b1.insts,
            effect: StageEffect::Reduce {
                value: e,
                combiner: Combiner::Sum,
                acc: DType::F32,
                result: sum,
            },
        };
        let store = store_stage(vec![], Body::default(), vec![(1, affine(0, &[1]), sum)]);
        let decls = vec![buf(0, DType::F32, 8 * n), buf(1, DType::F32, 8)];
        let k = kernel("k_row_sum_exp", &[0], &[1], &[8], vec![reduce, store]);
        for cpu in ["x86-64-v3", "x86-64-v4"] {
            let ir = optimized_kernel_ir(&k, &decls, &for_cpu(cpu, MathMode::default())).unwrap();
            assert!(
                vector_widths(&ir, "float").iter().any(|&w| w >= 8),
                "no vector of 8 or more floats for {cpu}:\n{ir}"
            );
            assert!(
                ir.contains("@llvm.masked."),
                "no masked last vector for {cpu}:\n{ir}"
            );
        }
    }

    #[test]
    fn a_scalar_constant_kernel_and_an_empty_one() {
        let mut body = Body::default();
        let c = body.push(Ty::Data(DType::F32), InstOp::Const(Scalar::Float(2.5)));
        let st = store_stage(vec![], body, vec![(0, affine(0, &[]), c)]);
        let k = kernel("k_scalar", &[], &[0], &[], vec![st]);
        let decls = vec![buf(0, DType::F32, 1)];
        let compiled = compile(&[&k], &decls);
        let mut bufs = Buffers::new(&decls);
        run(&compiled, 0, &k, &mut bufs, 1);
        assert_eq!(bufs.get::<f32>(0), vec![2.5]);
        assert!(bufs.red_zones_intact());
    }

    /// `out[i] = table[idx[i]]` with a run-time index: an index outside the table sets the
    /// status word, reads 0 and writes nothing past any buffer.
    #[test]
    fn computed_indices_out_of_range_set_the_status_word() {
        for width in [IndexWidth::I32, IndexWidth::I64] {
            let mut body = Body::default();
            let i = body.load(DType::I64, 1, 0, &[1]);
            let ix = body.push(Ty::Index, InstOp::ToIndex(i));
            let v = body.push(
                Ty::Data(DType::F64),
                InstOp::Load {
                    buffer: BufferId(0),
                    access: Access::Computed(ix),
                },
            );
            let st = store_stage(vec![], body, vec![(2, affine(0, &[1]), v)]);
            let mut k = kernel("k_gather", &[0, 1], &[2], &[4], vec![st]);
            k.index_width = width;
            let decls = vec![
                buf(0, DType::F64, 3),
                buf(1, DType::I64, 4),
                buf(2, DType::F64, 4),
            ];
            let c = compile(&[&k], &decls);
            let mut bufs = Buffers::new(&decls);
            bufs.set(0, &[10.0f64, 20.0, 30.0]);
            bufs.set(1, &[2i64, 0, 1, 2]);
            assert_eq!(run(&c, 0, &k, &mut bufs, 3), 0);
            assert_eq!(bufs.get::<f64>(2), vec![30.0, 10.0, 20.0, 30.0]);
            for bad in [3i64, -1, i64::MIN, 1 << 32] {
                bufs.set(1, &[0i64, bad, 1, 2]);
                assert_eq!(run(&c, 0, &k, &mut bufs, 1), 1, "index {bad}");
                assert!(bufs.red_zones_intact());
            }
        }
    }

    /// A bf16 chain (i16 loads, f32 arithmetic, integer rounding after every op) vectorises
    /// on x86-64-v3. (An f16 chain does not: LLVM folds `fptrunc(fop(fpext a, fpext b))` into
    /// scalar `half` arithmetic, exact for + - * / sqrt, which x86 without AVX-512 FP16
    /// promotes element by element; the loop is unrolled instead.)
    #[test]
    fn bf16_chains_vectorise() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let d = DType::BF16;
        let mut body = Body::default();
        let a = body.load(d, 0, 0, &[1]);
        let b = body.load(d, 1, 0, &[1]);
        let m = body.push(Ty::Data(d), InstOp::Binary(BinaryOp::Mul, a, b));
        let s = body.push(Ty::Data(d), InstOp::Binary(BinaryOp::Add, m, a));
        let st = store_stage(vec![], body, vec![(2, affine(0, &[1]), s)]);
        let decls = vec![buf(0, d, 1024), buf(1, d, 1024), buf(2, d, 1024)];
        let k = kernel("k_bf16", &[0, 1], &[2], &[1024], vec![st]);
        let v3 = for_cpu("x86-64-v3", MathMode::default());
        let ir = optimized_kernel_ir(&k, &decls, &v3).unwrap();
        assert!(
            vector_widths(&ir, "float").iter().any(|&w| w >= 8),
            "no <8 x float> in:\n{ir}"
        );
    }

    /// out[i] = tanh(x[i]) over `n` f32s.
    fn tanh_kernel(n: usize) -> (Kernel, Vec<BufferDecl>) {
        let d = DType::F32;
        let mut body = Body::default();
        let x = body.load(d, 0, 0, &[1]);
        let t = body.push(Ty::Data(d), InstOp::Unary(UnaryOp::Tanh, x));
        let st = store_stage(vec![], body, vec![(1, affine(0, &[1]), t)]);
        let decls = vec![buf(0, d, n), buf(1, d, n)];
        (kernel("k_tanh", &[0], &[1], &[n], vec![st]), decls)
    }

    /// Runs the inline f32 `tanh` over `xs` and compares it with Rust's `f32::tanh` (the
    /// reference interpreter's: the C library's `tanhf`) bit for bit, any NaN matching any NaN;
    /// returns the mismatches as `(x, got, want)`.
    fn tanh_mismatches(
        c: &CompiledKernels,
        k: &Kernel,
        decls: &[BufferDecl],
        xs: &[f32],
    ) -> Vec<(f32, f32, f32)> {
        let mut bufs = Buffers::new(decls);
        bufs.set(0, xs);
        assert_eq!(run(c, 0, k, &mut bufs, 1 << 16), 0);
        assert!(bufs.red_zones_intact());
        let got: Vec<f32> = bufs.get(1);
        xs.iter()
            .zip(&got)
            .filter_map(|(&x, &g)| {
                let w = x.tanh();
                (g.to_bits() != w.to_bits() && !(g.is_nan() && w.is_nan())).then_some((x, g, w))
            })
            .collect()
    }

    /// Fails with the count and the first eight of [`tanh_mismatches`], if any.
    fn assert_tanhf(c: &CompiledKernels, k: &Kernel, decls: &[BufferDecl], xs: &[f32]) {
        let bad = tanh_mismatches(c, k, decls, xs);
        assert!(
            bad.is_empty(),
            "{} mismatches, first {:?}",
            bad.len(),
            &bad[..bad.len().min(8)]
        );
    }

    /// 2^20 inputs spread over every bit pattern, a dense run of small and mid-range values,
    /// the specials, and both signs of each branch threshold (glibc's and musl's `tanhf`, and
    /// `expm1f`'s at `2|x|`) ±2 ulp.
    #[test]
    fn inline_tanh_is_tanhf_bit_for_bit_on_a_sample() {
        let mut bits: Vec<u32> = (0..1u32 << 20)
            .map(|i| i.wrapping_mul(4096) ^ (i % 4093))
            .collect();
        bits.extend(0x3c00_0000..0x3c00_0000 + (1 << 16));
        bits.extend(0x3f00_0000..0x3f00_0000 + (1 << 16));
        let thresholds = [
            0x0000_0000u32,
            0x0000_0001,
            0x007f_ffff,
            0x0080_0000,
            0x2400_0000,
            0x3280_0000,
            0x3e30_0000,
            0x3e82_c578,
            0x3e31_7218,
            0x3f0c_9f54,
            0x3f05_1592,
            0x3f80_0000,
            0x4120_0000,
            0x41b0_0000,
            0x7f7f_ffff,
            0x7f80_0000,
            0x7fc0_0000,
            0x7f80_0001,
        ];
        for t in thresholds {
            for d in -2i32..=2 {
                let v = t.wrapping_add(d as u32) & 0x7fff_ffff;
                bits.extend([v, v | 0x8000_0000]);
            }
        }
        let xs: Vec<f32> = bits.into_iter().map(f32::from_bits).collect();
        let (k, decls) = tanh_kernel(xs.len());
        let c = compile(&[&k], &decls);
        assert_tanhf(&c, &k, &decls, &xs);
    }

    /// Every f32 input (2^32 of them, in batches): the inline `tanh` is the C library's `tanhf`
    /// bit for bit. Slow: `cargo test --release -- --ignored`.
    #[test]
    #[ignore]
    fn inline_tanh_is_tanhf_for_every_f32() {
        let n = 1usize << 24;
        let (k, decls) = tanh_kernel(n);
        let c = compile(&[&k], &decls);
        for batch in 0..(1u64 << 32) / n as u64 {
            let xs: Vec<f32> = (0..n as u64)
                .map(|i| f32::from_bits((batch * n as u64 + i) as u32))
                .collect();
            assert_tanhf(&c, &k, &decls, &xs);
        }
    }

    /// The inline glibc f32 `tanh` (selects, no calls) vectorises: `<8 x float>` on x86-64-v3.
    #[test]
    fn the_tanh_loop_vectorises() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let (k, decls) = tanh_kernel(1024);
        let v3 = for_cpu("x86-64-v3", MathMode::Libm);
        let ir = optimized_kernel_ir(&k, &decls, &v3).unwrap();
        assert!(!ir.contains("tanhf"), "a tanhf call in:\n{ir}");
        assert!(
            vector_widths(&ir, "float").contains(&8),
            "no <8 x float> in:\n{ir}"
        );
    }

    /// Two kernels that may stream: an elementwise one (`out[i, j] = a[i, j] * b[j] + a[i, j]`
    /// over outer [rows, cols]) and a row one whose store stage walks an inner dim (outer
    /// [rows], inner [cols], same values).
    fn streaming_pair(rows: usize, cols: usize) -> (Vec<Kernel>, Vec<BufferDecl>) {
        let body = |strides: &[i64], bstrides: &[i64]| {
            let mut body = Body::default();
            let a = body.load(DType::F32, 0, 0, strides);
            let b = body.load(DType::F32, 1, 0, bstrides);
            let m = body.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Mul, a, b));
            let s = body.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Add, m, a));
            (body, s)
        };
        let c = cols as i64;
        let (b1, v1) = body(&[c, 1], &[0, 1]);
        let elementwise = store_stage(vec![], b1, vec![(2, affine(0, &[c, 1]), v1)]);
        let (b2, v2) = body(&[c, 1], &[0, 1]);
        let row = store_stage(vec![cols], b2, vec![(2, affine(0, &[c, 1]), v2)]);
        let decls = vec![
            buf(0, DType::F32, rows * cols),
            buf(1, DType::F32, cols),
            buf(2, DType::F32, rows * cols),
        ];
        (
            vec![
                kernel("k_ew", &[0, 1], &[2], &[rows, cols], vec![elementwise]),
                kernel("k_row", &[0, 1], &[2], &[rows], vec![row]),
            ],
            decls,
        )
    }

    /// Inputs `a` (`rows x cols`) and `b` (`cols`) of [`streaming_pair`]'s kernels, and the
    /// output they must give, computed in Rust.
    fn streaming_pair_data(rows: usize, cols: usize) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let n = rows * cols;
        let a: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).sin() * 3.0).collect();
        let b: Vec<f32> = (0..cols).map(|i| i as f32 * 0.1 - 1.0).collect();
        let mut want = vec![0f32; n];
        for i in 0..rows {
            for j in 0..cols {
                let x = a[i * cols + j];
                want[i * cols + j] = x * b[j] + x;
            }
        }
        (a, b, want)
    }

    /// The text of the first function in module text `ir` that contains `name` (pass the
    /// function's own `@name(`, which its `define` line holds).
    fn function_ir<'a>(ir: &'a str, name: &str) -> &'a str {
        let f = ir
            .split("\ndefine ")
            .find(|f| f.contains(name))
            .expect("the kernel is defined");
        f.split("\n}").next().unwrap_or(f)
    }

    /// `options` for a named AVX-512 CPU, so that kernels use 512-bit vectors as they do on
    /// such a host (`jit.rs`: LLVM prefers 256 bits on Intel CPUs otherwise), whatever CPU
    /// runs the tests.
    fn avx512(options: &JitOptions) -> JitOptions {
        JitOptions {
            target: CpuTarget::Named {
                cpu: "x86-64-v4".into(),
                features: "+avx512f,+avx512bw,+avx512dq,+avx512vl".into(),
            },
            ..options.clone()
        }
    }

    /// How many lines of kernel `k`'s optimised IR for [`avx512`] with `options` contain
    /// `needle`. What the vectoriser makes of a body depends on the CPU it targets (an AVX2
    /// host leaves some short rows scalar, and unrolls others differently), so counts that a
    /// test compares are taken for one named CPU, not for the machine running the tests.
    fn avx512_lines(
        k: &Kernel,
        buffers: &[BufferDecl],
        options: &JitOptions,
        needle: &str,
    ) -> usize {
        let ir = optimized_kernel_ir(k, buffers, &avx512(options)).unwrap();
        let f = function_ir(&ir, &format!("@{}(", k.name));
        f.lines().filter(|l| l.contains(needle)).count()
    }

    /// `n` f32s that end where an inaccessible page begins, so that a kernel's reads and
    /// writes past them would fault; unmapped on drop.
    struct Guarded {
        map: *mut libc::c_void,
        len: usize,
        data: *mut f32,
    }

    impl Guarded {
        fn new(values: &[f32]) -> Guarded {
            let page = 4096;
            let bytes = values.len() * 4;
            let body = bytes.div_ceil(page) * page;
            let len = body + page;
            // SAFETY: an anonymous private mapping of `len` bytes; checked below.
            let map = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                    -1,
                    0,
                )
            };
            assert_ne!(map, libc::MAP_FAILED, "mmap");
            // SAFETY: the last page of the mapping just made.
            let r =
                unsafe { libc::mprotect(map.cast::<u8>().add(body).cast(), page, libc::PROT_NONE) };
            assert_eq!(r, 0, "mprotect");
            // SAFETY: `body - bytes` is inside the mapping, and 4-aligned (both are multiples
            // of 4); the `values.len()` f32s from there end at the guard page.
            let data = unsafe { map.cast::<u8>().add(body - bytes).cast::<f32>() };
            // SAFETY: `data` has room for `values.len()` f32s (above), not overlapping `values`.
            unsafe { std::ptr::copy_nonoverlapping(values.as_ptr(), data, values.len()) };
            Guarded { map, len, data }
        }
    }

    impl Drop for Guarded {
        fn drop(&mut self) {
            // SAFETY: the mapping made in `new`, unmapped once.
            unsafe { libc::munmap(self.map, self.len) };
        }
    }

    /// Software prefetch (`JitOptions::prefetch_bytes`, on by default): on x86-64 every vector
    /// loop's loads and stores are preceded by read and write prefetches that distance ahead,
    /// and there are none with it off; the values are the same bits either way. Every buffer
    /// here ends at an inaccessible page, so the prefetches of the last lines point into it:
    /// prefetches never fault.
    #[test]
    fn prefetches_precede_vector_accesses_change_no_value_and_never_fault() {
        let (rows, cols) = (40, 203);
        let (ks, decls) = streaming_pair(rows, cols);
        let refs: Vec<&Kernel> = ks.iter().collect();
        let with = |prefetch_bytes: Option<u32>| JitOptions {
            prefetch_bytes,
            ..JitOptions::default()
        };
        assert_eq!(with(None).prefetch_bytes, None);
        assert_eq!(JitOptions::default().prefetch_bytes, Some(2048));
        let on = compile_program_kernels(&refs, &decls, &JitOptions::default()).unwrap();
        let far = compile_program_kernels(&refs, &decls, &with(Some(1 << 20))).unwrap();
        let off = compile_program_kernels(&refs, &decls, &with(None)).unwrap();
        if cfg!(target_arch = "x86_64") {
            let ir = on.module.optimized_ir();
            for name in ["@k_ew(", "@k_row("] {
                let f = function_ir(ir, name);
                for (rw, what) in [(0, "read"), (1, "write")] {
                    let call = "@llvm.prefetch.p0i8(i8* %";
                    let args = format!(", i32 {rw}, i32 3, i32 1)");
                    assert!(
                        f.lines().any(|l| l.contains(call) && l.contains(&args)),
                        "no {what} prefetch in {name}:\n{f}"
                    );
                }
                assert!(
                    f.contains("i64 2048"),
                    "no 2048-byte distance in {name}:\n{f}"
                );
            }
            assert!(!off.module.optimized_ir().contains("llvm.prefetch"));
        }
        let n = rows * cols;
        let (a, b, want) = streaming_pair_data(rows, cols);
        type F = unsafe extern "C" fn(*const *mut u8, i64, i64);
        for (k, kern) in ks.iter().enumerate() {
            let extent = kernel_extent(kern).unwrap();
            for (what, compiled) in [("2 KiB", &on), ("1 MiB", &far), ("off", &off)] {
                // SAFETY: the code generator emits `void (i8**, i64, i64)` entry points.
                let f: F = unsafe { compiled.module.function(&compiled.entries[k]) }.unwrap();
                let (ga, gb, out) = (Guarded::new(&a), Guarded::new(&b), Guarded::new(&want));
                let mut status = 0i32;
                let args: [*mut u8; 4] = [
                    ga.data.cast(),
                    gb.data.cast(),
                    out.data.cast(),
                    (&mut status as *mut i32).cast(),
                ];
                // SAFETY: each pointer has its buffer's declared elements behind it.
                unsafe { std::ptr::write_bytes(out.data, 0xff, n) };
                // SAFETY: as above; the whole extent in one chunk.
                unsafe { f(args.as_ptr(), 0, extent) };
                assert_eq!(status, 0);
                // SAFETY: `out` holds `n` f32s.
                let got = unsafe { std::slice::from_raw_parts(out.data, n) };
                let same = same_bits(got, &want);
                assert!(same, "kernel {k}, prefetch {what}: values differ");
            }
        }
    }

    /// Row kernels (a reduction, then passes over the row again) over more data than fits in
    /// cache (above `INTERLEAVE_MAX_BYTES`) prefetch two rows ahead under `RowPrefetch::Rows`
    /// where that is further than the module's 2 KiB, at most 16 KiB; under `Module`, or over
    /// data in cache, 2 KiB ahead like every other kernel; under `Off`, not at all out of cache
    /// (2 KiB ahead in cache). The values are the same bits every way, at every chunking.
    #[test]
    fn row_kernels_prefetch_two_rows_ahead() {
        assert_eq!(JitOptions::default().row_prefetch, RowPrefetch::Auto);
        let with = |row_prefetch| JitOptions {
            row_prefetch,
            ..JitOptions::default()
        };
        let (rows_ahead, module, off) = (
            with(RowPrefetch::Rows),
            with(RowPrefetch::Module),
            with(RowPrefetch::Off),
        );
        // Rows of 100 floats: two are 800 bytes, less than the module's distance; of 768: two
        // are 6 KiB; of 5000: two are 40 000 bytes, capped. Enough rows for 5 MiB per
        // buffer, and for 768, 5 rows: in cache.
        let big = |cols: usize| (5 << 20) / (4 * cols) + 1;
        for (rows, cols, distance) in [
            (big(100), 100, 2048),
            (big(768), 768, 6144),
            (big(5000), 5000, 16384),
            (5, 768, 2048),
        ] {
            for (name, build) in row_builds() {
                let program = row_program(build, rows, cols);
                let ks: Vec<&Kernel> = program.kernels().collect();
                let row = ks
                    .iter()
                    .position(|k| has_reduction(k))
                    .expect("a row kernel");
                let what = format!("{name} over {rows} rows of {cols}");
                let with = compile_program_kernels(&ks, &program.buffers, &rows_ahead).unwrap();
                let without = compile_program_kernels(&ks, &program.buffers, &module).unwrap();
                let none = compile_program_kernels(&ks, &program.buffers, &off).unwrap();
                // Off leaves the prefetches out of row kernels out of cache only.
                let off_wants = (rows == 5).then_some(2048);
                if cfg!(target_arch = "x86_64") {
                    for (compiled, want) in [
                        (&with, Some(distance)),
                        (&without, Some(2048)),
                        (&none, off_wants),
                    ] {
                        let ir = compiled.module.optimized_ir();
                        let f = function_ir(ir, &format!("@{}(", compiled.entries[row]));
                        let aheads: Vec<&str> = f
                            .lines()
                            .filter(|l| l.contains("%pf.at") && l.contains("getelementptr"))
                            .collect();
                        let Some(want) = want else {
                            assert!(aheads.is_empty(), "{what}: prefetches under Off\n{f}");
                            continue;
                        };
                        assert!(!aheads.is_empty(), "{what}: no prefetch\n{f}");
                        let suffix = format!("i64 {want}");
                        assert!(
                            aheads.iter().all(|l| l.trim_end().ends_with(&suffix)),
                            "{what}: not all prefetches {want} bytes ahead:\n{}",
                            aheads.join("\n")
                        );
                    }
                }
                same_bits_at_every_chunking(&program, ks[row], &with, &without, &what);
                same_bits_at_every_chunking(&program, ks[row], &with, &none, &what);
            }
        }
    }

    /// `RowPrefetch::Auto` is `Off` on AMD's Zen CPUs with AVX-512F (LLVM's `znver*` names;
    /// LLVM 14 names Zen 4 `znver3`, as it does Zen 3) and `Rows` elsewhere, Zen 3 included;
    /// the other choices stand for themselves; each prints and parses back.
    #[test]
    fn row_prefetch_goes_by_the_cpu() {
        use RowPrefetch::{Auto, Module, Off, Rows};
        let (zen3, zen4) = ("+avx2,+fma,-avx512f", "+avx2,+fma,+avx512f,+avx512vl");
        for (cpu, features, want) in [
            ("znver3", zen4, Off),
            ("znver4", zen4, Off),
            ("znver3", zen3, Rows),
            ("znver3", "+avx512f,-avx512f", Rows),
            ("znver3", "+avx512f,+avx512vl,-avx2", Rows),
            ("znver2", "+avx2,+fma", Rows),
            ("sapphirerapids", zen4, Rows),
            ("skylake-avx512", "+avx512f", Rows),
            ("x86-64-v3", "", Rows),
            ("", "", Rows),
        ] {
            assert_eq!(Auto.for_cpu(cpu, features), want, "{cpu:?} {features:?}");
            for fixed in [Rows, Module, Off] {
                assert_eq!(fixed.for_cpu(cpu, features), fixed, "{cpu:?}");
            }
        }
        for r in [Auto, Rows, Module, Off] {
            assert_eq!(r.to_string().parse::<RowPrefetch>(), Ok(r));
        }
        let e = "sideways".parse::<RowPrefetch>().unwrap_err();
        assert!(
            e.contains("sideways") && e.contains("auto, rows, module, off"),
            "{e}"
        );
    }

    /// `zen3` is AMD Zen 3 only (`znver3` without AVX-512F, read as LLVM reads the feature
    /// string), Zen 4 not included; `ByCpu::Auto` (loop fission's and constant loads'
    /// default) stands for what it is given, `On` and `Off` for themselves.
    #[test]
    fn by_cpu_choices_go_by_the_cpu() {
        use ByCpu::{Auto, Off, On};
        let (zen3_features, zen4) = ("+avx2,+fma,-avx512f", "+avx2,+fma,+avx512f,+avx512vl");
        for (cpu, features, want) in [
            ("znver3", zen3_features, true),
            ("znver3", "+avx512f,-avx512f", true),
            ("znver3", "+avx512f,+avx512vl,-avx2", true),
            ("znver3", zen4, false),
            ("znver4", zen4, false),
            ("znver2", "+avx2,+fma", false),
            ("skylake-avx512", "+avx512f", false),
            ("haswell", "+avx2,+fma", false),
            ("x86-64-v3", "", false),
            ("", "", false),
        ] {
            let measured = zen3(cpu, features);
            assert_eq!(measured, want, "{cpu:?} {features:?}");
            assert_eq!(Auto.on(measured), want);
            assert!(On.on(measured) && !Off.on(measured), "{cpu:?}");
        }
        for (c, name) in [(Auto, "auto"), (On, "on"), (Off, "off")] {
            assert_eq!(c.to_string(), name);
        }
    }

    /// The machine schedule is bottom up unless the environment says otherwise; the
    /// environment variable's values parse, `auto` standing for the default; this process's
    /// host target records the choice its environment makes.
    #[test]
    fn machine_schedule_is_bottom_up_unless_chosen() {
        use MachineSchedule::{BottomUp, TopDown};
        assert_eq!(MachineSchedule::default(), BottomUp);
        for s in [BottomUp, TopDown] {
            assert_eq!(s.to_string().parse::<MachineSchedule>(), Ok(s));
            assert_eq!(MachineSchedule::from_var(&s.to_string()), Ok(Some(s)));
        }
        assert_eq!(MachineSchedule::from_var("auto"), Ok(None));
        assert_eq!(MachineSchedule::from_var(""), Ok(None));
        let e = MachineSchedule::from_var("sideways").unwrap_err();
        assert!(
            e.contains("sideways") && e.contains("bottom-up, top-down, auto"),
            "{e}"
        );
        let host = host_target().unwrap();
        let chosen = std::env::var(MACHINE_SCHEDULE_VAR)
            .ok()
            .and_then(|v| MachineSchedule::from_var(&v).unwrap());
        assert_eq!(host.schedule, chosen.unwrap_or_default());
        assert!(host
            .cache_key()
            .ends_with(&format!(" schedule {}", host.schedule)));
    }

    /// Where a later pass over the row computes a transcendental op (softmax's `exp`, and the
    /// `erf` of GELU before a softmax), the row prefetches leave the first pass (the max, a
    /// tight loop of loads) to the later, arithmetic-heavy one (`prefetch.rs`): in the row
    /// kernel over data out of cache, some vector loads from the buffers carry no prefetch
    /// (the max pass's) while others do. Where every pass is light (layer_norm), every such
    /// load keeps its prefetch. Loads from the buffers are the ones with an `!alias.scope`
    /// (the `noalias` parameters' scopes once the body is inlined); the stack's have none.
    #[test]
    fn row_prefetches_leave_the_first_pass_when_a_later_one_computes_exp() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let rows = (5 << 20) / (4 * 768) + 1;
        for (name, build) in row_builds() {
            let program = row_program(build, rows, 768);
            let row = program
                .kernels()
                .find(|k| has_reduction(k))
                .expect("a row kernel");
            let options = avx512(&JitOptions::default());
            let ir = optimized_kernel_ir(row, &program.buffers, &options).unwrap();
            let lines: Vec<&str> = ir.lines().collect();
            let (mut with, mut without) = (0, 0);
            for (i, l) in lines.iter().enumerate() {
                if !(l.contains(" = load <") && l.contains("!alias.scope")) {
                    continue;
                }
                let prefetched = i > 0 && lines[i - 1].contains("@llvm.prefetch");
                if prefetched {
                    with += 1;
                } else {
                    without += 1;
                }
            }
            assert!(with > 0, "{name}: no load prefetches\n{ir}");
            if name == "layer_norm" {
                assert_eq!(without, 0, "{name}: loads without a prefetch\n{ir}");
            } else {
                assert!(without > 0, "{name}: the first pass prefetches\n{ir}");
            }
        }
    }

    /// A streaming store loop's head (up to the first 64-byte boundary) and tail (after the
    /// last whole group of four lines) run as masked vectors on AVX-512, not as scalar or
    /// half-width loops: rows of 203 floats have both, at any alignment, in the elementwise
    /// kernel and in the row kernel of [`streaming_pair`], each with masked stores for both.
    /// (Before, they were half-width and scalar loops, and this test failed.)
    #[test]
    fn streaming_loops_mask_their_head_and_tail() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let (ks, decls) = streaming_pair(6, 203);
        let options = JitOptions {
            nontemporal_min_bytes: Some(0),
            ..JitOptions::default()
        };
        for kern in &ks {
            let masked = avx512_lines(kern, &decls, &options, "@llvm.masked.store");
            assert!(masked >= 2, "{}: {masked} masked stores", kern.name);
        }
    }

    /// On an AVX2 CPU, whose widest vectors are half a line, a streaming main loop's 32-byte
    /// stores stream, in pairs that fill each line: as many of them start a line (`align 64`)
    /// as end one (`align 32`), and no other store streams (the masked head and tail, the
    /// vectoriser's narrower remainder). Both kernels of [`streaming_pair`]. (Before, only
    /// whole 64-byte vectors streamed, so on AVX2 nothing did, and this test failed.)
    #[test]
    fn avx2_streaming_stores_fill_whole_lines() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let (ks, decls) = streaming_pair(6, 203);
        let options = JitOptions {
            target: CpuTarget::Named {
                cpu: "x86-64-v3".into(),
                features: "+avx2,+fma".into(),
            },
            nontemporal_min_bytes: Some(0),
            ..JitOptions::default()
        };
        for kern in &ks {
            let ir = optimized_kernel_ir(kern, &decls, &options).unwrap();
            let f = function_ir(&ir, &format!("@{}(", kern.name));
            let streamed: Vec<&str> = f.lines().filter(|l| l.contains("!nontemporal")).collect();
            assert!(
                !streamed.is_empty(),
                "{}: no streaming store in:\n{f}",
                kern.name
            );
            for l in &streamed {
                assert!(l.trim_start().starts_with("store <8 x float>"), "{l}");
            }
            let starts = streamed.iter().filter(|l| l.contains("align 64")).count();
            let ends = streamed.iter().filter(|l| l.contains("align 32")).count();
            assert_eq!(
                starts + ends,
                streamed.len(),
                "{}: {streamed:#?}",
                kern.name
            );
            assert_eq!(starts, ends, "{}: {streamed:#?}", kern.name);
        }
    }

    /// Rows of fewer than 64 floats (256 bytes, one group of four lines) cannot hold a whole
    /// group, so a streaming loop over them would only ever run its masked head and tail, which
    /// never stream: such kernels are generated as with streaming off, with no twin. From 64
    /// floats on they stream. Both kernels of [`streaming_pair`], elementwise and row.
    #[test]
    fn rows_too_short_for_a_group_of_lines_do_not_stream() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let with = |min: Option<u64>| {
            avx512(&JitOptions {
                nontemporal_min_bytes: min,
                ..JitOptions::default()
            })
        };
        for cols in [8, 16, 40, 63, 64, 100] {
            let (ks, decls) = streaming_pair(5, cols);
            for k in &ks {
                let streaming = optimized_kernel_ir(k, &decls, &with(Some(0))).unwrap();
                let plain = optimized_kernel_ir(k, &decls, &with(None)).unwrap();
                let twin = has_plain_twin(k, &decls, &[BufferId(2)], &with(Some(0)));
                let what = format!("{} with rows of {cols}", k.name);
                if cols < 64 {
                    assert_eq!(streaming, plain, "{what}");
                    assert!(!twin, "{what}");
                } else {
                    assert_ne!(streaming, plain, "{what}");
                    assert!(twin, "{what}");
                    assert!(streaming.contains("!nontemporal"), "{what}");
                }
            }
        }
    }

    /// The scratch arrays holding values a row kernel keeps from one pass to the next
    /// (softmax's `exp`, `reuse.rs`) start on a cache line: they are written and read back as
    /// whole vectors, which at the stack's own 16-byte alignment split lines three times in
    /// four (softmax over 65536 x 768 ran about 13% slower, depending on the caller's stack).
    #[test]
    fn kept_values_scratch_is_line_aligned() {
        let mut seen = 0;
        for (name, build) in row_builds() {
            for rows in [4, 5] {
                let program = row_program(build, rows, 768);
                for k in program.kernels() {
                    for options in [JitOptions::default(), avx512(&JitOptions::default())] {
                        let ir = optimized_kernel_ir(k, &program.buffers, &options).unwrap();
                        for l in ir
                            .lines()
                            .filter(|l| l.contains("%keep") && l.contains(" = alloca "))
                        {
                            assert!(l.trim_end().ends_with("align 64"), "{name}: {l}");
                            seen += 1;
                        }
                    }
                }
            }
        }
        assert!(seen > 0, "no kept values in the row kernels");
    }

    /// Streaming stores (peeled loops, `!nontemporal` vector stores) give the same bits as plain
    /// ones for every alignment of the output and every chunking, and write nothing outside it.
    /// Which stores stream is checked in the IR for a named AVX-512 CPU; the values on this
    /// host, whatever its vector width.
    #[test]
    fn streaming_stores_match_plain_stores_at_every_alignment() {
        let (rows, cols) = (6, 203);
        let (ks, decls) = streaming_pair(rows, cols);
        let refs: Vec<&Kernel> = ks.iter().collect();
        let with = |min: Option<u64>| JitOptions {
            nontemporal_min_bytes: min,
            ..JitOptions::default()
        };
        let streaming = compile_program_kernels(&refs, &decls, &with(Some(0))).unwrap();
        let plain = compile_program_kernels(&refs, &decls, &with(None)).unwrap();
        // The IR as an AVX-512 host has it: only whole 64-byte vectors stream, and an AVX2
        // host's vectoriser writes 32-byte ones.
        if cfg!(target_arch = "x86_64") {
            for kern in &ks {
                let ir = optimized_kernel_ir(kern, &decls, &avx512(&with(Some(0)))).unwrap();
                let f = function_ir(&ir, &format!("@{}(", kern.name));
                assert!(f.contains("!nontemporal"), "no streaming store in:\n{f}");
                assert!(f.contains("llvm.x86.sse.sfence"), "no sfence in:\n{f}");
                // Write prefetches (on by default) go with the plain vector stores only: a
                // streaming store does not read its line.
                let plain_vector_stores = f
                    .lines()
                    .filter(|l| {
                        l.trim_start().starts_with("store <")
                            && !l.contains("!nontemporal")
                            && (l.contains("<8 x float>") || l.contains("<16 x float>"))
                    })
                    .count();
                let write_prefetches = f
                    .lines()
                    .filter(|l| {
                        l.contains("@llvm.prefetch") && l.contains(", i32 1, i32 3, i32 1)")
                    })
                    .count();
                assert_eq!(write_prefetches, plain_vector_stores, "in:\n{f}");
            }
            assert!(!plain.module.optimized_ir().contains("!nontemporal"));
        }
        let n = rows * cols;
        let (a, b, want) = streaming_pair_data(rows, cols);
        type F = unsafe extern "C" fn(*const *mut u8, i64, i64);
        const GUARD: usize = 64;
        for (k, kern) in ks.iter().enumerate() {
            let extent = kernel_extent(kern).unwrap();
            for compiled in [&streaming, &plain] {
                // SAFETY: the code generator emits `void (i8**, i64, i64)` entry points.
                let f: F = unsafe { compiled.module.function(&compiled.entries[k]) }.unwrap();
                for shift in 0..16 {
                    for chunk in [1, 7, 64, 203, 1000, extent] {
                        let mut out = vec![f32::from_bits(0x7fc0_dead); n + 2 * GUARD];
                        let mut status = 0i32;
                        let args: [*mut u8; 4] = [
                            a.as_ptr().cast_mut().cast(),
                            b.as_ptr().cast_mut().cast(),
                            out[GUARD - shift..].as_mut_ptr().cast(),
                            (&mut status as *mut i32).cast(),
                        ];
                        let mut s = 0;
                        while s < extent {
                            let e = (s + chunk).min(extent);
                            // SAFETY: `a` and `b` hold their declared elements, the output
                            // pointer has `n` elements after it (and `GUARD - shift` before).
                            unsafe { f(args.as_ptr(), s, e) };
                            s = e;
                        }
                        assert_eq!(status, 0);
                        let got = &out[GUARD - shift..GUARD - shift + n];
                        let same = same_bits(got, &want);
                        assert!(same, "kernel {k}, shift {shift}, chunk {chunk}");
                        let (before, after) = (&out[..GUARD - shift], &out[GUARD - shift + n..]);
                        assert!(
                            before
                                .iter()
                                .chain(after)
                                .all(|v| v.to_bits() == 0x7fc0_dead),
                            "kernel {k}, shift {shift}, chunk {chunk}: a write outside the output"
                        );
                    }
                }
            }
        }
    }

    /// Builds one traced graph for a row test: `(rows, cols)` in, one `[rows, cols]` out.
    type RowBuild = fn(&smelt_frontend::Tracer, usize, usize) -> smelt_frontend::Tensor;

    /// Row programs as the pipeline makes them: layer_norm (after a residual add) and softmax
    /// end with a store stage after their reductions, and GELU then softmax has a
    /// transcendental in both.
    fn row_builds() -> [(&'static str, RowBuild); 3] {
        use smelt_frontend::{nn, GeluApproximation};
        [
            ("layer_norm", |t, rows, cols| {
                let x = t.input("x", DType::F32, [rows, cols]).unwrap();
                let r = t.input("r", DType::F32, [rows, cols]).unwrap();
                let w = t.input("w", DType::F32, [cols]).unwrap();
                let h = x.add(&r).unwrap();
                nn::layer_norm(&h, &[cols], Some(&w), None, 1e-5).unwrap()
            }),
            ("softmax", |t, rows, cols| {
                let x = t.input("x", DType::F32, [rows, cols]).unwrap();
                x.softmax(-1).unwrap()
            }),
            ("gelu_softmax", |t, rows, cols| {
                let x = t.input("x", DType::F32, [rows, cols]).unwrap();
                let g = x.gelu(GeluApproximation::None).unwrap();
                g.softmax(-1).unwrap()
            }),
        ]
    }

    /// Whether `k` has a reduction stage (a row kernel, in [`row_program`]'s programs).
    fn has_reduction(k: &Kernel) -> bool {
        k.stages
            .iter()
            .any(|s| matches!(s.effect, StageEffect::Reduce { .. }))
    }

    /// `build` at `rows x cols`, traced, optimised and lowered.
    fn row_program(build: RowBuild, rows: usize, cols: usize) -> Program {
        let t = smelt_frontend::Tracer::new();
        let y = build(&t, rows, cols);
        t.output("y", &y).unwrap();
        let graph = t.finish().unwrap();
        let o = smelt_passes::optimize(&graph, &Default::default()).unwrap();
        lower(&o.graph, &o.plan).unwrap()
    }

    /// A row program's input data: a constant's own values, generated values in [-3, 3) for
    /// the rest.
    fn row_input(decl: &BufferDecl) -> Vec<f32> {
        match &decl.kind {
            BufferKind::Constant(t) => t.to_f32_vec(),
            _ => (0..decl.numel)
                .map(|i| ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 3.0)
                .collect(),
        }
    }

    /// Runs kernel `k` of `program` compiled as `got` at chunkings 1, 2, 3, 5 and whole, and
    /// as `want` in one chunk, on inputs from [`row_input`]: the outputs are finite and the
    /// same bits, and nothing is written past a buffer.
    fn same_bits_at_every_chunking(
        program: &Program,
        k: &Kernel,
        got: &CompiledKernels,
        want: &CompiledKernels,
        what: &str,
    ) {
        let extent = kernel_extent(k).unwrap();
        let out = k.writes[0].0 as usize;
        let outputs = |c: &CompiledKernels, chunk: i64| {
            let mut bufs = Buffers::new(&program.buffers);
            for &id in &k.reads {
                let data = row_input(&program.buffers[id.0 as usize]);
                bufs.set(id.0 as usize, &data);
            }
            assert_eq!(run(c, 0, k, &mut bufs, chunk), 0, "{what}");
            assert!(bufs.red_zones_intact(), "{what}: wrote past a buffer");
            bufs.get::<f32>(out)
        };
        let expected = outputs(want, extent);
        assert!(expected.iter().all(|v| v.is_finite()), "{what}");
        for chunk in [1, 2, 3, 5, extent] {
            let same = same_bits(&outputs(got, chunk), &expected);
            assert!(same, "{what}, chunks of {chunk}: a value differs");
        }
    }

    /// Whether two f32 slices hold the same bits, element for element.
    fn same_bits(a: &[f32], b: &[f32]) -> bool {
        a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.to_bits() == y.to_bits())
    }

    /// `program_listing` (what `smelt explain --emit llvm-ir|asm` prints) is the code the JIT
    /// loads: its IR is, to the byte, the optimised IR `compile_program` JIT-compiles for the
    /// same program and options, and its assembly defines every entry point, in 512-bit
    /// registers where the IR computes on 16-float vectors and the host has AVX-512.
    #[test]
    fn program_listing_is_the_code_the_jit_loads() {
        use smelt_codegen::llvm::kernel::compile_program;
        use smelt_codegen::llvm::program_listing;
        let libm = JitOptions {
            math: MathMode::Libm,
            ..JitOptions::default()
        };
        for (name, build) in row_builds() {
            let program = row_program(build, 4, 768);
            for options in [JitOptions::default(), libm.clone()] {
                let (ir, asm) = program_listing(&program, &options).unwrap();
                let jit = compile_program(&program, &options).unwrap();
                assert_eq!(ir, jit.module.optimized_ir(), "{name}, {:?}", options.math);
                for entry in &jit.entries {
                    assert!(
                        asm.lines().any(|l| l == format!("{entry}:")),
                        "{name}: no label {entry:?} in\n{asm}"
                    );
                }
                let avx512f = jit.module.cpu().1.split(',').any(|f| f == "+avx512f");
                let wide = ir.contains("<16 x float>") && avx512f;
                if cfg!(target_arch = "x86_64") && wide {
                    assert!(asm.contains("%zmm"), "{name}: no zmm register in\n{asm}");
                }
            }
        }
    }

    /// A split reduction's lane loop is widened into one vector and then gone: the block loop
    /// carries the lanes in registers, with no scratch array on the stack (the kernels' only
    /// stack arrays left are the values softmax keeps for its store stage, `%keep`). Checked
    /// on AVX-512, where 16 f32 lanes are one register, and on AVX2, where they are two (the
    /// lane loop asks for all 16 as one vector, `llvm.loop.vectorize.width`, so that its
    /// widened form runs once there too), on rows long enough to split; with the blocks four
    /// at a time (`JitOptions::interleave_vectors`, whose longer lane loop is unrolled only
    /// because it asks for it, and whose dead stores go only in the late `dse`) and one.
    #[test]
    fn split_reductions_carry_their_lanes_in_registers() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let avx512 = avx512(&JitOptions::default());
        let avx2 = for_cpu("x86-64-v3", MathMode::default());
        let assert_no_scratch = |ir: &str, what: &str| {
            let allocas: Vec<&str> = ir.lines().filter(|l| l.contains(" = alloca ")).collect();
            assert!(
                allocas.iter().all(|l| l.trim_start().starts_with("%keep")),
                "{what}: stack scratch left: {allocas:?}"
            );
        };
        for (name, build) in row_builds() {
            let program = row_program(build, 4, 768);
            let ks: Vec<&Kernel> = program.kernels().collect();
            assert_eq!(ks.len(), 1, "{name}: one fused kernel");
            for (cpu, options, width) in [("AVX-512", &avx512, 16), ("AVX2", &avx2, 8)] {
                // Four blocks per block-loop iteration (the default) and one.
                let one = JitOptions {
                    interleave_vectors: None,
                    ..options.clone()
                };
                for (blocks, options) in [("4 blocks", options), ("1 block", &one)] {
                    let ir = optimized_kernel_ir(ks[0], &program.buffers, options).unwrap();
                    assert_no_scratch(&ir, &format!("{name} on {cpu}, {blocks}"));
                    assert!(
                        vector_widths(&ir, "float").contains(&width),
                        "{name} on {cpu}: no {width}-float vectors"
                    );
                }
            }
        }
        // f64 too, whose 16 lanes are two registers even on AVX-512.
        let program = row_program(
            |t, rows, cols| {
                let x = t.input("x", DType::F64, [rows, cols]).unwrap();
                x.softmax(-1).unwrap()
            },
            4,
            768,
        );
        let k = program.kernels().next().unwrap();
        let ir = optimized_kernel_ir(k, &program.buffers, &avx512).unwrap();
        assert_no_scratch(&ir, "f64 softmax on AVX-512");
    }

    /// Row kernels as the pipeline makes them ([`row_builds`]): with streaming asked for,
    /// every such kernel's whole-line vector stores are streaming stores. (The main loop's
    /// aligned pointer was once indexed by `i - mid`; in these kernels LLVM rewrote
    /// `mid + index` as `mid | index`, did not fold `(mid | index) - mid`, lost the 64-byte
    /// alignment and left every store plain.) Streaming or not, the bits are the same.
    #[test]
    fn row_kernels_after_reductions_stream_their_stores() {
        for (name, build) in row_builds() {
            for (rows, cols) in [(5, 768), (3, 203), (4, 64)] {
                let program = row_program(build, rows, cols);
                let ks: Vec<&Kernel> = program.kernels().collect();
                assert_eq!(ks.len(), 1, "{name} {rows}x{cols}: one fused kernel");
                let with = |min: Option<u64>| JitOptions {
                    nontemporal_min_bytes: min,
                    ..JitOptions::default()
                };
                let streaming = compile_program_kernels(&ks, &program.buffers, &with(Some(0)));
                let plain = compile_program_kernels(&ks, &program.buffers, &with(None));
                let (streaming, plain) = (streaming.unwrap(), plain.unwrap());
                if cfg!(target_arch = "x86_64") {
                    // As an AVX-512 host has it (an AVX2 host writes no whole-line vectors).
                    let ir = optimized_kernel_ir(ks[0], &program.buffers, &avx512(&with(Some(0))));
                    let ir = ir.unwrap();
                    let f = function_ir(&ir, &format!("@{}(", ks[0].name));
                    assert!(
                        f.lines().any(|l| {
                            l.trim_start().starts_with("store <16 x float>")
                                && l.contains("!nontemporal")
                        }),
                        "{name} {rows}x{cols}: no streaming store in:\n{f}"
                    );
                    assert!(!plain.module.optimized_ir().contains("!nontemporal"));
                }
                // Each read buffer's data (a constant's own, generated for the rest), in the
                // kernel's parameter order: reads, the write, the status word.
                let k = ks[0];
                let decl = |id: BufferId| &program.buffers[id.0 as usize];
                let reads: Vec<Vec<f32>> = k.reads.iter().map(|&id| row_input(decl(id))).collect();
                let outs: Vec<Vec<f32>> = [&streaming, &plain]
                    .iter()
                    .map(|c| {
                        let mut out = vec![0f32; decl(k.writes[0]).numel];
                        let mut status = 0i32;
                        let mut args: Vec<*mut u8> =
                            reads.iter().map(|r| r.as_ptr().cast_mut().cast()).collect();
                        args.push(out.as_mut_ptr().cast());
                        args.push((&mut status as *mut i32).cast());
                        type F = unsafe extern "C" fn(*const *mut u8, i64, i64);
                        // SAFETY: the code generator emits `void (i8**, i64, i64)` entry points.
                        let f: F = unsafe { c.module.function(&c.entries[0]) }.unwrap();
                        // SAFETY: every buffer the kernel reads holds its declared elements,
                        // the output its own; the range is the kernel's whole extent.
                        unsafe { f(args.as_ptr(), 0, kernel_extent(k).unwrap()) };
                        assert_eq!(status, 0);
                        out
                    })
                    .collect();
                let same = same_bits(&outs[0], &outs[1]);
                assert!(same, "{name} {rows}x{cols}: streaming changed a value");
                assert!(outs[0].iter().all(|v| v.is_finite()));
            }
        }
    }

    /// Interleaved rows (`JitOptions::interleave_rows`, on by default): a row kernel over short
    /// rows in cache computes two rows stage by stage, its body written out twice, and every
    /// row comes out the same bits as with one row at a time, at every chunking of the outer
    /// range (chunks that start or end inside a pair, odd counts whose last pair is one row
    /// twice). The values are checked against one row at a time, which the end-to-end and fuzz
    /// tests check against the reference interpreter.
    #[test]
    fn interleaved_rows_give_the_same_bits_at_every_chunking() {
        use smelt_codegen::llvm::kernel::interleaves;
        assert!(JitOptions::default().interleave_rows);
        let off = JitOptions {
            interleave_rows: false,
            ..JitOptions::default()
        };
        for (name, build) in row_builds() {
            for (rows, cols) in [(7, 128), (6, 64), (5, 203), (9, 24), (1, 128), (3, 256)] {
                let what = format!("{name} {rows}x{cols}");
                let program = row_program(build, rows, cols);
                let ks: Vec<&Kernel> = program.kernels().collect();
                assert_eq!(ks.len(), 1, "{what}: one fused kernel");
                let k = ks[0];
                assert!(interleaves(k, &program.buffers), "{what}: not interleaved");
                let on = compile_program_kernels(&ks, &program.buffers, &JitOptions::default());
                let alone = compile_program_kernels(&ks, &program.buffers, &off);
                let (on, alone) = (on.unwrap(), alone.unwrap());
                // Both rows' loads are written out: more vector loads than one row's. (Not
                // twice as many: LLVM may merge or re-stage a short row's loads differently,
                // e.g. layer_norm over 24 columns has 15 against 9.)
                if cfg!(target_arch = "x86_64") {
                    let loads = |o: &JitOptions| avx512_lines(k, &program.buffers, o, " = load <");
                    let (two, one) = (loads(&JitOptions::default()), loads(&off));
                    assert!(
                        one > 0 && two > one,
                        "{what}: {two} vector loads against {one} (AVX-512)"
                    );
                }
                same_bits_at_every_chunking(&program, k, &on, &alone, &what);
            }
        }
    }

    /// Which kernels interleave their rows: row kernels whose rows are at most 256 elements
    /// and which move at most 4 MiB in all (longer rows and larger arrays measured no faster
    /// or slower), and none that reads a buffer it writes (an odd count's last pair computes
    /// its row twice). Elementwise kernels have no chain of passes to overlap.
    #[test]
    fn which_kernels_interleave_their_rows() {
        use smelt_codegen::llvm::kernel::interleaves;
        let softmax = row_builds()[1].1;
        for (rows, cols, want) in [(4, 256, true), (4, 257, false), (4, 768, false)] {
            let program = row_program(softmax, rows, cols);
            let k = program.kernels().next().unwrap();
            assert_eq!(interleaves(k, &program.buffers), want, "{rows}x{cols}");
        }
        // 4 MiB in and out: 8 MiB in all.
        let program = row_program(softmax, 8192, 128);
        let k = program.kernels().next().unwrap();
        assert!(!interleaves(k, &program.buffers));
        // In place: x[i, j] -= max_j x[i, j].
        let (rows, cols) = (6, 64);
        let mut b1 = Body::default();
        let x = b1.load(DType::F32, 0, 0, &[cols as i64, 1]);
        let max = ValueId(b1.next);
        let reduce = Stage {
            inner: vec![cols],
            body: b1.insts,
            effect: StageEffect::Reduce {
                value: x,
                combiner: Combiner::Max,
                acc: DType::F32,
                result: max,
            },
        };
        let mut b2 = Body {
            next: max.0 + 1,
            ..Body::default()
        };
        let x2 = b2.load(DType::F32, 0, 0, &[cols as i64, 1]);
        let d = b2.push(Ty::Data(DType::F32), InstOp::Binary(BinaryOp::Sub, x2, max));
        let store = store_stage(vec![cols], b2, vec![(0, affine(0, &[cols as i64, 1]), d)]);
        let decls = vec![buf(0, DType::F32, rows * cols)];
        let in_place = kernel("k_sub_max", &[0], &[0], &[rows], vec![reduce, store]);
        assert!(!interleaves(&in_place, &decls));
        // The same into another buffer interleaves; an elementwise kernel does not.
        let mut into = in_place.clone();
        into.writes = vec![BufferId(1)];
        if let StageEffect::Store(st) = &mut into.stages[1].effect {
            st[0].buffer = BufferId(1);
        }
        let decls2 = vec![decls[0].clone(), buf(1, DType::F32, rows * cols)];
        assert!(interleaves(&into, &decls2));
        let (ew, ew_decls) = add_mul_exp(rows, cols);
        assert!(!interleaves(&ew, &ew_decls));
    }

    /// The one fused kernel of `program`, compiled with the default
    /// [`JitOptions::interleave_vectors`] (four) and without it (`None`).
    fn four_and_one<'p>(
        program: &'p Program,
        what: &str,
    ) -> (&'p Kernel, CompiledKernels, CompiledKernels) {
        let ks: Vec<&Kernel> = program.kernels().collect();
        assert_eq!(ks.len(), 1, "{what}: one fused kernel");
        let own = JitOptions {
            interleave_vectors: None,
            ..JitOptions::default()
        };
        let four = compile_program_kernels(&ks, &program.buffers, &JitOptions::default());
        let one = compile_program_kernels(&ks, &program.buffers, &own);
        (ks[0], four.unwrap(), one.unwrap())
    }

    /// Interleaved vectors (`JitOptions::interleave_vectors`, four by default): store loops
    /// ask the loop vectoriser for four vectors per iteration (eight for a long body with few
    /// constants on AVX-512, such as the `tanh` chain's), which it honours for long bodies it
    /// would otherwise leave at one (a `tanh` or `erf` chain: four or eight vector divisions
    /// or exponentials per iteration instead of one), and every element comes out the same
    /// bits as the vectoriser's own loop, at lengths around the vector width and its
    /// multiples and at every chunking of the outer range (remainders go through the
    /// epilogue loops). The values are checked against the vectoriser's own loop, which the
    /// end-to-end and fuzz tests check against the reference interpreter.
    #[test]
    fn interleaved_vectors_give_the_same_bits() {
        use smelt_frontend::GeluApproximation;
        assert_eq!(JitOptions::default().interleave_vectors, Some(4));
        let builds: [(&str, RowBuild, &str); 2] = [
            (
                "tanh chain",
                |t, rows, cols| {
                    let x = t.input("x", DType::F32, [rows, cols]).unwrap();
                    let h = x.mul(1.5).unwrap().add(0.5).unwrap().tanh().unwrap();
                    h.mul(2.0).unwrap().relu().unwrap().mul(&x).unwrap()
                },
                "fdiv <",
            ),
            (
                "bias gelu",
                |t, rows, cols| {
                    let x = t.input("x", DType::F32, [rows, cols]).unwrap();
                    let b = t.input("b", DType::F32, [cols]).unwrap();
                    let g = x.add(&b).unwrap().gelu(GeluApproximation::None).unwrap();
                    g.add(&x).unwrap()
                },
                "fmul <",
            ),
        ];
        for (name, build, op) in builds {
            for (rows, cols) in [(1, 1), (1, 15), (3, 64), (2, 65), (7, 203), (2, 1000)] {
                let what = format!("{name} {rows}x{cols}");
                let program = row_program(build, rows, cols);
                let (k, four, one) = four_and_one(&program, &what);
                if cfg!(target_arch = "x86_64") && rows * cols >= 64 {
                    let lines = |o: &JitOptions| avx512_lines(k, &program.buffers, o, op);
                    let own = JitOptions {
                        interleave_vectors: None,
                        ..JitOptions::default()
                    };
                    let (n4, n1) = (lines(&JitOptions::default()), lines(&own));
                    assert!(n1 > 0 && n4 > n1, "{what}: {n4} vector `{op}` against {n1}");
                    // The chain's body is long and has few constants: twice the four vectors
                    // on AVX-512 (`inflight::vectors_in_flight`), plus the epilogue's one.
                    if name == "tanh chain" {
                        assert!(n4 >= 8, "{what}: {n4} vector `{op}`");
                    }
                }
                same_bits_at_every_chunking(&program, k, &four, &one, &what);
            }
        }
    }

    /// Kernels realign the stack to a cache line, so that the vectors a register-hungry loop
    /// spills are written and read whole-line, never split across two lines. (On the AMD EPYC
    /// host `smelt bench`'s 8-op chain with `tanh` spilled AVX-512 vectors with `vmovups` at
    /// the ABI's 16-byte alignment, and took 3.9 or 4.8 ms over 16M floats by the caller's
    /// stack depth; BENCHMARKS.md.) Checked on that chain's assembly for an AVX-512 CPU: its
    /// entry aligns `%rsp` to 64 bytes and no vector goes to or from the stack unaligned.
    #[test]
    fn kernels_keep_their_stack_on_cache_lines() {
        if !cfg!(target_arch = "x86_64") {
            return;
        }
        let t = smelt_frontend::Tracer::new();
        let x = t.input("x", DType::F32, [1usize << 16]).unwrap();
        let h = x.mul(1.5).unwrap().add(0.5).unwrap().tanh().unwrap();
        let h = h.mul(2.0).unwrap().sub(0.25).unwrap().relu().unwrap();
        let y = h.mul(&x).unwrap().add(&x).unwrap();
        t.output("y", &y).unwrap();
        let graph = t.finish().unwrap();
        let o = smelt_passes::optimize(&graph, &Default::default()).unwrap();
        let program = lower(&o.graph, &o.plan).unwrap();
        let (_, asm) = program_listing(&program, &avx512(&JitOptions::default())).unwrap();
        assert!(
            asm.contains("andq\t$-64, %rsp"),
            "no realignment in:\n{asm}"
        );
        let unaligned: Vec<&str> = asm
            .lines()
            .filter(|l| l.contains("vmovups") && l.contains("(%rsp)"))
            .collect();
        assert!(
            unaligned.is_empty(),
            "unaligned vectors on the stack: {unaligned:#?}"
        );
    }

    /// Split reductions group their blocks in row kernels whose data fits in cache (3 rows of
    /// 768) and run them one at a time in larger ones (2048 rows of 768: 6 MiB and more), where
    /// grouping measured slower; without an interleave count, one at a time everywhere.
    #[test]
    fn split_blocks_are_grouped_only_in_cache() {
        for (name, build) in row_builds() {
            for (rows, want) in [(3, 4), (2048, 1)] {
                let program = row_program(build, rows, 768);
                let ks: Vec<&Kernel> = program.kernels().collect();
                assert_eq!(ks.len(), 1, "{name}: one fused kernel");
                let got = reduce_group(Some(4), ks[0], &program.buffers);
                assert_eq!(got, want, "{name} {rows}x768");
                assert_eq!(reduce_group(None, ks[0], &program.buffers), 1);
            }
        }
    }

    /// A split reduction's blocks run [`JitOptions::interleave_vectors`] at a time (four by
    /// default; the blocks left over one at a time), combined in block order: the same bits as
    /// one block at a time, at row lengths with no whole group (32), a group and one block
    /// (80), groups and a tail (135, 203) and whole groups only (768). A NaN in a row, in a
    /// grouped block, a single block or the tail, makes that row NaN in both forms (the max
    /// pass reruns with its NaN rule) and leaves the other rows' bits alone. On x86-64 the
    /// grouped form's row kernels compute more 16-float vectors per loop iteration.
    #[test]
    fn grouped_split_blocks_give_the_same_bits() {
        for (name, build) in row_builds() {
            for cols in [32, 80, 135, 203, 768] {
                let what = format!("{name} 3x{cols}");
                let program = row_program(build, 3, cols);
                let (k, four, one) = four_and_one(&program, &what);
                if cfg!(target_arch = "x86_64") && cols == 768 {
                    let vectors = "<16 x float>";
                    let lines = |o: &JitOptions| avx512_lines(k, &program.buffers, o, vectors);
                    let own = JitOptions {
                        interleave_vectors: None,
                        ..JitOptions::default()
                    };
                    let (n4, n1) = (lines(&JitOptions::default()), lines(&own));
                    assert!(n4 > n1, "{what}: {n4} lines with {vectors} against {n1}");
                }
                same_bits_at_every_chunking(&program, k, &four, &one, &what);
                let extent = kernel_extent(k).unwrap();
                let out = k.writes[0].0 as usize;
                for at in [0, 70, 130, cols - 1].into_iter().filter(|&at| at < cols) {
                    let outputs = |c: &CompiledKernels| {
                        let mut bufs = Buffers::new(&program.buffers);
                        for &id in &k.reads {
                            let decl = &program.buffers[id.0 as usize];
                            let mut data = row_input(decl);
                            if data.len() == 3 * cols {
                                data[cols + at] = f32::NAN;
                            }
                            bufs.set(id.0 as usize, &data);
                        }
                        assert_eq!(run(c, 0, k, &mut bufs, extent), 0, "{what}");
                        bufs.get::<f32>(out)
                    };
                    let (got, want) = (outputs(&four), outputs(&one));
                    let rows = |v: &[f32], r: usize| v[r * cols..(r + 1) * cols].to_vec();
                    for r in [0, 2] {
                        let same = same_bits(&rows(&got, r), &rows(&want, r));
                        assert!(same, "{what}, NaN at {at}: row {r} differs");
                    }
                    for v in [&got, &want] {
                        let nan_row = rows(v, 1).iter().all(|x| x.is_nan());
                        assert!(nan_row, "{what}, NaN at {at}: row 1 not all NaN");
                    }
                }
            }
        }
    }

    /// One scaled sum of [`scaled_sums_are_single_fmas_with_the_same_bits`]: `x·k + c`
    /// (`mul_first`) or `c + x·k`, as `op` (`Add`, `Sub`) combines them, in dtype `d`.
    fn scaled_sum_kernel(d: DType, k: f64, op: BinaryOp, c: f64, mul_first: bool) -> Kernel {
        let mut body = Body::default();
        let x = body.load(d, 0, 0, &[1]);
        let kv = body.push(Ty::Data(d), InstOp::Const(Scalar::Float(k)));
        let p = body.push(Ty::Data(d), InstOp::Binary(BinaryOp::Mul, x, kv));
        let cv = body.push(Ty::Data(d), InstOp::Const(Scalar::Float(c)));
        let (a, b) = if mul_first { (p, cv) } else { (cv, p) };
        let y = body.push(Ty::Data(d), InstOp::Binary(op, a, b));
        let st = store_stage(vec![], body, vec![(1, affine(0, &[1]), y)]);
        kernel("k_scaled_sum", &[0], &[1], &[SCALED_N], vec![st])
    }

    const SCALED_N: usize = 40;

    /// How a scaled sum combines the product and the constant.
    #[derive(Clone, Copy)]
    struct ScaledSum {
        op: BinaryOp,
        mul_first: bool,
    }

    /// f32 and f64 for [`ScaledSum::mismatches`].
    trait Float:
        Copy
        + Default
        + std::fmt::LowerExp
        + std::ops::Add<Output = Self>
        + std::ops::Sub<Output = Self>
    {
        fn bits(self) -> u64;
        fn nan(self) -> bool;
    }

    impl Float for f32 {
        fn bits(self) -> u64 {
            u64::from(self.to_bits())
        }
        fn nan(self) -> bool {
            self.is_nan()
        }
    }

    impl Float for f64 {
        fn bits(self) -> u64 {
            self.to_bits()
        }
        fn nan(self) -> bool {
            self.is_nan()
        }
    }

    impl ScaledSum {
        /// Runs `kern` over `xs` and returns the outputs that differ from two roundings
        /// (`scale(x)`, then `op` with `c`) in bits, any NaN matching any NaN.
        fn mismatches<T: Float>(
            self,
            (compiled, kern, bufs): (&CompiledKernels, &Kernel, &mut Buffers),
            xs: &[T],
            scale: impl Fn(T) -> T,
            c: T,
        ) -> Vec<String> {
            bufs.set(0, xs);
            assert_eq!(run(compiled, 0, kern, bufs, 7), 0);
            let got: Vec<T> = bufs.get(1);
            xs.iter()
                .zip(&got)
                .filter_map(|(&x, &g)| {
                    let p = scale(x);
                    let w = match (self.op, self.mul_first) {
                        (BinaryOp::Add, true) => p + c,
                        (BinaryOp::Add, false) => c + p,
                        (_, true) => p - c,
                        (_, false) => c - p,
                    };
                    let same = g.bits() == w.bits() || (g.nan() && w.nan());
                    (!same).then(|| format!("x {x:e}: {g:e} against {w:e}"))
                })
                .collect()
        }
    }

    /// `x·2^k ± c` with constant `2^k` (`k ≥ 0`) and `c` is emitted as one `llvm.fmuladd`
    /// (`scalar.rs`, `scaled_plus_constant`), which is exact as two roundings are: the product
    /// cannot round, and a product that overflows gives the same infinity either way while
    /// `|c| ≤ 2^103` (f32; `2^970` for f64). Each form is checked against Rust's two roundings
    /// bit for bit over specials, subnormals, overflowing products and cancellations; `c` at
    /// `±2^103` is the edge (`2^127·2 - 2^103` is exactly halfway to overflow and must round to
    /// infinity), and a larger `c` or a factor that is not a power of two stays two operations.
    #[test]
    fn scaled_sums_are_single_fmas_with_the_same_bits() {
        let p103 = 2f64.powi(103);
        let p970 = 2f64.powi(970);
        let max32 = f64::from(f32::MAX);
        // (dtype, k, op, c, mul first, fused)
        let cases = [
            (DType::F32, 2.0, BinaryOp::Sub, 0.25, true, true),
            (DType::F32, 4.0, BinaryOp::Sub, 0.25, false, true),
            (DType::F32, -8.0, BinaryOp::Add, 0.5, false, true),
            (DType::F32, 2.0, BinaryOp::Sub, p103, true, true),
            (DType::F32, 2.0, BinaryOp::Add, -p103, true, true),
            (DType::F32, 2.0, BinaryOp::Sub, 2.0 * p103, true, false),
            (DType::F32, 2.0, BinaryOp::Add, -max32, true, false),
            (DType::F32, 3.0, BinaryOp::Add, 1.0, true, false),
            (DType::F32, 0.5, BinaryOp::Add, 1.0, true, false),
            (DType::F64, 2.0, BinaryOp::Sub, 0.25, true, true),
            (DType::F64, -4.0, BinaryOp::Sub, p970, false, true),
            (DType::F64, 2.0, BinaryOp::Sub, p970, true, true),
            (DType::F64, 2.0, BinaryOp::Sub, 2.0 * p970, true, false),
        ];
        let x32: Vec<f32> = [
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.125,
            0.125 + f32::EPSILON / 8.0,
            1.5,
            -2.75e-3,
            f32::MAX,
            -f32::MAX,
            f32::MAX / 2.0,
            2f32.powi(127),
            -2f32.powi(127),
            2f32.powi(126),
            f32::MIN_POSITIVE,
            f32::from_bits(1),
            -f32::from_bits(0x0040_0001),
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            7.0e37,
            -1.0e38,
            3.0,
            0.0625,
        ]
        .into_iter()
        .chain((0..16).map(|i| (i as f32 - 7.5) * 0.37))
        .collect();
        assert_eq!(x32.len(), SCALED_N);
        let x64: Vec<f64> = x32
            .iter()
            .map(|&x| match x {
                x if x == f32::MAX => f64::MAX,
                x if x == 2f32.powi(127) => 2f64.powi(1023),
                x => f64::from(x),
            })
            .collect();
        for (d, k, op, c, mul_first, fused) in cases {
            let what = format!("{d} x*{k} {op} {c:e} (product first: {mul_first})");
            let kern = scaled_sum_kernel(d, k, op, c, mul_first);
            let decls = vec![buf(0, d, SCALED_N), buf(1, d, SCALED_N)];
            let ir = optimized_kernel_ir(&kern, &decls, &JitOptions::default()).unwrap();
            let f = function_ir(&ir, &format!("@{}(", kern.name));
            assert_eq!(f.contains("@llvm.fmuladd."), fused, "{what}:\n{f}");
            let compiled = compile(&[&kern], &decls);
            let mut bufs = Buffers::new(&decls);
            let form = ScaledSum { op, mul_first };
            let bad = if d == DType::F32 {
                let (k, c) = (k as f32, c as f32);
                form.mismatches((&compiled, &kern, &mut bufs), &x32, |x| x * k, c)
            } else {
                form.mismatches((&compiled, &kern, &mut bufs), &x64, |x| x * k, c)
            };
            assert!(bad.is_empty(), "{what}: {bad:?}");
            assert!(bufs.red_zones_intact(), "{what}");
        }
    }

    /// Kernels reading `y` (`[.., n, m]`) transposed, over `[.., m, n]` (`batch` leading dims
    /// of 2 and 3 when asked): `k_copy_t` copies `y^T` into buffer 3, `k_add_t` (not for
    /// bool) adds `x` (buffer 0) to it into buffer 2.
    fn transpose_kernels(
        d: DType,
        batch: bool,
        m: usize,
        n: usize,
    ) -> (Vec<Kernel>, Vec<BufferDecl>) {
        let (mm, nn) = (m as i64, n as i64);
        let (outer, rows, cols_t) = if batch {
            (
                vec![2, 3, m, n],
                vec![3 * mm * nn, mm * nn, nn, 1],
                vec![3 * mm * nn, mm * nn, 1, mm],
            )
        } else {
            (vec![m, n], vec![nn, 1], vec![1, mm])
        };
        let numel: usize = outer.iter().product();
        let decls = (0..4).map(|i| buf(i, d, numel)).collect();
        let mut body = Body::default();
        let y = body.load(d, 1, 0, &cols_t);
        let copy = store_stage(vec![], body, vec![(3, affine(0, &rows), y)]);
        let mut ks = vec![kernel("k_copy_t", &[1], &[3], &outer, vec![copy])];
        if d != DType::Bool {
            let mut body = Body::default();
            let x = body.load(d, 0, 0, &rows);
            let y = body.load(d, 1, 0, &cols_t);
            let s = body.push(Ty::Data(d), InstOp::Binary(BinaryOp::Add, x, y));
            let add = store_stage(vec![], body, vec![(2, affine(0, &rows), s)]);
            ks.push(kernel("k_add_t", &[0, 1], &[2], &outer, vec![add]));
        }
        (ks, decls)
    }

    /// `n` values of dtype `d` as their bytes: small integers, or floats in [-3, 3) that are
    /// exact in every float dtype's range (no NaN, so that bits compare), or alternating
    /// bools.
    fn transpose_input(d: DType, n: usize, seed: usize) -> Vec<u8> {
        let v = |i: usize| (((i + seed) * 7919 % 2003) as f64 / 1001.0 - 1.0) * 3.0;
        let mut out = Vec::with_capacity(n * d.size_bytes());
        for i in 0..n {
            match d {
                DType::F32 => out.extend((v(i) as f32).to_le_bytes()),
                DType::F64 => out.extend(v(i).to_le_bytes()),
                DType::F16 => out.extend(half::f16::from_f64(v(i)).to_le_bytes()),
                DType::BF16 => out.extend(half::bf16::from_f64(v(i)).to_le_bytes()),
                DType::I32 => out.extend(((v(i) * 1000.0) as i32).to_le_bytes()),
                DType::I64 => out.extend(((v(i) * 1e12) as i64).to_le_bytes()),
                DType::Bool => out.push(u8::from((i + seed).is_multiple_of(3))),
            }
        }
        out
    }

    /// Transposed reads computed in tiles (`JitOptions::tile_transposes`, `kernel/tile.rs`):
    /// for every dtype, 2-D and batched, at sizes that are and are not whole tiles, a
    /// transposed copy is `y^T` exactly and an add has the same bytes as without tiles, at
    /// chunkings that start and end tiles anywhere, without writing past a buffer; f32 adds
    /// are also checked against Rust's. Which kernels tile is checked in the IR: those whose
    /// transposed operand steps a cache line or more along the row and whose last two dims
    /// hold a tile (16, or 8 for 8-byte elements) transpose it with 64 (24) shuffles a tile.
    #[test]
    fn transposed_reads_in_tiles_give_the_same_bits() {
        let dtypes = [
            DType::F32,
            DType::F64,
            DType::F16,
            DType::BF16,
            DType::I32,
            DType::I64,
            DType::Bool,
        ];
        let shapes = [(16, 16), (37, 45), (20, 33), (64, 17), (8, 40), (70, 100)];
        let tiled_options = JitOptions::default();
        let untiled_options = JitOptions {
            tile_transposes: false,
            ..JitOptions::default()
        };
        let mut tiled_kernels = 0;
        for d in dtypes {
            let size = d.size_bytes();
            let side = if size >= 8 { 8 } else { 16 };
            for (m, n) in shapes {
                for batch in [false, true] {
                    let (ks, decls) = transpose_kernels(d, batch, m, n);
                    let refs: Vec<&Kernel> = ks.iter().collect();
                    let tiled = compile_program_kernels(&refs, &decls, &tiled_options).unwrap();
                    let untiled = compile_program_kernels(&refs, &decls, &untiled_options).unwrap();
                    let numel = decls[0].numel;
                    let (x, y) = (transpose_input(d, numel, 0), transpose_input(d, numel, 7));
                    for (k, kern) in ks.iter().enumerate() {
                        let what = format!("{d} {} batch {batch} {m} x {n}", kern.name);
                        let tiles = m * size >= 64 && m >= side && n >= side;
                        let shuffles = if side == 16 { 64 } else { 24 };
                        let count = |o: &JitOptions| {
                            let ir = optimized_kernel_ir(kern, &decls, o).unwrap();
                            function_ir(&ir, &format!("@{}(", kern.name))
                                .lines()
                                .map(str::trim_start)
                                .filter(|l| l.starts_with("%tlo") || l.starts_with("%thi"))
                                .filter(|l| l.contains(" = shufflevector "))
                                .count()
                        };
                        // A multiple of one tile's: LLVM may unroll the loop over tiles.
                        let got = count(&tiled_options);
                        assert_eq!(got > 0, tiles, "{what}: {got} shuffles");
                        assert_eq!(got % shuffles, 0, "{what}: {got} shuffles");
                        assert_eq!(count(&untiled_options), 0, "{what}");
                        tiled_kernels += usize::from(tiles);
                        let out = kern.writes[0].0 as usize;
                        let outputs = |c: &CompiledKernels, chunk: i64| {
                            let mut bufs = Buffers::new(&decls);
                            bufs.set(0, &x);
                            bufs.set(1, &y);
                            assert_eq!(run(c, k, kern, &mut bufs, chunk), 0, "{what}");
                            assert!(bufs.red_zones_intact(), "{what}: wrote past a buffer");
                            bufs.get::<u8>(out)
                        };
                        let want = outputs(&untiled, kernel_extent(kern).unwrap());
                        if kern.name == "k_copy_t" {
                            let planes = numel / (m * n);
                            let mut copy = vec![0u8; numel * size];
                            for (p, (i, j)) in (0..planes).flat_map(|p| {
                                (0..m).flat_map(move |i| (0..n).map(move |j| (p, (i, j))))
                            }) {
                                let to = (p * m * n + i * n + j) * size;
                                let from = (p * m * n + j * m + i) * size;
                                copy[to..to + size].copy_from_slice(&y[from..from + size]);
                            }
                            assert!(want == copy, "{what}: the untiled copy is not y^T");
                        } else if d == DType::F32 {
                            let f = |b: &[u8], i: usize| {
                                f32::from_le_bytes(b[4 * i..4 * i + 4].try_into().unwrap())
                            };
                            let planes = numel / (m * n);
                            for p in 0..planes {
                                for i in 0..m {
                                    for j in 0..n {
                                        let at = p * m * n + i * n + j;
                                        let sum = f(&x, at) + f(&y, p * m * n + j * m + i);
                                        assert_eq!(f(&want, at).to_bits(), sum.to_bits(), "{what}");
                                    }
                                }
                            }
                        }
                        let extent = kernel_extent(kern).unwrap();
                        let (n64, side64) = (n as i64, side as i64);
                        for chunk in [
                            1,
                            5,
                            n64 * side64 + 3,
                            n64 * (side64 + 1) - 1,
                            n64 * 40,
                            extent,
                        ] {
                            let got = outputs(&tiled, chunk);
                            assert!(got == want, "{what}: chunks of {chunk}: bytes differ");
                        }
                    }
                }
            }
        }
        assert!(tiled_kernels > 20, "only {tiled_kernels} kernels tiled");
    }

    /// A kernel computing tiles does not stream its stores (its output rows are written a
    /// tile's width at a time) and so has no plain-store twin; without tiles the same kernel
    /// streams.
    #[test]
    fn kernels_with_tiles_do_not_stream() {
        let (ks, decls) = transpose_kernels(DType::F32, false, 64, 64);
        let with = |tile_transposes: bool| JitOptions {
            nontemporal_min_bytes: Some(0),
            tile_transposes,
            ..JitOptions::default()
        };
        for k in &ks {
            assert!(!has_plain_twin(
                k,
                &decls,
                &[decls[2].id, decls[3].id],
                &with(true)
            ));
            assert!(has_plain_twin(
                k,
                &decls,
                &[decls[2].id, decls[3].id],
                &with(false)
            ));
            let ir = optimized_kernel_ir(k, &decls, &avx512(&with(true))).unwrap();
            assert!(!ir.contains("!nontemporal"), "{}", k.name);
        }
    }
}

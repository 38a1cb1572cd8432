//! Programs in a binary whose global allocator is `LargeAligned` (its own test binary, so the
//! allocator covers every tensor here): large inputs and outputs start on a 64-byte boundary,
//! through both of its routes (aligned heap blocks and mappings), and the kernels, streaming
//! stores included, give the same bits into them as the interpreter's tolerance allows and as
//! each other (`run` and `run_into`).

#![cfg(feature = "llvm")]

mod cpu_exec_support;

use cpu_exec_support::check_close;
use smelt_frontend::{DType, Tracer};
use smelt_ir::interp::eval;
use smelt_ir::HostTensor;
use smelt_passes::{kernel::lower, optimize, PassOptions};
use smelt_runtime::alloc::{kept_blocks, LargeAligned, ALIGN, LARGE, MAPPED};
use smelt_runtime::cpu::CpuProgram;
use std::collections::HashMap;

#[global_allocator]
static ALLOC: LargeAligned = LargeAligned;

/// Held by each test: the allocator's kept blocks are process-wide, and one test's frees
/// could push another's out of the cache.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn aligned(t: &mut HostTensor) -> bool {
    (t.data_mut_ptr() as usize).is_multiple_of(ALIGN)
}

/// Bias + tanh over rows (an elementwise kernel with a row structure) and softmax (a row
/// kernel), at sizes on each side of the allocator's routes: 24 KB and 6 MB (aligned heap
/// blocks, the first in cache) and 50 MB (a mapping), both past the 16 MiB streaming-store
/// threshold in the last case.
#[test]
fn large_tensors_are_aligned_and_kernels_agree() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    for rows in [8usize, 2048, 16384] {
        let cols = 768;
        let t = Tracer::new();
        let x = t.input("x", DType::F32, [rows, cols]).unwrap();
        let b = t.input("b", DType::F32, [cols]).unwrap();
        let y = x.add(&b).unwrap().tanh().unwrap().mul(&x).unwrap();
        let s = x.softmax(-1).unwrap();
        t.output("y", &y).unwrap();
        t.output("s", &s).unwrap();
        let graph = t.finish().unwrap();
        let opt = optimize(&graph, &PassOptions::default()).unwrap();
        let program = lower(&opt.graph, &opt.plan).unwrap();
        let mut exe = CpuProgram::compile(&program, &HashMap::new()).unwrap();
        for (name, id) in graph.outputs() {
            exe.set_output_shape(name, graph.ty(*id).shape.clone())
                .unwrap();
        }

        let n = rows * cols;
        let bytes = n * 4;
        assert!(bytes >= LARGE);
        assert_eq!(bytes >= MAPPED, rows == 16384);
        let xs: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 % 2003) as f32 / 1001.0 - 1.0) * 3.0)
            .collect();
        let bs: Vec<f32> = (0..cols).map(|j| j as f32 / cols as f32 - 0.5).collect();
        let mut xt = HostTensor::from_f32([rows, cols], xs).unwrap();
        assert!(aligned(&mut xt), "{rows} rows: input not aligned");
        let inputs = HashMap::from([
            ("x".to_string(), xt),
            ("b".to_string(), HostTensor::from_f32([cols], bs).unwrap()),
        ]);

        let mut fresh = exe.run(&inputs).unwrap();
        for (name, t) in fresh.iter_mut() {
            assert!(aligned(t), "{rows} rows: fresh {name} not aligned");
        }
        let mut into: Vec<HostTensor> = fresh
            .iter()
            .map(|(_, t)| HostTensor::zeros(t.dtype(), t.shape().clone()))
            .collect();
        for t in into.iter_mut() {
            assert!(aligned(t), "{rows} rows: output not aligned");
        }
        exe.run_into(&inputs, &mut into).unwrap();
        let want = eval(&graph, &inputs).unwrap();
        for (((name, f), i), (_, w)) in fresh.iter().zip(&into).zip(&want) {
            assert_eq!(
                f.data().to_le_bytes(),
                i.data().to_le_bytes(),
                "{rows} rows: {name} from run and run_into"
            );
            check_close(&format!("{name}, {rows} rows"), i, w, 1e-5, 1e-5).unwrap();
        }
    }
}

/// `run`'s output over 40 MB (a mapping), dropped, is the memory of the next call's output:
/// the allocator kept it, and that run wrote every element over what the first left (the
/// second input differs everywhere, and the result matches the interpreter).
#[test]
fn run_reuses_a_dropped_output_and_writes_it_whole() {
    let _serial = SERIAL.lock().unwrap_or_else(|e| e.into_inner());
    // A size no other test here maps, so no other test takes the kept block.
    let n = 10_000_019;
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [n]).unwrap();
    let y = x.mul(2.0).unwrap().add(1.0).unwrap().tanh().unwrap();
    t.output("y", &y).unwrap();
    let graph = t.finish().unwrap();
    let opt = optimize(&graph, &PassOptions::default()).unwrap();
    let program = lower(&opt.graph, &opt.plan).unwrap();
    let exe = CpuProgram::compile(&program, &HashMap::new()).unwrap();
    let input = |k: usize| {
        let v: Vec<f32> = (0..n)
            .map(|i| ((i * 7919 + k) % 2003) as f32 / 1001.0 - 1.0)
            .collect();
        HashMap::from([("x".to_string(), HostTensor::from_f32([n], v).unwrap())])
    };
    // Made first: its data has the output's size and would take the kept block.
    let second_in = input(1000);
    let mut first = exe.run(&input(0)).unwrap().remove(0).1;
    let at = first.data_mut_ptr();
    drop(first);
    // The first input's data (dropped after its run) and the first output.
    assert_eq!(kept_blocks(n * 4), 2);
    let mut second = exe.run(&second_in).unwrap().remove(0).1;
    assert_eq!(
        second.data_mut_ptr(),
        at,
        "the newest kept block of its size"
    );
    assert_eq!(kept_blocks(n * 4), 1);
    let want = eval(&graph, &second_in).unwrap();
    let want = HostTensor::new([n].as_slice(), want[0].1.data().clone()).unwrap();
    check_close("second run", &second, &want, 1e-6, 1e-6).unwrap();
}

//! Compiling the same graph twice in one process compiles no kernel twice (its own test
//! binary, so no other test's compilations count).

#![cfg(feature = "llvm")]

use smelt_frontend::{DType, Tracer};
use smelt_passes::{kernel::lower, optimize, PassOptions};
use smelt_runtime::cpu::{jit_compilations, CpuProgram};
use std::collections::HashMap;

fn program(width: usize) -> smelt_passes::kernel::Program {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [8, width]).unwrap();
    let y = x.exp().unwrap().softmax(-1).unwrap();
    t.output("y", &y).unwrap();
    let g = t.finish().unwrap();
    let opt = optimize(&g, &PassOptions::default()).unwrap();
    lower(&opt.graph, &opt.plan).unwrap()
}

#[test]
fn the_same_program_is_jit_compiled_once() {
    let before = jit_compilations();
    let a = CpuProgram::compile(&program(16), &HashMap::new()).unwrap();
    assert_eq!(jit_compilations(), before + 1);
    // Traced again from scratch: the same kernels, so the cached module is reused.
    let b = CpuProgram::compile(&program(16), &HashMap::new()).unwrap();
    assert_eq!(jit_compilations(), before + 1);
    // Another shape is another kernel.
    let _c = CpuProgram::compile(&program(24), &HashMap::new()).unwrap();
    assert_eq!(jit_compilations(), before + 2);
    // Both programs built from the cache run and agree.
    let x = smelt_ir::HostTensor::from_f32([8, 16], (0..128).map(|i| i as f32 / 64.0).collect())
        .unwrap();
    let inputs = HashMap::from([("x".to_string(), x)]);
    assert_eq!(a.run(&inputs).unwrap(), b.run(&inputs).unwrap());
}

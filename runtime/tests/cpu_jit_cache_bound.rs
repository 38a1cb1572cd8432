//! The in-process JIT cache forgets its least recently used programs beyond its capacity (its
//! own test binary: the capacity and the compilation counter are process-wide).

#![cfg(feature = "llvm")]

use smelt_frontend::{DType, Tracer};
use smelt_passes::{kernel::lower, optimize, PassOptions};
use smelt_runtime::cpu::{jit_compilations, set_jit_cache_capacity, CpuProgram};
use std::collections::HashMap;

fn program(width: usize) -> smelt_passes::kernel::Program {
    let t = Tracer::new();
    let x = t.input("x", DType::F32, [4, width]).unwrap();
    let y = x.tanh().unwrap();
    t.output("y", &y).unwrap();
    let g = t.finish().unwrap();
    let opt = optimize(&g, &PassOptions::default()).unwrap();
    lower(&opt.graph, &opt.plan).unwrap()
}

#[test]
fn the_least_recently_used_program_is_forgotten_beyond_the_capacity() {
    set_jit_cache_capacity(2);
    let compile = |w: usize| CpuProgram::compile(&program(w), &HashMap::new()).unwrap();
    let start = jit_compilations();
    let a = compile(8);
    let _b = compile(9);
    assert_eq!(jit_compilations(), start + 2);
    // A hit makes program 8 the most recently used, so program 10 evicts program 9.
    let _ = compile(8);
    assert_eq!(jit_compilations(), start + 2);
    let _c = compile(10);
    assert_eq!(jit_compilations(), start + 3);
    let _ = compile(8);
    assert_eq!(
        jit_compilations(),
        start + 3,
        "8 was used recently: still cached"
    );
    let _ = compile(9);
    assert_eq!(
        jit_compilations(),
        start + 4,
        "9 was forgotten: compiled again"
    );
    // A forgotten module lives on in the programs using it.
    set_jit_cache_capacity(1);
    let x = smelt_ir::HostTensor::from_f32([4, 8], vec![0.5; 32]).unwrap();
    let y = a.run(&HashMap::from([("x".to_string(), x)])).unwrap();
    assert!(y[0]
        .1
        .to_f32_vec()
        .iter()
        .all(|&v| v == 0.5f32.tanh() || (v - 0.5f32.tanh()).abs() < 1e-6));
}

//! Without the `llvm` feature the CPU executor builds and answers "not compiled in".

#![cfg(not(feature = "llvm"))]

use smelt_codegen::llvm::LlvmError;
use smelt_passes::kernel::Program;
use smelt_runtime::cpu::{CpuError, CpuProgram};
use std::collections::HashMap;

#[test]
fn compile_says_not_compiled_in() {
    let program = Program {
        buffers: vec![],
        steps: vec![],
        outputs: vec![],
    };
    let e = CpuProgram::compile(&program, &HashMap::new()).unwrap_err();
    assert_eq!(e, CpuError::Jit(LlvmError::NotCompiledIn));
}

//! `cuda_kernels::program()` with real buffer declarations (the CUDA printer ignores them, the
//! LLVM generators check every affine access against them): each buffer's dtype from the loads
//! and stores that touch it, its size from the furthest affine access (or 4096 for buffers only
//! reached through computed indices). Shared by `llvm_nvptx.rs` and
//! `runtime/tests/cuda_ptx_llvm.rs`.

#![allow(dead_code)]

use smelt_ir::DType;
use smelt_passes::kernel::{Access, Combiner, InstOp, Program, StageEffect, Step, Ty};

pub fn typed(mut program: Program) -> Program {
    let mut dtype = vec![None; program.buffers.len()];
    let mut numel = vec![1usize; program.buffers.len()];
    for step in &program.steps {
        let Step::Kernel(k) = step else { continue };
        let mut types: std::collections::HashMap<_, _> = std::collections::HashMap::new();
        for stage in &k.stages {
            types.extend(stage.body.iter().map(|i| (i.dst, i.ty)));
            if let StageEffect::Reduce {
                combiner,
                acc,
                result,
                ..
            } = &stage.effect
            {
                let arg = matches!(combiner, Combiner::ArgMax | Combiner::ArgMin);
                types.insert(*result, Ty::Data(if arg { DType::I64 } else { *acc }));
            }
        }
        for stage in &k.stages {
            let dims: Vec<usize> = k.outer.iter().chain(&stage.inner).copied().collect();
            let mut touch = |b: u32, ty: Option<Ty>, access: &Access| {
                let i = b as usize;
                if i >= dtype.len() {
                    return;
                }
                if let Some(Ty::Data(d)) = ty {
                    dtype[i].get_or_insert(d);
                }
                let reach = match access {
                    Access::Affine { offset, strides } => {
                        strides
                            .iter()
                            .zip(&dims)
                            .map(|(&s, &d)| (s.max(0) as usize) * d.saturating_sub(1))
                            .sum::<usize>()
                            + (*offset).max(0) as usize
                            + 1
                    }
                    Access::Computed(_) => 4096,
                };
                numel[i] = numel[i].max(reach);
            };
            for inst in &stage.body {
                if let InstOp::Load { buffer, access } = &inst.op {
                    touch(buffer.0, Some(inst.ty), access);
                }
            }
            if let StageEffect::Store(stores) = &stage.effect {
                for st in stores {
                    touch(st.buffer.0, types.get(&st.value).copied(), &st.access);
                }
            }
        }
    }
    for (b, (d, n)) in program.buffers.iter_mut().zip(dtype.into_iter().zip(numel)) {
        if let Some(d) = d {
            b.dtype = d;
        }
        b.numel = n;
    }
    program
}

//! `CpuProgram::run_into` allocates nothing in steady state (on the calling thread; kernels
//! small enough to run as one chunk, so no parallel loop is dispatched).

#![cfg(feature = "llvm")]

mod cpu_exec_support;

use cpu_exec_support::*;
use smelt_ir::{BinaryOp, DType, HostTensor, UnaryOp};
use smelt_passes::kernel::*;
use smelt_runtime::cpu::{CpuOptions, CpuProgram};
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::collections::HashMap;

struct Counting;

thread_local! {
    static COUNTING: Cell<bool> = const { Cell::new(false) };
    static COUNT: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: forwards to the system allocator; the bookkeeping touches only const-initialised
// thread-locals (no allocation, no reentrancy).
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded contract.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded contract.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        if COUNTING.with(Cell::get) {
            COUNT.with(|c| c.set(c.get() + 1));
        }
        // SAFETY: forwarded contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

#[test]
fn run_into_allocates_nothing_in_steady_state() {
    // Softmax rows, then `y = exp(s) * 2` elementwise: a reduction kernel and a temp.
    let (rows, n) = (4, 50);
    let d = DType::F32;
    let mut p = P::default();
    let x = p.input("x", d, rows * n);
    let s = p.temp(d, rows);
    let y = p.temp(d, rows * n);
    let mut b1 = Body::default();
    let v = b1.load(d, x, 0, &[n as i64, 1]);
    let res = b1.fresh();
    let b2 = Body::after(&b1);
    let st1 = b1.reduce_stage(&[n], v, Combiner::Sum, d, res);
    let st2 = b2.store_stage(&[], vec![(s, affine(0, &[1]), res)]);
    p.kernel(kernel("k_sum", &[x], &[s], &[rows], vec![st1, st2]));
    let mut b = Body::default();
    let xv = b.load(d, x, 0, &[n as i64, 1]);
    let sv = b.load(d, s, 0, &[1, 0]);
    let e = b.un(d, UnaryOp::Exp, xv);
    let m = b.bin(d, BinaryOp::Mul, e, sv);
    let st = b.store_stage(&[], vec![(y, affine(0, &[n as i64, 1]), m)]);
    p.kernel(kernel("k_scale", &[x, s], &[y], &[rows, n], vec![st]));
    p.output("y", y);
    p.output("s", s);
    let options = CpuOptions {
        threads: 1,
        ..CpuOptions::default()
    };
    let exe = CpuProgram::compile_with(&p.build(), &HashMap::new(), &options).unwrap();
    let xt = tensor(d, &[rows * n], &floats(rows * n, 1, 1.0, false));
    let inputs: HashMap<String, HostTensor> = [("x".to_string(), xt)].into_iter().collect();
    let mut outs = vec![
        HostTensor::zeros(d, [rows * n].as_slice()),
        HostTensor::zeros(d, [rows].as_slice()),
    ];
    exe.run_into(&inputs, &mut outs).unwrap();
    let first = outs.clone();
    COUNTING.with(|c| c.set(true));
    for _ in 0..10 {
        exe.run_into(&inputs, &mut outs).unwrap();
    }
    COUNTING.with(|c| c.set(false));
    assert_eq!(COUNT.with(Cell::get), 0, "run_into allocated");
    assert_eq!(outs, first);
}

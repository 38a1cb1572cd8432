//! Typed errors: raised at the call that caused them, naming the op, shapes and dtypes.

mod common;

use smelt_frontend::{nn, DType, FrontendError, Tensor, Tracer};
use smelt_ir::IrError;

fn two_inputs(a: &[usize], b: &[usize]) -> (Tracer, Tensor, Tensor) {
    let tr = Tracer::new();
    let x = tr.input("a", DType::F32, a).unwrap();
    let y = tr.input("b", DType::F32, b).unwrap();
    (tr, x, y)
}

fn ir(e: &FrontendError) -> &IrError {
    match e.root() {
        FrontendError::Ir(e) => e,
        other => panic!("expected an IR error, got {other:?}"),
    }
}

#[test]
fn add_with_incompatible_shapes_names_op_and_types() {
    let (_tr, a, b) = two_inputs(&[2, 3], &[4]);
    let e = a.add(&b).unwrap_err();
    assert!(
        matches!(ir(&e), IrError::Broadcast { op: "add", .. }),
        "{e:?}"
    );
    assert_eq!(e.to_string(), "add: cannot broadcast f32[2, 3] with f32[4]");
}

#[test]
fn matmul_with_mismatched_contraction_is_an_error() {
    let (_tr, a, b) = two_inputs(&[2, 3], &[4, 5]);
    let e = a.matmul(&b).unwrap_err();
    assert!(
        matches!(ir(&e), IrError::Invalid { op: "matmul", .. }),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("contraction") && msg.contains("f32[2, 3]") && msg.contains("f32[4, 5]"),
        "{msg}"
    );
}

#[test]
fn matmul_does_not_promote_dtypes() {
    let tr = Tracer::new();
    let a = tr.input("a", DType::F32, [2, 3]).unwrap();
    let b = tr.input("b", DType::F16, [3, 2]).unwrap();
    let e = a.matmul(&b).unwrap_err();
    assert!(
        matches!(ir(&e), IrError::DTypeMismatch { op: "matmul", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("f32[2, 3], f16[3, 2]"), "{e}");
}

#[test]
fn bad_permutes_are_errors() {
    let (_tr, a, _) = two_inputs(&[2, 3, 4], &[1]);
    let e = a.permute(&[0, 0, 1]).unwrap_err();
    assert!(
        matches!(ir(&e), IrError::Invalid { op: "permute", .. }),
        "{e:?}"
    );
    let e = a.permute(&[0, 1]).unwrap_err();
    assert!(
        matches!(ir(&e), IrError::Invalid { op: "permute", .. }),
        "{e:?}"
    );
    let e = a.permute(&[0, 1, 3]).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Axis {
                op: "permute",
                axis: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = a.permute(&[0, 1, -4]).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Axis {
                op: "permute",
                axis: -4,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("f32[2, 3, 4]"), "{e}");
    let e = a.transpose(0, 5).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Axis {
                op: "transpose",
                axis: 5,
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn bad_reshapes_are_errors() {
    let (_tr, a, _) = two_inputs(&[2, 3], &[1]);
    let e = a.reshape(&[4, 2]).unwrap_err();
    assert!(
        matches!(ir(&e), IrError::Invalid { op: "reshape", .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("6 elements"), "{e}");
    let e = a.reshape(&[-1, -1]).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "reshape", .. }),
        "{e:?}"
    );
    let e = a.reshape(&[4, -1]).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "reshape", .. }),
        "{e:?}"
    );
    let e = a.reshape(&[-2, 3]).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "reshape", .. }),
        "{e:?}"
    );
    let tr = Tracer::new();
    let z = tr.input("z", DType::F32, [0, 3]).unwrap();
    let e = z.reshape(&[0, -1]).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "reshape", .. }),
        "{e:?}"
    );
}

#[test]
fn other_shape_op_errors() {
    let (_tr, a, b) = two_inputs(&[2, 3], &[3]);
    assert!(matches!(
        a.expand(&[3]).unwrap_err(),
        FrontendError::Invalid { op: "expand", .. }
    ));
    assert!(matches!(
        ir(&a.expand(&[4, 3]).unwrap_err()),
        IrError::Invalid { op: "expand", .. }
    ));
    assert!(matches!(
        a.expand(&[-1, 2, 3]).unwrap_err(),
        FrontendError::Invalid { op: "expand", .. }
    ));
    assert!(matches!(
        a.unsqueeze(3).unwrap_err(),
        FrontendError::Axis {
            op: "unsqueeze",
            ..
        }
    ));
    assert!(matches!(
        a.slice_step(0, .., 0).unwrap_err(),
        FrontendError::Invalid { op: "slice", .. }
    ));
    assert!(matches!(
        a.narrow(1, 2, 2).unwrap_err(),
        FrontendError::Invalid { op: "narrow", .. }
    ));
    assert!(matches!(
        a.narrow(1, -4, 1).unwrap_err(),
        FrontendError::Invalid { op: "narrow", .. }
    ));
    assert!(matches!(
        a.pad(&[(1, 1); 3], 0.0).unwrap_err(),
        FrontendError::Invalid { op: "pad", .. }
    ));
    assert!(matches!(
        a.sum(&[0, -2], false).unwrap_err(),
        FrontendError::Invalid { op: "sum", .. }
    ));
    assert!(matches!(
        a.max(&[2], false).unwrap_err(),
        FrontendError::Axis {
            op: "max",
            axis: 2,
            ..
        }
    ));
    assert!(matches!(
        ir(&smelt_frontend::concat(&[&a, &b], 0).unwrap_err()),
        IrError::Invalid { op: "concat", .. }
    ));
    let e = smelt_frontend::concat::<Tensor>(&[], 0).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "concat", .. }),
        "{e:?}"
    );
}

#[test]
fn dtype_errors_name_the_dtype() {
    let tr = Tracer::new();
    let x = tr.input("x", DType::F32, [3]).unwrap();
    let m = tr.input("m", DType::Bool, [3]).unwrap();
    let i = tr.input("i", DType::F32, [2]).unwrap();
    // where needs a bool condition.
    let e = smelt_frontend::where_(&x, &x, 0.0).unwrap_err();
    assert!(
        matches!(
            ir(&e),
            IrError::UnsupportedDType {
                op: "where",
                dtype: DType::F32,
                ..
            }
        ),
        "{e:?}"
    );
    // neg of bool is rejected (as in PyTorch).
    let e = m.neg().unwrap_err();
    assert!(
        matches!(
            ir(&e),
            IrError::UnsupportedDType {
                op: "neg",
                dtype: DType::Bool,
                ..
            }
        ),
        "{e:?}"
    );
    // index_select needs an integer index.
    let e = x.index_select(0, &i).unwrap_err();
    assert!(
        matches!(
            ir(&e),
            IrError::UnsupportedDType {
                op: "index_select",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn mixing_tracers_is_a_typed_error() {
    let t1 = Tracer::new();
    let t2 = Tracer::new();
    let a = t1.input("a", DType::F32, [3]).unwrap();
    let b = t2.input("b", DType::F32, [3]).unwrap();
    assert_eq!(
        a.add(&b).unwrap_err(),
        FrontendError::MixedTracers { op: "add" }
    );
    assert_eq!(
        a.matmul(&b).unwrap_err(),
        FrontendError::MixedTracers { op: "matmul" }
    );
    assert_eq!(
        smelt_frontend::where_(&a.gt(0.0).unwrap(), &a, &b).unwrap_err(),
        FrontendError::MixedTracers { op: "where" }
    );
    assert_eq!(
        t1.output("y", &b).unwrap_err(),
        FrontendError::MixedTracers { op: "output" }
    );
    let e = nn::linear(&a, &b, None).unwrap_err();
    assert_eq!(e, FrontendError::MixedTracers { op: "linear" });
    assert!(
        t1.finish().is_ok(),
        "named methods return errors without recording them"
    );
}

#[test]
fn operator_mixing_tracers_records_in_both() {
    let t1 = Tracer::new();
    let t2 = Tracer::new();
    let a = t1.input("a", DType::F32, [3]).unwrap();
    let b = t2.input("b", DType::F32, [3]).unwrap();
    let line = line!() + 1;
    let c = &a * &b;
    assert!(c.is_poisoned());
    for tr in [t1, t2] {
        let e = tr.finish().unwrap_err();
        assert_eq!(e.root(), &FrontendError::MixedTracers { op: "mul" });
        assert_eq!(e.location().map(|l| l.line()), Some(line));
    }
}

#[test]
fn operator_error_is_recorded_with_location_and_returned_by_finish() {
    let (tr, a, b) = two_inputs(&[2, 3], &[4]);
    let line = line!() + 1;
    let c = &a + &b;
    assert!(c.is_poisoned());
    assert!(c.id().is_none());
    let e = tr.error().expect("recorded");
    let loc = e.location().expect("operators attach a location");
    assert_eq!(loc.line(), line);
    assert!(loc.file().ends_with("errors.rs"), "{}", loc.file());
    assert!(matches!(ir(&e), IrError::Broadcast { op: "add", .. }));
    let msg = e.to_string();
    assert!(
        msg.contains("errors.rs") && msg.contains("add: cannot broadcast f32[2, 3] with f32[4]"),
        "{msg}"
    );
    assert_eq!(tr.finish().unwrap_err(), e);
}

#[test]
fn first_operator_error_wins_and_poison_propagates_silently() {
    let (tr, a, b) = two_inputs(&[2, 3], &[4]);
    let first_line = line!() + 1;
    let c = &a - &b;
    let d = (c * 2.0 + &a) / 3i64; // poisoned operands: nothing new recorded
    let neg = -&d;
    assert!(d.is_poisoned() && neg.is_poisoned());
    let second = &a * &b; // a second, independent failure
    assert!(second.is_poisoned());
    // Named methods on a poisoned tensor return `Poisoned` holding the original error.
    let e = neg.exp().unwrap_err();
    match &e {
        FrontendError::Poisoned { op: "exp", first } => {
            assert_eq!(first.location().map(|l| l.line()), Some(first_line));
        }
        other => panic!("expected Poisoned, got {other:?}"),
    }
    assert!(matches!(neg.dims(), Err(FrontendError::Poisoned { .. })));
    assert!(matches!(
        tr.output("y", &neg),
        Err(FrontendError::Poisoned { op: "output", .. })
    ));
    let e = tr.finish().unwrap_err();
    assert_eq!(e.location().map(|l| l.line()), Some(first_line));
    assert!(matches!(ir(&e), IrError::Broadcast { op: "sub", .. }));
}

#[test]
fn unary_operator_error_is_recorded() {
    let tr = Tracer::new();
    let m = tr.input("m", DType::Bool, [3]).unwrap();
    let line = line!() + 1;
    let n = -m;
    assert!(n.is_poisoned());
    let e = tr.finish().unwrap_err();
    assert_eq!(e.location().map(|l| l.line()), Some(line));
    assert!(matches!(
        ir(&e),
        IrError::UnsupportedDType { op: "neg", .. }
    ));
}

#[test]
fn compound_assignment_records_errors_too() {
    let (tr, mut a, b) = two_inputs(&[2, 3], &[4]);
    let line = line!() + 1;
    a += &b;
    assert!(a.is_poisoned());
    assert_eq!(
        tr.finish().unwrap_err().location().map(|l| l.line()),
        Some(line)
    );
}

#[test]
fn composite_errors_name_the_composite() {
    let tr = Tracer::new();
    let x = tr.input("x", DType::F32, [2, 3, 4]).unwrap();
    let w = tr.param("w", DType::F32, [3]).unwrap();
    let e = x.softmax(3).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Axis {
                op: "softmax",
                axis: 3,
                ..
            }
        ),
        "{e:?}"
    );
    let e = nn::layer_norm(&x, &[4], Some(&w), None, 1e-5).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Invalid {
                op: "layer_norm",
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().contains("f32[3]"), "{e}");
    let e = nn::layer_norm(&x, &[3], None, None, 1e-5).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Invalid {
                op: "layer_norm",
                ..
            }
        ),
        "{e:?}"
    );
    let e = nn::rms_norm(&x, &[], None, None).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "rms_norm", .. }),
        "{e:?}"
    );
    let e = nn::linear(&x, &w, None).unwrap_err();
    assert!(
        matches!(e, FrontendError::Invalid { op: "linear", .. }),
        "{e:?}"
    );
    let ids = tr.input("ids", DType::F32, [2]).unwrap();
    let table = tr.param("table", DType::F32, [10, 4]).unwrap();
    let e = nn::embedding(&ids, &table).unwrap_err();
    assert!(
        matches!(
            e,
            FrontendError::Invalid {
                op: "embedding",
                ..
            }
        ),
        "{e:?}"
    );
}

#[test]
fn attention_argument_errors() {
    let tr = Tracer::new();
    let q = tr.input("q", DType::F32, [2, 4, 8]).unwrap();
    let k = tr.input("k", DType::F32, [2, 5, 6]).unwrap();
    let v = tr.input("v", DType::F32, [2, 5, 8]).unwrap();
    let k16 = tr.input("k16", DType::F16, [2, 5, 8]).unwrap();
    let k8 = tr.input("k8", DType::F32, [2, 5, 8]).unwrap();
    let m = tr.input("m", DType::Bool, [4, 5]).unwrap();
    let m64 = tr.input("m64", DType::F64, [4, 5]).unwrap();
    let m_bad = tr.input("m_bad", DType::Bool, [3, 5]).unwrap();
    let sdpa = nn::scaled_dot_product_attention;
    let op = "scaled_dot_product_attention";
    for e in [
        sdpa(&q, &k, &v, None, false, None).unwrap_err(),
        sdpa(&q, &k16, &v, None, false, None).unwrap_err(),
        sdpa(&q, &k8, &v, Some(&m), true, None).unwrap_err(),
        sdpa(&q, &k8, &v, Some(&m64), false, None).unwrap_err(),
    ] {
        assert!(
            matches!(&e, FrontendError::Invalid { op: o, .. } if *o == op),
            "{e:?}"
        );
    }
    let e = sdpa(&q, &k8, &v, Some(&m_bad), false, None).unwrap_err();
    assert!(
        matches!(&e, FrontendError::InComposite { op: o, .. } if *o == op),
        "{e:?}"
    );
    assert!(
        matches!(ir(&e), IrError::Broadcast { op: "where", .. }),
        "{e:?}"
    );
}

#[test]
fn tracer_lifecycle_errors() {
    let tr = Tracer::new();
    let x = tr.input("x", DType::F32, [3]).unwrap();
    let e = tr.input("x", DType::F32, [3]).unwrap_err();
    assert!(matches!(ir(&e), IrError::DuplicateName { .. }), "{e:?}");
    tr.output("y", &x).unwrap();
    assert!(matches!(
        ir(&tr.output("y", &x).unwrap_err()),
        IrError::DuplicateName { .. }
    ));
    let g = tr.clone().finish().unwrap();
    assert_eq!(g.outputs().len(), 1);
    assert_eq!(x.exp().unwrap_err(), FrontendError::Finished { op: "exp" });
    assert_eq!(
        tr.finish().unwrap_err(),
        FrontendError::Finished { op: "finish" }
    );
}

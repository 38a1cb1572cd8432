//! PyTorch type promotion: the frontend inserts the casts the strict IR needs.

mod common;

use common::{casts_to, scalar_consts};
use smelt_frontend::promote::result_type;
use smelt_frontend::{binary, concat, where_, BinaryOp, DType, Operand, Tensor, Tracer};

fn input(tr: &Tracer, name: &str, dtype: DType, shape: &[usize]) -> Tensor {
    tr.input(name, dtype, shape).unwrap()
}

/// Traces `f` on fresh inputs of the given dtypes (shape [3]), checks the graph verifies and
/// returns the result dtype and the graph.
fn traced(dtypes: &[DType], f: impl FnOnce(&[Tensor]) -> Tensor) -> (DType, smelt_ir::Graph) {
    let tr = Tracer::new();
    let xs: Vec<Tensor> = dtypes
        .iter()
        .enumerate()
        .map(|(i, &d)| input(&tr, &format!("x{i}"), d, &[3]))
        .collect();
    let y = f(&xs);
    let dtype = y.dtype().unwrap();
    tr.output("y", &y).unwrap();
    (dtype, tr.finish().unwrap())
}

#[test]
fn int_tensor_plus_float_scalar_is_f32() {
    let (dt, g) = traced(&[DType::I32], |x| &x[0] + 2.5f32);
    assert_eq!(dt, DType::F32);
    assert_eq!(casts_to(&g, DType::F32), 1, "the i32 operand is cast");
    assert_eq!(
        scalar_consts(&g),
        vec![(DType::F32, 2.5)],
        "the scalar is an f32 0-d constant"
    );
}

#[test]
fn int_tensor_plus_int_scalar_keeps_its_dtype() {
    let (dt, g) = traced(&[DType::I32], |x| &x[0] + 7i64);
    assert_eq!(dt, DType::I32);
    assert_eq!(scalar_consts(&g), vec![(DType::I32, 7.0)]);
    let (dt, _) = traced(&[DType::Bool], |x| x[0].add(1).unwrap());
    assert_eq!(
        dt,
        DType::I64,
        "bool + int scalar: the scalar's default dtype"
    );
    let (dt, _) = traced(&[DType::I64], |x| 2 * &x[0]);
    assert_eq!(dt, DType::I64);
}

#[test]
fn half_with_float_scalar_stays_half() {
    let (dt, g) = traced(&[DType::F16], |x| &x[0] * 0.5);
    assert_eq!(dt, DType::F16);
    assert_eq!(scalar_consts(&g), vec![(DType::F16, 0.5)]);
    assert_eq!(casts_to(&g, DType::F32), 0);
    let (dt, _) = traced(&[DType::BF16], |x| 1.0f32 - &x[0]);
    assert_eq!(dt, DType::BF16);
}

#[test]
fn tensor_tensor_promotion() {
    let (dt, g) = traced(&[DType::F16, DType::F32], |x| &x[0] + &x[1]);
    assert_eq!(dt, DType::F32);
    assert_eq!(casts_to(&g, DType::F32), 1);
    let (dt, g) = traced(&[DType::F16, DType::BF16], |x| &x[0] * &x[1]);
    assert_eq!(dt, DType::F32);
    assert_eq!(casts_to(&g, DType::F32), 2);
    let (dt, _) = traced(&[DType::I32, DType::I64], |x| &x[0] - &x[1]);
    assert_eq!(dt, DType::I64);
    let (dt, _) = traced(&[DType::I64, DType::F16], |x| x[0].maximum(&x[1]).unwrap());
    assert_eq!(dt, DType::F16);
    let (dt, _) = traced(&[DType::Bool, DType::I32], |x| x[0].add(&x[1]).unwrap());
    assert_eq!(dt, DType::I32);
}

#[test]
fn zero_dim_tensors_promote_like_torch_result_type() {
    let tr = Tracer::new();
    let h = input(&tr, "h", DType::F16, &[3]);
    let i = input(&tr, "i", DType::I32, &[3]);
    let f0 = input(&tr, "f0", DType::F32, &[]);
    let d0 = input(&tr, "d0", DType::F64, &[]);
    let l0 = input(&tr, "l0", DType::I64, &[]);
    // Same category: the dimensioned tensor decides.
    assert_eq!((&h + &f0).dtype().unwrap(), DType::F16);
    assert_eq!((&i + &l0).dtype().unwrap(), DType::I32);
    // Higher category: the 0-d tensor's own dtype (not the default).
    assert_eq!((&i + &d0).dtype().unwrap(), DType::F64);
    // Only 0-d tensors: ordinary promotion.
    assert_eq!((&f0 + &d0).dtype().unwrap(), DType::F64);
    assert_eq!((&l0 * 2.5).dtype().unwrap(), DType::F32);
    tr.finish().unwrap();
}

#[test]
fn true_division_of_integers_is_f32() {
    let (dt, g) = traced(&[DType::I32, DType::I32], |x| &x[0] / &x[1]);
    assert_eq!(dt, DType::F32);
    assert_eq!(casts_to(&g, DType::F32), 2);
    let (dt, _) = traced(&[DType::I64], |x| &x[0] / 2);
    assert_eq!(dt, DType::F32);
    let (dt, _) = traced(&[DType::I64], |x| 1i32 / &x[0]);
    assert_eq!(dt, DType::F32);
    let (dt, _) = traced(&[DType::F16], |x| &x[0] / 2);
    assert_eq!(dt, DType::F16);
    // floor_div and remainder stay integral.
    let (dt, _) = traced(&[DType::I32], |x| x[0].floor_div(2).unwrap());
    assert_eq!(dt, DType::I32);
    let (dt, _) = traced(&[DType::I32], |x| x[0].remainder(2.0).unwrap());
    assert_eq!(dt, DType::F32);
}

#[test]
fn comparisons_promote_then_give_bool() {
    let (dt, g) = traced(&[DType::I32], |x| x[0].lt(2.5).unwrap());
    assert_eq!(dt, DType::Bool);
    assert_eq!(casts_to(&g, DType::F32), 1, "i32 < 2.5 compares in f32");
    assert_eq!(scalar_consts(&g), vec![(DType::F32, 2.5)]);
    let (dt, g) = traced(&[DType::F16, DType::F64], |x| x[0].eq(&x[1]).unwrap());
    assert_eq!(dt, DType::Bool);
    assert_eq!(casts_to(&g, DType::F64), 1);
    for op in [BinaryOp::Ne, BinaryOp::Le, BinaryOp::Gt, BinaryOp::Ge] {
        let (dt, _) = traced(&[DType::I64, DType::I32], |x| {
            binary(op, &x[0], &x[1]).unwrap()
        });
        assert_eq!(dt, DType::Bool);
    }
}

#[test]
fn logical_ops_test_each_operand_in_its_own_dtype() {
    let (dt, g) = traced(&[DType::I32, DType::F32], |x| {
        x[0].logical_and(&x[1]).unwrap()
    });
    assert_eq!(dt, DType::Bool);
    assert_eq!(casts_to(&g, DType::Bool), 2);
    assert_eq!(
        casts_to(&g, DType::F32),
        0,
        "no promotion through f32 first"
    );
    let (dt, _) = traced(&[DType::F16], |x| x[0].logical_not().unwrap());
    assert_eq!(dt, DType::Bool);
    let (dt, _) = traced(&[DType::Bool], |x| x[0].logical_or(true).unwrap());
    assert_eq!(dt, DType::Bool);
}

#[test]
fn float_only_ops_cast_integers_to_f32() {
    for dt in [DType::I32, DType::I64, DType::Bool] {
        let (out, g) = traced(&[dt], |x| x[0].exp().unwrap());
        assert_eq!(out, DType::F32);
        assert_eq!(casts_to(&g, DType::F32), 1);
        assert_eq!(traced(&[dt], |x| x[0].sqrt().unwrap()).0, DType::F32);
        assert_eq!(traced(&[dt], |x| x[0].sigmoid().unwrap()).0, DType::F32);
        assert_eq!(traced(&[dt], |x| x[0].mean_all().unwrap()).0, DType::F32);
        assert_eq!(traced(&[dt], |x| x[0].softmax(0).unwrap()).0, DType::F32);
    }
    assert_eq!(traced(&[DType::F16], |x| x[0].exp().unwrap()).0, DType::F16);
    assert_eq!(
        traced(&[DType::BF16], |x| x[0].rsqrt().unwrap()).0,
        DType::BF16
    );
    // Not float-only: abs, relu, floor keep integers.
    assert_eq!(traced(&[DType::I32], |x| x[0].abs().unwrap()).0, DType::I32);
    assert_eq!(
        traced(&[DType::I32], |x| x[0].relu().unwrap()).0,
        DType::I32
    );
    assert_eq!(
        traced(&[DType::I64], |x| x[0].floor().unwrap()).0,
        DType::I64
    );
}

#[test]
fn reduction_dtypes_follow_torch() {
    assert_eq!(
        traced(&[DType::I32], |x| x[0].sum_all().unwrap()).0,
        DType::I64
    );
    assert_eq!(
        traced(&[DType::Bool], |x| x[0].sum(&[0], true).unwrap()).0,
        DType::I64
    );
    assert_eq!(
        traced(&[DType::I32], |x| x[0].prod_all().unwrap()).0,
        DType::I64
    );
    assert_eq!(
        traced(&[DType::F16], |x| x[0].sum_all().unwrap()).0,
        DType::F16
    );
    assert_eq!(
        traced(&[DType::I32], |x| x[0].max_all().unwrap()).0,
        DType::I32
    );
    assert_eq!(
        traced(&[DType::F32], |x| x[0].argmax(0, false).unwrap()).0,
        DType::I64
    );
    assert_eq!(
        traced(&[DType::F16], |x| x[0].argmin_all().unwrap()).0,
        DType::I64
    );
}

#[test]
fn where_promotes_its_values() {
    let tr = Tracer::new();
    let c = input(&tr, "c", DType::Bool, &[3]);
    let i = input(&tr, "i", DType::I32, &[3]);
    let f = input(&tr, "f", DType::F32, &[3]);
    let h = input(&tr, "h", DType::F16, &[3]);
    assert_eq!(where_(&c, &i, &f).unwrap().dtype().unwrap(), DType::F32);
    assert_eq!(where_(&c, &h, 0.0).unwrap().dtype().unwrap(), DType::F16);
    assert_eq!(where_(&c, &i, 0.5).unwrap().dtype().unwrap(), DType::F32);
    assert_eq!(where_(&c, 1.0, 0).unwrap().dtype().unwrap(), DType::F32);
    assert_eq!(where_(&c, 1, 0).unwrap().dtype().unwrap(), DType::I64);
    assert_eq!(i.where_(&c, &h).unwrap().dtype().unwrap(), DType::F16);
    tr.finish().unwrap();
}

#[test]
fn concat_and_pow_promote() {
    let (dt, _) = traced(&[DType::F16, DType::F32], |x| concat(x, 0).unwrap());
    assert_eq!(dt, DType::F32);
    let (dt, _) = traced(&[DType::I32, DType::I64, DType::I32], |x| {
        x[0].cat(&x[1..], -1).unwrap()
    });
    assert_eq!(dt, DType::I64);
    assert_eq!(
        traced(&[DType::I32], |x| x[0].pow(2).unwrap()).0,
        DType::I32
    );
    assert_eq!(
        traced(&[DType::I32], |x| x[0].pow(0.5).unwrap()).0,
        DType::F32
    );
    assert_eq!(
        traced(&[DType::F16], |x| x[0].pow(2).unwrap()).0,
        DType::F16
    );
}

#[test]
fn public_result_type_matches_torch() {
    let tr = Tracer::new();
    let h = input(&tr, "h", DType::F16, &[3]);
    let i = input(&tr, "i", DType::I32, &[2]);
    let rt = |ops: &[Operand]| result_type(ops).unwrap();
    assert_eq!(rt(&[(&h).into(), 1.0.into()]), DType::F16);
    assert_eq!(rt(&[(&i).into(), 1.0.into()]), DType::F32);
    assert_eq!(rt(&[(&i).into(), true.into()]), DType::I32);
    assert_eq!(rt(&[(&i).into(), (&h).into()]), DType::F16);
    assert!(result_type(&[1.0.into()]).is_err(), "needs a tensor");
}

#[test]
fn same_dtype_needs_no_cast() {
    let (dt, g) = traced(&[DType::F32, DType::F32], |x| (&x[0] + &x[1]) * &x[0] - 1.0);
    assert_eq!(dt, DType::F32);
    assert!(g
        .nodes()
        .iter()
        .all(|n| !matches!(n.op, smelt_ir::Op::Cast { .. })));
}

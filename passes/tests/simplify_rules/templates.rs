//! One left-hand-side template per rule: the rule's pattern over random operands of every
//! dtype it could apply to, plus near misses (other constants, other dtypes, broadcasting
//! operands) so that the rule's conditions are exercised as well as its rewrite.

use super::gen::{finish, Gen, ALL, FLOATS, NUMERIC, SPECIAL};
use smelt_ir::{BinaryOp as B, DType, Graph, NodeId, Scalar, SliceRange, UnaryOp as U};

/// `op(x, c)` (or `op(c, x)` when `swap` may be drawn) with `c` a constant from `vals`
/// broadcasting against `x`.
fn with_const(r: &mut Gen, dtypes: &[DType], op: B, vals: &[f64], swap: bool) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(dtypes);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let cs = r.bshape(&s);
    let c = r.constant_or_special(&mut g, d, &cs, vals);
    let (a, b) = if swap && r.chance(50) { (c, x) } else { (x, c) };
    let y = g.binary(op, a, b).expect("well-typed");
    finish(g, y)
}

/// `op(x, y)` for two inputs of broadcasting shapes, with `inner` applied to the second
/// (and the operands swapped half of the time when `swap`).
fn with_unary_operand(r: &mut Gen, dtypes: &[DType], op: B, inner: U, swap: bool) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(dtypes);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let ys = r.bshape(&s);
    let y0 = r.input(&mut g, d, &ys);
    let ny = g.unary(inner, y0).expect("numeric");
    let (a, b) = if swap && r.chance(50) {
        (ny, x)
    } else {
        (x, ny)
    };
    let out = g.binary(op, a, b).expect("well-typed");
    finish(g, out)
}

/// `outer(inner(x))`.
fn unary_chain(r: &mut Gen, dtypes: &[DType], outer: &[U], inner: &[U]) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(dtypes);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let a = g.unary(r.pick(inner), x).expect("unary");
    let b = g.unary(r.pick(outer), a).expect("unary");
    finish(g, b)
}

pub fn const_fold(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let a = r.constant_or_special(&mut g, d, &s, &[1.0, -2.0, 0.5, 3.0]);
    let y = match r.below(5) {
        0 => r.any_unary(&mut g, a),
        1 => {
            let bs = r.bshape(&s);
            let b = r.constant_or_special(&mut g, d, &bs, &[1.0, -2.0, 0.5, 3.0]);
            r.any_binary(&mut g, a, b)
        }
        2 => r.any_reduce(&mut g, a),
        3 => {
            let p = r.perm(s.len());
            g.permute(a, &p).expect("perm")
        }
        _ => g.cast(a, r.pick(ALL)).expect("cast"),
    };
    finish(g, y)
}

pub fn mul_one(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Mul, &[1.0], true)
}
pub fn div_one(r: &mut Gen) -> Graph {
    with_const(r, FLOATS, B::Div, &[1.0], false)
}
pub fn add_neg_zero(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Add, &[-0.0, 0.0], true)
}
pub fn sub_pos_zero(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Sub, &[0.0, -0.0], false)
}
pub fn int_add_zero(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Add, &[0.0, -0.0], true)
}
pub fn int_sub_zero(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Sub, &[0.0], false)
}
pub fn int_mul_zero(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Mul, &[0.0, -0.0], true)
}
pub fn int_floor_div_one(r: &mut Gen) -> Graph {
    let dtypes = [
        DType::I32,
        DType::I64,
        DType::I32,
        DType::I64,
        DType::F32,
        DType::F16,
    ];
    with_const(r, &dtypes, B::FloorDiv, &[1.0, -1.0, 2.0], false)
}
pub fn pow_one(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Pow, &[1.0, 2.0, 0.0], false)
}
pub fn mul_neg_one(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Mul, &[-1.0, 1.0], true)
}
pub fn int_sub_self(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(NUMERIC);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let y = g.binary(B::Sub, x, x).expect("sub");
    finish(g, y)
}
pub fn add_neg(r: &mut Gen) -> Graph {
    with_unary_operand(r, NUMERIC, B::Add, U::Neg, true)
}
pub fn sub_neg(r: &mut Gen) -> Graph {
    with_unary_operand(r, NUMERIC, B::Sub, U::Neg, false)
}
pub fn max_min_self(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(NUMERIC);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let y = g
        .binary(r.pick(&[B::Maximum, B::Minimum]), x, x)
        .expect("max");
    finish(g, y)
}
pub fn div_pow2(r: &mut Gen) -> Graph {
    let p = |k: i32| 2f64.powi(k);
    let vals = [
        2.0,
        0.5,
        -4.0,
        -0.25,
        3.0,
        1.0,
        p(14),
        p(15),
        p(16),
        p(-14),
        p(-15),
        p(-24),
        p(-25),
        p(127),
        p(-126),
        p(-133),
        p(-149),
        p(1023),
        p(-1022),
        p(-1074),
        0.0,
        -0.0,
    ];
    with_const(r, FLOATS, B::Div, &vals, false)
}
pub fn neg_neg(r: &mut Gen) -> Graph {
    unary_chain(r, NUMERIC, &[U::Neg], &[U::Neg, U::Abs])
}
pub fn not_not(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let a = g.unary(U::LogicalNot, x).expect("not");
    let b = g.unary(U::LogicalNot, a).expect("not");
    finish(g, b)
}
pub fn abs_abs(r: &mut Gen) -> Graph {
    unary_chain(r, NUMERIC, &[U::Abs], &[U::Abs, U::Neg])
}
pub fn abs_neg(r: &mut Gen) -> Graph {
    unary_chain(r, NUMERIC, &[U::Abs], &[U::Neg, U::Relu])
}
pub fn relu_relu(r: &mut Gen) -> Graph {
    unary_chain(r, NUMERIC, &[U::Relu], &[U::Relu, U::Neg])
}
pub fn relu_abs(r: &mut Gen) -> Graph {
    unary_chain(r, NUMERIC, &[U::Relu], &[U::Abs])
}
pub fn floor_ceil_integral(r: &mut Gen) -> Graph {
    unary_chain(
        r,
        NUMERIC,
        &[U::Floor, U::Ceil],
        &[U::Floor, U::Ceil, U::Neg],
    )
}
pub fn int_floor_ceil(r: &mut Gen) -> Graph {
    unary_chain(r, NUMERIC, &[U::Floor, U::Ceil], &[U::Neg, U::Abs])
}

fn casts(r: &mut Gen, n: usize) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let mut x = r.input(&mut g, d, &s);
    for i in 0..n {
        // The last cast goes back to the start dtype half of the time.
        let to = if i + 1 == n && n > 1 && r.chance(50) {
            d
        } else {
            r.pick(ALL)
        };
        x = g.cast(x, to).expect("cast");
    }
    finish(g, x)
}
pub fn cast_same(r: &mut Gen) -> Graph {
    casts(r, 1)
}
pub fn cast_roundtrip(r: &mut Gen) -> Graph {
    casts(r, 2)
}
pub fn cast_widen_chain(r: &mut Gen) -> Graph {
    if r.chance(50) {
        return casts(r, 2);
    }
    // Mostly lossless first casts.
    let mut g = Graph::new();
    let (d, w) = r.pick(&[
        (DType::Bool, DType::I32),
        (DType::Bool, DType::F16),
        (DType::F16, DType::F32),
        (DType::BF16, DType::F64),
        (DType::F32, DType::F64),
        (DType::I32, DType::I64),
        (DType::I32, DType::F64),
        (DType::I64, DType::F64),
    ]);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let a = g.cast(x, w).expect("cast");
    let y = g.cast(a, r.pick(ALL)).expect("cast");
    finish(g, y)
}

pub fn where_const(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let a = r.input(&mut g, d, &s);
    let bs = r.bshape(&s);
    let b = r.input(&mut g, d, &bs);
    let cs = r.bshape(&s);
    let c = r.constant(&mut g, DType::Bool, &cs, &[1.0, 0.0]);
    let (a, b) = if r.chance(50) { (a, b) } else { (b, a) };
    let y = g.where_(c, a, b).expect("where");
    finish(g, y)
}
pub fn where_same(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let a = r.input(&mut g, d, &s);
    let cs = r.bshape(&s);
    let c = r.input(&mut g, DType::Bool, &cs);
    let y = g.where_(c, a, a).expect("where");
    finish(g, y)
}

// ---- layout ---------------------------------------------------------------------------------

pub fn permute_identity(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let p = r.perm(s.len());
    let y = g.permute(x, &p).expect("perm");
    finish(g, y)
}
pub fn permute_permute(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let p1 = r.perm(s.len());
    let a = g.permute(x, &p1).expect("perm");
    // The inverse a third of the time, so that the chain cancels.
    let p2 = if r.chance(33) {
        let mut inv = vec![0; p1.len()];
        for (i, &p) in p1.iter().enumerate() {
            inv[p] = i;
        }
        inv
    } else {
        r.perm(s.len())
    };
    let y = g.permute(a, &p2).expect("perm");
    finish(g, y)
}

pub fn permute_unit_axes(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    // Mostly size-1 axes, so that many permutes only move those.
    let s: Vec<usize> = (0..1 + r.below(4))
        .map(|_| if r.chance(60) { 1 } else { 2 + r.below(2) })
        .collect();
    let x = r.input(&mut g, d, &s);
    let p = r.perm(s.len());
    let y = g.permute(x, &p).expect("perm");
    finish(g, y)
}

/// A random reshape target of `s`'s element count (`s` itself half of the time).
fn reshape_target(r: &mut Gen, s: &[usize]) -> Vec<usize> {
    let n: usize = s.iter().product();
    match r.below(4) {
        0 | 1 => s.to_vec(),
        2 => vec![n],
        _ => {
            let mut v = vec![1];
            v.extend(s.iter().rev());
            v
        }
    }
}
pub fn reshape_same(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let t = reshape_target(r, &s);
    let y = g.reshape(x, t).expect("reshape");
    finish(g, y)
}
pub fn reshape_reshape(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let t1 = reshape_target(r, &s);
    let a = g.reshape(x, t1.clone()).expect("reshape");
    let t2 = reshape_target(r, &t1);
    let y = g.reshape(a, t2).expect("reshape");
    finish(g, y)
}
pub fn expand_same(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let t: Vec<usize> = if r.chance(50) {
        s.clone()
    } else {
        let mut t = vec![2];
        t.extend(s.iter().map(|&k| if k == 1 { 3 } else { k }));
        t
    };
    let y = g.expand(x, t).expect("expand");
    finish(g, y)
}
pub fn expand_expand(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s: Vec<usize> = r.shape().iter().map(|_| 1).collect();
    let x = r.input(&mut g, d, &s);
    let t1: Vec<usize> = s.iter().map(|_| if r.chance(50) { 2 } else { 1 }).collect();
    let a = g.expand(x, t1.clone()).expect("expand");
    let mut t2 = vec![3];
    t2.extend(
        t1.iter()
            .map(|&k| if k == 1 && r.chance(50) { 2 } else { k }),
    );
    let y = g.expand(a, t2).expect("expand");
    finish(g, y)
}
pub fn slice_full(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let ranges: Vec<SliceRange> = s
        .iter()
        .map(|&k| {
            if r.chance(70) || k == 0 {
                SliceRange::full(k)
            } else {
                SliceRange {
                    start: r.below(k),
                    stop: k,
                    step: 1 + r.below(2),
                }
            }
        })
        .collect();
    let y = g.slice(x, &ranges).expect("slice");
    finish(g, y)
}
pub fn pad_none(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let pads: Vec<(usize, usize)> = s
        .iter()
        .map(|_| {
            if r.chance(70) {
                (0, 0)
            } else {
                (r.below(2), r.below(2))
            }
        })
        .collect();
    let y = g
        .pad(x, &pads, Scalar::Float(r.pick(SPECIAL)))
        .expect("pad");
    finish(g, y)
}
pub fn concat_single(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape_nonempty();
    let x = r.input(&mut g, d, &s);
    let axis = r.below(s.len());
    let parts: Vec<NodeId> = if r.chance(50) { vec![x] } else { vec![x, x] };
    let y = g.concat(&parts, axis).expect("concat");
    finish(g, y)
}
pub fn unary_permute(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let p = r.perm(s.len());
    let a = g.permute(x, &p).expect("perm");
    let y = r.any_unary(&mut g, a);
    finish(g, y)
}
pub fn cast_permute(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let p = r.perm(s.len());
    let a = g.permute(x, &p).expect("perm");
    let y = g.cast(a, r.pick(ALL)).expect("cast");
    finish(g, y)
}
pub fn binary_permute(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let p = r.perm(s.len());
    let a = g.permute(x, &p).expect("perm");
    let b = match r.below(3) {
        0 => {
            let y = r.input(&mut g, d, &s);
            let mut q = if r.chance(70) {
                p.clone()
            } else {
                r.perm(s.len())
            };
            let dims = |p: &[usize]| -> Vec<usize> { p.iter().map(|&i| s[i]).collect() };
            if dims(&q) != dims(&p) {
                q = p.clone();
            }
            g.permute(y, &q).expect("perm")
        }
        1 => {
            let rank = r.below(s.len() + 2);
            let ones = vec![1; rank];
            r.input(&mut g, d, &ones)
        }
        _ => {
            let ps: Vec<usize> = p.iter().map(|&i| s[i]).collect();
            let bs = r.bshape(&ps);
            r.input(&mut g, d, &bs)
        }
    };
    let (a, b) = if r.chance(50) { (a, b) } else { (b, a) };
    let y = r.any_binary(&mut g, a, b);
    finish(g, y)
}
pub fn reduce_permute(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(ALL);
    let s = r.shape();
    let x = r.input(&mut g, d, &s);
    let p = r.perm(s.len());
    let a = g.permute(x, &p).expect("perm");
    let y = r.any_reduce(&mut g, a);
    finish(g, y)
}

// ---- fast-math ------------------------------------------------------------------------------

pub fn fm_add_zero(r: &mut Gen) -> Graph {
    with_const(r, FLOATS, B::Add, &[0.0, -0.0, 1.0], true)
}
pub fn fm_sub_zero(r: &mut Gen) -> Graph {
    with_const(r, FLOATS, B::Sub, &[0.0, -0.0, 1.0], false)
}
pub fn fm_mul_zero(r: &mut Gen) -> Graph {
    with_const(r, NUMERIC, B::Mul, &[0.0, -0.0, 1.0], true)
}
pub fn fm_sub_self(r: &mut Gen) -> Graph {
    int_sub_self(r)
}
pub fn fm_div_const(r: &mut Gen) -> Graph {
    with_const(r, FLOATS, B::Div, &[], false)
}
fn assoc(r: &mut Gen, op: B) -> Graph {
    let mut g = Graph::new();
    let d = r.pick(FLOATS);
    let s = r.shape();
    let a = r.input(&mut g, d, &s);
    let bs = r.bshape(&s);
    let b = if r.chance(50) {
        r.constant(&mut g, d, &bs, &[])
    } else {
        r.input(&mut g, d, &bs)
    };
    let ab = g.binary(op, a, b).expect("binary");
    let cs = r.bshape(&s);
    let c = if r.chance(50) {
        r.constant(&mut g, d, &cs, &[])
    } else {
        r.input(&mut g, d, &cs)
    };
    let y = g.binary(op, ab, c).expect("binary");
    finish(g, y)
}
pub fn fm_add_assoc(r: &mut Gen) -> Graph {
    assoc(r, B::Add)
}
pub fn fm_mul_assoc(r: &mut Gen) -> Graph {
    assoc(r, B::Mul)
}
pub fn fm_const_right(r: &mut Gen) -> Graph {
    let op = r.pick(&[B::Add, B::Mul]);
    with_const(r, NUMERIC, op, &[], true)
}
pub fn fm_log_exp(r: &mut Gen) -> Graph {
    unary_chain(r, FLOATS, &[U::Log], &[U::Exp, U::Abs])
}

/// `x + 0.0` (no rule may rewrite it to `x`; used to show the harness catches one that does).
pub fn add_pos_zero(r: &mut Gen) -> Graph {
    with_const(r, FLOATS, B::Add, &[0.0], false)
}

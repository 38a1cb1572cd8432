//! Shape inference and values of the primitive methods (Python-style axes and slices).

mod common;

use common::{eval1, f32s, run, tensor, values};
use proptest::prelude::*;
use smelt_frontend::{concat, DType, Tensor, Tracer};

fn x234(tr: &Tracer) -> Tensor {
    tr.input("x", DType::F32, [2, 3, 4]).unwrap()
}

fn iota(shape: &[usize]) -> smelt_ir::HostTensor {
    let n: usize = shape.iter().product();
    f32s(shape, &(0..n).map(|i| i as f64).collect::<Vec<_>>())
}

#[test]
fn view_shapes() {
    let tr = Tracer::new();
    let x = x234(&tr);
    let d = |t: smelt_frontend::Result<Tensor>| t.unwrap().dims().unwrap().to_vec();
    assert_eq!(d(x.reshape(&[-1, 4])), [6, 4]);
    assert_eq!(d(x.reshape(&[4, -1, 2])), [4, 3, 2]);
    assert_eq!(d(x.flatten()), [24]);
    assert_eq!(d(x.permute(&[-1, 0, 1])), [4, 2, 3]);
    assert_eq!(d(x.transpose(-1, -3)), [4, 3, 2]);
    assert_eq!(d(x.unsqueeze(-1)), [2, 3, 4, 1]);
    assert_eq!(d(x.unsqueeze(0)), [1, 2, 3, 4]);
    assert_eq!(d(x.unsqueeze(-4)), [1, 2, 3, 4]);
    assert_eq!(d(x.unsqueeze(1).and_then(|t| t.squeeze(1))), [2, 3, 4]);
    assert_eq!(
        d(x.squeeze(0)),
        [2, 3, 4],
        "squeezing a non-1 axis is a no-op"
    );
    assert_eq!(
        d(x.reshape(&[1, 2, 1, 3, 4, 1]).and_then(|t| t.squeeze_all())),
        [2, 3, 4]
    );
    assert_eq!(
        d(x.slice(1, 1..).and_then(|t| t.expand(&[5, -1, -1, 4]))),
        [5, 2, 2, 4]
    );
    assert_eq!(
        d(x.sum(&[1], true).and_then(|t| t.broadcast_to(&[2, 3, 4]))),
        [2, 3, 4]
    );
    assert_eq!(d(x.pad(&[(1, 2)], 0.0)), [2, 3, 7]);
    assert_eq!(d(x.pad(&[(0, 1), (1, 0), (0, 0)], 0.0)), [3, 4, 4]);
    assert_eq!(d(concat(&[&x, &x], -1)), [2, 3, 8]);
    assert_eq!(d(x.cat(&[&x], 0)), [4, 3, 4]);
    tr.finish().unwrap();
}

#[test]
fn reduction_shapes() {
    let tr = Tracer::new();
    let x = x234(&tr);
    let d = |t: smelt_frontend::Result<Tensor>| t.unwrap().dims().unwrap().to_vec();
    assert_eq!(d(x.sum(&[-1], false)), [2, 3]);
    assert_eq!(d(x.mean(&[0, -1], true)), [1, 3, 1]);
    assert_eq!(
        d(x.max(&[], false)),
        Vec::<usize>::new(),
        "empty axes reduce everything"
    );
    assert_eq!(d(x.min_all()), Vec::<usize>::new());
    assert_eq!(d(x.argmax(1, true)), [2, 1, 4]);
    assert_eq!(d(x.argmin(-1, false)), [2, 3]);
    assert_eq!(d(x.var(&[1, 2], None, false)), [2]);
    let s = tr.input("s", DType::F32, []).unwrap();
    assert_eq!(
        d(s.sum(&[0], false)),
        Vec::<usize>::new(),
        "0-d accepts axis 0"
    );
    assert_eq!(d(s.softmax(-1)), Vec::<usize>::new());
    tr.finish().unwrap();
}

#[test]
fn reshape_and_permute_values() {
    let x = iota(&[2, 3]);
    let y = eval1(&x, |t| t.transpose(0, 1)?.reshape(&[-1]));
    assert_eq!(values(&y), [0.0, 3.0, 1.0, 4.0, 2.0, 5.0]);
    let y = eval1(&x, |t| {
        t.unsqueeze(0)?.expand(&[2, -1, -1])?.sum(&[0], false)
    });
    assert_eq!(values(&y), [0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
}

#[test]
#[allow(clippy::reversed_empty_ranges)] // an empty Python slice is what is tested
fn slice_values_follow_python() {
    let x = iota(&[6]);
    let s = |f: &dyn Fn(&Tensor) -> smelt_frontend::Result<Tensor>| values(&eval1(&x, f));
    assert_eq!(s(&|t| t.slice(0, 1..4)), [1.0, 2.0, 3.0]);
    assert_eq!(s(&|t| t.slice(0, -2..)), [4.0, 5.0]);
    assert_eq!(s(&|t| t.slice(0, ..-4)), [0.0, 1.0]);
    assert_eq!(
        s(&|t| t.slice(0, -100..100)),
        [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    );
    assert_eq!(s(&|t| t.slice(0, 4..2)), Vec::<f64>::new());
    assert_eq!(s(&|t| t.slice(0, ..=-2)), [0.0, 1.0, 2.0, 3.0, 4.0]);
    assert_eq!(s(&|t| t.slice_step(0, 1.., 2)), [1.0, 3.0, 5.0]);
    assert_eq!(s(&|t| t.slice_step(0, ..-1, 3)), [0.0, 3.0]);
    assert_eq!(s(&|t| t.narrow(0, -3, 2)), [3.0, 4.0]);
    assert_eq!(
        s(&|t| t.pad(&[(1, 2)], -1.0)),
        [-1.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, -1.0, -1.0]
    );
}

/// `len(range(dim)[start:stop:step])` computed the way CPython's `slice.indices` does.
fn python_slice(dim: i64, start: Option<i64>, stop: Option<i64>, step: i64) -> Vec<i64> {
    let norm = |b: i64| if b < 0 { (b + dim).max(0) } else { b.min(dim) };
    let lo = start.map_or(0, norm);
    let hi = stop.map_or(dim, norm);
    (lo..hi).step_by(step as usize).collect()
}

proptest! {
    #[test]
    fn slice_matches_python_slicing(
        dim in 0usize..7,
        start in proptest::option::of(-9i64..9),
        stop in proptest::option::of(-9i64..9),
        step in 1usize..4,
    ) {
        let tr = Tracer::new();
        let x = tr.input("x", DType::I64, [dim]).unwrap();
        let y = match (start, stop) {
            (Some(a), Some(b)) => x.slice_step(0, a..b, step),
            (Some(a), None) => x.slice_step(0, a.., step),
            (None, Some(b)) => x.slice_step(0, ..b, step),
            (None, None) => x.slice_step(0, .., step),
        }
        .unwrap();
        tr.output("y", &y).unwrap();
        let g = tr.finish().unwrap();
        let data: Vec<f64> = (0..dim).map(|i| i as f64).collect();
        let out = run(&g, &[("x", tensor(DType::I64, &[dim], &data))]).remove("y").unwrap();
        let want: Vec<f64> = python_slice(dim as i64, start, stop, step as i64).into_iter().map(|i| i as f64).collect();
        prop_assert_eq!(values(&out), want);
    }

    #[test]
    fn reshape_with_minus_one_infers_the_size(dims in proptest::collection::vec(1usize..4, 1..4), pos in 0usize..4) {
        let tr = Tracer::new();
        let x = tr.input("x", DType::F32, dims.as_slice()).unwrap();
        let mut shape: Vec<i64> = dims.iter().rev().map(|&d| d as i64).collect();
        let pos = pos % shape.len();
        shape[pos] = -1;
        let y = x.reshape(&shape).unwrap();
        let mut want: Vec<usize> = dims.iter().rev().copied().collect();
        want[pos] = dims[dims.len() - 1 - pos];
        prop_assert_eq!(y.dims().unwrap(), want.as_slice());
    }
}

#[test]
fn reductions_and_arg_reductions_values() {
    let x = f32s(&[2, 3], &[3.0, -1.0, 7.0, 2.0, 9.0, 9.0]);
    assert_eq!(values(&eval1(&x, |t| t.sum(&[-1], false))), [9.0, 20.0]);
    assert_eq!(values(&eval1(&x, |t| t.max(&[0], false))), [3.0, 9.0, 9.0]);
    assert_eq!(values(&eval1(&x, |t| t.min_all())), [-1.0]);
    assert_eq!(values(&eval1(&x, |t| t.prod(&[1], false))), [-21.0, 162.0]);
    assert_eq!(
        values(&eval1(&x, |t| t.argmax(1, false))),
        [2.0, 1.0],
        "first maximum wins"
    );
    assert_eq!(values(&eval1(&x, |t| t.argmax_all())), [4.0]);
    assert_eq!(values(&eval1(&x, |t| t.argmin_all())), [1.0]);
    assert_eq!(
        values(&eval1(&x, |t| t.mean(&[], false))),
        [f64::from(29.0f32 / 6.0)]
    );
}

#[test]
fn operators_and_scalars_compute_torch_values() {
    let x = tensor(DType::I32, &[4], &[-3.0, -1.0, 2.0, 5.0]);
    assert_eq!(values(&eval1(&x, |t| Ok(t / 2))), [-1.5, -0.5, 1.0, 2.5]);
    assert_eq!(
        values(&eval1(&x, |t| t.floor_div(2))),
        [-2.0, -1.0, 1.0, 2.0]
    );
    assert_eq!(values(&eval1(&x, |t| t.remainder(3))), [0.0, 2.0, 2.0, 2.0]);
    assert_eq!(
        values(&eval1(&x, |t| Ok(10 - t * 2))),
        [16.0, 12.0, 6.0, 0.0]
    );
    assert_eq!(values(&eval1(&x, |t| Ok(-t + 0.5))), [3.5, 1.5, -1.5, -4.5]);
    assert_eq!(values(&eval1(&x, |t| t.gt(1.5))), [0.0, 0.0, 1.0, 1.0]);
    assert_eq!(values(&eval1(&x, |t| t.maximum(0))), [0.0, 0.0, 2.0, 5.0]);
    assert_eq!(values(&eval1(&x, |t| t.relu())), [0.0, 0.0, 2.0, 5.0]);
    assert_eq!(
        values(&eval1(&x, |t| t.logical_and(t.gt(0)?))),
        [0.0, 0.0, 1.0, 1.0]
    );
    let mut acc = None;
    let y = eval1(&x, |t| {
        let mut u = t.cast(DType::F32)?;
        u += 1.0;
        u *= &u.clone();
        acc = Some(u.dims()?.to_vec());
        Ok(u)
    });
    assert_eq!(values(&y), [4.0, 0.0, 9.0, 36.0]);
    assert_eq!(acc, Some(vec![4]));
}

#[test]
fn matmul_gather_index_select_values() {
    let tr = Tracer::new();
    let a = tr.input("a", DType::F32, [2, 3]).unwrap();
    let b = tr.input("b", DType::F32, [3]).unwrap();
    let i = tr.input("i", DType::I64, [2, 1]).unwrap();
    let j = tr.input("j", DType::I32, [3]).unwrap();
    tr.output("mv", &a.matmul(&b).unwrap()).unwrap();
    tr.output("g", &a.gather(-1, &i).unwrap()).unwrap();
    tr.output("s", &a.index_select(1, &j).unwrap()).unwrap();
    let batched = a.unsqueeze(0).unwrap().expand(&[4, 2, 3]).unwrap();
    let bt = a.transpose(0, 1).unwrap();
    assert_eq!(batched.matmul(&bt).unwrap().dims().unwrap(), [4, 2, 2]);
    let g = tr.finish().unwrap();
    let out = run(
        &g,
        &[
            ("a", iota(&[2, 3])),
            ("b", f32s(&[3], &[1.0, 10.0, 100.0])),
            ("i", tensor(DType::I64, &[2, 1], &[2.0, 0.0])),
            ("j", tensor(DType::I32, &[3], &[2.0, 2.0, 0.0])),
        ],
    );
    assert_eq!(values(&out["mv"]), [210.0, 543.0]);
    assert_eq!(values(&out["g"]), [2.0, 3.0]);
    assert_eq!(values(&out["s"]), [2.0, 2.0, 0.0, 5.0, 5.0, 3.0]);
}

#[test]
fn constants_and_outputs() {
    let tr = Tracer::new();
    let c = tr.constant(f32s(&[2], &[1.0, 2.0])).unwrap();
    let z = tr.zeros(&[2], DType::F32).unwrap();
    let o = tr.ones(&[2, 2], DType::I32).unwrap();
    let s = tr.scalar(3, DType::F16).unwrap();
    assert_eq!(s.dtype().unwrap(), DType::F16);
    let y = (&c + &z) * &s;
    tr.output("y", &y).unwrap();
    tr.output("o", &o.sum_all().unwrap()).unwrap();
    let g = tr.finish().unwrap();
    let out = run(&g, &[]);
    assert_eq!(values(&out["y"]), [3.0, 6.0]);
    assert_eq!(values(&out["o"]), [4.0]);
}

#[test]
fn unary_methods_compute_their_op() {
    type Method = fn(&Tensor) -> smelt_frontend::Result<Tensor>;
    type Oracle = fn(f64) -> f64;
    let x = f32s(&[4], &[-1.5, -0.25, 0.5, 2.0]);
    let cases: [(&str, Method, Oracle); 15] = [
        ("neg", Tensor::neg, |v| -v),
        ("abs", Tensor::abs, f64::abs),
        ("exp", Tensor::exp, f64::exp),
        ("log", Tensor::log, f64::ln),
        ("sqrt", Tensor::sqrt, f64::sqrt),
        ("rsqrt", Tensor::rsqrt, |v| 1.0 / v.sqrt()),
        ("reciprocal", Tensor::reciprocal, |v| 1.0 / v),
        ("sin", Tensor::sin, f64::sin),
        ("cos", Tensor::cos, f64::cos),
        ("tanh", Tensor::tanh, f64::tanh),
        ("sigmoid", Tensor::sigmoid, |v| 1.0 / (1.0 + (-v).exp())),
        ("relu", Tensor::relu, |v| v.max(0.0)),
        ("floor", Tensor::floor, f64::floor),
        ("ceil", Tensor::ceil, f64::ceil),
        ("logical_not", Tensor::logical_not, |v| {
            f64::from(u8::from(v == 0.0))
        }),
    ];
    for (name, method, oracle) in cases {
        let want: Vec<f64> = values(&x).into_iter().map(oracle).collect();
        let got = values(&eval1(&x, method));
        common::assert_close(name, &got, &want, 1e-6, 1e-7);
    }
    // erf(0.5) = 0.5204998778130465
    let e = values(&eval1(&x, |t| t.erf()));
    common::assert_close("erf", &e[2..3], &[0.520_499_877_813_046_5], 1e-6, 0.0);
}

#[test]
fn binary_methods_build_their_op() {
    type Method = fn(&Tensor, &Tensor) -> smelt_frontend::Result<Tensor>;
    let cases: [(&str, Method); 17] = [
        ("add", |a, b| a.add(b)),
        ("sub", |a, b| a.sub(b)),
        ("mul", |a, b| a.mul(b)),
        ("div", |a, b| a.div(b)),
        ("floor_div", |a, b| a.floor_div(b)),
        ("remainder", |a, b| a.remainder(b)),
        ("pow", |a, b| a.pow(b)),
        ("maximum", |a, b| a.maximum(b)),
        ("minimum", |a, b| a.minimum(b)),
        ("eq", |a, b| a.eq(b)),
        ("ne", |a, b| a.ne(b)),
        ("lt", |a, b| a.lt(b)),
        ("le", |a, b| a.le(b)),
        ("gt", |a, b| a.gt(b)),
        ("ge", |a, b| a.ge(b)),
        ("logical_and", |a, b| a.logical_and(b)),
        ("logical_or", |a, b| a.logical_or(b)),
    ];
    for (name, method) in cases {
        let tr = Tracer::new();
        let a = tr.input("a", DType::F32, [2, 1]).unwrap();
        let b = tr.input("b", DType::F32, [3]).unwrap();
        let y = method(&a, &b).unwrap();
        assert_eq!(y.dims().unwrap(), [2, 3], "{name} broadcasts");
        let g = tr.graph();
        assert_eq!(g.node(y.id().unwrap()).op.name(), name);
    }
    // The operators build the same ops.
    let tr = Tracer::new();
    let a = tr.input("a", DType::F32, [2]).unwrap();
    for (y, name) in [
        (&a + &a, "add"),
        (&a - 1.0, "sub"),
        (2.0f64 * &a, "mul"),
        (&a / &a, "div"),
        (-&a, "neg"),
    ] {
        assert_eq!(tr.graph().node(y.id().unwrap()).op.name(), name);
    }
}

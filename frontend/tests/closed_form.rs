//! Composite ops against closed-form oracles, evaluated through the reference interpreter.

mod common;

use common::{assert_close, eval1, f32s, run, tensor, values};
use smelt_frontend::{nn, DType, GeluApproximation, Tracer};

#[test]
fn softmax_of_equal_values_is_uniform() {
    let x = f32s(&[2, 4], &[3.0; 8]);
    let y = eval1(&x, |t| t.softmax(-1));
    assert_close("uniform", &values(&y), &[0.25; 8], 0.0, 1e-7);
    // Huge equal values do not overflow: the max is subtracted first.
    let x = f32s(&[5], &[1e30; 5]);
    assert_close(
        "huge",
        &values(&eval1(&x, |t| t.softmax(0))),
        &[0.2; 5],
        0.0,
        1e-7,
    );
}

#[test]
fn softmax_of_a_scalar_is_one() {
    let x = f32s(&[], &[5.0]);
    assert_eq!(values(&eval1(&x, |t| t.softmax(0))), [1.0]);
    assert_eq!(values(&eval1(&x, |t| t.log_softmax(-1))), [0.0]);
    // An empty axis has nothing to normalise.
    let e = f32s(&[2, 0], &[]);
    assert_eq!(eval1(&e, |t| t.softmax(1)).shape().dims(), [2, 0]);
}

#[test]
fn softmax_rows_sum_to_one_and_ignore_shifts() {
    let data: Vec<f64> = (0..12).map(|i| (i as f64 * 0.7).sin() * 5.0).collect();
    let x = f32s(&[3, 4], &data);
    let y = values(&eval1(&x, |t| t.softmax(1)));
    for row in y.chunks(4) {
        assert!((row.iter().sum::<f64>() - 1.0).abs() < 1e-6, "{row:?}");
    }
    let shifted = values(&eval1(&x, |t| (t + 100.0).softmax(1)));
    assert_close("shift", &shifted, &y, 1e-5, 1e-7);
    let logs = values(&eval1(&x, |t| t.log_softmax(1)));
    let ln_y: Vec<f64> = y.iter().map(|v| v.ln()).collect();
    assert_close("log_softmax = log(softmax)", &logs, &ln_y, 1e-5, 1e-6);
}

#[test]
fn softmax_of_half_is_computed_in_f32_and_rounded_once() {
    let x = tensor(DType::F16, &[3], &[0.0, 0.0, 0.0]);
    let y = eval1(&x, |t| t.softmax(0));
    assert_eq!(y.dtype(), DType::F16);
    // 1/3 rounded to f16 once.
    let third = f64::from(half::f16::from_f64(1.0 / 3.0));
    assert_eq!(values(&y), [third; 3]);
}

#[test]
fn layer_norm_output_has_mean_zero_and_unit_variance() {
    let data: Vec<f64> = (0..24)
        .map(|i| (i as f64 * 1.3).cos() * 4.0 + i as f64)
        .collect();
    let x = f32s(&[2, 3, 4], &data);
    let y = values(&eval1(&x, |t| nn::layer_norm(t, &[3, 4], None, None, 0.0)));
    for group in y.chunks(12) {
        let mean = group.iter().sum::<f64>() / 12.0;
        let var = group.iter().map(|v| (v - mean).powi(2)).sum::<f64>() / 12.0;
        assert!(mean.abs() < 1e-6, "mean {mean}");
        assert!((var - 1.0).abs() < 1e-5, "biased variance {var}");
    }
    // weight and bias are applied after normalising: y * w + b.
    let tr = Tracer::new();
    let xi = tr.input("x", DType::F32, [1, 2]).unwrap();
    let w = tr.constant(f32s(&[2], &[2.0, 3.0])).unwrap();
    let b = tr.constant(f32s(&[2], &[10.0, 20.0])).unwrap();
    tr.output(
        "y",
        &nn::layer_norm(&xi, &[2], Some(&w), Some(&b), 0.0).unwrap(),
    )
    .unwrap();
    let out = run(&tr.finish().unwrap(), &[("x", f32s(&[1, 2], &[1.0, 3.0]))]);
    assert_close("affine", &values(&out["y"]), &[8.0, 23.0], 0.0, 1e-6);
}

#[test]
fn rms_norm_of_a_constant_vector_is_its_sign() {
    let x = f32s(&[2, 4], &[3.0, 3.0, 3.0, 3.0, -0.5, -0.5, -0.5, -0.5]);
    let y = values(&eval1(&x, |t| nn::rms_norm(t, &[4], None, Some(0.0))));
    assert_close(
        "sign",
        &y,
        &[1.0, 1.0, 1.0, 1.0, -1.0, -1.0, -1.0, -1.0],
        1e-6,
        0.0,
    );
    // The default eps is f32's machine epsilon: rms_norm(0) = 0 * rsqrt(eps) = 0, not NaN.
    let z = f32s(&[3], &[0.0; 3]);
    assert_eq!(
        values(&eval1(&z, |t| nn::rms_norm(t, &[3], None, None))),
        [0.0; 3]
    );
}

#[test]
fn rms_norm_eps_follows_torch() {
    let consts = |dtype: DType, eps: Option<f64>| {
        let tr = Tracer::new();
        let x = tr.input("x", dtype, [4]).unwrap();
        tr.output("y", &nn::rms_norm(&x, &[4], None, eps).unwrap())
            .unwrap();
        common::scalar_consts(&tr.finish().unwrap())
    };
    assert_eq!(
        consts(DType::F32, None),
        vec![(DType::F32, f64::from(f32::EPSILON))]
    );
    assert_eq!(
        consts(DType::F16, None),
        vec![(DType::F32, f64::from(f32::EPSILON))]
    );
    assert_eq!(consts(DType::F64, None), vec![(DType::F64, f64::EPSILON)]);
    // An explicit eps is rounded to the input dtype first (PyTorch's `scalar_t eps_val`).
    let eps16 = f64::from(half::f16::from_f64(1e-6));
    assert_ne!(eps16, f64::from(1e-6f32));
    assert_eq!(
        consts(DType::F16, Some(1e-6)),
        vec![(DType::F32, f64::from(eps16 as f32))]
    );
}

#[test]
fn gelu_closed_forms() {
    let x = f32s(&[5], &[0.0, 20.0, -20.0, 1.0, -1.0]);
    for approx in [GeluApproximation::None, GeluApproximation::Tanh] {
        let y = values(&eval1(&x, |t| t.gelu(approx)));
        assert_eq!(y[0], 0.0, "gelu(0) = 0");
        assert_eq!(y[1], 20.0, "gelu(large) = x");
        assert!(y[2].abs() < 1e-30, "gelu(-large) = 0: {}", y[2]);
        // gelu(x) - gelu(-x) = x for the exact form; the tanh form is close.
        assert!((y[3] - y[4] - 1.0).abs() < 1e-6);
    }
    let exact = values(&eval1(&x, |t| t.gelu(GeluApproximation::None)));
    // Φ(1) = 0.841344746...
    assert_close(
        "gelu(1)",
        &exact[3..4],
        &[0.841_344_746_068_542_9],
        1e-6,
        0.0,
    );
    let tanh = values(&eval1(&x, |t| t.gelu(GeluApproximation::Tanh)));
    assert_close("tanh form", &tanh, &exact, 1e-3, 1e-4);
}

#[test]
fn silu_closed_forms() {
    let x = f32s(&[4], &[0.0, 30.0, -100.0, 1.0]);
    let y = values(&eval1(&x, |t| t.silu()));
    assert_eq!(y[0], 0.0);
    assert_eq!(y[1], 30.0);
    assert!(y[2].abs() < 1e-30);
    assert_close(
        "silu(1)",
        &y[3..],
        &[1.0 / (1.0 + (-1.0f64).exp())],
        1e-6,
        0.0,
    );
}

#[test]
fn var_and_mean_closed_forms() {
    let x = f32s(&[2, 4], &[1.0, 2.0, 3.0, 4.0, 5.0, 5.0, 5.0, 5.0]);
    assert_eq!(values(&eval1(&x, |t| t.mean(&[-1], false))), [2.5, 5.0]);
    let unbiased = values(&eval1(&x, |t| t.var(&[1], None, false)));
    assert_close("unbiased", &unbiased, &[5.0 / 3.0, 0.0], 1e-6, 0.0);
    let biased = values(&eval1(&x, |t| t.var(&[1], Some(0.0), true)));
    assert_close("biased", &biased, &[1.25, 0.0], 1e-6, 0.0);
    let std = values(&eval1(&x, |t| t.std(&[-1], None, false)));
    assert_close("std", &std, &[(5.0f64 / 3.0).sqrt(), 0.0], 1e-6, 0.0);
    // N - correction <= 0 divides by zero, as PyTorch: inf for a nonzero sum of squares,
    // NaN for zero.
    let one = f32s(&[2, 1], &[1.0, 1.0]);
    assert!(values(&eval1(&one, |t| t.var(&[1], None, false)))
        .iter()
        .all(|v| v.is_nan()));
    assert_eq!(
        values(&eval1(&x, |t| t.var(&[1], Some(4.0), false)))[0],
        f64::INFINITY
    );
    // An integer input is computed in f32.
    let i = tensor(DType::I32, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let v = eval1(&i, |t| t.var(&[], None, false));
    assert_eq!(v.dtype(), DType::F32);
    assert_close("int var", &values(&v), &[5.0 / 3.0], 1e-6, 0.0);
}

#[test]
fn linear_with_identity_weight_adds_the_bias() {
    let tr = Tracer::new();
    let x = tr.input("x", DType::F32, [2, 3]).unwrap();
    let w = tr
        .constant(f32s(
            &[3, 3],
            &[1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0],
        ))
        .unwrap();
    let b = tr.constant(f32s(&[3], &[0.5, -0.5, 1.0])).unwrap();
    let wt = tr
        .constant(f32s(&[2, 3], &[1.0, 1.0, 1.0, 0.0, 0.0, 2.0]))
        .unwrap();
    tr.output("y", &nn::linear(&x, &w, Some(&b)).unwrap())
        .unwrap();
    tr.output("z", &nn::linear(&x, &wt, None).unwrap()).unwrap();
    let out = run(
        &tr.finish().unwrap(),
        &[("x", f32s(&[2, 3], &[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]))],
    );
    assert_eq!(values(&out["y"]), [1.5, 1.5, 4.0, 4.5, 4.5, 7.0]);
    assert_eq!(values(&out["z"]), [6.0, 6.0, 15.0, 12.0]);
}

#[test]
fn embedding_picks_rows() {
    let tr = Tracer::new();
    let ids = tr.input("ids", DType::I32, [2, 2]).unwrap();
    let table = tr.param("table", DType::F32, [3, 2]).unwrap();
    let y = nn::embedding(&ids, &table).unwrap();
    assert_eq!(y.dims().unwrap(), [2, 2, 2]);
    tr.output("y", &y).unwrap();
    let out = run(
        &tr.finish().unwrap(),
        &[
            ("ids", tensor(DType::I32, &[2, 2], &[2.0, 0.0, 1.0, 2.0])),
            ("table", f32s(&[3, 2], &[0.0, 1.0, 10.0, 11.0, 20.0, 21.0])),
        ],
    );
    assert_eq!(
        values(&out["y"]),
        [20.0, 21.0, 0.0, 1.0, 10.0, 11.0, 20.0, 21.0]
    );
}

#[test]
fn attention_closed_forms() {
    // With equal keys every query attends uniformly: the output is the mean of v's rows.
    let tr = Tracer::new();
    let q = tr.input("q", DType::F32, [1, 2, 3]).unwrap();
    let k = tr.constant(f32s(&[1, 4, 3], &[0.5; 12])).unwrap();
    let v = tr
        .constant(f32s(
            &[1, 4, 2],
            &[1.0, 10.0, 2.0, 20.0, 3.0, 30.0, 4.0, 40.0],
        ))
        .unwrap();
    let sdpa = nn::scaled_dot_product_attention;
    tr.output("uniform", &sdpa(&q, &k, &v, None, false, None).unwrap())
        .unwrap();
    // Causal: query 0 sees key 0 only, query 1 keys 0 and 1.
    tr.output("causal", &sdpa(&q, &k, &v, None, true, None).unwrap())
        .unwrap();
    // A bool mask keeping one key selects that key's value; a fully masked row gives 0.
    let m = tr
        .constant(tensor(
            DType::Bool,
            &[2, 4],
            &[0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0],
        ))
        .unwrap();
    tr.output(
        "masked",
        &sdpa(&q, &k, &v, Some(&m), false, Some(1.0)).unwrap(),
    )
    .unwrap();
    let out = run(
        &tr.finish().unwrap(),
        &[("q", f32s(&[1, 2, 3], &[1.0, -2.0, 0.5, 3.0, 0.0, 1.0]))],
    );
    assert_close(
        "uniform",
        &values(&out["uniform"]),
        &[2.5, 25.0, 2.5, 25.0],
        1e-6,
        0.0,
    );
    assert_close(
        "causal",
        &values(&out["causal"]),
        &[1.0, 10.0, 1.5, 15.0],
        1e-6,
        0.0,
    );
    assert_eq!(values(&out["masked"]), [3.0, 30.0, 0.0, 0.0]);
}

#[test]
fn half_precision_composites_keep_the_input_dtype() {
    for dt in [DType::F16, DType::BF16] {
        let tr = Tracer::new();
        let x = tr.input("x", dt, [2, 4]).unwrap();
        let w = tr.param("w", dt, [4]).unwrap();
        let outs = [
            x.softmax(-1).unwrap(),
            x.log_softmax(0).unwrap(),
            x.gelu(GeluApproximation::Tanh).unwrap(),
            x.silu().unwrap(),
            x.var(&[-1], None, false).unwrap(),
            nn::layer_norm(&x, &[4], Some(&w), Some(&w), 1e-5).unwrap(),
            nn::rms_norm(&x, &[4], Some(&w), None).unwrap(),
            nn::scaled_dot_product_attention(&x, &x, &x, None, true, None).unwrap(),
        ];
        for (i, y) in outs.iter().enumerate() {
            assert_eq!(y.dtype().unwrap(), dt, "composite {i}");
        }
        let g = tr.finish().unwrap();
        assert!(common::casts_to(&g, DType::F32) > 0, "computed in f32");
    }
}

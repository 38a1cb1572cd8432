//! The bad-input catalogue: malformed programs and inputs, each of which must give a typed error
//! whose message names what is wrong (and where), and never a panic.

use smelt::ir::{text, DType, HostTensor, TensorData};
use smelt::{compile, compile_with, Device, Error, Options};
use std::collections::HashMap;
use std::path::Path;

/// Parses `src` and asserts it fails with a message containing every `needle`.
#[track_caller]
fn bad_program(src: &str, needles: &[&str]) {
    let err = match std::panic::catch_unwind(|| text::parse(src)) {
        Ok(Ok(_)) => panic!("expected an error for:\n{src}"),
        Ok(Err(e)) => e.to_string(),
        Err(_) => panic!("the parser panicked on:\n{src}"),
    };
    for n in needles {
        assert!(
            err.contains(n),
            "error {err:?} does not mention {n:?}\nfor:\n{src}"
        );
    }
}

const HEAD: &str = "%x = input \"x\" : f32[2, 3]\n";

#[test]
fn syntax_error_missing_equals() {
    bad_program("%x input \"x\" : f32[2]\n", &["line 1", "column 4", "="]);
}

#[test]
fn unknown_op() {
    bad_program(
        &format!("{HEAD}%0 = frobnicate %x\n"),
        &["line 2", "column 6", "unknown op", "frobnicate"],
    );
}

#[test]
fn bad_arity() {
    bad_program(
        &format!("{HEAD}%0 = add %x\n"),
        &["line 2", "add", "2", "1"],
    );
}

#[test]
fn broadcast_mismatch() {
    bad_program(
        &format!("{HEAD}%y = input \"y\" : f32[4]\n%0 = add %x, %y\n"),
        &["line 3", "add", "broadcast", "f32[2, 3]", "f32[4]"],
    );
}

#[test]
fn dtype_mismatch() {
    bad_program(
        &format!("{HEAD}%y = input \"y\" : i32[2, 3]\n%0 = mul %x, %y\n"),
        &["line 3", "mul", "f32[2, 3]", "i32[2, 3]", "cast"],
    );
}

#[test]
fn bad_permutation() {
    bad_program(
        &format!("{HEAD}%0 = permute %x perm=[0, 0]\n"),
        &["line 2", "permute", "[0, 0]", "permutation"],
    );
}

#[test]
fn reshape_wrong_element_count() {
    bad_program(
        &format!("{HEAD}%0 = reshape %x shape=[4, 2]\n"),
        &["line 2", "reshape", "6", "8", "[4, 2]"],
    );
}

#[test]
fn slice_out_of_range() {
    bad_program(
        &format!("{HEAD}%0 = slice %x ranges=[0:2:1, 1:5:1]\n"),
        &["line 2", "slice", "axis 1", "size 3", "1:5:1"],
    );
}

#[test]
fn slice_zero_step() {
    bad_program(
        &format!("{HEAD}%0 = slice %x ranges=[0:2:0, 0:3:1]\n"),
        &["line 2", "slice", "step"],
    );
}

#[test]
fn undefined_value() {
    bad_program(
        &format!("{HEAD}%0 = neg %nope\n"),
        &["line 2", "%nope", "undefined"],
    );
}

#[test]
fn duplicate_value_name() {
    bad_program(
        &format!("{HEAD}%0 = neg %x\n%0 = abs %x\n"),
        &["line 3", "%0", "duplicate"],
    );
}

#[test]
fn duplicate_input_name() {
    bad_program(
        &format!("{HEAD}%y = input \"x\" : f32[2]\n"),
        &["line 2", "\"x\"", "duplicate"],
    );
}

#[test]
fn duplicate_output_name() {
    bad_program(
        &format!("{HEAD}output \"y\" = %x\noutput \"y\" = %x\n"),
        &["line 3", "\"y\"", "duplicate"],
    );
}

#[test]
fn cycle() {
    // %a uses %b, which is defined later from %a: a use before definition.
    bad_program(
        &format!("{HEAD}%a = add %x, %b\n%b = neg %a\n"),
        &["line 2", "%b", "undefined"],
    );
}

#[test]
fn type_annotation_mismatch() {
    bad_program(
        &format!("{HEAD}%0 = neg %x : f32[3, 2]\n"),
        &["line 2", "f32[2, 3]", "f32[3, 2]"],
    );
}

#[test]
fn unknown_dtype() {
    bad_program("%x = input \"x\" : f8[2]\n", &["line 1", "f8"]);
}

#[test]
fn matmul_contraction_mismatch() {
    bad_program(
        &format!("{HEAD}%w = input \"w\" : f32[4, 5]\n%0 = matmul %x, %w\n"),
        &["line 3", "matmul", "3", "4", "f32[2, 3]", "f32[4, 5]"],
    );
}

#[test]
fn where_condition_not_bool() {
    bad_program(
        &format!("{HEAD}%0 = where %x, %x, %x\n"),
        &["line 2", "where", "bool", "f32"],
    );
}

#[test]
fn float_only_op_on_integers() {
    bad_program(
        "%i = input \"i\" : i32[4]\n%0 = exp %i\n",
        &["line 2", "exp", "i32", "float"],
    );
}

#[test]
fn reduce_axis_out_of_range() {
    bad_program(
        &format!("{HEAD}%0 = sum %x axes=[2]\n"),
        &["line 2", "sum", "axis 2", "f32[2, 3]"],
    );
}

#[test]
fn reduce_duplicate_axis() {
    bad_program(
        &format!("{HEAD}%0 = mean %x axes=[1, 1]\n"),
        &["line 2", "mean", "axis 1", "twice"],
    );
}

#[test]
fn argmax_over_two_axes() {
    bad_program(
        &format!("{HEAD}%0 = argmax %x axes=[0, 1]\n"),
        &["line 2", "argmax", "one axis"],
    );
}

#[test]
fn max_over_empty_axis() {
    bad_program(
        "%x = input \"x\" : f32[0, 3]\n%0 = max %x axes=[0]\n",
        &["line 2", "max", "size 0"],
    );
}

#[test]
fn expand_incompatible() {
    bad_program(
        &format!("{HEAD}%0 = expand %x shape=[2, 4]\n"),
        &["line 2", "expand", "[2, 3]", "[2, 4]"],
    );
}

#[test]
fn concat_shape_mismatch() {
    bad_program(
        &format!("{HEAD}%y = input \"y\" : f32[2, 4]\n%0 = concat %x, %y axis=0\n"),
        &["line 3", "concat", "axis 0", "f32[2, 4]"],
    );
}

#[test]
fn gather_with_float_index() {
    bad_program(
        &format!("{HEAD}%0 = gather %x, %x axis=1\n"),
        &["line 2", "gather", "index", "f32"],
    );
}

#[test]
fn const_wrong_element_count() {
    bad_program("%c = const f32[3] [1.0, 2.0]\n", &["line 1", "3", "2"]);
}

#[test]
fn unknown_attribute() {
    bad_program(
        &format!("{HEAD}%0 = sum %x axes=[0] keepdims=true\n"),
        &["line 2", "sum", "keepdims"],
    );
}

#[test]
fn missing_attribute() {
    bad_program(
        &format!("{HEAD}%0 = reshape %x\n"),
        &["line 2", "reshape", "shape"],
    );
}

#[test]
fn unterminated_string() {
    bad_program("%x = input \"x : f32[2]\n", &["line 1", "string"]);
}

#[test]
fn bad_number_literal() {
    bad_program("%c = const f32[] 1.2.3\n", &["line 1", "1.2.3"]);
}

#[test]
fn output_of_undefined_value() {
    bad_program(
        &format!("{HEAD}output \"y\" = %z\n"),
        &["line 2", "%z", "undefined"],
    );
}

// ---- inputs and devices ---------------------------------------------------------------------

fn mlp() -> smelt::ir::Graph {
    text::parse(
        "%x = input \"x\" : f32[2, 3]\n\
         %w = param \"w\" : f32[3, 4]\n\
         %0 = matmul %x, %w\n\
         output \"y\" = %0\n",
    )
    .expect("valid program")
}

fn f32s(shape: &[usize]) -> HostTensor {
    HostTensor::zeros(DType::F32, shape)
}

fn run_err(inputs: Vec<(&str, HostTensor)>) -> String {
    let c = compile(&mlp()).unwrap();
    let map: HashMap<String, HostTensor> = inputs
        .into_iter()
        .map(|(n, t)| (n.to_string(), t))
        .collect();
    match c.run(&map) {
        Ok(_) => panic!("expected a binding error"),
        Err(e @ Error::Runtime(_)) => e.to_string(),
        Err(e) => panic!("wrong error type: {e:?}"),
    }
}

#[test]
fn missing_input_lists_expectations() {
    let e = run_err(vec![("w", f32s(&[3, 4]))]);
    assert!(e.contains("missing input \"x\" (f32[2, 3])"), "{e}");
    assert!(e.contains("the graph expects"), "{e}");
    assert!(e.contains("param \"w\": f32[3, 4]"), "{e}");
}

#[test]
fn extra_input() {
    let e = run_err(vec![
        ("x", f32s(&[2, 3])),
        ("w", f32s(&[3, 4])),
        ("z", f32s(&[1])),
    ]);
    assert!(e.contains("\"z\" is not an input"), "{e}");
}

#[test]
fn wrongly_typed_input() {
    let e = run_err(vec![
        ("x", HostTensor::zeros(DType::F64, [2, 3])),
        ("w", f32s(&[3, 4])),
    ]);
    assert!(
        e.contains("\"x\" is f64[2, 3] but the graph expects f32[2, 3]"),
        "{e}"
    );
}

#[test]
fn wrongly_shaped_input() {
    let e = run_err(vec![("x", f32s(&[3, 2])), ("w", f32s(&[3, 4]))]);
    assert!(
        e.contains("\"x\" is f32[3, 2] but the graph expects f32[2, 3]"),
        "{e}"
    );
}

#[test]
fn wrongly_typed_param_at_bind_time() {
    let mut c = compile(&mlp()).unwrap();
    let e = c
        .bind_params(HashMap::from([("w".to_string(), f32s(&[4, 3]))]))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("parameter \"w\" is f32[4, 3] but the graph expects f32[3, 4]"),
        "{e}"
    );
}

#[test]
fn safetensors_with_wrong_dtype_and_shape() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("in.safetensors");
    let x = HostTensor::new([2, 3], TensorData::I32(vec![0; 6])).unwrap();
    let w = f32s(&[4, 3]);
    smelt::io::save_safetensors(&path, [("x", &x), ("w", &w)]).unwrap();
    let inputs = smelt::io::load_safetensors(&path).unwrap();
    let e = compile(&mlp())
        .unwrap()
        .run(&inputs)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"x\" is i32[2, 3] but the graph expects f32[2, 3]"),
        "{e}"
    );
    assert!(
        e.contains("\"w\" is f32[4, 3] but the graph expects f32[3, 4]"),
        "{e}"
    );
}

#[test]
fn missing_safetensors_file() {
    let e = smelt::io::load_safetensors(Path::new("/nonexistent/in.safetensors"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("/nonexistent/in.safetensors") && e.contains("cannot read"),
        "{e}"
    );
}

#[test]
fn corrupt_safetensors_file() {
    let e = smelt::io::decode_safetensors(b"\x10\0\0\0\0\0\0\0{not json}", Path::new("bad.st"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("bad.st") && e.contains("not a valid safetensors"),
        "{e}"
    );
}

#[test]
fn unsupported_safetensors_dtype() {
    let header = br#"{"q":{"dtype":"U8","shape":[2],"data_offsets":[0,2]}}"#;
    let mut bytes = (header.len() as u64).to_le_bytes().to_vec();
    bytes.extend_from_slice(header);
    bytes.extend_from_slice(&[1, 2]);
    let e = smelt::io::decode_safetensors(&bytes, Path::new("u8.st"))
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("\"q\"") && e.contains("U8") && e.contains("not support"),
        "{e}"
    );
}

#[test]
fn unknown_device() {
    let e = "tpu:0".parse::<Device>().unwrap_err().to_string();
    assert!(e.contains("tpu:0") && e.contains("cuda:N"), "{e}");
}

#[test]
fn unbuilt_device_is_not_available() {
    // Device 64 exists on no machine: without a GPU the reason is the missing driver, with
    // one it is the missing device; either way a typed error naming the device.
    let opts = Options {
        device: Device::Cuda(64),
        ..Options::default()
    };
    let e = compile_with(&mlp(), opts).unwrap_err().to_string();
    assert!(e.contains("not available") && e.contains("cuda:64"), "{e}");
}

fn on(device: Device) -> Options {
    Options {
        device,
        ..Options::default()
    }
}

#[test]
fn gather_index_out_of_range_at_run_time() {
    let g = text::parse(
        "%x = input \"x\" : f32[2, 3]\n\
         %i = input \"i\" : i64[2, 1]\n\
         %0 = gather %x, %i axis=1\n\
         output \"y\" = %0\n",
    )
    .unwrap();
    let inputs = HashMap::from([
        ("x".to_string(), f32s(&[2, 3])),
        (
            "i".to_string(),
            HostTensor::from_i64([2, 1], vec![0, 7]).unwrap(),
        ),
    ]);
    let e = compile_with(&g, on(Device::Reference))
        .unwrap()
        .run(&inputs)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("gather") && e.contains('7') && e.contains('3'),
        "{e}"
    );
    // The fused CPU kernel checks computed addresses too: a typed error, not a stray read.
    let e = compile_with(&g, on(Device::Cpu))
        .unwrap()
        .run(&inputs)
        .unwrap_err()
        .to_string();
    assert!(e.contains("gather") && e.contains("out of range"), "{e}");
}

#[test]
fn integer_division_by_zero_at_run_time() {
    let g = text::parse(
        "%a = input \"a\" : i32[2]\n\
         %b = input \"b\" : i32[2]\n\
         %0 = floor_div %a, %b\n\
         output \"y\" = %0\n",
    )
    .unwrap();
    let i32s = |v: Vec<i32>| HostTensor::new([2], TensorData::I32(v)).unwrap();
    let inputs = HashMap::from([
        ("a".to_string(), i32s(vec![1, 2])),
        ("b".to_string(), i32s(vec![1, 0])),
    ]);
    // The reference interpreter defines integer division by zero as an error (as PyTorch's
    // CPU kernels do); fused kernels give 0 instead (docs/semantics.md).
    let e = compile_with(&g, on(Device::Reference))
        .unwrap()
        .run(&inputs)
        .unwrap_err()
        .to_string();
    assert!(e.contains("floor_div") && e.contains("zero"), "{e}");
}

#[test]
fn graph_with_forward_reference_fails_verification() {
    use smelt::ir::{Graph, Node, NodeId, Op, TensorType, UnaryOp};
    let ty = TensorType::new(DType::F32, [2]);
    let g = Graph::from_parts(
        vec![
            Node {
                op: Op::Unary(UnaryOp::Neg, NodeId(1)),
                ty: ty.clone(),
            },
            Node {
                op: Op::Unary(UnaryOp::Neg, NodeId(0)),
                ty,
            },
        ],
        vec![],
    );
    let e = compile(&g).unwrap_err().to_string();
    assert!(e.contains("%1") && e.contains("not defined before"), "{e}");
}

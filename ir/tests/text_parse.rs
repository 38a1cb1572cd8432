//! Unit tests of the `.smelt` format, one construct at a time, and the example programs.

use half::{bf16, f16};
use smelt_ir::text::{parse, print};
use smelt_ir::{
    verify, BinaryOp, DType, Graph, HostTensor, NodeId, Op, ReduceOp, Scalar, SliceRange,
    TensorData, TensorType,
};

fn ok(src: &str) -> Graph {
    let g = parse(src).unwrap_or_else(|e| panic!("{e}\n{src}"));
    verify(&g).unwrap();
    assert_eq!(
        parse(&print(&g)),
        Ok(g.clone()),
        "round trip of\n{}",
        print(&g)
    );
    g
}

fn last(g: &Graph) -> &smelt_ir::Node {
    g.nodes().last().unwrap()
}

fn const_data(src: &str) -> TensorData {
    match &last(&ok(src)).op {
        Op::Constant(t) => t.data().clone(),
        op => panic!("not a constant: {op:?}"),
    }
}

#[test]
fn the_format_tour_parses() {
    let g = ok(r#"
# comment to end of line
%x = input "x" : f32[2, 3]
%w = param "w" : f32[3, 4]
%s = const f32[] 1.5
%t = const i64[3] [1, 2, -3]
%b = const bool[2] [true, false]
%0 = matmul %x, %w : f32[2, 4]
%1 = add %0, %s
%2 = sum %1 axes=[1] keepdim=true
%3 = cast %2 to=f16
%4 = reshape %x shape=[3, 2]
%5 = permute %4 perm=[1, 0]
%6 = expand %s shape=[2, 4]
%7 = slice %x ranges=[0:2:1, 1:3:1]
%8 = concat %x, %x axis=0
%9 = pad %x pads=[(1, 1), (0, 2)] value=0.0
%idx = const i64[2, 3] [0, 2, 1, 1, 0, 2]
%10 = gather %x, %idx axis=1
%ids = const i32[2] [3, 0]
%11 = index_select %w, %ids axis=0
%cond = lt %x, %s
%12 = where %cond, %x, %s
output "y" = %5
output "z" = %12
"#);
    let types: Vec<String> = g.nodes().iter().map(|n| n.ty.to_string()).collect();
    assert_eq!(
        types,
        [
            "f32[2, 3]",
            "f32[3, 4]",
            "f32[]",
            "i64[3]",
            "bool[2]",
            "f32[2, 4]",
            "f32[2, 4]",
            "f32[2, 1]",
            "f16[2, 1]",
            "f32[3, 2]",
            "f32[2, 3]",
            "f32[2, 4]",
            "f32[2, 2]",
            "f32[4, 3]",
            "f32[4, 5]",
            "i64[2, 3]",
            "f32[2, 3]",
            "i32[2]",
            "f32[2, 4]",
            "bool[2, 3]",
            "f32[2, 3]",
        ]
    );
    assert_eq!(
        g.outputs(),
        &[("y".to_string(), NodeId(10)), ("z".to_string(), NodeId(20))]
    );
}

#[test]
fn inputs_and_params_keep_names_and_types() {
    let g = ok("%a = input \"in put\\n\" : bf16[0, 1]\n%b = param \"w\" : i32[]\n");
    let b: Vec<_> = g
        .bindings()
        .map(|(n, id, t, p)| (n.to_string(), id, t.clone(), p))
        .collect();
    assert_eq!(
        b,
        [
            (
                "in put\n".to_string(),
                NodeId(0),
                TensorType::new(DType::BF16, [0, 1]),
                false
            ),
            (
                "w".to_string(),
                NodeId(1),
                TensorType::new(DType::I32, [0usize; 0]),
                true
            ),
        ]
    );
    assert!(g.outputs().is_empty());
}

#[test]
fn constants_of_every_dtype() {
    assert_eq!(
        const_data("%c = const bool[] true"),
        TensorData::Bool(vec![true])
    );
    assert_eq!(
        const_data("%c = const i32[2] [-2147483648, 2147483647]"),
        TensorData::I32(vec![i32::MIN, i32::MAX])
    );
    assert_eq!(
        const_data("%c = const i64[2, 1] [-9223372036854775808, 9223372036854775807]"),
        TensorData::I64(vec![i64::MIN, i64::MAX])
    );
    assert_eq!(
        const_data("%c = const f16[] 0.1"),
        TensorData::F16(vec![f16::from_f32(0.1)])
    );
    assert_eq!(
        const_data("%c = const bf16[2] [1, -2.5]"),
        TensorData::BF16(vec![bf16::ONE, bf16::from_f32(-2.5)])
    );
    assert_eq!(
        const_data("%c = const f32[3] [0.1, 1e-45, -3]"),
        TensorData::F32(vec![0.1, 1e-45, -3.0])
    );
    assert_eq!(
        const_data("%c = const f64[2] [0.1, 5e-324]"),
        TensorData::F64(vec![0.1, 5e-324])
    );
    assert_eq!(
        const_data("%c = const f32[0, 3] []"),
        TensorData::F32(vec![])
    );
}

#[test]
fn special_floats_are_bit_exact() {
    let TensorData::F64(v) = const_data("%c = const f64[6] [-0.0, inf, -inf, nan, -nan, nan(0x1)]")
    else {
        panic!()
    };
    let bits: Vec<u64> = v.iter().map(|x| x.to_bits()).collect();
    assert_eq!(
        bits,
        [
            (-0.0f64).to_bits(),
            f64::INFINITY.to_bits(),
            f64::NEG_INFINITY.to_bits(),
            f64::NAN.to_bits(),
            (-f64::NAN).to_bits(),
            0x7ff0_0000_0000_0001,
        ]
    );
    let TensorData::F16(v) = const_data("%c = const f16[3] [nan, -nan(0x1), 6e-8]") else {
        panic!()
    };
    let bits: Vec<u16> = v.iter().map(|x| x.to_bits()).collect();
    assert_eq!(bits, [0x7e00, 0xfc01, 0x0001]);
    // NaN payloads print back the way they were read.
    let g = ok("%c = const f32[2] [nan(0x3), -nan]");
    assert!(print(&g).contains("[nan(0x3), -nan]"), "{}", print(&g));
}

#[test]
fn reductions_default_keepdim_to_false() {
    let g = ok("%x = input \"x\" : f32[2, 3, 4]\n%m = argmax %x axes=[1]\n%s = sum %x axes=[2, 0] keepdim=false");
    assert_eq!(g.nodes()[1].ty, TensorType::new(DType::I64, [2, 4]));
    assert!(matches!(
        &g.nodes()[2].op,
        Op::Reduce { op: ReduceOp::Sum, axes, keepdim: false, .. } if axes.as_slice() == [2, 0]
    ));
}

#[test]
fn attributes_are_accepted_in_any_order() {
    let g = ok("%x = input \"x\" : f32[2]\n%p = pad %x value=1 pads=[(0, 1)] : f32[3]");
    assert!(matches!(
        last(&g).op,
        Op::Pad {
            value: Scalar::Int(1),
            ..
        }
    ));
}

#[test]
fn pad_values_keep_their_category() {
    for (lit, want) in [
        ("true", Scalar::Bool(true)),
        ("-7", Scalar::Int(-7)),
        ("2.0", Scalar::Float(2.0)),
        ("1e3", Scalar::Float(1000.0)),
        ("-inf", Scalar::Float(f64::NEG_INFINITY)),
        ("-nan", Scalar::Float(-f64::NAN)),
    ] {
        let g = ok(&format!(
            "%x = input \"x\" : i32[1]\n%p = pad %x pads=[(1, 0)] value={lit}"
        ));
        let Op::Pad { value, .. } = &last(&g).op else {
            panic!()
        };
        assert_eq!(*value, want, "{lit}");
    }
}

#[test]
fn slice_step_defaults_to_one() {
    let g =
        ok("%x = input \"x\" : f32[5]\n%s = slice %x ranges=[1:5]\n%t = slice %x ranges=[0:5:3]");
    let Op::Slice { ranges, .. } = &g.nodes()[1].op else {
        panic!()
    };
    assert_eq!(
        ranges[0],
        SliceRange {
            start: 1,
            stop: 5,
            step: 1
        }
    );
    assert_eq!(g.nodes()[2].ty, TensorType::new(DType::F32, [2]));
}

#[test]
fn every_unary_binary_and_reduce_op_parses_by_name() {
    for u in smelt_ir::UnaryOp::ALL {
        ok(&format!(
            "%x = input \"x\" : f32[2]\n%y = {u} %x : {}",
            if *u == smelt_ir::UnaryOp::LogicalNot {
                "bool[2]"
            } else {
                "f32[2]"
            }
        ));
    }
    for b in BinaryOp::ALL {
        let out = if b.returns_bool() { "bool" } else { "f64" };
        ok(&format!(
            "%x = input \"x\" : f64[2]\n%y = {b} %x, %x : {out}[2]"
        ));
    }
    for r in ReduceOp::ALL {
        ok(&format!(
            "%x = input \"x\" : f32[2, 3]\n%y = {r} %x axes=[1]"
        ));
    }
}

#[test]
fn comments_blank_lines_and_crlf_are_ignored() {
    let g = ok("# header\r\n\r\n   \t\r\n%x = input \"x\" : f32[1] # trailing\r\noutput \"o#1\" = %x   \r\n# end");
    assert_eq!(g.len(), 1);
    assert_eq!(g.outputs()[0].0, "o#1");
}

#[test]
fn concat_takes_one_or_more_operands() {
    let g = ok("%x = input \"x\" : i64[2]\n%a = concat %x axis=0\n%b = concat %x, %a, %x axis=0");
    assert_eq!(last(&g).ty, TensorType::new(DType::I64, [6]));
}

#[test]
fn empty_source_is_the_empty_graph() {
    assert_eq!(parse(""), Ok(Graph::new()));
    assert_eq!(parse("# nothing\n\n"), Ok(Graph::new()));
}

#[test]
fn printer_names_bindings_and_annotates_types() {
    let mut g = Graph::new();
    let x = g.input("x", DType::F32, [2, 3]).unwrap();
    let w = g.param("0", DType::F32, [3]).unwrap(); // all digits: printed as %1
    let s = g.scalar(Scalar::Float(0.5), DType::F32).unwrap();
    let a = g.binary(BinaryOp::Mul, x, w).unwrap();
    let b = g.binary(BinaryOp::Add, a, s).unwrap();
    let r = g.reduce(ReduceOp::Max, b, &[1], false).unwrap();
    let p = g
        .pad(r, &[(1, 0)], Scalar::Float(f64::NEG_INFINITY))
        .unwrap();
    g.set_output("out", p).unwrap();
    g.set_output("x again", x).unwrap();
    let expected = r#"%x = input "x" : f32[2, 3]
%1 = param "0" : f32[3]
%2 = const f32[] 0.5
%3 = mul %x, %1 : f32[2, 3]
%4 = add %3, %2 : f32[2, 3]
%5 = max %4 axes=[1] keepdim=false : f32[2]
%6 = pad %5 pads=[(1, 0)] value=-inf : f32[3]
output "out" = %6
output "x again" = %x
"#;
    assert_eq!(print(&g), expected);
    assert_eq!(parse(expected), Ok(g));
}

#[test]
fn a_constant_tensor_prints_flat_and_row_major() {
    let mut g = Graph::new();
    let t = HostTensor::new([2, 2], TensorData::F64(vec![1.0, -0.0, 1e300, f64::NAN])).unwrap();
    g.constant(t).unwrap();
    assert_eq!(print(&g), "%0 = const f64[2, 2] [1.0, -0.0, 1e300, nan]\n");
}

#[test]
fn example_programs_parse_verify_and_round_trip() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "smelt") {
            let src = std::fs::read_to_string(&path).unwrap();
            let g = parse(&src).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            verify(&g).unwrap();
            assert!(!g.outputs().is_empty(), "{}", path.display());
            assert_eq!(parse(&print(&g)), Ok(g));
            seen += 1;
        }
    }
    assert!(
        seen >= 4,
        "found {seen} example programs in {}",
        dir.display()
    );
}

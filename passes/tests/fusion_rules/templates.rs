//! One graph template per fusion rule: graphs in which the rule has something to merge, mixed
//! with cases it must refuse (different axes, non-transpose permutes, values read outside).

use super::gen::Gen;
use smelt_ir::{BinaryOp, Graph, NodeId, ReduceOp};

/// `g` with `y` (and, some of the time, each of `extra`) as outputs.
fn finish(r: &mut Gen, mut g: Graph, y: NodeId, extra: &[NodeId]) -> Graph {
    g.set_output("y", y).expect("first output");
    for (i, &e) in extra.iter().enumerate() {
        if r.chance(30) {
            g.set_output(format!("t{i}"), e).expect("fresh output name");
        }
    }
    g
}

/// 2–6 elementwise ops (unary, binary with broadcast operands, `where`), some reading an
/// earlier value of the chain again.
pub fn elementwise_chain(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.numeric();
    let s = r.shape(0, 3, true);
    let x = r.input(&mut g, dtype, &s);
    let mut vals = vec![x];
    let mut cur = x;
    for _ in 0..2 + r.below(5) {
        cur = if r.chance(20) {
            let earlier = r.pick(&vals);
            r.binary(&mut g, cur, earlier)
        } else {
            r.elementwise(&mut g, cur)
        };
        vals.push(cur);
    }
    finish(r, g, cur, &vals[1..])
}

/// Views (permute, reshape, expand, slice) of inputs and of computed values, read by
/// elementwise ops.
pub fn views(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.float();
    let s = r.shape(1, 3, true);
    let x = r.input(&mut g, dtype, &s);
    let mut cur = if r.chance(50) { r.unary(&mut g, x) } else { x };
    let mut vals = Vec::new();
    for _ in 0..1 + r.below(3) {
        cur = r.view(&mut g, cur);
        if r.chance(70) {
            cur = r.elementwise(&mut g, cur);
        }
        vals.push(cur);
    }
    if r.chance(70) {
        cur = r.unary(&mut g, cur);
    }
    finish(r, g, cur, &vals)
}

/// An elementwise prologue (1–3 ops at the reduced shape) feeding a reduction.
pub fn reduction_prologue(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.numeric();
    let s = r.shape(1, 3, false);
    let x = r.input(&mut g, dtype, &s);
    let mut cur = x;
    let mut vals = Vec::new();
    for _ in 0..1 + r.below(3) {
        cur = r.elementwise(&mut g, cur);
        vals.push(cur);
    }
    let axes = r.axes(s.len());
    let keepdim = r.chance(50);
    let y = r.reduce(&mut g, cur, &axes, keepdim);
    finish(r, g, y, &vals)
}

/// A reduction followed by 1–3 epilogue ops: at row level, or at element level reading the
/// reduction's input again (`x - max(x)`).
pub fn reduction_epilogue(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.numeric();
    let s = r.shape(1, 3, false);
    let x = r.input(&mut g, dtype, &s);
    let axes = r.axes(s.len());
    let keepdim = r.chance(75);
    let red = r.reduce(&mut g, x, &axes, keepdim);
    let mut cur = red;
    let mut vals = vec![red];
    for _ in 0..1 + r.below(3) {
        cur = if keepdim && g.ty(cur).dtype == dtype && r.chance(50) {
            if r.chance(50) {
                r.binary(&mut g, x, cur)
            } else {
                r.binary(&mut g, cur, x)
            }
        } else {
            r.elementwise(&mut g, cur)
        };
        vals.push(cur);
    }
    finish(r, g, cur, &vals)
}

/// layer_norm-like: `d = x - mean(x)`, a second reduction of an elementwise function of `d`
/// (over the same axes three times in four), and an epilogue combining both.
pub fn row_reductions(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.float();
    let s = r.shape(1, 3, false);
    let x = r.input(&mut g, dtype, &s);
    let axes = if r.chance(50) {
        vec![s.len() - 1]
    } else {
        r.axes(s.len())
    };
    let m = r.reduce(&mut g, x, &axes, true);
    let d = g.binary(BinaryOp::Sub, x, m).expect("sub");
    let q = if r.chance(50) {
        g.binary(BinaryOp::Mul, d, d).expect("mul")
    } else {
        r.unary(&mut g, d)
    };
    let axes2 = if r.chance(75) { axes } else { r.axes(s.len()) };
    let q = if g.ty(q).dtype == dtype {
        q
    } else {
        g.cast(q, dtype).expect("cast")
    };
    let v = r.reduce(&mut g, q, &axes2, true);
    let v2 = r.unary(&mut g, v);
    let v2 = if g.ty(v2).dtype == dtype {
        v2
    } else {
        g.cast(v2, dtype).expect("cast")
    };
    let y = r.binary(&mut g, d, v2);
    finish(r, g, y, &[m, d, v])
}

/// A GEMM whose operands are read through a last-two-axes transpose (of an input, of a
/// computed value, or on top of a reshape), or through a permute that is not one.
pub fn transposed_gemm(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.float();
    let batch: Vec<usize> = if r.chance(40) {
        vec![1 + r.below(3)]
    } else {
        Vec::new()
    };
    let (m, k, n) = (1 + r.below(4), 1 + r.below(4), 1 + r.below(4));
    let dims = |a: usize, b: usize| {
        let mut v = batch.clone();
        v.extend([a, b]);
        v
    };
    let lhs = if r.chance(50) {
        let t = r.input(&mut g, dtype, &dims(k, m));
        transpose(r, &mut g, t)
    } else {
        r.input(&mut g, dtype, &dims(m, k))
    };
    let rhs = match r.below(4) {
        0 => r.input(&mut g, dtype, &dims(k, n)),
        1 => {
            let flat = r.input(&mut g, dtype, &[batch.iter().product::<usize>() * n * k]);
            let t = g.reshape(flat, dims(n, k)).expect("reshape");
            transpose(r, &mut g, t)
        }
        2 if !batch.is_empty() => {
            // [k, b, n] -> [b, k, n]: not a transpose flag.
            let t = r.input(&mut g, dtype, &[k, batch[0], n]);
            g.permute(t, &[1, 0, 2]).expect("permute")
        }
        _ => {
            let t = r.input(&mut g, dtype, &dims(n, k));
            transpose(r, &mut g, t)
        }
    };
    let y = g.matmul(lhs, rhs).expect("matmul");
    let y = if r.chance(30) { r.unary(&mut g, y) } else { y };
    finish(r, g, y, &[])
}

/// `x` (or, some of the time, an elementwise op of it) with its last two axes swapped.
fn transpose(r: &mut Gen, g: &mut Graph, x: NodeId) -> NodeId {
    let dtype = g.ty(x).dtype;
    let x = if r.chance(30) { r.unary(g, x) } else { x };
    let x = if g.ty(x).dtype == dtype {
        x
    } else {
        g.cast(x, dtype).expect("cast")
    };
    let rank = g.ty(x).shape.rank();
    let mut p: Vec<usize> = (0..rank).collect();
    p.swap(rank - 2, rank - 1);
    g.permute(x, &p).expect("transpose")
}

/// A computed value (elementwise, or a reduction) stored through a view its reader cannot
/// fold: a graph output that is a permute or reshape, or a GEMM operand permuted other than
/// by a last-two-axes transpose.
pub fn store_in_consumer_layout(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.float();
    match r.below(3) {
        0 => {
            let s = r.shape(2, 3, false);
            let x = r.input(&mut g, dtype, &s);
            let p = r.elementwise(&mut g, x);
            let v = r.view(&mut g, p);
            finish(r, g, v, &[p])
        }
        1 => {
            let s = r.shape(1, 3, false);
            let x = r.input(&mut g, dtype, &s);
            let axes = r.axes(s.len());
            let red = r.reduce(&mut g, x, &axes, false);
            let keep: Vec<usize> = s
                .iter()
                .enumerate()
                .map(|(i, &d)| if axes.contains(&i) { 1 } else { d })
                .collect();
            let v = g.reshape(red, keep).expect("reshape");
            finish(r, g, v, &[red])
        }
        _ => {
            let (b, k, n) = (1 + r.below(3), 1 + r.below(3), 1 + r.below(3));
            let x = r.input(&mut g, dtype, &[k, b, n]);
            let p = r.elementwise(&mut g, x);
            let v = g.permute(p, &[1, 0, 2]).expect("permute");
            let m = 1 + r.below(3);
            let a = r.input(&mut g, dtype, &[b, m, k]);
            let y = g.matmul(a, v).expect("matmul");
            finish(r, g, y, &[p])
        }
    }
}

/// 2–3 elementwise ops reading one input (some at a larger, broadcast shape, some reading
/// another sibling), all of them outputs.
pub fn siblings(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.numeric();
    let s = r.shape(0, 3, true);
    let x = r.input(&mut g, dtype, &s);
    let mut outs: Vec<NodeId> = Vec::new();
    for _ in 0..2 + r.below(2) {
        let o = if !outs.is_empty() && r.chance(15) {
            let prev = r.pick(&outs);
            r.elementwise(&mut g, prev)
        } else if r.chance(15) {
            let mut big = vec![2];
            big.extend_from_slice(&s);
            let other = r.input(&mut g, dtype, &big);
            r.binary(&mut g, x, other)
        } else {
            r.elementwise(&mut g, x)
        };
        outs.push(o);
    }
    for (i, &o) in outs.iter().enumerate() {
        g.set_output(format!("y{i}"), o).expect("fresh output name");
    }
    g
}

/// 2–3 reductions of one input over the same axes, all of them outputs: of the input itself
/// (`max` and `argmax`), of an elementwise op of it, or (with `keepdim`) of the input less an
/// earlier one (`mean` and the variance); now and then one over other axes, which must stay
/// apart.
pub fn row_siblings(r: &mut Gen) -> Graph {
    let mut g = Graph::new();
    let dtype = r.numeric();
    let s = r.shape(1, 3, false);
    let x = r.input(&mut g, dtype, &s);
    // One axis some of the time, so that `argmax` and `argmin` can join.
    let axes = if r.chance(50) {
        vec![r.below(s.len())]
    } else {
        r.axes(s.len())
    };
    let keepdim = r.chance(50);
    let mut outs: Vec<NodeId> = Vec::new();
    for _ in 0..2 + r.below(2) {
        let src = if keepdim && !outs.is_empty() && r.chance(30) {
            let prev = r.pick(&outs);
            g.binary(BinaryOp::Sub, x, prev).unwrap_or(x)
        } else if r.chance(25) {
            r.elementwise(&mut g, x)
        } else {
            x
        };
        let o = if axes.len() == 1 && r.chance(30) {
            let op = r.pick(&[ReduceOp::ArgMax, ReduceOp::ArgMin]);
            g.reduce(op, src, &axes, keepdim)
                .unwrap_or_else(|_| r.reduce(&mut g, src, &axes, keepdim))
        } else if r.chance(10) {
            let other = r.axes(s.len());
            r.reduce(&mut g, src, &other, keepdim)
        } else {
            r.reduce(&mut g, src, &axes, keepdim)
        };
        outs.push(o);
    }
    for (i, &o) in outs.iter().enumerate() {
        g.set_output(format!("y{i}"), o).expect("fresh output name");
    }
    g
}

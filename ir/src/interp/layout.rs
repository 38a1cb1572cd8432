//! Index arithmetic shared by the interpreter's ops: row-major multi-index iteration, source
//! index maps (broadcasting and views) and gathering elements through such a map.
//!
//! Every view-like op is expressed as an *index map*: for each output element, in row-major
//! order, the linear index of the source element it copies.

use crate::shape::Shape;
use crate::tensor::TensorData;

/// Applies `$body` to the inner vector of a [`TensorData`] and wraps the result (which must be
/// a vector of the same element type) in the same variant.
macro_rules! map_same {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            TensorData::Bool($v) => TensorData::Bool($body),
            TensorData::I32($v) => TensorData::I32($body),
            TensorData::I64($v) => TensorData::I64($body),
            TensorData::F16($v) => TensorData::F16($body),
            TensorData::BF16($v) => TensorData::BF16($body),
            TensorData::F32($v) => TensorData::F32($body),
            TensorData::F64($v) => TensorData::F64($body),
        }
    };
}

/// Row-major strides of `dims` in elements.
pub(super) fn strides(dims: &[usize]) -> Vec<usize> {
    Shape::new(dims).contiguous_strides().to_vec()
}

/// Calls `f` on every multi-index of `dims` in row-major order and collects the results.
/// A rank-0 shape has one (empty) index; a shape with a zero dim has none.
pub(super) fn index_map<T>(dims: &[usize], mut f: impl FnMut(&[usize]) -> T) -> Vec<T> {
    if dims.contains(&0) {
        return Vec::new();
    }
    // The caller checked that the element count fits (`check_size`).
    let mut out = Vec::with_capacity(dims.iter().product());
    let mut idx = vec![0usize; dims.len()];
    loop {
        out.push(f(&idx));
        // Odometer increment, last axis fastest.
        let mut axis = dims.len();
        loop {
            if axis == 0 {
                return out;
            }
            axis -= 1;
            idx[axis] += 1;
            if idx[axis] < dims[axis] {
                break;
            }
            idx[axis] = 0;
        }
    }
}

/// For every element of a tensor of shape `to`, the linear index of the element of a tensor of
/// shape `from` that broadcasts onto it (numpy rules: `from` is aligned to the right, its size-1
/// dims repeat). `from` must broadcast to `to`.
pub(super) fn broadcast_map(from: &Shape, to: &Shape) -> Vec<usize> {
    let offset = to.rank() - from.rank();
    let from_strides = strides(from.dims());
    index_map(to.dims(), |idx| {
        from.dims()
            .iter()
            .zip(&from_strides)
            .zip(&idx[offset..])
            .map(|((&d, &s), &i)| if d == 1 { 0 } else { i * s })
            .sum()
    })
}

/// The elements of `data` at the positions `idx`, in that order.
pub(super) fn take(data: &TensorData, idx: &[usize]) -> TensorData {
    map_same!(data, v => idx.iter().map(|&i| v[i]).collect())
}

/// The elements of all `parts` (which share one dtype) one after the other, or `None` if the
/// dtypes differ.
pub(super) fn append(parts: &[&TensorData]) -> Option<TensorData> {
    let first = parts.first()?;
    let mut out = TensorData::zeros(first.dtype(), 0);
    for p in parts {
        match (&mut out, p) {
            (TensorData::Bool(o), TensorData::Bool(v)) => o.extend_from_slice(v),
            (TensorData::I32(o), TensorData::I32(v)) => o.extend_from_slice(v),
            (TensorData::I64(o), TensorData::I64(v)) => o.extend_from_slice(v),
            (TensorData::F16(o), TensorData::F16(v)) => o.extend_from_slice(v),
            (TensorData::BF16(o), TensorData::BF16(v)) => o.extend_from_slice(v),
            (TensorData::F32(o), TensorData::F32(v)) => o.extend_from_slice(v),
            (TensorData::F64(o), TensorData::F64(v)) => o.extend_from_slice(v),
            _ => return None,
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn index_map_visits_row_major() {
        let got = index_map(&[2, 3], |i| (i[0], i[1]));
        assert_eq!(got, [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]);
        assert_eq!(index_map(&[], |i| i.len()), [0]);
        assert!(index_map(&[3, 0, 2], |_| ()).is_empty());
    }

    #[test]
    fn broadcast_map_repeats_size_one_dims() {
        let m = broadcast_map(&Shape::new(&[3, 1]), &Shape::new(&[2, 3, 2]));
        assert_eq!(m, [0, 0, 1, 1, 2, 2, 0, 0, 1, 1, 2, 2]);
        assert_eq!(
            broadcast_map(&Shape::scalar(), &Shape::new(&[3])),
            [0, 0, 0]
        );
    }
}

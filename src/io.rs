//! Reading and writing tensors as safetensors files.

use crate::{Error, Result};
use safetensors::tensor::{Dtype, SafeTensors, TensorView};
use smelt_ir::{DType, HostTensor, Shape, TensorData};
use std::collections::HashMap;
use std::path::Path;

fn file_err(path: &Path, message: impl Into<String>) -> Error {
    Error::File {
        path: path.to_path_buf(),
        message: message.into(),
    }
}

fn to_safetensors_dtype(d: DType) -> Dtype {
    match d {
        DType::Bool => Dtype::BOOL,
        DType::I32 => Dtype::I32,
        DType::I64 => Dtype::I64,
        DType::F16 => Dtype::F16,
        DType::BF16 => Dtype::BF16,
        DType::F32 => Dtype::F32,
        DType::F64 => Dtype::F64,
    }
}

fn from_safetensors_dtype(d: Dtype) -> Option<DType> {
    Some(match d {
        Dtype::BOOL => DType::Bool,
        Dtype::I32 => DType::I32,
        Dtype::I64 => DType::I64,
        Dtype::F16 => DType::F16,
        Dtype::BF16 => DType::BF16,
        Dtype::F32 => DType::F32,
        Dtype::F64 => DType::F64,
        _ => return None,
    })
}

/// Decodes every tensor of a safetensors buffer; `path` is only used in error messages.
pub fn decode_safetensors(bytes: &[u8], path: &Path) -> Result<HashMap<String, HostTensor>> {
    let st = SafeTensors::deserialize(bytes)
        .map_err(|e| file_err(path, format!("not a valid safetensors file: {e}")))?;
    let mut out = HashMap::new();
    for (name, view) in st.tensors() {
        let dtype = from_safetensors_dtype(view.dtype()).ok_or_else(|| {
            file_err(
                path,
                format!(
                    "tensor {name:?} has dtype {:?}, which smelt does not support \
                     (supported: bool, i32, i64, f16, bf16, f32, f64)",
                    view.dtype()
                ),
            )
        })?;
        let data = TensorData::from_le_bytes(dtype, view.data())
            .map_err(|e| file_err(path, format!("tensor {name:?}: {e}")))?;
        let t = HostTensor::new(Shape::new(view.shape()), data)
            .map_err(|e| file_err(path, format!("tensor {name:?}: {e}")))?;
        out.insert(name, t);
    }
    Ok(out)
}

/// Reads every tensor of a safetensors file.
pub fn load_safetensors(path: &Path) -> Result<HashMap<String, HostTensor>> {
    let bytes = std::fs::read(path).map_err(|e| file_err(path, format!("cannot read: {e}")))?;
    decode_safetensors(&bytes, path)
}

/// Encodes named tensors as a safetensors buffer.
pub fn encode_safetensors<'a>(
    tensors: impl IntoIterator<Item = (&'a str, &'a HostTensor)>,
) -> Result<Vec<u8>> {
    let owned: Vec<(String, Dtype, Vec<usize>, Vec<u8>)> = tensors
        .into_iter()
        .map(|(n, t)| {
            (
                n.to_string(),
                to_safetensors_dtype(t.dtype()),
                t.shape().dims().to_vec(),
                t.data().to_le_bytes(),
            )
        })
        .collect();
    let mut views = Vec::with_capacity(owned.len());
    for (name, dtype, shape, bytes) in &owned {
        let view = TensorView::new(*dtype, shape.clone(), bytes).map_err(|e| Error::File {
            path: "<memory>".into(),
            message: format!("tensor {name:?}: {e}"),
        })?;
        views.push((name.clone(), view));
    }
    safetensors::tensor::serialize(views, None).map_err(|e| Error::File {
        path: "<memory>".into(),
        message: format!("cannot serialise: {e}"),
    })
}

/// Writes named tensors to a safetensors file.
pub fn save_safetensors<'a>(
    path: &Path,
    tensors: impl IntoIterator<Item = (&'a str, &'a HostTensor)>,
) -> Result<()> {
    let bytes = encode_safetensors(tensors)?;
    std::fs::write(path, bytes).map_err(|e| file_err(path, format!("cannot write: {e}")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};

    #[test]
    fn every_dtype_round_trips() {
        let tensors = vec![
            (
                "b",
                HostTensor::new([2], TensorData::Bool(vec![true, false])).unwrap(),
            ),
            (
                "i",
                HostTensor::new([2], TensorData::I32(vec![-1, i32::MAX])).unwrap(),
            ),
            (
                "l",
                HostTensor::new([1], TensorData::I64(vec![i64::MIN])).unwrap(),
            ),
            (
                "h",
                HostTensor::new([1], TensorData::F16(vec![f16::from_f32(0.1)])).unwrap(),
            ),
            (
                "bf",
                HostTensor::new([1], TensorData::BF16(vec![bf16::NAN])).unwrap(),
            ),
            (
                "f",
                HostTensor::new([2, 0], TensorData::F32(vec![])).unwrap(),
            ),
            (
                "d",
                HostTensor::new([], TensorData::F64(vec![-0.0])).unwrap(),
            ),
        ];
        let bytes = encode_safetensors(tensors.iter().map(|(n, t)| (*n, t))).unwrap();
        let back = decode_safetensors(&bytes, Path::new("mem")).unwrap();
        assert_eq!(back.len(), tensors.len());
        for (n, t) in &tensors {
            assert_eq!(&back[*n], t, "{n}");
        }
    }
}

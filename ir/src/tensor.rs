//! Host tensors: dense, row-major, owned data of one dtype.
//!
//! Used for constants in the IR, for the reference interpreter's values and for the inputs and
//! outputs of every backend.

use crate::dtype::DType;
use crate::error::{IrError, Result};
use crate::shape::Shape;
use half::{bf16, f16};

/// Dense element storage, one variant per dtype.
#[derive(Clone, Debug)]
pub enum TensorData {
    Bool(Vec<bool>),
    I32(Vec<i32>),
    I64(Vec<i64>),
    F16(Vec<f16>),
    BF16(Vec<bf16>),
    F32(Vec<f32>),
    F64(Vec<f64>),
}

/// Runs `$body` with `$v` bound to the inner `Vec` of a [`TensorData`], whatever its dtype.
#[macro_export]
macro_rules! with_data {
    ($data:expr, $v:ident => $body:expr) => {
        match $data {
            $crate::tensor::TensorData::Bool($v) => $body,
            $crate::tensor::TensorData::I32($v) => $body,
            $crate::tensor::TensorData::I64($v) => $body,
            $crate::tensor::TensorData::F16($v) => $body,
            $crate::tensor::TensorData::BF16($v) => $body,
            $crate::tensor::TensorData::F32($v) => $body,
            $crate::tensor::TensorData::F64($v) => $body,
        }
    };
}

impl TensorData {
    pub fn dtype(&self) -> DType {
        match self {
            TensorData::Bool(_) => DType::Bool,
            TensorData::I32(_) => DType::I32,
            TensorData::I64(_) => DType::I64,
            TensorData::F16(_) => DType::F16,
            TensorData::BF16(_) => DType::BF16,
            TensorData::F32(_) => DType::F32,
            TensorData::F64(_) => DType::F64,
        }
    }

    pub fn len(&self) -> usize {
        with_data!(self, v => v.len())
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// `n` zeros (false for bool).
    pub fn zeros(dtype: DType, n: usize) -> TensorData {
        match dtype {
            DType::Bool => TensorData::Bool(vec![false; n]),
            DType::I32 => TensorData::I32(vec![0; n]),
            DType::I64 => TensorData::I64(vec![0; n]),
            DType::F16 => TensorData::F16(vec![f16::ZERO; n]),
            DType::BF16 => TensorData::BF16(vec![bf16::ZERO; n]),
            DType::F32 => TensorData::F32(vec![0.0; n]),
            DType::F64 => TensorData::F64(vec![0.0; n]),
        }
    }

    /// Element `i` widened to f64 (exact for every dtype but i64 beyond 2^53).
    pub fn get_f64(&self, i: usize) -> f64 {
        match self {
            TensorData::Bool(v) => v[i] as u8 as f64,
            TensorData::I32(v) => v[i] as f64,
            TensorData::I64(v) => v[i] as f64,
            TensorData::F16(v) => v[i].to_f64(),
            TensorData::BF16(v) => v[i].to_f64(),
            TensorData::F32(v) => v[i] as f64,
            TensorData::F64(v) => v[i],
        }
    }

    /// The elements as little-endian bytes (bool as one byte 0/1), the layout of safetensors.
    pub fn to_le_bytes(&self) -> Vec<u8> {
        match self {
            TensorData::Bool(v) => v.iter().map(|&b| b as u8).collect(),
            TensorData::I32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::I64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::BF16(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F32(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
            TensorData::F64(v) => v.iter().flat_map(|x| x.to_le_bytes()).collect(),
        }
    }

    /// Reads little-endian bytes; `bytes.len()` must be a multiple of the element size.
    /// A bool byte other than 0 or 1 is an error.
    pub fn from_le_bytes(dtype: DType, bytes: &[u8]) -> Result<TensorData> {
        let size = dtype.size_bytes();
        if !bytes.len().is_multiple_of(size) {
            return Err(IrError::Data(format!(
                "{} bytes is not a whole number of {dtype} elements ({size} bytes each)",
                bytes.len()
            )));
        }
        macro_rules! chunks {
            ($t:ty, $n:literal) => {
                bytes
                    .chunks_exact($n)
                    .map(|c| <$t>::from_le_bytes(c.try_into().expect("chunk size")))
                    .collect()
            };
        }
        Ok(match dtype {
            DType::Bool => {
                if let Some(b) = bytes.iter().find(|&&b| b > 1) {
                    return Err(IrError::Data(format!("invalid bool byte {b:#04x}")));
                }
                TensorData::Bool(bytes.iter().map(|&b| b == 1).collect())
            }
            DType::I32 => TensorData::I32(chunks!(i32, 4)),
            DType::I64 => TensorData::I64(chunks!(i64, 8)),
            DType::F16 => TensorData::F16(chunks!(f16, 2)),
            DType::BF16 => TensorData::BF16(chunks!(bf16, 2)),
            DType::F32 => TensorData::F32(chunks!(f32, 4)),
            DType::F64 => TensorData::F64(chunks!(f64, 8)),
        })
    }
}

/// Bitwise equality: NaNs with the same payload are equal, -0.0 differs from 0.0.
impl PartialEq for TensorData {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (TensorData::Bool(a), TensorData::Bool(b)) => a == b,
            (TensorData::I32(a), TensorData::I32(b)) => a == b,
            (TensorData::I64(a), TensorData::I64(b)) => a == b,
            (TensorData::F16(a), TensorData::F16(b)) => a
                .iter()
                .map(|x| x.to_bits())
                .eq(b.iter().map(|x| x.to_bits())),
            (TensorData::BF16(a), TensorData::BF16(b)) => a
                .iter()
                .map(|x| x.to_bits())
                .eq(b.iter().map(|x| x.to_bits())),
            (TensorData::F32(a), TensorData::F32(b)) => a
                .iter()
                .map(|x| x.to_bits())
                .eq(b.iter().map(|x| x.to_bits())),
            (TensorData::F64(a), TensorData::F64(b)) => a
                .iter()
                .map(|x| x.to_bits())
                .eq(b.iter().map(|x| x.to_bits())),
            _ => false,
        }
    }
}

/// A dense row-major tensor on the host.
#[derive(Clone, Debug, PartialEq)]
pub struct HostTensor {
    shape: Shape,
    data: TensorData,
}

impl HostTensor {
    /// Builds a tensor; the data length must equal the shape's element count.
    pub fn new(shape: impl Into<Shape>, data: TensorData) -> Result<HostTensor> {
        let shape = shape.into();
        if shape.numel() != data.len() {
            return Err(IrError::Data(format!(
                "shape {shape} holds {} elements but {} were given",
                shape.numel(),
                data.len()
            )));
        }
        Ok(HostTensor { shape, data })
    }

    pub fn zeros(dtype: DType, shape: impl Into<Shape>) -> HostTensor {
        let shape = shape.into();
        let data = TensorData::zeros(dtype, shape.numel());
        HostTensor { shape, data }
    }

    pub fn from_f32(shape: impl Into<Shape>, v: Vec<f32>) -> Result<HostTensor> {
        HostTensor::new(shape, TensorData::F32(v))
    }

    pub fn from_i64(shape: impl Into<Shape>, v: Vec<i64>) -> Result<HostTensor> {
        HostTensor::new(shape, TensorData::I64(v))
    }

    /// A 0-d tensor.
    pub fn scalar(data: TensorData) -> Result<HostTensor> {
        HostTensor::new(Shape::scalar(), data)
    }

    pub fn shape(&self) -> &Shape {
        &self.shape
    }

    pub fn dtype(&self) -> DType {
        self.data.dtype()
    }

    pub fn data(&self) -> &TensorData {
        &self.data
    }

    pub fn into_data(self) -> TensorData {
        self.data
    }

    /// A pointer to element 0 of the data, for backends that write results straight into a
    /// caller's tensor. It stays valid while the tensor lives and is neither replaced nor
    /// moved out of (moving the `HostTensor` itself does not move its elements). Writing through
    /// it is the caller's `unsafe`: at most `numel` elements of `dtype`, and only valid values
    /// (0 or 1 for bool).
    pub fn data_mut_ptr(&mut self) -> *mut u8 {
        with_data!(&mut self.data, v => v.as_mut_ptr().cast::<u8>())
    }

    pub fn numel(&self) -> usize {
        self.data.len()
    }

    /// The elements as f32 (lossy for f64 and large integers); handy in tests and examples.
    pub fn to_f32_vec(&self) -> Vec<f32> {
        (0..self.numel())
            .map(|i| self.data.get_f64(i) as f32)
            .collect()
    }

    /// The same data under another shape with the same element count.
    pub fn reshaped(self, shape: impl Into<Shape>) -> Result<HostTensor> {
        HostTensor::new(shape, self.data)
    }
}

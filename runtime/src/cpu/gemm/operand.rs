//! Matmul operands: logical dims and element strides, and their layout in a planned matmul.

use super::{overflow, Result};
use smelt_ir::Shape;
use std::fmt;

/// One matmul operand as `torch.matmul` sees it (rank >= 1), with the element stride of each
/// dim in its buffer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MatmulOperand {
    dims: Vec<usize>,
    strides: Vec<isize>,
}

impl MatmulOperand {
    /// Logical `dims` read with element `strides` (one per dim; 0 broadcasts a dim).
    pub fn new(dims: &[usize], strides: &[isize]) -> MatmulOperand {
        MatmulOperand {
            dims: dims.to_vec(),
            strides: strides.to_vec(),
        }
    }

    /// A dense row-major buffer of shape `dims`.
    pub fn contiguous(dims: &[usize]) -> MatmulOperand {
        let strides = Shape::new(dims)
            .contiguous_strides()
            .iter()
            .map(|&s| isize::try_from(s).unwrap_or(isize::MAX))
            .collect();
        MatmulOperand {
            dims: dims.to_vec(),
            strides,
        }
    }

    /// The transpose of the last two dims of a dense row-major buffer of shape `stored`
    /// (`[.., a, b]` is read as `[.., b, a]`, no copy): what a `permute` swapping the last two
    /// axes folds into. A 1-D operand is its own transpose.
    pub fn transposed(stored: &[usize]) -> MatmulOperand {
        let mut op = MatmulOperand::contiguous(stored);
        let r = op.dims.len();
        if r >= 2 {
            op.dims.swap(r - 2, r - 1);
            op.strides.swap(r - 2, r - 1);
        }
        op
    }

    pub fn dims(&self) -> &[usize] {
        &self.dims
    }

    pub fn strides(&self) -> &[isize] {
        &self.strides
    }

    /// The length a buffer needs for the operand to start at its element `offset`: one past
    /// the highest element the operand reaches from there; `None` if the operand is empty.
    pub(crate) fn needed_len(&self, offset: usize) -> Result<Option<usize>> {
        let Some((_, hi)) = self.span()? else {
            return Ok(None);
        };
        usize::try_from(hi)
            .ok()
            .and_then(|h| h.checked_add(offset)?.checked_add(1))
            .map(Some)
            .ok_or_else(|| overflow(format!("the extent of operand {self} from {offset}")))
    }

    /// The lowest and highest element offset the operand reaches; `None` if it is empty.
    fn span(&self) -> Result<Option<(isize, isize)>> {
        if self.dims.contains(&0) {
            return Ok(None);
        }
        let (mut lo, mut hi) = (0isize, 0isize);
        for (&d, &s) in self.dims.iter().zip(&self.strides) {
            let reach = isize::try_from(d - 1)
                .ok()
                .and_then(|d| d.checked_mul(s))
                .ok_or_else(|| overflow(format!("offsets of operand {self}")))?;
            let sum = |a: isize| {
                a.checked_add(reach)
                    .ok_or_else(|| overflow(format!("offsets of operand {self}")))
            };
            if reach < 0 {
                lo = sum(lo)?;
            } else {
                hi = sum(hi)?;
            }
        }
        Ok(Some((lo, hi)))
    }
}

impl fmt::Display for MatmulOperand {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:?} strides {:?}", self.dims, self.strides)
    }
}

/// Row and column strides of an operand's matrices and its strides along the output's batch
/// dims.
#[derive(Clone, Debug)]
pub(super) struct Layout {
    pub(super) rs: isize,
    pub(super) cs: isize,
    pub(super) batch: Vec<isize>,
    pub(super) span: Option<(isize, isize)>,
}

pub(super) fn layout(op: &MatmulOperand, left: bool, batch: &[usize]) -> Result<Layout> {
    let (d, s) = (&op.dims, &op.strides);
    let r = d.len();
    let (rs, cs) = match (r, left) {
        // A 1-D operand is a dense-looking `[1, k]` row or `[k, 1]` column; the stride of the
        // size-1 dim is never used to address memory.
        (1, true) => (s[0].saturating_mul(d[0] as isize), s[0]),
        (1, false) => (s[0], s[0]),
        _ => (s[r - 2], s[r - 1]),
    };
    let own = &d[..r.saturating_sub(2)];
    let own_s = &s[..r.saturating_sub(2)];
    let skip = batch.len() - own.len();
    let batch = (0..batch.len())
        .map(|j| match j.checked_sub(skip) {
            Some(o) if own[o] != 1 => own_s[o],
            _ => 0,
        })
        .collect();
    Ok(Layout {
        rs,
        cs,
        batch,
        span: op.span()?,
    })
}

//! Static shapes and PyTorch broadcasting.

use smallvec::SmallVec;
use std::fmt;

/// A static tensor shape. Rank 0 (a scalar) and zero-size dimensions are valid.
#[derive(Clone, PartialEq, Eq, Hash, Default)]
pub struct Shape(pub SmallVec<[usize; 6]>);

impl Shape {
    pub fn new(dims: &[usize]) -> Shape {
        Shape(SmallVec::from_slice(dims))
    }

    pub fn scalar() -> Shape {
        Shape(SmallVec::new())
    }

    pub fn rank(&self) -> usize {
        self.0.len()
    }

    pub fn dims(&self) -> &[usize] {
        &self.0
    }

    /// Number of elements (1 for a scalar, 0 if any dimension is 0). Saturates on overflow.
    pub fn numel(&self) -> usize {
        self.0.iter().fold(1usize, |a, &d| a.saturating_mul(d))
    }

    /// Row-major (C-contiguous) strides in elements.
    pub fn contiguous_strides(&self) -> SmallVec<[usize; 6]> {
        let mut strides: SmallVec<[usize; 6]> = SmallVec::from_elem(0, self.rank());
        let mut acc = 1usize;
        for i in (0..self.rank()).rev() {
            strides[i] = acc;
            acc = acc.saturating_mul(self.0[i]);
        }
        strides
    }

    /// The broadcast of two shapes (numpy/PyTorch rules), or `None` if they are incompatible.
    pub fn broadcast(&self, other: &Shape) -> Option<Shape> {
        let rank = self.rank().max(other.rank());
        let mut out: SmallVec<[usize; 6]> = SmallVec::with_capacity(rank);
        for i in 0..rank {
            let a = dim_from_right(self, rank - 1 - i);
            let b = dim_from_right(other, rank - 1 - i);
            out.push(match (a, b) {
                (x, y) if x == y => x,
                (1, y) => y,
                (x, 1) => x,
                _ => return None,
            });
        }
        Some(Shape(out))
    }

    /// Whether this shape broadcasts to `target` without changing `target`.
    pub fn broadcasts_to(&self, target: &Shape) -> bool {
        self.rank() <= target.rank() && self.broadcast(target).as_ref() == Some(target)
    }
}

/// Dimension `i` counted from the right (0 = last); missing leading dims are 1.
fn dim_from_right(s: &Shape, i: usize) -> usize {
    if i < s.rank() {
        s.0[s.rank() - 1 - i]
    } else {
        1
    }
}

impl fmt::Display for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("[")?;
        for (i, d) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(", ")?;
            }
            write!(f, "{d}")?;
        }
        f.write_str("]")
    }
}

impl fmt::Debug for Shape {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl From<&[usize]> for Shape {
    fn from(d: &[usize]) -> Shape {
        Shape::new(d)
    }
}

impl<const N: usize> From<[usize; N]> for Shape {
    fn from(d: [usize; N]) -> Shape {
        Shape::new(&d)
    }
}

impl From<Vec<usize>> for Shape {
    fn from(d: Vec<usize>) -> Shape {
        Shape(SmallVec::from_vec(d))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting_follows_numpy() {
        let s = |d: &[usize]| Shape::new(d);
        assert_eq!(s(&[2, 3]).broadcast(&s(&[3])), Some(s(&[2, 3])));
        assert_eq!(s(&[2, 1]).broadcast(&s(&[1, 4])), Some(s(&[2, 4])));
        assert_eq!(s(&[]).broadcast(&s(&[5])), Some(s(&[5])));
        assert_eq!(s(&[0, 1]).broadcast(&s(&[1, 7])), Some(s(&[0, 7])));
        assert_eq!(s(&[1]).broadcast(&s(&[0])), Some(s(&[0])));
        assert_eq!(s(&[2, 3]).broadcast(&s(&[4])), None);
        assert_eq!(s(&[2]).broadcast(&s(&[0])), None);
        assert!(s(&[3]).broadcasts_to(&s(&[2, 3])));
        assert!(!s(&[2, 3]).broadcasts_to(&s(&[3])));
    }

    #[test]
    fn strides_and_numel() {
        let s = Shape::new(&[2, 3, 4]);
        assert_eq!(s.contiguous_strides().as_slice(), &[12, 4, 1]);
        assert_eq!(s.numel(), 24);
        assert_eq!(Shape::scalar().numel(), 1);
        assert_eq!(Shape::new(&[3, 0]).numel(), 0);
    }
}

//! Symbolic index expressions used while lowering: affine forms in the loop variables, which
//! become [`Access::Affine`](super::ir::Access::Affine) addresses, and multi-indices that are
//! either per-dim or a linear index over a shape (so a reshape of a contiguous chain costs no
//! div/mod).
//!
//! Division and remainder of an affine form stay affine when range analysis over the loop
//! extents proves them exact (`(64*d0 + d1) / 64 = d0` when `d1 < 64`); otherwise the
//! lowering emits `IndexDiv`/`IndexRem` instructions.

use super::ir::ValueId;

/// `c + Σ coef[j] * var_j` over the loop variables of one stage.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) struct Aff {
    pub c: i64,
    pub coef: Vec<i64>,
}

impl Aff {
    pub fn constant(c: i64, vars: usize) -> Aff {
        Aff {
            c,
            coef: vec![0; vars],
        }
    }

    pub fn var(j: usize, vars: usize) -> Aff {
        let mut a = Aff::constant(0, vars);
        a.coef[j] = 1;
        a
    }

    pub fn add(&self, o: &Aff) -> Aff {
        Aff {
            c: self.c + o.c,
            coef: self.coef.iter().zip(&o.coef).map(|(a, b)| a + b).collect(),
        }
    }

    pub fn scale(&self, k: i64) -> Aff {
        Aff {
            c: self.c * k,
            coef: self.coef.iter().map(|a| a * k).collect(),
        }
    }

    fn non_negative(&self) -> bool {
        self.c >= 0 && self.coef.iter().all(|&a| a >= 0)
    }

    /// The largest value of `Σ coef[j] * var_j` for the terms `keep` selects, over
    /// `var_j < ext[j]`.
    fn max_of(&self, ext: &[usize], keep: impl Fn(i64) -> bool) -> i64 {
        self.coef
            .iter()
            .zip(ext)
            .filter(|(&a, _)| keep(a))
            .map(|(&a, &e)| a * (e.max(1) as i64 - 1))
            .sum()
    }

    /// `floor(self / s)` if it is affine over the loop extents `ext`.
    pub fn div(&self, s: i64, ext: &[usize]) -> Option<Aff> {
        if s == 1 {
            return Some(self.clone());
        }
        if s <= 0 || !self.non_negative() {
            return None;
        }
        let low = self.c % s + self.max_of(ext, |a| a % s != 0);
        (low < s).then(|| Aff {
            c: self.c / s,
            coef: self
                .coef
                .iter()
                .map(|&a| if a % s == 0 { a / s } else { 0 })
                .collect(),
        })
    }

    /// `self % d` if it is affine over the loop extents `ext`.
    pub fn rem(&self, d: i64, ext: &[usize]) -> Option<Aff> {
        if d <= 0 || !self.non_negative() {
            return None;
        }
        if d == 1 {
            return Some(Aff::constant(0, self.coef.len()));
        }
        let high = self.c % d + self.max_of(ext, |a| a % d != 0);
        (high < d).then(|| Aff {
            c: self.c % d,
            coef: self
                .coef
                .iter()
                .map(|&a| if a % d == 0 { 0 } else { a })
                .collect(),
        })
    }
}

/// One index component: affine, or an index value computed in the body.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Ix {
    Aff(Aff),
    Val(ValueId),
}

/// An index into a value of some shape.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub(crate) enum Idx {
    /// One component per dim.
    Dims(Vec<Ix>),
    /// The row-major linear index over `dims`.
    Lin(Ix, Vec<usize>),
}

/// Row-major strides of `dims` as i64.
pub(crate) fn strides(dims: &[usize]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for k in (0..dims.len().saturating_sub(1)).rev() {
        s[k] = s[k + 1] * dims[k + 1].max(1) as i64;
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_div_and_rem_stay_affine() {
        let ext = [4, 64];
        let lin = Aff::var(0, 2).scale(64).add(&Aff::var(1, 2));
        assert_eq!(lin.div(64, &ext), Some(Aff::var(0, 2)));
        assert_eq!(lin.rem(64, &ext), Some(Aff::var(1, 2)));
        // d1 / 8 over d1 < 64 is not affine.
        assert_eq!(Aff::var(1, 2).div(8, &ext), None);
        assert_eq!(Aff::var(1, 2).rem(8, &ext), None);
        assert_eq!(strides(&[2, 3, 4]), vec![12, 4, 1]);
    }
}

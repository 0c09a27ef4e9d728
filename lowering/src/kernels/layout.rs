//! Strided layouts of view chains, for kernels that read an operand in place.
//!
//! A [`Layout`] says where each element of a view lies in the buffer it views: an offset plus,
//! for every dimension of the view, a row-major list of `(size, stride)` sub-dimensions. A
//! dimension made by merging two dimensions that are not adjacent in memory (attention's
//! `batch * heads` over a `[seq, batch, heads * dim]` projection) is two sub-dimensions, so a
//! chain of `view`, `permute`, `select`, ... stays a strided view where a single stride per
//! dimension would need a copy. Every step returns `None` when its result is not a strided
//! view of the same buffer.

/// A strided view: element `(i0, i1, ...)` is at `offset + sum_d index(d, i_d)`, where dimension
/// `d`'s index is split row-major over `dims[d]`'s `(size, stride)` sub-dimensions.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Index of element `(0, 0, ...)` in the buffer.
    pub offset: usize,
    /// Sub-dimensions of each dimension (empty: size 1).
    pub dims: Vec<Vec<(usize, usize)>>,
}

/// Sub-dimensions without size-1 entries, adjacent ones merged when they are one stride run.
fn normalized(subs: &[(usize, usize)]) -> Vec<(usize, usize)> {
    let mut out: Vec<(usize, usize)> = vec![];
    for &(s, t) in subs.iter().filter(|(s, _)| *s != 1) {
        match out.last_mut() {
            Some(last) if last.1 == s.saturating_mul(t) => *last = (last.0 * s, t),
            _ => out.push((s, t)),
        }
    }
    out
}

impl Layout {
    /// A contiguous row-major tensor of `shape`.
    pub fn contiguous(shape: &[usize]) -> Layout {
        let mut dims = vec![vec![]; shape.len()];
        let mut stride = 1usize;
        for d in (0..shape.len()).rev() {
            dims[d] = vec![(shape[d], stride)];
            stride = stride.saturating_mul(shape[d]);
        }
        Layout { offset: 0, dims }
    }

    /// The view's shape.
    pub fn shape(&self) -> Vec<usize> {
        self.dims
            .iter()
            .map(|subs| subs.iter().map(|(s, _)| s).product())
            .collect()
    }

    fn numel(&self) -> usize {
        self.shape().iter().product()
    }

    /// Dimension `d` as at most `levels` sub-dimensions, outermost first (none for size 1).
    pub fn levels(&self, d: usize, levels: usize) -> Option<Vec<(usize, usize)>> {
        let subs = normalized(self.dims.get(d)?);
        (subs.len() <= levels).then_some(subs)
    }

    /// Dimension `d` as one stride (0 for a dimension of size 1), if it is one stride run.
    pub fn stride(&self, d: usize) -> Option<usize> {
        Some(self.levels(d, 1)?.first().map_or(0, |&(_, t)| t))
    }

    /// `permute(dims)`.
    pub fn permute(&self, perm: &[i64]) -> Option<Layout> {
        let r = self.dims.len();
        if perm.len() != r {
            return None;
        }
        let mut seen = vec![false; r];
        let mut dims = Vec::with_capacity(r);
        for &p in perm {
            let p = usize::try_from(if p < 0 { p + r as i64 } else { p }).ok()?;
            if p >= r || std::mem::replace(&mut seen[p], true) {
                return None;
            }
            dims.push(self.dims[p].clone());
        }
        Some(Layout {
            offset: self.offset,
            dims,
        })
    }

    /// Broadcast to `new` (right-aligned; size-1 and new leading dimensions get stride 0).
    pub fn expand(&self, new: &[usize]) -> Option<Layout> {
        let lead = new.len().checked_sub(self.dims.len())?;
        let shape = self.shape();
        let dims = (0..new.len())
            .map(|i| {
                if i < lead {
                    return Some(vec![(new[i], 0)]);
                }
                let j = i - lead;
                if shape[j] == new[i] {
                    Some(self.dims[j].clone())
                } else if shape[j] == 1 {
                    Some(vec![(new[i], 0)])
                } else {
                    None
                }
            })
            .collect::<Option<Vec<_>>>()?;
        Some(Layout {
            offset: self.offset,
            dims,
        })
    }

    /// `view`/`reshape` (also `squeeze`/`unsqueeze`) to `new`: the sub-dimensions, outermost
    /// first, are regrouped into the new dimensions, splitting one where a new dimension ends
    /// inside it.
    pub fn reshape(&self, new: &[usize]) -> Option<Layout> {
        let numel = self.numel();
        if numel != new.iter().product::<usize>() {
            return None;
        }
        if numel == 0 {
            return Some(Layout::contiguous(new));
        }
        let mut queue: std::collections::VecDeque<(usize, usize)> =
            self.dims.iter().flat_map(|d| normalized(d)).collect();
        let mut dims = Vec::with_capacity(new.len());
        for &n in new {
            let mut subs = vec![];
            let mut p = 1usize;
            while p < n {
                let (s, t) = queue.pop_front()?;
                if p * s <= n {
                    if n % (p * s) != 0 {
                        return None;
                    }
                    subs.push((s, t));
                    p *= s;
                } else {
                    let q = n / p;
                    if s % q != 0 {
                        return None;
                    }
                    subs.push((q, t * (s / q)));
                    queue.push_front((s / q, t));
                    p = n;
                }
            }
            dims.push(subs);
        }
        queue.is_empty().then_some(Layout {
            offset: self.offset,
            dims,
        })
    }

    /// `select(dim, index)`: the offset moves to the index, the dimension goes away.
    pub fn select(&self, dim: i64, index: i64) -> Option<Layout> {
        let r = self.dims.len() as i64;
        let d = usize::try_from(if dim < 0 { dim + r } else { dim }).ok()?;
        let size = *self.shape().get(d)? as i64;
        let mut i = usize::try_from(if index < 0 { index + size } else { index }).ok()?;
        if i as i64 >= size {
            return None;
        }
        let mut offset = self.offset;
        for &(s, t) in self.dims[d].iter().rev() {
            offset = offset.checked_add((i % s).checked_mul(t)?)?;
            i /= s;
        }
        let mut dims = self.dims.clone();
        dims.remove(d);
        Some(Layout { offset, dims })
    }

    /// `slice(dim, start, end, step)` with PyTorch's clamping, on a dimension that is one stride
    /// run.
    pub fn slice(
        &self,
        dim: i64,
        start: Option<i64>,
        end: Option<i64>,
        step: i64,
    ) -> Option<Layout> {
        let r = self.dims.len() as i64;
        let d = usize::try_from(if dim < 0 { dim + r } else { dim }).ok()?;
        let size = *self.shape().get(d)? as i64;
        if step < 1 {
            return None;
        }
        let clamp = |v: i64| (if v < 0 { v + size } else { v }).clamp(0, size);
        let start = clamp(start.unwrap_or(0));
        let end = clamp(end.unwrap_or(size)).max(start);
        let len = ((end - start) + step - 1) / step;
        let stride = self.stride(d)?;
        let mut dims = self.dims.clone();
        dims[d] = vec![(len as usize, stride.checked_mul(step as usize)?)];
        Some(Layout {
            offset: self
                .offset
                .checked_add((start as usize).checked_mul(stride)?)?,
            dims,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The buffer index of every element, row-major, by brute force.
    fn indices(l: &Layout) -> Vec<usize> {
        let shape = l.shape();
        let n: usize = shape.iter().product();
        (0..n)
            .map(|mut flat| {
                let mut at = l.offset;
                for d in (0..shape.len()).rev() {
                    let mut i = flat % shape[d];
                    flat /= shape[d];
                    for &(s, t) in l.dims[d].iter().rev() {
                        at += (i % s) * t;
                        i /= s;
                    }
                }
                at
            })
            .collect()
    }

    #[test]
    fn attention_heads_are_a_two_level_batch() {
        // qkv: [seq 4, batch 2, 3 * heads 3 * dim 2]; q = select 0, heads split off the
        // features, then [batch * heads, seq, dim].
        let qkv = Layout::contiguous(&[4, 2, 18]);
        let v = qkv.reshape(&[4, 2, 3, 6]).unwrap();
        let v = v.reshape(&[1, 4, 2, 3, 6]).unwrap();
        let v = v.permute(&[3, 1, 2, 0, 4]).unwrap();
        let v = v.reshape(&[3, 4, 2, 6]).unwrap();
        let q = v.select(0, 1).unwrap();
        assert_eq!(q.offset, 6);
        let q = q.reshape(&[4, 6, 2]).unwrap();
        let q = q.permute(&[1, 0, 2]).unwrap();
        let q = q.reshape(&[2, 3, 4, 2]).unwrap();
        let q = q.reshape(&[6, 4, 2]).unwrap();
        assert_eq!(q.levels(0, 2), Some(vec![(2, 18), (3, 2)]));
        assert_eq!(q.stride(1), Some(36));
        assert_eq!(q.stride(2), Some(1));
        // Element (b * 3 + h, s, d) of q is qkv[s, b, 6 + h * 2 + d].
        let want: Vec<usize> = (0..2)
            .flat_map(|b| (0..3).map(move |h| (b, h)))
            .flat_map(|(b, h)| {
                (0..4).flat_map(move |s| (0..2).map(move |d| s * 36 + b * 18 + 6 + h * 2 + d))
            })
            .collect();
        assert_eq!(indices(&q), want);
    }

    #[test]
    fn reshapes_that_need_a_copy_are_refused() {
        // Flattening a transpose is two strides in one dimension, not one.
        let t = Layout::contiguous(&[2, 3]).permute(&[1, 0]).unwrap();
        let flat = t.reshape(&[6]).unwrap();
        assert_eq!(flat.stride(0), None);
        assert_eq!(flat.levels(0, 2), Some(vec![(3, 1), (2, 3)]));
        assert_eq!(t.reshape(&[3, 2]).unwrap(), t);
        let p = Layout::contiguous(&[4, 6]).permute(&[1, 0]).unwrap();
        // [6, 4] -> [6, 2, 2] splits the strided dimension; [4, 6] would split 6 into 4s.
        assert_eq!(indices(&p.reshape(&[6, 2, 2]).unwrap()), indices(&p));
        assert_eq!(p.reshape(&[4, 6]), None);
        assert_eq!(p.reshape(&[5, 5]), None);
    }

    #[test]
    fn expand_select_and_slice() {
        let x = Layout::contiguous(&[1, 5]).expand(&[3, 2, 5]).unwrap();
        assert_eq!(x.stride(0), Some(0));
        assert_eq!(x.stride(1), Some(0));
        assert_eq!(x.expand(&[3, 3, 5]), None);
        let m = Layout::contiguous(&[4, 5]);
        let s = m.slice(1, Some(1), Some(-1), 2).unwrap();
        assert_eq!(s.shape(), vec![4, 2]);
        assert_eq!(indices(&s), vec![1, 3, 6, 8, 11, 13, 16, 18]);
        let s = m.slice(0, Some(-2), None, 1).unwrap();
        assert_eq!(indices(&s), (10..20).collect::<Vec<_>>());
        let r = m.select(0, -1).unwrap();
        assert_eq!(indices(&r), (15..20).collect::<Vec<_>>());
        assert_eq!(m.select(0, 4), None);
        assert_eq!(m.slice(0, None, None, 0), None);
    }
}

//! Concatenation (`aten.cat`) of tensors of one element type along one dimension.
//!
//! Each input is viewed as `[outer, runs[k]]` and the output as `[outer, Σ runs]`: `outer` is
//! the product of the dimensions before the concatenated one, and `runs[k]` input `k`'s size
//! along it times the product of the dimensions after it. Row `o` of the output is the rows
//! `o` of the inputs one after another, so the kernel is a copy of contiguous runs, split
//! over the thread pool by rows.

use serde::{Deserialize, Serialize};

/// The geometry of one concatenation.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConcatSpec {
    /// Product of the output's dimensions before the concatenated one.
    pub outer: usize,
    /// Per input, the contiguous elements it contributes to each output row (0 for an empty
    /// input, which contributes nothing).
    pub runs: Vec<usize>,
}

/// Elements copied per parallel job, at least (whole output rows).
const JOB_ELEMS: usize = 1 << 16;

impl ConcatSpec {
    /// Elements of an output row, or `None` if it overflows.
    fn row(&self) -> Option<usize> {
        self.runs.iter().try_fold(0usize, |a, &r| a.checked_add(r))
    }

    /// Checks that the inputs (one per run) and the output have the lengths the spec implies.
    pub fn validate(&self, src_lens: &[usize], out_len: usize) -> Result<(), String> {
        let too_large = || format!("concatenation {self:?} is too large");
        let row = self.row().ok_or_else(too_large)?;
        let out = row
            .checked_mul(self.outer)
            .filter(|n| n.checked_mul(8).is_some())
            .ok_or_else(too_large)?;
        if src_lens.len() != self.runs.len() {
            return Err(format!(
                "concatenation of {} inputs given {} buffers",
                self.runs.len(),
                src_lens.len()
            ));
        }
        for (k, (&r, &n)) in self.runs.iter().zip(src_lens).enumerate() {
            if r.checked_mul(self.outer) != Some(n) {
                return Err(format!(
                    "concatenation input {k} has {n} elements, expected {} x {r}",
                    self.outer
                ));
            }
        }
        if out_len != out {
            return Err(format!(
                "concatenation output has {out_len} elements, expected {} x {row}",
                self.outer
            ));
        }
        Ok(())
    }
}

/// `out[o, ..] = srcs[0][o, ..] ++ srcs[1][o, ..] ++ ...` for every row `o`; `Err` (nothing
/// written) if the buffers do not fit the spec.
pub fn concat<T: Copy + Send + Sync>(
    spec: &ConcatSpec,
    srcs: &[&[T]],
    out: &mut [T],
) -> Result<(), String> {
    let lens: Vec<usize> = srcs.iter().map(|s| s.len()).collect();
    spec.validate(&lens, out.len())?;
    let row = out.len() / spec.outer.max(1);
    if row == 0 {
        return Ok(());
    }
    let copy_rows = |o0: usize, rows: &mut [T]| {
        for (q, dst) in rows.chunks_exact_mut(row).enumerate() {
            let o = o0 + q;
            let mut at = 0;
            for (s, &r) in srcs.iter().zip(&spec.runs) {
                dst[at..at + r].copy_from_slice(&s[o * r..(o + 1) * r]);
                at += r;
            }
        }
    };
    let per = (JOB_ELEMS / row).max(1);
    super::par_jobs(out, per * row, |s, rows| copy_rows(s / row, rows));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The concatenation of `[outer, runs[k]]` inputs, element by element.
    fn naive(outer: usize, runs: &[usize], srcs: &[Vec<f32>]) -> Vec<f32> {
        let mut out = vec![];
        for o in 0..outer {
            for (s, &r) in srcs.iter().zip(runs) {
                out.extend_from_slice(&s[o * r..(o + 1) * r]);
            }
        }
        out
    }

    #[test]
    fn copies_each_inputs_run_into_each_row() {
        // Small and large (parallel) shapes, an empty input, a single input, one row.
        for (outer, runs) in [
            (3usize, vec![2usize, 5, 1]),
            (1, vec![7, 9]),
            (4, vec![0, 3, 0]),
            (5, vec![6]),
            (3000, vec![64, 32, 64]),
            (2, vec![40000, 30000]),
        ] {
            let srcs: Vec<Vec<f32>> = runs
                .iter()
                .enumerate()
                .map(|(k, &r)| (0..outer * r).map(|i| (k * 100000 + i) as f32).collect())
                .collect();
            let refs: Vec<&[f32]> = srcs.iter().map(|s| &s[..]).collect();
            let want = naive(outer, &runs, &srcs);
            let mut out = vec![f32::NAN; want.len()];
            let spec = ConcatSpec {
                outer,
                runs: runs.clone(),
            };
            concat(&spec, &refs, &mut out).unwrap();
            assert_eq!(out, want, "outer {outer}, runs {runs:?}");
        }
    }

    #[test]
    fn buffers_that_do_not_fit_are_refused_unwritten() {
        let spec = ConcatSpec {
            outer: 2,
            runs: vec![3, 1],
        };
        let (a, b) = (vec![1i64; 6], vec![2i64; 2]);
        let mut out = vec![0i64; 8];
        assert!(concat(&spec, &[&a[..5], &b], &mut out).is_err());
        assert!(concat(&spec, &[&a], &mut out).is_err());
        assert!(concat(&spec, &[&a, &b], &mut out[..7]).is_err());
        assert_eq!(out, vec![0; 8]);
        concat(&spec, &[&a, &b], &mut out).unwrap();
        assert_eq!(out, vec![1, 1, 1, 2, 1, 1, 1, 2]);
        let huge = ConcatSpec {
            outer: usize::MAX / 2,
            runs: vec![4],
        };
        assert!(huge.validate(&[0], 0).unwrap_err().contains("too large"));
    }
}

//! The allocation budget: how many bytes one process may allocate for tensors, shared by the
//! readers (files and weights), the lowering (constant matrices), the reference interpreter
//! (the sum of its live tensors) and the fast runtime's executor (its memory plan's peak).
//!
//! The limit defaults to what the process may really use: the smallest of its address-space
//! limit (`ulimit -v`, from `/proc/self/limits`), its cgroup's `memory.max` and the machine's
//! physical memory. `fxhlo --max-memory BYTES` (or [`set_limit`]) overrides it. Every size is
//! checked against it *before* the allocation, so a hostile shape is an error naming it, never an
//! abort or the OOM killer.

use std::sync::atomic::{AtomicU64, Ordering};

/// 0: not set (use [`default_limit`]).
static LIMIT: AtomicU64 = AtomicU64::new(0);

/// The budget in bytes: [`set_limit`]'s, else [`default_limit`].
pub fn limit() -> u64 {
    match LIMIT.load(Ordering::Relaxed) {
        0 => default_limit(),
        n => n,
    }
}

/// Sets the process's budget (`--max-memory`); 0 restores the default.
pub fn set_limit(bytes: u64) {
    LIMIT.store(bytes, Ordering::Relaxed);
}

/// The smallest of the address-space limit, the cgroup memory limit and physical memory (16
/// GiB where none can be read).
pub fn default_limit() -> u64 {
    static DEFAULT: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *DEFAULT.get_or_init(|| {
        [address_space_limit(), cgroup_limit(), physical_memory()]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(16 << 30)
    })
}

/// `Max address space` of `/proc/self/limits` (the soft limit), if not unlimited.
fn address_space_limit() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/limits").ok()?;
    let line = s.lines().find(|l| l.starts_with("Max address space"))?;
    line["Max address space".len()..]
        .split_whitespace()
        .next()?
        .parse()
        .ok()
}

/// The cgroup v2 `memory.max` (or v1 `memory.limit_in_bytes`) of this process's cgroup.
fn cgroup_limit() -> Option<u64> {
    let cg = std::fs::read_to_string("/proc/self/cgroup").ok()?;
    let mut best: Option<u64> = None;
    for line in cg.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, ctrl, path) = (parts.next()?, parts.next()?, parts.next()?);
        let file = if ctrl.is_empty() {
            format!("/sys/fs/cgroup{path}/memory.max")
        } else if ctrl.split(',').any(|c| c == "memory") {
            format!("/sys/fs/cgroup/memory{path}/memory.limit_in_bytes")
        } else {
            continue;
        };
        let v = std::fs::read_to_string(&file)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
            // cgroup v1 reports "no limit" as a huge page-rounded number.
            .filter(|&v| v < 1 << 60);
        if let Some(v) = v {
            best = Some(best.map_or(v, |b| b.min(v)));
        }
    }
    best
}

/// `MemTotal` of `/proc/meminfo`.
fn physical_memory() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = s.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// A request over the budget: what needed how many bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OverBudget {
    /// What was to be allocated.
    pub what: String,
    /// Bytes it needs (saturated at `u64::MAX` where the size itself overflows).
    pub bytes: u64,
    /// The budget.
    pub limit: u64,
}

impl std::fmt::Display for OverBudget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.bytes == u64::MAX {
            write!(f, "{} needs more bytes than a size can hold", self.what)
        } else {
            write!(
                f,
                "{} needs {} bytes, more than the memory budget of {} bytes (set it with \
                 --max-memory)",
                self.what, self.bytes, self.limit
            )
        }
    }
}

impl std::error::Error for OverBudget {}

/// Checks that one allocation of `bytes` fits the budget.
pub fn check(bytes: u64, what: impl FnOnce() -> String) -> Result<(), OverBudget> {
    let limit = limit();
    if bytes <= limit {
        Ok(())
    } else {
        Err(OverBudget {
            what: what(),
            bytes,
            limit,
        })
    }
}

/// Bytes of `count` elements of `elem` bytes each, checked against the budget (an overflowing
/// product is over any budget).
pub fn check_elems(count: u64, elem: u64, what: impl FnOnce() -> String) -> Result<(), OverBudget> {
    check(count.saturating_mul(elem), what)
}

/// A running total of live bytes against one limit (the interpreter's live tensors, a
/// reader's weights): [`Tally::add`] before each allocation, [`Tally::sub`] when it is freed.
#[derive(Clone, Debug)]
pub struct Tally {
    limit: u64,
    used: u64,
}

impl Tally {
    /// A tally against the process's budget.
    pub fn new() -> Tally {
        Tally::with_limit(limit())
    }

    /// A tally against `limit` bytes.
    pub fn with_limit(limit: u64) -> Tally {
        Tally { limit, used: 0 }
    }

    /// Bytes counted now.
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Counts `bytes` more, unless the total would pass the limit.
    pub fn add(&mut self, bytes: u64, what: impl FnOnce() -> String) -> Result<(), OverBudget> {
        match self.used.checked_add(bytes).filter(|&t| t <= self.limit) {
            Some(t) => {
                self.used = t;
                Ok(())
            }
            None => Err(OverBudget {
                what: format!("{} (with {} bytes already live)", what(), self.used),
                bytes,
                limit: self.limit,
            }),
        }
    }

    /// Counts `bytes` fewer.
    pub fn sub(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }
}

impl Default for Tally {
    fn default() -> Tally {
        Tally::new()
    }
}

/// Reads a whole regular file, refusing anything else (a FIFO, `/dev/zero`, a directory) and
/// a file larger than `max` bytes or the budget, without reading past that size: a file that
/// grows while read is an error, not an unbounded read.
pub fn read_regular_file(path: &std::path::Path, max: u64) -> std::io::Result<Vec<u8>> {
    use std::io::{Error, ErrorKind, Read};
    // Opened without blocking (a FIFO with no writer would block `open` itself), then checked.
    let mut opts = std::fs::OpenOptions::new();
    opts.read(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        const O_NONBLOCK: i32 = 0o4000;
        opts.custom_flags(O_NONBLOCK);
    }
    let f = opts.open(path)?;
    let m = f.metadata()?;
    if !m.is_file() {
        let kind = if m.is_dir() {
            "a directory"
        } else {
            "not a regular file (a pipe, a device or a socket)"
        };
        return Err(Error::new(ErrorKind::InvalidInput, format!("is {kind}")));
    }
    let size = m.len();
    let max = max.min(limit());
    if size > max {
        return Err(Error::new(
            ErrorKind::InvalidInput,
            format!("is {size} bytes, more than the {max} bytes allowed (the memory budget)"),
        ));
    }
    let mut buf = Vec::new();
    buf.try_reserve_exact(size as usize).map_err(|_| {
        Error::new(
            ErrorKind::OutOfMemory,
            format!("cannot allocate {size} bytes to read it"),
        )
    })?;
    f.take(size + 1).read_to_end(&mut buf)?;
    if buf.len() as u64 > size {
        return Err(Error::new(
            ErrorKind::InvalidData,
            format!("grew past its size of {size} bytes while it was read"),
        ));
    }
    Ok(buf)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_is_at_most_physical_memory() {
        let d = default_limit();
        assert!(d > 0);
        if let Some(p) = physical_memory() {
            assert!(d <= p);
        }
    }

    #[test]
    fn tallies_refuse_the_sum_not_just_each() {
        let mut t = Tally::with_limit(100);
        t.add(60, || "a".into()).unwrap();
        let e = t.add(60, || "b".into()).unwrap_err();
        assert!(e
            .to_string()
            .contains("b (with 60 bytes already live) needs 60 bytes"));
        t.sub(60);
        t.add(60, || "b".into()).unwrap();
        assert!(t.add(u64::MAX, || "c".into()).is_err());
    }

    #[cfg(unix)]
    #[test]
    fn only_regular_files_are_read() {
        for p in ["/dev/zero", "/dev/null", "/tmp", "/proc/self"] {
            let e = read_regular_file(std::path::Path::new(p), u64::MAX).unwrap_err();
            assert!(e.to_string().starts_with("is "), "{p}: {e}");
        }
        let f = std::env::temp_dir().join(format!("fxhlo-budget-{}", std::process::id()));
        std::fs::write(&f, b"12345").unwrap();
        assert_eq!(read_regular_file(&f, 5).unwrap(), b"12345");
        assert!(read_regular_file(&f, 4).is_err());
        std::fs::remove_file(&f).unwrap();
    }
}

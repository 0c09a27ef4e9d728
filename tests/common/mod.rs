//! Helpers shared by the compiler package's integration tests.

use std::path::PathBuf;

/// The testdata model folders (those with a `graph.json`), sorted.
pub fn testdata() -> Vec<PathBuf> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../testdata");
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(root)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("graph.json").exists())
        .collect();
    dirs.sort();
    dirs
}

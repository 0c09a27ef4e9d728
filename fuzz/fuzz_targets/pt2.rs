//! The .pt2 reader never panics on any archive.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fxhlo_ir::read::pt2::read_pt2_bytes(data, "fuzz.pt2");
});

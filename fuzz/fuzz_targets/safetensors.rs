//! Reading weights and inputs never panics.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = fxhlo_ir::read::safetensors_io::parse_safetensors(data, "fuzz.safetensors");
});

//! Loading an artifact never panics, whatever its header says: the fuzzer's bytes are re-signed
//! (the CRC-32 at the end recomputed) so mutations get past the checksum into the header,
//! program and constants; a loaded artifact is prepared and run on zero inputs under a small
//! memory limit.
#![no_main]
use libfuzzer_sys::fuzz_target;
use std::collections::BTreeMap;

fuzz_target!(|data: &[u8]| {
    let mut bytes = data.to_vec();
    if bytes.len() > 16 {
        let n = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
    let Ok(a) = fxhlo_runtime::fast::Artifact::from_bytes(&bytes) else {
        return;
    };
    let opts = fxhlo_runtime::fast::ExecOptions {
        threads: Some(1),
        max_memory: Some(64 << 20),
    };
    let Ok(ex) = fxhlo_runtime::fast::Executor::new(a, &opts) else {
        return;
    };
    let mut inputs = BTreeMap::new();
    for s in ex.artifact().inputs() {
        inputs.insert(
            s.name.clone(),
            fxhlo_ir::HostTensor {
                dtype: s.dtype,
                shape: s.shape.clone(),
                bytes: vec![0; s.bytes()],
            },
        );
    }
    let _ = ex.run(&inputs);
});

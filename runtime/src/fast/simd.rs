//! Run-time CPU feature checks shared by the kernels that keep several compiled copies of
//! their hot loops (one per instruction set, picked when they run).

/// Whether the CPU runs the AVX-512 copies (F, BW, DQ and VL, as `x86-64-v4`), checked once.
#[cfg(target_arch = "x86_64")]
pub fn has_avx512() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| {
        std::is_x86_feature_detected!("avx512f")
            && std::is_x86_feature_detected!("avx512bw")
            && std::is_x86_feature_detected!("avx512dq")
            && std::is_x86_feature_detected!("avx512vl")
            && std::env::var_os("FXHLO_NO_AVX512").is_none()
    })
}

/// Whether the CPU runs the AVX2 copies, checked once.
#[cfg(target_arch = "x86_64")]
pub fn has_avx2() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::is_x86_feature_detected!("avx2"))
}

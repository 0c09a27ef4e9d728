//! The IR text parser never panics; what it accepts prints and re-parses to the same graph.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(s) = std::str::from_utf8(data) {
        if let Ok(g) = fxhlo_ir::text::parse_graph(s) {
            let text = fxhlo_ir::text::print_graph(&g);
            let back = fxhlo_ir::text::parse_graph(&text).expect("printed IR parses");
            // Compared through `Debug`: the same structure, with NaN attributes (`eps=nan`)
            // equal to themselves (`==` on floats would call them different).
            assert_eq!(format!("{back:?}"), format!("{g:?}"));
        }
    }
});

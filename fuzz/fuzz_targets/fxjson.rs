//! The fxjson reader never panics; a graph it accepts prints and re-parses to itself.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok((g, _)) = fxhlo_ir::read::fxjson::parse_fxjson(data, "fuzz.json") {
        let text = fxhlo_ir::text::print_graph(&g);
        let back = fxhlo_ir::text::parse_graph(&text).expect("printed IR parses");
        assert_eq!(fxhlo_ir::text::print_graph(&back), text);
    }
});

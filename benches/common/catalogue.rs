//! The named shapes of `benches/catalogue.json`, one list per family (`conv`,
//! `conv_transpose`, `pool`), each case read as the type the reader needs.

use serde::de::DeserializeOwned;

/// Whether `BENCH_PROFILE=full` asks for every case (default: the quick ones).
pub fn full_profile() -> bool {
    std::env::var("BENCH_PROFILE").is_ok_and(|profile| profile == "full")
}

/// The cases of `family`, cut to the quick ones unless `all`.
pub fn load<C: DeserializeOwned>(family: &str, all: bool) -> Vec<C> {
    let catalogue: serde_json::Value =
        serde_json::from_str(include_str!("../catalogue.json")).expect("valid catalogue.json");
    let cases = catalogue[family]
        .as_array()
        .unwrap_or_else(|| panic!("catalogue.json has no {family:?} list"));
    cases
        .iter()
        .filter(|case| all || case["quick"] == true)
        .map(|case| {
            serde_json::from_value(case.clone())
                .unwrap_or_else(|e| panic!("catalogue.json, {family}: {e}: {case}"))
        })
        .collect()
}

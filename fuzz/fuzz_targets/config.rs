//! Fuzzes the configuration parser with arbitrary text. A config file is
//! operator input, but a reload must refuse a bad one with an error rather
//! than take the service down. An accepted config must also hold what
//! validation promises the scheduler.
#![no_main]

use std::collections::HashSet;

use libfuzzer_sys::fuzz_target;
use pathprobe::config::Config;

fuzz_target!(|data: &[u8]| {
    // Invalid UTF-8 never reaches the parser (reading the file fails first),
    // so map it rather than drop the input: the fuzzer's mutations still count.
    let text = String::from_utf8_lossy(data);
    let config = match Config::from_yaml(&text, "fuzz.yml") {
        Ok(config) => config,
        Err(e) => {
            assert!(e.to_string().starts_with("fuzz.yml"), "error without its file: {e}");
            return;
        }
    };
    assert_eq!(Config::from_yaml(&text, "fuzz.yml").ok().as_ref(), Some(&config));

    let mut names = HashSet::new();
    for target in &config.targets {
        assert!(names.insert(target.name()), "duplicate target name");
        assert!(!target.modules.is_empty());
        for module in &target.modules {
            assert!(config.module(module).is_some(), "unknown module {module:?}");
        }
        if target.address.is_some() {
            assert!(matches!(target.endpoint(), Some(Ok(_))));
        }
        assert!(!config.interval_of(target).is_zero());
    }
    let _ = config.summary().to_string();
});

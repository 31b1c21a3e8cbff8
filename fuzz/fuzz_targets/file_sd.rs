//! Fuzzes the file_sd target-file parser. Target files are often written by
//! other tools (a CMDB export, a config manager), so a bad one must be an
//! error for that file, never a crash. The first input byte picks JSON or
//! YAML, since the parser chooses by file extension. An accepted file must
//! hold only valid targets and labels, and must read back the same after
//! being written out in either format.
#![no_main]

use std::collections::BTreeMap;
use std::path::Path;

use libfuzzer_sys::fuzz_target;
use pathprobe::config::{check_label_name, parse_file_sd, FileSdGroup};
use pathprobe::probe::Target;

fn as_values(groups: &[FileSdGroup]) -> Vec<BTreeMap<&str, serde_json::Value>> {
    groups
        .iter()
        .map(|g| {
            BTreeMap::from([
                ("targets", serde_json::json!(g.targets)),
                ("labels", serde_json::json!(g.labels)),
            ])
        })
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some((&selector, rest)) = data.split_first() else {
        return;
    };
    let path = Path::new(if selector & 1 == 0 { "sd.json" } else { "sd.yml" });
    let text = String::from_utf8_lossy(rest);
    let Ok(groups) = parse_file_sd(&text, path) else {
        return;
    };

    for group in &groups {
        for target in &group.targets {
            assert!(Target::parse(target, 5301).is_ok(), "bad target {target:?}");
        }
        for name in group.labels.keys() {
            assert!(check_label_name(name).is_ok(), "bad label {name:?}");
        }
    }

    let json = serde_json::to_string(&as_values(&groups)).unwrap();
    let from_json = parse_file_sd(&json, Path::new("again.json")).expect("JSON re-read");
    assert_eq!(from_json, groups, "JSON round trip differs: {json}");
    let yaml = serde_yaml::to_string(&as_values(&groups)).unwrap();
    let from_yaml = parse_file_sd(&yaml, Path::new("again.yml")).expect("YAML re-read");
    assert_eq!(from_yaml, groups, "YAML round trip differs: {yaml}");
});

//! YAML files: every one parses.

use super::*;

pub(super) fn yaml_docs(path: &Path) -> Vec<Value> {
    let text = read(path);
    serde_yaml::Deserializer::from_str(&text)
        .map(|doc| {
            let mut v = <Value as serde::Deserialize>::deserialize(doc)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            v.apply_merge()
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            v
        })
        .filter(|v| !v.is_null())
        .collect()
}

pub(super) fn yaml(path: &Path) -> Value {
    let mut docs = yaml_docs(path);
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.pop().unwrap()
}

pub(super) fn s<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {v:?}"))
}

pub(super) fn seq<'a>(v: &'a Value, what: &str) -> &'a [Value] {
    v.as_sequence()
        .map(Vec::as_slice)
        .unwrap_or_else(|| panic!("{what}: expected a list, got {v:?}"))
}

#[test]
fn every_deploy_yaml_file_parses() {
    let mut stack = vec![repo().join("deploy")];
    let mut files = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if matches!(
                path.extension().and_then(|e| e.to_str()),
                Some("yml" | "yaml")
            ) {
                let docs = yaml_docs(&path);
                assert!(!docs.is_empty(), "{}: empty", path.display());
                for d in docs {
                    assert!(d.is_mapping(), "{}: not a mapping", path.display());
                }
                files += 1;
            }
        }
    }
    assert!(files >= 10, "{files} YAML files under deploy/");
}

//! The binary users get: the release profile must leave debug info out
//! (tens of MB against a few), and a separate profile keeps it for
//! profiling.

use super::*;

/// Names of the ELF64 little-endian file's sections.
fn elf_section_names(bytes: &[u8]) -> Vec<String> {
    let u16_at = |o: usize| u16::from_le_bytes(bytes[o..o + 2].try_into().unwrap()) as usize;
    let u64_at = |o: usize| u64::from_le_bytes(bytes[o..o + 8].try_into().unwrap()) as usize;
    assert_eq!(&bytes[..4], b"\x7fELF", "not an ELF file");
    assert_eq!(bytes[4], 2, "not ELF64");
    assert_eq!(bytes[5], 1, "not little-endian");
    let (shoff, shentsize, shnum, shstrndx) =
        (u64_at(0x28), u16_at(0x3a), u16_at(0x3c), u16_at(0x3e));
    let header = |i: usize| shoff + i * shentsize;
    let strtab = u64_at(header(shstrndx) + 0x18);
    (0..shnum)
        .map(|i| {
            let name = strtab
                + u32::from_le_bytes(bytes[header(i)..header(i) + 4].try_into().unwrap()) as usize;
            let end = bytes[name..].iter().position(|b| *b == 0).unwrap() + name;
            String::from_utf8_lossy(&bytes[name..end]).into_owned()
        })
        .collect()
}

#[test]
fn release_binary_carries_no_debug_info() {
    if cfg!(debug_assertions) {
        // Only the release profile is what users get.
        return;
    }
    let sections = elf_section_names(&std::fs::read(BIN).unwrap());
    assert!(sections.iter().any(|s| s == ".text"), "{sections:?}");
    let debug: Vec<&String> = sections
        .iter()
        .filter(|s| s.starts_with(".debug_"))
        .collect();
    assert!(debug.is_empty(), "{BIN} has debug sections {debug:?}");
}

#[test]
fn cargo_profiles_keep_debug_info_only_for_profiling() {
    let manifest: toml_like::Manifest = toml_like::parse(&read(&repo().join("Cargo.toml")));
    let release = &manifest["profile.release"];
    assert_eq!(release.get("debug").map(String::as_str), Some("false"));
    assert_eq!(
        release.get("strip").map(String::as_str),
        Some("\"debuginfo\"")
    );
    let profiling = &manifest["profile.profiling"];
    assert_eq!(
        profiling.get("inherits").map(String::as_str),
        Some("\"release\"")
    );
    assert_ne!(profiling.get("debug").map(String::as_str), Some("false"));
}

/// Just enough TOML for Cargo.toml's flat `key = value` tables.
mod toml_like {
    use std::collections::BTreeMap;
    pub type Manifest = BTreeMap<String, BTreeMap<String, String>>;
    pub fn parse(text: &str) -> Manifest {
        let mut out = Manifest::new();
        let mut table = String::new();
        for line in text.lines().map(str::trim) {
            if line.starts_with('#') || line.is_empty() {
                continue;
            }
            if let Some(t) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                table = t.to_string();
                continue;
            }
            if let Some((k, v)) = line.split_once('=') {
                out.entry(table.clone())
                    .or_default()
                    .insert(k.trim().to_string(), v.trim().to_string());
            }
        }
        out
    }
}

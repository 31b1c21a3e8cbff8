//! .dockerignore: parsed and matched as Docker does, for the build context.

use super::*;

pub(super) struct DockerIgnore {
    /// (excludes, pattern components), in file order: the last match wins.
    rules: Vec<(bool, Vec<String>)>,
}

impl DockerIgnore {
    pub(super) fn parse(text: &str) -> DockerIgnore {
        let rules = text
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(|l| {
                let (excludes, pattern) = match l.strip_prefix('!') {
                    Some(p) => (false, p.trim()),
                    None => (true, l),
                };
                let parts = normalize(Path::new(pattern.trim_start_matches('/')))
                    .components()
                    .map(|c| c.as_os_str().to_string_lossy().into_owned())
                    .collect();
                (excludes, parts)
            })
            .collect();
        DockerIgnore { rules }
    }

    pub(super) fn load() -> DockerIgnore {
        DockerIgnore::parse(&read(&repo().join(".dockerignore")))
    }

    /// Whether the context path `rel` is left out of the build context: a
    /// rule matching the path or one of its parent directories applies.
    pub(super) fn excludes(&self, rel: &Path) -> bool {
        let parts: Vec<String> = normalize(rel)
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let mut excluded = false;
        for (excludes, pattern) in &self.rules {
            let hit = (1..=parts.len()).any(|n| match_parts(pattern, &parts[..n]));
            if hit {
                excluded = *excludes;
            }
        }
        excluded
    }
}

/// Path components against pattern components; `**` spans any number.
pub(super) fn match_parts(pattern: &[String], parts: &[String]) -> bool {
    match pattern.split_first() {
        None => parts.is_empty(),
        Some((p, rest)) if p == "**" => {
            (0..=parts.len()).any(|skip| match_parts(rest, &parts[skip..]))
        }
        Some((p, rest)) => match parts.split_first() {
            Some((first, tail)) => glob(p.as_bytes(), first.as_bytes()) && match_parts(rest, tail),
            None => false,
        },
    }
}

/// One component: `*` any run of characters, `?` one character.
pub(super) fn glob(p: &[u8], s: &[u8]) -> bool {
    match (p.first(), s.first()) {
        (None, None) => true,
        (Some(b'*'), _) => glob(&p[1..], s) || (!s.is_empty() && glob(p, &s[1..])),
        (Some(b'?'), Some(_)) => glob(&p[1..], &s[1..]),
        (Some(a), Some(b)) if a == b => glob(&p[1..], &s[1..]),
        _ => false,
    }
}

#[test]
fn dockerignore_matching_follows_docker_rules() {
    let ig = DockerIgnore::parse("target\n/docs\n**/*.bk\n*.swp\ntests\n!tests/keep.rs\n# c\n");
    assert!(ig.excludes(Path::new("target")));
    assert!(ig.excludes(Path::new("target/release/x")));
    assert!(ig.excludes(Path::new("docs/METRICS.md")));
    assert!(ig.excludes(Path::new("src/a/b.rs.bk")));
    assert!(ig.excludes(Path::new("x.swp")));
    assert!(!ig.excludes(Path::new("src/x.swp")));
    assert!(!ig.excludes(Path::new("src/target.rs")));
    assert!(ig.excludes(Path::new("tests/other.rs")));
    assert!(!ig.excludes(Path::new("tests/keep.rs")));
    assert!(!ig.excludes(Path::new("Cargo.toml")));
}

//! The deployment files, checked without a container engine, a cluster or
//! systemd: the Dockerfile is parsed and its build stage replayed in a
//! temporary directory (cargo stood in for by `cargo metadata --locked` and
//! the binary these tests were built with), its HEALTHCHECK is run against a
//! real `pathprobe serve`, the Compose, Kubernetes, Grafana and systemd files
//! are parsed, every host path they name must exist, every pathprobe
//! configuration they carry is loaded by the library's own parser, and every
//! command line they give `pathprobe serve` is started for real.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Component, Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use pathprobe::config::Config;
use serde_yaml::Value;

const BIN: &str = env!("CARGO_BIN_EXE_pathprobe");

/// The dashboards the Compose file's Grafana is to load.
const DASHBOARDS: &[&str] = &["path-overview.json", "kernel-host.json", "fleet.json"];

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `p` with `.` and `..` resolved lexically; panics if it climbs out of
/// the repository.
fn normalize(p: &Path) -> PathBuf {
    let mut out = PathBuf::new();
    for c in p.components() {
        match c {
            Component::CurDir => {}
            Component::ParentDir => {
                assert!(out.pop(), "{} leaves the repository", p.display())
            }
            other => out.push(other),
        }
    }
    out
}

/// Asserts that `rel` (relative to the repository) exists; returns true so
/// that callers can go on to read it.
fn require(rel: &Path, named_by: &str) -> bool {
    let rel = normalize(rel);
    assert!(
        repo().join(&rel).exists(),
        "{named_by} names {}, which does not exist",
        rel.display()
    );
    true
}

/// Runs `cmd` to completion, killing it if it outlives `limit`.
fn run_bounded(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd:?}: {e}"));
    // Both pipes drain on threads, so that a chatty child cannot block.
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let out = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = out.read_to_end(&mut v);
        v
    });
    let err = std::thread::spawn(move || {
        let mut v = Vec::new();
        let _ = err.read_to_end(&mut v);
        v
    });
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > limit {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} ran longer than {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    Output {
        status,
        stdout: out.join().unwrap(),
        stderr: err.join().unwrap(),
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// The ports the service listens on by default, from the library itself.
fn metrics_port() -> u16 {
    pathprobe::service::DEFAULT_WEB_LISTEN
        .parse::<SocketAddr>()
        .unwrap()
        .port()
}

fn responder_port() -> u16 {
    Config::default_embedded().responder.listen.port()
}

// ---------------------------------------------------------------------------
// Dockerfile parsing

mod dockerfile {
    use std::collections::BTreeMap;

    #[derive(Debug, Clone)]
    pub struct Instruction {
        pub line: usize,
        pub keyword: String,
        pub args: String,
    }

    #[derive(Debug)]
    pub struct Stage {
        /// The image, build arguments substituted.
        pub base: String,
        pub name: Option<String>,
        pub instructions: Vec<Instruction>,
    }

    #[derive(Debug)]
    pub struct Dockerfile {
        /// ARGs before the first FROM, with their defaults.
        pub args: BTreeMap<String, String>,
        pub stages: Vec<Stage>,
    }

    const KEYWORDS: &[&str] = &[
        "ADD",
        "ARG",
        "CMD",
        "COPY",
        "ENTRYPOINT",
        "ENV",
        "EXPOSE",
        "FROM",
        "HEALTHCHECK",
        "LABEL",
        "MAINTAINER",
        "ONBUILD",
        "RUN",
        "SHELL",
        "STOPSIGNAL",
        "USER",
        "VOLUME",
        "WORKDIR",
    ];

    /// Splits the file into instructions: comment lines dropped (also
    /// inside a continuation, as Docker does), lines ending in `\` joined
    /// to the next.
    pub fn instructions(text: &str) -> Result<Vec<Instruction>, String> {
        let mut out = Vec::new();
        let mut pending: Option<(usize, String)> = None;
        let mut directives = true;
        for (i, raw) in text.lines().enumerate() {
            let n = i + 1;
            let trimmed = raw.trim();
            if let Some(comment) = trimmed.strip_prefix('#') {
                if directives {
                    let directive = comment.trim().to_ascii_lowercase();
                    if directive.starts_with("escape") && directive.contains('=') {
                        return Err(format!(
                            "line {n}: the escape directive is not supported here"
                        ));
                    }
                }
                continue;
            }
            directives = false;
            if trimmed.is_empty() {
                continue;
            }
            let (start, mut acc) = pending.take().unwrap_or((n, String::new()));
            let body = if acc.is_empty() {
                raw.trim()
            } else {
                raw.trim_end()
            };
            if let Some(head) = body.strip_suffix('\\') {
                acc.push_str(head);
                pending = Some((start, acc));
                continue;
            }
            acc.push_str(body);
            let (keyword, args) = acc
                .split_once(char::is_whitespace)
                .unwrap_or((acc.as_str(), ""));
            let keyword = keyword.to_ascii_uppercase();
            if !KEYWORDS.contains(&keyword.as_str()) {
                return Err(format!("line {start}: unknown instruction {keyword:?}"));
            }
            out.push(Instruction {
                line: start,
                keyword,
                args: args.trim().to_string(),
            });
        }
        match pending {
            Some((start, _)) => Err(format!(
                "the instruction at line {start} ends in a line continuation"
            )),
            None => Ok(out),
        }
    }

    /// `${NAME}` and `$NAME` replaced from `vars`; an unknown name is an
    /// error.
    pub fn substitute(s: &str, vars: &BTreeMap<String, String>) -> Result<String, String> {
        let mut out = String::new();
        let mut rest = s;
        while let Some(i) = rest.find('$') {
            out.push_str(&rest[..i]);
            let after = &rest[i + 1..];
            let (name, tail) = if let Some(braced) = after.strip_prefix('{') {
                let end = braced
                    .find('}')
                    .ok_or_else(|| format!("unclosed ${{ in {s:?}"))?;
                (&braced[..end], &braced[end + 1..])
            } else {
                let end = after
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after.len());
                (&after[..end], &after[end..])
            };
            let value = vars
                .get(name)
                .ok_or_else(|| format!("{s:?} uses ${name}, which no ARG defines"))?;
            out.push_str(value);
            rest = tail;
        }
        out.push_str(rest);
        Ok(out)
    }

    pub fn parse(text: &str) -> Result<Dockerfile, String> {
        let mut args = BTreeMap::new();
        let mut stages: Vec<Stage> = Vec::new();
        for ins in instructions(text)? {
            match (ins.keyword.as_str(), stages.last_mut()) {
                ("FROM", _) => {
                    let (_flags, rest) = flags(&ins.args);
                    let words: Vec<&str> = rest.split_whitespace().collect();
                    let (image, name) = match words.as_slice() {
                        [image] => (*image, None),
                        [image, as_, name] if as_.eq_ignore_ascii_case("as") => {
                            (*image, Some(name.to_string()))
                        }
                        _ => return Err(format!("line {}: bad FROM {:?}", ins.line, ins.args)),
                    };
                    stages.push(Stage {
                        base: substitute(image, &args)?,
                        name,
                        instructions: Vec::new(),
                    });
                }
                ("ARG", None) => {
                    let (name, default) = ins.args.split_once('=').unwrap_or((&ins.args, ""));
                    args.insert(name.trim().to_string(), default.trim().to_string());
                }
                (_, None) => {
                    return Err(format!(
                        "line {}: {} before the first FROM",
                        ins.line, ins.keyword
                    ))
                }
                (_, Some(stage)) => stage.instructions.push(ins),
            }
        }
        if stages.is_empty() {
            return Err("no FROM".into());
        }
        Ok(Dockerfile { args, stages })
    }

    /// Leading `--name=value` flags, and the rest of the arguments.
    pub fn flags(args: &str) -> (BTreeMap<String, String>, &str) {
        let mut out = BTreeMap::new();
        let mut rest = args.trim_start();
        while rest.starts_with("--") {
            let end = rest.find(char::is_whitespace).unwrap_or(rest.len());
            let (name, value) = rest[2..end].split_once('=').unwrap_or((&rest[2..end], ""));
            out.insert(name.to_string(), value.to_string());
            rest = rest[end..].trim_start();
        }
        (out, rest)
    }

    /// The JSON array of the exec form, or None for the shell form.
    pub fn exec_form(args: &str) -> Option<Vec<String>> {
        let args = args.trim();
        if !args.starts_with('[') {
            return None;
        }
        serde_json::from_str(args).ok()
    }

    /// A shell command line split into simple commands at `&&`, `||`, `;`,
    /// `|` and newlines outside quotes, each split into words with quotes
    /// removed; `>` and `<` become words of their own.
    pub fn simple_commands(script: &str) -> Vec<Vec<String>> {
        let mut commands = Vec::new();
        let mut words: Vec<String> = Vec::new();
        let mut word: Option<String> = None;
        let mut chars = script.chars().peekable();
        let end_word = |word: &mut Option<String>, words: &mut Vec<String>| {
            if let Some(w) = word.take() {
                words.push(w);
            }
        };
        while let Some(c) = chars.next() {
            match c {
                '\'' => {
                    let w = word.get_or_insert_with(String::new);
                    for c in chars.by_ref() {
                        if c == '\'' {
                            break;
                        }
                        w.push(c);
                    }
                }
                '"' => {
                    let w = word.get_or_insert_with(String::new);
                    while let Some(c) = chars.next() {
                        match c {
                            '"' => break,
                            '\\' => {
                                if let Some(n) = chars.next() {
                                    w.push(n)
                                }
                            }
                            c => w.push(c),
                        }
                    }
                }
                '\\' => {
                    if let Some(n) = chars.next() {
                        word.get_or_insert_with(String::new).push(n)
                    }
                }
                '&' | '|' | ';' | '\n' => {
                    if matches!(c, '&' | '|') && chars.peek() == Some(&c) {
                        chars.next();
                    }
                    end_word(&mut word, &mut words);
                    if !words.is_empty() {
                        commands.push(std::mem::take(&mut words));
                    }
                }
                '>' | '<' => {
                    end_word(&mut word, &mut words);
                    words.push(c.to_string());
                }
                // A comment runs to the end of the line.
                '#' if word.is_none() => {
                    while chars.peek().is_some_and(|&c| c != '\n') {
                        chars.next();
                    }
                }
                c if c.is_whitespace() => end_word(&mut word, &mut words),
                c => word.get_or_insert_with(String::new).push(c),
            }
        }
        end_word(&mut word, &mut words);
        if !words.is_empty() {
            commands.push(words);
        }
        commands
    }
}

#[test]
fn dockerfile_parser_handles_continuations_comments_and_stages() {
    let text = "# syntax=docker/dockerfile:1\nARG V=1.2\nARG D=deb\n\
                FROM img:${V}-$D AS one\n\
                RUN a \\\n  # dropped\n  && b\n\
                from other\nCOPY --from=one /x /y\n";
    let df = dockerfile::parse(text).unwrap();
    assert_eq!(df.stages.len(), 2);
    assert_eq!(df.stages[0].base, "img:1.2-deb");
    assert_eq!(df.stages[0].name.as_deref(), Some("one"));
    let run = &df.stages[0].instructions[0];
    assert_eq!(
        (run.keyword.as_str(), run.args.as_str()),
        ("RUN", "a   && b")
    );
    assert_eq!(run.line, 5);
    let copy = &df.stages[1].instructions[0];
    let (flags, rest) = dockerfile::flags(&copy.args);
    assert_eq!(flags.get("from").map(String::as_str), Some("one"));
    assert_eq!(rest, "/x /y");
    assert!(dockerfile::parse("FROM a\nRUN x \\\n").is_err());
    assert!(dockerfile::parse("FROM a\nRUNN x\n").is_err());
    assert!(dockerfile::parse("FROM a:$NOPE\n").is_err());
    assert!(dockerfile::parse("RUN x\nFROM a\n").is_err());
    assert_eq!(
        dockerfile::simple_commands("# it's\nx a#b # c\n"),
        vec![vec!["x", "a#b"]]
    );
    assert_eq!(
        dockerfile::simple_commands("mkdir -p s && echo 'fn main() {}' > s/m.rs; x \"a b\"|y"),
        vec![
            vec!["mkdir", "-p", "s"],
            vec!["echo", "fn main() {}", ">", "s/m.rs"],
            vec!["x", "a b"],
            vec!["y"],
        ]
    );
}

fn load_dockerfile() -> dockerfile::Dockerfile {
    dockerfile::parse(&read(&repo().join("Dockerfile")))
        .unwrap_or_else(|e| panic!("Dockerfile: {e}"))
}

fn final_stage(df: &dockerfile::Dockerfile) -> &dockerfile::Stage {
    df.stages.last().unwrap()
}

/// The arguments of every `keyword` instruction of `stage`.
fn all<'a>(stage: &'a dockerfile::Stage, keyword: &str) -> Vec<&'a str> {
    stage
        .instructions
        .iter()
        .filter(|i| i.keyword == keyword)
        .map(|i| i.args.as_str())
        .collect()
}

/// The exec-form argument vector of the stage's last `keyword`.
fn exec_of(stage: &dockerfile::Stage, keyword: &str) -> Vec<String> {
    let args = *all(stage, keyword)
        .last()
        .unwrap_or_else(|| panic!("the final stage has no {keyword}"));
    dockerfile::exec_form(args)
        .unwrap_or_else(|| panic!("{keyword} must use the exec form (a JSON array): {args}"))
}

/// (sources, destination) of a COPY, and its flags.
fn copy_parts(args: &str) -> (BTreeMap<String, String>, Vec<String>, String) {
    let (flags, rest) = dockerfile::flags(args);
    let mut words = dockerfile::exec_form(rest)
        .unwrap_or_else(|| rest.split_whitespace().map(String::from).collect());
    let dest = words.pop().expect("COPY has a destination");
    assert!(!words.is_empty(), "COPY {args} has no source");
    (flags, words, dest)
}

// ---------------------------------------------------------------------------
// .dockerignore

struct DockerIgnore {
    /// (excludes, pattern components), in file order: the last match wins.
    rules: Vec<(bool, Vec<String>)>,
}

impl DockerIgnore {
    fn parse(text: &str) -> DockerIgnore {
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

    fn load() -> DockerIgnore {
        DockerIgnore::parse(&read(&repo().join(".dockerignore")))
    }

    /// Whether the context path `rel` is left out of the build context: a
    /// rule matching the path or one of its parent directories applies.
    fn excludes(&self, rel: &Path) -> bool {
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
fn match_parts(pattern: &[String], parts: &[String]) -> bool {
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
fn glob(p: &[u8], s: &[u8]) -> bool {
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

// ---------------------------------------------------------------------------
// The Dockerfile

#[test]
fn dockerfile_final_stage_runs_as_non_root_and_exposes_the_ports() {
    let df = load_dockerfile();
    assert!(df.stages.len() >= 2, "a multi-stage build: {:?}", df.stages);
    let names: Vec<_> = df.stages.iter().filter_map(|s| s.name.as_deref()).collect();
    let last = final_stage(&df);

    // The runtime image copies the binary from a build stage, and nothing
    // else from one.
    let from_copies: Vec<_> = all(last, "COPY")
        .into_iter()
        .map(copy_parts)
        .filter(|(flags, _, _)| flags.contains_key("from"))
        .collect();
    assert_eq!(from_copies.len(), 1, "{from_copies:?}");
    let (flags, _, bin_dest) = &from_copies[0];
    assert!(
        names.contains(&flags["from"].as_str()),
        "--from={} names no stage",
        flags["from"]
    );

    let user = *all(last, "USER").last().expect("the final stage sets USER");
    let uid = user.split(':').next().unwrap();
    let uid: u32 = uid
        .parse()
        .unwrap_or_else(|_| panic!("USER {user}: numeric, so that runAsNonRoot can verify it"));
    assert_ne!(uid, 0, "USER {user} is root");
    let gid = user.split(':').nth(1).map(|g| g.parse::<u32>().unwrap());
    assert_ne!(gid, Some(0), "USER {user} has group root");

    let exposed: BTreeSet<String> = all(last, "EXPOSE")
        .iter()
        .flat_map(|a| a.split_whitespace())
        .map(|p| {
            if p.contains('/') {
                p.to_string()
            } else {
                format!("{p}/tcp")
            }
        })
        .collect();
    let want: BTreeSet<String> = [
        format!("{}/tcp", metrics_port()),
        format!("{}/tcp", responder_port()),
        format!("{}/udp", responder_port()),
    ]
    .into();
    assert_eq!(exposed, want);

    // ENTRYPOINT is the copied binary and CMD runs the service on the baked
    // in default config, which is config/pathprobe.yml.
    let entrypoint = exec_of(last, "ENTRYPOINT");
    assert_eq!(entrypoint, vec![bin_dest.clone()]);
    let cmd = exec_of(last, "CMD");
    let flags = serve_flags(&cmd);
    let config = flag(&flags, "config.file").expect("CMD names the config file");
    let baked: Vec<_> = all(last, "COPY")
        .into_iter()
        .map(copy_parts)
        .filter(|(_, _, dest)| dest == config)
        .collect();
    assert_eq!(baked.len(), 1, "one COPY puts {config} in place");
    assert_eq!(baked[0].1, vec!["config/pathprobe.yml".to_string()]);
    assert_eq!(
        read(&repo().join("config/pathprobe.yml")),
        pathprobe::config::DEFAULT_CONFIG,
        "the baked-in file is the binary's embedded default"
    );
    check_serve_command(&cmd, "Dockerfile CMD");
}

#[test]
fn dockerfile_copies_only_paths_in_the_build_context() {
    let df = load_dockerfile();
    let ignore = DockerIgnore::load();
    let mut copied = 0;
    for stage in &df.stages {
        for args in all(stage, "COPY").into_iter().chain(all(stage, "ADD")) {
            let (flags, sources, _) = copy_parts(args);
            if flags.contains_key("from") {
                continue;
            }
            for src in sources {
                assert!(
                    !src.contains(['*', '?', '[']) && !src.contains("://"),
                    "COPY {src}: plain paths only, so that they can be checked"
                );
                let rel = normalize(Path::new(&src));
                assert!(repo().join(&rel).exists(), "COPY {src}: no such path");
                assert!(
                    !ignore.excludes(&rel),
                    "COPY {src}: .dockerignore leaves it out of the context"
                );
                copied += 1;
            }
        }
    }
    assert!(
        copied >= 4,
        "Cargo.toml, Cargo.lock, src and config at least"
    );
    // The context stays small: none of the large or irrelevant trees.
    for heavy in ["target", ".git", "tests", "deploy"] {
        assert!(
            ignore.excludes(Path::new(heavy)),
            "{heavy} is in the build context"
        );
    }
}

/// The `cargo ...` commands of every RUN.
fn cargo_commands(df: &dockerfile::Dockerfile) -> Vec<Vec<String>> {
    df.stages
        .iter()
        .flat_map(|s| all(s, "RUN"))
        .flat_map(|args| {
            assert!(
                dockerfile::exec_form(args).is_none(),
                "RUN {args}: shell form expected"
            );
            dockerfile::simple_commands(args)
        })
        .filter(|c| c[0] == "cargo")
        .collect()
}

#[test]
fn dockerfile_builds_with_the_cargo_command_ci_uses() {
    let df = load_dockerfile();
    let cargo = cargo_commands(&df);
    // Dependencies first, then the crate: two builds, both the release
    // profile with the committed lock file, as .ci/run tests with.
    assert_eq!(cargo.len(), 2, "{cargo:?}");
    for c in &cargo {
        assert_eq!(c.join(" "), "cargo build --release --locked");
    }
    let ci = read(&repo().join(".ci/run"));
    let ci_cargo: Vec<_> = dockerfile::simple_commands(&ci)
        .into_iter()
        .filter(|c| c[0] == "cargo")
        .collect();
    assert!(!ci_cargo.is_empty(), ".ci/run runs cargo");
    for c in &ci_cargo {
        assert!(
            c.iter().any(|w| w == "--release") && c.iter().any(|w| w == "--locked"),
            ".ci/run: {c:?} differs in profile or lock from the image build"
        );
    }
}

/// (major, minor, patch) of "1.89" or "1.89.0".
fn rust_version(s: &str) -> (u32, u32, u32) {
    let mut parts = s
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or_else(|_| panic!("version {s:?}")));
    (
        parts.next().unwrap(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

fn cargo_host() -> String {
    let out = run_bounded(
        Command::new(env!("CARGO")).arg("-vV"),
        Duration::from_secs(30),
    );
    text(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: "))
        .expect("cargo -vV names the host")
        .trim()
        .to_string()
}

#[test]
fn dockerfile_rust_is_new_enough_for_the_locked_dependencies() {
    let df = load_dockerfile();
    let image_rust = df.args.get("RUST_VERSION").expect("ARG RUST_VERSION");
    let build = df
        .stages
        .iter()
        .find(|s| s.base.starts_with("rust:"))
        .expect("a rust:* build stage");
    assert!(
        build.base.starts_with(&format!("rust:{image_rust}")),
        "{}",
        build.base
    );

    let out = run_bounded(
        Command::new(env!("CARGO"))
            .current_dir(repo())
            .args(["metadata", "--locked", "--offline", "--format-version", "1"])
            .args(["--filter-platform", &cargo_host()]),
        Duration::from_secs(60),
    );
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        text(&out.stderr)
    );
    let meta: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let packages: BTreeMap<&str, &serde_json::Value> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p))
        .collect();
    let nodes: BTreeMap<&str, &serde_json::Value> = meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| (n["id"].as_str().unwrap(), n))
        .collect();
    // What `cargo build` compiles: the crate and its normal and build
    // dependencies, transitively; dev-dependencies are not built.
    let root = meta["resolve"]["root"].as_str().unwrap();
    let mut seen = BTreeSet::new();
    let mut todo = vec![root];
    while let Some(id) = todo.pop() {
        if !seen.insert(id) {
            continue;
        }
        for dep in nodes[id]["deps"].as_array().unwrap() {
            let dev_only = dep["dep_kinds"]
                .as_array()
                .unwrap()
                .iter()
                .all(|k| k["kind"].as_str() == Some("dev"));
            if !dev_only {
                todo.push(dep["pkg"].as_str().unwrap());
            }
        }
    }
    let (floor, who) = seen
        .iter()
        .filter_map(|id| {
            let p = packages[id];
            Some((
                rust_version(p["rust_version"].as_str()?),
                p["name"].as_str().unwrap(),
            ))
        })
        .max()
        .expect("some package states a rust-version");
    assert!(
        rust_version(image_rust) >= floor,
        "the image's Rust {image_rust} is older than {floor:?}, which {who} requires"
    );
}

#[test]
fn dockerfile_runtime_and_build_images_share_a_debian_release() {
    let df = load_dockerfile();
    const RELEASES: &[&str] = &["bullseye", "bookworm", "trixie", "forky"];
    let release = |image: &str| -> Vec<&str> {
        RELEASES
            .iter()
            .copied()
            .filter(|r| image.contains(r))
            .collect()
    };
    let build = df
        .stages
        .iter()
        .find(|s| s.base.starts_with("rust:"))
        .unwrap();
    let runtime = final_stage(&df);
    assert!(runtime.base.starts_with("debian:"), "{}", runtime.base);
    assert_eq!(release(&build.base).len(), 1, "{}", build.base);
    assert_eq!(
        release(&build.base),
        release(&runtime.base),
        "glibc of build and runtime differ"
    );
}

/// Copies `src` (relative to the repository) to `dest`, leaving out what
/// .dockerignore excludes; a directory's contents go into `dest`.
fn copy_context(src: &Path, dest: &Path, ignore: &DockerIgnore) {
    if ignore.excludes(src) {
        return;
    }
    let from = repo().join(src);
    if from.is_dir() {
        std::fs::create_dir_all(dest).unwrap();
        for entry in std::fs::read_dir(&from).unwrap() {
            let name = entry.unwrap().file_name();
            copy_context(&src.join(&name), &dest.join(&name), ignore);
        }
    } else {
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(&from, dest).unwrap();
    }
}

/// Commands a replayed RUN may use: they touch only the working directory.
const REPLAYABLE: &[&str] = &[
    "mkdir", "echo", "touch", "rm", "cargo", "cp", "mv", "test", "true",
];

/// Stands in for cargo in the replay: checks the arguments, has the real
/// cargo load the manifest and lock file as they are at this point of the
/// build (`fetch` is as strict as `build` about declared targets, where
/// `metadata` quietly drops a missing bench; `metadata` gives the target
/// list, saved with the file list), and puts the binary these tests run
/// where the build would leave it.
const CARGO_SHIM: &str = r#"#!/bin/sh
echo "$*" >> "$SHIM_DIR/log"
n=$(wc -l < "$SHIM_DIR/log")
[ "$*" = "build --release --locked" ] || { echo "unexpected: cargo $*" >&2; exit 97; }
"$REAL_CARGO" fetch --locked --offline --target "$CARGO_HOST" || exit 98
"$REAL_CARGO" metadata --locked --offline --format-version 1 \
    --filter-platform "$CARGO_HOST" > "$SHIM_DIR/metadata.$n" || exit 98
find . -path ./target -prune -o -type f -print > "$SHIM_DIR/files.$n"
mkdir -p target/release && cp "$PATHPROBE_BIN" target/release/pathprobe
"#;

#[test]
fn dockerfile_build_stage_replays() {
    use std::os::unix::fs::PermissionsExt;

    let df = load_dockerfile();
    let ignore = DockerIgnore::load();
    let last = final_stage(&df);
    let (flags, from_sources, _) = all(last, "COPY")
        .into_iter()
        .map(copy_parts)
        .find(|(flags, _, _)| flags.contains_key("from"))
        .expect("the final stage copies from a build stage");
    let build = df
        .stages
        .iter()
        .find(|s| s.name.as_deref() == Some(flags["from"].as_str()))
        .unwrap();

    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("root");
    let shim = tmp.path().join("shim");
    std::fs::create_dir_all(&shim).unwrap();
    std::fs::write(shim.join("cargo"), CARGO_SHIM).unwrap();
    std::fs::set_permissions(shim.join("cargo"), std::fs::Permissions::from_mode(0o755)).unwrap();
    let in_root = |p: &str| root.join(p.trim_start_matches('/'));
    let mut workdir = root.clone();
    std::fs::create_dir_all(&workdir).unwrap();
    let host = cargo_host();
    for ins in &build.instructions {
        match ins.keyword.as_str() {
            "WORKDIR" => {
                workdir = if ins.args.starts_with('/') {
                    in_root(&ins.args)
                } else {
                    workdir.join(&ins.args)
                };
                std::fs::create_dir_all(&workdir).unwrap();
            }
            "COPY" => {
                let (_, sources, dest) = copy_parts(&ins.args);
                let dest_path = if dest.starts_with('/') {
                    in_root(&dest)
                } else {
                    workdir.join(&dest)
                };
                let into_dir = dest.ends_with('/') || sources.len() > 1 || dest == ".";
                for src in &sources {
                    let rel = normalize(Path::new(src));
                    let target = if into_dir && repo().join(&rel).is_file() {
                        dest_path.join(rel.file_name().unwrap())
                    } else {
                        dest_path.clone()
                    };
                    copy_context(&rel, &target, &ignore);
                }
            }
            "RUN" => {
                for c in dockerfile::simple_commands(&ins.args) {
                    assert!(
                        REPLAYABLE.contains(&c[0].as_str()) || c[0].starts_with("./target/"),
                        "line {}: {:?} cannot be replayed outside a container",
                        ins.line,
                        c[0]
                    );
                    for w in &c[1..] {
                        assert!(
                            !w.starts_with('/') && !w.contains(".."),
                            "line {}: {w:?} reaches outside the working directory",
                            ins.line
                        );
                    }
                }
                let out = run_bounded(
                    Command::new("sh")
                        .args(["-c", &ins.args])
                        .current_dir(&workdir)
                        .env(
                            "PATH",
                            format!(
                                "{}:{}",
                                shim.display(),
                                std::env::var("PATH").unwrap_or_default()
                            ),
                        )
                        .env("SHIM_DIR", &shim)
                        .env("REAL_CARGO", env!("CARGO"))
                        .env("CARGO_HOST", &host)
                        .env("PATHPROBE_BIN", BIN)
                        .env_remove("CARGO_TARGET_DIR"),
                    Duration::from_secs(120),
                );
                assert!(
                    out.status.success(),
                    "line {}: RUN failed: {}{}",
                    ins.line,
                    text(&out.stdout),
                    text(&out.stderr)
                );
            }
            "ARG" | "ENV" | "LABEL" => {}
            other => panic!("line {}: {other} is not replayed", ins.line),
        }
    }

    // Each cargo build saw a manifest whose every target had its source
    // file in place: the stand-ins in the dependency layer, the real
    // sources later.
    let workdir = workdir.canonicalize().unwrap();
    let log = read(&shim.join("log"));
    assert_eq!(log.lines().count(), 2, "{log}");
    for n in 1..=2 {
        let meta: serde_json::Value =
            serde_json::from_str(&read(&shim.join(format!("metadata.{n}")))).unwrap();
        let files: BTreeSet<PathBuf> = read(&shim.join(format!("files.{n}")))
            .lines()
            .map(|l| workdir.join(normalize(Path::new(l))))
            .collect();
        let root_id = meta["resolve"]["root"].as_str().unwrap();
        let package = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == root_id)
            .unwrap();
        for target in package["targets"].as_array().unwrap() {
            let src = PathBuf::from(target["src_path"].as_str().unwrap());
            assert!(
                files.contains(&src),
                "build {n}: target {} has no source {}",
                target["name"],
                src.display()
            );
        }
    }

    // Files the sources embed are in the build context too.
    let mut stack = vec![workdir.join("src")];
    let mut embedded = 0;
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
                continue;
            }
            let source = read(&path);
            for macro_ in ["include_str!(\"", "include_bytes!(\""] {
                for (i, _) in source.match_indices(macro_) {
                    let rest = &source[i + macro_.len()..];
                    let file = &rest[..rest.find('"').unwrap()];
                    let target = path.parent().unwrap().join(file);
                    assert!(
                        target.exists(),
                        "{} embeds {file}, which the image build lacks",
                        path.display()
                    );
                    embedded += 1;
                }
            }
        }
    }
    assert!(embedded >= 1, "the default config is embedded");

    // What the final stage takes from the build stage is there.
    for src in from_sources {
        assert!(in_root(&src).is_file(), "COPY --from: {src} was not built");
    }
}

// ---------------------------------------------------------------------------
// `pathprobe serve` command lines

/// `serve` and its flags as (name, value) pairs, `--name=value` and
/// `--name value` alike.
fn serve_flags(args: &[String]) -> Vec<(String, String)> {
    assert_eq!(args.first().map(String::as_str), Some("serve"), "{args:?}");
    let mut out = Vec::new();
    let mut it = args[1..].iter();
    while let Some(a) = it.next() {
        let name = a
            .strip_prefix("--")
            .unwrap_or_else(|| panic!("{a:?} in {args:?} is not a --flag"));
        match name.split_once('=') {
            Some((k, v)) => out.push((k.to_string(), v.to_string())),
            None => {
                let v = it
                    .next()
                    .unwrap_or_else(|| panic!("--{name} has no value in {args:?}"));
                out.push((name.to_string(), v.clone()));
            }
        }
    }
    out
}

fn flag<'a>(flags: &'a [(String, String)], name: &str) -> Option<&'a str> {
    flags
        .iter()
        .rev()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

/// Every flag of a deployment's `serve` command line exists, with a value
/// it accepts; then the binary starts with them, config file and listen
/// address swapped for a quiet config and port 0.
fn check_serve_command(args: &[String], origin: &str) {
    let out = run_bounded(
        Command::new(BIN).args(["serve", "--help"]),
        Duration::from_secs(10),
    );
    assert!(out.status.success());
    let help = text(&out.stdout);
    let flags = serve_flags(args);
    for (name, value) in &flags {
        let needle = format!("--{name} <");
        let at = help
            .find(&needle)
            .unwrap_or_else(|| panic!("{origin}: serve has no --{name}:\n{help}"));
        // The flag's entry runs to the next line that starts another flag.
        let rest = &help[at + needle.len()..];
        let end = rest
            .match_indices('\n')
            .map(|(i, _)| i)
            .find(|&i| rest[i + 1..].trim_start().starts_with('-'))
            .unwrap_or(rest.len());
        if let Some(list) = rest[..end].split("[possible values: ").nth(1) {
            let list = &list[..list.find(']').unwrap()];
            assert!(
                list.split(", ").any(|v| v == value),
                "{origin}: --{name}={value} is not one of {list}"
            );
        }
    }
    if let Some(addr) = flag(&flags, "web.listen-address") {
        assert!(
            addr.parse::<SocketAddr>().is_ok(),
            "{origin}: bad listen address {addr}"
        );
    }
    if let Some(file) = flag(&flags, "config.file") {
        assert!(
            file.starts_with('/'),
            "{origin}: the config path {file} should be absolute"
        );
    }
    let keep: Vec<(String, String)> = flags
        .into_iter()
        .filter(|(k, _)| k != "config.file" && k != "web.listen-address")
        .collect();
    let serve = Serve::start(&keep);
    assert_eq!(http_get(serve.http, "/-/healthy").0, 200, "{origin}");
}

/// A `pathprobe serve` with no responder and no probes, on port 0; killed
/// on drop.
struct Serve {
    child: Child,
    http: SocketAddr,
    _dir: tempfile::TempDir,
}

impl Serve {
    fn start(extra: &[(String, String)]) -> Serve {
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("pathprobe.yml");
        std::fs::write(&config, "responder:\n  enabled: false\n").unwrap();
        let mut child = Command::new(BIN)
            .arg("serve")
            .arg(format!("--config.file={}", config.display()))
            .arg("--web.listen-address=127.0.0.1:0")
            .args(extra.iter().map(|(k, v)| format!("--{k}={v}")))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = BufReader::new(child.stderr.take().unwrap());
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                let addr = line
                    .split("serving metrics on http://")
                    .nth(1)
                    .and_then(|r| r.split('/').next())
                    .map(str::to_string);
                if tx.send((line, addr)).is_err() {
                    break;
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(15);
        let mut log = String::new();
        let http = loop {
            match rx.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok((_, Some(addr))) => break addr.parse().unwrap(),
                Ok((line, None)) => log.push_str(&(line + "\n")),
                Err(_) => {
                    let _ = child.kill();
                    let _ = child.wait();
                    panic!("serve {extra:?} did not start:\n{log}");
                }
            }
        };
        Serve {
            child,
            http,
            _dir: dir,
        }
    }
}

impl Drop for Serve {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// (status, body) of a GET.
fn http_get(addr: SocketAddr, path: &str) -> (u16, String) {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(5)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut out = String::new();
    s.read_to_string(&mut out).unwrap();
    let status = out
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    (status, out)
}

#[test]
fn dockerfile_healthcheck_passes_on_a_live_service_and_fails_otherwise() {
    let df = load_dockerfile();
    let last = final_stage(&df);
    let args = *all(last, "HEALTHCHECK").last().expect("a HEALTHCHECK");
    let (flags, rest) = dockerfile::flags(args);
    let rest = rest.strip_prefix("CMD").expect("HEALTHCHECK CMD").trim();
    let cmd = dockerfile::exec_form(rest).expect("HEALTHCHECK CMD in exec form");
    let timeout = flags
        .get("timeout")
        .map(|t| pathprobe::units::parse_duration(t).unwrap());
    let timeout = timeout.expect("HEALTHCHECK --timeout");
    assert!(cmd.join(" ").contains("/-/healthy"), "{cmd:?}");
    // The check dials the metrics port on loopback; here that port is
    // whatever the test's listener got.
    let dial = format!("/dev/tcp/127.0.0.1/{}", metrics_port());
    assert!(
        cmd.iter().any(|a| a.contains(&dial)),
        "{cmd:?} dials {dial}"
    );
    let run = |port: u16| {
        let cmd: Vec<String> = cmd
            .iter()
            .map(|a| a.replace(&dial, &format!("/dev/tcp/127.0.0.1/{port}")))
            .collect();
        run_bounded(
            Command::new(&cmd[0]).args(&cmd[1..]),
            timeout + Duration::from_secs(5),
        )
    };

    let serve = Serve::start(&[]);
    let out = run(serve.http.port());
    assert!(out.status.success(), "unhealthy: {}", text(&out.stderr));

    // A server that answers 503 fails the check, and the check asked for
    // /-/healthy.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut line = String::new();
        BufReader::new(s.try_clone().unwrap())
            .read_line(&mut line)
            .unwrap();
        s.write_all(b"HTTP/1.1 503 Service Unavailable\r\nContent-Length: 0\r\n\r\n")
            .unwrap();
        line
    });
    let out = run(port);
    assert!(!out.status.success(), "a 503 passed the health check");
    let request = server.join().unwrap();
    assert!(request.starts_with("GET /-/healthy "), "{request:?}");

    // Nothing listening fails it too.
    let closed = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    assert!(
        !run(closed).status.success(),
        "a closed port passed the health check"
    );
}

// ---------------------------------------------------------------------------
// YAML files

fn yaml_docs(path: &Path) -> Vec<Value> {
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

fn yaml(path: &Path) -> Value {
    let mut docs = yaml_docs(path);
    assert_eq!(docs.len(), 1, "{}: one document", path.display());
    docs.pop().unwrap()
}

fn s<'a>(v: &'a Value, what: &str) -> &'a str {
    v.as_str()
        .unwrap_or_else(|| panic!("{what}: expected a string, got {v:?}"))
}

fn seq<'a>(v: &'a Value, what: &str) -> &'a [Value] {
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

// ---------------------------------------------------------------------------
// Compose

struct Compose {
    doc: Value,
}

/// A short-syntax volume: (source, target).
fn volume_parts(v: &Value) -> (String, String) {
    let spec = s(v, "volume");
    let mut parts = spec.split(':');
    let src = parts.next().unwrap().to_string();
    let dst = parts
        .next()
        .unwrap_or_else(|| panic!("volume {spec} has no target"))
        .to_string();
    (src, dst)
}

fn is_bind(src: &str) -> bool {
    src.starts_with('.') || src.starts_with('/') || src.starts_with('~')
}

impl Compose {
    fn load() -> Compose {
        Compose {
            doc: yaml(&repo().join("deploy/docker-compose.yml")),
        }
    }

    fn services(&self) -> Vec<(&str, &Value)> {
        self.doc["services"]
            .as_mapping()
            .expect("services")
            .iter()
            .map(|(k, v)| (s(k, "service name"), v))
            .collect()
    }

    fn service(&self, name: &str) -> &Value {
        &self.doc["services"][name]
    }

    /// Services built from the repository's Dockerfile.
    fn pathprobe_services(&self) -> Vec<(&str, &Value)> {
        self.services()
            .into_iter()
            .filter(|(_, v)| {
                v["build"].is_mapping()
                    && normalize(
                        &Path::new("deploy").join(s(&v["build"]["context"], "build.context")),
                    ) == Path::new("")
            })
            .collect()
    }

    /// The repository path mounted at `target` in `service`.
    fn mount_source(&self, service: &str, target: &str) -> Option<PathBuf> {
        seq(&self.service(service)["volumes"], "volumes")
            .iter()
            .map(volume_parts)
            .find(|(src, dst)| dst == target && is_bind(src))
            .map(|(src, _)| normalize(&Path::new("deploy").join(src)))
    }

    /// The service whose image starts with `image`.
    fn by_image(&self, image: &str) -> &str {
        self.services()
            .into_iter()
            .find(|(_, v)| v["image"].as_str().is_some_and(|i| i.starts_with(image)))
            .unwrap_or_else(|| panic!("no {image} service"))
            .0
    }
}

#[test]
fn compose_names_only_paths_that_exist() {
    let compose = Compose::load();
    let volumes = compose.doc["volumes"]
        .as_mapping()
        .cloned()
        .unwrap_or_default();
    for (name, svc) in compose.services() {
        if svc["build"].is_mapping() {
            let context = Path::new("deploy").join(s(&svc["build"]["context"], "context"));
            let dockerfile = svc["build"]["dockerfile"].as_str().unwrap_or("Dockerfile");
            require(
                &context.join(dockerfile),
                &format!("compose service {name}"),
            );
        }
        for v in svc["volumes"].as_sequence().into_iter().flatten() {
            let (src, _) = volume_parts(v);
            if is_bind(&src) {
                require(
                    &Path::new("deploy").join(&src),
                    &format!("compose service {name}"),
                );
            } else {
                assert!(
                    volumes.contains_key(src.as_str()),
                    "{name}: volume {src} undeclared"
                );
            }
        }
    }
}

#[test]
fn compose_pathprobe_hosts_have_valid_configs_and_probe_each_other() {
    let compose = Compose::load();
    let df = load_dockerfile();
    let cmd = exec_of(final_stage(&df), "CMD");
    let config_path = flag(&serve_flags(&cmd), "config.file").unwrap().to_string();
    let hosts = compose.pathprobe_services();
    assert_eq!(hosts.len(), 2, "two pathprobe hosts");
    let mut configs = BTreeMap::new();
    for (name, svc) in &hosts {
        // The image's own command runs, so the mounted file replaces the
        // baked-in default.
        assert!(
            svc["command"].is_null() && svc["entrypoint"].is_null(),
            "{name}"
        );
        let src = compose
            .mount_source(name, &config_path)
            .unwrap_or_else(|| panic!("{name} mounts no config at {config_path}"));
        let config = Config::load(&repo().join(&src)).unwrap_or_else(|e| panic!("{e}"));
        assert!(config.responder.enabled, "{name} must answer its peer");
        // Port mappings publish the metrics port.
        for p in seq(&svc["ports"], "ports") {
            let container = s(p, "port").rsplit(':').next().unwrap();
            assert_eq!(container, metrics_port().to_string(), "{name}");
        }
        configs.insert(name.to_string(), config);
    }
    for (name, config) in &configs {
        for (peer, peer_config) in configs.iter().filter(|(p, _)| *p != name) {
            let probes_peer = config.targets.iter().any(|t| {
                let modules_remote = t.modules.iter().all(|m| !config.modules[m].is_loopback());
                matches!(t.endpoint(), Some(Ok(e)) if e.host == *peer && e.port == peer_config.responder.listen.port())
                    && modules_remote
            });
            assert!(probes_peer, "{name} does not probe {peer}");
        }
    }
}

#[test]
fn compose_prometheus_scrapes_both_hosts_and_loads_the_rules() {
    let compose = Compose::load();
    let prom = compose.by_image("prom/prometheus");
    let args: Vec<&str> = seq(&compose.service(prom)["command"], "command")
        .iter()
        .map(|a| s(a, "arg"))
        .collect();
    let config_in = args
        .iter()
        .find_map(|a| a.strip_prefix("--config.file="))
        .expect("--config.file");
    let config_src = compose
        .mount_source(prom, config_in)
        .expect("prometheus.yml mounted");
    let config = yaml(&repo().join(&config_src));

    let scrape = seq(&config["scrape_configs"], "scrape_configs");
    let job = scrape
        .iter()
        .find(|j| j["job_name"].as_str() == Some("pathprobe"))
        .expect("job pathprobe, the one the alerts' `up` watches");
    let targets: BTreeSet<&str> = seq(&job["static_configs"], "static_configs")
        .iter()
        .flat_map(|c| seq(&c["targets"], "targets"))
        .map(|t| s(t, "target"))
        .collect();
    let want: BTreeSet<String> = compose
        .pathprobe_services()
        .iter()
        .map(|(n, _)| format!("{n}:{}", metrics_port()))
        .collect();
    assert_eq!(targets, want.iter().map(String::as_str).collect());

    // The rule globs, taken relative to the config file in the container,
    // cover the mounted config/alerts.yml.
    let config_dir = Path::new(config_in).parent().unwrap();
    let rule_mount = seq(&compose.service(prom)["volumes"], "volumes")
        .iter()
        .map(volume_parts)
        .find(|(src, _)| {
            normalize(&Path::new("deploy").join(src)) == Path::new("config/alerts.yml")
        })
        .expect("config/alerts.yml is mounted");
    let rule_target = Path::new(&rule_mount.1);
    let covered = seq(&config["rule_files"], "rule_files").iter().any(|g| {
        let pattern = config_dir.join(s(g, "rule_files"));
        let p: Vec<String> = pattern
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        let t: Vec<String> = rule_target
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        match_parts(&p, &t)
    });
    assert!(covered, "rule_files do not load {}", rule_target.display());

    // promtool agrees, on a copy laid out as in the container.
    let tmp = tempfile::tempdir().unwrap();
    let copy = tmp.path().join("prometheus.yml");
    std::fs::write(&copy, read(&repo().join(&config_src))).unwrap();
    let alerts = repo().join("config/alerts.yml");
    let have_rules = require(Path::new("config/alerts.yml"), "the compose Prometheus");
    if have_rules {
        let rel = rule_target.strip_prefix(config_dir).unwrap();
        std::fs::create_dir_all(tmp.path().join(rel).parent().unwrap()).unwrap();
        std::fs::copy(&alerts, tmp.path().join(rel)).unwrap();
    }
    let out = run_bounded(
        Command::new("promtool")
            .args(["check", "config"])
            .arg(&copy),
        Duration::from_secs(60),
    );
    let report = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "promtool check config: {report}");
    if have_rules {
        assert!(report.contains("SUCCESS: 1 rule files found"), "{report}");
    }
}

/// Every `datasource` reference in a dashboard names either a datasource
/// template variable or the provisioned uid.
fn check_dashboard_datasources(path: &Path, provisioned_uid: &str) {
    let dash: serde_json::Value =
        serde_json::from_str(&read(path)).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let variables: BTreeSet<String> = dash["templating"]["list"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["type"] == "datasource" && v["query"] == "prometheus")
        .map(|v| v["name"].as_str().unwrap().to_string())
        .collect();
    assert!(
        !variables.is_empty(),
        "{}: no prometheus datasource variable",
        path.display()
    );
    let mut refs = 0;
    let mut stack = vec![&dash];
    while let Some(v) = stack.pop() {
        match v {
            serde_json::Value::Object(m) => {
                if let Some(ds) = m.get("datasource") {
                    if ds["type"] == "prometheus" || ds.is_string() {
                        let uid = ds["uid"].as_str().or(ds.as_str()).unwrap_or_default();
                        let var = uid
                            .trim_start_matches('$')
                            .trim_start_matches('{')
                            .trim_end_matches('}');
                        assert!(
                            uid == provisioned_uid || (uid.starts_with('$') && variables.contains(var)),
                            "{}: datasource {uid:?} resolves under provisioning neither to a variable nor to uid {provisioned_uid:?}",
                            path.display()
                        );
                        refs += 1;
                    }
                }
                stack.extend(m.values());
            }
            serde_json::Value::Array(a) => stack.extend(a),
            _ => {}
        }
    }
    assert!(refs > 0, "{}: no panel names a datasource", path.display());
}

#[test]
fn compose_grafana_provisions_the_datasource_and_the_dashboards() {
    let compose = Compose::load();
    let grafana = compose.by_image("grafana/grafana");
    let prom = compose.by_image("prom/prometheus");
    let provisioning = compose
        .mount_source(grafana, "/etc/grafana/provisioning")
        .expect("provisioning mounted");

    let mut uids = Vec::new();
    for file in std::fs::read_dir(repo().join(&provisioning).join("datasources")).unwrap() {
        let doc = yaml(&file.unwrap().path());
        for ds in seq(&doc["datasources"], "datasources") {
            assert_eq!(s(&ds["type"], "type"), "prometheus");
            assert_eq!(s(&ds["url"], "url"), format!("http://{prom}:9090"));
            assert_eq!(
                ds["isDefault"].as_bool(),
                Some(true),
                "the default, so that a datasource variable starts on it"
            );
            uids.push(s(&ds["uid"], "uid").to_string());
        }
    }
    assert_eq!(uids.len(), 1, "{uids:?}");

    let mut providers = 0;
    for file in std::fs::read_dir(repo().join(&provisioning).join("dashboards")).unwrap() {
        let doc = yaml(&file.unwrap().path());
        for p in seq(&doc["providers"], "providers") {
            assert_eq!(s(&p["type"], "type"), "file");
            let path = s(&p["options"]["path"], "options.path");
            let src = compose
                .mount_source(grafana, path)
                .unwrap_or_else(|| panic!("nothing mounted at {path}"));
            assert_eq!(src, Path::new("dashboards"));
            providers += 1;
            if require(&src, "the Grafana dashboard provider") {
                for name in DASHBOARDS {
                    let file = src.join(name);
                    if require(&file, "the Grafana dashboard provider") {
                        check_dashboard_datasources(&repo().join(file), &uids[0]);
                    }
                }
            }
        }
    }
    assert_eq!(providers, 1);
}

// ---------------------------------------------------------------------------
// Kubernetes

fn kubernetes_objects() -> Vec<Value> {
    let dir = repo().join("deploy/kubernetes");
    let kustomization = yaml(&dir.join("kustomization.yaml"));
    let resources: Vec<&str> = seq(&kustomization["resources"], "resources")
        .iter()
        .map(|r| s(r, "resource"))
        .collect();
    // Every manifest in the directory is applied, and only those.
    let mut files: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".yaml") && n != "kustomization.yaml")
        .collect();
    files.sort();
    let mut listed: Vec<String> = resources.iter().map(|r| r.to_string()).collect();
    listed.sort();
    assert_eq!(listed, files);
    resources
        .iter()
        .flat_map(|r| yaml_docs(&dir.join(r)))
        .collect()
}

fn object<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let found: Vec<_> = objects
        .iter()
        .filter(|o| o["kind"].as_str() == Some(kind))
        .collect();
    assert_eq!(found.len(), 1, "one {kind}");
    found[0]
}

#[test]
fn kubernetes_daemonset_mesh_via_headless_service() {
    let objects = kubernetes_objects();
    let namespace = s(
        &object(&objects, "Namespace")["metadata"]["name"],
        "namespace",
    );
    for o in &objects {
        if o["kind"] != "Namespace" {
            assert_eq!(
                o["metadata"]["namespace"].as_str(),
                Some(namespace),
                "{:?}",
                o["metadata"]["name"]
            );
        }
    }
    let ds = object(&objects, "DaemonSet");
    let svc = object(&objects, "Service");
    let cm = object(&objects, "ConfigMap");
    let pod = &ds["spec"]["template"];
    let spec = &pod["spec"];
    let containers = seq(&spec["containers"], "containers");
    assert_eq!(containers.len(), 1);
    let c = &containers[0];

    // The command line, and the config file it names, from the ConfigMap.
    let args: Vec<String> = seq(&c["args"], "args")
        .iter()
        .map(|a| s(a, "arg").to_string())
        .collect();
    assert!(c["command"].is_null(), "the image's ENTRYPOINT runs");
    check_serve_command(&args, "DaemonSet args");
    let flags = serve_flags(&args);
    let config_file = Path::new(flag(&flags, "config.file").expect("--config.file"));
    let web_port = flag(&flags, "web.listen-address")
        .map_or(metrics_port(), |a| a.parse::<SocketAddr>().unwrap().port());
    let mount = seq(&c["volumeMounts"], "volumeMounts")
        .iter()
        .find(|m| Path::new(s(&m["mountPath"], "mountPath")) == config_file.parent().unwrap())
        .expect("the config file's directory is mounted");
    assert!(
        mount["subPath"].is_null(),
        "subPath mounts never see ConfigMap updates"
    );
    let volume = seq(&spec["volumes"], "volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the mounted volume");
    assert_eq!(volume["configMap"]["name"], cm["metadata"]["name"]);
    let key = config_file.file_name().unwrap().to_str().unwrap();
    let config_text = s(&cm["data"][key], "ConfigMap data");
    let config =
        Config::from_yaml(config_text, "ConfigMap pathprobe.yml").unwrap_or_else(|e| panic!("{e}"));

    // The image's user, not root.
    let df = load_dockerfile();
    let user = *all(final_stage(&df), "USER").last().unwrap();
    let uid: u64 = user.split(':').next().unwrap().parse().unwrap();
    assert_eq!(
        spec["securityContext"]["runAsNonRoot"].as_bool(),
        Some(true)
    );
    assert_eq!(spec["securityContext"]["runAsUser"].as_u64(), Some(uid));
    let sc = &c["securityContext"];
    assert_eq!(sc["allowPrivilegeEscalation"].as_bool(), Some(false));
    assert_eq!(sc["readOnlyRootFilesystem"].as_bool(), Some(true));
    assert_eq!(
        seq(&sc["capabilities"]["drop"], "drop"),
        &[Value::from("ALL")]
    );
    assert!(sc["capabilities"]["add"].is_null());

    // Container ports: what the image exposes, and what the config uses.
    let responder = config.responder.listen.port();
    let ports: BTreeMap<&str, (u64, &str)> = seq(&c["ports"], "ports")
        .iter()
        .map(|p| {
            (
                s(&p["name"], "port name"),
                (
                    p["containerPort"].as_u64().unwrap(),
                    p["protocol"].as_str().unwrap_or("TCP"),
                ),
            )
        })
        .collect();
    let set: BTreeSet<(u64, &str)> = ports.values().copied().collect();
    let want: BTreeSet<(u64, &str)> = [
        (responder as u64, "TCP"),
        (responder as u64, "UDP"),
        (web_port as u64, "TCP"),
    ]
    .into();
    assert_eq!(set, want);
    for (probe, path) in [
        ("livenessProbe", "/-/healthy"),
        ("readinessProbe", "/-/ready"),
    ] {
        let get = &c[probe]["httpGet"];
        assert_eq!(s(&get["path"], probe), path);
        let port = get["port"]
            .as_u64()
            .unwrap_or_else(|| ports[s(&get["port"], probe)].0);
        assert_eq!(port, web_port as u64, "{probe}");
    }

    // The headless Service selects the pods and is the DNS name the
    // config's discovery resolves; mesh mode skips the pod itself.
    assert_eq!(s(&svc["spec"]["clusterIP"], "clusterIP"), "None");
    let labels = pod["metadata"]["labels"].as_mapping().unwrap();
    for (k, v) in svc["spec"]["selector"].as_mapping().unwrap() {
        assert_eq!(labels.get(k), Some(v), "the Service selects the pods");
    }
    let svc_ports: BTreeSet<(u64, &str)> = seq(&svc["spec"]["ports"], "ports")
        .iter()
        .map(|p| {
            (
                p["port"].as_u64().unwrap(),
                p["protocol"].as_str().unwrap_or("TCP"),
            )
        })
        .collect();
    assert!(
        svc_ports.contains(&(responder as u64, "TCP"))
            && svc_ports.contains(&(responder as u64, "UDP"))
    );
    assert!(
        config.discovery.mesh,
        "mesh mode, so pods do not probe themselves"
    );
    let fqdn = format!(
        "{}.{namespace}.svc.cluster.local",
        s(&svc["metadata"]["name"], "name")
    );
    let dns = config
        .discovery
        .dns
        .iter()
        .find(|d| d.names.iter().any(|n| n.trim_end_matches('.') == fqdn))
        .unwrap_or_else(|| panic!("discovery.dns resolves {fqdn}"));
    assert_ne!(
        dns.record_type,
        pathprobe::config::DnsRecordType::Srv,
        "a headless Service gives A/AAAA"
    );
    assert_eq!(dns.port(), responder, "peers answer on the responder port");
}

// ---------------------------------------------------------------------------
// systemd

/// The unit's sections as (key, value) lists, in order; `\` continues a
/// line, `#` and `;` start comments.
fn parse_unit(text: &str) -> BTreeMap<String, Vec<(String, String)>> {
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    let mut section = None;
    let mut pending = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if pending.is_empty() && (line.is_empty() || line.starts_with('#') || line.starts_with(';'))
        {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            pending.push_str(head);
            pending.push(' ');
            continue;
        }
        let line = std::mem::take(&mut pending) + line;
        if let Some(name) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
            section = Some(name.to_string());
            continue;
        }
        let (k, v) = line
            .split_once('=')
            .unwrap_or_else(|| panic!("not key=value: {line}"));
        let section = section
            .clone()
            .unwrap_or_else(|| panic!("{line} outside a section"));
        out.entry(section)
            .or_default()
            .push((k.trim().to_string(), v.trim().to_string()));
    }
    out
}

#[test]
fn systemd_unit_is_hardened_and_its_command_line_runs() {
    let unit = parse_unit(&read(&repo().join("deploy/systemd/pathprobe.service")));
    let service = &unit["Service"];
    let last = |k: &str| {
        service
            .iter()
            .rev()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };

    // A misspelt directive is only a warning to systemd, and the hardening
    // silently goes; every key must be one systemd knows.
    const KNOWN: &[&str] = &[
        "Type",
        "ExecStart",
        "ExecReload",
        "Restart",
        "RestartSec",
        "KillSignal",
        "TimeoutStopSec",
        "ConfigurationDirectory",
        "DynamicUser",
        "NoNewPrivileges",
        "CapabilityBoundingSet",
        "AmbientCapabilities",
        "ProtectSystem",
        "ProtectHome",
        "PrivateTmp",
        "PrivateDevices",
        "UMask",
        "ProtectKernelTunables",
        "ProtectKernelModules",
        "ProtectKernelLogs",
        "ProtectControlGroups",
        "ProtectClock",
        "ProtectHostname",
        "ProtectProc",
        "ProcSubset",
        "RestrictAddressFamilies",
        "RestrictNamespaces",
        "RestrictRealtime",
        "RestrictSUIDSGID",
        "LockPersonality",
        "MemoryDenyWriteExecute",
        "RemoveIPC",
        "PrivateUsers",
        "SystemCallArchitectures",
        "SystemCallFilter",
        "SystemCallErrorNumber",
        "DevicePolicy",
        "KeyringMode",
        "LimitNOFILE",
        "Environment",
        "IPAddressDeny",
        "IPAddressAllow",
        "PrivateIPC",
        "ExecStartPre",
    ];
    for (k, _) in service {
        assert!(
            KNOWN.contains(&k.as_str()),
            "unknown or unexpected directive {k}"
        );
    }
    for (k, v) in [
        ("DynamicUser", "yes"),
        ("LimitNOFILE", "65536"),
        ("NoNewPrivileges", "yes"),
        ("CapabilityBoundingSet", ""),
        ("AmbientCapabilities", ""),
        ("ProtectSystem", "strict"),
        ("ProtectHome", "yes"),
        ("PrivateTmp", "yes"),
        ("PrivateDevices", "yes"),
        ("ProtectKernelTunables", "yes"),
        ("ProtectKernelModules", "yes"),
        ("ProtectControlGroups", "yes"),
        ("RestrictNamespaces", "yes"),
        ("RestrictSUIDSGID", "yes"),
        ("LockPersonality", "yes"),
        ("MemoryDenyWriteExecute", "yes"),
        ("SystemCallArchitectures", "native"),
    ] {
        assert_eq!(last(k), Some(v), "{k}");
    }
    assert!(
        last("User").is_none() && last("Group").is_none(),
        "DynamicUser picks the user"
    );
    let families: BTreeSet<&str> = last("RestrictAddressFamilies")
        .unwrap()
        .split_whitespace()
        .collect();
    let allowed: BTreeSet<&str> = ["AF_INET", "AF_INET6", "AF_UNIX", "AF_NETLINK"].into();
    assert!(families.contains("AF_INET") && families.contains("AF_INET6"));
    assert!(families.is_subset(&allowed), "{families:?}");
    assert!(service
        .iter()
        .any(|(k, v)| k == "SystemCallFilter" && v == "@system-service"));
    // Host figures come from /proc/stat and friends: ProcSubset=pid would
    // hide them.
    assert_ne!(last("ProcSubset"), Some("pid"));

    let exec = last("ExecStart").expect("ExecStart");
    assert!(
        !exec.contains(['"', '\'']),
        "quoting is not checked here: {exec}"
    );
    let words: Vec<String> = exec.split_whitespace().map(String::from).collect();
    assert!(words[0].starts_with('/'), "{}", words[0]);
    assert!(words[0].ends_with("/pathprobe"));
    check_serve_command(&words[1..], "ExecStart");
    assert!(
        last("ExecReload").is_some_and(|r| r.contains("-HUP $MAINPID")),
        "reload is SIGHUP"
    );
    assert_eq!(
        unit["Install"][0],
        ("WantedBy".to_string(), "multi-user.target".to_string())
    );
}

//! The Dockerfile: the final stage, the build context, the build stage replayed.

use super::*;

pub(super) fn load_dockerfile() -> dockerfile::Dockerfile {
    dockerfile::parse(&read(&repo().join("Dockerfile")))
        .unwrap_or_else(|e| panic!("Dockerfile: {e}"))
}

pub(super) fn final_stage(df: &dockerfile::Dockerfile) -> &dockerfile::Stage {
    df.stages.last().unwrap()
}

/// The arguments of every `keyword` instruction of `stage`.
pub(super) fn all<'a>(stage: &'a dockerfile::Stage, keyword: &str) -> Vec<&'a str> {
    stage
        .instructions
        .iter()
        .filter(|i| i.keyword == keyword)
        .map(|i| i.args.as_str())
        .collect()
}

/// The exec-form argument vector of the stage's last `keyword`.
pub(super) fn exec_of(stage: &dockerfile::Stage, keyword: &str) -> Vec<String> {
    let args = *all(stage, keyword)
        .last()
        .unwrap_or_else(|| panic!("the final stage has no {keyword}"));
    dockerfile::exec_form(args)
        .unwrap_or_else(|| panic!("{keyword} must use the exec form (a JSON array): {args}"))
}

/// (sources, destination) of a COPY, and its flags.
pub(super) fn copy_parts(args: &str) -> (BTreeMap<String, String>, Vec<String>, String) {
    let (flags, rest) = dockerfile::flags(args);
    let mut words = dockerfile::exec_form(rest)
        .unwrap_or_else(|| rest.split_whitespace().map(String::from).collect());
    let dest = words.pop().expect("COPY has a destination");
    assert!(!words.is_empty(), "COPY {args} has no source");
    (flags, words, dest)
}

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
pub(super) fn cargo_commands(df: &dockerfile::Dockerfile) -> Vec<Vec<String>> {
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
pub(super) fn rust_version(s: &str) -> (u32, u32, u32) {
    let mut parts = s
        .split('.')
        .map(|p| p.parse::<u32>().unwrap_or_else(|_| panic!("version {s:?}")));
    (
        parts.next().unwrap(),
        parts.next().unwrap_or(0),
        parts.next().unwrap_or(0),
    )
}

pub(super) fn cargo_host() -> String {
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
pub(super) fn copy_context(src: &Path, dest: &Path, ignore: &DockerIgnore) {
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
pub(super) const REPLAYABLE: &[&str] = &[
    "mkdir", "echo", "touch", "rm", "cargo", "cp", "mv", "test", "true",
];

/// Stands in for cargo in the replay: checks the arguments, has the real
/// cargo load the manifest and lock file as they are at this point of the
/// build (`fetch` is as strict as `build` about declared targets, where
/// `metadata` quietly drops a missing bench; `metadata` gives the target
/// list, saved with the file list), and puts the binary these tests run
/// where the build would leave it.
pub(super) const CARGO_SHIM: &str = r#"#!/bin/sh
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

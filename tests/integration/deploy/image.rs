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

/// Commands a replayed RUN may use: they touch only the working directory,
/// so that running them on this machine rather than in a container is safe.
pub(super) const REPLAYABLE: &[&str] = &[
    "mkdir", "echo", "touch", "rm", "cargo", "cp", "mv", "test", "true",
];

/// The environment of a RUN in the `rust:*` image: its PATH (with this
/// toolchain's cargo and rustc first, standing in for the image's), the
/// cargo home whose registry the suite's own build filled (the replay is
/// offline), and nothing of the test process's own cargo variables.
fn run_environment() -> Vec<(String, String)> {
    let toolchain = Path::new(env!("CARGO")).parent().unwrap();
    let mut env = vec![
        (
            "PATH".to_string(),
            format!(
                "{}:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                toolchain.display()
            ),
        ),
        ("CARGO_NET_OFFLINE".to_string(), "true".to_string()),
    ];
    for keep in ["HOME", "CARGO_HOME", "RUSTUP_HOME"] {
        if let Ok(v) = std::env::var(keep) {
            env.push((keep.to_string(), v));
        }
    }
    env
}

/// Every file under `dir` (path, mode and contents) hashed in path order:
/// what a layer's RUN starts from.
fn hash_tree(dir: &Path, hasher: &mut sha2::Sha256) {
    use sha2::Digest;
    use std::os::unix::fs::PermissionsExt;
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        let meta = std::fs::symlink_metadata(&path).unwrap();
        hasher.update(path.file_name().unwrap().as_encoded_bytes());
        hasher.update(meta.permissions().mode().to_le_bytes());
        if meta.is_dir() {
            hasher.update(b"/");
            hash_tree(&path, hasher);
            hasher.update(b"..");
        } else {
            hasher.update(std::fs::read(&path).unwrap());
        }
    }
}

/// `cp -a from/. to/`: a layer's tree, timestamps kept (cargo's
/// fingerprints compare them).
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    let out = run_bounded(
        Command::new("cp")
            .arg("-a")
            .arg(format!("{}/.", from.display()))
            .arg(to),
        Duration::from_secs(300),
    );
    assert!(out.status.success(), "cp: {}", text(&out.stderr));
}

/// Docker's layer cache for the replay: a RUN that starts from the same
/// files, with the same command, environment and toolchain, leaves the
/// same tree, so it is kept under the test target directory and reused.
/// Only the dependency layer is worth it (minutes of compiling that change
/// only with Cargo.toml and Cargo.lock); the stage's last RUN, which builds
/// the crate, always runs, with the target directory that layer left.
struct LayerCache {
    dir: PathBuf,
}

impl LayerCache {
    fn new() -> LayerCache {
        LayerCache {
            dir: Path::new(env!("CARGO_TARGET_TMPDIR")).join("dockerfile-layers"),
        }
    }

    fn key(root: &Path, run: &str, env: &[(String, String)]) -> String {
        use sha2::Digest;
        let mut h = sha2::Sha256::new();
        h.update(run.as_bytes());
        for (k, v) in env {
            h.update(format!("\0{k}={v}").as_bytes());
        }
        for tool in ["cargo", "rustc"] {
            let out = run_bounded(
                Command::new(Path::new(env!("CARGO")).with_file_name(tool)).arg("-vV"),
                Duration::from_secs(30),
            );
            h.update(&out.stdout);
        }
        hash_tree(root, &mut h);
        h.finalize().iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Puts the cached result of a layer in `root`, if there is one.
    fn restore(&self, key: &str, root: &Path) -> bool {
        let layer = self.dir.join(key);
        if !layer.is_dir() {
            return false;
        }
        std::fs::remove_dir_all(root).unwrap();
        copy_tree(&layer, root);
        true
    }

    /// Keeps `root` as the layer `key`, in place of any older layer (a
    /// dependency layer is hundreds of MB).
    fn store(&self, key: &str, root: &Path) {
        if self.dir.is_dir() {
            for old in std::fs::read_dir(&self.dir).unwrap() {
                let _ = std::fs::remove_dir_all(old.unwrap().path());
            }
        }
        let partial = self.dir.join(format!("{key}.partial"));
        copy_tree(root, &partial);
        std::fs::rename(&partial, self.dir.join(key)).unwrap();
    }
}

/// One replay at a time: two would build the dependency layer twice on a
/// cold cache.
static REPLAY: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// The build stage replayed, as `docker build` would run it.
pub(super) struct Replay {
    _one: std::sync::MutexGuard<'static, ()>,
    root: PathBuf,
    /// Whether the dependency layer came from the cache.
    pub cached_layers: usize,
}

impl Replay {
    /// The path of the image's `path` in the replayed file system.
    pub fn path(&self, path: &str) -> PathBuf {
        self.root.join(path.trim_start_matches('/'))
    }
}

/// Replays the build stage of the Dockerfile `text`, stage `stage`: in an
/// empty directory standing for the image's file system, WORKDIR, ARG
/// (defaults, or `build_args` as `--build-arg` gives them) and ENV as
/// Docker applies them, COPY copying exactly what it names from the build
/// context (.dockerignore honoured), RUN by `sh -c` with the real cargo,
/// offline. Err carries the failing instruction's output.
pub(super) fn replay_build_stage(
    dockerfile_text: &str,
    stage: &str,
    build_args: &[(&str, &str)],
) -> Result<Replay, String> {
    let one = REPLAY.lock().unwrap_or_else(|p| p.into_inner());
    // A release build takes both cores for minutes: a measuring test must
    // not run beside it.
    let _turn = crate::common::turn::shared();
    let df = dockerfile::parse(dockerfile_text)?;
    let build = df
        .stages
        .iter()
        .find(|s| s.name.as_deref() == Some(stage))
        .ok_or_else(|| format!("no stage {stage}"))?;
    let ignore = DockerIgnore::load();
    let cache = LayerCache::new();
    let mut env = run_environment();
    // The image's file system, at a fixed place as in a container: cargo
    // records absolute paths under the target directory, so a cached layer
    // is only valid where it was built.
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("dockerfile-replay");
    if root.exists() {
        std::fs::remove_dir_all(&root).unwrap();
    }
    std::fs::create_dir_all(&root).unwrap();
    // Nor may build.rs find this repository's .git above it: the image's
    // build context has none.
    env.push((
        "GIT_CEILING_DIRECTORIES".to_string(),
        root.display().to_string(),
    ));
    let in_root = |p: &str| root.join(p.trim_start_matches('/'));
    // The image's working directory, as a path inside the image.
    let mut workdir = PathBuf::from("/");
    let mut vars: BTreeMap<String, String> = BTreeMap::new();
    let last_run = build
        .instructions
        .iter()
        .rposition(|i| i.keyword == "RUN")
        .ok_or("the build stage runs nothing")?;
    let mut cached_layers = 0;
    for (n, ins) in build.instructions.iter().enumerate() {
        // Docker expands variables in these instructions; a RUN's are the
        // shell's.
        let args = if ins.keyword == "RUN" {
            ins.args.clone()
        } else {
            dockerfile::substitute(&ins.args, &vars)?
        };
        match ins.keyword.as_str() {
            "WORKDIR" => {
                workdir = workdir.join(&args);
                std::fs::create_dir_all(in_root(&workdir.to_string_lossy())).unwrap();
            }
            "ARG" => {
                // As Docker: the value given with --build-arg, else the
                // default; either is in the environment of the RUN lines
                // after it. One with neither is not set at all.
                let (name, default) = match args.split_once('=') {
                    Some((name, default)) => (name, Some(default)),
                    None => (args.as_str(), None),
                };
                let given = build_args.iter().find(|(k, _)| *k == name);
                if let Some(value) = given.map(|(_, v)| *v).or(default) {
                    vars.insert(name.to_string(), value.to_string());
                    env.retain(|(k, _)| k != name);
                    env.push((name.to_string(), value.to_string()));
                }
            }
            "ENV" => {
                let (name, value) = args
                    .split_once('=')
                    .ok_or_else(|| format!("line {}: ENV NAME=VALUE expected", ins.line))?;
                let value = value.trim_matches('"');
                vars.insert(name.to_string(), value.to_string());
                env.retain(|(k, _)| k != name);
                env.push((name.to_string(), value.to_string()));
            }
            "COPY" => {
                let (flags, sources, dest) = copy_parts(&args);
                if !flags.is_empty() {
                    return Err(format!(
                        "line {}: COPY {args}: flags not replayed",
                        ins.line
                    ));
                }
                let dest_path = in_root(&workdir.join(&dest).to_string_lossy());
                let into_dir = dest.ends_with('/') || sources.len() > 1 || dest == ".";
                for src in &sources {
                    let rel = normalize(Path::new(src));
                    if !repo().join(&rel).exists() || ignore.excludes(&rel) {
                        return Err(format!(
                            "line {}: COPY {src}: not in the build context",
                            ins.line
                        ));
                    }
                    let target = if into_dir && repo().join(&rel).is_file() {
                        dest_path.join(rel.file_name().unwrap())
                    } else {
                        dest_path.clone()
                    };
                    copy_context(&rel, &target, &ignore);
                }
            }
            "RUN" => {
                if dockerfile::exec_form(&args).is_some() {
                    return Err(format!("line {}: RUN: shell form expected", ins.line));
                }
                for c in dockerfile::simple_commands(&args) {
                    if !(REPLAYABLE.contains(&c[0].as_str()) || c[0].starts_with("./target/")) {
                        return Err(format!(
                            "line {}: {:?} cannot be replayed outside a container",
                            ins.line, c[0]
                        ));
                    }
                    if let Some(w) = c[1..]
                        .iter()
                        .find(|w| w.starts_with('/') || w.contains(".."))
                    {
                        return Err(format!(
                            "line {}: {w:?} reaches outside the working directory",
                            ins.line
                        ));
                    }
                }
                let key = (n != last_run).then(|| LayerCache::key(&root, &args, &env));
                if let Some(key) = &key {
                    if cache.restore(key, &root) {
                        cached_layers += 1;
                        continue;
                    }
                }
                let out = run_bounded(
                    Command::new("sh")
                        .args(["-c", &args])
                        .current_dir(in_root(&workdir.to_string_lossy()))
                        .env_clear()
                        .envs(env.iter().map(|(k, v)| (k, v))),
                    Duration::from_secs(1800),
                );
                if !out.status.success() {
                    return Err(format!(
                        "line {}: RUN failed ({}): {}{}",
                        ins.line,
                        out.status,
                        text(&out.stdout),
                        text(&out.stderr)
                    ));
                }
                if let Some(key) = &key {
                    cache.store(key, &root);
                }
            }
            "LABEL" => {}
            other => return Err(format!("line {}: {other} is not replayed", ins.line)),
        }
    }
    Ok(Replay {
        _one: one,
        root,
        cached_layers,
    })
}

/// The stage the final stage copies the binary from, and what it copies.
fn build_stage_of(df: &dockerfile::Dockerfile) -> (String, Vec<String>) {
    let (flags, sources, _) = all(final_stage(df), "COPY")
        .into_iter()
        .map(copy_parts)
        .find(|(flags, _, _)| flags.contains_key("from"))
        .expect("the final stage copies from a build stage");
    (flags["from"].clone(), sources)
}

/// The image's build stage, replayed with the real cargo from exactly what
/// its COPY lines copy, builds the binary the final stage takes, and that
/// binary names the commit given as a build argument.
#[test]
fn dockerfile_build_stage_builds_the_binary() {
    let dockerfile = read(&repo().join("Dockerfile"));
    let df = load_dockerfile();
    let (stage, from_sources) = build_stage_of(&df);
    let commit = "0123456789ab";
    let replay = replay_build_stage(&dockerfile, &stage, &[("PATHPROBE_COMMIT", commit)])
        .unwrap_or_else(|e| panic!("the image's build stage fails: {e}"));
    eprintln!("dependency layers from the cache: {}", replay.cached_layers);
    let bin = from_sources
        .iter()
        .find(|s| s.ends_with("/pathprobe"))
        .expect("the final stage copies the pathprobe binary");
    for src in &from_sources {
        assert!(
            replay.path(src).is_file(),
            "COPY --from: {src} was not built"
        );
    }
    let out = run_bounded(
        Command::new(replay.path(bin)).arg("--version"),
        Duration::from_secs(30),
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(
        text(&out.stdout).trim(),
        format!("pathprobe {} (commit {commit})", env!("CARGO_PKG_VERSION")),
        "the build argument PATHPROBE_COMMIT reaches the binary"
    );
}

/// The replay is a real build: leave out of the COPY set a file the crate
/// needs (build.rs, which sets the commit the sources read) and it fails,
/// as `docker build` did.
#[test]
fn dockerfile_build_stage_fails_without_a_file_cargo_needs() {
    let dockerfile = read(&repo().join("Dockerfile"));
    let df = load_dockerfile();
    let (stage, _) = build_stage_of(&df);
    let without: String = dockerfile
        .lines()
        .filter(|l| l.trim() != "COPY build.rs ./")
        .map(|l| format!("{l}\n"))
        .collect();
    assert_ne!(
        without, dockerfile,
        "the Dockerfile copies build.rs as `COPY build.rs ./`"
    );
    let err = match replay_build_stage(&without, &stage, &[]) {
        Ok(_) => panic!("the build stage built without build.rs"),
        Err(e) => e,
    };
    assert!(err.contains("PATHPROBE_COMMIT"), "{err}");
}

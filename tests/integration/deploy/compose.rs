//! The Compose file.

use super::*;

pub(super) struct Compose {
    doc: Value,
}

/// A short-syntax volume: (source, target).
pub(super) fn volume_parts(v: &Value) -> (String, String) {
    let spec = s(v, "volume");
    let mut parts = spec.split(':');
    let src = parts.next().unwrap().to_string();
    let dst = parts
        .next()
        .unwrap_or_else(|| panic!("volume {spec} has no target"))
        .to_string();
    (src, dst)
}

pub(super) fn is_bind(src: &str) -> bool {
    src.starts_with('.') || src.starts_with('/') || src.starts_with('~')
}

impl Compose {
    pub(super) fn load() -> Compose {
        Compose {
            doc: yaml(&repo().join("deploy/docker-compose.yml")),
        }
    }

    pub(super) fn services(&self) -> Vec<(&str, &Value)> {
        self.doc["services"]
            .as_mapping()
            .expect("services")
            .iter()
            .map(|(k, v)| (s(k, "service name"), v))
            .collect()
    }

    pub(super) fn service(&self, name: &str) -> &Value {
        &self.doc["services"][name]
    }

    /// Services built from the repository's Dockerfile.
    pub(super) fn pathprobe_services(&self) -> Vec<(&str, &Value)> {
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
    pub(super) fn mount_source(&self, service: &str, target: &str) -> Option<PathBuf> {
        seq(&self.service(service)["volumes"], "volumes")
            .iter()
            .map(volume_parts)
            .find(|(src, dst)| dst == target && is_bind(src))
            .map(|(src, _)| normalize(&Path::new("deploy").join(src)))
    }

    /// The service whose image starts with `image`.
    pub(super) fn by_image(&self, image: &str) -> &str {
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
        crate::common::promtool::command()
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
pub(super) fn check_dashboard_datasources(path: &Path, provisioned_uid: &str) {
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

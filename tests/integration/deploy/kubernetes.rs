//! The Kubernetes manifests.

use super::*;

pub(super) fn kubernetes_objects() -> Vec<Value> {
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

pub(super) fn object<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
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
    // The namespace is shared (Prometheus lives there too): the
    // kustomization places objects in it but must not own it, or
    // `kubectl delete -k` deletes it with everything in it.
    let kustomization = yaml(&repo().join("deploy/kubernetes/kustomization.yaml"));
    let namespace = s(&kustomization["namespace"], "kustomization namespace");
    assert!(
        objects.iter().all(|o| o["kind"] != "Namespace"),
        "the kustomization owns no Namespace"
    );
    for o in &objects {
        assert_eq!(
            o["metadata"]["namespace"].as_str(),
            Some(namespace),
            "{:?}",
            o["metadata"]["name"]
        );
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

/// docs/SECURITY.md: the HTTP port (/probe, /-/reload) must not be
/// reachable from everywhere; the responder port is for the probers.
#[test]
fn kubernetes_network_policy_lets_only_prometheus_reach_the_http_port() {
    let objects = kubernetes_objects();
    let np = object(&objects, "NetworkPolicy");
    let ds = object(&objects, "DaemonSet");
    let pod_labels = ds["spec"]["template"]["metadata"]["labels"]
        .as_mapping()
        .unwrap();
    for (k, v) in np["spec"]["podSelector"]["matchLabels"]
        .as_mapping()
        .unwrap()
    {
        assert_eq!(pod_labels.get(k), Some(v), "the policy selects the pods");
    }
    assert_eq!(
        seq(&np["spec"]["policyTypes"], "policyTypes"),
        &[Value::from("Ingress")]
    );
    let rules = seq(&np["spec"]["ingress"], "ingress");
    let mut seen = BTreeSet::new();
    for rule in rules {
        let from = seq(&rule["from"], "from");
        // An empty or missing `from` admits every source.
        assert!(!from.is_empty(), "every rule names its sources");
        for port in seq(&rule["ports"], "ports") {
            let n = port["port"].as_u64().expect("numeric port");
            let proto = port["protocol"].as_str().unwrap_or("TCP").to_string();
            if n == metrics_port() as u64 {
                // Only Prometheus' pods, never the pathprobe pods' peers
                // at large or an ipBlock.
                for f in from {
                    assert!(f["ipBlock"].is_null(), "{f:?}");
                    assert_eq!(
                        f["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
                        Some("prometheus"),
                        "{f:?}"
                    );
                }
            } else {
                assert_eq!(n, 5301, "only the responder and HTTP ports are open");
                for f in from {
                    assert_eq!(
                        f["podSelector"]["matchLabels"]["app.kubernetes.io/name"].as_str(),
                        Some("pathprobe"),
                        "the responder answers the other pathprobe pods: {f:?}"
                    );
                }
            }
            seen.insert((n, proto));
        }
    }
    let want: BTreeSet<(u64, String)> = [
        (5301, "TCP".to_string()),
        (5301, "UDP".to_string()),
        (metrics_port() as u64, "TCP".to_string()),
    ]
    .into();
    assert_eq!(seen, want);
}

/// The ConfigMap's sizing advice is the mesh plan's own arithmetic for
/// its modules: each "N nodes: about M min" line is checked against the
/// plan the service would compute for N discovered pods.
#[test]
fn kubernetes_configmap_sizing_advice_matches_the_mesh_plan() {
    let path = repo().join("deploy/kubernetes/configmap.yaml");
    let text = read(&path);
    let objects = kubernetes_objects();
    let cm = object(&objects, "ConfigMap");
    let config = Config::from_yaml(s(&cm["data"]["pathprobe.yml"], "data"), "ConfigMap")
        .unwrap_or_else(|e| panic!("{e}"));
    let dns = &config.discovery.dns[0];
    let cycle_for = |n: usize| {
        let discovered: Vec<pathprobe::discovery::DiscoveredTarget> = (0..n)
            .map(|i| pathprobe::discovery::DiscoveredTarget {
                name: format!("10.0.0.{}:5301", i + 1),
                endpoint: pathprobe::probe::Target {
                    host: format!("10.0.0.{}", i + 1),
                    port: 5301,
                },
                modules: dns.modules.clone(),
                interval: None,
                labels: Default::default(),
            })
            .collect();
        let (plan, _, _) = pathprobe::service::mesh::plan(&config, &discovered, |_| false);
        plan.cycle().as_secs_f64()
    };
    let mut checked = 0;
    for line in text.lines() {
        let Some(rest) = line.trim_start_matches('#').trim().strip_suffix(" min") else {
            continue;
        };
        let Some((nodes, minutes)) = rest.split_once("nodes:") else {
            continue;
        };
        let Some(minutes) = minutes.trim().strip_prefix("about ") else {
            continue;
        };
        let n: usize = nodes.trim().parse().unwrap();
        let m: f64 = minutes.split_whitespace().next().unwrap().parse().unwrap();
        let cycle = cycle_for(n) / 60.0;
        assert!(
            (cycle - m).abs() <= 0.5,
            "{n} nodes: the plan's cycle is {cycle:.1} min, the ConfigMap says about {m} min"
        );
        checked += 1;
    }
    assert!(checked >= 2, "the advice gives cycles for some fleet sizes");
    // Up to 4 nodes the interval itself is the cycle.
    assert_eq!(
        cycle_for(4),
        config.scheduler.default_interval.as_secs_f64()
    );
    assert!(text.contains("up to 4 nodes:  the 5m interval"));
}

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

//! The state directory, where `serve` keeps its history by default
//! (`$STATE_DIRECTORY`): every way of deploying it must give one that the
//! service may write and that outlives a restart, the reboot a kernel
//! upgrade is included. The behaviour itself (the file written, read back)
//! is checked in `serve_process`.

use super::*;

const STATE: &str = "/var/lib/pathprobe";

#[test]
fn every_deployment_gives_serve_a_writable_state_directory_that_outlives_it() {
    // systemd: StateDirectory= sets $STATE_DIRECTORY for the dynamic user
    // (ProtectSystem=strict leaves everything else read-only).
    let unit = systemd::parse_unit(&read(&repo().join("deploy/systemd/pathprobe.service")));
    let dirs: Vec<&str> = unit["Service"]
        .iter()
        .filter(|(k, _)| k == "StateDirectory")
        .map(|(_, v)| v.as_str())
        .collect();
    assert_eq!(dirs, ["pathprobe"], "systemd: StateDirectory=pathprobe");

    // The image: the variable, the directory owned by its user, a volume.
    let df = load_dockerfile();
    let last = final_stage(&df);
    assert!(
        all(last, "ENV").contains(&format!("STATE_DIRECTORY={STATE}").as_str()),
        "image: ENV STATE_DIRECTORY={STATE}"
    );
    let user = all(last, "USER").last().unwrap().split(':').next().unwrap();
    assert!(
        all(last, "RUN")
            .iter()
            .any(|r| r.contains(&format!("-o {user}")) && r.contains(STATE)),
        "image: {STATE} owned by user {user}"
    );
    assert!(
        all(last, "VOLUME").iter().any(|v| v.contains(STATE)),
        "image: VOLUME {STATE}"
    );

    // Compose: a named volume on it for every pathprobe host.
    let compose = compose::Compose::load();
    for (name, svc) in compose.pathprobe_services() {
        let named = seq(&svc["volumes"], "volumes")
            .iter()
            .map(compose::volume_parts)
            .any(|(src, dst)| dst == STATE && !compose::is_bind(&src));
        assert!(named, "compose service {name}: a named volume on {STATE}");
    }

    // Kubernetes: the node's directory, handed to the image's user by an
    // init container (a hostPath is created root-owned).
    let objects = kubernetes::kubernetes_objects();
    let spec = &kubernetes::object(&objects, "DaemonSet")["spec"]["template"]["spec"];
    let c = &seq(&spec["containers"], "containers")[0];
    let mount = seq(&c["volumeMounts"], "volumeMounts")
        .iter()
        .find(|m| s(&m["mountPath"], "mountPath") == STATE)
        .expect("DaemonSet: a volume mounted on the state directory");
    assert!(mount["readOnly"].as_bool() != Some(true));
    let volume = seq(&spec["volumes"], "volumes")
        .iter()
        .find(|v| v["name"] == mount["name"])
        .expect("the state volume");
    assert_eq!(s(&volume["hostPath"]["path"], "hostPath"), STATE);
    let init = seq(&spec["initContainers"], "initContainers");
    let chown = init
        .iter()
        .flat_map(|i| seq(&i["command"], "command"))
        .map(|a| s(a, "arg"))
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        chown.contains(&format!("chown {user}:")) && chown.contains(STATE),
        "DaemonSet: an init container hands {STATE} to {user}: {chown}"
    );
}

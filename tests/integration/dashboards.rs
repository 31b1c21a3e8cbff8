//! The Grafana dashboards in dashboards/: importable (inputs, datasource
//! variable, schema), provisionable (panels use the `${datasource}`
//! variable), every PromQL expression parses (promtool), reads only metrics
//! a live `pathprobe serve` exports (the request/response series: one that
//! runs such probes), and the kernel tables compute what their descriptions
//! say on synthetic series (promtool test rules).
//!
//! promtool comes from the Debian package `prometheus` (.ci/run installs
//! it); without it the promtool tests fail and say so.

use std::collections::{BTreeSet, HashSet};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::common::dashboards::{
    dashboard_files, default_values, load, may_be_empty, panel_queries, panels,
    substitute_variables, variable_promql, MAY_BE_EMPTY,
};
use crate::common::promql::{exposed_names, metric_names};
use crate::common::serve::Serve;
use crate::common::{promtool, rr};

/// The files the issue asks for; a missing one is a failure, an extra one is
/// checked like the others.
const EXPECTED: &[&str] = &["fleet.json", "kernel-host.json", "path-overview.json"];

fn all_dashboards() -> Vec<(String, Value)> {
    let files = dashboard_files();
    let names: Vec<String> = files
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    for want in EXPECTED {
        assert!(names.iter().any(|n| n == want), "dashboards/{want} missing");
    }
    files
        .iter()
        .zip(names)
        .map(|(p, n)| (n, load(p).unwrap_or_else(|e| panic!("{e}"))))
        .collect()
}

/// Every query of every dashboard with the variables filled in:
/// (file, title, expr).
fn all_queries() -> Vec<(String, String, String)> {
    let values = default_values();
    let mut out = Vec::new();
    for (file, d) in all_dashboards() {
        for (title, expr) in panel_queries(&d) {
            out.push((file.clone(), title, substitute_variables(&expr, &values)));
        }
    }
    out
}

#[test]
fn every_dashboard_imports_as_a_file_and_by_provisioning() {
    let mut uids = HashSet::new();
    let mut titles = HashSet::new();
    for (file, d) in all_dashboards() {
        // Import as a file: Grafana asks for the inputs.
        let inputs = d["__inputs"]
            .as_array()
            .unwrap_or_else(|| panic!("{file}: no __inputs"));
        assert!(
            inputs.iter().any(|i| i["name"] == "DS_PROMETHEUS"
                && i["type"] == "datasource"
                && i["pluginId"] == "prometheus"),
            "{file}: no DS_PROMETHEUS datasource input"
        );
        let schema = d["schemaVersion"].as_u64().unwrap_or(0);
        assert!(
            (36..=41).contains(&schema),
            "{file}: schemaVersion {schema}"
        );
        let uid = d["uid"].as_str().unwrap_or_default();
        assert!(
            !uid.is_empty() && uid.len() <= 40 && uids.insert(uid.to_string()),
            "{file}: uid {uid:?} empty, too long or not unique"
        );
        let title = d["title"].as_str().unwrap_or_default();
        assert!(
            !title.is_empty() && titles.insert(title.to_string()),
            "{file}: title {title:?}"
        );
        // The id of the Grafana instance it was exported from must not travel.
        assert!(d["id"].is_null(), "{file}: id must be null");

        let vars = d["templating"]["list"].as_array().expect("templating.list");
        let var = |name: &str| {
            vars.iter()
                .find(|v| v["name"] == name)
                .unwrap_or_else(|| panic!("{file}: no variable {name}"))
        };
        let ds = var("datasource");
        assert_eq!(ds["type"], "datasource", "{file}");
        assert_eq!(ds["query"], "prometheus", "{file}");
        for name in ["instance", "target", "module"] {
            let v = var(name);
            assert_eq!(v["type"], "query", "{file}: {name}");
            assert_eq!(v["multi"], true, "{file}: {name} multi");
            assert_eq!(v["includeAll"], true, "{file}: {name} includeAll");
            // `.*` keeps the query short with many values; every use of the
            // variable is a `=~` matcher (every_variable_in_every_query_is_known).
            assert_eq!(v["allValue"], ".*", "{file}: {name} allValue");
            assert_eq!(v["datasource"]["uid"], "${datasource}", "{file}: {name}");
            let q = v["query"]["query"].as_str().unwrap_or_default();
            assert!(
                variable_promql(q).is_some(),
                "{file}: {name} query {q:?} is not label_values(selector, label)"
            );
        }

        // Provisioning does not substitute ${DS_PROMETHEUS}: nothing but
        // __inputs may mention it, and every query goes through the variable.
        let mut without_inputs = d.clone();
        without_inputs.as_object_mut().unwrap().remove("__inputs");
        assert!(
            !without_inputs.to_string().contains("DS_PROMETHEUS"),
            "{file}: ${{DS_PROMETHEUS}} used outside __inputs; use ${{datasource}}"
        );
        let mut ids = HashSet::new();
        let all = panels(&d);
        assert!(all.len() >= 5, "{file}: only {} panels", all.len());
        for p in all {
            let t = p["title"].as_str().unwrap_or_default();
            assert!(!t.is_empty(), "{file}: panel without title");
            assert!(
                ids.insert(p["id"].as_u64().expect("panel id")),
                "{file}: {t}: id repeats"
            );
            let desc = p["description"].as_str().unwrap_or_default();
            assert!(
                desc.len() >= 40,
                "{file}: {t}: description missing or too short"
            );
            assert_eq!(p["datasource"]["uid"], "${datasource}", "{file}: {t}");
            let targets = p["targets"]
                .as_array()
                .unwrap_or_else(|| panic!("{file}: {t}: no targets"));
            assert!(!targets.is_empty(), "{file}: {t}: no targets");
            for tg in targets {
                assert_eq!(tg["datasource"]["uid"], "${datasource}", "{file}: {t}");
                assert!(
                    tg["expr"].as_str().is_some_and(|e| !e.trim().is_empty()),
                    "{file}: {t}"
                );
            }
            let g = &p["gridPos"];
            let (x, w) = (g["x"].as_u64().unwrap(), g["w"].as_u64().unwrap());
            assert!(
                x + w <= 24 && g["h"].as_u64().unwrap() > 0,
                "{file}: {t}: gridPos {g}"
            );
        }
        for a in d["annotations"]["list"].as_array().unwrap() {
            if a.get("expr").is_some() {
                assert_eq!(
                    a["datasource"]["uid"], "${datasource}",
                    "{file}: annotation"
                );
            }
        }
    }
}

/// Throughput reads as Mbps/Gbps: bytes times 8 with Grafana's bit/s unit;
/// ratios read as %.
#[test]
fn units_make_throughput_bits_and_ratios_percent() {
    let mut throughput_panels = 0;
    for (file, d) in all_dashboards() {
        for p in panels(&d) {
            if p["type"] != "timeseries" {
                continue;
            }
            let t = p["title"].as_str().unwrap();
            let unit = p["fieldConfig"]["defaults"]["unit"]
                .as_str()
                .unwrap_or_default();
            for tg in p["targets"].as_array().unwrap() {
                let e = tg["expr"].as_str().unwrap();
                let bytes_rate = e.contains("pathprobe_throughput_bytes_per_second")
                    || e.contains("rate(pathprobe_sent_bytes_total");
                if bytes_rate || t.contains("bit/s") {
                    throughput_panels += 1;
                    assert_eq!(unit, "bps", "{file}: {t}");
                    assert!(e.contains("8 *") || e.contains("* 8"), "{file}: {t}: {e}");
                }
                let ratio = ["_ratio{", "_ratio)"].iter().any(|r| e.contains(r));
                if ratio {
                    assert_eq!(unit, "percentunit", "{file}: {t}");
                }
            }
        }
    }
    assert!(throughput_panels >= 4, "{throughput_panels}");
}

/// Each dashboard shows what the issue lists for it; checked through the
/// metric names its queries read, so a renamed metric shows up here too.
#[test]
fn each_dashboard_covers_its_list() {
    let want: &[(&str, &[&str])] = &[
        (
            "path-overview.json",
            &[
                "pathprobe_throughput_bytes_per_second",
                "pathprobe_probe_success",
                "pathprobe_tcp_retransmits",
                "pathprobe_tcp_rtt_seconds",
                "pathprobe_udp_loss_ratio",
                "pathprobe_udp_jitter_seconds",
                "pathprobe_probe_cpu_utilization_ratio",
                "pathprobe_sent_bytes_total",
                "pathprobe_probe_last_run_timestamp_seconds",
                "pathprobe_rr_latency_percentile_seconds",
                "pathprobe_rr_latency_seconds_bucket",
                "pathprobe_rr_transactions_per_second",
                "pathprobe_rr_cpu_seconds_per_transaction",
                "pathprobe_rr_loss_ratio",
                "pathprobe_rr_ipdv_seconds",
            ],
        ),
        (
            "kernel-host.json",
            &[
                "pathprobe_throughput_bytes_per_second",
                "pathprobe_probe_kernel_info",
                "pathprobe_host_info",
                "pathprobe_probe_cpu_utilization_ratio",
                "pathprobe_host_interrupts_all_total",
                "pathprobe_host_softirqs_total",
                "pathprobe_probe_interrupts",
                "pathprobe_probe_softirqs",
                "pathprobe_probe_received_bytes",
                "pathprobe_rr_latency_percentile_seconds",
                "pathprobe_rr_transactions_per_second",
                "pathprobe_rr_cpu_seconds_per_transaction",
            ],
        ),
        (
            "fleet.json",
            &[
                "pathprobe_throughput_bytes_per_second",
                "pathprobe_probe_success",
                "pathprobe_probe_failure_info",
                "pathprobe_responder_rejections_total",
                "pathprobe_probes_total",
                "pathprobe_scheduler_lag_seconds_bucket",
                "pathprobe_config_last_reload_successful",
                "pathprobe_rr_latency_percentile_seconds",
            ],
        ),
    ];
    let queries = all_queries();
    for (file, names) in want {
        let used: BTreeSet<String> = queries
            .iter()
            .filter(|(f, _, _)| f == file)
            .flat_map(|(_, t, e)| metric_names(e).unwrap_or_else(|err| panic!("{t}: {err}")))
            .collect();
        for n in *names {
            assert!(used.contains(*n), "{file} does not show {n}");
        }
    }
    // The pieces that are not metric names.
    let kernel =
        load(&crate::common::dashboards::dashboards_dir().join("kernel-host.json")).unwrap();
    let release_table = panels(&kernel)
        .into_iter()
        .find(|p| p["title"] == "Throughput per kernel release")
        .expect("release table");
    let exprs: String = release_table["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["expr"].as_str().unwrap().to_string())
        .collect();
    for f in [
        "avg_over_time",
        "min_over_time",
        "max_over_time",
        "stddev_over_time",
    ] {
        assert!(exprs.contains(f), "release table lacks {f}");
    }
    assert!(kernel["annotations"]["list"]
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["expr"]
            .as_str()
            .is_some_and(|e| e.contains("kernel_release"))));
    let fleet = load(&crate::common::dashboards::dashboards_dir().join("fleet.json")).unwrap();
    assert!(
        fleet.to_string().contains("\"groupingToMatrix\""),
        "fleet: mesh matrix transformation missing"
    );
    // The latency matrix: p50 per source and destination, as a matrix.
    let matrix = panels(&fleet)
        .into_iter()
        .find(|p| p["title"] == "Latency matrix: p50, source → destination")
        .expect("latency matrix");
    assert!(matrix["targets"][0]["expr"]
        .as_str()
        .unwrap()
        .contains("percentile=\"50\""));
    assert_eq!(matrix["transformations"][0]["id"], "groupingToMatrix");
    assert_eq!(matrix["fieldConfig"]["defaults"]["unit"], "s");
    // The latency row: percentile bands over time and a heatmap of the
    // histogram's buckets.
    let overview =
        load(&crate::common::dashboards::dashboards_dir().join("path-overview.json")).unwrap();
    let heatmap = panels(&overview)
        .into_iter()
        .find(|p| p["type"] == "heatmap")
        .expect("latency heatmap");
    let target = &heatmap["targets"][0];
    assert_eq!(target["format"], "heatmap");
    assert!(target["expr"]
        .as_str()
        .unwrap()
        .contains("sum by (le) (increase(pathprobe_rr_latency_seconds_bucket"));
    assert_eq!(
        heatmap["options"]["calculate"], false,
        "buckets come from Prometheus"
    );
    let bands = panels(&overview)
        .into_iter()
        .find(|p| p["title"] == "Latency percentiles per probe")
        .expect("percentile bands");
    let shown: BTreeSet<&str> = bands["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| {
            t["expr"]
                .as_str()?
                .split("percentile=\"")
                .nth(1)?
                .split('"')
                .next()
        })
        .collect();
    assert_eq!(
        shown,
        BTreeSet::from(["0", "50", "90", "99", "99.9", "100"]),
        "every percentile pathprobe exports"
    );
}

#[test]
fn every_variable_in_every_query_is_known() {
    for (file, title, expr) in all_queries() {
        // label_replace's replacement "$1" is a regex group, not a
        // variable: Grafana leaves a name it has no variable for as is.
        let expr = expr.replace(r#", "$1", "#, ", ");
        assert!(
            !expr.contains('$'),
            "{file}: {title}: unsubstituted variable in {expr}"
        );
    }
    // Several values (or All) become a regex alternation, which only a `=~`
    // matcher takes.
    let mut uses = 0;
    for (file, d) in all_dashboards() {
        for (title, expr) in panel_queries(&d) {
            for name in ["instance", "target", "module"] {
                for form in [format!("${name}"), format!("${{{name}}}")] {
                    let all = expr.matches(&form).count();
                    let as_regex = expr.matches(&format!("=~\"{form}\"")).count();
                    assert_eq!(
                        all, as_regex,
                        "{file}: {title}: {form} outside =~\"...\": {expr}"
                    );
                    uses += all;
                }
            }
        }
    }
    assert!(uses > 100, "{uses}");
}

/// `promtool check rules` parses every expression: each becomes a recording
/// rule in a group named after its dashboard and panel, so an error names
/// the panel.
#[test]
fn every_expression_parses_with_promtool() {
    let queries = all_queries();
    assert!(queries.len() > 40, "only {} queries found", queries.len());
    let groups: Vec<Value> = queries
        .iter()
        .enumerate()
        .map(|(i, (file, title, expr))| {
            json!({
                "name": format!("{file} / {title} #{i}"),
                "rules": [{"record": format!("dashboard:query_{i}"), "expr": expr}],
            })
        })
        .collect();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dashboards.rules.yml");
    std::fs::write(
        &path,
        serde_yaml::to_string(&json!({ "groups": groups })).unwrap(),
    )
    .unwrap();
    let (ok, text) = promtool::run(promtool::command().args(["check", "rules"]).arg(&path));
    assert!(ok, "promtool check rules failed:\n{text}");
    assert!(
        text.contains(&format!("SUCCESS: {} rules found", queries.len())),
        "{text}"
    );
}

#[test]
fn metric_name_extractor() {
    let names = |e: &str| -> Vec<String> { metric_names(e).unwrap().into_iter().collect() };
    assert_eq!(
        names(
            r#"sum by (instance, le) (rate(a_bucket{job=~"x|y", le!="1"}[5m] offset 1h30m))
               * on (instance) group_left (release) topk without (release) (1, b_info{s="{}"})
               / ignoring(side) (c:rec:ratio * 8 / 1e9 > bool 0) or vector(0) and time() - d"#
        ),
        ["a_bucket", "b_info", "c:rec:ratio", "d"]
    );
    assert_eq!(
        names("max_over_time((x * y)[1h:1m]) unless z offset -5m"),
        ["x", "y", "z"]
    );
    assert_eq!(
        names("count(up == 0) by (job) + 1.5e-3 + 0x1f + inf"),
        ["up"]
    );
    assert_eq!(
        names("histogram_quantile(0.9, sum without (a) (h_bucket))"),
        ["h_bucket"]
    );
    assert!(metric_names(r#"x{a="b"#).is_err());
    assert!(
        metric_names("sum(x").is_ok(),
        "the extractor does not parse, promtool does"
    );
    assert!(metric_names("x[5m").is_err());
    assert!(metric_names("rate(x[$__rate_interval])").is_err());
    assert!(metric_names("x{a=~\"${target}\"} + $y").is_err());
    assert_eq!(names(r#"x{a=~"b$"}"#), ["x"]);
}

#[test]
fn variable_substitution() {
    let v = [
        ("target", "loopback"),
        ("__range", "1h"),
        ("__range_s", "3600"),
    ];
    assert_eq!(
        substitute_variables(
            r#"x{target=~"$target", t2="${target}", t3="${target:regex}"}[$__range] * $__range_s + $unknown"#,
            &v
        ),
        r#"x{target=~"loopback", t2="loopback", t3="loopback"}[1h] * 3600 + $unknown"#
    );
    assert_eq!(substitute_variables("$", &v), "$");
    assert_eq!(substitute_variables("${target", &v), "${target");
    assert_eq!(
        variable_promql(r#"label_values(m{a=~"$x", b="p,q"}, target)"#).as_deref(),
        Some(r#"m{a=~"$x", b="p,q"}"#)
    );
    assert_eq!(
        variable_promql("query_result(up == 1)").as_deref(),
        Some("up == 1")
    );
    assert_eq!(variable_promql("label_values(target)"), None);
}

// ---------------------------------------------------------------- live scrape

/// Every metric name the dashboards read is one a real `pathprobe serve`
/// exports: compared against /metrics of the default configuration after
/// its first loopback probes. One target is added that cannot work (a closed
/// port, probed every second while the loopback probes hold the only probe
/// slot for 5 s), so that the series of failures and skipped runs, which a
/// healthy host does not have, exist too.
#[test]
fn every_metric_name_is_exported_by_a_live_serve() {
    let closed_port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let mut config: serde_yaml::Value =
        serde_yaml::from_str(pathprobe::config::DEFAULT_CONFIG).unwrap();
    // A section left empty (only comments) reads as null here but as
    // "defaults" to pathprobe, which would refuse the null written back.
    config
        .as_mapping_mut()
        .expect("a mapping")
        .retain(|_, v| !v.is_null());
    // The responder on a free port, so that tests can run side by side.
    config["responder"]["listen"] = "127.0.0.1:0".into();
    config["modules"]["quick_tcp"] =
        serde_yaml::from_str("{kind: tcp, duration: 1s, connect_timeout: 1s}").unwrap();
    let targets = config["targets"]
        .as_sequence_mut()
        .expect("default targets");
    assert_eq!(targets.len(), 1, "the default config changed: {targets:?}");
    targets.push(
        serde_yaml::from_str(&format!(
            "{{name: closed, address: \"127.0.0.1:{closed_port}\", modules: [quick_tcp], interval: 1s}}"
        ))
        .unwrap(),
    );
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("pathprobe.yml");
    std::fs::write(&path, serde_yaml::to_string(&config).unwrap()).unwrap();
    let serve = Serve::start(&path);

    let want = [
        "pathprobe_probe_success{target=\"loopback\",module=\"loopback_tcp\"",
        "pathprobe_probe_success{target=\"loopback\",module=\"loopback_udp\"",
        "pathprobe_probe_failure_info{target=\"closed\"",
        "pathprobe_scheduler_runs_skipped_total{",
    ];
    let start = Instant::now();
    let body = loop {
        let body = serve.metrics();
        if want.iter().all(|w| body.contains(w)) {
            break body;
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "after 60 s, /metrics still lacks one of {want:?}:\n{body}"
        );
        std::thread::sleep(Duration::from_millis(250));
    };
    // The loopback probes of the default config really worked.
    for line in body
        .lines()
        .filter(|l| l.starts_with("pathprobe_probe_success{target=\"loopback\""))
    {
        assert!(line.ends_with(" 1"), "{line}");
    }
    let exposed = exposed_names(&body);
    assert!(
        exposed.contains("pathprobe_scheduler_lag_seconds_bucket"),
        "{exposed:?}"
    );

    // The default configuration runs no request/response probe: those
    // series are held to a serve that does.
    let rr_exposed = exposed_names(&rr::scrape());
    assert!(
        rr_exposed.contains("pathprobe_rr_latency_seconds_bucket"),
        "{rr_exposed:?}"
    );

    let rules: serde_yaml::Value = serde_yaml::from_str(
        &std::fs::read_to_string(
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("config/alerts.yml"),
        )
        .unwrap(),
    )
    .unwrap();
    let recorded: BTreeSet<String> = rules["groups"]
        .as_sequence()
        .unwrap()
        .iter()
        .flat_map(|g| g["rules"].as_sequence().unwrap().iter())
        .filter_map(|r| r["record"].as_str().map(String::from))
        .collect();
    let mut missing = Vec::new();
    let mut checked = 0;
    for (file, title, expr) in all_queries() {
        let used = metric_names(&expr).unwrap_or_else(|e| panic!("{file}: {title}: {e}"));
        assert!(!used.is_empty(), "{file}: {title}: reads no metric: {expr}");
        for name in used {
            checked += 1;
            // A recorded series (the Suspect hops table reads the
            // localization rules' score): config/alerts.yml must record it.
            if name.contains(':') {
                assert!(
                    recorded.contains(&name),
                    "{file}: {title}: {name} is recorded by no rule of config/alerts.yml"
                );
                continue;
            }
            // Only a serve in mesh mode has these; they must be defined.
            if name.starts_with("pathprobe_mesh_") {
                assert!(
                    pathprobe::metrics::names::find(&name).is_some(),
                    "{file}: {title}: {name} is not a pathprobe metric"
                );
                continue;
            }
            if rr::rr_only(&name) {
                if !rr_exposed.contains(&name) {
                    missing.push(format!("{file}: {title}: {name} (request/response serve)"));
                }
                continue;
            }
            if !exposed.contains(&name) {
                missing.push(format!("{file}: {title}: {name}"));
            }
        }
    }
    assert!(checked > 60, "{checked}");
    assert!(
        missing.is_empty(),
        "metrics not exported by pathprobe serve:\n{}\nexported: {exposed:?}",
        missing.join("\n")
    );
}

// ---------------------------------------------------------------- kernel table

/// The kernel dashboard's panel titled `title`, the dashboard's variables
/// with a 2 h range, as its release tables are evaluated, and the
/// dashboard.
fn kernel_table(title: &str) -> (Value, Vec<(&'static str, &'static str)>, Value) {
    let kernel =
        load(&crate::common::dashboards::dashboards_dir().join("kernel-host.json")).unwrap();
    let values = default_values()
        .into_iter()
        .map(|(k, v)| if k == "__range" { (k, "2h") } else { (k, v) })
        .collect();
    let table = panels(&kernel)
        .into_iter()
        .find(|p| p["title"] == title)
        .unwrap_or_else(|| panic!("no panel {title:?}"))
        .clone();
    (table, values, kernel)
}

/// The "Throughput per kernel release" table and the kernel-change
/// annotation, on synthetic series through `promtool test rules`: one path,
/// 40 minutes each on releases A (100 B/s), B (80 and 20 alternating: mean
/// 50, erratic) and C (25), evaluated at the end with a 2 h range and 1 m
/// steps. Figures chosen so that results are exact in binary floating point.
#[test]
fn kernel_release_table_computes_what_its_description_says() {
    let (table, values, kernel) = kernel_table("Throughput per kernel release");
    let mut rules = Vec::new();
    for t in table["targets"].as_array().unwrap() {
        let r = t["refId"].as_str().unwrap();
        let e = substitute_variables(t["expr"].as_str().unwrap(), &values);
        rules.push(json!({"record": format!("table:{r}"), "expr": e}));
    }
    let anno = panel_queries(&kernel)
        .into_iter()
        .find(|(t, _)| t == "annotation Kernel release changed")
        .expect("kernel annotation")
        .1;
    rules
        .push(json!({"record": "annotation:kernel", "expr": substitute_variables(&anno, &values)}));

    let path =
        r#"instance="h",job="p",target="loopback",module="m",kind="loopback_tcp",direction="send""#;
    let minutes = 120;
    let present = |from: usize, to: usize| present_minutes(minutes, from, to);
    let throughput: Vec<&str> = (0..minutes)
        .map(|i| match i {
            0..40 => "100",
            40..80 if i % 2 == 0 => "80",
            40..80 => "20",
            _ => "25",
        })
        .collect();
    let mut series = vec![json!({
        "series": format!("pathprobe_throughput_bytes_per_second{{{path},flow=\"send\"}}"),
        "values": throughput.join(" "),
    })];
    for (release, from, to) in [("A", 0, 40), ("B", 40, 80), ("C", 80, 120)] {
        series.push(json!({
            "series": format!("pathprobe_probe_kernel_info{{{path},side=\"local\",release=\"{release}\"}}"),
            "values": present(from, to),
        }));
        series.push(json!({
            "series": format!("pathprobe_host_info{{instance=\"h\",job=\"p\",kernel_release=\"{release}\"}}"),
            "values": present(from, to),
        }));
    }
    let out_labels = r#"instance="h",job="p",target="loopback",module="m",kind="loopback_tcp",direction="send",flow="send""#;
    let samples = |rec: &str, per_release: &[(&str, f64)]| -> Value {
        json!({
            "expr": rec,
            "eval_time": "119m",
            "exp_samples": per_release.iter().map(|(r, v)| json!({
                "labels": format!("{rec}{{{out_labels},release=\"{r}\"}}"),
                "value": v,
            })).collect::<Vec<_>>(),
        })
    };
    let anno_at = |t: &str, release: Option<&str>| -> Value {
        json!({
            "expr": "annotation:kernel",
            "eval_time": t,
            "exp_samples": release.map(|r| vec![json!({
                "labels": format!("annotation:kernel{{instance=\"h\",kernel_release=\"{r}\"}}"),
                "value": 1,
            })]).unwrap_or_default(),
        })
    };
    let tests = json!({
        "rule_files": ["table.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                // bit/s: bytes times 8
                samples("table:A", &[("A", 800.0), ("B", 400.0), ("C", 200.0)]),
                samples("table:B", &[("A", 800.0), ("B", 160.0), ("C", 200.0)]),
                samples("table:C", &[("A", 800.0), ("B", 640.0), ("C", 200.0)]),
                samples("table:D", &[("A", 0.0), ("B", 240.0), ("C", 0.0)]),
                // CV: B is erratic
                samples("table:E", &[("A", 0.0), ("B", 0.6), ("C", 0.0)]),
                samples("table:F", &[("A", 40.0), ("B", 40.0), ("C", 40.0)]),
                // % vs previous: only the current release, C against B
                samples("table:G", &[("C", -0.5)]),
                // % vs first: every release against A
                samples("table:H", &[("A", 0.0), ("B", -0.5), ("C", -0.75)]),
                // No mark when a host first appears, one for 30 minutes
                // after each change, none after that.
                anno_at("5m", None),
                anno_at("40m", Some("B")),
                anno_at("69m", Some("B")),
                anno_at("70m", None),
                anno_at("95m", Some("C")),
            ],
        }],
    });
    run_table_test(rules, &tests);
}

/// Runs `tests` (a promtool test file reading `table.rules.yml`) against
/// `rules`, recorded in one group.
fn run_table_test(rules: Vec<Value>, tests: &Value) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("table.rules.yml"),
        serde_yaml::to_string(&json!({"groups": [{"name": "table", "rules": rules}]})).unwrap(),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("table.test.yml"),
        serde_yaml::to_string(tests).unwrap(),
    )
    .unwrap();
    let (ok, text) = promtool::run(promtool::command().current_dir(dir.path()).args([
        "test",
        "rules",
        "table.test.yml",
    ]));
    assert!(ok, "{text}");
}

/// The "Request/response per kernel release" table on synthetic series
/// through `promtool test rules`: one tcp_rr path, an hour each on releases
/// A and B, evaluated at the end with a 2 h range and 1 m steps. B doubles
/// the p50, makes the p99 swing, halves the rate and doubles the prober's
/// CPU per transaction. Every figure is a power of two (or three times one),
/// so that the results are exact in binary floating point.
#[test]
fn rr_release_table_computes_what_its_description_says() {
    let (table, values, _) = kernel_table("Request/response per kernel release");
    let rules: Vec<Value> = table["targets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| {
            let r = t["refId"].as_str().unwrap();
            let e = substitute_variables(t["expr"].as_str().unwrap(), &values);
            json!({"record": format!("table:{r}"), "expr": e})
        })
        .collect();
    // Each column's name, as the table shows it, for its refId.
    let names = &table["transformations"][1]["options"]["renameByName"];

    let path = r#"instance="h",job="p",target="peer",module="rr",kind="tcp_rr",direction="send""#;
    let minutes = 120;
    // `a` for the first hour (release A), `b` for the second (B).
    let per_release = |a: &str, b: &str| -> String {
        (0..minutes)
            .map(|i| if i < 60 { a } else { b })
            .collect::<Vec<_>>()
            .join(" ")
    };
    let present = |from: usize, to: usize| present_minutes(minutes, from, to);
    // 2^-10 and 2^-9 s in turns under B: mean 3 x 2^-11, max 2^-9.
    let p99: Vec<&str> = (0..minutes)
        .map(|i| match i {
            0..60 => "0.00048828125",
            _ if i % 2 == 0 => "0.0009765625",
            _ => "0.001953125",
        })
        .collect();
    let mut series = vec![
        json!({
            "series": format!("pathprobe_rr_latency_percentile_seconds{{{path},percentile=\"50\"}}"),
            "values": per_release("0.0001220703125", "0.000244140625"),
        }),
        json!({
            "series": format!("pathprobe_rr_latency_percentile_seconds{{{path},percentile=\"99\"}}"),
            "values": p99.join(" "),
        }),
        // Another percentile, which no column reads.
        json!({
            "series": format!("pathprobe_rr_latency_percentile_seconds{{{path},percentile=\"100\"}}"),
            "values": per_release("1", "1"),
        }),
        json!({
            "series": format!("pathprobe_rr_transactions_per_second{{{path}}}"),
            "values": per_release("4096", "2048"),
        }),
        json!({
            "series": format!("pathprobe_rr_cpu_seconds_per_transaction{{{path},side=\"local\"}}"),
            "values": per_release("0.0000152587890625", "0.000030517578125"),
        }),
        json!({
            "series": format!("pathprobe_rr_cpu_seconds_per_transaction{{{path},side=\"remote\"}}"),
            "values": per_release("0.00000762939453125", "0.00000762939453125"),
        }),
        // The peer's release, which the table does not group by.
        json!({
            "series": format!("pathprobe_probe_kernel_info{{{path},side=\"remote\",release=\"R\"}}"),
            "values": present(0, minutes),
        }),
    ];
    for (release, from, to) in [("A", 0, 60), ("B", 60, minutes)] {
        series.push(json!({
            "series": format!("pathprobe_probe_kernel_info{{{path},side=\"local\",release=\"{release}\"}}"),
            "values": present(from, to),
        }));
    }
    let column = |name: &str, a: f64, b: f64| -> Value {
        let r = names
            .as_object()
            .unwrap()
            .iter()
            .find(|(_, v)| v.as_str() == Some(name))
            .and_then(|(k, _)| k.strip_prefix("Value #"))
            .unwrap_or_else(|| panic!("no column {name:?}"));
        let rec = format!("table:{r}");
        let samples: Vec<Value> = [("A", a), ("B", b)]
            .iter()
            .map(|(rel, v)| {
                json!({
                    "labels": format!("{rec}{{{path},release=\"{rel}\"}}"),
                    "value": v,
                })
            })
            .collect();
        json!({"expr": rec, "eval_time": "119m", "exp_samples": samples})
    };
    let tests = json!({
        "rule_files": ["table.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{
            "interval": "1m",
            "input_series": series,
            "promql_expr_test": [
                column("Mean p50", 0.0001220703125, 0.000244140625),
                column("Mean p99", 0.00048828125, 0.00146484375),
                column("Max p99", 0.00048828125, 0.001953125),
                column("Transactions/s", 4096.0, 2048.0),
                column("CPU per transaction, local", 0.0000152587890625, 0.000030517578125),
                column("CPU per transaction, remote", 0.00000762939453125, 0.00000762939453125),
                column("Samples", 60.0, 60.0),
                // B's p50 is twice A's: 100% slower than the first release.
                column("p50 % vs first", 0.0, 1.0),
            ],
        }],
    });
    assert_eq!(
        rules.len(),
        8,
        "a column added to the table needs a line here"
    );
    run_table_test(rules, &tests);
}

/// Every entry of MAY_BE_EMPTY names a real query, and exactly the queries
/// it means: a stale entry would let an end-to-end test skip a query that
/// must return data.
#[test]
fn may_be_empty_names_real_queries() {
    let queries = all_queries();
    for (title, piece) in MAY_BE_EMPTY {
        let matching: Vec<_> = queries
            .iter()
            .filter(|(_, t, e)| t == title && piece.is_none_or(|p| e.contains(p)))
            .collect();
        assert!(
            !matching.is_empty(),
            "MAY_BE_EMPTY: no query {title:?} {piece:?}"
        );
        if piece.is_some() {
            assert_eq!(matching.len(), 1, "{title:?} {piece:?}: {matching:?}");
        }
    }
    let kernel_table: Vec<_> = queries
        .iter()
        .filter(|(_, t, e)| t == "Throughput per kernel release" && may_be_empty(t, e))
        .collect();
    assert_eq!(kernel_table.len(), 1, "{kernel_table:?}");
    assert!(kernel_table[0].2.contains("topk without (release)"));
    let must = queries
        .iter()
        .filter(|(_, t, e)| !may_be_empty(t, e))
        .count();
    assert!(must > 45, "only {must} queries must return data");
}

/// A promtool input series of `minutes` values: 1 in [from, to) minutes,
/// stale at `to`, absent otherwise.
fn present_minutes(minutes: usize, from: usize, to: usize) -> String {
    (0..minutes)
        .map(|i| match i {
            i if (from..to).contains(&i) => "1",
            i if i == to => "stale",
            _ => "_",
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// Issue 21: a request/response probe (tcp_rr, udp_rr, tcp_crr) exports
/// pathprobe_throughput_bytes_per_second too, the bytes of its
/// transactions, which mean nothing as a path's throughput. Every
/// throughput panel (a title that says throughput or bit/s) selects the
/// throughput kinds only: each of its selectors of that metric has a `kind`
/// matcher that no request/response kind passes, and some throughput kind
/// does.
#[test]
fn throughput_panels_leave_request_response_kinds_out() {
    let selector = regex::Regex::new(r"pathprobe_throughput_bytes_per_second\{([^}]*)\}").unwrap();
    let kind = regex::Regex::new(r#"kind(=~|!~)"([^"]*)""#).unwrap();
    let mut checked = 0;
    for (file, d) in all_dashboards() {
        for (title, expr) in panel_queries(&d) {
            let lower = title.to_lowercase();
            if !(lower.contains("throughput") || lower.contains("bit/s")) {
                continue;
            }
            for sel in selector.captures_iter(&expr) {
                checked += 1;
                let m = kind
                    .captures(&sel[1])
                    .unwrap_or_else(|| panic!("{file} {title:?}: no kind matcher in {}", &sel[0]));
                let re = regex::Regex::new(&format!("^(?:{})$", &m[2])).unwrap();
                let passes = |k: &str| re.is_match(k) == (&m[1] == "=~");
                for rr in ["tcp_rr", "udp_rr", "tcp_crr"] {
                    assert!(!passes(rr), "{file} {title:?} shows {rr}: {}", &sel[0]);
                }
                assert!(
                    [
                        "tcp",
                        "udp",
                        "loopback_tcp",
                        "loopback_udp",
                        "iperf3_tcp",
                        "iperf3_udp"
                    ]
                    .iter()
                    .any(|k| passes(k)),
                    "{file} {title:?} shows no throughput kind: {}",
                    &sel[0]
                );
            }
        }
    }
    // The mesh matrices, per-path and per-release throughput, the path's
    // throughput, and loopback throughput.
    assert!(checked >= 14, "{checked} selectors");
}

/// Issue 25: the fleet matrices named a host `host:9813` as the prober
/// (row) and `host:5301` (or a config name) as the target (column), so the
/// diagonal was not diagonal. Each matrix query runs through `promtool test
/// rules` on two hosts probing each other and a loopback target: a host
/// must have one name on both axes.
#[test]
fn fleet_matrices_name_a_host_the_same_way_on_both_axes() {
    let fleet = load(&crate::common::dashboards::dashboards_dir().join("fleet.json")).unwrap();
    let matrices: Vec<Value> = panels(&fleet)
        .into_iter()
        .filter(|p| p["transformations"][0]["id"] == "groupingToMatrix")
        .cloned()
        .collect();
    assert!(matrices.len() >= 6, "{}", matrices.len());
    // Every label any matrix selects on, for each (prober, target) pair.
    let pairs = [
        ("10.0.0.1:9813", "10.0.0.2:5301"),
        ("10.0.0.2:9813", "10.0.0.1:5301"),
        ("10.0.0.1:9813", "loopback"),
        ("[fd00::3]:9813", "10.0.0.1:5301"),
    ];
    let mut input = Vec::new();
    for (instance, target) in pairs {
        for flow in ["send", "receive"] {
            for percentile in ["50", "99"] {
                let labels = format!(
                    r#"{{instance="{instance}",job="p",target="{target}",module="m",kind="tcp_rr",direction="{flow}",flow="{flow}",percentile="{percentile}"}}"#
                );
                for metric in [
                    "pathprobe_throughput_bytes_per_second",
                    "pathprobe_probe_last_success_timestamp_seconds",
                    "pathprobe_rr_latency_percentile_seconds",
                ] {
                    input.push(json!({"series": format!("{metric}{labels}"), "values": "1x5"}));
                }
                // The throughput matrices select throughput kinds only.
                let tcp = labels.replace(r#"kind="tcp_rr""#, r#"kind="tcp""#);
                input.push(json!({
                    "series": format!("pathprobe_throughput_bytes_per_second{tcp}"),
                    "values": "1x5"
                }));
            }
        }
    }
    let mut cases = Vec::new();
    for m in &matrices {
        let o = &m["transformations"][0]["options"];
        let (row, column) = (
            o["rowField"].as_str().unwrap(),
            o["columnField"].as_str().unwrap(),
        );
        let expr =
            substitute_variables(m["targets"][0]["expr"].as_str().unwrap(), &default_values());
        let kind = if m["title"].as_str().unwrap().starts_with("Latency") {
            " tcp_rr"
        } else {
            ""
        };
        let host = |h: &str| format!("{h}{kind}");
        let exp: Vec<Value> = [
            (host("10.0.0.1"), "10.0.0.2"),
            (host("10.0.0.2"), "10.0.0.1"),
            (host("10.0.0.1"), "loopback"),
            (host("[fd00::3]"), "10.0.0.1"),
        ]
        .iter()
        .map(|(s, d)| json!({"labels": format!(r#"{{{row}="{s}",{column}="{d}"}}"#), "value": 1}))
        .collect();
        cases.push(json!({
            "expr": format!("count by ({row}, {column}) ({expr})"),
            "eval_time": "2m",
            "exp_samples": exp,
        }));
    }
    let tests = json!({
        "rule_files": ["table.rules.yml"],
        "evaluation_interval": "1m",
        "tests": [{"interval": "1m", "input_series": input, "promql_expr_test": cases}],
    });
    run_table_test(
        vec![json!({"record": "unused", "expr": "vector(1)"})],
        &tests,
    );
}

/// What a panel's description says when it works at `metrics.detail:
/// fleet`, and when it needs `full`.
const WORKS_AT_FLEET: &str = "Works at metrics.detail: fleet.";
const NEEDS_FULL: &str = "Needs metrics.detail: full";

/// Issue 22: the Path overview and Kernel and host dashboards at either
/// detail level. Every panel says which it works at; a panel that says
/// fleet reads only what a fleet-detail host exports (the families
/// `metrics::budget::FLEET_FAMILIES` keeps per path, the probe counters
/// summed per module, host and service series), only the percentiles and
/// kernel side it keeps, and reads the summed counters in their fleet form
/// too (`target=""`: no target label), since a `target=~"$target"` of one
/// target finds none of them. A panel that says full must really read
/// something fleet drops, so that no panel is hidden at fleet for
/// nothing. The variables work at both.
#[test]
fn every_panel_reads_only_what_its_stated_detail_exports() {
    use pathprobe::metrics::budget::{FLEET_FAMILIES, FLEET_PERCENTILES};
    use pathprobe::metrics::names::{self, Scope};
    const SUMMED: [&str; 3] = [
        "pathprobe_probes_total",
        "pathprobe_scheduler_runs_skipped_total",
        "pathprobe_scheduler_busy_retries_total",
    ];
    // Why a query needs full detail, if it does.
    let needs_full = |expr: &str| -> Vec<String> {
        let mut why = Vec::new();
        for metric in metric_names(expr).unwrap_or_else(|e| panic!("{expr}: {e}")) {
            let base = ["_bucket", "_sum", "_count"]
                .iter()
                .find_map(|s| metric.strip_suffix(s))
                .unwrap_or(&metric);
            match names::find(base) {
                Some(d) if d.scope == Scope::Probe => {
                    let kept = FLEET_FAMILIES.iter().any(|f| f.name == d.name);
                    if !kept && !SUMMED.contains(&d.name) {
                        why.push(metric.clone());
                    }
                    if SUMMED.contains(&d.name) && !expr.contains("target=\"\"") {
                        why.push(format!("{metric} without its fleet form"));
                    }
                }
                Some(_) => {}
                None => panic!("{metric} is not a pathprobe metric: {expr}"),
            }
        }
        for (at, _) in expr.match_indices("percentile=\"") {
            let p: String = expr[at + 12..].chars().take_while(|c| *c != '"').collect();
            if !FLEET_PERCENTILES.contains(&p.as_str()) {
                why.push(format!("percentile {p}"));
            }
        }
        if expr.contains("pathprobe_probe_kernel_info") && expr.contains("side=\"remote\"") {
            why.push("the peer's kernel release".into());
        }
        why
    };
    let values = default_values();
    for file in ["path-overview.json", "kernel-host.json"] {
        let d = load(&crate::common::dashboards::dashboards_dir().join(file)).unwrap();
        let (mut fleet, mut full) = (0, 0);
        for panel in panels(&d) {
            let title = panel["title"].as_str().unwrap_or_default();
            let desc = panel["description"].as_str().unwrap_or_default();
            let says_fleet = desc.contains(WORKS_AT_FLEET);
            assert!(
                says_fleet != desc.contains(NEEDS_FULL),
                "{file}: {title:?} must say either {WORKS_AT_FLEET:?} or {NEEDS_FULL:?}"
            );
            let why: Vec<String> = panel["targets"]
                .as_array()
                .map_or(&[][..], Vec::as_slice)
                .iter()
                .filter_map(|t| t["expr"].as_str())
                .flat_map(|e| needs_full(&substitute_variables(e, &values)))
                .collect();
            if says_fleet {
                assert!(
                    why.is_empty(),
                    "{file}: {title:?} says it works at fleet, but reads {why:?}"
                );
                fleet += 1;
            } else {
                assert!(
                    !why.is_empty(),
                    "{file}: {title:?} says it needs full, but reads only what fleet exports"
                );
                full += 1;
            }
        }
        for (name, expr) in panel_queries(&d)
            .into_iter()
            .filter(|(n, _)| n.starts_with("variable "))
        {
            let why = needs_full(&substitute_variables(&expr, &values));
            assert!(why.is_empty(), "{file}: {name} needs {why:?}");
        }
        eprintln!("{file}: {fleet} panels work at fleet, {full} need full");
        assert!(fleet >= 5 && full >= 3, "{file}: {fleet} / {full}");
    }
}

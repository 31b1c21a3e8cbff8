//! The docs held to what the binary does: docs/JSON.md's `--json-stream`
//! table against real loopback runs of `pathprobe probe --json-stream`
//! (issue 25 point 6), and README's advice on plain targets or mesh mode
//! against the names it cites (point 4).

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;

use crate::common::responder;

/// A file of the repository, read when the test runs.
fn repo_file(path: &str) -> String {
    let full = format!("{}/{path}", env!("CARGO_MANIFEST_DIR"));
    std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{full}: {e}"))
}

/// `text` without its parenthesised parts (nested ones too).
fn outside_parentheses(text: &str) -> String {
    let mut depth = 0usize;
    text.chars()
        .filter(|c| match c {
            '(' => {
                depth += 1;
                false
            }
            ')' => {
                depth = depth.saturating_sub(1);
                false
            }
            _ => depth == 0,
        })
        .collect()
}

/// The backticked words of `text`.
fn backticked(text: &str) -> Vec<String> {
    text.split('`')
        .skip(1)
        .step_by(2)
        .map(str::to_string)
        .collect()
}

/// What one line of the table says an event carries: keys always there,
/// and keys there only on a stream of the named protocol and role
/// (`retransmits` (TCP sender)).
#[derive(Debug, Default)]
struct EventKeys {
    always: BTreeSet<String>,
    when: BTreeMap<String, Vec<String>>,
}

/// docs/JSON.md's `--json-stream` table, by event.
fn stream_table() -> BTreeMap<String, EventKeys> {
    let page = repo_file("docs/JSON.md");
    let section = page
        .split("\n## `--json-stream`")
        .nth(1)
        .expect("JSON.md has a --json-stream section");
    let section = section.split("\n## ").next().unwrap();
    let section = section.split("\n### ").next().unwrap();
    let mut table = BTreeMap::new();
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.trim_matches('|').split(" | ").collect();
        assert_eq!(cells.len(), 3, "{row}");
        if cells[1] == "when" {
            continue; // the header
        }
        let event = backticked(cells[0]).remove(0);
        // Keys are named before any colon that explains them; values and
        // remarks stand in parentheses.
        let keys_text = cells[2];
        let plain = outside_parentheses(keys_text);
        let plain = plain.split(':').next().unwrap();
        let mut keys = EventKeys::default();
        for key in backticked(plain) {
            // The parenthesis right after a key, if it names only a
            // protocol and a role, is when the key is there.
            let after = keys_text
                .split(&format!("`{key}` ("))
                .nth(1)
                .and_then(|t| t.split(')').next())
                .map(|t| t.split_whitespace().map(str::to_string).collect::<Vec<_>>());
            match after {
                Some(words)
                    if words
                        .iter()
                        .all(|w| ["TCP", "UDP", "sender", "receiver"].contains(&w.as_str())) =>
                {
                    keys.when.insert(key, words);
                }
                _ => {
                    keys.always.insert(key);
                }
            }
        }
        table.insert(event, keys);
    }
    table
}

/// The keys the table gives `event` on a `protocol` stream (`TCP`/`UDP`)
/// whose side plays `role`, `event` itself included.
fn expected_keys(
    table: &BTreeMap<String, EventKeys>,
    event: &str,
    protocol: &str,
    role: Option<&str>,
) -> BTreeSet<String> {
    let e = table
        .get(event)
        .unwrap_or_else(|| panic!("JSON.md's table has no {event:?} event"));
    let mut keys = e.always.clone();
    keys.insert("event".to_string());
    for (key, words) in &e.when {
        let applies = words
            .iter()
            .all(|w| w == protocol || Some(w.as_str()) == role);
        if applies {
            keys.insert(key.clone());
        }
    }
    keys
}

/// Runs `pathprobe probe --json-stream` with `args` and returns its events.
async fn json_stream(args: Vec<String>) -> (bool, Vec<serde_json::Value>) {
    let out = tokio::task::spawn_blocking(move || {
        Command::new(env!("CARGO_BIN_EXE_pathprobe"))
            .arg("probe")
            .args(&args)
            .arg("--json-stream")
            .output()
            .unwrap()
    })
    .await
    .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let events = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{l:?}: {e}")))
        .collect();
    (out.status.success(), events)
}

fn keys_of(v: &serde_json::Value) -> BTreeSet<String> {
    v.as_object().unwrap().keys().cloned().collect()
}

/// Issue 25 point 6: every event of a TCP and a UDP run with `-i`, and of
/// a failed one, carries exactly the keys docs/JSON.md's table gives it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_json_stream_table_matches_real_tcp_and_udp_runs() {
    let table = stream_table();
    assert_eq!(
        table.keys().map(String::as_str).collect::<Vec<_>>(),
        ["end", "error", "interval", "start"],
        "{table:?}"
    );
    let (addr, _counters, _stop) = responder::start(Default::default()).await;
    for protocol in ["TCP", "UDP"] {
        let mut args: Vec<String> = ["-t", "1", "-i", "0.5", "-b", "50m"]
            .map(String::from)
            .to_vec();
        if protocol == "UDP" {
            args.push("-u".into());
        }
        args.push(addr.to_string());
        let (ok, events) = json_stream(args).await;
        assert!(ok, "{protocol}: {events:?}");
        let names: Vec<&str> = events
            .iter()
            .map(|v| v["event"].as_str().unwrap())
            .collect();
        assert_eq!(names.first(), Some(&"start"), "{protocol}: {names:?}");
        assert_eq!(names.last(), Some(&"end"), "{protocol}: {names:?}");
        let mut seen = BTreeSet::new();
        for v in &events {
            let event = v["event"].as_str().unwrap();
            let role = v.get("role").and_then(|r| r.as_str());
            assert_eq!(
                keys_of(v),
                expected_keys(&table, event, protocol, role),
                "{protocol} {event}: {v}"
            );
            if event == "interval" {
                seen.insert((
                    v["side"].as_str().unwrap().to_string(),
                    role.unwrap().to_string(),
                ));
            }
        }
        // This host sends: its own sender intervals and the responder's
        // receiver intervals, so each conditional key was put to the test.
        assert_eq!(
            seen,
            BTreeSet::from([
                ("local".to_string(), "sender".to_string()),
                ("remote".to_string(), "receiver".to_string()),
            ]),
            "{protocol}"
        );
    }
    // Nothing listens on a port just freed: the run fails, and says so in
    // an `error` event where `end` would be.
    let free = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let (ok, events) = json_stream(vec!["-t".into(), "1".into(), free.to_string()]).await;
    assert!(!ok);
    let last = events.last().expect("an error event");
    assert_eq!(last["event"], "error", "{events:?}");
    assert_eq!(keys_of(last), expected_keys(&table, "error", "TCP", None));
}

/// README's bullet that starts with `**{lead}`, to the next bullet.
fn readme_bullet(readme: &str, lead: &str) -> String {
    let start = readme
        .find(&format!("\n- **{lead}"))
        .unwrap_or_else(|| panic!("README has no bullet {lead:?}"));
    let rest = &readme[start + 1..];
    let end = rest[1..].find("\n- ").map_or(rest.len(), |i| i + 1);
    rest[..end].split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Issue 25 point 4: README's advice on plain targets or mesh mode cites
/// only what exists: the metrics and label values it names, the config
/// key it tells to set, the check-config line it quotes, the test it
/// points to, the files it links, and the figures it gives.
#[test]
fn the_readme_advice_on_plain_targets_or_mesh_mode_names_what_exists() {
    use pathprobe::metrics::names;
    let readme = repo_file("README.md");
    let advice = [
        readme_bullet(&readme, "Two hosts probing each other"),
        readme_bullet(&readme, "Which to use: plain targets or mesh mode."),
    ]
    .join(" ");
    let cited = backticked(&advice);

    // Metrics, and the label values they are cited with.
    let metrics: Vec<&String> = cited
        .iter()
        .filter(|c| c.starts_with("pathprobe_"))
        .collect();
    assert!(metrics.len() >= 4, "{metrics:?}");
    let skip_reasons: Vec<&str> = pathprobe::scheduler::Skip::ALL
        .iter()
        .map(|s| s.as_str())
        .collect();
    for m in metrics {
        let (name, labels) = m.split_once('{').unwrap_or((m, ""));
        let def = names::ALL
            .iter()
            .find(|d| d.name == name)
            .unwrap_or_else(|| panic!("README cites {name}, which pathprobe does not define"));
        for pair in labels
            .trim_end_matches('}')
            .split(',')
            .filter(|p| !p.is_empty())
        {
            let (label, value) = pair.split_once('=').unwrap();
            assert!(def.labels.contains(&label), "{m}: no label {label}");
            if name == "pathprobe_scheduler_runs_skipped_total" {
                assert!(skip_reasons.contains(&value.trim_matches('"')), "{m}");
            }
        }
    }

    // Config keys (`section.key: value`): a config setting them loads, as
    // one with a misspelt key does not.
    let sections = [
        "discovery",
        "scheduler",
        "responder",
        "web",
        "trace",
        "metrics",
    ];
    let keys: Vec<&String> = cited
        .iter()
        .filter(|c| {
            c.split('.').count() > 1
                && sections.contains(&c.split('.').next().unwrap())
                && (!c.contains(' ') || c.contains(": "))
        })
        .collect();
    assert!(!keys.is_empty(), "{cited:?}");
    let yaml = |dotted: &str, value: &str| {
        let (section, key) = dotted.split_once('.').unwrap();
        format!("{section}:\n  {key}: {value}\n")
    };
    for k in &keys {
        let (dotted, value) = k.split_once(": ").unwrap_or((k, "true"));
        pathprobe::config::Config::from_yaml(&yaml(dotted, value), "readme.yml")
            .unwrap_or_else(|e| panic!("README's {k}: {e}"));
        let typo = format!("{dotted}x");
        assert!(
            pathprobe::config::Config::from_yaml(&yaml(&typo, value), "readme.yml").is_err(),
            "a misspelt {typo} loads too, so the check above proves nothing"
        );
    }

    // The check-config line it quotes, for the config it describes.
    let quoted = cited
        .iter()
        .find(|c| c.starts_with("mesh schedule: "))
        .expect("README quotes check-config's mesh schedule line");
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("mesh.yml");
    std::fs::write(
        &file,
        "modules:\n  tcp: {kind: tcp, duration: 5s}\ndiscovery: {mesh: true}\ntargets:\n  \
         - {address: 127.0.0.1, modules: [tcp]}\n  - {address: 192.0.2.2, modules: [tcp]}\n  \
         - {address: 192.0.2.3, modules: [tcp]}\n",
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_pathprobe"))
        .arg("check-config")
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8(out.stdout).unwrap();
    assert!(out.status.success(), "{said}");
    assert!(
        said.lines().any(|l| l == quoted),
        "README: {quoted}\ncheck-config: {said}"
    );

    // The test it points to, and the files it links.
    for c in cited.iter().filter(|c| c.contains("::")) {
        let (module, test) = c.split_once("::").unwrap();
        let source = repo_file(&format!("tests/integration/{module}.rs"));
        assert!(
            source.contains(&format!("async fn {test}("))
                || source.contains(&format!("fn {test}(")),
            "{c}"
        );
    }
    for link in advice
        .split("](")
        .skip(1)
        .map(|l| l.split(')').next().unwrap())
    {
        let path = format!("{}/{link}", env!("CARGO_MANIFEST_DIR"));
        assert!(std::path::Path::new(&path).exists(), "README links {link}");
    }

    // Its figures.
    let yields = pathprobe::scheduler::YIELDS_PER_RUN;
    assert!(
        advice.contains(&format!("at most {yields} times")),
        "{advice}"
    );
    let settle = pathprobe::slot::SETTLE_GRACE.as_secs();
    assert!(
        advice.contains(&format!("waits up to {settle} s")),
        "{advice}"
    );
}

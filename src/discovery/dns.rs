//! DNS discovery: turning `discovery.dns` names into peers, re-resolved
//! every `refresh_interval`.
//!
//! A and AAAA names go through the system resolver (getaddrinfo, via
//! tokio), so /etc/hosts and nsswitch apply as for every other program on
//! the host. SRV records need a real DNS client, which std and tokio do not
//! have; hickory-resolver provides it, reading /etc/resolv.conf with its
//! search list and `ndots` (which Kubernetes relies on), retrying over TCP
//! when a large answer is truncated, and trying each nameserver. The SRV
//! query sits behind [`SrvResolver`] so tests and callers can substitute
//! their own.

use std::collections::BTreeMap;
use std::future::Future;
use std::net::SocketAddr;

use hickory_resolver::TokioResolver;
use tokio::sync::mpsc;

use super::DiscoveredTarget;
use crate::config::{DnsRecordType, DnsSdConfig};
use crate::probe::Target;

/// One SRV answer (RFC 2782). Priority and weight are kept for the record;
/// discovery probes every target regardless.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SrvRecord {
    /// Lower is preferred.
    pub priority: u16,
    /// Share among records of the same priority.
    pub weight: u16,
    /// The responder port on `target`.
    pub port: u16,
    /// Host name of the target, without the trailing dot.
    pub target: String,
}

/// Answers SRV queries. Implementations return an empty list when the name
/// has no SRV records, so that a service scaled to zero is not an error.
pub trait SrvResolver {
    /// The SRV records of `name`.
    fn lookup_srv(
        &self,
        name: &str,
    ) -> impl Future<Output = Result<Vec<SrvRecord>, DnsError>> + Send;
}

/// The system's DNS servers and search list, from /etc/resolv.conf.
#[derive(Debug, Clone)]
pub struct SystemSrvResolver {
    inner: TokioResolver,
}

impl SystemSrvResolver {
    /// Reads /etc/resolv.conf. Keep one and reuse it: it caches answers
    /// within their TTL.
    pub fn from_system_conf() -> Result<SystemSrvResolver, DnsError> {
        let builder = TokioResolver::builder_tokio().map_err(|e| DnsError::Setup(e.to_string()))?;
        Ok(SystemSrvResolver {
            inner: builder.build(),
        })
    }
}

impl SrvResolver for SystemSrvResolver {
    async fn lookup_srv(&self, name: &str) -> Result<Vec<SrvRecord>, DnsError> {
        match self.inner.srv_lookup(name).await {
            Ok(answer) => Ok(answer
                .iter()
                .map(|srv| SrvRecord {
                    priority: srv.priority(),
                    weight: srv.weight(),
                    port: srv.port(),
                    target: srv.target().to_utf8(),
                })
                .collect()),
            Err(e) if e.is_no_records_found() => Ok(Vec::new()),
            Err(e) => Err(DnsError::Lookup {
                name: name.to_string(),
                record_type: "SRV",
                message: e.to_string(),
            }),
        }
    }
}

/// Resolves every name of `entry` to `(name, address)` pairs, where `name`
/// is the DNS name the address belongs to (the queried name for A/AAAA, the
/// record's target host for SRV). Sorted and without duplicates, so that
/// two resolutions of an unchanged fleet compare equal. Any failing name
/// fails the whole entry: the caller keeps the peers it had rather than
/// dropping some on a transient error.
pub async fn resolve_dns(entry: &DnsSdConfig) -> Result<Vec<(String, SocketAddr)>, DnsError> {
    match entry.record_type {
        DnsRecordType::Srv => {
            resolve_dns_with(entry, &SystemSrvResolver::from_system_conf()?).await
        }
        DnsRecordType::A | DnsRecordType::Aaaa => resolve_dns_with(entry, &NoSrv).await,
    }
}

/// As [`resolve_dns`], with the SRV queries answered by `srv`.
pub async fn resolve_dns_with<R: SrvResolver + Sync>(
    entry: &DnsSdConfig,
    srv: &R,
) -> Result<Vec<(String, SocketAddr)>, DnsError> {
    let mut peers = Vec::new();
    for name in &entry.names {
        match entry.record_type {
            DnsRecordType::A | DnsRecordType::Aaaa => {
                let want_v6 = entry.record_type == DnsRecordType::Aaaa;
                for addr in lookup(name, entry.port(), entry.record_type.as_str()).await? {
                    if addr.is_ipv6() == want_v6 {
                        peers.push((name.clone(), addr));
                    }
                }
            }
            DnsRecordType::Srv => {
                for record in srv.lookup_srv(name).await? {
                    let host = record.target.trim_end_matches('.');
                    // RFC 2782: a target of "." means the service is
                    // decidedly not available at this name.
                    if host.is_empty() {
                        continue;
                    }
                    for addr in lookup(host, record.port, "A/AAAA").await? {
                        peers.push((host.to_string(), addr));
                    }
                }
            }
        }
    }
    peers.sort();
    peers.dedup();
    Ok(peers)
}

async fn lookup(
    host: &str,
    port: u16,
    record_type: &'static str,
) -> Result<Vec<SocketAddr>, DnsError> {
    tokio::net::lookup_host((host, port))
        .await
        .map(|addrs| addrs.collect())
        .map_err(|e| DnsError::Lookup {
            name: host.to_string(),
            record_type,
            message: e.to_string(),
        })
}

/// Stands in for the SRV resolver on A/AAAA entries, which never ask it.
struct NoSrv;

impl SrvResolver for NoSrv {
    async fn lookup_srv(&self, name: &str) -> Result<Vec<SrvRecord>, DnsError> {
        Err(DnsError::Lookup {
            name: name.to_string(),
            record_type: "SRV",
            message: "no SRV resolver configured".into(),
        })
    }
}

/// Why DNS discovery produced no peers.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DnsError {
    /// The system resolver configuration (/etc/resolv.conf) is unusable.
    #[error("cannot set up the DNS resolver: {0}")]
    Setup(String),
    /// A query failed (no such name, server failure, timeout...).
    #[error("cannot resolve {record_type} records of {name}: {message}")]
    Lookup {
        /// The name queried.
        name: String,
        /// `A`, `AAAA`, `SRV`, or `A/AAAA` for an SRV record's target.
        record_type: &'static str,
        /// The resolver's own words.
        message: String,
    },
}

pub(super) async fn watch_dns(
    source: usize,
    entry: DnsSdConfig,
    out: mpsc::Sender<(usize, Vec<DiscoveredTarget>)>,
) {
    loop {
        match resolve_dns(&entry).await {
            Ok(peers) => {
                if peers.is_empty() {
                    tracing::warn!(names = ?entry.names, "DNS discovery found no peers");
                }
                let found = peers
                    .into_iter()
                    .map(|(_, addr)| DiscoveredTarget {
                        name: addr.to_string(),
                        endpoint: Target::from_addr(addr),
                        modules: entry.modules.clone(),
                        interval: entry.interval,
                        labels: BTreeMap::new(),
                    })
                    .collect();
                if out.send((source, found)).await.is_err() {
                    return;
                }
            }
            Err(e) => {
                tracing::warn!(names = ?entry.names, error = %e, "DNS discovery failed; keeping the previous peers")
            }
        }
        tokio::time::sleep(entry.refresh_interval).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;
    use std::time::Duration;

    fn entry(record_type: DnsRecordType, names: &[&str], port: Option<u16>) -> DnsSdConfig {
        DnsSdConfig {
            names: names.iter().map(|s| s.to_string()).collect(),
            record_type,
            modules: vec!["tcp".into()],
            interval: None,
            refresh_interval: Duration::from_secs(30),
            port,
        }
    }

    /// Fixed SRV answers, keyed by query name.
    struct StubSrv(HashMap<&'static str, Vec<SrvRecord>>);

    impl SrvResolver for StubSrv {
        async fn lookup_srv(&self, name: &str) -> Result<Vec<SrvRecord>, DnsError> {
            self.0.get(name).cloned().ok_or_else(|| DnsError::Lookup {
                name: name.to_string(),
                record_type: "SRV",
                message: "SERVFAIL".into(),
            })
        }
    }

    fn srv(port: u16, target: &str) -> SrvRecord {
        SrvRecord {
            priority: 0,
            weight: 10,
            port,
            target: target.to_string(),
        }
    }

    #[tokio::test]
    async fn a_records_of_localhost_take_the_configured_port() {
        let peers = resolve_dns(&entry(DnsRecordType::A, &["localhost"], Some(6001)))
            .await
            .unwrap();
        assert!(peers.contains(&("localhost".to_string(), "127.0.0.1:6001".parse().unwrap())));
        assert!(peers.iter().all(|(_, a)| a.is_ipv4() && a.port() == 6001));
    }

    #[tokio::test]
    async fn aaaa_keeps_only_ipv6_and_defaults_the_port() {
        let peers = resolve_dns(&entry(DnsRecordType::Aaaa, &["::1", "127.0.0.1"], None))
            .await
            .unwrap();
        assert_eq!(
            peers,
            vec![("::1".to_string(), "[::1]:5301".parse().unwrap())]
        );
        let peers = resolve_dns(&entry(DnsRecordType::Aaaa, &["localhost"], None))
            .await
            .unwrap();
        assert!(peers.iter().all(|(_, a)| a.is_ipv6()));
    }

    #[tokio::test]
    async fn unknown_names_fail_the_entry() {
        let e = resolve_dns(&entry(
            DnsRecordType::A,
            &["localhost", "no-such-host.invalid"],
            None,
        ))
        .await
        .unwrap_err();
        assert!(
            matches!(&e, DnsError::Lookup { name, record_type: "A", .. } if name == "no-such-host.invalid"),
            "{e:?}"
        );
    }

    #[tokio::test]
    async fn srv_records_give_host_and_port() {
        let stub = StubSrv(HashMap::from([
            (
                "_pathprobe._tcp.example.",
                vec![
                    srv(6000, "127.0.0.1."),
                    srv(6002, "::1"),
                    srv(6000, "127.0.0.1."),
                ],
            ),
            ("_gone._tcp.example.", vec![srv(0, ".")]),
            ("_empty._tcp.example.", vec![]),
        ]));
        let e = entry(
            DnsRecordType::Srv,
            &[
                "_pathprobe._tcp.example.",
                "_gone._tcp.example.",
                "_empty._tcp.example.",
            ],
            None,
        );
        let peers = resolve_dns_with(&e, &stub).await.unwrap();
        assert_eq!(
            peers,
            vec![
                ("127.0.0.1".to_string(), "127.0.0.1:6000".parse().unwrap()),
                ("::1".to_string(), "[::1]:6002".parse().unwrap()),
            ]
        );
        // Names in SRV targets resolve through the system, /etc/hosts first.
        let stub = StubSrv(HashMap::from([("_h._tcp.", vec![srv(6004, "localhost.")])]));
        let peers = resolve_dns_with(&entry(DnsRecordType::Srv, &["_h._tcp."], None), &stub)
            .await
            .unwrap();
        assert!(peers.contains(&("localhost".to_string(), "127.0.0.1:6004".parse().unwrap())));
        let e = entry(DnsRecordType::Srv, &["_broken._tcp.example."], None);
        assert_eq!(
            resolve_dns_with(&e, &stub).await.unwrap_err().to_string(),
            "cannot resolve SRV records of _broken._tcp.example.: SERVFAIL"
        );
    }
}

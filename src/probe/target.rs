//! Where to probe: a target as users write it, and its addresses for the
//! probe's family and bind address. Both wires' conversations
//! ([`super::client`], [`super::iperf3`]) start here.

use std::net::{IpAddr, SocketAddr};

use super::spec::IpFamily;
use crate::engine::error::ProbeError;
use crate::protocol::DEFAULT_PORT;

/// Where to probe: a host name or address, and the responder's port.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Target {
    pub host: String,
    pub port: u16,
}

impl Target {
    /// Parses `host`, `host:port`, `a.b.c.d:port`, `::1`, `[::1]:port`.
    pub fn parse(s: &str, default_port: u16) -> Result<Target, ProbeError> {
        let bad = || {
            ProbeError::BadArgument(format!(
                "target {s:?}: expected host, host:port, or [ipv6]:port"
            ))
        };
        let s = s.trim();
        if s.is_empty() {
            return Err(bad());
        }
        if let Some(rest) = s.strip_prefix('[') {
            let (host, after) = rest.split_once(']').ok_or_else(bad)?;
            let port = match after.strip_prefix(':') {
                Some(p) => p.parse().map_err(|_| bad())?,
                None if after.is_empty() => default_port,
                None => return Err(bad()),
            };
            return Ok(Target {
                host: host.to_string(),
                port,
            });
        }
        if s.parse::<IpAddr>().is_ok() {
            return Ok(Target {
                host: s.to_string(),
                port: default_port,
            });
        }
        match s.rsplit_once(':') {
            Some((host, port)) if !host.contains(':') && !host.is_empty() => Ok(Target {
                host: host.to_string(),
                port: port.parse().map_err(|_| bad())?,
            }),
            Some(_) => Err(bad()),
            None => Ok(Target {
                host: s.to_string(),
                port: default_port,
            }),
        }
    }

    pub fn from_addr(addr: SocketAddr) -> Target {
        Target {
            host: addr.ip().to_string(),
            port: addr.port(),
        }
    }
}

impl std::fmt::Display for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}", self.host, self.port)
        } else {
            write!(f, "{}:{}", self.host, self.port)
        }
    }
}

impl Default for Target {
    fn default() -> Self {
        Target {
            host: "127.0.0.1".into(),
            port: DEFAULT_PORT,
        }
    }
}

pub(crate) async fn resolve(
    target: &Target,
    bind: Option<IpAddr>,
    family: Option<IpFamily>,
) -> Result<Vec<SocketAddr>, ProbeError> {
    // The family -4/-6 or a bind address holds the probe to; both given
    // must agree.
    let (family, holder) = match (family, bind) {
        (Some(f), Some(b)) if !f.matches(b) => {
            return Err(ProbeError::BadArgument(format!(
                "{} asks for {}, but the bind address {b} is {}",
                f.flag(),
                f.as_str(),
                IpFamily::of(b).as_str()
            )))
        }
        (Some(f), _) => (Some(f), f.flag().to_string()),
        (None, Some(b)) => (Some(IpFamily::of(b)), format!("the bind address {b}")),
        (None, None) => (None, String::new()),
    };
    if let (Some(f), Ok(ip)) = (family, target.host.parse::<IpAddr>()) {
        if !f.matches(ip) {
            return Err(ProbeError::BadArgument(format!(
                "{holder} asks for {}, but {ip} is an {} address",
                f.as_str(),
                IpFamily::of(ip).as_str()
            )));
        }
    }
    let resolve_error = |source| ProbeError::Resolve {
        target: target.host.clone(),
        source,
    };
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host((target.host.as_str(), target.port))
        .await
        .map_err(resolve_error)?
        .filter(|a| family.is_none_or(|f| f.matches(a.ip())))
        .collect();
    if addrs.is_empty() {
        let what = match family {
            Some(f) => format!("no {} address", f.as_str()),
            None => "no usable address".to_string(),
        };
        return Err(resolve_error(std::io::Error::other(what)));
    }
    Ok(addrs)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn targets_parse_like_users_write_them() {
        let t = |s| Target::parse(s, 5301).unwrap();
        assert_eq!(
            t("10.0.0.1"),
            Target {
                host: "10.0.0.1".into(),
                port: 5301
            }
        );
        assert_eq!(
            t("10.0.0.1:9000"),
            Target {
                host: "10.0.0.1".into(),
                port: 9000
            }
        );
        assert_eq!(
            t("::1"),
            Target {
                host: "::1".into(),
                port: 5301
            }
        );
        assert_eq!(
            t("[::1]:7"),
            Target {
                host: "::1".into(),
                port: 7
            }
        );
        assert_eq!(
            t("[fe80::1]"),
            Target {
                host: "fe80::1".into(),
                port: 5301
            }
        );
        assert_eq!(
            t("db.example:80"),
            Target {
                host: "db.example".into(),
                port: 80
            }
        );
        assert_eq!(
            t("db.example"),
            Target {
                host: "db.example".into(),
                port: 5301
            }
        );
        for bad in ["", "host:port", "[::1", "[::1]x", "a:b:c:zz"] {
            assert!(Target::parse(bad, 1).is_err(), "{bad}");
        }
        assert_eq!(t("[::1]:7").to_string(), "[::1]:7");
    }
}

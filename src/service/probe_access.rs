//! Which targets `/probe` may aim this host at, and how many `/probe`
//! requests may run at once (the `http:` section). `/probe` sends test
//! traffic wherever a request says, so whoever reaches the HTTP port could
//! otherwise point this host at anyone.

use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};

use crate::config::{HttpSection, TargetConfig};
use crate::probe::Target;

/// Checks `target` against `http.probe_restrict_to_targets` (compared with
/// the static targets as written, host and port) and `http.probe_allow`
/// (every address in `resolved` must be in a listed network). The error is
/// the one-line reason for the 403.
pub fn check_target(
    http: &HttpSection,
    targets: &[TargetConfig],
    target: &Target,
    resolved: &[IpAddr],
) -> Result<(), String> {
    if http.probe_restrict_to_targets {
        let listed = targets
            .iter()
            .filter_map(|t| t.endpoint().and_then(Result::ok))
            .any(|t| t.host.eq_ignore_ascii_case(&target.host) && t.port == target.port);
        if !listed {
            return Err(format!(
                "target {}:{} is not one of the configured targets (http.probe_restrict_to_targets)",
                target.host, target.port
            ));
        }
    }
    if !http.probe_allow.is_empty() {
        if resolved.is_empty() {
            return Err(format!(
                "target {} did not resolve; http.probe_allow needs its addresses",
                target.host
            ));
        }
        if let Some(a) = resolved
            .iter()
            .find(|a| !http.probe_allow.iter().any(|n| n.contains(&unmapped(**a))))
        {
            return Err(format!(
                "target {} ({a}) is outside http.probe_allow",
                target.host
            ));
        }
    }
    Ok(())
}

/// IPv4-mapped IPv6 addresses as the IPv4 they carry, so that an IPv4
/// network in `probe_allow` covers them.
fn unmapped(a: IpAddr) -> IpAddr {
    crate::responder::normalize(std::net::SocketAddr::new(a, 0)).ip()
}

/// The addresses `target` resolves to; none if it does not.
pub async fn resolve(target: &Target) -> Vec<IpAddr> {
    if let Ok(ip) = target.host.parse::<IpAddr>() {
        return vec![ip];
    }
    match tokio::net::lookup_host((target.host.as_str(), target.port)).await {
        Ok(addrs) => addrs.map(|a| a.ip()).collect(),
        Err(_) => Vec::new(),
    }
}

/// One running `/probe` request; dropping it frees its place.
pub struct ProbePermit<'a>(&'a AtomicUsize);

impl Drop for ProbePermit<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Takes a place among at most `max` running requests, or `None` if all
/// are taken.
pub fn try_acquire(running: &AtomicUsize, max: usize) -> Option<ProbePermit<'_>> {
    running
        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
            (n < max).then_some(n + 1)
        })
        .ok()
        .map(|_| ProbePermit(running))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(restrict: bool, allow: &[&str]) -> HttpSection {
        HttpSection {
            probe_restrict_to_targets: restrict,
            probe_allow: allow.iter().map(|n| n.parse().unwrap()).collect(),
            ..HttpSection::default()
        }
    }

    fn targets() -> Vec<TargetConfig> {
        let c = crate::config::Config::from_yaml(
            "modules: {t: {kind: tcp}}\ntargets:\n  - {address: \"db1.example:6000\", modules: [t]}\n  - {address: 10.0.0.5, modules: [t]}\n",
            "t.yml",
        )
        .unwrap();
        c.targets
    }

    fn t(host: &str, port: u16) -> Target {
        Target {
            host: host.into(),
            port,
        }
    }

    #[test]
    fn unrestricted_by_default() {
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        assert_eq!(
            check_target(&HttpSection::default(), &[], &t("192.0.2.1", 5301), &[ip]),
            Ok(())
        );
    }

    #[test]
    fn restrict_to_targets_takes_only_configured_host_and_port() {
        let h = http(true, &[]);
        let ts = targets();
        assert_eq!(check_target(&h, &ts, &t("db1.example", 6000), &[]), Ok(()));
        assert_eq!(check_target(&h, &ts, &t("DB1.example", 6000), &[]), Ok(()));
        assert_eq!(check_target(&h, &ts, &t("10.0.0.5", 5301), &[]), Ok(()));
        assert_eq!(
            check_target(&h, &ts, &t("db1.example", 5301), &[]).unwrap_err(),
            "target db1.example:5301 is not one of the configured targets (http.probe_restrict_to_targets)"
        );
        assert!(check_target(&h, &ts, &t("10.0.0.6", 5301), &[]).is_err());
    }

    #[test]
    fn allow_needs_every_resolved_address_inside() {
        let h = http(false, &["10.0.0.0/8", "2001:db8::/32"]);
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(check_target(&h, &[], &t("a", 1), &[ip("10.1.2.3")]), Ok(()));
        assert_eq!(
            check_target(
                &h,
                &[],
                &t("a", 1),
                &[ip("::ffff:10.1.2.3"), ip("2001:db8::1")]
            ),
            Ok(())
        );
        assert_eq!(
            check_target(&h, &[], &t("a", 1), &[ip("10.1.2.3"), ip("192.0.2.1")]).unwrap_err(),
            "target a (192.0.2.1) is outside http.probe_allow"
        );
        assert!(check_target(&h, &[], &t("nosuch", 1), &[]).is_err());
    }

    #[test]
    fn permits_are_capped_and_freed_on_drop() {
        let running = AtomicUsize::new(0);
        let a = try_acquire(&running, 2).unwrap();
        let _b = try_acquire(&running, 2).unwrap();
        assert!(try_acquire(&running, 2).is_none());
        drop(a);
        assert!(try_acquire(&running, 2).is_some());
        assert_eq!(running.load(Ordering::Relaxed), 1);
    }
}

//! Temporary stand-in for the /proc readers (being written on branch `host`).
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct HostError(String);

#[derive(Debug, Clone)]
pub struct HostSnapshot;
impl HostSnapshot {
    pub fn take(_irqs: &[String]) -> Result<HostSnapshot, HostError> {
        Ok(HostSnapshot)
    }
    pub fn delta(&self, _later: &HostSnapshot) -> HostDelta {
        HostDelta::default()
    }
}
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize, PartialEq)]
pub struct HostDelta {
    pub cpu_utilization: f64,
    pub cpu_user: f64,
    pub cpu_system: f64,
    pub interrupts: u64,
    pub interface_interrupts: u64,
    pub softirq_net_rx: u64,
    pub softirq_net_tx: u64,
}
pub fn interface_for_peer(_peer: std::net::IpAddr) -> Option<String> {
    None
}
pub fn interface_irqs(_iface: &str) -> Vec<String> {
    Vec::new()
}
pub fn kernel_release() -> String {
    String::new()
}
pub fn hostname() -> String {
    String::new()
}
#[derive(Debug, Clone, Copy, Default)]
pub struct ThreadUsage {
    pub user: Duration,
    pub system: Duration,
    pub voluntary_switches: u64,
    pub involuntary_switches: u64,
}
impl ThreadUsage {
    pub fn current() -> ThreadUsage {
        ThreadUsage::default()
    }
    pub fn since(&self, _earlier: &ThreadUsage) -> ThreadUsage {
        *self
    }
}

//! Host metrics read from /proc at scrape time through [`crate::host`].
//!
//! Each /proc file is one collector: when a file cannot be read (a
//! container without it, a kernel format we do not understand) its series
//! are left out and `pathprobe_host_collector_success{collector}` says so,
//! as node_exporter does; the rest of the scrape is unaffected.

use std::collections::BTreeMap;

use regex::Regex;

use super::expo::Exposition;
use super::names::{self, label::*};
use super::MetricsError;
use crate::host::{self, HostError, IrqRow, SnmpCounters};

/// The default for [`HostMetrics::new`]: IRQs that look like network
/// interface queues. It matches descriptions naming an interface (`eth0`,
/// `ens5`, `enp3s0f0`, `wlan0`, `bond0`), Mellanox completion vectors
/// (`mlx5_comp3@pci:...`), virtio-net queues (`virtio2-input.0`, but not
/// a virtio keyboard's `virtio4-input`), and queue suffixes such as
/// `-rx-0` or `-TxRx-3`.
pub const DEFAULT_IRQ_PATTERN: &str = r"(?i)\b(eth\d|en[opsx]\w*\d|wl\w+\d|bond\d|mlx\d+_comp\d)|virtio\d+-(input|output)\.\d|(rx|tx)-\d+$";

/// Settings of the host collectors.
#[derive(Debug, Clone)]
pub struct HostMetrics {
    irq_pattern: Regex,
}

impl HostMetrics {
    /// Host metrics exporting the IRQs whose /proc/interrupts description
    /// matches `irq_pattern` (a regular expression, unanchored).
    pub fn new(irq_pattern: &str) -> Result<Self, MetricsError> {
        let irq_pattern =
            Regex::new(irq_pattern).map_err(|source| MetricsError::InvalidIrqPattern {
                pattern: irq_pattern.to_string(),
                source,
            })?;
        Ok(HostMetrics { irq_pattern })
    }

    pub fn irq_pattern(&self) -> &str {
        self.irq_pattern.as_str()
    }

    /// Whether the IRQ with this /proc/interrupts description is exported.
    pub fn irq_matches(&self, description: &str) -> bool {
        self.irq_pattern.is_match(description)
    }
}

impl Default for HostMetrics {
    fn default() -> Self {
        // A constant, checked by a test, not user input.
        HostMetrics::new(DEFAULT_IRQ_PATTERN).expect("DEFAULT_IRQ_PATTERN compiles")
    }
}

/// What the host collectors read in one scrape.
pub(crate) struct HostReadings {
    pub cpu_seconds: Result<BTreeMap<String, f64>, HostError>,
    pub interrupts: Result<Vec<IrqRow>, HostError>,
    pub softirqs: Result<BTreeMap<String, u64>, HostError>,
    pub snmp: Result<SnmpCounters, HostError>,
    pub kernel_release: String,
    pub kernel_version: String,
    pub hostname: String,
    pub cpus: usize,
}

impl HostReadings {
    pub fn read() -> Self {
        HostReadings {
            cpu_seconds: host::read_cpu_seconds(),
            interrupts: host::read_interrupts(),
            softirqs: host::read_softirqs(),
            snmp: host::read_snmp(),
            kernel_release: host::kernel_release(),
            kernel_version: host::kernel_version(),
            hostname: host::hostname(),
            cpus: online_cpus(),
        }
    }
}

/// CPUs online on the host, which is what /proc/stat sums over; the
/// process's own affinity or cgroup quota does not matter here.
fn online_cpus() -> usize {
    // SAFETY: sysconf only reads system configuration.
    let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) };
    if n > 0 {
        n as usize
    } else {
        std::thread::available_parallelism().map_or(0, |n| n.get())
    }
}

/// Adds the success gauge of one collector, and returns its data if any.
fn collector<'a, T>(
    out: &mut Exposition,
    name: &str,
    reading: &'a Result<T, HostError>,
) -> Option<&'a T> {
    out.add(
        &names::HOST_COLLECTOR_SUCCESS,
        &[(COLLECTOR, name)],
        if reading.is_ok() { 1.0 } else { 0.0 },
    );
    match reading {
        Ok(data) => Some(data),
        Err(e) => {
            // Every scrape would repeat this, so not a warning.
            tracing::debug!(collector = name, error = %e, "host collector failed");
            None
        }
    }
}

pub(crate) fn render_host(out: &mut Exposition, cfg: &HostMetrics, r: &HostReadings) {
    let cpus = r.cpus.to_string();
    out.add(
        &names::HOST_INFO,
        &[
            (KERNEL_RELEASE, &r.kernel_release),
            (KERNEL_VERSION, &r.kernel_version),
            (HOSTNAME, &r.hostname),
            (CPUS, &cpus),
        ],
        1.0,
    );

    if let Some(modes) = collector(out, "stat", &r.cpu_seconds) {
        for (mode, seconds) in modes {
            out.add(&names::HOST_CPU_SECONDS, &[(MODE, mode)], *seconds);
        }
    }

    if let Some(rows) = collector(out, "interrupts", &r.interrupts) {
        out.add(
            &names::HOST_INTERRUPTS_ALL,
            &[],
            host::total_interrupts(rows) as f64,
        );
        // Error counters (ERR:, MIS:) are not interrupts handled; they stay
        // out of the per-IRQ series whatever the pattern.
        for row in rows.iter().filter(|row| row.is_per_cpu()) {
            if cfg.irq_matches(&row.description) {
                out.add(
                    &names::HOST_INTERRUPTS,
                    &[(IRQ, &row.id), (DESCRIPTION, &row.description)],
                    row.total as f64,
                );
            }
        }
    }

    if let Some(softirqs) = collector(out, "softirqs", &r.softirqs) {
        for (kind, n) in softirqs {
            out.add(&names::HOST_SOFTIRQS, &[(TYPE, kind)], *n as f64);
        }
    }

    if let Some(snmp) = collector(out, "snmp", &r.snmp) {
        for (def, n) in [
            (&names::HOST_TCP_RETRANS, snmp.tcp_retrans_segs),
            (&names::HOST_UDP_IN_ERRORS, snmp.udp_in_errors),
            (&names::HOST_UDP_RCVBUF_ERRORS, snmp.udp_rcvbuf_errors),
            (&names::HOST_UDP_SNDBUF_ERRORS, snmp.udp_sndbuf_errors),
        ] {
            out.add(def, &[], n as f64);
        }
    }
}

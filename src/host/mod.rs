//! Host measurements taken around each probe and at scrape time: CPU time
//! (/proc/stat), hardware interrupts (/proc/interrupts), softirqs
//! (/proc/softirqs), TCP/UDP counters (/proc/net/snmp), the interface and
//! IRQs that carry a peer's traffic (and whether an address is this
//! host's own), per-thread CPU usage, the CPU cgroup's quota and
//! throttling, kernel identity, and the host's fingerprint (the settings
//! that change what a path delivers).
//!
//! Each /proc file has a `parse_*` function that takes the file's text and
//! is tested on fixtures under `tests/fixtures/proc/`, and a thin `read_*`
//! wrapper that reads the real file. Parsers return [`HostError`] on any
//! input they do not understand; they do not panic.

mod cgroup;
mod cpus;
mod error;
mod fingerprint;
mod iface;
mod interrupts;
mod netdev;
mod percpu;
mod sched;
mod snapshot;
mod snmp;
mod softirqs;
mod stat;
mod thread;
mod uname;

pub use cgroup::{cpu_cgroup_dir, parse_cpu_stat, parse_quota, read_cpu_cgroup, CpuStat};
pub use cpus::{allowed_cpus, format_cpu_list, parse_per_cpu_stat, read_per_cpu_stat};
pub use error::HostError;
pub use fingerprint::{
    build_fingerprint, read_fingerprint, read_sources, FingerprintSources, SYSCTLS,
};
pub use iface::{interface_for_peer, interface_irqs, is_local_address};
pub use interrupts::{parse_interrupts, read_interrupts, total_interrupts, IrqRow};
pub use netdev::{parse_net_dev, read_net_dev, NetDevCounters};
pub use sched::{current_cpu, parse_schedstat, SchedStat};
pub use snapshot::{CpuLoad, HostDelta, HostSnapshot};
pub use snmp::{parse_snmp, read_snmp, SnmpCounters};
pub use softirqs::{parse_softirqs, read_softirqs};
pub use stat::{parse_stat, read_cpu_seconds, read_stat, CpuTicks};
pub use thread::ThreadUsage;
pub use uname::{hostname, kernel_release, kernel_version};

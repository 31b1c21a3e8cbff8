//! Host counters taken before and after a probe, and the difference between
//! two such snapshots: what a probe reports as the host's CPU and interrupt
//! load while it ran.

use std::collections::BTreeMap;
use std::time::Instant;

use super::cgroup::{read_cpu_cgroup, CpuStat};
use super::cpus::{parse_per_cpu_stat, read_per_cpu_stat};
use super::error::HostError;
use super::interrupts::{parse_interrupts, read_interrupts, total_interrupts, IrqRow};
use super::snmp::{read_snmp, SnmpCounters};
use super::softirqs::{parse_softirqs, read_softirqs};
use super::stat::{parse_stat, read_stat, CpuTicks};
pub use crate::protocol::model::{CpuLoad, CpuThrottle, HostDelta, UdpBufferErrors};

/// Host-wide counters at one instant.
#[derive(Debug, Clone)]
pub struct HostSnapshot {
    cpu: CpuTicks,
    interrupts: u64,
    /// Counts of the IRQs asked for at `take()`; an IRQ absent from
    /// /proc/interrupts is absent here.
    irq_counts: BTreeMap<String, u64>,
    softirq_net_rx: u64,
    softirq_net_tx: u64,
    /// Ticks of each online CPU, by number.
    per_cpu: Vec<(u32, CpuTicks)>,
    /// The asked-for IRQs' counts per /proc/interrupts column; the columns
    /// are the online CPUs in order, as are the per-CPU lines.
    irq_per_cpu: BTreeMap<String, Vec<u64>>,
    /// /proc/net/snmp, for the UDP buffer errors; evidence only, so a
    /// snapshot without it is still a snapshot.
    snmp: Option<SnmpCounters>,
    /// The max of net.ipv4.tcp_rmem.
    tcp_rmem_max: Option<u64>,
    tcp_wmem_max: Option<u64>,
    /// This process's CPU cgroup: its counters and quota.
    cgroup: Option<(CpuStat, Option<f64>)>,
    taken_at: Instant,
}

impl HostSnapshot {
    /// Reads /proc/stat, /proc/interrupts and /proc/softirqs.
    ///
    /// `irqs` are IRQ ids as they appear in /proc/interrupts (e.g. `"24"`)
    /// whose counts are kept individually for
    /// [`HostDelta::interface_interrupts`].
    pub fn take(irqs: &[String]) -> Result<HostSnapshot, HostError> {
        let cpu = read_stat()?;
        let rows = read_interrupts()?;
        let softirqs = read_softirqs()?;
        // Per-CPU figures are extra evidence: without them the snapshot
        // still holds the aggregate.
        let per_cpu = read_per_cpu_stat().unwrap_or_default();
        let mut snapshot = Self::from_parts(cpu, &rows, &softirqs, irqs, per_cpu, Instant::now());
        snapshot.snmp = read_snmp().ok();
        snapshot.tcp_rmem_max = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_rmem")
            .ok()
            .as_deref()
            .and_then(buffer_max);
        snapshot.tcp_wmem_max = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_wmem")
            .ok()
            .as_deref()
            .and_then(buffer_max);
        snapshot.cgroup = read_cpu_cgroup();
        Ok(snapshot)
    }

    /// Builds a snapshot from the text of the three files, for callers that
    /// read them elsewhere (or from fixtures).
    pub fn parse(
        stat: &str,
        interrupts: &str,
        softirqs: &str,
        irqs: &[String],
        taken_at: Instant,
    ) -> Result<HostSnapshot, HostError> {
        let cpu = parse_stat(stat)?;
        let rows = parse_interrupts(interrupts)?;
        let softirqs = parse_softirqs(softirqs)?;
        let per_cpu = parse_per_cpu_stat(stat)?;
        Ok(Self::from_parts(
            cpu, &rows, &softirqs, irqs, per_cpu, taken_at,
        ))
    }

    fn from_parts(
        cpu: CpuTicks,
        rows: &[IrqRow],
        softirqs: &BTreeMap<String, u64>,
        irqs: &[String],
        per_cpu: Vec<(u32, CpuTicks)>,
        taken_at: Instant,
    ) -> HostSnapshot {
        let irq_per_cpu = rows
            .iter()
            .filter(|row| irqs.contains(&row.id))
            .map(|row| (row.id.clone(), row.per_cpu.clone()))
            .collect();
        let irq_counts = rows
            .iter()
            .filter(|row| irqs.contains(&row.id))
            .map(|row| (row.id.clone(), row.total))
            .collect();
        HostSnapshot {
            cpu,
            interrupts: total_interrupts(rows),
            irq_counts,
            // Every kernel since 2.6.31 has both rows; a missing one means
            // nothing to report rather than a broken file.
            softirq_net_rx: softirqs.get("NET_RX").copied().unwrap_or(0),
            softirq_net_tx: softirqs.get("NET_TX").copied().unwrap_or(0),
            per_cpu,
            irq_per_cpu,
            snmp: None,
            tcp_rmem_max: None,
            tcp_wmem_max: None,
            cgroup: None,
            taken_at,
        }
    }

    /// When the snapshot was taken.
    pub fn taken_at(&self) -> Instant {
        self.taken_at
    }

    /// Aggregate CPU ticks at the snapshot.
    pub fn cpu(&self) -> CpuTicks {
        self.cpu
    }

    /// Changes from `self` to `later`.
    ///
    /// Counters cannot go backwards, so any that did (a device removed,
    /// iowait's documented quirk, snapshots passed in the wrong order) count
    /// as 0. An IRQ missing from either snapshot contributes 0: without both
    /// ends its count over the interval is unknown.
    pub fn delta(&self, later: &HostSnapshot) -> HostDelta {
        let cpu = later.cpu.saturating_sub(&self.cpu);
        let total = cpu.total();
        let fraction = |ticks: u64| {
            if total == 0 {
                0.0
            } else {
                ticks as f64 / total as f64
            }
        };
        let interface_interrupts = self
            .irq_counts
            .iter()
            .filter_map(|(id, &before)| {
                later
                    .irq_counts
                    .get(id)
                    .map(|&after| after.saturating_sub(before))
            })
            .fold(0u64, |sum, d| sum.saturating_add(d));
        HostDelta {
            cpu_utilization: fraction(cpu.busy()),
            cpu_user: fraction(cpu.user.saturating_add(cpu.nice)),
            cpu_system: fraction(
                cpu.system
                    .saturating_add(cpu.irq)
                    .saturating_add(cpu.softirq),
            ),
            interrupts: later.interrupts.saturating_sub(self.interrupts),
            interface_interrupts,
            softirq_net_rx: later.softirq_net_rx.saturating_sub(self.softirq_net_rx),
            softirq_net_tx: later.softirq_net_tx.saturating_sub(self.softirq_net_tx),
            cpus: self.cpu_loads(later),
            interface_bytes: None,
            udp_buffer_errors: self.snmp.zip(later.snmp).map(|(before, after)| {
                let d = after.since(&before);
                UdpBufferErrors {
                    receive: d.udp_rcvbuf_errors,
                    send: d.udp_sndbuf_errors,
                }
            }),
            tcp_rmem_max: later.tcp_rmem_max,
            tcp_wmem_max: later.tcp_wmem_max,
            cpu_throttle: self
                .cgroup
                .zip(later.cgroup)
                .map(|((before, _), (after, quota))| {
                    let d = after.since(&before);
                    CpuThrottle {
                        periods: d.periods,
                        throttled_periods: d.throttled_periods.min(d.periods),
                        throttled_seconds: d.throttled_seconds,
                        quota_cpus: quota,
                    }
                }),
        }
    }

    /// Each CPU's share of its own time in hard and soft interrupts, and
    /// the interface's interrupts it took, from `self` to `later`. A CPU
    /// in only one snapshot (hot-plugged) is left out.
    fn cpu_loads(&self, later: &HostSnapshot) -> Vec<CpuLoad> {
        later
            .per_cpu
            .iter()
            .enumerate()
            .filter_map(|(column, (cpu, after))| {
                let (_, before) = self.per_cpu.iter().find(|(c, _)| c == cpu)?;
                let d = after.saturating_sub(before);
                let total = d.total();
                let share = |t: u64| {
                    if total == 0 {
                        0.0
                    } else {
                        t as f64 / total as f64
                    }
                };
                // As for the total: an IRQ in only one snapshot counts 0.
                let interface_interrupts = self
                    .irq_per_cpu
                    .iter()
                    .filter_map(|(id, before)| {
                        let after = later.irq_per_cpu.get(id)?;
                        Some(after.get(column)?.saturating_sub(*before.get(column)?))
                    })
                    .fold(0u64, |sum, d| sum.saturating_add(d));
                Some(CpuLoad {
                    cpu: *cpu,
                    busy: share(d.busy()),
                    irq: share(d.irq),
                    softirq: share(d.softirq),
                    interface_interrupts,
                    steal: share(d.steal),
                })
            })
            .collect()
    }
}

/// The third of the three numbers of net.ipv4.tcp_rmem or tcp_wmem
/// (min, default, max).
fn buffer_max(text: &str) -> Option<u64> {
    text.split_whitespace().nth(2)?.parse().ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    fn fixture(name: &str) -> String {
        let path = format!("{}/tests/fixtures/proc/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"))
    }

    fn ids(ids: &[&str]) -> Vec<String> {
        ids.iter().map(|s| s.to_string()).collect()
    }

    fn four_cpu(which: &str, irqs: &[String], at: Instant) -> HostSnapshot {
        HostSnapshot::parse(
            &fixture(&format!("stat_4cpu_{which}")),
            &fixture(&format!("interrupts_4cpu_{which}")),
            &fixture(&format!("softirqs_4cpu_{which}")),
            irqs,
            at,
        )
        .unwrap()
    }

    #[test]
    fn delta_between_fixture_snapshots() {
        // IRQ 28 disappears in the later file; 99 is in neither.
        let irqs = ids(&["24", "25", "28", "99"]);
        let t0 = Instant::now();
        let before = four_cpu("before", &irqs, t0);
        let after = four_cpu("after", &irqs, t0 + Duration::from_secs(4));
        assert_eq!(after.taken_at() - before.taken_at(), Duration::from_secs(4));

        // CPU deltas: user 700 nice 100 system 300 idle 350 iowait 50
        // irq 20 softirq 80 steal 0 (guest 100 is inside user): total 1600.
        let d = before.delta(&after);
        // CPU0: user 350 nice 25 system 150 idle 50 iowait 10 irq 17
        // softirq 50: total 652; it took 500 of IRQ 24, CPU1 960 of 24+25.
        assert_eq!(d.cpus.len(), 4);
        assert_eq!(d.cpus[0].cpu, 0);
        assert!(
            (d.cpus[0].softirq - 50.0 / 652.0).abs() < 1e-12,
            "{:?}",
            d.cpus[0]
        );
        assert!((d.cpus[0].irq - 17.0 / 652.0).abs() < 1e-12);
        assert!((d.cpus[0].busy - 592.0 / 652.0).abs() < 1e-12);
        assert_eq!(d.cpus[0].interface_interrupts, 500);
        assert_eq!(d.cpus[1].interface_interrupts, 960);
        assert_eq!(d.cpus[3].interface_interrupts, 0);
        assert_eq!(
            HostDelta {
                cpus: Vec::new(),
                ..d
            },
            HostDelta {
                cpu_utilization: 0.75, // 1200 / 1600
                cpu_user: 0.5,         // 800 / 1600
                cpu_system: 0.25,      // 400 / 1600
                // 49481 - 46268: +3217 of increments less row 28's 4 that
                // vanished with it.
                interrupts: 3213,
                interface_interrupts: 560 + 900,
                softirq_net_rx: 1200,
                softirq_net_tx: 10,
                cpus: Vec::new(),
                interface_bytes: None,
                udp_buffer_errors: None,
                tcp_rmem_max: None,
                tcp_wmem_max: None,
                cpu_throttle: None,
            }
        );
    }

    #[test]
    fn delta_backwards_saturates_to_zero() {
        let irqs = ids(&["24", "25"]);
        let t0 = Instant::now();
        let before = four_cpu("before", &irqs, t0);
        let after = four_cpu("after", &irqs, t0);
        let d = after.delta(&before);
        assert!(d
            .cpus
            .iter()
            .all(|c| c.busy == 0.0 && c.interface_interrupts == 0));
        assert_eq!(
            HostDelta {
                cpus: Vec::new(),
                ..d
            },
            HostDelta::default()
        );
    }

    #[test]
    fn the_tcp_rmem_max_is_the_third_number() {
        assert_eq!(buffer_max("4096\t131072\t6291456\n"), Some(6_291_456));
        assert_eq!(buffer_max("4096 131072"), None);
        assert_eq!(buffer_max("4096 131072 lots"), None);
    }

    #[test]
    fn udp_buffer_errors_are_the_window_s_and_unknown_without_both_ends() {
        let irqs = ids(&["24"]);
        let t0 = Instant::now();
        let mut before = four_cpu("before", &irqs, t0);
        let mut after = four_cpu("after", &irqs, t0);
        assert_eq!(before.delta(&after).udp_buffer_errors, None);
        let counters = |rcv, snd| SnmpCounters {
            udp_rcvbuf_errors: rcv,
            udp_sndbuf_errors: snd,
            ..SnmpCounters::default()
        };
        before.snmp = Some(counters(1000, 7));
        assert_eq!(before.delta(&after).udp_buffer_errors, None);
        after.snmp = Some(counters(1450, 7));
        assert_eq!(
            before.delta(&after).udp_buffer_errors,
            Some(UdpBufferErrors {
                receive: 450,
                send: 0
            })
        );
    }

    #[test]
    fn delta_of_identical_snapshots_is_zero() {
        let s = four_cpu("after", &ids(&["90"]), Instant::now());
        let d = s.delta(&s);
        assert_eq!(d.cpus.len(), 4);
        assert_eq!(
            HostDelta {
                cpus: Vec::new(),
                ..d
            },
            HostDelta::default()
        );
    }

    #[test]
    fn interface_irqs_of_mlx5_queues() {
        let irqs = ids(&["90", "91", "92"]);
        let t0 = Instant::now();
        let d = four_cpu("before", &irqs, t0).delta(&four_cpu("after", &irqs, t0));
        assert_eq!(d.interface_interrupts, 1000);
    }

    #[test]
    fn take_reads_this_machine() {
        let before = HostSnapshot::take(&[]).unwrap();
        // Burn a little CPU so the interval is not empty of work.
        let start = Instant::now();
        let mut x = 0u64;
        while start.elapsed() < Duration::from_millis(30) {
            x = std::hint::black_box(x.wrapping_mul(31).wrapping_add(7));
        }
        let after = HostSnapshot::take(&[]).unwrap();
        assert!(after.taken_at() > before.taken_at());
        let d = before.delta(&after);
        assert!((0.0..=1.0).contains(&d.cpu_utilization), "{d:?}");
        assert!(
            d.cpu_user + d.cpu_system <= d.cpu_utilization + 1e-9,
            "{d:?}"
        );
        assert_eq!(d.interface_interrupts, 0);
    }
}

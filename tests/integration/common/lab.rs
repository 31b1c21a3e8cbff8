//! Test helper around `tests/lab/lab.sh`: a `Lab` is three network
//! namespaces a -- r -- b, with shaping and drops on the router r.
//!
//! Labs are serialized, within the process by a global mutex and across
//! processes by a lock file: a shaping measurement must not share the
//! machine's CPUs with another lab's traffic. A lab also holds the
//! exclusive turn (`turn::exclusive`), so that no other test's traffic runs
//! beside it either. A `Lab` tears its namespaces down when dropped, also
//! when the test panics.

use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::Ipv4Addr;
use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Mutex, MutexGuard};
use std::thread;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use super::turn::{self, Turn};

static LAB_MUTEX: Mutex<()> = Mutex::new(());

/// Across processes (e.g. two `cargo test` runs at once).
const LOCK_FILE: &str = "/tmp/pathprobe-lab.lock";
/// Bound on waiting for another process's lab.
const LOCK_WAIT: Duration = Duration::from_secs(600);
/// Bound on every lab.sh invocation.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);

/// True when the test may run. When not root, prints why the test is
/// skipped; the caller returns early.
pub fn require_root() -> bool {
    // SAFETY: geteuid has no preconditions and cannot fail.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    println!("skipping lab test: needs root for network namespaces (run as root, as CI does)");
    false
}

pub fn lab_script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/lab/lab.sh")
}

/// What a bounded run of a command produced.
#[derive(Debug)]
pub struct Output {
    pub status: ExitStatus,
    pub stdout: String,
    pub stderr: String,
    pub elapsed: Duration,
}

fn drain<R: Read + Send + 'static>(r: Option<R>) -> thread::JoinHandle<String> {
    thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut r) = r {
            let _ = r.read_to_end(&mut buf);
        }
        String::from_utf8_lossy(&buf).into_owned()
    })
}

/// Machine-wide share of CPU time the hypervisor stole (the steal column
/// of /proc/stat) since `Steal::start`. On a virtual machine whose host is
/// busy it reached 20% while this machine idled: r's and the hosts'
/// vCPUs then stall for longer than any bucket, and a rate through tbf is
/// no longer the truth. Tests that compare with the nominal rate measure
/// it, and above `STEAL_LIMIT` say so instead of failing on the machine.
#[allow(dead_code)]
#[derive(Clone, Copy, Debug)]
pub struct Steal(u64, u64);

/// See [`Steal`].
#[allow(dead_code)]
pub const STEAL_LIMIT: f64 = 0.05;

#[allow(dead_code)]
impl Steal {
    fn read() -> (u64, u64) {
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        let f: Vec<u64> = stat
            .lines()
            .next()
            .unwrap_or("")
            .split_whitespace()
            .skip(1)
            .filter_map(|x| x.parse().ok())
            .collect();
        let total = f.iter().take(8).sum();
        (f.get(7).copied().unwrap_or(0), total)
    }
    pub fn start() -> Steal {
        let (s, t) = Steal::read();
        Steal(s, t)
    }
    /// The share stolen so far, 0..=1.
    pub fn share(&self) -> f64 {
        self.share_until(&Steal::start())
    }
    /// The share stolen between `self` and the later reading `later`.
    pub fn share_until(&self, later: &Steal) -> f64 {
        let dt = later.1.saturating_sub(self.1);
        if dt == 0 {
            0.0
        } else {
            later.0.saturating_sub(self.0) as f64 / dt as f64
        }
    }
    /// True when the share is within `STEAL_LIMIT`; otherwise prints why
    /// `what` is not checked.
    pub fn allows(&self, what: &str) -> bool {
        let share = self.share();
        if share <= STEAL_LIMIT {
            return true;
        }
        println!(
            "not checked: {what}: the hypervisor stole {:.1}% of the CPUs (limit {:.0}%)",
            share * 100.0,
            STEAL_LIMIT * 100.0
        );
        false
    }
}

/// The bucket lab.sh gives tbf at `rate_bps` (its `tbf_args`):
/// max(rate x 1 ms, 16 KiB) bytes below 200 Mbit, rate x 10 ms from
/// there. Tests that predict latency through the bucket use it.
#[allow(dead_code)]
pub fn tbf_burst_bytes(rate_bps: f64) -> f64 {
    let seconds = if rate_bps >= 200e6 { 0.010 } else { 0.001 };
    (rate_bps / 8.0 * seconds).max(16384.0)
}

/// TCP payload per full frame through tbf: MSS 1448 (timestamps on).
#[allow(dead_code)]
pub const MSS: f64 = 1448.0;
/// Header bytes per TCP frame as tbf meters it: TCP 32 (timestamps) +
/// IP 20 + Ethernet 14. The truth at rate R is R x MSS / (MSS + this).
#[allow(dead_code)]
pub const FRAME_OVERHEAD: f64 = 66.0;

/// What [`Lab::tbf_sent`] read: counters since the qdisc was added.
#[derive(Clone, Copy, Debug)]
pub struct TbfSent {
    pub bytes: f64,
    pub packets: f64,
}

#[allow(dead_code)]
impl TbfSent {
    /// TCP payload tbf passed between `self` and `later`: its bytes less
    /// [`FRAME_OVERHEAD`] per packet (pure ACKs and SYNs carry none; their
    /// options are few).
    pub fn tcp_payload_until(&self, later: &TbfSent) -> f64 {
        let bytes = later.bytes - self.bytes;
        let packets = later.packets - self.packets;
        bytes - packets * FRAME_OVERHEAD
    }
    /// The payload share of the bytes tbf passed between `self` and `later`.
    pub fn payload_share_until(&self, later: &TbfSent) -> f64 {
        let bytes = later.bytes - self.bytes;
        if bytes <= 0.0 {
            0.0
        } else {
            self.tcp_payload_until(later) / bytes
        }
    }
}

/// Waits for `child` at most `timeout` (polling `try_wait`); on timeout
/// kills it and returns `None`.
pub fn wait_bounded(child: &mut Child, timeout: Duration) -> Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(None);
        }
        thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `cmd` with captured output, killing it after `timeout`. A timeout
/// is an error that carries whatever the command printed.
pub fn run_bounded(cmd: &mut Command, timeout: Duration) -> Result<Output> {
    let start = Instant::now();
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("spawning {cmd:?}"))?;
    let out = drain(child.stdout.take());
    let err = drain(child.stderr.take());
    let status = wait_bounded(&mut child, timeout)?;
    // The pipes close when the child is gone (ip netns exec execs the
    // program, so there is no grandchild holding them).
    let stdout = out.join().unwrap_or_default();
    let stderr = err.join().unwrap_or_default();
    match status {
        Some(status) => Ok(Output { status, stdout, stderr, elapsed: start.elapsed() }),
        None => bail!(
            "{cmd:?} did not finish within {timeout:?}; killed\nstdout:\n{stdout}\nstderr:\n{stderr}"
        ),
    }
}

fn script(args: &[&str]) -> Result<String> {
    let mut cmd = Command::new(lab_script());
    cmd.args(args);
    let out = run_bounded(&mut cmd, SCRIPT_TIMEOUT)?;
    if !out.status.success() {
        bail!(
            "lab.sh {} failed ({}):\n{}{}",
            args.join(" "),
            out.status,
            out.stdout,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// Exclusive across processes; released when the file is closed.
fn lock_file() -> Result<File> {
    let f = OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(LOCK_FILE)
        .with_context(|| format!("opening {LOCK_FILE}"))?;
    let deadline = Instant::now() + LOCK_WAIT;
    loop {
        // SAFETY: a valid open descriptor; flock has no memory effects.
        if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } == 0 {
            return Ok(f);
        }
        if Instant::now() >= deadline {
            bail!("another process held {LOCK_FILE} for {LOCK_WAIT:?}");
        }
        thread::sleep(Duration::from_millis(100));
    }
}

/// Namespaces of labs left behind by test processes that died without
/// running Drop (SIGKILL): `pp<pid>-{a,r,b}` whose pid is gone.
fn reap_stale_labs() {
    let Ok(out) = run_bounded(Command::new("ip").args(["netns", "list"]), SCRIPT_TIMEOUT) else {
        return;
    };
    let mut stale = Vec::new();
    for line in out.stdout.lines() {
        let ns = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = ns.strip_prefix("pp") else {
            continue;
        };
        let Some((pid, end)) = rest.split_once('-') else {
            continue;
        };
        let star_host = end
            .strip_prefix('h')
            .is_some_and(|i| i.parse::<u32>().is_ok());
        if !(matches!(end, "a" | "r" | "b") || star_host) || pid.is_empty() {
            continue;
        }
        let Ok(pid) = pid.parse::<u32>() else {
            continue;
        };
        if !PathBuf::from(format!("/proc/{pid}")).exists() {
            stale.push(format!("pp{pid}"));
        }
    }
    stale.sort();
    stale.dedup();
    for name in stale {
        let _ = script(&["down", &name]);
    }
}

pub struct Lab {
    name: String,
    a: Ipv4Addr,
    b: Ipv4Addr,
    // Dropped after `Drop::drop` has taken the lab down, in this order.
    _file_lock: File,
    _guard: MutexGuard<'static, ()>,
    _turn: Turn,
}

impl Lab {
    /// Takes the lab lock and builds a fresh lab. `name` is a suffix that
    /// makes the namespaces recognisable; the lab is named `pp<pid>`, and
    /// only one exists at a time per process.
    pub fn up(name: &str) -> Result<Lab> {
        let turn = turn::exclusive();
        // A test that panicked while holding the lock poisons it; the lab
        // it held has been torn down by its Drop, so the lock is still good.
        let guard = LAB_MUTEX.lock().unwrap_or_else(|p| p.into_inner());
        let file_lock = lock_file()?;
        reap_stale_labs();
        let lab_name = format!("pp{}", std::process::id());
        // A previous lab of this process is gone (Drop), but be sure.
        script(&["down", &lab_name])?;
        eprintln!("lab {lab_name} up for {name}");
        let mut lab = Lab {
            name: lab_name,
            a: Ipv4Addr::UNSPECIFIED,
            b: Ipv4Addr::UNSPECIFIED,
            _file_lock: file_lock,
            _guard: guard,
            _turn: turn,
        };
        // From here on, Drop cleans up a partial lab too.
        script(&["up", &lab.name])?;
        lab.a = script(&["addr", &lab.name, "a"])?
            .trim()
            .parse()
            .context("address of a")?;
        lab.b = script(&["addr", &lab.name, "b"])?
            .trim()
            .parse()
            .context("address of b")?;
        Ok(lab)
    }

    pub fn name(&self) -> &str {
        &self.name
    }
    pub fn addr_a(&self) -> Ipv4Addr {
        self.a
    }
    pub fn addr_b(&self) -> Ipv4Addr {
        self.b
    }

    /// tbf at `rate_mbit` on both of r's egress interfaces.
    pub fn shape(&self, rate_mbit: u32) -> Result<()> {
        script(&["shape", &self.name, &format!("{rate_mbit}mbit")]).map(drop)
    }
    /// tbf at `rate_mbit` with a queue of `limit_bytes` instead of the
    /// default 20 ms.
    pub fn shape_with_limit(&self, rate_mbit: u32, limit_bytes: u64) -> Result<()> {
        script(&[
            "shape",
            &self.name,
            &format!("{rate_mbit}mbit"),
            &limit_bytes.to_string(),
        ])
        .map(drop)
    }
    /// Bytes and packets r's tbf has passed so far on its egress toward
    /// `end` ("a" or "b"), from `tc -s qdisc`: the kernel's own account of
    /// what crossed the bottleneck. Bytes are frames as tbf meters them
    /// (Ethernet header included; a GSO packet counts per segment).
    pub fn tbf_sent(&self, end: &str) -> Result<TbfSent> {
        let dev = format!("{}r{end}", self.name);
        let mut cmd = self.exec_r("tc");
        cmd.args(["-s", "qdisc", "show", "dev", &dev]);
        let out = run_bounded(&mut cmd, Duration::from_secs(10))?;
        let line = out
            .stdout
            .lines()
            .find(|l| l.trim_start().starts_with("Sent "))
            .with_context(|| format!("no Sent line for {dev}:\n{}", out.stdout))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| -> Result<f64> {
            words
                .get(i)
                .and_then(|w| w.parse().ok())
                .with_context(|| format!("bad Sent line for {dev}: {line}"))
        };
        Ok(TbfSent {
            bytes: num(1)?,
            packets: num(3)?,
        })
    }
    /// Random drop of `percent` % of the packets r forwards.
    pub fn drop_percent(&self, percent: f64) -> Result<()> {
        script(&["drop", &self.name, &format!("{percent}")]).map(drop)
    }
    /// Random drop of `percent` % of the packets r forwards from a to b
    /// only; b to a loses nothing. [`Lab::dropped_packets`] counts it.
    pub fn drop_percent_a_to_b(&self, percent: f64) -> Result<()> {
        script(&["drop-ab", &self.name, &format!("{percent}")]).map(drop)
    }
    /// As [`Lab::drop_percent`], sparing UDP datagrams of under 8 payload
    /// bytes: iperf3's UDP connect and its reply. Stock iperf3 (3.12 to
    /// 3.21) sends each once and waits 30 s for the reply, so one of them
    /// dropped hangs the stock tool rather than losing data. Loss tests
    /// against stock iperf3 measure the data's loss with this.
    pub fn drop_percent_of_data(&self, percent: f64) -> Result<()> {
        script(&["drop-data", &self.name, &format!("{percent}")]).map(drop)
    }
    pub fn nodrop(&self) -> Result<()> {
        script(&["nodrop", &self.name]).map(drop)
    }

    /// Turns GRO on on the veth of end `end` (a or b), as `ethtool -K DEV
    /// gro on` does (the machine has no ethtool), so that datagrams arriving
    /// one by one are merged for a socket with UDP_GRO. A veth merges only
    /// what its peer sends through NAPI, which it does for forwarded packets
    /// only when the peer has no TSO: r's veth towards `end` loses it.
    pub fn set_gro(&self, end: &str) -> Result<()> {
        const ETHTOOL_STSO: u32 = 0x1f;
        const ETHTOOL_SGRO: u32 = 0x2c;
        let name = self.name.clone();
        let dev = format!("{name}{end}r");
        in_netns(&format!("{name}-{end}"), move || {
            ethtool_set(&dev, ETHTOOL_SGRO, true)
        })?;
        let peer = format!("{name}r{end}");
        in_netns(&format!("{name}-r"), move || {
            ethtool_set(&peer, ETHTOOL_STSO, false)
        })
    }

    /// Packets the drop rule on r has dropped so far.
    pub fn dropped_packets(&self) -> Result<u64> {
        let out = run_bounded(
            self.exec_r("nft")
                .args(["list", "chain", "inet", "lab", "forward"]),
            SCRIPT_TIMEOUT,
        )?;
        let words: Vec<&str> = out.stdout.split_whitespace().collect();
        let Some(i) = words.windows(2).position(|w| w == ["counter", "packets"]) else {
            return Ok(0);
        };
        words
            .get(i + 2)
            .context("counter without a value")?
            .parse()
            .context("nft counter")
    }

    /// Short UDP datagrams (hellos and FINs, under 120 bytes of payload)
    /// that r has passed on towards end `end` (a or b) so far, after the
    /// drop rule.
    pub fn short_udp_forwarded(&self, end: &str) -> Result<u64> {
        let out = run_bounded(
            self.exec_r("nft")
                .args(["list", "chain", "inet", "lab", "census"]),
            SCRIPT_TIMEOUT,
        )?;
        let tag = format!("\"short-udp-to-{end}\"");
        let line = out
            .stdout
            .lines()
            .find(|l| l.contains(&tag))
            .with_context(|| format!("no census rule {tag}"))?;
        let words: Vec<&str> = line.split_whitespace().collect();
        let i = words
            .windows(2)
            .position(|w| w == ["counter", "packets"])
            .context("census rule without a counter")?;
        words
            .get(i + 2)
            .context("counter without a value")?
            .parse()
            .context("nft census counter")
    }

    /// `/proc/net/snmp` counter of one namespace (per-netns in the kernel),
    /// e.g. `snmp("a", "Tcp", "RetransSegs")`.
    pub fn snmp(&self, end: &str, group: &str, field: &str) -> Result<u64> {
        let out = run_bounded(self.exec(end, "cat").arg("/proc/net/snmp"), SCRIPT_TIMEOUT)?;
        let prefix = format!("{group}:");
        let lines: Vec<&str> = out
            .stdout
            .lines()
            .filter(|l| l.starts_with(&prefix))
            .collect();
        if lines.len() < 2 {
            bail!("no {group} lines in /proc/net/snmp");
        }
        let names = lines[0].split_whitespace();
        let values = lines[1].split_whitespace();
        for (n, v) in names.zip(values) {
            if n == field {
                return v.parse().with_context(|| format!("{group} {field} = {v}"));
            }
        }
        bail!("no {group} {field} in /proc/net/snmp")
    }

    /// A sysctl of one namespace, e.g. `sysctl("a", "net/ipv4/tcp_wmem")`.
    pub fn sysctl(&self, end: &str, key: &str) -> Result<String> {
        let out = run_bounded(
            self.exec(end, "cat").arg(format!("/proc/sys/{key}")),
            SCRIPT_TIMEOUT,
        )?;
        if !out.status.success() {
            bail!("reading {key} in {end}: {}", out.stderr);
        }
        Ok(out.stdout.trim().to_string())
    }

    /// `ip netns exec <ns> program`, for end "a", "r" or "b".
    pub fn exec(&self, end: &str, program: &str) -> Command {
        assert!(matches!(end, "a" | "r" | "b"), "lab end {end}");
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &format!("{}-{end}", self.name), program]);
        cmd
    }
    /// `program` in end `end`'s network namespace by `nsenter`, which,
    /// unlike `ip netns exec`, leaves the host's /sys mounted: the cgroup
    /// file system stays readable, for tests of a CPU quota's evidence.
    pub fn exec_keeping_sys(&self, end: &str, program: &str) -> Command {
        assert!(matches!(end, "a" | "r" | "b"), "lab end {end}");
        let mut cmd = Command::new("nsenter");
        cmd.arg(format!("--net=/run/netns/{}-{end}", self.name))
            .arg("--")
            .arg(program);
        cmd
    }
    pub fn exec_a(&self, program: &str) -> Command {
        self.exec("a", program)
    }
    pub fn exec_b(&self, program: &str) -> Command {
        self.exec("b", program)
    }
    pub fn exec_r(&self, program: &str) -> Command {
        self.exec("r", program)
    }

    /// Whether something in end `end` listens on TCP `port`. Uses `ss`
    /// rather than a connection, so the server sees no stray client.
    pub fn listening(&self, end: &str, port: u16) -> Result<bool> {
        let out = run_bounded(
            self.exec(end, "ss")
                .args(["-Hltn", &format!("sport = :{port}")]),
            SCRIPT_TIMEOUT,
        )?;
        if !out.status.success() {
            bail!("ss failed: {}", out.stderr);
        }
        Ok(!out.stdout.trim().is_empty())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        if let Err(e) = script(&["down", &self.name]) {
            eprintln!("lab {}: down failed: {e:#}", self.name);
        }
    }
}

/// A legacy ethtool "set one feature" command (`cmd`, an ETHTOOL_S*
/// value) through SIOCETHTOOL on `dev`, in this thread's namespace.
fn ethtool_set(dev: &str, cmd: u32, on: bool) -> Result<()> {
    #[repr(C)]
    struct EthtoolValue {
        cmd: u32,
        data: u32,
    }
    let mut value = EthtoolValue {
        cmd,
        data: u32::from(on),
    };
    // SAFETY: ifreq is plain data; the name is copied in bounded by its
    // size; ifr_data points at `value` for the duration of the ioctl.
    unsafe {
        let mut req: libc::ifreq = std::mem::zeroed();
        for (d, s) in req
            .ifr_name
            .iter_mut()
            .zip(dev.bytes().take(libc::IFNAMSIZ - 1))
        {
            *d = s as libc::c_char;
        }
        req.ifr_ifru.ifru_data = (&mut value as *mut EthtoolValue).cast();
        let fd = libc::socket(libc::AF_INET, libc::SOCK_DGRAM, 0);
        if fd < 0 {
            bail!("socket: {}", std::io::Error::last_os_error());
        }
        let rc = libc::ioctl(fd, libc::SIOCETHTOOL, &mut req);
        let err = std::io::Error::last_os_error();
        libc::close(fd);
        if rc != 0 {
            bail!("SIOCETHTOOL {cmd:#x} on {dev}: {err}");
        }
    }
    Ok(())
}

/// Packets the kernel dropped from full per-CPU backlog queues
/// (netdev_max_backlog) since boot, over all CPUs: /proc/net/softnet_stat's
/// second column. Machine-wide, not per namespace.
pub fn backlog_drops() -> Result<u64> {
    let text = std::fs::read_to_string("/proc/net/softnet_stat")?;
    let mut total = 0;
    for line in text.lines() {
        let Some(col) = line.split_whitespace().nth(1) else {
            continue;
        };
        total += u64::from_str_radix(col, 16).with_context(|| format!("softnet_stat {col}"))?;
    }
    Ok(total)
}

/// N hosts in namespaces `pp<pid>-h1` .. `-hN` around one router `-r`
/// (`lab.sh star`), for the mesh: every host's downlink (r's egress veth
/// to it) can be shaped. Holds the same locks as a [`Lab`] and tears down
/// when dropped.
pub struct Star {
    name: String,
    hosts: Vec<Ipv4Addr>,
    _file_lock: File,
    _guard: MutexGuard<'static, ()>,
    _turn: Turn,
}

impl Star {
    /// Takes the lab lock and builds a star of `count` hosts.
    pub fn up(what: &str, count: usize) -> Result<Star> {
        let turn = turn::exclusive();
        let guard = LAB_MUTEX.lock().unwrap_or_else(|p| p.into_inner());
        let file_lock = lock_file()?;
        reap_stale_labs();
        let name = format!("pp{}", std::process::id());
        script(&["down", &name])?;
        eprintln!("star {name} of {count} hosts up for {what}");
        let mut star = Star {
            name,
            hosts: Vec::new(),
            _file_lock: file_lock,
            _guard: guard,
            _turn: turn,
        };
        script(&["star", &star.name, &count.to_string()])?;
        for i in 1..=count {
            let addr = script(&["star-addr", &star.name, &i.to_string()])?;
            star.hosts
                .push(addr.trim().parse().context("star host address")?);
        }
        Ok(star)
    }

    /// The address of host `i` (1-based, as the namespaces are named).
    pub fn addr(&self, i: usize) -> Ipv4Addr {
        self.hosts[i - 1]
    }

    pub fn count(&self) -> usize {
        self.hosts.len()
    }

    /// The namespace of host `i`.
    pub fn netns(&self, i: usize) -> String {
        format!("{}-h{i}", self.name)
    }

    /// tbf at `rate_mbit` on every host's downlink, with a queue of
    /// `limit_bytes` (`None`: lab.sh's default of 20 ms).
    pub fn shape(&self, rate_mbit: u32, limit_bytes: Option<u64>) -> Result<()> {
        let mut args = vec![
            "star-shape".to_string(),
            self.name.clone(),
            self.count().to_string(),
            format!("{rate_mbit}mbit"),
        ];
        args.extend(limit_bytes.map(|l| l.to_string()));
        script(&args.iter().map(String::as_str).collect::<Vec<_>>()).map(drop)
    }

    /// The star's name: its namespaces and veths start with it.
    #[allow(dead_code)]
    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip netns exec <router> program`.
    #[allow(dead_code)]
    pub fn exec_r(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &format!("{}-r", self.name), program]);
        cmd
    }

    /// `ip netns exec <host i> program`.
    #[allow(dead_code)]
    pub fn exec(&self, i: usize, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.netns(i), program]);
        cmd
    }
}

impl Drop for Star {
    fn drop(&mut self) {
        if let Err(e) = script(&["down", &self.name]) {
            eprintln!("star {}: down failed: {e:#}", self.name);
        }
    }
}

/// A network namespace with only its loopback, up: for a test that leaves
/// more sockets behind (tens of thousands in TIME_WAIT) than the machine's
/// own loopback should hold while other tests use it. Deleted, with what
/// it holds, when dropped.
pub struct LoopbackNetns(String);

impl LoopbackNetns {
    pub fn new(tag: &str) -> Result<LoopbackNetns> {
        let name = format!("pp{}{tag}", std::process::id());
        // Made first, so that a namespace half set up is deleted too.
        let ns = LoopbackNetns(name.clone());
        for args in [
            vec!["netns", "add", name.as_str()],
            vec!["-n", name.as_str(), "link", "set", "lo", "up"],
        ] {
            let out = run_bounded(Command::new("ip").args(&args), SCRIPT_TIMEOUT)?;
            if !out.status.success() {
                bail!("ip {args:?} failed: {}", out.stderr);
            }
        }
        Ok(ns)
    }

    /// Runs `f` on a thread inside the namespace (see [`in_netns`]).
    pub fn run<T: Send + 'static>(&self, f: impl FnOnce() -> T + Send + 'static) -> T {
        in_netns(&self.0, f)
    }
}

impl Drop for LoopbackNetns {
    fn drop(&mut self) {
        let _ = run_bounded(
            Command::new("ip").args(["netns", "del", &self.0]),
            SCRIPT_TIMEOUT,
        );
    }
}

/// Runs `f` on a thread inside network namespace `ns`. Threads it starts
/// (a tokio runtime's among them) are in the namespace too.
pub fn in_netns<T: Send + 'static>(ns: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let path = format!("/var/run/netns/{ns}");
    thread::spawn(move || {
        let file = File::open(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        // SAFETY: setns on this thread only, with an open namespace fd.
        let rc = unsafe { libc::setns(file.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
        f()
    })
    .join()
    .expect("namespace thread")
}

/// UDP at 1.5 times tbf's rate (`rate_mbit`) from one end of a [`Lab`] to
/// the other, so that r's queue towards the far end stays full and every
/// packet that way waits in it: the ACKs of a flow the other way see a
/// queueing delay, which the lab has no netem for. Bounded in time
/// whatever happens to the test (`for_at_most`); stops when dropped.
pub struct UdpFiller {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl UdpFiller {
    /// Fills r's queue towards b when `from_a`, towards a otherwise.
    pub fn start(lab: &Lab, from_a: bool, rate_mbit: u64, for_at_most: Duration) -> UdpFiller {
        use std::sync::atomic::{AtomicBool, Ordering};
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let (side, to) = if from_a {
            ("a", lab.addr_b())
        } else {
            ("b", lab.addr_a())
        };
        let ns = format!("{}-{side}", lab.name());
        let to = std::net::SocketAddr::from((to, 9));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            in_netns(&ns, move || {
                let sock = std::net::UdpSocket::bind("0.0.0.0:0").unwrap();
                let payload = [0u8; 1400];
                let per_second = rate_mbit as f64 * 1.5e6 / (1400.0 * 8.0);
                let start = Instant::now();
                let mut sent = 0u64;
                while !flag.load(Ordering::Relaxed) && start.elapsed() < for_at_most {
                    let due = (start.elapsed().as_secs_f64() * per_second) as u64;
                    while sent < due {
                        let _ = sock.send_to(&payload, to);
                        sent += 1;
                    }
                    thread::sleep(Duration::from_millis(1));
                }
            })
        });
        // Let the queue fill before a probe connects.
        thread::sleep(Duration::from_millis(200));
        UdpFiller {
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for UdpFiller {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Runs `cmd` within `timeout`: its standard output if it succeeds, else
/// an error that carries both its outputs.
pub fn run_ok(cmd: &mut Command, timeout: Duration) -> Result<String> {
    let out = run_bounded(cmd, timeout)?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}):\n{}{}",
            out.status,
            out.stdout,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// A veth pair between two namespaces: `i1` in `ns1`, its peer `i2` in
/// `ns2` (the labs that build their own topology).
pub fn veth_between(ns1: &str, i1: &str, ns2: &str, i2: &str, timeout: Duration) -> Result<()> {
    run_ok(
        Command::new("ip").args([
            "link", "add", i1, "netns", ns1, "type", "veth", "peer", "name", i2, "netns", ns2,
        ]),
        timeout,
    )
    .map(drop)
}

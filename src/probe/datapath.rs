//! The data path shared by both ends of a test: one OS thread per stream,
//! released together by a start gate, each measuring its own window.
//!
//! Streams run on dedicated threads with blocking sockets, not on the async
//! runtime: per-thread CPU accounting (RUSAGE_THREAD) is then exact, and the
//! runtime's scheduling never limits what the path can carry. The protocol
//! side (control connection, tokio) only hands sockets over and collects
//! [`StreamStats`].

use std::net::{TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::oneshot;

use super::spec::FlowDirection;
use super::stats::{Role, StreamStats};
use crate::host::{HostSnapshot, ThreadUsage};

/// How often a blocked data thread wakes to look at the stop flag.
pub const POLL_INTERVAL: Duration = Duration::from_millis(100);

/// Timing and shape of a test, as both ends run it.
#[derive(Debug, Clone)]
pub struct Plan {
    pub omit: Duration,
    pub duration: Duration,
    pub length: u32,
    /// Bits per second for each stream; 0 is unpaced.
    pub bitrate_per_stream: u64,
    pub affinity: Option<usize>,
    /// Carried in every UDP datagram so that strays are ignored.
    pub test_id: u32,
}

#[derive(Debug)]
enum GateState {
    Closed,
    Open(Instant),
    Aborted,
}

/// Releases every stream thread of one side at the same instant.
#[derive(Debug, Clone)]
pub struct StartGate(Arc<(Mutex<GateState>, Condvar)>);

impl Default for StartGate {
    fn default() -> Self {
        StartGate(Arc::new((Mutex::new(GateState::Closed), Condvar::new())))
    }
}

impl StartGate {
    /// Opens the gate; the instant is the start of the test on this side.
    pub fn open(&self) -> Instant {
        let now = Instant::now();
        self.set(GateState::Open(now));
        now
    }

    /// Releases waiting threads without starting the test.
    pub fn abort(&self) {
        self.set(GateState::Aborted);
    }

    fn set(&self, state: GateState) {
        let (lock, cvar) = &*self.0;
        let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        if matches!(*guard, GateState::Closed) {
            *guard = state;
        }
        cvar.notify_all();
    }

    /// Waits for the start; `None` if the test was aborted first.
    pub fn wait(&self) -> Option<Instant> {
        let (lock, cvar) = &*self.0;
        let mut guard = lock.lock().unwrap_or_else(|p| p.into_inner());
        loop {
            match *guard {
                GateState::Open(t) => return Some(t),
                GateState::Aborted => return None,
                GateState::Closed => guard = cvar.wait(guard).unwrap_or_else(|p| p.into_inner()),
            }
        }
    }
}

/// Tells stream threads to stop early (deadline passed, peer gone, shutdown).
#[derive(Debug, Clone, Default)]
pub struct StopFlag(Arc<AtomicBool>);

impl StopFlag {
    pub fn stop(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
    pub fn is_stopped(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// A connected data socket handed to a stream thread.
#[derive(Debug)]
pub enum DataSocket {
    Tcp(TcpStream),
    Udp(UdpSocket),
}

/// One stream to run on this side.
#[derive(Debug)]
pub struct StreamJob {
    pub id: u32,
    pub direction: FlowDirection,
    pub role: Role,
    pub socket: DataSocket,
}

/// Everything a stream thread needs besides its socket.
#[derive(Debug, Clone)]
pub struct StreamContext {
    pub plan: Plan,
    pub gate: StartGate,
    pub stop: StopFlag,
}

/// Measures CPU, context switches and syscalls of one thread over a window
/// that opens when the warm-up ends.
#[derive(Debug, Default)]
pub struct ThreadMeter {
    opened: Option<(Instant, ThreadUsage)>,
    pub syscalls: u64,
}

impl ThreadMeter {
    pub fn is_open(&self) -> bool {
        self.opened.is_some()
    }

    /// Opens the window at `at` (if not open yet) and resets the syscall count.
    pub fn open(&mut self, at: Instant) {
        if self.opened.is_none() {
            self.opened = Some((at, ThreadUsage::current()));
            self.syscalls = 0;
        }
    }

    pub fn opened_at(&self) -> Option<Instant> {
        self.opened.map(|(t, _)| t)
    }

    /// Fills the usage fields of `stats` with what this thread used since the window opened.
    pub fn finish(&self, stats: &mut StreamStats) {
        stats.syscalls = self.syscalls;
        if let Some((_, before)) = self.opened {
            let used = ThreadUsage::current().since(&before);
            stats.cpu_user_seconds = used.user.as_secs_f64();
            stats.cpu_system_seconds = used.system.as_secs_f64();
            stats.context_switches = used.voluntary_switches + used.involuntary_switches;
        }
    }
}

/// Pins the calling thread to `cpu`.
pub fn pin_current_thread(cpu: usize) -> std::io::Result<()> {
    // SAFETY: cpu_set_t is plain data; CPU_SET bounds-checks against its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if cpu >= libc::CPU_SETSIZE as usize {
            return Err(std::io::Error::other(format!("CPU {cpu} is out of range")));
        }
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Starts one thread for `job`; its figures arrive on the returned channel.
pub fn spawn_stream(
    job: StreamJob,
    ctx: StreamContext,
) -> std::io::Result<oneshot::Receiver<StreamStats>> {
    let (tx, rx) = oneshot::channel();
    std::thread::Builder::new()
        .name(format!("pp-stream-{}", job.id))
        .spawn(move || {
            if let Some(cpu) = ctx.plan.affinity {
                if let Err(e) = pin_current_thread(cpu) {
                    tracing::warn!(cpu, error = %e, "could not pin stream thread");
                }
            }
            let mut stats = StreamStats {
                id: job.id,
                direction: Some(job.direction),
                role: Some(job.role),
                ..StreamStats::default()
            };
            match (job.socket, job.role) {
                (DataSocket::Tcp(s), Role::Sender) => super::tcp::send(s, &ctx, &mut stats),
                (DataSocket::Tcp(s), Role::Receiver) => super::tcp::receive(s, &ctx, &mut stats),
                (DataSocket::Udp(s), Role::Sender) => super::udp::send(s, &ctx, &mut stats),
                (DataSocket::Udp(s), Role::Receiver) => super::udp::receive(s, &ctx, &mut stats),
            }
            let _ = tx.send(stats);
        })?;
    Ok(rx)
}

/// The streams of one side, started and gathered together with the host
/// figures over the same window.
pub struct SideRun {
    streams: Vec<oneshot::Receiver<StreamStats>>,
    pub gate: StartGate,
    pub stop: StopFlag,
    plan: Plan,
    irqs: Vec<String>,
}

impl SideRun {
    /// Spawns a thread per job; they wait at the gate.
    pub fn spawn(jobs: Vec<StreamJob>, plan: Plan, irqs: Vec<String>) -> std::io::Result<SideRun> {
        let gate = StartGate::default();
        let stop = StopFlag::default();
        let ctx = StreamContext {
            plan: plan.clone(),
            gate: gate.clone(),
            stop: stop.clone(),
        };
        let mut streams = Vec::with_capacity(jobs.len());
        for job in jobs {
            match spawn_stream(job, ctx.clone()) {
                Ok(rx) => streams.push(rx),
                Err(e) => {
                    gate.abort();
                    return Err(e);
                }
            }
        }
        Ok(SideRun {
            streams,
            gate,
            stop,
            plan,
            irqs,
        })
    }

    /// Starts the streams and waits until they finish, or until `grace`
    /// after the planned end, when they are told to stop.
    /// Returns the per-stream figures and the host delta over the window.
    pub async fn run(mut self, grace: Duration) -> (Vec<StreamStats>, crate::host::HostDelta) {
        let start = self.gate.open();
        let window_start = start + self.plan.omit;
        tokio::time::sleep_until(window_start.into()).await;
        let before = HostSnapshot::take(&self.irqs).ok();
        let deadline = window_start + self.plan.duration + grace;
        let mut results = Vec::with_capacity(self.streams.len());
        for mut rx in std::mem::take(&mut self.streams) {
            let got = match tokio::time::timeout_at(deadline.into(), &mut rx).await {
                Ok(r) => r.ok(),
                Err(_) => {
                    // Threads poll the flag every POLL_INTERVAL, so this wait is short.
                    self.stop.stop();
                    tokio::time::timeout(POLL_INTERVAL * 20, rx)
                        .await
                        .ok()
                        .and_then(Result::ok)
                }
            };
            results.extend(got);
        }
        let after = HostSnapshot::take(&self.irqs).ok();
        let host = match (before, after) {
            (Some(b), Some(a)) => b.delta(&a),
            _ => Default::default(),
        };
        (results, host)
    }
}

impl Drop for SideRun {
    fn drop(&mut self) {
        // A run dropped before it started (control failure) must not leave
        // threads waiting at the gate.
        self.gate.abort();
        self.stop.stop();
    }
}

//! The data path's parts shared by both ends of a test and by every kind:
//! the plan, the start gate that releases all streams of a side at once,
//! the stop flag, the sockets handed to stream threads, and the meter of a
//! thread's CPU over its window. The threads themselves are started by
//! [`super::side`], and run the loops of their kind (`tcp.rs`, `udp.rs`).
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

use super::spec::FlowDirection;
use super::stats::{Role, StreamStats};
use crate::host::ThreadUsage;

/// Time allowed after the planned end for data to drain before streams
/// are stopped. Both ends use it: the responder to bound its run, the
/// prober to bound its wait for the responder's results.
pub const DRAIN_GRACE: Duration = Duration::from_secs(3);

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
    /// Bytes moved by every stream of this side so far, warm-up included:
    /// a side that sees it stand still knows the peer stopped taking part.
    pub progress: Progress,
}

/// A side's running count of bytes moved, shared by its stream threads.
#[derive(Debug, Clone, Default)]
pub struct Progress(Arc<std::sync::atomic::AtomicU64>);

impl Progress {
    pub fn add(&self, bytes: u64) {
        self.0.fetch_add(bytes, Ordering::Relaxed);
    }
    pub fn get(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
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

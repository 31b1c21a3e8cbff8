//! Who may use the responder, and how much: client network allow and deny
//! lists, a per-client allowance of tests per minute, and a responder-wide
//! allowance of bytes per hour.
//!
//! Both allowances keep bounded state whatever clients do: the per-client
//! map has a fixed capacity, and the byte budget is sixty one-minute
//! buckets. [`PerClient`] counts what a client holds right now (pending
//! connections, sessions), and [`SlotTime`] how long it held a test slot
//! over the last hour.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ipnet::IpNet;

/// Client networks allowed and denied. A deny entry wins over an allow
/// entry; an empty allow list allows everyone not denied.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AccessList {
    pub allow: Vec<IpNet>,
    pub deny: Vec<IpNet>,
}

impl AccessList {
    pub fn permits(&self, ip: IpAddr) -> bool {
        let ip = canonical(ip);
        if self.deny.iter().any(|n| n.contains(&ip)) {
            return false;
        }
        self.allow.is_empty() || self.allow.iter().any(|n| n.contains(&ip))
    }
}

/// IPv4 clients of a dual-stack socket appear as ::ffff:a.b.c.d; lists are
/// written with plain IPv4 networks.
fn canonical(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// How many clients the per-minute allowance tracks at most.
pub const MAX_TRACKED_CLIENTS: usize = 4096;
const MINUTE: Duration = Duration::from_secs(60);

/// Tests admitted per client over the last minute (a sliding window).
///
/// IPv6 clients are counted per /64: one host usually holds a whole /64,
/// and could otherwise take a fresh allowance from each of its addresses.
#[derive(Debug, Default)]
pub struct ClientRate {
    clients: HashMap<IpAddr, VecDeque<Instant>>,
}

impl ClientRate {
    /// Records a test for `ip` if it is within `per_minute` (0 = no limit);
    /// otherwise returns how long until it may run one.
    pub fn admit(&mut self, ip: IpAddr, per_minute: u32, now: Instant) -> Result<(), Duration> {
        if per_minute == 0 {
            return Ok(());
        }
        let key = client_key(ip);
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_TRACKED_CLIENTS {
            self.make_room(now);
        }
        let times = self.clients.entry(key).or_default();
        while times
            .front()
            .is_some_and(|t| now.duration_since(*t) >= MINUTE)
        {
            times.pop_front();
        }
        if times.len() >= per_minute as usize {
            let oldest = times.front().copied().unwrap_or(now);
            return Err((oldest + MINUTE).saturating_duration_since(now));
        }
        times.push_back(now);
        Ok(())
    }

    /// Forgets clients with nothing in the window; if every tracked client
    /// is active, forgets the one idle longest. Evicting rather than
    /// refusing newcomers means a flood from many addresses cannot lock
    /// legitimate probers out; it can only reset someone's count, which
    /// the flood could equally spend from its own addresses.
    fn make_room(&mut self, now: Instant) {
        self.clients.retain(|_, times| {
            times
                .back()
                .is_some_and(|t| now.duration_since(*t) < MINUTE)
        });
        if self.clients.len() >= MAX_TRACKED_CLIENTS {
            let idlest = self
                .clients
                .iter()
                .min_by_key(|(_, times)| times.back().copied())
                .map(|(ip, _)| *ip);
            if let Some(ip) = idlest {
                self.clients.remove(&ip);
            }
        }
    }

    pub fn tracked(&self) -> usize {
        self.clients.len()
    }
}

/// The unit every per-client bound counts in: an IPv4 address, or an IPv6
/// /64.
pub fn client_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            IpAddr::V6([seg[0], seg[1], seg[2], seg[3], 0, 0, 0, 0].into())
        }
        v4 => v4,
    }
}

/// Bytes moved over the last hour, in one-minute buckets.
#[derive(Debug)]
pub struct ByteBudget {
    start: Instant,
    /// (minute number since `start`, bytes in that minute), indexed by
    /// minute modulo 60.
    buckets: [(u64, u64); 60],
}

impl ByteBudget {
    pub fn new(start: Instant) -> ByteBudget {
        ByteBudget {
            start,
            buckets: [(u64::MAX, 0); 60],
        }
    }

    fn minute(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.start).as_secs() / 60
    }

    pub fn add(&mut self, bytes: u64, now: Instant) {
        let m = self.minute(now);
        let slot = &mut self.buckets[(m % 60) as usize];
        if slot.0 != m {
            *slot = (m, 0);
        }
        slot.1 = slot.1.saturating_add(bytes);
    }

    /// Bytes in the current minute and the 59 before it.
    pub fn spent(&self, now: Instant) -> u64 {
        let m = self.minute(now);
        self.live(m).map(|(_, b)| b).fold(0, u64::saturating_add)
    }

    fn live(&self, m: u64) -> impl Iterator<Item = (u64, u64)> + '_ {
        self.buckets
            .iter()
            .copied()
            .filter(move |(bm, _)| *bm != u64::MAX && *bm <= m && m - bm < 60)
    }

    /// With `limit` per hour (0 = none): `Ok` if a test may start now,
    /// else how long until enough of the spend has aged out.
    pub fn check(&self, limit: u64, now: Instant) -> Result<(), Duration> {
        let spent = self.spent(now);
        if limit == 0 || spent < limit {
            return Ok(());
        }
        let m = self.minute(now);
        let mut live: Vec<(u64, u64)> = self.live(m).collect();
        live.sort_unstable();
        let mut left = spent;
        for (bm, bytes) in live {
            left -= bytes;
            if left < limit {
                // Bucket `bm` leaves the window when minute bm + 60 begins.
                let leaves = self.start + Duration::from_secs((bm + 60) * 60);
                return Err(leaves.saturating_duration_since(now));
            }
        }
        Err(Duration::from_secs(3600))
    }
}

/// How many of something each client holds at once (connections waiting
/// for their first message, control sessions). The map only holds clients
/// that hold at least one, so its size is bounded by the global cap on the
/// things counted.
#[derive(Debug, Default)]
pub struct PerClient {
    held: Mutex<HashMap<IpAddr, u32>>,
}

/// One held unit; released on drop.
#[derive(Debug)]
pub struct ClientPermit {
    owner: Arc<PerClient>,
    key: IpAddr,
}

impl PerClient {
    /// Takes one unit for `ip` if it holds fewer than `cap`.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr, cap: u32) -> Option<ClientPermit> {
        let key = client_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let n = held.entry(key).or_insert(0);
        if *n >= cap {
            if *n == 0 {
                held.remove(&key);
            }
            return None;
        }
        *n += 1;
        Some(ClientPermit {
            owner: self.clone(),
            key,
        })
    }

    /// Units `ip` holds now.
    pub fn held(&self, ip: IpAddr) -> u32 {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.get(&client_key(ip)).copied().unwrap_or(0)
    }
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        let mut held = self.owner.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

const HOUR: Duration = Duration::from_secs(3600);

/// Seconds of test slot each client held over the last hour, so that one
/// client cannot keep the slot by running test after test within its
/// allowance of tests per minute.
#[derive(Debug, Default)]
pub struct SlotTime {
    clients: HashMap<IpAddr, VecDeque<(Instant, Duration)>>,
}

impl SlotTime {
    /// Records that `ip` held a slot for `held`, ending at `now`.
    pub fn add(&mut self, ip: IpAddr, held: Duration, now: Instant) {
        let key = client_key(ip);
        if !self.clients.contains_key(&key) && self.clients.len() >= MAX_TRACKED_CLIENTS {
            self.clients
                .retain(|_, v| v.back().is_some_and(|(t, _)| now.duration_since(*t) < HOUR));
            if self.clients.len() >= MAX_TRACKED_CLIENTS {
                // Every tracked client was active: forget the least active,
                // as the tests-per-minute allowance does.
                let least = self
                    .clients
                    .iter()
                    .min_by_key(|(_, v)| v.iter().map(|(_, d)| *d).sum::<Duration>())
                    .map(|(k, _)| *k);
                if let Some(k) = least {
                    self.clients.remove(&k);
                }
            }
        }
        let v = self.clients.entry(key).or_default();
        v.push_back((now, held));
        // A client can end at most one test per second or so; keep the
        // deque short whatever it does.
        while v.len() > 4096 {
            v.pop_front();
        }
    }

    /// Whether `ip` may hold a slot for another `planned`, within `per_hour`
    /// (zero: no limit); otherwise how long until it may.
    pub fn check(
        &mut self,
        ip: IpAddr,
        planned: Duration,
        per_hour: Duration,
        now: Instant,
    ) -> Result<(), Duration> {
        if per_hour.is_zero() {
            return Ok(());
        }
        let Some(v) = self.clients.get_mut(&client_key(ip)) else {
            return Ok(());
        };
        while v
            .front()
            .is_some_and(|(t, _)| now.duration_since(*t) >= HOUR)
        {
            v.pop_front();
        }
        let used: Duration = v.iter().map(|(_, d)| *d).sum();
        if used + planned <= per_hour {
            return Ok(());
        }
        // Wait until enough of the oldest use has left the window.
        let mut freed = Duration::ZERO;
        for (t, d) in v.iter() {
            freed += *d;
            if used - freed + planned <= per_hour {
                return Err((*t + HOUR).saturating_duration_since(now));
            }
        }
        Err(HOUR)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn per_client_counts_cap_each_client_and_free_on_drop() {
        let counts = Arc::new(PerClient::default());
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        let held: Vec<_> = (0..3).filter_map(|_| counts.try_acquire(a, 2)).collect();
        assert_eq!(held.len(), 2);
        assert!(counts.try_acquire(b, 2).is_some());
        drop(held);
        assert_eq!(counts.held(a), 0);
        // An IPv6 /64 is one client.
        let x: IpAddr = "2001:db8::1".parse().unwrap();
        let y: IpAddr = "2001:db8::2".parse().unwrap();
        let _p = counts.try_acquire(x, 1).unwrap();
        assert!(counts.try_acquire(y, 1).is_none());
        assert!(counts.try_acquire(a, 0).is_none());
        assert_eq!(counts.held.lock().unwrap().len(), 1);
    }

    #[test]
    fn slot_time_limits_a_client_over_the_hour() {
        let mut slots = SlotTime::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let t0 = Instant::now();
        let limit = Duration::from_secs(100);
        for i in 0..3 {
            slots.add(a, Duration::from_secs(30), t0 + Duration::from_secs(i * 40));
        }
        let now = t0 + Duration::from_secs(120);
        assert!(slots.check(a, Duration::from_secs(10), limit, now).is_ok());
        let wait = slots
            .check(a, Duration::from_secs(20), limit, now)
            .unwrap_err();
        // The first 30 s leave the window an hour after they ended.
        assert_eq!(wait, Duration::from_secs(3600 - 120));
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        assert!(slots.check(other, limit, limit, now).is_ok());
        assert!(slots.check(a, limit * 9, Duration::ZERO, now).is_ok());
        assert!(slots
            .check(
                a,
                Duration::from_secs(20),
                limit,
                t0 + Duration::from_secs(3601)
            )
            .is_ok());
    }

    fn net(s: &str) -> IpNet {
        s.parse().unwrap()
    }
    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn deny_wins_and_empty_allow_allows_all() {
        let open = AccessList::default();
        assert!(open.permits(ip("203.0.113.9")));
        let list = AccessList {
            allow: vec![net("10.0.0.0/8"), net("2001:db8::/32")],
            deny: vec![net("10.9.0.0/16")],
        };
        assert!(list.permits(ip("10.1.2.3")));
        assert!(!list.permits(ip("10.9.0.1")));
        assert!(!list.permits(ip("192.168.1.1")));
        assert!(list.permits(ip("2001:db8::5")));
        // A mapped IPv4 client is judged by its IPv4 address.
        assert!(list.permits(ip("::ffff:10.1.2.3")));
        assert!(!list.permits(ip("::ffff:10.9.0.1")));
        let deny_only = AccessList {
            allow: vec![],
            deny: vec![net("127.0.0.2/32")],
        };
        assert!(deny_only.permits(ip("127.0.0.1")));
        assert!(!deny_only.permits(ip("127.0.0.2")));
    }

    #[test]
    fn per_client_allowance_slides_over_a_minute() {
        let t0 = Instant::now();
        let mut rate = ClientRate::default();
        let a = ip("192.0.2.1");
        for i in 0..3 {
            rate.admit(a, 3, t0 + Duration::from_secs(i * 10)).unwrap();
        }
        // The fourth within the minute waits for the first to age out.
        assert_eq!(
            rate.admit(a, 3, t0 + Duration::from_secs(30)),
            Err(Duration::from_secs(30))
        );
        // Another client is unaffected.
        rate.admit(ip("192.0.2.2"), 3, t0 + Duration::from_secs(30))
            .unwrap();
        rate.admit(a, 3, t0 + Duration::from_secs(60)).unwrap();
        // No limit, no tracking.
        let mut off = ClientRate::default();
        for _ in 0..100 {
            off.admit(a, 0, t0).unwrap();
        }
        assert_eq!(off.tracked(), 0);
    }

    #[test]
    fn ipv6_clients_share_their_64() {
        let t0 = Instant::now();
        let mut rate = ClientRate::default();
        rate.admit(ip("2001:db8:1:2::1"), 1, t0).unwrap();
        assert!(rate.admit(ip("2001:db8:1:2::ffff"), 1, t0).is_err());
        rate.admit(ip("2001:db8:1:3::1"), 1, t0).unwrap();
    }

    #[test]
    fn tracked_clients_are_capped() {
        let t0 = Instant::now();
        let mut rate = ClientRate::default();
        for i in 0..(MAX_TRACKED_CLIENTS as u32 + 500) {
            let addr = IpAddr::V4(i.into());
            rate.admit(addr, 1, t0 + Duration::from_millis(i as u64))
                .unwrap();
        }
        assert_eq!(rate.tracked(), MAX_TRACKED_CLIENTS);
        // Once the window has passed, the map empties out on the next newcomer.
        rate.admit(ip("198.51.100.1"), 1, t0 + Duration::from_secs(120))
            .unwrap();
        assert_eq!(rate.tracked(), 1);
    }

    #[test]
    fn byte_budget_counts_the_last_hour() {
        let t0 = Instant::now();
        let mut b = ByteBudget::new(t0);
        let min = |m: u64| t0 + Duration::from_secs(m * 60);
        b.add(600, min(0));
        b.add(300, min(10));
        assert_eq!(b.spent(min(10)), 900);
        assert_eq!(b.check(1000, min(10)), Ok(()));
        b.add(200, min(20));
        assert_eq!(b.spent(min(20)), 1100);
        // Over: the minute-0 bucket leaves at minute 60, 40 minutes on.
        assert_eq!(b.check(1000, min(20)), Err(Duration::from_secs(40 * 60)));
        assert_eq!(b.check(0, min(20)), Ok(()));
        assert_eq!(b.spent(min(60)), 500);
        assert_eq!(b.check(1000, min(60)), Ok(()));
        // A bucket slot reused an hour later starts from zero.
        b.add(50, min(70));
        assert_eq!(b.spent(min(70)), 250);
        assert_eq!(b.spent(min(200)), 0);
    }
}

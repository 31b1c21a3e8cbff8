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

/// The wider prefix addresses are grouped by when a share is under
/// pressure: an IPv4 /24 or an IPv6 /48. One operator usually holds a
/// whole one, and could otherwise take a fresh share from each address.
pub fn group_key(ip: IpAddr) -> IpAddr {
    match canonical(ip) {
        IpAddr::V6(v6) => {
            let seg = v6.segments();
            IpAddr::V6([seg[0], seg[1], seg[2], 0, 0, 0, 0, 0].into())
        }
        IpAddr::V4(v4) => {
            let o = v4.octets();
            IpAddr::V4([o[0], o[1], o[2], 0].into())
        }
    }
}

/// How long a client that proved the secret stays known without proving
/// it again. Probers of a fleet come back every few minutes.
pub const PROVEN_FOR: Duration = Duration::from_secs(3600);

/// The peers the responder gives capacity of their own: the networks the
/// operator named (allow-list entries, and in `serve` the mesh's members
/// and static targets, replaced on reload and discovery), and clients that
/// recently proved the shared secret. An attacker without the secret
/// cannot become one: the first two come from configuration, the last
/// from a proof.
#[derive(Debug, Default)]
pub struct KnownPeers {
    /// Mesh members and static targets, from `serve`.
    nets: std::sync::RwLock<Vec<IpNet>>,
    /// The allow list's entries, from the responder's configuration.
    allow: std::sync::RwLock<Vec<IpNet>>,
    /// Client key to when it last proved the secret; at most
    /// [`MAX_TRACKED_CLIENTS`].
    proven: Mutex<HashMap<IpAddr, Instant>>,
}

impl KnownPeers {
    /// Replaces the configured known networks (mesh members, static
    /// targets, allow-list entries).
    pub fn set_networks(&self, nets: Vec<IpNet>) {
        *self.nets.write().unwrap_or_else(|p| p.into_inner()) = nets;
    }

    /// Replaces the allow-list entries (on every configuration change).
    pub fn set_allow(&self, nets: Vec<IpNet>) {
        *self.allow.write().unwrap_or_else(|p| p.into_inner()) = nets;
    }

    pub fn networks(&self) -> Vec<IpNet> {
        self.nets.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// `ip` has just proved the secret.
    pub fn proved(&self, ip: IpAddr, now: Instant) {
        let key = client_key(ip);
        let mut proven = self.proven.lock().unwrap_or_else(|p| p.into_inner());
        if !proven.contains_key(&key) && proven.len() >= MAX_TRACKED_CLIENTS {
            proven.retain(|_, t| now.saturating_duration_since(*t) < PROVEN_FOR);
            if proven.len() >= MAX_TRACKED_CLIENTS {
                let oldest = proven.iter().min_by_key(|(_, t)| **t).map(|(k, _)| *k);
                if let Some(k) = oldest {
                    proven.remove(&k);
                }
            }
        }
        proven.insert(key, now);
    }

    pub fn is_known(&self, ip: IpAddr, now: Instant) -> bool {
        let ip = canonical(ip);
        for list in [&self.nets, &self.allow] {
            if list
                .read()
                .unwrap_or_else(|p| p.into_inner())
                .iter()
                .any(|n| n.contains(&ip))
            {
                return true;
            }
        }
        let proven = self.proven.lock().unwrap_or_else(|p| p.into_inner());
        proven
            .get(&client_key(ip))
            .is_some_and(|t| now.saturating_duration_since(*t) < PROVEN_FOR)
    }
}

/// How many of something clients hold at once (connections waiting for
/// their first message, control sessions), bounded per client and in all.
///
/// Per-client shares alone fall to an attacker with a few addresses, so
/// the whole is shared out too:
/// - unknown clients (see [`KnownPeers`]) together hold at most the
///   `unknown_budget`; the rest of the capacity is kept for known peers;
/// - when the pool is full, a newcomer that holds less than the heaviest
///   holder takes the place of that holder's oldest unprotected unit,
///   which is told to go (see [`ClientPermit::evicted`]): a unit that has
///   done nothing yet is cheap to drop, and so whoever holds least (a real
///   prober, with one or two) always gets in. An unknown newcomer never
///   takes a known peer's unit; a known one takes an unknown's first;
/// - under pressure (half the capacity held), the addresses of one wider
///   prefix ([`group_key`]) share one client's share, and the heaviest
///   prefix is dropped from first.
///
/// Its memory is bounded by the capacity: there is one entry per unit held.
#[derive(Debug)]
pub struct PerClient {
    capacity: usize,
    unknown_budget: usize,
    known: Arc<KnownPeers>,
    held: Mutex<Held>,
}

impl Default for PerClient {
    /// No bound in all, no known peers: only the per-client share counts.
    fn default() -> Self {
        PerClient::new(usize::MAX, 0, Arc::default())
    }
}

#[derive(Debug, Default)]
struct Held {
    next: u64,
    units: HashMap<u64, Unit>,
}

#[derive(Debug)]
struct Unit {
    key: IpAddr,
    group: IpAddr,
    known: bool,
    /// Past the point where dropping it would waste work (a test admitted,
    /// a secret proved): never evicted.
    protected: bool,
    since: Instant,
    evict: Arc<Eviction>,
}

#[derive(Debug, Default)]
struct Eviction {
    evicted: std::sync::atomic::AtomicBool,
    notify: tokio::sync::Notify,
}

/// One held unit; released on drop.
#[derive(Debug)]
pub struct ClientPermit {
    owner: Arc<PerClient>,
    id: u64,
    evict: Arc<Eviction>,
}

/// Why [`PerClient::admit`] refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShareRefused {
    /// The client (or, under pressure, its prefix) holds its share.
    Client,
    /// The pool, or the unknown clients' budget, is full of holders no
    /// heavier than this client.
    Full,
}

/// What [`PerClient::admit`] did.
#[derive(Debug)]
pub struct Admitted {
    pub permit: ClientPermit,
    /// The client whose unit was dropped to make room, if any.
    pub evicted: Option<IpAddr>,
    pub known: bool,
}

impl PerClient {
    /// A pool of `capacity` units, of which `known_reserve` only known
    /// peers may use.
    pub fn new(capacity: usize, known_reserve: usize, known: Arc<KnownPeers>) -> PerClient {
        PerClient {
            capacity,
            unknown_budget: capacity.saturating_sub(known_reserve),
            known,
            held: Mutex::default(),
        }
    }

    pub fn known_peers(&self) -> &Arc<KnownPeers> {
        &self.known
    }

    /// Takes one unit for `ip` within its share of `cap`, making room as
    /// the type's doc says; `None` if refused.
    pub fn try_acquire(self: &Arc<Self>, ip: IpAddr, cap: u32) -> Option<ClientPermit> {
        self.admit(ip, cap, Instant::now()).ok().map(|a| a.permit)
    }

    /// As [`PerClient::try_acquire`], saying what was done.
    pub fn admit(
        self: &Arc<Self>,
        ip: IpAddr,
        cap: u32,
        now: Instant,
    ) -> Result<Admitted, ShareRefused> {
        let known = self.known.is_known(ip, now);
        let key = client_key(ip);
        let group = group_key(ip);
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mine = held.units.values().filter(|u| u.key == key).count();
        if mine >= cap as usize {
            return Err(ShareRefused::Client);
        }
        let total = held.units.len();
        let unknown = held.units.values().filter(|u| !u.known).count();
        let mut victim = None;
        if known {
            if total >= self.capacity {
                victim = held
                    .victim(|u| !u.known, |_| true)
                    .or_else(|| held.victim(|u| u.known, |v| v.key_count > mine));
                if victim.is_none() {
                    return Err(ShareRefused::Full);
                }
            }
        } else {
            let pressure = total.saturating_mul(2) >= self.capacity;
            let in_group = held
                .units
                .values()
                .filter(|u| !u.known && u.group == group)
                .count();
            if pressure && in_group >= cap as usize {
                // The prefix holds a client's share: make room within it.
                victim = held.victim(|u| !u.known && u.group == group, |v| v.key_count > mine);
                if victim.is_none() {
                    return Err(ShareRefused::Client);
                }
            } else if total >= self.capacity || unknown >= self.unknown_budget {
                victim = held.victim(
                    |u| !u.known,
                    |v| {
                        if v.group == group {
                            v.key_count > mine
                        } else {
                            v.group_count > in_group
                        }
                    },
                );
                if victim.is_none() {
                    return Err(ShareRefused::Full);
                }
            }
        }
        let evicted = victim.and_then(|id| held.units.remove(&id)).map(|u| {
            u.evict
                .evicted
                .store(true, std::sync::atomic::Ordering::Release);
            u.evict.notify.notify_one();
            u.key
        });
        let id = held.next;
        held.next += 1;
        let evict = Arc::new(Eviction::default());
        held.units.insert(
            id,
            Unit {
                key,
                group,
                known,
                protected: false,
                since: now,
                evict: evict.clone(),
            },
        );
        Ok(Admitted {
            permit: ClientPermit {
                owner: self.clone(),
                id,
                evict,
            },
            evicted,
            known,
        })
    }

    /// Units `ip` holds now.
    pub fn held(&self, ip: IpAddr) -> u32 {
        let key = client_key(ip);
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.units.values().filter(|u| u.key == key).count() as u32
    }

    /// Units held now, in all.
    pub fn total(&self) -> usize {
        self.held
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .units
            .len()
    }
}

/// A unit that could make room, with the weight of its holder.
struct Candidate {
    key_count: usize,
    group_count: usize,
    group: IpAddr,
}

impl Held {
    /// Of the unprotected units `among` selects, the oldest of the
    /// heaviest client in the heaviest prefix, if `fair` accepts it.
    fn victim(
        &self,
        among: impl Fn(&Unit) -> bool,
        fair: impl Fn(&Candidate) -> bool,
    ) -> Option<u64> {
        let mut keys: HashMap<IpAddr, usize> = HashMap::new();
        let mut groups: HashMap<IpAddr, usize> = HashMap::new();
        for u in self.units.values().filter(|u| among(u)) {
            *keys.entry(u.key).or_default() += 1;
            *groups.entry(u.group).or_default() += 1;
        }
        let (id, c) = self
            .units
            .iter()
            .filter(|(_, u)| among(u) && !u.protected)
            .map(|(id, u)| {
                let c = Candidate {
                    key_count: keys[&u.key],
                    group_count: groups[&u.group],
                    group: u.group,
                };
                (*id, u.since, c)
            })
            .max_by(|a, b| {
                (a.2.group_count, a.2.key_count, std::cmp::Reverse(a.1))
                    .cmp(&(b.2.group_count, b.2.key_count, std::cmp::Reverse(b.1)))
                    // Deterministic among equals: the lowest id, the oldest.
                    .then(b.0.cmp(&a.0))
            })
            .map(|(id, _, c)| (id, c))?;
        fair(&c).then_some(id)
    }
}

impl ClientPermit {
    /// Completes when this unit was dropped to make room for another
    /// client: its holder should close the connection at once. Whoever
    /// holds a permit must watch this (e.g. in a `select!` with the read
    /// of the first message), or the pool's bound does not hold.
    pub async fn evicted(&self) {
        use std::sync::atomic::Ordering;
        loop {
            let notified = self.evict.notify.notified();
            if self.evict.evicted.load(Ordering::Acquire) {
                return;
            }
            notified.await;
        }
    }

    pub fn is_evicted(&self) -> bool {
        self.evict
            .evicted
            .load(std::sync::atomic::Ordering::Acquire)
    }

    /// Marks the unit as past the point where dropping it is cheap (a
    /// test admitted); returns false if it was already evicted.
    pub fn protect(&self) -> bool {
        let mut held = self.owner.held.lock().unwrap_or_else(|p| p.into_inner());
        match held.units.get_mut(&self.id) {
            Some(u) => {
                u.protected = true;
                true
            }
            None => false,
        }
    }

    /// The holder proved the secret: its unit counts as a known peer's.
    pub fn promote(&self) {
        let mut held = self.owner.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(u) = held.units.get_mut(&self.id) {
            u.known = true;
        }
    }
}

impl Drop for ClientPermit {
    fn drop(&mut self) {
        let mut held = self.owner.held.lock().unwrap_or_else(|p| p.into_inner());
        held.units.remove(&self.id);
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
        assert_eq!(counts.total(), 1);
    }

    fn v4(i: u32) -> IpAddr {
        IpAddr::V4(std::net::Ipv4Addr::from(0x7f00_0000 + i))
    }

    #[tokio::test]
    async fn a_lighter_client_takes_the_place_of_the_heaviest() {
        let pool = Arc::new(PerClient::new(8, 2, Arc::default()));
        let now = Instant::now();
        // Four attacker addresses fill the unknown budget of 6 (no
        // pressure grouping: each /24 is their own).
        let attackers: Vec<IpAddr> = (0..3u8).map(|i| IpAddr::V4([10, i, 0, 1].into())).collect();
        let mut held = Vec::new();
        for a in &attackers {
            for _ in 0..2 {
                held.push(pool.admit(*a, 4, now).unwrap().permit);
            }
        }
        assert_eq!(pool.total(), 6);
        // A fourth attacker holding nothing gets in by dropping one of the
        // oldest heaviest; one holding as many as the rest does not.
        let prober = ip("192.0.2.7");
        let got = pool.admit(prober, 4, now).unwrap();
        assert_eq!(got.evicted, Some(attackers[0]));
        assert!(held[0].is_evicted());
        assert!(!held[1].is_evicted());
        // The evicted holder hears of it at once.
        tokio::time::timeout(Duration::from_millis(100), held[0].evicted())
            .await
            .unwrap();
        assert_eq!(pool.total(), 6);
        assert_eq!(
            pool.admit(attackers[1], 4, now).unwrap_err(),
            ShareRefused::Full
        );
        // A protected unit is never the one dropped.
        for h in held[1..].iter().chain([&got.permit]) {
            assert!(h.protect());
        }
        assert!(!held[0].protect());
        assert_eq!(
            pool.admit(ip("192.0.2.8"), 4, now).unwrap_err(),
            ShareRefused::Full
        );
        drop(got);
    }

    #[test]
    fn known_peers_have_a_reserve_unknown_clients_cannot_take() {
        let known = Arc::new(KnownPeers::default());
        let pool = Arc::new(PerClient::new(6, 2, known.clone()));
        let now = Instant::now();
        let _flood: Vec<_> = (0..4)
            .map(|i| pool.admit(ip(&format!("10.0.{i}.1")), 4, now).unwrap())
            .collect();
        let member = ip("192.0.2.1");
        known.set_networks(vec![net("192.0.2.1/32")]);
        // The unknown budget of 4 is full; a known peer has its reserve.
        let a = pool.admit(member, 4, now).unwrap();
        assert!(a.known && a.evicted.is_none());
        let _b = pool.admit(member, 4, now).unwrap();
        // An unknown newcomer only ever drops another unknown's unit.
        let mut newcomers = Vec::new();
        for i in 10..20 {
            let n = pool.admit(ip(&format!("10.0.{i}.1")), 4, now).unwrap();
            assert!(n.evicted.is_some_and(|e| e != member));
            assert_eq!(pool.held(member), 2);
            newcomers.push(n);
        }
        // The pool is full: a known peer drops an unknown client's unit.
        let c = pool.admit(member, 4, now).unwrap();
        assert!(c.evicted.is_some_and(|e| e != member));
        assert_eq!(pool.held(member), 3);
        // A client that proved the secret is known too, for an hour.
        let prover = ip("198.51.100.9");
        assert!(!known.is_known(prover, now));
        known.proved(prover, now);
        assert!(known.is_known(prover, now + Duration::from_secs(3599)));
        assert!(!known.is_known(prover, now + PROVEN_FOR));
        // Allow-list entries are known.
        known.set_allow(vec![net("203.0.113.0/24")]);
        assert!(known.is_known(ip("203.0.113.77"), now));
    }

    #[test]
    fn under_pressure_a_prefix_shares_one_clients_share() {
        let pool = Arc::new(PerClient::new(16, 0, Arc::default()));
        let now = Instant::now();
        // Eight addresses of one /24 at 1 each: pressure from 8 (half).
        let mut held: Vec<_> = (1..=8)
            .map(|i| pool.admit(v4(i), 4, now).unwrap())
            .collect();
        // The ninth address of that /24 finds it at its share of 4 and
        // holders no heavier than itself plus one: it drops one.
        let got = pool.admit(v4(9), 4, now).unwrap();
        assert!(got.evicted.is_some());
        held.push(got);
        // A second unit from an address of that /24 is refused: the prefix
        // holds a client's share and no address in it holds more.
        assert_eq!(pool.admit(v4(9), 4, now).unwrap_err(), ShareRefused::Client);
        // IPv6 /64s of one /48 are one prefix too.
        assert_eq!(
            group_key(ip("2001:db8:1:2::1")),
            group_key(ip("2001:db8:1:ff::1"))
        );
        assert_ne!(
            group_key(ip("2001:db8:1::1")),
            group_key(ip("2001:db8:2::1"))
        );
        // Another prefix is untouched.
        assert!(pool
            .admit(ip("192.0.2.1"), 4, now)
            .unwrap()
            .evicted
            .is_none());
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

//! Every job's recent results, for the status page and `/api/v1/history`:
//! a bounded series per (target, module), at full resolution for the last
//! `web.history_full_resolution`, then averaged into buckets of
//! `web.history_bucket` back to `web.history_retention`.
//!
//! # Memory budget
//!
//! One entry ([`Point`]) is at most 192 bytes (the RR kinds' p50, p99 and
//! transactions/s included), kernel release and failure
//! reason strings being shared. A job keeps at most
//! [`MAX_FULL_ENTRIES`] full-resolution entries (older ones are bucketed
//! early when probes run more often than that allows) and at most
//! `2 × retention / bucket` buckets (buckets are split where a kernel
//! release or the direction changes, hence the 2). With the defaults (24 h,
//! 2 h at full resolution, 15 min buckets) that is at most 240 + 192
//! entries, at most 81 KiB per job; a job probed every minute holds 120 + 88
//! entries, about 39 KiB.
//!
//! Time is always passed in (`now`), never read here, so the downsampling
//! is tested with a clock the test holds.
//!
//! # Persistence
//!
//! [`History::save`] writes JSON to a temporary file beside the target,
//! flushes and syncs it, reads it back to check the disk holds every byte
//! written, and only then renames it over (and syncs the directory), so a
//! crash or a full disk leaves the old file or the new one, never half of
//! one: a failed save is an error that leaves the old file as it was.
//! [`History::load`] checks the file's size before it reads anything and
//! then parses it as a stream, entry by entry, so its memory stays within
//! about the file's size; it refuses a file that is not a pathprobe
//! history (foreign, corrupt, another version, too large) with a message;
//! the caller logs it and starts empty, and does not write over that file.

// Point's fields are documented once, on their JSON form, Sample.
#![allow(missing_docs)]

use std::collections::{BTreeMap, HashSet, VecDeque};
use std::io::{Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::config::WebSection;
use crate::metrics::{ProbeKey, ProbeOutcome};
use crate::probe::{Direction, FlowDirection};

/// Full-resolution entries one job may hold, whatever its interval: 2 h
/// of probes every 30 s.
pub const MAX_FULL_ENTRIES: usize = 240;
/// The longest kernel release, reason or verdict kept; longer is cut.
const MAX_TEXT: usize = 128;
/// The largest history file read back.
const MAX_FILE_BYTES: u64 = 512 << 20;
/// What the file says it is.
const FORMAT: &str = "pathprobe-history";
const VERSION: u32 = 1;

/// How the history is bounded; from `web:`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retention {
    pub retention: Duration,
    pub full_resolution: Duration,
    pub bucket: Duration,
}

impl Default for Retention {
    fn default() -> Self {
        Retention::from(&WebSection::default())
    }
}

impl From<&WebSection> for Retention {
    fn from(w: &WebSection) -> Self {
        Retention {
            retention: w.history_retention,
            full_resolution: w.history_full_resolution,
            bucket: w.history_bucket.max(Duration::from_secs(1)),
        }
    }
}

impl Retention {
    /// Buckets one job may hold.
    pub fn max_buckets(&self) -> usize {
        let n = self.retention.as_secs_f64() / self.bucket.as_secs_f64();
        (2.0 * n.ceil()).clamp(2.0, 8192.0) as usize
    }

    /// Entries one job may hold at most.
    pub fn max_entries(&self) -> usize {
        MAX_FULL_ENTRIES + self.max_buckets()
    }
}

/// Figures absent in an entry are NaN here, which keeps an entry small;
/// [`Sample`] is the same with `Option`s, for JSON.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Unix time the probe started; for a bucket, the mean over its probes.
    pub timestamp: f64,
    /// For a bucket, the start of its time slot; NaN for a single probe.
    bucket_start: f64,
    pub direction: Direction,
    /// Probes in this entry: 1, or the number a bucket averages.
    pub samples: u32,
    pub failures: u32,
    pub throughput: f64,
    pub send: f64,
    pub receive: f64,
    pub retransmits: f64,
    pub rtt: f64,
    pub loss: f64,
    pub jitter: f64,
    /// RR kinds: the transaction latency's median and 99th percentile,
    /// and transactions per second.
    pub p50: f64,
    pub p99: f64,
    pub tps: f64,
    pub local_cpu: f64,
    pub remote_cpu: f64,
    pub reason: Option<Arc<str>>,
    pub local_kernel: Option<Arc<str>>,
    pub remote_kernel: Option<Arc<str>>,
    /// The path's stable verdict when the probe ended, and its advice:
    /// one pointer, shared by consecutive entries with the same verdict.
    pub verdict: Option<Arc<Verdict>>,
}

/// A path's stable verdict (the mode of its recent probes' verdicts,
/// `crate::analysis::step::Detector::stable_verdict`) and its advice.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    pub verdict: Arc<str>,
    pub advice: Option<Arc<str>>,
}

/// The most steps one job keeps, newest last: a step is rare (a kernel
/// or setting change, a path change), so this many are days of them.
pub const MAX_STEPS: usize = 16;

/// A step the detector found on one of the job's directions, as history
/// and the API keep it: the step and its sentence for a person.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StepRecord {
    pub direction: Direction,
    #[serde(flatten)]
    pub step: crate::analysis::step::Step,
    /// "throughput 474.5 Mbit/s → 259.9 Mbit/s (−45%); b: kernel …".
    pub summary: String,
}

/// One history entry as JSON (the API and the file), with the probe
/// JSON's field names.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub timestamp_seconds: f64,
    pub direction: Direction,
    /// Probes this entry stands for: 1 at full resolution, more in a
    /// bucket, whose figures are the mean over its successful probes.
    pub samples: u32,
    /// Of those, how many failed.
    pub failures: u32,
    /// For an averaged entry (a bucket), the start of its time slot.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bucket_start_seconds: Option<f64>,
    /// The (latest) failure's reason, as the `result` label.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throughput_bits_per_second: Option<f64>,
    /// Per flow direction (`directions[].throughput_bits_per_second`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub send_throughput_bits_per_second: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub receive_throughput_bits_per_second: Option<f64>,
    /// `tcp.retransmits`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retransmits: Option<f64>,
    /// `tcp.rtt_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rtt_seconds: Option<f64>,
    /// `udp.loss_ratio`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub loss_ratio: Option<f64>,
    /// `udp.jitter_seconds`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jitter_seconds: Option<f64>,
    /// RR kinds: the latency's p50 and p99 (`rr.latency` for tcp_rr and
    /// tcp_crr, `udp_rr.rtt` for udp_rr), and transactions per second
    /// (`rr.transactions_per_second`; for udp_rr, replies received per
    /// second).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p50_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_p99_seconds: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactions_per_second: Option<f64>,
    /// `local.cpu_utilization` and `remote.cpu_utilization`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_cpu_utilization: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_cpu_utilization: Option<f64>,
    /// `local.kernel_release` and `remote.kernel_release`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_kernel_release: Option<Arc<str>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_kernel_release: Option<Arc<str>>,
    /// The path's stable bottleneck verdict when the probe ended: the
    /// verdict most of its last 5 probes gave, so that one outlier does
    /// not flip it; absent for the kinds without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub verdict: Option<Arc<str>>,
    /// The advice that came with that verdict, where there was one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub advice: Option<Arc<str>>,
}

fn opt(x: f64) -> Option<f64> {
    x.is_finite().then_some(x)
}

fn nan(x: Option<f64>) -> f64 {
    // Figures are rates, ratios and counts: a negative one is not ours.
    x.filter(|v| v.is_finite() && *v >= 0.0).unwrap_or(f64::NAN)
}

impl Point {
    /// The entry for one finished probe.
    pub fn from_outcome(o: &ProbeOutcome) -> Point {
        let mut p = Point::new(unix(o.started), o.direction);
        match &o.result {
            Ok(r) => {
                let flow = |d: FlowDirection| {
                    r.directions
                        .iter()
                        .find(|s| s.direction == d)
                        .map_or(f64::NAN, |s| s.throughput_bits_per_second)
                };
                p.throughput = r.throughput_bits_per_second;
                p.send = flow(FlowDirection::Send);
                p.receive = flow(FlowDirection::Receive);
                if let Some(t) = &r.tcp {
                    p.retransmits = t.retransmits as f64;
                    p.rtt = t.rtt_seconds.unwrap_or(f64::NAN);
                }
                if let Some(u) = &r.udp {
                    p.loss = u.loss_ratio;
                    p.jitter = u.jitter_seconds;
                }
                if let Some(rr) = r.rr() {
                    p.tps = rr.transactions_per_second;
                    if let Some(l) = &rr.latency {
                        (p.p50, p.p99) = (l.p50, l.p99);
                    }
                }
                if let Some(u) = r.udp_rr() {
                    if r.duration_seconds > 0.0 {
                        p.tps = u.received as f64 / r.duration_seconds;
                    }
                    if let Some(l) = &u.rtt {
                        (p.p50, p.p99) = (l.p50, l.p99);
                    }
                }
                p.local_cpu = r.local.cpu_utilization;
                p.remote_cpu = r.remote.cpu_utilization;
                p.local_kernel = text(&r.local.kernel_release);
                p.remote_kernel = text(&r.remote.kernel_release);
            }
            Err(f) => {
                p.failures = 1;
                p.reason = text(f.reason);
            }
        }
        p
    }

    /// An entry of one probe at `timestamp` with no figures yet.
    pub fn new(timestamp: f64, direction: Direction) -> Point {
        Point {
            timestamp,
            bucket_start: f64::NAN,
            direction,
            samples: 1,
            failures: 0,
            throughput: f64::NAN,
            send: f64::NAN,
            receive: f64::NAN,
            retransmits: f64::NAN,
            rtt: f64::NAN,
            loss: f64::NAN,
            jitter: f64::NAN,
            p50: f64::NAN,
            p99: f64::NAN,
            tps: f64::NAN,
            local_cpu: f64::NAN,
            remote_cpu: f64::NAN,
            reason: None,
            local_kernel: None,
            remote_kernel: None,
            verdict: None,
        }
    }

    /// Whether every probe in this entry failed.
    pub fn failed(&self) -> bool {
        self.failures >= self.samples
    }

    /// Whether this entry is a bucket of averaged probes.
    pub fn is_bucket(&self) -> bool {
        self.bucket_start.is_finite()
    }

    fn successes(&self) -> u32 {
        self.samples.saturating_sub(self.failures)
    }

    /// Folds `p` into this bucket: figures are means over successful
    /// probes, the time a mean over all.
    fn absorb(&mut self, p: &Point) {
        let (n, m) = (self.successes() as f64, p.successes() as f64);
        let mean = |a: &mut f64, b: f64| {
            if !b.is_finite() || m == 0.0 {
                return;
            }
            *a = if a.is_finite() && n > 0.0 {
                (*a * n + b * m) / (n + m)
            } else {
                b
            };
        };
        mean(&mut self.throughput, p.throughput);
        mean(&mut self.send, p.send);
        mean(&mut self.receive, p.receive);
        mean(&mut self.retransmits, p.retransmits);
        mean(&mut self.rtt, p.rtt);
        mean(&mut self.loss, p.loss);
        mean(&mut self.jitter, p.jitter);
        // A bucket's p50 and p99 are means of its probes' percentiles: a
        // summary of the slot, not the slot's own percentile.
        mean(&mut self.p50, p.p50);
        mean(&mut self.p99, p.p99);
        mean(&mut self.tps, p.tps);
        mean(&mut self.local_cpu, p.local_cpu);
        mean(&mut self.remote_cpu, p.remote_cpu);
        let (a, b) = (self.samples as f64, p.samples as f64);
        self.timestamp = (self.timestamp * a + p.timestamp * b) / (a + b);
        self.samples = self.samples.saturating_add(p.samples);
        self.failures = self.failures.saturating_add(p.failures);
        if p.reason.is_some() {
            self.reason = p.reason.clone();
        }
        if p.verdict.is_some() {
            self.verdict = p.verdict.clone();
        }
        if self.local_kernel.is_none() {
            self.local_kernel = p.local_kernel.clone();
        }
        if self.remote_kernel.is_none() {
            self.remote_kernel = p.remote_kernel.clone();
        }
    }

    /// Whether `p` may go into this bucket: same slot, same direction, and
    /// no kernel release change between them (a bucket never hides one).
    fn same_bucket(&self, p: &Point, slot: f64) -> bool {
        let same = |a: &Option<Arc<str>>, b: &Option<Arc<str>>| match (a, b) {
            (Some(a), Some(b)) => a == b,
            _ => true,
        };
        self.bucket_start == slot
            && self.direction == p.direction
            && same(&self.local_kernel, &p.local_kernel)
            && same(&self.remote_kernel, &p.remote_kernel)
    }

    /// As JSON.
    pub fn sample(&self) -> Sample {
        Sample {
            timestamp_seconds: self.timestamp,
            direction: self.direction,
            samples: self.samples,
            failures: self.failures,
            bucket_start_seconds: opt(self.bucket_start),
            reason: self.reason.clone(),
            throughput_bits_per_second: opt(self.throughput),
            send_throughput_bits_per_second: opt(self.send),
            receive_throughput_bits_per_second: opt(self.receive),
            retransmits: opt(self.retransmits),
            rtt_seconds: opt(self.rtt),
            loss_ratio: opt(self.loss),
            jitter_seconds: opt(self.jitter),
            latency_p50_seconds: opt(self.p50),
            latency_p99_seconds: opt(self.p99),
            transactions_per_second: opt(self.tps),
            local_cpu_utilization: opt(self.local_cpu),
            remote_cpu_utilization: opt(self.remote_cpu),
            local_kernel_release: self.local_kernel.clone(),
            remote_kernel_release: self.remote_kernel.clone(),
            verdict: self.verdict.as_ref().map(|v| v.verdict.clone()),
            advice: self.verdict.as_ref().and_then(|v| v.advice.clone()),
        }
    }

    /// From JSON read back from a file; `None` for an entry no probe could
    /// have made.
    fn from_sample(s: &Sample, strings: &mut Interner) -> Option<Point> {
        if !s.timestamp_seconds.is_finite() || s.timestamp_seconds < 0.0 || s.samples == 0 {
            return None;
        }
        let mut p = Point::new(s.timestamp_seconds, s.direction);
        p.samples = s.samples;
        p.failures = s.failures.min(s.samples);
        p.bucket_start = s
            .bucket_start_seconds
            .filter(|b| b.is_finite() && *b >= 0.0 && *b <= s.timestamp_seconds)
            .unwrap_or(f64::NAN);
        p.throughput = nan(s.throughput_bits_per_second);
        p.send = nan(s.send_throughput_bits_per_second);
        p.receive = nan(s.receive_throughput_bits_per_second);
        p.retransmits = nan(s.retransmits);
        p.rtt = nan(s.rtt_seconds);
        p.loss = nan(s.loss_ratio);
        p.jitter = nan(s.jitter_seconds);
        p.p50 = nan(s.latency_p50_seconds);
        p.p99 = nan(s.latency_p99_seconds);
        p.tps = nan(s.transactions_per_second);
        p.local_cpu = nan(s.local_cpu_utilization);
        p.remote_cpu = nan(s.remote_cpu_utilization);
        let mut t = |x: &Option<Arc<str>>| x.as_deref().and_then(|v| strings.get(v));
        p.reason = t(&s.reason);
        p.local_kernel = t(&s.local_kernel_release);
        p.remote_kernel = t(&s.remote_kernel_release);
        p.verdict = t(&s.verdict).map(|verdict| {
            Arc::new(Verdict {
                verdict,
                advice: t(&s.advice),
            })
        });
        Some(p)
    }
}

fn unix(t: SystemTime) -> f64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0.0, |d| d.as_secs_f64())
}

/// Text kept in an entry: bounded, and `None` when empty.
fn text(s: &str) -> Option<Arc<str>> {
    if s.is_empty() {
        return None;
    }
    let mut end = s.len().min(MAX_TEXT);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    Some(Arc::from(&s[..end]))
}

/// One copy of each kernel release and reason string, shared by entries.
#[derive(Default)]
struct Interner(HashSet<Arc<str>>);

impl Interner {
    fn get(&mut self, s: &str) -> Option<Arc<str>> {
        let s = text(s)?;
        if let Some(have) = self.0.get(&s) {
            return Some(have.clone());
        }
        // Bounded: a hostile peer could report a new release every probe.
        if self.0.len() > 4096 {
            self.0.clear();
        }
        self.0.insert(s.clone());
        Some(s)
    }

    fn share(&mut self, x: &mut Option<Arc<str>>) {
        if let Some(v) = x.take() {
            *x = self.get(&v);
        }
    }
}

/// One job's series.
#[derive(Debug, Clone, Default)]
pub struct JobHistory {
    /// The module's kind (`tcp`, `udp`, `loopback_tcp`, `loopback_udp`).
    pub kind: String,
    /// Older entries, averaged into buckets, oldest first.
    buckets: VecDeque<Point>,
    /// Recent entries, one per probe, oldest first.
    recent: VecDeque<Point>,
    /// Steps found on its directions, oldest first, at most [`MAX_STEPS`].
    pub steps: VecDeque<StepRecord>,
}

impl JobHistory {
    /// Every entry, oldest first.
    pub fn points(&self) -> impl DoubleEndedIterator<Item = &Point> {
        self.buckets.iter().chain(self.recent.iter())
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.buckets.len() + self.recent.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The newest entry.
    pub fn latest(&self) -> Option<&Point> {
        self.recent.back().or(self.buckets.back())
    }

    fn push(&mut self, p: Point, r: &Retention, now: f64) {
        // Probes end in start order, nearly always; one that does not is
        // put in its place so that the series stays sorted.
        let at = self
            .recent
            .iter()
            .rposition(|q| q.timestamp <= p.timestamp)
            .map_or(0, |i| i + 1);
        if at == 0
            && self
                .buckets
                .back()
                .is_some_and(|b| b.timestamp > p.timestamp)
        {
            self.bucket(p, r);
        } else {
            self.recent.insert(at, p);
        }
        self.compact(r, now);
    }

    /// Moves what is past the full-resolution stretch (or over its count)
    /// into buckets, and drops what is past retention.
    fn compact(&mut self, r: &Retention, now: f64) {
        let full_from = now - r.full_resolution.as_secs_f64();
        while let Some(front) = self.recent.front() {
            if front.timestamp >= full_from && self.recent.len() <= MAX_FULL_ENTRIES {
                break;
            }
            let p = self.recent.pop_front().expect("front exists");
            self.bucket(p, r);
        }
        let keep_from = now - r.retention.as_secs_f64();
        while self
            .steps
            .front()
            .is_some_and(|s| s.step.detected_seconds < keep_from)
        {
            self.steps.pop_front();
        }
        while self
            .buckets
            .front()
            .is_some_and(|b| b.timestamp < keep_from)
        {
            self.buckets.pop_front();
        }
        while self.recent.front().is_some_and(|b| b.timestamp < keep_from) {
            self.recent.pop_front();
        }
        let max = r.max_buckets();
        while self.buckets.len() > max {
            self.buckets.pop_front();
        }
    }

    fn bucket(&mut self, mut p: Point, r: &Retention) {
        let width = r.bucket.as_secs_f64();
        let slot = (p.timestamp / width).floor() * width;
        // A `both` module alternates directions: look a few back.
        for b in self.buckets.iter_mut().rev().take(4) {
            if b.same_bucket(&p, slot) {
                b.absorb(&p);
                return;
            }
            if b.bucket_start < slot {
                break;
            }
        }
        p.bucket_start = slot;
        let at = self
            .buckets
            .iter()
            .rposition(|q| q.timestamp <= p.timestamp)
            .map_or(0, |i| i + 1);
        self.buckets.insert(at, p);
    }
}

impl JobHistory {
    /// Folds `other` (the same job, read again) into this one.
    fn merge(&mut self, other: JobHistory, r: &Retention, now: f64) {
        let by_time = |a: &Point, b: &Point| a.timestamp.total_cmp(&b.timestamp);
        self.buckets.extend(other.buckets);
        self.buckets.make_contiguous().sort_by(by_time);
        self.recent.extend(other.recent);
        self.recent.make_contiguous().sort_by(by_time);
        self.steps.extend(other.steps);
        while self.steps.len() > MAX_STEPS {
            self.steps.pop_front();
        }
        self.kind = other.kind;
        self.compact(r, now);
    }
}

/// The file's shape.
#[derive(Serialize, Deserialize)]
struct File {
    format: String,
    version: u32,
    saved_at_seconds: f64,
    jobs: Vec<FileJob>,
}

#[derive(Serialize, Deserialize)]
struct FileJob {
    target: String,
    module: String,
    kind: String,
    samples: Vec<Sample>,
    /// Absent from files written before steps were kept.
    #[serde(default)]
    steps: Vec<StepRecord>,
}

/// Why a history file was not read.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read history file {path}: {source}")]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("history file {path} is {size} bytes, over the {MAX_FILE_BYTES} bytes pathprobe reads back; not read (move it away, or set web.history_file elsewhere)")]
    TooLarge { path: PathBuf, size: u64 },
    #[error("{path} is not a pathprobe history file (or it is corrupt): {why}")]
    Foreign { path: PathBuf, why: String },
    #[error("history file {path} is version {version} of the format; this pathprobe reads version {VERSION}")]
    Version { path: PathBuf, version: u32 },
}

/// Every job's history, shared by the runner (which records) and the page.
pub struct History {
    inner: Mutex<Inner>,
}

struct Inner {
    retention: Retention,
    jobs: BTreeMap<ProbeKey, JobHistory>,
    strings: Interner,
}

impl Default for History {
    fn default() -> Self {
        History::new(Retention::default())
    }
}

impl History {
    pub fn new(retention: Retention) -> History {
        History {
            inner: Mutex::new(Inner {
                retention,
                jobs: BTreeMap::new(),
                strings: Interner::default(),
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Applies new bounds (after a reload) to what is held.
    pub fn set_retention(&self, retention: Retention, now: SystemTime) {
        let mut g = self.lock();
        if g.retention == retention {
            return;
        }
        g.retention = retention;
        let now = unix(now);
        for j in g.jobs.values_mut() {
            j.compact(&retention, now);
        }
    }

    /// Records one finished probe of `key` at `now`.
    pub fn record(&self, key: &ProbeKey, outcome: &ProbeOutcome, now: SystemTime) {
        self.record_point(key, &outcome.kind, Point::from_outcome(outcome), now);
    }

    /// Records an entry as it is (a probe's, or one a test makes).
    pub fn record_point(&self, key: &ProbeKey, kind: &str, mut p: Point, now: SystemTime) {
        let g = &mut *self.lock();
        g.strings.share(&mut p.reason);
        g.strings.share(&mut p.local_kernel);
        g.strings.share(&mut p.remote_kernel);
        if let Some(v) = p.verdict.take() {
            let mut v = Arc::unwrap_or_clone(v);
            g.strings.share(&mut v.advice);
            if let Some(s) = g.strings.get(&v.verdict) {
                v.verdict = s;
            }
            p.verdict = Some(Arc::new(v));
        }
        let r = g.retention;
        let job = g.jobs.entry(key.clone()).or_default();
        if job.kind != kind {
            job.kind = kind.to_string();
        }
        // Consecutive entries share one verdict rather than one each.
        if let (Some(v), Some(prev)) = (
            &mut p.verdict,
            job.recent.iter().rev().find_map(|q| q.verdict.as_ref()),
        ) {
            if *v == *prev {
                *v = prev.clone();
            }
        }
        job.push(p, &r, unix(now));
    }

    /// Keeps a step found on one of `key`'s directions (at most
    /// [`MAX_STEPS`] a job, the oldest dropped).
    pub fn record_step(&self, key: &ProbeKey, step: StepRecord) {
        let g = &mut *self.lock();
        let job = g.jobs.entry(key.clone()).or_default();
        job.steps.push_back(step);
        while job.steps.len() > MAX_STEPS {
            job.steps.pop_front();
        }
    }

    /// `key`'s steps from `since` (Unix seconds) on, oldest first.
    pub fn steps(&self, key: &ProbeKey, since: f64) -> Vec<StepRecord> {
        self.lock().jobs.get(key).map_or_else(Vec::new, |j| {
            j.steps
                .iter()
                .filter(|s| s.step.detected_seconds >= since)
                .cloned()
                .collect()
        })
    }

    /// Keeps only the keys for which `keep` holds (the configured jobs).
    pub fn retain(&self, mut keep: impl FnMut(&ProbeKey) -> bool) {
        self.lock().jobs.retain(|k, _| keep(k));
    }

    /// Drops what has aged past retention, for when no probe came to do it.
    pub fn expire(&self, now: SystemTime) {
        let g = &mut *self.lock();
        let (r, now) = (g.retention, unix(now));
        for j in g.jobs.values_mut() {
            j.compact(&r, now);
        }
    }

    /// Runs `f` over every job's history, in key order, under the lock:
    /// the page reads without copying.
    pub fn with<T>(&self, f: impl FnOnce(&BTreeMap<ProbeKey, JobHistory>) -> T) -> T {
        f(&self.lock().jobs)
    }

    /// One job's entries from `since` (Unix seconds) on, as JSON.
    pub fn samples(&self, key: &ProbeKey, since: f64) -> Option<(String, Vec<Sample>)> {
        let g = self.lock();
        let j = g.jobs.get(key)?;
        Some((
            j.kind.clone(),
            j.points()
                .filter(|p| p.timestamp >= since)
                .map(Point::sample)
                .collect(),
        ))
    }

    /// At most `max` of one job's entries from `since` (Unix seconds) on
    /// and after `after`, as JSON, and whether more follow: a page of the
    /// API, copied under the lock without copying the rest.
    pub fn samples_page(
        &self,
        key: &ProbeKey,
        since: f64,
        after: Option<f64>,
        max: usize,
    ) -> Option<(String, Vec<Sample>, bool)> {
        let g = self.lock();
        let j = g.jobs.get(key)?;
        let mut it = j
            .points()
            .filter(|p| p.timestamp >= since && after.is_none_or(|a| p.timestamp > a));
        let page: Vec<Sample> = it.by_ref().take(max).map(Point::sample).collect();
        let more = it.next().is_some();
        Some((j.kind.clone(), page, more))
    }

    /// Entries held over all jobs.
    pub fn len(&self) -> usize {
        self.lock().jobs.values().map(JobHistory::len).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Writes the history to `path` atomically: a temporary file beside
    /// it, flushed, synced and read back, then renamed over it. On any
    /// error (a full disk among them) the file at `path` is left as it was
    /// and the temporary one removed.
    pub fn save(&self, path: &Path, now: SystemTime) -> std::io::Result<()> {
        let file = {
            let g = self.lock();
            File {
                format: FORMAT.into(),
                version: VERSION,
                saved_at_seconds: unix(now),
                jobs: g
                    .jobs
                    .iter()
                    .map(|(k, j)| FileJob {
                        target: k.target.clone(),
                        module: k.module.clone(),
                        kind: j.kind.clone(),
                        samples: j.points().map(Point::sample).collect(),
                        steps: j.steps.iter().cloned().collect(),
                    })
                    .collect(),
            }
        };
        let mut tmp_name = path.as_os_str().to_owned();
        tmp_name.push(format!(".tmp.{}", std::process::id()));
        let tmp = PathBuf::from(tmp_name);
        let r = write_verified(&tmp, path, &file);
        if r.is_err() {
            let _ = std::fs::remove_file(&tmp);
        }
        r
    }

    /// Reads a history written by [`History::save`] into this one (whose
    /// retention applies at `now`). A missing file is an empty history,
    /// not an error; any other file that is not ours is refused whole, and
    /// one over [`MAX_FILE_BYTES`] before any of it is read.
    pub fn load(&self, path: &Path, now: SystemTime) -> Result<usize, LoadError> {
        let io = |source| LoadError::Io {
            path: path.into(),
            source,
        };
        let f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
            Err(source) => return Err(io(source)),
        };
        let size = f.metadata().map_err(io)?.len();
        if size > MAX_FILE_BYTES {
            return Err(LoadError::TooLarge {
                path: path.into(),
                size,
            });
        }
        let foreign = |why: String| LoadError::Foreign {
            path: path.into(),
            why,
        };
        // Parsed as a stream into a history of its own, so that a file
        // refused half-way leaves this one as it was, and so that memory
        // holds entries (at most 192 bytes, each under its JSON's size)
        // rather than the file's text besides them. A file that grows
        // while read is read no further than the limit.
        let g = &mut *self.lock();
        let mut st = LoadState {
            retention: g.retention,
            now: unix(now),
            strings: std::mem::take(&mut g.strings),
            jobs: BTreeMap::new(),
            format: None,
            version: None,
            count: 0,
        };
        let reader = std::io::BufReader::with_capacity(64 << 10, f.take(MAX_FILE_BYTES));
        let mut de = serde_json::Deserializer::from_reader(reader);
        let parsed = serde::de::DeserializeSeed::deserialize(FileSeed(&mut st), &mut de)
            .and_then(|()| de.end());
        g.strings = std::mem::take(&mut st.strings);
        if let Err(e) = parsed {
            if e.is_io() {
                return Err(io(e.into()));
            }
            return Err(match (st.format, st.version) {
                (Some(f), _) if f != FORMAT => foreign(format!("its format is {f:?}")),
                (Some(_), Some(version)) if version != VERSION => LoadError::Version {
                    path: path.into(),
                    version,
                },
                _ => foreign(e.to_string()),
            });
        }
        let (r, now) = (g.retention, st.now);
        for (key, job) in st.jobs {
            match g.jobs.entry(key) {
                std::collections::btree_map::Entry::Vacant(v) => {
                    v.insert(job);
                }
                std::collections::btree_map::Entry::Occupied(mut o) => {
                    o.get_mut().merge(job, &r, now);
                }
            }
        }
        Ok(st.count)
    }
}

/// Writes `file` to `tmp`, makes sure the disk holds all of it, and
/// renames it to `path`.
fn write_verified(tmp: &Path, path: &Path, file: &File) -> std::io::Result<()> {
    use sha2::Digest as _;
    /// Counts and hashes what goes through to the file.
    struct Hashing<W> {
        inner: W,
        hash: sha2::Sha256,
        len: u64,
    }
    impl<W: std::io::Write> std::io::Write for Hashing<W> {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            let n = self.inner.write(buf)?;
            self.hash.update(&buf[..n]);
            self.len += n as u64;
            Ok(n)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            self.inner.flush()
        }
    }
    let f = std::fs::File::create(tmp)?;
    let mut w = Hashing {
        inner: std::io::BufWriter::with_capacity(64 << 10, f),
        hash: sha2::Sha256::new(),
        len: 0,
    };
    serde_json::to_writer(&mut w, file)?;
    // A BufWriter dropped unflushed loses its last write's error (a full
    // disk among them): flush it here, where that is an error.
    w.flush()?;
    let Hashing { inner, hash, len } = w;
    let f = inner.into_inner().map_err(|e| e.into_error())?;
    f.sync_all()?;
    drop(f);
    // Read back what the file holds now: a short or torn write is caught
    // before it replaces a good file.
    let mut back = std::fs::File::open(tmp)?;
    let (mut check, mut n) = (sha2::Sha256::new(), 0u64);
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let got = back.read(&mut buf)?;
        if got == 0 {
            break;
        }
        check.update(&buf[..got]);
        n += got as u64;
    }
    if n != len || check.finalize() != hash.finalize() {
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            format!("the file read back ({n} bytes) is not what was written ({len} bytes)"),
        ));
    }
    std::fs::rename(tmp, path)?;
    // The rename lasts across a power cut only once the directory is
    // synced; a directory that cannot be opened or synced (some file
    // systems) leaves the rename done, which is what matters most.
    let dir = path
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    if let Ok(d) = std::fs::File::open(dir) {
        let _ = d.sync_all();
    }
    Ok(())
}

/// What a load has read so far.
struct LoadState {
    retention: Retention,
    now: f64,
    strings: Interner,
    jobs: BTreeMap<ProbeKey, JobHistory>,
    /// The header, once read: after an error, it says which error it was.
    format: Option<String>,
    version: Option<u32>,
    count: usize,
}

/// The file, read as a stream: the header is checked as soon as it is read
/// (the writer puts it first), and each job goes into the history as it
/// is read.
struct FileSeed<'a>(&'a mut LoadState);

impl<'de> serde::de::DeserializeSeed<'de> for FileSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for FileSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a pathprobe history (a JSON object)")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error as _;
        let st = self.0;
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "format" => {
                    let f: String = map.next_value()?;
                    let ours = f == FORMAT;
                    st.format = Some(f);
                    if !ours {
                        return Err(A::Error::custom("another format"));
                    }
                }
                "version" => {
                    let v: u32 = map.next_value()?;
                    st.version = Some(v);
                    if v != VERSION {
                        return Err(A::Error::custom("another version"));
                    }
                }
                "jobs" => {
                    if st.format.is_none() || st.version.is_none() {
                        return Err(A::Error::custom(
                            "its jobs come before its format and version",
                        ));
                    }
                    map.next_value_seed(JobsSeed(st))?;
                }
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        if st.format.is_none() {
            return Err(A::Error::missing_field("format"));
        }
        if st.version.is_none() {
            return Err(A::Error::missing_field("version"));
        }
        Ok(())
    }
}

struct JobsSeed<'a>(&'a mut LoadState);

impl<'de> serde::de::DeserializeSeed<'de> for JobsSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for JobsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of jobs")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(JobSeed(&mut *self.0))?.is_some() {}
        Ok(())
    }
}

struct JobSeed<'a>(&'a mut LoadState);

impl<'de> serde::de::DeserializeSeed<'de> for JobSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_map(self)
    }
}

impl<'de> serde::de::Visitor<'de> for JobSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a job's history")
    }
    fn visit_map<A: serde::de::MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        use serde::de::Error as _;
        let st = self.0;
        let (r, now) = (st.retention, st.now);
        let (mut target, mut module, mut kind) = (None, None, None);
        let mut points = Vec::new();
        let mut steps = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            match key.as_str() {
                "target" => target = Some(map.next_value::<String>()?),
                "module" => module = Some(map.next_value::<String>()?),
                "kind" => kind = Some(map.next_value::<String>()?),
                "samples" => map.next_value_seed(SamplesSeed {
                    strings: &mut st.strings,
                    points: &mut points,
                    keep: r.max_entries(),
                    from: now - r.retention.as_secs_f64(),
                })?,
                "steps" => map.next_value_seed(StepsSeed(&mut steps))?,
                _ => {
                    map.next_value::<serde::de::IgnoredAny>()?;
                }
            }
        }
        let target = target.ok_or_else(|| A::Error::missing_field("target"))?;
        let module = module.ok_or_else(|| A::Error::missing_field("module"))?;
        let kind = kind.ok_or_else(|| A::Error::missing_field("kind"))?;
        points.sort_by(|a, b| a.timestamp.total_cmp(&b.timestamp));
        st.count += points.len();
        let mut j = JobHistory {
            kind: kind.chars().take(32).collect(),
            ..JobHistory::default()
        };
        for p in points {
            // Entries that were buckets stay buckets, as they were.
            if p.is_bucket() {
                j.buckets.push_back(p);
            } else {
                j.recent.push_back(p);
            }
        }
        j.steps = steps.into();
        j.compact(&r, now);
        match st.jobs.entry(ProbeKey::new(target, module)) {
            std::collections::btree_map::Entry::Vacant(v) => {
                v.insert(j);
            }
            std::collections::btree_map::Entry::Occupied(mut o) => o.get_mut().merge(j, &r, now),
        }
        Ok(())
    }
}

/// A job's entries, each made a [`Point`] as it is read; at most about
/// twice the entries a job may hold are kept at any time (the newest).
struct SamplesSeed<'a> {
    strings: &'a mut Interner,
    points: &'a mut Vec<Point>,
    keep: usize,
    /// Entries older than this are past retention: not kept.
    from: f64,
}

impl<'de> serde::de::DeserializeSeed<'de> for SamplesSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for SamplesSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of history entries")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(s) = seq.next_element::<Sample>()? {
            let Some(p) = Point::from_sample(&s, self.strings) else {
                continue;
            };
            if p.timestamp < self.from {
                continue;
            }
            self.points.push(p);
            if self.points.len() >= 2 * self.keep {
                self.points
                    .sort_by(|a, b| a.timestamp.total_cmp(&b.timestamp));
                let extra = self.points.len() - self.keep;
                self.points.drain(..extra);
            }
        }
        Ok(())
    }
}

/// A job's steps: the file is ours, but read it as any input, bounded.
struct StepsSeed<'a>(&'a mut Vec<StepRecord>);

impl<'de> serde::de::DeserializeSeed<'de> for StepsSeed<'_> {
    type Value = ();
    fn deserialize<D: serde::Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> serde::de::Visitor<'de> for StepsSeed<'_> {
    type Value = ();
    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("a list of steps")
    }
    fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while let Some(s) = seq.next_element::<StepRecord>()? {
            if s.summary.len() <= 4096 && s.step.changes.len() <= 64 {
                self.0.push(s);
            }
            if self.0.len() > 2 * MAX_STEPS {
                self.0.drain(..self.0.len() - MAX_STEPS);
            }
        }
        if self.0.len() > MAX_STEPS {
            self.0.drain(..self.0.len() - MAX_STEPS);
        }
        Ok(())
    }
}

/// Saves `history` to `path` every `every` and once more when `stop`
/// completes, telling `saved` whether each save worked. Errors are logged
/// at warn, never fatal: the old file stays, and the next save tries again,
/// so saving resumes by itself once the disk has room.
pub async fn save_periodically(
    history: Arc<History>,
    path: PathBuf,
    every: Duration,
    saved: impl Fn(bool) + Send + Sync + 'static,
    stop: impl std::future::Future<Output = ()>,
) {
    let saved = Arc::new(saved);
    // Failed saves in a row, to say when saving works again.
    let failing = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let save = |history: Arc<History>, path: PathBuf| {
        let (saved, failing) = (saved.clone(), failing.clone());
        async move {
            use std::sync::atomic::Ordering::Relaxed;
            let p = path.clone();
            let r = tokio::task::spawn_blocking(move || history.save(&p, SystemTime::now())).await;
            let ok = matches!(r, Ok(Ok(())));
            saved(ok);
            match r {
                Ok(Ok(())) => {
                    let failed = failing.swap(0, Relaxed);
                    if failed > 0 {
                        tracing::info!(path = %path.display(), failed_saves = failed, "history saved again");
                    } else {
                        tracing::debug!(path = %path.display(), "history saved");
                    }
                }
                Ok(Err(e)) => {
                    let n = failing.fetch_add(1, Relaxed) + 1;
                    tracing::warn!(path = %path.display(), error = %e, failed_saves = n, "saving the history failed: the previous file is kept as it was, and the next save tries again")
                }
                Err(e) => {
                    failing.fetch_add(1, Relaxed);
                    tracing::warn!(error = %e, "the history saving task failed")
                }
            }
        }
    };
    tokio::pin!(stop);
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tokio::select! {
            _ = &mut stop => break,
            _ = tick.tick() => {
                history.expire(SystemTime::now());
                save(history.clone(), path.clone()).await;
            }
        }
    }
    save(history, path).await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The memory budget (module docs, docs/WEB.md) counts on this size:
    /// 432 entries of it under 84 KiB.
    #[test]
    fn an_entry_fits_its_budget() {
        assert!(
            std::mem::size_of::<Point>() <= 192,
            "{}",
            std::mem::size_of::<Point>()
        );
        assert!(Retention::default().max_entries() * 192 <= 84 << 10);
    }

    const H: f64 = 3600.0;

    fn at(secs: f64) -> SystemTime {
        UNIX_EPOCH + Duration::from_secs_f64(secs)
    }

    fn point(t: f64, bps: f64, kernel: &str) -> Point {
        let mut p = Point::new(t, Direction::Send);
        p.throughput = bps;
        p.send = bps;
        p.local_kernel = text(kernel);
        p
    }

    fn key() -> ProbeKey {
        ProbeKey::new("peer", "tcp")
    }

    /// A day of probes every minute, recorded as the clock moves.
    fn day(h: &History, start: f64, bps: impl Fn(f64) -> f64, kernel: impl Fn(f64) -> String) {
        let mut t = start;
        while t < start + 24.0 * H {
            h.record_point(&key(), "tcp", point(t, bps(t), &kernel(t)), at(t));
            t += 60.0;
        }
    }

    #[test]
    fn a_day_is_full_resolution_then_buckets_within_the_budget() {
        let r = Retention::default();
        let h = History::new(r);
        let start = 1_000_000.0 * H;
        day(&h, start, |_| 1e9, |_| "6.1".into());
        let now = start + 24.0 * H;
        h.with(|jobs| {
            let j = &jobs[&key()];
            // 2 h at one per minute, then 22 h of 15 min buckets.
            assert!((120..=121).contains(&j.recent.len()), "{}", j.recent.len());
            assert!((88..=89).contains(&j.buckets.len()), "{}", j.buckets.len());
            assert!(j.len() <= r.max_entries());
            assert!(j.recent.iter().all(|p| p.timestamp >= now - 2.0 * H - 60.0));
            // Buckets of 15 probes each (the oldest may be cut by
            // retention, the newest still filling), averaging what went in.
            let n = j.buckets.len();
            let inner: Vec<&Point> = j.buckets.iter().skip(1).take(n - 2).collect();
            assert!(inner.iter().all(|b| b.samples == 15 && b.is_bucket()));
            assert!(inner.iter().all(|b| (b.throughput - 1e9).abs() < 1.0));
            assert!(j.buckets[0].timestamp >= now - 24.0 * H);
            // Sorted.
            let ts: Vec<f64> = j.points().map(|p| p.timestamp).collect();
            assert!(ts.windows(2).all(|w| w[0] <= w[1]));
        });
    }

    #[test]
    fn buckets_average_and_count_failures() {
        let h = History::new(Retention::default());
        let t0 = 900.0 * 1_000_000.0;
        // Two successes at 1 and 3 Gbit/s and a failure in one slot, then
        // the clock moves past full resolution.
        h.record_point(&key(), "tcp", point(t0, 1e9, "a"), at(t0));
        h.record_point(&key(), "tcp", point(t0 + 60.0, 3e9, "a"), at(t0 + 60.0));
        let mut f = Point::new(t0 + 120.0, Direction::Send);
        f.failures = 1;
        f.reason = text("refused");
        h.record_point(&key(), "tcp", f, at(t0 + 120.0));
        h.expire(at(t0 + 3.0 * H));
        let (_, s) = h.samples(&key(), 0.0).unwrap();
        assert_eq!(s.len(), 1, "{s:?}");
        assert_eq!((s[0].samples, s[0].failures), (3, 1));
        assert_eq!(s[0].throughput_bits_per_second, Some(2e9));
        assert_eq!(s[0].reason.as_deref(), Some("refused"));
        assert_eq!(s[0].timestamp_seconds, t0 + 60.0);
        // Past retention, gone.
        h.expire(at(t0 + 25.0 * H));
        assert!(h.samples(&key(), 0.0).unwrap().1.is_empty());
    }

    #[test]
    fn a_kernel_release_change_is_never_averaged_away() {
        let h = History::new(Retention::default());
        let start = 15.0 * 60.0 * 4000.0;
        // The release changes in the middle of a bucket's slot.
        let change = start + 4.0 * H + 7.0 * 60.0;
        day(
            &h,
            start,
            |t| if t < change { 5.4e9 } else { 2.9e9 },
            |t| if t < change { "2.6.12" } else { "2.6.14" }.into(),
        );
        let (_, s) = h.samples(&key(), 0.0).unwrap();
        let kernels: Vec<&str> = s
            .iter()
            .map(|p| p.local_kernel_release.as_deref().unwrap())
            .collect();
        let changes = kernels.windows(2).filter(|w| w[0] != w[1]).count();
        assert_eq!(changes, 1);
        // Each side of the change keeps its own figure.
        for p in &s {
            let want = if p.local_kernel_release.as_deref() == Some("2.6.12") {
                5.4e9
            } else {
                2.9e9
            };
            assert_eq!(p.throughput_bits_per_second, Some(want));
        }
    }

    #[test]
    fn fast_probes_are_bucketed_early_to_hold_the_budget() {
        let r = Retention::default();
        let h = History::new(r);
        let t0 = 1e9;
        for i in 0..2000 {
            let t = t0 + i as f64;
            h.record_point(&key(), "tcp", point(t, 1e6, "k"), at(t));
        }
        h.with(|j| {
            let j = &j[&key()];
            assert_eq!(j.recent.len(), MAX_FULL_ENTRIES);
            assert!(j.len() <= r.max_entries());
            let total: u32 = j.points().map(|p| p.samples).sum();
            assert_eq!(total, 2000);
        });
        // A hostile peer that reports a new release every probe still
        // cannot grow the buckets past their cap.
        for i in 0..5000 {
            let t = t0 + 3000.0 + i as f64 * 30.0;
            h.record_point(&key(), "tcp", point(t, 1e6, &format!("k{i}")), at(t));
        }
        h.with(|j| assert!(j[&key()].len() <= r.max_entries()));
    }

    #[test]
    fn from_outcome_takes_the_figures_of_the_probe_json() {
        use crate::metrics::ProbeFailure;
        let o = ProbeOutcome {
            kind: "tcp".into(),
            direction: Direction::Send,
            labels: Default::default(),
            started: at(100.0),
            duration: Duration::from_secs(1),
            slot_wait: None,
            result: Err(ProbeFailure {
                reason: "refused",
                message: "x".into(),
            }),
        };
        let p = Point::from_outcome(&o);
        assert!(p.failed());
        assert_eq!(p.reason.as_deref(), Some("refused"));
        assert_eq!(p.timestamp, 100.0);
        let json = serde_json::to_value(p.sample()).unwrap();
        assert_eq!(json["reason"], "refused");
        assert!(json.get("throughput_bits_per_second").is_none());
    }

    #[test]
    fn saved_history_reads_back_and_the_file_is_replaced_atomically() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.json");
        let h = History::new(Retention::default());
        let t0 = 1.7e9;
        day(&h, t0, |t| t, |_| "6.1.0".into());
        let now = at(t0 + 24.0 * H);
        h.expire(now);
        h.save(&path, now).unwrap();
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
        assert_eq!(names.len(), 1);
        let back = History::new(Retention::default());
        let n = back.load(&path, now).unwrap();
        assert_eq!(n, h.len());
        assert_eq!(
            back.samples(&key(), 0.0).unwrap(),
            h.samples(&key(), 0.0).unwrap()
        );
        // A missing file is an empty history.
        assert_eq!(back.load(&dir.path().join("none"), now).unwrap(), 0);
    }

    #[test]
    fn a_corrupt_or_foreign_file_is_refused_with_a_message() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.json");
        let now = at(2e9);
        let cases: &[(&[u8], &str)] = &[
            (b"root:x:0:0:root:/root:/bin/bash\n", "is not a pathprobe history"),
            (b"{\"format\":\"pathprobe-history\",\"version\":1,\"jobs\":[{", "is not a pathprobe history"),
            (b"{\"format\":\"grafana\",\"version\":1}", "its format is \"grafana\""),
            (b"{\"format\":\"pathprobe-history\",\"version\":9,\"saved_at_seconds\":0,\"jobs\":[]}", "version 9"),
            (b"\xff\xfe\x00garbage", "is not a pathprobe history"),
        ];
        for (bytes, want) in cases {
            std::fs::write(&path, bytes).unwrap();
            let h = History::new(Retention::default());
            let e = h.load(&path, now).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
            assert!(h.is_empty());
        }
        // Entries no probe could make are dropped, the rest kept.
        std::fs::write(
            &path,
            br#"{"format":"pathprobe-history","version":1,"saved_at_seconds":0,"jobs":[
              {"target":"a","module":"m","kind":"tcp","samples":[
                {"timestamp_seconds":1999999000,"direction":"send","samples":0,"failures":0},
                {"timestamp_seconds":-5,"direction":"send","samples":1,"failures":0},
                {"timestamp_seconds":1999999100,"direction":"send","samples":1,"failures":7,
                 "throughput_bits_per_second":-1}]}]}"#,
        )
        .unwrap();
        let h = History::new(Retention::default());
        assert_eq!(h.load(&path, now).unwrap(), 1);
        let (_, s) = h.samples(&ProbeKey::new("a", "m"), 0.0).unwrap();
        assert_eq!((s[0].samples, s[0].failures), (1, 1));
        assert_eq!(s[0].throughput_bits_per_second, None);
    }

    #[test]
    fn an_oversized_file_is_refused_from_its_size_before_it_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.json");
        // Sparse: reading it whole would take long and show in memory.
        std::fs::File::create(&path)
            .unwrap()
            .set_len(MAX_FILE_BYTES + 1)
            .unwrap();
        let h = History::new(Retention::default());
        let e = h.load(&path, at(2e9)).unwrap_err();
        assert!(matches!(e, LoadError::TooLarge { size, .. } if size == MAX_FILE_BYTES + 1));
        let text = e.to_string();
        assert!(
            text.contains("536870913 bytes, over the 536870912"),
            "{text}"
        );
    }

    #[test]
    fn a_failed_save_keeps_the_old_file_and_the_next_one_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("history.json");
        let h = History::new(Retention::default());
        let t0 = 1.7e9;
        day(&h, t0, |t| t, |_| "6.1.0".into());
        let now = at(t0 + 24.0 * H);
        h.save(&path, now).unwrap();
        let old = std::fs::read(&path).unwrap();
        // The temporary file cannot be made (a directory holds its name):
        // the save fails, and the old file is as it was.
        let tmp = dir
            .path()
            .join(format!("history.json.tmp.{}", std::process::id()));
        std::fs::create_dir(&tmp).unwrap();
        h.record_point(&key(), "tcp", point(t0 + 24.0 * H, 1.0, "6.1.0"), now);
        assert!(h.save(&path, at(t0 + 24.0 * H + 60.0)).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), old);
        std::fs::remove_dir(&tmp).unwrap();
        h.save(&path, at(t0 + 24.0 * H + 120.0)).unwrap();
        let back = History::new(Retention::default());
        assert_eq!(back.load(&path, now).unwrap(), h.len());
        assert_ne!(std::fs::read(&path).unwrap(), old);
    }

    #[test]
    fn a_job_of_endless_entries_loads_bounded_and_a_repeated_job_merges() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("h.json");
        let r = Retention::default();
        let now = 2e9;
        let sample = |t: f64| {
            format!(
                r#"{{"timestamp_seconds":{t},"direction":"send","samples":1,"failures":0,"throughput_bits_per_second":1e9}}"#
            )
        };
        let many: Vec<String> = (0..5 * r.max_entries())
            .map(|i| sample(now - 3600.0 + i as f64 * 0.5))
            .collect();
        let text = format!(
            r#"{{"format":"pathprobe-history","version":1,"saved_at_seconds":0,"jobs":[
              {{"target":"a","module":"m","kind":"tcp","samples":[{}]}},
              {{"target":"a","module":"m","kind":"tcp","samples":[{}]}}]}}"#,
            many.join(","),
            sample(now - 10.0)
        );
        std::fs::write(&path, text).unwrap();
        let h = History::new(r);
        h.load(&path, at(now)).unwrap();
        assert!(h.len() <= r.max_entries(), "{}", h.len());
        let (_, s) = h.samples(&ProbeKey::new("a", "m"), 0.0).unwrap();
        // The newest entries are the ones kept, the second copy's among them.
        assert!(s.iter().any(|e| e.timestamp_seconds == now - 10.0));
        assert!(s
            .windows(2)
            .all(|w| w[0].timestamp_seconds <= w[1].timestamp_seconds));
    }
}

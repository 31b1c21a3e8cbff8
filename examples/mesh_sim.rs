//! Simulates a fleet following the mesh plans (the real `pathprobe::mesh`
//! code) beside today's random-phase scheduler, and prints collisions,
//! coverage and each host's share of time in tests.
//!
//! `cargo run --release --example mesh_sim [N...]` (default 10 100 1000):
//! the circle plan, random phases and the stable plan, without and with
//! churn; `mesh_sim --groups [N...]` (default 10 100 1000 10000) the
//! grouped plans, by the circle method and stable under churn;
//! `mesh_sim --groups-churn [N...]` (default 100 1000) both through
//! churn; `mesh_sim --fleet [N...]` (default 10 100 1000 10000) the
//! shipped example's modules, fixed (config/examples/mesh.yml) and
//! adaptive (config/examples/mesh-adaptive.yml): cycle, coverage, share and
//! bytes per host per hour, full mesh and grouped; the series each host
//! and the fleet export, and with federation by group
//! (config/federation.yml) what each group's Prometheus and the global
//! one hold.
//!
//! The model, per host: a clock off by up to ±50 ms; a test occupies its
//! two hosts for the module's run plus 2 s of set-up. In the mesh, a test
//! starts a guard into its slot by the prober's clock, and the host slot
//! refuses a test to a host already in one (a "busy", counted). With
//! churn (`pathprobe::mesh::sim`), once per cycle one host leaves and a new
//! one joins, and each host learns of it up to 30 s later (discovery
//! refresh), so near a cycle boundary hosts follow different member lists
//! for a cycle. The random-phase
//! scheduler is today's: a stable phase per pair plus 10% jitter, one probe
//! at a time per host, busy retried after 2, 4 and 8 s, and a responder
//! that does not know its host is probing out (an overlap there spoils the
//! figure rather than being refused).

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::time::Duration;

use pathprobe::mesh::groups::{GroupPlan, GroupTest};
use pathprobe::mesh::sim::{self, Model, Rng};
use pathprobe::mesh::{MeshParams, MeshPlan, Plan, StableGroupPlan, StablePlan};

const RUN: f64 = 6.0; // tcp, 1 s omit + 5 s
const SETUP_USED: f64 = 2.0;
const SETUP: f64 = 4.0;
const GUARD: f64 = 1.0;
const SKEW: f64 = 0.05;

fn params() -> MeshParams {
    MeshParams {
        slot: Duration::from_secs_f64(RUN + SETUP + GUARD),
        modules: 1,
        budget: 0.5,
        min_cycle: Duration::ZERO,
    }
}

struct Test {
    start: f64,
    prober: u32,
    target: u32,
}

#[derive(Default)]
struct Figures {
    tests: u64,
    busy: u64,
    spoiled: u64,
    /// Longest gap between successes of a directed pair present throughout.
    coverage: f64,
    share_max: f64,
    share_mean: f64,
}

/// One grouped plan of `--groups`: by the circle method
/// (`pathprobe::mesh::groups`) or stable under churn
/// (`pathprobe::mesh::stable_groups`).
enum Grouped {
    Circle(GroupPlan),
    Stable(StableGroupPlan),
}

impl Grouped {
    fn groups(&self) -> &[Vec<String>] {
        match self {
            Grouped::Circle(p) => p.groups(),
            Grouped::Stable(p) => p.groups(),
        }
    }

    fn tests(&self, cycle: u64, k: usize) -> Vec<GroupTest> {
        match self {
            Grouped::Circle(p) => p.tests(cycle, k),
            Grouped::Stable(p) => p.tests(cycle, k),
        }
    }

    fn plan(&self) -> MeshPlan {
        match self {
            Grouped::Circle(p) => p.clone().into(),
            Grouped::Stable(p) => p.clone().into(),
        }
    }

    /// The stated bound: within how many cycles every host measures every
    /// other group.
    fn rotation(&self) -> usize {
        match self {
            Grouped::Circle(p) => p.groups().iter().map(Vec::len).max().unwrap_or(0),
            Grouped::Stable(p) => (0..p.groups().len())
                .map(|g| p.rotation(g))
                .max()
                .unwrap_or(0),
        }
    }
}

/// `n` hosts in groups of `size`, group `g` being hosts `g × size..`:
/// grouped `stable` or by the circle method.
fn make_grouped(n: usize, size: usize, stable: bool) -> Grouped {
    let groups: Vec<Vec<String>> = (0..n.div_ceil(size))
        .map(|g| {
            (g * size..((g + 1) * size).min(n))
                .map(|i| format!("h{i:05}"))
                .collect()
        })
        .collect();
    if stable {
        // Named in the order of the chunks.
        let named = groups
            .into_iter()
            .enumerate()
            .map(|(g, m)| (format!("g{g:05}"), m))
            .collect();
        Grouped::Stable(StableGroupPlan::new(named, params()))
    } else {
        Grouped::Circle(GroupPlan::new(groups, params()))
    }
}

/// `plan` ([`make_grouped`]) over `cycles` cycles: collisions, the longest
/// gap of a directed pair inside a group, of a directed pair of groups, of
/// a host probing another group, and shares.
fn grouped(
    plan: &Grouped,
    n: usize,
    size: usize,
    cycles: u64,
    rng: &mut Rng,
) -> (Figures, f64, f64, f64) {
    let mesh = plan.plan();
    let skew: Vec<f64> = (0..n).map(|_| (rng.unit() * 2.0 - 1.0) * SKEW).collect();
    let cycle = mesh.cycle().as_secs_f64();
    let period = mesh.period().as_secs_f64();
    let horizon = cycle * cycles as f64;
    let index = |(g, m): (usize, usize)| g * size + m;
    let mut tests = Vec::new();
    for c in 0..cycles {
        for k in 0..mesh.slots() {
            for t in plan.tests(c, k) {
                let (p, q) = (index(t.prober), index(t.target));
                tests.push(Test {
                    start: cycle * c as f64 + period * k as f64 + GUARD - skew[p],
                    prober: p as u32,
                    target: q as u32,
                });
            }
        }
    }
    tests.sort_by(|a, b| a.start.total_cmp(&b.start));
    let mut until = vec![f64::MIN; n];
    let mut busy_time = vec![0.0; n];
    let mut f = Figures::default();
    // Last clean measurement and longest gap, per directed pair inside a
    // group and per directed pair of groups.
    let mut inside: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
    let mut between: HashMap<(usize, usize), (f64, f64)> = HashMap::new();
    let mut host_group: HashMap<(usize, usize), (f64, f64)> = HashMap::new();
    for t in &tests {
        f.tests += 1;
        let (p, q) = (t.prober as usize, t.target as usize);
        if until[p] > t.start || until[q] > t.start {
            f.busy += 1;
            continue;
        }
        until[p] = t.start + RUN + SETUP_USED;
        until[q] = t.start + RUN + SETUP_USED;
        busy_time[p] += RUN + SETUP_USED;
        busy_time[q] += RUN + SETUP_USED;
        let e = if p / size == q / size {
            inside.entry((t.prober, t.target)).or_insert((0.0, 0.0))
        } else {
            let h = host_group.entry((p, q / size)).or_insert((0.0, 0.0));
            h.1 = h.1.max(t.start - h.0);
            h.0 = t.start;
            between.entry((p / size, q / size)).or_insert((0.0, 0.0))
        };
        e.1 = e.1.max(t.start - e.0);
        e.0 = t.start;
    }
    let gap = |m: &mut dyn Iterator<Item = &(f64, f64)>| {
        m.map(|(l, g)| g.max(horizon - l)).fold(0.0, f64::max)
    };
    let g = plan.groups().len();
    let pairs_inside: usize = plan.groups().iter().map(|m| m.len() * (m.len() - 1)).sum();
    let cov_inside = if inside.len() < pairs_inside {
        f64::INFINITY
    } else {
        gap(&mut inside.values())
    };
    let cov_between = if between.len() < g * (g - 1) {
        f64::INFINITY
    } else {
        gap(&mut between.values())
    };
    // Every host to every group but its own.
    let cov_host = if host_group.len() < n * (g - 1) {
        f64::INFINITY
    } else {
        gap(&mut host_group.values())
    };
    let shares: Vec<f64> = busy_time.iter().map(|b| b / horizon).collect();
    f.share_max = shares.iter().cloned().fold(0.0, f64::max);
    f.share_mean = shares.iter().sum::<f64>() / n as f64;
    (f, cov_inside, cov_between, cov_host)
}

fn fnv(a: u32, b: u32) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for x in a.to_le_bytes().iter().chain(b.to_le_bytes().iter()) {
        h ^= *x as u64;
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

/// Today's scheduler at interval `interval`.
fn random_phase(n: usize, interval: f64, cycles: u64, rng: &mut Rng) -> Figures {
    let horizon = interval * cycles as f64;
    // (time, prober, target, retries)
    let mut heap = BinaryHeap::new();
    for p in 0..n as u32 {
        for q in 0..n as u32 {
            if p == q {
                continue;
            }
            let phase = (fnv(p, q) % (interval * 1000.0) as u64) as f64 / 1000.0;
            for c in 0..cycles {
                let t = phase + interval * c as f64 + rng.unit() * 0.1 * interval;
                heap.push(Reverse(((t * 1e6) as u64, p, q, 0u8)));
            }
        }
    }
    let mut probing = vec![0.0f64; n];
    let mut serving = vec![0.0f64; n];
    let mut busy_time = vec![0.0f64; n];
    let mut last: HashMap<(u32, u32), (f64, f64)> = HashMap::new();
    let mut f = Figures::default();
    while let Some(Reverse((t, p, q, retries))) = heap.pop() {
        let mut start = t as f64 / 1e6;
        if start > horizon {
            continue;
        }
        let (pi, qi) = (p as usize, q as usize);
        // One probe at a time per host: wait for the semaphore.
        if probing[pi] > start {
            heap.push(Reverse(((probing[pi] * 1e6) as u64 + 1, p, q, retries)));
            continue;
        }
        f.tests += 1;
        if serving[qi] > start {
            f.busy += 1;
            if retries < 3 {
                start = start.max(serving[qi]) + 1.0 + f64::from(2u32 << retries);
                heap.push(Reverse(((start * 1e6) as u64, p, q, retries + 1)));
            }
            continue;
        }
        let end = start + RUN + SETUP_USED;
        // The responder does not know its host probes out, nor the
        // scheduler that its host serves: such an overlap spoils both.
        let spoiled = serving[pi] > start || probing[qi] > start;
        if spoiled {
            f.spoiled += 1;
        }
        probing[pi] = end;
        serving[qi] = end;
        busy_time[pi] += RUN + SETUP_USED;
        busy_time[qi] += RUN + SETUP_USED;
        if !spoiled {
            let e = last.entry((p, q)).or_insert((0.0, 0.0));
            e.1 = e.1.max(start - e.0);
            e.0 = start;
        }
    }
    let pairs = n * (n - 1);
    f.coverage = if last.len() < pairs {
        f64::INFINITY
    } else {
        last.values()
            .map(|(l, g)| g.max(horizon - l))
            .fold(0.0, f64::max)
    };
    // Shares overlap-counted: a spoiled pair of tests counts twice.
    let shares: Vec<f64> = busy_time.iter().map(|b| b / horizon).collect();
    f.share_max = shares.iter().cloned().fold(0.0, f64::max);
    f.share_mean = shares.iter().sum::<f64>() / n as f64;
    f
}

fn pct(a: u64, b: u64) -> f64 {
    if b == 0 {
        0.0
    } else {
        100.0 * a as f64 / b as f64
    }
}

fn minutes(s: f64) -> String {
    if s.is_finite() {
        format!("{:.1} min", s / 60.0)
    } else {
        "some pair never measured".to_string()
    }
}

/// `--groups N...`: the grouped plan, groups of about √N hosts (10 for
/// 100, 32 for 1,000, 100 for 10,000), beside the full mesh's cycle.
fn groups_table(sizes: &[usize]) {
    println!(
        "tcp 1+5 s, slot {} s, budget 50%, clock skew ±{} ms; groups of about √N hosts",
        RUN + SETUP + GUARD,
        SKEW * 1000.0
    );
    println!("| N | groups × size | plan | cycles run | cycle (full mesh) | cycle (groups) | tests | busy | pairs inside a group: max gap | pairs of groups: max gap | a host to another group: stated / max gap | share in tests, mean / max |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|---|");
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for &n in sizes {
        let size = ((n as f64).sqrt().round() as usize).max(2);
        let full = Plan::new((0..n).map(|i| format!("h{i:05}")).collect(), params());
        for stable in [false, true] {
            let plan = make_grouped(n, size, stable);
            let rotation = plan.rotation();
            // Enough cycles for every host to represent its group twice,
            // but for 10,000 hosts (hundreds of cycles of a million tests).
            let cycles = if n >= 10000 {
                2
            } else {
                (2 * rotation as u64).max(4)
            };
            let (f, inside, between, host) = grouped(&plan, n, size, cycles, &mut rng);
            let host = if host.is_finite() {
                minutes(host)
            } else {
                "not seen in so few cycles".to_string()
            };
            let cycle = plan.plan().cycle().as_secs_f64();
            println!(
                "| {n} | {} × {size} | {} | {cycles} | {} | {} | {} | {} ({:.2}%) | {} | {} | every {rotation} cycles = {} / {host} | {:.0}% / {:.0}% |",
                plan.groups().len(),
                if stable { "stable" } else { "circle" },
                minutes(full.cycle().as_secs_f64()),
                minutes(cycle),
                f.tests,
                f.busy,
                pct(f.busy, f.tests),
                minutes(inside),
                minutes(between),
                minutes(cycle * rotation as f64),
                f.share_mean * 100.0,
                f.share_max * 100.0
            );
        }
    }
}

/// `--groups-churn`: the grouped plan by the circle method and the stable
/// one through the same churn (`pathprobe::mesh::sim`, host `i` in group
/// `i mod g`, groups of about √N), and the stable one without: the
/// longest gap of a directed pair inside a group and of a directed pair of
/// groups.
fn groups_churn_table(sizes: &[usize]) {
    println!(
        "tcp 1+5 s, slot {} s, budget 50%, clock skew ±{} ms; test occupancy {} s; groups of about √N hosts, host i in group i mod g",
        RUN + SETUP + GUARD,
        SKEW * 1000.0,
        RUN + SETUP_USED
    );
    println!("| N | groups | plan | cycles run | cycle | tests | busy | pairs inside a group: max gap | pairs of groups: max gap | coverage / circle cycle | share in tests, mean / max |");
    println!("|---|---|---|---|---|---|---|---|---|---|---|");
    let model = Model {
        occupancy: RUN + SETUP_USED,
        guard: GUARD,
        skew: SKEW,
        learn: 30.0,
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for &n in sizes {
        let size = ((n as f64).sqrt().round() as usize).max(2);
        let groups = n.div_ceil(size);
        let cycles = match n {
            0..=999 => 6,
            1000..=9999 => 4,
            _ => 3,
        };
        let circle = move |m: Vec<String>| -> MeshPlan {
            GroupPlan::by_label(sim::labelled(m, groups), params()).into()
        };
        let stable = move |m: Vec<String>| -> MeshPlan {
            StableGroupPlan::by_label(sim::labelled(m, groups), params()).into()
        };
        let seed = rng.next_u64();
        let mut today = None;
        for (what, make, churn) in [
            (
                "circle, churn",
                &circle as &dyn Fn(Vec<String>) -> MeshPlan,
                true,
            ),
            ("stable", &stable, false),
            ("stable, churn", &stable, true),
        ] {
            let f = sim::run_grouped(n, groups, cycles, churn, model, make, &mut Rng(seed));
            let today = *today.get_or_insert(f.cycle);
            println!(
                "| {n} | {groups} | {what} | {cycles} | {:.1} min | {} | {} ({:.2}%) | {} | {} | {:.2} | {:.0}% / {:.0}% |",
                f.cycle / 60.0,
                f.tests,
                f.busy,
                pct(f.busy, f.tests),
                minutes(f.coverage),
                minutes(f.coverage_groups),
                f.coverage.max(f.coverage_groups) / today,
                f.share_mean * 100.0,
                f.share_max * 100.0
            );
        }
    }
}

/// The full-mesh table: the circle plan, today's random phases and the
/// stable plan, each without and with churn (the same churn events for
/// both plans).
fn mesh_table(sizes: &[usize]) {
    println!(
        "tcp 1+5 s, slot {} s, budget 50%, clock skew ±{} ms; test occupancy {} s",
        RUN + SETUP + GUARD,
        SKEW * 1000.0,
        RUN + SETUP_USED
    );
    println!("| N | schedule | cycle / interval | tests | busy | spoiled | coverage period (max gap) | share in tests, mean / max |");
    println!("|---|---|---|---|---|---|---|---|");
    let model = Model {
        occupancy: RUN + SETUP_USED,
        guard: GUARD,
        skew: SKEW,
        learn: 30.0,
    };
    let circle = |m: Vec<String>| -> MeshPlan { Plan::new(m, params()).into() };
    let stable = |m: Vec<String>| -> MeshPlan { StablePlan::new(m, params()).into() };
    let row = |n: usize, what: &str, f: &sim::Figures| {
        println!(
            "| {n} | {what} | {:.1} min | {} | {} ({:.2}%) | 0 | {} | {:.0}% / {:.0}% |",
            f.cycle / 60.0,
            f.tests,
            f.busy,
            pct(f.busy, f.tests),
            minutes(f.coverage),
            f.share_mean * 100.0,
            f.share_max * 100.0
        );
    };
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    for &n in sizes {
        let cycles = if n >= 1000 { 3 } else { 6 };
        let mut churned = Vec::new();
        for churn in [false, true] {
            // The stable plan meets the same churn as the circle plan.
            let seed = rng.0;
            let f = sim::run(n, cycles, churn, model, &circle, &mut rng);
            row(n, if churn { "mesh, churn" } else { "mesh" }, &f);
            churned.push((churn, seed));
            if !churn {
                let cycle = f.cycle;
                let r = random_phase(n, cycle, cycles, &mut rng);
                println!(
                    "| {n} | random phase (today) | {:.1} min | {} | {} ({:.1}%) | {} ({:.1}%) | {} | {:.0}% / {:.0}% |",
                    cycle / 60.0,
                    r.tests,
                    r.busy,
                    pct(r.busy, r.tests),
                    r.spoiled,
                    pct(r.spoiled, r.tests),
                    if r.coverage.is_finite() {
                        format!("{:.1} min", r.coverage / 60.0)
                    } else {
                        "some pair never measured cleanly".to_string()
                    },
                    r.share_mean * 100.0,
                    r.share_max * 100.0
                );
            }
        }
        for (churn, seed) in churned {
            let f = sim::run(n, cycles, churn, model, &stable, &mut Rng(seed));
            row(
                n,
                if churn {
                    "stable plan, churn"
                } else {
                    "stable plan"
                },
                &f,
            );
        }
    }
}

/// One set of modules of `--fleet`: the slot the service's planner gives
/// an example config, and the bytes one test of each of its modules moves
/// through each of its two hosts.
struct Modules {
    name: &'static str,
    slot: Duration,
    /// Bytes per test of each module, in the planner's module order.
    bytes: Vec<f64>,
}

/// The modules of a shipped example (`config/examples/<file>`), through
/// the service's own planner: the slot, and each module's bytes per test
/// over the time the plan holds for it (omit included: data flows then
/// too; an adaptive module's expected run), unpaced TCP at `tcp_bps`.
fn example_modules(name: &'static str, file: &str, tcp_bps: f64) -> Modules {
    let path = format!("{}/config/examples/{file}", env!("CARGO_MANIFEST_DIR"));
    let config = pathprobe::config::Config::load(std::path::Path::new(&path))
        .unwrap_or_else(|e| panic!("{path}: {e}"));
    let (plan, _, modules) =
        pathprobe::service::mesh::plan(&config, &[], |_: &pathprobe::probe::Target| false);
    let bytes = modules
        .iter()
        .map(|m| {
            let module = config.module(m).expect("a planned module");
            let rate = match module.bitrate {
                Some(b) if b > 0 => b as f64,
                _ => tcp_bps,
            };
            rate / 8.0 * module.planned_slot_run().as_secs_f64()
        })
        .collect();
    Modules {
        name,
        slot: plan.slot(),
        bytes,
    }
}

/// `--fleet`: the shipped example's modules (config/examples/mesh.yml: TCP
/// both ways 1+5 s, UDP 5 s at 200 Mbit/s) and its adaptive variant
/// (config/examples/mesh-adaptive.yml: the same, `duration: auto`, 1 s
/// expected per run, half the set-up) at N = 10 to 10,000, as a full mesh (the
/// plan the service picks) and grouped by about √N: cycle, coverage,
/// share of time in tests and bytes through each host per hour. The
/// adaptive modules also run at the fixed ones' cycle ("same cycle"):
/// the same freshness for fewer bytes.
fn fleet_table(sizes: &[usize], tcp_bps: f64) {
    let fixed = example_modules("fixed", "mesh.yml", tcp_bps);
    let adaptive = example_modules("adaptive", "mesh-adaptive.yml", tcp_bps);
    for m in [&fixed, &adaptive] {
        println!(
            "{} modules: slot {:.0} s, bytes per test {} (TCP at {:.0} Mbit/s), budget 50%",
            m.name,
            m.slot.as_secs_f64(),
            m.bytes
                .iter()
                .map(|b| format!("{:.0} MB", b / 1e6))
                .collect::<Vec<_>>()
                .join(" + "),
            tcp_bps / 1e6
        );
    }
    println!("| N | plan | modules | cycle | every pair measured within | share in tests (busiest) | tests per host per hour | bytes per host per hour |");
    println!("|---|---|---|---|---|---|---|---|");
    let gb = |b: f64| format!("{:.1} GB", b / 1e9);
    for &n in sizes {
        let names: Vec<String> = (0..n).map(sim::name).collect();
        let size = ((n as f64).sqrt().round() as usize).max(2);
        let groups: Vec<Vec<String>> = names.chunks(size).map(|c| c.to_vec()).collect();
        // Each plan's rows: the fixed modules, the adaptive ones at their
        // own cycle, and the adaptive ones stretched to the fixed cycle.
        for grouped in [false, true] {
            let mut fixed_cycle = None;
            for (m, label) in [
                (&fixed, "fixed"),
                (&adaptive, "adaptive"),
                (&adaptive, "adaptive, same cycle"),
            ] {
                let params = MeshParams {
                    slot: m.slot,
                    modules: m.bytes.len(),
                    budget: 0.5,
                    min_cycle: match label {
                        "adaptive, same cycle" => fixed_cycle.unwrap_or_default(),
                        _ => Duration::ZERO,
                    },
                };
                let per_test: f64 = m.bytes.iter().sum::<f64>() / m.bytes.len() as f64;
                let modules = m.bytes.len() as f64;
                if !grouped {
                    let full = MeshPlan::full(names.clone(), params.clone());
                    let kind = match &full {
                        MeshPlan::Stable(p) => format!("full mesh, stable ({} places)", p.places()),
                        _ => "full mesh, circle".to_string(),
                    };
                    let cycle = full.cycle().as_secs_f64();
                    fixed_cycle.get_or_insert(full.cycle());
                    // Each host is in 2 (n - 1) tests of each module per cycle.
                    let per_hour = 2.0 * (n - 1) as f64 * 3600.0 / cycle;
                    println!(
                        "| {n} | {kind} | {label} | {} | {} | {:.0}% | {:.1} | {} |",
                        minutes(cycle),
                        minutes(cycle),
                        full.share() * 100.0,
                        per_hour * modules,
                        gb(per_hour * modules * per_test)
                    );
                } else {
                    let g = GroupPlan::new(groups.clone(), params.clone());
                    let gc = g.cycle().as_secs_f64();
                    fixed_cycle.get_or_insert(g.cycle());
                    // A host's tests per cycle, averaged over the cycles in
                    // which it represents its group and those it does not.
                    let mean = g.mean_share() * gc / params.slot.as_secs_f64() / modules;
                    println!(
                        "| {n} | {} groups of {size} | {label} | {} | inside a group and group to group: {}; a host to each other group: {} | {:.0}% | {:.1} | {} |",
                        g.groups().len(),
                        minutes(gc),
                        minutes(gc),
                        minutes(gc * size as f64),
                        g.share() * 100.0,
                        mean * modules * 3600.0 / gc,
                        gb(mean * modules * 3600.0 / gc * per_test)
                    );
                }
            }
        }
    }
    series_table(sizes);
}

/// Series per host and for the fleet at `metrics.detail` full and fleet
/// (`pathprobe::metrics::budget`), with these modules: 3 paths per target
/// (TCP send and receive, UDP send), 2 modules.
fn series_table(sizes: &[usize]) {
    use pathprobe::config::Detail;
    use pathprobe::metrics::budget::{fleet_total, HostSeries};
    const PATHS: usize = 3;
    const MODULES: usize = 2;
    const SKIPS: usize = 3;
    println!();
    println!("| N | plan | paths per host | series per host, full | fleet total, full | series per host, fleet | fleet total, fleet |");
    println!("|---|---|---|---|---|---|---|");
    let m = |x: u128| {
        if x >= 1_000_000 {
            format!("{:.1} M", x as f64 / 1e6)
        } else {
            format!("{:.0} k", x as f64 / 1e3)
        }
    };
    for &n in sizes {
        let size = ((n as f64).sqrt().round() as usize).max(2);
        let groups = n.div_ceil(size);
        // Full mesh: a target per other member, at either level. Grouped:
        // at full every member is still a target of its own (its series
        // are registered); at fleet, its own group's members and one
        // target per other group.
        let rows = [
            ("full mesh", PATHS * (n - 1), PATHS * (n - 1)),
            ("grouped", PATHS * (n - 1), PATHS * (size - 1 + groups - 1)),
        ];
        for (plan, full_paths, fleet_paths) in rows {
            let host = |detail, paths| {
                HostSeries {
                    detail,
                    paths,
                    modules: MODULES,
                    skip_reasons: SKIPS,
                }
                .total()
            };
            println!(
                "| {n} | {plan} | {full_paths} / {fleet_paths} | {} | {} | {} | {} |",
                host(Detail::Full, full_paths),
                m(fleet_total(Detail::Full, n, full_paths, MODULES, SKIPS)),
                host(Detail::Fleet, fleet_paths),
                m(fleet_total(Detail::Fleet, n, fleet_paths, MODULES, SKIPS)),
            );
        }
    }
    federation_table(sizes);
}

/// Federation by group (config/federation.yml, docs/MESH.md): the grouped
/// plan's series in each group's Prometheus (its hosts' own, scraped, plus
/// what the rules record there) and in the global one, which federates
/// only the pair-of-groups series, at both detail levels. The pair series
/// are counted from the rules' own list (`budget::GROUP_PAIR_RECORDS`,
/// held to the file by tests/integration/rules.rs) for these modules: TCP
/// both ways (2 directions, a throughput flow each) and UDP one way (a
/// throughput flow and its loss).
fn federation_table(sizes: &[usize]) {
    use pathprobe::config::Detail;
    use pathprobe::metrics::budget::{fleet_total, Federation, HostSeries, PairPaths};
    const PATHS: usize = 3;
    const MODULES: usize = 2;
    const SKIPS: usize = 3;
    let pair = PairPaths {
        directions: 3,
        throughput_flows: 3,
        udp_flows: 1,
        rr_directions: 0,
        udp_rr_flows: 0,
    }
    .series();
    let m = |x: u128| {
        if x >= 1_000_000 {
            format!("{:.1} M", x as f64 / 1e6)
        } else if x >= 10_000 {
            format!("{:.0} k", x as f64 / 1e3)
        } else {
            x.to_string()
        }
    };
    println!();
    println!("federation by group: {pair} series per pair of groups (config/federation.yml)");
    println!("| N | groups | fleet total, fleet (one Prometheus) | group's Prometheus, full: scraped + recorded | group's Prometheus, fleet: scraped + recorded | global Prometheus (either level): pairs × series |");
    println!("|---|---|---|---|---|---|");
    for &n in sizes {
        let size = ((n as f64).sqrt().round() as usize).max(2);
        let sizes: Vec<usize> = (0..n)
            .collect::<Vec<_>>()
            .chunks(size)
            .map(<[usize]>::len)
            .collect();
        let groups = sizes.len();
        let host = |detail, paths| {
            HostSeries {
                detail,
                paths,
                modules: MODULES,
                skip_reasons: SKIPS,
            }
            .total()
        };
        let full = Federation::new(&sizes, host(Detail::Full, PATHS * (n - 1)), pair);
        let fleet_paths = PATHS * (size - 1 + groups - 1);
        let fleet = Federation::new(&sizes, host(Detail::Fleet, fleet_paths), pair);
        let pairs = fleet.global / pair as u128;
        println!(
            "| {n} | {groups} of up to {size} | {} | {} = {} + {} | {} = {} + {} | {} = {pairs} × {pair} |",
            m(fleet_total(Detail::Fleet, n, fleet_paths, MODULES, SKIPS)),
            m(full.per_group()),
            m(full.scraped),
            m(full.recorded),
            m(fleet.per_group()),
            m(fleet.scraped),
            m(fleet.recorded),
            m(fleet.global),
        );
        assert_eq!(
            full.global, fleet.global,
            "the rules record the same pairs at both levels"
        );
    }
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let sizes: Vec<usize> = args.iter().filter_map(|a| a.parse().ok()).collect();
    match args.first().map(String::as_str) {
        Some("--groups") => groups_table(if sizes.is_empty() {
            &[10, 100, 1000, 10000]
        } else {
            &sizes
        }),
        Some("--groups-churn") => groups_churn_table(if sizes.is_empty() {
            &[100, 1000]
        } else {
            &sizes
        }),
        Some("--fleet") => fleet_table(
            if sizes.is_empty() {
                &[10, 100, 1000, 10000]
            } else {
                &sizes
            },
            1e9,
        ),
        _ => mesh_table(if sizes.is_empty() {
            &[10, 100, 1000]
        } else {
            &sizes
        }),
    }
}

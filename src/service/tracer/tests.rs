use std::time::Duration;

use super::*;

fn cfg() -> TraceSection {
    TraceSection {
        enabled: true,
        interval: Duration::from_secs(600),
        min_interval: Duration::from_secs(60),
        change_ratio: 0.3,
        ..Default::default()
    }
}

#[test]
fn a_path_is_traced_first_then_on_change_failure_or_schedule() {
    let c = cfg();
    let t0 = Instant::now();
    let mut s = PathState::default();
    assert_eq!(due(&c, &s, t0, Some(100.0)), Some(Why::First));
    s.last = Some(t0);
    s.figure = Some(100.0);
    s.ok = true;
    // Within min_interval nothing asks, not even a collapse.
    assert_eq!(due(&c, &s, t0 + Duration::from_secs(30), Some(10.0)), None);
    assert_eq!(due(&c, &s, t0 + Duration::from_secs(30), None), None);
    let later = t0 + Duration::from_secs(61);
    // A figure within 30% of the traced one is no reason...
    assert_eq!(due(&c, &s, later, Some(125.0)), None);
    assert_eq!(due(&c, &s, later, Some(75.0)), None);
    // ...beyond it is, either way.
    assert_eq!(due(&c, &s, later, Some(131.0)), Some(Why::FigureChanged));
    assert_eq!(due(&c, &s, later, Some(60.0)), Some(Why::FigureChanged));
    // A probe that just failed is.
    assert_eq!(due(&c, &s, later, None), Some(Why::Failed));
    // One that keeps failing is not, until the schedule.
    s.ok = false;
    assert_eq!(due(&c, &s, later, None), None);
    assert_eq!(
        due(&c, &s, t0 + Duration::from_secs(600), None),
        Some(Why::Schedule)
    );
    // A trace still running is never doubled.
    s.running = true;
    assert_eq!(due(&c, &s, t0 + Duration::from_secs(6000), Some(1.0)), None);
}

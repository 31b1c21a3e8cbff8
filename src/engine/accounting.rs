//! UDP receive accounting: loss, reordering, duplicates and RFC 3550 jitter
//! from the sequence numbers and send timestamps of arriving datagrams.
//!
//! Pure arithmetic on (sequence, send time, arrival time) triples, so it is
//! tested on synthetic sequences.

use crate::engine::stats::UdpReceiveStats;

/// How far back duplicates are recognised. Reordering deeper than this is
/// rare; a datagram older than the window counts as out of order.
const WINDOW: u64 = 1 << 16;

#[derive(Debug, Clone)]
pub struct UdpAccount {
    /// Distinct datagrams seen.
    unique: u64,
    duplicates: u64,
    out_of_order: u64,
    /// Highest sequence seen plus one (0 before the first datagram).
    next_expected: u64,
    /// Lowest sequence seen, to tell gaps from the start of the flow.
    first_seq: Option<u64>,
    /// Bitmap of recently seen sequences, indexed by `seq % WINDOW`.
    seen: Vec<u64>,
    jitter_ns: f64,
    last_transit_ns: Option<i128>,
}

impl Default for UdpAccount {
    fn default() -> Self {
        UdpAccount {
            unique: 0,
            duplicates: 0,
            out_of_order: 0,
            next_expected: 0,
            first_seq: None,
            seen: vec![0; (WINDOW / 64) as usize],
            jitter_ns: 0.0,
            last_transit_ns: None,
        }
    }
}

impl UdpAccount {
    fn bit(&mut self, seq: u64) -> (&mut u64, u64) {
        let i = seq % WINDOW;
        (&mut self.seen[(i / 64) as usize], 1u64 << (i % 64))
    }

    /// Records one datagram. Times are nanoseconds on the sender's and the
    /// receiver's clocks; only differences matter, so the clocks need not agree.
    pub fn record(&mut self, seq: u64, send_ns: u64, arrival_ns: u64) {
        if !self.record_sequence(seq) {
            return;
        }
        self.sample_jitter(send_ns, arrival_ns);
    }

    /// Records a datagram whose own arrival time is unknown: one that came
    /// after the first in a coalesced (GRO) buffer, which the kernel stamps
    /// once. It counts for loss, order and duplicates, not for jitter.
    pub fn record_untimed(&mut self, seq: u64) {
        self.record_sequence(seq);
    }

    /// RFC 3550 6.4.1: J += (|D(i-1,i)| - J) / 16, D from transit times.
    fn sample_jitter(&mut self, send_ns: u64, arrival_ns: u64) {
        let transit = arrival_ns as i128 - send_ns as i128;
        if let Some(last) = self.last_transit_ns {
            let d = (transit - last).abs() as f64;
            self.jitter_ns += (d - self.jitter_ns) / 16.0;
        }
        self.last_transit_ns = Some(transit);
    }

    /// Counts `seq`; whether it was new (not a duplicate).
    fn record_sequence(&mut self, seq: u64) -> bool {
        if seq >= self.next_expected || self.next_expected == 0 {
            // Clear the bits of sequences skipped over, so the window reflects
            // only what is still recent.
            let from = if self.unique == 0 && self.duplicates == 0 {
                seq
            } else {
                self.next_expected
            };
            if seq.saturating_sub(from) >= WINDOW {
                self.seen.iter_mut().for_each(|w| *w = 0);
            } else {
                for s in from..seq {
                    let (w, b) = self.bit(s);
                    *w &= !b;
                }
            }
            let (w, b) = self.bit(seq);
            *w |= b;
            self.next_expected = seq + 1;
        } else {
            let too_old = self.next_expected - seq >= WINDOW;
            let (w, b) = self.bit(seq);
            if !too_old && *w & b != 0 {
                self.duplicates += 1;
                return false;
            }
            *w |= b;
            self.out_of_order += 1;
        }
        self.first_seq = Some(self.first_seq.map_or(seq, |f| f.min(seq)));
        self.unique += 1;
        true
    }

    pub fn unique(&self) -> u64 {
        self.unique
    }

    /// The figures, given the sender's own count of datagrams when known.
    /// Without it, loss is inferred from gaps between the lowest and highest
    /// sequence seen, which cannot see loss at the very end of the flow.
    pub fn finish(&self, sender_packets: Option<u64>) -> UdpReceiveStats {
        let span = match self.first_seq {
            Some(first) => self.next_expected - first,
            None => 0,
        };
        let expected = sender_packets.unwrap_or(span).max(self.unique);
        UdpReceiveStats {
            packets: self.unique,
            sender_packets,
            lost: expected - self.unique,
            out_of_order: self.out_of_order,
            duplicates: self.duplicates,
            jitter_seconds: self.jitter_ns / 1e9,
            ..UdpReceiveStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(seqs: &[u64]) -> UdpAccount {
        let mut a = UdpAccount::default();
        for (i, &s) in seqs.iter().enumerate() {
            a.record(s, s * 1000, 5000 + i as u64 * 1000);
        }
        a
    }

    #[test]
    fn in_order_stream_is_clean() {
        let a = run(&(0..1000).collect::<Vec<_>>());
        let s = a.finish(Some(1000));
        assert_eq!(
            (s.packets, s.lost, s.out_of_order, s.duplicates),
            (1000, 0, 0, 0)
        );
        assert_eq!(s.jitter_seconds, 0.0);
    }

    #[test]
    fn gaps_are_loss() {
        let a = run(&[0, 1, 2, 5, 6, 9]);
        let s = a.finish(None);
        assert_eq!((s.packets, s.lost), (6, 4));
        // The sender's count also reveals the lost tail.
        assert_eq!(a.finish(Some(12)).lost, 6);
    }

    #[test]
    fn late_arrivals_fill_gaps_and_count_as_reordered() {
        let a = run(&[0, 1, 3, 2, 4]);
        let s = a.finish(Some(5));
        assert_eq!(
            (s.packets, s.lost, s.out_of_order, s.duplicates),
            (5, 0, 1, 0)
        );
    }

    #[test]
    fn duplicates_are_not_received_twice() {
        let a = run(&[0, 1, 1, 2, 0, 3]);
        let s = a.finish(Some(4));
        assert_eq!(
            (s.packets, s.lost, s.out_of_order, s.duplicates),
            (4, 0, 0, 2)
        );
    }

    #[test]
    fn a_flow_may_start_past_zero() {
        // After the omitted warm-up, the first measured sequence is not 0.
        let a = run(&[500, 501, 503]);
        assert_eq!(a.finish(None).lost, 1);
    }

    #[test]
    fn sequences_skipped_beyond_the_window_reset_it() {
        let mut a = UdpAccount::default();
        a.record(0, 0, 0);
        a.record(WINDOW * 3, 0, 0);
        a.record(WINDOW * 3 + 1, 0, 0);
        // 0 was forgotten with the window, so it now counts as a late arrival.
        a.record(WINDOW * 3 - 1, 0, 0);
        let s = a.finish(None);
        assert_eq!(s.duplicates, 0);
        assert_eq!(s.out_of_order, 1);
    }

    #[test]
    fn untimed_datagrams_count_but_leave_jitter_alone() {
        // Buffers of 4 coalesced datagrams: the first of each is timed.
        let mut a = UdpAccount::default();
        for buffer in 0..100u64 {
            let first = buffer * 4;
            a.record(first, first * 1000, 5000 + buffer * 4000);
            for seq in first + 1..first + 4 {
                if seq != 201 {
                    a.record_untimed(seq);
                }
            }
        }
        a.record_untimed(3);
        let s = a.finish(Some(400));
        assert_eq!(
            (s.packets, s.lost, s.out_of_order, s.duplicates),
            (399, 1, 0, 1)
        );
        assert_eq!(s.jitter_seconds, 0.0);
    }

    #[test]
    fn jitter_follows_rfc3550() {
        // Sent every 1 ms; arrivals alternate 0.5 ms early and late, so every
        // transit difference is 1 ms and J converges towards 1 ms.
        let mut a = UdpAccount::default();
        for i in 0..2000u64 {
            let send = i * 1_000_000;
            let wobble = if i % 2 == 0 { 0 } else { 1_000_000 };
            a.record(i, send, send + 10_000_000 + wobble);
        }
        let j = a.finish(None).jitter_seconds;
        assert!((j - 0.001).abs() < 1e-6, "jitter {j}");
        // One step from zero: J = |D| / 16.
        let mut b = UdpAccount::default();
        b.record(0, 0, 100);
        b.record(1, 1000, 1000 + 100 + 1600);
        assert!((b.finish(None).jitter_seconds - 100e-9).abs() < 1e-15);
    }
}

//! Counters and a latency histogram, rendered in the Prometheus text format.
//!
//! Labels hold only fixed codes (outcome, a skip's code), never a pod or
//! namespace name, so the series stay few however many pods pass. Counting
//! happens after the answer is built, under one short lock; a scrape reads a
//! consistent copy.
//!
//! Connections have their own series: how many are open and how many are in
//! their TLS handshake (gauges, read from the caps' counters at scrape
//! time), how many were shed at accept and why, and how many were closed by
//! a bound (the handshake's, a request's, or the idle one). Request bodies
//! held against their budget are a gauge; a request the budget refused is
//! counted as an error with the reason "busy".
//!
//! Fairness by source address (see `fair`) adds the number of sources
//! holding a connection (a gauge: one number, never a label per address),
//! the reason "source-share" among those shed, and the connections evicted
//! for a newcomer, by the phase they were in.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::sync::Mutex;
use std::time::Duration;

use super::fair::{Counts, Phase, Refused};

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
];

#[derive(Default)]
struct Inner {
    /// (outcome, reason) → count.
    requests: BTreeMap<(&'static str, &'static str), u64>,
    buckets: [u64; BUCKETS.len()],
    count: u64,
    sum: f64,
    /// Reason → connections closed at accept.
    shed: BTreeMap<&'static str, u64>,
    /// Bound → connections closed by it.
    closed: BTreeMap<&'static str, u64>,
    /// Connections evicted for a newcomer: in their handshake, in their
    /// first request, idle between requests.
    evicted: [u64; 3],
}

#[derive(Default)]
pub struct Metrics {
    inner: Mutex<Inner>,
}

impl Metrics {
    /// One answered /mutate request: its outcome (injected, skipped,
    /// unchanged, ignored or error), a reason code and how long it took.
    pub fn record(&self, outcome: &'static str, reason: &'static str, took: Duration) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *m.requests.entry((outcome, reason)).or_default() += 1;
        let seconds = took.as_secs_f64();
        for (bound, count) in BUCKETS.iter().zip(m.buckets.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        m.count += 1;
        m.sum += seconds;
    }

    /// A connection closed at accept, and why.
    pub fn shed(&self, why: Refused) {
        let reason = match why {
            Refused::Handshakes => "max-handshakes",
            Refused::Connections => "max-connections",
            Refused::SourceShare | Refused::SetUp => "source-share",
        };
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *m.shed.entry(reason).or_default() += 1;
    }

    /// A connection closed to let a newcomer in.
    pub fn evicted(&self, phase: Phase) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let at = match phase {
            Phase::Handshake => 0,
            Phase::Request => 1,
            Phase::Idle => 2,
        };
        m.evicted[at] += 1;
    }

    /// A connection closed because it ran out of `bound` (handshake,
    /// request or idle).
    pub fn closed(&self, bound: &'static str) {
        let mut m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *m.closed.entry(bound).or_default() += 1;
    }

    /// The text format; `counts` are the connection gauges, `body_bytes`
    /// the request bodies held now.
    pub fn render(&self, counts: Counts, body_bytes: usize) -> String {
        let m = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = String::new();
        connections(&mut out, &m, counts.open, counts.handshaking);
        out.push_str(
            "# HELP meshwrap_webhook_waiting Connections accepted while every handshake slot is taken, waiting for one.\n",
        );
        out.push_str("# TYPE meshwrap_webhook_waiting gauge\n");
        let _ = writeln!(out, "meshwrap_webhook_waiting {}", counts.waiting);
        fairness(&mut out, &m, counts.sources);
        out.push_str(
            "# HELP meshwrap_webhook_body_bytes Bytes of request bodies held now, against the budget for bodies in flight.\n",
        );
        out.push_str("# TYPE meshwrap_webhook_body_bytes gauge\n");
        let _ = writeln!(out, "meshwrap_webhook_body_bytes {body_bytes}");
        out.push_str("# HELP meshwrap_webhook_requests_total AdmissionReviews answered, by outcome and reason.\n");
        out.push_str("# TYPE meshwrap_webhook_requests_total counter\n");
        for ((outcome, reason), count) in &m.requests {
            let _ = writeln!(
                out,
                "meshwrap_webhook_requests_total{{outcome=\"{outcome}\",reason=\"{reason}\"}} {count}"
            );
        }
        out.push_str(
            "# HELP meshwrap_webhook_request_duration_seconds Time from a /mutate request's headers to its answer.\n",
        );
        out.push_str("# TYPE meshwrap_webhook_request_duration_seconds histogram\n");
        for (bound, count) in BUCKETS.iter().zip(m.buckets.iter()) {
            let _ = writeln!(
                out,
                "meshwrap_webhook_request_duration_seconds_bucket{{le=\"{bound}\"}} {count}"
            );
        }
        let _ = writeln!(
            out,
            "meshwrap_webhook_request_duration_seconds_bucket{{le=\"+Inf\"}} {}",
            m.count
        );
        let _ = writeln!(out, "meshwrap_webhook_request_duration_seconds_sum {}", m.sum);
        let _ = writeln!(out, "meshwrap_webhook_request_duration_seconds_count {}", m.count);
        out
    }
}

fn connections(out: &mut String, m: &Inner, open: usize, handshaking: usize) {
    out.push_str("# HELP meshwrap_webhook_connections Connections open, their handshakes included.\n");
    out.push_str("# TYPE meshwrap_webhook_connections gauge\n");
    let _ = writeln!(out, "meshwrap_webhook_connections {open}");
    out.push_str("# HELP meshwrap_webhook_handshakes TLS handshakes under way.\n");
    out.push_str("# TYPE meshwrap_webhook_handshakes gauge\n");
    let _ = writeln!(out, "meshwrap_webhook_handshakes {handshaking}");
    out.push_str(
        "# HELP meshwrap_webhook_connections_shed_total Connections closed at accept, by the cap they met (source-share: their source address's).\n",
    );
    out.push_str("# TYPE meshwrap_webhook_connections_shed_total counter\n");
    for reason in ["max-connections", "max-handshakes", "source-share"] {
        let count = m.shed.get(reason).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "meshwrap_webhook_connections_shed_total{{reason=\"{reason}\"}} {count}"
        );
    }
    out.push_str(
        "# HELP meshwrap_webhook_connections_timed_out_total Connections closed by a bound: handshake, request or idle.\n",
    );
    out.push_str("# TYPE meshwrap_webhook_connections_timed_out_total counter\n");
    for bound in ["handshake", "request", "idle"] {
        let count = m.closed.get(bound).copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "meshwrap_webhook_connections_timed_out_total{{bound=\"{bound}\"}} {count}"
        );
    }
}

fn fairness(out: &mut String, m: &Inner, sources: usize) {
    out.push_str("# HELP meshwrap_webhook_sources Source addresses holding a connection.\n");
    out.push_str("# TYPE meshwrap_webhook_sources gauge\n");
    let _ = writeln!(out, "meshwrap_webhook_sources {sources}");
    out.push_str(
        "# HELP meshwrap_webhook_connections_evicted_total Connections closed to let in a newcomer, by the phase they were in: in their handshake or first request (for a source holding fewer of those, or for their own source's newcomer at its share), or idle between requests (for their own source's newcomer at its share only).\n",
    );
    out.push_str("# TYPE meshwrap_webhook_connections_evicted_total counter\n");
    for (phase, count) in ["handshake", "request", "idle"].iter().zip(m.evicted) {
        let _ = writeln!(
            out,
            "meshwrap_webhook_connections_evicted_total{{phase=\"{phase}\"}} {count}"
        );
    }
}

//! What one client can hold, and for how long: the budget for request
//! bodies in flight, and the deadline each connection lives by. (The caps
//! on connections and handshakes, and who gets a slot when they are
//! reached, are [`super::fair`]'s.)
//!
//! With `failurePolicy: Fail`, a webhook that runs out of memory blocks pod
//! creation cluster-wide, and any pod can dial it. So:
//! - **Caps, checked at accept** ([`super::fair`]). A connection that
//!   finished its handshake and sent half a header costs about 36 KB, which
//!   the allocator keeps; a handshake costs more, and CPU. Above
//!   `--max-connections` open, a new connection is closed as soon as it
//!   is accepted (load shed, counted in `/metrics`), or another gives way
//!   for it, instead of being kept until the memory limit kills the pod;
//!   above `--max-handshakes` under way, it waits for a slot, accepted but
//!   unread (bounded: [`super::waiting`]).
//! - **A budget for bodies in flight.** A /mutate body is held whole (up to
//!   the API server's 3 MiB) until it can be decided, so 512 connections
//!   could hold 1.5 GiB. A request takes its declared Content-Length from
//!   [`BodyBudget`] before any of its body is read (a body sent without a
//!   length takes each chunk as it arrives); when the budget cannot cover
//!   it, the request is answered 503 with Retry-After, never queued. Bodies
//!   of at most [`SMALL_BODY`] (every ordinary pod) first take from a lane
//!   of their own, so a flood of near-3 MiB bodies cannot refuse them. The
//!   take is one compare-and-swap, so two requests never both get the last
//!   bytes; what is taken is given back when the [`Held`] is dropped, after
//!   the body and the review parsed from it, however the request ends.
//! - **One deadline per request/response cycle.** hyper bounds only the
//!   wait for a header; nothing bounds a write to a client that never
//!   reads. A cycle begins with the first byte of a request (or, for a
//!   request already buffered behind another, when it is handed to the
//!   service) and ends when its answer is flushed to the socket; it must
//!   end within `--client-timeout`, or the connection is dropped. Between
//!   cycles, a keep-alive connection may stay idle for `--idle-timeout`;
//!   before its first request, only for `--client-timeout`.
//!
//! Races it guards against:
//! - **The deadline moves earlier** (an idle connection gets its first byte):
//!   the watcher is woken through a [`Notify`], whose stored permit covers a
//!   change made between reading the deadline and waiting on it.
//! - **Pipelined requests** are answered one after another without a read
//!   in between: each is its own cycle, begun by the service call, so a
//!   client that sends many and reads none is cut off by the first answer
//!   that cannot be flushed.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::fair::Ticket;

/// Bodies in flight across all connections, in bytes (shared lane).
pub const BODY_BUDGET: usize = 16 * 1024 * 1024;
/// The lane kept for bodies of at most [`SMALL_BODY`] bytes.
pub const SMALL_LANE: usize = 4 * 1024 * 1024;
/// The largest body the small lane takes: ordinary pods are 2 to 20 KB.
pub const SMALL_BODY: usize = 64 * 1024;

/// Bytes taken from a fixed total.
struct Pool {
    used: AtomicUsize,
    max: usize,
}

impl Pool {
    fn new(max: usize) -> Pool {
        Pool {
            used: AtomicUsize::new(0),
            max,
        }
    }

    /// Takes `bytes` if they fit, all or nothing.
    fn take(&self, bytes: usize) -> bool {
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|total| *total <= self.max)
            })
            .is_ok()
    }

    fn give(&self, bytes: usize) {
        self.used.fetch_sub(bytes, Ordering::AcqRel);
    }
}

/// The budget for request bodies in flight (see the module's notes).
pub struct BodyBudget {
    shared: Pool,
    small: Pool,
    small_body: usize,
}

/// Bytes of the budget one request holds; given back when dropped.
pub struct Held {
    budget: Arc<BodyBudget>,
    shared: usize,
    small: usize,
}

impl BodyBudget {
    pub fn new(shared: usize, small_lane: usize, small_body: usize) -> Arc<BodyBudget> {
        Arc::new(BodyBudget {
            shared: Pool::new(shared),
            small: Pool::new(small_lane),
            small_body,
        })
    }

    /// `bytes` for a body that declared its length: from the small lane
    /// when it is small and the lane has room, else from the shared one;
    /// `None` when neither can cover it.
    pub fn take(self: &Arc<Self>, bytes: usize) -> Option<Held> {
        let held = |shared, small| Held {
            budget: self.clone(),
            shared,
            small,
        };
        if bytes <= self.small_body && self.small.take(bytes) {
            return Some(held(0, bytes));
        }
        self.shared.take(bytes).then(|| held(bytes, 0))
    }

    /// Bytes held now, both lanes.
    pub fn in_flight(&self) -> usize {
        self.shared.used.load(Ordering::Acquire) + self.small.used.load(Ordering::Acquire)
    }
}

impl Held {
    /// `more` bytes of a body that did not declare its length, from the
    /// shared lane; false when they do not fit.
    pub fn grow(&mut self, more: usize) -> bool {
        let ok = self.budget.shared.take(more);
        if ok {
            self.shared += more;
        }
        ok
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        self.budget.shared.give(self.shared);
        self.budget.small.give(self.small);
    }
}

/// Where a connection is in its request/response cycle.
struct Cycle {
    busy: bool,
    answered: bool,
    until: Instant,
}

/// The deadline of one connection (see the module's notes).
pub struct Deadline {
    cycle: Mutex<Cycle>,
    changed: Notify,
    request: Duration,
    idle: Duration,
    /// Told when the connection turns idle (its answer flushed) and busy
    /// again (a next request's first byte), so that its source's own
    /// newcomer may take the place of an idle one ([`super::fair`]).
    ticket: Option<Arc<Ticket>>,
}

/// Which bound a connection ran out of.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expired {
    /// A request/response cycle took longer than `--client-timeout`.
    Request,
    /// No request began in time (`--idle-timeout`, or `--client-timeout`
    /// for the first).
    Idle,
}

impl Deadline {
    pub fn new(request: Duration, idle: Duration) -> Arc<Deadline> {
        Deadline::with_ticket(request, idle, None)
    }

    /// The same, telling `ticket` when the connection turns idle or busy.
    pub fn with_ticket(request: Duration, idle: Duration, ticket: Option<Arc<Ticket>>) -> Arc<Deadline> {
        Arc::new(Deadline {
            cycle: Mutex::new(Cycle {
                busy: false,
                answered: false,
                until: Instant::now() + request,
            }),
            changed: Notify::new(),
            request,
            idle,
            ticket,
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cycle> {
        self.cycle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A request began (its first byte, or its turn in the service).
    pub fn begin(&self) {
        let mut cycle = self.lock();
        if !cycle.busy {
            cycle.busy = true;
            cycle.answered = false;
            cycle.until = Instant::now() + self.request;
            drop(cycle);
            self.changed.notify_one();
            if let Some(ticket) = &self.ticket {
                ticket.busy();
            }
        }
    }

    /// The service has produced its answer; the cycle ends when it is flushed.
    pub fn answered(&self) {
        self.lock().answered = true;
    }

    fn flushed(&self) {
        let mut cycle = self.lock();
        if cycle.busy && cycle.answered {
            cycle.busy = false;
            cycle.answered = false;
            cycle.until = Instant::now() + self.idle;
            drop(cycle);
            if let Some(ticket) = &self.ticket {
                ticket.idle();
            }
        }
    }

    /// Resolves once the current bound has passed.
    pub async fn expired(&self) -> Expired {
        loop {
            let (until, busy) = {
                let cycle = self.lock();
                (cycle.until, cycle.busy)
            };
            if Instant::now() >= until {
                return if busy { Expired::Request } else { Expired::Idle };
            }
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                () = self.changed.notified() => {}
            }
        }
    }
}

/// A stream that tells its [`Deadline`] when request bytes arrive and when
/// an answer has been flushed.
pub struct Timed<T> {
    inner: T,
    deadline: Arc<Deadline>,
}

impl<T> Timed<T> {
    pub fn new(inner: T, deadline: Arc<Deadline>) -> Timed<T> {
        Timed { inner, deadline }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Timed<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.deadline.begin();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Timed<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let result = Pin::new(&mut self.inner).poll_flush(cx);
        if matches!(result, Poll::Ready(Ok(()))) {
            self.deadline.flushed();
        }
        result
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_body_budget_refuses_what_does_not_fit_and_gets_it_back_when_dropped() {
        let budget = BodyBudget::new(100, 20, 10);
        let big = budget.take(60).unwrap();
        assert!(budget.take(41).is_none(), "above the shared lane");
        let second = budget.take(40).unwrap();
        assert_eq!(budget.in_flight(), 100);
        // The shared lane is full; small bodies still fit in their own lane.
        let small = budget.take(10).unwrap();
        let small2 = budget.take(10).unwrap();
        assert!(budget.take(10).is_none(), "both lanes full");
        assert!(budget.take(11).is_none());
        drop(big);
        // A body without a length starts at nothing and grows in the shared lane.
        let mut chunked = budget.take(0).unwrap();
        assert!(chunked.grow(60));
        assert!(!chunked.grow(1), "a growing body stops at the budget");
        drop((second, small, small2, chunked));
        assert_eq!(budget.in_flight(), 0);
    }

    #[test]
    fn two_threads_never_both_take_the_last_bytes() {
        for _ in 0..200 {
            let budget = BodyBudget::new(10, 0, 0);
            let taken: Vec<bool> = std::thread::scope(|s| {
                let a = s.spawn(|| budget.take(6).map(std::mem::forget).is_some());
                let b = s.spawn(|| budget.take(6).map(std::mem::forget).is_some());
                vec![a.join().unwrap(), b.join().unwrap()]
            });
            assert_eq!(taken.iter().filter(|t| **t).count(), 1);
        }
    }

    fn state(deadline: &Deadline) -> (bool, Duration) {
        let cycle = deadline.lock();
        (cycle.busy, cycle.until.saturating_duration_since(Instant::now()))
    }

    #[test]
    fn a_cycle_runs_from_its_first_byte_to_the_flush_of_its_answer_then_idle_is_bounded() {
        let (request, idle) = (Duration::from_secs(10), Duration::from_secs(100));
        let deadline = Deadline::new(request, idle);
        // Before the first request: the request bound.
        assert!(matches!(state(&deadline), (false, d) if d <= request));
        deadline.begin();
        let (busy, left) = state(&deadline);
        assert!(busy && left <= request && left > request / 2);
        // A flush before the answer does not end the cycle, nor does a second byte move it.
        deadline.flushed();
        deadline.begin();
        assert!(state(&deadline).0);
        deadline.answered();
        deadline.flushed();
        let (busy, left) = state(&deadline);
        assert!(!busy && left > request && left <= idle, "{left:?}");
    }
}

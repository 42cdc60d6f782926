//! Who gets a connection slot when the webhook is full: fair shares by
//! source address, and eviction of the slowest.
//!
//! With `failurePolicy: Fail`, a connection refused is a pod creation
//! failed (the API server does not retry an admission call), and any pod
//! that can reach the port can dial. The caps of [`super::limits`] protect
//! the webhook's memory; this table decides, when they are reached, whether
//! a newcomer gets in and who gives way. Where it cannot tell the API
//! server from whoever shares its address, it takes the API server's side:
//! a connection of the API server refused is a pod creation refused.
//! - **Counted by source.** Every connection, every connection still in
//!   its TLS handshake, and every connection still being set up (in its
//!   handshake or its first request: the *candidates*, which may give way)
//!   is counted against its [`Source`]: an IPv4 address, or a whole IPv6
//!   address. Not an IPv6 /64: on EKS and other clouds a /64 is a node
//!   subnet, and the API server reaches webhooks from addresses in it
//!   (and pods are numbered from it), so a /64's share would be anyone's
//!   there to take from the API server.
//! - **A cap per source.** No source holds more than `--max-source-share`
//!   of the connection slots. A newcomer from a source at its share takes
//!   the place of its own source's oldest slow connection (set up more than
//!   [`SETUP_GRACE_MS`] ago with no whole request, or in a handshake begun
//!   more than [`HANDSHAKE_GRACE_MS`] ago); while the source has a younger
//!   one being set up (most likely the API server's own burst) it waits
//!   (`Refused::SetUp`); with none being set up, it takes the place of the
//!   source's longest idle one (a kept-alive connection between
//!   requests); it is closed at accept only when every connection of its
//!   source is answering ([`Table::own_victim`]). So whoever shares the API
//!   server's address cannot hold its share with idle or slow connections.
//! - **Handshakes.** The handshake slots have no cap per source: a source
//!   may take every free one (an API server whose pool is cold opens as
//!   many connections at once as it has admissions to send, all from one
//!   address). When all are taken, another source's may give way (below);
//!   when none does, the newcomer is not refused but waits for a slot
//!   ([`super::waiting`], bounded), told by [`Fair::freed`].
//! - **Fair shares when full.** When every connection slot is taken, a
//!   newcomer gets in when another source holds more candidates than the
//!   newcomer's source (two more, or one when the newcomer's holds none, so
//!   that two sources never take turns evicting each other): the source
//!   holding the most gives way (among equals, the one whose candidate is
//!   the oldest), its oldest candidate that waits on its client: one whose
//!   client's bytes wait unread in the kernel is waiting on the server (its
//!   task has not run yet, as when handshakes queue for the CPU), and is
//!   passed over ([`Conn::waiting_on_us`]). Repeated, this leaves the sources
//!   that contend for the slots with equal shares of them, each its fair
//!   share; a newcomer from a source already holding it is closed at
//!   accept, as before. The handshake slots are shared the same way, by the
//!   handshakes each source holds. Candidates, not all connections, are
//!   weighed: the API server's pooled connections are not candidates, so a
//!   large pool does not cost its new connections their way in.
//! - **Never one answering.** A connection leaves the candidates for good
//!   once a request of it has arrived whole ([`Ticket::answering`]): its
//!   answer is never cut. Between requests a kept-alive connection is
//!   idle ([`Ticket::idle`], from its answer's flush to its next request's
//!   first byte, [`Ticket::busy`]) and gives way to its own source's
//!   newcomer at its share only, never to another source's: closing an idle
//!   keep-alive connection could race a request the API server is writing
//!   on it, and Go's client retries a request on a kept connection the
//!   server closed only when nothing of it was written, or when it is
//!   replayable, which a POST is not without an Idempotency-Key header
//!   (Go's net/http, golang/go at a925402b, a Go 1.24+ tree:
//!   src/net/http/transport.go, the `Transport` doc comment and
//!   `shouldRetryRequest`, and request.go `isReplayable`). At its share
//!   that race is the lesser risk: the newcomer refused is a pod creation
//!   refused for certain.
//!
//! So a slow client, from however many connections of one source, gives
//! way to a client that completes its handshake and sends its request
//! promptly from another source or its own: the newcomer is the youngest,
//! and the oldest goes first. What an attacker needs to lock the API
//! server out anyway is in docs/webhook.md ("Load and fairness").
//!
//! Bounded state: a source has an entry only while it holds a connection,
//! so there are never more entries than `--max-connections`, however many
//! addresses dial (a refused dial leaves nothing behind). An evicted
//! connection leaves the counts at once, so the newcomer can take its
//! slot; it is closed as soon as its task runs, and at most
//! `--max-handshakes` evicted connections may be waiting for that (the
//! accept loop waits for them first, [`Fair::settled`], and a newcomer
//! that would evict two needs room for two), so the memory they hold is
//! bounded too.
//!
//! Races it guards against:
//! - **Eviction against the first request arriving.** Both happen under the
//!   table's lock: a connection is either evicted while still a candidate
//!   (its task sees [`Ticket::evicted`] and drops it) or has left the
//!   candidates first, and is then never evicted.
//! - **Eviction of an idle connection against its next request.** Its next
//!   request's first byte takes it out of the idle ones under the same
//!   lock; bytes still unread in the kernel pass it over
//!   ([`Conn::waiting_on_us`]). What is left is a request whose first bytes
//!   the connection's task has read but not yet reported: a window of the
//!   task's own run, the same race any server's idle timeout has.
//! - **A check and its count.** Only the accept loop admits, under the same
//!   lock, so two newcomers never both take the last slot, nor evict for
//!   the same one; nothing is evicted for a newcomer that is then refused
//!   or told to wait.
//! - **A slot freed while the accept loop is busy.** [`Fair::freed`] keeps
//!   the notice (a permit) until the loop next waits for it.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use tokio::sync::Notify;

/// Where a connection comes from, as the fair shares count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Source {
    V4(u32),
    /// A whole IPv6 address, not its /64: a /64 is a node subnet shared
    /// by the API server's own addresses on clouds such as EKS, and a
    /// source's share counted over it would be anyone's in that subnet to
    /// take (see the module's notes). The side taken: the API server let
    /// in, at the cost of a tenant with many addresses counting as many
    /// sources.
    V6(u128),
}

impl Source {
    /// The source of a peer address; an IPv4-mapped IPv6 address (a
    /// dual-stack listener's IPv4 peer) is its IPv4 address.
    pub fn of(ip: IpAddr) -> Source {
        match ip {
            IpAddr::V4(v4) => Source::V4(u32::from(v4)),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Source::V4(u32::from(v4)),
                None => Source::V6(u128::from(v6)),
            },
        }
    }
}

/// Why a connection was closed at accept.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refused {
    /// Every connection slot is taken, and no source holds enough more
    /// candidates than the newcomer's to give way.
    Connections,
    /// The same, for the handshake slots.
    Handshakes,
    /// Its source holds `--max-source-share` of the slots already, every
    /// one answering.
    SourceShare,
    /// Its source is at its share, and none of its connections may give
    /// way yet: those that could are still being set up (for less than
    /// [`SETUP_GRACE_MS`]: most likely its own burst, about to send their
    /// requests) or waiting on the server. The side taken: the newcomer
    /// waits (as for a handshake slot) rather than cut a sibling's request.
    SetUp,
}

impl Refused {
    /// Whether the connection may wait for a slot rather than be closed.
    pub fn waits(self) -> bool {
        matches!(self, Refused::Handshakes | Refused::SetUp)
    }
}

/// How often the accept loop tries again the connections that wait while
/// nothing tells it a slot was freed (a connection still being set up
/// grows slow after [`SETUP_GRACE_MS`]).
pub const RETRY_WAITING: std::time::Duration = std::time::Duration::from_millis(SETUP_GRACE_MS);

/// Where an evicted connection was.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    Handshake,
    /// After its handshake, before its first request arrived whole.
    Request,
    /// A kept-alive connection between requests (its source's own newcomer
    /// only: see [`Fair::admit`]).
    Idle,
}

/// The caps: open connections, handshakes under way, and the share of
/// each one source may hold, in percent.
#[derive(Clone, Copy, Debug)]
pub struct Caps {
    pub connections: usize,
    pub handshakes: usize,
    pub source_share: u8,
}

impl Caps {
    /// What one source may hold of `slots`: the share, rounded up, at least 1.
    fn per_source(&self, slots: usize) -> usize {
        (slots * usize::from(self.source_share)).div_ceil(100).max(1)
    }
}

/// One connection as the table knows it.
struct Conn {
    evicted: AtomicBool,
    wake: Notify,
    /// Its socket, to see whether it waits on its client or on us; -1 once
    /// the connection is going (or in tests without one).
    fd: AtomicI32,
    /// While it is idle between requests, its key among its source's idle
    /// connections (when it became idle); [`NOT_IDLE`] otherwise. Written
    /// under the table's lock.
    since: AtomicU64,
    /// When its handshake ended, in ms of [`Fair::now`]; `u64::MAX` before.
    set_up: AtomicU64,
    /// When it was admitted, in ms of [`Fair::now`].
    admitted: AtomicU64,
}

/// [`Conn::since`] of a connection that is not idle.
const NOT_IDLE: u64 = u64::MAX;

/// How long after its handshake a connection's first request may take
/// before the connection counts as slow for its own source's newcomer
/// (see [`Table::own_victim`]): an API server writes its request with the
/// handshake's last message, so a connection that has sent nothing whole
/// this long after is the slow one. Below it, a connection still being set
/// up gives way to its source's newcomer only after the idle ones.
const SETUP_GRACE_MS: u64 = 20;

/// How long a handshake may take before it counts as slow for its own
/// source's newcomer: on a cluster's network it takes milliseconds, but a
/// burst's clients, busy with their own handshakes, may be slow to send
/// their last message, and a handshake cut is a review lost.
const HANDSHAKE_GRACE_MS: u64 = 1_000;

impl Conn {
    /// Whether bytes its client sent wait unread in the kernel: then the
    /// server, not the client, is slow (its task has not run yet), and the
    /// connection is passed over as a victim.
    fn waiting_on_us(&self) -> bool {
        let fd = self.fd.load(Ordering::Relaxed);
        if fd < 0 {
            return false;
        }
        let mut unread: libc::c_int = 0;
        // SAFETY: FIONREAD writes one c_int through the pointer, which is
        // valid for the call. The fd is the connection's socket, set while
        // its task owns it and cleared under the table's lock when the
        // connection leaves; if the task has just closed it, the call fails
        // or reads another socket's count, which only changes which
        // candidate gives way.
        let r = unsafe { libc::ioctl(fd, libc::FIONREAD, &mut unread) };
        r == 0 && unread > 0
    }

    fn new() -> Conn {
        Conn {
            evicted: AtomicBool::new(false),
            wake: Notify::new(),
            fd: AtomicI32::new(-1),
            since: AtomicU64::new(NOT_IDLE),
            set_up: AtomicU64::new(u64::MAX),
            admitted: AtomicU64::new(0),
        }
    }
}

/// How many candidates the choice of a victim looks at, at most.
const PROBES: usize = 64;

/// What one source holds.
#[derive(Default)]
struct Holding {
    connections: usize,
    /// Connections in their handshake, oldest first (ids grow).
    handshakes: BTreeSet<u64>,
    /// The candidates: connections that may give way (in their handshake
    /// or first request), oldest first.
    candidates: BTreeMap<u64, Arc<Conn>>,
    /// Kept-alive connections idle between requests (their answer flushed,
    /// nothing of a next request read), by when they became idle, oldest
    /// first: the id and the connection. They give way only to a newcomer
    /// of their own source at its share.
    idle: BTreeMap<u64, (u64, Arc<Conn>)>,
}

impl Holding {
    /// Its connections that may give way, oldest first: only those in their
    /// handshake when `handshakes`.
    fn may_give_way(&self, handshakes: bool) -> impl Iterator<Item = u64> + '_ {
        let (only_handshakes, all) = match handshakes {
            true => (Some(self.handshakes.iter()), None),
            false => (None, Some(self.candidates.keys())),
        };
        only_handshakes
            .into_iter()
            .flatten()
            .chain(all.into_iter().flatten())
            .copied()
    }
}

#[derive(Default)]
struct Table {
    sources: HashMap<Source, Holding>,
    open: usize,
    handshaking: usize,
    /// Evicted connections whose task has not ended yet.
    dying: usize,
    next: u64,
}

/// The slots and who holds them (see the module's notes).
pub struct Fair {
    caps: Caps,
    table: Mutex<Table>,
    /// Told when an evicted connection's task has ended.
    ended: Notify,
    /// Told when a handshake slot is given back (not taken over by a
    /// newcomer): the accept loop then admits a connection that waits for
    /// one ([`super::waiting`]).
    freed: Notify,
    /// Connections accepted that wait for a handshake slot (the accept
    /// loop's count, shown in `/metrics`).
    waiting: AtomicUsize,
    /// The clock of [`Conn::set_up`].
    epoch: Instant,
    /// [`SETUP_GRACE_MS`] and [`HANDSHAKE_GRACE_MS`], or others in tests.
    grace_ms: (u64, u64),
}

/// A connection admitted, and those that gave way for it (at most two: a
/// connection slot of its own source's, and a handshake slot).
pub struct Admitted {
    pub ticket: Ticket,
    pub evicted: Vec<Phase>,
}

/// One admitted connection's place in the table; released when dropped.
pub struct Ticket {
    fair: Arc<Fair>,
    source: Source,
    id: u64,
    conn: Arc<Conn>,
    /// Set once it has left the candidates: later requests skip the lock.
    answering: AtomicBool,
}

/// The figures `/metrics` shows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub open: usize,
    pub handshaking: usize,
    /// Sources holding a connection: the table's entries.
    pub sources: usize,
    /// Accepted, waiting for a handshake slot.
    pub waiting: usize,
}

/// A connection chosen to give way.
struct Victim {
    source: Source,
    id: u64,
    conn: Arc<Conn>,
    handshaking: bool,
}

impl Fair {
    pub fn new(caps: Caps) -> Arc<Fair> {
        Fair::with_grace(caps, (SETUP_GRACE_MS, HANDSHAKE_GRACE_MS))
    }

    fn with_grace(caps: Caps, grace_ms: (u64, u64)) -> Arc<Fair> {
        Arc::new(Fair {
            caps,
            table: Mutex::new(Table::default()),
            ended: Notify::new(),
            freed: Notify::new(),
            waiting: AtomicUsize::new(0),
            epoch: Instant::now(),
            grace_ms,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Milliseconds since the table was made.
    fn now(&self) -> u64 {
        self.epoch.elapsed().as_millis() as u64
    }

    pub fn counts(&self) -> Counts {
        let t = self.lock();
        Counts {
            open: t.open,
            handshaking: t.handshaking,
            sources: t.sources.len(),
            waiting: self.waiting.load(Ordering::Relaxed),
        }
    }

    /// The accept loop's count of connections waiting for a handshake slot.
    pub fn set_waiting(&self, waiting: usize) {
        self.waiting.store(waiting, Ordering::Relaxed);
    }

    /// Waits until fewer than `--max-handshakes` evicted connections are
    /// still to be closed: the accept loop calls it before [`Fair::admit`],
    /// so a burst of evictions holds new connections in the kernel's
    /// backlog for the moment their tasks take to run, instead of refusing
    /// them or letting the memory of the evicted grow.
    pub async fn settled(&self) {
        loop {
            let ended = self.ended.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            if self.lock().dying < self.caps.handshakes {
                return;
            }
            ended.await;
        }
    }

    /// Resolves when a handshake slot has been given back since the last
    /// time it resolved (a permit is kept if nobody was waiting).
    pub async fn freed(&self) {
        self.freed.notified().await;
    }

    /// The order in which to try connections waiting from `ips` (their
    /// indexes): those whose source holds the fewest handshakes first
    /// (among equals, the first), so that a freed slot goes to a source
    /// that holds few of them rather than to one whose handshakes hold
    /// every slot.
    pub fn order(&self, ips: impl Iterator<Item = IpAddr>) -> Vec<usize> {
        let t = self.lock();
        let mut weighed: Vec<(usize, usize)> = ips
            .enumerate()
            .map(|(i, ip)| (t.sources.get(&Source::of(ip)).map_or(0, |h| h.handshakes.len()), i))
            .collect();
        weighed.sort_unstable();
        weighed.into_iter().map(|(_, i)| i).collect()
    }

    /// A slot for a connection just accepted from `ip`, or why it is not
    /// let in now. A connection slot is free, or its source is at its
    /// share and its own oldest slow or idle connection gives way, or the
    /// server is full and another source's gives way; a handshake slot is
    /// free, or another source's gives way. `Refused::Handshakes` and
    /// `Refused::SetUp` ([`Refused::waits`]) mean the connection may wait
    /// for its slot (the accept loop keeps it, [`super::waiting`]). Nothing is evicted
    /// unless the newcomer gets in (each one evicted is told through its
    /// [`Ticket::evicted`]).
    pub fn admit(self: &Arc<Self>, ip: IpAddr) -> Result<Admitted, Refused> {
        let source = Source::of(ip);
        let mut t = self.lock();
        let held = t.held(source);
        let room = self.caps.handshakes.saturating_sub(t.dying);
        let mut slot = None;
        let now = self.now();
        if held.connections >= self.caps.per_source(self.caps.connections) {
            // At its share. The side taken: the API server let in. Whoever
            // shares its address cannot hold its share against it with
            // connections that are slow or idle: the newcomer, the youngest,
            // takes the place of its source's own oldest such (never one
            // answering); it waits while the only ones are just set up.
            // Refused only when every one is answering.
            if room == 0 {
                return Err(Refused::SetUp);
            }
            slot = Some(t.own_victim(source, now, self.grace_ms, self.share_refusal())?);
        } else if t.open >= self.caps.connections && t.handshaking < self.caps.handshakes {
            let other = (room > 0).then(|| t.connection_victim(source, held.candidates));
            slot = Some(other.flatten().ok_or(Refused::Connections)?);
        }
        let mut handshake = None;
        if t.handshaking >= self.caps.handshakes && !slot.as_ref().is_some_and(|v| v.handshaking) {
            // A handshake slot held by another source gives way, as before
            // (a flood of slow handshakes from a few addresses cannot shut
            // the others out); if none does, the newcomer is not refused
            // but waits for one: an API server whose pool is cold dials
            // more at once than there are slots, all from one address.
            let needed = 1 + usize::from(slot.is_some());
            let other = (room >= needed).then(|| t.handshake_victim(source, held.handshakes));
            handshake = Some(other.flatten().ok_or(Refused::Handshakes)?);
        }
        let evicted = [slot, handshake].into_iter().flatten().map(|v| t.evict(v)).collect();
        let conn = Arc::new(Conn::new());
        conn.admitted.store(now, Ordering::Relaxed);
        let id = t.add(source, conn.clone());
        drop(t);
        let ticket = Ticket {
            fair: self.clone(),
            source,
            id,
            conn,
            answering: AtomicBool::new(false),
        };
        Ok(Admitted { ticket, evicted })
    }

    /// Why a source at its share with nothing to give way is refused: at a
    /// share of 100% that is the cap itself, and named so.
    fn share_refusal(&self) -> Refused {
        match self.caps.per_source(self.caps.connections) >= self.caps.connections {
            true => Refused::Connections,
            false => Refused::SourceShare,
        }
    }
}

/// What one source holds.
struct Held {
    connections: usize,
    handshakes: usize,
    candidates: usize,
}

/// Whether a source holding `held` may give way to a newcomer whose source
/// holds `newcomer`: it must hold two more, so the swap leaves the shares
/// more even (two sources cannot take turns evicting each other), except
/// that a source holding nothing may take from one holding a single slot.
pub(super) fn gives_way(held: usize, newcomer: usize) -> bool {
    held > newcomer + usize::from(newcomer > 0)
}

impl Table {
    fn held(&self, source: Source) -> Held {
        self.sources.get(&source).map_or(
            Held {
                connections: 0,
                handshakes: 0,
                candidates: 0,
            },
            |h| Held {
                connections: h.connections,
                handshakes: h.handshakes.len(),
                candidates: h.candidates.len(),
            },
        )
    }

    fn add(&mut self, source: Source, conn: Arc<Conn>) -> u64 {
        let id = self.next;
        self.next += 1;
        let holding = self.sources.entry(source).or_default();
        holding.connections += 1;
        holding.handshakes.insert(id);
        holding.candidates.insert(id, conn);
        self.open += 1;
        self.handshaking += 1;
        id
    }

    /// The connection of `source` that gives way to its own newcomer when
    /// it is at its share, the first not [`Conn::waiting_on_us`] (at most
    /// [`PROBES`] looked at), or why there is none:
    /// 1. one whose handshake ended more than [`SETUP_GRACE_MS`] ago (the
    ///    first of `grace_ms`) and whose first request has not arrived
    ///    whole: slow; oldest first;
    /// 2. one in its handshake for more than [`HANDSHAKE_GRACE_MS`] (the
    ///    second), oldest first;
    /// 3. while the source still has a connection being set up (younger,
    ///    or waiting on the server), none: the newcomer waits
    ///    (`Refused::SetUp`). That one is most likely the API server's own,
    ///    about to send its request, or soon slow (1. or 2.);
    /// 4. with none being set up, one idle between requests, the longest
    ///    idle first: an API server's client reuses its most recently used
    ///    connection first, so the longest idle is the least likely to be
    ///    written on as it closes (Go's net/http at golang/go a925402b,
    ///    src/net/http/transport.go: `queueForIdleConn` takes the idle
    ///    list's last, `removeIdleConnLocked` keeps "most recently-used
    ///    conns at the end"). Last, because closing a kept connection can
    ///    still race a request written on it, which is not sent again (see
    ///    the module's notes); a slow one costs no one a request.
    ///
    /// Never one answering a request, nor a kept connection whose next
    /// request has begun to arrive. `refused` when every connection of the
    /// source is answering.
    fn own_victim(&self, source: Source, now: u64, grace_ms: (u64, u64), refused: Refused) -> Result<Victim, Refused> {
        let h = self.sources.get(&source).ok_or(refused)?;
        let old = |at: &AtomicU64, grace: u64| at.load(Ordering::Relaxed).saturating_add(grace) <= now;
        let slow = h
            .candidates
            .iter()
            .filter(|(id, c)| !h.handshakes.contains(id) && old(&c.set_up, grace_ms.0));
        let handshakes = h
            .candidates
            .iter()
            .filter(|(id, c)| h.handshakes.contains(id) && old(&c.admitted, grace_ms.1));
        let mut probes = slow.chain(handshakes).take(PROBES);
        let found = match probes.find(|(_, c)| !c.waiting_on_us()) {
            Some(found) => Some(found),
            None if !h.candidates.is_empty() => return Err(Refused::SetUp),
            None => {
                let idle = h.idle.values().map(|(id, c)| (id, c));
                idle.take(PROBES).find(|(_, c)| !c.waiting_on_us())
            }
        };
        match found {
            Some((id, conn)) => Ok(Victim {
                source,
                id: *id,
                conn: conn.clone(),
                handshaking: h.handshakes.contains(id),
            }),
            None if h.idle.is_empty() => Err(refused),
            None => Err(Refused::SetUp),
        }
    }

    /// The oldest handshake of the source holding the most handshakes, if it
    /// [`gives_way`] to the newcomer's `held`.
    fn handshake_victim(&self, newcomer: Source, held: usize) -> Option<Victim> {
        let victim = self.victim(
            newcomer,
            |h| gives_way(h.handshakes.len(), held).then_some(h.handshakes.len()),
            true,
        );
        victim.map(|(source, id)| self.candidate(source, id))
    }

    /// The oldest candidate of the source holding the most candidates, if
    /// it [`gives_way`] to the newcomer's `held`.
    fn connection_victim(&self, newcomer: Source, held: usize) -> Option<Victim> {
        let victim = self.victim(
            newcomer,
            |h| gives_way(h.candidates.len(), held).then_some(h.candidates.len()),
            false,
        );
        victim.map(|(source, id)| self.candidate(source, id))
    }

    fn candidate(&self, source: Source, id: u64) -> Victim {
        let h = &self.sources[&source];
        Victim {
            source,
            id,
            conn: h.candidates[&id].clone(),
            handshaking: h.handshakes.contains(&id),
        }
    }

    /// The victim: among the sources `weight` lets give way (other than the
    /// newcomer's), the heaviest first (among equals, the one whose oldest
    /// is the oldest), its oldest candidate (its oldest handshake when
    /// `handshakes`) that is not [`Conn::waiting_on_us`]; at most
    /// [`PROBES`] candidates looked at. One pass over the sources finds the
    /// heaviest; only when none of its candidates will do are the others
    /// sorted.
    fn victim(
        &self,
        newcomer: Source,
        weight: impl Fn(&Holding) -> Option<usize>,
        handshakes: bool,
    ) -> Option<(Source, u64)> {
        let order = |a: &(usize, u64, Source), b: &(usize, u64, Source)| b.0.cmp(&a.0).then(a.1.cmp(&b.1));
        let mut eligible = self
            .sources
            .iter()
            .filter(|(s, _)| **s != newcomer)
            .filter_map(|(s, h)| Some((weight(h)?, h.may_give_way(handshakes).next()?, *s)));
        let heaviest = eligible.clone().min_by(order)?;
        let mut probes = 0;
        let mut try_source = |source: Source| {
            let holding = &self.sources[&source];
            for id in holding.may_give_way(handshakes) {
                if probes == PROBES {
                    return None;
                }
                probes += 1;
                if !holding.candidates[&id].waiting_on_us() {
                    return Some((source, id));
                }
            }
            None
        };
        if let Some(victim) = try_source(heaviest.2) {
            return Some(victim);
        }
        let mut rest: Vec<(usize, u64, Source)> = eligible.by_ref().filter(|e| e.2 != heaviest.2).collect();
        rest.sort_unstable_by(order);
        rest.into_iter().find_map(|(_, _, source)| try_source(source))
    }

    /// Takes a candidate, or an idle connection, out of the counts and
    /// tells its task to close it.
    fn evict(&mut self, victim: Victim) -> Phase {
        let (handshaking, idle) = self.remove(victim.source, victim.id, &victim.conn);
        victim.conn.evicted.store(true, Ordering::Relaxed);
        victim.conn.wake.notify_one();
        self.dying += 1;
        match (handshaking, idle) {
            (true, _) => Phase::Handshake,
            (false, true) => Phase::Idle,
            (false, false) => Phase::Request,
        }
    }

    /// Takes connection `id` out of `source`'s holding and the totals; the
    /// source's entry goes with its last connection. Whether it was in its
    /// handshake, and whether it was idle.
    fn remove(&mut self, source: Source, id: u64, conn: &Conn) -> (bool, bool) {
        let Some(holding) = self.sources.get_mut(&source) else {
            return (false, false);
        };
        let handshaking = holding.handshakes.remove(&id);
        holding.candidates.remove(&id);
        let since = conn.since.swap(NOT_IDLE, Ordering::Relaxed);
        let idle = since != NOT_IDLE && holding.idle.remove(&since).is_some();
        holding.connections -= 1;
        if holding.connections == 0 {
            self.sources.remove(&source);
        }
        self.handshaking -= usize::from(handshaking);
        self.open -= 1;
        (handshaking, idle)
    }
}

impl Ticket {
    /// The connection's socket, so that one waiting on the server is not
    /// chosen to give way (see [`Conn::waiting_on_us`]).
    pub fn watch(&self, fd: RawFd) {
        self.conn.fd.store(fd, Ordering::Relaxed);
    }

    /// The TLS handshake is over: the handshake slot is given back (the
    /// connection may still give way until its first request arrives), and
    /// the accept loop told, for a connection that waits for one.
    pub fn handshaken(&self) {
        let mut t = self.fair.lock();
        if self.conn.evicted.load(Ordering::Relaxed) {
            return;
        }
        self.conn.set_up.store(self.fair.now(), Ordering::Relaxed);
        let t = &mut *t;
        if let Some(holding) = t.sources.get_mut(&self.source)
            && holding.handshakes.remove(&self.id)
        {
            t.handshaking -= 1;
            self.fair.freed.notify_one();
        }
    }

    /// A request has arrived whole and is being answered: from now on this
    /// connection never gives way to another source's newcomer. Cheap after
    /// the first call.
    pub fn answering(&self) {
        if self.answering.load(Ordering::Relaxed) {
            return;
        }
        let mut t = self.fair.lock();
        if !self.conn.evicted.load(Ordering::Relaxed)
            && let Some(holding) = t.sources.get_mut(&self.source)
        {
            holding.candidates.remove(&self.id);
        }
        drop(t);
        self.answering.store(true, Ordering::Relaxed);
    }

    /// Its answer is flushed and nothing of a next request has been read:
    /// it is idle, and may give way to a newcomer of its own source at its
    /// share (the longest idle first). Only once it has answered a request.
    pub fn idle(&self) {
        if !self.answering.load(Ordering::Relaxed) {
            return;
        }
        let mut t = self.fair.lock();
        if self.conn.evicted.load(Ordering::Relaxed) {
            return;
        }
        let since = t.next;
        t.next += 1;
        if let Some(holding) = t.sources.get_mut(&self.source) {
            let old = self.conn.since.swap(since, Ordering::Relaxed);
            if old != NOT_IDLE {
                holding.idle.remove(&old);
            }
            holding.idle.insert(since, (self.id, self.conn.clone()));
        }
        // A connection waiting for its source's share may take this one's place.
        self.fair.freed.notify_one();
    }

    /// The first byte of a next request has been read: no longer idle (a
    /// request an API server has begun to write is never cut). No lock
    /// unless it was idle.
    pub fn busy(&self) {
        if self.conn.since.load(Ordering::Relaxed) == NOT_IDLE {
            return;
        }
        let mut t = self.fair.lock();
        let since = self.conn.since.swap(NOT_IDLE, Ordering::Relaxed);
        if since != NOT_IDLE
            && let Some(holding) = t.sources.get_mut(&self.source)
        {
            holding.idle.remove(&since);
        }
    }

    /// Resolves when this connection has been chosen to give way.
    pub async fn evicted(&self) {
        self.conn.wake.notified().await;
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut t = self.fair.lock();
        self.conn.fd.store(-1, Ordering::Relaxed);
        if self.conn.evicted.load(Ordering::Relaxed) {
            t.dying -= 1;
            self.fair.ended.notify_one();
        } else {
            // A handshake slot, or a place in its source's share, for one
            // that waits.
            t.remove(self.source, self.id, &self.conn);
            self.fair.freed.notify_one();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    fn fair(connections: usize, handshakes: usize, source_share: u8) -> Arc<Fair> {
        Fair::new(Caps {
            connections,
            handshakes,
            source_share,
        })
    }

    /// Admits from `ip` a connection that finished its handshake.
    fn open(fair: &Arc<Fair>, ip: IpAddr) -> Ticket {
        let admitted = fair.admit(ip).unwrap_or_else(|e| panic!("{ip}: {e:?}"));
        assert!(admitted.evicted.is_empty());
        admitted.ticket.handshaken();
        admitted.ticket
    }

    impl Ticket {
        fn is_evicted(&self) -> bool {
            self.conn.evicted.load(Ordering::Relaxed)
        }
    }

    #[test]
    fn a_source_is_an_ipv4_address_or_a_whole_ipv6_address() {
        let v6 = |s: &str| Source::of(s.parse::<Ipv6Addr>().unwrap().into());
        // Two addresses of one /64 (a node subnet the API server's own
        // addresses are in, on EKS) are two sources.
        assert_ne!(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:ffff:ffff:ffff:ffff"));
        assert_ne!(v6("2001:db8:1:2::1"), v6("2001:db8:1:3::1"));
        assert_eq!(v6("2001:db8:1:2::1"), v6("2001:db8:1:2:0:0:0:1"));
        assert_eq!(
            v6("::ffff:10.0.0.1"),
            Source::of(IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)))
        );
        assert_ne!(Source::of(ip(1)), Source::of(ip(2)));
    }

    /// Admits from `ip` a connection that has answered a request.
    fn answering(fair: &Arc<Fair>, ip: IpAddr) -> Ticket {
        let ticket = open(fair, ip);
        ticket.answering();
        ticket
    }

    #[test]
    fn no_source_holds_more_than_its_share_of_the_connections() {
        // 25% of 8 connections: 2.
        let fair = fair(8, 4, 25);
        let _first = answering(&fair, ip(2));
        let _second = answering(&fair, ip(2));
        assert_eq!(
            fair.admit(ip(2)).err(),
            Some(Refused::SourceShare),
            "a third connection, both of the first two answering"
        );
        // Another source is not held back, and the server is far from full.
        let _other = open(&fair, ip(3));
        assert_eq!(fair.counts().open, 3);
        // At 100% the share is the cap itself, and named so.
        let whole = self::fair(2, 2, 100);
        let _a = answering(&whole, ip(2));
        let _b = answering(&whole, ip(2));
        assert_eq!(whole.admit(ip(2)).err(), Some(Refused::Connections));
    }

    #[test]
    fn a_source_at_its_share_makes_room_from_its_own_oldest_slow_connection_then_an_idle_one_never_one_answering() {
        // 25% of 12: 3 for each source; no graces, so a connection set up is slow at once.
        let fair = Fair::with_grace(
            Caps {
                connections: 12,
                handshakes: 8,
                source_share: 25,
            },
            (0, 0),
        );
        let busy = answering(&fair, ip(2));
        let idle = answering(&fair, ip(2));
        idle.idle();
        let slow = open(&fair, ip(2));
        // At its share: its newcomer takes the slow one's place, not the idle one's ...
        let first = fair.admit(ip(2)).unwrap();
        assert_eq!(first.evicted, [Phase::Request]);
        assert!(slow.is_evicted() && !idle.is_evicted() && !busy.is_evicted());
        // ... then, slow in its handshake, the first's.
        let second = fair.admit(ip(2)).unwrap();
        assert_eq!(second.evicted, [Phase::Handshake]);
        assert!(first.ticket.is_evicted() && !idle.is_evicted());
        // With none being set up, the idle one's (a kept connection between requests).
        second.ticket.handshaken();
        second.ticket.answering();
        let third = fair.admit(ip(2)).unwrap();
        assert_eq!(third.evicted, [Phase::Idle]);
        assert!(idle.is_evicted() && !busy.is_evicted() && !second.ticket.is_evicted());
        // Every one answering (or idle with its next request begun): refused.
        third.ticket.handshaken();
        third.ticket.answering();
        second.ticket.idle();
        second.ticket.busy();
        assert_eq!(fair.admit(ip(2)).err(), Some(Refused::SourceShare));
        assert!(!busy.is_evicted() && !second.ticket.is_evicted() && !third.ticket.is_evicted());
        // Another source was never asked.
        let _other = open(&fair, ip(3));
        assert_eq!(fair.counts().open, 4);
    }

    #[test]
    fn a_newcomer_at_its_share_waits_while_its_sources_connections_are_just_set_up() {
        // A connection whose handshake has just ended, or just begun, is most
        // likely the API server's, about to send its request (graces of a
        // minute, so that nothing here grows slow). 25% of 8: 2.
        let fair = Fair::with_grace(
            Caps {
                connections: 8,
                handshakes: 8,
                source_share: 25,
            },
            (60_000, 60_000),
        );
        let idle = answering(&fair, ip(2));
        idle.idle();
        let just_set_up = open(&fair, ip(2));
        // It waits (as for a handshake slot) rather than cut the one being set
        // up, or close the idle one while it could soon have a slow one's place.
        assert_eq!(fair.admit(ip(2)).err(), Some(Refused::SetUp));
        assert!(Refused::SetUp.waits() && Refused::Handshakes.waits() && !Refused::SourceShare.waits());
        assert!(!just_set_up.is_evicted() && !idle.is_evicted());
        // Once that one is answering, the idle one gives way.
        just_set_up.answering();
        let newcomer = fair.admit(ip(2)).unwrap();
        assert_eq!(newcomer.evicted, [Phase::Idle]);
        assert!(idle.is_evicted() && !just_set_up.is_evicted());
    }

    #[test]
    fn a_burst_of_handshakes_from_one_source_takes_every_free_handshake_slot() {
        // An API server with a cold pool dials as many connections at once
        // as it has admissions: 25% of 8 handshakes would be 2, but while
        // slots are free none of its dials is refused.
        let fair = fair(64, 8, 25);
        let burst: Vec<Ticket> = (0..8).map(|_| fair.admit(ip(2)).unwrap().ticket).collect();
        assert_eq!(fair.counts().handshaking, 8);
        // Full: its own next dial has no one to take from, and is told to
        // wait for a slot (the accept loop keeps it, `waiting`) ...
        assert_eq!(fair.admit(ip(2)).err(), Some(Refused::Handshakes));
        // ... and another source's newcomer takes the oldest's place.
        let newcomer = fair.admit(ip(3)).unwrap();
        assert_eq!(newcomer.evicted, [Phase::Handshake]);
        assert!(burst[0].is_evicted() && !burst[1].is_evicted());
        // A slot given back is told, and goes first to the waiting connection
        // whose source holds the fewest handshakes.
        let freed = fair.freed();
        tokio::pin!(freed);
        assert!(futures_ready(freed.as_mut()).is_none(), "nothing freed yet");
        burst[1].handshaken();
        assert!(futures_ready(freed.as_mut()).is_some(), "the freed slot is told");
        assert_eq!(fair.order([ip(2), ip(4), ip(3), ip(4)].into_iter()), [1, 3, 2, 0]);
    }

    /// Polls `f` once.
    fn futures_ready<F: std::future::Future>(f: std::pin::Pin<&mut F>) -> Option<F::Output> {
        let waker = std::task::Waker::noop();
        match f.poll(&mut std::task::Context::from_waker(waker)) {
            std::task::Poll::Ready(v) => Some(v),
            std::task::Poll::Pending => None,
        }
    }

    #[test]
    fn when_full_a_newcomer_from_a_lighter_source_evicts_the_oldest_candidate_of_the_heaviest() {
        let fair = fair(4, 4, 100);
        let heavy: Vec<Ticket> = (0..3).map(|_| open(&fair, ip(2))).collect();
        let light = open(&fair, ip(3));
        // Full. A newcomer from a source holding nothing gets in.
        let newcomer = fair.admit(ip(4)).unwrap();
        assert_eq!(newcomer.evicted, [Phase::Request]);
        assert!(heavy[0].is_evicted(), "the heaviest source's oldest gives way");
        assert!(!heavy[1].is_evicted() && !heavy[2].is_evicted() && !light.is_evicted());
        assert_eq!(fair.counts().open, 4);
        // The heavy source (2 candidates, the others 1) has its fair share: refused.
        assert_eq!(fair.admit(ip(2)).err(), Some(Refused::Connections));
        // So is one holding one less than the heaviest (a swap would only reverse them).
        assert_eq!(fair.admit(ip(3)).err(), Some(Refused::Connections));
        drop(heavy);
        assert_eq!(
            fair.counts(),
            Counts {
                open: 2,
                handshaking: 1,
                sources: 2,
                waiting: 0
            }
        );
    }

    #[test]
    fn a_source_with_a_large_pool_of_answered_connections_still_gets_a_newcomer_in() {
        let fair = fair(10, 10, 100);
        // An API server's pool: six connections, each answered once.
        let pool: Vec<Ticket> = (0..6).map(|_| open(&fair, ip(2))).collect();
        pool.iter().for_each(Ticket::answering);
        // Two slow clients from each of two other sources: full.
        let slow: Vec<Ticket> = [3, 3, 4, 4].iter().map(|last| open(&fair, ip(*last))).collect();
        // The pool's source holds the most connections but no candidate:
        // its new connection takes the oldest slow client's place.
        let newcomer = fair.admit(ip(2)).unwrap();
        assert_eq!(newcomer.evicted, [Phase::Request]);
        assert!(slow[0].is_evicted() && pool.iter().all(|t| !t.is_evicted()));
    }

    #[test]
    fn a_candidate_whose_client_has_sent_what_the_server_has_not_read_yet_is_passed_over() {
        use std::io::Write;
        use std::os::fd::AsRawFd;
        use std::os::unix::net::UnixStream;
        let fair = fair(3, 3, 100);
        let (older_end, mut older_client) = UnixStream::pair().unwrap();
        let (younger_end, _younger_client) = UnixStream::pair().unwrap();
        let older = open(&fair, ip(2));
        older.watch(older_end.as_raw_fd());
        let younger = open(&fair, ip(2));
        younger.watch(younger_end.as_raw_fd());
        let other = open(&fair, ip(3));
        // The older one's client has sent its request; the server's task has not read it yet.
        older_client.write_all(b"GET /healthz HTTP/1.1\r\n\r\n").unwrap();
        let _first = fair.admit(ip(4)).unwrap();
        assert!(
            younger.is_evicted() && !older.is_evicted(),
            "the server's delay is not the client's"
        );
        // Every source now holds one candidate: the oldest not waiting on the server gives way.
        let _second = fair.admit(ip(5)).unwrap();
        assert!(other.is_evicted() && !older.is_evicted());
        // When every candidate that could give way waits on the server, the newcomer is refused.
        let only = self::fair(1, 1, 100);
        let waiting = only.admit(ip(2)).unwrap().ticket;
        waiting.watch(older_end.as_raw_fd());
        assert_eq!(only.admit(ip(3)).err(), Some(Refused::Handshakes));
    }

    #[test]
    fn a_connection_answering_a_request_never_gives_way() {
        let fair = fair(3, 3, 100);
        let answering = open(&fair, ip(2));
        answering.answering();
        let slow = open(&fair, ip(2));
        let pooled = open(&fair, ip(3));
        pooled.answering();
        // Full: the heaviest source's oldest candidate is the slow one, not the older answering one.
        let newcomer = fair.admit(ip(4)).unwrap();
        assert!(slow.is_evicted() && !answering.is_evicted());
        newcomer.ticket.handshaken();
        newcomer.ticket.answering();
        // Full again, and no connection is a candidate: the next newcomer is refused.
        assert_eq!(fair.admit(ip(5)).err(), Some(Refused::Connections));
        assert!(!answering.is_evicted() && !pooled.is_evicted() && !newcomer.ticket.is_evicted());
    }

    #[test]
    fn when_the_handshakes_are_full_the_heaviest_sources_oldest_handshake_gives_way() {
        let fair = fair(10, 2, 100);
        let silent: Vec<Ticket> = (0..2).map(|_| fair.admit(ip(2)).unwrap().ticket).collect();
        assert_eq!(fair.admit(ip(2)).err(), Some(Refused::Handshakes));
        let newcomer = fair.admit(ip(3)).unwrap();
        assert_eq!(newcomer.evicted, [Phase::Handshake]);
        assert!(silent[0].is_evicted() && !silent[1].is_evicted());
        assert_eq!(
            fair.counts(),
            Counts {
                open: 2,
                handshaking: 2,
                sources: 2,
                waiting: 0
            }
        );
        // Both sources hold one handshake each: the next newcomer from a third
        // source (0 < 2/3) takes the oldest of the two.
        let third = fair.admit(ip(4)).unwrap();
        assert_eq!(third.evicted, [Phase::Handshake]);
        assert!(silent[1].is_evicted() && !newcomer.ticket.is_evicted());
    }

    #[test]
    fn evicted_connections_not_yet_closed_are_bounded() {
        // 2 handshakes: at most 2 evicted connections may wait for their task.
        let fair = fair(2, 2, 100);
        let mut kept = Vec::new();
        let _a = open(&fair, ip(2));
        let _b = open(&fair, ip(2));
        for last in 3..5 {
            // Each newcomer from a new source evicts one of source 2's, or the previous newcomer's.
            let admitted = fair.admit(ip(last)).unwrap();
            assert!(!admitted.evicted.is_empty());
            admitted.ticket.handshaken();
            kept.push(admitted.ticket);
        }
        assert_eq!(fair.lock().dying, 2);
        assert_eq!(fair.admit(ip(9)).err(), Some(Refused::Connections), "two already dying");
        drop((_a, _b));
        assert_eq!(fair.lock().dying, 0);
        assert!(fair.admit(ip(9)).is_ok());
    }

    #[test]
    fn a_million_sources_never_hold_more_entries_than_connection_slots() {
        let fair = fair(64, 16, 25);
        let mut held: std::collections::VecDeque<Ticket> = Default::default();
        let mut seed = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = || {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed
        };
        let (mut admitted, mut refused) = (0, 0);
        for i in 0..1_000_000u32 {
            let r = next();
            let ip = if i % 2 == 0 {
                IpAddr::V4(Ipv4Addr::from(r as u32))
            } else {
                IpAddr::V6(Ipv6Addr::from(u128::from(r) << 64 | u128::from(i)))
            };
            match fair.admit(ip) {
                Ok(a) => {
                    admitted += 1;
                    match r % 3 {
                        0 => {}
                        1 => a.ticket.handshaken(),
                        _ => {
                            a.ticket.handshaken();
                            a.ticket.answering();
                        }
                    }
                    held.push_back(a.ticket);
                }
                Err(_) => refused += 1,
            }
            // Connections end now and then, the evicted ones among them.
            if r % 5 == 0 || held.len() > 200 {
                held.pop_front();
            }
            let t = fair.lock();
            assert!(t.sources.len() <= 64, "{} entries", t.sources.len());
            assert!(t.open <= 64 && t.handshaking <= 16 && t.dying <= 16);
        }
        assert!(
            admitted > 100_000 && refused > 100_000,
            "{admitted} admitted, {refused} refused"
        );
        drop(held);
        let t = fair.lock();
        assert_eq!((t.sources.len(), t.open, t.handshaking, t.dying), (0, 0, 0, 0));
    }
}

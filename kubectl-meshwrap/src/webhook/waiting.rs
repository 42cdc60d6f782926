//! Connections accepted while every handshake slot is taken and none may
//! give way, or while their source is at its share and its own
//! connections are all still being set up: they wait here for a slot
//! instead of being refused.
//!
//! An API server speaks HTTP/1.1 to the webhook, one connection per review
//! in flight, and keeps few idle (client-go's `idleConnsPerHost = 25`:
//! kubernetes/kubernetes staging/src/k8s.io/client-go/transport/cache.go,
//! read at 079d5e5f, and so in today's client-go), so a burst of
//! pod creations with a cold pool dials more connections at once than
//! `--max-handshakes`, all from one address. Its handshakes hold every
//! slot, and a source never gives way to itself, so before this queue its
//! excess was closed at accept: a failed pod creation each. The side taken:
//! the API server let in; the connection waits a moment for a slot.
//!
//! Why here and not in the kernel's listen backlog: the accept loop cannot
//! see who waits in the backlog, so stopping it while one connection waits
//! would hold every other address's behind it, and a flood of slow
//! handshakes from one address (whose own newcomers never find a victim)
//! would then keep the API server's connection, which would have taken
//! one of that flood's slots, in the backlog for as long as the flood
//! lasts. A connection waiting here holds an accepted socket and nothing
//! else (no TLS state, no task), and the accept loop goes on: another
//! source's newcomer still takes the place of a slow handshake at once.
//!
//! Bounded: at most `cap` connections wait (`--max-connections`), each at
//! most `wait` (`--client-timeout`, after which it is closed, as a
//! handshake that took that long would be). When full, the source with
//! the most waiting gives way, its oldest, if it holds more than the
//! newcomer's source (by [`super::fair`]'s rule); otherwise the newcomer is
//! closed. A freed slot goes to the waiting connection whose source holds
//! the fewest handshakes ([`super::fair::Fair::order`]), so that a
//! flood's waiting connections do not take the slots its victims free.
//! They are tried again whenever a handshake slot is given back or a
//! connection ends or turns idle ([`super::fair::Fair::freed`]), and every
//! [`super::fair::RETRY_WAITING`] while any wait.

use std::collections::{HashMap, VecDeque};
use std::net::IpAddr;
use std::time::Duration;

use tokio::time::Instant;

use super::fair::Source;

struct Entry<T> {
    item: T,
    ip: IpAddr,
    source: Source,
    since: Instant,
}

/// The connections waiting for a handshake slot, oldest first.
pub struct Waiting<T> {
    entries: VecDeque<Entry<T>>,
    per_source: HashMap<Source, usize>,
    cap: usize,
    wait: Duration,
}

impl<T> Waiting<T> {
    pub fn new(cap: usize, wait: Duration) -> Waiting<T> {
        Waiting {
            entries: VecDeque::new(),
            per_source: HashMap::new(),
            cap: cap.max(1),
            wait,
        }
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Queues `item` from `ip`; what is closed to keep the bound: nothing,
    /// the newcomer itself, or the oldest of the source with the most
    /// waiting.
    pub fn push(&mut self, item: T, ip: IpAddr, now: Instant) -> Option<T> {
        let source = Source::of(ip);
        let mut shed = None;
        if self.entries.len() >= self.cap {
            let newcomer = self.per_source.get(&source).copied().unwrap_or(0);
            let heaviest = self
                .per_source
                .iter()
                .max_by_key(|(_, n)| **n)
                .map(|(s, n)| (*s, *n))
                .filter(|(_, n)| super::fair::gives_way(*n, newcomer));
            let Some((heavy, _)) = heaviest else {
                return Some(item);
            };
            let Some(at) = self.entries.iter().position(|e| e.source == heavy) else {
                return Some(item);
            };
            shed = self.remove(at).map(|(item, _)| item);
        }
        *self.per_source.entry(source).or_default() += 1;
        self.entries.push_back(Entry {
            item,
            ip,
            source,
            since: now,
        });
        shed
    }

    /// The waiting connections' addresses, oldest first.
    pub fn ips(&self) -> impl Iterator<Item = IpAddr> + '_ {
        self.entries.iter().map(|e| e.ip)
    }

    /// The connection at `at` (of [`Waiting::ips`]).
    pub fn get_mut(&mut self, at: usize) -> Option<&mut T> {
        self.entries.get_mut(at).map(|e| &mut e.item)
    }

    /// Takes out the connection at `at` (of [`Waiting::ips`]).
    pub fn remove(&mut self, at: usize) -> Option<(T, IpAddr)> {
        let entry = self.entries.remove(at)?;
        if let Some(n) = self.per_source.get_mut(&entry.source) {
            *n -= 1;
            if *n == 0 {
                self.per_source.remove(&entry.source);
            }
        }
        Some((entry.item, entry.ip))
    }

    /// When the oldest has waited its bound.
    pub fn next_expiry(&self) -> Option<Instant> {
        self.entries.front().map(|e| e.since + self.wait)
    }

    /// Takes out every connection that has waited its bound by `now`.
    pub fn expired(&mut self, now: Instant) -> Vec<T> {
        let mut out = Vec::new();
        while self.entries.front().is_some_and(|e| e.since + self.wait <= now) {
            out.extend(self.remove(0).map(|(item, _)| item));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::Ipv4Addr;

    fn ip(last: u8) -> IpAddr {
        IpAddr::V4(Ipv4Addr::new(127, 0, 0, last))
    }

    #[test]
    fn connections_wait_oldest_first_each_within_its_bound() {
        let start = Instant::now();
        let mut waiting = Waiting::new(8, Duration::from_secs(10));
        assert_eq!(waiting.push("a", ip(1), start), None);
        assert_eq!(waiting.push("b", ip(2), start + Duration::from_secs(1)), None);
        assert_eq!(waiting.ips().collect::<Vec<_>>(), [ip(1), ip(2)]);
        assert_eq!(waiting.next_expiry(), Some(start + Duration::from_secs(10)));
        assert!(waiting.expired(start + Duration::from_millis(9_999)).is_empty());
        assert_eq!(waiting.expired(start + Duration::from_secs(10)), ["a"]);
        assert_eq!(waiting.remove(0), Some(("b", ip(2))));
        assert!(waiting.is_empty() && waiting.per_source.is_empty());
    }

    #[test]
    fn when_full_the_source_with_the_most_waiting_gives_way_or_the_newcomer_is_closed() {
        let now = Instant::now();
        let mut waiting = Waiting::new(3, Duration::from_secs(10));
        for name in ["a1", "a2", "a3"] {
            assert_eq!(waiting.push(name, ip(1), now), None);
        }
        // Full, all from one address: its own next one is closed ...
        assert_eq!(waiting.push("a4", ip(1), now), Some("a4"));
        // ... while another address's takes the place of its oldest.
        assert_eq!(waiting.push("b1", ip(2), now), Some("a1"));
        assert_eq!(waiting.ips().collect::<Vec<_>>(), [ip(1), ip(1), ip(2)]);
        // Two against one: the next from address 2 holds one, which is not
        // two fewer than 2, so it is closed (no turn-taking).
        assert_eq!(waiting.push("b2", ip(2), now), Some("b2"));
        assert_eq!(waiting.len(), 3);
    }
}

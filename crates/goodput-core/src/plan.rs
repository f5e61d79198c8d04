//! What each side of a TCP connection sends and receives, per pattern.

use serde::{Deserialize, Serialize};

/// Direction of data flow within a connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    /// Client to server.
    ClientToServer,
    /// Server to client.
    ServerToClient,
}

impl std::fmt::Display for Direction {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Direction::ClientToServer => "client→server",
            Direction::ServerToClient => "server→client",
        })
    }
}

/// The TCP data-flow pattern (ctsTraffic's `-Pattern`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum TcpPattern {
    /// Client sends, server receives.
    Push,
    /// Server sends, client receives.
    Pull,
    /// Alternating segments, client first, never both at once.
    PushPull,
    /// Both directions at once, half of the transfer each way.
    Duplex,
}

impl TcpPattern {
    /// Wire code of the pattern.
    pub fn code(self) -> u8 {
        match self {
            TcpPattern::Push => 0,
            TcpPattern::Pull => 1,
            TcpPattern::PushPull => 2,
            TcpPattern::Duplex => 3,
        }
    }
    /// The pattern with wire code `c`.
    pub fn from_code(c: u8) -> Option<Self> {
        Some(match c {
            0 => TcpPattern::Push,
            1 => TcpPattern::Pull,
            2 => TcpPattern::PushPull,
            3 => TcpPattern::Duplex,
            _ => return None,
        })
    }
    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            TcpPattern::Push => "push",
            TcpPattern::Pull => "pull",
            TcpPattern::PushPull => "pushpull",
            TcpPattern::Duplex => "duplex",
        }
    }
}

/// Byte budget of one connection: how many pattern bytes go each way and, for
/// push-pull, the segment sizes that decide when the direction flips.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransferPlan {
    /// The pattern.
    pub pattern: TcpPattern,
    /// Total pattern bytes the client sends.
    pub client_to_server: u64,
    /// Total pattern bytes the server sends.
    pub server_to_client: u64,
    /// Push-pull: bytes per client→server segment.
    pub push_segment: u64,
    /// Push-pull: bytes per server→client segment.
    pub pull_segment: u64,
}

impl TransferPlan {
    /// The plan for `transfer` bytes per connection, as ctsTraffic defines it:
    /// push and pull move `transfer` one way; duplex moves half each way (an
    /// odd transfer rounded up so the halves are equal); push-pull alternates
    /// segments until the running total reaches `transfer`, the last one short.
    pub fn new(pattern: TcpPattern, transfer: u64, push_segment: u64, pull_segment: u64) -> Self {
        let (c2s, s2c) = match pattern {
            TcpPattern::Push => (transfer, 0),
            TcpPattern::Pull => (0, transfer),
            TcpPattern::Duplex => {
                let half = transfer / 2 + transfer % 2;
                (half, half)
            }
            TcpPattern::PushPull => pushpull_totals(transfer, push_segment, pull_segment),
        };
        Self {
            pattern,
            client_to_server: c2s,
            server_to_client: s2c,
            push_segment,
            pull_segment,
        }
    }

    /// A timed test's plan: unbounded in each direction that sends (the
    /// senders stop by time). Push-pull has no timed form: nothing moves.
    pub fn timed(pattern: TcpPattern) -> Self {
        let (c2s, s2c) = match pattern {
            TcpPattern::Push => (u64::MAX, 0),
            TcpPattern::Pull => (0, u64::MAX),
            TcpPattern::Duplex => (u64::MAX, u64::MAX),
            TcpPattern::PushPull => (0, 0),
        };
        Self {
            pattern,
            client_to_server: c2s,
            server_to_client: s2c,
            push_segment: 0,
            pull_segment: 0,
        }
    }

    /// Total pattern bytes in both directions (saturating: a duplex plan of
    /// `u64::MAX` bytes rounds its halves up past it).
    pub fn total(&self) -> u64 {
        self.client_to_server.saturating_add(self.server_to_client)
    }

    /// The push-pull segments in order: (direction, length). Empty for other
    /// patterns.
    pub fn segments(&self) -> PushPullSegments {
        PushPullSegments {
            remaining: if self.pattern == TcpPattern::PushPull {
                self.total()
            } else {
                0
            },
            next: Direction::ClientToServer,
            push: self.push_segment,
            pull: self.pull_segment,
        }
    }
}

fn pushpull_totals(transfer: u64, push: u64, pull: u64) -> (u64, u64) {
    if push == 0 || pull == 0 {
        return (0, 0);
    }
    // Segments that add up past u64::MAX are longer than any transfer:
    // the plan is the first push and whatever of the first pull is left.
    let (full, rest) = match push.checked_add(pull) {
        Some(round) => (transfer / round, transfer % round),
        None => (0, transfer),
    };
    let c2s = full * push + rest.min(push);
    let s2c = full * pull + rest.saturating_sub(push);
    (c2s, s2c)
}

/// Iterator over push-pull segments.
#[derive(Debug, Clone)]
pub struct PushPullSegments {
    remaining: u64,
    next: Direction,
    push: u64,
    pull: u64,
}

impl Iterator for PushPullSegments {
    type Item = (Direction, u64);
    fn next(&mut self) -> Option<Self::Item> {
        if self.remaining == 0 || self.push == 0 || self.pull == 0 {
            return None;
        }
        let dir = self.next;
        let size = match dir {
            Direction::ClientToServer => self.push,
            Direction::ServerToClient => self.pull,
        };
        let n = size.min(self.remaining);
        self.remaining -= n;
        self.next = match dir {
            Direction::ClientToServer => Direction::ServerToClient,
            Direction::ServerToClient => Direction::ClientToServer,
        };
        Some((dir, n))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        /// Any segment sizes and transfer (the peer chooses them all) plan
        /// without a panic, and the plan moves exactly the transfer.
        #[test]
        fn pushpull_plans_any_numbers_exactly(t in any::<u64>(), a in 1..=u64::MAX, b in 1..=u64::MAX) {
            let p = TransferPlan::new(TcpPattern::PushPull, t, a, b);
            prop_assert_eq!(u128::from(p.client_to_server) + u128::from(p.server_to_client), u128::from(t));
            let mut segs = p.segments();
            let first = segs.next();
            if t > 0 {
                prop_assert_eq!(first, Some((Direction::ClientToServer, t.min(a))));
            }
        }

        #[test]
        fn duplex_total_never_wraps(t in any::<u64>()) {
            let p = TransferPlan::new(TcpPattern::Duplex, t, 0, 0);
            prop_assert!(p.total() >= t);
        }
    }

    #[test]
    fn pushpull_segments_summing_past_u64_max_plan_one_round() {
        // The hello that used to divide by zero: push + pull wrapped to 0.
        let p = TransferPlan::new(TcpPattern::PushPull, 1 << 30, 1 << 63, 1 << 63);
        assert_eq!((p.client_to_server, p.server_to_client), (1 << 30, 0));
        let p = TransferPlan::new(TcpPattern::PushPull, u64::MAX, u64::MAX - 1, 3);
        assert_eq!((p.client_to_server, p.server_to_client), (u64::MAX - 1, 1));
    }

    #[test]
    fn duplex_rounds_odd_transfer_up() {
        let p = TransferPlan::new(TcpPattern::Duplex, 1001, 0, 0);
        assert_eq!((p.client_to_server, p.server_to_client), (501, 501));
    }

    #[test]
    fn push_and_pull_move_transfer_one_way() {
        let p = TransferPlan::new(TcpPattern::Push, 10, 0, 0);
        assert_eq!((p.client_to_server, p.server_to_client), (10, 0));
        let p = TransferPlan::new(TcpPattern::Pull, 10, 0, 0);
        assert_eq!((p.client_to_server, p.server_to_client), (0, 10));
    }

    #[test]
    fn pushpull_segments_sum_to_totals() {
        for (t, a, b) in [
            (10u64, 3u64, 2u64),
            (1 << 20, 1000, 3000),
            (7, 10, 10),
            (5, 3, 2),
            (0, 1, 1),
        ] {
            let p = TransferPlan::new(TcpPattern::PushPull, t, a, b);
            let segs: Vec<_> = p.segments().collect();
            let c2s: u64 = segs
                .iter()
                .filter(|s| s.0 == Direction::ClientToServer)
                .map(|s| s.1)
                .sum();
            let s2c: u64 = segs
                .iter()
                .filter(|s| s.0 == Direction::ServerToClient)
                .map(|s| s.1)
                .sum();
            assert_eq!(c2s, p.client_to_server, "{t} {a} {b}");
            assert_eq!(s2c, p.server_to_client, "{t} {a} {b}");
            assert_eq!(c2s + s2c, t);
            for w in segs.windows(2) {
                assert_ne!(w[0].0, w[1].0, "segments alternate");
            }
        }
        let segs: Vec<_> = TransferPlan::new(TcpPattern::PushPull, 10, 3, 2)
            .segments()
            .collect();
        assert_eq!(
            segs,
            vec![
                (Direction::ClientToServer, 3),
                (Direction::ServerToClient, 2),
                (Direction::ClientToServer, 3),
                (Direction::ServerToClient, 2)
            ]
        );
    }
}

//! The router policies of docs/clusters.md, on a plain view of the
//! replicas (one [`Load`] each), so they can be tested on hand-built
//! states. The driver fills the view as the visibility rule says; ties go
//! to the lowest replica index. Work per arrival: one pass over the
//! replicas (plus, for `prefix_affinity`, each replica's cache lookup).

use std::collections::HashMap;

use rand::RngExt;
use rand_chacha::ChaCha8Rng;

use llmsim_core::engine::Engine;
use llmsim_scenario::config::Router;

/// Stream number of the `random` router's draws (the workload uses 0, 1,
/// 2 and its content streams).
const ROUTER_STREAM: u64 = 0x726f_7574_6572; // "router"

/// What the router knows of one replica when a request arrives.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Load {
    /// Requests routed to it and not finished (or rejected).
    pub outstanding: u64,
    /// Blocks with a reference plus, for every queued (pending or waiting)
    /// request, `ceil((P+g)/bs)`: the `least_kv` quantity.
    pub active_blocks: u64,
    /// The arriving request's prefix-cache hit there, in blocks (only
    /// filled for `prefix_affinity`).
    pub hit_blocks: u32,
}

impl Load {
    /// What the router sees of `engine` now (the caller decides when that
    /// is: the visibility rule), with `outstanding` requests routed there
    /// and, for `prefix_affinity`, the arriving request's block hashes and
    /// prompt length (`None` leaves `hit_blocks` 0). The one definition the
    /// planner's cluster loop and `llmsim serve`'s replicas share.
    pub fn of(engine: &Engine, outstanding: u64, affinity: Option<(&[u64], u32)>) -> Load {
        Load {
            outstanding,
            active_blocks: u64::from(engine.kv_blocks_used()) + engine.queued_blocks(),
            hit_blocks: affinity.map_or(0, |(hashes, prompt)| engine.prefix_hit_blocks(hashes, prompt)),
        }
    }
}

/// What the router knows of the arriving request.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Arrival {
    /// `ceil(P / block_size)`: its prompt's blocks.
    pub prompt_blocks: u64,
    /// Its conversation, if it is a turn of one.
    pub session: Option<u64>,
}

/// A router and its state.
pub struct RouterState {
    policy: Router,
    overlap_weight: f64,
    /// Requests routed so far (the round-robin turn).
    routed: u64,
    rng: ChaCha8Rng,
    /// `session_affinity`: where each conversation's first turn went.
    /// Looked up by key only, never iterated.
    sessions: HashMap<u64, u32>,
    /// Smooth weighted round robin's current weights, by replica.
    smooth: Vec<f64>,
}

/// What mixed pools' replicas can serve (docs/clusters.md, "Mixed
/// pools"), one entry a replica: the routers weigh them by it.
#[derive(Copy, Clone, Debug)]
pub struct Weights<'a> {
    /// How fast it serves: its pool's one-token steps a second.
    pub speed: &'a [f64],
    /// Its KV blocks.
    pub blocks: &'a [f64],
}

impl RouterState {
    pub fn new(policy: Router, overlap_weight: f64, seed: u64) -> RouterState {
        RouterState {
            policy,
            overlap_weight,
            routed: 0,
            rng: crate::workload::stream(seed, ROUTER_STREAM),
            sessions: HashMap::new(),
            smooth: Vec::new(),
        }
    }

    pub fn policy(&self) -> Router {
        self.policy
    }

    /// Picks the replica (an index into `loads`, which is not empty).
    pub fn route(&mut self, a: &Arrival, loads: &[Load]) -> usize {
        self.route_among(a, loads, None)
    }

    /// [`RouterState::route`] among the replicas `ready` marks (all when
    /// `None`; at least one is): an autoscaled fleet's router sees only
    /// ready replicas. `round_robin` and `random` count among them (the
    /// k-th routed request goes to the `k mod n`-th ready one, in index
    /// order), the others skip the rest; a conversation pinned to a
    /// replica that is not ready is pinned again.
    pub fn route_among(&mut self, a: &Arrival, loads: &[Load], ready: Option<&[bool]>) -> usize {
        self.route_weighted(a, loads, ready, None)
    }

    /// [`RouterState::route_among`], the replicas weighed by `weights`
    /// (mixed pools): `round_robin` is smooth weighted round robin (each
    /// open replica gains its speed, the highest total is picked and pays
    /// the open replicas' sum), `random` draws in proportion to speed,
    /// `least_outstanding` (and a new conversation's pick) takes the least
    /// `(outstanding + 1) / speed`, `least_kv` the least `active_blocks /
    /// blocks`; `prefix_affinity` counts blocks as without weights.
    pub fn route_weighted(
        &mut self,
        a: &Arrival,
        loads: &[Load],
        ready: Option<&[bool]>,
        weights: Option<Weights<'_>>,
    ) -> usize {
        let Some(w) = weights else { return self.route_plain(a, loads, ready) };
        let n = loads.len();
        let open = |i: usize| ready.is_none_or(|m| m[i]);
        self.routed += 1;
        let least_outstanding =
            |loads: &[Load]| argmin(loads.iter().zip(w.speed).map(|(l, s)| (l.outstanding + 1) as f64 / s), &open);
        match self.policy {
            Router::RoundRobin => {
                self.smooth.resize(n, 0.0);
                let total: f64 = (0..n).filter(|&i| open(i)).map(|i| w.speed[i]).sum();
                for i in (0..n).filter(|&i| open(i)) {
                    self.smooth[i] += w.speed[i];
                }
                let pick = argmin(self.smooth.iter().map(|c| -c), &open);
                self.smooth[pick] -= total;
                pick
            }
            Router::Random => {
                let total: f64 = (0..n).filter(|&i| open(i)).map(|i| w.speed[i]).sum();
                let mut u = self.rng.random::<f64>() * total;
                let mut last = 0;
                for i in (0..n).filter(|&i| open(i)) {
                    last = i;
                    if u < w.speed[i] {
                        return i;
                    }
                    u -= w.speed[i];
                }
                last
            }
            Router::LeastOutstanding => least_outstanding(loads),
            Router::LeastKv => argmin(loads.iter().zip(w.blocks).map(|(l, b)| l.active_blocks as f64 / b), &open),
            Router::PrefixAffinity => {
                self.routed -= 1;
                self.route_plain(a, loads, ready)
            }
            Router::SessionAffinity => {
                let Some(session) = a.session else { return least_outstanding(loads) };
                match self.sessions.get(&session) {
                    Some(&r) if (r as usize) < n && open(r as usize) => r as usize,
                    _ => {
                        let r = least_outstanding(loads);
                        self.sessions.insert(session, r as u32);
                        r
                    }
                }
            }
        }
    }

    fn route_plain(&mut self, a: &Arrival, loads: &[Load], ready: Option<&[bool]>) -> usize {
        let n = loads.len();
        debug_assert!(n > 0, "a cluster without replicas");
        let open = |i: usize| ready.is_none_or(|m| m[i]);
        // The `j`-th open replica.
        let nth = |j: usize| match ready {
            None => j,
            Some(m) => m.iter().enumerate().filter(|e| *e.1).nth(j).map_or(0, |e| e.0),
        };
        let open_count = ready.map_or(n, |m| m.iter().filter(|&&b| b).count()).max(1);
        let k = self.routed;
        self.routed += 1;
        match self.policy {
            Router::RoundRobin => nth((k % open_count as u64) as usize),
            Router::Random => nth(self.rng.random_range(0..open_count)),
            Router::LeastOutstanding => least_outstanding(loads, &open),
            Router::LeastKv => argmin(loads.iter().map(|l| l.active_blocks as f64), &open),
            Router::PrefixAffinity => {
                let w = self.overlap_weight;
                let cost = loads.iter().map(|l| {
                    let missed = a.prompt_blocks.saturating_sub(u64::from(l.hit_blocks));
                    w * missed as f64 + l.active_blocks as f64
                });
                argmin(cost, &open)
            }
            Router::SessionAffinity => {
                let Some(session) = a.session else { return least_outstanding(loads, &open) };
                match self.sessions.get(&session) {
                    Some(&r) if (r as usize) < n && open(r as usize) => r as usize,
                    _ => {
                        let r = least_outstanding(loads, &open);
                        self.sessions.insert(session, r as u32);
                        r
                    }
                }
            }
        }
    }

    /// A conversation is over: its pin can go (keeps the map small).
    pub fn forget_session(&mut self, session: u64) {
        self.sessions.remove(&session);
    }
}

fn least_outstanding(loads: &[Load], open: &impl Fn(usize) -> bool) -> usize {
    argmin(loads.iter().map(|l| l.outstanding as f64), open)
}

/// The index of the smallest value among the open ones, the first one on
/// ties (0 if none is open).
fn argmin(values: impl Iterator<Item = f64>, open: &impl Fn(usize) -> bool) -> usize {
    let mut best = (0, f64::INFINITY);
    for (i, v) in values.enumerate() {
        if v < best.1 && open(i) {
            best = (i, v);
        }
    }
    best.0
}

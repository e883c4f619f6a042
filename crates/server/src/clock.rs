//! The server's clock: simulated times ([`SimTime`]) are nanoseconds since
//! the server started, on tokio's clock, and every driver waits for a
//! simulated time through it.

use std::time::Duration;

use llmsim_core::time::SimTime;

/// The server's timeline: nanoseconds since it started, on tokio's clock
/// (which tests can pause and advance).
#[derive(Clone, Copy, Debug)]
pub struct Clock {
    base: tokio::time::Instant,
    /// Finish the engine task's waits with a sub-millisecond sleep (see
    /// [`Clock::sleep_until`]); off on a paused clock, where it means nothing.
    precise: bool,
}

impl Clock {
    /// A clock for tests: plain tokio timers, so a paused clock drives it.
    pub fn start() -> Clock {
        Clock { base: tokio::time::Instant::now(), precise: false }
    }

    /// The server's clock, with precise waits.
    pub fn start_precise() -> Clock {
        Clock { precise: true, ..Clock::start() }
    }

    /// When a coarse wait for `t` should end: tokio's timer fires on whole
    /// milliseconds (rounding up), so a precise clock wakes a millisecond
    /// early and finishes with [`Clock::finish_wait`].
    pub fn coarse(&self, t: SimTime) -> SimTime {
        if self.precise { SimTime::from_nanos(t.as_nanos().saturating_sub(1_000_000)) } else { t }
    }

    /// Sleeps out the rest of a wait for `t` (less than a millisecond) on
    /// the calling thread: OS timers have microsecond resolution. A no-op
    /// on a plain clock.
    ///
    /// A precise clock is only handed to drivers that run on a thread of
    /// their own (`cli::serve` starts one per model), so blocking that
    /// thread for the rest of the wait holds up nothing else. Sleeping
    /// here rather than on tokio's blocking pool saves a hand-over per
    /// step: the pool's thread would wake first and then have to wake
    /// the driver's, and on a busy machine each wake-up can queue behind
    /// the handlers' threads (docs/performance.md, "The server").
    pub async fn finish_wait(&self, t: SimTime) {
        if !self.precise {
            return;
        }
        let rest = self.instant(t).saturating_duration_since(tokio::time::Instant::now());
        if !rest.is_zero() {
            std::thread::sleep(rest);
        }
    }

    pub fn now(&self) -> SimTime {
        SimTime::from_nanos(u64::try_from(self.base.elapsed().as_nanos()).unwrap_or(u64::MAX))
    }

    /// The wall-clock instant of a simulated time.
    pub fn instant(&self, t: SimTime) -> tokio::time::Instant {
        self.base + Duration::from_nanos(t.as_nanos())
    }
}

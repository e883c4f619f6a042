//! The `fixed` engine's clock: one task per fixed model releases every
//! request's tokens at their due times (TTFT = overhead + prompt / rate
//! after arrival, then one every ITL). Requests share nothing but this
//! timer: each one's times depend on itself alone.
//!
//! Why a timer task rather than a sleep per token in each handler: tokio's
//! timer has millisecond resolution and a registration per token; one task
//! holding every pending token in a heap wakes once per due time, finishes
//! its waits precisely (as the engine task does), and hands tokens over on
//! the same per-request channels the scheduler uses. A request whose
//! handler went away is dropped the next time one of its tokens comes due.

use std::cmp::{Ordering, Reverse};
use std::collections::BinaryHeap;

use tokio::sync::mpsc::UnboundedReceiver;

use super::clock::Clock;
use super::protocol::{Event, Schedule};
use llmsim_core::time::SimTime;

/// The next token of one request.
struct Pending {
    due: SimTime,
    /// Ties on `due` go in schedule order.
    seq: u64,
    index: u32,
    schedule: Schedule,
}

impl PartialEq for Pending {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.seq) == (other.due, other.seq)
    }
}

impl Eq for Pending {}

impl PartialOrd for Pending {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Pending {
    fn cmp(&self, other: &Self) -> Ordering {
        (self.due, self.seq).cmp(&(other.due, other.seq))
    }
}

/// The timer task. Build with [`FixedTimer::new`], run with [`FixedTimer::run`].
pub struct FixedTimer {
    rx: UnboundedReceiver<Schedule>,
    clock: Clock,
    heap: BinaryHeap<Reverse<Pending>>,
    seq: u64,
    /// False once every sender is gone: finish what is pending, then stop.
    open: bool,
}

impl FixedTimer {
    pub fn new(rx: UnboundedReceiver<Schedule>, clock: Clock) -> FixedTimer {
        FixedTimer { rx, clock, heap: BinaryHeap::new(), seq: 0, open: true }
    }

    /// Runs until every sender is gone.
    pub async fn run(mut self) {
        loop {
            self.drain();
            let Some(due) = self.heap.peek().map(|p| p.0.due) else {
                match self.rx.recv().await {
                    Some(s) if self.open => self.add(s),
                    _ => return,
                }
                continue;
            };
            if self.clock.now() < due {
                self.wait_until(due).await;
                continue;
            }
            self.release(due);
        }
    }

    fn add(&mut self, schedule: Schedule) {
        if schedule.n == 0 {
            return;
        }
        self.seq += 1;
        self.heap.push(Reverse(Pending { due: schedule.first_due, seq: self.seq, index: 1, schedule }));
    }

    /// Takes every queued schedule; notes when every sender is gone.
    fn drain(&mut self) {
        while self.open {
            match self.rx.try_recv() {
                Ok(s) => self.add(s),
                Err(tokio::sync::mpsc::error::TryRecvError::Empty) => return,
                Err(tokio::sync::mpsc::error::TryRecvError::Disconnected) => self.open = false,
            }
        }
    }

    /// Sleeps until `t`, taking new schedules meanwhile (one may be due sooner).
    async fn wait_until(&mut self, t: SimTime) {
        let sleep = tokio::time::sleep_until(self.clock.instant(self.clock.coarse(t)));
        tokio::pin!(sleep);
        if !self.open {
            sleep.await;
            self.clock.finish_wait(t).await;
            return;
        }
        tokio::select! {
            biased;
            () = &mut sleep => self.clock.finish_wait(t).await,
            s = self.rx.recv() => match s {
                Some(s) => self.add(s),
                None => self.open = false,
            },
        }
    }

    /// Sends every token due at or before `due`.
    fn release(&mut self, due: SimTime) {
        while self.heap.peek().is_some_and(|p| p.0.due <= due) {
            let Some(Reverse(mut p)) = self.heap.pop() else { break };
            let sent = p.schedule.events.send(Event::Token { index: p.index, due: p.due });
            if sent.is_ok() && p.index < p.schedule.n {
                p.index += 1;
                p.due = p.due.plus_nanos(p.schedule.itl_ns);
                self.seq += 1;
                p.seq = self.seq;
                self.heap.push(Reverse(p));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use tokio::sync::mpsc;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokens_come_at_ttft_then_every_itl_in_due_order() {
        let clock = Clock::start();
        let (tx, rx) = mpsc::unbounded_channel();
        tokio::spawn(FixedTimer::new(rx, clock).run());
        let (a_tx, mut a) = mpsc::unbounded_channel();
        let (b_tx, mut b) = mpsc::unbounded_channel();
        let ms = |x: u64| SimTime::from_nanos(x * 1_000_000);
        tx.send(Schedule { first_due: ms(30), itl_ns: 10_000_000, n: 3, events: a_tx }).unwrap();
        tx.send(Schedule { first_due: ms(5), itl_ns: 20_000_000, n: 2, events: b_tx }).unwrap();
        let mut seen = Vec::new();
        for _ in 0..3 {
            let Some(Event::Token { index, due }) = a.recv().await else { panic!("token expected") };
            assert_eq!(clock.now(), due, "released exactly when due on a paused clock");
            seen.push((index, due));
        }
        assert_eq!(seen, vec![(1, ms(30)), (2, ms(40)), (3, ms(50))]);
        assert_eq!(b.recv().await, Some(Event::Token { index: 1, due: ms(5) }));
        assert_eq!(b.recv().await, Some(Event::Token { index: 2, due: ms(25) }));
        assert_eq!(a.try_recv().ok(), None, "nothing after the last token");
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_whose_handler_left_is_dropped() {
        let clock = Clock::start();
        let (tx, rx) = mpsc::unbounded_channel();
        let timer = tokio::spawn(FixedTimer::new(rx, clock).run());
        let (a_tx, a) = mpsc::unbounded_channel();
        tx.send(Schedule { first_due: SimTime::from_nanos(1_000_000), itl_ns: 1_000_000, n: 1000, events: a_tx })
            .unwrap();
        drop(a);
        drop(tx);
        // With its only request gone and no senders left, the timer ends
        // long before the 1,000 tokens would have been due.
        tokio::time::timeout(std::time::Duration::from_millis(10), timer).await.expect("timer ended").unwrap();
    }
}

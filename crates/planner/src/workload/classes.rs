//! Request classes (`workload.classes`, docs/priorities.md): which class
//! each request is, as a function of its id alone, so the source that
//! issues it and the collector that reports it agree without passing
//! anything along.
//!
//! A trace with a `class` column names each row's class; otherwise a
//! request's class is drawn by weight from word `2 * id` of its own
//! ChaCha8 stream of the workload's seed: the same request is the same
//! class whatever the arrival process, the lengths or the engine, and
//! adding classes leaves every other draw as it was.

use std::sync::Arc;

use rand_chacha::ChaCha8Rng;

use super::{dist, stream};
use llmsim_core::engine::RequestId;
use llmsim_scenario::config::{Arrivals, Scenario};

/// The stream of the class draws ("classes").
const CLASS_STREAM: u64 = 0x0063_6c61_7373_6573;

/// The classes of a workload and how a request's is found.
#[derive(Clone, Debug)]
pub struct Classes {
    /// In the order given.
    pub names: Vec<String>,
    pub priorities: Vec<i32>,
    pub weights: Vec<f64>,
    /// Cumulative shares, the last 1.
    cumulative: Vec<f64>,
    rng: ChaCha8Rng,
    /// A trace's `class` column, by row (= request id).
    trace: Option<Arc<Vec<u8>>>,
}

impl Classes {
    /// The scenario's classes, if it has any.
    pub fn of(s: &Scenario) -> Option<Classes> {
        let classes = &s.workload.classes;
        if classes.is_empty() {
            return None;
        }
        let total: f64 = classes.iter().map(|c| c.weight).sum();
        let mut sum = 0.0;
        let mut cumulative: Vec<f64> = classes
            .iter()
            .map(|c| {
                sum += c.weight;
                sum / total
            })
            .collect();
        if let Some(last) = cumulative.last_mut() {
            *last = 1.0;
        }
        let trace = match &s.workload.arrivals {
            Arrivals::Trace(t) => t.classes.clone(),
            _ => None,
        };
        Some(Classes {
            names: classes.iter().map(|c| c.name.clone()).collect(),
            priorities: classes.iter().map(|c| c.priority).collect(),
            weights: classes.iter().map(|c| c.weight).collect(),
            cumulative,
            rng: stream(s.workload.seed, CLASS_STREAM),
            trace,
        })
    }

    pub fn len(&self) -> usize {
        self.names.len()
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The class of request `id`: its trace row's, else a draw by weight.
    pub fn class_of(&self, id: RequestId) -> usize {
        if let Some(&c) = self.trace.as_ref().and_then(|t| t.get(id as usize)) {
            return usize::from(c);
        }
        if self.cumulative.len() == 1 {
            return 0;
        }
        let mut rng = self.rng.clone();
        rng.set_word_pos(u128::from(id) * 2);
        let u = dist::unit(&mut rng);
        self.cumulative.partition_point(|&c| c <= u).min(self.cumulative.len() - 1)
    }

    /// The priority request `id` carries.
    pub fn priority_of(&self, id: RequestId) -> i32 {
        self.priorities[self.class_of(id)]
    }
}

/// A source whose requests carry their class's priority and their LoRA
/// adapter.
pub struct Stamped {
    pub inner: super::AnySource,
    pub classes: Option<Classes>,
    pub adapters: Option<super::adapters::Adapters>,
}

impl super::Source for Stamped {
    fn peek(&self) -> Option<llmsim_core::time::SimTime> {
        self.inner.peek()
    }
    fn pop(&mut self) -> Option<llmsim_core::engine::Request> {
        let mut req = self.inner.pop()?;
        if let Some(c) = &self.classes {
            req.priority = c.priority_of(req.id);
        }
        if let Some(a) = &self.adapters {
            req.lora = a.adapter_of(req.id);
        }
        Some(req)
    }
    fn segments(&self) -> &[llmsim_core::engine::prefix::hash::Segment] {
        self.inner.segments()
    }
    fn block_hashes(&self) -> Option<&[u64]> {
        self.inner.block_hashes()
    }
    fn own_from(&self) -> Option<usize> {
        self.inner.own_from()
    }
    fn session(&self) -> Option<u64> {
        self.inner.session()
    }
    fn done(&mut self, id: RequestId, at: llmsim_core::time::SimTime) {
        self.inner.done(id, at);
    }
    fn stalled(&self) -> Option<String> {
        self.inner.stalled()
    }
    fn rejected(&mut self, id: RequestId, at: llmsim_core::time::SimTime) {
        self.inner.rejected(id, at);
    }
}

#[cfg(test)]
mod tests;

use super::*;
use crate::cluster::tests::scenario;
use crate::workload::AnySource;

/// A topology whose event never does anything: the wedge of an engine
/// whose step schedules nothing while its requests wait. `moves` makes
/// every event move the clock by a nanosecond instead.
struct Wedged {
    events: u64,
    moves: bool,
}

impl Topology for Wedged {
    type Out = u64;

    fn next<S: Source>(&mut self, _: &S) -> Next {
        match self.moves && self.events >= 2 * MAX_IDLE_EVENTS {
            true => Next::Done,
            false => Next::Event(Some(SimTime::from_nanos(if self.moves { self.events } else { 5 }))),
        }
    }

    fn arrive<S: Source, O: Observer>(&mut self, _: Request, _: &mut Cx<'_, S, O>) -> Result<(), SimError> {
        Ok(())
    }

    fn event<S, O, F>(&mut self, _: &mut Cx<'_, S, O>, _: &mut F) -> Result<(), SimError>
    where
        S: Source,
        O: Observer,
        F: FnMut(Place, &Engine, &mut O),
    {
        self.events += 1;
        Ok(())
    }

    fn finish(self) -> u64 {
        self.events
    }
}

#[test]
fn a_loop_that_makes_no_progress_stops_with_an_error_instead_of_hanging() {
    let s = scenario(
        "workload:\n  requests: 10\n  arrivals: {poisson: {rate: 1}}\n  prompt_tokens: 10\n  output_tokens: 5\n",
    );
    let mut source = AnySource::new(&s);
    let mut obs = ();
    let got =
        drive(Wedged { events: 0, moves: false }, &mut source, &mut obs, &Setup::default(), |_, _, _| {}, &mut |_| {});
    match got {
        Err(SimError::Stalled { why, progress }) => {
            assert!(why.contains("1,000,000 events in a row took no step"), "{why}");
            assert_eq!(progress.now, SimTime::from_nanos(5));
        }
        other => panic!("expected a stall, got {other:?}"),
    }
    // The same number of events, each a nanosecond later, is progress.
    let mut source = AnySource::new(&s);
    let got =
        drive(Wedged { events: 0, moves: true }, &mut source, &mut obs, &Setup::default(), |_, _, _| {}, &mut |_| {});
    assert_eq!(got, Ok(2 * MAX_IDLE_EVENTS));
}

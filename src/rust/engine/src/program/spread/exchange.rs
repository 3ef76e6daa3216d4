//! What the parts of a spread program (`program::spread`) hand each other between steps: each part,
//! one host thread, gives its values and receives every part's, in the parts' order, once all have
//! given theirs. A part that fails ends the exchange: the others' waits return an error at once
//! (none is left waiting for it).

use std::sync::{Arc, Condvar, Mutex};

use crate::error::{Error, Result};

pub struct Exchange {
    round: Mutex<Round>,
    turned: Condvar,
}

#[derive(Default)]
struct Round {
    /// Rounds completed: a waiting part's round is over when this changes.
    done: u64,
    given: Vec<Option<Vec<f64>>>,
    /// The values of the last round completed, each part's.
    last: Arc<Vec<Vec<f64>>>,
    ended: bool,
}

impl Exchange {
    pub fn new(parts: usize) -> Exchange {
        let round = Round { given: vec![None; parts], ..Round::default() };
        Exchange { round: Mutex::new(round), turned: Condvar::new() }
    }

    /// Gives part `part`'s `values`; returns every part's, once all have given theirs. (The next
    /// round cannot complete before every part has taken this one's: each must give again.)
    pub fn swap(&self, part: usize, values: Vec<f64>) -> Result<Arc<Vec<Vec<f64>>>> {
        let mut round = self.round.lock().map_err(|_| ended())?;
        if round.ended {
            return Err(ended());
        }
        round.given[part] = Some(values);
        if round.given.iter().all(Option::is_some) {
            let all: Vec<Vec<f64>> = round.given.iter_mut().map(|g| g.take().unwrap_or_default()).collect();
            round.last = Arc::new(all);
            round.done += 1;
            self.turned.notify_all();
            return Ok(round.last.clone());
        }
        let mine = round.done;
        while round.done == mine && !round.ended {
            round = self.turned.wait(round).map_err(|_| ended())?;
        }
        match round.done == mine {
            true => Err(ended()),
            false => Ok(round.last.clone()),
        }
    }

    /// Ends the exchange: every wait, now or later, returns an error.
    pub fn end(&self) {
        if let Ok(mut round) = self.round.lock() {
            round.ended = true;
        }
        self.turned.notify_all();
    }
}

/// The error of a part whose exchange ended (another part failed or was interrupted: that part's
/// error is the one reported).
fn ended() -> Error {
    Error::Interrupted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_part_receives_every_parts_values_in_order_round_after_round() {
        let exchange = Exchange::new(3);
        let got: Vec<Vec<Vec<f64>>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..3)
                .map(|p| {
                    let exchange = &exchange;
                    s.spawn(move || {
                        (0..50).map(|r| exchange.swap(p, vec![p as f64, r as f64]).unwrap().concat()).collect()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for part in got {
            for (r, values) in part.iter().enumerate() {
                assert_eq!(values, &[0.0, r as f64, 1.0, r as f64, 2.0, r as f64]);
            }
        }
    }

    #[test]
    fn an_ended_exchange_frees_the_parts_that_wait() {
        let exchange = Exchange::new(2);
        std::thread::scope(|s| {
            let waiting = s.spawn(|| exchange.swap(0, vec![1.0]));
            std::thread::sleep(std::time::Duration::from_millis(20));
            exchange.end();
            assert!(matches!(waiting.join().unwrap(), Err(Error::Interrupted)));
        });
        assert!(exchange.swap(1, vec![2.0]).is_err());
    }
}

//! A refusal's asked pause (`Retry-After`) as the lane keeps it: what one answer
//! asked, and the latest ask, so that a refusal again within it holds the lane
//! ([`super::rules::pushback_holds_lane`]).

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use super::rules::Asked;
use crate::hints::Hint;

/// What a throttle's answer asked for.
#[derive(Clone, Copy, Debug)]
pub struct Pushed {
    /// The pause, as the header said.
    pub asked: Duration,
    /// The header that said it.
    pub header: Hint,
    /// The answer also states a spent window.
    pub spent: bool,
}

/// The lane's latest asked pause; lock-free, as every refusal passes here (two
/// refusals racing blur one ask, which only decides whether a pause is the lane's).
#[derive(Debug, Default)]
pub struct LatestAsk {
    came: AtomicU64,
    /// 0: none, or forgotten at a success.
    ends: AtomicU64,
}

impl LatestAsk {
    /// The latest ask, unless a success came after it.
    pub fn get(&self) -> Option<Asked> {
        let ends = self.ends.load(Relaxed);
        (ends > 0).then(|| Asked {
            came: self.came.load(Relaxed),
            ends,
        })
    }

    /// Keeps `asked` as the latest.
    pub fn set(&self, asked: Asked) {
        self.came.store(asked.came, Relaxed);
        self.ends.store(asked.ends.max(1), Relaxed);
    }

    /// A success: the spacing works, so the ask is forgotten.
    pub fn forget(&self) {
        if self.ends.load(Relaxed) != 0 {
            self.ends.store(0, Relaxed);
        }
    }
}

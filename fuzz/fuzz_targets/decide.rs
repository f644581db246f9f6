//! The decisions on a rate-limit window, from arbitrary numbers rather than headers:
//! `quota::decide` and the lane's rules (`lane::rules::quota`, `charged`), with counts,
//! resets and falls at any value a header or a learned average could hold (0,
//! `u64::MAX`, NaN, infinities). The input is read as little-endian words: remaining,
//! reset seconds, reset nanoseconds, limit (0 for none), in flight, queued cost, the
//! fall and the mean cost as f64 bits, then a flags byte (refills, the spend, the
//! vendor, which window). Deciding must never panic, and every duration it yields
//! must lie within the window and `max_pause`.

#![no_main]

use std::time::Duration;

use easeoff::hints::{Quota, Reading, TokenWindow};
use easeoff::lane::rules::{self, Floor, QuotaFacts, UnitFacts};
use easeoff::quota::{self, Decision, Falls, Spend};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut words = data.chunks_exact(8).map(|w| {
        let mut bytes = [0; 8];
        bytes.copy_from_slice(w);
        u64::from_le_bytes(bytes)
    });
    let mut next = || words.next().unwrap_or(0);
    let (remaining, secs, nanos, limit) = (next(), next(), next(), next());
    let (in_flight, queued) = (next(), next());
    let (fall, mean) = (f64::from_bits(next()), f64::from_bits(next()));
    let flags = data.get(80).copied().unwrap_or(0);
    let window = Quota {
        remaining,
        reset: Duration::new(secs, (nanos % 1_000_000_000) as u32),
        limit: (limit != 0).then_some(limit),
        refills: flags & 1 != 0,
    };
    let spend = if flags & 2 != 0 { Spend::Smooth } else { Spend::Use };
    match quota::decide(spend, window, in_flight, fall) {
        Decision::Go => {}
        Decision::Pace { spacing, until } => assert!(spacing <= until && until == window.reset),
        Decision::Pause { until } => assert_eq!(until, window.reset),
    }
    let vendor = [TokenWindow::USED, TokenWindow::OPENAI, TokenWindow::ANTHROPIC]
        [usize::from(flags >> 2) % 3];
    let _ = rules::charged(remaining, in_flight, vendor);
    let reading = match (flags >> 4) % 3 {
        0 => Reading { requests: Some(window), ..Reading::default() },
        1 => Reading { tokens: Some(window), ..Reading::default() },
        _ => Reading { requests: Some(window), tokens: Some(window), wait: None },
    };
    let max = Duration::from_secs(86_400);
    let falls = Falls::default();
    for units in [None, Some(UnitFacts { mean: mean.max(1.0), queued, window: vendor })] {
        for at in [Duration::ZERO, Duration::from_nanos(nanos)] {
            let facts = QuotaFacts { spend, in_flight, max, at, units };
            let effects = rules::quota(&reading, &falls, &facts);
            if let Some(pause) = effects.pause {
                assert!(pause.duration <= max);
            }
            for floor in [effects.floor, effects.request_floor] {
                if let Floor::Set { spacing, lasts } = floor {
                    assert!(spacing <= lasts.duration && lasts.duration <= max);
                }
            }
        }
    }
});

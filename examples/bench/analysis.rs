//! What a control run's 500 ms samples mean: goodput against capacity, throttled share
//! of upstream attempts, per phase, and the convergence time after each capacity change.
//! Pure: the samples come in.

/// One scrape of the mock (and easeoff), with the writers' tallies at that moment.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Sample {
    /// Seconds since the writers started.
    pub t: f64,
    /// The mock's `mock_requests_total{result="ok"}`.
    pub ok: f64,
    /// The mock's `mock_requests_total{result="throttled"}`.
    pub throttled: f64,
    /// The mock's `mock_rate` at this scrape.
    pub rate: f64,
    /// easeoff's `easeoff_upstream_interval_seconds`, in ms, when easeoff is in front.
    pub interval_ms: Option<f64>,
    /// Requests the writers saw succeed so far.
    pub client_ok: u64,
    /// Requests the writers saw fail so far.
    pub client_errors: u64,
}

/// Convergence criteria over a sliding window.
#[derive(Clone, Copy, Debug)]
pub struct Criteria {
    /// Window length in samples (5 s at 500 ms).
    pub window: usize,
    /// Throttled share of attempts must stay under this.
    pub max_throttled: f64,
    /// Goodput must stay at or above this share of the capacity.
    pub min_goodput: f64,
}

/// The criteria: 5 s windows, throttled < 10%, goodput ≥ 90% of capacity.
pub const CRITERIA: Criteria = Criteria {
    window: 10,
    max_throttled: 0.10,
    min_goodput: 0.90,
};

/// How long after a capacity change the windows stayed good.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Convergence {
    /// From this many seconds after the change on, every window in the phase was good.
    After(f64),
    /// The last window of the phase was still bad.
    Never,
    /// The phase is shorter than one window.
    TooShort,
}

/// One stretch of constant capacity.
#[derive(Clone, Debug, PartialEq)]
pub struct Phase {
    /// When the capacity changed to `capacity`, seconds (0 for the first phase).
    pub start: f64,
    pub capacity: f64,
    /// Goodput / capacity over the phase (after the warm-up for the first one).
    pub goodput: f64,
    /// Throttled share of the upstream attempts over the phase.
    pub throttled: f64,
    pub convergence: Convergence,
}

/// A run's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Summary {
    /// Goodput / capacity over the whole run.
    pub goodput_all: f64,
    /// Goodput / capacity after the warm-up.
    pub goodput: f64,
    /// Throttled share of upstream attempts after the warm-up.
    pub throttled: f64,
    /// Requests the writers saw fail, over the whole run.
    pub errors: u64,
    /// Mean of easeoff's interval over the scrapes after the warm-up, in ms.
    pub interval_ms: Option<f64>,
    pub phases: Vec<Phase>,
}

/// Ok, throttled and capacity × time between samples `a` and `b` (indices, a ≤ b).
fn span(s: &[Sample], a: usize, b: usize) -> (f64, f64, f64) {
    let capacity = (a + 1..=b).map(|i| s[i].rate * (s[i].t - s[i - 1].t)).sum();
    (s[b].ok - s[a].ok, s[b].throttled - s[a].throttled, capacity)
}

fn ratio(n: f64, d: f64) -> f64 {
    if d > 0.0 { n / d } else { 0.0 }
}

fn throttled_share(ok: f64, throttled: f64) -> f64 {
    ratio(throttled, ok + throttled)
}

/// The figures of a run; `warmup` seconds are left out of the after-warm-up figures.
pub fn summarize(s: &[Sample], warmup: f64, criteria: Criteria) -> Summary {
    let Some(last) = s.len().checked_sub(1).filter(|&l| l > 0) else {
        return Summary {
            goodput_all: 0.0,
            goodput: 0.0,
            throttled: 0.0,
            errors: s.last().map_or(0, |x| x.client_errors),
            interval_ms: None,
            phases: Vec::new(),
        };
    };
    let warm = s
        .iter()
        .position(|x| x.t >= warmup)
        .unwrap_or(last)
        .min(last);
    let (ok, _, cap) = span(s, 0, last);
    let goodput_all = ratio(ok, cap);
    let (ok, th, cap) = span(s, warm, last);
    // A change shows at the first scrape with the new rate; it happened at some point in
    // the 500 ms before, so its time is taken as the middle of that interval.
    let mut changes = vec![(0usize, 0.0f64)];
    for i in 1..=last {
        if s[i].rate != s[i - 1].rate {
            changes.push((i, (s[i - 1].t + s[i].t) / 2.0));
        }
    }
    let phases = changes
        .iter()
        .enumerate()
        .map(|(k, &(c, start))| {
            // The interval in which the change happened belongs to neither phase.
            let end = changes.get(k + 1).map_or(last, |&(next, _)| next - 1);
            let from = if k == 0 { warm.min(end) } else { c.min(end) };
            let (pok, pth, pcap) = span(s, from, end);
            Phase {
                start,
                capacity: s[c.max(1).min(last)].rate,
                goodput: ratio(pok, pcap),
                throttled: throttled_share(pok, pth),
                convergence: converge(s, c, end, start, criteria),
            }
        })
        .collect();
    Summary {
        goodput_all,
        goodput: ratio(ok, cap),
        throttled: throttled_share(ok, th),
        errors: s[last].client_errors,
        interval_ms: mean_interval(&s[warm..]),
        phases,
    }
}

/// The mean of the scraped intervals, when easeoff was in front.
fn mean_interval(s: &[Sample]) -> Option<f64> {
    let v: Vec<f64> = s.iter().filter_map(|x| x.interval_ms).collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

/// The first window start from which every window up to `end` meets the criteria.
fn converge(s: &[Sample], first: usize, end: usize, change: f64, c: Criteria) -> Convergence {
    if first + c.window > end {
        return Convergence::TooShort;
    }
    let good = |a: usize| {
        let b = a + c.window;
        let (ok, th, _) = span(s, a, b);
        let seconds = s[b].t - s[a].t;
        throttled_share(ok, th) < c.max_throttled && ok / seconds >= c.min_goodput * s[b].rate
    };
    let mut from = None;
    for a in (first..=end - c.window).rev() {
        if !good(a) {
            break;
        }
        from = Some(a);
    }
    match from {
        Some(a) => Convergence::After((s[a].t - change).max(0.0)),
        None => Convergence::Never,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Samples every 0.5 s for `rates.len()` intervals: interval i at capacity rates[i],
    /// `ok[i]` successes and `th[i]` throttles.
    fn series(rates: &[f64], ok: &[f64], th: &[f64]) -> Vec<Sample> {
        let mut s = vec![Sample {
            rate: rates[0],
            ..Sample::default()
        }];
        for i in 0..rates.len() {
            let prev = s[i];
            s.push(Sample {
                t: prev.t + 0.5,
                ok: prev.ok + ok[i],
                throttled: prev.throttled + th[i],
                rate: rates[i],
                ..prev
            });
        }
        s
    }

    #[test]
    fn steady_capacity_fully_used_converges_at_once() {
        let n = 40;
        let s = series(&vec![100.0; n], &vec![50.0; n], &vec![0.0; n]);
        let sum = summarize(&s, 5.0, CRITERIA);
        assert!((sum.goodput_all - 1.0).abs() < 1e-9);
        assert!((sum.goodput - 1.0).abs() < 1e-9);
        assert_eq!(sum.throttled, 0.0);
        assert_eq!(sum.phases.len(), 1);
        assert_eq!(sum.phases[0].convergence, Convergence::After(0.0));
    }

    #[test]
    fn a_step_down_converges_when_throttles_stop() {
        // 20 s at 100/s fully used; then 50/s: 4 s of 50% throttles, then clean.
        let mut rates = vec![100.0; 40];
        let mut ok = vec![50.0; 40];
        let mut th = vec![0.0; 40];
        rates.extend(vec![50.0; 40]);
        ok.extend(vec![25.0; 40]);
        th.extend((0..40).map(|i| if i < 8 { 25.0 } else { 0.0 }));
        let s = series(&rates, &ok, &th);
        let sum = summarize(&s, 0.0, CRITERIA);
        assert_eq!(sum.phases.len(), 2);
        let down = &sum.phases[1];
        // The change shows at sample 41 (t = 20.5), so it is dated 20.25.
        assert_eq!((down.start, down.capacity), (20.25, 50.0));
        // The window from sample 47 (t = 23.5) holds one throttled interval, 25 of
        // 275 attempts: under 10%. The one from sample 46 holds two: 50 of 300.
        assert_eq!(down.convergence, Convergence::After(3.25));
        // The interval of the change (40) belongs to neither phase.
        assert!((down.goodput - 1.0).abs() < 1e-9);
        assert!((down.throttled - 7.0 * 25.0 / (39.0 * 25.0 + 7.0 * 25.0)).abs() < 1e-9);
    }

    #[test]
    fn a_late_bad_window_delays_convergence_and_a_bad_end_never_converges() {
        let n = 60;
        let th: Vec<f64> = (0..n).map(|i| if i == 45 { 100.0 } else { 0.0 }).collect();
        let s = series(&vec![100.0; n], &vec![50.0; n], &th);
        let sum = summarize(&s, 0.0, CRITERIA);
        // Windows that hold interval 45 (samples 45 to 46) are 17% throttled; the first
        // good one after them starts at sample 46.
        assert_eq!(sum.phases[0].convergence, Convergence::After(23.0));

        let ok: Vec<f64> = (0..n).map(|i| if i < 50 { 50.0 } else { 40.0 }).collect();
        let s = series(&vec![100.0; n], &ok, &vec![0.0; n]);
        let sum = summarize(&s, 0.0, CRITERIA);
        assert_eq!(sum.phases[0].convergence, Convergence::Never);
    }

    #[test]
    fn short_phases_and_warm_up_are_handled() {
        let mut rates = vec![100.0; 6];
        rates.extend(vec![50.0; 20]);
        let s = series(&rates, &vec![25.0; 26], &vec![0.0; 26]);
        let sum = summarize(&s, 2.0, CRITERIA);
        assert_eq!(sum.phases[0].convergence, Convergence::TooShort);
        // Warm-up: samples from t = 2 (index 4) to the change; half the capacity used.
        assert!((sum.phases[0].goodput - 0.5).abs() < 1e-9);
        assert!((sum.phases[1].goodput - 1.0).abs() < 1e-9);
        assert_eq!(sum.errors, 0);
        assert_eq!(summarize(&s[..1], 2.0, CRITERIA).phases, Vec::new());
    }
}

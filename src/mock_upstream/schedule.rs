//! Capacity schedules for the mock: `--schedule "0s:100,60s:50"` sets the rate to 100
//! at start and to 50 sixty seconds later, so benchmarks can step capacity down and up.

use std::fmt;
use std::time::Duration;

use crate::config::units::parse_duration;

/// From `at` after the mock starts, it accepts `rate` requests per second.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Step {
    pub at: Duration,
    pub rate: f64,
}

/// Rate changes in strictly increasing time order.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Schedule {
    steps: Vec<Step>,
}

impl Schedule {
    /// The steps, earliest first.
    pub fn steps(&self) -> &[Step] {
        &self.steps
    }

    /// The rate at start, if the schedule sets one (a step at 0s).
    pub fn initial_rate(&self) -> Option<f64> {
        self.steps
            .first()
            .filter(|step| step.at.is_zero())
            .map(|step| step.rate)
    }
}

impl fmt::Display for Schedule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, step) in self.steps.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(f, "{sep}{}s:{}", step.at.as_secs_f64(), step.rate)?;
        }
        Ok(())
    }
}

/// Parses `TIME:RATE[,TIME:RATE...]`, e.g. `"0s:100,60s:50"`; the error names the item.
pub fn parse_schedule(text: &str) -> Result<Schedule, String> {
    let mut steps: Vec<Step> = Vec::new();
    if text.trim().is_empty() {
        return Err("empty schedule: write TIME:RATE pairs, e.g. \"0s:100,60s:50\"".into());
    }
    for (i, item) in text.split(',').enumerate() {
        let item = item.trim();
        let n = i + 1;
        let Some((time, rate)) = item.split_once(':') else {
            return Err(format!(
                "item {n} \"{item}\": expected TIME:RATE, e.g. \"60s:50\""
            ));
        };
        let at = parse_duration(time).map_err(|e| format!("item {n} \"{item}\": {e}"))?;
        let rate: f64 = rate.trim().parse().map_err(|_| {
            format!("item {n} \"{item}\": the rate must be a number of requests per second")
        })?;
        if !rate.is_finite() || rate <= 0.0 {
            return Err(format!("item {n} \"{item}\": the rate must be above 0"));
        }
        if let Some(last) = steps.last()
            && at <= last.at
        {
            return Err(format!(
                "item {n} \"{item}\": times must increase, but {} is not after {}s",
                time.trim(),
                last.at.as_secs_f64()
            ));
        }
        steps.push(Step { at, rate });
    }
    Ok(Schedule { steps })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    #[test]
    fn steps_are_read_in_order() {
        let schedule = parse_schedule("0s:100, 1m:50,90s:100.5").unwrap();
        assert_eq!(
            schedule.steps(),
            [
                Step {
                    at: s(0),
                    rate: 100.0
                },
                Step {
                    at: s(60),
                    rate: 50.0
                },
                Step {
                    at: s(90),
                    rate: 100.5
                },
            ]
        );
        assert_eq!(schedule.initial_rate(), Some(100.0));
        assert_eq!(schedule.to_string(), "0s:100,60s:50,90s:100.5");
        assert_eq!(parse_schedule("30s:20").unwrap().initial_rate(), None);
    }

    #[test]
    fn bad_schedules_say_which_item_is_wrong() {
        let cases = [
            ("", "empty schedule"),
            ("0s:100,60s", "item 2 \"60s\": expected TIME:RATE"),
            ("0s:100,60:50", "item 2 \"60:50\": invalid duration \"60\""),
            ("0s:fast", "item 1 \"0s:fast\": the rate must be a number"),
            ("0s:0", "item 1 \"0s:0\": the rate must be above 0"),
            ("0s:-5", "the rate must be above 0"),
            ("0s:inf", "the rate must be above 0"),
            (
                "0s:100,60s:50,60s:70",
                "item 3 \"60s:70\": times must increase, but 60s is not after 60s",
            ),
            ("1m:100,30s:50", "but 30s is not after 60s"),
        ];
        for (text, want) in cases {
            let error = parse_schedule(text).unwrap_err();
            assert!(error.contains(want), "{text:?}: {error}");
        }
    }
}

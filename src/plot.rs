//! SVG plots of an interval trace: one dot per attempt at (time, interval in force),
//! blue for success, red for throttled; optionally the upstream's capacity as a step
//! line, drawn as the interval that would match it, so the dots can be read against it.

use std::collections::HashSet;
use std::fmt::Write;

/// One attempt on the plot.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    /// Seconds since the start.
    pub t: f64,
    /// The interval in force, in milliseconds.
    pub interval_ms: f64,
    pub throttled: bool,
}

/// From `t` on, the upstream accepts `rate` requests per second, which an interval of
/// `interval_ms` matches.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CapacityStep {
    /// Seconds since the start.
    pub t: f64,
    pub rate: f64,
    pub interval_ms: f64,
}

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 56.0;
const BLUE: &str = "#1f6fd1";
const RED: &str = "#d62728";
const GREEN: &str = "#2ca02c";
/// Intervals beyond this many times the capacity's switch the axis to a log scale.
const LOG_SPAN: f64 = 20.0;

/// An SVG document with the points, axes, title and legend.
pub fn interval_svg(title: &str, points: &[Point]) -> String {
    trace_svg(title, points, &[], 0.0)
}

/// [`interval_svg`] with the capacity steps drawn up to `t_end` seconds (or the last
/// point). Points that would land on the same spot as an earlier one of their colour
/// are drawn once, so long traces stay small.
pub fn trace_svg(title: &str, points: &[Point], capacity: &[CapacityStep], t_end: f64) -> String {
    let frame = Frame::new(points, capacity, t_end);
    let mut svg = String::with_capacity(200 + points.len() * 64);
    let _ = write!(
        svg,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{HEIGHT}" viewBox="0 0 {WIDTH} {HEIGHT}" font-family="sans-serif" font-size="12">
<rect width="100%" height="100%" fill="white"/>
<text x="{}" y="24" font-size="16" text-anchor="middle">{}</text>
"#,
        WIDTH / 2.0,
        escape(title)
    );
    frame.axes(&mut svg);
    frame.dots(&mut svg, points);
    if !capacity.is_empty() {
        frame.capacity(&mut svg, capacity);
    }
    let _ = write!(
        svg,
        r#"<circle cx="{0}" cy="34" r="4" fill="{BLUE}"/><text x="{1}" y="38">success</text>
<circle cx="{2}" cy="34" r="4" fill="{RED}"/><text x="{3}" y="38">throttled</text>
</svg>
"#,
        WIDTH - RIGHT - 150.0,
        WIDTH - RIGHT - 142.0,
        WIDTH - RIGHT - 72.0,
        WIDTH - RIGHT - 64.0
    );
    svg
}

/// The plot area's scales: seconds across, milliseconds up (linear or log).
struct Frame {
    t_max: f64,
    log: bool,
    y_lo: f64,
    y_hi: f64,
}

const PLOT_W: f64 = WIDTH - LEFT - RIGHT;
const PLOT_H: f64 = HEIGHT - TOP - BOTTOM;

impl Frame {
    fn new(points: &[Point], capacity: &[CapacityStep], t_end: f64) -> Frame {
        let t_max = points
            .iter()
            .map(|p| p.t)
            .chain(capacity.iter().map(|c| c.t))
            .fold(t_end.max(1.0), f64::max);
        let y_max = points
            .iter()
            .map(|p| p.interval_ms)
            .chain(capacity.iter().map(|c| c.interval_ms))
            .fold(1.0, f64::max)
            * 1.1;
        // A sidecar whose interval ran away to seconds would flatten everything else
        // against the bottom of a linear axis.
        let matching = capacity.iter().map(|c| c.interval_ms).fold(0.0, f64::max);
        let log = matching > 0.0 && y_max > LOG_SPAN * matching;
        let (y_lo, y_hi) = if log {
            let lowest = points
                .iter()
                .map(|p| p.interval_ms)
                .chain(capacity.iter().map(|c| c.interval_ms))
                .filter(|v| *v > 0.0)
                .fold(matching, f64::min);
            (
                10f64.powf(lowest.max(0.1).log10().floor()),
                10f64.powf(y_max.log10().ceil()),
            )
        } else {
            (0.0, y_max)
        };
        Frame {
            t_max,
            log,
            y_lo,
            y_hi,
        }
    }

    fn x(&self, t: f64) -> f64 {
        LEFT + t / self.t_max * PLOT_W
    }

    fn y(&self, v: f64) -> f64 {
        let share = if self.log {
            (v.max(self.y_lo).log10() - self.y_lo.log10()) / (self.y_hi.log10() - self.y_lo.log10())
        } else {
            v / self.y_hi
        };
        TOP + PLOT_H - share * PLOT_H
    }

    /// Grid, tick labels, the frame and the axis titles.
    fn axes(&self, svg: &mut String) {
        let y_ticks = if self.log {
            log_ticks(self.y_lo, self.y_hi)
        } else {
            let step = nice_step(self.y_hi);
            (0..)
                .map(|i| f64::from(i) * step)
                .take_while(|v| *v <= self.y_hi + 1e-9)
                .collect()
        };
        for v in y_ticks {
            let _ = writeln!(
                svg,
                r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
                self.y(v),
                WIDTH - RIGHT,
                LEFT - 6.0,
                self.y(v) + 4.0,
                label(v)
            );
        }
        let x_step = nice_step(self.t_max);
        let mut t = 0.0;
        while t <= self.t_max + 1e-9 {
            let _ = writeln!(
                svg,
                r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#f0f0f0"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
                self.x(t),
                TOP + PLOT_H,
                TOP + PLOT_H + 18.0,
                label(t)
            );
            t += x_step;
        }
        let _ = writeln!(
            svg,
            r##"<rect x="{LEFT}" y="{TOP}" width="{PLOT_W}" height="{PLOT_H}" fill="none" stroke="#444"/>
<text x="{}" y="{}" text-anchor="middle">time (s)</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">{}</text>"##,
            LEFT + PLOT_W / 2.0,
            HEIGHT - 14.0,
            TOP + PLOT_H / 2.0,
            if self.log {
                "interval (ms, log scale; 0 at the bottom)"
            } else {
                "interval (ms)"
            }
        );
    }

    /// One dot per spot and colour; throttles last, so they stay visible on top of
    /// the successes.
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        reason = "float to integer `as` saturates, as wanted here"
    )]
    fn dots(&self, svg: &mut String, points: &[Point]) {
        for throttled in [false, true] {
            let color = if throttled { RED } else { BLUE };
            let _ = writeln!(svg, r#"<g fill="{color}" fill-opacity="0.7">"#);
            let mut drawn = HashSet::new();
            for p in points.iter().filter(|p| p.throttled == throttled) {
                let (cx, cy) = (self.x(p.t), self.y(p.interval_ms));
                // Half a pixel: finer than a dot of radius 2.2 can show.
                if !drawn.insert(((cx * 2.0).round() as i64, (cy * 2.0).round() as i64)) {
                    continue;
                }
                let _ = writeln!(svg, r#"<circle cx="{cx:.1}" cy="{cy:.1}" r="2.2"/>"#);
            }
            svg.push_str("</g>\n");
        }
    }

    /// The capacity as one step line, each level labelled once, and its legend entry.
    fn capacity(&self, svg: &mut String, capacity: &[CapacityStep]) {
        let mut path = String::new();
        for (i, step) in capacity.iter().enumerate() {
            let until = capacity.get(i + 1).map_or(self.t_max, |next| next.t);
            let command = if i == 0 { 'M' } else { 'L' };
            let _ = write!(
                path,
                "{command}{:.1},{:.1} L{:.1},{:.1} ",
                self.x(step.t),
                self.y(step.interval_ms),
                self.x(until),
                self.y(step.interval_ms)
            );
        }
        let _ = writeln!(
            svg,
            r#"<path d="{}" fill="none" stroke="{GREEN}" stroke-width="2"/>"#,
            path.trim_end()
        );
        let mut labelled: Vec<f64> = Vec::new();
        for step in capacity {
            if labelled.iter().any(|r| (r - step.rate).abs() < 1e-9) {
                continue;
            }
            labelled.push(step.rate);
            let _ = writeln!(
                svg,
                r#"<text x="{:.1}" y="{:.1}" fill="{GREEN}" stroke="white" stroke-width="3" paint-order="stroke">capacity {}/s</text>"#,
                self.x(step.t) + 4.0,
                self.y(step.interval_ms) - 5.0,
                label(step.rate)
            );
        }
        let _ = writeln!(
            svg,
            r#"<line x1="{0}" y1="34" x2="{1}" y2="34" stroke="{GREEN}" stroke-width="2"/><text x="{2}" y="38">interval matching capacity</text>"#,
            WIDTH - RIGHT - 360.0,
            WIDTH - RIGHT - 344.0,
            WIDTH - RIGHT - 338.0
        );
    }
}

/// 1, 2 and 5 × 10^k from `lo` to `hi`, both powers of ten.
fn log_ticks(lo: f64, hi: f64) -> Vec<f64> {
    let mut ticks = Vec::new();
    let mut decade = lo;
    while decade <= hi * (1.0 + 1e-9) {
        ticks.extend(
            [1.0, 2.0, 5.0]
                .iter()
                .map(|m| m * decade)
                .filter(|v| *v <= hi * (1.0 + 1e-9)),
        );
        decade *= 10.0;
    }
    ticks
}

/// A round step (1, 2 or 5 × 10^k) giving about six ticks up to `max`.
fn nice_step(max: f64) -> f64 {
    let rough = max / 6.0;
    let magnitude = 10f64.powf(rough.log10().floor());
    let residual = rough / magnitude;
    let factor = if residual <= 1.0 {
        1.0
    } else if residual <= 2.0 {
        2.0
    } else if residual <= 5.0 {
        5.0
    } else {
        10.0
    };
    factor * magnitude
}

fn label(v: f64) -> String {
    if (v - v.round()).abs() < 1e-9 {
        format!("{}", v.round())
    } else {
        format!("{v:.2}")
    }
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dot(t: f64, interval_ms: f64) -> Point {
        Point {
            t,
            interval_ms,
            throttled: false,
        }
    }

    const STEPS: [CapacityStep; 2] = [
        CapacityStep {
            t: 0.0,
            rate: 100.0,
            interval_ms: 10.0,
        },
        CapacityStep {
            t: 20.0,
            rate: 50.0,
            interval_ms: 20.0,
        },
    ];

    #[test]
    fn capacity_steps_are_one_path_with_a_label_per_level() {
        let svg = trace_svg("t", &[dot(1.0, 12.0)], &STEPS, 60.0);
        assert_eq!(svg.matches("<path").count(), 1);
        assert!(svg.contains("capacity 100/s") && svg.contains("capacity 50/s"));
        assert!(svg.contains(">interval (ms)<"), "a linear axis");
        // The step at 20 s of 60 s, a third across the plot.
        let at = LEFT + (WIDTH - LEFT - RIGHT) / 3.0;
        assert!(svg.contains(&format!("L{at:.1},")), "{svg}");
    }

    #[test]
    fn a_runaway_interval_switches_to_a_log_axis() {
        let svg = trace_svg("t", &[dot(1.0, 12.0), dot(2.0, 5000.0)], &STEPS, 60.0);
        assert!(svg.contains("log scale"));
        assert_eq!(
            log_ticks(1.0, 100.0),
            [1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0]
        );
    }

    #[test]
    fn dots_on_the_same_spot_are_drawn_once() {
        let points: Vec<Point> = (0..1000)
            .map(|i| dot(1.0, 10.0 + f64::from(i) * 1e-6))
            .collect();
        let svg = interval_svg("t", &points);
        // One dot and the two legend dots.
        assert_eq!(svg.matches("<circle").count(), 3);
    }

    #[test]
    fn steps_are_round_numbers() {
        assert_eq!(nice_step(30.0), 5.0);
        assert_eq!(nice_step(7.0), 2.0);
        assert_eq!(nice_step(0.5), 0.1);
        assert_eq!(nice_step(600.0), 100.0);
    }

    #[test]
    fn every_point_is_drawn_in_its_colour() {
        let points = [
            Point {
                t: 0.5,
                interval_ms: 0.0,
                throttled: true,
            },
            Point {
                t: 1.0,
                interval_ms: 20.0,
                throttled: false,
            },
            Point {
                t: 2.0,
                interval_ms: 30.0,
                throttled: false,
            },
        ];
        let svg = interval_svg("demo <1>", &points);
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert_eq!(svg.matches("<circle").count(), 3 + 2);
        assert!(svg.contains("demo &lt;1&gt;"));
        let red_group = svg.split(&format!("<g fill=\"{RED}\"")).nth(1).unwrap();
        assert_eq!(
            red_group
                .split("</g>")
                .next()
                .unwrap()
                .matches("<circle")
                .count(),
            1
        );
    }
}

//! SVG plots of an interval trace, like the graph in the responsive-backoff seed: one
//! dot per attempt at (time, interval in force), blue for success, red for throttled.

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

const WIDTH: f64 = 960.0;
const HEIGHT: f64 = 440.0;
const LEFT: f64 = 72.0;
const RIGHT: f64 = 24.0;
const TOP: f64 = 48.0;
const BOTTOM: f64 = 56.0;
const BLUE: &str = "#1f6fd1";
const RED: &str = "#d62728";

/// An SVG document with the points, axes, title and legend.
pub fn interval_svg(title: &str, points: &[Point]) -> String {
    let t_max = points.iter().map(|p| p.t).fold(1.0, f64::max);
    let y_max = points.iter().map(|p| p.interval_ms).fold(1.0, f64::max) * 1.1;
    let (x_step, y_step) = (nice_step(t_max), nice_step(y_max));
    let plot_w = WIDTH - LEFT - RIGHT;
    let plot_h = HEIGHT - TOP - BOTTOM;
    let x = |t: f64| LEFT + t / t_max * plot_w;
    let y = |v: f64| TOP + plot_h - v / y_max * plot_h;

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
    // Grid and tick labels.
    let mut v = 0.0;
    while v <= y_max + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{LEFT}" y1="{0:.1}" x2="{1:.1}" y2="{0:.1}" stroke="#e4e4e4"/><text x="{2:.1}" y="{3:.1}" text-anchor="end">{4}</text>"##,
            y(v),
            WIDTH - RIGHT,
            LEFT - 6.0,
            y(v) + 4.0,
            label(v)
        );
        v += y_step;
    }
    let mut t = 0.0;
    while t <= t_max + 1e-9 {
        let _ = writeln!(
            svg,
            r##"<line x1="{0:.1}" y1="{TOP}" x2="{0:.1}" y2="{1:.1}" stroke="#f0f0f0"/><text x="{0:.1}" y="{2:.1}" text-anchor="middle">{3}</text>"##,
            x(t),
            TOP + plot_h,
            TOP + plot_h + 18.0,
            label(t)
        );
        t += x_step;
    }
    let _ = writeln!(
        svg,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w}" height="{plot_h}" fill="none" stroke="#444"/>
<text x="{}" y="{}" text-anchor="middle">time (s)</text>
<text transform="translate(18,{}) rotate(-90)" text-anchor="middle">interval (ms)</text>"##,
        LEFT + plot_w / 2.0,
        HEIGHT - 14.0,
        TOP + plot_h / 2.0
    );
    // Throttles last, so they stay visible on top of the successes.
    for throttled in [false, true] {
        let color = if throttled { RED } else { BLUE };
        let _ = writeln!(svg, r#"<g fill="{color}" fill-opacity="0.7">"#);
        for p in points.iter().filter(|p| p.throttled == throttled) {
            let _ = writeln!(
                svg,
                r#"<circle cx="{:.1}" cy="{:.1}" r="2.2"/>"#,
                x(p.t),
                y(p.interval_ms)
            );
        }
        svg.push_str("</g>\n");
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

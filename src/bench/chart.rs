//! An SVG grouped bar chart of a [`Report`]: per case, achieved GB/s (minimal bytes over the
//! median `run_into` time) unfused and fused (or, for `--compare`, A and B), with the copy
//! bandwidth as a dashed line. Written by hand (no font or plotting dependency); every bar is
//! a `<rect>` with class `unfused` or `fused` (`a` or `b`) and a `<title>` tooltip giving the
//! figures.

use super::run::Timing;
use super::Report;
use std::fmt::Write as _;

const PLOT_H: f64 = 300.0;
const TOP: f64 = 50.0;
const LEFT: f64 = 70.0;
const GROUP_W: f64 = 64.0;
const BAR_W: f64 = 24.0;
const BOTTOM: f64 = 190.0;

/// Escapes text for SVG content and attributes.
fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A "nice" axis maximum ≥ `v`: 1, 2 or 5 times a power of ten.
fn nice_max(v: f64) -> f64 {
    if !(v.is_finite() && v > 0.0) {
        return 1.0;
    }
    let p = 10f64.powf(v.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * p)
        .find(|m| *m >= v)
        .unwrap_or(10.0 * p)
}

/// One group of two bars.
struct Group<'r> {
    name: &'r str,
    bars: [&'r Timing; 2],
    /// Printed above the group.
    ratio: String,
}

/// The chart as SVG text.
pub fn svg(r: &Report) -> String {
    match &r.comparison {
        Some(c) => {
            let groups = c.cases.iter().map(|x| Group {
                name: &x.name,
                bars: [&x.a.run_into, &x.b.run_into],
                ratio: format!("{:.2}", x.a_over_b_run_into),
            });
            bars(
                r,
                &format!("--compare {}, A/B above each case", c.knob),
                [("a", &format!("A: {}", c.a)), ("b", &format!("B: {}", c.b))],
                groups.collect(),
            )
        }
        None => {
            let groups = r.cases.iter().map(|x| Group {
                name: &x.name,
                bars: [&x.unfused.run_into, &x.fused.run_into],
                ratio: format!("{:.2}x", x.speedup_run_into),
            });
            bars(
                r,
                "fused vs unfused, speedup above each case",
                [("unfused", "unfused"), ("fused", "fused")],
                groups.collect(),
            )
        }
    }
}

/// The chart of `groups`, each bar of class and legend `series[i]`.
fn bars(r: &Report, what: &str, series: [(&str, &str); 2], groups: Vec<Group>) -> String {
    let n = groups.len();
    // Case names run down and to the right at 45°, past the last group: a wide right margin.
    let width = (LEFT + GROUP_W * n.max(1) as f64 + 150.0).max(600.0);
    let height = TOP + PLOT_H + BOTTOM;
    let copy = r.stream.as_ref().map(|s| s.reference_gbps);
    let top = groups
        .iter()
        .flat_map(|g| g.bars.map(|t| t.gbps))
        .chain(copy)
        .fold(0.0, f64::max);
    let ymax = nice_max(top * 1.05);
    let y = |v: f64| TOP + PLOT_H * (1.0 - (v / ymax).clamp(0.0, 1.0));
    let base = TOP + PLOT_H;

    let mut s = String::new();
    let _ = writeln!(
        s,
        r##"<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0}" height="{height:.0}" viewBox="0 0 {width:.0} {height:.0}" font-family="sans-serif" font-size="11">"##
    );
    let _ = writeln!(
        s,
        r##"<style>.unfused,.a{{fill:#9aa5b1}}.fused,.b{{fill:#d9480f}}.copy{{stroke:#1864ab;stroke-dasharray:6 4}}</style>"##
    );
    let _ = writeln!(s, r##"<rect width="100%" height="100%" fill="white"/>"##);
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="20" font-size="14">smelt bench: GB/s achieved (minimal bytes / median run_into), {}, {}</text>"##,
        esc(&r.device),
        esc(what)
    );
    let _ = writeln!(
        s,
        r##"<text x="{LEFT}" y="36" fill="#555">{} | {}</text>"##,
        esc(&r.machine.cpu),
        esc(&r.date)
    );
    // Axis, ticks and grid.
    for i in 0..=5 {
        let v = ymax * i as f64 / 5.0;
        let yy = y(v);
        let _ = writeln!(
            s,
            r##"<line x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            width - 140.0,
            LEFT - 6.0,
            yy + 4.0,
            if ymax >= 10.0 {
                format!("{v:.0}")
            } else {
                format!("{v:.2}")
            }
        );
    }
    let _ = writeln!(
        s,
        r##"<line x1="{LEFT}" x2="{LEFT}" y1="{TOP}" y2="{base}" stroke="black"/><line x1="{LEFT}" x2="{:.1}" y1="{base}" y2="{base}" stroke="black"/>"##,
        width - 140.0
    );
    let _ = writeln!(
        s,
        r##"<text transform="translate(18 {:.1}) rotate(-90)" text-anchor="middle">GB/s</text>"##,
        TOP + PLOT_H / 2.0
    );
    for (i, g) in groups.iter().enumerate() {
        let x0 = LEFT + GROUP_W * i as f64 + (GROUP_W - 2.0 * BAR_W) / 2.0;
        let _ = writeln!(s, r##"<g class="case" data-case="{}">"##, esc(g.name));
        for (k, ((class, label), t)) in series.iter().zip(g.bars).enumerate() {
            let x = x0 + BAR_W * k as f64;
            let top = y(t.gbps);
            let _ = writeln!(
                s,
                r##"<rect class="{class}" x="{x:.1}" y="{top:.1}" width="{BAR_W}" height="{:.1}"><title>{} {}: {:.2} GB/s, median {:.3} ms</title></rect>"##,
                (base - top).max(0.0),
                esc(g.name),
                esc(label),
                t.gbps,
                t.median_ms
            );
        }
        let xc = x0 + BAR_W;
        let _ = writeln!(
            s,
            r##"<text x="{xc:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            y(g.bars[0].gbps.max(g.bars[1].gbps)) - 4.0,
            esc(&g.ratio)
        );
        let _ = writeln!(
            s,
            r##"<text transform="translate({xc:.1} {:.1}) rotate(45)" text-anchor="start">{}</text>"##,
            base + 14.0,
            esc(g.name)
        );
        let _ = writeln!(s, "</g>");
    }
    if let Some(c) = copy {
        let yy = y(c);
        let _ = writeln!(
            s,
            r##"<line class="copy" x1="{LEFT}" x2="{:.1}" y1="{yy:.1}" y2="{yy:.1}"/><text x="{:.1}" y="{:.1}" text-anchor="end" fill="#1864ab">copy {c:.1} GB/s</text>"##,
            width - 140.0,
            width - 142.0,
            yy - 4.0
        );
    }
    // Legend: one swatch and label per series, side by side.
    let ly = height - 20.0;
    let mut lx = LEFT;
    for (class, label) in series {
        let _ = writeln!(
            s,
            r##"<rect class="{class}" x="{lx:.1}" y="{:.1}" width="12" height="12"/><text x="{:.1}" y="{ly:.1}">{}</text>"##,
            ly - 10.0,
            lx + 16.0,
            esc(label)
        );
        lx += 16.0 + 7.0 * label.chars().count() as f64 + 24.0;
    }
    s.push_str("</svg>\n");
    s
}

#[cfg(test)]
mod tests {
    use super::nice_max;

    #[test]
    fn axis_maxima() {
        assert_eq!(nice_max(0.0), 1.0);
        assert_eq!(nice_max(3.2), 5.0);
        assert_eq!(nice_max(12.0), 20.0);
        assert_eq!(nice_max(100.0), 100.0);
    }
}

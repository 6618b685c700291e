//! SVG charts of the side-by-side benchmarks, written by hand: a grouped bar chart and a line
//! chart, with axes, ticks and a legend. (Plotting crates lay text out with a font backend; an SVG
//! file needs none, so a few lines of markup are the smaller dependency.)

use std::fmt::Write as _;

const W: f64 = 760.0;
const H: f64 = 400.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 170.0;
const TOP: f64 = 40.0;
const BOTTOM: f64 = 60.0;
const COLORS: [&str; 6] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b",
];

/// One named series of values, one per category (bar chart) or per x (line chart); `None` = no
/// figure (not run, or failed).
#[derive(Debug, Clone)]
pub struct Series {
    /// Legend label.
    pub name: String,
    /// Values.
    pub values: Vec<Option<f64>>,
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// A "nice" axis maximum and tick step for values up to `max`.
fn nice(max: f64) -> (f64, f64) {
    let max = if max > 0.0 && max.is_finite() {
        max
    } else {
        1.0
    };
    let mag = 10f64.powf(max.log10().floor());
    let step = [0.1, 0.2, 0.25, 0.5, 1.0, 2.0, 2.5, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| max / s <= 6.0)
        .unwrap_or(mag * 10.0);
    ((max / step).ceil() * step, step)
}

fn fmt_tick(v: f64) -> String {
    if v >= 1e6 {
        format!("{}M", trim(v / 1e6))
    } else if v >= 1e3 {
        format!("{}k", trim(v / 1e3))
    } else {
        trim(v)
    }
}

fn trim(v: f64) -> String {
    let s = format!("{v:.2}");
    s.trim_end_matches('0').trim_end_matches('.').to_owned()
}

fn frame(out: &mut String, title: &str, y_label: &str, ymax: f64, step: f64) {
    let _ = write!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" viewBox="0 0 {W} {H}" font-family="sans-serif" font-size="12">
<rect width="{W}" height="{H}" fill="white"/>
<text x="{}" y="22" text-anchor="middle" font-size="15" font-weight="bold">{}</text>
<text transform="translate(16,{}) rotate(-90)" text-anchor="middle">{}</text>
"#,
        (LEFT + W - RIGHT) / 2.0,
        escape(title),
        (TOP + H - BOTTOM) / 2.0,
        escape(y_label)
    );
    let plot_h = H - TOP - BOTTOM;
    let mut v = 0.0;
    while v <= ymax + step / 2.0 {
        let y = H - BOTTOM - v / ymax * plot_h;
        let _ = writeln!(
            out,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{}" y2="{y:.1}" stroke="#ddd"/><text x="{}" y="{:.1}" text-anchor="end">{}</text>"##,
            W - RIGHT,
            LEFT - 6.0,
            y + 4.0,
            fmt_tick(v)
        );
        v += step;
    }
    let _ = writeln!(
        out,
        r#"<line x1="{LEFT}" y1="{TOP}" x2="{LEFT}" y2="{}" stroke="black"/><line x1="{LEFT}" y1="{}" x2="{}" y2="{}" stroke="black"/>"#,
        H - BOTTOM,
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
}

fn legend(out: &mut String, series: &[Series]) {
    for (i, s) in series.iter().enumerate() {
        let y = TOP + 10.0 + i as f64 * 20.0;
        let _ = writeln!(
            out,
            r#"<rect x="{}" y="{}" width="12" height="12" fill="{}"/><text x="{}" y="{}">{}</text>"#,
            W - RIGHT + 14.0,
            y - 10.0,
            COLORS[i % COLORS.len()],
            W - RIGHT + 32.0,
            y,
            escape(&s.name)
        );
    }
}

/// A grouped bar chart: one group per category, one bar per series.
pub fn bars(title: &str, y_label: &str, categories: &[String], series: &[Series]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let (ymax, step) = nice(max);
    let mut out = String::new();
    frame(&mut out, title, y_label, ymax, step);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let group_w = plot_w / categories.len().max(1) as f64;
    let bar_w = group_w * 0.8 / series.len().max(1) as f64;
    for (c, cat) in categories.iter().enumerate() {
        let gx = LEFT + c as f64 * group_w + group_w * 0.1;
        for (i, s) in series.iter().enumerate() {
            let Some(v) = s.values.get(c).copied().flatten() else {
                continue;
            };
            let h = v / ymax * plot_h;
            let _ = writeln!(
                out,
                r#"<rect x="{:.1}" y="{:.1}" width="{:.1}" height="{:.1}" fill="{}"><title>{}: {}</title></rect>"#,
                gx + i as f64 * bar_w,
                H - BOTTOM - h,
                bar_w * 0.92,
                h,
                COLORS[i % COLORS.len()],
                escape(&s.name),
                fmt_tick(v)
            );
        }
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            gx + group_w * 0.4,
            H - BOTTOM + 18.0,
            escape(cat)
        );
    }
    legend(&mut out, series);
    out.push_str("</svg>\n");
    out
}

/// A line chart: x positions are the categories (evenly spaced), one line per series.
pub fn lines(title: &str, y_label: &str, x_labels: &[String], series: &[Series]) -> String {
    let max = series
        .iter()
        .flat_map(|s| s.values.iter().flatten())
        .fold(0.0f64, |a, b| a.max(*b));
    let (ymax, step) = nice(max);
    let mut out = String::new();
    frame(&mut out, title, y_label, ymax, step);
    let plot_w = W - LEFT - RIGHT;
    let plot_h = H - TOP - BOTTOM;
    let n = x_labels.len().max(2) - 1;
    let x = |i: usize| LEFT + 30.0 + i as f64 / n as f64 * (plot_w - 60.0);
    for (i, l) in x_labels.iter().enumerate() {
        let _ = writeln!(
            out,
            r#"<text x="{:.1}" y="{}" text-anchor="middle">{}</text>"#,
            x(i),
            H - BOTTOM + 18.0,
            escape(l)
        );
    }
    for (k, s) in series.iter().enumerate() {
        let color = COLORS[k % COLORS.len()];
        let pts: Vec<String> = s
            .values
            .iter()
            .enumerate()
            .filter_map(|(i, v)| {
                v.map(|v| format!("{:.1},{:.1}", x(i), H - BOTTOM - v / ymax * plot_h))
            })
            .collect();
        let _ = writeln!(
            out,
            r#"<polyline points="{}" fill="none" stroke="{color}" stroke-width="2"/>"#,
            pts.join(" ")
        );
        for p in &pts {
            if let Some((px, py)) = p.split_once(',') {
                let _ = writeln!(
                    out,
                    r#"<circle cx="{px}" cy="{py}" r="3.5" fill="{color}"/>"#
                );
            }
        }
    }
    legend(&mut out, series);
    out.push_str("</svg>\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn charts_are_well_formed_and_scaled() {
        let s = vec![
            Series {
                name: "a<b".into(),
                values: vec![Some(10.0), None],
            },
            Series {
                name: "c".into(),
                values: vec![Some(40.0), Some(5.0)],
            },
        ];
        let cats = vec!["x".to_string(), "y".to_string()];
        let b = bars("t", "records/s", &cats, &s);
        assert!(b.starts_with("<svg") && b.ends_with("</svg>\n"));
        assert_eq!(
            b.matches("<rect x=").count(),
            3 + 2,
            "3 bars and 2 legend boxes"
        );
        assert!(b.contains("a&lt;b"));
        let l = lines("t", "ms", &cats, &s);
        assert_eq!(l.matches("<circle").count(), 3);
        assert_eq!(nice(37.0), (40.0, 10.0));
        assert_eq!(fmt_tick(2_500_000.0), "2.5M");
    }
}

//! Charts as SVG text: time series (lines, ranges, dots that link to the
//! results behind them, marks on the time axis) and bar charts. The
//! agent's dashboard and `goodput report` draw with this same code, so a
//! chart looks the same in both; SVG needs no script and no font files,
//! and the browser (or any SVG reader) renders it.

use std::fmt::Write as _;

/// A colour-blind-safe palette (Okabe and Ito's).
pub mod palette {
    /// Blue.
    pub const BLUE: &str = "#0072B2";
    /// Orange.
    pub const ORANGE: &str = "#E69F00";
    /// Bluish green.
    pub const GREEN: &str = "#009E73";
    /// Vermillion.
    pub const VERMILLION: &str = "#D55E00";
    /// Reddish purple.
    pub const PURPLE: &str = "#CC79A7";
    /// Sky blue.
    pub const SKY: &str = "#56B4E9";
    /// Yellow.
    pub const YELLOW: &str = "#F0E442";
    /// Black.
    pub const BLACK: &str = "#000000";
    /// Grey, for what is missing.
    pub const GREY: &str = "#999999";
    /// The series colours, in order.
    pub const SERIES: [&str; 6] = [BLUE, ORANGE, GREEN, PURPLE, SKY, VERMILLION];
}

/// How a series is drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Style {
    /// A line through the points (a gap where they are further apart than
    /// `Chart::gap_ms`).
    Line,
    /// A dot at each point.
    Dots,
    /// A line, and a dot at each point.
    LineDots,
}

/// One point: a time (ms since the Unix epoch), a value in the chart's
/// unit, and what hovering over it (and clicking it) shows.
#[derive(Debug, Clone, PartialEq)]
pub struct Point {
    /// Time, ms.
    pub at_ms: u64,
    /// Value.
    pub value: f64,
    /// Its tooltip (none: the series' name and the value).
    pub title: Option<String>,
    /// Where a click leads (the results behind it).
    pub link: Option<String>,
}

impl Point {
    /// A point with no tooltip of its own and no link.
    pub fn new(at_ms: u64, value: f64) -> Self {
        Self {
            at_ms,
            value,
            title: None,
            link: None,
        }
    }
}

/// A named series.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Its name, in the legend.
    pub name: String,
    /// Its colour.
    pub color: &'static str,
    /// How it is drawn.
    pub style: Style,
    /// Its points, oldest first.
    pub points: Vec<Point>,
}

/// A range drawn as a shaded band (a minimum to a maximum).
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// Its name, in the legend.
    pub name: String,
    /// Its colour.
    pub color: &'static str,
    /// (time ms, low, high), oldest first.
    pub points: Vec<(u64, f64, f64)>,
}

/// An event on the time axis (a failed run, a run that did not start, a
/// loss), with its reason.
#[derive(Debug, Clone, PartialEq)]
pub struct Mark {
    /// Time, ms.
    pub at_ms: u64,
    /// Its colour.
    pub color: &'static str,
    /// What it was.
    pub title: String,
}

/// A time-series chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Title above it.
    pub title: String,
    /// The values' unit, on the axis.
    pub unit: String,
    /// Time range shown, ms.
    pub from_ms: u64,
    /// End of the range.
    pub to_ms: u64,
    /// Series.
    pub series: Vec<Series>,
    /// Bands, drawn under the series.
    pub bands: Vec<Band>,
    /// Marks on the time axis.
    pub marks: Vec<Mark>,
    /// Points further apart than this are not joined (0: always joined).
    pub gap_ms: u64,
    /// Size in pixels.
    pub width: u32,
    /// Size in pixels.
    pub height: u32,
    /// Label the time axis with the time since `from_ms` (a run's own
    /// clock) instead of the time of day.
    pub elapsed: bool,
}

impl Chart {
    /// An empty chart over a time range.
    pub fn new(title: &str, unit: &str, from_ms: u64, to_ms: u64) -> Self {
        Self {
            title: title.into(),
            unit: unit.into(),
            from_ms,
            to_ms: to_ms.max(from_ms.saturating_add(1)),
            series: Vec::new(),
            bands: Vec::new(),
            marks: Vec::new(),
            gap_ms: 0,
            width: 900,
            height: 260,
            elapsed: false,
        }
    }

    /// Whether it has anything to draw.
    pub fn is_empty(&self) -> bool {
        self.series.iter().all(|s| s.points.is_empty()) && self.bands.iter().all(|b| b.points.is_empty())
    }
}

/// Text for XML: `&`, `<`, `>`, quotes escaped.
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// Round tick values covering `lo..hi`: about `n` of them, at 1, 2 or 5
/// times a power of ten.
pub fn ticks(lo: f64, hi: f64, n: usize) -> Vec<f64> {
    if !(lo.is_finite() && hi.is_finite()) || hi <= lo {
        return vec![lo];
    }
    let raw = (hi - lo) / n.max(1) as f64;
    let mag = 10f64.powf(raw.log10().floor());
    let step = [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * mag)
        .find(|s| *s >= raw)
        .unwrap_or(10.0 * mag);
    let mut t = (lo / step).ceil() * step;
    let mut out = Vec::new();
    while t <= hi + step * 1e-9 && out.len() < 50 {
        out.push(if t.abs() < step * 1e-9 { 0.0 } else { t });
        t += step;
    }
    out
}

/// A value as a tick label: no more digits than the step needs.
fn tick_label(v: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10().floor()) as usize
    };
    format!("{v:.decimals$}")
}

/// A time (ms) as a label for a span of `span_ms`: the date for long
/// spans, the time of day for short ones (UTC).
pub fn time_label(ms: u64, span_ms: u64) -> String {
    let t = goodput_core::time::ms_rfc3339(ms);
    // 2026-11-25T20:23:14.000Z
    let date = t.get(5..10).unwrap_or("");
    let time = t.get(11..16).unwrap_or("");
    if span_ms > 4 * 86_400_000 {
        date.to_owned()
    } else if span_ms > 86_400_000 {
        format!("{date} {time}")
    } else {
        time.to_owned()
    }
}

/// A time since a run started as a label for a span of `span_ms`:
/// seconds for short runs, minutes and seconds for long ones.
pub fn elapsed_label(ms: u64, span_ms: u64) -> String {
    if span_ms <= 1_000 {
        format!("{:.2} s", ms as f64 / 1e3)
    } else if span_ms <= 10_000 {
        format!("{:.1} s", ms as f64 / 1e3)
    } else if span_ms <= 600_000 {
        format!("{} s", ms.saturating_add(500) / 1000)
    } else {
        let s = ms.saturating_add(500) / 1000;
        format!("{}:{:02}", s / 60, s % 60)
    }
}

/// The value axis: a grid line and label per tick, and the unit along it.
fn value_axis(
    s: &mut String,
    ticks: &[f64],
    step: f64,
    y_of: &dyn Fn(f64) -> f64,
    plot_w: f64,
    plot_h: f64,
    unit: &str,
) {
    for v in ticks {
        let y = y_of(*v);
        let _ = write!(
            s,
            r##"<line x1="{LEFT}" y1="{y:.1}" x2="{:.1}" y2="{y:.1}" stroke="#ddd"/><text x="{:.1}" y="{:.1}" text-anchor="end">{}</text>"##,
            LEFT + plot_w,
            LEFT - 4.0,
            y + 4.0,
            tick_label(*v, step)
        );
    }
    let _ = write!(
        s,
        r#"<text x="12" y="{:.1}" transform="rotate(-90 12 {:.1})" text-anchor="middle">{}</text>"#,
        TOP + plot_h / 2.0,
        TOP + plot_h / 2.0,
        escape(unit)
    );
}

const LEFT: f64 = 64.0;
const RIGHT: f64 = 16.0;
const TOP: f64 = 28.0;
const BOTTOM: f64 = 58.0;

/// Draws the chart as an `<svg>` element.
pub fn svg(c: &Chart) -> String {
    let (w, h) = (f64::from(c.width), f64::from(c.height));
    let plot_w = (w - LEFT - RIGHT).max(10.0);
    let plot_h = (h - TOP - BOTTOM).max(10.0);
    let span = c.to_ms.saturating_sub(c.from_ms).max(1);
    let x_of = |t: u64| LEFT + (t.saturating_sub(c.from_ms)) as f64 / span as f64 * plot_w;
    let values = c
        .series
        .iter()
        .flat_map(|s| s.points.iter().map(|p| p.value))
        .chain(
            c.bands
                .iter()
                .flat_map(|b| b.points.iter().flat_map(|p| [p.1, p.2])),
        )
        .filter(|v| v.is_finite());
    let (mut lo, mut hi) = values.fold((f64::INFINITY, f64::NEG_INFINITY), |(l, h), v| {
        (l.min(v), h.max(v))
    });
    if !lo.is_finite() {
        (lo, hi) = (0.0, 1.0);
    }
    lo = lo.min(0.0);
    if hi <= lo {
        hi = lo + 1.0;
    }
    hi += (hi - lo) * 0.05;
    let yt = ticks(lo, hi, 5);
    let step = if yt.len() > 1 { yt[1] - yt[0] } else { 1.0 };
    if let Some(last) = yt.last() {
        hi = hi.max(*last);
    }
    let y_of = |v: f64| TOP + plot_h - (v - lo) / (hi - lo) * plot_h;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11" role="img" aria-label="{}">"#,
        escape(&c.title)
    );
    let _ = write!(
        s,
        r#"<text x="{LEFT}" y="16" font-size="13" font-weight="bold">{}</text>"#,
        escape(&c.title)
    );
    // Axes and grid.
    value_axis(&mut s, &yt, step, &y_of, plot_w, plot_h, &c.unit);
    let n_x = (plot_w / 110.0).max(2.0) as u64;
    for i in 0..=n_x {
        let t = c
            .from_ms
            .saturating_add((u128::from(span) * u128::from(i) / u128::from(n_x)) as u64);
        let x = x_of(t);
        let _ = write!(
            s,
            r##"<line x1="{x:.1}" y1="{TOP}" x2="{x:.1}" y2="{:.1}" stroke="#eee"/><text x="{x:.1}" y="{:.1}" text-anchor="middle">{}</text>"##,
            TOP + plot_h,
            TOP + plot_h + 14.0,
            if c.elapsed {
                elapsed_label(t - c.from_ms, span)
            } else {
                time_label(t, span)
            }
        );
    }
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w:.1}" height="{plot_h:.1}" fill="none" stroke="#888"/>"##
    );
    // Bands.
    for b in &c.bands {
        if b.points.is_empty() {
            continue;
        }
        let mut d = String::new();
        for (i, (t, l, _)) in b.points.iter().enumerate() {
            let _ = write!(
                d,
                "{}{:.1},{:.1} ",
                if i == 0 { "M" } else { "L" },
                x_of(*t),
                y_of(*l)
            );
        }
        for (t, _, hgh) in b.points.iter().rev() {
            let _ = write!(d, "L{:.1},{:.1} ", x_of(*t), y_of(*hgh));
        }
        let _ = write!(
            s,
            r#"<path d="{}Z" fill="{}" fill-opacity="0.18" stroke="none"><title>{}</title></path>"#,
            d,
            b.color,
            escape(&b.name)
        );
    }
    // Series.
    for ser in &c.series {
        if matches!(ser.style, Style::Line | Style::LineDots) && ser.points.len() > 1 {
            let mut d = String::new();
            let mut prev: Option<u64> = None;
            for p in ser.points.iter().filter(|p| p.value.is_finite()) {
                let join = prev.is_some_and(|t| c.gap_ms == 0 || p.at_ms.saturating_sub(t) <= c.gap_ms);
                let _ = write!(
                    d,
                    "{}{:.1},{:.1} ",
                    if join { "L" } else { "M" },
                    x_of(p.at_ms),
                    y_of(p.value)
                );
                prev = Some(p.at_ms);
            }
            let _ = write!(
                s,
                r#"<path d="{d}" fill="none" stroke="{}" stroke-width="1.6" class="series" data-name="{}"/>"#,
                ser.color,
                escape(&ser.name)
            );
        }
        let dots = matches!(ser.style, Style::Dots | Style::LineDots) || ser.points.len() == 1;
        for p in ser.points.iter().filter(|p| p.value.is_finite()) {
            let title = p
                .title
                .clone()
                .unwrap_or_else(|| format!("{}: {} {}", ser.name, p.value, c.unit));
            // Every point has a target for its tooltip and link; only
            // dotted series show it.
            let (r, opacity) = if dots { (3.0, 1.0) } else { (4.0, 0.0) };
            let circle = format!(
                r#"<circle cx="{:.1}" cy="{:.1}" r="{r}" fill="{}" fill-opacity="{opacity}" class="point"><title>{}</title></circle>"#,
                x_of(p.at_ms),
                y_of(p.value),
                ser.color,
                escape(&title)
            );
            match &p.link {
                Some(l) => {
                    let _ = write!(s, r#"<a href="{}">{circle}</a>"#, escape(l));
                }
                None => s.push_str(&circle),
            }
        }
    }
    // Marks, on a strip below the time axis.
    let strip = TOP + plot_h + 22.0;
    for m in &c.marks {
        let x = x_of(m.at_ms);
        let _ = write!(
            s,
            r#"<path d="M{x:.1},{strip:.1} l-5,9 h10 z" fill="{}" class="mark"><title>{}</title></path>"#,
            m.color,
            escape(&m.title)
        );
    }
    // Legend.
    let mut lx = LEFT;
    let ly = h - 8.0;
    let names = c
        .bands
        .iter()
        .map(|b| (b.name.as_str(), b.color, true))
        .chain(c.series.iter().map(|s| (s.name.as_str(), s.color, false)));
    for (name, color, band) in names {
        let op = if band { 0.3 } else { 1.0 };
        let _ = write!(
            s,
            r#"<rect x="{lx:.1}" y="{:.1}" width="12" height="8" fill="{color}" fill-opacity="{op}"/><text x="{:.1}" y="{ly:.1}">{}</text>"#,
            ly - 8.0,
            lx + 16.0,
            escape(name)
        );
        lx += 24.0 + 6.5 * name.chars().count() as f64;
    }
    if c.is_empty() {
        let _ = write!(
            s,
            r##"<text x="{:.1}" y="{:.1}" text-anchor="middle" fill="#666">no results in this range</text>"##,
            LEFT + plot_w / 2.0,
            TOP + plot_h / 2.0
        );
    }
    s.push_str("</svg>");
    s
}

/// A bar chart: labelled bars (a histogram's buckets, say).
pub fn bars(title: &str, unit: &str, bars: &[(String, f64)], color: &str, width: u32, height: u32) -> String {
    let (w, h) = (f64::from(width), f64::from(height));
    let plot_w = (w - LEFT - RIGHT).max(10.0);
    let plot_h = (h - TOP - BOTTOM).max(10.0);
    let hi = bars
        .iter()
        .map(|b| b.1)
        .filter(|v| v.is_finite())
        .fold(0.0, f64::max)
        .max(1e-12)
        * 1.05;
    let yt = ticks(0.0, hi, 5);
    let step = if yt.len() > 1 { yt[1] - yt[0] } else { 1.0 };
    let hi = yt.last().copied().unwrap_or(hi).max(hi);
    let y_of = |v: f64| TOP + plot_h - v / hi * plot_h;
    let mut s = String::new();
    let _ = write!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" class="chart" width="{w}" height="{h}" viewBox="0 0 {w} {h}" font-family="sans-serif" font-size="11" role="img" aria-label="{}"><text x="{LEFT}" y="16" font-size="13" font-weight="bold">{}</text>"#,
        escape(title),
        escape(title)
    );
    value_axis(&mut s, &yt, step, &y_of, plot_w, plot_h, unit);
    let n = bars.len().max(1) as f64;
    let bw = plot_w / n;
    let every = (bars.len() / 12).max(1);
    for (i, (label, v)) in bars.iter().enumerate() {
        let x = LEFT + bw * i as f64;
        let y = y_of(v.max(0.0));
        let _ = write!(
            s,
            r#"<rect x="{:.1}" y="{y:.1}" width="{:.1}" height="{:.1}" fill="{color}" class="bar"><title>{}: {v}</title></rect>"#,
            x + bw * 0.1,
            (bw * 0.8).max(1.0),
            (TOP + plot_h - y).max(0.0),
            escape(label)
        );
        if i % every == 0 {
            let _ = write!(
                s,
                r#"<text x="{:.1}" y="{:.1}" text-anchor="middle">{}</text>"#,
                x + bw / 2.0,
                TOP + plot_h + 14.0,
                escape(label)
            );
        }
    }
    let _ = write!(
        s,
        r##"<rect x="{LEFT}" y="{TOP}" width="{plot_w:.1}" height="{plot_h:.1}" fill="none" stroke="#888"/></svg>"##
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ticks_are_round_and_cover_the_range() {
        assert_eq!(ticks(0.0, 10.0, 5), vec![0.0, 2.0, 4.0, 6.0, 8.0, 10.0]);
        let t = ticks(0.013, 0.049, 4);
        assert!(
            t.first().unwrap() >= &0.013 && t.last().unwrap() <= &0.049,
            "{t:?}"
        );
        assert_eq!(ticks(5.0, 5.0, 5), vec![5.0]);
    }

    #[test]
    fn a_chart_is_well_formed_svg_with_titles_links_and_marks() {
        let mut c = Chart::new("Loss <a&b>", "%", 0, 3_600_000);
        c.series.push(Series {
            name: "forward".into(),
            color: palette::BLUE,
            style: Style::LineDots,
            points: vec![
                Point::new(0, 0.0),
                Point {
                    at_ms: 1_800_000,
                    value: 1.5,
                    title: Some("1.5 % at 00:30".into()),
                    link: Some("/ui/runs?a=1&b=2".into()),
                },
            ],
        });
        c.marks.push(Mark {
            at_ms: 900_000,
            color: palette::VERMILLION,
            title: "failed: peer busy".into(),
        });
        let s = svg(&c);
        assert!(s.starts_with("<svg") && s.ends_with("</svg>"));
        assert!(s.contains("Loss &lt;a&amp;b&gt;"));
        assert!(s.contains(r#"<a href="/ui/runs?a=1&amp;b=2">"#));
        assert!(s.contains("<title>1.5 % at 00:30</title>"));
        assert!(s.contains("failed: peer busy"));
        assert_eq!(s.matches("class=\"point\"").count(), 2);
        let empty = svg(&Chart::new("none", "ms", 0, 1));
        assert!(empty.contains("no results in this range"));
        let b = bars(
            "rtt",
            "packets",
            &[("1 ms".into(), 3.0), ("2 ms".into(), 7.0)],
            palette::GREEN,
            400,
            200,
        );
        assert_eq!(b.matches("class=\"bar\"").count(), 2);
    }
}

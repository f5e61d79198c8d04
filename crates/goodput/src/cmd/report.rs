//! `goodput report`: reads result documents, writes one self-contained
//! HTML file and, with `--png`, each chart as a PNG image (the same SVG
//! rendered by resvg, so the images and the page cannot disagree).

use super::{Stop, EXIT_OK};
use crate::flags::ReportArgs;
use anyhow::{anyhow, Context as _};
use goodput_core::result::TestResult;
use goodput_report::{html_report, ReportInput};
use std::io::{Read as _, Write as _};
use std::path::Path;

/// Most documents read from all files together.
const MAX_DOCUMENTS: usize = 1000;

pub(crate) fn report(args: &ReportArgs) -> Result<u8, Stop> {
    if args.max_input_mib == 0 {
        return Err(Stop::Usage("--max-input-mib must be at least 1".into()));
    }
    let limit = args.max_input_mib.saturating_mul(1 << 20);
    let mut runs = Vec::new();
    for path in &args.results {
        runs.extend(read_documents(path, limit).map_err(Stop::Fatal)?);
        if runs.len() > MAX_DOCUMENTS {
            return Err(Stop::Usage(format!(
                "more than {MAX_DOCUMENTS} result documents: report fewer at a time"
            )));
        }
    }
    let baseline = match &args.baseline {
        None => None,
        Some(p) => {
            let mut docs = read_documents(p, limit).map_err(Stop::Fatal)?;
            if docs.len() != 1 {
                return Err(Stop::Usage(format!(
                    "--baseline {} holds {} result documents; it must hold one",
                    p.display(),
                    docs.len()
                )));
            }
            docs.pop()
        }
    };
    let report = html_report(&runs, baseline.as_ref());
    write_file(&args.output, report.html.as_bytes()).map_err(Stop::Output)?;
    if let Some(dir) = &args.png {
        std::fs::create_dir_all(dir)
            .with_context(|| format!("cannot make {}", dir.display()))
            .map_err(Stop::Output)?;
        let fonts = fonts();
        if fonts.is_empty() {
            eprintln!(
                "goodput: no system font found: the PNG charts' text is left out (the HTML report has it)"
            );
        }
        for c in &report.charts {
            let png = png_of(&c.svg, &fonts).map_err(Stop::Fatal)?;
            let path = dir.join(format!("{}.png", c.name));
            std::fs::write(&path, png)
                .with_context(|| format!("cannot write {}", path.display()))
                .map_err(Stop::Output)?;
        }
        eprintln!(
            "goodput: {} PNG charts written to {}",
            report.charts.len(),
            dir.display()
        );
    }
    if !goodput_report::is_stdout(&args.output) {
        eprintln!(
            "goodput: report of {} run{} written to {} ({} charts)",
            runs.len(),
            if runs.len() == 1 { "" } else { "s" },
            args.output.display(),
            report.charts.len()
        );
    }
    Ok(EXIT_OK)
}

/// Every result document in a file: one, several one after another (JSON
/// lines), or an array of them. Each is named after the file (and its
/// place in it when there are several).
fn read_documents(path: &Path, limit: u64) -> anyhow::Result<Vec<ReportInput>> {
    let mut text = String::new();
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    f.take(limit + 1)
        .read_to_string(&mut text)
        .with_context(|| format!("cannot read {}", path.display()))?;
    if text.len() as u64 > limit {
        return Err(anyhow!(
            "{} is larger than --max-input-mib ({} MiB)",
            path.display(),
            limit >> 20
        ));
    }
    let mut values = Vec::new();
    for v in serde_json::Deserializer::from_str(&text).into_iter::<serde_json::Value>() {
        let v = v.with_context(|| format!("{} is not JSON", path.display()))?;
        match v {
            serde_json::Value::Array(a) => values.extend(a),
            v => values.push(v),
        }
        if values.len() > MAX_DOCUMENTS {
            return Err(anyhow!(
                "{} holds more than {MAX_DOCUMENTS} documents",
                path.display()
            ));
        }
    }
    if values.is_empty() {
        return Err(anyhow!("{} holds no result document", path.display()));
    }
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let several = values.len() > 1;
    values
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let result: TestResult = serde_json::from_value(v).with_context(|| {
                format!(
                    "{}{} is not a goodput result document",
                    path.display(),
                    if several {
                        format!(" (document {})", i + 1)
                    } else {
                        String::new()
                    }
                )
            })?;
            Ok(ReportInput {
                label: if several {
                    format!("{name} #{}", i + 1)
                } else {
                    name.clone()
                },
                result,
            })
        })
        .collect()
}

fn write_file(path: &Path, bytes: &[u8]) -> anyhow::Result<()> {
    if goodput_report::is_stdout(path) {
        let mut out = std::io::stdout().lock();
        out.write_all(bytes)?;
        return Ok(out.flush()?);
    }
    std::fs::write(path, bytes).with_context(|| format!("cannot write {}", path.display()))
}

/// The system's fonts, for the charts' text.
fn fonts() -> std::sync::Arc<resvg::usvg::fontdb::Database> {
    let mut db = resvg::usvg::fontdb::Database::new();
    db.load_system_fonts();
    // The charts ask for the generic sans-serif, which fontdb maps to
    // Arial unless told otherwise: map it to a sans font this system has.
    let families: Vec<String> = db
        .faces()
        .flat_map(|f| f.families.iter().map(|(name, _)| name.clone()))
        .collect();
    let pick = ["DejaVu Sans", "Liberation Sans", "Noto Sans", "FreeSans", "Arial"]
        .into_iter()
        .find(|want| families.iter().any(|f| f == want))
        .map(str::to_owned)
        .or_else(|| families.first().cloned());
    if let Some(family) = pick {
        db.set_sans_serif_family(family);
    }
    std::sync::Arc::new(db)
}

/// Renders one chart's SVG as PNG, at twice its size for sharp text.
fn png_of(svg: &str, fonts: &std::sync::Arc<resvg::usvg::fontdb::Database>) -> anyhow::Result<Vec<u8>> {
    let opt = resvg::usvg::Options {
        fontdb: fonts.clone(),
        ..Default::default()
    };
    let tree = resvg::usvg::Tree::from_str(svg, &opt).context("a chart's SVG does not parse")?;
    let size = tree
        .size()
        .to_int_size()
        .scale_by(2.0)
        .context("a chart has no size")?;
    let mut pixmap =
        resvg::tiny_skia::Pixmap::new(size.width(), size.height()).context("a chart is too large to draw")?;
    pixmap.fill(resvg::tiny_skia::Color::WHITE);
    resvg::render(
        &tree,
        resvg::tiny_skia::Transform::from_scale(2.0, 2.0),
        &mut pixmap.as_mut(),
    );
    pixmap.encode_png().context("cannot encode a chart as PNG")
}

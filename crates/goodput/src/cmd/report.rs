//! `goodput report`: reads result documents, writes one self-contained
//! HTML file and, with `--png`, each chart as a PNG image (the same SVG
//! rendered by resvg, so the images and the page cannot disagree).

use super::{Stop, EXIT_OK};
use crate::flags::ReportArgs;
use anyhow::{anyhow, Context as _};
use goodput_report::{html_report, ReportInput};
use std::io::{Read, Write as _};
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
/// place in it when there are several). The file is read as a stream, its
/// intervals bucketed as they come (`goodput_report::read_documents`), so
/// memory stays far below the file's size.
fn read_documents(path: &Path, limit: u64) -> anyhow::Result<Vec<ReportInput>> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    let too_large = || {
        anyhow!(
            "{} is larger than --max-input-mib ({} MiB)",
            path.display(),
            limit >> 20
        )
    };
    if f.metadata().is_ok_and(|m| m.is_file() && m.len() > limit) {
        return Err(too_large());
    }
    // A pipe or a growing file is held to the limit as it is read.
    let mut input = Limited {
        inner: std::io::BufReader::with_capacity(1 << 16, f),
        left: limit,
        over: false,
    };
    let docs = match goodput_report::read_documents(&mut input) {
        Ok(d) => d,
        Err(_) if input.over => return Err(too_large()),
        Err(e) if e.is_io() => return Err(anyhow!("cannot read {}: {e}", path.display())),
        Err(e) if e.is_data() && e.to_string().starts_with("more than") => {
            return Err(anyhow!(
                "{} holds more than {MAX_DOCUMENTS} documents",
                path.display()
            ))
        }
        Err(e) if e.is_data() => {
            return Err(anyhow!(
                "{} is not a goodput result document: {e}",
                path.display()
            ))
        }
        Err(e) => return Err(anyhow!("{} is not JSON: {e}", path.display())),
    };
    if docs.is_empty() {
        return Err(anyhow!("{} holds no result document", path.display()));
    }
    let name = path.file_name().map_or_else(
        || path.display().to_string(),
        |n| n.to_string_lossy().into_owned(),
    );
    let several = docs.len() > 1;
    Ok(docs
        .into_iter()
        .enumerate()
        .map(|(i, (result, intervals))| ReportInput {
            label: if several {
                format!("{name} #{}", i + 1)
            } else {
                name.clone()
            },
            result,
            intervals,
        })
        .collect())
}

/// A reader that stops with an error past `left` bytes, and says so.
struct Limited<R> {
    inner: R,
    left: u64,
    over: bool,
}

impl<R: Read> Read for Limited<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        // One byte more than allowed tells a file at the limit from one past it.
        let most = buf
            .len()
            .min(usize::try_from(self.left.saturating_add(1)).unwrap_or(usize::MAX));
        let n = self.inner.read(&mut buf[..most])?;
        if n as u64 > self.left {
            self.over = true;
            return Err(std::io::Error::other("past --max-input-mib"));
        }
        self.left -= n as u64;
        Ok(n)
    }
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

//! The docs cannot drift from the code: `docs/reference/options.md` is
//! what `goodput man --markdown` renders from the flag definitions, every
//! relative link in the README, ARCHITECTURE.md, CHANGELOG.md and `docs/`
//! reaches a file (and a heading, when it names one), and the guide's
//! index names each of its pages.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;

/// The repository's root (this crate is `crates/goodput`).
fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

const REGENERATE: &str = "UPDATE_REFERENCE=1 cargo test -p goodput --test option_reference";

#[test]
fn option_reference_is_generated_from_the_flags() {
    let out = Command::new(env!("CARGO_BIN_EXE_goodput"))
        .args(["man", "--markdown"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let rendered = String::from_utf8(out.stdout).unwrap();
    assert!(rendered.contains("## goodput tcp\n"), "{rendered}");
    assert!(
        rendered.contains("| `-p, --port` | `PORT` | `4444` |"),
        "{rendered}"
    );
    let path = root().join("docs/reference/options.md");
    if std::env::var_os("UPDATE_REFERENCE").is_some() {
        std::fs::write(&path, &rendered).unwrap();
        return;
    }
    let written = std::fs::read_to_string(&path).unwrap_or_default();
    if written != rendered {
        let (line, (was, now)) = written
            .lines()
            .chain(std::iter::repeat(""))
            .zip(rendered.lines().chain(std::iter::repeat("")))
            .enumerate()
            .find(|(_, (a, b))| a != b)
            .unwrap();
        panic!(
            "docs/reference/options.md differs from the flag definitions at line {}:\n  \
             file:  {was}\n  flags: {now}\nRegenerate it with: {REGENERATE}",
            line + 1
        );
    }
}

/// The markdown files of the docs: the three at the root and all of
/// `docs/`.
fn markdown_files() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = ["README.md", "ARCHITECTURE.md", "CHANGELOG.md"]
        .iter()
        .map(|f| root().join(f))
        .collect();
    let mut dirs = vec![root().join("docs")];
    while let Some(dir) = dirs.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "md") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
}

/// The text outside fenced code blocks and code spans, line by line.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut kept = String::new();
        for (i, part) in line.split('`').enumerate() {
            if i % 2 == 0 {
                kept.push_str(part);
            }
        }
        lines.push(kept);
    }
    lines
}

/// The anchors GitHub makes of a file's headings (`## Limits` → `limits`,
/// a second `## Limits` → `limits-1`).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut fenced = false;
    let mut out = BTreeSet::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let heading = line.trim_start_matches('#').trim();
        let slug: String = heading
            .to_lowercase()
            .chars()
            .filter_map(|c| match c {
                ' ' => Some('-'),
                c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
                _ => None,
            })
            .collect();
        let n = seen.entry(slug.clone()).or_insert(0);
        out.insert(if *n == 0 {
            slug.clone()
        } else {
            format!("{slug}-{n}")
        });
        *n += 1;
    }
    out
}

/// The targets of a line's inline links and images: `[text](target)`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find(')').unwrap_or(after.len());
        targets.push(after[..end].split_whitespace().next().unwrap_or("").to_string());
        rest = &after[end..];
    }
    targets
}

/// Every broken relative link in `files`, as `file: target (why)`.
fn broken_links(files: &[PathBuf]) -> Vec<String> {
    let mut broken = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        let name = file.strip_prefix(root()).unwrap_or(file).display().to_string();
        for line in prose(&text) {
            for target in link_targets(&line) {
                if target.contains("://") || target.starts_with("mailto:") {
                    continue;
                }
                let (path, anchor) = match target.split_once('#') {
                    Some((p, a)) => (p, Some(a)),
                    None => (target.as_str(), None),
                };
                let dest = if path.is_empty() {
                    file.clone()
                } else {
                    file.parent().unwrap().join(path)
                };
                if !dest.exists() {
                    broken.push(format!("{name}: {target} (no such file)"));
                    continue;
                }
                if let Some(anchor) = anchor {
                    if dest.extension().is_some_and(|e| e == "md") {
                        let there = std::fs::read_to_string(&dest).unwrap();
                        if !anchors(&there).contains(anchor) {
                            broken.push(format!("{name}: {target} (no such heading)"));
                        }
                    }
                }
            }
        }
    }
    broken
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let files = markdown_files();
    assert!(files.len() > 5, "{files:?}");
    let broken = broken_links(&files);
    assert!(broken.is_empty(), "broken links:\n  {}", broken.join("\n  "));
}

#[test]
fn the_link_check_finds_a_broken_link() {
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("page.md");
    std::fs::write(
        &page,
        "# Title\n\n## Two words\n\n[ok](#two-words) [file](page.md#title) \
         [gone](missing.md) [heading](#nowhere) `[code](skipped.md)`\n",
    )
    .unwrap();
    let broken = broken_links(&[page]);
    assert_eq!(broken.len(), 2, "{broken:?}");
    assert!(broken[0].ends_with("missing.md (no such file)"), "{broken:?}");
    assert!(broken[1].ends_with("#nowhere (no such heading)"), "{broken:?}");
}
#[test]
fn the_guide_index_names_every_page_and_the_readme_stays_short() {
    let index = std::fs::read_to_string(root().join("docs/guide/README.md")).unwrap();
    let linked: BTreeSet<String> = prose(&index)
        .iter()
        .flat_map(|l| link_targets(l))
        .map(|t| t.split('#').next().unwrap_or("").to_string())
        .collect();
    for entry in std::fs::read_dir(root().join("docs/guide")).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") && name != "README.md" {
            assert!(
                linked.contains(&name),
                "docs/guide/README.md does not link {name}"
            );
        }
    }
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md has {lines} lines; the guide is where detail goes"
    );
}

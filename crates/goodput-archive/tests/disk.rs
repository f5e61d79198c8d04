//! The archive on a disk that fills: a small tmpfs, filled by another
//! file (root only; the test skips elsewhere, and fails under `CI` when it
//! cannot mount). Writes are refused with a disk-full error and leave
//! nothing half-stored, no write is answered as stored unless it is, the
//! file still opens to be read, and once the filesystem is grown the same
//! archive takes writes again, all of which are there after it is opened
//! anew.

use std::path::{Path, PathBuf};
use std::process::Command;

use goodput_archive::{figures_of, measurement_key, Archive, Run, RunState};
use goodput_core::result::TestResult;
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;

/// A tmpfs mounted on a temporary directory, unmounted when dropped (also
/// when the test fails).
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Option<Tmpfs> {
        let dir = tempfile::tempdir().unwrap();
        let ok = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .is_ok_and(|s| s.success());
        if !ok {
            assert!(
                std::env::var_os("CI").is_none(),
                "cannot mount a tmpfs (the test needs root)"
            );
            eprintln!("cannot mount a tmpfs (not root?): skipping");
            return None;
        }
        Some(Tmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills what is left with a file.
    fn fill(&self) {
        use std::io::Write;
        let mut f = std::fs::File::create(self.path().join("filler")).unwrap();
        let chunk = vec![0x5au8; 64 << 10];
        let mut n = 0;
        while f.write_all(&chunk).is_ok() {
            n += 1;
            assert!(n < 1 << 14, "the tmpfs never filled");
        }
        while f.write_all(&chunk[..512]).is_ok() {}
    }

    fn resize(&self, size: &str) {
        let ok = Command::new("mount")
            .args(["-o", &format!("remount,size={size}")])
            .arg(self.path())
            .status()
            .unwrap();
        assert!(ok.success(), "remount to {size}");
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        // Lazily, so that a test failing with the archive still open
        // leaves no mount behind.
        let _ = Command::new("umount").arg("-l").arg(self.dir.path()).status();
    }
}

fn fixture(name: &str) -> (serde_json::Value, TestResult) {
    let path = format!("{}/tests/fixtures/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(path).unwrap();
    (
        serde_json::from_str(&text).unwrap(),
        serde_json::from_str(&text).unwrap(),
    )
}

fn run(id: &str, at: u64, doc: &serde_json::Value, result: &TestResult) -> Run {
    let spec: TestSpec = serde_json::from_value(doc["spec"].clone()).unwrap();
    Run {
        id: id.into(),
        task: "core".into(),
        source: "alpha".into(),
        dest: Some("beta".into()),
        kind: spec.kind().into(),
        class: RunClass::of_kind(spec.kind()),
        state: RunState::Finished,
        reason: None,
        scheduled_ms: at,
        start_ms: Some(at + 5),
        end_ms: Some(at + 1000),
        measurement_key: measurement_key(&spec, "alpha", Some("beta")),
        spec: doc["spec"].clone(),
        result: Some(doc.clone()),
        figures: figures_of(result),
    }
}

/// Ten runs, the `n`th batch.
fn batch(n: u64, doc: &serde_json::Value, result: &TestResult) -> Vec<Run> {
    (0..10)
        .map(|k| {
            let i = n * 10 + k;
            run(&format!("r{i:05}"), 1_000_000_000 + i * 60_000, doc, result)
        })
        .collect()
}

/// The tmpfs fills: the first write after fails as "disk full", and
/// so does each one after it (never "database is locked"); reads see only
/// what was stored, and the file opens to be read. Grown again, the same archive stores every batch it is
/// given, and opened anew it has every batch it answered for and no
/// other. Before the archive closed a connection whose transaction failed,
/// the writes after the growth were answered as stored on a connection
/// left inside a transaction that never ended (lost at the reopening), and
/// the others found the database locked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_and_the_archive_takes_them_again_when_space_returns() {
    let Some(fs) = Tmpfs::mount("4m") else {
        return;
    };
    let file: PathBuf = fs.path().join("archive.sqlite");
    let a = Archive::open(&file).await.unwrap();
    let (doc, r) = fixture("tcp-duplex");
    let mut stored: Vec<String> = Vec::new();
    let mut n = 0u64;
    for _ in 0..5 {
        let b = batch(n, &doc, &r);
        n += 1;
        a.put(&b).await.unwrap();
        stored.extend(b.into_iter().map(|r| r.id));
    }
    // Something else fills the disk.
    fs.fill();
    let first_refusal = loop {
        assert!(n < 1000, "the archive kept taking writes on a full disk");
        let b = batch(n, &doc, &r);
        n += 1;
        match a.put(&b).await {
            Ok(()) => stored.extend(b.into_iter().map(|r| r.id)),
            Err(e) => break e,
        }
    };
    assert!(first_refusal.is_disk_full(), "{first_refusal}");
    assert!(first_refusal.to_string().contains("full"), "{first_refusal}");
    // Full, every write is refused the same way, and nothing of the
    // refused batches can be read.
    for _ in 0..8 {
        let b = batch(n, &doc, &r);
        n += 1;
        match a.put(&b).await {
            Ok(()) => stored.extend(b.into_iter().map(|r| r.id)),
            Err(e) => assert!(e.is_disk_full(), "refused, but not for want of space: {e}"),
        }
    }
    assert_eq!(a.count().await.unwrap(), stored.len() as u64);
    // It opens while full, and reads (new connections write nothing).
    let reader = Archive::open(&file).await.unwrap();
    assert_eq!(reader.count().await.unwrap(), stored.len() as u64);
    reader.close().await;

    // Space returns.
    fs.resize("16m");
    a.probe_write().await.unwrap();
    for _ in 0..12 {
        let b = batch(n, &doc, &r);
        n += 1;
        a.put(&b)
            .await
            .unwrap_or_else(|e| panic!("batch {n} refused after the disk was grown: {e}"));
        stored.extend(b.into_iter().map(|r| r.id));
    }
    assert_eq!(a.count().await.unwrap(), stored.len() as u64);
    a.close().await;
    drop(a);

    // Opened anew, it has exactly what it answered for.
    let a = Archive::open(&file).await.unwrap();
    assert_eq!(a.count().await.unwrap(), stored.len() as u64);
    let found = a.existing(&stored).await.unwrap();
    let lost: Vec<&String> = stored.iter().filter(|id| !found.contains(*id)).collect();
    assert!(
        lost.is_empty(),
        "{} runs answered as stored are gone: {lost:?}",
        lost.len()
    );
    a.close().await;
}

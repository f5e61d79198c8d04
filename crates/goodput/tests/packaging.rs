//! The packages as an operator installs them: the agent's systemd unit
//! passes `systemd-analyze verify` (its man pages installed) and rates at
//! most 2.0 in `systemd-analyze security`; the man pages and completions
//! the .deb and the .rpm list are the ones packaging/assets.sh makes with
//! the binary; the container definition runs the agent unprivileged with
//! its state on a volume.

mod common;

use common::{have, tmp};
use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// packaging/assets.sh run with the built binary into a fresh directory.
fn assets(name: &str) -> PathBuf {
    let out = tmp("packaging", name);
    let _ = std::fs::remove_dir_all(&out);
    let status = Command::new("sh")
        .arg(root().join("packaging/assets.sh"))
        .arg(env!("CARGO_BIN_EXE_goodput"))
        .arg(&out)
        .status()
        .unwrap();
    assert!(status.success());
    out
}

/// The unit as installed, but for the binary's path (this build's).
fn unit_copy(dir: &Path) -> PathBuf {
    let text = std::fs::read_to_string(root().join("packaging/goodput-agent.service")).unwrap();
    assert!(text.contains("ExecStart=/usr/bin/goodput agent"), "{text}");
    std::fs::create_dir_all(dir).unwrap();
    let unit = dir.join("goodput-agent.service");
    std::fs::write(
        &unit,
        text.replace(
            "ExecStart=/usr/bin/goodput",
            &format!("ExecStart={}", env!("CARGO_BIN_EXE_goodput")),
        ),
    )
    .unwrap();
    unit
}

#[test]
fn the_unit_is_hardened_to_at_most_2_0() {
    if !have("systemd-analyze", &["--version"], "apt-get install systemd") {
        return;
    }
    let unit = unit_copy(&tmp("packaging", "security"));
    let out = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).to_string() + &String::from_utf8_lossy(&out.stderr);
    let score: f64 = text
        .lines()
        .find_map(|l| l.split_once("Overall exposure level for goodput-agent.service: "))
        .and_then(|(_, rest)| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no overall exposure level in: {text}"));
    assert!(score <= 2.0, "exposure {score} > 2.0:\n{text}");
    // What the agent needs stays: binding the low ports of STAMP, OWAMP
    // and TWAMP, IP and netlink sockets, its state directory.
    for kept in [
        "✗ CapabilityBoundingSet=~CAP_NET_(BIND_SERVICE|BROADCAST|RAW)",
        "✗ PrivateNetwork=",
    ] {
        assert!(text.contains(kept), "{kept} in:\n{text}");
    }
    let unit_text = std::fs::read_to_string(&unit).unwrap();
    for line in [
        "CapabilityBoundingSet=CAP_NET_BIND_SERVICE\n",
        "AmbientCapabilities=CAP_NET_BIND_SERVICE\n",
        "StateDirectory=goodput\n",
        "ProtectSystem=strict\n",
        // adjtimex is how the agent reads the clock's synchronisation:
        // without it every clock would read unsynchronised.
        "SystemCallFilter=@system-service adjtimex\n",
        "RestrictAddressFamilies=AF_INET AF_INET6 AF_NETLINK AF_UNIX\n",
    ] {
        assert!(unit_text.contains(line), "{line}");
    }
    assert!(
        !unit_text.contains("\nProtectClock=yes"),
        "ProtectClock denies adjtimex"
    );
    // systemd's own threshold agrees.
    let status = Command::new("systemd-analyze")
        .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
        .arg(&unit)
        .output()
        .unwrap()
        .status;
    assert!(status.success());
}

#[test]
fn the_unit_verifies_with_the_packaged_man_pages() {
    if !have("systemd-analyze", &["--version"], "apt-get install systemd")
        || !have("man", &["--version"], "apt-get install man-db")
    {
        return;
    }
    let out = assets("verify-assets");
    // A man path as the package installs it: MANPATH/man1/goodput-agent.1.gz.
    let man = out.join("manpath");
    std::fs::create_dir_all(&man).unwrap();
    std::fs::rename(out.join("man"), man.join("man1")).unwrap();
    let unit = unit_copy(&tmp("packaging", "verify"));
    let run = Command::new("systemd-analyze")
        .args(["verify", "--man=yes"])
        .arg(&unit)
        .env("MANPATH", &man)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(err.trim().is_empty(), "{err}");
    // Every man: page the unit names is one of the packaged pages.
    let text = std::fs::read_to_string(&unit).unwrap();
    let docs = text
        .lines()
        .find_map(|l| l.strip_prefix("Documentation="))
        .unwrap();
    for d in docs.split_whitespace() {
        let page = d.strip_prefix("man:").unwrap().replace("(1)", ".1.gz");
        assert!(man.join("man1").join(&page).is_file(), "{d}");
    }
}

/// Each `../../target/packaging/…` source of a package's assets, as a
/// path under `out` (a `*` pattern as the files it matches).
fn generated(source: &str, out: &Path) -> Option<Vec<PathBuf>> {
    let rel = source.strip_prefix("../../target/packaging/")?;
    Some(match rel.split_once('*') {
        Some((dir_and_prefix, suffix)) => {
            let (dir, prefix) = dir_and_prefix.rsplit_once('/').unwrap();
            let mut files: Vec<PathBuf> = std::fs::read_dir(out.join(dir))
                .unwrap()
                .map(|e| e.unwrap().path())
                .filter(|p| {
                    let n = p.file_name().unwrap().to_string_lossy();
                    n.starts_with(prefix) && n.ends_with(suffix)
                })
                .collect();
            files.sort();
            files
        }
        None => vec![out.join(rel)],
    })
}

#[test]
fn the_packages_install_the_man_pages_and_completions_the_binary_makes() {
    let out = assets("package-assets");
    let manifest: toml::Value =
        toml::from_str(&std::fs::read_to_string(root().join("crates/goodput/Cargo.toml")).unwrap()).unwrap();
    let meta = &manifest["package"]["metadata"];
    let deb: Vec<(String, String)> = meta["deb"]["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| (a[0].as_str().unwrap().into(), a[1].as_str().unwrap().into()))
        .collect();
    let rpm: Vec<(String, String)> = meta["generate-rpm"]["assets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["source"].as_str().unwrap().into(),
                a["dest"].as_str().unwrap().into(),
            )
        })
        .collect();
    let commands = ["tcp", "agent", "stamp", "check", "trace"];
    for (name, assets) in [("deb", &deb), ("rpm", &rpm)] {
        let dests: Vec<&str> = assets.iter().map(|(_, d)| d.trim_start_matches('/')).collect();
        for want in [
            "usr/share/man/man1/",
            "usr/share/bash-completion/completions/goodput",
            "usr/share/fish/vendor_completions.d/goodput.fish",
        ] {
            assert!(
                dests.contains(&want),
                "{name} installs nothing at {want}: {dests:?}"
            );
        }
        assert!(
            dests
                .iter()
                .any(|d| d.ends_with("zsh/vendor-completions/_goodput")
                    || d.ends_with("zsh/site-functions/_goodput")),
            "{name}: {dests:?}"
        );
        for (source, dest) in assets.iter() {
            if source.starts_with("target/release/") {
                continue;
            }
            match generated(source, &out) {
                Some(files) => {
                    assert!(!files.is_empty(), "{name}: {source} matches nothing");
                    for f in &files {
                        assert!(f.is_file(), "{name}: {source}: {} not made", f.display());
                    }
                    if dest.ends_with("man1/") {
                        let names: Vec<String> = files
                            .iter()
                            .map(|f| f.file_name().unwrap().to_string_lossy().into_owned())
                            .collect();
                        assert!(names.contains(&"goodput.1.gz".to_string()), "{names:?}");
                        for c in commands {
                            assert!(names.contains(&format!("goodput-{c}.1.gz")), "{c}: {names:?}");
                        }
                    }
                }
                None => {
                    let p = root().join("crates/goodput").join(source);
                    assert!(p.is_file(), "{name}: {source} does not exist");
                }
            }
        }
    }
    // The pages are the binary's: gzipped roff with its flags.
    let page = Command::new("zcat")
        .arg(out.join("man/goodput-agent.1.gz"))
        .output()
        .unwrap();
    let page = String::from_utf8_lossy(&page.stdout);
    assert!(page.contains(".TH goodput-agent 1"), "{page}");
    assert!(page.contains("new\\-token"), "{page}");
    let bash = std::fs::read_to_string(out.join("completions/goodput.bash")).unwrap();
    assert!(bash.contains("--check-config"), "{bash}");
    // The RPM's scriptlet exists and makes the token with the binary.
    let script = meta["generate-rpm"]["post_install_script"].as_str().unwrap();
    let script = std::fs::read_to_string(root().join("crates/goodput").join(script)).unwrap();
    assert!(
        script.contains("goodput agent --new-token --out /etc/goodput/token"),
        "{script}"
    );
}

#[test]
fn the_container_runs_the_agent_unprivileged_with_a_state_volume() {
    let file = root().join("packaging/container/Containerfile");
    let text = std::fs::read_to_string(&file).unwrap();
    let froms: Vec<&str> = text.lines().filter(|l| l.starts_with("FROM ")).collect();
    assert_eq!(froms.len(), 2, "a build stage and a runtime stage: {froms:?}");
    assert!(froms[0].ends_with(" AS build"), "{froms:?}");
    assert!(text.contains("\nUSER goodput:goodput\n"), "{text}");
    assert!(text.contains("\nVOLUME [\"/var/lib/goodput\"]\n"), "{text}");
    assert!(
        text.contains("setcap cap_net_bind_service=+ep /usr/bin/goodput"),
        "{text}"
    );
    // Every file copied from the build context is there.
    for l in text
        .lines()
        .filter(|l| l.starts_with("COPY ") && !l.contains("--from="))
    {
        let source = l.split_whitespace().nth(1).unwrap();
        if source != "." {
            assert!(root().join(source).exists(), "{l}");
        }
    }
    // The context leaves the build's output out.
    let ignore =
        std::fs::read_to_string(root().join("packaging/container/Containerfile.dockerignore")).unwrap();
    assert!(ignore.lines().any(|l| l.trim() == "target"), "{ignore}");
    // Built only where a container engine really runs and it is asked
    // for: a release build inside the image takes minutes.
    if std::env::var_os("GOODPUT_TEST_CONTAINER").is_none() {
        eprintln!("GOODPUT_TEST_CONTAINER unset: the image is not built");
        return;
    }
    let engine = ["podman", "docker"]
        .into_iter()
        .find(|e| {
            Command::new(e)
                .arg("info")
                .output()
                .is_ok_and(|o| o.status.success())
        })
        .expect("GOODPUT_TEST_CONTAINER is set but neither podman nor docker runs");
    let status = Command::new(engine)
        .args(["build", "-f"])
        .arg(&file)
        .args(["-t", "goodput-test"])
        .arg(root())
        .status()
        .unwrap();
    assert!(status.success());
    let run = Command::new(engine)
        .args([
            "run",
            "--rm",
            "goodput-test",
            "agent",
            "--new-token",
            "--out",
            "/var/lib/goodput/token",
        ])
        .output()
        .unwrap();
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
}

//! Shell completions and man pages come from the same flag definitions as
//! `--help`: every long flag each command's help lists is in its man page
//! and in the completion scripts.

mod common;

use std::collections::BTreeSet;

use common::*;

fn stdout(args: &[&str]) -> String {
    let out = goodput().args(args).output().unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The long flags a help text lists (`--transfer`, `--max-records`, …).
fn long_flags(help: &str) -> BTreeSet<String> {
    help.split(|c: char| !(c.is_ascii_alphanumeric() || c == '-'))
        .filter(|w| w.starts_with("--") && w.len() > 2 && w.as_bytes()[2].is_ascii_lowercase())
        .map(str::to_owned)
        .collect()
}

const COMMANDS: [&str; 8] = ["tcp", "server", "iperf3", "stamp", "ttcp", "echo", "udp", "quic"];

#[test]
fn every_flag_of_every_command_is_in_its_man_page() {
    let top = stdout(&["man"]);
    assert!(top.contains(".TH goodput 1"), "{top}");
    for command in COMMANDS {
        let page = stdout(&["man", command]);
        assert!(page.contains(&format!(".TH goodput-{command} 1")), "{command}");
        // roff writes each - as \-.
        let page = page.replace("\\-", "-");
        let flags = long_flags(&stdout(&[command, "--help"]));
        assert!(flags.len() > 3, "{command}: {flags:?}");
        for f in &flags {
            assert!(page.contains(f.as_str()), "{command}: {f} is not in its man page");
        }
    }
    let out = goodput().args(["man", "nosuch"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("the commands are tcp, server"));
}

#[test]
fn completion_scripts_know_every_command_and_flag() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let script = stdout(&["completions", shell]);
        for command in COMMANDS {
            assert!(script.contains(command), "{shell}: {command}");
        }
    }
    let bash = stdout(&["completions", "bash"]);
    for command in COMMANDS {
        for f in long_flags(&stdout(&[command, "--help"])) {
            assert!(bash.contains(&f), "bash: {command} {f}");
        }
    }
    let out = goodput().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(out.status.code(), Some(2), "an unknown shell is a usage error");
}

/// A reader that stops early (`goodput completions bash | head`) closes
/// the pipe: the page's writer ends quietly with status 0, no panic.
#[test]
fn a_closed_pipe_ends_a_page_quietly() {
    for args in [
        &["completions", "bash"][..],
        &["completions", "zsh"],
        &["man"],
        &["man", "--markdown"],
    ] {
        let mut child = goodput()
            .args(args)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Close the read end before the child writes a byte.
        drop(child.stdout.take());
        let out = child.wait_with_output().unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{args:?}: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

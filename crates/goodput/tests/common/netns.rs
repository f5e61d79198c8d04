//! Agents each in its own network namespace, joined by veth pairs to a
//! bridge in another: what the agent tests that need real separate hosts
//! build.

use super::have;
use std::process::Command;

/// The namespaces and links; removed when dropped.
pub struct Lan {
    pub bridge: String,
    pub agents: Vec<String>,
}

pub fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl Lan {
    /// `None` (after saying why) where namespaces cannot be made.
    pub fn make(n: usize) -> Option<Self> {
        let ci = std::env::var_os("CI").is_some();
        // SAFETY: geteuid only reads the process's credentials.
        if unsafe { libc::geteuid() } != 0 {
            assert!(!ci, "the namespace tests need root in CI");
            eprintln!("not root: skipping the namespace test");
            return None;
        }
        if !have("ip", &["-V"], "apt-get install iproute2") {
            return None;
        }
        let id = std::process::id();
        let lan = Lan {
            bridge: format!("gp-br-{id}"),
            agents: (1..=n).map(|i| format!("gp-ag{i}-{id}")).collect(),
        };
        ip(&["netns", "add", &lan.bridge]);
        let br = |args: &[&str]| {
            let mut v = vec!["netns", "exec", &lan.bridge, "ip"];
            v.extend_from_slice(args);
            ip(&v);
        };
        br(&["link", "add", "br0", "type", "bridge"]);
        br(&["addr", "add", "10.77.0.254/24", "dev", "br0"]);
        br(&["link", "set", "br0", "up"]);
        br(&["link", "set", "lo", "up"]);
        for (i, ns) in lan.agents.iter().enumerate() {
            ip(&["netns", "add", ns]);
            let port = format!("p{}", i + 1);
            br(&[
                "link", "add", &port, "type", "veth", "peer", "name", "eth0", "netns", ns,
            ]);
            br(&["link", "set", &port, "master", "br0", "up"]);
            let addr = format!("10.77.0.{}/24", i + 1);
            ip(&["-n", ns, "addr", "add", &addr, "dev", "eth0"]);
            ip(&["-n", ns, "link", "set", "eth0", "up"]);
            ip(&["-n", ns, "link", "set", "lo", "up"]);
        }
        Some(lan)
    }

    /// Moves this thread into the bridge's namespace.
    pub fn enter_bridge(&self) {
        enter(&self.bridge);
    }
}

/// Moves this thread into a namespace (`ip netns add` made it).
pub fn enter(ns: &str) {
    {
        let f = std::fs::File::open(format!("/var/run/netns/{ns}")).unwrap();
        use std::os::fd::AsRawFd;
        // SAFETY: setns on a namespace file this test made; only this
        // thread changes namespace.
        let rc = unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) };
        assert_eq!(rc, 0, "setns: {}", std::io::Error::last_os_error());
    }
}

impl Drop for Lan {
    fn drop(&mut self) {
        for ns in self.agents.iter().chain(std::iter::once(&self.bridge)) {
            let _ = Command::new("ip").args(["netns", "del", ns]).status();
        }
    }
}

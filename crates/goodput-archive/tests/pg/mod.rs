//! A throwaway PostgreSQL cluster for one test: `initdb` in a temporary
//! directory, a server on a free loopback port, stopped and removed when
//! the value is dropped. Debian's `postgresql` package provides the
//! binaries (`/usr/lib/postgresql/N/bin`); as root they run as the
//! package's `postgres` user, since PostgreSQL refuses to run as root.
//!
//! Without PostgreSQL a test skips with a line saying so, unless `CI` is
//! set: there a missing PostgreSQL fails the test.
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub struct Cluster {
    dir: tempfile::TempDir,
    bin: PathBuf,
    run_as: Option<String>,
    pub port: u16,
    /// Serving TLS, and taking TCP connections only over it.
    tls: bool,
}

fn bin_dir() -> Option<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .ok()?
        .flatten()
        .filter_map(|e| {
            let v: u32 = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    found.sort();
    found.pop().map(|(_, b)| b)
}

fn is_root() -> bool {
    // SAFETY: getuid has no preconditions.
    unsafe { libc_getuid() == 0 }
}

extern "C" {
    #[link_name = "getuid"]
    fn libc_getuid() -> u32;
}

impl Cluster {
    /// A running cluster, or `None` (with a line) when PostgreSQL is not
    /// installed outside CI.
    pub fn start() -> Option<Cluster> {
        Self::start_with(None)
    }

    /// The same serving TLS with this certificate and key (PEM), and
    /// refusing TCP connections without it.
    pub fn start_tls(cert: &str, key: &str) -> Option<Cluster> {
        Self::start_with(Some((cert, key)))
    }

    fn start_with(tls: Option<(&str, &str)>) -> Option<Cluster> {
        let Some(bin) = bin_dir() else {
            if std::env::var_os("CI").is_some() {
                panic!("PostgreSQL is not installed (apt-get install postgresql)");
            }
            eprintln!("skipped: PostgreSQL is not installed (apt-get install postgresql)");
            return None;
        };
        let dir = tempfile::Builder::new().prefix("goodput-pg-").tempdir().unwrap();
        let run_as = is_root().then(|| "postgres".to_string());
        if run_as.is_some() {
            let ok = Command::new("chown")
                .args(["-R", "postgres:postgres"])
                .arg(dir.path())
                .status()
                .unwrap()
                .success();
            assert!(ok, "chown to postgres failed");
        }
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let c = Cluster {
            dir,
            bin,
            run_as,
            port,
            tls: tls.is_some(),
        };
        let data = c.data();
        c.run(
            "initdb",
            &[
                "-D",
                data.to_str().unwrap(),
                "-U",
                "postgres",
                "--auth=trust",
                "-E",
                "UTF8",
                "--no-sync",
            ],
        );
        if let Some((cert, key)) = tls {
            std::fs::write(data.join("server.crt"), cert).unwrap();
            std::fs::write(data.join("server.key"), key).unwrap();
            std::fs::write(
                data.join("pg_hba.conf"),
                "local all all trust\nhostssl all all 127.0.0.1/32 trust\nhostnossl all all 127.0.0.1/32 reject\n",
            )
            .unwrap();
            let mut chmod = Command::new("chmod");
            chmod.arg("600").arg(data.join("server.key"));
            assert!(chmod.status().unwrap().success());
            if let Some(user) = &c.run_as {
                let mut chown = Command::new("chown");
                chown
                    .arg(format!("{user}:{user}"))
                    .arg(data.join("server.crt"))
                    .arg(data.join("server.key"));
                assert!(chown.status().unwrap().success());
            }
        }
        c.start_server();
        Some(c)
    }

    fn data(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }

    fn command(&self, tool: &str) -> Command {
        let exe = self.bin.join(tool);
        match &self.run_as {
            Some(user) => {
                let mut c = Command::new("runuser");
                c.args(["-u", user, "--"]).arg(exe);
                c
            }
            None => Command::new(exe),
        }
    }

    fn run(&self, tool: &str, args: &[&str]) {
        let out = self
            .command(tool)
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("{tool}: {e}"));
        assert!(
            out.status.success(),
            "{tool} {args:?}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    /// A new database in the cluster, and its URL.
    pub fn database(&self, name: &str) -> String {
        self.run(
            "createdb",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                name,
            ],
        );
        self.url(name)
    }

    pub fn url(&self, name: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{name}", self.port)
    }

    /// Runs one SQL statement with psql; its output.
    pub fn psql(&self, db: &str, sql: &str) -> String {
        let out = self
            .command("psql")
            .args([
                "-h",
                "127.0.0.1",
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                db,
            ])
            .args(["-v", "ON_ERROR_STOP=1", "-At", "-c", sql])
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "psql {sql}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    }

    /// Stops the server (fast: open connections are cut).
    pub fn stop(&self) {
        let data = self.data();
        let _ = self
            .command("pg_ctl")
            .args(["-D", data.to_str().unwrap(), "-m", "immediate", "-w", "stop"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }

    /// Starts it again on the same port.
    pub fn restart(&self) {
        self.start_server();
    }

    /// Starts the server on its port and socket directory (no fsync: a
    /// throwaway cluster).
    fn start_server(&self) {
        let data = self.data();
        let opts = format!(
            "-p {} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=off \
             -c max_connections=200 -c shared_buffers=64MB{}",
            self.port,
            self.dir.path().display(),
            if self.tls { " -c ssl=on" } else { "" }
        );
        let log = self.dir.path().join("server.log");
        self.run(
            "pg_ctl",
            &[
                "-D",
                data.to_str().unwrap(),
                "-l",
                log.to_str().unwrap(),
                "-w",
                "-t",
                "60",
                "-o",
                &opts,
                "start",
            ],
        );
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        self.stop();
    }
}

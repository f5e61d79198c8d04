//! The real peers the probe tests start on loopback, each on free ports
//! with its own scratch directory and configuration, killed when the test
//! ends: Debian's unbound and nginx, a package from the npm registry, and
//! the certificates they serve, from a CA made for the test.

use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rcgen::{BasicConstraints, Certificate, CertificateParams, DnType, IsCa, KeyPair, SanType};
use time::OffsetDateTime;

use super::{free_tcp_port, have, tmp, wait_tcp_listening, Reaped};

/// A CA made for one test, its certificate in `DIR/ca.pem`.
pub struct TestCa {
    dir: PathBuf,
    cert: Certificate,
    key: KeyPair,
}

impl TestCa {
    /// A new CA in `dir` (created), valid from ten days ago for ten years.
    pub fn new(dir: &Path) -> Self {
        std::fs::create_dir_all(dir).unwrap();
        let now = OffsetDateTime::now_utc();
        let day = time::Duration::days(1);
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, "goodput test CA");
        p.not_before = now - day * 10;
        p.not_after = now + day * 3650;
        let cert = p.self_signed(&key).unwrap();
        std::fs::write(dir.join("ca.pem"), cert.pem()).unwrap();
        TestCa {
            dir: dir.to_owned(),
            cert,
            key,
        }
    }

    /// The CA's certificate, for a client's `--ca`.
    pub fn pem(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// A server certificate signed by the CA for `names` (host names, or
    /// IP addresses as such), the first its common name, valid from
    /// `from` until `until`: `DIR/FILE.pem` and its key `DIR/FILE.key`.
    pub fn issue(
        &self,
        file: &str,
        names: &[&str],
        from: OffsetDateTime,
        until: OffsetDateTime,
    ) -> (PathBuf, PathBuf) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        for n in names {
            p.subject_alt_names.push(match n.parse::<IpAddr>() {
                Ok(ip) => SanType::IpAddress(ip),
                Err(_) => SanType::DnsName((*n).try_into().unwrap()),
            });
        }
        p.distinguished_name.push(DnType::CommonName, names[0]);
        p.not_before = from;
        p.not_after = until;
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        let (pem, key_file) = (
            self.dir.join(format!("{file}.pem")),
            self.dir.join(format!("{file}.key")),
        );
        std::fs::write(&pem, cert.pem()).unwrap();
        std::fs::write(&key_file, key.serialize_pem()).unwrap();
        (pem, key_file)
    }

    /// [`TestCa::issue`] valid from a day ago for `days` days.
    pub fn issue_for_days(&self, file: &str, names: &[&str], days: i64) -> (PathBuf, PathBuf) {
        let now = OffsetDateTime::now_utc();
        self.issue(
            file,
            names,
            now - time::Duration::days(1),
            now + time::Duration::days(days),
        )
    }
}

/// nginx serving the `http` block's contents it was started with, from
/// a scratch directory that holds its configuration, pid, logs and
/// temporary files: one process (no master), so that killing it when
/// the test ends leaves no worker behind holding its ports.
pub struct Nginx {
    _child: Reaped,
    /// The scratch directory.
    pub dir: PathBuf,
}

/// nginx's echo module, as Debian installs it.
pub const NGINX_ECHO_MODULE: &str = "/usr/lib/nginx/modules/ngx_http_echo_module.so";

impl Nginx {
    /// Whether nginx is installed (outside CI a missing one skips the
    /// test, saying so; under CI it fails it).
    pub fn available() -> bool {
        have(
            "nginx",
            &["-v"],
            "apt-get install nginx-light libnginx-mod-http-echo",
        )
    }

    /// Starts nginx with `modules` loaded and `http` (its server blocks)
    /// in the http block, and waits until each of `ports` listens.
    pub fn start(dir: &Path, modules: &[&str], http: &str, ports: &[u16]) -> Nginx {
        std::fs::create_dir_all(dir.join("tmp")).unwrap();
        let d = dir.display();
        let load: String = modules.iter().map(|m| format!("load_module {m};\n")).collect();
        let conf = format!(
            "{load}master_process off;\nerror_log {d}/error.log;\npid {d}/nginx.pid;\n\
             events {{ worker_connections 128; }}\n\
             http {{ access_log off; client_body_temp_path {d}/tmp/body; proxy_temp_path {d}/tmp/proxy; \
             fastcgi_temp_path {d}/tmp/fcgi; uwsgi_temp_path {d}/tmp/uwsgi; scgi_temp_path {d}/tmp/scgi;\n{http} }}\n"
        );
        let path = dir.join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new("nginx");
        cmd.arg("-p")
            .arg(dir)
            .arg("-c")
            .arg(&path)
            .args(["-g", "daemon off;"]);
        let child = Reaped::spawn(cmd);
        for p in ports {
            wait_tcp_listening(*p);
        }
        Nginx {
            _child: child,
            dir: dir.to_owned(),
        }
    }
}

/// The npm package `package` (name@version) installed once under the
/// target directory in `folder` (the registry is asked only while
/// `installed`, a file below node_modules, is not there): its
/// node_modules directory; `None` when node or npm are missing outside
/// CI.
pub fn npm_package(folder: &str, package: &str, installed: &str) -> Option<PathBuf> {
    if !have("node", &["--version"], "apt-get install nodejs")
        || !have("npm", &["--version"], "apt-get install npm")
    {
        return None;
    }
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(folder);
    let modules = dir.join("node_modules");
    if !modules.join(installed).exists() {
        std::fs::create_dir_all(&dir).unwrap();
        let out = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund", "--prefix"])
            .arg(&dir)
            .arg(package)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "npm install {package} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Some(modules)
}

/// What the DNS tests need installed.
const DNS_INSTALL: &str = "apt-get install unbound bind9-dnsutils";

/// Debian's unbound serving a zone on 127.0.0.1: UDP and TCP on one
/// port, TLS on another, with a certificate for dns.goodput.test and
/// 127.0.0.1 from a CA made for the test.
pub struct Unbound {
    dir: PathBuf,
    ca: TestCa,
    pub port: u16,
    pub tls_port: u16,
    child: Option<Reaped>,
}

impl Unbound {
    /// Whether unbound and dig are installed.
    pub fn available() -> bool {
        have("unbound", &["-V"], DNS_INSTALL) && have("dig", &["-v"], DNS_INSTALL)
    }

    /// unbound serving `zone` (unbound.conf's local-zone and local-data
    /// lines).
    pub fn start(group: &str, zone: &str) -> Self {
        let dir = tmp(group, "unbound");
        let ca = TestCa::new(&dir);
        ca.issue_for_days("server", &["dns.goodput.test", "127.0.0.1"], 2);
        let mut u = Unbound {
            dir,
            ca,
            port: free_tcp_port(),
            tls_port: free_tcp_port(),
            child: None,
        };
        u.serve(zone);
        u
    }

    /// The CA's certificate, for `--ca`.
    pub fn ca(&self) -> String {
        self.ca.pem().display().to_string()
    }

    /// Its UDP and TCP address.
    pub fn server(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    /// Its DNS over TLS address.
    pub fn tls_server(&self) -> String {
        format!("127.0.0.1:{}", self.tls_port)
    }

    /// (Re)starts unbound with `zone`.
    pub fn serve(&mut self, zone: &str) {
        if let Some(c) = self.child.take() {
            c.stop(libc::SIGTERM);
        }
        let d = self.dir.display();
        let conf = format!(
            "server:\n\
             \x20 interface: 127.0.0.1@{port}\n\
             \x20 interface: 127.0.0.1@{tls}\n\
             \x20 port: {port}\n\
             \x20 tls-port: {tls}\n\
             \x20 tls-service-key: \"{d}/server.key\"\n\
             \x20 tls-service-pem: \"{d}/server.pem\"\n\
             \x20 do-daemonize: no\n\
             \x20 username: \"\"\n\
             \x20 chroot: \"\"\n\
             \x20 directory: \"{d}\"\n\
             \x20 pidfile: \"\"\n\
             \x20 use-syslog: no\n\
             \x20 logfile: \"\"\n\
             \x20 num-threads: 1\n\
             \x20 so-reuseport: no\n\
             \x20 module-config: \"iterator\"\n\
             \x20 do-not-query-localhost: yes\n\
             \x20 access-control: 127.0.0.0/8 allow\n\
             {zone}",
            port = self.port,
            tls = self.tls_port,
        );
        let path = self.dir.join("unbound.conf");
        std::fs::write(&path, conf).unwrap();
        let mut cmd = Command::new("unbound");
        cmd.args(["-d", "-c"]).arg(&path);
        self.child = Some(Reaped::spawn(cmd));
        // Ready when it answers over UDP and takes TLS connections.
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let up = dig(
                &self.server(),
                &["txt.goodput.test", "TXT", "+tries=1", "+time=1"],
            )
            .is_some()
                && std::net::TcpStream::connect(("127.0.0.1", self.tls_port)).is_ok();
            if up {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "unbound did not start on {}",
                self.port
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

/// dig's answer lines (+short) and its query time, ms; none when dig got
/// no answer.
pub fn dig(server: &str, args: &[&str]) -> Option<(Vec<String>, u64)> {
    let (addr, port) = server.rsplit_once(':').unwrap();
    let out = Command::new("dig")
        .arg(format!("@{addr}"))
        .args(["-p", port, "+noall", "+answer", "+stats"])
        .args(args)
        .stdin(Stdio::null())
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&out.stdout);
    let time = text
        .lines()
        .find_map(|l| l.strip_prefix(";; Query time: "))?
        .trim_end_matches(" msec")
        .parse()
        .ok()?;
    let answers = text
        .lines()
        .filter(|l| !l.starts_with(';') && !l.trim().is_empty())
        .map(|l| l.split_whitespace().skip(4).collect::<Vec<_>>().join(" "))
        .collect();
    Some((answers, time))
}

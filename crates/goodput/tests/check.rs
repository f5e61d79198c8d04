//! `goodput check` as Nagios or Icinga runs it, against a real agent whose
//! archive the test seeds with runs of known figures: each state and its
//! exit status, the one-line output with performance data, windows and
//! statistics, no data, bad flags, and the agent down (UNKNOWN, 3).

mod common;

use common::agents::{Agent, Ports};
use goodput_archive::{measurement_key, Archive, Figures, Run, RunState};
use goodput_core::schedule::RunClass;
use goodput_core::spec::TestSpec;

const NOW_SLACK_MS: u64 = 60_000;

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

/// A finished run of `spec` from a to b at `at`, with `figures`.
fn run(id: &str, spec: &serde_json::Value, at: u64, figures: Figures) -> Run {
    let s: TestSpec = serde_json::from_value(spec.clone()).unwrap();
    Run {
        id: id.into(),
        task: "seeded".into(),
        source: "a".into(),
        dest: Some("b".into()),
        kind: s.kind().into(),
        class: RunClass::of_kind(s.kind()),
        state: RunState::Finished,
        reason: None,
        scheduled_ms: at,
        start_ms: Some(at),
        end_ms: Some(at + 1000),
        measurement_key: measurement_key(&s, "a", Some("b")),
        spec: spec.clone(),
        result: None,
        figures,
    }
}

/// Two STAMP runs in the last half hour with 0.5% loss and a 50% one two
/// hours ago; two TCP runs at 500 Mbit/s up.
fn seed(path: &std::path::Path) {
    let now = now_ms();
    let stamp = serde_json::json!({"kind": "stamp", "host": "127.0.0.8"});
    let tcp = serde_json::json!({"kind": "tcp", "hosts": ["127.0.0.8"], "duration": "1s"});
    let loss = |pct: f64| Figures {
        loss_pct: Some(pct),
        delay_median_us: Some(400.0),
        ..Figures::default()
    };
    let up = Figures {
        throughput_up_bps: Some(500e6),
        errors: Some(0.0),
        ..Figures::default()
    };
    // An OWAMP run: one-way delay, its own metric, the way there only
    // (the way back's clocks were not synchronised).
    let owamp = serde_json::json!({"kind": "owamp", "host": "127.0.0.8"});
    let one_way = Figures {
        loss_pct: Some(0.0),
        owd_forward_median_us: Some(12_500.0),
        owd_synchronized: Some(false),
        ..Figures::default()
    };
    let runs = vec![
        run("o-1", &owamp, now - 4 * 60_000, one_way),
        run("s-old", &stamp, now - 2 * 3_600_000, loss(50.0)),
        run("s-1", &stamp, now - 10 * 60_000, loss(0.5)),
        run("s-2", &stamp, now - 5 * 60_000 - NOW_SLACK_MS, loss(0.5)),
        run("t-1", &tcp, now - 20 * 60_000, up.clone()),
        run("t-2", &tcp, now - 3 * 60_000, up),
    ];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let a = Archive::open(path).await.unwrap();
        a.put(&runs).await.unwrap();
    });
}

fn check(url: &str, args: &[&str]) -> (Option<i32>, String) {
    let (code, out, err) = common::run(&[&["check", "-H", url][..], args].concat());
    assert!(out.lines().count() <= 1, "one line: {out}{err}");
    (code, out.trim_end().to_owned() + &err)
}

#[test]
fn check_reports_each_state_from_a_seeded_agent_and_unknown_when_it_is_down() {
    let ports = Ports::pick();
    let config = common::tmp("check", "mesh.toml");
    std::fs::write(
        &config,
        format!(
            "[agent]\napi_port = {}\n\n[addresses.a]\naddress = \"127.0.0.7\"\n[addresses.b]\naddress = \"127.0.0.8\"\nno_agent = true\n",
            ports.api
        ),
    )
    .unwrap();
    seed(&common::tmp("check", "a.sqlite"));
    let mut agent = Agent::start("check", "a", "127.0.0.7", &config, ports, &[]);
    let url = format!("http://127.0.0.7:{}", ports.api);
    let pair = ["-s", "a", "-d", "b"];
    let loss = |w: &str, c: &str| check(&url, &[&pair[..], &["-m", "loss", "-w", w, "-c", c]].concat());

    let (code, out) = loss("0", "1");
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        out,
        "GOODPUT LOSS WARNING - loss 0.500% (mean of 2 runs in the last 30 min, a -> b, stamp) | loss=0.5%;0;1 runs=2"
    );
    let (code, out) = loss("0.1", "0.4");
    assert_eq!(code, Some(2), "{out}");
    assert!(out.starts_with("GOODPUT LOSS CRITICAL - loss 0.500%"), "{out}");
    let (code, out) = loss("1", "5");
    assert_eq!(code, Some(0), "{out}");
    assert!(out.starts_with("GOODPUT LOSS OK - "), "{out}");

    // Throughput in Mbit/s, or with a unit; below a floor is the alert.
    let up = |w: &str, c: &str| {
        check(
            &url,
            &[&pair[..], &["-m", "throughput_up", "-w", w, "-c", c]].concat(),
        )
    };
    let (code, out) = up("900:", "100:");
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("throughput_up 500.000 Mbit/s (mean of 2 runs"),
        "{out}"
    );
    assert!(
        out.ends_with("| throughput_up=500000000;900000000:;100000000: runs=2"),
        "{out}"
    );
    let (code, out) = up("900:", "1Gbit:");
    assert_eq!(code, Some(2), "{out}");
    let (code, _) = up("400:", "100:");
    assert_eq!(code, Some(0));

    // A wider window takes in the old run; --stat picks how it counts.
    let wide = |stat: &str| {
        check(
            &url,
            &[&pair[..], &["-m", "loss", "-r", "3h", "--stat", stat, "-c", "10"]].concat(),
        )
    };
    let (code, out) = wide("mean");
    assert_eq!(code, Some(2), "{out}");
    assert!(
        out.contains("loss 17.000% (mean of 3 runs in the last 3 h"),
        "{out}"
    );
    assert_eq!(wide("last").0, Some(0));
    assert_eq!(wide("max").0, Some(2));
    // Delay in ms, thresholds with or without a unit.
    let (code, out) = check(
        &url,
        &[&pair[..], &["-m", "delay_median", "-w", "0.3", "-c", "2ms"]].concat(),
    );
    assert_eq!(code, Some(1), "{out}");
    assert!(
        out.contains("delay_median 0.400 ms") && out.contains("delay_median=0.0004s;0.0003;0.002"),
        "{out}"
    );

    // One-way delay is not the round trip: its own metric, of owamp runs
    // unless told otherwise.
    let (code, out) = check(
        &url,
        &[&pair[..], &["-m", "owd_forward_median", "-w", "10", "-c", "20ms"]].concat(),
    );
    assert_eq!(code, Some(1), "{out}");
    assert_eq!(
        out,
        "GOODPUT OWD_FORWARD_MEDIAN WARNING - owd_forward_median 12.500 ms (mean of 1 runs in the last \
         30 min, a -> b, owamp) | owd_forward_median=0.0125s;0.01;0.02 runs=1"
    );
    let (code, out) = check(&url, &[&pair[..], &["-m", "owd_backward_median"]].concat());
    assert_eq!(code, Some(3), "{out}");

    // No data, bad requests: UNKNOWN, 3.
    let (code, out) = check(&url, &[&pair[..], &["-m", "hops"]].concat());
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.starts_with("GOODPUT HOPS UNKNOWN - no finished run (a -> b, trace)"),
        "{out}"
    );
    let (code, out) = check(&url, &[&pair[..], &["-m", "loss", "-r", "1m"]].concat());
    assert_eq!(code, Some(3), "{out}");
    assert!(out.contains("no result in the last 1 min"), "{out}");
    let (code, out) = loss("5:1", "1");
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.contains("--warning '5:1': the start is above the end"),
        "{out}"
    );
    let (code, out) = check(&url, &[&pair[..], &["-m", "latency"]].concat());
    assert_eq!(code, Some(3), "{out}");
    let (code, _, err) = common::run(&["check", "-H", &url, "--bogus"]);
    assert_eq!(code, Some(3), "a bad flag is UNKNOWN, not CRITICAL: {err}");

    agent.stop(libc::SIGTERM);
    let (code, out) = loss("0", "1");
    assert_eq!(code, Some(3), "{out}");
    assert!(
        out.starts_with("GOODPUT LOSS UNKNOWN - cannot reach the agent at http://127.0.0.7:"),
        "{out}"
    );
}

//! perfSONAR pScheduler results (our own fixtures, written from the
//! `http` archiver's published document format) map to goodput's runs
//! and figures exactly; malformed and unsupported documents are refused
//! with a reason.

use goodput_archive::pscheduler::{
    from_pscheduler, from_pscheduler_observed, iso_seconds, iso_time_ms, RefusalKind,
};
use goodput_archive::RunState;
use goodput_core::schedule::RunClass;
use goodput_core::time::rfc3339_ms;
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!(
        "{}/tests/fixtures/pscheduler/{name}.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

fn close(a: Option<f64>, b: f64) -> bool {
    a.is_some_and(|a| (a - b).abs() < 1e-6 * b.abs().max(1.0))
}

#[test]
fn throughput_maps_to_good_put_and_retransmits_each_way() {
    let doc = fixture("throughput");
    let m = from_pscheduler(&doc).unwrap();
    let r = &m.run;
    assert_eq!(m.test_type, "throughput");
    assert_eq!(r.id, "pscheduler/7c1d2e3f-0a4b-4c5d-9e8f-101112131415");
    assert_eq!(
        (r.source.as_str(), r.dest.as_deref()),
        ("10.81.1.1", Some("10.81.1.2"))
    );
    assert_eq!(
        (r.kind.as_str(), r.class, r.state),
        ("tcp", RunClass::Exclusive, RunState::Finished)
    );
    // 10:00:05 at UTC-5.
    let start = rfc3339_ms("2026-11-26T15:00:05Z").unwrap();
    assert_eq!((r.start_ms, r.end_ms), (Some(start), Some(start + 20_000)));
    assert_eq!(r.figures.throughput_up_bps, Some(9_300_000_000.0));
    assert_eq!(r.figures.throughput_down_bps, None);
    assert_eq!(r.figures.retransmits, Some(25.0));
    assert_eq!(r.figures.loss_pct, None, "TCP has no loss");
    assert_eq!(r.spec["kind"], "tcp");
    assert_eq!(r.spec["hosts"], serde_json::json!(["10.81.1.2"]));
    assert_eq!(r.spec["connections"], 2);
    // The whole document is kept, unmapped fields with it.
    assert_eq!(r.result.as_ref().unwrap(), &doc);
    assert_eq!(r.result.as_ref().unwrap()["result"]["mss"], 1448);

    // A reverse test that failed: the way back, the tool's reason.
    let m = from_pscheduler(&fixture("failed")).unwrap();
    assert_eq!(m.run.state, RunState::Failed);
    assert!(m.run.reason.as_deref().unwrap().contains("Connection refused"));
    assert_eq!(m.run.figures, Default::default());
    assert_eq!(m.run.spec["pattern"], "pull");
}

#[test]
fn latency_maps_to_loss_duplicates_and_one_way_delay() {
    let m = from_pscheduler(&fixture("latencybg")).unwrap();
    let (r, f) = (&m.run, &m.run.figures);
    // powstream's test is goodput's continuous OWAMP stream.
    assert_eq!((r.kind.as_str(), r.class), ("owamp", RunClass::Background));
    assert_eq!(r.spec["continuous"], true);
    assert_eq!(r.spec["summary_every"], 600);
    assert_eq!(r.spec["interval"], "100ms");
    assert_eq!(r.spec["direction"], "to");
    // 6 of 600 lost, one way: source → destination.
    assert_eq!(f.loss_pct, Some(1.0));
    assert_eq!(f.loss_forward_pct, Some(1.0));
    assert_eq!(f.loss_backward_pct, None);
    assert_eq!((f.duplicates, f.reordered), (Some(1.0), Some(2.0)));
    // 594 received: 100 at 10.21 ms, 300 at 10.22, 150 at 10.25, 30 at
    // 10.80, 14 at 12.50. The median is the 297th: 10.22 ms; the 95th
    // percentile the 565th: 10.80 ms. One way, so none of it is the
    // round trip.
    assert!(close(f.owd_forward_median_us, 10_220.0), "{f:?}");
    assert_eq!(f.owd_backward_median_us, None);
    assert_eq!(f.owd_synchronized, Some(true));
    assert!(close(f.jitter_us, 580.0), "{f:?}");
    assert_eq!(
        (f.delay_min_us, f.delay_median_us, f.delay_p95_us, f.delay_max_us),
        (None, None, None, None),
        "one-way delay is not stored as the round trip"
    );
    // Raw packets from an unsynchronised clock: loss stays, the one-way
    // delay is not a figure to keep.
    let mut doc = fixture("latencybg");
    doc["result"]["raw-packets"] = serde_json::json!([
        {"seq-num": 0, "src-clock-sync": true, "dst-clock-sync": true},
        {"seq-num": 1, "src-clock-sync": true, "dst-clock-sync": false}
    ]);
    let f = from_pscheduler(&doc).unwrap().run.figures;
    assert_eq!(f.owd_synchronized, Some(false));
    assert_eq!(f.owd_forward_median_us, None);
    assert_eq!(f.loss_forward_pct, Some(1.0));
}

#[test]
fn an_unsynchronised_one_way_latency_keeps_its_clock_error_and_no_delay() {
    // twping from a host whose clock was 15.76 ms ahead: every packet
    // "arrived" before it left (median −13.16 ms), with a clock error of
    // 27 ms. It is stored, with its loss and spread, but it is no delay.
    let doc = fixture("latency-unsynchronized");
    let m = from_pscheduler(&doc).unwrap();
    let (r, f) = (&m.run, &m.run.figures);
    assert_eq!(m.test_type, "latency");
    assert_eq!(r.dest.as_deref(), Some("10.81.1.3"));
    assert_eq!(f.owd_clock_error_us, Some(27_000.0));
    assert_eq!(f.owd_synchronized, Some(false));
    assert_eq!((f.owd_forward_median_us, f.owd_backward_median_us), (None, None));
    assert_eq!(
        (f.delay_min_us, f.delay_median_us, f.delay_p95_us, f.delay_max_us),
        (None, None, None, None),
        "one-way delay is never the round trip"
    );
    assert_eq!((f.loss_pct, f.loss_forward_pct), (Some(0.0), Some(0.0)));
    // owping's jitter is a spread, good without synchronised clocks:
    // 95th percentile −13.01 ms less the median −13.16 ms.
    assert!(close(f.jitter_us, 150.0), "{f:?}");
    // The same run 50 ms later, its median (36.84 ms) clear of the
    // clock error: a delay.
    let mut shifted = doc.clone();
    let h: serde_json::Map<String, Value> = doc["result"]["histogram-latency"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (format!("{:.2}", k.parse::<f64>().unwrap() + 50.0), v.clone()))
        .collect();
    shifted["result"]["histogram-latency"] = Value::Object(h);
    let f = from_pscheduler(&shifted).unwrap().run.figures;
    assert_eq!(f.owd_synchronized, Some(true));
    assert!(close(f.owd_forward_median_us, 36_840.0), "{f:?}");
    // A clock error that is no time is refused, with its unit.
    let mut bad = doc.clone();
    bad["result"]["max-clock-error"] = Value::from(-1.0);
    let e = from_pscheduler(&bad).unwrap_err();
    assert_eq!(e.kind, RefusalKind::OutOfRange, "{e}");
    assert!(
        e.text
            .contains("max-clock-error is -1.0, not a time of 0 to 3600000 ms"),
        "{e}"
    );
}

#[test]
fn a_single_ended_result_is_its_observers_and_a_named_source_wins() {
    // No spec source: the observer's (x-ps-observer), not the first
    // participant's host name.
    let doc = fixture("latency-unsynchronized");
    assert_eq!(from_pscheduler(&doc).unwrap().run.source, "ps-a.example.net");
    let m = from_pscheduler_observed(&doc, Some("10.81.1.1")).unwrap();
    assert_eq!(m.run.source, "10.81.1.1");
    // A trace without a source, likewise.
    let mut trace = fixture("trace");
    trace["test"]["spec"].as_object_mut().unwrap().remove("source");
    trace["participants"] = serde_json::json!(["ps-c.example.net"]);
    let m = from_pscheduler_observed(&trace, Some("10.81.1.1")).unwrap();
    assert_eq!(m.run.source, "10.81.1.1");
    // The spec's source names whose measurement it is, whoever ran it.
    let m = from_pscheduler_observed(&fixture("rtt"), Some("10.81.1.3")).unwrap();
    assert_eq!(m.run.source, "10.81.1.2");
    let e = from_pscheduler_observed(&doc, Some("")).unwrap_err();
    assert_eq!(e.kind, RefusalKind::Malformed, "{e}");
    assert!(
        e.text
            .contains("x-ps-observer header must be 1 to 512 characters"),
        "{e}"
    );
}

#[test]
fn rtt_maps_to_loss_and_round_trips() {
    let m = from_pscheduler(&fixture("rtt")).unwrap();
    let (r, f) = (&m.run, &m.run.figures);
    assert_eq!(r.kind, "ping");
    assert_eq!(r.start_ms, Some(rfc3339_ms("2026-11-26T15:02:00.250Z").unwrap()));
    assert_eq!(f.loss_pct, Some(20.0));
    assert!(close(f.delay_min_us, 398.0), "{f:?}");
    assert!(close(f.delay_max_us, 521.0), "{f:?}");
    assert!(close(f.jitter_us, 51.0), "{f:?}");
    // Four round trips: 398, 405, 412, 521 µs.
    assert!(close(f.delay_median_us, 405.0), "{f:?}");
    assert!(close(f.delay_p95_us, 521.0), "{f:?}");
}

#[test]
fn trace_maps_to_hops_and_a_path_checksum() {
    let doc = fixture("trace");
    let m = from_pscheduler(&doc).unwrap();
    let f = &m.run.figures;
    assert_eq!(m.run.kind, "trace");
    assert_eq!(m.run.spec["method"], "icmp");
    assert_eq!(f.hops, Some(4.0));
    let sum = f.path_checksum.clone().unwrap();
    // Another router at hop 3: another path.
    let mut moved = doc.clone();
    moved["result"]["paths"][0][2]["ip"] = "10.81.9.2".into();
    let other = from_pscheduler(&moved)
        .unwrap()
        .run
        .figures
        .path_checksum
        .unwrap();
    assert_ne!(sum, other);
    // The same path again: the same checksum.
    assert_eq!(
        from_pscheduler(&doc).unwrap().run.figures.path_checksum.unwrap(),
        sum
    );
}

#[test]
fn malformed_and_unsupported_documents_are_refused_with_a_reason() {
    let err = from_pscheduler(&fixture("unsupported")).unwrap_err();
    assert_eq!(err.kind, RefusalKind::NoKind, "{err}");
    assert!(
        err.text.contains("type 'dns'") && err.text.contains("no goodput kind"),
        "{err}"
    );
    // A type pSConfig has and goodput does not.
    let mut other = fixture("latencybg");
    other["test"]["type"] = "s3-throughput".into();
    let err = from_pscheduler(&other).unwrap_err();
    assert_eq!(err.kind, RefusalKind::NoKind, "{err}");
    let base = fixture("latencybg");
    type Change = Box<dyn Fn(&mut Value)>;
    let cases: Vec<(&str, Change, &str)> = vec![
        ("not an object", Box::new(|d| *d = Value::from(3)), "JSON object"),
        (
            "no id",
            Box::new(|d| drop(d.as_object_mut().unwrap().remove("id"))),
            "no id",
        ),
        (
            "no result",
            Box::new(|d| drop(d.as_object_mut().unwrap().remove("result"))),
            "no result",
        ),
        (
            "a time without an offset",
            Box::new(|d| d["schedule"]["start"] = "2026-11-26T15:01:00".into()),
            "schedule.start",
        ),
        (
            "a bad duration",
            Box::new(|d| d["schedule"]["duration"] = "ten minutes".into()),
            "schedule.duration",
        ),
        (
            "no succeeded",
            Box::new(|d| drop(d["result"].as_object_mut().unwrap().remove("succeeded"))),
            "succeeded",
        ),
        (
            "a bucket that is not a delay",
            Box::new(|d| d["result"]["histogram-latency"]["fast"] = 3.into()),
            "bucket 'fast'",
        ),
        (
            "a bucket past an hour",
            Box::new(|d| d["result"]["histogram-latency"]["1e9"] = 3.into()),
            "bucket '1e9' is outside",
        ),
        (
            "no dest",
            Box::new(|d| drop(d["test"]["spec"].as_object_mut().unwrap().remove("dest"))),
            "dest",
        ),
        (
            "a huge id",
            Box::new(|d| d["id"] = "x".repeat(600).into()),
            "id must be",
        ),
    ];
    for (what, change, says) in cases {
        let mut d = base.clone();
        change(&mut d);
        let err = from_pscheduler(&d).expect_err(what);
        assert!(err.text.contains(says), "{what}: {err}");
        // A bucket out of range is; a document that does not read is not.
        let want = if says.starts_with("bucket '1e9'") {
            RefusalKind::OutOfRange
        } else {
            RefusalKind::Malformed
        };
        assert_eq!(err.kind, want, "{what}: {err}");
    }
}

#[test]
fn iso_times_and_durations_read_with_offsets_and_fractions() {
    assert_eq!(
        iso_time_ms("2026-11-26T10:00:05-05:00").unwrap(),
        rfc3339_ms("2026-11-26T15:00:05Z").unwrap()
    );
    assert_eq!(
        iso_time_ms("2026-11-27T01:30:00+09:30").unwrap(),
        rfc3339_ms("2026-11-26T16:00:00Z").unwrap()
    );
    assert!(
        iso_time_ms("1970-01-01T00:00:00+01:00").is_err(),
        "before the epoch"
    );
    assert!(iso_time_ms("2026-11-26T10:00:05+25:00").is_err());
    assert!((iso_seconds("PT0.000257S").unwrap() - 0.000257).abs() < 1e-12);
    assert_eq!(iso_seconds("P1DT2H3M4S").unwrap(), 93_784.0);
    for bad in ["", "P", "PT", "10S", "PT1X", "P1S", "PT1e999S"] {
        assert!(iso_seconds(bad).is_err(), "{bad}");
    }
}

//! `goodput http` and `goodput tls`: flags to specs, and their runs.

use super::run::Extras;
use super::views::Views;
use super::{flag_error_as, from_flags, long_flag, usage, Stop};
use crate::flags::{HttpArgs, MethodArg, TlsArgs, ViewArgs};
use goodput_core::spec::{Family, HttpMethod, HttpSpec, HttpVersion, TestSpec, TlsSpec};
use goodput_engine::run::RunContext;

/// A field's flag; the URL and host are positional.
fn flag(field: &str) -> String {
    match field {
        "url" => "URL".to_owned(),
        "version" => "--http1/--http2".to_owned(),
        f => long_flag(f),
    }
}

pub(crate) async fn http(args: HttpArgs) -> Result<u8, Stop> {
    let spec = HttpSpec {
        url: args.url,
        method: match args.method {
            MethodArg::Get => HttpMethod::Get,
            MethodArg::Head => HttpMethod::Head,
            MethodArg::Post => HttpMethod::Post,
        },
        data: args.data,
        header: args.header,
        version: match (args.http1, args.http2) {
            (true, _) => HttpVersion::Http1,
            (_, true) => HttpVersion::Http2,
            _ => HttpVersion::Auto,
        },
        expect_status: args.expect_status,
        expect_body: args.expect_body,
        expect_body_regex: args.expect_body_regex,
        expect_json: args.expect_json,
        follow: args.follow,
        max_body: args.max_body,
        timeout: args.timeout,
        ca: args.ca,
        insecure: args.insecure,
        resolve: args.resolve,
        count: args.count,
        interval: args.interval,
        family: Family::of(args.ipv4, args.ipv6),
        assert: args.assert,
    };
    from_flags(
        spec,
        |e| flag_error_as(e, flag),
        args.print_spec,
        &args.views,
        &Extras::default(),
    )
    .await
}

pub(crate) async fn tls(args: TlsArgs) -> Result<u8, Stop> {
    let mut assert = args.assert;
    if let Some(n) = args.min_days {
        assert.push(
            format!("cert_days_left >= {n}")
                .parse()
                .map_err(|e| usage(format!("--min-days {n}: {e}")))?,
        );
    }
    let spec = TlsSpec {
        host: args.host,
        sni: args.sni,
        alpn: args.alpn,
        ca: args.ca,
        insecure: args.insecure,
        timeout: args.timeout,
        family: Family::of(args.ipv4, args.ipv6),
        assert,
    };
    from_flags(
        spec,
        |e| flag_error_as(e, flag),
        args.print_spec,
        &args.views,
        &Extras::default(),
    )
    .await
}

/// Runs a validated http or tls spec: a request that got no final
/// response, or a handshake that failed or whose chain did not verify,
/// is a failure (exit 1); a response outside `--expect-*` fails like an
/// assertion (exit 4).
pub(crate) async fn run_web(spec: TestSpec, out: &ViewArgs) -> Result<u8, Stop> {
    let mut views = Views::open(out, None)?;
    let result =
        super::run::engine_run(&spec, RunContext::with_records(out.max_records), &mut views, out).await?;
    views.finish(&result, out.json.as_deref())?;
    let code = super::exit_status(&result, result.summary.failures() > 0);
    let mismatched = result.http().is_some_and(|h| h.matched < h.completed);
    Ok(if code == super::EXIT_OK && mismatched {
        super::EXIT_ASSERTION
    } else {
        code
    })
}

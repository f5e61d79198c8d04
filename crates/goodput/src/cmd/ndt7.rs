//! `goodput ndt7`: its flags become an `Ndt7Spec`; the ndt7 client.

use super::run::{engine_run, Extras};
use super::views::Views;
use super::{exit_status, flag_error, from_flags, Stop};
use crate::flags::{Ndt7Args, ViewArgs};
use goodput_core::spec::Ndt7Spec;
use goodput_engine::run::RunContext;

pub(crate) async fn ndt7(args: Ndt7Args) -> Result<u8, Stop> {
    let spec = Ndt7Spec {
        url: Some(args.url.clone()),
        download: !args.upload_only,
        upload: !args.download_only,
        ca: args.ca.clone(),
        insecure: args.insecure,
        assert: args.assert.clone(),
    };
    from_flags(spec, flag_error, args.print_spec, &args.views, &Extras::default()).await
}

/// Runs a validated ndt7 spec: `goodput ndt7`'s path and `goodput run`'s.
pub(crate) async fn run_ndt7(spec: Ndt7Spec, out: &ViewArgs) -> Result<u8, Stop> {
    let mut views = Views::open(out, None)?;
    let result = engine_run(
        &spec.into(),
        RunContext::with_records(out.max_records),
        &mut views,
        out,
    )
    .await?;
    views.finish(&result, out.json.as_deref())?;
    let failed = result.end == goodput_core::result::EndReason::Failed;
    Ok(exit_status(&result, failed))
}

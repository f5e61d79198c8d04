//! `goodput owamp` and `goodput twamp`: their flags become an `OwampSpec`
//! or a `TwampSpec`, which the engine runs (`cmd/run.rs`).

use super::run::Extras;
use super::{flag_error, from_flags, Stop};
use crate::flags::{LatencyCommon, OwampArgs, TwampArgs};
use goodput_core::owamp::pfs;
use goodput_core::spec::{Family, OwampDirection, OwampSpec, TwampSpec};

/// The key identity: the flag, or the passphrase file's first key.
fn key_identity(c: &LatencyCommon) -> Result<Option<String>, Stop> {
    if c.key_id.is_some() || !c.mode.needs_key() {
        return Ok(c.key_id.clone());
    }
    let Some(path) = &c.passphrase_file else {
        return Ok(None);
    };
    let read = std::fs::read_to_string(path).map_err(|e| e.to_string());
    let keys = read.and_then(|text| pfs::parse(&text).map_err(|e| e.to_string()));
    match keys {
        Ok(keys) => keys
            .first()
            .map(|k| Some(k.identity.clone()))
            .ok_or_else(|| Stop::Usage(format!("--passphrase-file {}: holds no key", path.display()))),
        Err(e) => Err(Stop::Usage(format!("--passphrase-file {}: {e}", path.display()))),
    }
}

pub(crate) async fn owamp(args: OwampArgs) -> Result<u8, Stop> {
    let c = &args.common;
    let spec = OwampSpec {
        host: args.host.clone(),
        port: args.port,
        direction: match (args.to, args.from) {
            (true, _) => OwampDirection::To,
            (_, true) => OwampDirection::From,
            _ => OwampDirection::Both,
        },
        count: c.count,
        interval: c.interval,
        poisson: args.poisson,
        padding: args.padding,
        dscp: c.dscp,
        timeout: c.timeout,
        mode: c.mode,
        key_identity: key_identity(c)?,
        passphrase_file: c.passphrase_file.clone(),
        test_ports: c.port_range,
        bind: c.bind,
        family: Family::of(c.ipv4, c.ipv6),
        continuous: args.continuous,
        summary_every: args.summary_every,
        duration: args.duration,
        assert: args.assert.clone(),
        ..OwampSpec::default()
    };
    from_flags(spec, flag_error, c.print_spec, &c.views, &Extras::default()).await
}

pub(crate) async fn twamp(args: TwampArgs) -> Result<u8, Stop> {
    let c = &args.common;
    let spec = TwampSpec {
        host: args.host.clone(),
        port: args.port,
        count: c.count,
        interval: c.interval,
        padding: args.padding,
        dscp: c.dscp,
        timeout: c.timeout,
        mode: c.mode,
        key_identity: key_identity(c)?,
        passphrase_file: c.passphrase_file.clone(),
        test_ports: c.port_range,
        bind: c.bind,
        family: Family::of(c.ipv4, c.ipv6),
        assert: args.assert.clone(),
        ..TwampSpec::default()
    };
    from_flags(spec, flag_error, c.print_spec, &c.views, &Extras::default()).await
}

//! A `owamp` spec's run. A placeholder until the OWAMP client is
//! built: it refuses to start, so a spec of the kind runs to a failed
//! result with the reason rather than to nothing.

use goodput_core::result::TestResult;
use goodput_core::spec::OwampSpec;
use tokio_util::sync::CancellationToken;

use super::Failure;
use crate::Observer;

/// Runs a validated OWAMP spec.
pub(super) async fn run(
    _spec: &OwampSpec,
    _observer: &mut dyn Observer,
    _cancel: CancellationToken,
    _max_records: usize,
) -> Result<TestResult, Failure> {
    Err(Failure::setup("the OWAMP client is not built yet"))
}

//! The HTTP API, `/api/v1` (JSON) and `/metrics` (OpenMetrics text). It is
//! also how agents book runs with each other and hand over results.
//! Reading needs nothing; booking, asking for runs and storing results
//! need the shared token (`Authorization: Bearer …`) and an address the
//! allow list admits.

pub(crate) mod accept;
mod archive;
mod auth;
mod fleet;
mod grid;
pub(crate) mod listen;
mod metrics;
pub(crate) mod openapi;
mod pages;
pub(crate) mod pscheduler;
mod router;
mod runs;
mod schedule;
mod series;
mod speedtest;
mod status;

use std::sync::Arc;

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::Json;

use crate::state::{Counters, Shared};

pub(crate) use router::{bind, serve, serve_app};

pub(crate) type Ctx = Arc<Shared>;

/// An error answer: a status and one sentence.
pub(crate) struct Failure(pub(crate) StatusCode, pub(crate) String);

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        (self.0, Json(serde_json::json!({ "error": self.1 }))).into_response()
    }
}

fn bad(text: impl Into<String>) -> Failure {
    Failure(StatusCode::BAD_REQUEST, text.into())
}

/// A body that does not read: 413 when it is past the body limit (a
/// forwarder then sends smaller batches), else 400.
pub(crate) fn unreadable(e: &axum::extract::rejection::JsonRejection) -> Failure {
    let status = if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        StatusCode::PAYLOAD_TOO_LARGE
    } else {
        StatusCode::BAD_REQUEST
    };
    Failure(status, e.body_text())
}

pub(crate) fn internal(e: impl std::fmt::Display) -> Failure {
    Failure(StatusCode::INTERNAL_SERVER_ERROR, e.to_string())
}

/// A write the archive did not take: 503, and why.
fn unstored(why: String) -> Failure {
    Failure(StatusCode::SERVICE_UNAVAILABLE, why)
}

/// A write refused at once while the archive's disk is full.
fn archive_has_room(s: &Shared) -> Result<(), Failure> {
    s.archive_full().map_or(Ok(()), |why| Err(unstored(why)))
}

/// Counts a refusal under `refused` and one of its kinds.
fn count_refusal(s: &Shared, which: impl FnOnce(&mut Counters)) {
    let mut inner = s.lock();
    inner.counters.refused += 1;
    which(&mut inner.counters);
}

/// Only a fleet's archive takes forwarded runs and registrations.
pub(crate) fn only_archive(s: &Shared) -> Result<(), Failure> {
    if !s.is_archive() {
        return Err(Failure(
            StatusCode::NOT_FOUND,
            "this agent is not a fleet's archive (goodput agent --role archive)".into(),
        ));
    }
    Ok(())
}

/// A fleet's archive runs no tests.
fn not_an_archive(s: &Shared) -> Result<(), Failure> {
    if s.is_archive() {
        return Err(Failure(
            StatusCode::CONFLICT,
            "this is a fleet's archive (--role archive): it runs no tests; ask an agent".into(),
        ));
    }
    Ok(())
}

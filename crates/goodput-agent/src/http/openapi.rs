//! The API's OpenAPI 3.1 document, built from the same types the handlers
//! answer with: their JSON Schemas come from `schemars`, which the rest of
//! goodput's documents already use, so no second set of annotations can
//! drift from the code.

use schemars::gen::{SchemaGenerator, SchemaSettings};
use serde_json::{json, Value};

use axum::Json;

use crate::http::archive::Ingest;
use crate::http::fleet::AgentView;
use crate::http::grid::GridView;
use crate::http::runs::OnDemand;
use crate::http::schedule::ScheduleView;
use crate::http::series::{PathsView, SeriesView};
use crate::http::status::{Health, TaskView};
use crate::state::fleet::Registration;
use crate::state::peer::Reservation;

/// The document served at `/api/v1/openapi.json`.
pub fn document() -> Value {
    let mut settings = SchemaSettings::openapi3();
    settings.definitions_path = "#/components/schemas/".into();
    let mut g = SchemaGenerator::new(settings);
    let schema = |name: &str, s: schemars::schema::Schema| {
        (name.to_owned(), serde_json::to_value(s).unwrap_or_default())
    };
    let named = [
        schema("Health", g.subschema_for::<Health>()),
        schema("TaskView", g.subschema_for::<Vec<TaskView>>()),
        schema("ScheduleView", g.subschema_for::<ScheduleView>()),
        schema("Reservation", g.subschema_for::<Reservation>()),
        schema("Runs", g.subschema_for::<Vec<goodput_archive::Run>>()),
        schema("Run", g.subschema_for::<goodput_archive::Run>()),
        schema("OnDemand", g.subschema_for::<OnDemand>()),
        schema("SeriesView", g.subschema_for::<SeriesView>()),
        schema("PathsView", g.subschema_for::<PathsView>()),
        schema("GridView", g.subschema_for::<GridView>()),
        schema(
            "Alerts",
            g.subschema_for::<Vec<crate::state::alerts::AlertView>>(),
        ),
        schema("MeshConfig", g.subschema_for::<goodput_core::mesh::MeshConfig>()),
        schema("Ingest", g.subschema_for::<Ingest>()),
        schema("Registration", g.subschema_for::<Registration>()),
        schema("Agents", g.subschema_for::<Vec<AgentView>>()),
    ];
    let mut schemas = serde_json::Map::new();
    for (name, s) in g.take_definitions() {
        schemas.insert(name, serde_json::to_value(s).unwrap_or_default());
    }
    let body = |name: &str| -> Value {
        let s = named
            .iter()
            .find(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .unwrap_or_default();
        json!({"content": {"application/json": {"schema": s}}})
    };
    let error = json!({"description": "what is wrong, in one sentence",
        "content": {"application/json": {"schema": {"type": "object", "properties": {"error": {"type": "string"}}}}}});
    let q = |name: &str, kind: &str, text: &str| json!({"name": name, "in": "query", "required": false, "schema": {"type": kind}, "description": text});
    let auth = json!([{"token": []}]);
    let object = json!({"content": {"application/json": {"schema": {"type": "object"}}}});
    let observer = json!({"name": "x-ps-observer", "in": "header", "required": false, "schema": {"type": "string"},
        "description": "the host that ran the test, as perfSONAR's pSConfig sets it ({% scheduled_by_address %}): a single-ended result whose spec names no source is filed under it"});
    let id = json!({"name": "id", "in": "path", "required": true, "schema": {"type": "string"},
        "description": "the run's id (task/source/dest/BASE_MS, or on-demand/UUID); its slashes stay as they are"});
    json!({
        "openapi": "3.1.0",
        "info": {
            "title": "goodput agent API",
            "version": "1",
            "description": "A goodput measurement agent: its health, configuration, tasks, calendar, runs and series; how agents book runs with each other; on-demand runs. Calls that change something need the shared token."
        },
        "components": {
            "securitySchemes": {"token": {"type": "http", "scheme": "bearer", "description": "the mesh's shared token"}},
            "schemas": schemas
        },
        "paths": {
            "/api/v1/health": {"get": {"summary": "version, uptime, clock synchronisation and error, archive size, queue depths, the configuration's last load and error",
                "responses": {"200": body("Health")}}},
            "/api/v1/config": {"get": {"summary": "the configuration in force, where it came from, when it loaded and the last load's error",
                "responses": {"200": {"description": "the configuration", "content": {"application/json": {"schema": {"type": "object"}}}}}}},
            "/api/v1/tasks": {"get": {"summary": "the task pairs this agent leads, with their next run",
                "responses": {"200": body("TaskView")}}},
            "/api/v1/schedule": {"get": {"summary": "the calendar over a time range: bookings and the free slots for an exclusive run (peers read it to find a common slot)",
                "parameters": [q("from_ms", "integer", "start, ms since the Unix epoch (default now)"), q("to_ms", "integer", "end, ms (default an hour on; at most 31 days)")],
                "responses": {"200": body("ScheduleView"), "400": error.clone()}}},
            "/api/v1/reservations": {"post": {"summary": "a peer books a run on this agent's calendar", "security": auth.clone(),
                "requestBody": body("Reservation"),
                "responses": {"201": {"description": "booked"}, "400": error.clone(), "401": error.clone(), "403": {"description": "a limit refused it; the error names the limit"}, "409": {"description": "the time is taken; the error names the run in the way"}}}},
            "/api/v1/runs": {
                "get": {"summary": "runs, newest first, without their result documents",
                    "parameters": [q("source", "string", "source address name"), q("dest", "string", "destination address name"), q("kind", "string", "test kind"),
                        q("state", "string", "scheduled, running, finished, failed, missed, non_start or cancelled"),
                        q("from_ms", "integer", "due at or after (ms)"), q("to_ms", "integer", "due before (ms)"), q("limit", "integer", "at most this many (default 1000, at most 10000)")],
                    "responses": {"200": body("Runs"), "400": error.clone()}},
                "post": {"summary": "run a test now, or at the first slot free on both ends within the slip", "security": auth.clone(),
                    "requestBody": body("OnDemand"),
                    "responses": {"201": {"description": "the run's id and state (scheduled with its slot, or non_start with the reason)"}, "400": error.clone(), "401": error.clone(), "403": error.clone()}}},
            "/api/v1/runs/{id}": {
                "get": {"summary": "one run with its result document", "parameters": [id.clone()],
                    "responses": {"200": body("Run"), "404": error.clone()}},
                "put": {"summary": "the agent that ran a run hands over its record", "security": auth, "parameters": [id],
                    "requestBody": body("Run"),
                    "responses": {"204": {"description": "stored"}, "400": error.clone(), "401": error.clone(), "403": error.clone()}}},
            "/api/v1/series": {"get": {"summary": "a measurement's series of one metric, with its unit: every run's value, or per-step aggregates (whole hours read stored aggregates); each point's time in ms and ISO 8601 UTC",
                "parameters": [q("key", "string", "measurement key (or source, dest and kind to find the latest one)"), q("source", "string", ""), q("dest", "string", ""), q("kind", "string", "the kind of test; without it, the one kind whose runs between source and dest have the metric (several: 400, naming them)"),
                    {"name": "metric", "in": "query", "required": true, "schema": {"type": "string", "enum": goodput_archive::Metric::ALL.iter().map(|m| serde_json::to_value(m).unwrap_or_default()).collect::<Vec<_>>()}},
                    q("from_ms", "integer", "start (default a day before to_ms)"), q("to_ms", "integer", "end (default now)"), q("step_ms", "integer", "aggregate per step")],
                "responses": {"200": body("SeriesView"), "400": error.clone(), "404": error.clone()}}},
            "/api/v1/paths": {"get": {"summary": "the paths a measurement's traces took over a window: each with its runs, first and last time, hop count and hop list, and whether (and how often) the path changed",
                "parameters": [q("key", "string", "measurement key (or source, dest and kind, default trace, to find the latest one)"), q("source", "string", ""), q("dest", "string", ""), q("kind", "string", ""),
                    q("from_ms", "integer", "start (default a day before to_ms)"), q("to_ms", "integer", "end (default now)")],
                "responses": {"200": body("PathsView"), "404": error.clone()}}},
            "/api/v1/grid": {"get": {"summary": "the mesh's grid of one metric family: each measurement's state (ok, warning, critical, no_data, not_run, maintenance) in each direction, with its latest value and why, from this agent's evaluation of its rules and every other agent's (scope=local: this agent's only); the legend of the rules; which agents answered",
                "parameters": [q("metric", "string", "throughput, loss, delay, jitter or path (default loss)"), q("scope", "string", "mesh (default) or local")],
                "responses": {"200": body("GridView"), "400": error.clone()}}},
            "/api/v1/alerts": {"get": {"summary": "alerts from the archive, newest first: the open ones, or (state=all) every one open at some time in a range; each with its task and its rule's thresholds in words",
                "parameters": [q("state", "string", "open (default) or all"), q("from_ms", "integer", "start (state=all; default 7 days ago)"), q("to_ms", "integer", "end"), q("limit", "integer", "at most this many (default 1000, at most 10000)")],
                "responses": {"200": body("Alerts"), "400": error.clone()}}},
            "/ui/grid": {"get": {"summary": "the dashboard: the grid page (HTML); /ui/pair, /ui/runs, /ui/host and /ui/alerts are its other pages",
                "parameters": [q("metric", "string", "throughput, loss, delay, jitter or path")],
                "responses": {"200": {"description": "text/html"}}}},
            "/api/v1/archive/runs": {"post": {"summary": "a fleet archive (--role archive) stores runs an agent forwards, by id (sent twice, stored once); each run that does not read, is out of range, or that the caller is not an end of, is refused with its reason, the rest stored in one transaction", "security": auth.clone(),
                "requestBody": body("Ingest"),
                "responses": {"200": {"description": "how many were stored, and each refusal with its reason", "content": {"application/json": {"schema": {"type": "object"}}}}, "400": error.clone(), "401": error.clone(), "403": error.clone(), "404": {"description": "not a fleet archive"}, "413": error.clone(), "503": {"description": "the database failed; nothing of the batch was stored"}}}},
            "/api/v1/archive/pscheduler": {
                "post": {"summary": "a fleet archive stores a perfSONAR pScheduler result as its http archiver sends it (throughput, latency, latencybg, rtt, trace)", "security": auth.clone(),
                    "parameters": [observer.clone()],
                    "requestBody": object.clone(),
                    "responses": {"200": {"description": "the run it became: id, kind, task, ends, measurement"}, "400": error.clone(), "401": error.clone(), "404": {"description": "not a fleet archive"}, "422": error.clone(), "503": error.clone()}},
                "put": {"summary": "the same (pScheduler's http archiver PUTs by default)", "security": auth.clone(),
                    "parameters": [observer],
                    "requestBody": object,
                    "responses": {"200": {"description": "the run it became"}, "400": error.clone(), "401": error.clone(), "404": {"description": "not a fleet archive"}, "422": error.clone(), "503": error.clone()}}},
            "/api/v1/fleet/config": {"get": {"summary": "the mesh document in force (JSON), or with host=NAME only the tasks whose groups hold that host; tagged (ETag), 304 for If-None-Match of the same version",
                "parameters": [q("host", "string", "an address name of the mesh")],
                "responses": {"200": body("MeshConfig"), "304": {"description": "unchanged"}, "404": error.clone()}}},
            "/api/v1/fleet/agents": {"get": {"summary": "a fleet archive's inventory: each agent up, lapsed or unregistered, when last seen, what it said of itself",
                "responses": {"200": body("Agents")}}},
            "/api/v1/fleet/agents/{name}": {"put": {"summary": "an agent registers with a fleet archive, or renews its lease", "security": auth.clone(),
                "parameters": [{"name": "name", "in": "path", "required": true, "schema": {"type": "string"}, "description": "its address name in the mesh"}],
                "requestBody": body("Registration"),
                "responses": {"204": {"description": "registered until its lease runs out"}, "400": error.clone(), "401": error.clone(), "404": error.clone(), "413": error.clone()}}},
            "/api/v1/openapi.json": {"get": {"summary": "this document", "responses": {"200": {"description": "OpenAPI 3.1"}}}},
            "/metrics": {"get": {"summary": "OpenMetrics text: latest figures per measurement with pair labels, runs by state, archive size, clock error",
                "responses": {"200": {"description": "application/openmetrics-text"}}}}
        }
    })
}

pub(crate) async fn openapi() -> Json<serde_json::Value> {
    Json(crate::http::openapi::document())
}

//! The HTTP API's routes (axum). Every error is `{"error": "...", "status":
//! N}` with a 4xx for what the client got wrong and a 500 for what the
//! server could not do; `docs/api.md` shows each route with curl.

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Query, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use futures::StreamExt;
use sts_client::{ApiError, Job, JobRequest, State as JobState, Version};
use sts_engine::clock::unix_time_ms;
use tokio::io::{AsyncReadExt, AsyncSeekExt};

use crate::jobs::{self, PrepareError};
use crate::worker::Shared;

/// Largest request body accepted (a job with its files).
pub const MAX_BODY: usize = 64 * 1024 * 1024;

/// The API's version (`GET /version`).
pub const API_VERSION: u32 = 1;

/// What the handlers see.
#[derive(Clone)]
pub struct App {
    pub shared: Arc<Shared>,
    pub proxies: Arc<crate::proxies::Proxies>,
    /// What every request is checked against (token, Host, Origin).
    pub door: Arc<crate::door::Door>,
}

/// A JSON answer ending with a newline (so that `curl` output reads well).
pub struct Json<T>(pub T);

impl<T: serde::Serialize> IntoResponse for Json<T> {
    fn into_response(self) -> Response {
        match serde_json::to_vec(&self.0) {
            Ok(mut bytes) => {
                bytes.push(b'\n');
                ([(header::CONTENT_TYPE, "application/json")], bytes).into_response()
            }
            Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
        }
    }
}

/// An error answer.
#[derive(Debug)]
pub struct Failure(StatusCode, String);

impl Failure {
    pub(crate) fn new(status: StatusCode, error: impl Into<String>) -> Failure {
        Failure(status, error.into())
    }
    fn bad(error: impl Into<String>) -> Failure {
        Failure::new(StatusCode::BAD_REQUEST, error)
    }
    fn not_found(id: i64) -> Failure {
        Failure::new(StatusCode::NOT_FOUND, format!("no job {id}"))
    }
    pub(crate) fn internal(error: impl std::fmt::Display) -> Failure {
        tracing::error!("{error}");
        Failure::new(StatusCode::INTERNAL_SERVER_ERROR, error.to_string())
    }
}

impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let body = ApiError { error: self.1, status: self.0.as_u16() };
        (self.0, Json(body)).into_response()
    }
}

impl From<crate::store::StoreError> for Failure {
    fn from(e: crate::store::StoreError) -> Failure {
        Failure::internal(e)
    }
}

type Answer<T> = Result<T, Failure>;

/// The router, with authentication and the body limit.
pub fn router(app: App) -> Router {
    Router::new()
        .route("/", get(crate::index::page))
        .route("/version", get(version))
        .route("/openapi.json", get(openapi))
        .route("/jobs", get(list_jobs).post(submit))
        .route("/jobs/{id}", get(get_job).delete(delete_job))
        .route("/jobs/{id}/cancel", post(cancel_job))
        .route("/jobs/{id}/log", get(job_log))
        .route("/jobs/{id}/events", get(job_events))
        .route("/jobs/{id}/experiment.tar.gz", get(experiment_tarball))
        .route("/jobs/{id}/report.html", get(report_html))
        .route("/jobs/{id}/trace.pcapng", get(trace_pcap))
        // The name before captures became pcapng (the same bytes).
        .route("/jobs/{id}/trace.pcap", get(trace_pcap))
        .route("/jobs/{id}/junit.xml", get(junit_xml))
        .route("/jobs/{id}/summary.md", get(summary_md))
        .route("/jobs/{id}/page", get(crate::index::job_page))
        .route("/jobs/{id}/files/", get(crate::files::root))
        .route("/jobs/{id}/files/{*path}", get(crate::files::entry))
        .route("/proxies", get(list_proxies).post(create_proxy))
        .route("/proxies/populate", post(populate_proxies))
        .route("/proxies/{name}", get(get_proxy).delete(delete_proxy))
        .route("/proxies/{name}/policy", axum::routing::put(set_proxy_policy))
        .route("/proxies/{name}/rules", post(add_proxy_rule))
        .route("/proxies/{name}/rules/{rule}", get(get_proxy_rule).put(replace_proxy_rule).delete(delete_proxy_rule))
        .route("/proxies/{name}/release", post(release_proxy))
        .route("/proxies/{name}/recording", get(proxy_recording))
        .route("/reset", post(reset))
        .fallback(|| async { Failure::new(StatusCode::NOT_FOUND, "no such route; see /openapi.json") })
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Time a submission's files have to be unpacked and its config checked
/// (every size a config names is bounded first, so this is a backstop).
pub const PREPARE_TIMEOUT: Duration = Duration::from_secs(60);

/// Time a request body has to arrive whole, once its head passed the door.
pub const BODY_TIMEOUT: Duration = Duration::from_secs(120);

/// Refuses requests that do not pass the [door](crate::door) (foreign Host,
/// browser Origin, no token) and bodies announced larger than [`MAX_BODY`],
/// before reading them; marks the connection trusted otherwise. A browser's
/// `GET /?token=TOKEN` sets the reading cookie and comes back without it.
async fn guard(State(app): State<App>, req: Request, next: Next) -> Response {
    use crate::door::Refusal;
    if let Err(refusal) = app.door.check(req.method(), req.headers()) {
        let status = match refusal {
            Refusal::Host(_) => StatusCode::BAD_REQUEST,
            Refusal::Origin(_) => StatusCode::FORBIDDEN,
            Refusal::Token => StatusCode::UNAUTHORIZED,
        };
        if refusal == Refusal::Token {
            if let Some(login) = login(&app, &req) {
                return login;
            }
        }
        let mut r = Failure::new(status, refusal.message()).into_response();
        if status == StatusCode::UNAUTHORIZED {
            r.headers_mut().insert(header::WWW_AUTHENTICATE, header::HeaderValue::from_static("Bearer"));
        }
        return r;
    }
    if let Some(trust) = req.extensions().get::<crate::listener::Trust>() {
        trust.grant();
    }
    let announced = req.headers().get(header::CONTENT_LENGTH).and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if announced.is_some_and(|n| n > MAX_BODY as u64) {
        return Failure::new(StatusCode::PAYLOAD_TOO_LARGE, format!("request body larger than {} MiB", MAX_BODY >> 20))
            .into_response();
    }
    next.run(req).await
}

/// `GET PATH?token=TOKEN` from a browser: sets the cookie that lets it read
/// (never write) and sends it to PATH, so the token leaves the address bar.
fn login(app: &App, req: &Request) -> Option<Response> {
    if req.method() != axum::http::Method::GET {
        return None;
    }
    let query = req.uri().query()?;
    let token = query.split('&').find_map(|kv| kv.strip_prefix("token="))?;
    if !app.door.is_token(token.as_bytes()) {
        return None;
    }
    let cookie = format!("{}={token}; Path=/; HttpOnly; SameSite=Strict", crate::door::COOKIE);
    let mut r = Response::new(Body::empty());
    *r.status_mut() = StatusCode::SEE_OTHER;
    let h = r.headers_mut();
    h.insert(header::LOCATION, header::HeaderValue::from_str(req.uri().path()).ok()?);
    h.insert(header::SET_COOKIE, header::HeaderValue::from_str(&cookie).ok()?);
    h.insert(header::CACHE_CONTROL, header::HeaderValue::from_static("no-store"));
    Some(r)
}

/// A request's media type, lower case, without parameters (`""` when none).
fn media_type(req: &Request) -> String {
    let value = req.headers().get(header::CONTENT_TYPE).and_then(|v| v.to_str().ok()).unwrap_or("");
    value.split(';').next().unwrap_or("").trim().to_ascii_lowercase()
}

fn unsupported_type() -> Failure {
    Failure::new(
        StatusCode::UNSUPPORTED_MEDIA_TYPE,
        "send the body as `Content-Type: application/json` (or a job with files as multipart/form-data)",
    )
}

fn parse_id(id: &str) -> Answer<i64> {
    id.parse::<i64>().map_err(|_| Failure::bad(format!("{id:?} is not a job id")))
}

/// The job as the API shows it: live progress while it runs.
fn shown(app: &App, mut job: Job) -> Job {
    if job.state == JobState::Running {
        if let Some(p) = app.shared.progress(job.id) {
            job.progress = Some(p);
        }
    }
    job
}

pub(crate) fn find(app: &App, id: &str) -> Answer<Job> {
    let id = parse_id(id)?;
    let job = app.shared.store.get(id)?.ok_or_else(|| Failure::not_found(id))?;
    Ok(shown(app, job))
}

/// The server's version.
#[utoipa::path(get, path = "/version", responses((status = 200, body = Version)))]
pub async fn version() -> Json<Version> {
    Json(Version { version: env!("CARGO_PKG_VERSION").to_string(), api: API_VERSION })
}

/// This API's OpenAPI description.
#[utoipa::path(get, path = "/openapi.json", responses((status = 200, description = "OpenAPI 3.1 document")))]
pub async fn openapi() -> Response {
    let doc = <crate::openapi::ApiDoc as utoipa::OpenApi>::openapi();
    match doc.to_pretty_json() {
        Ok(text) => ([(header::CONTENT_TYPE, "application/json")], text).into_response(),
        Err(e) => Failure::internal(e).into_response(),
    }
}

#[derive(serde::Deserialize, utoipa::IntoParams)]
#[serde(deny_unknown_fields)]
pub struct ListQuery {
    /// Only jobs in this state (queued, running, succeeded, failed, cancelled).
    state: Option<String>,
}

/// Every job, oldest first.
#[utoipa::path(get, path = "/jobs", params(ListQuery), responses((status = 200, body = Vec<Job>), (status = 400, body = ApiError)))]
pub async fn list_jobs(
    State(app): State<App>,
    query: Result<Query<ListQuery>, axum::extract::rejection::QueryRejection>,
) -> Answer<Json<Vec<Job>>> {
    let Query(q) = query.map_err(|e| Failure::bad(e.body_text()))?;
    let state = match q.state.as_deref() {
        None => None,
        Some(s) => Some(JobState::from_name(s).ok_or_else(|| Failure::bad(format!("unknown state {s:?}")))?),
    };
    let jobs = app.shared.store.list(state)?;
    Ok(Json(jobs.into_iter().map(|j| shown(&app, j)).collect()))
}

/// Submits a job: a JSON [`JobRequest`], or `multipart/form-data` with a
/// `job` part (that JSON) and a `files` part (a tar or tar.gz).
#[utoipa::path(post, path = "/jobs", request_body = JobRequest,
    responses((status = 201, body = Job), (status = 400, body = ApiError), (status = 404, body = ApiError), (status = 413, body = ApiError)))]
pub async fn submit(State(app): State<App>, req: Request) -> Answer<(StatusCode, Json<Job>)> {
    let (request, upload) = match media_type(&req).as_str() {
        "multipart/form-data" => timed(read_multipart(req)).await?,
        "application/json" => (parse_request(&read_body(req).await?)?, None),
        _ => return Err(unsupported_type()),
    };
    let kind = jobs::validate(&request, upload.is_some()).map_err(|e| Failure::bad(e.to_string()))?;
    // The reserve went to record running jobs' ends on a full disk: no new
    // job until it can be made again.
    if !app.shared.reserve.ensure() {
        return Err(Failure::new(
            StatusCode::INSUFFICIENT_STORAGE,
            "the data directory's disk is full: free some space (finished jobs can be deleted) and submit again",
        ));
    }
    let source_run = match request.from_job {
        Some(from) => {
            let source = app.shared.store.get(from)?.ok_or_else(|| Failure::not_found(from))?;
            if !source.state.is_final() {
                return Err(Failure::new(StatusCode::CONFLICT, format!("job {from} has not finished")));
            }
            Some(jobs::run_dir(&app.shared.data, from))
        }
        None => None,
    };
    let shared = &app.shared;
    let staging = jobs::staging_dir(&shared.data, shared.next_staging());
    let prepared = {
        let (request, staging, data) = (request.clone(), staging.clone(), shared.data.clone());
        let work = tokio::task::spawn_blocking(move || {
            jobs::prepare(&staging, &data, &request, upload.as_deref(), source_run.as_deref())
        });
        match tokio::time::timeout(PREPARE_TIMEOUT, work).await {
            Ok(done) => done.map_err(Failure::internal)?,
            Err(_) => Err(PrepareError::Request(format!(
                "checking and writing the submission took more than {} s",
                PREPARE_TIMEOUT.as_secs()
            ))),
        }
    };
    if let Err(e) = prepared {
        let _ = std::fs::remove_dir_all(&staging);
        return Err(match e {
            PrepareError::Io(m) => Failure::internal(m),
            PrepareError::NotFound(m) => Failure::new(StatusCode::NOT_FOUND, m),
            PrepareError::Upload(u) if !u.is_client_error() => Failure::internal(u),
            e => Failure::bad(e.to_string()),
        });
    }
    // Recorded, moved into place, queued: a crash in between leaves a
    // `preparing` row, which the next start drops with its directory.
    let id = shared.store.insert(kind, &request, unix_time_ms())?;
    if let Err(e) = std::fs::rename(&staging, jobs::job_dir(&shared.data, id)) {
        let _ = shared.store.discard(id);
        let _ = std::fs::remove_dir_all(&staging);
        return Err(Failure::internal(format!("moving the job's files into place: {e}")));
    }
    shared.store.enqueue(id)?;
    shared.wake.notify_one();
    let job = shared.store.get(id)?.ok_or_else(|| Failure::internal("the job vanished"))?;
    Ok((StatusCode::CREATED, Json(job)))
}

/// `read` within [`BODY_TIMEOUT`], or a 408.
async fn timed<T>(read: impl std::future::Future<Output = Answer<T>>) -> Answer<T> {
    tokio::time::timeout(BODY_TIMEOUT, read).await.unwrap_or_else(|_| {
        Err(Failure::new(
            StatusCode::REQUEST_TIMEOUT,
            format!("the request body did not arrive within {} s", BODY_TIMEOUT.as_secs()),
        ))
    })
}

async fn read_body(req: Request) -> Answer<Bytes> {
    let read = axum::body::to_bytes(req.into_body(), MAX_BODY);
    timed(async {
        read.await.map_err(|e| {
            if std::error::Error::source(&e).is_some_and(|s| s.is::<http_body_util::LengthLimitError>()) {
                Failure::new(StatusCode::PAYLOAD_TOO_LARGE, format!("request body larger than {} MiB", MAX_BODY >> 20))
            } else {
                Failure::bad(format!("cannot read the request body: {e}"))
            }
        })
    })
    .await
}

fn parse_request(body: &[u8]) -> Answer<JobRequest> {
    serde_json::from_slice(body).map_err(|e| Failure::bad(format!("job request: {e}")))
}

async fn read_multipart(req: Request) -> Answer<(JobRequest, Option<Vec<u8>>)> {
    let mut form = Multipart::from_request(req, &()).await.map_err(|e| Failure::bad(e.body_text()))?;
    let (mut request, mut files) = (None, None);
    let too_large = |e: axum::extract::multipart::MultipartError| {
        let status = e.status();
        Failure::new(if status.is_client_error() { status } else { StatusCode::BAD_REQUEST }, e.body_text())
    };
    while let Some(field) = form.next_field().await.map_err(too_large)? {
        match field.name().unwrap_or("") {
            "job" => request = Some(parse_request(&field.bytes().await.map_err(too_large)?)?),
            "files" => files = Some(field.bytes().await.map_err(too_large)?.to_vec()),
            other => return Err(Failure::bad(format!("unknown form part {other:?}: send `job` and `files`"))),
        }
    }
    let request = request.ok_or_else(|| Failure::bad("multipart upload without a `job` part"))?;
    Ok((request, files))
}

/// One job.
#[utoipa::path(get, path = "/jobs/{id}", responses((status = 200, body = Job), (status = 404, body = ApiError)))]
pub async fn get_job(State(app): State<App>, Path(id): Path<String>) -> Answer<Json<Job>> {
    Ok(Json(find(&app, &id)?))
}

/// Cancels a job: a queued one at once, a running one by killing its
/// process (and so its controllers). Cancelling a final job changes nothing.
#[utoipa::path(post, path = "/jobs/{id}/cancel", responses((status = 200, body = Job), (status = 404, body = ApiError)))]
pub async fn cancel_job(State(app): State<App>, Path(id): Path<String>) -> Answer<Json<Job>> {
    let id = parse_id(&id)?;
    match app.shared.store.request_cancel(id, unix_time_ms())? {
        None => return Err(Failure::not_found(id)),
        Some(JobState::Running) => {
            app.shared.kill(id);
            // The worker records the end; wait for it briefly so the answer shows it.
            for _ in 0..50 {
                if app.shared.store.get(id)?.is_some_and(|j| j.state.is_final()) {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
        Some(_) => {}
    }
    Ok(Json(find(&app, &id.to_string())?))
}

/// Forgets a final job and deletes its directory.
#[utoipa::path(delete, path = "/jobs/{id}", responses((status = 204), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn delete_job(State(app): State<App>, Path(id): Path<String>) -> Answer<StatusCode> {
    let job = find(&app, &id)?;
    if !app.shared.store.delete(job.id)? {
        return Err(Failure::new(
            StatusCode::CONFLICT,
            format!("job {} is {}: cancel it first", job.id, job.state.name()),
        ));
    }
    let _ = std::fs::remove_dir_all(jobs::job_dir(&app.shared.data, job.id));
    Ok(StatusCode::NO_CONTENT)
}

/// What `POST /reset` must carry, so that no request does it by mistake.
#[derive(serde::Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ResetConfirmation {
    /// Must be `"delete every job"`.
    pub confirm: String,
}

/// Cancels and forgets every job and stops every proxy (test isolation);
/// the body must be `{"confirm": "delete every job"}`.
#[utoipa::path(post, path = "/reset", request_body = ResetConfirmation,
    responses((status = 204), (status = 400, body = ApiError), (status = 415, body = ApiError)))]
pub async fn reset(State(app): State<App>, req: Request) -> Answer<StatusCode> {
    let confirmation: ResetConfirmation = json_body(req).await?;
    if confirmation.confirm != sts_client::RESET_WORDS {
        return Err(Failure::bad(format!("a reset needs {{\"confirm\": \"{}\"}}", sts_client::RESET_WORDS)));
    }
    app.proxies.clear().await;
    for job in app.shared.store.list(Some(JobState::Running))? {
        app.shared.store.request_cancel(job.id, unix_time_ms())?;
        app.shared.kill(job.id);
    }
    for id in app.shared.store.clear()? {
        let _ = std::fs::remove_dir_all(jobs::job_dir(&app.shared.data, id));
    }
    Ok(StatusCode::NO_CONTENT)
}

impl From<crate::proxies::ProxyError> for Failure {
    fn from(e: crate::proxies::ProxyError) -> Failure {
        use crate::proxies::ProxyError as E;
        match e {
            E::Bad(m) => Failure::bad(m),
            E::NotFound(_) | E::NoRule(..) => Failure::new(StatusCode::NOT_FOUND, e.to_string()),
            E::Conflict(m) => Failure::new(StatusCode::CONFLICT, m),
            E::Io(m) => Failure::internal(m),
        }
    }
}

/// A JSON body of type `T`, or a 4xx saying what is wrong with it.
async fn json_body<T: serde::de::DeserializeOwned>(req: Request) -> Answer<T> {
    if media_type(&req) != "application/json" {
        return Err(unsupported_type());
    }
    let body = read_body(req).await?;
    serde_json::from_slice(&body).map_err(|e| Failure::bad(format!("request: {e}")))
}

/// Every proxy, by name.
#[utoipa::path(get, path = "/proxies", responses((status = 200, body = Vec<sts_client::ProxyInfo>)))]
pub async fn list_proxies(State(app): State<App>) -> Json<Vec<sts_client::ProxyInfo>> {
    Json(app.proxies.list())
}

/// Starts a proxy between real switches and a controller, recording every
/// message, with a fault policy.
#[utoipa::path(post, path = "/proxies", request_body = sts_client::ProxyRequest,
    responses((status = 201, body = sts_client::ProxyInfo), (status = 400, body = ApiError), (status = 409, body = ApiError)))]
pub async fn create_proxy(State(app): State<App>, req: Request) -> Answer<(StatusCode, Json<sts_client::ProxyInfo>)> {
    let request: sts_client::ProxyRequest = json_body(req).await?;
    Ok((StatusCode::CREATED, Json(app.proxies.create(request).await?)))
}

/// Makes the proxies named in the body exist as described (idempotent):
/// creates the missing, replaces those whose addresses changed, updates the
/// policy of the rest.
#[utoipa::path(post, path = "/proxies/populate", request_body = Vec<sts_client::ProxyRequest>,
    responses((status = 200, body = Vec<sts_client::ProxyInfo>), (status = 400, body = ApiError)))]
pub async fn populate_proxies(State(app): State<App>, req: Request) -> Answer<Json<Vec<sts_client::ProxyInfo>>> {
    let requests: Vec<sts_client::ProxyRequest> = json_body(req).await?;
    Ok(Json(app.proxies.populate(requests).await?))
}

/// One proxy, with its counters.
#[utoipa::path(get, path = "/proxies/{name}", responses((status = 200, body = sts_client::ProxyInfo), (status = 404, body = ApiError)))]
pub async fn get_proxy(State(app): State<App>, Path(name): Path<String>) -> Answer<Json<sts_client::ProxyInfo>> {
    Ok(Json(app.proxies.get(&name)?))
}

/// Replaces a proxy's fault policy, for the messages from now on.
#[utoipa::path(put, path = "/proxies/{name}/policy", request_body = sts_client::Policy,
    responses((status = 200, body = sts_client::ProxyInfo), (status = 400, body = ApiError), (status = 404, body = ApiError)))]
pub async fn set_proxy_policy(
    State(app): State<App>,
    Path(name): Path<String>,
    req: Request,
) -> Answer<Json<sts_client::ProxyInfo>> {
    let policy: sts_client::Policy = json_body(req).await?;
    Ok(Json(app.proxies.set_fault_rules(&name, policy.rules)?))
}

/// Adds one named rule at the end of a proxy's policy (Toxiproxy's `POST
/// /proxies/{proxy}/toxics`).
#[utoipa::path(post, path = "/proxies/{name}/rules", request_body = sts_client::PolicyRule,
    responses((status = 201, body = sts_client::ProxyInfo), (status = 400, body = ApiError), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
pub async fn add_proxy_rule(
    State(app): State<App>,
    Path(name): Path<String>,
    req: Request,
) -> Answer<(StatusCode, Json<sts_client::ProxyInfo>)> {
    let rule: sts_client::PolicyRule = json_body(req).await?;
    Ok((StatusCode::CREATED, Json(app.proxies.add_rule(&name, rule)?)))
}

/// One named rule of a proxy.
#[utoipa::path(get, path = "/proxies/{name}/rules/{rule}", responses((status = 200, body = sts_client::PolicyRule), (status = 404, body = ApiError)))]
pub async fn get_proxy_rule(
    State(app): State<App>,
    Path((name, rule)): Path<(String, String)>,
) -> Answer<Json<sts_client::PolicyRule>> {
    Ok(Json(app.proxies.rule(&name, &rule)?))
}

/// Replaces one named rule of a proxy in its place (to switch it off, send
/// it with `"enabled": false`).
#[utoipa::path(put, path = "/proxies/{name}/rules/{rule}", request_body = sts_client::PolicyRule,
    responses((status = 200, body = sts_client::ProxyInfo), (status = 400, body = ApiError), (status = 404, body = ApiError)))]
pub async fn replace_proxy_rule(
    State(app): State<App>,
    Path((name, rule)): Path<(String, String)>,
    req: Request,
) -> Answer<Json<sts_client::ProxyInfo>> {
    let with: sts_client::PolicyRule = json_body(req).await?;
    Ok(Json(app.proxies.replace_rule(&name, &rule, with)?))
}

/// Removes one named rule of a proxy.
#[utoipa::path(delete, path = "/proxies/{name}/rules/{rule}", responses((status = 204), (status = 404, body = ApiError)))]
pub async fn delete_proxy_rule(
    State(app): State<App>,
    Path((name, rule)): Path<(String, String)>,
) -> Answer<StatusCode> {
    app.proxies.delete_rule(&name, &rule)?;
    Ok(StatusCode::NO_CONTENT)
}

/// Sends a proxy's held messages on: `{"released": N}`.
#[utoipa::path(post, path = "/proxies/{name}/release", responses((status = 200), (status = 404, body = ApiError)))]
pub async fn release_proxy(State(app): State<App>, Path(name): Path<String>) -> Answer<Json<serde_json::Value>> {
    let n = app.proxies.release(&name).await?;
    Ok(Json(serde_json::json!({ "released": n })))
}

/// Stops a proxy; its recording is kept.
#[utoipa::path(delete, path = "/proxies/{name}", responses((status = 204), (status = 404, body = ApiError)))]
pub async fn delete_proxy(State(app): State<App>, Path(name): Path<String>) -> Answer<StatusCode> {
    app.proxies.delete(&name).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// A proxy's recording so far (JSON Lines, the format of `sts proxy --record`).
#[utoipa::path(get, path = "/proxies/{name}/recording", responses((status = 200, content_type = "application/x-ndjson"), (status = 404, body = ApiError)))]
pub async fn proxy_recording(State(app): State<App>, Path(name): Path<String>) -> Answer<Response> {
    let path = app.proxies.recording(&name)?;
    file_response(path, "application/x-ndjson", format!("proxy {name:?} has no recording"))
}

fn file_response(path: PathBuf, content_type: &'static str, missing: String) -> Answer<Response> {
    match std::fs::read(&path) {
        Ok(bytes) => Ok(([(header::CONTENT_TYPE, content_type)], bytes).into_response()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(Failure::new(StatusCode::NOT_FOUND, missing)),
        Err(e) => Err(Failure::internal(format!("{}: {e}", path.display()))),
    }
}

/// Everything the job's `sts` printed so far.
#[utoipa::path(get, path = "/jobs/{id}/log", responses((status = 200, content_type = "text/plain"), (status = 404, body = ApiError)))]
pub async fn job_log(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let path = jobs::job_dir(&app.shared.data, job.id).join("log.txt");
    let text = match tokio::fs::read(&path).await {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(Failure::internal(format!("{}: {e}", path.display()))),
    };
    // The engine's progress lines are for /events and the job's `progress`.
    let mut shown = Vec::with_capacity(text.len());
    for line in text.split_inclusive(|&b| b == b'\n') {
        if !is_progress_line(&String::from_utf8_lossy(line)) {
            shown.extend_from_slice(line);
        }
    }
    Ok(([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], shown).into_response())
}

/// A line of the engine's progress (`sts --progress json`), not of its log.
pub(crate) fn is_progress_line(line: &str) -> bool {
    line.starts_with("{\"progress\":")
}

/// The job's output as Server-Sent Events, from its start: `log` events
/// (one line each), `progress` events (JSON), and a last `end` event with
/// the job once it is final.
#[utoipa::path(get, path = "/jobs/{id}/events", responses((status = 200, content_type = "text/event-stream"), (status = 404, body = ApiError)))]
pub async fn job_events(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let path = jobs::job_dir(&app.shared.data, job.id).join("log.txt");
    let tail = Tail { app, id: job.id, path, offset: 0, partial: Vec::new(), ended: false };
    let stream = futures::stream::unfold(tail, |mut t| async move {
        let events = t.next_events().await?;
        Some((futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>)), t))
    })
    .flatten();
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()).into_response())
}

/// Follows a job's log file for [`job_events`].
struct Tail {
    app: App,
    id: i64,
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
    ended: bool,
}

impl Tail {
    /// The next events, waiting for some; None once the `end` event went.
    async fn next_events(&mut self) -> Option<Vec<Event>> {
        if self.ended {
            return None;
        }
        loop {
            // Whether the job was final *before* reading: then the read sees all it wrote.
            let job = self.app.shared.store.get(self.id).ok().flatten();
            let finished = job.as_ref().is_none_or(|j| j.state.is_final());
            let lines = self.read_lines().await;
            if !lines.is_empty() {
                return Some(lines.into_iter().map(|l| event_of_line(&l)).collect());
            }
            if finished {
                self.ended = true;
                let end = job.map(|j| serde_json::to_string(&j).unwrap_or_default()).unwrap_or_else(|| "null".into());
                return Some(vec![Event::default().event("end").data(end)]);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    async fn read_lines(&mut self) -> Vec<String> {
        let Ok(mut f) = tokio::fs::File::open(&self.path).await else { return Vec::new() };
        if f.seek(std::io::SeekFrom::Start(self.offset)).await.is_err() {
            return Vec::new();
        }
        let mut buf = Vec::new();
        let Ok(n) = f.take(1 << 20).read_to_end(&mut buf).await else { return Vec::new() };
        self.offset += n as u64;
        self.partial.extend_from_slice(&buf);
        let Some(last_newline) = self.partial.iter().rposition(|&b| b == b'\n') else { return Vec::new() };
        let complete: Vec<u8> = self.partial.drain(..=last_newline).collect();
        String::from_utf8_lossy(&complete).lines().map(str::to_string).collect()
    }
}

fn event_of_line(line: &str) -> Event {
    if let Some(rest) = line.strip_prefix("{\"progress\":") {
        let inner = rest.strip_suffix('}').unwrap_or(rest);
        return Event::default().event("progress").data(inner);
    }
    Event::default().event("log").data(line)
}

/// The job's experiment directory as a gzip-compressed tar.
#[utoipa::path(get, path = "/jobs/{id}/experiment.tar.gz", responses((status = 200, content_type = "application/gzip"), (status = 404, body = ApiError)))]
pub async fn experiment_tarball(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let run = jobs::run_dir(&app.shared.data, job.id);
    if !run.is_dir() {
        return Err(Failure::new(StatusCode::NOT_FOUND, format!("job {} has no experiment directory yet", job.id)));
    }
    let name = format!("job-{}", job.id);
    let bytes = tokio::task::spawn_blocking(move || -> std::io::Result<Vec<u8>> {
        let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        let mut tar = tar::Builder::new(gz);
        tar.follow_symlinks(false);
        tar.append_dir_all(&name, &run)?;
        tar.into_inner()?.finish()
    })
    .await
    .map_err(Failure::internal)?
    .map_err(Failure::internal)?;
    let disposition = format!("attachment; filename=\"job-{}.tar.gz\"", job.id);
    let mut headers = HeaderMap::new();
    headers.insert(header::CONTENT_TYPE, header::HeaderValue::from_static("application/gzip"));
    if let Ok(v) = header::HeaderValue::from_str(&disposition) {
        headers.insert(header::CONTENT_DISPOSITION, v);
    }
    Ok((headers, Body::from(bytes)).into_response())
}

/// The job's HTML report (written by the job, or now from its trace).
#[utoipa::path(get, path = "/jobs/{id}/report.html", responses((status = 200, content_type = "text/html"), (status = 404, body = ApiError)))]
pub async fn report_html(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let run = jobs::run_dir(&app.shared.data, job.id);
    if job.kind == sts_client::Kind::Campaign {
        return Err(Failure::new(
            StatusCode::NOT_FOUND,
            format!("a campaign has a report per bug (seeds/SEED/report/index.html in /jobs/{}/experiment.tar.gz), and /jobs/{}/summary.md", job.id, job.id),
        ));
    }
    if !run.join("trace.jsonl").is_file() {
        return Err(Failure::new(StatusCode::NOT_FOUND, format!("job {} has no trace yet", job.id)));
    }
    let page = run.join("report").join("index.html");
    // Running jobs' reports are drawn afresh; a final job's is kept.
    if job.state == JobState::Running || !page.is_file() {
        let r = tokio::task::spawn_blocking(move || sts_report::html::write_experiment(&run))
            .await
            .map_err(Failure::internal)?;
        r.map_err(|e| Failure::new(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    }
    file_response(page, "text/html; charset=utf-8", format!("job {} has no report", job.id))
}

/// The job's OpenFlow messages as a pcapng (for Wireshark, tshark): names
/// for the switches' and controllers' addresses, the proxy's decisions as
/// packet comments. Also at `/jobs/{id}/trace.pcap`.
#[utoipa::path(get, path = "/jobs/{id}/trace.pcapng", responses((status = 200, content_type = "application/x-pcapng"), (status = 404, body = ApiError)))]
pub async fn trace_pcap(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let path = jobs::run_dir(&app.shared.data, job.id).join("trace.jsonl");
    if !path.is_file() {
        return Err(Failure::new(StatusCode::NOT_FOUND, format!("job {} has no trace yet", job.id)));
    }
    let bytes = tokio::task::spawn_blocking(move || -> Result<Vec<u8>, String> {
        let trace = sts_trace::Trace::load(&path).map_err(|e| e.to_string())?;
        let (_, bytes) = sts_report::pcap::write_trace(&trace, Vec::new()).map_err(|e| e.to_string())?;
        Ok(bytes)
    })
    .await
    .map_err(Failure::internal)?
    .map_err(|e| Failure::new(StatusCode::UNPROCESSABLE_ENTITY, e))?;
    Ok(([(header::CONTENT_TYPE, "application/x-pcapng")], bytes).into_response())
}

/// A finished job's Markdown summary: a campaign's bugs and their minimal
/// causal sequences, or a minimization's `mcs/report.md`.
#[utoipa::path(get, path = "/jobs/{id}/summary.md", responses((status = 200, content_type = "text/markdown"), (status = 404, body = ApiError)))]
pub async fn summary_md(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let run = jobs::run_dir(&app.shared.data, job.id);
    let path = match job.kind {
        sts_client::Kind::Campaign => run.join("summary.md"),
        _ => run.join("mcs").join("report.md"),
    };
    file_response(
        path,
        "text/markdown; charset=utf-8",
        format!("job {} has no summary (campaigns and minimizations do, once done)", job.id),
    )
}

/// The job's result as JUnit XML, once it has one.
#[utoipa::path(get, path = "/jobs/{id}/junit.xml", responses((status = 200, content_type = "application/xml"), (status = 404, body = ApiError)))]
pub async fn junit_xml(State(app): State<App>, Path(id): Path<String>) -> Answer<Response> {
    let job = find(&app, &id)?;
    let path = jobs::job_dir(&app.shared.data, job.id).join("junit.xml");
    file_response(path, "application/xml", format!("job {} has no JUnit report (yet)", job.id))
}

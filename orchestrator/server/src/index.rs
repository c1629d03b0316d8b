//! The web index at `/`: every job with its verdict, colour-coded, and links
//! to its log, report and files. One self-contained page (no scripts from
//! elsewhere), refreshed every few seconds while jobs run.

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use sts_client::{Job, Outcome, State as JobState};

use sts_report::html::esc as escape;

use crate::api::App;

/// (label, CSS class) of a job's verdict.
fn verdict(job: &Job) -> (&'static str, &'static str) {
    match (job.state, job.outcome) {
        (JobState::Queued, _) => ("queued", "wait"),
        (JobState::Running, _) => ("running", "run"),
        (_, Some(Outcome::Ok)) => ("nothing found", "ok"),
        (_, Some(Outcome::Violation)) => ("violation", "bug"),
        (_, Some(Outcome::PresentFromStart)) => ("violation from the start", "bug"),
        (_, Some(Outcome::BadInput)) => ("bad input", "err"),
        (_, Some(Outcome::Environment)) => ("environment failed", "err"),
        (_, Some(Outcome::Killed)) => ("killed", "err"),
        (_, Some(Outcome::Cancelled)) | (JobState::Cancelled, _) => ("cancelled", "wait"),
        _ => ("?", "wait"),
    }
}

fn duration(job: &Job) -> String {
    match (job.started_ms, job.finished_ms) {
        (Some(s), Some(f)) => format!("{:.1} s", (f - s) as f64 / 1000.0),
        _ => String::new(),
    }
}

/// The index page.
pub async fn page(State(app): State<App>) -> Response {
    let jobs = match app.shared.store.list(None) {
        Ok(j) => j,
        Err(e) => return (axum::http::StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    };
    let busy = jobs.iter().any(|j| !j.state.is_final());
    let mut rows = String::new();
    for job in jobs.iter().rev() {
        let (label, class) = verdict(job);
        let id = job.id;
        let progress = match (&job.state, app.shared.progress(id)) {
            (JobState::Running, Some(p)) => escape(&p.to_string()),
            _ => job.error.as_deref().or(job.summary.as_deref()).map(escape).unwrap_or_default(),
        };
        rows.push_str(&format!(
            "<tr class=\"{class}\" data-job=\"{id}\"><td>{id}</td><td>{kind}</td><td class=\"verdict\">{label}</td>\
             <td>{attempts}</td><td>{dur}</td><td class=\"detail\">{progress}</td>\
             <td><a href=\"/jobs/{id}\">json</a> <a href=\"/jobs/{id}/log\">log</a> \
             <a href=\"/jobs/{id}/report.html\">report</a> <a href=\"/jobs/{id}/experiment.tar.gz\">files</a></td></tr>\n",
            kind = job.kind.name(),
            attempts = job.attempts,
            dur = duration(job),
        ));
    }
    if rows.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"7\">No jobs yet: submit one with <code>POST /jobs</code> (docs/api.md).</td></tr>",
        );
    }
    let refresh = if busy { "<meta http-equiv=\"refresh\" content=\"3\">" } else { "" };
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}<title>sts jobs</title>\n<style>\n\
         body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}\n\
         table{{border-collapse:collapse;width:100%}}\n\
         th,td{{text-align:left;padding:.35em .7em;border-bottom:1px solid #ddd;vertical-align:top}}\n\
         td.detail{{font:12px ui-monospace,monospace;max-width:40em;overflow-wrap:anywhere}}\n\
         tr.ok td.verdict{{background:#c8efc8}} tr.bug td.verdict{{background:#f7c6c6}}\n\
         tr.err td.verdict{{background:#f3dd9c}} tr.run td.verdict{{background:#cfe0fb}}\n\
         tr.wait td.verdict{{background:#eee}}\n\
         </style></head><body>\n<h1>sts jobs</h1>\n\
         <p>{n} jobs. API: <a href=\"/openapi.json\">/openapi.json</a>, <a href=\"/version\">/version</a>.</p>\n\
         <table><thead><tr><th>job</th><th>kind</th><th>verdict</th><th>attempts</th><th>took</th><th>detail</th><th>links</th></tr></thead>\n\
         <tbody>\n{rows}</tbody></table>\n</body></html>\n",
        n = jobs.len()
    ))
    .into_response()
}

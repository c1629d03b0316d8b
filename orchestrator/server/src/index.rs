//! The web index at `/`: every job with its verdict, colour-coded, and links
//! to its log, report and files. One self-contained page (no scripts from
//! elsewhere), refreshed every few seconds while jobs run.

use axum::extract::State;
use axum::response::{Html, IntoResponse, Response};
use sts_client::{Job, Kind, State as JobState, Tone, Verdict};

use sts_report::html::esc as escape;

use crate::api::App;

/// (label, CSS class) of a job's verdict.
fn verdict(job: &Job) -> (&'static str, &'static str) {
    let v = job.verdict();
    let class = match v.tone() {
        Tone::Good => "ok",
        Tone::Bug => "bug",
        Tone::Error => "err",
        Tone::Neutral if v == Verdict::Running => "run",
        Tone::Neutral => "wait",
    };
    (v.label(), class)
}

/// Milliseconds since the epoch as `2026-11-26 10:43:18` (UTC).
pub(crate) fn utc(ms: i64) -> String {
    chrono::DateTime::from_timestamp_millis(ms).map(|t| t.format("%Y-%m-%d %H:%M:%S").to_string()).unwrap_or_default()
}

/// The links a job has, by its kind and what it wrote: a campaign has a
/// summary and per-bug reports among its files, not one report or trace.
fn links(app: &App, job: &Job) -> Vec<String> {
    let id = job.id;
    let run = crate::jobs::run_dir(&app.shared.data, id);
    let job_dir = crate::jobs::job_dir(&app.shared.data, id);
    let mut links =
        vec![format!("<a href=\"/jobs/{id}/page\">page</a>"), format!("<a href=\"/jobs/{id}/log\">log</a>")];
    let has_trace = run.join("trace.jsonl").is_file();
    if job.kind != Kind::Campaign && has_trace {
        links.push(format!("<a href=\"/jobs/{id}/report.html\">report</a>"));
    }
    let summary = match job.kind {
        Kind::Campaign => run.join("summary.md"),
        _ => run.join("mcs").join("report.md"),
    };
    if summary.is_file() {
        links.push(format!("<a href=\"/jobs/{id}/summary.md\">summary</a>"));
    }
    if job_dir.join("junit.xml").is_file() {
        links.push(format!("<a href=\"/jobs/{id}/junit.xml\">junit</a>"));
    }
    if job.kind != Kind::Campaign && has_trace {
        links.push(format!("<a href=\"/jobs/{id}/trace.pcapng\">pcapng</a>"));
    }
    if run.is_dir() {
        links.push(format!("<a href=\"/jobs/{id}/files/\">files</a>"));
        links.push(format!("<a href=\"/jobs/{id}/experiment.tar.gz\">tar.gz</a>"));
    }
    links.push(format!("<a href=\"/jobs/{id}\">json</a>"));
    links
}

/// The last `n` lines of the job's log, without its progress lines.
fn log_tail(app: &App, id: i64, n: usize) -> String {
    let text = std::fs::read(crate::jobs::job_dir(&app.shared.data, id).join("log.txt")).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().filter(|l| !crate::api::is_progress_line(l)).collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `GET /jobs/{id}/page`: one job for a person: its verdict, times, request,
/// progress (refreshed while it runs), the end of its log and its files.
pub async fn job_page(State(app): State<App>, axum::extract::Path(id): axum::extract::Path<String>) -> Response {
    let job = match crate::api::find(&app, &id) {
        Ok(j) => j,
        Err(e) => return e.into_response(),
    };
    let (label, class) = verdict(&job);
    let id = job.id;
    let refresh = if job.state.is_final() { "" } else { "<meta http-equiv=\"refresh\" content=\"2\">" };
    let progress = match (&job.state, app.shared.progress(id)) {
        (JobState::Running, Some(p)) => {
            format!("<tr><th>progress</th><td><code>{}</code></td></tr>", escape(&p.to_string()))
        }
        _ => String::new(),
    };
    let line = |what: &str, text: Option<&str>| {
        text.map(|t| format!("<tr><th>{what}</th><td>{}</td></tr>", escape(t))).unwrap_or_default()
    };
    let when = |ms: Option<i64>| ms.map(utc);
    let request = serde_json::to_string_pretty(&job.request).unwrap_or_default();
    let exit = job.exit_code.map(|c| c.to_string());
    Html(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">{refresh}<title>sts job {id}</title>\n<style>\n\
         body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}\n\
         th,td{{text-align:left;padding:.3em .8em .3em 0;vertical-align:top}} th{{color:#555;font-weight:normal}}\n\
         pre{{background:#f6f6f6;padding:.6em;overflow:auto;max-height:30em}}\n\
         span.verdict{{padding:.1em .5em;border-radius:3px}}\n\
         .ok{{background:#c8efc8}} .bug{{background:#f7c6c6}} .err{{background:#f3dd9c}} .run{{background:#cfe0fb}} .wait{{background:#eee}}\n\
         </style></head><body>\n<p><a href=\"/\">jobs</a> / job {id}</p>\n\
         <h1>job {id}: {kind} <span class=\"verdict {class}\">{label}</span></h1>\n<table>\n\
         <tr><th>state</th><td>{state}</td></tr>\n{exit}{summary}{error}{progress}\
         {created}{started}{finished}<tr><th>took</th><td>{took}</td></tr><tr><th>attempts</th><td>{attempts}</td></tr>\n\
         <tr><th>links</th><td>{links}</td></tr>\n</table>\n\
         <h2>request</h2>\n<pre>{request}</pre>\n<h2>log (last 40 lines)</h2>\n<pre>{log}</pre>\n</body></html>\n",
        kind = job.kind.name(),
        state = job.state.name(),
        exit = line("exit code", exit.as_deref()),
        summary = line("found", job.summary.as_deref()),
        error = line("error", job.error.as_deref()),
        created = line("created (UTC)", Some(&utc(job.created_ms))),
        started = line("started (UTC)", when(job.started_ms).as_deref()),
        finished = line("finished (UTC)", when(job.finished_ms).as_deref()),
        took = duration(&job),
        attempts = job.attempts,
        links = links(&app, &job).join(" "),
        request = escape(&request),
        log = escape(&log_tail(&app, id, 40)),
    ))
    .into_response()
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
            "<tr class=\"{class}\" data-job=\"{id}\"><td><a href=\"/jobs/{id}/page\">{id}</a></td><td>{kind}</td>\
             <td class=\"verdict\">{label}</td><td>{created}</td><td>{attempts}</td><td>{dur}</td>\
             <td class=\"detail\">{progress}</td><td>{links}</td></tr>\n",
            kind = job.kind.name(),
            created = escape(&utc(job.created_ms)),
            attempts = job.attempts,
            dur = duration(job),
            links = links(&app, job).join(" "),
        ));
    }
    if rows.is_empty() {
        rows.push_str(
            "<tr><td colspan=\"8\">No jobs yet: submit one with <code>POST /jobs</code> (docs/api.md).</td></tr>",
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
         <table><thead><tr><th>job</th><th>kind</th><th>verdict</th><th>created (UTC)</th><th>attempts</th><th>took</th><th>detail</th><th>links</th></tr></thead>\n\
         <tbody>\n{rows}</tbody></table>\n</body></html>\n",
        n = jobs.len()
    ))
    .into_response()
}

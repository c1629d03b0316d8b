//! A job's experiment directory, browsable: `GET /jobs/{id}/files/` lists it,
//! `GET /jobs/{id}/files/PATH` shows one folder or file (reports, the MCS, a
//! campaign's per-bug reports, controller logs).
//!
//! Only what lies inside the job's directory is served: a path with `..`,
//! a `.` component, or a symbolic link on the way is a
//! 404, never followed. Files a job wrote may hold anything a controller
//! printed, so HTML is served in a sandbox (`Content-Security-Policy:
//! sandbox allow-scripts`: its scripts run, but in an opaque origin that
//! cannot read the server's cookie or call the API as the user).

use std::path::{Path, PathBuf};

use axum::extract::{Path as UrlPath, State};
use axum::http::{header, StatusCode};
use axum::response::{Html, IntoResponse, Response};

use crate::api::{find, App, Failure};
use sts_report::html::esc as escape;

/// How a file is served, by its name.
fn media_type(name: &str) -> &'static str {
    let ext = name.rsplit_once('.').map(|(_, e)| e.to_ascii_lowercase()).unwrap_or_default();
    match ext.as_str() {
        "html" | "htm" => "text/html; charset=utf-8",
        "json" => "application/json",
        "xml" => "application/xml",
        "pcap" => "application/vnd.tcpdump.pcap",
        "png" => "image/png",
        "svg" => "image/svg+xml",
        "gz" => "application/gzip",
        "md" | "jsonl" | "log" | "txt" | "toml" | "yaml" | "yml" | "csv" | "py" | "dot" => "text/plain; charset=utf-8",
        // A name without an extension (a run's `running`, `failed` ...) reads as text.
        "" => "text/plain; charset=utf-8",
        _ => "application/octet-stream",
    }
}

/// `rel` under `root`, if every component is a plain name and nothing on the
/// way is a symbolic link.
fn resolve(root: &Path, rel: &str) -> Option<PathBuf> {
    let mut path = root.to_path_buf();
    for part in rel.split('/').filter(|p| !p.is_empty()) {
        if part == "." || part == ".." || part.contains('\\') || part.contains('\0') {
            return None;
        }
        path.push(part);
        if std::fs::symlink_metadata(&path).ok()?.file_type().is_symlink() {
            return None;
        }
    }
    Some(path)
}

/// A readable size.
fn size(bytes: u64) -> String {
    match bytes {
        b if b < 10 * 1024 => format!("{b} B"),
        b if b < 10 * 1024 * 1024 => format!("{} KiB", b / 1024),
        b => format!("{} MiB", b / (1024 * 1024)),
    }
}

/// The listing of folder `dir` (shown as `rel`) of job `id`.
fn listing(id: i64, rel: &str, dir: &Path) -> std::io::Result<String> {
    let mut entries: Vec<(String, bool, u64)> = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let meta = e.path().symlink_metadata()?;
        if meta.file_type().is_symlink() {
            continue;
        }
        entries.push((e.file_name().to_string_lossy().into_owned(), meta.is_dir(), meta.len()));
    }
    // Folders first, then files, each by name: the same order every time.
    entries.sort_by(|a, b| b.1.cmp(&a.1).then_with(|| a.0.cmp(&b.0)));
    let base = if rel.is_empty() { String::new() } else { format!("{}/", rel.trim_end_matches('/')) };
    let mut rows = String::new();
    if !rel.is_empty() {
        let up = base.trim_end_matches('/').rsplit_once('/').map_or(String::new(), |(p, _)| format!("{p}/"));
        rows.push_str(&format!("<tr><td><a href=\"/jobs/{id}/files/{}\">..</a></td><td></td></tr>\n", escape(&up)));
    }
    for (name, is_dir, len) in &entries {
        let href = format!("/jobs/{id}/files/{}{}{}", escape(&base), escape(name), if *is_dir { "/" } else { "" });
        let shown = if *is_dir { format!("{}/", escape(name)) } else { escape(name) };
        let size = if *is_dir { String::new() } else { size(*len) };
        rows.push_str(&format!("<tr><td><a href=\"{href}\">{shown}</a></td><td>{size}</td></tr>\n"));
    }
    if entries.is_empty() {
        rows.push_str("<tr><td colspan=\"2\">(empty)</td></tr>\n");
    }
    Ok(format!(
        "<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>job {id}: {title}</title>\n<style>\n\
         body{{font:14px system-ui,sans-serif;margin:2em;color:#222}}\n\
         table{{border-collapse:collapse}} td{{padding:.2em 1em .2em 0;font:13px ui-monospace,monospace}}\n\
         </style></head><body>\n<p><a href=\"/\">jobs</a> / <a href=\"/jobs/{id}/page\">job {id}</a> / files</p>\n\
         <h1>{title}</h1>\n<table>\n{rows}</table>\n</body></html>\n",
        title = if rel.is_empty() { "/".to_string() } else { escape(&format!("/{}", rel.trim_end_matches('/'))) },
    ))
}

/// What a path of a job's directory is.
enum Found {
    Missing,
    /// A folder: its listing, or `None` when asked for without its trailing slash.
    Folder(Option<String>),
    File(Vec<u8>),
}

/// `GET /jobs/{id}/files/`: the root of the job's experiment directory.
pub async fn root(State(app): State<App>, UrlPath(id): UrlPath<String>) -> Result<Response, Failure> {
    serve(app, id, String::new()).await
}

/// `GET /jobs/{id}/files/{*path}`: a folder's listing or a file.
pub async fn entry(State(app): State<App>, UrlPath((id, rel)): UrlPath<(String, String)>) -> Result<Response, Failure> {
    serve(app, id, rel).await
}

async fn serve(app: App, id: String, rel: String) -> Result<Response, Failure> {
    let job = find(&app, &id)?;
    let root = crate::jobs::run_dir(&app.shared.data, job.id);
    let missing = || {
        Failure::new(
            StatusCode::NOT_FOUND,
            format!(
                "job {} has no {}",
                job.id,
                if rel.is_empty() { "files yet".to_string() } else { format!("file {rel:?}") }
            ),
        )
    };
    // Every look at the disk off the async threads, at once.
    let (id, wanted) = (job.id, rel.clone());
    let found = tokio::task::spawn_blocking(move || -> std::io::Result<Found> {
        let Some(path) = resolve(&root, &wanted).filter(|_| root.is_dir()) else { return Ok(Found::Missing) };
        let Ok(meta) = std::fs::metadata(&path) else { return Ok(Found::Missing) };
        if !meta.is_dir() {
            return Ok(std::fs::read(&path).map_or(Found::Missing, Found::File));
        }
        if !wanted.is_empty() && !wanted.ends_with('/') {
            return Ok(Found::Folder(None));
        }
        listing(id, &wanted, &path).map(|page| Found::Folder(Some(page)))
    })
    .await
    .map_err(Failure::internal)?
    .map_err(Failure::internal)?;
    let bytes = match found {
        Found::Missing => return Err(missing()),
        // Relative links inside a folder need its trailing slash.
        Found::Folder(None) => {
            let to = format!("/jobs/{}/files/{rel}/", job.id);
            return Ok((StatusCode::PERMANENT_REDIRECT, [(header::LOCATION, to)]).into_response());
        }
        Found::Folder(Some(page)) => return Ok(Html(page).into_response()),
        Found::File(bytes) => bytes,
    };
    let kind = media_type(&rel);
    let mut response = ([(header::CONTENT_TYPE, kind)], bytes).into_response();
    let headers = response.headers_mut();
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, header::HeaderValue::from_static("nosniff"));
    headers.insert(header::CONTENT_SECURITY_POLICY, header::HeaderValue::from_static("sandbox allow-scripts"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_plain_names_inside_the_job_resolve() {
        let dir = std::env::temp_dir().join(format!("sts-files-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("mcs")).unwrap();
        std::fs::write(dir.join("mcs/report.md"), "x").unwrap();
        std::os::unix::fs::symlink("/etc", dir.join("etc")).unwrap();
        assert_eq!(resolve(&dir, "mcs/report.md"), Some(dir.join("mcs/report.md")));
        assert_eq!(resolve(&dir, ""), Some(dir.clone()));
        assert_eq!(resolve(&dir, "mcs/../../x"), None);
        assert_eq!(resolve(&dir, "./mcs"), None);
        assert_eq!(resolve(&dir, "etc/passwd"), None, "a link is not followed");
        assert_eq!(resolve(&dir, "etc"), None);
        assert_eq!(resolve(&dir, "nothing/here"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_listing_puts_folders_first_and_escapes_names() {
        let dir = std::env::temp_dir().join(format!("sts-files-list-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("zz")).unwrap();
        std::fs::write(dir.join("a<b>.txt"), "x").unwrap();
        let page = listing(7, "", &dir).unwrap();
        assert!(page.find("zz/").unwrap() < page.find("a&lt;b&gt;.txt").unwrap(), "{page}");
        assert!(!page.contains("a<b>"), "{page}");
        assert!(page.contains("href=\"/jobs/7/files/zz/\""), "{page}");
        let _ = std::fs::remove_dir_all(&dir);
    }
}

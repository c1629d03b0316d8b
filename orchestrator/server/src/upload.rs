//! Files a submission brings: inline text files and tar uploads, written
//! inside the job's directory and nowhere else.
//!
//! A name must be relative, with no `..`, no root, no NUL and at most
//! [`MAX_DEPTH`] components; a tar may hold regular files and directories
//! only (a symlink, hard link or device could point outside the job's
//! directory, so it is refused, naming the entry). Sizes and counts are
//! bounded so that an upload cannot fill the disk through compression.

use std::io::Read;
use std::path::{Component, Path, PathBuf};

/// Most files one submission may bring.
pub const MAX_FILES: usize = 10_000;
/// Most bytes one submission's files may unpack to.
pub const MAX_UNPACKED_BYTES: u64 = 256 * 1024 * 1024;
/// Deepest path accepted.
pub const MAX_DEPTH: usize = 32;

/// A file name that cannot be accepted, or an upload that cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    #[error("file name {0:?}: {1}")]
    BadName(String, &'static str),
    #[error("upload entry {0:?}: {1} (only regular files and directories are accepted)")]
    BadEntry(String, String),
    #[error("upload: {0}")]
    Limit(String),
    #[error("upload is not a readable tar (or tar.gz): {0}")]
    Unreadable(String),
    #[error("writing {0}: {1}")]
    Io(String, std::io::Error),
}

impl UploadError {
    /// True when the client sent something wrong (a 4xx), false when the
    /// server could not write (a 500).
    pub fn is_client_error(&self) -> bool {
        !matches!(self, UploadError::Io(..))
    }
}

/// `name` as a path under a job directory, or why it cannot be one.
pub fn safe_relative(name: &str) -> Result<PathBuf, UploadError> {
    let bad = |why| Err(UploadError::BadName(name.chars().take(200).collect(), why));
    if name.is_empty() {
        return bad("empty");
    }
    if name.contains('\0') {
        return bad("contains a NUL byte");
    }
    let mut out = PathBuf::new();
    for c in Path::new(name).components() {
        match c {
            Component::Normal(part) => out.push(part),
            Component::CurDir => {}
            Component::ParentDir => return bad("contains `..`"),
            Component::RootDir | Component::Prefix(_) => return bad("is absolute"),
        }
    }
    if out.as_os_str().is_empty() {
        return bad("names no file");
    }
    if out.components().count() > MAX_DEPTH {
        return bad("is nested too deeply");
    }
    Ok(out)
}

/// Refuses to go through a symlink already under `root` (defence in depth:
/// nothing this module writes is one).
fn no_symlink_on_the_way(root: &Path, rel: &Path) -> Result<(), UploadError> {
    let mut p = root.to_path_buf();
    for c in rel.components() {
        p.push(c);
        if p.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            return Err(UploadError::BadName(rel.display().to_string(), "goes through a symbolic link"));
        }
    }
    Ok(())
}

/// Writes `contents` to `root/name`, creating directories, never
/// overwriting, never leaving `root`.
pub fn write_file(root: &Path, name: &str, contents: &[u8]) -> Result<PathBuf, UploadError> {
    write_stream(root, name, &mut &contents[..]).map(|(rel, _)| rel)
}

/// [`write_file`] from a reader; also returns the bytes written.
fn write_stream(root: &Path, name: &str, contents: &mut dyn Read) -> Result<(PathBuf, u64), UploadError> {
    let rel = safe_relative(name)?;
    no_symlink_on_the_way(root, &rel)?;
    let path = root.join(&rel);
    let io = |e| UploadError::Io(rel.display().to_string(), e);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).map_err(io)?;
    }
    let mut f = std::fs::OpenOptions::new().write(true).create_new(true).open(&path).map_err(|e| {
        if e.kind() == std::io::ErrorKind::AlreadyExists {
            UploadError::BadName(rel.display().to_string(), "given twice")
        } else {
            io(e)
        }
    })?;
    let copied = std::io::copy(contents, &mut f).map_err(|e| match e.kind() {
        // What the reader could not give (a broken tar or gzip stream) is the client's.
        std::io::ErrorKind::InvalidData | std::io::ErrorKind::InvalidInput | std::io::ErrorKind::UnexpectedEof => {
            UploadError::Unreadable(format!("{}: {e}", rel.display()))
        }
        _ => io(e),
    })?;
    Ok((rel, copied))
}

/// Unpacks a tar (gzip-compressed or not) under `root`. Returns the files
/// written, relative to `root`.
pub fn unpack_tar(root: &Path, bytes: &[u8]) -> Result<Vec<PathBuf>, UploadError> {
    let reader: Box<dyn Read + '_> =
        if bytes.starts_with(&[0x1f, 0x8b]) { Box::new(flate2::read::GzDecoder::new(bytes)) } else { Box::new(bytes) };
    let mut archive = tar::Archive::new(reader);
    let mut written = Vec::new();
    let mut total: u64 = 0;
    let entries = archive.entries().map_err(|e| UploadError::Unreadable(e.to_string()))?;
    for entry in entries {
        let mut entry = entry.map_err(|e| UploadError::Unreadable(e.to_string()))?;
        let raw = entry.path_bytes();
        let name = String::from_utf8_lossy(&raw).into_owned();
        let kind = entry.header().entry_type();
        if kind.is_dir() {
            let rel = safe_relative(&name)?;
            no_symlink_on_the_way(root, &rel)?;
            std::fs::create_dir_all(root.join(&rel)).map_err(|e| UploadError::Io(name.clone(), e))?;
            continue;
        }
        if kind.is_pax_global_extensions() || kind.is_pax_local_extensions() || kind.is_gnu_longname() {
            continue;
        }
        if !kind.is_file() {
            let what = if kind.is_symlink() {
                "a symbolic link".to_string()
            } else if kind.is_hard_link() {
                "a hard link".to_string()
            } else {
                format!("an entry of type {:?}", kind)
            };
            return Err(UploadError::BadEntry(name, what));
        }
        if written.len() >= MAX_FILES {
            return Err(UploadError::Limit(format!("more than {MAX_FILES} files")));
        }
        // Streamed to its file, at most what is left of the budget plus one
        // byte to notice more: a compressed bomb costs disk up to the
        // budget, never memory.
        let left = MAX_UNPACKED_BYTES - total;
        let (rel, copied) = write_stream(root, &name, &mut (&mut entry).take(left + 1))?;
        total += copied;
        if total > MAX_UNPACKED_BYTES {
            return Err(UploadError::Limit(format!("unpacks to more than {} MiB", MAX_UNPACKED_BYTES >> 20)));
        }
        written.push(rel);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_stay_inside() {
        assert_eq!(safe_relative("a/./b.toml").unwrap(), PathBuf::from("a/b.toml"));
        for bad in ["", "/etc/passwd", "../x", "a/../../x", "a\0b", ".", "./"] {
            assert!(safe_relative(bad).is_err(), "{bad:?} accepted");
        }
        let deep = vec!["d"; MAX_DEPTH + 1].join("/");
        assert!(safe_relative(&deep).is_err());
    }

    fn tar_of(entries: &[(&str, tar::EntryType, &[u8])]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, kind, data) in entries {
            let mut h = tar::Header::new_gnu();
            h.set_entry_type(*kind);
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            if kind.is_symlink() {
                h.set_link_name("/etc/passwd").unwrap();
            }
            // set_path refuses `..`: write the raw name as a hostile client would.
            let field = &mut h.as_old_mut().name;
            field[..name.len()].copy_from_slice(name.as_bytes());
            h.set_cksum();
            b.append(&h, *data).unwrap();
        }
        b.into_inner().unwrap()
    }

    fn scratch(tag: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("sts-upload-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn a_tar_unpacks_regular_files_and_refuses_escapes() {
        let d = scratch("ok");
        let ok = tar_of(&[("exp/config.toml", tar::EntryType::Regular, b"[network]\n")]);
        assert_eq!(unpack_tar(&d, &ok).unwrap(), vec![PathBuf::from("exp/config.toml")]);
        assert_eq!(std::fs::read(d.join("exp/config.toml")).unwrap(), b"[network]\n");
        for (name, kind) in [
            ("../escape", tar::EntryType::Regular),
            ("/abs", tar::EntryType::Regular),
            ("link", tar::EntryType::Symlink),
            ("hard", tar::EntryType::Link),
            ("dev", tar::EntryType::Char),
        ] {
            let d = scratch("bad");
            let err = unpack_tar(&d, &tar_of(&[(name, kind, b"")])).unwrap_err();
            assert!(err.is_client_error(), "{name}: {err}");
            assert!(!d.parent().unwrap().join("escape").exists());
        }
        let err = unpack_tar(&d, b"not a tar at all, but long enough to be read as a header? no").unwrap_err();
        assert!(err.is_client_error(), "{err}");
        let _ = std::fs::remove_dir_all(d);
    }
}

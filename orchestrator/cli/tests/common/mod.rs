//! Helpers shared by the command-line tests.

/// Validates `path` with xmllint against the Jenkins JUnit schema
/// (`junit-10.xsd`, which `scripts/setup` fetches into `.local/junit-schema`).
pub fn validate_junit_schema(path: &std::path::Path) {
    let schema = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../.local/junit-schema/junit-10.xsd");
    assert!(schema.is_file(), "{} is missing: run scripts/setup", schema.display());
    let out = std::process::Command::new("xmllint")
        .args(["--noout", "--schema"])
        .arg(&schema)
        .arg(path)
        .output()
        .expect("xmllint (scripts/setup installs libxml2-utils)");
    assert!(
        out.status.success(),
        "{} does not validate against junit-10.xsd: {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
}

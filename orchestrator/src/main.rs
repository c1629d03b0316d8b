use clap::Parser;

fn main() -> std::process::ExitCode {
    // Diagnostics go to stderr, filtered by RUST_LOG (e.g. RUST_LOG=sts=debug).
    tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()))
        .with_writer(std::io::stderr)
        .init();
    if let Err(e) = sts::controller::raise_fd_limit() {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    let cli = sts::cli::Cli::parse();
    std::process::ExitCode::from(sts::cli::run(cli))
}

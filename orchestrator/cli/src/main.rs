//! `sts`: the command line over the engine (`sts-engine`). It parses
//! arguments, starts the runtime, shows progress, prints results (rendered by
//! `sts-report`) and maps outcomes to exit codes; the work is the engine's.

#[macro_use]
mod output;
mod args;
mod commands;
mod console;
mod exit;
mod progress;
mod verify;

use clap::Parser;

/// jemalloc rather than glibc's allocator: the invariant engine allocates and
/// frees small header sets at a high rate (docs/benchmarks.md, `sts verify`).
#[global_allocator]
static ALLOCATOR: tikv_jemallocator::Jemalloc = tikv_jemallocator::Jemalloc;

fn main() -> std::process::ExitCode {
    // Diagnostics go to stderr: warnings alone, plainly, by default (and a
    // standalone proxy's switches coming and going); with RUST_LOG, whatever
    // it asks for, with times and sources.
    match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(filter) => tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).init(),
        Err(_) => tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("warn,sts_proxy::standalone=info"))
            .without_time()
            .with_target(false)
            .with_ansi(false)
            .with_writer(std::io::stderr)
            .init(),
    }
    if let Err(e) = sts_engine::controller::raise_fd_limit() {
        tracing::warn!("cannot raise the open-file limit: {e}");
    }
    let cli = args::Cli::parse();
    std::process::ExitCode::from(commands::run(cli))
}

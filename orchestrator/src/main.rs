use clap::Parser;

fn main() -> std::process::ExitCode {
    let cli = sts::cli::Cli::parse();
    std::process::ExitCode::from(sts::cli::run(cli))
}

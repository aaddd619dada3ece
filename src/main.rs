//! The `clusterset-dns` binary: parses the command line and runs a command.

use clap::Parser;
use clusterset_dns::cli::{Cli, Command, ServeArgs};
use clusterset_dns::{serve, status};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| EnvFilter::new("info,hickory_server=warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    match Cli::parse().command {
        None => serve::serve(ServeArgs::default()).await,
        Some(Command::Serve(args)) => serve::serve(args).await,
        Some(Command::Status(args)) => {
            print!("{}", status::render(&args)?);
            Ok(())
        }
    }
}

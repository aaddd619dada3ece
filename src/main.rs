//! The `clusterset-dns` binary: parses the command line (and its `--config`
//! file), sets up logging and runs a command.

use std::io::IsTerminal;
use std::process::ExitCode;

use clusterset_dns::cli::config_file::{self, Invocation};
use clusterset_dns::cli::{Command, LogFormat, ServeArgs};
use clusterset_dns::commands::{check, explain, status};
use clusterset_dns::k8s::crd;
use clusterset_dns::runtime::serve;
use tracing_subscriber::EnvFilter;

/// mimalloc fragments less than the system allocator under the churn of a
/// large first load, and hands freed memory back. The `system-allocator`
/// feature leaves it out, for heap profilers that see only malloc.
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay`, which libmimalloc-sys does not name:
/// in mimalloc.h (v2 and v3) it is the option just before `use_numa_nodes`.
/// A test checks it is the option mimalloc reads from `MIMALLOC_PURGE_DELAY`,
/// so an upgrade that renumbers the options fails the build's tests.
#[cfg(not(feature = "system-allocator"))]
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t =
    libmimalloc_sys::mi_option_use_numa_nodes - 1;

/// Exit status of `check` when the configuration has problems, and of
/// every command that fails (bad flags or config file: 2, from clap).
const FAILURE: u8 = 1;

fn main() -> ExitCode {
    // Freed memory goes back to the OS after 1 ms rather than 10: the first
    // load of a big clusterset frees nearly as much as it keeps, and with the
    // default delay much of it stays resident (bench/scale.sh, 110k services:
    // 406-472 MiB against 390-394; 0 ms costs more CPU for no less memory).
    // Set before any other thread exists: mimalloc options are not thread safe.
    // SAFETY: a plain option store, made while this is the only thread.
    #[cfg(not(feature = "system-allocator"))]
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 1)
    };
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_or_else(
            |error| {
                eprintln!("error: cannot start the runtime: {error}");
                ExitCode::from(FAILURE)
            },
            |runtime| runtime.block_on(start()),
        )
}

async fn start() -> ExitCode {
    let invocation = config_file::parse(std::env::args_os()).unwrap_or_else(|e| e.exit());
    init_logging(&invocation);
    match run(invocation.cli.command).await {
        Ok(code) => code,
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(FAILURE)
        }
    }
}

async fn run(command: Option<Command>) -> anyhow::Result<ExitCode> {
    match command {
        None => serve::serve(ServeArgs::default()).await?,
        Some(Command::Serve(args)) => serve::serve(args).await?,
        Some(Command::Status(args)) => print!("{}", status::render(&args).await?),
        Some(Command::Explain(args)) => print!("{}", explain::render(&args).await?),
        Some(Command::Check(args)) => {
            let report = check::report(&args).await;
            print!("{}", report.summary);
            if !report.problems.is_empty() {
                eprintln!("error: {} problem(s):", report.problems.len());
                for problem in &report.problems {
                    eprintln!("  {problem}");
                }
                return Ok(ExitCode::from(FAILURE));
            }
            println!("ok");
        }
        Some(Command::Crds) => print!("{}", crd::crds_yaml()),
    }
    Ok(ExitCode::SUCCESS)
}

/// Logs to stderr at the level [`Invocation::log_directives`] decides, as
/// text or JSON lines.
fn init_logging(invocation: &Invocation) {
    let rust_log = std::env::var("RUST_LOG").ok();
    let directives = invocation.log_directives(rust_log.as_deref());
    let (filter, bad) = match EnvFilter::builder().parse(&directives) {
        Ok(filter) => (filter, None),
        // Only RUST_LOG can be invalid here: --log-level is validated by the parser.
        Err(e) => (EnvFilter::new("info,hickory_proto=error"), Some(e)),
    };
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match invocation.cli.log_format {
        LogFormat::Text => builder.with_ansi(std::io::stderr().is_terminal()).init(),
        LogFormat::Json => builder
            .json()
            .flatten_event(true)
            .with_current_span(false)
            .with_span_list(false)
            .init(),
    }
    if let Some(error) = bad {
        tracing::warn!(%error, RUST_LOG = rust_log.as_deref().unwrap_or_default(), "invalid RUST_LOG ignored; logging at info");
    }
}

#[cfg(all(test, not(feature = "system-allocator")))]
mod tests {
    use super::*;

    /// mimalloc reads each option from `MIMALLOC_<NAME>` when it starts, so a
    /// copy of this test run with `MIMALLOC_PURGE_DELAY=123` sees 123 exactly
    /// when [`MI_OPTION_PURGE_DELAY`] names that option.
    #[test]
    fn the_purge_delay_option_is_the_one_named_purge_delay() {
        const MARK: &str = "123";
        if std::env::var("MIMALLOC_PURGE_DELAY").as_deref() == Ok(MARK) {
            // SAFETY: reads an option; mimalloc is initialised (it is the allocator).
            let value = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
            assert_eq!(value.to_string(), MARK);
            return;
        }
        let output = std::process::Command::new(std::env::current_exe().expect("test binary"))
            .args([
                "--exact",
                "tests::the_purge_delay_option_is_the_one_named_purge_delay",
                "--test-threads=1",
            ])
            .env("MIMALLOC_PURGE_DELAY", MARK)
            .output()
            .expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "MI_OPTION_PURGE_DELAY is not mimalloc's purge_delay: {stdout}"
        );
        // A filter that matched nothing would pass too: the copy must have
        // run this one test, and it alone.
        assert!(
            stdout.contains("running 1 test\n") && stdout.contains(" 1 passed; 0 failed;"),
            "the copy did not run exactly this test: {stdout}"
        );
    }
}

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

/// The mimalloc options this binary sets, with the `MIMALLOC_<NAME>`
/// variable mimalloc reads each from (which still overrides them), and the
/// value set. libmimalloc-sys does not name them: in mimalloc.h (v2 and v3)
/// `purge_delay` is the option just before `use_numa_nodes`, and
/// `arena_eager_commit` the one two before `large_os_pages`. A test checks
/// each is the option mimalloc reads from its variable, so an upgrade that
/// renumbers the options fails the build's tests.
///
/// - `purge_delay` 1 ms, not 10: the first load of a big clusterset frees
///   nearly as much as it keeps, and with the default delay much of it stays
///   resident; 0 ms costs more CPU for no less memory (bench/README.md,
///   "scale.sh", measured there).
/// - `arena_eager_commit` off (on by default where Linux overcommits): what
///   the first load frees in an arena committed up front stays resident, at
///   the same time to serve (bench/README.md, "scale.sh").
#[cfg(not(feature = "system-allocator"))]
const MI_OPTIONS: [(libmimalloc_sys::mi_option_t, &str, std::ffi::c_long); 2] = [
    (
        libmimalloc_sys::mi_option_use_numa_nodes - 1,
        "MIMALLOC_PURGE_DELAY",
        1,
    ),
    (
        libmimalloc_sys::mi_option_large_os_pages - 2,
        "MIMALLOC_ARENA_EAGER_COMMIT",
        0,
    ),
];

/// Sets [`MI_OPTIONS`] as mimalloc's defaults before it starts: the first
/// allocation, before `main`, reserves the arena that the whole load then
/// lives in, so an option set in `main` comes too late for it. An
/// `.init_array` entry with a priority runs before the unprioritised
/// constructor with which mimalloc starts (gcc, `src/prim/prim.c`), and
/// after the C library set up the environment mimalloc reads.
#[cfg(not(feature = "system-allocator"))]
#[used]
#[unsafe(link_section = ".init_array.00200")]
static SET_MI_OPTIONS: extern "C" fn() = {
    extern "C" fn set() {
        for (option, _, value) in MI_OPTIONS {
            // SAFETY: a plain store of a default, made before any thread or
            // allocation exists; it neither allocates nor reads anything.
            unsafe { libmimalloc_sys::mi_option_set_default(option, value) };
        }
    }
    set
};

/// Exit status of `check` when the configuration has problems, and of
/// every command that fails (bad flags or config file: 2, from clap).
const FAILURE: u8 = 1;

fn main() -> ExitCode {
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

    /// The constructor ran: where no `MIMALLOC_<NAME>` is set, this process
    /// reads the values [`MI_OPTIONS`] gives.
    #[test]
    fn the_options_are_mimallocs_defaults() {
        for (option, name, value) in MI_OPTIONS {
            if std::env::var_os(name).is_none() {
                // SAFETY: reads an option; mimalloc is initialised (it is the allocator).
                assert_eq!(
                    unsafe { libmimalloc_sys::mi_option_get(option) },
                    value,
                    "{name}"
                );
            }
        }
    }

    /// mimalloc reads each option from `MIMALLOC_<NAME>` when it starts, so a
    /// copy of this test run with each variable set to a mark of its own sees
    /// that mark in exactly the option [`MI_OPTIONS`] pairs with it.
    #[test]
    fn each_option_set_is_the_one_its_variable_names() {
        let mark = |i: usize| 120 + i as std::ffi::c_long;
        if std::env::var_os("CLUSTERSET_DNS_OPTION_COPY").is_some() {
            for (i, (option, name, _)) in MI_OPTIONS.into_iter().enumerate() {
                // SAFETY: reads an option; mimalloc is initialised (it is the allocator).
                let value = unsafe { libmimalloc_sys::mi_option_get(option) };
                assert_eq!(value, mark(i), "{name}");
            }
            return;
        }
        let mut copy = std::process::Command::new(std::env::current_exe().expect("test binary"));
        copy.args([
            "--exact",
            "tests::each_option_set_is_the_one_its_variable_names",
            "--test-threads=1",
        ])
        .env("CLUSTERSET_DNS_OPTION_COPY", "1");
        for (i, (_, name, _)) in MI_OPTIONS.into_iter().enumerate() {
            copy.env(name, mark(i).to_string());
        }
        let output = copy.output().expect("the test binary runs");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "an option is not the one its variable names: {stdout}"
        );
        // A filter that matched nothing would pass too: the copy must have
        // run this one test, and it alone.
        assert!(
            stdout.contains("running 1 test\n") && stdout.contains(" 1 passed; 0 failed;"),
            "the copy did not run exactly this test: {stdout}"
        );
    }
}

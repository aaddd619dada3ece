//! Flags of the other mode are an error, not silently ignored: a Kubernetes
//! flag without `--source kubernetes`, or `--manifests`/`--state-file` with it,
//! on the command line or set to other than its default in the `--config` file.
//!
//! A Kubernetes flag does not switch to Kubernetes mode by itself: that mode
//! writes ServiceImports, EndpointSlices and a leader Lease to the clusters
//! its kubeconfig reaches, which a command that used to serve the manifest
//! directory must not start doing on a guess.

use clap::ArgMatches;
use clap::error::ErrorKind;
use clap::parser::ValueSource;

use crate::cli::SourceKind;

/// The help heading of the Kubernetes-only flags in `cli/mod.rs`.
const KUBERNETES_HEADING: &str = "Kubernetes mode";
/// Flags under the Kubernetes heading that embedded mode uses too: the mode
/// itself, and the cluster this server runs in.
const BOTH_MODES: [&str; 2] = ["source", "cluster_id"];
/// The flags Kubernetes mode has no use for (embedded mode only).
const EMBEDDED_ONLY: [&str; 2] = ["manifests", "state_file"];

/// Checks the flags of the subcommand in `matches` (merged with the config
/// file) against its `--source`; `command_line` are the matches of the
/// command line alone, to tell where a flag came from.
pub(crate) fn check(
    command: &clap::Command,
    command_line: &ArgMatches,
    matches: &ArgMatches,
) -> Result<(), clap::Error> {
    let Some((name, sub)) = matches.subcommand() else {
        return Ok(());
    };
    let Some(definition) = command.find_subcommand(name) else {
        return Ok(());
    };
    let Ok(Some(source)) = sub.try_get_one::<SourceKind>("source") else {
        return Ok(());
    };
    let given = |id: &str| sub.value_source(id) == Some(ValueSource::CommandLine);
    let on_command_line = |id: &str| {
        command_line
            .subcommand_matches(name)
            .is_some_and(|m| m.value_source(id) == Some(ValueSource::CommandLine))
    };
    // The file may spell out a default (config/clusterset-dns.yaml lists
    // every key): that changes nothing, so it is no error.
    let changes_something = |arg: &clap::Arg| {
        let id = arg.get_id().as_str();
        on_command_line(id)
            || sub.get_raw(id).is_some_and(|values| {
                !values.eq(arg.get_default_values().iter().map(|d| d.as_os_str()))
            })
    };
    let wrong = definition.get_arguments().find(|arg| {
        let id = arg.get_id().as_str();
        let kubernetes_only =
            arg.get_help_heading() == Some(KUBERNETES_HEADING) && !BOTH_MODES.contains(&id);
        let misplaced = match source {
            SourceKind::Manifests => kubernetes_only,
            SourceKind::Kubernetes => EMBEDDED_ONLY.contains(&id),
        };
        misplaced && given(id) && changes_something(arg)
    });
    let Some(arg) = wrong else { return Ok(()) };
    let long = arg.get_long().unwrap_or_default();
    let id = arg.get_id().as_str();
    let (origin, remove) = if on_command_line(id) {
        (format!("--{long}"), format!("remove --{long}"))
    } else {
        (
            format!("`{long}` in the --config file"),
            format!("remove the `{long}` key"),
        )
    };
    let message = match source {
        SourceKind::Manifests => format!(
            "{origin} is a flag of Kubernetes mode, which is not selected: add \
             --source kubernetes (`source: kubernetes` in a config file) to read the \
             clusters' API servers, or {remove} to serve the manifest directory"
        ),
        SourceKind::Kubernetes => format!(
            "{origin} has no effect with --source kubernetes (the clusterset comes from \
             the API servers and VIPs from the broker): {remove}, or drop \
             --source kubernetes to serve the manifest directory"
        ),
    };
    Err(clap::Error::raw(ErrorKind::ArgumentConflict, message))
}

//! `--config FILE`: a YAML mapping that sets the flags of `serve`, `status`
//! or `check` under their long names.
//!
//! The file is turned into `--key=value` arguments placed before the real
//! ones (right after the subcommand; global flags right after the program
//! name); the command line is parsed with `args_override_self`, so a flag
//! given on the command line wins, and one parser (clap) validates both.
//! Each key is first validated on its own, so a bad value is reported with
//! its key, its value and what is allowed.

use std::ffi::OsString;
use std::fmt;
use std::path::Path;
use std::sync::LazyLock;

use clap::error::{ContextKind, ContextValue, ErrorKind};
use clap::parser::ValueSource;
use clap::{ArgMatches, CommandFactory, FromArgMatches};
use serde::de::{Deserialize, Deserializer, MapAccess, Visitor};
use serde_json::Value;

use crate::cli::Cli;

/// The arguments that are never config keys.
const NOT_KEYS: [&str; 3] = ["help", "version", "config"];

/// A parsed command line.
#[derive(Debug)]
pub struct Invocation {
    /// Flags, config file and defaults merged.
    pub cli: Cli,
    /// Whether `--log-level` was on the command line itself (it then beats
    /// `RUST_LOG`; from the config file it does not).
    pub log_level_on_command_line: bool,
}

/// Library targets kept quieter than the chosen level unless named: both
/// would otherwise log per packet.
const QUIET_TARGETS: [(&str, &str); 1] = [("hickory_proto", "error")];

impl Invocation {
    /// The tracing filter directives to log with, given `RUST_LOG`: the
    /// command line's `--log-level`, else `RUST_LOG` when set and not empty,
    /// else the config file's `log-level`, else `info`. `hickory_proto` is
    /// kept at `error` (its warnings are about packets a remote sender wrote;
    /// metrics count them) unless the directives name it.
    pub fn log_directives(&self, rust_log: Option<&str>) -> String {
        let rust_log = rust_log.map(str::trim).filter(|s| !s.is_empty());
        let chosen = match (&self.cli.log_level, rust_log) {
            (Some(level), _) if self.log_level_on_command_line => level.as_str(),
            (_, Some(env)) => env,
            (Some(level), None) => level.as_str(),
            (None, None) => "info",
        };
        let mut directives = chosen.to_owned();
        for (target, level) in QUIET_TARGETS {
            if !chosen.contains(target) {
                directives.push_str(&format!(",{target}={level}"));
            }
        }
        directives
    }
}

/// Parses the command line, reading the `--config` file of the subcommand
/// when one is given. Errors (including those of the file) are clap errors:
/// `.exit()` prints them and exits with status 2.
pub fn parse<I, T>(argv: I) -> Result<Invocation, clap::Error>
where
    I: IntoIterator<Item = T>,
    T: Into<OsString>,
{
    let argv: Vec<OsString> = argv.into_iter().map(Into::into).collect();
    let mut command = built().clone();
    let first = command.try_get_matches_from_mut(&argv)?;
    let log_level_on_command_line = from_command_line(&first, "log_level");
    let config = first.subcommand().and_then(|(name, sub)| {
        let path = sub.try_get_one::<std::path::PathBuf>("config").ok()??;
        Some((name.to_owned(), path.clone()))
    });
    let matches = match config {
        None => first.clone(),
        Some((name, path)) => {
            let file_args = file_arguments(&path, &name)
                .map_err(|e| clap::Error::raw(ErrorKind::ValueValidation, format!("{e}\n")))?;
            let at = subcommand_position(&command, &argv, &name).ok_or_else(|| {
                clap::Error::raw(
                    ErrorKind::InvalidSubcommand,
                    format!("cannot find the subcommand {name:?} on the command line\n"),
                )
            })?;
            // Global flags (logging) from the file go before the command
            // line's own, which may come before the subcommand.
            let (global, local): (Vec<_>, Vec<_>) = file_args.into_iter().partition(|a| a.global);
            let mut merged = vec![argv[0].clone()];
            merged.extend(global.into_iter().map(|a| a.word));
            merged.extend_from_slice(&argv[1..=at]);
            merged.extend(local.into_iter().map(|a| a.word));
            merged.extend_from_slice(&argv[at + 1..]);
            command.try_get_matches_from_mut(merged)?
        }
    };
    crate::cli::mode_flags::check(&command, &first, &matches)
        .map_err(|e| e.format(&mut command))?;
    let cli = Cli::from_arg_matches(&matches).map_err(|e| e.format(&mut command))?;
    Ok(Invocation {
        cli,
        log_level_on_command_line,
    })
}

/// Whether the argument `id` was given on the command line, before or after the subcommand.
fn from_command_line(matches: &ArgMatches, id: &str) -> bool {
    let here = matches.value_source(id) == Some(ValueSource::CommandLine);
    here || matches
        .subcommand()
        .is_some_and(|(_, sub)| from_command_line(sub, id))
}

/// The index in `argv` of the subcommand `name`: the first word that is not
/// a top-level option or the value of one.
fn subcommand_position(command: &clap::Command, argv: &[OsString], name: &str) -> Option<usize> {
    let mut words = argv.iter().enumerate().skip(1);
    while let Some((i, word)) = words.next() {
        let word = word.to_str()?;
        if let Some(long) = word.strip_prefix("--") {
            let takes_value = command
                .get_arguments()
                .find(|a| a.get_long() == Some(long))
                .is_some_and(|a| a.get_action().takes_values());
            if takes_value && !long.contains('=') {
                words.next();
            }
        } else if !word.starts_with('-') {
            return (word == name).then_some(i);
        }
    }
    None
}

/// The command-line parser, built (and checked by clap) once: reading a
/// config file consults it once per key.
fn built() -> &'static clap::Command {
    static COMMAND: LazyLock<clap::Command> = LazyLock::new(|| {
        let mut command = Cli::command();
        command.build();
        command
    });
    &COMMAND
}

/// The subcommand whose flags every config file may set: one file serves
/// `serve`, `check` and `status` (which ignores the keys it has no flag for).
const SERVE: &str = "serve";

/// The keys a config file of subcommand `name` accepts: the long names of
/// its flags (global ones included), in `--help` order, then those of
/// `serve` it does not have.
pub fn allowed_keys(name: &str) -> Vec<String> {
    let mut keys = flag_names(name);
    for key in flag_names(SERVE) {
        if !keys.contains(&key) {
            keys.push(key);
        }
    }
    keys
}

/// The long names of the flags of subcommand `name` that a file may set.
fn flag_names(name: &str) -> Vec<String> {
    let Some(sub) = built().find_subcommand(name) else {
        return Vec::new();
    };
    sub.get_arguments()
        .filter(|a| !NOT_KEYS.contains(&a.get_id().as_str()))
        .filter_map(|a| a.get_long().map(str::to_owned))
        .collect()
}

/// Something wrong with a config file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    /// The file as given.
    pub file: String,
    /// The key at fault, if one is.
    pub key: Option<String>,
    /// What is wrong.
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.key {
            Some(key) => write!(f, "{}: {key}: {}", self.file, self.reason),
            None => write!(f, "{}: {}", self.file, self.reason),
        }
    }
}

impl std::error::Error for ConfigError {}

/// One argument a config file stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileArgument {
    /// `--key=value` (or `--key` for a switch).
    pub word: OsString,
    /// Whether the flag is global (it then goes before the subcommand).
    pub global: bool,
}

/// Reads the config file at `path` for subcommand `name` and returns it as
/// `--key=value` arguments, each validated by the subcommand's parser.
pub fn file_arguments(path: &Path, name: &str) -> Result<Vec<FileArgument>, ConfigError> {
    let file = path.display().to_string();
    let error = |key: Option<&str>, reason: String| ConfigError {
        file: file.clone(),
        key: key.map(str::to_owned),
        reason,
    };
    let text =
        std::fs::read_to_string(path).map_err(|e| error(None, format!("cannot read: {e}")))?;
    let entries = read_entries(&text, &file).map_err(|reason| error(None, reason))?;
    let allowed = allowed_keys(name);
    let own = flag_names(name);
    let command = built();
    // One parser checks every key's value: it is cloned once, not per key.
    let mut check_parser = command.clone();
    let mut args = Vec::new();
    for (key, value) in entries {
        if !allowed.contains(&key) {
            return Err(error(
                None,
                format!("unknown key {key:?}; allowed: {}", allowed.join(", ")),
            ));
        }
        // A key of `serve` that this subcommand has no flag for is validated
        // as `serve` would, then ignored.
        let owner = if own.contains(&key) { name } else { SERVE };
        let arg = command
            .find_subcommand(owner)
            .and_then(|sub| sub.get_arguments().find(|a| a.get_long() == Some(&key)))
            .expect("allowed keys are long names of flags")
            .clone();
        let Some(word) = to_argument(&arg, &key, &value).map_err(|r| error(Some(&key), r))? else {
            continue;
        };
        let check = [OsString::from("clusterset-dns"), owner.into(), word.clone()];
        if let Err(e) = check_parser.try_get_matches_from_mut(check) {
            return Err(error(Some(&key), value_error(&e, &arg, &value)));
        }
        if owner == name {
            args.push(FileArgument {
                word,
                global: arg.is_global_set(),
            });
        }
    }
    Ok(args)
}

/// `--key=value` for one entry, None for `null` (the default) and for a
/// switch set to false.
fn to_argument(arg: &clap::Arg, key: &str, value: &Value) -> Result<Option<OsString>, String> {
    let scalar = |v: &Value| match v {
        Value::String(s) => Ok(s.clone()),
        Value::Number(n) => Ok(n.to_string()),
        Value::Bool(b) => Ok(b.to_string()),
        _ => Err(format!(
            "invalid value {}: expected a single value or a list, not {}",
            show(v),
            describe(v)
        )),
    };
    if !arg.get_action().takes_values() {
        return match value {
            Value::Bool(true) => Ok(Some(format!("--{key}").into())),
            Value::Bool(false) | Value::Null => Ok(None),
            other => Err(format!(
                "invalid value {}: expected true or false",
                show(other)
            )),
        };
    }
    let list = |items: Vec<String>| {
        let Some(delimiter) = arg.get_value_delimiter() else {
            return Err(format!(
                "invalid value {}: expected one value, not a list",
                show(value)
            ));
        };
        Ok(items.join(&delimiter.to_string()))
    };
    let text = match value {
        Value::Null => return Ok(None),
        Value::Array(items) => list(items.iter().map(scalar).collect::<Result<_, _>>()?)?,
        Value::Object(entries) if keyed(arg) => {
            let mut items = Vec::new();
            for (name, values) in entries {
                let values = match values {
                    Value::Array(values) => values.iter().collect(),
                    one => vec![one],
                };
                for v in values {
                    items.push(format!("{name}={}", scalar(v)?));
                }
            }
            if items.is_empty() {
                return Ok(None);
            }
            list(items)?
        }
        other => scalar(other)?,
    };
    Ok(Some(format!("--{key}={text}").into()))
}

/// Whether `arg` takes `KEY=VALUE` items (`--cluster-namespaces`), which a
/// file may also give as a mapping of keys to a value or a list of them.
fn keyed(arg: &clap::Arg) -> bool {
    let names = arg.get_value_names().unwrap_or_default();
    arg.get_value_delimiter().is_some() && names.iter().any(|n| n.as_str().contains('='))
}

/// The reason clap gave for rejecting one value, with what is allowed.
fn value_error(error: &clap::Error, arg: &clap::Arg, value: &Value) -> String {
    let shown = show(value);
    let valid: Vec<String> = match error.get(ContextKind::ValidValue) {
        Some(ContextValue::Strings(v)) => v.clone(),
        Some(ContextValue::String(v)) => vec![v.clone()],
        _ => arg
            .get_possible_values()
            .iter()
            .map(|p| p.get_name().to_owned())
            .collect(),
    };
    let reason = match error.kind() {
        ErrorKind::ValueValidation => std::error::Error::source(error)
            .map(ToString::to_string)
            .unwrap_or_else(|| rendered(error)),
        ErrorKind::InvalidValue if !valid.is_empty() => String::new(),
        _ => rendered(error),
    };
    let expected = if !valid.is_empty() {
        format!("allowed: {}", valid.join(", "))
    } else {
        let name = arg
            .get_value_names()
            .and_then(|n| n.first())
            .map(|n| n.as_str().to_owned())
            .unwrap_or_else(|| arg.get_id().as_str().to_uppercase());
        format!("expected {}", expectation(&name))
    };
    if reason.is_empty() {
        format!("invalid value {shown}; {expected}")
    } else if reason.contains("expected") {
        format!("invalid value {shown}: {reason}")
    } else {
        format!("invalid value {shown}: {reason}; {expected}")
    }
}

/// What a value named `name` (in `--help`) must look like.
fn expectation(name: &str) -> String {
    match name {
        "SECONDS" => "a whole number of seconds".into(),
        "N" => "a whole number".into(),
        "ADDR:PORT" => "an IP address and port, such as 0.0.0.0:5300 or [::]:5300".into(),
        "CIDR" => "an address prefix, such as 243.0.0.0/8 or fd00:c5e7::/48".into(),
        "NAME" => "a DNS name".into(),
        "BOOL" => "true or false".into(),
        other => other.to_owned(),
    }
}

/// clap's message without its `error: ` prefix and usage lines.
fn rendered(error: &clap::Error) -> String {
    let text = error.render().to_string();
    let line = text.lines().next().unwrap_or_default();
    line.trim_start_matches("error: ").to_owned()
}

/// A value as the file spelled it, for messages.
fn show(value: &Value) -> String {
    match value {
        Value::String(s) => format!("{s:?}"),
        Value::Array(items) => {
            let items: Vec<String> = items.iter().map(show).collect();
            format!("[{}]", items.join(", "))
        }
        other => format!("\"{other}\""),
    }
}

fn describe(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "a list",
        Value::Object(_) => "a mapping",
    }
}

/// The top-level entries of the file, in order; an empty file has none.
fn read_entries(text: &str, file: &str) -> Result<Vec<(String, Value)>, String> {
    let blank = text
        .lines()
        .map(str::trim)
        .all(|l| l.is_empty() || l.starts_with('#') || l == "---");
    if blank {
        return Ok(Vec::new());
    }
    let Entries(entries) = serde_saphyr::from_str(text).map_err(|e| {
        let options = serde_saphyr::render_options! { source_name: Some(file) };
        let message = e.render_with_options(options);
        let message = message
            .trim_start_matches("error: ")
            .replace(", set DuplicateKeyPolicy in Options if acceptable", "");
        format!("not valid YAML: {}", message.trim_end())
    })?;
    Ok(entries)
}

/// A mapping's entries in file order.
struct Entries(Vec<(String, Value)>);

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Ordered;
        impl<'de> Visitor<'de> for Ordered {
            type Value = Entries;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a mapping of flag names to values")
            }
            fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
                let mut entries = Vec::new();
                while let Some(entry) = map.next_entry::<String, Value>()? {
                    entries.push(entry);
                }
                Ok(Entries(entries))
            }
        }
        deserializer.deserialize_map(Ordered)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cli::{Command, ServeArgs};

    fn parse_with(file: &str, argv: &[&str]) -> Result<Invocation, String> {
        let dir = tempfile_dir();
        let path = dir.join("c.yaml");
        std::fs::write(&path, file).unwrap();
        let path = path.display().to_string();
        let mut words = vec!["clusterset-dns".to_owned()];
        words.extend(argv.iter().map(|w| w.replace("FILE", &path)));
        let result = parse(words).map_err(|e| e.to_string());
        let _ = std::fs::remove_dir_all(&dir);
        result
    }

    fn tempfile_dir() -> std::path::PathBuf {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static N: AtomicUsize = AtomicUsize::new(0);
        let dir = std::env::temp_dir().join(format!(
            "clusterset-dns-config-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn serve(inv: &Invocation) -> &ServeArgs {
        match &inv.cli.command {
            Some(Command::Serve(a)) => a,
            other => panic!("serve expected, got {other:?}"),
        }
    }

    #[test]
    fn nameserver_addresses_and_tcp_limits_from_the_file() {
        let file = "nameserver-address: [10.96.0.53, \"fd00::53\"]\ntcp-max-connections: 64\n";
        let inv = parse_with(file, &["serve", "--config", "FILE"]).unwrap();
        let args = serve(&inv);
        let expected: Vec<std::net::IpAddr> =
            vec!["10.96.0.53".parse().unwrap(), "fd00::53".parse().unwrap()];
        assert_eq!(args.nameserver_address, expected);
        assert_eq!(args.tcp.tcp_max_connections, 64);
        assert_eq!(args.tcp.tcp_max_connections_per_client, 32);
    }

    #[test]
    fn file_values_and_overrides() {
        let file = "listen: 127.0.0.1:5301\nttl: 7\nip-families: [IPv6]\ncluster-targeting: true\nlog-level: debug\n";
        let inv = parse_with(file, &["serve", "--config", "FILE"]).unwrap();
        let args = serve(&inv);
        assert_eq!(args.listen, "127.0.0.1:5301".parse().unwrap());
        assert_eq!(args.ttl, 7);
        assert!(args.cluster_targeting);
        assert_eq!(inv.cli.log_level.as_deref(), Some("debug"));
        assert!(!inv.log_level_on_command_line);
        let inv = parse_with(
            file,
            &[
                "--log-level",
                "warn",
                "serve",
                "--ttl",
                "9",
                "--config=FILE",
                "--ip-families",
                "IPv4,IPv6",
                "--cluster-targeting=false",
            ],
        )
        .unwrap();
        let args = serve(&inv);
        assert_eq!(args.ttl, 9);
        assert_eq!(args.listen, "127.0.0.1:5301".parse().unwrap());
        assert_eq!(args.clusterset.ip_families.len(), 2);
        assert!(!args.cluster_targeting);
        assert_eq!(inv.cli.log_level.as_deref(), Some("warn"));
        assert!(inv.log_level_on_command_line);
    }

    #[test]
    fn transfer_and_reverse_keys_take_lists() {
        let file = "transfer-allow: [10.0.0.0/8, fd00::/8]\nnotify: [127.0.0.1:5301]\nreverse-zone: 243.in-addr.arpa\nreverse-vip-pools: true\n";
        let inv = parse_with(file, &["serve", "--config", "FILE"]).unwrap();
        let args = serve(&inv);
        assert_eq!(args.transfer_allow.len(), 2);
        assert_eq!(args.notify, vec!["127.0.0.1:5301".parse().unwrap()]);
        let zones: Vec<String> = crate::runtime::assembly::reverse_zones(args)
            .iter()
            .map(|z| z.to_string())
            .collect();
        assert_eq!(
            zones,
            ["243.in-addr.arpa.", "0.0.0.0.7.e.5.c.0.0.d.f.ip6.arpa."],
            "the v4 pool's zone is named once"
        );
        let err = parse_with(
            "reverse-zone: [example.org]\n",
            &["serve", "--config", "FILE"],
        )
        .unwrap_err();
        assert!(
            err.contains("reverse-zone: invalid value [\"example.org\"]: \"example.org\" is not a reverse zone"),
            "{err}"
        );
    }

    #[test]
    fn errors_name_the_key_and_value() {
        let err = parse_with("listn: x\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(err.contains("unknown key \"listn\"; allowed: "), "{err}");
        assert!(err.contains("listen, "), "{err}");
        let allowed = err.split("allowed: ").nth(1).unwrap_or_default();
        assert!(!allowed.trim().split(", ").any(|k| k == "config"), "{err}");
        let err = parse_with("ttl: five\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(err.contains(": ttl: invalid value \"five\""), "{err}");
        let err = parse_with("log-format: yaml\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(
            err.contains("log-format: invalid value \"yaml\"; allowed: text, json"),
            "{err}"
        );
        let err = parse_with("ip-families: IPv5\n", &["status", "--config", "FILE"]).unwrap_err();
        assert!(
            err.contains("ip-families: invalid value \"IPv5\": unknown IP family"),
            "{err}"
        );
        let err = parse_with("listen: [a, b]\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(
            err.contains("listen: invalid value [\"a\", \"b\"]"),
            "{err}"
        );
        let err = parse_with(
            "cluster-targeting: yes please\n",
            &["serve", "--config", "FILE"],
        )
        .unwrap_err();
        assert!(err.contains("cluster-targeting: invalid value"), "{err}");
        let err = parse_with("- a\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(err.contains("expected mapping"), "{err}");
        let err = parse_with("output: json\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(err.contains("unknown key \"output\""), "{err}");
        let err = parse_with("ttl: -1\n", &["status", "--config", "FILE"]).unwrap_err();
        assert!(err.contains("ttl: invalid value \"-1\""), "{err}");
    }

    #[test]
    fn status_ignores_the_keys_only_serve_has() {
        let file = "listen: 127.0.0.1:5301\nip-families: IPv6\noutput: json\n";
        let inv = parse_with(file, &["status", "--config", "FILE"]).unwrap();
        let Some(Command::Status(args)) = &inv.cli.command else {
            panic!("status expected")
        };
        assert_eq!(args.clusterset.ip_families, [crate::model::IpFamily::IPv6]);
        assert_eq!(args.output, crate::cli::Format::Json);
        let err = parse_with(file, &["serve", "--config", "FILE"]).unwrap_err();
        assert!(err.contains("unknown key \"output\""), "{err}");
        assert_eq!(allowed_keys("status")[..2], ["manifests", "ip-families"]);
        assert!(allowed_keys("status").contains(&"output".to_owned()));
        assert!(allowed_keys("status").contains(&"listen".to_owned()));
    }

    #[test]
    fn empty_file_and_nulls_keep_defaults() {
        let inv = parse_with("# nothing\n", &["serve", "--config", "FILE"]).unwrap();
        assert_eq!(serve(&inv).ttl, 5);
        let inv = parse_with(
            "state-file: null\nudp-workers: ~\n",
            &["serve", "--config", "FILE"],
        )
        .unwrap();
        assert_eq!(serve(&inv).clusterset.state_file, None);
    }

    #[test]
    fn log_directives_precedence() {
        let mut inv = parse(["x", "serve"]).unwrap();
        let quiet = ",hickory_proto=error";
        assert_eq!(inv.log_directives(None), format!("info{quiet}"));
        assert_eq!(inv.log_directives(Some("")), format!("info{quiet}"));
        assert_eq!(inv.log_directives(Some("debug")), format!("debug{quiet}"));
        inv.cli.log_level = Some("trace".into());
        assert_eq!(inv.log_directives(Some("debug")), format!("debug{quiet}"));
        assert_eq!(inv.log_directives(None), format!("trace{quiet}"));
        inv.log_level_on_command_line = true;
        assert_eq!(inv.log_directives(Some("debug")), format!("trace{quiet}"));
        inv.cli.log_level = Some("info,hickory_proto=debug".into());
        assert_eq!(inv.log_directives(None), "info,hickory_proto=debug");
    }

    /// Issue 46, item 3: the per-cluster lists of `serve` as mappings of
    /// cluster to values (or as `CLUSTER=VALUE` lists); a bad entry names
    /// the file, the key and the value.
    #[test]
    fn per_cluster_keys_take_mappings() {
        let file = "cluster-namespaces: {east: [shop, web], west: shop}\ncluster-cidrs: [east=10.1.0.0/16]\n";
        let inv = parse_with(
            file,
            &["serve", "--source", "kubernetes", "--config", "FILE"],
        )
        .unwrap();
        let args = &serve(&inv).kubernetes;
        let namespaces: Vec<(&str, &str)> = args
            .cluster_namespaces
            .iter()
            .map(|(c, n)| (&**c, n.as_str()))
            .collect();
        assert_eq!(
            namespaces,
            [("east", "shop"), ("east", "web"), ("west", "shop")]
        );
        assert_eq!(
            args.cluster_cidrs,
            [("east".into(), "10.1.0.0/16".parse().unwrap())]
        );
        let inv = parse_with(
            "cluster-cidrs: {}\n",
            &["serve", "--source", "kubernetes", "--config", "FILE"],
        )
        .unwrap();
        assert!(serve(&inv).kubernetes.cluster_cidrs.is_empty());
        let err = parse_with(
            "cluster-cidrs: {east: [10.1.0.0/33]}\n",
            &["serve", "--source", "kubernetes", "--config", "FILE"],
        )
        .unwrap_err();
        assert!(
            err.contains("c.yaml: cluster-cidrs: invalid value"),
            "{err}"
        );
        assert!(
            err.contains("\"10.1.0.0/33\" is not an address prefix"),
            "{err}"
        );
        let err = parse_with(
            "cluster-namespaces: {East: shop}\n",
            &["serve", "--config", "FILE"],
        )
        .unwrap_err();
        assert!(err.contains("cluster-namespaces: invalid value"), "{err}");
        assert!(err.contains("not a cluster id"), "{err}");
        let err = parse_with("ttl: {a: 1}\n", &["serve", "--config", "FILE"]).unwrap_err();
        assert!(err.contains("ttl: invalid value"), "{err}");
    }
}

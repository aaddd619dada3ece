//! `status -o json`, rendered through the library, and lookups into it.

use std::path::Path;

use clusterset_dns::cli::Command;
use clusterset_dns::commands::status;
use serde_json::Value;
use test_support::parse_cli;

/// `clusterset-dns status --manifests dir -o json <extra>`, parsed.
pub fn status_json(dir: &Path, extra: &[&str]) -> Value {
    let dir = dir.display().to_string();
    let mut words = vec!["status", "--manifests", &dir, "-o", "json"];
    words.extend_from_slice(extra);
    let Command::Status(args) = parse_cli(&words) else {
        panic!("status arguments expected")
    };
    // Its own thread and runtime: callers may be inside a runtime already.
    let text = std::thread::scope(|scope| {
        scope
            .spawn(|| {
                let runtime = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime");
                runtime.block_on(status::render(&args))
            })
            .join()
            .expect("status does not panic")
    })
    .expect("status renders");
    serde_json::from_str(&text).expect("status -o json is JSON")
}

fn named<'a>(rows: &'a Value, ns: &str, name: &str) -> impl Iterator<Item = &'a Value> {
    rows.as_array()
        .expect("a list")
        .iter()
        .filter(move |r| r["namespace"] == ns && r["name"] == name)
}

/// The ServiceImport row of `ns/name`, if there is one.
pub fn import<'a>(status: &'a Value, ns: &str, name: &str) -> Option<&'a Value> {
    named(&status["serviceImports"], ns, name).next()
}

/// The ServiceImport row of `ns/name`, which must exist.
pub fn the_import<'a>(status: &'a Value, ns: &str, name: &str) -> &'a Value {
    import(status, ns, name).unwrap_or_else(|| panic!("no import {ns}/{name} in {status:#}"))
}

/// The clusters taking part in an import.
pub fn import_clusters(import: &Value) -> Vec<&str> {
    let clusters = import["clusters"].as_array().expect("clusters");
    clusters
        .iter()
        .map(|c| c["cluster"].as_str().expect("cluster id"))
        .collect()
}

/// `(status, reason)` of a condition in a list of conditions.
pub fn condition(conditions: &Value, type_: &str) -> (String, String) {
    let found = conditions
        .as_array()
        .expect("conditions")
        .iter()
        .find(|c| c["type"] == type_)
        .unwrap_or_else(|| panic!("no {type_} condition in {conditions:#}"));
    (text(&found["status"]), text(&found["reason"]))
}

fn text(value: &Value) -> String {
    value.as_str().expect("a string").to_owned()
}

/// `(status, reason)` of condition `type_` of `cluster`'s export of `ns/name`.
pub fn export_condition(
    status: &Value,
    ns: &str,
    name: &str,
    cluster: &str,
    type_: &str,
) -> (String, String) {
    let export = named(&status["serviceExports"], ns, name)
        .find(|e| e["cluster"] == cluster)
        .unwrap_or_else(|| panic!("no export {ns}/{name} of {cluster} in {status:#}"));
    condition(&export["conditions"], type_)
}

/// A `(status, reason)` pair from literals.
pub fn cond(status: &str, reason: &str) -> (String, String) {
    (status.to_owned(), reason.to_owned())
}

/// The problems `status` lists.
pub fn problems(status: &Value) -> Vec<String> {
    status["problems"]
        .as_array()
        .expect("problems")
        .iter()
        .map(text)
        .collect()
}

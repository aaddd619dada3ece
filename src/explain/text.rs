//! The text form of an [`Explanation`], read top-down: the question, the
//! import, each cluster with its endpoints, then the answer.

use std::fmt::Write as _;

use super::{ClusterExplanation, Explanation};
use crate::model::conditions::Condition;

/// Renders `e` for a terminal.
pub(crate) fn render_text(e: &Explanation) -> String {
    let mut out = String::new();
    let _ = write!(out, "{} {}: {}", e.name, e.rtype, e.name_kind);
    match &e.service {
        Some(s) => {
            let _ = writeln!(out, ", under service {}/{}", s.namespace, s.name);
        }
        None => out.push('\n'),
    }
    match &e.import {
        Some(i) => {
            let _ = writeln!(
                out,
                "import: {}, IP families {} (served here: {}), VIPs {}, ports {}, {}",
                i.type_.as_str(),
                list(i.ip_families.iter().map(|f| f.as_str())),
                list(i.local_families.iter().map(|f| f.as_str())),
                list(i.vips.iter()),
                list(i.ports.iter()),
                condition(&i.ready),
            );
        }
        None if e.service.is_some() => out.push_str("import: none (no valid export)\n"),
        None => {}
    }
    let behind_vips = e.import.as_ref().is_some_and(|i| !i.vips.is_empty());
    for c in &e.clusters {
        cluster(&mut out, c, behind_vips);
    }
    let a = &e.answer;
    let _ = writeln!(
        out,
        "answer: {}{}, TTL {}",
        a.rcode,
        if a.authoritative {
            " (authoritative)"
        } else {
            ""
        },
        a.ttl.map_or_else(|| "-".to_owned(), |t| t.to_string())
    );
    for record in &a.answers {
        let _ = writeln!(out, "  {record}");
    }
    for record in &a.authority {
        let _ = writeln!(out, "  authority: {record}");
    }
    out
}

fn cluster(out: &mut String, c: &ClusterExplanation, behind_vips: bool) {
    let _ = write!(out, "cluster {}: ", c.cluster);
    match &c.left_out {
        Some(why) => {
            let _ = write!(out, "left out ({why})");
        }
        None if behind_vips => out.push_str("in the import, behind the VIPs"),
        None => {
            let _ = write!(
                out,
                "in the import, contributes {}",
                list(c.contributes.iter())
            );
        }
    }
    if !c.conditions.is_empty() {
        let conditions: Vec<String> = c.conditions.iter().map(condition).collect();
        let _ = write!(out, "; {}", conditions.join(", "));
    }
    if c.exported && !c.has_service {
        out.push_str("; no Service");
    }
    out.push('\n');
    for e in &c.endpoints {
        let host = e
            .hostname
            .as_deref()
            .map(|h| format!(" ({h})"))
            .unwrap_or_default();
        let verdict = e.reason.as_deref().unwrap_or("used");
        let _ = writeln!(out, "  endpoint {}{host}: {verdict}", e.address);
    }
}

/// `Type=Status (Reason: message)`, the reason and message only when they say more.
fn condition(c: &Condition) -> String {
    let mut text = format!("{}={}", c.type_, c.status_str());
    if !usual_reason(c) {
        let _ = write!(text, " ({}", c.reason);
        if !c.message.is_empty() {
            let _ = write!(text, ": {}", c.message);
        }
        text.push(')');
    }
    text
}

/// Whether a condition's reason only repeats its status (`Valid`, `NoConflicts`, ...).
pub(crate) fn usual_reason(c: &Condition) -> bool {
    matches!(
        c.reason.as_ref(),
        "Valid" | "Ready" | "Exported" | "NoConflicts"
    )
}

/// The items joined with commas, `-` for none.
pub(crate) fn list<T: ToString>(items: impl Iterator<Item = T>) -> String {
    let parts: Vec<String> = items.map(|i| i.to_string()).collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(",")
    }
}

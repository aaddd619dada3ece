//! The module structure ARCHITECTURE.md describes is the one the code has:
//! every top-level module of `src/` has a row in its layer table, each
//! module uses only the modules its row allows, the allowed arrows form no
//! cycle, no two files of one folder use each other (directly or round a
//! circle; a folder's `mod.rs` counts as one of its files), and every file
//! the "Where each rule is decided" table names exists.
//!
//! A path is whatever names a module: `crate::a::b`, grouped
//! (`crate::{a, b::{c, d}}`), relative (`super::x`, `super::super::x`,
//! `self::x`, and a `mod.rs`'s own `child::x`). Comments and string literals
//! are not code. Test modules (`#[cfg(test)] mod tests`) may use any layer to
//! build their fixtures and are not counted; each must be the last item of
//! its file, so no code after it goes unchecked.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

fn architecture() -> String {
    fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).expect("ARCHITECTURE.md")
}

/// The cells of a table row, or None if `line` is not one.
fn cells(line: &str) -> Option<Vec<&str>> {
    let line = line.trim();
    line.starts_with('|')
        .then(|| line.trim_matches('|').split('|').map(str::trim).collect())
}

/// `module -> modules it may use`, from the table whose header ends in `may use`.
fn layer_table(text: &str) -> BTreeMap<String, BTreeSet<String>> {
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        let Some(cells) = cells(line) else {
            in_table = false;
            continue;
        };
        if cells
            .last()
            .is_some_and(|c| c.eq_ignore_ascii_case("may use"))
        {
            in_table = true;
            continue;
        }
        if !in_table || cells[0].starts_with("---") {
            continue;
        }
        let module = ticked(cells[0])
            .into_iter()
            .next()
            .expect("a module in the first cell");
        let uses = ticked(cells.last().unwrap()).into_iter().collect();
        rows.insert(module, uses);
    }
    assert!(
        !rows.is_empty(),
        "ARCHITECTURE.md has no table whose last column is `may use`"
    );
    rows
}

/// The backticked names of a cell, without a trailing `/` or `.rs`.
fn ticked(cell: &str) -> Vec<String> {
    backticked(cell)
        .map(|n| n.trim_end_matches('/').trim_end_matches(".rs").to_owned())
        .collect()
}

fn backticked(cell: &str) -> impl Iterator<Item = &str> {
    cell.split('`').skip(1).step_by(2)
}

/// The files the "Where each rule is decided" table names (backticked, with
/// a `/` or ending in `.rs`), that `exists` says are missing.
fn missing_rule_files(text: &str, exists: impl Fn(&str) -> bool) -> Vec<String> {
    let mut missing = Vec::new();
    let mut in_section = false;
    for line in text.lines() {
        if let Some(heading) = line.strip_prefix("## ") {
            in_section = heading.trim() == "Where each rule is decided";
            continue;
        }
        let Some(cells) = cells(line).filter(|_| in_section) else {
            continue;
        };
        if cells.len() < 2 || cells[0].starts_with("---") || cells[0] == "rule" {
            continue;
        }
        for name in backticked(cells[1]) {
            if (name.contains('/') || name.ends_with(".rs")) && !exists(name) {
                missing.push(name.to_owned());
            }
        }
    }
    missing
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in fs::read_dir(dir).expect("readable") {
        let path = entry.expect("entry").path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|e| e == "rs") {
            files.push(path);
        }
    }
    files.sort();
    files
}

/// Every file of `src/`: its path under `src/` and its text.
fn src_files() -> Vec<(PathBuf, String)> {
    let src = Path::new(ROOT).join("src");
    sources(&src)
        .into_iter()
        .map(|file| {
            let text = fs::read_to_string(&file).expect("source");
            (file.strip_prefix(&src).unwrap().to_path_buf(), text)
        })
        .collect()
}

/// `text` with comments, string and character literals blanked (newlines kept).
fn blank(text: &str) -> String {
    let s: Vec<char> = text.chars().collect();
    let mut out = s.clone();
    let erase = |out: &mut Vec<char>, from: usize, to: usize| {
        for c in &mut out[from..to.min(s.len())] {
            if *c != '\n' {
                *c = ' ';
            }
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < s.len() {
        let at = |k: usize| s.get(k).copied().unwrap_or('\0');
        let start = i;
        if at(i) == '/' && at(i + 1) == '/' {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
            erase(&mut out, start, i);
        } else if at(i) == '/' && at(i + 1) == '*' {
            let mut depth = 0;
            while i < s.len() {
                if at(i) == '/' && at(i + 1) == '*' {
                    depth += 1;
                    i += 2;
                } else if at(i) == '*' && at(i + 1) == '/' {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
            erase(&mut out, start, i);
        } else if at(i) == 'r'
            && (i == 0 || !ident(at(i - 1)) || (at(i - 1) == 'b' && !ident(at(i.wrapping_sub(2)))))
            && matches!(at(i + 1), '"' | '#')
        {
            let mut hashes = 0;
            let mut j = i + 1;
            while at(j) == '#' {
                hashes += 1;
                j += 1;
            }
            if at(j) != '"' {
                i += 1;
                continue;
            }
            j += 1;
            while j < s.len() && !(at(j) == '"' && (1..=hashes).all(|h| at(j + h) == '#')) {
                j += 1;
            }
            i = j + 1 + hashes;
            erase(&mut out, start, i);
        } else if at(i) == '"' {
            i += 1;
            while i < s.len() && s[i] != '"' {
                i += if s[i] == '\\' { 2 } else { 1 };
            }
            i += 1;
            erase(&mut out, start, i);
        } else if at(i) == '\'' && at(i + 1) == '\\' {
            i += 2;
            while i < s.len() && s[i] != '\'' {
                i += 1;
            }
            i += 1;
            erase(&mut out, start, i);
        } else if at(i) == '\'' && at(i + 2) == '\'' {
            i += 3;
            erase(&mut out, start, i);
        } else {
            i += 1;
        }
    }
    out.into_iter().collect()
}

/// A file's code: blanked, its test module left out. The flag says whether
/// anything follows the first test module.
fn code(text: &str) -> (String, bool) {
    let text = blank(text);
    let Some((start, end)) = test_module(&text) else {
        return (text, false);
    };
    let after = &text[end..];
    (
        format!("{}{after}", &text[..start]),
        !after.trim().is_empty(),
    )
}

/// Where the first `#[cfg(test)] mod tests { ... }` of blanked code starts and ends.
fn test_module(code: &str) -> Option<(usize, usize)> {
    for (start, _) in code.match_indices("#[cfg(test)]") {
        let mut rest = code[start + "#[cfg(test)]".len()..].trim_start();
        // Further attributes, then `mod tests` with any visibility.
        while rest.starts_with("#[") {
            rest = rest[rest.find(']')? + 1..].trim_start();
        }
        if let Some(after) = rest.strip_prefix("pub") {
            rest = after.trim_start();
            if rest.starts_with('(') {
                rest = rest[rest.find(')')? + 1..].trim_start();
            }
        }
        let Some(after) = rest.strip_prefix("mod") else {
            continue;
        };
        let Some(after) = after.trim_start().strip_prefix("tests") else {
            continue;
        };
        if !after.trim_start().starts_with('{') {
            continue;
        }
        let open = code.len() - after.trim_start().len();
        let mut depth = 0;
        for (at, c) in code[open..].char_indices() {
            match c {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        return Some((start, open + at + 1));
                    }
                }
                _ => {}
            }
        }
        return Some((start, code.len()));
    }
    None
}

/// Every path in blanked `code` that starts with a name and `::`, groups
/// expanded (`crate::{a, b::c}` is `crate::a` and `crate::b::c`).
fn paths(code: &str) -> Vec<Vec<String>> {
    let s: Vec<char> = code.chars().collect();
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut found = Vec::new();
    let mut i = 0;
    while i < s.len() {
        if !ident(s[i]) || (i > 0 && (ident(s[i - 1]) || s[i - 1] == ':')) {
            i += 1;
            continue;
        }
        let start = i;
        while i < s.len() && ident(s[i]) {
            i += 1;
        }
        if s.get(i) == Some(&':') && s.get(i + 1) == Some(&':') {
            i = start;
            use_tree(&s, &mut i, Vec::new(), &mut found);
        }
    }
    found.retain(|p| !p.is_empty());
    found
}

/// Parses one use tree at `s[*i..]` below `prefix` into `out`.
fn use_tree(s: &[char], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let skip_space = |i: &mut usize| {
        while s.get(*i).is_some_and(|c| c.is_whitespace()) {
            *i += 1;
        }
    };
    skip_space(i);
    match s.get(*i) {
        Some('{') => {
            *i += 1;
            loop {
                skip_space(i);
                match s.get(*i) {
                    None => return,
                    Some('}') => {
                        *i += 1;
                        return;
                    }
                    Some(',') => *i += 1,
                    Some(c) if ident(*c) || *c == '{' || *c == '*' => {
                        use_tree(s, i, prefix.clone(), out);
                        // `as alias`
                        skip_space(i);
                        if s[*i..].starts_with(&['a', 's'])
                            && !s.get(*i + 2).is_some_and(|c| ident(*c))
                        {
                            *i += 2;
                            skip_space(i);
                            while s.get(*i).is_some_and(|c| ident(*c)) {
                                *i += 1;
                            }
                        }
                    }
                    Some(_) => *i += 1,
                }
            }
        }
        Some('*') => {
            *i += 1;
            out.push(prefix);
        }
        _ => {
            let mut path = prefix;
            loop {
                let start = *i;
                while s.get(*i).is_some_and(|c| ident(*c)) {
                    *i += 1;
                }
                let name: String = s[start..*i].iter().collect();
                if name.is_empty() {
                    break;
                }
                if name != "self" || path.is_empty() {
                    path.push(name);
                }
                if s.get(*i) == Some(&':') && s.get(*i + 1) == Some(&':') {
                    *i += 2;
                    if matches!(s.get(*i), Some('{' | '*')) {
                        return use_tree(s, i, path, out);
                    }
                } else {
                    break;
                }
            }
            out.push(path);
        }
    }
}

/// The module a file under `src/` is (`a/mod.rs` and `a.rs`: `a`; `a/b.rs`: `a::b`).
fn module_of(relative: &Path) -> Vec<String> {
    let mut module: Vec<String> = relative
        .with_extension("")
        .components()
        .map(|c| c.as_os_str().to_string_lossy().into_owned())
        .collect();
    if module.last().is_some_and(|m| m == "mod" || m == "lib") {
        module.pop();
    }
    module
}

/// `path` as used in `module`, from the crate root; None if it names no
/// module of the crate (another crate, a local item).
fn resolve(
    module: &[String],
    path: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<Vec<String>> {
    let first = path.first()?;
    match first.as_str() {
        "crate" => Some(path[1..].to_vec()),
        "self" => Some([module, &path[1..]].concat()),
        "super" => {
            let up = path.iter().take_while(|s| *s == "super").count();
            let base = module.get(..module.len().checked_sub(up)?)?;
            Some([base, &path[up..]].concat())
        }
        _ => {
            let child = [module, &path[..1]].concat();
            modules.contains(&child).then(|| [module, path].concat())
        }
    }
}

/// Every module the files of `files` are.
fn modules(files: &[(PathBuf, String)]) -> BTreeSet<Vec<String>> {
    files.iter().map(|(path, _)| module_of(path)).collect()
}

/// `src/`-relative file -> the crate paths its code uses (the binary's
/// `clusterset_dns::` paths for `main.rs`).
fn uses(files: &[(PathBuf, String)]) -> Vec<(&Path, Vec<Vec<String>>)> {
    let modules = modules(files);
    files
        .iter()
        .filter(|(path, _)| path != Path::new("lib.rs"))
        .map(|(path, text)| {
            let (code, _) = code(text);
            let module = module_of(path);
            let used = paths(&code)
                .into_iter()
                .filter_map(|p| {
                    if path == Path::new("main.rs") {
                        (p[0] == "clusterset_dns").then(|| p[1..].to_vec())
                    } else {
                        resolve(&module, &p, &modules)
                    }
                })
                .filter(|p| !p.is_empty())
                .collect();
            (path.as_path(), used)
        })
        .collect()
}

/// The arrows of `files` that `table` does not allow, and the top-level
/// modules of `files`.
fn layer_violations(
    files: &[(PathBuf, String)],
    table: &BTreeMap<String, BTreeSet<String>>,
) -> (Vec<String>, BTreeSet<String>) {
    let mut tops = BTreeSet::new();
    let mut wrong = BTreeSet::new();
    for (path, used) in uses(files) {
        let top = module_of(path)
            .into_iter()
            .next()
            .unwrap_or_else(|| "main".to_owned());
        tops.insert(top.clone());
        let allowed = table.get(&top);
        for p in used {
            if p[0] != top && allowed.is_none_or(|a| !a.contains(&p[0])) {
                wrong.insert(format!("{} uses `{}`", path.display(), p[0]));
            }
        }
    }
    (wrong.into_iter().collect(), tops)
}

/// Per folder below the top, the files (`mod.rs` among them) that use
/// each other, directly or round a circle: each circle with what each of
/// its files uses of the next.
fn folder_cycles(files: &[(PathBuf, String)]) -> Vec<String> {
    let modules = modules(files);
    // folder -> file -> file of that folder it uses -> the paths it uses there
    type Graph = BTreeMap<String, BTreeMap<String, BTreeSet<String>>>;
    let mut graphs: BTreeMap<Vec<String>, Graph> = BTreeMap::new();
    for (path, used) in uses(files) {
        let module = module_of(path);
        let is_mod = path.file_name().is_some_and(|f| f == "mod.rs");
        let (folder, node) = if is_mod {
            (module.clone(), "mod.rs".to_owned())
        } else {
            match module.split_last() {
                Some((last, folder)) if !folder.is_empty() => (folder.to_vec(), last.clone()),
                _ => continue,
            }
        };
        let mut targets: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
        for p in used {
            if !p.starts_with(&folder) {
                continue;
            }
            let target = match p.get(folder.len()) {
                Some(next)
                    if modules
                        .contains(&[folder.as_slice(), std::slice::from_ref(next)].concat()) =>
                {
                    next.clone()
                }
                // An item of the folder's own module, defined in or re-exported by `mod.rs`.
                _ => "mod.rs".to_owned(),
            };
            if target != node {
                targets.entry(target).or_default().insert(p.join("::"));
            }
        }
        graphs.entry(folder).or_default().insert(node, targets);
    }
    let mut cycles = Vec::new();
    for (folder, graph) in graphs {
        let reaches = |from: &String| -> BTreeSet<String> {
            let mut seen = BTreeSet::new();
            let mut next = vec![from.clone()];
            while let Some(n) = next.pop() {
                for t in graph.get(&n).into_iter().flat_map(|t| t.keys()) {
                    if seen.insert(t.clone()) {
                        next.push(t.clone());
                    }
                }
            }
            seen
        };
        let mut reported = BTreeSet::new();
        for node in graph.keys() {
            if reported.contains(node) || !reaches(node).contains(node) {
                continue;
            }
            // The files on a circle with `node`.
            let circle: BTreeSet<String> = reaches(node)
                .into_iter()
                .filter(|other| reaches(other).contains(node))
                .collect();
            let edges: Vec<String> = circle
                .iter()
                .flat_map(|from| {
                    graph[from]
                        .iter()
                        .filter(|(to, _)| circle.contains(*to))
                        .map(move |(to, paths)| format!("  {from} -> {to}: {paths:?}"))
                })
                .collect();
            cycles.push(format!("src/{}:\n{}", folder.join("/"), edges.join("\n")));
            reported.extend(circle);
        }
    }
    cycles
}

/// The files of `files` with code after their first test module.
fn code_after_tests(files: &[(PathBuf, String)]) -> Vec<String> {
    files
        .iter()
        .filter(|(_, text)| code(text).1)
        .map(|(path, _)| path.display().to_string())
        .collect()
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let table = layer_table(&architecture());
    let (wrong, modules) = layer_violations(&src_files(), &table);
    let documented: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        modules, documented,
        "src/ modules vs. ARCHITECTURE.md's layer table"
    );
    assert!(
        wrong.is_empty(),
        "arrows ARCHITECTURE.md does not allow:\n{}",
        wrong.join("\n")
    );
}

/// ARCHITECTURE.md's "Kubernetes-free layers" line: its folders and crates.
fn kubernetes_free(text: &str) -> (Vec<String>, Vec<String>) {
    let at = text
        .find("Kubernetes-free layers:")
        .expect("ARCHITECTURE.md names the Kubernetes-free layers");
    // The names stand before the first parenthesis; what follows explains.
    let line = text[at..].split(" (").next().unwrap_or_default();
    let (folders, crates): (Vec<&str>, Vec<&str>) =
        backticked(line).partition(|n| n.ends_with('/'));
    let folders = folders
        .iter()
        .map(|f| f.trim_end_matches('/').to_owned())
        .collect();
    let crates = crates.iter().map(|c| (*c).to_owned()).collect();
    (folders, crates)
}

/// Where `code` names one of `crates` as a path (`kube::Api`, `use schemars;`).
fn crate_uses<'a>(code: &str, crates: &'a [String]) -> Vec<&'a str> {
    crates
        .iter()
        .filter(|name| {
            code.match_indices(name.as_str()).any(|(at, _)| {
                let before = code[..at].chars().next_back();
                let after = &code[at + name.len()..];
                !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
                    && (after.starts_with("::") || after.trim_start().starts_with(';'))
            })
        })
        .map(String::as_str)
        .collect()
}

/// `model/` says it is Kubernetes-independent: the crates `use crate::`
/// cannot show are checked too (outside test modules).
#[test]
fn kubernetes_free_layers_use_no_kubernetes_crate() {
    let (folders, crates) = kubernetes_free(&architecture());
    assert!(folders.contains(&"model".to_owned()), "{folders:?}");
    assert!(crates.contains(&"k8s_openapi".to_owned()), "{crates:?}");
    let wrong: Vec<String> = src_files()
        .iter()
        .filter(|(path, _)| {
            let top = path.components().next().unwrap().as_os_str();
            folders.iter().any(|f| top == f.as_str())
        })
        .flat_map(|(path, text)| {
            let used = crate_uses(&code(text).0, &crates);
            used.into_iter()
                .map(move |c| format!("{} uses {c}", path.display()))
        })
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn crate_paths_are_found_only_as_paths() {
    let crates = ["kube".to_owned(), "schemars".to_owned()];
    assert_eq!(crate_uses("use kube::Api;", &crates), ["kube"]);
    assert_eq!(
        crate_uses("let a = schemars :: x; use schemars;", &crates),
        ["schemars"]
    );
    assert!(crate_uses("crate::kube::x; let kubelet = 1; my_kube::y", &crates).is_empty());
}

#[test]
fn the_layer_table_has_no_cycle() {
    let table = layer_table(&architecture());
    let mut done: BTreeSet<String> = BTreeSet::new();
    while done.len() < table.len() {
        let ready: Vec<String> = table
            .iter()
            .filter(|(m, uses)| {
                !done.contains(*m)
                    && uses
                        .iter()
                        .all(|u| done.contains(u) || !table.contains_key(u))
            })
            .map(|(m, _)| m.clone())
            .collect();
        assert!(
            !ready.is_empty(),
            "a cycle among {:?}",
            table
                .keys()
                .filter(|m| !done.contains(*m))
                .collect::<Vec<_>>()
        );
        done.extend(ready);
    }
    for (module, uses) in &table {
        for used in uses {
            assert!(
                table.contains_key(used),
                "{module} may use `{used}`, which has no row"
            );
        }
    }
}

#[test]
fn no_two_files_of_a_folder_use_each_other() {
    let cycles = folder_cycles(&src_files());
    assert!(
        cycles.is_empty(),
        "files of one folder use each other:\n{}",
        cycles.join("\n")
    );
}

#[test]
fn test_modules_end_their_files() {
    let late = code_after_tests(&src_files());
    assert!(
        late.is_empty(),
        "code after the test module (which the layer check skips):\n{}",
        late.join("\n")
    );
}

#[test]
fn the_files_where_rules_are_decided_exist() {
    let root = Path::new(ROOT);
    let missing = missing_rule_files(&architecture(), |name| {
        root.join("src").join(name).exists() || root.join(name).exists()
    });
    assert!(
        missing.is_empty(),
        "ARCHITECTURE.md, \"Where each rule is decided\", names files that do not exist: {missing:?}"
    );
}

/// Each check, shown to fail on a small bad input.
mod checks {
    use super::*;

    const TABLE: &str = "\
| module | what | may use |
|---|---|---|
| `model/` | facts | — |
| `engine/` | pure | `model` |
| `dns/` | wire | `model` |
";

    fn files(list: &[(&str, &str)]) -> Vec<(PathBuf, String)> {
        list.iter()
            .map(|(p, t)| (PathBuf::from(p), (*t).to_owned()))
            .collect()
    }

    fn violations(list: &[(&str, &str)]) -> Vec<String> {
        layer_violations(&files(list), &layer_table(TABLE)).0
    }

    #[test]
    fn grouped_paths_are_expanded() {
        let code = "use crate::{engine::{vip, Engine as E}, model, self as x};";
        let found = paths(code);
        let want: Vec<Vec<String>> = [
            &["crate", "engine", "vip"][..],
            &["crate", "engine", "Engine"],
            &["crate", "model"],
            &["crate"],
        ]
        .iter()
        .map(|p| p.iter().map(|s| (*s).to_owned()).collect())
        .collect();
        assert_eq!(found, want);
        let bad = violations(&[
            ("model/mod.rs", ""),
            ("engine/mod.rs", ""),
            ("dns/mod.rs", "use crate::{model::Name, engine};"),
        ]);
        assert_eq!(bad, ["dns/mod.rs uses `engine`"]);
    }

    #[test]
    fn super_super_paths_are_resolved() {
        let bad = violations(&[
            ("model/mod.rs", ""),
            ("engine/mod.rs", ""),
            ("dns/mod.rs", ""),
            ("dns/udp.rs", "use super::super::engine::Engine;"),
        ]);
        assert_eq!(bad, ["dns/udp.rs uses `engine`"]);
        let fine = violations(&[
            ("model/mod.rs", ""),
            ("dns/mod.rs", ""),
            (
                "dns/udp.rs",
                "use super::super::model::Name; use super::tcp;",
            ),
        ]);
        assert!(fine.is_empty(), "{fine:?}");
    }

    #[test]
    fn comments_and_strings_are_not_code() {
        let bad = violations(&[
            ("model/mod.rs", ""),
            ("engine/mod.rs", ""),
            (
                "dns/mod.rs",
                "// crate::engine\nconst A: &str = \"crate::engine\";\nconst B: &str = r#\"crate::engine\"#;\nconst C: char = '\"'; fn f<'a>() {}\n/* crate::engine */",
            ),
        ]);
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn a_mod_rs_and_its_child_may_not_use_each_other() {
        let tied = files(&[
            (
                "engine/mod.rs",
                "pub mod vip;\npub use vip::Pools;\npub struct Engine;",
            ),
            ("engine/vip.rs", "use super::Engine;\npub struct Pools;"),
        ]);
        let cycles = folder_cycles(&tied);
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        assert!(cycles[0].starts_with("src/engine:"), "{cycles:?}");
        let one_way = files(&[
            ("engine/mod.rs", "pub mod vip;\npub use vip::Pools;"),
            (
                "engine/vip.rs",
                "use crate::model::Name;\npub struct Pools;",
            ),
        ]);
        assert!(folder_cycles(&one_way).is_empty());
    }

    #[test]
    fn siblings_may_not_use_each_other() {
        let tied = files(&[
            ("engine/mod.rs", "pub mod a;\npub mod b;"),
            ("engine/a.rs", "use super::b::B; pub struct A;"),
            ("engine/b.rs", "use crate::engine::a::A; pub struct B;"),
        ]);
        assert_eq!(folder_cycles(&tied).len(), 1);
    }

    #[test]
    fn code_after_the_test_module_is_caught_and_checked() {
        let late = "fn a() {}\n#[cfg(test)]\nmod tests {\n    use crate::engine;\n    fn t() { let _ = \"}\"; }\n}\nuse crate::engine::Engine;\n";
        assert!(code(late).1);
        assert_eq!(
            code_after_tests(&files(&[("dns/mod.rs", late)])),
            ["dns/mod.rs"]
        );
        let bad = violations(&[
            ("model/mod.rs", ""),
            ("engine/mod.rs", ""),
            ("dns/mod.rs", late),
        ]);
        assert_eq!(
            bad,
            ["dns/mod.rs uses `engine`"],
            "the code after is checked"
        );
        let last = "fn a() {}\n#[cfg(test)]\npub(crate) mod tests {\n    use crate::engine;\n}\n";
        assert!(!code(last).1);
        assert!(
            violations(&[
                ("model/mod.rs", ""),
                ("engine/mod.rs", ""),
                ("dns/mod.rs", last)
            ])
            .is_empty()
        );
    }

    #[test]
    fn rule_files_must_exist() {
        let text = "\
## Where each rule is decided

| rule | where |
|---|---|
| one | `engine/aggregate.rs` (`function`) |
| two | `engine/gone.rs`, `dns/` |

## Next

| x | `not/checked.rs` |
";
        let missing = missing_rule_files(text, |name| name != "engine/gone.rs");
        assert_eq!(missing, ["engine/gone.rs"]);
    }
}

//! The module structure ARCHITECTURE.md describes is the one the code has:
//! every top-level module of `src/` has a row in its layer table, each
//! module uses only the modules its row allows, the allowed arrows form no
//! cycle, and no two files of one folder use each other (directly or round a
//! circle). Test modules (`#[cfg(test)] mod tests`, at the end of a file) may
//! use any layer to build their fixtures and are not counted.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// `module -> modules it may use`, from the table whose header ends in `may use`.
fn layer_table() -> BTreeMap<String, BTreeSet<String>> {
    let text =
        fs::read_to_string(Path::new(ROOT).join("ARCHITECTURE.md")).expect("ARCHITECTURE.md");
    let mut rows = BTreeMap::new();
    let mut in_table = false;
    for line in text.lines() {
        let cells: Vec<&str> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(str::trim)
            .collect();
        if !line.trim_start().starts_with('|') {
            in_table = false;
            continue;
        }
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
    cell.split('`')
        .skip(1)
        .step_by(2)
        .map(|n| n.trim_end_matches('/').trim_end_matches(".rs").to_owned())
        .collect()
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

/// The code of a file: comments and the trailing test module left out.
fn code(path: &Path) -> String {
    let text = fs::read_to_string(path).expect("source");
    let mut out = String::new();
    let mut lines = text.lines().peekable();
    while let Some(line) = lines.next() {
        if line.trim() == "#[cfg(test)]"
            && lines.peek().is_some_and(|l| {
                let l = l.trim_start();
                l.starts_with("mod tests") || l.starts_with("pub(crate) mod tests")
            })
        {
            break;
        }
        out.push_str(line.split("//").next().unwrap_or(""));
        out.push('\n');
    }
    out
}

/// The names that follow `prefix` in `code` (`crate::engine::vip` -> `engine`, `vip`).
fn paths_after<'a>(code: &'a str, prefix: &str) -> Vec<Vec<&'a str>> {
    let mut found = Vec::new();
    for (at, _) in code.match_indices(prefix) {
        let before = code[..at].chars().next_back();
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue;
        }
        let rest = &code[at + prefix.len()..];
        let path: Vec<&str> = rest
            .split("::")
            .map_while(|seg| {
                let end = seg
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(seg.len());
                (end > 0).then(|| &seg[..end])
            })
            .collect();
        found.push(path);
    }
    found
}

/// The top-level module of a file under src/ (`main` for the binary).
fn top_module(relative: &Path) -> String {
    let first = relative
        .components()
        .next()
        .unwrap()
        .as_os_str()
        .to_string_lossy();
    first.trim_end_matches(".rs").to_owned()
}

#[test]
fn modules_use_only_the_layers_below_them() {
    let src = Path::new(ROOT).join("src");
    let table = layer_table();
    let mut modules = BTreeSet::new();
    let mut wrong = Vec::new();
    for file in sources(&src) {
        let relative = file.strip_prefix(&src).unwrap();
        let module = top_module(relative);
        if module == "lib" {
            continue;
        }
        modules.insert(module.clone());
        let code = code(&file);
        let prefix = if module == "main" {
            "clusterset_dns::"
        } else {
            "crate::"
        };
        let allowed = table.get(&module);
        for path in paths_after(&code, prefix) {
            let Some(used) = path.first() else { continue };
            if *used == module {
                continue;
            }
            if allowed.is_none_or(|a| !a.contains(*used)) {
                wrong.push(format!("{} uses `{used}`", relative.display()));
            }
        }
    }
    let documented: BTreeSet<String> = table.keys().cloned().collect();
    assert_eq!(
        modules, documented,
        "src/ modules vs. ARCHITECTURE.md's layer table"
    );
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "arrows ARCHITECTURE.md does not allow:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_layer_table_has_no_cycle() {
    let table = layer_table();
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
    let src = Path::new(ROOT).join("src");
    // Per folder: sibling file -> siblings it uses (`super::x`, or `crate::<folder path>::x`).
    let mut edges: BTreeMap<PathBuf, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for file in sources(&src) {
        let relative = file.strip_prefix(&src).unwrap().to_path_buf();
        let stem = file.file_stem().unwrap().to_string_lossy().into_owned();
        if stem == "mod" || stem == "lib" || stem == "main" {
            continue;
        }
        let folder = relative.parent().unwrap().to_path_buf();
        let siblings: BTreeSet<String> = fs::read_dir(file.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter_map(|p| Some(p.file_stem()?.to_string_lossy().into_owned()))
            .filter(|s| s != "mod" && *s != stem)
            .collect();
        let code = code(&file);
        let crate_prefix: String = folder
            .components()
            .map(|c| format!("{}::", c.as_os_str().to_string_lossy()))
            .collect();
        let mut used = BTreeSet::new();
        for path in paths_after(&code, "super::") {
            if let Some(first) = path.first().filter(|f| siblings.contains(**f)) {
                used.insert((*first).to_owned());
            }
        }
        for path in paths_after(&code, &format!("crate::{crate_prefix}")) {
            if let Some(first) = path.first().filter(|f| siblings.contains(**f)) {
                used.insert((*first).to_owned());
            }
        }
        edges.entry(folder).or_default().insert(stem, used);
    }
    for (folder, graph) in edges {
        let mut done = BTreeSet::new();
        while done.len() < graph.len() {
            let ready: Vec<&String> = graph
                .iter()
                .filter(|(f, uses)| {
                    !done.contains(*f)
                        && uses
                            .iter()
                            .all(|u| done.contains(u) || !graph.contains_key(u))
                })
                .map(|(f, _)| f)
                .collect();
            assert!(
                !ready.is_empty(),
                "files of src/{} use each other: {:?}",
                folder.display(),
                graph
                    .iter()
                    .filter(|(f, _)| !done.contains(*f))
                    .collect::<Vec<_>>()
            );
            done.extend(ready.into_iter().cloned());
        }
    }
}

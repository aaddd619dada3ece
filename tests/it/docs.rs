//! The documentation's links hold: every relative link in `README.md`,
//! `ARCHITECTURE.md`, `bench/README.md` and `docs/*.md` names a file or
//! folder of the repository, and where it gives a `#anchor` into a Markdown
//! file, a heading of that file produces the anchor by GitHub's rules
//! (lowercased; letters, digits, `-` and `_` kept, each space a `-`, every
//! other character dropped; a repeated heading gets `-1`, `-2`, ...).
//!
//! Links are read as CommonMark writes them: inline `[text](dest "title")`
//! and `![alt](dest)`, and reference definitions `[label]: dest`; nothing
//! inside fenced code blocks or code spans is a link or a heading. Absolute
//! links (`https:`, `mailto:` ...) are not fetched. The README also stays
//! short: it points at `docs/`, which holds the detail.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Component, Path, PathBuf};

const ROOT: &str = env!("CARGO_MANIFEST_DIR");

/// The README's length limit (issue 45: "at most ~250 lines").
const README_MAX_LINES: usize = 250;

/// One link as written: its 1-based line and its destination.
#[derive(Debug, PartialEq)]
struct Link {
    line: usize,
    dest: String,
}

/// The Markdown files whose links are checked, relative to the root.
fn checked_files() -> Vec<PathBuf> {
    let root = Path::new(ROOT);
    let mut files = vec![
        PathBuf::from("README.md"),
        PathBuf::from("ARCHITECTURE.md"),
        PathBuf::from("bench/README.md"),
    ];
    let mut docs: Vec<PathBuf> = fs::read_dir(root.join("docs"))
        .expect("docs/ exists")
        .map(|entry| entry.expect("docs/ entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "md"))
        .map(|path| {
            path.strip_prefix(root)
                .expect("under the root")
                .to_path_buf()
        })
        .collect();
    docs.sort();
    files.extend(docs);
    files
}

/// The lines of `text` outside fenced code blocks, with their 1-based
/// numbers, and code spans blanked out (so neither yields links or headings).
fn prose_lines(text: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    // The fence that opened the current code block: its character and length.
    let mut fence: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        let trimmed = line.trim_start();
        let indent = line.len() - trimmed.len();
        let run = |c: char| trimmed.chars().take_while(|&x| x == c).count();
        let opener = ['`', '~']
            .into_iter()
            .map(|c| (c, run(c)))
            .find(|&(_, n)| n >= 3);
        match (fence, opener) {
            (None, Some(open)) if indent < 4 => fence = Some(open),
            (Some((c, n)), Some((c2, n2)))
                if c == c2 && n2 >= n && trimmed[n2..].trim().is_empty() =>
            {
                fence = None
            }
            (Some(_), _) => {}
            (None, _) => out.push((i + 1, blank_code_spans(line))),
        }
    }
    out
}

/// `line` with the content of every code span (`` `x` ``, ``` ``x`` ```)
/// replaced by spaces; an unclosed backtick run is kept as text.
fn blank_code_spans(line: &str) -> String {
    let chars: Vec<char> = line.chars().collect();
    let mut out = String::with_capacity(line.len());
    let mut i = 0;
    while i < chars.len() {
        if chars[i] != '`' {
            out.push(chars[i]);
            i += 1;
            continue;
        }
        let open = chars[i..].iter().take_while(|&&c| c == '`').count();
        // The next run of exactly `open` backticks closes the span.
        let mut j = i + open;
        let mut close = None;
        while j < chars.len() {
            if chars[j] == '`' {
                let n = chars[j..].iter().take_while(|&&c| c == '`').count();
                if n == open {
                    close = Some(j);
                    break;
                }
                j += n;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                out.extend(std::iter::repeat_n(' ', j + open - i));
                i = j + open;
            }
            None => {
                out.extend(&chars[i..i + open]);
                i += open;
            }
        }
    }
    out
}

/// The links of a Markdown text.
fn links(text: &str) -> Vec<Link> {
    let mut out = Vec::new();
    for (line, prose) in prose_lines(text) {
        // Reference definition: `[label]: dest`, up to three spaces in.
        let trimmed = prose.trim_start();
        if prose.len() - trimmed.len() < 4
            && trimmed.starts_with('[')
            && let Some(end) = trimmed.find("]:")
        {
            let dest = trimmed[end + 2..].split_whitespace().next().unwrap_or("");
            if !dest.is_empty() {
                out.push(Link {
                    line,
                    dest: dest.trim_matches(['<', '>']).to_string(),
                });
            }
            continue;
        }
        // Inline links and images: `](dest)` or `](dest "title")`, with
        // balanced parentheses inside `dest`, or `](<dest>)`.
        let mut rest = prose.as_str();
        while let Some(at) = rest.find("](") {
            let after = &rest[at + 2..];
            let dest = if let Some(angled) = after.strip_prefix('<') {
                angled.split('>').next().unwrap_or("").to_string()
            } else {
                let mut depth = 0usize;
                let mut end = after.len();
                for (k, c) in after.char_indices() {
                    match c {
                        '(' => depth += 1,
                        ')' if depth == 0 => {
                            end = k;
                            break;
                        }
                        ')' => depth -= 1,
                        c if c.is_whitespace() => {
                            end = k;
                            break;
                        }
                        _ => {}
                    }
                }
                after[..end].to_string()
            };
            out.push(Link { line, dest });
            rest = after;
        }
    }
    out
}

/// The anchor GitHub gives a heading whose text (as rendered) is `text`.
fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            '-' | '_' => Some(c),
            c if c.is_alphanumeric() => Some(c),
            _ => None,
        })
        .collect()
}

/// The rendered text of an ATX heading's raw content: code spans keep their
/// text without backticks, links their text, emphasis markers go.
fn heading_text(raw: &str) -> String {
    let mut text = String::new();
    let mut rest = raw;
    // `[text](dest)` -> `text`
    while let Some(open) = rest.find('[') {
        let Some(mid) = rest[open..].find("](") else {
            break;
        };
        let Some(close) = rest[open + mid..].find(')') else {
            break;
        };
        text.push_str(&rest[..open]);
        text.push_str(&rest[open + 1..open + mid]);
        rest = &rest[open + mid + close + 1..];
    }
    text.push_str(rest);
    text.replace(['`', '*'], "")
}

/// Every anchor the headings of a Markdown text produce, in GitHub's order
/// (a repeated slug gets `-1`, `-2`, ...).
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen = BTreeSet::new();
    // Headings are read from the raw lines (outside code blocks), since a
    // code span's text counts in the anchor.
    let raw: Vec<&str> = text.lines().collect();
    for (line, _) in prose_lines(text) {
        let trimmed = raw[line - 1].trim_start();
        if raw[line - 1].len() - trimmed.len() >= 4 {
            continue;
        }
        let level = trimmed.chars().take_while(|&c| c == '#').count();
        if !(1..=6).contains(&level) {
            continue;
        }
        let content = &trimmed[level..];
        if !(content.is_empty() || content.starts_with([' ', '\t'])) {
            continue;
        }
        // An optional closing sequence of `#`s after a space.
        let mut content = content.trim();
        let stripped = content.trim_end_matches('#');
        if stripped.is_empty() || stripped.ends_with([' ', '\t']) {
            content = stripped.trim_end();
        }
        let base = slug(&heading_text(content));
        let mut anchor = base.clone();
        let mut n = 0;
        while seen.contains(&anchor) {
            n += 1;
            anchor = format!("{base}-{n}");
        }
        seen.insert(anchor);
    }
    seen
}

/// `path` with `.` and `..` resolved lexically, or None if it leaves the root.
fn normalize(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for part in path.components() {
        match part {
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            Component::Normal(p) => out.push(p),
            Component::RootDir | Component::Prefix(_) => return None,
        }
    }
    Some(out)
}

/// Whether `dest` leaves the repository: a scheme (`https:`, `mailto:`) or
/// a protocol-relative `//host`.
fn is_absolute(dest: &str) -> bool {
    if dest.starts_with("//") {
        return true;
    }
    let scheme: String = dest.chars().take_while(|&c| c != ':').collect();
    scheme.len() < dest.len()
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
        && scheme
            .chars()
            .next()
            .is_some_and(|c| c.is_ascii_alphabetic())
}

/// Decodes `%XX` escapes (a link to `a%20b.md` names `a b.md`).
fn percent_decode(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let Some(hex) = bytes.get(i + 1..i + 3)
            && let Ok(hex) = std::str::from_utf8(hex)
            && let Ok(b) = u8::from_str_radix(hex, 16)
        {
            out.push(b);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The problems of every relative link in `file` (relative to `root`),
/// one line each: `file:line: link: why`.
fn check_file(root: &Path, file: &Path) -> Vec<String> {
    let text = match fs::read_to_string(root.join(file)) {
        Ok(text) => text,
        Err(e) => return vec![format!("{}: cannot read: {e}", file.display())],
    };
    let dir = file.parent().unwrap_or(Path::new(""));
    let mut problems = Vec::new();
    for link in links(&text) {
        if link.dest.is_empty() || is_absolute(&link.dest) {
            continue;
        }
        let (path, anchor) = match link.dest.split_once('#') {
            Some((path, anchor)) => (path, Some(anchor)),
            None => (link.dest.as_str(), None),
        };
        let path = path.split('?').next().unwrap_or("");
        let problem =
            |why: String| format!("{}:{}: ({}): {why}", file.display(), link.line, link.dest);
        let target = if path.is_empty() {
            file.to_path_buf()
        } else if path.starts_with('/') {
            problems.push(problem(
                "a path from the site root; write it relative to this file".into(),
            ));
            continue;
        } else {
            match normalize(&dir.join(percent_decode(path))) {
                Some(target) => target,
                None => {
                    problems.push(problem("leaves the repository".into()));
                    continue;
                }
            }
        };
        let full = root.join(&target);
        if !full.exists() {
            problems.push(problem(format!("{} does not exist", target.display())));
            continue;
        }
        let Some(anchor) = anchor else { continue };
        if target.extension().is_none_or(|ext| ext != "md") {
            continue;
        }
        let target_text = fs::read_to_string(&full).unwrap_or_default();
        let anchor = percent_decode(anchor);
        if !anchors(&target_text).contains(&anchor) {
            problems.push(problem(format!(
                "no heading of {} has the anchor #{anchor}",
                target.display()
            )));
        }
    }
    problems
}

#[test]
fn every_relative_link_in_the_docs_resolves() {
    let root = Path::new(ROOT);
    let files = checked_files();
    assert!(
        files.iter().any(|f| f.starts_with("docs")),
        "docs/ holds no Markdown page"
    );
    let mut problems = Vec::new();
    let mut checked = 0;
    for file in &files {
        let text = fs::read_to_string(root.join(file)).unwrap_or_default();
        checked += links(&text)
            .iter()
            .filter(|l| !is_absolute(&l.dest))
            .count();
        problems.extend(check_file(root, file));
    }
    assert!(checked > 0, "no relative link found in {files:?}");
    assert!(
        problems.is_empty(),
        "{} broken link(s) in the documentation:\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[test]
fn every_docs_page_is_linked_from_the_readme() {
    let root = Path::new(ROOT);
    let readme = fs::read_to_string(root.join("README.md")).expect("README.md");
    let linked: BTreeSet<PathBuf> = links(&readme)
        .into_iter()
        .filter(|l| !is_absolute(&l.dest))
        .filter_map(|l| normalize(Path::new(l.dest.split('#').next().unwrap_or(""))))
        .collect();
    let missing: Vec<PathBuf> = checked_files()
        .into_iter()
        .filter(|f| f.starts_with("docs") && !linked.contains(f))
        .collect();
    assert!(missing.is_empty(), "README.md links no page {missing:?}");
}

#[test]
fn the_readme_stays_short() {
    let readme = fs::read_to_string(Path::new(ROOT).join("README.md")).expect("README.md");
    let lines = readme.lines().count();
    assert!(
        lines <= README_MAX_LINES,
        "README.md has {lines} lines, more than {README_MAX_LINES}: move detail into docs/"
    );
}

#[test]
fn anchors_follow_githubs_rules() {
    let text = "# clusterset-dns\n\
                ## Locality: `trafficDistribution: PreferClose`\n\
                ### Zone transfer: standard secondaries in front of clusterset-dns\n\
                ## DNS over TLS ##\n\
                ## [Kubernetes](kubernetes.md) mode\n\
                ## Notes\n\
                ## Notes\n\
                ```yaml\n\
                # knot.conf\n\
                ```\n\
                #notaheading\n\
                ## Flags: `--tcp-max-connections` and `-o text|json`\n\
                ## What **it** answers (RFC 8020) & why\n";
    let got = anchors(text);
    let want: BTreeSet<String> = [
        "clusterset-dns",
        "locality-trafficdistribution-preferclose",
        "zone-transfer-standard-secondaries-in-front-of-clusterset-dns",
        "dns-over-tls",
        "kubernetes-mode",
        "notes",
        "notes-1",
        "flags---tcp-max-connections-and--o-textjson",
        "what-it-answers-rfc-8020--why",
    ]
    .into_iter()
    .map(String::from)
    .collect();
    assert_eq!(got, want);
}

#[test]
fn links_outside_code_are_found_and_broken_ones_reported() {
    let text = "See [ops](docs/operations.md#metrics) and ![img](a(b).png \"t\").\n\
                `[not](a-link.md)` and [`code` text](<x y.md>)\n\
                ```\n\
                [not](in-a-fence.md)\n\
                ```\n\
                [ref]: docs/dns.md\n\
                [web](https://example.org/x.md)\n";
    let dests: Vec<(usize, String)> = links(text).into_iter().map(|l| (l.line, l.dest)).collect();
    assert_eq!(
        dests,
        [
            (1, "docs/operations.md#metrics"),
            (1, "a(b).png"),
            (2, "x y.md"),
            (6, "docs/dns.md"),
            (7, "https://example.org/x.md"),
        ]
        .map(|(line, dest)| (line, dest.to_string()))
    );

    let dir = tempfile::tempdir().expect("temporary directory");
    fs::create_dir(dir.path().join("docs")).expect("docs/");
    fs::write(dir.path().join("docs/a.md"), "# A page\n## Its part\n").expect("a.md");
    fs::write(
        dir.path().join("README.md"),
        "[ok](docs/a.md#its-part) [self](#top) [gone](docs/b.md) \
         [bad](docs/a.md#no-such-part) [up](../outside.md) [dir](docs)\n# Top\n",
    )
    .expect("README.md");
    let problems = check_file(dir.path(), Path::new("README.md"));
    assert_eq!(problems.len(), 3, "{problems:#?}");
    assert!(
        problems[0].contains("docs/b.md does not exist"),
        "{problems:#?}"
    );
    assert!(problems[1].contains("no heading of docs/a.md has the anchor #no-such-part"));
    assert!(problems[2].contains("leaves the repository"));
}

//! Markdown tables on stdout, raw numbers in `$WORK`.

use std::path::Path;
use std::time::Duration;

/// One markdown table, printed when complete.
pub struct Table {
    title: String,
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(title: &str, header: &[&str]) -> Self {
        Self {
            title: title.to_owned(),
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        assert_eq!(cells.len(), self.header.len(), "{}: a full row", self.title);
        self.rows.push(cells);
    }

    pub fn print(&self) {
        println!("\n### {}\n", self.title);
        println!("| {} |", self.header.join(" | "));
        println!("|{}", "---|".repeat(self.header.len()));
        for row in &self.rows {
            println!("| {} |", row.join(" | "));
        }
    }
}

/// Seconds with one decimal, or "> limit" when a wait ran out.
pub fn secs(d: Option<Duration>, limit: Duration) -> String {
    match d {
        Some(d) => format!("{:.1}", d.as_secs_f64()),
        None => format!("> {}", limit.as_secs()),
    }
}

pub fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1u64 << 20) as f64)
}

/// A count per minute over `over`.
pub fn per_min(n: u64, over: Duration) -> String {
    format!("{:.1}", n as f64 * 60.0 / over.as_secs_f64())
}

/// Writes `value` as pretty JSON to `path`.
pub fn save(path: &Path, value: &impl serde::Serialize) {
    let file = std::fs::File::create(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::to_writer_pretty(file, value).expect("raw results written");
}

//! `explain NAME [TYPE]` without a server: the assembly `serve` would serve
//! (`runtime/assembly.rs`) fed the source once, read only (the manifest
//! directory and the VIP state file, never writing it, or the API servers),
//! and the question explained on its index.

use crate::cli::{ExplainArgs, Format};
use crate::commands::snapshot;
use crate::runtime::assembly::assemble;

/// The explanation of `args`' question, as text or JSON.
pub async fn render(args: &ExplainArgs) -> anyhow::Result<String> {
    let (name, rtype) = crate::explain::question(&args.name, args.rtype.as_deref())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let snapshot = snapshot::take(assemble(&args.serve).await?).await?;
    let explanation = crate::explain::explain(snapshot.engine(), snapshot.index(), &name, rtype);
    Ok(match args.output {
        Format::Json => serde_json::to_string_pretty(&explanation)? + "\n",
        Format::Text => crate::explain::text::render_text(&explanation),
    })
}

//! `explain NAME [TYPE]` without a server: loads the manifest directory the
//! way `status` does (reading the VIP state file, never writing it), or reads
//! the API servers once in Kubernetes mode, builds the index a server would
//! serve, and explains the question on it.

use crate::cli::{ExplainArgs, Format, SourceKind};
use crate::commands::snapshot;
use crate::commands::status::load_manifests;
use crate::engine::Engine;
use crate::index::Index;
use crate::index::serial;

/// The explanation of `args`' question, as text or JSON.
pub async fn render(args: &ExplainArgs) -> anyhow::Result<String> {
    let (name, rtype) = crate::explain::question(&args.name, args.rtype.as_deref())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let serve = &args.serve;
    let explain = |engine: &Engine| {
        let index = Index::new(
            serve.zone.clone(),
            serve.ttl,
            serve.cluster_targeting,
            serial::now(),
        );
        for (key, aggregate) in engine.aggregates() {
            index.update(key, aggregate.import.clone());
        }
        index.commit();
        index.set_synced();
        crate::explain::explain(engine, &index, &name, rtype)
    };
    let explanation = match serve.kubernetes.source {
        SourceKind::Manifests => explain(load_manifests(&serve.clusterset)?.0.engine()),
        SourceKind::Kubernetes => explain(
            &snapshot::take(&serve.kubernetes, &serve.clusterset)
                .await?
                .engine,
        ),
    };
    Ok(match args.output {
        Format::Json => serde_json::to_string_pretty(&explanation)? + "\n",
        Format::Text => crate::explain::render_text(&explanation),
    })
}

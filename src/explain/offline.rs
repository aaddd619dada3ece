//! `explain NAME [TYPE]` without a server: loads the manifest directory the
//! way `serve` does (reading the VIP state file, never writing it), builds
//! the index a server would serve, and explains the question on it.

use std::collections::HashSet;

use crate::cli::{ExplainArgs, Format, SourceKind};
use crate::index::Index;
use crate::serve::{Reconciler, unix_serial};
use crate::source::manifests::ManifestSource;

/// The explanation of `args`' question, as text or JSON.
pub fn render(args: &ExplainArgs) -> anyhow::Result<String> {
    let (name, rtype) = super::question(&args.name, args.rtype.as_deref())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    let serve = &args.serve;
    anyhow::ensure!(
        serve.kubernetes.source == SourceKind::Manifests,
        "explain reads the manifest directory; in Kubernetes mode ask the running server: \
         curl 'http://<pod>:9153/debug/explain?name={name}&type={rtype}'"
    );
    let manifests = &serve.clusterset.manifests;
    anyhow::ensure!(
        manifests.is_dir(),
        "manifest directory {} does not exist (see --manifests)",
        manifests.display()
    );
    let mut reconciler = Reconciler::new(&serve.clusterset, None)?;
    let mut source = ManifestSource::new(manifests);
    reconciler.apply_initial(source.rescan(&HashSet::new()));
    let index = Index::new(
        serve.zone.clone(),
        serve.ttl,
        serve.cluster_targeting,
        unix_serial(),
    );
    for (key, aggregate) in reconciler.engine().aggregates() {
        index.update(key, aggregate.import.clone());
    }
    index.commit();
    index.set_synced();
    let explanation = super::explain(reconciler.engine(), &index, &name, rtype);
    Ok(match args.output {
        Format::Json => serde_json::to_string_pretty(&explanation)? + "\n",
        Format::Text => super::render_text(&explanation),
    })
}

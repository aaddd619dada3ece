//! The manifest directory's layout: which files are read, in which formats.

use hickory_proto::rr::RecordType::A;
use serde_json::json;

use crate::common::*;

fn exported(name: &str, ip: &str) -> Vec<Doc> {
    let service = headless("shop", name, &["IPv4"]);
    let endpoints = slice("shop", &format!("{name}-1"), name, &[ep(ip)]);
    vec![service.export(), service, endpoints]
}

fn json_stream(docs: &[Doc]) -> String {
    let texts: Vec<String> = docs.iter().map(|d| d.0.to_string()).collect();
    texts.join("\n")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn yaml_yml_json_lists_and_nested_folders_are_read() {
    let cs = Clusterset::new();
    cs.write("east", "a.yaml", &exported("a", "10.1.0.1"));
    cs.write("east", "b.yml", &exported("b", "10.1.0.2"));
    cs.write_text("east", "c.json", &json_stream(&exported("c", "10.1.0.3")));
    cs.write("east", "team/nested/d.yaml", &exported("d", "10.1.0.4"));
    let items: Vec<_> = exported("e", "10.1.0.5").into_iter().map(|d| d.0).collect();
    let list = Doc(json!({"apiVersion": "v1", "kind": "List", "items": items}));
    cs.write("east", "e.yaml", &[list]);
    let server = start(cs.dir(), &[]).await;
    let served = [("a", "10.1.0.1"), ("b", "10.1.0.2"), ("c", "10.1.0.3")];
    let nested = [("d", "10.1.0.4"), ("e", "10.1.0.5")];
    for (name, ip) in served.into_iter().chain(nested) {
        let name = svc(&format!("{name}.shop"));
        assert_eq!(resolve(server.addr, &name, A).await, ips([ip]), "{name}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_extensions_hidden_and_top_level_files_are_skipped() {
    let cs = Clusterset::new();
    cs.write("east", "a.yaml", &exported("a", "10.1.0.1"));
    cs.write("east", "b.txt", &exported("b", "10.1.0.2"));
    cs.write("east", ".c.yaml", &exported("c", "10.1.0.3"));
    cs.write("east", ".hidden/d.yaml", &exported("d", "10.1.0.4"));
    cs.write_text(".", "e.yaml", &yaml(&exported("e", "10.1.0.5")));
    let server = start(cs.dir(), &[]).await;
    assert_eq!(
        resolve(server.addr, &svc("a.shop"), A).await,
        ips(["10.1.0.1"])
    );
    for name in ["b", "c", "d", "e"] {
        let name = svc(&format!("{name}.shop"));
        assert_eq!(
            resolve(server.addr, &name, A).await,
            Outcome::NxDomain,
            "{name}"
        );
    }
    let status = status_json(cs.dir(), &[]);
    assert!(problems(&status).is_empty(), "{status:#}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_file_at_startup_is_a_problem_and_the_rest_is_served() {
    let cs = Clusterset::new();
    cs.write("east", "a.yaml", &exported("a", "10.1.0.1"));
    cs.write_text(
        "east",
        "broken.yaml",
        "kind: Service\nmetadata: [unclosed\n",
    );
    let server = start(cs.dir(), &[]).await;
    assert_eq!(
        resolve(server.addr, &svc("a.shop"), A).await,
        ips(["10.1.0.1"])
    );
    let listed = problems(&status_json(cs.dir(), &[]));
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert!(listed[0].contains("broken.yaml"), "{listed:?}");
}

/// Issue: names that are not DNS labels. A Service whose name (RFC 1035
/// §2.3.1) or namespace (RFC 1123 §2.1) cannot be a DNS label is a problem
/// naming the file, document and field; its export is `Valid=False
/// NoService` and never gets a VIP or an answer, however long the name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn services_whose_names_are_not_dns_labels_are_problems_and_never_served() {
    let cs = Clusterset::new();
    let long = "a".repeat(300);
    let bad = [
        ("shop", "Bad_Name"),
        ("Bad_NS", "web"),
        ("shop", long.as_str()),
    ];
    let mut docs = exported("good", "10.1.0.1");
    for (ns, name) in bad {
        let service = cluster_ip(ns, name, &["10.0.0.9"]);
        docs.push(service.export());
        docs.push(service);
    }
    cs.write("east", "a.yaml", &docs);
    let server = start(cs.dir(), &[]).await;
    assert_eq!(
        resolve(server.addr, &svc("good.shop"), A).await,
        ips(["10.1.0.1"])
    );
    let status = status_json(cs.dir(), &[]);
    let listed = problems(&status);
    assert_eq!(listed.len(), 3, "{listed:?}");
    for (ns, name) in bad {
        let field = if ns == "shop" {
            "metadata.name"
        } else {
            "metadata.namespace"
        };
        assert!(
            listed.iter().any(|p| p.contains("a.yaml")
                && p.contains(&format!("Service {ns}/{name}"))
                && p.contains(field)
                && p.contains("DNS label")),
            "{ns}/{name}: {listed:?}"
        );
        assert!(import(&status, ns, name).is_none(), "{ns}/{name} imported");
        assert_eq!(
            export_condition(&status, ns, name, "east", "Valid"),
            cond("False", "NoService")
        );
    }
    let dns_name = svc("bad_name.shop");
    assert_eq!(resolve(server.addr, &dns_name, A).await, Outcome::NxDomain);
}

//! `GET /debug/explain?name=NAME&type=TYPE[&output=text]` on the operations
//! listener: the explanation of a question from the running server's own
//! engine and index, as JSON (or text). Read only.

use hyper::StatusCode;

use crate::explain::shared::Published;
use crate::index::Index;

/// A reply: its status, content type and body.
pub(crate) type Reply = (StatusCode, &'static str, String);

/// The response to one request with query string `query`.
pub(crate) fn reply(query: Option<&str>, published: &Published, index: &Index) -> Reply {
    let (mut name, mut rtype, mut text) = (None, None, false);
    for (key, value) in form_urlencoded::parse(query.unwrap_or_default().as_bytes()) {
        match key.as_ref() {
            "name" => name = Some(value.into_owned()),
            "type" => rtype = Some(value.into_owned()),
            "output" => text = value == "text",
            _ => {}
        }
    }
    let Some(name) = name else {
        return bad_request("missing ?name=NAME (and optionally &type=TYPE, &output=text)".into());
    };
    let (name, rtype) = match crate::explain::question(&name, rtype.as_deref()) {
        Ok(question) => question,
        Err(why) => return bad_request(why),
    };
    let Some(explanation) = published.explain(index, &name, rtype) else {
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            "text/plain",
            "not loaded yet: the source has not built its state\n".into(),
        );
    };
    if text {
        return (
            StatusCode::OK,
            "text/plain",
            crate::explain::text::render_text(&explanation),
        );
    }
    match serde_json::to_string_pretty(&explanation) {
        Ok(json) => (StatusCode::OK, "application/json", json + "\n"),
        Err(e) => (
            StatusCode::INTERNAL_SERVER_ERROR,
            "text/plain",
            format!("cannot encode the explanation: {e}\n"),
        ),
    }
}

fn bad_request(why: String) -> Reply {
    (StatusCode::BAD_REQUEST, "text/plain", why + "\n")
}

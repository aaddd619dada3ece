//! Label selectors (`=`, `==`, `!=`, `in`, `notin`, `key`, `!key`, `>`, `<`) and
//! field selectors (`=`, `==`, `!=` on supported field paths), parsed the way
//! kube-apiserver parses the `labelSelector` / `fieldSelector` query strings.

use serde_json::Value;

#[derive(Clone, Debug, PartialEq)]
enum Op {
    Eq(String),
    NotEq(String),
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    NotExists,
    Gt(i64),
    Lt(i64),
}

/// A parsed label selector; the empty selector matches everything.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LabelSelector(Vec<(String, Op)>);

/// Splits on commas that are not inside parentheses.
fn split_top_level(s: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut depth = 0i32;
    let mut start = 0;
    for (i, c) in s.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn valid_key(k: &str) -> bool {
    !k.is_empty()
        && k.chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.' | '/'))
}

fn valid_value(v: &str) -> bool {
    v.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

impl LabelSelector {
    pub fn parse(s: &str) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in split_top_level(s) {
            let term = term.trim();
            let bad = || format!("unable to parse requirement: {term:?}");
            if term.is_empty() {
                return Err(bad());
            }
            let (key, op) = if let Some(k) = term.strip_prefix('!') {
                (k.trim().to_string(), Op::NotExists)
            } else if let Some((k, v)) = term.split_once("!=") {
                (k.trim().to_string(), Op::NotEq(v.trim().to_string()))
            } else if let Some((k, v)) = term.split_once("==") {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = term.split_once('=') {
                (k.trim().to_string(), Op::Eq(v.trim().to_string()))
            } else if let Some((k, v)) = term.split_once('>') {
                let n = v.trim().parse().map_err(|_| bad())?;
                (k.trim().to_string(), Op::Gt(n))
            } else if let Some((k, v)) = term.split_once('<') {
                let n = v.trim().parse().map_err(|_| bad())?;
                (k.trim().to_string(), Op::Lt(n))
            } else if let Some(open) = term.find('(') {
                let head = term[..open].trim();
                let list = term[open + 1..].strip_suffix(')').ok_or_else(bad)?;
                let values: Vec<String> = list
                    .split(',')
                    .map(|v| v.trim().to_string())
                    .filter(|v| !v.is_empty())
                    .collect();
                let (k, opword) = head.rsplit_once(char::is_whitespace).ok_or_else(bad)?;
                match opword {
                    "in" => (k.trim().to_string(), Op::In(values)),
                    "notin" => (k.trim().to_string(), Op::NotIn(values)),
                    _ => return Err(bad()),
                }
            } else {
                (term.to_string(), Op::Exists)
            };
            if !valid_key(&key) {
                return Err(format!("invalid label key {key:?}"));
            }
            let values_ok = match &op {
                Op::Eq(v) | Op::NotEq(v) => valid_value(v),
                Op::In(vs) | Op::NotIn(vs) => vs.iter().all(|v| valid_value(v)),
                _ => true,
            };
            if !values_ok {
                return Err(bad());
            }
            reqs.push((key, op));
        }
        Ok(Self(reqs))
    }

    /// Whether an object's `metadata.labels` satisfy every requirement.
    pub fn matches(&self, obj: &Value) -> bool {
        let labels = obj.pointer("/metadata/labels").and_then(Value::as_object);
        let get = |k: &str| labels.and_then(|l| l.get(k)).and_then(Value::as_str);
        self.0.iter().all(|(k, op)| {
            let v = get(k);
            match op {
                Op::Eq(want) => v == Some(want.as_str()),
                Op::NotEq(want) => v != Some(want.as_str()),
                Op::In(set) => v.is_some_and(|v| set.iter().any(|s| s == v)),
                Op::NotIn(set) => !v.is_some_and(|v| set.iter().any(|s| s == v)),
                Op::Exists => v.is_some(),
                Op::NotExists => v.is_none(),
                Op::Gt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x > *n),
                Op::Lt(n) => v
                    .and_then(|v| v.parse::<i64>().ok())
                    .is_some_and(|x| x < *n),
            }
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// A parsed field selector.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses `path=value,path!=value`; only `metadata.name`, `metadata.namespace`
    /// and `allowed` paths are accepted (others: "field label not supported").
    pub fn parse(s: &str, allowed: &[String]) -> Result<Self, String> {
        let mut reqs = Vec::new();
        if s.trim().is_empty() {
            return Ok(Self(reqs));
        }
        for term in s.split(',') {
            let term = term.trim();
            let (path, eq, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(format!(
                    "invalid selector: '{term}'; can't understand '{term}'"
                ));
            };
            let path = path.trim();
            if path != "metadata.name"
                && path != "metadata.namespace"
                && !allowed.iter().any(|a| a == path)
            {
                return Err(format!("field label not supported: {path}"));
            }
            reqs.push((path.to_string(), eq, value.trim().to_string()));
        }
        Ok(Self(reqs))
    }

    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(path, eq, want)| {
            let mut cur = Some(obj);
            for part in path.split('.') {
                cur = cur.and_then(|c| c.get(part));
            }
            let got = match cur {
                Some(Value::String(s)) => s.clone(),
                Some(Value::Null) | None => String::new(),
                Some(other) => other.to_string(),
            };
            (got == *want) == *eq
        })
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Label + field selector + namespace restriction of one list or watch.
#[derive(Clone, Debug, Default)]
pub struct Filter {
    pub namespace: Option<String>,
    pub labels: LabelSelector,
    pub fields: FieldSelector,
}

impl Filter {
    /// Whether every object of the namespace matches (no selector).
    pub fn selects_all(&self) -> bool {
        self.labels.is_empty() && self.fields.is_empty()
    }

    pub fn matches(&self, obj: &Value) -> bool {
        if let Some(ns) = &self.namespace
            && obj.pointer("/metadata/namespace").and_then(Value::as_str) != Some(ns.as_str())
        {
            return false;
        }
        self.labels.matches(obj) && self.fields.matches(obj)
    }
}

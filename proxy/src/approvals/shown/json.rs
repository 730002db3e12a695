//! JSON read the way a hostile body needs: every key kept, in order, even
//! one sent twice (`serde_json::Value` keeps only the last, and servers
//! differ on which one counts), then flattened to one field per value.

use std::collections::HashMap;
use std::fmt;

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};

/// A parsed JSON value, objects as ordered pairs.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Node {
    Null,
    Bool(bool),
    Number(String),
    Str(String),
    Array(Vec<Self>),
    Object(Vec<(String, Self)>),
}

impl<'de> Deserialize<'de> for Node {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(NodeVisitor)
    }
}

struct NodeVisitor;

impl<'de> Visitor<'de> for NodeVisitor {
    type Value = Node;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E>(self) -> Result<Node, E> {
        Ok(Node::Null)
    }
    fn visit_bool<E>(self, v: bool) -> Result<Node, E> {
        Ok(Node::Bool(v))
    }
    fn visit_i64<E>(self, v: i64) -> Result<Node, E> {
        Ok(Node::Number(v.to_string()))
    }
    fn visit_u64<E>(self, v: u64) -> Result<Node, E> {
        Ok(Node::Number(v.to_string()))
    }
    fn visit_f64<E>(self, v: f64) -> Result<Node, E> {
        Ok(Node::Number(v.to_string()))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Node, E> {
        Ok(Node::Str(v.to_owned()))
    }
    fn visit_string<E>(self, v: String) -> Result<Node, E> {
        Ok(Node::Str(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Node, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Node::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Node, A::Error> {
        let mut pairs = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Node>()? {
            pairs.push((key, value));
        }
        Ok(Node::Object(pairs))
    }
}

/// Parse a whole body (nothing after the value). Nesting deeper than
/// serde_json's limit (128) is an error, and the body is shown as text.
pub(super) fn parse(body: &[u8]) -> Result<Node, serde_json::Error> {
    serde_json::from_slice(body)
}

/// One leaf of the tree: its path (`items[0].price`, `a["odd key"]`), its
/// value, and whether a key on its path was sent twice in its object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Leaf {
    pub path: String,
    pub value: String,
    pub kind: super::ValueKind,
    pub duplicate: bool,
}

/// Every leaf, in the body's order; `visit` returns false to stop early
/// (the bound is reached). Keys are compared without case for duplicates
/// too: some servers match them that way.
pub(super) fn flatten(node: &Node, visit: &mut dyn FnMut(Leaf) -> bool) {
    walk(node, String::new(), false, visit);
}

fn walk(node: &Node, path: String, duplicate: bool, visit: &mut dyn FnMut(Leaf) -> bool) -> bool {
    use super::ValueKind as K;
    let leaf = |value: String, kind| Leaf {
        path: if path.is_empty() {
            "(body)".to_owned()
        } else {
            path.clone()
        },
        value,
        kind,
        duplicate,
    };
    match node {
        Node::Null => visit(leaf("null".into(), K::Null)),
        Node::Bool(b) => visit(leaf(b.to_string(), K::Bool)),
        Node::Number(n) => visit(leaf(n.clone(), K::Number)),
        Node::Str(s) => visit(leaf(s.clone(), K::String)),
        Node::Array(items) if items.is_empty() => visit(leaf("[]".into(), K::Empty)),
        Node::Object(pairs) if pairs.is_empty() => visit(leaf("{}".into(), K::Empty)),
        Node::Array(items) => items
            .iter()
            .enumerate()
            .all(|(i, item)| walk(item, format!("{path}[{i}]"), duplicate, visit)),
        Node::Object(pairs) => {
            // Counted once per object: a 1 MiB object can hold 100,000 keys,
            // and comparing each with every other would hold the proxy.
            let folded: Vec<String> = pairs.iter().map(|(k, _)| k.to_lowercase()).collect();
            let mut counts: HashMap<&str, usize> = HashMap::with_capacity(folded.len());
            for key in &folded {
                *counts.entry(key.as_str()).or_default() += 1;
            }
            pairs.iter().zip(&folded).all(|((key, value), folded)| {
                let twice = counts[folded.as_str()] > 1;
                walk(value, join(&path, key), duplicate || twice, visit)
            })
        }
    }
}

/// `a.b` for a plain key, `a["x.y"]` (JSON-quoted) for any other, so that
/// no key can pass for a path of two.
fn join(path: &str, key: &str) -> String {
    let plain = !key.is_empty()
        && key
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    match (plain, path.is_empty()) {
        (true, true) => key.to_owned(),
        (true, false) => format!("{path}.{key}"),
        (false, _) => {
            let quoted = serde_json::to_string(key).unwrap_or_default();
            format!("{path}[{quoted}]")
        }
    }
}

/// The top-level keys of an object body.
pub(super) fn top_level(node: &Node) -> impl Iterator<Item = (&str, &Node)> {
    let pairs = match node {
        Node::Object(pairs) => pairs.as_slice(),
        _ => &[],
    };
    pairs.iter().map(|(k, v)| (k.as_str(), v))
}

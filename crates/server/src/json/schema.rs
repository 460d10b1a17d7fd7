//! JSON-schema subset compiled to an arena the byte machine walks.
//!
//! Key design choice: everything a machine state refers to is an index into
//! [`Compiled`], so a state is a small `Vec` of `Copy` frames and cloning it
//! per trie node (mask computation) is one allocation. Supported: `type`
//! object (properties in key order, `required`), array (`items`,
//! `minItems`, `maxItems`), string, number, integer, boolean, null, type unions,
//! `enum`, `const`, `anyOf`/`oneOf` (first alternative whose first byte fits),
//! local `$ref` to `#/$defs/..` or `#/definitions/..`. Anything else is "any
//! JSON value".

use serde_json::Value;

/// Index of a node in [`Compiled::nodes`].
pub type NodeId = u32;
/// Index of a literal set in [`Compiled::choices`].
pub type ChoiceId = u32;

/// The node every compile starts with: any JSON value.
pub const ANY: NodeId = 0;
/// Literal set `true`, `false`, `null`.
pub const KEYWORDS: ChoiceId = 0;

/// One schema node.
#[derive(Clone, Debug, PartialEq)]
pub enum Node {
    /// Any JSON value.
    Any,
    /// An object with known properties, emitted in key (sorted) order.
    Object {
        /// `(key literal choice index, value node, required)` per property;
        /// the literal is `"key":` in `keys`.
        props: Vec<(NodeId, bool)>,
        /// The key literals (`"name":`), one per property, same order.
        keys: ChoiceId,
    },
    /// Any object (no `properties`).
    AnyObject,
    /// An array.
    Array {
        /// Item schema.
        item: NodeId,
        /// Fewest items.
        min: u32,
        /// Most items.
        max: u32,
    },
    /// A string.
    Str,
    /// A number (`integer`: no fraction or exponent).
    Num {
        /// Integers only.
        integer: bool,
    },
    /// One of these literal JSON texts.
    Choice(ChoiceId),
    /// The first alternative whose first byte fits.
    AnyOf(Vec<NodeId>),
}

/// A compiled schema.
#[derive(Clone, Debug)]
pub struct Compiled {
    /// Nodes; `nodes[0]` is [`Node::Any`].
    pub nodes: Vec<Node>,
    /// Literal sets; `choices[0]` is `true`/`false`/`null`.
    pub choices: Vec<Vec<Vec<u8>>>,
    /// The root node.
    pub root: NodeId,
}

/// Most alternatives one literal set may hold (a 64-bit alive mask).
pub const MAX_CHOICES: usize = 64;

impl Compiled {
    /// `{"type":"object"}`: any JSON object.
    pub fn any_object() -> Compiled {
        let mut c = Compiled::empty();
        c.root = c.push(Node::AnyObject);
        c
    }

    /// Compile a JSON schema. Errors name what is unsupported or malformed.
    pub fn from_schema(schema: &Value) -> Result<Compiled, String> {
        let mut c = Compiled::empty();
        c.root = c.compile(schema, schema, 0)?;
        Ok(c)
    }

    fn empty() -> Compiled {
        Compiled {
            nodes: vec![Node::Any],
            choices: vec![vec![b"true".to_vec(), b"false".to_vec(), b"null".to_vec()]],
            root: ANY,
        }
    }

    fn push(&mut self, n: Node) -> NodeId {
        self.nodes.push(n);
        (self.nodes.len() - 1) as NodeId
    }

    fn push_choice(&mut self, lits: Vec<Vec<u8>>) -> Result<ChoiceId, String> {
        if lits.is_empty() {
            return Err("an empty enum admits no value".into());
        }
        if lits.len() > MAX_CHOICES {
            return Err(format!(
                "at most {MAX_CHOICES} enum values or properties are supported"
            ));
        }
        self.choices.push(lits);
        Ok((self.choices.len() - 1) as ChoiceId)
    }

    fn compile(&mut self, s: &Value, root: &Value, depth: usize) -> Result<NodeId, String> {
        if depth > 32 {
            return Err("schema nesting deeper than 32 (recursive $ref?)".into());
        }
        let Some(obj) = s.as_object() else {
            // `true` or a non-object schema: anything.
            return Ok(ANY);
        };
        if let Some(r) = obj.get("$ref").and_then(Value::as_str) {
            let target = resolve_ref(root, r).ok_or_else(|| format!("cannot resolve $ref {r}"))?;
            return self.compile(target, root, depth + 1);
        }
        if let Some(v) = obj.get("const") {
            let id = self.push_choice(vec![v.to_string().into_bytes()])?;
            return Ok(self.push(Node::Choice(id)));
        }
        if let Some(vals) = obj.get("enum") {
            let vals = vals.as_array().ok_or("enum must be an array")?;
            let id = self.push_choice(vals.iter().map(|v| v.to_string().into_bytes()).collect())?;
            return Ok(self.push(Node::Choice(id)));
        }
        for key in ["anyOf", "oneOf"] {
            if let Some(alts) = obj.get(key).and_then(Value::as_array) {
                let ids = alts
                    .iter()
                    .map(|a| self.compile(a, root, depth + 1))
                    .collect::<Result<Vec<_>, _>>()?;
                return Ok(self.push(Node::AnyOf(ids)));
            }
        }
        match obj.get("type") {
            Some(Value::String(t)) => self.compile_type(t, obj, root, depth),
            Some(Value::Array(ts)) => {
                let mut ids = Vec::new();
                for t in ts {
                    let t = t.as_str().ok_or("type entries must be strings")?;
                    ids.push(self.compile_type(t, obj, root, depth)?);
                }
                Ok(self.push(Node::AnyOf(ids)))
            }
            Some(_) => Err("type must be a string or an array of strings".into()),
            None if obj.contains_key("properties") => self.compile_type("object", obj, root, depth),
            None if obj.contains_key("items") => self.compile_type("array", obj, root, depth),
            None => Ok(ANY),
        }
    }

    fn compile_type(
        &mut self,
        t: &str,
        obj: &serde_json::Map<String, Value>,
        root: &Value,
        depth: usize,
    ) -> Result<NodeId, String> {
        let node = match t {
            "string" => Node::Str,
            "number" => Node::Num { integer: false },
            "integer" => Node::Num { integer: true },
            "boolean" => Node::Choice(self.push_choice(vec![b"true".to_vec(), b"false".to_vec()])?),
            "null" => Node::Choice(self.push_choice(vec![b"null".to_vec()])?),
            "array" => {
                let item = match obj.get("items") {
                    Some(i) => self.compile(i, root, depth + 1)?,
                    None => ANY,
                };
                let num = |k: &str, d: u32| {
                    obj.get(k)
                        .and_then(Value::as_u64)
                        .map_or(d, |v| v.min(u32::MAX as u64) as u32)
                };
                let (min, max) = (num("minItems", 0), num("maxItems", u32::MAX));
                if min > max {
                    return Err("minItems is greater than maxItems".into());
                }
                Node::Array { item, min, max }
            }
            "object" => match obj.get("properties").and_then(Value::as_object) {
                None => Node::AnyObject,
                Some(props) => {
                    let required: Vec<&str> = obj
                        .get("required")
                        .and_then(Value::as_array)
                        .map(|r| r.iter().filter_map(Value::as_str).collect())
                        .unwrap_or_default();
                    let mut lits = Vec::new();
                    let mut list = Vec::new();
                    for (k, v) in props {
                        lits.push(format!("{}:", Value::from(k.as_str())).into_bytes());
                        let id = self.compile(v, root, depth + 1)?;
                        list.push((id, required.contains(&k.as_str())));
                    }
                    if lits.is_empty() {
                        Node::AnyObject
                    } else {
                        let keys = self.push_choice(lits)?;
                        Node::Object { props: list, keys }
                    }
                }
            },
            other => return Err(format!("unsupported schema type `{other}`")),
        };
        Ok(self.push(node))
    }
}

fn resolve_ref<'a>(root: &'a Value, r: &str) -> Option<&'a Value> {
    let path = r.strip_prefix("#/")?;
    path.split('/').try_fold(root, |v, seg| {
        v.get(seg.replace("~1", "/").replace("~0", "~"))
    })
}

//! The JSON constraint as a [`LogitMask`]: a token trie walked with the machine.
//!
//! Key design choice: the vocabulary is arranged once per resident model as a
//! byte trie; each step walks it depth-first with a cloned machine state and
//! prunes a whole subtree at the first refused byte, so the cost follows the
//! number of viable prefixes, not the vocabulary size times token length.

use std::sync::Arc;

use favlo_pipeline::{LogitMask, PipelineError, TokenVocab};

use super::machine::Machine;
use super::schema::Compiled;

#[derive(Debug, Default)]
struct TrieNode {
    children: Vec<(u8, u32)>,
    tokens: Vec<u32>,
}

/// A vocabulary's text tokens as a byte trie, plus its end ids.
#[derive(Debug)]
pub struct TokenTrie {
    nodes: Vec<TrieNode>,
    eos: Vec<u32>,
}

impl TokenTrie {
    /// Build from a vocabulary; special and empty tokens are left out.
    pub fn new(vocab: &TokenVocab) -> TokenTrie {
        let mut nodes = vec![TrieNode::default()];
        let mut special = vec![false; vocab.tokens.len()];
        for &id in vocab.special.iter().chain(&vocab.eos) {
            if let Some(s) = special.get_mut(id as usize) {
                *s = true;
            }
        }
        for (id, bytes) in vocab.tokens.iter().enumerate() {
            if bytes.is_empty() || special[id] {
                continue;
            }
            let mut at = 0usize;
            for &b in bytes {
                at = match nodes[at].children.iter().find(|(cb, _)| *cb == b) {
                    Some(&(_, child)) => child as usize,
                    None => {
                        nodes.push(TrieNode::default());
                        let child = nodes.len() - 1;
                        nodes[at].children.push((b, child as u32));
                        child
                    }
                };
            }
            nodes[at].tokens.push(id as u32);
        }
        TokenTrie {
            nodes,
            eos: vocab.eos.clone(),
        }
    }

    fn visit(&self, node: usize, state: &Machine, c: &Compiled, allowed: &mut [bool]) {
        for &(b, child) in &self.nodes[node].children {
            let mut s = state.clone();
            if s.feed(c, b) {
                for &t in &self.nodes[child as usize].tokens {
                    if let Some(a) = allowed.get_mut(t as usize) {
                        *a = true;
                    }
                }
                self.visit(child as usize, &s, c, allowed);
            }
        }
    }
}

/// One generation's JSON constraint.
pub struct JsonMask {
    schema: Arc<Compiled>,
    trie: Arc<TokenTrie>,
    state: Machine,
    token_bytes: Arc<TokenVocab>,
}

impl JsonMask {
    /// A fresh constraint over `vocab` (with its prebuilt `trie`).
    pub fn new(schema: Arc<Compiled>, trie: Arc<TokenTrie>, vocab: Arc<TokenVocab>) -> JsonMask {
        let state = Machine::new(&schema);
        JsonMask {
            schema,
            trie,
            state,
            token_bytes: vocab,
        }
    }
}

impl LogitMask for JsonMask {
    fn allowed(&mut self, allowed: &mut [bool]) -> Result<(), PipelineError> {
        allowed.fill(false);
        if self.state.is_complete() {
            for &e in &self.trie.eos {
                if let Some(a) = allowed.get_mut(e as usize) {
                    *a = true;
                }
            }
        }
        // After a complete object every byte is refused, so the walk adds
        // nothing; a complete top-level number may still grow.
        self.trie.visit(0, &self.state, &self.schema, allowed);
        Ok(())
    }

    fn commit(&mut self, token: u32) -> Result<(), PipelineError> {
        if self.trie.eos.contains(&token) {
            return if self.state.is_complete() {
                Ok(())
            } else {
                Err(PipelineError::internal(format!(
                    "end token {token} before the JSON value was complete"
                )))
            };
        }
        let bytes = self.token_bytes.tokens.get(token as usize).ok_or_else(|| {
            PipelineError::internal(format!("token {token} outside the vocabulary"))
        })?;
        if self.state.feed_all(&self.schema, bytes) {
            Ok(())
        } else {
            Err(PipelineError::internal(format!(
                "token {token} breaks the JSON constraint"
            )))
        }
    }

    fn is_complete(&self) -> bool {
        self.state.is_complete()
    }
}

//! A byte-level pushdown recognizer for compact JSON under a compiled schema.
//!
//! Key design choice: no whitespace is accepted anywhere (compact JSON), so a
//! small model cannot loop on blanks and every accepted byte makes progress.
//! A state is a stack of small `Copy` frames; `feed` either consumes a byte or
//! refuses it, leaving the state unchanged on refusal only when the caller
//! works on a clone (the mask does).

use super::schema::{ANY, ChoiceId, Compiled, KEYWORDS, Node, NodeId};

#[derive(Clone, Copy, Debug, PartialEq)]
enum NumSt {
    Start,
    Minus,
    Zero,
    Int,
    Dot,
    Frac,
    E,
    ESign,
    Exp,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum ObjSt {
    /// After `{`: a key or `}`.
    Open,
    /// Waiting for the key literal choice to finish.
    Key,
    /// After a value: `,` or `}`.
    AfterValue,
    /// After `,`: a key.
    NeedKey,
    /// Any-object: after a key string, expecting `:`.
    Colon,
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Frame {
    Value(NodeId),
    Choice {
        set: ChoiceId,
        alive: u64,
        pos: u16,
    },
    Str {
        esc: bool,
        hex: u8,
    },
    Num {
        integer: bool,
        st: NumSt,
        len: u8,
    },
    Obj {
        node: NodeId,
        next: u16,
        st: ObjSt,
    },
    AnyObj {
        st: ObjSt,
    },
    Arr {
        item: NodeId,
        count: u32,
        min: u32,
        max: u32,
        open: bool,
    },
}

enum Step {
    Consumed,
    Refeed,
    Reject,
}

/// Recognizer state.
#[derive(Clone, Debug)]
pub struct Machine {
    stack: Vec<Frame>,
}

impl Machine {
    /// Expecting one value of the schema's root.
    pub fn new(c: &Compiled) -> Machine {
        Machine {
            stack: vec![Frame::Value(c.root)],
        }
    }

    /// The value is complete: only the end may follow.
    pub fn is_complete(&self) -> bool {
        match self.stack.as_slice() {
            [] => true,
            [Frame::Num { st, .. }] => num_accepting(*st),
            _ => false,
        }
    }

    /// Consume `b`; `false` when it is not allowed (the state is then unspecified).
    pub fn feed(&mut self, c: &Compiled, b: u8) -> bool {
        loop {
            match self.step(c, b) {
                Step::Consumed => return true,
                Step::Reject => return false,
                Step::Refeed => {}
            }
        }
    }

    /// Consume every byte of `bytes`.
    pub fn feed_all(&mut self, c: &Compiled, bytes: &[u8]) -> bool {
        bytes.iter().all(|&b| self.feed(c, b))
    }

    fn step(&mut self, c: &Compiled, b: u8) -> Step {
        let Some(top) = self.stack.last().copied() else {
            return Step::Reject;
        };
        match top {
            Frame::Value(id) => self.start_value(c, id, b),
            Frame::Choice { set, alive, pos } => {
                let lits = &c.choices[set as usize];
                let mut next = 0u64;
                for (i, lit) in lits.iter().enumerate() {
                    if alive & (1 << i) != 0 && lit.get(pos as usize) == Some(&b) {
                        next |= 1 << i;
                    }
                }
                if next == 0 {
                    return Step::Reject;
                }
                let pos = pos + 1;
                let done = (0..lits.len())
                    .find(|&i| next & (1 << i) != 0 && lits[i].len() == pos as usize);
                match done {
                    Some(i) => {
                        self.stack.pop();
                        self.child_done(c, Some(i));
                    }
                    None => self.set_top(Frame::Choice {
                        set,
                        alive: next,
                        pos,
                    }),
                }
                Step::Consumed
            }
            Frame::Str { esc, hex } => {
                if hex > 0 {
                    if !b.is_ascii_hexdigit() {
                        return Step::Reject;
                    }
                    self.set_top(Frame::Str {
                        esc: false,
                        hex: hex - 1,
                    });
                } else if esc {
                    match b {
                        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => {
                            self.set_top(Frame::Str { esc: false, hex: 0 })
                        }
                        b'u' => self.set_top(Frame::Str { esc: false, hex: 4 }),
                        _ => return Step::Reject,
                    }
                } else {
                    match b {
                        b'"' => {
                            self.stack.pop();
                            self.child_done(c, None);
                        }
                        b'\\' => self.set_top(Frame::Str { esc: true, hex: 0 }),
                        0..=0x1f => return Step::Reject,
                        _ => {}
                    }
                }
                Step::Consumed
            }
            Frame::Num { integer, st, len } => {
                match num_next(st, b, integer).filter(|_| len < max_num_len(integer)) {
                    Some(st) => {
                        self.set_top(Frame::Num {
                            integer,
                            st,
                            len: len + 1,
                        });
                        Step::Consumed
                    }
                    None if num_accepting(st) => {
                        self.stack.pop();
                        self.child_done(c, None);
                        Step::Refeed
                    }
                    None => Step::Reject,
                }
            }
            Frame::Obj { node, next, st } => {
                let Node::Object { props, keys } = &c.nodes[node as usize] else {
                    return Step::Reject;
                };
                let rest = &props[next as usize..];
                let can_close = rest.iter().all(|(_, req)| !req);
                match (st, b) {
                    (ObjSt::Open | ObjSt::AfterValue, b'}') if can_close => {
                        self.stack.pop();
                        self.child_done(c, None);
                        Step::Consumed
                    }
                    (ObjSt::AfterValue, b',') if !rest.is_empty() => {
                        self.set_top(Frame::Obj {
                            node,
                            next,
                            st: ObjSt::NeedKey,
                        });
                        Step::Consumed
                    }
                    (ObjSt::Open | ObjSt::NeedKey, b'"') if !rest.is_empty() => {
                        // Keys props[next..=first required]; all remaining if none required.
                        let mut alive = 0u64;
                        for (i, (_, req)) in rest.iter().enumerate() {
                            alive |= 1 << (next as usize + i);
                            if *req {
                                break;
                            }
                        }
                        self.set_top(Frame::Obj {
                            node,
                            next,
                            st: ObjSt::Key,
                        });
                        self.stack.push(Frame::Choice {
                            set: *keys,
                            alive,
                            pos: 0,
                        });
                        Step::Refeed
                    }
                    _ => Step::Reject,
                }
            }
            Frame::AnyObj { st } => match (st, b) {
                (ObjSt::Open | ObjSt::AfterValue, b'}') => {
                    self.stack.pop();
                    self.child_done(c, None);
                    Step::Consumed
                }
                (ObjSt::AfterValue, b',') => {
                    self.set_top(Frame::AnyObj { st: ObjSt::NeedKey });
                    Step::Consumed
                }
                (ObjSt::Open | ObjSt::NeedKey, b'"') => {
                    self.set_top(Frame::AnyObj { st: ObjSt::Key });
                    self.stack.push(Frame::Str { esc: false, hex: 0 });
                    Step::Consumed
                }
                (ObjSt::Colon, b':') => {
                    self.set_top(Frame::AnyObj {
                        st: ObjSt::AfterValue,
                    });
                    self.stack.push(Frame::Value(ANY));
                    Step::Consumed
                }
                _ => Step::Reject,
            },
            Frame::Arr {
                item,
                count,
                min,
                max,
                open,
            } => {
                if b == b']' && count >= min {
                    self.stack.pop();
                    self.child_done(c, None);
                    return Step::Consumed;
                }
                if open {
                    if count >= max {
                        return Step::Reject;
                    }
                    self.set_top(Frame::Arr {
                        item,
                        count: count + 1,
                        min,
                        max,
                        open: false,
                    });
                    self.stack.push(Frame::Value(item));
                    Step::Refeed
                } else if b == b',' && count < max {
                    self.set_top(Frame::Arr {
                        item,
                        count: count + 1,
                        min,
                        max,
                        open: false,
                    });
                    self.stack.push(Frame::Value(item));
                    Step::Consumed
                } else {
                    Step::Reject
                }
            }
        }
    }

    fn set_top(&mut self, f: Frame) {
        if let Some(t) = self.stack.last_mut() {
            *t = f;
        }
    }

    /// A child value (or key) finished; `choice` is the literal index for key choices.
    fn child_done(&mut self, c: &Compiled, choice: Option<usize>) {
        match self.stack.last().copied() {
            Some(Frame::Obj {
                node,
                st: ObjSt::Key,
                ..
            }) => {
                if let (Node::Object { props, .. }, Some(i)) = (&c.nodes[node as usize], choice) {
                    let value = props[i].0;
                    self.set_top(Frame::Obj {
                        node,
                        next: (i + 1) as u16,
                        st: ObjSt::AfterValue,
                    });
                    self.stack.push(Frame::Value(value));
                }
            }
            Some(Frame::AnyObj { st: ObjSt::Key }) => {
                self.set_top(Frame::AnyObj { st: ObjSt::Colon })
            }
            _ => {}
        }
    }

    fn start_value(&mut self, c: &Compiled, id: NodeId, b: u8) -> Step {
        let frame = match &c.nodes[id as usize] {
            Node::Any if self.stack.len() >= MAX_ANY_DEPTH && matches!(b, b'{' | b'[') => {
                return Step::Reject;
            }
            Node::Any => match b {
                b'{' => Frame::AnyObj { st: ObjSt::Open },
                b'[' => Frame::Arr {
                    item: ANY,
                    count: 0,
                    min: 0,
                    max: u32::MAX,
                    open: true,
                },
                b'"' => Frame::Str { esc: false, hex: 0 },
                b'-' | b'0'..=b'9' => {
                    return self.replace(Frame::Num {
                        integer: false,
                        st: NumSt::Start,
                        len: 0,
                    });
                }
                b't' | b'f' | b'n' => {
                    return self.replace(Frame::Choice {
                        set: KEYWORDS,
                        alive: 0b111,
                        pos: 0,
                    });
                }
                _ => return Step::Reject,
            },
            Node::Object { .. } if b == b'{' => Frame::Obj {
                node: id,
                next: 0,
                st: ObjSt::Open,
            },
            Node::AnyObject if b == b'{' => Frame::AnyObj { st: ObjSt::Open },
            Node::Array { item, min, max } if b == b'[' => Frame::Arr {
                item: *item,
                count: 0,
                min: *min,
                max: *max,
                open: true,
            },
            Node::Str if b == b'"' => Frame::Str { esc: false, hex: 0 },
            Node::Num { integer } => {
                return self.replace(Frame::Num {
                    integer: *integer,
                    st: NumSt::Start,
                    len: 0,
                });
            }
            Node::Choice(set) => {
                let n = c.choices[*set as usize].len();
                let alive = if n >= 64 { u64::MAX } else { (1u64 << n) - 1 };
                return self.replace(Frame::Choice {
                    set: *set,
                    alive,
                    pos: 0,
                });
            }
            Node::AnyOf(alts) => {
                for &alt in alts {
                    let mut probe = Machine {
                        stack: vec![Frame::Value(alt)],
                    };
                    if probe.feed(c, b) {
                        return self.replace(Frame::Value(alt));
                    }
                }
                return Step::Reject;
            }
            _ => return Step::Reject,
        };
        self.set_top(frame);
        Step::Consumed
    }

    fn replace(&mut self, f: Frame) -> Step {
        self.set_top(f);
        Step::Refeed
    }
}

/// Deepest stack at which a free (`Any`) value may still open an object or an
/// array; deeper, only scalars. Bounds nesting so generation always ends.
const MAX_ANY_DEPTH: usize = 24;

/// Longest number text accepted: an integer fits an i64 (18 digits and a
/// sign), a float keeps f64 precision with room for an exponent. This bounds
/// every number, so a model cannot loop on digits.
fn max_num_len(integer: bool) -> u8 {
    if integer { 19 } else { 24 }
}

fn num_accepting(st: NumSt) -> bool {
    matches!(st, NumSt::Zero | NumSt::Int | NumSt::Frac | NumSt::Exp)
}

fn num_next(st: NumSt, b: u8, integer: bool) -> Option<NumSt> {
    use NumSt::*;
    let digit = b.is_ascii_digit();
    Some(match (st, b) {
        (Start, b'-') => Minus,
        (Start | Minus, b'0') => Zero,
        (Start | Minus, _) if digit => Int,
        (Int, _) if digit => Int,
        (Zero | Int, b'.') if !integer => Dot,
        (Dot | Frac, _) if digit => Frac,
        (Zero | Int | Frac, b'e' | b'E') if !integer => E,
        (E, b'+' | b'-') => ESign,
        (E | ESign | Exp, _) if digit => Exp,
        _ => return None,
    })
}

//! A restricted pickle reader for `torch.save` state dicts: it understands the
//! protocol 2–5 opcodes that such files use and recognises only the globals that
//! rebuild tensors, storages and (ordered) dicts.
//!
//! Key design choice: nothing is ever imported or called. Globals are resolved to
//! a closed enum at the GLOBAL/STACK_GLOBAL opcode, so any other name
//! (`os.system`, `builtins.eval`, ...) is an error naming it before anything else
//! happens; containers live in an arena addressed by index, so shared and even
//! cyclic references (via the memo) are plain indices, with no recursion on drop.

use std::collections::HashMap;

/// Element type named by a `torch.*Storage` global.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum StorageDtype {
    F32,
    F64,
    F16,
    BF16,
    I64,
    I32,
    I16,
    I8,
    U8,
    Bool,
}

impl StorageDtype {
    fn from_storage_name(name: &str) -> Option<Self> {
        use StorageDtype::*;
        Some(match name {
            "FloatStorage" => F32,
            "DoubleStorage" => F64,
            "HalfStorage" => F16,
            "BFloat16Storage" => BF16,
            "LongStorage" => I64,
            "IntStorage" => I32,
            "ShortStorage" => I16,
            "CharStorage" => I8,
            "ByteStorage" => U8,
            "BoolStorage" => Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        use StorageDtype::*;
        match self {
            F64 | I64 => 8,
            F32 | I32 => 4,
            F16 | BF16 | I16 => 2,
            I8 | U8 | Bool => 1,
        }
    }
}

/// The only callables a checkpoint may name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Global {
    RebuildTensorV2,
    RebuildParameter,
    OrderedDict,
    Storage(StorageDtype),
}

impl Global {
    fn resolve(module: &str, name: &str) -> Option<Self> {
        match (module, name) {
            ("torch._utils", "_rebuild_tensor_v2") => Some(Global::RebuildTensorV2),
            ("torch._utils", "_rebuild_parameter") => Some(Global::RebuildParameter),
            ("collections", "OrderedDict") => Some(Global::OrderedDict),
            ("torch", storage) => StorageDtype::from_storage_name(storage).map(Global::Storage),
            _ => None,
        }
    }
}

/// A storage named by a persistent id: `('storage', torch.XStorage, key, location, numel)`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorageRef {
    pub dtype: StorageDtype,
    pub key: String,
    pub numel: u64,
}

/// Arguments of `_rebuild_tensor_v2`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TensorRef {
    pub storage: StorageRef,
    pub offset: u64,
    pub shape: Vec<u64>,
    pub strides: Vec<u64>,
}

/// A scalar or a reference into the object arena.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Value {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Obj(usize),
}

/// Heap objects.
#[derive(Clone, Debug, PartialEq)]
pub enum Obj {
    Str(String),
    Bytes(Vec<u8>),
    Tuple(Vec<Value>),
    List(Vec<Value>),
    Dict(Vec<(Value, Value)>),
    Global(Global),
    Storage(StorageRef),
    Tensor(TensorRef),
}

/// Why unpickling stopped; `at` is the byte offset of the opcode.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum PickleError {
    #[error("opcode {name} (0x{opcode:02x}) at byte {at} is not allowed in a checkpoint")]
    ForbiddenOpcode {
        at: usize,
        opcode: u8,
        name: &'static str,
    },
    #[error(
        "global '{module}.{name}' at byte {at} is not allowed (only torch tensor rebuilders, storages and OrderedDict are)"
    )]
    ForbiddenGlobal {
        at: usize,
        module: String,
        name: String,
    },
    #[error("pickle ends inside {what} at byte {at}")]
    Truncated { at: usize, what: &'static str },
    #[error("invalid pickle at byte {at} ({opcode}): {reason}")]
    Invalid {
        at: usize,
        opcode: &'static str,
        reason: String,
    },
}

/// Objects plus the unpickled root value.
#[derive(Debug, Default)]
pub struct Unpickled {
    pub objs: Vec<Obj>,
    pub root: Option<Value>,
}

impl Unpickled {
    /// The object behind `v`, if it is one.
    pub fn obj(&self, v: Value) -> Option<&Obj> {
        match v {
            Value::Obj(i) => self.objs.get(i),
            _ => None,
        }
    }

    /// The string behind `v`, if it is one.
    pub fn str(&self, v: Value) -> Option<&str> {
        match self.obj(v) {
            Some(Obj::Str(s)) => Some(s),
            _ => None,
        }
    }
}

fn opcode_name(op: u8) -> &'static str {
    match op {
        b'(' => "MARK",
        b'.' => "STOP",
        b'0' => "POP",
        b'1' => "POP_MARK",
        b'2' => "DUP",
        b'F' => "FLOAT",
        b'I' => "INT",
        b'J' => "BININT",
        b'K' => "BININT1",
        b'L' => "LONG",
        b'M' => "BININT2",
        b'N' => "NONE",
        b'P' => "PERSID",
        b'Q' => "BINPERSID",
        b'R' => "REDUCE",
        b'S' => "STRING",
        b'T' => "BINSTRING",
        b'U' => "SHORT_BINSTRING",
        b'V' => "UNICODE",
        b'X' => "BINUNICODE",
        b'a' => "APPEND",
        b'b' => "BUILD",
        b'c' => "GLOBAL",
        b'd' => "DICT",
        b'}' => "EMPTY_DICT",
        b'e' => "APPENDS",
        b'g' => "GET",
        b'h' => "BINGET",
        b'i' => "INST",
        b'j' => "LONG_BINGET",
        b'l' => "LIST",
        b']' => "EMPTY_LIST",
        b'o' => "OBJ",
        b'p' => "PUT",
        b'q' => "BINPUT",
        b'r' => "LONG_BINPUT",
        b's' => "SETITEM",
        b't' => "TUPLE",
        b')' => "EMPTY_TUPLE",
        b'u' => "SETITEMS",
        b'G' => "BINFLOAT",
        0x80 => "PROTO",
        0x81 => "NEWOBJ",
        0x82 => "EXT1",
        0x83 => "EXT2",
        0x84 => "EXT4",
        0x85 => "TUPLE1",
        0x86 => "TUPLE2",
        0x87 => "TUPLE3",
        0x88 => "NEWTRUE",
        0x89 => "NEWFALSE",
        0x8a => "LONG1",
        0x8b => "LONG4",
        b'B' => "BINBYTES",
        b'C' => "SHORT_BINBYTES",
        0x8c => "SHORT_BINUNICODE",
        0x8d => "BINUNICODE8",
        0x8e => "BINBYTES8",
        0x8f => "EMPTY_SET",
        0x90 => "ADDITEMS",
        0x91 => "FROZENSET",
        0x92 => "NEWOBJ_EX",
        0x93 => "STACK_GLOBAL",
        0x94 => "MEMOIZE",
        0x95 => "FRAME",
        0x96 => "BYTEARRAY8",
        0x97 => "NEXT_BUFFER",
        0x98 => "READONLY_BUFFER",
        _ => "unknown",
    }
}

struct Machine<'a> {
    data: &'a [u8],
    pos: usize,
    op_at: usize,
    op: u8,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
    out: Unpickled,
}

/// Runs the restricted unpickler over `data` (a `data.pkl`).
pub fn unpickle(data: &[u8]) -> Result<Unpickled, PickleError> {
    let mut m = Machine {
        data,
        pos: 0,
        op_at: 0,
        op: 0,
        stack: Vec::new(),
        marks: Vec::new(),
        memo: HashMap::new(),
        out: Unpickled::default(),
    };
    m.run()?;
    Ok(m.out)
}

impl Machine<'_> {
    fn invalid(&self, reason: impl Into<String>) -> PickleError {
        PickleError::Invalid {
            at: self.op_at,
            opcode: opcode_name(self.op),
            reason: reason.into(),
        }
    }

    fn take(&mut self, n: u64, what: &'static str) -> Result<&[u8], PickleError> {
        let have = (self.data.len() - self.pos) as u64;
        if n > have {
            return Err(PickleError::Truncated { at: self.pos, what });
        }
        let s = self.pos;
        self.pos += n as usize;
        Ok(&self.data[s..self.pos])
    }

    fn arr<const N: usize>(&mut self, what: &'static str) -> Result<[u8; N], PickleError> {
        let b = self.take(N as u64, what)?;
        let mut out = [0u8; N];
        out.copy_from_slice(b);
        Ok(out)
    }

    fn line(&mut self) -> Result<String, PickleError> {
        let rest = &self.data[self.pos..];
        let end =
            rest.iter()
                .take(512)
                .position(|&b| b == b'\n')
                .ok_or(PickleError::Truncated {
                    at: self.pos,
                    what: "a GLOBAL name line",
                })?;
        let s = String::from_utf8_lossy(&rest[..end]).into_owned();
        self.pos += end + 1;
        Ok(s)
    }

    fn alloc(&mut self, o: Obj) -> Value {
        self.out.objs.push(o);
        Value::Obj(self.out.objs.len() - 1)
    }

    fn push(&mut self, v: Value) {
        self.stack.push(v);
    }

    fn pop(&mut self) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.invalid("stack underflow"));
        }
        self.stack
            .pop()
            .ok_or_else(|| self.invalid("stack underflow"))
    }

    fn top(&self) -> Result<Value, PickleError> {
        let floor = self.marks.last().copied().unwrap_or(0);
        if self.stack.len() <= floor {
            return Err(self.invalid("stack underflow"));
        }
        self.stack
            .last()
            .copied()
            .ok_or_else(|| self.invalid("stack underflow"))
    }

    fn pop_mark(&mut self) -> Result<Vec<Value>, PickleError> {
        let mark = self.marks.pop().ok_or_else(|| self.invalid("no MARK"))?;
        // Invariant (kept by pop/top): every mark <= stack.len().
        Ok(self.stack.split_off(mark.min(self.stack.len())))
    }

    fn obj_mut(&mut self, v: Value) -> Result<&mut Obj, PickleError> {
        let err = self.invalid("expected an object");
        match v {
            Value::Obj(i) => self.out.objs.get_mut(i).ok_or(err),
            _ => Err(err),
        }
    }

    fn memo_put(&mut self, idx: u32) -> Result<(), PickleError> {
        let v = self.top()?;
        self.memo.insert(idx, v);
        Ok(())
    }

    fn memo_get(&mut self, idx: u32) -> Result<(), PickleError> {
        let v = *self
            .memo
            .get(&idx)
            .ok_or_else(|| self.invalid(format!("memo index {idx} was never stored")))?;
        self.push(v);
        Ok(())
    }

    fn string(&mut self, n: u64) -> Result<(), PickleError> {
        let b = self.take(n, "a string")?;
        let s = String::from_utf8(b.to_vec());
        let s = s.map_err(|_| self.invalid("string is not UTF-8"))?;
        let v = self.alloc(Obj::Str(s));
        self.push(v);
        Ok(())
    }

    fn bytes(&mut self, n: u64) -> Result<(), PickleError> {
        let b = self.take(n, "bytes")?.to_vec();
        let v = self.alloc(Obj::Bytes(b));
        self.push(v);
        Ok(())
    }

    fn global(&mut self, module: &str, name: &str) -> Result<(), PickleError> {
        let g = Global::resolve(module, name).ok_or_else(|| PickleError::ForbiddenGlobal {
            at: self.op_at,
            module: module.to_string(),
            name: name.to_string(),
        })?;
        let v = self.alloc(Obj::Global(g));
        self.push(v);
        Ok(())
    }

    fn run(&mut self) -> Result<(), PickleError> {
        loop {
            self.op_at = self.pos;
            let [op] = self.arr::<1>("an opcode")?;
            self.op = op;
            match op {
                0x80 => {
                    let [v] = self.arr::<1>("PROTO")?;
                    if !(2..=5).contains(&v) {
                        return Err(self.invalid(format!("protocol {v} (supported 2-5)")));
                    }
                }
                0x95 => {
                    self.arr::<8>("FRAME")?;
                }
                b'.' => {
                    let v = self.pop()?;
                    self.out.root = Some(v);
                    return Ok(());
                }
                b'(' => self.marks.push(self.stack.len()),
                b'0' => {
                    self.pop()?;
                }
                b'1' => {
                    self.pop_mark()?;
                }
                b'2' => {
                    let v = self.top()?;
                    self.push(v);
                }
                b'N' => self.push(Value::None),
                0x88 => self.push(Value::Bool(true)),
                0x89 => self.push(Value::Bool(false)),
                b'J' => {
                    let v = i32::from_le_bytes(self.arr::<4>("BININT")?);
                    self.push(Value::Int(i64::from(v)));
                }
                b'K' => {
                    let [v] = self.arr::<1>("BININT1")?;
                    self.push(Value::Int(i64::from(v)));
                }
                b'M' => {
                    let v = u16::from_le_bytes(self.arr::<2>("BININT2")?);
                    self.push(Value::Int(i64::from(v)));
                }
                0x8a => {
                    let [n] = self.arr::<1>("LONG1")?;
                    if n > 8 {
                        return Err(self.invalid(format!("{n}-byte integer is too large")));
                    }
                    let b = self.take(u64::from(n), "LONG1")?;
                    let mut w = [0u8; 8];
                    w[..b.len()].copy_from_slice(b);
                    if b.last().is_some_and(|&x| x & 0x80 != 0) {
                        w[b.len()..].fill(0xff);
                    }
                    self.push(Value::Int(i64::from_le_bytes(w)));
                }
                b'G' => {
                    let v = f64::from_be_bytes(self.arr::<8>("BINFLOAT")?);
                    self.push(Value::Float(v));
                }
                b'X' => {
                    let n = u32::from_le_bytes(self.arr::<4>("BINUNICODE")?);
                    self.string(u64::from(n))?;
                }
                0x8c => {
                    let [n] = self.arr::<1>("SHORT_BINUNICODE")?;
                    self.string(u64::from(n))?;
                }
                0x8d => {
                    let n = u64::from_le_bytes(self.arr::<8>("BINUNICODE8")?);
                    self.string(n)?;
                }
                b'C' => {
                    let [n] = self.arr::<1>("SHORT_BINBYTES")?;
                    self.bytes(u64::from(n))?;
                }
                b'B' => {
                    let n = u32::from_le_bytes(self.arr::<4>("BINBYTES")?);
                    self.bytes(u64::from(n))?;
                }
                b'}' => {
                    let v = self.alloc(Obj::Dict(Vec::new()));
                    self.push(v);
                }
                b']' => {
                    let v = self.alloc(Obj::List(Vec::new()));
                    self.push(v);
                }
                b')' => {
                    let v = self.alloc(Obj::Tuple(Vec::new()));
                    self.push(v);
                }
                0x85..=0x87 => {
                    let n = usize::from(op - 0x84);
                    let mut items = Vec::with_capacity(n);
                    for _ in 0..n {
                        items.push(self.pop()?);
                    }
                    items.reverse();
                    let v = self.alloc(Obj::Tuple(items));
                    self.push(v);
                }
                b't' | b'l' | b'd' => {
                    let items = self.pop_mark()?;
                    let obj = match op {
                        b't' => Obj::Tuple(items),
                        b'l' => Obj::List(items),
                        _ => Obj::Dict(self.pairs(items)?),
                    };
                    let v = self.alloc(obj);
                    self.push(v);
                }
                b'q' => {
                    let [i] = self.arr::<1>("BINPUT")?;
                    self.memo_put(u32::from(i))?;
                }
                b'r' => {
                    let i = u32::from_le_bytes(self.arr::<4>("LONG_BINPUT")?);
                    self.memo_put(i)?;
                }
                0x94 => {
                    let i = u32::try_from(self.memo.len()).unwrap_or(u32::MAX);
                    self.memo_put(i)?;
                }
                b'h' => {
                    let [i] = self.arr::<1>("BINGET")?;
                    self.memo_get(u32::from(i))?;
                }
                b'j' => {
                    let i = u32::from_le_bytes(self.arr::<4>("LONG_BINGET")?);
                    self.memo_get(i)?;
                }
                b'a' => {
                    let v = self.pop()?;
                    let list = self.top()?;
                    self.extend_list(list, vec![v])?;
                }
                b'e' => {
                    let items = self.pop_mark()?;
                    let list = self.top()?;
                    self.extend_list(list, items)?;
                }
                b's' => {
                    let v = self.pop()?;
                    let k = self.pop()?;
                    let dict = self.top()?;
                    self.extend_dict(dict, vec![(k, v)])?;
                }
                b'u' => {
                    let items = self.pop_mark()?;
                    let pairs = self.pairs(items)?;
                    let dict = self.top()?;
                    self.extend_dict(dict, pairs)?;
                }
                b'c' => {
                    let module = self.line()?;
                    let name = self.line()?;
                    self.global(&module, &name)?;
                }
                0x93 => {
                    let name = self.pop()?;
                    let module = self.pop()?;
                    let (Some(module), Some(name)) = (self.out.str(module), self.out.str(name))
                    else {
                        return Err(self.invalid("module and name must be strings"));
                    };
                    let (module, name) = (module.to_string(), name.to_string());
                    self.global(&module, &name)?;
                }
                b'R' => {
                    let args = self.pop()?;
                    let func = self.pop()?;
                    let v = self.reduce(func, args)?;
                    self.push(v);
                }
                b'b' => {
                    let _state = self.pop()?;
                    let target = self.top()?;
                    // OrderedDict state (`_metadata`) and tensor state are ignored.
                    match self.out.obj(target) {
                        Some(Obj::Dict(_) | Obj::Tensor(_)) => {}
                        _ => {
                            return Err(
                                self.invalid("BUILD on something other than a dict or tensor")
                            );
                        }
                    }
                }
                b'Q' => {
                    let pid = self.pop()?;
                    let v = self.persistent(pid)?;
                    self.push(v);
                }
                other => {
                    return Err(PickleError::ForbiddenOpcode {
                        at: self.op_at,
                        opcode: other,
                        name: opcode_name(other),
                    });
                }
            }
        }
    }

    fn pairs(&self, items: Vec<Value>) -> Result<Vec<(Value, Value)>, PickleError> {
        if !items.len().is_multiple_of(2) {
            return Err(self.invalid("odd number of items for a dict"));
        }
        Ok(items.chunks_exact(2).map(|c| (c[0], c[1])).collect())
    }

    fn extend_list(&mut self, list: Value, items: Vec<Value>) -> Result<(), PickleError> {
        match self.obj_mut(list)? {
            Obj::List(l) => {
                l.extend(items);
                Ok(())
            }
            _ => Err(self.invalid("append to something other than a list")),
        }
    }

    fn extend_dict(&mut self, dict: Value, pairs: Vec<(Value, Value)>) -> Result<(), PickleError> {
        match self.obj_mut(dict)? {
            Obj::Dict(d) => {
                d.extend(pairs);
                Ok(())
            }
            _ => Err(self.invalid("set item on something other than a dict")),
        }
    }

    fn tuple(&self, v: Value) -> Result<&[Value], PickleError> {
        match self.out.obj(v) {
            Some(Obj::Tuple(t)) => Ok(t),
            _ => Err(self.invalid("expected a tuple")),
        }
    }

    fn uint(&self, v: Value, what: &str) -> Result<u64, PickleError> {
        match v {
            Value::Int(i) if i >= 0 => Ok(i as u64),
            _ => Err(self.invalid(format!("{what} must be a non-negative integer"))),
        }
    }

    fn uints(&self, v: Value, what: &str) -> Result<Vec<u64>, PickleError> {
        self.tuple(v)?.iter().map(|&x| self.uint(x, what)).collect()
    }

    fn reduce(&mut self, func: Value, args: Value) -> Result<Value, PickleError> {
        let Some(Obj::Global(g)) = self.out.obj(func) else {
            return Err(self.invalid("REDUCE of something that is not an allowed global"));
        };
        let g = *g;
        let args = self.tuple(args)?.to_vec();
        match g {
            Global::OrderedDict => {
                if !args.is_empty() {
                    return Err(self.invalid("OrderedDict with arguments"));
                }
                Ok(self.alloc(Obj::Dict(Vec::new())))
            }
            Global::RebuildTensorV2 => {
                if !(6..=7).contains(&args.len()) {
                    return Err(self.invalid(format!(
                        "_rebuild_tensor_v2 takes 6 or 7 arguments, got {}",
                        args.len()
                    )));
                }
                let Some(Obj::Storage(storage)) = self.out.obj(args[0]) else {
                    return Err(self.invalid("_rebuild_tensor_v2: first argument is not a storage"));
                };
                let storage = storage.clone();
                let offset = self.uint(args[1], "storage offset")?;
                let shape = self.uints(args[2], "size")?;
                let strides = self.uints(args[3], "stride")?;
                if shape.len() != strides.len() {
                    return Err(self.invalid(format!(
                        "size has {} dims but stride has {}",
                        shape.len(),
                        strides.len()
                    )));
                }
                Ok(self.alloc(Obj::Tensor(TensorRef {
                    storage,
                    offset,
                    shape,
                    strides,
                })))
            }
            Global::RebuildParameter => match args.first() {
                Some(&t) if matches!(self.out.obj(t), Some(Obj::Tensor(_))) => Ok(t),
                _ => Err(self.invalid("_rebuild_parameter: first argument is not a tensor")),
            },
            Global::Storage(_) => Err(self.invalid("storage types cannot be called")),
        }
    }

    fn persistent(&mut self, pid: Value) -> Result<Value, PickleError> {
        let t = self.tuple(pid)?;
        if t.len() != 5 || self.out.str(t[0]) != Some("storage") {
            return Err(
                self.invalid("persistent id is not ('storage', type, key, location, numel)")
            );
        }
        let Some(Obj::Global(Global::Storage(dtype))) = self.out.obj(t[1]) else {
            return Err(self.invalid("persistent id names no torch storage type"));
        };
        let key = self
            .out
            .str(t[2])
            .ok_or_else(|| self.invalid("storage key is not a string"))?
            .to_string();
        let numel = self.uint(t[4], "storage size")?;
        let dtype = *dtype;
        Ok(self.alloc(Obj::Storage(StorageRef { dtype, key, numel })))
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn scalars_memo_and_containers() {
        // {"a": -2 (LONG1), "b": [1.5, True]} built with SETITEMS and APPENDS
        let mut p = vec![0x80, 2, b'}', b'q', 0, b'('];
        p.extend_from_slice(&[0x8c, 1, b'a', 0x8a, 1, 0xfe]);
        p.extend_from_slice(&[0x8c, 1, b'b', b']', b'(', b'G']);
        p.extend_from_slice(&1.5f64.to_be_bytes());
        p.extend_from_slice(&[0x88, b'e', b'u', b'.']);
        let un = unpickle(&p).unwrap();
        let Some(Obj::Dict(d)) = un.obj(un.root.unwrap()) else {
            panic!("not a dict")
        };
        assert_eq!(d.len(), 2);
        assert_eq!(un.str(d[0].0), Some("a"));
        assert_eq!(d[0].1, Value::Int(-2));
        let Some(Obj::List(l)) = un.obj(d[1].1) else {
            panic!("not a list")
        };
        assert_eq!(l, &vec![Value::Float(1.5), Value::Bool(true)]);
    }

    #[test]
    fn stack_global_outside_the_allow_list_is_refused() {
        let mut p = vec![0x80, 4];
        p.extend_from_slice(&[0x8c, 8]);
        p.extend_from_slice(b"builtins");
        p.extend_from_slice(&[0x8c, 4]);
        p.extend_from_slice(b"eval");
        p.push(0x93);
        let err = unpickle(&p).unwrap_err();
        assert!(
            matches!(&err, PickleError::ForbiddenGlobal { module, name, .. } if module == "builtins" && name == "eval"),
            "{err}"
        );
    }

    #[test]
    fn underflow_below_a_mark_and_bad_memo_are_errors() {
        for p in [
            &[0x80, 2, b'N', b'(', b'0'][..],
            &[0x80, 2, b'a'][..],
            &[0x80, 2, b'h', 3][..],
            &[0x80, 2, b'N', b'N', b'u'][..],
            &[0x80, 2, b'N', b'X', 0xff, 0xff, 0xff, 0xff][..],
            &[0x80, 9][..],
        ] {
            assert!(unpickle(p).is_err(), "{p:?}");
        }
    }
}

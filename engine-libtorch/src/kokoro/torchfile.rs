//! PyTorch's `torch.save` files (`.pt`), read in Rust: no Python, no TorchScript. How hexgrad's
//! `kokoro` package and Kokoro-FastAPI keep their voices (`voices/af_heart.pt`: one f32 tensor
//! [510, 1, 256]); read here for [`super::voices`], and general enough for a state dict.
//!
//! The format (PyTorch ≥ 1.6's "zip" serialization, the default since): a zip archive whose
//! entries sit under one top folder (`archive/`, or the file's stem: any name):
//!
//! * `data.pkl`: a pickle (protocol 2) of the object saved. A tensor in it is a call of
//!   `torch._utils._rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad,
//!   backward_hooks[, metadata])`, its storage a persistent id (`BINPERSID`) of the tuple
//!   `('storage', torch.FloatStorage (or another element type), key, location, numel)`;
//! * `data/<key>`: each storage's elements, raw, little-endian;
//! * `byteorder` (`little`; absent in files older than PyTorch 1.10, which are little-endian),
//!   `version`, and in newer files `.data/serialization_id`, `.format_version`: not needed.
//!
//! The pickle is read by a small, strict machine that knows exactly the opcodes these files use
//! (and the few more that protocol 4 would add); any other opcode, or a call of anything but the
//! tensor rebuilders and `collections.OrderedDict`, is an error that names it. Storages of f32,
//! f64, f16, bf16 and the integer types are read; a tensor must be contiguous (C order) within its
//! storage, at any offset. Legacy files (PyTorch < 1.6: a bare pickle stream) are refused with a
//! message saying to re-save them.

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;

use super::zip::unzip;

/// A storage's element type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DType {
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

impl DType {
    /// The type of a storage class of `torch` (`FloatStorage`, ...).
    fn of_storage(class: &str) -> Option<DType> {
        Some(match class {
            "FloatStorage" => DType::F32,
            "DoubleStorage" => DType::F64,
            "HalfStorage" => DType::F16,
            "BFloat16Storage" => DType::BF16,
            "LongStorage" => DType::I64,
            "IntStorage" => DType::I32,
            "ShortStorage" => DType::I16,
            "CharStorage" => DType::I8,
            "ByteStorage" => DType::U8,
            "BoolStorage" => DType::Bool,
            _ => return None,
        })
    }

    /// Bytes per element.
    pub fn size(self) -> usize {
        match self {
            DType::F64 | DType::I64 => 8,
            DType::F32 | DType::I32 => 4,
            DType::F16 | DType::BF16 | DType::I16 => 2,
            DType::I8 | DType::U8 | DType::Bool => 1,
        }
    }

    pub fn is_float(self) -> bool {
        matches!(self, DType::F32 | DType::F64 | DType::F16 | DType::BF16)
    }
}

/// One tensor of a file: element type, shape, and its elements in C order, little-endian.
#[derive(Clone, Debug, PartialEq)]
pub struct Tensor {
    pub dtype: DType,
    pub shape: Vec<usize>,
    pub bytes: Vec<u8>,
}

impl Tensor {
    /// The elements as f32: f64 rounded, f16 and bf16 widened (exact), integers as the nearest f32.
    pub fn to_f32(&self) -> Vec<f32> {
        let b = &self.bytes;
        let n = self.dtype.size();
        let each = b.chunks_exact(n);
        match self.dtype {
            DType::F32 => each.map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect(),
            DType::F64 => each.map(|c| f64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).collect(),
            DType::F16 => each.map(|c| f16_to_f32(u16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::BF16 => each.map(|c| f32::from_bits(u32::from(u16::from_le_bytes([c[0], c[1]])) << 16)).collect(),
            DType::I64 => each.map(|c| i64::from_le_bytes(c.try_into().unwrap_or([0; 8])) as f32).collect(),
            DType::I32 => each.map(|c| i32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f32).collect(),
            DType::I16 => each.map(|c| f32::from(i16::from_le_bytes([c[0], c[1]]))).collect(),
            DType::I8 => each.map(|c| f32::from(c[0] as i8)).collect(),
            DType::U8 | DType::Bool => each.map(|c| f32::from(c[0])).collect(),
        }
    }
}

/// IEEE half to single precision (exact: every half is a float).
fn f16_to_f32(h: u16) -> f32 {
    let sign = u32::from(h >> 15) << 31;
    let exp = u32::from((h >> 10) & 0x1f);
    let man = u32::from(h & 0x3ff);
    let bits = match (exp, man) {
        (0, 0) => sign,
        // Subnormal: man × 2^-24.
        (0, _) => return if sign != 0 { -(man as f32) } else { man as f32 } * f32::from_bits(0x3380_0000),
        (0x1f, _) => sign | 0x7f80_0000 | (man << 13),
        _ => sign | ((exp + 127 - 15) << 23) | (man << 13),
    };
    f32::from_bits(bits)
}

/// The tensors of a `torch.save` file's bytes, in the order the pickle holds them, each named by
/// its path in the object saved: dict keys (a state dict's `layer.weight`) and list or tuple
/// indices joined with `.`; a file of one bare tensor holds one named `""`. Other values (ints,
/// strings, a state dict's `_metadata`) are passed over.
pub fn read(bytes: &[u8]) -> Result<Vec<(String, Tensor)>, String> {
    if !bytes.starts_with(b"PK\x03\x04") {
        if bytes.first() == Some(&0x80) {
            return Err("a legacy torch.save file (PyTorch before 1.6, not a zip archive), which is not read: \
                        re-save it with a newer PyTorch (torch.save(torch.load(path), path))"
                .to_owned());
        }
        return Err("not a torch.save file (no zip archive)".to_owned());
    }
    let entries = unzip(bytes).map_err(|e| format!("a torch.save archive that cannot be read (truncated?): {e}"))?;
    let pickles: Vec<&str> = entries
        .iter()
        .map(|(name, _)| name.as_str())
        .filter(|name| {
            name.strip_suffix("data.pkl").is_some_and(|top| top.ends_with('/') && top.matches('/').count() == 1)
        })
        .collect();
    let [pickle] = pickles[..] else {
        return Err(format!(
            "not a torch.save archive: {} `<folder>/data.pkl` entries, one expected{}",
            pickles.len(),
            if entries.iter().any(|(n, _)| n.ends_with("constants.pkl")) { " (a TorchScript file?)" } else { "" }
        ));
    };
    let top = &pickle[..pickle.len() - "data.pkl".len()];
    let entry = |name: &str| entries.iter().find(|(n, _)| n.strip_prefix(top) == Some(name)).map(|(_, b)| b.as_slice());
    if let Some(order) = entry("byteorder") {
        if order.trim_ascii() != b"little" {
            return Err(format!(
                "{top}byteorder says {:?}: only little-endian files are read",
                String::from_utf8_lossy(order)
            ));
        }
    }
    let object = Unpickler::new(entry("data.pkl").unwrap_or_default()).load().map_err(|e| format!("{pickle}: {e}"))?;
    let mut out = Vec::new();
    collect(&object, String::new(), 0, &mut |name, tensor| {
        let data = entry(&format!("data/{}", tensor.storage.key))
            .ok_or_else(|| format!("{name}: the storage {top}data/{} is missing", tensor.storage.key))?;
        let what = if name.is_empty() { "the tensor".to_owned() } else { format!("tensor {name:?}") };
        out.push((name.to_owned(), tensor.materialize(data).map_err(|e| format!("{what}: {e}"))?));
        Ok(())
    })?;
    Ok(out)
}

/// Walks `value` for tensors, naming each by its path.
fn collect(
    value: &Value,
    name: String,
    depth: usize,
    found: &mut dyn FnMut(&str, &TensorRef) -> Result<(), String>,
) -> Result<(), String> {
    if depth > 64 {
        return Err("objects nested deeper than 64 levels (or a loop)".to_owned());
    }
    let child = |key: &str| if name.is_empty() { key.to_owned() } else { format!("{name}.{key}") };
    match value {
        Value::Tensor(t) => found(&name, t),
        Value::Dict(items) => {
            for (key, v) in items.borrow().iter() {
                let key = match key {
                    Value::Str(s) => s.to_string(),
                    Value::Int(i) => i.to_string(),
                    _ => continue,
                };
                collect(v, child(&key), depth + 1, found)?;
            }
            Ok(())
        }
        Value::List(items) => {
            for (i, v) in items.borrow().iter().enumerate() {
                collect(v, child(&i.to_string()), depth + 1, found)?;
            }
            Ok(())
        }
        Value::Tuple(items) => {
            for (i, v) in items.iter().enumerate() {
                collect(v, child(&i.to_string()), depth + 1, found)?;
            }
            Ok(())
        }
        _ => Ok(()),
    }
}

/// A storage named by a persistent id: its elements are the file's `data/<key>`.
#[derive(Debug)]
struct Storage {
    dtype: DType,
    key: String,
    numel: usize,
}

/// A tensor as `_rebuild_tensor_v2` describes it: a view of a storage.
#[derive(Debug)]
struct TensorRef {
    storage: Rc<Storage>,
    offset: usize,
    shape: Vec<usize>,
    stride: Vec<usize>,
}

impl TensorRef {
    /// The elements out of the storage's bytes `data`: contiguous views only.
    fn materialize(&self, data: &[u8]) -> Result<Tensor, String> {
        let (dtype, size) = (self.storage.dtype, self.storage.dtype.size());
        let numel = self.storage.numel;
        if numel.checked_mul(size).is_none_or(|n| data.len() < n) {
            return Err(format!("its storage holds {} bytes, {numel} elements of {size} bytes expected", data.len()));
        }
        let count = self.shape.iter().try_fold(1usize, |a, &d| a.checked_mul(d)).ok_or("size overflows")?;
        let mut expected = 1;
        for (&dim, &stride) in self.shape.iter().zip(&self.stride).rev() {
            if dim > 1 && stride != expected {
                return Err(format!(
                    "not contiguous (shape {:?}, strides {:?}): only C-ordered tensors are read",
                    self.shape, self.stride
                ));
            }
            expected = expected.saturating_mul(dim);
        }
        if count > 0 && self.offset.checked_add(count).is_none_or(|end| end > numel) {
            return Err(format!(
                "shape {:?} at offset {} runs past its storage of {numel} elements",
                self.shape, self.offset
            ));
        }
        let bytes =
            if count == 0 { Vec::new() } else { data[self.offset * size..(self.offset + count) * size].to_vec() };
        Ok(Tensor { dtype, shape: self.shape.clone(), bytes })
    }
}

/// What the pickle machine holds.
#[derive(Clone, Debug)]
enum Value {
    None,
    /// A bool or a float: their values are not needed.
    Bool,
    Int(i64),
    Float,
    Str(Rc<str>),
    Tuple(Rc<Vec<Value>>),
    // Lists and dicts are shared and changed in place, as Python's are (the memo keeps them).
    List(Rc<RefCell<Vec<Value>>>),
    Dict(Rc<RefCell<Vec<(Value, Value)>>>),
    /// A `GLOBAL`: `module.name`.
    Global(Rc<str>),
    Storage(Rc<Storage>),
    Tensor(Rc<TensorRef>),
}

impl Value {
    fn what(&self) -> String {
        match self {
            Value::None => "None".into(),
            Value::Bool => "a bool".into(),
            Value::Int(_) => "an int".into(),
            Value::Float => "a float".into(),
            Value::Str(_) => "a string".into(),
            Value::Tuple(_) => "a tuple".into(),
            Value::List(_) => "a list".into(),
            Value::Dict(_) => "a dict".into(),
            Value::Global(g) => format!("`{g}`"),
            Value::Storage(_) => "a storage".into(),
            Value::Tensor(_) => "a tensor".into(),
        }
    }

    fn usize(&self, what: &str) -> Result<usize, String> {
        match self {
            Value::Int(i) => usize::try_from(*i).map_err(|_| format!("{what} is {i}")),
            other => Err(format!("{what} is {}, not an int", other.what())),
        }
    }

    fn usizes(&self, what: &str) -> Result<Vec<usize>, String> {
        match self {
            Value::Tuple(items) => items.iter().map(|v| v.usize(what)).collect(),
            other => Err(format!("{what} is {}, not a tuple", other.what())),
        }
    }
}

/// Pickle opcodes' names, for errors.
fn opcode_name(op: u8) -> String {
    let name = match op {
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
        _ => return format!("0x{op:02x} (no pickle opcode)"),
    };
    format!("{name} (0x{op:02x})")
}

/// The pickle machine: a stack, marks into it, and the memo.
struct Unpickler<'a> {
    data: &'a [u8],
    at: usize,
    stack: Vec<Value>,
    marks: Vec<usize>,
    memo: HashMap<u32, Value>,
}

impl<'a> Unpickler<'a> {
    fn new(data: &'a [u8]) -> Unpickler<'a> {
        Unpickler { data, at: 0, stack: Vec::new(), marks: Vec::new(), memo: HashMap::new() }
    }

    fn bytes(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&end| end <= self.data.len()).ok_or("the pickle is truncated")?;
        let out = &self.data[self.at..end];
        self.at = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, String> {
        Ok(self.bytes(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, String> {
        let b = self.bytes(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u32(&mut self) -> Result<u32, String> {
        let b = self.bytes(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn line(&mut self) -> Result<&'a str, String> {
        let rest = &self.data[self.at..];
        let end = rest.iter().position(|&b| b == b'\n').ok_or("the pickle is truncated")?;
        self.at += end + 1;
        std::str::from_utf8(&rest[..end]).map_err(|_| "a GLOBAL name is not text".to_owned())
    }

    fn text(&mut self, n: usize) -> Result<Value, String> {
        let b = self.bytes(n)?;
        Ok(Value::Str(std::str::from_utf8(b).map_err(|_| "a string is not UTF-8")?.into()))
    }

    fn pop(&mut self) -> Result<Value, String> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("the stack is empty down to its mark".to_owned());
        }
        self.stack.pop().ok_or_else(|| "the stack is empty".to_owned())
    }

    /// What is above the last mark, which is taken away.
    fn pop_mark(&mut self) -> Result<Vec<Value>, String> {
        let mark = self.marks.pop().ok_or("no MARK")?;
        Ok(self.stack.split_off(mark))
    }

    fn top(&mut self) -> Result<&mut Value, String> {
        if self.marks.last().is_some_and(|&m| m >= self.stack.len()) {
            return Err("the stack is empty down to its mark".to_owned());
        }
        self.stack.last_mut().ok_or_else(|| "the stack is empty".to_owned())
    }

    fn put(&mut self, key: u32) -> Result<(), String> {
        let top = self.top()?.clone();
        self.memo.insert(key, top);
        Ok(())
    }

    fn get(&mut self, key: u32) -> Result<(), String> {
        let v = self.memo.get(&key).ok_or_else(|| format!("memo {key} is not set"))?.clone();
        self.stack.push(v);
        Ok(())
    }

    /// Runs the pickle to its STOP; the object it built.
    fn load(mut self) -> Result<Value, String> {
        loop {
            let at = self.at;
            let op = self.u8().map_err(|_| format!("the pickle ends at byte {at} without STOP"))?;
            let step = self.step(op).map_err(|e| format!("{} at byte {at}: {e}", opcode_name(op)))?;
            if step {
                return self.pop().map_err(|e| format!("STOP at byte {at}: {e}"));
            }
        }
    }

    /// One opcode; true at STOP.
    fn step(&mut self, op: u8) -> Result<bool, String> {
        match op {
            0x80 => {
                let proto = self.u8()?;
                if proto > 5 {
                    return Err(format!("pickle protocol {proto} is not known"));
                }
            }
            0x95 => {
                self.bytes(8)?;
            }
            b'.' => return Ok(true),
            b'(' => self.marks.push(self.stack.len()),
            b'N' => self.stack.push(Value::None),
            0x88 | 0x89 => self.stack.push(Value::Bool),
            b'J' => {
                let v = self.u32()? as i32;
                self.stack.push(Value::Int(i64::from(v)));
            }
            b'K' => {
                let v = self.u8()?;
                self.stack.push(Value::Int(i64::from(v)));
            }
            b'M' => {
                let v = self.u16()?;
                self.stack.push(Value::Int(i64::from(v)));
            }
            0x8a => {
                // Little-endian two's complement of n bytes.
                let n = usize::from(self.u8()?);
                if n > 8 {
                    return Err(format!("an int of {n} bytes is too large"));
                }
                let b = self.bytes(n)?;
                let mut buf = if b.last().is_some_and(|&x| x & 0x80 != 0) { [0xff; 8] } else { [0; 8] };
                buf[..n].copy_from_slice(b);
                self.stack.push(Value::Int(i64::from_le_bytes(buf)));
            }
            b'G' => {
                self.bytes(8)?;
                self.stack.push(Value::Float);
            }
            b'X' => {
                let n = self.u32()? as usize;
                let v = self.text(n)?;
                self.stack.push(v);
            }
            0x8c => {
                let n = usize::from(self.u8()?);
                let v = self.text(n)?;
                self.stack.push(v);
            }
            b')' => self.stack.push(Value::Tuple(Rc::new(Vec::new()))),
            b't' => {
                let items = self.pop_mark()?;
                self.stack.push(Value::Tuple(Rc::new(items)));
            }
            0x85..=0x87 => {
                let n = usize::from(op - 0x84);
                let mut items = Vec::with_capacity(n);
                for _ in 0..n {
                    items.push(self.pop()?);
                }
                items.reverse();
                self.stack.push(Value::Tuple(Rc::new(items)));
            }
            b']' => self.stack.push(Value::List(Rc::default())),
            b'a' => {
                let v = self.pop()?;
                match self.top()? {
                    Value::List(items) => items.borrow_mut().push(v),
                    other => return Err(format!("appending to {}", other.what())),
                }
            }
            b'e' => {
                let values = self.pop_mark()?;
                match self.top()? {
                    Value::List(items) => items.borrow_mut().extend(values),
                    other => return Err(format!("appending to {}", other.what())),
                }
            }
            b'}' => self.stack.push(Value::Dict(Rc::default())),
            b's' => {
                let v = self.pop()?;
                let k = self.pop()?;
                match self.top()? {
                    Value::Dict(items) => items.borrow_mut().push((k, v)),
                    other => return Err(format!("setting an item of {}", other.what())),
                }
            }
            b'u' => {
                let values = self.pop_mark()?;
                if values.len() % 2 != 0 {
                    return Err("an odd number of keys and values".to_owned());
                }
                match self.top()? {
                    Value::Dict(items) => {
                        let mut items = items.borrow_mut();
                        let mut values = values.into_iter();
                        while let (Some(k), Some(v)) = (values.next(), values.next()) {
                            items.push((k, v));
                        }
                    }
                    other => return Err(format!("setting items of {}", other.what())),
                }
            }
            b'q' => {
                let key = self.u8()?;
                self.put(u32::from(key))?;
            }
            b'r' => {
                let key = self.u32()?;
                self.put(key)?;
            }
            0x94 => {
                let key = u32::try_from(self.memo.len()).map_err(|_| "memo overflow")?;
                self.put(key)?;
            }
            b'h' => {
                let key = self.u8()?;
                self.get(u32::from(key))?;
            }
            b'j' => {
                let key = self.u32()?;
                self.get(key)?;
            }
            b'c' => {
                let module = self.line()?;
                let name = self.line()?;
                self.stack.push(Value::Global(format!("{module}.{name}").into()));
            }
            b'Q' => {
                let pid = self.pop()?;
                let storage = persistent_storage(&pid)?;
                self.stack.push(Value::Storage(Rc::new(storage)));
            }
            b'R' => {
                let args = self.pop()?;
                let callable = self.pop()?;
                let Value::Tuple(args) = args else { return Err(format!("the arguments are {}", args.what())) };
                let v = reduce(&callable, &args)?;
                self.stack.push(v);
            }
            b'b' => {
                let _state = self.pop()?;
                // An OrderedDict's state sets attributes (a state dict's `_metadata`): not needed.
                match self.top()? {
                    Value::Dict(_) => {}
                    other => return Err(format!("setting the state of {}, which is not read", other.what())),
                }
            }
            _ => return Err("not an opcode of the torch.save files read here".to_owned()),
        }
        Ok(false)
    }
}

/// The storage a `BINPERSID` names: `('storage', torch.<Type>Storage, key, location, numel)`.
fn persistent_storage(pid: &Value) -> Result<Storage, String> {
    let Value::Tuple(items) = pid else { return Err(format!("a persistent id that is {}", pid.what())) };
    match &items[..] {
        [Value::Str(kind), Value::Global(class), Value::Str(key), _location, numel] if &**kind == "storage" => {
            let dtype = class
                .strip_prefix("torch.")
                .and_then(DType::of_storage)
                .ok_or_else(|| format!("a storage of `{class}`, an element type not read"))?;
            Ok(Storage { dtype, key: key.to_string(), numel: numel.usize("a storage's size")? })
        }
        _ => Err("a persistent id that is not ('storage', type, key, location, size)".to_owned()),
    }
}

/// A `REDUCE`: the calls torch.save files make.
fn reduce(callable: &Value, args: &[Value]) -> Result<Value, String> {
    let Value::Global(name) = callable else { return Err(format!("calling {}", callable.what())) };
    match &**name {
        "torch._utils._rebuild_tensor_v2" | "torch._utils._rebuild_tensor" => {
            let [Value::Storage(storage), offset, size, stride, ..] = args else {
                return Err(format!(
                    "`{name}` called with {} arguments, not (storage, offset, size, stride, ...)",
                    args.len()
                ));
            };
            let shape = size.usizes("a tensor's size")?;
            let stride = stride.usizes("a tensor's stride")?;
            if shape.len() != stride.len() {
                return Err(format!("a tensor of size {shape:?} and strides {stride:?}"));
            }
            Ok(Value::Tensor(Rc::new(TensorRef {
                storage: storage.clone(),
                offset: offset.usize("a tensor's storage offset")?,
                shape,
                stride,
            })))
        }
        // nn.Parameter(data, requires_grad, backward_hooks): its data.
        "torch._utils._rebuild_parameter" | "torch._utils._rebuild_parameter_with_state" => match args.first() {
            Some(t @ Value::Tensor(_)) => Ok(t.clone()),
            _ => Err(format!("`{name}` of no tensor")),
        },
        "collections.OrderedDict" if args.is_empty() => Ok(Value::Dict(Rc::default())),
        _ => Err(format!("the file holds a `{name}` object: only tensors, in dicts, lists and tuples, are read")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_widen_exactly() {
        assert_eq!(f16_to_f32(0x3c00), 1.0);
        assert_eq!(f16_to_f32(0xc000), -2.0);
        assert_eq!(f16_to_f32(0x7bff), 65504.0);
        assert_eq!(f16_to_f32(0x0001), 2f32.powi(-24));
        assert_eq!(f16_to_f32(0x8001), -(2f32.powi(-24)));
        assert_eq!(f16_to_f32(0x3555), 0.333_251_95);
        assert_eq!(f16_to_f32(0x7c00), f32::INFINITY);
        assert!(f16_to_f32(0x7e00).is_nan());
    }

    #[test]
    fn legacy_and_foreign_files_say_what_they_are() {
        // A legacy torch.save stream: pickle protocol 2 and torch's magic number.
        let legacy = b"\x80\x02\x8a\x0a\x6c\xfc\x9c\x46\xf9\x20\x6a\xa8\x50\x19.";
        let err = read(legacy).unwrap_err();
        assert!(err.contains("legacy") && err.contains("re-save"), "{err}");
        assert!(read(b"\x93NUMPY").unwrap_err().contains("not a torch.save file"));
    }

    #[test]
    fn the_pickle_machine_refuses_what_it_does_not_know() {
        // A pickle of a set (EMPTY_SET): named in the error.
        let err = Unpickler::new(b"\x80\x02\x8f.").load().unwrap_err();
        assert!(err.contains("EMPTY_SET (0x8f) at byte 2"), "{err}");
        let err = Unpickler::new(b"\x80\x02cos\nsystem\nX\x02\x00\x00\x00ls\x85R.").load().unwrap_err();
        assert!(err.contains("`os.system`"), "{err}");
        let err = Unpickler::new(b"\x80\x02}q\x00(X\x01\x00\x00\x00aK\x01").load().unwrap_err();
        assert!(err.contains("without STOP"), "{err}");
    }
}

//! Reading an ONNX model's initializers (weights) and node list, with no protobuf crate.
//!
//! Only the parts of `onnx.proto` this engine needs are decoded:
//! `ModelProto { ir_version = 1, opset_import = 8, producer_name = 2, graph = 7 }`,
//! `GraphProto { node = 1, name = 2, initializer = 5, input = 11, output = 12 }`,
//! `NodeProto { input = 1, output = 2, name = 3, op_type = 4, attribute = 5, domain = 7 }`,
//! `AttributeProto { name = 1, f = 2, i = 3, s = 4, t = 5, floats = 7, ints = 8, strings = 9, type = 20 }`,
//! `TensorProto { dims = 1, data_type = 2, float_data = 4, int32_data = 5, string_data = 6,
//! int64_data = 7, name = 8, raw_data = 9, double_data = 10, uint64_data = 11, data_location = 14 }`,
//! `ValueInfoProto { name = 1 }`, `OperatorSetIdProto { domain = 1, version = 2 }`.
//! Every other field is skipped. Tensor payloads are normalised to little-endian bytes of the
//! element type, whichever of `raw_data` or the typed repeated fields the file used.

use std::collections::BTreeMap;
use std::fmt;
use std::path::Path;

use crate::proto::{self, DecodeError, Fields, Value};

/// Errors from reading an ONNX file.
#[derive(Debug)]
pub enum OnnxError {
    Io(std::io::Error),
    Decode(DecodeError),
    /// The file is well-formed protobuf but not something this reader accepts.
    Invalid(String),
}

impl fmt::Display for OnnxError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            OnnxError::Io(e) => write!(f, "reading the ONNX file: {e}"),
            OnnxError::Decode(e) => write!(f, "malformed ONNX protobuf: {e}"),
            OnnxError::Invalid(m) => write!(f, "unsupported ONNX content: {m}"),
        }
    }
}

impl std::error::Error for OnnxError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            OnnxError::Io(e) => Some(e),
            OnnxError::Decode(e) => Some(e),
            OnnxError::Invalid(_) => None,
        }
    }
}

impl From<DecodeError> for OnnxError {
    fn from(e: DecodeError) -> Self {
        OnnxError::Decode(e)
    }
}

impl From<std::io::Error> for OnnxError {
    fn from(e: std::io::Error) -> Self {
        OnnxError::Io(e)
    }
}

pub(crate) fn invalid(msg: impl Into<String>) -> OnnxError {
    OnnxError::Invalid(msg.into())
}

/// `TensorProto.DataType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum DataType {
    Float,
    Uint8,
    Int8,
    Uint16,
    Int16,
    Int32,
    Int64,
    String,
    Bool,
    Float16,
    Double,
    Uint32,
    Uint64,
    Complex64,
    Complex128,
    BFloat16,
    /// A code this reader doesn't know (float8 variants, int4, ...).
    Other(i32),
}

impl DataType {
    pub fn from_code(code: i32) -> DataType {
        match code {
            1 => DataType::Float,
            2 => DataType::Uint8,
            3 => DataType::Int8,
            4 => DataType::Uint16,
            5 => DataType::Int16,
            6 => DataType::Int32,
            7 => DataType::Int64,
            8 => DataType::String,
            9 => DataType::Bool,
            10 => DataType::Float16,
            11 => DataType::Double,
            12 => DataType::Uint32,
            13 => DataType::Uint64,
            14 => DataType::Complex64,
            15 => DataType::Complex128,
            16 => DataType::BFloat16,
            c => DataType::Other(c),
        }
    }

    /// Bytes per element, for the fixed-width types.
    pub fn size(self) -> Option<usize> {
        Some(match self {
            DataType::Uint8 | DataType::Int8 | DataType::Bool => 1,
            DataType::Uint16 | DataType::Int16 | DataType::Float16 | DataType::BFloat16 => 2,
            DataType::Float | DataType::Int32 | DataType::Uint32 => 4,
            DataType::Int64 | DataType::Uint64 | DataType::Double | DataType::Complex64 => 8,
            DataType::Complex128 => 16,
            DataType::String | DataType::Other(_) => return None,
        })
    }
}

/// A tensor's name, type, shape and little-endian element bytes (row-major, as in ONNX).
#[derive(Debug, Clone, PartialEq)]
pub struct Tensor {
    pub name: String,
    pub dtype: DataType,
    pub dims: Vec<usize>,
    pub data: Vec<u8>,
}

impl Tensor {
    /// Number of elements (1 for a scalar, whose `dims` is empty).
    pub fn numel(&self) -> usize {
        self.dims.iter().product()
    }

    /// The elements of a float tensor.
    pub fn to_f32(&self) -> Result<Vec<f32>, OnnxError> {
        if self.dtype != DataType::Float {
            return Err(invalid(format!("{} is {:?}, not float", self.name, self.dtype)));
        }
        Ok(self.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().expect("4 bytes"))).collect())
    }

    /// The elements of an integer tensor (int8/uint8/int16/uint16/int32/uint32/int64/bool), widened.
    pub fn to_i64(&self) -> Result<Vec<i64>, OnnxError> {
        let d = &self.data;
        Ok(match self.dtype {
            DataType::Int8 => d.iter().map(|&b| i64::from(b as i8)).collect(),
            DataType::Uint8 | DataType::Bool => d.iter().map(|&b| i64::from(b)).collect(),
            DataType::Int16 => d.chunks_exact(2).map(|c| i64::from(i16::from_le_bytes([c[0], c[1]]))).collect(),
            DataType::Uint16 => d.chunks_exact(2).map(|c| i64::from(u16::from_le_bytes([c[0], c[1]]))).collect(),
            DataType::Int32 => {
                d.chunks_exact(4).map(|c| i64::from(i32::from_le_bytes(c.try_into().expect("4 bytes")))).collect()
            }
            DataType::Uint32 => {
                d.chunks_exact(4).map(|c| i64::from(u32::from_le_bytes(c.try_into().expect("4 bytes")))).collect()
            }
            DataType::Int64 => d.chunks_exact(8).map(|c| i64::from_le_bytes(c.try_into().expect("8 bytes"))).collect(),
            other => return Err(invalid(format!("{} is {other:?}, not an integer type", self.name))),
        })
    }
}

/// One attribute of a node, for the kinds this engine may want to read.
#[derive(Debug, Clone, PartialEq)]
pub enum AttrValue {
    Float(f32),
    Int(i64),
    String(Vec<u8>),
    Tensor(Tensor),
    Floats(Vec<f32>),
    Ints(Vec<i64>),
    Strings(Vec<Vec<u8>>),
    /// Graphs, sparse tensors, type protos: present but not decoded.
    Unsupported(i64),
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub name: String,
    pub value: AttrValue,
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Node {
    pub name: String,
    pub op_type: String,
    pub domain: String,
    /// Input value names; an empty string marks an omitted optional input.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
    pub attributes: Vec<Attribute>,
}

impl Node {
    pub fn attr(&self, name: &str) -> Option<&AttrValue> {
        self.attributes.iter().find(|a| a.name == name).map(|a| &a.value)
    }

    /// Its attribute `name` when it is a list of ints.
    pub fn attr_ints(&self, name: &str) -> Option<Vec<i64>> {
        match self.attr(name) {
            Some(AttrValue::Ints(v)) => Some(v.clone()),
            _ => None,
        }
    }

    /// Its attribute `name` when it is an int, else `default`.
    pub fn attr_i(&self, name: &str, default: i64) -> i64 {
        match self.attr(name) {
            Some(AttrValue::Int(v)) => *v,
            _ => default,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Graph {
    pub name: String,
    pub nodes: Vec<Node>,
    /// In file order.
    pub initializers: Vec<Tensor>,
    /// Names of the graph inputs and outputs, in order.
    pub inputs: Vec<String>,
    pub outputs: Vec<String>,
}

impl Graph {
    pub fn initializer(&self, name: &str) -> Option<&Tensor> {
        self.initializers.iter().find(|t| t.name == name)
    }
}

#[derive(Debug, Clone, PartialEq, Default)]
pub struct Model {
    pub ir_version: i64,
    pub producer_name: String,
    /// `(domain, version)`; the default domain is "".
    pub opsets: Vec<(String, i64)>,
    pub graph: Graph,
}

impl Model {
    /// Parses a serialized `ModelProto`.
    pub fn parse(bytes: &[u8]) -> Result<Model, OnnxError> {
        let mut model = Model::default();
        let mut have_graph = false;
        for field in Fields::new(bytes) {
            match field? {
                (1, v) => model.ir_version = int(v)?,
                (2, v) => model.producer_name = string(v)?,
                (7, v) => {
                    model.graph = parse_graph(bytes_of(v)?)?;
                    have_graph = true;
                }
                (8, v) => {
                    let (mut domain, mut version) = (String::new(), 0);
                    for f in Fields::new(bytes_of(v)?) {
                        match f? {
                            (1, v) => domain = string(v)?,
                            (2, v) => version = int(v)?,
                            _ => {}
                        }
                    }
                    model.opsets.push((domain, version));
                }
                _ => {}
            }
        }
        if !have_graph {
            return Err(invalid("the model has no graph"));
        }
        Ok(model)
    }

    /// Reads and parses an `.onnx` file.
    pub fn load(path: impl AsRef<Path>) -> Result<Model, OnnxError> {
        Model::parse(&std::fs::read(path)?)
    }

    /// The initializers by name: name -> (dtype, dims, bytes) in a [`Tensor`].
    pub fn initializer_map(&self) -> BTreeMap<&str, &Tensor> {
        self.graph.initializers.iter().map(|t| (t.name.as_str(), t)).collect()
    }
}

/// Only the initializers of a serialized model, by name.
pub fn read_initializers(bytes: &[u8]) -> Result<BTreeMap<String, Tensor>, OnnxError> {
    let model = Model::parse(bytes)?;
    let mut out = BTreeMap::new();
    for t in model.graph.initializers {
        let name = t.name.clone();
        if out.insert(name.clone(), t).is_some() {
            return Err(invalid(format!("initializer {name} appears twice")));
        }
    }
    Ok(out)
}

fn bytes_of<'a>(v: Value<'a>) -> Result<&'a [u8], OnnxError> {
    v.as_bytes().ok_or_else(|| invalid("expected a length-delimited field"))
}

fn string(v: Value<'_>) -> Result<String, OnnxError> {
    String::from_utf8(bytes_of(v)?.to_vec()).map_err(|_| invalid("a string field is not UTF-8"))
}

fn int(v: Value<'_>) -> Result<i64, OnnxError> {
    v.as_i64().ok_or_else(|| invalid("expected a varint field"))
}

fn parse_graph(bytes: &[u8]) -> Result<Graph, OnnxError> {
    let mut g = Graph::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => g.nodes.push(parse_node(bytes_of(v)?)?),
            (2, v) => g.name = string(v)?,
            (5, v) => g.initializers.push(parse_tensor(bytes_of(v)?)?),
            (11, v) => g.inputs.push(value_info_name(bytes_of(v)?)?),
            (12, v) => g.outputs.push(value_info_name(bytes_of(v)?)?),
            (15, _) => return Err(invalid("sparse initializers are not supported")),
            _ => {}
        }
    }
    Ok(g)
}

fn value_info_name(bytes: &[u8]) -> Result<String, OnnxError> {
    for f in Fields::new(bytes) {
        if let (1, v) = f? {
            return string(v);
        }
    }
    Ok(String::new())
}

fn parse_node(bytes: &[u8]) -> Result<Node, OnnxError> {
    let mut n = Node::default();
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => n.inputs.push(string(v)?),
            (2, v) => n.outputs.push(string(v)?),
            (3, v) => n.name = string(v)?,
            (4, v) => n.op_type = string(v)?,
            (5, v) => n.attributes.push(parse_attribute(bytes_of(v)?)?),
            (7, v) => n.domain = string(v)?,
            _ => {}
        }
    }
    Ok(n)
}

fn parse_attribute(bytes: &[u8]) -> Result<Attribute, OnnxError> {
    let mut name = String::new();
    let mut kind = 0i64;
    let (mut f, mut i, mut s, mut t) = (None, None, None, None);
    let (mut floats, mut ints, mut strings) = (Vec::new(), Vec::new(), Vec::new());
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => name = string(v)?,
            (2, v) => f = Some(v.as_f32().ok_or_else(|| invalid("attribute f is not a fixed32"))?),
            (3, v) => i = Some(int(v)?),
            (4, v) => s = Some(bytes_of(v)?.to_vec()),
            (5, v) => t = Some(parse_tensor(bytes_of(v)?)?),
            (7, v) => proto::push_fixed32s(v, &mut floats)?,
            (8, v) => proto::push_varints(v, &mut ints)?,
            (9, v) => strings.push(bytes_of(v)?.to_vec()),
            (20, v) => kind = int(v)?,
            _ => {}
        }
    }
    // AttributeProto.AttributeType; 0 (UNDEFINED) in old files: infer from what is present.
    let value = match kind {
        1 => AttrValue::Float(f.unwrap_or(0.0)),
        2 => AttrValue::Int(i.unwrap_or(0)),
        3 => AttrValue::String(s.unwrap_or_default()),
        4 => AttrValue::Tensor(t.ok_or_else(|| invalid(format!("tensor attribute {name} has no tensor")))?),
        6 => AttrValue::Floats(floats.into_iter().map(f32::from_bits).collect()),
        7 => AttrValue::Ints(ints.into_iter().map(|v| v as i64).collect()),
        8 => AttrValue::Strings(strings),
        0 => match (f, i, s, t) {
            (Some(f), _, _, _) => AttrValue::Float(f),
            (_, Some(i), _, _) => AttrValue::Int(i),
            (_, _, Some(s), _) => AttrValue::String(s),
            (_, _, _, Some(t)) => AttrValue::Tensor(t),
            _ if !floats.is_empty() => AttrValue::Floats(floats.into_iter().map(f32::from_bits).collect()),
            _ if !ints.is_empty() => AttrValue::Ints(ints.into_iter().map(|v| v as i64).collect()),
            _ => AttrValue::Strings(strings),
        },
        other => AttrValue::Unsupported(other),
    };
    Ok(Attribute { name, value })
}

/// Decodes a `TensorProto` into a [`Tensor`] with little-endian element bytes.
pub fn parse_tensor(bytes: &[u8]) -> Result<Tensor, OnnxError> {
    let mut name = String::new();
    let mut dims = Vec::new();
    let mut code = 0i32;
    let mut raw: Option<&[u8]> = None;
    let (mut f32s, mut i32s, mut i64s, mut f64s, mut u64s) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut external = false;
    for field in Fields::new(bytes) {
        match field? {
            (1, v) => proto::push_varints(v, &mut dims)?,
            (2, v) => code = int(v)? as i32,
            (3, _) => return Err(invalid("segmented tensors are not supported")),
            (4, v) => proto::push_fixed32s(v, &mut f32s)?,
            (5, v) => proto::push_varints(v, &mut i32s)?,
            (6, _) => return Err(invalid("string tensors are not supported")),
            (7, v) => proto::push_varints(v, &mut i64s)?,
            (8, v) => name = string(v)?,
            (9, v) => raw = Some(bytes_of(v)?),
            (10, v) => proto::push_fixed64s(v, &mut f64s)?,
            (11, v) => proto::push_varints(v, &mut u64s)?,
            (14, v) => external = int(v)? == 1,
            _ => {}
        }
    }
    if external {
        return Err(invalid(format!("tensor {name} keeps its data in an external file; not supported")));
    }
    let dims = dims
        .into_iter()
        .map(|d| usize::try_from(d as i64).map_err(|_| invalid(format!("tensor {name} has a negative dimension"))))
        .collect::<Result<Vec<_>, _>>()?;
    let dtype = DataType::from_code(code);
    let size = dtype.size().ok_or_else(|| invalid(format!("tensor {name} has unsupported data type {dtype:?}")))?;
    let numel = dims
        .iter()
        .try_fold(1usize, |acc, &d| acc.checked_mul(d))
        .ok_or_else(|| invalid(format!("tensor {name} is too large")))?;

    let data: Vec<u8> = if let Some(raw) = raw {
        raw.to_vec()
    } else {
        match dtype {
            DataType::Float | DataType::Complex64 => f32s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            // int32_data holds the narrow integer types and the 16-bit floats' bit patterns too.
            DataType::Int32
            | DataType::Int16
            | DataType::Uint16
            | DataType::Int8
            | DataType::Uint8
            | DataType::Bool
            | DataType::Float16
            | DataType::BFloat16 => i32s.iter().flat_map(|&v| (v as u32).to_le_bytes()[..size].to_vec()).collect(),
            DataType::Int64 => i64s.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            DataType::Double | DataType::Complex128 => f64s.iter().flat_map(|v| v.to_le_bytes()).collect(),
            DataType::Uint32 => u64s.iter().flat_map(|&v| (v as u32).to_le_bytes()).collect(),
            DataType::Uint64 => u64s.iter().flat_map(|&v| v.to_le_bytes()).collect(),
            DataType::String | DataType::Other(_) => unreachable!("rejected above"),
        }
    };
    if Some(data.len()) != numel.checked_mul(size) {
        return Err(invalid(format!(
            "tensor {name}: {} bytes of data for dims {dims:?} of {dtype:?} ({numel} elements)",
            data.len()
        )));
    }
    Ok(Tensor { name, dtype, dims, data })
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::proto::encode::*;

    /// A TensorProto with raw_data.
    pub fn raw_tensor(name: &str, code: i32, dims: &[u64], data: &[u8]) -> Vec<u8> {
        let mut t = Vec::new();
        for &d in dims {
            varint_field(1, d, &mut t);
        }
        varint_field(2, code as u64, &mut t);
        bytes_field(8, name.as_bytes(), &mut t);
        bytes_field(9, data, &mut t);
        t
    }

    pub fn node(op: &str, name: &str, inputs: &[&str], outputs: &[&str]) -> Vec<u8> {
        let mut n = Vec::new();
        for i in inputs {
            bytes_field(1, i.as_bytes(), &mut n);
        }
        for o in outputs {
            bytes_field(2, o.as_bytes(), &mut n);
        }
        bytes_field(3, name.as_bytes(), &mut n);
        bytes_field(4, op.as_bytes(), &mut n);
        n
    }

    /// A ModelProto around a graph made of the given nodes and initializers.
    pub fn model(nodes: &[Vec<u8>], inits: &[Vec<u8>]) -> Vec<u8> {
        let mut g = Vec::new();
        for n in nodes {
            bytes_field(1, n, &mut g);
        }
        bytes_field(2, b"tiny", &mut g);
        for t in inits {
            bytes_field(5, t, &mut g);
        }
        let mut vi = Vec::new();
        bytes_field(1, b"x", &mut vi);
        bytes_field(11, &vi, &mut g);
        let mut vo = Vec::new();
        bytes_field(1, b"y", &mut vo);
        bytes_field(12, &vo, &mut g);
        let mut m = Vec::new();
        varint_field(1, 8, &mut m);
        bytes_field(2, b"hand", &mut m);
        bytes_field(7, &g, &mut m);
        let mut op = Vec::new();
        bytes_field(1, b"", &mut op);
        varint_field(2, 17, &mut op);
        bytes_field(8, &op, &mut m);
        m
    }

    fn f32_bytes(v: &[f32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_le_bytes()).collect()
    }

    #[test]
    fn reads_raw_and_typed_initializers() {
        // float via raw_data
        let w = raw_tensor("w", 1, &[2, 3], &f32_bytes(&[1.0, 2.0, 3.0, 4.0, 5.0, 6.0]));
        // float scalar via packed float_data, as onnxruntime's quantizer writes scales
        let mut s = Vec::new();
        varint_field(2, 1, &mut s);
        bytes_field(8, b"s", &mut s);
        bytes_field(4, &f32_bytes(&[0.25]), &mut s);
        // int8 scalar -3 via int32_data (varint of a negative int32: 10 bytes)
        let mut z = Vec::new();
        varint_field(2, 3, &mut z);
        bytes_field(8, b"z", &mut z);
        let mut packed = Vec::new();
        varint((-3i64) as u64, &mut packed);
        bytes_field(5, &packed, &mut z);
        // int64 vector via unpacked int64_data, unpacked dims
        let mut l = Vec::new();
        varint_field(1, 2, &mut l);
        varint_field(2, 7, &mut l);
        bytes_field(8, b"l", &mut l);
        varint_field(7, 5, &mut l);
        varint_field(7, (-9i64) as u64, &mut l);
        // float16 via int32_data
        let mut h = Vec::new();
        varint_field(1, 1, &mut h);
        varint_field(2, 10, &mut h);
        bytes_field(8, b"h", &mut h);
        varint_field(5, 0x3c00, &mut h);

        let bytes = model(&[], &[w, s, z, l, h]);
        let map = read_initializers(&bytes).unwrap();
        assert_eq!(map.len(), 5);
        let w = &map["w"];
        assert_eq!((w.dtype, w.dims.clone()), (DataType::Float, vec![2, 3]));
        assert_eq!(w.to_f32().unwrap(), vec![1.0, 2.0, 3.0, 4.0, 5.0, 6.0]);
        let s = &map["s"];
        assert!(s.dims.is_empty());
        assert_eq!(s.numel(), 1);
        assert_eq!(s.to_f32().unwrap(), vec![0.25]);
        let z = &map["z"];
        assert_eq!((z.dtype, z.data.clone()), (DataType::Int8, vec![0xfd]));
        assert_eq!(z.to_i64().unwrap(), vec![-3]);
        assert_eq!(map["l"].to_i64().unwrap(), vec![5, -9]);
        assert_eq!(map["h"].data, vec![0x00, 0x3c]);
    }

    #[test]
    fn reads_graph_structure() {
        let mut n = node("LayerNormalization", "ln", &["x", "g", ""], &["y"]);
        let mut a = Vec::new();
        bytes_field(1, b"epsilon", &mut a);
        fixed32_field(2, 1e-5f32.to_bits(), &mut a);
        varint_field(20, 1, &mut a);
        bytes_field(5, &a, &mut n);
        let mut a = Vec::new();
        bytes_field(1, b"axes", &mut a);
        let mut packed = Vec::new();
        varint(1, &mut packed);
        varint((-1i64) as u64, &mut packed);
        bytes_field(8, &packed, &mut a);
        varint_field(20, 7, &mut a);
        bytes_field(5, &a, &mut n);
        let bytes = model(&[n], &[raw_tensor("g", 1, &[1], &f32_bytes(&[1.0]))]);
        let m = Model::parse(&bytes).unwrap();
        assert_eq!((m.ir_version, m.producer_name.as_str()), (8, "hand"));
        assert_eq!(m.opsets, vec![(String::new(), 17)]);
        assert_eq!(m.graph.name, "tiny");
        assert_eq!((m.graph.inputs.clone(), m.graph.outputs.clone()), (vec!["x".into()], vec!["y".into()]));
        let node = &m.graph.nodes[0];
        assert_eq!(node.op_type, "LayerNormalization");
        assert_eq!(node.inputs, vec!["x", "g", ""]);
        assert_eq!(node.attr("epsilon"), Some(&AttrValue::Float(1e-5)));
        assert_eq!(node.attr("axes"), Some(&AttrValue::Ints(vec![1, -1])));
        assert_eq!(m.initializer_map()["g"].to_f32().unwrap(), vec![1.0]);
    }

    #[test]
    fn rejects_bad_tensors() {
        // 5 bytes for 2 floats
        let bad = raw_tensor("w", 1, &[2], &[0; 5]);
        assert!(matches!(read_initializers(&model(&[], &[bad])), Err(OnnxError::Invalid(_))));
        // duplicate names
        let t = raw_tensor("w", 1, &[1], &[0; 4]);
        assert!(read_initializers(&model(&[], &[t.clone(), t])).is_err());
        // external data
        let mut e = raw_tensor("w", 1, &[1], &[0; 4]);
        varint_field(14, 1, &mut e);
        assert!(read_initializers(&model(&[], &[e])).is_err());
        // no graph at all
        assert!(Model::parse(&[0x08, 0x01]).is_err());
        // truncated file
        let good = model(&[], &[raw_tensor("w", 1, &[1], &[0; 4])]);
        assert!(matches!(Model::parse(&good[..good.len() - 3]), Err(OnnxError::Decode(_))));
    }
}

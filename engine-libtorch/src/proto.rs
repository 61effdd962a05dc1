//! A minimal protobuf wire-format walker: enough to read ONNX files without a protobuf crate.
//!
//! A message is a sequence of fields, each a varint key `(field_number << 3) | wire_type` followed
//! by a payload whose shape depends on the wire type. [`Fields`] iterates over them without
//! copying; the caller decides what each field number means. Repeated scalars may come one per
//! field or "packed" into one length-delimited field; the `push_*` helpers accept both.

use std::fmt;

/// Where and why decoding failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    /// Byte offset inside the message being walked.
    pub offset: usize,
    pub reason: &'static str,
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "protobuf decode error at byte {}: {}", self.offset, self.reason)
    }
}

impl std::error::Error for DecodeError {}

/// One field's payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Value<'a> {
    /// Wire type 0: int32, int64, uint32, uint64, sint*, bool, enum.
    Varint(u64),
    /// Wire type 1: fixed64, sfixed64, double.
    Fixed64(u64),
    /// Wire type 2: string, bytes, embedded message, packed repeated scalars.
    Bytes(&'a [u8]),
    /// Wire type 5: fixed32, sfixed32, float.
    Fixed32(u32),
}

impl<'a> Value<'a> {
    /// The value as an `int64`/`int32`/`enum` field (two's complement of the varint).
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            Value::Varint(v) => Some(v as i64),
            _ => None,
        }
    }

    pub fn as_f32(&self) -> Option<f32> {
        match *self {
            Value::Fixed32(v) => Some(f32::from_bits(v)),
            _ => None,
        }
    }

    pub fn as_bytes(&self) -> Option<&'a [u8]> {
        match *self {
            Value::Bytes(b) => Some(b),
            _ => None,
        }
    }
}

/// Reads a base-128 varint at `*pos`, advancing `*pos` past it.
pub fn read_varint(buf: &[u8], pos: &mut usize) -> Result<u64, DecodeError> {
    let start = *pos;
    let mut value = 0u64;
    for i in 0..10 {
        let Some(&byte) = buf.get(*pos) else {
            return Err(DecodeError { offset: start, reason: "truncated varint" });
        };
        *pos += 1;
        if i == 9 && byte > 1 {
            return Err(DecodeError { offset: start, reason: "varint overflows 64 bits" });
        }
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok(value);
        }
    }
    Err(DecodeError { offset: start, reason: "varint longer than 10 bytes" })
}

/// Iterator over the `(field_number, value)` pairs of one message. After the first error it
/// yields that error and then stops.
pub struct Fields<'a> {
    buf: &'a [u8],
    pos: usize,
    done: bool,
}

impl<'a> Fields<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Fields { buf, pos: 0, done: false }
    }

    fn next_field(&mut self) -> Result<(u32, Value<'a>), DecodeError> {
        let key_at = self.pos;
        let key = read_varint(self.buf, &mut self.pos)?;
        let field = key >> 3;
        if field == 0 || field > u64::from(u32::MAX >> 3) {
            return Err(DecodeError { offset: key_at, reason: "invalid field number" });
        }
        let field = field as u32;
        let value = match key & 7 {
            0 => Value::Varint(read_varint(self.buf, &mut self.pos)?),
            1 => Value::Fixed64(u64::from_le_bytes(self.take::<8>()?)),
            2 => {
                let len_at = self.pos;
                let len = read_varint(self.buf, &mut self.pos)?;
                let end = usize::try_from(len)
                    .ok()
                    .and_then(|l| self.pos.checked_add(l))
                    .filter(|&e| e <= self.buf.len())
                    .ok_or(DecodeError { offset: len_at, reason: "length-delimited field runs past the end" })?;
                let bytes = &self.buf[self.pos..end];
                self.pos = end;
                Value::Bytes(bytes)
            }
            5 => Value::Fixed32(u32::from_le_bytes(self.take::<4>()?)),
            3 | 4 => return Err(DecodeError { offset: key_at, reason: "groups (wire types 3/4) are not supported" }),
            _ => return Err(DecodeError { offset: key_at, reason: "invalid wire type" }),
        };
        Ok((field, value))
    }

    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let bytes = self
            .buf
            .get(self.pos..self.pos + N)
            .ok_or(DecodeError { offset: self.pos, reason: "truncated fixed-width field" })?;
        self.pos += N;
        Ok(bytes.try_into().expect("slice has length N"))
    }
}

impl<'a> Iterator for Fields<'a> {
    type Item = Result<(u32, Value<'a>), DecodeError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done || self.pos >= self.buf.len() {
            return None;
        }
        let item = self.next_field();
        self.done = item.is_err();
        Some(item)
    }
}

const WRONG_WIRE_TYPE: DecodeError = DecodeError { offset: 0, reason: "unexpected wire type for a repeated scalar" };

/// Appends a repeated varint field's value(s): one unpacked value or a packed run.
pub fn push_varints(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), DecodeError> {
    match value {
        Value::Varint(v) => out.push(v),
        Value::Bytes(b) => {
            let mut pos = 0;
            while pos < b.len() {
                out.push(read_varint(b, &mut pos)?);
            }
        }
        _ => return Err(WRONG_WIRE_TYPE),
    }
    Ok(())
}

/// Appends a repeated fixed32 (float) field's value(s).
pub fn push_fixed32s(value: Value<'_>, out: &mut Vec<u32>) -> Result<(), DecodeError> {
    match value {
        Value::Fixed32(v) => out.push(v),
        Value::Bytes(b) if b.len() % 4 == 0 => {
            out.extend(b.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().expect("4 bytes"))))
        }
        Value::Bytes(_) => return Err(DecodeError { offset: 0, reason: "packed fixed32 run not a multiple of 4" }),
        _ => return Err(WRONG_WIRE_TYPE),
    }
    Ok(())
}

/// Appends a repeated fixed64 (double) field's value(s).
pub fn push_fixed64s(value: Value<'_>, out: &mut Vec<u64>) -> Result<(), DecodeError> {
    match value {
        Value::Fixed64(v) => out.push(v),
        Value::Bytes(b) if b.len() % 8 == 0 => {
            out.extend(b.chunks_exact(8).map(|c| u64::from_le_bytes(c.try_into().expect("8 bytes"))))
        }
        Value::Bytes(_) => return Err(DecodeError { offset: 0, reason: "packed fixed64 run not a multiple of 8" }),
        _ => return Err(WRONG_WIRE_TYPE),
    }
    Ok(())
}

/// Encoding helpers, used by the tests to build messages by hand.
#[cfg(test)]
pub(crate) mod encode {
    pub fn varint(mut v: u64, out: &mut Vec<u8>) {
        while v >= 0x80 {
            out.push((v as u8) | 0x80);
            v >>= 7;
        }
        out.push(v as u8);
    }

    pub fn key(field: u32, wire: u8, out: &mut Vec<u8>) {
        varint((u64::from(field) << 3) | u64::from(wire), out);
    }

    pub fn varint_field(field: u32, v: u64, out: &mut Vec<u8>) {
        key(field, 0, out);
        varint(v, out);
    }

    pub fn bytes_field(field: u32, b: &[u8], out: &mut Vec<u8>) {
        key(field, 2, out);
        varint(b.len() as u64, out);
        out.extend_from_slice(b);
    }

    pub fn fixed32_field(field: u32, v: u32, out: &mut Vec<u8>) {
        key(field, 5, out);
        out.extend_from_slice(&v.to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::encode::*;
    use super::*;

    #[test]
    fn varints_round_trip() {
        for v in [0u64, 1, 127, 128, 300, 1 << 35, u64::MAX, (-1i64) as u64] {
            let mut buf = Vec::new();
            varint(v, &mut buf);
            let mut pos = 0;
            assert_eq!(read_varint(&buf, &mut pos).unwrap(), v);
            assert_eq!(pos, buf.len());
        }
    }

    #[test]
    fn bad_varints_are_errors() {
        let mut pos = 0;
        assert!(read_varint(&[0x80, 0x80], &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varint(&[0xff; 10], &mut pos).is_err());
        let mut pos = 0;
        assert!(read_varint(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02], &mut pos).is_err());
    }

    #[test]
    fn walks_all_wire_types() {
        let mut buf = Vec::new();
        varint_field(1, 150, &mut buf);
        bytes_field(2, b"testing", &mut buf);
        fixed32_field(3, 1.5f32.to_bits(), &mut buf);
        key(4, 1, &mut buf);
        buf.extend_from_slice(&7u64.to_le_bytes());
        let fields: Vec<_> = Fields::new(&buf).collect::<Result<_, _>>().unwrap();
        assert_eq!(
            fields,
            vec![
                (1, Value::Varint(150)),
                (2, Value::Bytes(b"testing")),
                (3, Value::Fixed32(1.5f32.to_bits())),
                (4, Value::Fixed64(7)),
            ]
        );
        // The canonical example from the protobuf docs: field 1 = 150 is 08 96 01.
        assert_eq!(&buf[..3], &[0x08, 0x96, 0x01]);
    }

    #[test]
    fn truncation_and_groups_are_errors() {
        let mut buf = Vec::new();
        bytes_field(2, b"abcdef", &mut buf);
        buf.truncate(buf.len() - 1);
        let r: Result<Vec<_>, _> = Fields::new(&buf).collect();
        assert!(r.is_err());
        let mut buf = Vec::new();
        key(5, 3, &mut buf);
        assert!(Fields::new(&buf).next().unwrap().is_err());
        let mut buf = Vec::new();
        key(5, 5, &mut buf);
        buf.extend_from_slice(&[1, 2]);
        assert!(Fields::new(&buf).next().unwrap().is_err());
    }

    #[test]
    fn packed_and_unpacked_repeated() {
        let mut packed = Vec::new();
        for v in [3u64, 270, 86942] {
            varint(v, &mut packed);
        }
        let mut out = Vec::new();
        push_varints(Value::Bytes(&packed), &mut out).unwrap();
        push_varints(Value::Varint(5), &mut out).unwrap();
        assert_eq!(out, vec![3, 270, 86942, 5]);

        let floats: Vec<u8> = [1.0f32, -2.0].iter().flat_map(|f| f.to_le_bytes()).collect();
        let mut out = Vec::new();
        push_fixed32s(Value::Bytes(&floats), &mut out).unwrap();
        push_fixed32s(Value::Fixed32(0.5f32.to_bits()), &mut out).unwrap();
        assert_eq!(out.iter().map(|&b| f32::from_bits(b)).collect::<Vec<_>>(), vec![1.0, -2.0, 0.5]);
        assert!(push_fixed32s(Value::Bytes(&[0; 3]), &mut out).is_err());
        assert!(push_fixed32s(Value::Varint(1), &mut out).is_err());

        let mut out = Vec::new();
        push_fixed64s(Value::Bytes(&2.5f64.to_bits().to_le_bytes()), &mut out).unwrap();
        assert_eq!(f64::from_bits(out[0]), 2.5);
    }
}

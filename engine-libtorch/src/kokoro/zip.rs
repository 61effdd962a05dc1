//! The zip archives Kokoro's files come in: numpy's `.npz` (kokoro-onnx's `voices-v1.0.bin`) and
//! PyTorch's `torch.save` files (`.pt`). Our own reader: the central directory, stored or deflated
//! entries, zip64 sizes as numpy writes them; CRCs are not checked.

use std::io::Read;

fn take<const N: usize>(bytes: &[u8]) -> Result<[u8; N], String> {
    bytes.get(..N).and_then(|b| b.try_into().ok()).ok_or_else(|| "truncated file".to_owned())
}

fn u16_at(b: &[u8], at: usize) -> Result<u16, String> {
    Ok(u16::from_le_bytes(take::<2>(b.get(at..).ok_or("truncated zip")?)?))
}

fn u32_at(b: &[u8], at: usize) -> Result<u32, String> {
    Ok(u32::from_le_bytes(take::<4>(b.get(at..).ok_or("truncated zip")?)?))
}

fn u64_at(b: &[u8], at: usize) -> Result<u64, String> {
    Ok(u64::from_le_bytes(take::<8>(b.get(at..).ok_or("truncated zip")?)?))
}

/// Every file of a zip archive, by name (an `.npz`, a `.pt`): stored or deflated entries; sizes
/// and offsets from the central directory, zip64 where the 32-bit fields say so.
pub fn unzip(b: &[u8]) -> Result<Vec<(String, Vec<u8>)>, String> {
    const EOCD: u32 = 0x0605_4b50;
    // The end-of-central-directory record: 22 bytes and a comment of up to 64 KiB.
    let lowest = b.len().saturating_sub(22 + 0xffff);
    let eocd = (lowest..=b.len().saturating_sub(22))
        .rev()
        .find(|&i| u32_at(b, i) == Ok(EOCD))
        .ok_or("not a zip archive (no end of central directory)")?;
    let mut count = u64::from(u16_at(b, eocd + 10)?);
    let mut offset = u64::from(u32_at(b, eocd + 16)?);
    if count == 0xffff || offset == 0xffff_ffff {
        // The zip64 locator sits just before, pointing at the zip64 record.
        let locator = eocd.checked_sub(20).ok_or("truncated zip64 locator")?;
        if u32_at(b, locator)? != 0x0706_4b50 {
            return Err("zip64 archive without its locator".to_owned());
        }
        let record = usize::try_from(u64_at(b, locator + 8)?).map_err(|_| "zip64 offset too large")?;
        if u32_at(b, record)? != 0x0606_4b50 {
            return Err("zip64 end record missing".to_owned());
        }
        count = u64_at(b, record + 32)?;
        offset = u64_at(b, record + 48)?;
    }
    let mut at = usize::try_from(offset).map_err(|_| "central directory offset too large")?;
    let mut out = Vec::new();
    for _ in 0..count {
        if u32_at(b, at)? != 0x0201_4b50 {
            return Err("bad central directory entry".to_owned());
        }
        let method = u16_at(b, at + 10)?;
        let mut compressed = u64::from(u32_at(b, at + 20)?);
        let mut size = u64::from(u32_at(b, at + 24)?);
        let name_len = usize::from(u16_at(b, at + 28)?);
        let extra_len = usize::from(u16_at(b, at + 30)?);
        let comment_len = usize::from(u16_at(b, at + 32)?);
        let mut local = u64::from(u32_at(b, at + 42)?);
        let name = b.get(at + 46..at + 46 + name_len).ok_or("truncated zip entry name")?;
        let name = String::from_utf8_lossy(name).into_owned();
        // Zip64 extra field: the 64-bit values of the fields that are 0xffffffff, in order.
        let extra = b.get(at + 46 + name_len..at + 46 + name_len + extra_len).ok_or("truncated zip extra")?;
        let mut e = 0;
        while e + 4 <= extra.len() {
            let (id, len) = (u16_at(extra, e)?, usize::from(u16_at(extra, e + 2)?));
            if id == 1 {
                let mut v = e + 4;
                for field in [&mut size, &mut compressed, &mut local] {
                    if *field == 0xffff_ffff {
                        *field = u64_at(extra, v)?;
                        v += 8;
                    }
                }
            }
            e += 4 + len;
        }
        at += 46 + name_len + extra_len + comment_len;
        let local = usize::try_from(local).map_err(|_| "zip offset too large")?;
        if u32_at(b, local)? != 0x0403_4b50 {
            return Err(format!("{name}: bad local header"));
        }
        let start = local + 30 + usize::from(u16_at(b, local + 26)?) + usize::from(u16_at(b, local + 28)?);
        let compressed = usize::try_from(compressed).map_err(|_| "zip entry too large")?;
        let data = start
            .checked_add(compressed)
            .and_then(|end| b.get(start..end))
            .ok_or_else(|| format!("{name}: truncated data"))?;
        let data = match method {
            0 => data.to_vec(),
            8 => {
                let mut out = Vec::with_capacity(usize::try_from(size).unwrap_or(0).min(data.len() * 8));
                flate2::read::DeflateDecoder::new(data)
                    .read_to_end(&mut out)
                    .map_err(|e| format!("{name}: inflating: {e}"))?;
                out
            }
            m => return Err(format!("{name}: zip compression method {m} is not supported (stored or deflate)")),
        };
        if data.len() as u64 != size {
            return Err(format!("{name}: {} bytes, the directory says {size}", data.len()));
        }
        out.push((name, data));
    }
    Ok(out)
}

//! Ogg page writer (RFC 3533): packets in, pages with lacing, granule positions and CRCs out.

/// Granule position of a page on which no packet ends.
const NO_GRANULE: u64 = u64::MAX;
const MAX_SEGMENTS: usize = 255;

const FLAG_CONTINUED: u8 = 0x01;
const FLAG_BOS: u8 = 0x02;
const FLAG_EOS: u8 = 0x04;

pub(super) struct OggWriter {
    out: Vec<u8>,
    serial: u32,
    sequence: u32,
    lacing: Vec<u8>,
    body: Vec<u8>,
    /// Granule of the last packet that ends on the page being built, if any.
    granule: Option<u64>,
    /// The page being built starts with the rest of a packet begun on the previous page.
    continued: bool,
}

impl OggWriter {
    pub(super) fn new(serial: u32, capacity: usize) -> Self {
        OggWriter {
            out: Vec::with_capacity(capacity),
            serial,
            sequence: 0,
            lacing: Vec::with_capacity(MAX_SEGMENTS),
            body: Vec::new(),
            granule: None,
            continued: false,
        }
    }

    /// Add one packet ending at `granule`. Packets longer than a page's 255 lacing values
    /// span pages, with the continuation flag set on the following ones.
    pub(super) fn packet(&mut self, data: &[u8], granule: u64) {
        // A packet is 255-byte segments closed by one shorter (possibly empty) segment.
        let mut rest = data;
        loop {
            if self.lacing.len() == MAX_SEGMENTS {
                self.write_page(false);
                self.continued = true;
            }
            let take = rest.len().min(255);
            self.lacing.push(take as u8);
            self.body.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            if take < 255 {
                break;
            }
        }
        self.granule = Some(granule);
    }

    /// Pending segments already form a full page boundary here (e.g. after a header).
    pub(super) fn flush(&mut self) {
        if !self.lacing.is_empty() {
            self.write_page(false);
        }
    }

    /// The pages finished so far, taken out of the writer (for streaming them).
    pub(super) fn take(&mut self) -> Vec<u8> {
        std::mem::take(&mut self.out)
    }

    /// Flush the last page with end-of-stream set and return the stream.
    pub(super) fn finish(mut self) -> Vec<u8> {
        self.write_page(true);
        self.out
    }

    fn write_page(&mut self, eos: bool) {
        let mut flags = 0;
        if self.continued {
            flags |= FLAG_CONTINUED;
        }
        if self.sequence == 0 {
            flags |= FLAG_BOS;
        }
        if eos {
            flags |= FLAG_EOS;
        }
        let granule = self.granule.unwrap_or(NO_GRANULE);
        let start = self.out.len();
        self.out.extend_from_slice(b"OggS");
        self.out.push(0); // version
        self.out.push(flags);
        self.out.extend_from_slice(&granule.to_le_bytes());
        self.out.extend_from_slice(&self.serial.to_le_bytes());
        self.out.extend_from_slice(&self.sequence.to_le_bytes());
        self.out.extend_from_slice(&[0; 4]); // CRC, filled in below
        self.out.push(self.lacing.len() as u8);
        self.out.extend_from_slice(&self.lacing);
        self.out.extend_from_slice(&self.body);
        let crc = crc32(&self.out[start..]);
        self.out[start + 22..start + 26].copy_from_slice(&crc.to_le_bytes());

        self.sequence = self.sequence.wrapping_add(1);
        self.lacing.clear();
        self.body.clear();
        self.granule = None;
        self.continued = false;
    }
}

const fn crc32_table() -> [u32; 256] {
    let mut table = [0u32; 256];
    let mut i = 0;
    while i < 256 {
        let mut c = (i as u32) << 24;
        let mut b = 0;
        while b < 8 {
            c = if c & 0x8000_0000 != 0 { (c << 1) ^ 0x04c1_1db7 } else { c << 1 };
            b += 1;
        }
        table[i] = c;
        i += 1;
    }
    table
}

static CRC32: [u32; 256] = crc32_table();

/// Ogg's CRC-32: polynomial 0x04C11DB7, not reflected, initial 0, no final xor.
fn crc32(data: &[u8]) -> u32 {
    data.iter().fold(0u32, |c, &b| (c << 8) ^ CRC32[usize::from(((c >> 24) as u8) ^ b)])
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Page {
        flags: u8,
        granule: u64,
        sequence: u32,
        lacing: Vec<u8>,
        body: Vec<u8>,
    }

    fn parse(mut data: &[u8]) -> Vec<Page> {
        let mut pages = Vec::new();
        while !data.is_empty() {
            assert_eq!(&data[0..4], b"OggS");
            assert_eq!(data[4], 0);
            let n = usize::from(data[26]);
            let lacing = data[27..27 + n].to_vec();
            let body_len: usize = lacing.iter().map(|&l| usize::from(l)).sum();
            let len = 27 + n + body_len;
            let mut copy = data[..len].to_vec();
            copy[22..26].fill(0);
            let crc = u32::from_le_bytes(data[22..26].try_into().expect("4"));
            assert_eq!(crc32(&copy), crc, "page CRC");
            assert_eq!(u32::from_le_bytes(data[14..18].try_into().expect("4")), 7);
            pages.push(Page {
                flags: data[5],
                granule: u64::from_le_bytes(data[6..14].try_into().expect("8")),
                sequence: u32::from_le_bytes(data[18..22].try_into().expect("4")),
                lacing,
                body: data[27 + n..len].to_vec(),
            });
            data = &data[len..];
        }
        pages
    }

    #[test]
    fn crc_matches_ogg_reference_value() {
        // CRC-32/MPEG-2 without the init/xorout is CRC-32/"OGG": check value for "123456789".
        assert_eq!(crc32(b"123456789"), 0x89a1_897f);
    }

    #[test]
    fn lacing_granules_and_flags() {
        let mut w = OggWriter::new(7, 0);
        w.packet(b"head", 0);
        w.flush();
        w.packet(&[1u8; 255], 100); // exactly 255 bytes: 255 then a 0 segment
        w.packet(&[], 200);
        w.packet(&[2u8; 300], 300);
        let pages = parse(&w.finish());
        assert_eq!(pages.len(), 2);
        assert_eq!(pages[0].flags, FLAG_BOS);
        assert_eq!(pages[0].granule, 0);
        assert_eq!(pages[0].lacing, vec![4]);
        assert_eq!(pages[0].body, b"head");
        assert_eq!(pages[1].flags, FLAG_EOS);
        assert_eq!(pages[1].sequence, 1);
        assert_eq!(pages[1].granule, 300);
        assert_eq!(pages[1].lacing, vec![255, 0, 0, 255, 45]);
        assert_eq!(pages[1].body.len(), 555);
    }

    #[test]
    fn long_packets_span_pages() {
        let mut w = OggWriter::new(7, 0);
        let big = vec![9u8; 255 * 300];
        w.packet(&big, 42);
        let pages = parse(&w.finish());
        assert_eq!(pages.len(), 2);
        assert_eq!(pages[0].flags, FLAG_BOS);
        assert_eq!(pages[0].granule, NO_GRANULE, "no packet ends on the first page");
        assert_eq!(pages[0].lacing.len(), 255);
        assert_eq!(pages[1].flags, FLAG_CONTINUED | FLAG_EOS);
        assert_eq!(pages[1].granule, 42);
        assert_eq!(pages[1].lacing.len(), 46, "45 full segments and the closing 0");
        assert_eq!(pages[0].body.len() + pages[1].body.len(), big.len());
    }
}

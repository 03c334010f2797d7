//! pcap capture of the fabric's frames.
//!
//! Classic libpcap files (`pcap-savefile(5)`; draft-ietf-opsawg-pcap §4-5): a 24-byte file header
//! with magic `0xa1b2c3d4` (microsecond timestamps) or `0xa1b23c4d` (nanosecond timestamps),
//! version 2.4 and link type `LINKTYPE_ETHERNET` (1), then one 16-byte record header per frame
//! (seconds, sub-second units, captured length, original length) followed by the frame's bytes.
//! The writer writes little-endian; the reader accepts either byte order, as libpcap does.
//!
//! Timestamps are whatever clock the caller chooses; the fabric passes its virtual time, so a
//! deterministic test produces the same capture every run. Open the file with Wireshark or
//! `tshark -r FILE`: UDP port 4791 decodes as RoCEv2.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;
use std::time::Duration;

/// `LINKTYPE_ETHERNET`: frames start with an Ethernet II header (tcpdump.org link-layer types).
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Magic number of a file with microsecond timestamps.
pub const MAGIC_MICROS: u32 = 0xa1b2_c3d4;
/// Magic number of a file with nanosecond timestamps.
pub const MAGIC_NANOS: u32 = 0xa1b2_3c4d;
/// Default snapshot length (tcpdump's default): longer frames are truncated in the file.
pub const DEFAULT_SNAPLEN: u32 = 262_144;

/// The largest record the reader accepts (a bound on the memory a damaged file can claim).
const MAX_RECORD_LEN: u32 = 16 << 20;
/// Length of the file header.
const FILE_HEADER_LEN: usize = 24;
/// Length of a record header.
const RECORD_HEADER_LEN: usize = 16;

/// The unit of the sub-second part of record timestamps.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Default)]
pub enum Resolution {
    /// Microseconds (magic `0xa1b2c3d4`), readable by every pcap tool.
    #[default]
    Micros,
    /// Nanoseconds (magic `0xa1b23c4d`), for virtual time finer than a microsecond.
    Nanos,
}

impl Resolution {
    fn magic(self) -> u32 {
        match self {
            Self::Micros => MAGIC_MICROS,
            Self::Nanos => MAGIC_NANOS,
        }
    }

    fn subsec(self, t: Duration) -> u32 {
        match self {
            Self::Micros => t.subsec_micros(),
            Self::Nanos => t.subsec_nanos(),
        }
    }

    fn duration(self, secs: u32, frac: u32) -> Duration {
        let nanos = match self {
            Self::Micros => u64::from(frac) * 1_000,
            Self::Nanos => u64::from(frac),
        };
        Duration::from_secs(u64::from(secs)) + Duration::from_nanos(nanos)
    }
}

/// Writes Ethernet frames to a classic pcap stream, one [`write_frame`](Self::write_frame) call
/// per frame.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
    resolution: Resolution,
    snaplen: u32,
    frames: u64,
}

impl PcapWriter<BufWriter<File>> {
    /// Creates (or truncates) the file at `path` and writes the file header.
    pub fn create(path: impl AsRef<Path>, resolution: Resolution) -> io::Result<Self> {
        Self::new(BufWriter::new(File::create(path)?), resolution)
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header to `out` (link type Ethernet, snapshot length
    /// [`DEFAULT_SNAPLEN`]).
    pub fn new(out: W, resolution: Resolution) -> io::Result<Self> {
        Self::with_snaplen(out, resolution, DEFAULT_SNAPLEN)
    }

    /// Like [`new`](Self::new), with frames truncated to `snaplen` bytes in the file.
    pub fn with_snaplen(mut out: W, resolution: Resolution, snaplen: u32) -> io::Result<Self> {
        let mut header = [0u8; FILE_HEADER_LEN];
        header[0..4].copy_from_slice(&resolution.magic().to_le_bytes());
        header[4..6].copy_from_slice(&2u16.to_le_bytes()); // version major
        header[6..8].copy_from_slice(&4u16.to_le_bytes()); // version minor
                                                           // bytes 8-15: thiszone and sigfigs, both 0.
        header[16..20].copy_from_slice(&snaplen.to_le_bytes());
        header[20..24].copy_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&header)?;
        Ok(Self {
            out,
            resolution,
            snaplen,
            frames: 0,
        })
    }

    /// Appends one frame captured at `timestamp` (time since an arbitrary epoch; the fabric's
    /// virtual clock). Fails with `InvalidInput` if the timestamp exceeds the format's 32-bit
    /// seconds or the frame is longer than 4 GiB.
    pub fn write_frame(&mut self, timestamp: Duration, frame: &[u8]) -> io::Result<()> {
        let secs = u32::try_from(timestamp.as_secs()).map_err(|_| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "pcap timestamps end at 2^32 seconds",
            )
        })?;
        let orig_len = u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame longer than 4 GiB"))?;
        let incl_len = orig_len.min(self.snaplen);
        let mut header = [0u8; RECORD_HEADER_LEN];
        header[0..4].copy_from_slice(&secs.to_le_bytes());
        header[4..8].copy_from_slice(&self.resolution.subsec(timestamp).to_le_bytes());
        header[8..12].copy_from_slice(&incl_len.to_le_bytes());
        header[12..16].copy_from_slice(&orig_len.to_le_bytes());
        self.out.write_all(&header)?;
        self.out.write_all(&frame[..incl_len as usize])?;
        self.frames += 1;
        Ok(())
    }

    /// Number of frames written so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// Flushes and returns the underlying writer.
    pub fn into_inner(mut self) -> io::Result<W> {
        self.out.flush()?;
        Ok(self.out)
    }
}

/// Why a pcap stream cannot be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PcapError {
    /// Reading the stream failed.
    #[error("reading the capture failed: {0}")]
    Io(#[from] io::Error),
    /// The stream does not start with a classic pcap magic number (pcapng is not supported:
    /// convert with `editcap -F pcap`).
    #[error("not a classic pcap file (magic {0:#010x}); convert pcapng with `editcap -F pcap`")]
    Magic(u32),
    /// The capture's link type is not Ethernet.
    #[error("link type {0} is not Ethernet (1)")]
    LinkType(u32),
    /// The stream ends inside a header or a frame.
    #[error("capture truncated inside {0}")]
    Truncated(&'static str),
    /// A record claims more bytes than the snapshot length allows.
    #[error("record of {len} bytes exceeds the snapshot length {snaplen}")]
    RecordTooLong {
        /// Captured length in the record header.
        len: u32,
        /// The file's snapshot length.
        snaplen: u32,
    },
}

/// One frame of a capture.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PcapRecord {
    /// Capture time.
    pub timestamp: Duration,
    /// The frame's length on the wire (larger than `data.len()` if it was truncated).
    pub orig_len: u32,
    /// The captured bytes.
    pub data: Vec<u8>,
}

/// Reads the frames of a classic pcap stream with Ethernet link type, as an iterator.
#[derive(Debug)]
pub struct PcapReader<R: Read> {
    input: R,
    resolution: Resolution,
    big_endian: bool,
    snaplen: u32,
    done: bool,
}

impl PcapReader<BufReader<File>> {
    /// Opens the capture at `path` and reads its file header.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, PcapError> {
        Self::new(BufReader::new(File::open(path)?))
    }
}

/// Reads exactly `buf.len()` bytes; `Ok(false)` on a clean end of stream before the first byte.
fn read_full(input: &mut impl Read, buf: &mut [u8], what: &'static str) -> Result<bool, PcapError> {
    let mut filled = 0;
    while filled < buf.len() {
        match input.read(&mut buf[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(PcapError::Truncated(what)),
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(true)
}

impl<R: Read> PcapReader<R> {
    /// Reads and checks the file header of `input`.
    pub fn new(mut input: R) -> Result<Self, PcapError> {
        let mut h = [0u8; FILE_HEADER_LEN];
        if !read_full(&mut input, &mut h, "the file header")? {
            return Err(PcapError::Truncated("the file header"));
        }
        let le = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (resolution, big_endian) = match (le, le.swap_bytes()) {
            (MAGIC_MICROS, _) => (Resolution::Micros, false),
            (MAGIC_NANOS, _) => (Resolution::Nanos, false),
            (_, MAGIC_MICROS) => (Resolution::Micros, true),
            (_, MAGIC_NANOS) => (Resolution::Nanos, true),
            _ => return Err(PcapError::Magic(le)),
        };
        let word = |b: [u8; 4]| {
            if big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let snaplen = word([h[16], h[17], h[18], h[19]]);
        // The link type is the low 16 bits; the upper bits carry the FCS length flags.
        let linktype = word([h[20], h[21], h[22], h[23]]) & 0xffff;
        if linktype != LINKTYPE_ETHERNET {
            return Err(PcapError::LinkType(linktype));
        }
        Ok(Self {
            input,
            resolution,
            big_endian,
            snaplen,
            done: false,
        })
    }

    /// The timestamp resolution of the file.
    pub fn resolution(&self) -> Resolution {
        self.resolution
    }

    fn read_record(&mut self) -> Result<Option<PcapRecord>, PcapError> {
        let mut h = [0u8; RECORD_HEADER_LEN];
        if !read_full(&mut self.input, &mut h, "a record header")? {
            return Ok(None);
        }
        let word = |b: [u8; 4]| {
            if self.big_endian {
                u32::from_be_bytes(b)
            } else {
                u32::from_le_bytes(b)
            }
        };
        let secs = word([h[0], h[1], h[2], h[3]]);
        let frac = word([h[4], h[5], h[6], h[7]]);
        let incl_len = word([h[8], h[9], h[10], h[11]]);
        let orig_len = word([h[12], h[13], h[14], h[15]]);
        // Some writers put 0 or a huge value in the snaplen field: accept records up to the
        // larger of the file's snaplen and the default, but never allocate more than
        // MAX_RECORD_LEN for a record of a damaged file.
        let limit = self.snaplen.clamp(DEFAULT_SNAPLEN, MAX_RECORD_LEN);
        if incl_len > limit {
            return Err(PcapError::RecordTooLong {
                len: incl_len,
                snaplen: self.snaplen,
            });
        }
        let mut data = vec![0u8; incl_len as usize];
        if !read_full(&mut self.input, &mut data, "a frame")? && incl_len > 0 {
            return Err(PcapError::Truncated("a frame"));
        }
        Ok(Some(PcapRecord {
            timestamp: self.resolution.duration(secs, frac),
            orig_len,
            data,
        }))
    }
}

impl<R: Read> Iterator for PcapReader<R> {
    type Item = Result<PcapRecord, PcapError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.done {
            return None;
        }
        let item = self.read_record().transpose();
        if !matches!(item, Some(Ok(_))) {
            self.done = true;
        }
        item
    }
}

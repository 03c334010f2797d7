//! The pcap writer's bytes (pcap-savefile(5)) and the reader reading them back.

use std::io::Cursor;
use std::time::Duration;

use mlx5_sim::pcap::{PcapError, PcapReader, PcapWriter, Resolution, LINKTYPE_ETHERNET};

#[test]
fn file_and_record_headers() {
    let mut w = PcapWriter::new(Vec::new(), Resolution::Micros).unwrap();
    w.write_frame(Duration::new(3, 4_005_006), &[0xaa, 0xbb, 0xcc])
        .unwrap();
    assert_eq!(w.frames(), 1);
    let bytes = w.into_inner().unwrap();
    #[rustfmt::skip]
    let expected = [
        0xd4, 0xc3, 0xb2, 0xa1, // magic, microseconds, little-endian
        0x02, 0x00, 0x04, 0x00, // version 2.4
        0, 0, 0, 0, 0, 0, 0, 0, // thiszone, sigfigs
        0x00, 0x00, 0x04, 0x00, // snaplen 262144
        0x01, 0x00, 0x00, 0x00, // LINKTYPE_ETHERNET
        0x03, 0, 0, 0,          // 3 s
        0xa5, 0x0f, 0, 0,       // 4005 µs (4_005_006 ns truncated)
        0x03, 0, 0, 0,          // captured length
        0x03, 0, 0, 0,          // original length
        0xaa, 0xbb, 0xcc,
    ];
    assert_eq!(bytes, expected);
    assert_eq!(LINKTYPE_ETHERNET, 1);
}

#[test]
fn nanosecond_round_trip() {
    let mut w = PcapWriter::new(Vec::new(), Resolution::Nanos).unwrap();
    let frames: Vec<(Duration, Vec<u8>)> = (0..5u8)
        .map(|i| {
            (
                Duration::new(u64::from(i), 123_456_789 + u32::from(i)),
                vec![i; 60 + usize::from(i)],
            )
        })
        .collect();
    for (t, f) in &frames {
        w.write_frame(*t, f).unwrap();
    }
    let bytes = w.into_inner().unwrap();
    assert_eq!(&bytes[..4], [0x4d, 0x3c, 0xb2, 0xa1]);
    let r = PcapReader::new(Cursor::new(bytes)).unwrap();
    assert_eq!(r.resolution(), Resolution::Nanos);
    let back: Vec<(Duration, Vec<u8>)> = r
        .map(|rec| rec.map(|rec| (rec.timestamp, rec.data)))
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(back, frames);
}

#[test]
fn snaplen_truncates_but_keeps_the_original_length() {
    let mut w = PcapWriter::with_snaplen(Vec::new(), Resolution::Micros, 8).unwrap();
    w.write_frame(Duration::ZERO, &[7; 20]).unwrap();
    let bytes = w.into_inner().unwrap();
    let rec = PcapReader::new(Cursor::new(bytes))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    assert_eq!(rec.data, [7; 8]);
    assert_eq!(rec.orig_len, 20);
}

#[test]
fn reads_big_endian_files() {
    let mut f = vec![
        0xa1, 0xb2, 0xc3, 0xd4, 0, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 0, 1,
    ];
    f.extend_from_slice(&[0, 0, 0, 9, 0, 0, 0, 10, 0, 0, 0, 2, 0, 0, 0, 2, 0xde, 0xad]);
    let recs: Vec<_> = PcapReader::new(Cursor::new(f))
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert_eq!(recs.len(), 1);
    assert_eq!(recs[0].timestamp, Duration::new(9, 10_000));
    assert_eq!(recs[0].data, [0xde, 0xad]);
}

#[test]
fn damaged_files_are_errors() {
    assert!(matches!(
        PcapReader::new(Cursor::new(vec![0x0a, 0x0d, 0x0d, 0x0a])),
        Err(PcapError::Truncated(_))
    ));
    let mut pcapng = vec![0x0a, 0x0d, 0x0d, 0x0a];
    pcapng.resize(24, 0);
    assert!(matches!(
        PcapReader::new(Cursor::new(pcapng)),
        Err(PcapError::Magic(0x0a0d_0d0a))
    ));

    let mut w = PcapWriter::new(Vec::new(), Resolution::Micros).unwrap();
    w.write_frame(Duration::ZERO, &[1, 2, 3, 4]).unwrap();
    let good = w.into_inner().unwrap();
    let mut linktype = good.clone();
    linktype[20] = 101;
    assert!(matches!(
        PcapReader::new(Cursor::new(linktype)),
        Err(PcapError::LinkType(101))
    ));
    let mut r = PcapReader::new(Cursor::new(good[..good.len() - 1].to_vec())).unwrap();
    assert!(matches!(
        r.next(),
        Some(Err(PcapError::Truncated("a frame")))
    ));
    assert!(r.next().is_none(), "the reader stops after an error");
    let mut huge = good.clone();
    huge[32..36].copy_from_slice(&u32::MAX.to_le_bytes());
    let mut r = PcapReader::new(Cursor::new(huge)).unwrap();
    assert!(matches!(
        r.next(),
        Some(Err(PcapError::RecordTooLong { .. }))
    ));
}

#[test]
fn timestamps_beyond_32_bit_seconds_are_refused() {
    let mut w = PcapWriter::new(Vec::new(), Resolution::Micros).unwrap();
    let err = w
        .write_frame(Duration::from_secs(1 << 32), &[0])
        .unwrap_err();
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput);
}

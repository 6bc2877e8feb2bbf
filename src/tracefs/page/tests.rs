use super::*;

/// Event bytes written the way the kernel's writer lays them out.
#[derive(Default)]
struct Data(Vec<u8>);

impl Data {
    fn head(&mut self, type_len: u32, delta: u32) -> &mut Self {
        assert!(delta < 1 << 27);
        self.0
            .extend_from_slice(&((delta << 5) | type_len).to_ne_bytes());
        self
    }

    fn word(&mut self, w: u32) -> &mut Self {
        self.0.extend_from_slice(&w.to_ne_bytes());
        self
    }

    /// A data event with its length in type_len (payload a multiple of 4, at most 112 bytes).
    fn small(&mut self, delta: u32, payload: &[u8]) -> &mut Self {
        assert!(payload.len().is_multiple_of(4) && (4..=112).contains(&payload.len()));
        self.head(payload.len() as u32 / 4, delta);
        self.0.extend_from_slice(payload);
        self
    }

    /// A data event with type_len 0 and its length (payload + 4) in array[0].
    fn long(&mut self, delta: u32, payload: &[u8]) -> &mut Self {
        self.head(0, delta).word(payload.len() as u32 + 4);
        self.0.extend_from_slice(payload);
        while !self.0.len().is_multiple_of(4) {
            self.0.push(0);
        }
        self
    }

    fn extend(&mut self, delta: u64) -> &mut Self {
        self.head(TYPE_TIME_EXTEND, (delta & ((1 << 27) - 1)) as u32)
            .word((delta >> 27) as u32)
    }

    fn absolute(&mut self, ts: u64) -> &mut Self {
        self.head(TYPE_TIME_STAMP, (ts & ((1 << 27) - 1)) as u32)
            .word(((ts >> 27) & 0xffff_ffff) as u32)
    }

    /// A discarded event or end-of-page padding: `len` bytes after the header.
    fn padding(&mut self, delta: u32, len: u32) -> &mut Self {
        self.head(TYPE_PADDING, delta).word(len);
        self.0.extend(std::iter::repeat_n(0xee, len as usize - 4));
        self
    }
}

/// A whole page: header (timestamp, commit word), the data, then optionally a stored missed count.
fn page(timestamp: u64, data: &[u8], flags: u32, stored: Option<u64>) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&timestamp.to_ne_bytes());
    p.extend_from_slice(&(data.len() as u64 | flags as u64).to_ne_bytes());
    p.extend_from_slice(data);
    if let Some(n) = stored {
        p.extend_from_slice(&n.to_ne_bytes());
    }
    p.resize(4096, 0);
    p
}

fn events(layout: &PageLayout, bytes: &[u8]) -> Vec<(u64, Vec<u8>)> {
    let page = layout.page(bytes).unwrap();
    page.events()
        .map(|e| e.map(|e| (e.timestamp, e.payload.to_vec())))
        .collect::<Result<_, _>>()
        .unwrap()
}

const HEADER_PAGE: &str = "\tfield: u64 timestamp;\toffset:0;\tsize:8;\tsigned:0;\n\
    \tfield: local_t commit;\toffset:8;\tsize:8;\tsigned:1;\n\
    \tfield: int overwrite;\toffset:8;\tsize:1;\tsigned:1;\n\
    \tfield: char data;\toffset:16;\tsize:4080;\tsigned:0;\n";

/// Check that the header_page of a 64-bit kernel parses to the default layout, and bad text is refused.
#[test]
fn parses_header_page() {
    let layout = PageLayout::parse(HEADER_PAGE).unwrap();
    assert_eq!(layout, PageLayout::default());
    assert_eq!(layout.commit, Field { offset: 8, size: 8 });
    assert_eq!(layout.data_offset, 16);
    let bits32 = "field: u64 timestamp;\toffset:0;\tsize:8;\n\
                  field: local_t commit;\toffset:8;\tsize:4;\n\
                  field: char data;\toffset:12;\tsize:4084;\n";
    assert_eq!(PageLayout::parse(bits32).unwrap().data_offset, 12);
    assert_eq!(
        PageLayout::parse("field: u64 timestamp;\toffset:0;\tsize:8;\n"),
        None
    );
    assert_eq!(
        PageLayout::parse(&HEADER_PAGE.replace("size:8;\tsigned:1", "size:3;\tsigned:1")),
        None
    );
    let missing = std::path::Path::new("/nonexistent/rprof");
    assert_eq!(PageLayout::read(missing), PageLayout::default());
}

/// Check that data events with their length in type_len (1..=28) give their payloads and summed deltas.
#[test]
fn small_events() {
    let mut d = Data::default();
    d.small(0, &[1, 0, 0, 0])
        .small(10, &[2; 8])
        .small(5, &[3; 112]);
    let got = events(&PageLayout::default(), &page(1000, &d.0, 0, None));
    assert_eq!(
        got,
        vec![
            (1000, vec![1, 0, 0, 0]),
            (1010, vec![2; 8]),
            (1015, vec![3; 112])
        ]
    );
}

/// Check that a data event with type_len 0 takes its length from array[0] and its payload after it.
#[test]
fn long_event() {
    let payload: Vec<u8> = (0..200u8).collect();
    let mut d = Data::default();
    d.long(7, &payload).long(1, &[9; 13]).small(1, &[4; 4]);
    let got = events(&PageLayout::default(), &page(50, &d.0, 0, None));
    assert_eq!(got[0], (57, payload));
    assert_eq!(got[1], (58, vec![9; 13]));
    assert_eq!(got[2], (59, vec![4; 4]));
}

/// Check that discarded events are skipped with their delta counted, and that end-of-page padding and a null
/// padding event end the page.
#[test]
fn padding() {
    let mut d = Data::default();
    d.small(3, &[1; 4])
        .padding(20, 16)
        .small(2, &[2; 4])
        .padding(1, 100);
    let got = events(&PageLayout::default(), &page(0, &d.0, 0, None));
    assert_eq!(got, vec![(3, vec![1; 4]), (25, vec![2; 4])]);
    let mut n = Data::default();
    n.small(1, &[1; 4]).head(TYPE_PADDING, 0).small(1, &[2; 4]);
    let got = events(&PageLayout::default(), &page(0, &n.0, 0, None));
    assert_eq!(got, vec![(1, vec![1; 4])], "nothing after a null padding");
}

/// Check that a time extend adds a 59-bit delta to the next event.
#[test]
fn time_extend() {
    let big = (1u64 << 40) + 12345;
    let mut d = Data::default();
    d.small(1, &[1; 4])
        .extend(big)
        .small(0, &[2; 4])
        .small(4, &[3; 4]);
    let got = events(&PageLayout::default(), &page(100, &d.0, 0, None));
    let ts: Vec<u64> = got.iter().map(|e| e.0).collect();
    assert_eq!(ts, vec![101, 101 + big, 105 + big]);
}

/// Check absolute timestamps: 59 bits replace the running time, and the 5 high bits come from the previous
/// timestamp, carrying when the low bits wrapped (as rb_fix_abs_ts does).
#[test]
fn absolute_timestamp() {
    let mut d = Data::default();
    d.small(5, &[1; 4])
        .absolute(7_000_000_000)
        .small(0, &[2; 4])
        .small(3, &[3; 4]);
    let got = events(&PageLayout::default(), &page(1_000, &d.0, 0, None));
    let ts: Vec<u64> = got.iter().map(|e| e.0).collect();
    assert_eq!(ts, vec![1_005, 7_000_000_000, 7_000_000_003]);

    let high = 0x08u64 << 56; // one of the 5 bits an absolute event cannot hold
    let base = high | ((1u64 << 59) - 100);
    let mut w = Data::default();
    w.absolute(((1u64 << 59) - 50) & ((1 << 59) - 1))
        .small(0, &[1; 4])
        .absolute(20) // the low 59 bits wrapped
        .small(0, &[2; 4]);
    let got = events(&PageLayout::default(), &page(base, &w.0, 0, None));
    assert_eq!(got[0].0, high | ((1u64 << 59) - 50));
    assert_eq!(got[1].0, (high + (1 << 59)) | 20);
    assert_eq!(fix_absolute(42, 1000), 42, "no high bits: taken as is");
}

/// Check the commit flags: lost events with and without a stored count, and the sign-extended high word the
/// kernel leaves when it adds `1 << 31` to a 64-bit local_t.
#[test]
fn missed_events() {
    let layout = PageLayout::default();
    let mut d = Data::default();
    d.small(1, &[1; 4]);
    let plain = page(0, &d.0, 0, None);
    assert_eq!(layout.page(&plain).unwrap().missed, Missed::None);
    let p_bytes = page(0, &d.0, RB_MISSED_EVENTS, None);
    let p = layout.page(&p_bytes).unwrap();
    assert_eq!((p.missed, p.data.len()), (Missed::Unknown, 8));
    let stored = page(0, &d.0, RB_MISSED_EVENTS | RB_MISSED_STORED, Some(4242));
    let p = layout.page(&stored).unwrap();
    assert_eq!(p.missed, Missed::Count(4242));
    assert_eq!(p.events().count(), 1);
    // commit = 8 + RB_MISSED_STORED + (long)(int)(1 << 31): the high word is all ones.
    let mut sign = stored.clone();
    let word = 8u64 + (1 << 30) + 0xffff_ffff_8000_0000;
    sign[8..16].copy_from_slice(&word.to_ne_bytes());
    let h = layout.header(&sign).unwrap();
    assert!(h.missed_events() && h.missed_stored());
    assert_eq!(h.data_len(), 8);
    assert_eq!(layout.missed(&sign, &h), Missed::Count(4242));
}

/// Check that a cursor resumes on a page that grew: it returns only the new events, with the running timestamp
/// carried over, and that skip_to passes events without returning them.
#[test]
fn resume_on_grown_page() {
    let mut d = Data::default();
    d.small(10, &[1; 4]).extend(1 << 30).small(0, &[2; 8]);
    let first = d.0.len();
    d.small(7, &[3; 4]).long(1, &[4; 150]);
    let mut cursor = Cursor::new(500);
    let mut seen = Vec::new();
    while let Some(e) = cursor.next(&d.0[..first]).unwrap() {
        seen.push(e.timestamp);
    }
    assert_eq!(seen, vec![510, 510 + (1 << 30)]);
    assert_eq!(cursor.offset(), first);
    assert!(cursor.next(&d.0[..first]).unwrap().is_none());
    while let Some(e) = cursor.next(&d.0).unwrap() {
        seen.push(e.timestamp);
    }
    assert_eq!(seen[2..], [517 + (1 << 30), 518 + (1 << 30)]);
    assert_eq!(cursor.offset(), d.0.len());

    let mut skip = Cursor::new(500);
    skip.skip_to(&d.0, first).unwrap();
    assert_eq!(skip.offset(), first);
    assert_eq!(skip.timestamp(), 510 + (1 << 30));
    assert_eq!(skip.next(&d.0).unwrap().unwrap().payload, &[3; 4]);
}

/// Check that malformed pages give errors naming the problem and never loop: a commit past the page, an event
/// cut by the commit, and a type_len 0 event whose length is impossible.
#[test]
fn malformed_pages() {
    let layout = PageLayout::default();
    assert!(matches!(
        layout.page(&[0u8; 10]),
        Err(PageError::Short { len: 10, need: 16 })
    ));
    let mut over = page(0, &[], 0, None);
    over[8..16].copy_from_slice(&5000u64.to_ne_bytes());
    assert!(matches!(layout.page(&over), Err(PageError::Commit { .. })));
    let mut d = Data::default();
    d.small(1, &[1; 4]).small(1, &[2; 16]);
    let mut cursor = Cursor::new(0);
    let cut = &d.0[..d.0.len() - 4];
    assert!(cursor.next(cut).unwrap().is_some());
    let err = cursor.next(cut).unwrap_err();
    assert_eq!(err, PageError::Truncated { offset: 8, len: 24 });
    assert_eq!(cursor.offset(), 8, "the cursor stays before the bad event");
    let mut bad = Data::default();
    bad.head(0, 1).word(2).word(0);
    let p = page(0, &bad.0, 0, None);
    let errs: Vec<_> = layout.page(&p).unwrap().events().collect();
    assert_eq!(
        errs,
        vec![Err(PageError::BadLength {
            offset: 0,
            length: 2
        })]
    );
    assert!(err.to_string().contains("runs past"));
}

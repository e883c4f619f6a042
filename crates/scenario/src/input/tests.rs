use std::io::{BufRead, Read};

use super::*;

fn write(dir: &Path, name: &str, bytes: &[u8]) -> PathBuf {
    let p = dir.join(name);
    std::fs::write(&p, bytes).unwrap();
    p
}

#[test]
fn every_kind_is_listed_once_with_a_limit_a_name_and_its_files() {
    // A new kind fails to compile here until it is sorted into ALL.
    let listed = |k: Kind| match k {
        Kind::Scenario
        | Kind::Hardware
        | Kind::Calibration
        | Kind::Model
        | Kind::HfConfig
        | Kind::Sweep
        | Kind::Experiment
        | Kind::ServeModels
        | Kind::Responses
        | Kind::Tokenizer
        | Kind::Trace
        | Kind::Measured
        | Kind::MeasuredConfig
        | Kind::KernelTable
        | Kind::Prediction
        | Kind::Shard
        | Kind::FitRecord => Kind::ALL.iter().filter(|&&a| a == k).count(),
    };
    for k in Kind::ALL {
        assert_eq!(listed(k), 1, "{k:?}");
        assert!(k.limit() >= 1 << 20 && !k.name().is_empty() && !k.files().is_empty(), "{k:?}");
    }
    assert_eq!(Kind::Measured.limit(), 1 << 30, "a 200 MB benchmark file is well within");
    assert_eq!(Kind::Calibration.limit(), 4 << 20);
    assert!(Kind::Trace.reading().starts_with("streamed") && Kind::Measured.reading().starts_with("streamed"));
    assert_eq!(Kind::Scenario.reading(), "whole");
}

#[test]
fn limits_read_as_bytes_and_their_short_unit() {
    assert_eq!(bytes(4 << 20), "4,194,304 bytes (4 MiB)");
    assert_eq!(bytes(1 << 30), "1,073,741,824 bytes (1 GiB)");
    assert_eq!(bytes(256 << 20), "268,435,456 bytes (256 MiB)");
}

#[test]
fn a_regular_file_over_its_limit_is_refused_by_its_size_and_one_at_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let limit = Kind::Scenario.limit() as usize;
    let at = write(dir.path(), "at.yml", &vec![b'#'; limit]);
    assert_eq!(read_text(Kind::Scenario, &at).unwrap().len(), limit);
    let over = write(dir.path(), "over.yml", &vec![b'#'; limit + 1]);
    let e = read_text(Kind::Scenario, &over).unwrap_err();
    assert_eq!(e.reason, Reason::TooLarge);
    assert_eq!(
        e.to_string(),
        format!(
            "{}: the file is larger than 4,194,304 bytes (4 MiB), the most llmsim reads for a scenario",
            over.display()
        )
    );
    // A sparse file of a streamed kind's limit plus one: refused before a byte is read.
    let big = dir.path().join("big.json");
    std::fs::File::create(&big).unwrap().set_len(Kind::Measured.limit() + 1).unwrap();
    let e = open(Kind::Measured, &big).err().unwrap();
    assert_eq!(e.reason, Reason::TooLarge);
    assert!(e.message().contains("1,073,741,824 bytes (1 GiB), the most llmsim reads for a measured file"), "{e}");
}

/// An endless reader that counts what was taken from it.
struct Endless {
    given: u64,
}

impl Read for Endless {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        out.fill(b' ');
        self.given += out.len() as u64;
        Ok(out.len())
    }
}

#[test]
fn a_bounded_reader_takes_the_limit_plus_one_byte_and_then_fails() {
    let mut src = Endless { given: 0 };
    let mut b = Bounded::new(&mut src, 100_000);
    let mut sink = Vec::new();
    let e = b.read_to_end(&mut sink).unwrap_err();
    assert_eq!(InputError::from_io(Path::new("x"), Kind::Trace, &e).reason, Reason::TooLarge);
    assert_eq!(src.given, 100_001, "it stops at the limit plus one byte");
    // At the limit exactly, the end of the input is the end.
    let mut b = Bounded::new(&b"abc"[..], 3);
    let mut s = String::new();
    assert_eq!(b.read_to_string(&mut s).unwrap(), 3);
}

#[test]
fn a_device_without_end_is_refused_at_once_as_binary() {
    let e = read_text(Kind::Calibration, Path::new("/dev/zero")).unwrap_err();
    assert_eq!(e.reason, Reason::Binary(0));
    assert!(e.message().contains("NUL byte at byte 0") && e.message().contains("calibration profile"), "{e}");
}

#[test]
fn a_nul_past_the_first_block_is_found_in_text_read_whole() {
    let dir = tempfile::tempdir().unwrap();
    let mut bytes = vec![b'a'; 200_000];
    bytes[150_000] = 0;
    let f = write(dir.path(), "x.yml", &bytes);
    assert_eq!(read_text(Kind::Scenario, &f).unwrap_err().reason, Reason::Binary(150_000));
}

#[test]
fn missing_files_folders_and_bad_utf8_say_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    let e = read_text(Kind::Hardware, &dir.path().join("nope.yml")).unwrap_err();
    assert_eq!(e.message(), "cannot read the file: no such file");
    let e = read_text(Kind::Hardware, dir.path()).unwrap_err();
    assert_eq!(e.message(), "cannot read the file: it is a directory");
    let f = write(dir.path(), "latin1.yml", b"name: caf\xe9\n");
    assert_eq!(read_text(Kind::Hardware, &f).unwrap_err().message(), "cannot read the file: it is not UTF-8 text");
}

#[test]
fn sniffing_the_first_byte_consumes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let f = write(dir.path(), "t.json", b"  \n\t {\"a\": 1}");
    let mut input = open(Kind::Measured, &f).unwrap();
    assert_eq!(input.first_non_space().unwrap(), Some(b'{'));
    assert_eq!(input.first_non_space().unwrap(), Some(b'{'));
    let mut all = String::new();
    input.read_to_string(&mut all).unwrap();
    assert_eq!(all, "  \n\t {\"a\": 1}");
    let blank = write(dir.path(), "blank", b" \n ");
    let mut input = open(Kind::Trace, &blank).unwrap();
    assert_eq!(input.first_non_space().unwrap(), None);
    assert_eq!(input.fill_buf().unwrap(), b" \n ");
}

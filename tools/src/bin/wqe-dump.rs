//! `wqe-dump`: print every field of a raw mlx5 send WQE, receive WQE, SRQ WQE, CQE or run of
//! CQ slots (compressed CQEs expanded).
//!
//! ```text
//! wqe-dump send|recv|srq|cqe|cq [FILE] [--qp-type rc|uc|ud|xrc] [--cqe-size 64|128] [--sges N]
//!          [--zip basic|enhanced]
//! ```
//!
//! Input is hex text from FILE (or stdin when FILE is absent or `-`). Malformed input prints one
//! line starting with `wqe-dump: error:` and exits with status 2.

use std::io::Read;
use std::process::ExitCode;

use mlx5_decode::{decode, parse_hex, Kind, Options, QpType, Zip};

const USAGE: &str = "\
usage: wqe-dump <send|recv|srq|cqe|cq> [FILE] [options]

Decode the hex bytes of an mlx5 send WQE, receive WQE, SRQ WQE, CQE, or of consecutive CQ
slots (`cq`: compressed sessions expanded into the completions they stand for), from FILE or
stdin, and print every field with its byte offset, raw bytes and meaning.
Whitespace, newlines, commas, 0x prefixes and # comments are allowed in the input.

options:
  --qp-type rc|uc|ud|xrc   QP type of a send WQE (default rc; ud: an address vector follows ctrl)
  --cqe-size 64|128        CQE size (default 64)
  --sges N                 scatter slots of a recv/srq WQE (default: as many as the bytes hold)
  --zip basic|enhanced     layout of compressed CQEs (default basic, as mlx5dv_create_cq gets;
                           enhanced: DEVX CQs with cqe_comp_layout 1, as UCX and DPDK create)
  -h, --help               this text

A send WQE that wrapped around the ring end must be given unwrapped (in WQE order).
Layouts: docs/wqe-layout.md";

struct Args {
    kind: Kind,
    file: Option<String>,
    opts: Options,
}

fn parse_args(argv: &[String]) -> Result<Option<Args>, String> {
    let mut kind = None;
    let mut file = None;
    let mut opts = Options::default();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        let mut value = |flag: &str| it.next().cloned().ok_or(format!("{flag} needs a value"));
        match a.as_str() {
            "-h" | "--help" => return Ok(None),
            "--qp-type" => {
                opts.qp_type = match value("--qp-type")?.as_str() {
                    "rc" => QpType::Rc,
                    "uc" => QpType::Uc,
                    "ud" => QpType::Ud,
                    "xrc" => QpType::Xrc,
                    other => {
                        return Err(format!(
                            "--qp-type must be rc, uc, ud or xrc, not `{other}`"
                        ))
                    }
                }
            }
            "--cqe-size" => {
                let v = value("--cqe-size")?;
                opts.cqe_size = match v.as_str() {
                    "64" => 64,
                    "128" => 128,
                    _ => return Err(format!("--cqe-size must be 64 or 128, not `{v}`")),
                }
            }
            "--zip" => {
                let v = value("--zip")?;
                opts.zip = match v.as_str() {
                    "basic" => Zip::Basic,
                    "enhanced" => Zip::Enhanced,
                    _ => return Err(format!("--zip must be basic or enhanced, not `{v}`")),
                }
            }
            "--sges" => {
                let v = value("--sges")?;
                let n: usize = v
                    .parse()
                    .map_err(|_| format!("--sges needs a number, not `{v}`"))?;
                if n == 0 || n > 64 {
                    return Err(format!("--sges must be between 1 and 64, not {n}"));
                }
                opts.sges = Some(n);
            }
            s if s.starts_with("--") => return Err(format!("unknown option `{s}` (see --help)")),
            s if kind.is_none() => {
                kind = Some(match s {
                    "send" => Kind::Send,
                    "recv" => Kind::Recv,
                    "srq" => Kind::Srq,
                    "cqe" => Kind::Cqe,
                    "cq" => Kind::Cq,
                    other => {
                        return Err(format!(
                            "unknown kind `{other}`: expected send, recv, srq, cqe or cq"
                        ))
                    }
                })
            }
            s if file.is_none() => file = Some(s.to_string()),
            s => return Err(format!("unexpected argument `{s}` (see --help)")),
        }
    }
    let kind = kind.ok_or("missing kind: send, recv, srq, cqe or cq (see --help)")?;
    Ok(Some(Args { kind, file, opts }))
}

/// The most input text read (hex, separators and comments): a whole CQ ring of 64K 64-byte
/// CQEs written out as spaced hex (3 characters a byte, 12 MiB) fits; nothing meant for this
/// tool is longer.
const MAX_INPUT: usize = 16 << 20;

/// How much is read at a time.
const CHUNK: usize = 64 << 10;

/// Reads the input as it comes, checking it on the way: text, and outside `#` comments only
/// hex digits, `0x` prefixes, commas and white space (what [`parse_hex`] accepts); it stops at
/// the first byte that cannot be part of a dump, or past [`MAX_INPUT`] bytes, instead of
/// reading all of an endless input (`/dev/zero`) first. [`parse_hex`] then decodes what was
/// read, the authority on the format.
fn read_input(file: Option<&str>) -> Result<String, String> {
    let (mut src, name): (Box<dyn Read>, String) = match file {
        None | Some("-") => (Box::new(std::io::stdin().lock()), "stdin".into()),
        Some(path) => (
            Box::new(std::fs::File::open(path).map_err(|e| format!("cannot read {path}: {e}"))?),
            path.to_string(),
        ),
    };
    let mut text = String::new();
    let mut pending: Vec<u8> = Vec::new();
    let mut check = Checker::default();
    let mut chunk = vec![0u8; CHUNK];
    loop {
        let n = match src.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("cannot read {name}: {e}")),
        };
        if text.len() + pending.len() + n > MAX_INPUT {
            return Err(format!(
                "{name} is longer than {} MiB: no WQE or CQE dump is (stopped reading there)",
                MAX_INPUT >> 20
            ));
        }
        pending.extend_from_slice(&chunk[..n]);
        // The complete UTF-8 characters so far; an incomplete one waits for the next read.
        let valid = match std::str::from_utf8(&pending) {
            Ok(_) => pending.len(),
            Err(e) if e.error_len().is_some() => {
                return Err(format!(
                    "{name}, byte {}: not UTF-8 text (stopped reading there)",
                    text.len() + e.valid_up_to() + 1
                ))
            }
            Err(e) => e.valid_up_to(),
        };
        let ok = std::str::from_utf8(&pending[..valid]).unwrap_or_default();
        check.feed(ok)?;
        text.push_str(ok);
        pending.drain(..valid);
    }
    if !pending.is_empty() {
        return Err(format!("{name} ends inside a UTF-8 character"));
    }
    Ok(text)
}

/// The early check of [`read_input`]: where the text is (line, comment), and the first
/// character outside a comment that no hex token, separator or comment can hold.
#[derive(Default)]
struct Checker {
    line: usize,
    in_comment: bool,
}

impl Checker {
    fn feed(&mut self, s: &str) -> Result<(), String> {
        for c in s.chars() {
            if c == '\n' {
                self.line += 1;
                self.in_comment = false;
            } else if self.in_comment {
                continue;
            } else if c == '#' {
                self.in_comment = true;
            } else if !(c.is_ascii_hexdigit()
                || c == 'x'
                || c == 'X'
                || c == ','
                || c.is_whitespace())
            {
                return Err(format!(
                    "line {}: {c:?} is not a hex digit, a separator or a comment (stopped \
                     reading there)",
                    self.line + 1
                ));
            }
        }
        Ok(())
    }
}

fn run(argv: &[String]) -> Result<String, String> {
    let Some(args) = parse_args(argv)? else {
        return Ok(USAGE.to_string());
    };
    let text = read_input(args.file.as_deref())?;
    let bytes = parse_hex(&text).map_err(|e| e.to_string())?;
    let report = decode(args.kind, &bytes, &args.opts).map_err(|e| e.to_string())?;
    Ok(report.to_string())
}

fn main() -> ExitCode {
    let argv: Vec<String> = std::env::args().skip(1).collect();
    match run(&argv) {
        Ok(out) => {
            print!("{out}");
            if !out.ends_with('\n') {
                println!();
            }
            ExitCode::SUCCESS
        }
        Err(msg) => {
            eprintln!("wqe-dump: error: {msg}");
            ExitCode::from(2)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Vec<String> {
        a.iter().map(|s| s.to_string()).collect()
    }

    fn tmp(name: &str, text: &str) -> String {
        let p = std::env::temp_dir().join(format!("wqe-dump-test-{}-{name}", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p.to_string_lossy().into_owned()
    }

    #[test]
    fn sample_files_decode() {
        let root = env!("CARGO_MANIFEST_DIR");
        for (kind, file, extra) in [
            ("send", "rc-write-inline.hex", &[][..]),
            ("send", "ud-send.hex", &["--qp-type", "ud"][..]),
            ("cqe", "cqe-req-err.hex", &[][..]),
            ("cqe", "cqe-sig-err.hex", &[][..]),
            ("cq", "cq-zip-basic.hex", &[][..]),
            ("cq", "cq-zip-enhanced.hex", &["--zip", "enhanced"][..]),
            ("srq", "srq-recv.hex", &[][..]),
        ] {
            let path = format!("{root}/../docs/samples/{file}");
            let mut a = args(&[kind, &path]);
            a.extend(args(extra));
            let out = run(&a).unwrap_or_else(|e| panic!("{file}: {e}"));
            assert!(out.lines().count() > 5, "{file}");
        }
    }

    #[test]
    fn the_input_is_checked_as_it_comes() {
        let mut c = Checker::default();
        c.feed("# any comment: ¬ NUL-free, commas, é\n0x00, 01 02\n")
            .unwrap();
        c.feed("00 # a comment split ").unwrap();
        c.feed("over two reads\nff").unwrap();
        let e = Checker::default().feed("00\n01 \u{0}").unwrap_err();
        assert!(e.starts_with("line 2: '\\0' is not a hex digit"), "{e}");
        // What parse_hex rejects later (an odd count, a stray x) may pass here; nothing it
        // accepts is stopped here.
        Checker::default().feed("0x 0 x").unwrap();
        // An endless stream of NULs stops at its first byte.
        let e = read_input(Some("/dev/zero")).unwrap_err();
        assert!(e.contains("line 1: '\\0'"), "{e}");
    }

    #[test]
    fn errors_are_one_line() {
        let odd = tmp("odd", "00 0");
        let short = tmp("short", "00 00 00 08 00 00 01 05 00 00 00 08 00 00 00 00");
        for (a, want) in [
            (args(&["send", &odd]), "odd number of hex digits"),
            (
                args(&["send", &short]),
                "DS count 5 means a 80-byte WQE, but only 16 bytes",
            ),
            (
                args(&["cqe", &short]),
                "CQE: expected exactly 64 bytes, got 16",
            ),
            (args(&["bogus"]), "unknown kind `bogus`"),
            (
                args(&["cq", "--zip", "legacy"]),
                "--zip must be basic or enhanced",
            ),
            (
                args(&["send", "--qp-type", "rd"]),
                "--qp-type must be rc, uc, ud or xrc",
            ),
            (args(&["recv", "--sges"]), "--sges needs a value"),
            (
                args(&["recv", "--sges", "0"]),
                "--sges must be between 1 and 64",
            ),
            (
                args(&["cqe", "/nonexistent/file"]),
                "cannot read /nonexistent/file",
            ),
            (args(&[]), "missing kind"),
        ] {
            let e = run(&a).unwrap_err();
            assert!(e.contains(want), "{a:?}: {e}");
            assert!(!e.contains('\n'), "{a:?}: {e}");
        }
        assert!(run(&args(&["--help"]))
            .unwrap()
            .starts_with("usage: wqe-dump"));
    }
}

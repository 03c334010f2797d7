//! Hex text to bytes: whitespace, newlines, commas, `0x` prefixes and `#` comments are
//! tolerated; every token must hold whole bytes.

use super::Error;

/// Parse hex text such as `"0x5a,0x12 3408\n# comment\nabcdef03"` into bytes.
pub fn parse_hex(text: &str) -> Result<Vec<u8>, Error> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        let code = line.split('#').next().unwrap_or("");
        for token in code
            .split(|c: char| c.is_whitespace() || c == ',')
            .filter(|t| !t.is_empty())
        {
            let digits = token
                .strip_prefix("0x")
                .or_else(|| token.strip_prefix("0X"))
                .unwrap_or(token);
            if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(Error::NotHex {
                    line: line_no,
                    token: token.to_string(),
                });
            }
            if digits.len() % 2 != 0 {
                return Err(Error::OddDigits {
                    line: line_no,
                    token: token.to_string(),
                });
            }
            for pair in digits.as_bytes().chunks(2) {
                out.push((nibble(pair[0]) << 4) | nibble(pair[1]));
            }
        }
    }
    Ok(out)
}

/// Value of one ASCII hex digit (the caller checked it is one).
fn nibble(b: u8) -> u8 {
    match b {
        b'0'..=b'9' => b - b'0',
        b'a'..=b'f' => b - b'a' + 10,
        _ => b - b'A' + 10,
    }
}

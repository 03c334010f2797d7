//! The decoded view: sections of fields, each with offset, raw bytes and meaning.

use core::fmt;

/// One field of a decoded structure.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// Byte offset from the start of the input.
    pub offset: usize,
    /// The raw bytes, as in memory.
    pub raw: Vec<u8>,
    /// `segment.field`, e.g. `ctrl.opcode`.
    pub name: String,
    /// What the value means.
    pub meaning: String,
}

/// A segment (or the whole CQE): a title and its fields.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Section {
    /// E.g. `ctrl segment (struct mlx5_wqe_ctrl_seg)`.
    pub title: String,
    /// Byte offset of the segment.
    pub offset: usize,
    /// Its length in bytes.
    pub len: usize,
    /// Its fields in offset order.
    pub fields: Vec<Field>,
}

/// A decoded WQE or CQE.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Report {
    /// One-line summary.
    pub summary: String,
    /// The segments in order.
    pub sections: Vec<Section>,
    /// Remarks (trailing bytes, unused slots, ...).
    pub notes: Vec<String>,
}

impl Report {
    /// The first field called `name` (e.g. `"ctrl.opcode"`).
    pub fn field(&self, name: &str) -> Option<&Field> {
        self.sections
            .iter()
            .flat_map(|s| &s.fields)
            .find(|f| f.name == name)
    }

    /// Every field called `name`, in order (e.g. each `data.lkey`).
    pub fn fields<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a Field> + 'a {
        self.sections
            .iter()
            .flat_map(|s| &s.fields)
            .filter(move |f| f.name == name)
    }

    /// Start a section.
    pub(crate) fn section(&mut self, title: impl Into<String>, offset: usize, len: usize) {
        self.sections.push(Section {
            title: title.into(),
            offset,
            len,
            fields: Vec::new(),
        });
    }

    /// Add a field to the current section.
    pub(crate) fn add(
        &mut self,
        offset: usize,
        raw: &[u8],
        name: impl Into<String>,
        meaning: impl Into<String>,
    ) {
        let field = Field {
            offset,
            raw: raw.to_vec(),
            name: name.into(),
            meaning: meaning.into(),
        };
        match self.sections.last_mut() {
            Some(s) => s.fields.push(field),
            None => self.sections.push(Section {
                title: String::new(),
                offset,
                len: 0,
                fields: vec![field],
            }),
        }
    }
}

/// Bytes shown per line in the raw column.
const RAW_PER_LINE: usize = 8;

fn hex_bytes(b: &[u8]) -> String {
    b.iter()
        .map(|x| format!("{x:02x}"))
        .collect::<Vec<_>>()
        .join(" ")
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "{}", self.summary)?;
        for s in &self.sections {
            writeln!(f)?;
            writeln!(f, "{} — {} bytes at {:#05x}", s.title, s.len, s.offset)?;
            for fl in &s.fields {
                let mut chunks = fl.raw.chunks(RAW_PER_LINE);
                let first = chunks.next().unwrap_or(&[]);
                writeln!(
                    f,
                    "  {:#05x}  {:<23}  {:<26} {}",
                    fl.offset,
                    hex_bytes(first),
                    fl.name,
                    fl.meaning
                )?;
                for (i, c) in chunks.enumerate() {
                    let off = fl.offset + (i + 1) * RAW_PER_LINE;
                    writeln!(f, "  {:#05x}  {}", off, hex_bytes(c))?;
                }
            }
        }
        for n in &self.notes {
            writeln!(f)?;
            writeln!(f, "note: {n}")?;
        }
        Ok(())
    }
}

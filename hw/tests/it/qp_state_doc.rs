//! The transition tables in docs/state-machine.md are generated from `qp_state::rule`; this
//! test fails when they drift. Regenerate with `UPDATE_STATE_DOC=1 cargo test -p mlx5-hw --test
//! qp_state_doc`.

use mlx5_hw::qp_state::rule;
use mlx5_hw::{AttrMask, QpState, QpType};

const BEGIN: &str = "<!-- BEGIN GENERATED: qp_state tables (hw/tests/it/qp_state_doc.rs) -->";
const END: &str = "<!-- END GENERATED -->";

fn names(m: AttrMask) -> String {
    if m.is_empty() {
        return "—".into();
    }
    m.names()
        .map(|n| format!("`{n}`"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn generated() -> String {
    let mut s = String::new();
    for t in QpType::EVERY {
        s.push_str(&format!("\n#### {t}\n\n| from | to | required (besides `STATE`) | optional |\n|---|---|---|---|\n"));
        for cur in QpState::ALL {
            for next in QpState::ALL {
                if let Some(r) = rule(cur, next, t) {
                    s.push_str(&format!(
                        "| {cur} | {next} | {} | {} |\n",
                        names(r.required),
                        names(r.optional)
                    ));
                }
            }
        }
    }
    s.push('\n');
    s
}

#[test]
fn doc_tables_match_the_code() {
    let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/state-machine.md");
    let doc = std::fs::read_to_string(path).expect("docs/state-machine.md");
    let (start, end) = match (doc.find(BEGIN), doc.find(END)) {
        (Some(b), Some(e)) if b < e => (b + BEGIN.len(), e),
        _ => panic!("docs/state-machine.md lacks the generated-section markers"),
    };
    let want = generated();
    if std::env::var_os("UPDATE_STATE_DOC").is_some() {
        let new = format!("{}{}{}", &doc[..start], want, &doc[end..]);
        std::fs::write(path, new).expect("write doc");
        return;
    }
    assert!(
        doc[start..end] == want,
        "docs/state-machine.md tables differ from qp_state; regenerate with UPDATE_STATE_DOC=1"
    );
}

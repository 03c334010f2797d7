//! The report of a run: the driver bugs the device saw (every one is also said on standard
//! error at exit), its counters and what it executed, written to `MLX5SIM_REPORT` at exit.
//!
//! ```text
//! mlx5sim report: pid 4242, device mlx5_0, 127.77.16.146
//! driver_bugs 0
//! doorbells 2001
//! port_xmit_packets 2003
//! ...
//! ```
//!
//! One `name value` pair a line after the first; each driver bug adds a `bug ...` line.

use std::fmt::Write;

use crate::node::Node;

/// The report's text.
pub fn text(node: &Node) -> String {
    let bugs = node.fabric.driver_bugs();
    let mut s = String::new();
    let _ = writeln!(
        s,
        "mlx5sim report: pid {}, device {}, {}",
        std::process::id(),
        crate::sysfs::IBDEV,
        node.ip
    );
    let _ = writeln!(s, "driver_bugs {}", bugs.len());
    let db = node.dev.doorbell_stats_total();
    let _ = writeln!(s, "doorbells {}", db.doorbells);
    let _ = writeln!(s, "bf_verified {}", db.bf_verified);
    let _ = writeln!(s, "malformed_frames {}", node.fabric.malformed_frames());
    let f = node.fabric.faults().stats();
    let _ = writeln!(s, "fault_dropped {}", f.dropped);
    let _ = writeln!(s, "fault_link_down_dropped {}", f.link_down_dropped);
    let _ = writeln!(s, "fault_duplicated {}", f.duplicated);
    let _ = writeln!(s, "fault_corrupted {}", f.corrupted);
    let _ = writeln!(s, "fault_delayed {}", f.delayed);
    let _ = writeln!(s, "fault_rnr {}", f.rnr);
    for (name, v) in node.counters() {
        let _ = writeln!(s, "{name} {v}");
    }
    for b in &bugs {
        let _ = writeln!(s, "bug {b}");
    }
    s
}

/// At exit: say the driver bugs on standard error, write the report file if asked.
pub fn at_exit(node: &Node) {
    let bugs = node.fabric.driver_bugs();
    if !bugs.is_empty() {
        let mut s = format!(
            "mlx5sim: the software ConnectX saw {} driver bug(s) in this program:\n",
            bugs.len()
        );
        for b in &bugs {
            let _ = writeln!(s, "mlx5sim:   {b}");
        }
        crate::emu::say(&s);
    }
    if let Some(p) = &node.cfg.report {
        if let Err(e) = std::fs::write(p, text(node)) {
            crate::emu::say(&format!(
                "mlx5sim: cannot write the report {}: {e}\n",
                p.display()
            ));
        }
    }
}

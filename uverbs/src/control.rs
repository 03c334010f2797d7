//! The control file (`MLX5SIM_CONTROL`): fault rules changed while the program runs. When the
//! device starts (before the program's first request) and whenever the file's modification
//! time or size changes, its text (the `faultspec` syntax, one item or
//! several per line) replaces every fault rule of the device; an empty file removes them all.
//! Writing `down` into it takes the link down, writing nothing brings it back; writing `fatal`
//! kills the device (`IBV_EVENT_DEVICE_FATAL`, for good). A file that does not parse is said on
//! standard error and changes nothing.

use std::path::PathBuf;
use std::time::SystemTime;

use mlx5_sim::{Fabric, SimDevice};

/// The control file and what was last applied from it.
#[derive(Debug)]
pub struct Control {
    path: Option<PathBuf>,
    seen: Option<(SystemTime, u64)>,
}

impl Control {
    /// Watch `path` (nothing when `None`).
    pub fn new(path: Option<PathBuf>) -> Control {
        Control { path, seen: None }
    }

    /// Apply the file if it changed since the last look.
    pub fn check(&mut self, fabric: &Fabric, dev: &SimDevice) {
        let Some(p) = &self.path else { return };
        let Ok(meta) = std::fs::metadata(p) else {
            return;
        };
        let stamp = (
            meta.modified().unwrap_or(SystemTime::UNIX_EPOCH),
            meta.len(),
        );
        if self.seen == Some(stamp) {
            return;
        }
        self.seen = Some(stamp);
        let text = match std::fs::read_to_string(p) {
            Ok(t) => t,
            Err(e) => {
                crate::emu::say(&format!("mlx5sim: control file {}: {e}\n", p.display()));
                return;
            }
        };
        match crate::faultspec::parse(&text) {
            Ok(spec) => {
                crate::node::apply_faults(fabric, dev, &spec);
                tracing::info!(file = %p.display(), rules = spec.rules.len(), "fault rules replaced from the control file");
            }
            Err(e) => crate::emu::say(&format!(
                "mlx5sim: control file {}: {e}; rules unchanged\n",
                p.display()
            )),
        }
    }
}

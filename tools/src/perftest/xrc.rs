//! perftest's XRC layout (`-c XRC`), as its programs build it (perftest 4.5
//! `src/perftest_resources.c` `ctx_xrc_qp_create`, `ctx_connect`, `ctx_set_send_reg_wqes`;
//! `src/perftest_communication.c` `set_up_connection`; the `main`s of `write_lat.c`,
//! `send_lat.c`, `write_bw.c`, `send_bw.c`, which double `num_of_qps`):
//!
//! - in the latency programs and with `-b`, `num_of_qps` is doubled: endpoint messages
//!   `0..q` are initiators (`IBV_QPT_XRC_SEND`), `q..2q` targets (`IBV_QPT_XRC_RECV`);
//!   initiator `i` connects to the peer's endpoint `q + i`, target `q + i` to the peer's `i`
//!   (`ctx_connect`'s `xrc_offset`), and every WR of initiator `i` names the SRQN of the
//!   peer's endpoint `q + i` (`ctx_set_send_reg_wqes`);
//! - in the one-way bandwidth runs the client has `q` initiators and the server `q` targets,
//!   endpoint `i` to endpoint `i`;
//! - every endpoint message carries the end's one XRC SRQ number (`set_up_connection`:
//!   `ibv_get_srq_num`), and its buffer address; ib_write_lat polls the buffer of its target's
//!   message (`run_iter_lat_write`: `poll_buf_offset = 1`).
//!
//! `ctx_connect` sets `xrc_offset` back to `q` at the end of every iteration, so every target
//! `q + i` (`i >= 0`) is paired with the peer's message `i`: `-b -q N` pairs right for any `N`
//! (the latency programs always run one pair). `-b -q N > 1` is still refused ([`Layout::of`]).

use crate::{Error, Result};

/// Where this end's initiators and targets sit among the endpoint messages.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Layout {
    /// Initiator/target pairs (`-q`).
    pub pairs: usize,
    /// Both roles on each end (latency programs, `-b`).
    pub both: bool,
    /// This end is the client (one-way runs: the initiators' end).
    pub client: bool,
}

impl Layout {
    /// The layout of a run of `qps` QPs: `both` in the latency programs and with `-b`.
    pub fn of(qps: usize, both: bool, client: bool) -> Result<Layout> {
        if both && qps > 1 {
            return Err(Error::Usage(format!(
                "-c XRC -b -q {qps} with perftest's exchange: not in this build (the doubled \
                 layout pairs right, but stock ib_send_bw -b -q 2 -c XRC ends in RNR and \
                 out-of-sequence retries under the emulation, even against itself: \
                 docs/perftest.md, XRC); run -q 1, or -q {qps} between these tools"
            )));
        }
        Ok(Layout {
            pairs: qps.max(1),
            both,
            client,
        })
    }

    /// Endpoint messages each way.
    pub fn messages(&self) -> usize {
        if self.both {
            2 * self.pairs
        } else {
            self.pairs
        }
    }

    /// Initiators on this end.
    pub fn initiators(&self) -> usize {
        if self.both || self.client {
            self.pairs
        } else {
            0
        }
    }

    /// Targets on this end.
    pub fn targets(&self) -> usize {
        if self.both || !self.client {
            self.pairs
        } else {
            0
        }
    }

    /// Which of this end's QPs message `m` announces: `(pair, is_initiator)`.
    pub fn role_of(&self, m: usize) -> (usize, bool) {
        if self.both {
            (m % self.pairs, m < self.pairs)
        } else {
            (m, self.client)
        }
    }

    /// The peer's message the initiator of pair `q` connects to (a target).
    pub fn peer_target(&self, q: usize) -> usize {
        if self.both {
            self.pairs + q
        } else {
            q
        }
    }

    /// The peer's message the target of pair `q` answers (an initiator).
    pub fn peer_initiator(&self, q: usize) -> usize {
        q
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perftest_layouts() {
        let lat = Layout::of(1, true, true).unwrap();
        assert_eq!(lat.messages(), 2);
        assert_eq!((lat.initiators(), lat.targets()), (1, 1));
        assert_eq!(lat.role_of(0), (0, true));
        assert_eq!(lat.role_of(1), (0, false));
        assert_eq!((lat.peer_target(0), lat.peer_initiator(0)), (1, 0));
        let srv = Layout::of(4, false, false).unwrap();
        assert_eq!((srv.messages(), srv.initiators(), srv.targets()), (4, 0, 4));
        assert_eq!(srv.role_of(3), (3, false));
        let cli = Layout::of(4, false, true).unwrap();
        assert_eq!(
            (cli.initiators(), cli.targets(), cli.peer_target(2)),
            (4, 0, 2)
        );
        // -b -q 2: initiators are messages 0 and 1, targets 2 and 3; initiator 1 goes to the
        // peer's message 3, target 1 answers the peer's message 1.
        assert!(Layout::of(2, true, false).is_err());
        let duplex = Layout {
            pairs: 2,
            both: true,
            client: false,
        };
        assert_eq!(
            (duplex.messages(), duplex.initiators(), duplex.targets()),
            (4, 2, 2)
        );
        assert_eq!(
            (duplex.role_of(1), duplex.role_of(3)),
            ((1, true), (1, false))
        );
        assert_eq!((duplex.peer_target(1), duplex.peer_initiator(1)), (3, 1));
    }
}

//! The device's counters: one enum of every counter and an array indexed by it, so counting a
//! packet is an array increment rather than a string lookup; the names are only for
//! [`mlx5_hw::Device::counters`] and [`crate::SimDevice::counter`].
//!
//! The mlx5 `hw_counters` names are the Linux kernel's (`drivers/infiniband/hw/mlx5/counters.c`:
//! `basic_q_cnts`, `out_of_seq_q_cnts`, `retrans_q_cnts`, `extended_err_cnts`,
//! `ext_ppcnt_cnts`; `req_transport_retries_exceeded` and `req_rnr_retries_exceeded` came with
//! "RDMA/mlx5: Add Qcounters req_transport_retries_exceeded/req_rnr_retries_exceeded",
//! lore.kernel.org/r/250466af94f4989d638fab168e246035530e912f.1718301543.git.leon@kernel.org);
//! the port counters are IBTA PortCounters as sysfs `counters/` spells them
//! (data counters in units of 4 octets). The software ConnectX's own counters (no mlx5
//! equivalent) come last. Not modelled: `roce_adp_retrans*`, `roce_slow_restart*` (adaptive
//! retransmission) and the congestion counters.
//!
//! The requester's retry counters count events (the rules that spend and restore `retry_cnt`
//! and `rnr_retry` are in `transport/requester/retry.rs`): `packet_seq_err` every NAK sequence
//! error received, `local_ack_timeout_err` every ACK timer expiry, `rnr_nak_retry_err` every
//! RNR NAK received (mlx5's descriptions: "received NAK sequence error packets", "times QP's
//! ack timer expired", "received RNR NAK packets"; NVIDIA, "Understanding mlx5 Linux Counters
//! and Status Parameters"). The event that finds its retry count used up is counted there too
//! and, once, in `req_transport_retries_exceeded` / `req_rnr_retries_exceeded`. NVIDIA's
//! descriptions add "the QP retry limit was not exceeded", which can be read as leaving that
//! last event out; no public source says which firmware does which, so this model keeps the
//! plain count of events.
//!
//! Every packet the transport drops without answering it is counted by one of them:
//! `duplicate_request`, `duplicate_request_no_replay`, `out_of_sequence`, `out_of_buffer`,
//! `uc_dropped_packets`, `rx_qkey_violation`, `rx_dropped`, `dct_key_violations`,
//! `dct_no_connection` (responder side);
//! `duplicate_response`, `unexpected_response`, `out_of_sequence` (requester side);
//! `rx_icrc_encapsulated`, `port_rcv_errors` (the port).

macro_rules! counters {
    ($($(#[$doc:meta])* $id:ident = $name:literal,)*) => {
        /// One counter of the device.
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
        pub enum CounterId {
            $($(#[$doc])* $id,)*
        }

        impl CounterId {
            /// Every counter, in the order [`mlx5_hw::Device::counters`] reports them.
            pub const ALL: &'static [CounterId] = &[$(CounterId::$id,)*];

            /// The counter's name (mlx5 `hw_counters` / sysfs spelling).
            pub const fn name(self) -> &'static str {
                match self {
                    $(CounterId::$id => $name,)*
                }
            }
        }
    };
}

counters! {
    /// Frames transmitted (IBTA PortXmitPkts).
    PortXmitPackets = "port_xmit_packets",
    /// Frames received (IBTA PortRcvPkts).
    PortRcvPackets = "port_rcv_packets",
    /// Octets transmitted / 4, whole frame without FCS (IBTA PortXmitData).
    PortXmitData = "port_xmit_data",
    /// Octets received / 4 (IBTA PortRcvData).
    PortRcvData = "port_rcv_data",
    /// Frames that failed to parse or failed the ICRC check (IBTA PortRcvErrors).
    PortRcvErrors = "port_rcv_errors",
    /// Frames sent while the port was down (IBTA PortXmitDiscards).
    PortXmitDiscards = "port_xmit_discards",
    /// Responder: a request PSN after the expected one (RC NAKs it once, UC gives up the
    /// message in progress); requester: a READ response after a missing one.
    OutOfSequence = "out_of_sequence",
    /// Requester: NAK sequence errors received (each one retransmits, unless an RNR wait runs;
    /// the one that finds no transport retry left too).
    PacketSeqErr = "packet_seq_err",
    /// Responder: a request PSN before the expected one (RC answers it again, UC drops it).
    DuplicateRequest = "duplicate_request",
    /// Requester: ACK timer expiries (each one retransmits; the one that finds no transport
    /// retry left too).
    LocalAckTimeoutErr = "local_ack_timeout_err",
    /// Requester: RNR NAKs received (each one waits the RNR timer and retransmits; the one
    /// that finds no RNR retry left too).
    RnrNakRetryErr = "rnr_nak_retry_err",
    /// Responder: a SEND or WRITE with immediate found no receive WQE.
    OutOfBuffer = "out_of_buffer",
    /// Requester: a response past an unanswered READ/atomic (implied NAK).
    ImpliedNakSeqErr = "implied_nak_seq_err",
    /// Requester error completions other than flushes.
    ReqCqeError = "req_cqe_error",
    /// Requester flush completions.
    ReqCqeFlushError = "req_cqe_flush_error",
    /// Requester: remote access error NAKs.
    ReqRemoteAccessErrors = "req_remote_access_errors",
    /// Requester: invalid request NAKs.
    ReqRemoteInvalidRequest = "req_remote_invalid_request",
    /// Requester: transport retries exceeded (a timeout, NAK sequence error or implied NAK
    /// with no `retry_cnt` left: RETRY_EXC_ERR).
    ReqTransportRetriesExceeded = "req_transport_retries_exceeded",
    /// Requester: RNR retries exceeded (an RNR NAK with no `rnr_retry` left:
    /// RNR_RETRY_EXC_ERR).
    ReqRnrRetriesExceeded = "req_rnr_retries_exceeded",
    /// Responder error completions other than flushes.
    RespCqeError = "resp_cqe_error",
    /// Responder flush completions.
    RespCqeFlushError = "resp_cqe_flush_error",
    /// Responder: a message longer than its receive WQE.
    RespLocalLengthError = "resp_local_length_error",
    /// Responder: a request that failed its rkey, PD, bounds or access check.
    RespRemoteAccessErrors = "resp_remote_access_errors",
    /// Responder: READ requests executed.
    RxReadRequests = "rx_read_requests",
    /// Responder: atomic requests executed.
    RxAtomicRequests = "rx_atomic_requests",
    /// Responder: WRITE messages started.
    RxWriteRequests = "rx_write_requests",
    /// Frames whose ICRC check failed.
    RxIcrcEncapsulated = "rx_icrc_encapsulated",
    /// CQs that entered their error state by an overrun (mlx5's vport debug counter
    /// `cq_overrun`, "number of times CQ entered an error state due to an overflow": kernel
    /// commit 3e94e61bd44d, "net/mlx5: Add HW definitions of vport debug counters").
    CqOverrun = "cq_overrun",
    /// Software ConnectX: a packet for a QP that does not exist or cannot receive in its state,
    /// or of a transport the QP does not run.
    RxDropped = "rx_dropped",
    /// Software ConnectX: a UD packet whose Q_Key does not match the QP's.
    RxQkeyViolation = "rx_qkey_violation",
    /// Software ConnectX, requester: a response for no outstanding request (a duplicate, or a
    /// replay of a request already answered).
    DuplicateResponse = "duplicate_response",
    /// Software ConnectX, requester: a response whose PSN names an outstanding request of
    /// another kind (an atomic ACK for a READ, a READ response for an atomic).
    UnexpectedResponse = "unexpected_response",
    /// Software ConnectX, RC responder: a duplicate READ or atomic whose replay entry was
    /// evicted from the `max_dest_rd_atomic` responder resources; dropped without an answer.
    DuplicateRequestNoReplay = "duplicate_request_no_replay",
    /// Software ConnectX, UC responder: a packet dropped with the rest of a message given up
    /// (a packet of it was lost, it found no receive WQE, or it failed a check).
    UcDroppedPackets = "uc_dropped_packets",
    /// Software ConnectX, DC initiator: connections opened ([`crate::transport::dc`]).
    DciConnects = "dci_connects",
    /// Software ConnectX, DC initiator: disconnect requests sent.
    DciDisconnects = "dci_disconnects",
    /// Software ConnectX, DC target: connections opened.
    DctConnects = "dct_connects",
    /// Software ConnectX, DC target: connections closed (a disconnect request, a newer
    /// connect of the same initiator, an error).
    DctDisconnects = "dct_disconnects",
    /// Software ConnectX, DC target: requests dropped for a wrong DC access key (the PRM's
    /// `dc_access_key_violation_count`, summed over the device's targets).
    DctKeyViolations = "dct_key_violations",
    /// Software ConnectX, DC target: a request of a connection the target does not know (its
    /// connect was lost, or it was closed), dropped without an answer.
    DctNoConnection = "dct_no_connection",
}

impl CounterId {
    /// The counter with this name.
    pub fn from_name(name: &str) -> Option<CounterId> {
        CounterId::ALL.iter().copied().find(|c| c.name() == name)
    }
}

/// The counters of one device, indexed by [`CounterId`].
#[derive(Clone, Debug)]
pub struct Counters([u64; CounterId::ALL.len()]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; CounterId::ALL.len()])
    }
}

impl Counters {
    /// Add one.
    pub fn inc(&mut self, c: CounterId) {
        self.add(c, 1);
    }

    /// Add `n` (wrapping, as hardware counters do).
    pub fn add(&mut self, c: CounterId, n: u64) {
        let v = &mut self.0[c as usize];
        *v = v.wrapping_add(n);
    }

    /// The value of one counter.
    pub fn get(&self, c: CounterId) -> u64 {
        self.0[c as usize]
    }

    /// The value of the counter with this name (0 for a name the device does not have).
    pub fn by_name(&self, name: &str) -> u64 {
        CounterId::from_name(name).map_or(0, |c| self.get(c))
    }

    /// Every counter with its value, in [`CounterId::ALL`] order.
    pub fn iter(&self) -> impl Iterator<Item = (CounterId, u64)> + '_ {
        CounterId::ALL.iter().map(|&c| (c, self.get(c)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_the_index_is_the_position() {
        for (i, c) in CounterId::ALL.iter().enumerate() {
            assert_eq!(*c as usize, i);
            assert_eq!(CounterId::from_name(c.name()), Some(*c));
        }
        let mut names: Vec<_> = CounterId::ALL.iter().map(|c| c.name()).collect();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CounterId::ALL.len());
        let mut k = Counters::default();
        k.inc(CounterId::OutOfBuffer);
        k.add(CounterId::PortRcvData, 5);
        assert_eq!(k.by_name("out_of_buffer"), 1);
        assert_eq!(k.by_name("port_rcv_data"), 5);
        assert_eq!(k.by_name("no_such_counter"), 0);
    }
}

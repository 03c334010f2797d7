//! A control-path-only fake device for the unit tests of connect (virtio-drivers'
//! `transport/fake.rs` idea): QPs are attribute records checked with the real state table;
//! nothing moves data. Scenario tests with data run on the software ConnectX in the root
//! crate's `tests/`.

use mlx5_hw::qp_state;
use mlx5_hw::*;
use std::collections::HashMap;
use std::sync::Mutex;

#[derive(Debug, Default)]
struct State {
    next: u32,
    qps: HashMap<u32, (QpType, QpAttr)>,
    ahs: Vec<AhAttr>,
}

/// The fake.
#[derive(Debug)]
pub(crate) struct FakeDevice {
    pub(crate) port: PortAttr,
    pub(crate) gid: Gid,
    pub(crate) max_rd_atom: u32,
    /// Refuse the modify to this state (to test failure paths).
    pub(crate) fail_to: Mutex<Option<QpState>>,
    st: Mutex<State>,
}

impl FakeDevice {
    pub(crate) fn new(active_mtu: Mtu, ip_last: u8) -> FakeDevice {
        FakeDevice {
            port: PortAttr {
                state: PortState::Active,
                max_mtu: Mtu::Mtu4096,
                active_mtu,
                lid: 0,
                link_layer: LinkLayer::Ethernet,
                gid_tbl_len: 4,
            },
            gid: Gid::from_ipv4([10, 0, 0, ip_last]),
            max_rd_atom: 16,
            fail_to: Mutex::new(None),
            st: Mutex::new(State {
                next: 0x100 + u32::from(ip_last) * 0x100,
                ..State::default()
            }),
        }
    }

    /// A QP in Reset; returns its reference.
    pub(crate) fn qp(&self, qp_type: QpType) -> super::QpRef {
        let mut st = self.st.lock().unwrap();
        st.next += 1;
        let n = st.next;
        st.qps.insert(n, (qp_type, QpAttr::default()));
        super::QpRef {
            id: QpId(n),
            qpn: n,
            qp_type,
            pd: PdId(1),
        }
    }

    pub(crate) fn force_state(&self, qp: QpId, s: QpState) {
        let mut st = self.st.lock().unwrap();
        if let Some((_, a)) = st.qps.get_mut(&qp.0) {
            a.qp_state = s;
        }
    }

    pub(crate) fn ahs(&self) -> Vec<AhAttr> {
        self.st.lock().unwrap().ahs.clone()
    }
}

fn unsupported<T>(what: &str) -> Result<T> {
    Err(Error::Unsupported(format!("fake device: {what}")))
}

impl Device for FakeDevice {
    fn name(&self) -> &str {
        "fake0"
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(DeviceAttr {
            phys_port_cnt: 1,
            max_qp_rd_atom: self.max_rd_atom,
            max_qp_init_rd_atom: self.max_rd_atom,
            ..DeviceAttr::default()
        })
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port != 1 {
            return Err(Error::InvalidArgument(format!("no port {port}")));
        }
        Ok(self.port.clone())
    }
    fn query_gid(&self, _port: u8, index: u32) -> Result<Gid> {
        if index >= self.port.gid_tbl_len {
            return Err(Error::InvalidArgument(format!("no GID index {index}")));
        }
        Ok(self.gid)
    }
    fn alloc_pd(&self) -> Result<PdId> {
        Ok(PdId(1))
    }
    fn dealloc_pd(&self, _pd: PdId) -> Result<()> {
        Ok(())
    }
    unsafe fn reg_mr(
        &self,
        _pd: PdId,
        _addr: *mut u8,
        _len: usize,
        _access: AccessFlags,
    ) -> Result<MrInfo> {
        unsupported("reg_mr")
    }
    fn dereg_mr(&self, _mr: MrId) -> Result<()> {
        unsupported("dereg_mr")
    }
    fn create_cq(&self, _attr: &CqInitAttr) -> Result<CqInfo> {
        unsupported("create_cq")
    }
    fn destroy_cq(&self, _cq: CqId) -> Result<()> {
        unsupported("destroy_cq")
    }
    fn create_srq(&self, _pd: PdId, _attr: &SrqInitAttr) -> Result<SrqInfo> {
        unsupported("create_srq")
    }
    fn arm_srq_limit(&self, _srq: SrqId, _limit: u32) -> Result<()> {
        unsupported("arm_srq_limit")
    }
    fn destroy_srq(&self, _srq: SrqId) -> Result<()> {
        unsupported("destroy_srq")
    }
    fn create_qp(&self, _pd: PdId, _attr: &QpInitAttr) -> Result<QpInfo> {
        unsupported("create_qp (use FakeDevice::qp)")
    }
    fn modify_qp(&self, qp: QpId, attr: &QpAttr, mask: AttrMask) -> Result<()> {
        if *self.fail_to.lock().unwrap() == Some(attr.qp_state) {
            return Err(Error::Verbs {
                call: "ibv_modify_qp",
                source: std::io::Error::from_raw_os_error(22),
            });
        }
        let mut st = self.st.lock().unwrap();
        let (t, cur) = st.qps.get_mut(&qp.0).ok_or(Error::UnknownHandle {
            kind: "QP",
            id: qp.0,
        })?;
        let next = qp_state::validate(cur.qp_state, attr, mask, *t)?;
        let mut a = *attr;
        a.qp_state = next;
        a.cur_qp_state = next;
        // Keep what the mask does not carry (what query_qp would report).
        macro_rules! keep {
            ($bit:ident, $($f:ident).+) => {
                if !mask.contains(AttrMask::$bit) {
                    a.$($f).+ = cur.$($f).+;
                }
            };
        }
        keep!(PATH_MTU, path_mtu);
        keep!(QKEY, qkey);
        keep!(RQ_PSN, rq_psn);
        keep!(SQ_PSN, sq_psn);
        keep!(DEST_QPN, dest_qp_num);
        keep!(ACCESS_FLAGS, qp_access_flags);
        keep!(PORT, port_num);
        keep!(AV, ah_attr);
        keep!(TIMEOUT, timeout);
        keep!(RETRY_CNT, retry_cnt);
        keep!(RNR_RETRY, rnr_retry);
        keep!(MIN_RNR_TIMER, min_rnr_timer);
        keep!(MAX_QP_RD_ATOMIC, max_rd_atomic);
        keep!(MAX_DEST_RD_ATOMIC, max_dest_rd_atomic);
        *cur = a;
        Ok(())
    }
    fn query_qp(&self, qp: QpId) -> Result<QpAttr> {
        let st = self.st.lock().unwrap();
        st.qps
            .get(&qp.0)
            .map(|(_, a)| *a)
            .ok_or(Error::UnknownHandle {
                kind: "QP",
                id: qp.0,
            })
    }
    fn destroy_qp(&self, qp: QpId) -> Result<()> {
        self.st.lock().unwrap().qps.remove(&qp.0);
        Ok(())
    }
    fn create_ah(&self, _pd: PdId, attr: &AhAttr) -> Result<AhInfo> {
        let mut st = self.st.lock().unwrap();
        st.ahs.push(*attr);
        Ok(AhInfo {
            id: AhId(st.ahs.len() as u32),
            av: [0u8; 48],
        })
    }
    fn destroy_ah(&self, _ah: AhId) -> Result<()> {
        Ok(())
    }
    fn poll_async_event(&self) -> Option<AsyncEvent> {
        None
    }
    fn counters(&self, _port: u8) -> Result<Vec<Counter>> {
        Ok(vec![
            Counter {
                name: "out_of_sequence".into(),
                value: 0,
            },
            Counter {
                name: "rnr_nak_retry_err".into(),
                value: 3,
            },
        ])
    }
}

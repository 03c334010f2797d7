//! The fault specification of `MLX5SIM_FAULTS` and `mlx5sim --faults`: the software ConnectX's
//! fault rules (`mlx5_sim::faults`) written as one line, so an unmodified program can run under
//! loss, duplication, reordering, delay, corruption, a link that is down, or a receiver whose
//! receive queue looks empty (RNR).
//!
//! ```text
//! loss=1%,dup=0.5%            1 % of frames dropped, 0.5 % delivered twice
//! reorder=20us,delay=100us    random delay below 20 µs (reordering); 100 µs more for all
//! corrupt=0.1%                one bit flipped (the receiver's ICRC check drops the frame)
//! only=acks,loss=10%          the rules after `only=` select one class of packets
//! qpn=0x10a,times=3,loss=100% at most 3 frames to QP 0x10a
//! down                        every frame dropped (bring it up with the control file)
//! times=5,rnr=100%            the next 5 requests that need a receive WQE find none (RNR NAK)
//! rnr=10%                     each request that needs a receive WQE refused with 10 % chance
//! rnr-for=50ms                every one refused for 50 ms from the first (a receiver behind)
//! seed=7                      the generator every random rule draws from
//! fatal                       the device dies (IBV_EVENT_DEVICE_FATAL; nothing brings it back)
//! ```
//!
//! Items are separated by commas (or white space, or new lines in a control file; `#` starts a
//! comment). Rates are a percentage (`1%`) or a fraction (`0.01`); durations take `ns`, `us`,
//! `ms` or `s`. The selectors `only=`, `qpn=`, `times=` and `skip=` apply to the rules that
//! follow them. Every rule acts on the frames this process's device transmits (each process
//! applies its own specification to what it sends), except the RNR rules (`rnr=`, `rnr-for=`):
//! they act on the requests this process's device receives, where a request needing a receive
//! WQE (a SEND, a WRITE with immediate, a UD datagram) meets its receive queue or SRQ, which
//! then looks empty; `qpn=` names the receiving QP (`mlx5_sim::faults::FaultTarget::rnr`).
//!
//! This file is shared by the preload library and the launcher (`mlx5sim --faults` checks a
//! specification before it starts the program).

use std::time::Duration;

/// A class of packets (`mlx5_sim::Class`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum PacketClass {
    /// Every packet.
    #[default]
    Any,
    /// Requests of every kind.
    Requests,
    /// SEND and WRITE packets.
    Data,
    /// READ requests.
    Reads,
    /// Atomic requests.
    Atomics,
    /// Responses of every kind.
    Responses,
    /// ACK and NAK packets.
    Acks,
    /// READ response packets.
    ReadResponses,
    /// Atomic ACKs.
    AtomicAcks,
}

/// What a rule does.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Action {
    /// Drop with this probability.
    Loss(f64),
    /// Duplicate with this probability.
    Duplicate(f64),
    /// Flip a bit with this probability.
    Corrupt(f64),
    /// Delay each frame by a random amount below this.
    Reorder(Duration),
    /// Delay each frame by this.
    Delay(Duration),
    /// Drop everything.
    Down,
    /// Refuse a request that needs a receive WQE with this probability, as if the receive
    /// queue were empty (RNR NAK on RC, dropped on UC/UD).
    Rnr(f64),
    /// Refuse every request that needs a receive WQE for this long, from the first one.
    RnrFor(Duration),
}

/// One rule with its selectors.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Rule {
    /// The action.
    pub action: Action,
    /// The packets it selects.
    pub class: PacketClass,
    /// Only frames to this QPN.
    pub qpn: Option<u32>,
    /// At most this many firings.
    pub times: Option<u64>,
    /// Let this many selected frames pass first.
    pub skip: u64,
}

/// A parsed specification.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Spec {
    /// The rules, in order.
    pub rules: Vec<Rule>,
    /// The generator's seed, if given.
    pub seed: Option<u64>,
    /// `fatal`: the device enters its fatal state (a firmware internal error: mlx5_core's
    /// `MLX5_DEV_EVENT_SYS_ERROR`), which no later specification undoes.
    pub fatal: bool,
}

fn rate(v: &str) -> Result<f64, String> {
    let (num, scale) = match v.strip_suffix('%') {
        Some(n) => (n, 100.0),
        None => (v, 1.0),
    };
    let x: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("'{v}' is not a rate (write 1% or 0.01)"))?;
    let x = x / scale;
    if !(0.0..=1.0).contains(&x) {
        return Err(format!("rate '{v}' is outside 0%..100%"));
    }
    Ok(x)
}

fn duration(v: &str) -> Result<Duration, String> {
    let v = v.trim();
    let (num, unit) = v
        .find(|c: char| c.is_ascii_alphabetic())
        .map(|i| v.split_at(i))
        .ok_or_else(|| format!("'{v}' has no unit (ns, us, ms or s)"))?;
    let n: u64 = num
        .parse()
        .map_err(|_| format!("'{v}' is not a whole number of {unit}"))?;
    let ns = match unit {
        "ns" => 1,
        "us" | "µs" => 1_000,
        "ms" => 1_000_000,
        "s" => 1_000_000_000,
        _ => return Err(format!("'{v}': unknown unit '{unit}' (ns, us, ms or s)")),
    };
    n.checked_mul(ns)
        .filter(|&t| t <= 60_000_000_000)
        .map(Duration::from_nanos)
        .ok_or_else(|| format!("'{v}' is longer than 60 s"))
}

fn number(v: &str) -> Result<u64, String> {
    let v = v.trim();
    let r = match v.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => v.parse(),
    };
    r.map_err(|_| format!("'{v}' is not a number"))
}

fn class(v: &str) -> Result<PacketClass, String> {
    Ok(match v {
        "any" | "all" => PacketClass::Any,
        "requests" => PacketClass::Requests,
        "data" => PacketClass::Data,
        "reads" | "read-requests" => PacketClass::Reads,
        "atomics" | "atomic-requests" => PacketClass::Atomics,
        "responses" => PacketClass::Responses,
        "acks" => PacketClass::Acks,
        "read-responses" => PacketClass::ReadResponses,
        "atomic-acks" => PacketClass::AtomicAcks,
        _ => {
            return Err(format!(
                "unknown packet class '{v}' (any, requests, data, reads, atomics, responses, \
                 acks, read-responses, atomic-acks)"
            ))
        }
    })
}

/// Parse a specification; the error names the item and what is wrong with it.
pub fn parse<'a>(text: &'a str) -> Result<Spec, String> {
    let mut spec = Spec::default();
    let mut cur = Rule {
        action: Action::Down,
        class: PacketClass::Any,
        qpn: None,
        times: None,
        skip: 0,
    };
    let items = text
        .lines()
        .map(|l| l.split('#').next().unwrap_or(""))
        .flat_map(|l| l.split(|c: char| c == ',' || c.is_whitespace()))
        .filter(|i| !i.is_empty());
    for item in items {
        let (k, v) = match item.split_once('=') {
            Some((k, v)) => (k, Some(v)),
            None => (item, None),
        };
        let need = |v: Option<&'a str>| v.ok_or_else(|| format!("'{k}' needs a value ({k}=...)"));
        let err = |e: String| format!("fault item '{item}': {e}");
        let action = match k {
            "loss" => Some(Action::Loss(rate(need(v)?).map_err(err)?)),
            "dup" | "duplicate" => Some(Action::Duplicate(rate(need(v)?).map_err(err)?)),
            "corrupt" => Some(Action::Corrupt(rate(need(v)?).map_err(err)?)),
            "reorder" => Some(Action::Reorder(duration(need(v)?).map_err(err)?)),
            "delay" => Some(Action::Delay(duration(need(v)?).map_err(err)?)),
            "down" if v.is_none() => Some(Action::Down),
            "fatal" if v.is_none() => {
                spec.fatal = true;
                None
            }
            "rnr" => Some(Action::Rnr(rate(need(v)?).map_err(err)?)),
            "rnr-for" => Some(Action::RnrFor(duration(need(v)?).map_err(err)?)),
            "only" => {
                cur.class = class(need(v)?).map_err(err)?;
                None
            }
            "qpn" => {
                let n = number(need(v)?).map_err(err)?;
                if n > 0x00ff_ffff {
                    return Err(err("a QPN has 24 bits".into()));
                }
                cur.qpn = Some(n as u32);
                None
            }
            "times" => {
                cur.times = Some(number(need(v)?).map_err(err)?);
                None
            }
            "skip" => {
                cur.skip = number(need(v)?).map_err(err)?;
                None
            }
            "seed" => {
                spec.seed = Some(number(need(v)?).map_err(err)?);
                None
            }
            _ => {
                return Err(format!(
                    "unknown fault item '{item}' (loss=, dup=, corrupt=, reorder=, delay=, \
                     down, fatal, rnr=, rnr-for=, only=, qpn=, times=, skip=, seed=)"
                ))
            }
        };
        if let Some(action) = action {
            spec.rules.push(Rule { action, ..cur });
        }
    }
    Ok(spec)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn items_rates_durations_and_selectors() {
        let s = parse("loss=1%, dup=0.005\nonly=acks qpn=0x10a times=3 corrupt=100% # c\nseed=7")
            .unwrap();
        assert_eq!(s.seed, Some(7));
        assert_eq!(s.rules.len(), 3);
        assert_eq!(s.rules[0].action, Action::Loss(0.01));
        assert_eq!(s.rules[1].action, Action::Duplicate(0.005));
        assert_eq!(s.rules[2].class, PacketClass::Acks);
        assert_eq!(s.rules[2].qpn, Some(0x10a));
        assert_eq!(s.rules[2].times, Some(3));
        let s = parse("reorder=20us,delay=1ms,down").unwrap();
        assert_eq!(
            s.rules[0].action,
            Action::Reorder(Duration::from_micros(20))
        );
        assert_eq!(s.rules[1].action, Action::Delay(Duration::from_millis(1)));
        assert_eq!(s.rules[2].action, Action::Down);
        assert_eq!(parse("").unwrap(), Spec::default());
        let s = parse("qpn=0x11 times=5 rnr=100%\nrnr=0.1 rnr-for=50ms").unwrap();
        assert_eq!(s.rules[0].action, Action::Rnr(1.0));
        assert_eq!((s.rules[0].qpn, s.rules[0].times), (Some(0x11), Some(5)));
        assert_eq!(s.rules[1].action, Action::Rnr(0.1));
        assert_eq!(s.rules[2].action, Action::RnrFor(Duration::from_millis(50)));
    }

    #[test]
    fn bad_items_say_what_is_wrong() {
        for (bad, says) in [
            ("loss=150%", "outside"),
            ("loss", "needs a value"),
            ("reorder=20", "no unit"),
            ("delay=5h", "unknown unit"),
            ("only=everything", "unknown packet class"),
            ("qpn=0x1000000", "24 bits"),
            ("drop=1", "unknown fault item"),
            ("delay=100s", "60 s"),
            ("rnr=3", "outside"),
            ("rnr-for=5", "no unit"),
        ] {
            let e = parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
    }

    #[test]
    fn fatal_is_an_item_of_its_own() {
        assert!(parse("fatal").unwrap().fatal);
        assert!(parse("loss=1%, fatal # the device dies").unwrap().fatal);
        assert!(!parse("loss=1%").unwrap().fatal);
        assert!(parse("fatal=1").is_err());
    }
}

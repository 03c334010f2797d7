#!/usr/bin/env bash
# Instructions per post and per poll of the mlx5-direct data path, counted exactly by
# valgrind's callgrind (docs/sources.md §21): benches/count_post_poll.rs posts N inline 8-byte RDMA
# WRITEs through BlueFlame and polls their N CQEs on rings in ordinary memory; each post and
# each poll goes through one #[inline(never)] function, and callgrind counts only inside it
# (--toggle-collect), one run per function. The post count divided by N is the cost of one
# post, WR construction and call/return included; the polls drain up to 16 send completions a
# call (`Cq::poll_send`), so the poll count divided by N is the cost per polled CQE.
#
# Usage: benches/count-instructions.sh [N]        (N defaults to 10000)
#   COUNT_BIN=path  use an already built count_post_poll instead of building it (by default
#                   the release bench target, `cargo build --release --bench count_post_poll`)
#   KEEP=dir        keep the callgrind output files there (for callgrind_annotate)
# Before them it prints the floor and the other shapes it counts (a 1-SGE WRITE with the
# 8-byte doorbell, the post in DoorbellMode::Bf, Cq::poll one CQE a call and 16 a call, the
# receive side of Cq::poll (16 and one a call), flush error completions through it (send and receive, 16 and one a call), 16 inline WRITEs posted in one Qp::batch and rung once, and the
# post and Cq::poll with 1000 QPs on one CQ found through a QpTable, beside the same with one
# and, for the poll, two whose CQEs interleave; the receive side's poll with 1000 QPs too; the
# same inline WRITE posted on a DCI to a DC target, `measured_post_dc`: 96 bytes in two blocks,
# in the RC post's mode (`BfPost`, a two-line BlueFlame copy) and beside it in `Bf`, and in
# `Db`, the 8-byte doorbell, beside the RC inline post in `Db`: there the copies are out of
# the comparison and the difference is the DC WQE's own); beside the DC post, an RC post of a
# two-block WQE in the same three modes, `measured_post_rc2` (an inline 40-byte WRITE: ctrl,
# raddr, inline header and 40 bytes, 76 in two blocks), posted in the same loop.
# The last two lines of the output are always
#   instructions per post: N
#   instructions per poll: N
# Reference (docs/sources.md §21): libmlx5 spends 339 instructions in ibv_post_send for this WQE
# and 294 through ibv_wr_*; the targets here are at most 40 per post and 20 per polled CQE.
set -euo pipefail
cd "$(dirname "$0")/.."

n="${1:-10000}"
case "$n" in '' | *[!0-9]* | 0) echo "N must be a positive integer, got '$n'" >&2; exit 2 ;; esac

if ! command -v valgrind >/dev/null 2>&1; then
  echo "== installing valgrind" >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >&2
  apt-get install -y -qq valgrind >/dev/null
fi

bin="${COUNT_BIN:-}"
if [ -z "$bin" ]; then
  # A bench binary carries a hash in its name (target/release/deps/count_post_poll-HASH):
  # take its path from cargo's own report of the artifact it built.
  bin=$(cargo build --release -p mlx5-direct --bench count_post_poll \
    --message-format=json-render-diagnostics |
    sed -n 's/.*"executable":"\([^"]*count_post_poll[^"]*\)".*/\1/p' | tail -n 1)
  [ -n "$bin" ] || { echo "cargo reported no count_post_poll executable" >&2; exit 1; }
fi
[ -x "$bin" ] || { echo "no executable at $bin" >&2; exit 1; }

out="${KEEP:-$(mktemp -d)}"
mkdir -p "$out"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$out"' EXIT

# Events counted inside one function, over the whole run: count LABEL FUNCTION [PROGRAM ARGS]
# (the label names the output files).
count() {
  local label="$1" fn="$2" file="$out/callgrind.$1.out"
  shift 2
  valgrind --tool=callgrind --callgrind-out-file="$file" --collect-atstart=no \
    --toggle-collect="*count_post_poll::measured_$fn" "$bin" "$n" "$@" >&2 2>"$out/valgrind.$label.log" || {
    cat "$out/valgrind.$label.log" >&2
    echo "count_post_poll failed under valgrind" >&2
    exit 1
  }
  local total
  total=$(awk '/^(summary|totals):/ {print $2; exit}' "$file")
  [ -n "$total" ] || { echo "no totals in $file" >&2; exit 1; }
  echo "$total"
}

post=$(count post post)
poll=$(count poll poll)
floor=$(count floor floor)
post_sge=$(count post_sge_db post_sge --sge-db)
post_bf=$(count post_bf post --bf-flush)
poll_one=$(count poll_one poll_one --poll-one)
poll_wcs=$(count poll_wcs poll_wcs --poll-wcs)
batch=$(count batch batch --batch)
poll_recv=$(count poll_recv poll_wcs --recv)
poll_recv_one=$(count poll_recv_one poll_one --recv --poll-one)
poll_flush=$(count poll_flush poll_wcs --flush)
poll_flush_recv=$(count poll_flush_recv poll_wcs --flush --recv)
poll_flush_one=$(count poll_flush_one poll_one --flush --poll-one)
poll_flush_recv_one=$(count poll_flush_recv_one poll_one --flush --recv --poll-one)
post_qps1=$(count post_qps1 post --qps 1)
post_qps=$(count post_qps post --qps 1000)
poll_qps1=$(count poll_qps1 poll_table --qps 1)
poll_qps2=$(count poll_qps2 poll_table --qps 2)
poll_qps=$(count poll_qps poll_table --qps 1000)
poll_recv_qps1=$(count poll_recv_qps1 poll_table --qps 1 --recv)
poll_recv_qps=$(count poll_recv_qps poll_table --qps 1000 --recv)
post_dc=$(count post_dc post_dc --dc)
post_dc_bf=$(count post_dc_bf post_dc --dc --bf-flush)
post_dc_db=$(count post_dc_db post_dc --dc --db)
post_db=$(count post_db post --db)
post_rc2=$(count post_rc2 post_rc2 --rc2)
post_rc2_bf=$(count post_rc2_bf post_rc2 --rc2 --bf-flush)
post_rc2_db=$(count post_rc2_db post_rc2 --rc2 --db)
diff() { awk -v a="$1" -v b="$2" -v n="$n" 'BEGIN { printf "%+.0f", (a - b) / n }'; }
per() { awk -v t="$1" -v n="$n" 'BEGIN { printf "%.0f", t / n }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "compiler: $(rustc --version 2>/dev/null || echo unknown)"
echo "N = $n; callgrind totals: post $post, poll $poll, floor $floor, 1-SGE post $post_sge, post in Bf mode $post_bf, poll one $poll_one, poll 16 $poll_wcs, batch $batch, receive poll $poll_recv, receive poll one $poll_recv_one, flush poll $poll_flush, receive flush poll $poll_flush_recv, flush poll one $poll_flush_one, receive flush poll one $poll_flush_recv_one, post with 1 / 1000 QPs $post_qps1 / $post_qps, poll with 1 / 2 / 1000 QPs $poll_qps1 / $poll_qps2 / $poll_qps, receive poll with 1 / 1000 QPs $poll_recv_qps1 / $poll_recv_qps, DC post $post_dc, DC post in Bf / Db mode $post_dc_bf / $post_dc_db, post in Db mode $post_db, RC two-block post in BfPost / Bf / Db mode $post_rc2 / $post_rc2_bf / $post_rc2_db"
echo "instructions per floor (64-byte WQE + doorbell record + BlueFlame copy): $(per "$floor")"
echo "instructions per post of a 1-SGE RDMA WRITE with the 8-byte doorbell: $(per "$post_sge")"
echo "instructions per post in DoorbellMode::Bf (rdma-core's flush after the copy): $(per "$post_bf")"
echo "instructions per poll of one CQE through Cq::poll (one completion per call): $(per "$poll_one")"
echo "instructions per CQE through Cq::poll in batches of 16: $(per "$poll_wcs")"
echo "instructions per receive CQE through Cq::poll in batches of 16: $(per "$poll_recv")"
echo "instructions per poll of one receive CQE through Cq::poll (one completion per call): $(per "$poll_recv_one")"
echo "instructions per flush error CQE through Cq::poll in batches of 16: $(per "$poll_flush")"
echo "instructions per receive flush error CQE through Cq::poll in batches of 16: $(per "$poll_flush_recv")"
echo "instructions per poll of one flush error CQE through Cq::poll (one completion per call): $(per "$poll_flush_one")"
echo "instructions per poll of one receive flush error CQE through Cq::poll (one completion per call): $(per "$poll_flush_recv_one")"
echo "instructions per WR in a batch of 16: $(per "$batch") ($(ratio "$batch" "$post") x the single post)"
echo "instructions per CQE through Cq::poll with 1 QP in a QpTable: $(per "$poll_qps1")"
echo "instructions per CQE through Cq::poll with 2 QPs on one CQ, their CQEs interleaved: $(per "$poll_qps2")"
echo "instructions per CQE through Cq::poll with 1000 QPs on one CQ: $(per "$poll_qps") ($(ratio "$poll_qps" "$poll_qps1") x one QP in the table, $(ratio "$poll_qps" "$poll_wcs") x one QP)"
echo "instructions per receive CQE through Cq::poll with 1000 QPs on one CQ: $(per "$poll_recv_qps") ($(ratio "$poll_recv_qps" "$poll_recv_qps1") x one QP in the table)"
echo "instructions per post with 1000 QPs: $(per "$post_qps") ($(ratio "$post_qps" "$post_qps1") x one QP)"
echo "instructions per DC post (DCI, inline 8-byte WRITE to a DC target: ctrl, 48-byte AV, raddr, inline, 96 bytes in two blocks; DoorbellMode::BfPost as the RC post, a two-line BlueFlame copy): $(per "$post_dc") ($(diff "$post_dc" "$post") over the RC post); in DoorbellMode::Bf: $(per "$post_dc_bf") ($(diff "$post_dc_bf" "$post_bf") over the RC post's)"
echo "instructions per post with the 8-byte doorbell (DoorbellMode::Db, no BlueFlame copy): RC inline WRITE $(per "$post_db"), DC $(per "$post_dc_db") ($(diff "$post_dc_db" "$post_db"))"
echo "instructions per post of a two-block WQE, DC vs RC (RC: inline 40-byte WRITE, 76 bytes in two blocks): DC post $(per "$post_dc") vs RC two-block post $(per "$post_rc2") in DoorbellMode::BfPost, $(per "$post_dc_bf") vs $(per "$post_rc2_bf") in Bf, $(per "$post_dc_db") vs $(per "$post_rc2_db") in Db"
echo "instructions per post: $(per "$post")"
echo "instructions per poll: $(per "$poll")"

#!/usr/bin/env bash
# Instructions per post and per polled CQE on the emulated device (rdma-core on the software
# ConnectX through libmlx5sim.so, docs/rdma-core-on-the-software-connectx.md), side by side in
# one run of this script, counted by valgrind's callgrind:
#
#  - this library's data path (Qp::post, Cq::poll) and libmlx5's (ibv_post_send, ibv_poll_cq)
#    on QPs that real libmlx5 created under the emulation: benches/emulated_post_poll.rs posts N
#    inline 8-byte RDMA WRITEs between two RC QPs of mlx5_0 and polls their CQEs, each post and
#    poll through one #[inline(never)] function counted alone (--toggle-collect; callgrind
#    collects per thread, so the software ConnectX's threads are not counted). libmlx5's share
#    of its calls is the self cost inside libmlx5.so.1 (and libibverbs.so.1), the rest being
#    the tools' wrapper that builds the ibv_send_wr (mlx5_tools::path::Verbs). Polls that found
#    nothing (the device was slower than the program's wait) are subtracted at the cost of one
#    such poll, measured on an idle CQ. Cq::poll itself is counted apart too
#    (measured_cq_poll, inside the direct path's poll): the rest of that poll's figure is the
#    bench reading each Wc (status, WR id, opcode) into the tools' Done.
#  - libmlx5's extended post API beside ibv_post_send, from C (benches/wr_post.c, built here
#    with cc): an inline 8-byte RDMA WRITE, signaled, on an RC QP made with ibv_create_qp_ex
#    and IBV_QP_EX_WITH_RDMA_WRITE, through ibv_wr_start / ibv_wr_rdma_write /
#    ibv_wr_set_inline_data / ibv_wr_complete (measured_wr) and through ibv_post_send with the
#    WR built by the caller (measured_post_send), each post one noinline function counted
#    alone; the whole call, and the calls into libmlx5/libibverbs (with what they call).
#  - UCX's rc_mlx5 (ucx_perftest, UCT level, on mlx5_0 under the emulation, the client under
#    callgrind with --separate-threads=yes, the server outside it): the cost of one
#    uct_rc_mlx5_ep_put_short (put_lat) and one uct_rc_mlx5_ep_am_short (am_bw -D short),
#    inclusive (the calls into them from outside libuct_ib in the main thread's file), the
#    difference of a run of 2K iterations and one of K divided by K (set-up and warm-up cancel).
#    Per ITERATION, from the same two runs ((2K run - K run) / K): the main thread's whole
#    count, which is UCX's work plus the progress calls spinning until the device, serialised
#    with them under valgrind, gets to run; how many progress calls an iteration made (the
#    calls into libuct_ib's most-called function from outside it: its progress function,
#    static, no symbol) and what one costs with its loop (main thread / calls). UCX's own work
#    cannot be told from the spinning by counting: the spins are tens of thousands per
#    iteration, and their cost moves by a fraction of an instruction from run to run, more
#    than an iteration's work (solving M = c + a*iterations + s*spins over three runs gave
#    nonsense, negative for am_bw). The software ConnectX's share is measured apart: the self
#    cost inside libmlx5sim.so over every thread of the process (the model polls the rings
#    from its own threads, so it too spins while it waits).
#
# Usage: benches/emulated-instructions.sh [N [K]]    (N defaults to 2000 posts, K to 200
#        ucx_perftest iterations)
#   KEEP=dir   keep the callgrind files and logs there
#   NO_UCX=1   leave UCX out
# The rows are figures measured here, not targets. Needs valgrind, ibverbs-providers (libmlx5)
# and ucx-utils (tools/test.sh installs them).
set -euo pipefail
cd "$(dirname "$0")/.."

n="${1:-2000}"
k="${2:-200}"
for v in "$n" "$k"; do
  case "$v" in '' | *[!0-9]* | 0) echo "N and K are positive integers, got '$v'" >&2; exit 2 ;; esac
done
command -v valgrind >/dev/null || { echo "valgrind is not installed" >&2; exit 2; }

cargo build --release -q -p mlx5-sim-uverbs >&2
launcher=target/release/mlx5sim
bin=$(cargo build --release -p mlx5-direct --bench emulated_post_poll \
  --message-format=json-render-diagnostics |
  sed -n 's/.*"executable":"\([^"]*emulated_post_poll[^"]*\)".*/\1/p' | tail -n 1)
[ -x "$bin" ] || { echo "cargo reported no emulated_post_poll executable" >&2; exit 1; }
command -v cc >/dev/null || { echo "no C compiler (cc) for benches/wr_post.c" >&2; exit 2; }

out="${KEEP:-$(mktemp -d)}"
mkdir -p "$out"
[ -n "${KEEP:-}" ] || trap 'rm -rf "$out"' EXIT

# Self cost per ELF object of a callgrind file: "object instructions" lines. A cost line
# right after calls= is the call's inclusive cost, not the caller's own.
objects() {
  awk '
    # A compressed name is defined where it first appears, an ob= or a cob= line.
    /^c?ob=/ { s = substr($0, index($0, "=") + 1); id = s
               if (match(s, /^\([0-9]+\)/)) { id = substr(s, 1, RLENGTH); r = substr(s, RLENGTH + 2)
                                              if (r != "") name[id] = r }
               else name[id] = s
               if ($0 ~ /^ob=/) cur = id
               next }
    /^calls=/ { skip = 1; next }
    /^[0-9+*-]/ { if (skip) { skip = 0; next }; self[cur] += $NF; next }
    END { for (o in self) { n = name[o]; sub(/.*\//, "", n); printf "%s %d\n", n, self[o] } }
  ' "$1"
}
# Inclusive cost of the calls into functions named FN (a regular expression; "" for any) of
# the objects named OBJ, made from outside them: "calls_into FILE OBJ FN".
calls_into() {
  awk -v obj="$2" -v fnre="$3" '
    function nm(kind, s,   id, r) {
      id = s
      if (match(s, /^\([0-9]+\)/)) { id = kind substr(s, 1, RLENGTH); r = substr(s, RLENGTH + 2)
                                     if (r != "") name[id] = r }
      else { id = kind s; name[id] = s }
      return id
    }
    function base(id,   n) { n = name[id]; sub(/.*\//, "", n); return n }
    function inside(o, f) { return base(o) ~ obj && (fnre == "" || name[f] ~ fnre) }
    /^ob=/ { cur = nm("o", substr($0, 4)); next }
    /^fn=/ { curfn = nm("f", substr($0, 4)); next }
    /^cob=/ { cob = nm("o", substr($0, 5)); next }
    /^cfn=/ { cfn = nm("f", substr($0, 5)); next }
    /^calls=/ { pend = 1; next }
    /^[0-9+*-]/ { if (pend) { o = (cob != "" ? cob : cur)
                              if (inside(o, cfn) && !inside(cur, curfn)) s += $NF
                              pend = 0; cob = "" }
                  next }
    END { print s + 0 }
  ' "$1"
}
total() { awk '/^(summary|totals):/ { print $2; exit }' "$1"; }
per() { awk -v t="$1" -v n="$2" 'BEGIN { printf "%.0f", t / n }'; }

# count LABEL FUNCTION ARGS...: callgrind of the bench with collection inside FUNCTION only.
count() {
  local label="$1" fn="$2"
  shift 2
  if ! "$launcher" -- valgrind --tool=callgrind --callgrind-out-file="$out/$label.out" \
    --collect-atstart=no --toggle-collect="*emulated_post_poll::measured_$fn*" \
    "$bin" "$@" >"$out/$label.stdout" 2>"$out/$label.log"; then
    cat "$out/$label.stdout" "$out/$label.log" >&2
    echo "emulated_post_poll $* failed under valgrind" >&2
    exit 1
  fi
}

declare -A post poll lib_post lib_poll
for path in direct verbs; do
  count "$path-post" post "$n" "$path" post
  count "$path-poll" poll "$n" "$path" poll
  count "$path-empty" poll "$n" "$path" poll --empty
  empty_each=$(per "$(total "$out/$path-empty.out")" "$n")
  empties=$(sed -n 's/.* \([0-9]*\) found nothing.*/\1/p' "$out/$path-poll.stdout")
  post[$path]=$(per "$(total "$out/$path-post.out")" "$n")
  poll[$path]=$(awk -v t="$(total "$out/$path-poll.out")" -v e="${empties:-0}" -v c="$empty_each" -v n="$n" \
    'BEGIN { printf "%.0f", (t - e * c) / n }')
  # What the calls into libmlx5 and libibverbs cost, with what they call (memcpy).
  lib() { calls_into "$1" '^lib(mlx5|ibverbs)[.]so' ""; }
  lib_post[$path]=$(per "$(lib "$out/$path-post.out")" "$n")
  lib_poll[$path]=$(per "$(lib "$out/$path-poll.out")" "$n")
  echo "$path: $(cat "$out/$path-poll.stdout"); an empty poll $empty_each instructions" >&2
done

# Cq::poll alone inside the direct path's poll (measured_cq_poll), without the bench's copy of
# each completion into the tools' Done; its calls that found nothing subtracted the same way.
count direct-cq cq_poll "$n" direct poll
count direct-cq-empty cq_poll "$n" direct poll --empty
cq_empty_each=$(per "$(total "$out/direct-cq-empty.out")" "$n")
cq_empties=$(sed -n 's/.* \([0-9]*\) found nothing.*/\1/p' "$out/direct-cq.stdout")
cq_poll=$(awk -v t="$(total "$out/direct-cq.out")" -v e="${cq_empties:-0}" -v c="$cq_empty_each" -v n="$n" \
  'BEGIN { printf "%.0f", (t - e * c) / n }')

# libmlx5's extended post API and ibv_post_send, from C.
cc -O2 -Wall -o "$out/wr_post" benches/wr_post.c -libverbs
declare -A cpost cpost_lib
for m in wr post_send; do
  if ! "$launcher" -- valgrind --tool=callgrind --callgrind-out-file="$out/c-$m.out" \
    --collect-atstart=no --toggle-collect="measured_$m" "$out/wr_post" "$n" "$m" \
    >"$out/c-$m.stdout" 2>"$out/c-$m.log"; then
    cat "$out/c-$m.stdout" "$out/c-$m.log" >&2
    echo "wr_post $n $m failed under valgrind" >&2
    exit 1
  fi
  cpost[$m]=$(per "$(total "$out/c-$m.out")" "$n")
  cpost_lib[$m]=$(per "$(calls_into "$out/c-$m.out" '^lib(mlx5|ibverbs)[.]so' "")" "$n")
done

ucx_row() { echo "not measured (NO_UCX)"; }
declare -A ucx_call
if [ -z "${NO_UCX:-}" ]; then
  command -v ucx_perftest >/dev/null || { echo "ucx_perftest is not installed (ucx-utils)" >&2; exit 2; }
  export UCX_TLS=rc_mlx5 UCX_RC_TIMEOUT=10s UCX_RC_RETRY_COUNT=7
  port=$((20000 + RANDOM % 20000))
  # ucx RUN TEST LAYOUT ITERS FUNCTION: client under callgrind, server outside it.
  ucx() {
    local run="$1" test="$2" layout="$3" iters="$4"
    port=$((port + 1))
    "$launcher" -- ucx_perftest -p "$port" >"$out/ucx-$run.server.log" 2>&1 &
    local server=$!
    sleep 1
    if ! "$launcher" -- valgrind --tool=callgrind --separate-threads=yes \
      --callgrind-out-file="$out/ucx-$run.out" ucx_perftest 127.0.0.1 -p "$port" -t "$test" \
      -D "$layout" -x rc_mlx5 -d mlx5_0:1 -n "$iters" -w 10 -s 8 \
      >"$out/ucx-$run.stdout" 2>"$out/ucx-$run.log"; then
      kill "$server" 2>/dev/null || true
      wait "$server" 2>/dev/null || true
      cat "$out/ucx-$run.stdout" "$out/ucx-$run.log" >&2
      echo "ucx_perftest -t $test failed under valgrind" >&2
      exit 1
    fi
    wait "$server" || true
  }
  # The main thread's file (callgrind numbers the threads from 1).
  main_file() {
    local f
    for f in "$out"/ucx-"$1".out*-01; do echo "$f"; return; done
  }
  # Calls into libuct_ib's most-called function from outside it: the progress calls.
  progress_calls() {
    awk '
      function nm(kind, s,   id, r) {
        id = s
        if (match(s, /^\([0-9]+\)/)) { id = kind substr(s, 1, RLENGTH); r = substr(s, RLENGTH + 2)
                                       if (r != "") name[id] = r }
        else { id = kind s; name[id] = s }
        return id
      }
      function base(id,   n) { n = name[id]; sub(/.*\//, "", n); return n }
      /^ob=/ { cur = nm("o", substr($0, 4)); next }
      /^fn=/ { next }
      /^cob=/ { cob = nm("o", substr($0, 5)); next }
      /^cfn=/ { cfn = nm("f", substr($0, 5)); next }
      /^calls=/ { o = (cob != "" ? cob : cur)
                  if (base(o) ~ /^libuct_ib[.]so/ && base(cur) !~ /^libuct_ib[.]so/) {
                    split(substr($0, 7), c, " "); calls[cfn] += c[1] }
                  cob = ""; next }
      END { m = 0; for (f in calls) if (calls[f] > m) m = calls[f]; print m }
    ' "$1"
  }
  # Self cost inside libmlx5sim.so over every thread file of run $1.
  sim_share() {
    local f t=0
    for f in "$out"/ucx-"$1".out*-[0-9]*; do
      t=$((t + $(objects "$f" | awk '$1 ~ /^libmlx5sim[.]so/ { s += $2 } END { print s + 0 }')))
    done
    echo "$t"
  }
  declare -A ucx_iter ucx_spins ucx_spin_cost ucx_sim
  for spec in "put_lat short uct_rc_mlx5_ep_put_short" "am_bw short uct_rc_mlx5_ep_am_short"; do
    set -- $spec
    ucx "$1-1" "$1" "$2" "$k"
    ucx "$1-2" "$1" "$2" "$((2 * k))"
    f1=$(main_file "$1-1")
    f2=$(main_file "$1-2")
    c1=$(calls_into "$f1" '^libuct_ib[.]so' "^$3\$")
    c2=$(calls_into "$f2" '^libuct_ib[.]so' "^$3\$")
    ucx_call[$1]=$(awk -v a="${c1:-0}" -v b="${c2:-0}" -v k="$k" 'BEGIN { printf "%.0f", (b - a) / k }')
    p1=$(progress_calls "$f1")
    p2=$(progress_calls "$f2")
    m1=$(total "$f1")
    m2=$(total "$f2")
    ucx_iter[$1]=$(awk -v a="$m1" -v b="$m2" -v k="$k" 'BEGIN { printf "%.0f", (b - a) / k }')
    ucx_spins[$1]=$(awk -v a="$p1" -v b="$p2" -v k="$k" 'BEGIN { printf "%.0f", (b - a) / k }')
    ucx_spin_cost[$1]=$(awk -v a="$m2" -v b="$p2" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    echo "ucx $1: runs of $k and $((2 * k)) iterations: $p1 and $p2 progress calls, $m1 and $m2 main-thread instructions" >&2
    s1=$(sim_share "$1-1")
    s2=$(sim_share "$1-2")
    ucx_sim[$1]=$(awk -v a="$s1" -v b="$s2" -v k="$k" 'BEGIN { printf "%.0f", (b - a) / k }')
  done
fi

echo "emulated device: mlx5_0 (libibverbs + libmlx5 of rdma-core $(dpkg-query -W -f '${Version}' libibverbs1 2>/dev/null || echo '?') on the software ConnectX), N = $n, UCX iterations K = $k"
printf '%-78s %8s %10s\n' "" "post" "poll/CQE"
printf '%-78s %8s %10s\n' "this library (Qp::post, Cq::poll up to 16 a call)" "${post[direct]}" "${poll[direct]}"
printf '%-78s %8s %10s\n' "  of which Cq::poll itself (the rest: the bench reading each Wc into its Done)" "-" "$cq_poll"
printf '%-78s %8s %10s\n' "libmlx5 ibv_post_send / ibv_poll_cq (inside libmlx5 and libibverbs)" "${lib_post[verbs]}" "${lib_poll[verbs]}"
printf '%-78s %8s %10s\n' "the same whole call (with the tools' ibv_send_wr/ibv_wc conversion)" "${post[verbs]}" "${poll[verbs]}"
printf '%-78s %8s %10s\n' "libmlx5 ibv_post_send from C (inside libmlx5 and libibverbs)" "${cpost_lib[post_send]}" "-"
printf '%-78s %8s %10s\n' "  the whole call, the ibv_send_wr built by the caller" "${cpost[post_send]}" "-"
printf '%-78s %8s %10s\n' "libmlx5 ibv_wr_start/_rdma_write/_set_inline_data/_complete (inside libmlx5)" "${cpost_lib[wr]}" "-"
printf '%-78s %8s %10s\n' "  the whole post (the four calls and the wr_id/wr_flags stores)" "${cpost[wr]}" "-"
if [ -z "${NO_UCX:-}" ]; then
  printf '%-78s %8s %10s\n' "UCX rc_mlx5 uct_rc_mlx5_ep_put_short (one call, inclusive)" "${ucx_call[put_lat]}" "-"
  printf '%-78s %8s %10s\n' "UCX rc_mlx5 uct_rc_mlx5_ep_am_short (one call, inclusive)" "${ucx_call[am_bw]}" "-"
  echo "UCX rc_mlx5 per ucx_perftest iteration (client main thread: UCX's work and the progress calls spinning while the device runs):"
  printf '%-78s %8s %10s\n' "  put_lat -D short: instructions / progress calls / instructions per call" "${ucx_iter[put_lat]}" "${ucx_spins[put_lat]} / ${ucx_spin_cost[put_lat]}"
  printf '%-78s %8s %10s\n' "  am_bw -D short: instructions / progress calls / instructions per call" "${ucx_iter[am_bw]}" "${ucx_spins[am_bw]} / ${ucx_spin_cost[am_bw]}"
  printf '%-78s %8s %10s\n' "  inside the software ConnectX per iteration (all threads): put_lat / am_bw" "${ucx_sim[put_lat]}" "${ucx_sim[am_bw]}"
else
  echo "UCX: $(ucx_row)"
fi

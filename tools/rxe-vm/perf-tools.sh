#!/usr/bin/env bash
# perf-tools.sh LAT BW -- run the perftest-compatible tools `lat` and `bw` (any build: the
# verbs backend is always in) on Soft-RoCE and check what they print. Runs INSIDE the rxe-vm guest
# (run-verbs-tests.sh passes it to run.sh together with the verbs tests, in the same boot).
#
# Checked, each run bounded by `timeout`:
#   --path verbs, both ends in one process on rxe0 (--loopback): lat write, lat send, lat read,
#     lat atomic (-A CMP_AND_SWAP), lat send over UD (-c UD), bw write (-q 2), bw send (the
#     receiver reposting through ibv_post_recv), bw write -b (both directions, summed);
#   --path verbs, a server process on rxe0 and a client process on rxe1, control connection
#     over TCP 127.0.0.1, RoCE v2 frames across the veth pair: lat write, lat send, bw write;
#   --path direct on rxe0 (not mlx5): lat and bw exit 2 (a usage error) saying the direct path
#     needs an mlx5 device, without a panic; so does --doorbell with --path verbs;
#   lat --timestamps: rxe has no completion timestamps (its provider refuses
#     IBV_WC_EX_WITH_COMPLETION_TIMESTAMP with EOPNOTSUPP, its kernel reports no core clock):
#     exit 2 saying they are not supported by this device, without a panic;
#   -I above what rxe grants: refused naming the largest size ibv_create_qp grants, and a run
#     with -I (and -s) of exactly that size works;
#   a bw server with -q 2 and a client with -q 1 (rxe0, rxe1): both exit 1 at connect naming
#     both values;
#   against stock perftest (perftest-interop.sh rxe): lat and bw on one rxe device, Debian's
#     ib_write_lat, ib_send_bw, ... on the other, each as the server and as the client
#     (RXE_VM_PERFTEST=0 leaves it out).
# Every run must exit 0 (the refusals 2, the mismatched pair 1) and the two-process runs must show the IPv4 RoCE v2
# GIDs of rxe0 (192.0.2.1) and rxe1 (192.0.2.2) crosswise, else the script stops there with
# exit 1 after printing what the tools printed; at the end every measuring run's output must
# have perftest's columns and one row of positive figures of the requested size and
# iteration count (exit 1 otherwise).
set -uo pipefail

[ $# -eq 2 ] || { echo "usage: $0 LAT BW" >&2; exit 2; }
lat=$1 bw=$2
work=$(mktemp -d /tmp/perf-tools.XXXXXX)
trap 'rm -rf "$work"' EXIT
say() { printf 'perf-tools: %s\n' "$*" >&2; }
fail() {
  say "FAILED: $*"
  for f in "$work"/*.out "$work"/*.err; do
    [ -s "$f" ] && { echo "---- ${f##*/}" >&2; cat "$f" >&2; }
  done
  exit 1
}

# expect FILE KIND SIZE ITERS: FILE must show the columns of KIND (lat|bw) and one row of
# positive figures for SIZE bytes; ITERS is the #iterations column (bw: -n times the QPs).
# Checked all at once at the end (one Python start: about 0.3 s each under TCG).
expect() { checks+=("$*"); }
checks=()

check_all() {
  python3 - "${checks[@]}" <<'PY'
import sys
COLS = {
    "lat": ["#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]",
            "t_avg[usec]", "t_stdev[usec]", "99% percentile[usec]", "99.9% percentile[usec]"],
    "bw": ["#bytes", "#iterations", "BW peak[MiB/sec]", "BW average[MiB/sec]", "MsgRate[Mpps]"],
}

def check(path, kind, size, iters):
    cols = COLS[kind]
    lines = open(path).read().splitlines()
    head = [i for i, l in enumerate(lines) if all(c in l for c in cols)]
    if not head:
        return f"no {kind} header with the columns {cols}"
    rows = []
    for l in lines[head[0] + 1:]:
        if l.startswith("---"):
            break
        try:
            rows.append([float(t) for t in l.split()])
        except ValueError:
            return f"not a row of numbers: {l!r}"
    if len(rows) != 1 or len(rows[0]) != len(cols):
        return f"want one row of {len(cols)} numbers, got {rows}"
    r = rows[0]
    if (r[0], r[1]) != (size, iters):
        return f"the row is for {r[0]:g} bytes x {r[1]:g}, want {size:g} x {iters:g}"
    if not all(v > 0 for v in r[2:]):
        return f"non-positive figure in {r}"
    print(f"perf-tools: ok {path.rsplit('/', 1)[-1]}: {size:g} B x {iters:g}: "
          + " ".join(f"{v:g}" for v in r[2:]), file=sys.stderr)
    return None

bad = 0
for spec in sys.argv[1:]:
    path, kind, size, iters = spec.split()
    why = check(path, kind, float(size), float(iters))
    if why:
        bad += 1
        print(f"perf-tools: FAILED: {path}: {why}\n---- {path}", file=sys.stderr)
        print(open(path).read(), file=sys.stderr)
sys.exit(1 if bad else 0)
PY
}

# gids FILE LOCAL REMOTE: the banner shows this end on GID ::ffff:LOCAL, the peer on REMOTE.
gids() {
  grep -Eq "local[^,]*GID ::ffff:$2\b.*" "$1" && grep -Eq "remote.*GID ::ffff:$3\b" "$1"
}

# one NAME TOOL ARGS...: run in this process (both ends here), stdout to NAME.out.
one() {
  local name=$1; shift
  timeout 60 "$@" >"$work/$name.out" 2>"$work/$name.err" || fail "$name: $* exited $?"
}

# two NAME TOOL ARGS...: a server on rxe0 and a client on rxe1 (same ARGS), TCP over loopback.
# Both start at once (each start is about 0.5 s under TCG): the client retries until the
# server listens, on a port of its own per run (the guest runs nothing else).
port=18515
two() {
  local name=$1 tool=$2; shift 2
  port=$((port + 1))
  timeout 60 "$tool" "$@" -d rxe0 -p $port >"$work/$name-server.out" 2>"$work/$name-server.err" &
  local server=$!
  timeout 60 "$tool" "$@" -d rxe1 -p $port 127.0.0.1 \
    >"$work/$name-client.out" 2>"$work/$name-client.err"
  local rc=$?
  [ $rc = 0 ] || kill "$server" 2>/dev/null
  wait "$server"
  local src=$?
  [ $rc = 0 ] || fail "$name: the client exited $rc"
  [ $src = 0 ] || fail "$name: the server exited $src"
  gids "$work/$name-client.out" 192.0.2.2 192.0.2.1 \
    || fail "$name: the client's banner does not show rxe1 -> rxe0 GIDs"
  gids "$work/$name-server.out" 192.0.2.1 192.0.2.2 \
    || fail "$name: the server's banner does not show rxe0 -> rxe1 GIDs"
}

# refused NAME WHY TOOL ARGS...: exit status 2 (a usage error) and WHY (a fixed string) in
# stderr, no panic.
refused() {
  local name=$1 why=$2; shift 2
  timeout 60 "$@" >"$work/$name.out" 2>"$work/$name.err"
  local rc=$?
  [ $rc = 2 ] || fail "$name: $* exited $rc, want 2"
  grep -qF -- "$why" "$work/$name.err" || fail "$name: no clear refusal ($why)"
  ! grep -q panicked "$work/$name.err" || fail "$name: panicked"
  say "ok $name: $(head -c 120 "$work/$name.err")..."
}

# mismatched NAME WHY TOOL TEST SERVER_ARGS CLIENT_ARGS: a server on rxe0 and a client on rxe1
# started for different runs (the ARGS are word-split) must both exit 1 saying WHY.
mismatched() {
  local name=$1 why=$2 tool=$3 test=$4 sargs=$5 cargs=$6
  port=$((port + 1))
  # shellcheck disable=SC2086
  timeout 60 "$tool" "$test" "${v[@]}" $sargs -d rxe0 -p $port \
    >"$work/$name-server.out" 2>"$work/$name-server.err" &
  local server=$!
  # shellcheck disable=SC2086
  timeout 60 "$tool" "$test" "${v[@]}" $cargs -d rxe1 -p $port 127.0.0.1 \
    >"$work/$name-client.out" 2>"$work/$name-client.err"
  local rc=$?
  wait "$server"
  local src=$?
  [ $rc = 1 ] || fail "$name: the client exited $rc, want 1"
  [ $src = 1 ] || fail "$name: the server exited $src, want 1"
  for end in server client; do
    grep -qF -- "$why" "$work/$name-$end.err" || fail "$name: the $end does not say: $why"
  done
  say "ok $name: $(head -c 120 "$work/$name-client.err")..."
}

start=$SECONDS
v=(--path verbs)
one lat-write "$lat" write "${v[@]}" -d rxe0 --loopback -n 50 -s 8
expect "$work/lat-write.out" lat 8 50
one lat-send "$lat" send "${v[@]}" -d rxe0 --loopback -n 50 -s 300
expect "$work/lat-send.out" lat 300 50
one lat-read "$lat" read "${v[@]}" -d rxe0 --loopback -n 20 -s 2048
expect "$work/lat-read.out" lat 2048 20
# -e: the verbs CQ on a completion channel (ibv_req_notify_cq, ibv_get_cq_event, ack).
one lat-events "$lat" write -e "${v[@]}" -d rxe0 --loopback -n 50 -s 8
expect "$work/lat-events.out" lat 8 50
grep -q 'events (-e)' "$work/lat-events.out" || { echo "perf-tools: FAILED: lat -e banner"; exit 1; }
one bw-write "$bw" write "${v[@]}" -d rxe0 --loopback -n 200 -s 4096 -q 2
expect "$work/bw-write.out" bw 4096 400
one lat-atomic "$lat" atomic -A CMP_AND_SWAP "${v[@]}" -d rxe0 --loopback -n 20
expect "$work/lat-atomic.out" lat 8 20
one lat-ud "$lat" send -c UD "${v[@]}" -d rxe0 --loopback -n 20 -s 512
expect "$work/lat-ud.out" lat 512 20
one bw-send "$bw" send "${v[@]}" -d rxe0 --loopback -n 200 -s 2048
expect "$work/bw-send.out" bw 2048 200
one bw-bidir "$bw" write -b "${v[@]}" -d rxe0 --loopback -n 100 -s 1024
expect "$work/bw-bidir.out" bw 1024 100

two lat-write2 "$lat" write "${v[@]}" -n 50 -s 32
expect "$work/lat-write2-client.out" lat 32 50
two lat-send2 "$lat" send "${v[@]}" -n 50 -s 2000
expect "$work/lat-send2-client.out" lat 2000 50
two bw-write2 "$bw" write "${v[@]}" -n 200 -s 8192 -q 2 -t 32
expect "$work/bw-write2-client.out" bw 8192 400

mismatched bw-qps "client -q 1, server -q 2: start both with the same -q" \
  "$bw" write "-n 20 -s 64 -q 2" "-n 20 -s 64 -q 1"

refused lat-direct "needs an mlx5 device" "$lat" write --path direct -d rxe0 --loopback -n 1
refused bw-direct "needs an mlx5 device" "$bw" write --path direct -d rxe0 --loopback -n 1
refused lat-doorbell "--doorbell bf: --path verbs rings the doorbell libibverbs chooses" \
  "$lat" write "${v[@]}" --doorbell bf -d rxe0 --loopback -n 1

# CQE timestamps: refused on rxe before anything is created.
refused lat-timestamps "completion timestamps are not supported by this device (rxe0)" \
  "$lat" send "${v[@]}" --timestamps -d rxe0 --loopback -n 5

# The largest inline size rxe grants, as the refusal names it; then a run at exactly that size.
refused lat-inline "grants a QP of this run at most" \
  "$lat" send "${v[@]}" -d rxe0 --loopback -n 5 -I 1024
max=$(grep -o "at most [0-9]*" "$work/lat-inline.err" | awk '{print $3}')
[ -n "$max" ] && [ "$max" -gt 0 ] || fail "lat-inline: no inline size in the refusal"
one lat-inline-max "$lat" send "${v[@]}" -d rxe0 --loopback -n 20 -s "$max" -I "$max"
grep -qF "Max inline data: ${max}[B]" "$work/lat-inline-max.out" \
  || fail "lat-inline-max: the banner does not show -I $max"
expect "$work/lat-inline-max.out" lat "$max" 20
check_all || { say "FAILED: output checks (above)"; exit 1; }
# Against stock perftest (ib_write_lat, ib_send_bw, ... on the other rxe device), each way.
if [ "${RXE_VM_PERFTEST:-1}" != 0 ]; then
  "$(dirname "$0")/perftest-interop.sh" rxe "$lat" "$bw" || fail "lat/bw against stock perftest (above)"
fi
say "passed ($((SECONDS - start)) s)"

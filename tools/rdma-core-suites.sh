#!/usr/bin/env bash
# The integration suites of mlx5-ctx and mlx5-connect again, through rdma-core: each listed
# test runs with MLX5_TEST_DEVICE=mlx5_0 and the preload library of uverbs/ (libmlx5sim.so) in
# LD_PRELOAD, so its contexts are opened by unmodified libibverbs + libmlx5 on the software
# ConnectX (objects created by ibv_*, rings from mlx5dv_init_obj, our data path on the rings
# libmlx5 laid out). The quickstart, hello_write and ud_multicast run with -d mlx5_0 in the
# facade's own suite (tests/it/examples_run.rs). docs/testing.md says which tests run here and why the
# others cannot (they step a deterministic fabric, or reach into the software ConnectX).
#
#   tools/rdma-core-suites.sh [CARGO_TEST_FLAGS...]     (default: --workspace --all-features)
#
# It reuses the test binaries `cargo test --workspace` built with the same flags. On a machine
# with a ConnectX, the same tests run on it with MLX5_TEST_DEVICE=mlx5_0 and no preload:
#   MLX5_TEST_DEVICE=mlx5_0 cargo test -p mlx5-ctx --test it -- --exact NAME...
set -euo pipefail
cd "$(dirname "$0")/.."
flags=("$@")
[ ${#flags[@]} -gt 0 ] || flags=(--workspace --all-features)

# Tests that share the process's one emulated device run together; a test that kills the
# device (DEVICE_FATAL) runs in a process of its own.
ctx_shared=(
  async_cq::one_task_serves_many_cqs_on_one_channel
  async_cq::a_dropped_future_loses_no_completion
  async_cq::a_busy_poll_budget_before_sleeping
  async_cq::the_async_event_stream_under_cancellation
  async_cq::what_would_hang_or_steal_events_is_refused
  waiting::a_wait_of_a_second_sleeps_instead_of_spinning
  waiting::a_sleeping_wait_still_sees_its_completion
  shared_bfregs::two_threads_of_32_qps_on_shared_registers_lose_and_corrupt_nothing
  transports::uc_writes_and_ud_sends_arrive
  transports::two_rc_qps_receive_through_one_srq
  transports::xrc_sends_land_in_the_srq_they_name
  transports::a_qp_in_error_flushes_everything_once_and_recovers
)
# The device's death (docs/testing.md): `fatal` written into the preload
# library's control file (MLX5SIM_CONTROL, a fresh one per process). Each runs twice: with
# RDMAV_ALLOW_DISASSOC_DESTROY=1 (libibverbs then takes the EIO of a destroy on the
# disassociated context as success and frees its objects) and without (the destroys fail; the
# owning objects must still drop without a panic).
ctx_alone=(
  waiting::a_dead_device_ends_every_wait_with_an_error_not_a_timeout
  waiting::a_dead_device_ends_every_wait_on_a_channel
  waiting::a_dead_device_wakes_a_wait_while_another_thread_takes_the_events
  waiting::a_dead_device_returns_the_completions_polled_before
  waiting::a_dead_device_ends_poll_blocking
  waiting::a_dead_device_ends_an_async_wait
)
connect_shared=(
  owned::chosen_psns_wrap_during_the_run
  owned::a_failed_connect_leaves_the_qp_reusable
  owned::a_ud_connection_destroys_its_address_handle_when_dropped
  recover_tcp::the_server_recovers_one_qp_of_a_shared_cq_and_srq_when_its_tcp_peer_asks
)
connect_alone=()

cargo build -q -p mlx5-sim-uverbs --lib
lib="$PWD/target/debug/libmlx5sim.so"
# The `it` test binary of each package (by its directory: ctx, connect), as
# `cargo test ${flags[*]}` built it.
bins=$(cargo test -q "${flags[@]}" --no-run --message-format=json 2>/dev/null | python3 -c '
import json, os, sys
for line in sys.stdin:
    m = json.loads(line)
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["target"]["name"] == "it" \
            and "test" in m["target"]["kind"]:
        print(os.path.basename(os.path.dirname(m["manifest_path"])), m["executable"])
')
bin_of() { awk -v p="$1" '$1 == p { print $2 }' <<<"$bins"; }

failed=0
passed=0
extra_env=()
# run PACKAGE NAME...: one process, the named tests (exactly), checking that each exists.
run() {
  local pkg=$1 bin
  shift
  bin=$(bin_of "$pkg")
  [ -n "$bin" ] || { echo "no test binary for $pkg"; failed=$((failed + 1)); return; }
  local out control
  out=$(mktemp)
  control=$(mktemp)
  if env "${extra_env[@]}" MLX5SIM_CONTROL="$control" LD_PRELOAD="$lib" MLX5_TEST_DEVICE=mlx5_0 \
    timeout 600 "$bin" --exact "$@" >"$out" 2>&1; then
    :
  else
    failed=$((failed + 1))
    tail -n 60 "$out"
  fi
  local ran
  ran=$(sed -n 's/^running \([0-9]*\) tests\{0,1\}$/\1/p' "$out" | head -n 1)
  if [ "${ran:-0}" != "$#" ]; then
    echo "$pkg: $# tests named, ${ran:-0} found (renamed?): $*"
    failed=$((failed + 1))
  fi
  passed=$((passed + $(grep -c '\.\.\. ok$' "$out" || true)))
  grep -E '^test .* \.\.\. (ok|FAILED)$' "$out" | sed "s/^test /  [mlx5_0 via rdma-core${extra_env[*]:+, ${extra_env[*]}}] $pkg /"
  rm -f "$out" "$control"
}

[ ${#ctx_shared[@]} -eq 0 ] || run ctx "${ctx_shared[@]}"
extra_env=()
for t in "${ctx_alone[@]}"; do
  extra_env=(RDMAV_ALLOW_DISASSOC_DESTROY=1)
  run ctx "$t"
  extra_env=()
  run ctx "$t"
done
[ ${#connect_shared[@]} -eq 0 ] || run connect "${connect_shared[@]}"
for t in "${connect_alone[@]}"; do run connect "$t"; done

if [ "$failed" -eq 0 ]; then
  echo "test result: ok. $passed passed; 0 failed (the suites through rdma-core)"
else
  echo "test result: FAILED. $passed passed; $failed failed (the suites through rdma-core)"
  exit 1
fi
